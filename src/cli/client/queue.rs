//! `convoy queue create|list|get|update|delete|report|cordon|uncordon|cancel|preempt`.

use super::cancel::parse_states;
use super::doc;
use super::http::{Client, print_json};
use super::output::Format;
use clap::Subcommand;
use convoy::model::api::{JobIdsResponse, JobRetryPolicy, QueueCancelRequest, QueuePreemptRequest, QueueReport};
use convoy::model::{
    PoolName, PreemptionPolicy, PriorityClassName, PriorityPolicy, Queue, QueueName, Resources, SortPriority,
};
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
        #[command(flatten)]
        tree: TreeFlags,
    },
    /// List queues (a table; with --tree, the queue tree as indented names).
    List {
        /// Print the queue tree: each queue under its parent, indented, with its tree settings.
        #[arg(long)]
        tree: bool,
        /// `table` (default) or `json` (the API's list).
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Show one queue.
    Get { name: QueueName },
    /// Replace a queue's settings from a JSON or YAML file, or change the queue's current
    /// settings with the tree flags (given with a file, the flags override it).
    Update {
        name: QueueName,
        file: Option<std::path::PathBuf>,
        #[command(flatten)]
        tree: TreeFlags,
        /// Make the queue a top-level queue (no parent).
        #[arg(long, conflicts_with = "parent")]
        top_level: bool,
    },
    /// Delete a queue (with --force, cancelling its jobs).
    Delete {
        name: QueueName,
        #[arg(long)]
        force: bool,
    },
    /// Fair share, allocation and demand.
    Report {
        name: QueueName,
        /// `table` (default: a summary per pool) or `json` (the API's report).
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Cordon a queue: it still takes jobs, but none of its queued jobs is scheduled (its
    /// running jobs keep running). Admins only.
    Cordon { name: QueueName },
    /// Uncordon a queue: its queued jobs are scheduled again. Admins only.
    Uncordon { name: QueueName },
    /// Cancel the queue's jobs in every job set (all live ones, or those the flags select);
    /// prints the jobs cancelled.
    Cancel {
        name: QueueName,
        /// Only jobs in these states (comma-separated: queued, leased, pending, running).
        #[arg(long)]
        states: Option<String>,
        #[command(flatten)]
        filter: QueueFilterFlags,
        /// Why, recorded on the jobs (default: cancelled by <you>).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Preempt the queue's jobs that hold a node, in every job set (all, or those the flags
    /// select); prints the jobs preempted.
    Preempt {
        name: QueueName,
        #[command(flatten)]
        filter: QueueFilterFlags,
        /// Why, recorded on the jobs (default: preempted by <you>).
        #[arg(long)]
        reason: Option<String>,
    },
}

/// The filters of `queue cancel` and `queue preempt`.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct QueueFilterFlags {
    /// Only jobs of this priority class (repeatable).
    #[arg(long = "priority-class")]
    priority_classes: Vec<PriorityClassName>,
    /// Only jobs in this pool (repeatable).
    #[arg(long = "pool")]
    pools: Vec<PoolName>,
}

/// The queue tree's settings, as flags.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct TreeFlags {
    /// Parent queue in the queue tree (jobs then go to this queue's leaves only).
    #[arg(long)]
    parent: Option<QueueName>,
    /// Added to the queue's priority among its siblings (an i32).
    #[arg(long, allow_hyphen_values = true)]
    priority_offset: Option<i32>,
    /// `fence`: the subtree's priorities are not visible outside it (default | fence).
    #[arg(long, value_parser = parse_policy)]
    priority_policy: Option<PriorityPolicy>,
    /// `disabled`: fair share alone orders the queue's children and subtree (enabled | disabled).
    #[arg(long, value_parser = parse_sort)]
    sort_priority: Option<SortPriority>,
    /// Guaranteed resources, `name=quantity` pairs separated by commas (`cpu=6,memory=32Gi`);
    /// `none` removes the guarantee. The queue's share is at least the smaller of this and its
    /// demand.
    #[arg(long, value_parser = parse_guaranteed)]
    guaranteed: Option<Resources>,
    /// `fence`: no job inside the queue's subtree displaces a job outside it by urgency
    /// (default | fence).
    #[arg(long, value_parser = parse_preemption)]
    preemption_policy: Option<PreemptionPolicy>,
    /// Retry policy for the queue's jobs that have none of their own:
    /// `max_attempts=3,on_exit_codes=75:76,on_oom,on_node_failure,backoff_seconds=30`; `none`
    /// removes it.
    #[arg(long, value_parser = parse_retry)]
    retry: Option<RetryArg>,
}

/// `--retry`: a policy, or none to remove it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RetryArg(Option<JobRetryPolicy>);

impl TreeFlags {
    fn apply(self, q: &mut Queue) {
        if let Some(p) = self.parent {
            q.parent = Some(p);
        }
        if let Some(o) = self.priority_offset {
            q.priority_offset = o;
        }
        if let Some(p) = self.priority_policy {
            q.priority_policy = p;
        }
        if let Some(s) = self.sort_priority {
            q.sort_priority = s;
        }
        if let Some(g) = self.guaranteed {
            q.guaranteed = g;
        }
        if let Some(p) = self.preemption_policy {
            q.preemption_policy = p;
        }
        if let Some(RetryArg(r)) = self.retry {
            q.retry = r;
        }
    }

    fn any(&self) -> bool {
        self.parent.is_some()
            || self.priority_offset.is_some()
            || self.priority_policy.is_some()
            || self.sort_priority.is_some()
            || self.guaranteed.is_some()
            || self.preemption_policy.is_some()
            || self.retry.is_some()
    }
}

fn parse_policy(s: &str) -> Result<PriorityPolicy, String> {
    match s {
        "default" => Ok(PriorityPolicy::Default),
        "fence" => Ok(PriorityPolicy::Fence),
        _ => Err(format!("priority policy must be default or fence, got {s}")),
    }
}

fn parse_preemption(s: &str) -> Result<PreemptionPolicy, String> {
    match s {
        "default" => Ok(PreemptionPolicy::Default),
        "fence" => Ok(PreemptionPolicy::Fence),
        _ => Err(format!("preemption policy must be default or fence, got {s}")),
    }
}

/// `cpu=6,memory=32Gi` (or `none`) as resources.
fn parse_guaranteed(s: &str) -> Result<Resources, String> {
    if s == "none" {
        return Ok(Resources::new());
    }
    let pairs: Vec<(&str, &str)> = s
        .split(',')
        .map(|p| p.trim().split_once('=').ok_or_else(|| format!("guaranteed: expected name=quantity, got {p:?}")))
        .collect::<Result<_, _>>()?;
    Resources::parse(pairs).map_err(|e| format!("guaranteed: {e}"))
}

/// `max_attempts=3,on_exit_codes=75:76,on_oom,on_node_failure,backoff_seconds=30` (or `none`)
/// as a retry policy, checked as the server checks it.
fn parse_retry(s: &str) -> Result<RetryArg, String> {
    if s == "none" {
        return Ok(RetryArg(None));
    }
    let mut r = JobRetryPolicy {
        max_attempts: 0,
        on_exit_codes: vec![],
        on_oom: false,
        on_node_failure: false,
        backoff_seconds: 0,
    };
    let number = |key: &str, v: &str| v.trim().parse::<u64>().map_err(|_| format!("retry.{key}: not a number: {v:?}"));
    let flag = |key: &str, v: Option<&str>| match v.map(str::trim) {
        None | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(v) => Err(format!("retry.{key}: true or false, got {v:?}")),
    };
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = match part.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v)),
            None => (part, None),
        };
        let needs = || value.ok_or_else(|| format!("retry.{key}: expected {key}=value"));
        match key {
            "max_attempts" => {
                let n = number(key, needs()?)?;
                r.max_attempts = u32::try_from(n).map_err(|_| format!("retry.max_attempts: too large: {n}"))?;
            }
            "backoff_seconds" => r.backoff_seconds = number(key, needs()?)?,
            "on_exit_codes" => {
                r.on_exit_codes = needs()?
                    .split(':')
                    .map(|c| {
                        c.trim().parse::<i32>().map_err(|_| format!("retry.on_exit_codes: not an exit code: {c:?}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "on_oom" => r.on_oom = flag(key, value)?,
            "on_node_failure" => r.on_node_failure = flag(key, value)?,
            _ => {
                return Err(format!(
                    "retry: unknown key {key:?} (max_attempts, on_exit_codes, on_oom, on_node_failure, backoff_seconds)"
                ));
            }
        }
    }
    convoy::model::RetryPolicy::check(&r).map_err(|e| format!("retry.{}: {}", e.field, e.message))?;
    Ok(RetryArg(Some(r)))
}

fn parse_sort(s: &str) -> Result<SortPriority, String> {
    match s {
        "enabled" => Ok(SortPriority::Enabled),
        "disabled" => Ok(SortPriority::Disabled),
        _ => Err(format!("sort priority must be enabled or disabled, got {s}")),
    }
}

/// The queues as an indented tree: each queue under its parent, children in name order, with
/// what differs from the defaults. A queue whose parent is not listed is shown at the top.
pub(crate) fn tree_text(queues: &[Queue]) -> String {
    use std::collections::{BTreeMap, BTreeSet};
    let names: BTreeSet<&QueueName> = queues.iter().map(|q| &q.name).collect();
    let mut children: BTreeMap<Option<&QueueName>, Vec<&Queue>> = BTreeMap::new();
    for q in queues {
        let parent = q.parent.as_ref().filter(|p| names.contains(p) && *p != &q.name);
        children.entry(parent).or_default().push(q);
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let mut out = String::new();
    let mut seen = BTreeSet::new();
    let mut stack: Vec<(&Queue, usize)> = children.get(&None).into_iter().flatten().rev().map(|q| (*q, 0)).collect();
    while let Some((q, depth)) = stack.pop() {
        if !seen.insert(&q.name) {
            continue;
        }
        let mut notes = vec![format!("weight {}", 1.0 / q.priority_factor)];
        if q.priority_offset != 0 {
            notes.push(format!("priority_offset {}", q.priority_offset));
        }
        if q.priority_policy == PriorityPolicy::Fence {
            notes.push("fence".into());
        }
        if q.sort_priority == SortPriority::Disabled {
            notes.push("sort_priority disabled".into());
        }
        if !q.guaranteed.is_zero() {
            let parts: Vec<String> =
                q.guaranteed.iter().map(|(n, _)| format!("{n}={}", q.guaranteed.quantity_string(n.as_str()))).collect();
            notes.push(format!("guaranteed {}", parts.join(",")));
        }
        if q.preemption_policy == PreemptionPolicy::Fence {
            notes.push("preemption fence".into());
        }
        if let Some(r) = &q.retry {
            notes.push(format!("retry {}", r.summary()));
        }
        if q.cordoned {
            notes.push("cordoned".into());
        }
        out.push_str(&format!("{}{} ({})\n", "  ".repeat(depth), q.name, notes.join(", ")));
        if let Some(kids) = children.get(&Some(&q.name)) {
            stack.extend(kids.iter().rev().map(|c| (*c, depth + 1)));
        }
    }
    out
}

/// Runs a queue verb.
pub(super) async fn run(c: &Client, cmd: QueueCommand) -> anyhow::Result<()> {
    match cmd {
        QueueCommand::Create { name, priority_factor, owners, groups, tree } => {
            let mut queue = Queue { owners, groups, ..Queue::new(name, priority_factor) };
            tree.apply(&mut queue);
            let created: Queue = c.send_json(Method::POST, "/v1/queues", &queue).await?;
            print_json(&created)
        }
        QueueCommand::List { tree: false, output: Format::Json } => {
            print_json(&c.get::<Vec<Queue>>("/v1/queues").await?)
        }
        QueueCommand::List { tree: false, output: Format::Table } => {
            print!("{}", list_table(&c.get::<Vec<Queue>>("/v1/queues").await?));
            Ok(())
        }
        QueueCommand::List { tree: true, .. } => {
            print!("{}", tree_text(&c.get::<Vec<Queue>>("/v1/queues").await?));
            Ok(())
        }
        QueueCommand::Get { name } => print_json(&c.get::<Queue>(&format!("/v1/queues/{name}")).await?),
        QueueCommand::Update { name, file, tree, top_level } => {
            let mut queue: Queue = match &file {
                Some(f) => doc::read(f)?,
                None if tree.any() || top_level => c.get::<Queue>(&format!("/v1/queues/{name}")).await?,
                None => anyhow::bail!("queue update: give a settings file, or tree flags to change"),
            };
            tree.apply(&mut queue);
            if top_level {
                queue.parent = None;
            }
            let stored: Queue = c.send_json(Method::PUT, &format!("/v1/queues/{name}"), &queue).await?;
            print_json(&stored)
        }
        QueueCommand::Delete { name, force } => {
            c.send_raw(c.request(Method::DELETE, &format!("/v1/queues/{name}?force={force}"))).await?;
            println!("queue {name} deleted");
            Ok(())
        }
        QueueCommand::Report { name, output } => {
            let report = c.get::<QueueReport>(&format!("/v1/queues/{name}/report")).await?;
            match output {
                Format::Json => print_json(&report),
                Format::Table => {
                    print!("{}", report_text(&report));
                    Ok(())
                }
            }
        }
        QueueCommand::Cordon { name } => cordon(c, &name, "cordon").await,
        QueueCommand::Uncordon { name } => cordon(c, &name, "uncordon").await,
        QueueCommand::Cancel { name, states, filter, reason } => {
            let body = QueueCancelRequest {
                states: states.as_deref().map(parse_states).transpose()?.unwrap_or_default(),
                priority_classes: filter.priority_classes,
                pools: filter.pools,
                reason,
            };
            let answer: JobIdsResponse = c.send_json(Method::POST, &format!("/v1/queues/{name}/cancel"), &body).await?;
            print_json(&answer)
        }
        QueueCommand::Preempt { name, filter, reason } => {
            let body = QueuePreemptRequest { priority_classes: filter.priority_classes, pools: filter.pools, reason };
            let answer: JobIdsResponse =
                c.send_json(Method::POST, &format!("/v1/queues/{name}/preempt"), &body).await?;
            print_json(&answer)
        }
    }
}

/// One line per queue: its weight, owners and groups, parent, whether it is cordoned, and its
/// retry policy.
fn list_table(queues: &[Queue]) -> String {
    let mut out = format!(
        "{:<20} {:>8} {:<20} {:<20} {:<16} {:<8} {}\n",
        "QUEUE", "FACTOR", "OWNERS", "GROUPS", "PARENT", "CORDONED", "RETRY"
    );
    for q in queues {
        out.push_str(&format!(
            "{:<20} {:>8} {:<20} {:<20} {:<16} {:<8} {}\n",
            q.name.as_str(),
            q.priority_factor,
            q.owners.join(","),
            q.groups.join(","),
            q.parent.as_ref().map_or("-", |p| p.as_str()),
            if q.cordoned { "yes" } else { "no" },
            q.retry.as_ref().map_or_else(|| "-".to_string(), |r| r.summary())
        ));
    }
    out
}

/// A queue's report as people read it: its jobs by state, then per pool its shares (as
/// percentages) and what it holds and asks for.
fn report_text(r: &QueueReport) -> String {
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let amounts = |res: &convoy::model::Resources| {
        let parts: Vec<String> = res.iter().map(|(n, _)| format!("{n}={}", res.quantity_string(n.as_str()))).collect();
        if parts.is_empty() { "-".to_string() } else { parts.join(", ") }
    };
    let weight = format!("{:.3}", r.weight);
    let mut out = format!("Queue:   {} (weight {})\n", r.queue, weight.trim_end_matches('0').trim_end_matches('.'));
    let jobs: Vec<String> = r.jobs.iter().map(|(s, n)| format!("{n} {s}")).collect();
    out.push_str(&format!("Jobs:    {}\n", if jobs.is_empty() { "none live".to_string() } else { jobs.join(", ") }));
    if r.pools.is_empty() {
        out.push_str("Pools:   none yet (no scheduling cycle has seen the queue's jobs)\n");
    }
    for p in &r.pools {
        out.push_str(&format!(
            "Pool {}: fair share {}, adjusted {}, actual {}{}\n",
            p.pool,
            pct(p.fair_share),
            pct(p.adjusted_fair_share),
            pct(p.actual_share),
            if p.protected { " (protected from fair-share eviction)" } else { "" }
        ));
        out.push_str(&format!(
            "  allocated: {}\n  demand:    {}\n  pool:      {}\n",
            amounts(&p.allocated),
            amounts(&p.demand),
            amounts(&p.pool_total)
        ));
        if let Some(g) = p.guaranteed_share {
            out.push_str(&format!(
                "  guaranteed: {} of the pool{}\n",
                pct(g),
                if p.guarantee_scaled {
                    " (scaled down: the guarantees add up to more than the pool or the parent's guarantee)"
                } else {
                    ""
                }
            ));
        }
    }
    for (pool, u) in &r.usage {
        out.push_str(&format!("Usage in {pool}: {}\n", pct(*u)));
    }
    out
}

/// `POST /v1/queues/{name}/cordon` or `/uncordon`; prints the queue as stored.
async fn cordon(c: &Client, name: &QueueName, verb: &str) -> anyhow::Result<()> {
    let path = format!("/v1/queues/{name}/{verb}");
    let stored: Queue = c.send(c.request(Method::POST, &path), &format!("POST {path}")).await?;
    print_json(&stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_is_indented_under_parents() {
        let q = |name: &str, parent: Option<&str>| Queue {
            parent: parent.map(|p| QueueName::new(p).unwrap()),
            ..Queue::new(QueueName::new(name).unwrap(), 1.0)
        };
        let mut fenced = q("tenant", None);
        fenced.priority_policy = PriorityPolicy::Fence;
        fenced.priority_offset = 5;
        let text = tree_text(&[q("b-leaf", Some("tenant")), q("system", None), fenced, q("a-leaf", Some("tenant"))]);
        assert_eq!(
            text,
            "system (weight 1)\ntenant (weight 1, priority_offset 5, fence)\n  a-leaf (weight 1)\n  b-leaf (weight 1)\n"
        );
    }

    #[test]
    fn policies_show_in_the_tree_and_parse_as_flags() {
        let g = parse_guaranteed("cpu=6, memory=32Gi").unwrap();
        assert_eq!((g.get("cpu"), g.get("memory")), (6000, 32 << 30));
        assert!(parse_guaranteed("none").unwrap().is_zero());
        let r = parse_retry("max_attempts=3,on_exit_codes=75:76,on_oom,on_node_failure=false,backoff_seconds=30");
        assert_eq!(
            r,
            Ok(RetryArg(Some(JobRetryPolicy {
                max_attempts: 3,
                on_exit_codes: vec![75, 76],
                on_oom: true,
                on_node_failure: false,
                backoff_seconds: 30
            })))
        );
        assert_eq!(parse_retry("none"), Ok(RetryArg(None)));
        assert_eq!(parse_retry("on_exit_codes=75").unwrap_err(), "retry.max_attempts: must be 1 to 100");
        assert_eq!(
            parse_retry("max_attempts=2,on_exit_codes=0").unwrap_err(),
            "retry.on_exit_codes[0]: exit code 0 is a success, never retried"
        );
        assert!(parse_retry("max_attempts=2,often").unwrap_err().starts_with("retry: unknown key \"often\""));
        assert!(parse_guaranteed("cpu").unwrap_err().contains("name=quantity"));
        assert!(parse_guaranteed("cpu=lots").unwrap_err().starts_with("guaranteed: resource cpu"));
        assert_eq!(parse_preemption("fence"), Ok(PreemptionPolicy::Fence));
        assert!(parse_preemption("wall").is_err());
        let q = Queue {
            guaranteed: g,
            preemption_policy: PreemptionPolicy::Fence,
            ..Queue::new(QueueName::new("a").unwrap(), 1.0)
        };
        assert_eq!(tree_text(&[q]), "a (weight 1, guaranteed cpu=6,memory=32Gi, preemption fence)\n");
    }
}
