//! The `convoy server` process: storage, Raft, the HTTP API, the scheduling loop and executor
//! liveness, wired together.

pub mod app;
pub mod ids;
pub mod writer;
pub mod liveness;
pub mod machine;
pub mod scheduling;
