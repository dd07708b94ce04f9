//! `convoy simulate --from-server`: the server's state as a simulate scenario
//! (`GET /v1/scenario`, admins only), with the client's token, CA and retries of reads.

use super::ClientArgs;
use super::http::Client;

/// The scenario the server at `args.server` answers, as JSON.
pub(crate) async fn fetch(args: &ClientArgs) -> anyhow::Result<serde_json::Value> {
    let client = Client::new(args)?;
    Ok(client.get::<serde_json::Value>("/v1/scenario").await?)
}
