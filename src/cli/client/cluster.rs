//! `convoy cluster`: the server's view of the Raft cluster.

use super::http::{Client, print_json};

/// Prints `GET /v1/cluster`. The API documents that answer (`ClusterStatus`) but has no type to
/// decode it into, so it is shown as it came.
pub(super) async fn run(c: &Client) -> anyhow::Result<()> {
    print_json(&c.get::<serde_json::Value>("/v1/cluster").await?)
}
