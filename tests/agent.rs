//! `convoy agent`: the lease loop and its runtimes against in-test fake servers (control plane and
//! Kubernetes API) on 127.0.0.1.

mod agent {
    pub mod client;
    pub mod common;
    pub mod control_plane;
    pub mod fake_runtime;
    pub mod kube_api;
    pub mod kubernetes;
    pub mod process;
}

use agent::{common, control_plane};
