//! HTTP: the public `/v1` API, the executor API and operations endpoints, as thin axum adapters
//! around the state machine and the store.

pub mod validate;
