//! `convoy agent`: the lease loop and its runtimes against in-test fake servers (control plane and
//! Kubernetes API) on 127.0.0.1.

mod client;
mod control_plane;
mod fake_runtime;
mod harness;
mod kube_api;
mod kubernetes;
mod process;
