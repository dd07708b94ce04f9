//! `convoy queue create|list|get|update|delete|report`.

use super::doc;
use super::http::{Client, print_json};
use clap::Subcommand;
use convoy::model::api::QueueReport;
use convoy::model::{Queue, QueueName};
use reqwest::Method;

/// Queue verbs.
#[derive(Subcommand, Debug)]
pub(crate) enum QueueCommand {
    /// Create a queue.
    Create {
        name: QueueName,
        #[arg(long, default_value_t = 1.0)]
        priority_factor: f64,
        /// Owners (repeatable).
        #[arg(long = "owner")]
        owners: Vec<String>,
        /// Groups (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
    },
    /// List queues.
    List,
    /// Show one queue.
    Get { name: QueueName },
    /// Replace a queue's settings from a JSON or YAML file.
    Update { name: QueueName, file: std::path::PathBuf },
    /// Delete a queue (with --force, cancelling its jobs).
    Delete {
        name: QueueName,
        #[arg(long)]
        force: bool,
    },
    /// Fair share, allocation and demand.
    Report { name: QueueName },
}

/// Runs a queue verb.
pub(super) async fn run(c: &Client, cmd: QueueCommand) -> anyhow::Result<()> {
    match cmd {
        QueueCommand::Create { name, priority_factor, owners, groups } => {
            let queue = Queue { owners, groups, ..Queue::new(name, priority_factor) };
            let created: Queue = c.send_json(Method::POST, "/v1/queues", &queue).await?;
            print_json(&created)
        }
        QueueCommand::List => print_json(&c.get::<Vec<Queue>>("/v1/queues").await?),
        QueueCommand::Get { name } => print_json(&c.get::<Queue>(&format!("/v1/queues/{name}")).await?),
        QueueCommand::Update { name, file } => {
            let queue: Queue = doc::read(&file)?;
            let stored: Queue = c.send_json(Method::PUT, &format!("/v1/queues/{name}"), &queue).await?;
            print_json(&stored)
        }
        QueueCommand::Delete { name, force } => {
            c.send_raw(c.request(Method::DELETE, &format!("/v1/queues/{name}?force={force}"))).await?;
            println!("queue {name} deleted");
            Ok(())
        }
        QueueCommand::Report { name } => print_json(&c.get::<QueueReport>(&format!("/v1/queues/{name}/report")).await?),
    }
}
