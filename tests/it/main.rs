//! The integration tests, in one test binary (one link of the crate instead of one per file).
//! Most start real `convoy` processes on 127.0.0.1 and talk HTTP to them; `common` holds that
//! harness and the request helpers every module shares.

mod agent;
#[cfg(feature = "grpc")]
mod armada_python;
mod bench_cluster;
mod bench_groups;
mod bench_processes;
mod bench_schedule;
mod bounded_waits;
mod chaos;
mod cli_client;
mod cli_submit;
mod cluster;
mod cluster_failover;
mod common;
mod config_files;
mod confine;
mod e2e_fake;
mod e2e_process;
mod eviction_and_floating;
mod first_hour;
mod formats;
mod full_disk;
#[cfg(feature = "grpc")]
mod grpc;
mod job_policies;
mod packaging;
mod pool_policy;
mod quarantine;
mod queue_ops;
mod queue_policies;
mod queue_retry;
mod queue_tree;
mod queue_usage;
mod replay;
mod reservation;
mod retention;
mod server_api;
mod server_auth;
mod server_events;
mod server_executor;
mod server_metrics;
mod server_process;
mod simulate_cli;
mod simulate_export;
mod tls;
mod web_ui;
mod why;
