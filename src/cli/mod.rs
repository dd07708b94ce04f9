//! Everything only the `convoy` binary needs, apart from the library: one module per subcommand,
//! the client verbs, the benchmarks, and the process plumbing they share.

pub mod agent;
pub mod bench;
pub mod client;
pub mod logging;
pub mod runtime;
pub mod server;
pub mod simulate;
pub mod supervise;
pub mod up;
