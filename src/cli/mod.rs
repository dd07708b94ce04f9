//! Everything only the `convoy` binary needs, apart from the library: one module per subcommand,
//! the client verbs, the benchmarks, and the process plumbing they share.

pub(crate) mod agent;
pub(crate) mod allocator;
pub(crate) mod bench;
pub(crate) mod client;
pub(crate) mod logging;
pub(crate) mod replay;
pub(crate) mod runtime;
pub(crate) mod server;
pub(crate) mod simulate;
pub(crate) mod supervise;
pub(crate) mod up;
