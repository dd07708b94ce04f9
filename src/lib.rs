//! Convoy: a batch-job scheduler with Armada's fair-share scheduling model, in one binary.

pub mod agent;
pub mod api;
pub mod certs;
pub mod chaos;
pub mod config;
mod config_file;
mod control;
pub mod disk_space;
#[cfg(feature = "grpc")]
pub mod grpc;
#[cfg(test)]
mod layers;
mod metrics;
pub mod model;
pub mod raft;
pub mod record;
pub mod scheduler;
pub mod server;
mod service;
pub mod simulate;
pub mod state;
pub mod store;
mod thread_cpu;
mod ui;
