//! Confining the process runtime's jobs to what they asked for: a cgroup each with memory, CPU
//! and pids limits (and pinned cores), their own GPUs, and the Unix user they run as. See
//! `docs/confinement.md`.
//!
//! The agent decides ([`Confiner`]: looks the user up, picks devices, plans the cgroup) and
//! hands the supervisor a [`Confinement`]; the supervisor prepares it before it forks the job
//! ([`Confinement::prepare`]) and the forked child applies it with async-signal-safe calls only
//! ([`Prepared::apply_in_child`]).

pub mod cgroup;
pub(super) mod devices;
pub mod slots;
pub(super) mod user;

use crate::model::{QueueName, ResourceName, Resources, RunId};
use cgroup::{CgroupJoin, CgroupPlan, CgroupTree, JobLimits};
use devices::{Assignment, DevicePool};
use serde::{Deserialize, Serialize};
use slots::{SlotPool, slot_name, slot_number};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use user::UnixUser;

/// Node label saying how the node confines jobs: `cgroup-v2`, `cgroup-v1` or `none`.
pub const CONFINEMENT_LABEL: &str = "convoy.io/confinement";
/// Exit reason of a job the kernel killed for its memory limit (as Kubernetes says it).
pub const REASON_OOM_KILLED: &str = "OOMKilled";
/// Exit reason of a job whose confinement could not be set up: the node's fault.
pub const REASON_CONFINE_FAILED: &str = "confinement failed";
/// The run directory's record of the devices a run was given ([`Assignment`]).
pub const DEVICES_FILE: &str = "devices.json";
/// Left in the run directory when a process of the job would not leave its cgroup slot: the
/// agent then never gives that slot to another job.
pub const CGROUP_STUCK_FILE: &str = "cgroup-stuck";
/// How long a job's processes get to leave its cgroup at the end before the slot counts as stuck.
const EMPTY_PATIENCE: Duration = Duration::from_secs(2);
/// Slots free for this long are removed.
pub const SLOT_IDLE: Duration = Duration::from_secs(60);

/// `[agent.process.limits]`: cgroup limits of jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Confine jobs in cgroups when a usable hierarchy is there. Default: true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Where the cgroup file systems are mounted. Default: `/sys/fs/cgroup`.
    #[serde(default = "default_cgroup_root")]
    pub cgroup_root: PathBuf,
    /// Name of the cgroup, under the agent's own, that holds the jobs' cgroups. Default: `convoy`.
    #[serde(default = "default_cgroup_name")]
    pub cgroup_name: String,
    /// Most processes and threads one job may have at once (0: no limit). Default: 4096.
    #[serde(default = "default_pids_max")]
    pub pids_max: u64,
    /// Pin jobs that ask for whole cores (CPU limit, or request, of 1, 2, … cores) to cores of
    /// their own. Default: false.
    #[serde(default)]
    pub cpuset: bool,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            cgroup_root: default_cgroup_root(),
            cgroup_name: default_cgroup_name(),
            pids_max: default_pids_max(),
            cpuset: false,
        }
    }
}

fn yes() -> bool {
    true
}
fn default_cgroup_root() -> PathBuf {
    PathBuf::from("/sys/fs/cgroup")
}
fn default_cgroup_name() -> String {
    "convoy".into()
}
fn default_pids_max() -> u64 {
    4096
}

/// `[agent.process] run_as`: the Unix user jobs run as.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RunAs {
    /// Every job runs as this user; [`PRINCIPAL`]: as the Unix account named like the job's
    /// owner (the principal that submitted it), as Slurm runs jobs as their submitter.
    User(String),
    /// The first rule that matches the job's queue and owner names the user; a rule without a
    /// queue or principal matches every job. A job no rule matches does not run.
    Rules(Vec<RunAsRule>),
}

/// The user name that stands for the job owner's own account.
pub const PRINCIPAL: &str = "principal";

/// One rule of `run_as`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunAsRule {
    /// The queue whose jobs the rule is for; none: any queue.
    #[serde(default)]
    pub queue: Option<QueueName>,
    /// The principal (the job's owner) whose jobs the rule is for; none: anyone's.
    #[serde(default)]
    pub principal: Option<String>,
    /// The Unix user, or [`PRINCIPAL`] for the owner's own account.
    pub user: String,
}

impl RunAs {
    /// The user name for a job of `queue` submitted by `owner` (none when not recorded), or a
    /// reason it has none.
    pub fn user_for(&self, queue: &QueueName, owner: Option<&str>) -> Result<String, String> {
        let named = match self {
            RunAs::User(u) => u.as_str(),
            RunAs::Rules(rules) => rules
                .iter()
                .find(|r| {
                    r.queue.as_ref().is_none_or(|q| q == queue)
                        && r.principal.as_deref().is_none_or(|p| Some(p) == owner)
                })
                .map(|r| r.user.as_str())
                .ok_or_else(|| match owner {
                    Some(o) => format!("process.run_as maps no user for queue {queue} and principal {o:?}"),
                    None => format!("process.run_as maps no user for queue {queue} (the job has no recorded owner)"),
                })?,
        };
        if named != PRINCIPAL {
            return Ok(named.to_string());
        }
        match owner {
            Some(o) => Ok(o.to_string()),
            None => Err("process.run_as runs jobs as their owner's account, and this job has no recorded owner \
                         (it was submitted before servers recorded owners)"
                .into()),
        }
    }

    /// Checks the names; the error names the key.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let check = |key: String, name: &str| -> Result<(), (String, String)> {
            if name.is_empty() || name.contains(['\0', ':', '/']) || name.chars().any(char::is_whitespace) {
                return Err((key, format!("{name:?} is not a valid user name")));
            }
            Ok(())
        };
        match self {
            RunAs::User(u) => check("process.run_as".into(), u),
            RunAs::Rules(rules) => {
                if rules.is_empty() {
                    return Err(("process.run_as".into(), "an empty list runs no job; leave run_as out".into()));
                }
                rules.iter().enumerate().try_for_each(|(i, r)| {
                    check(format!("process.run_as[{i}].user"), &r.user)?;
                    match &r.principal {
                        Some(p) if p.is_empty() => {
                            Err((format!("process.run_as[{i}].principal"), "must not be empty".to_string()))
                        }
                        _ => Ok(()),
                    }
                })
            }
        }
    }
}

/// What the supervisor does to confine one job (part of its arguments).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Confinement {
    /// The job's cgroups; none: unconfined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupPlan>,
    /// The user the job runs as; none: the supervisor's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UnixUser>,
}

/// Why a job's confinement could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The cgroup could not be made.
    #[error("setting up the job's cgroup: {0}")]
    Cgroup(#[from] cgroup::CgroupError),
    /// The run directory or logs could not be given to the user.
    #[error("giving {path} to user {user}: {source}")]
    Chown {
        /// The file.
        path: PathBuf,
        /// The user.
        user: String,
        /// The error.
        source: std::io::Error,
    },
}

/// A [`Confinement`] made ready by the supervisor before it forks the job.
pub struct Prepared {
    join: Option<CgroupJoin>,
    user: Option<UnixUser>,
}

impl Confinement {
    /// Creates the cgroups with their limits and gives the run directory and `outputs` (paths
    /// of the job's open log files) to the job's user.
    pub fn prepare(&self, run_dir: &Path, outputs: &[PathBuf]) -> Result<Prepared, ConfineError> {
        if let Some(u) = &self.user {
            for p in std::iter::once(run_dir).chain(outputs.iter().map(PathBuf::as_path)) {
                user::chown(p, u).map_err(|source| ConfineError::Chown {
                    path: p.to_path_buf(),
                    user: u.name.clone(),
                    source,
                })?;
            }
        }
        let join = self.cgroup.as_ref().map(CgroupPlan::create).transpose()?;
        Ok(Prepared { join, user: self.user.clone() })
    }

    /// OOM kills counted so far in the job's cgroup: read before the job starts, since a slot
    /// counts those of every job it held.
    pub fn oom_kills(&self) -> u64 {
        self.cgroup.as_ref().map_or(0, CgroupPlan::oom_kills)
    }

    /// The exit reason and message when the kernel OOM-killed the job, read once it ended;
    /// `before` is [`oom_kills`](Self::oom_kills) from before it started.
    pub fn oom_killed(&self, before: u64) -> Option<(&'static str, String)> {
        let plan = self.cgroup.as_ref()?;
        let n = plan.oom_kills().saturating_sub(before);
        (n > 0).then(|| {
            let limit =
                plan.memory_bytes.map_or("its memory limit".to_string(), |b| format!("its memory limit ({b} bytes)"));
            (
                REASON_OOM_KILLED,
                format!("the job used more memory than {limit} and the kernel killed it ({n} OOM kill(s))"),
            )
        })
    }

    /// Kills what is left of the job in its cgroups, and empties its slot (or removes a cgroup
    /// of its own). False when a process would not leave the slot.
    pub fn release(&self) -> bool {
        let Some(plan) = &self.cgroup else { return true };
        if plan.reused {
            let empty = plan.empty(EMPTY_PATIENCE);
            if !empty {
                tracing::warn!(cgroup = %plan.dirs.first().map(|d| d.display().to_string()).unwrap_or_default(),
                    "a process of the job does not leave its cgroup; the slot will not be used again");
            }
            return empty;
        }
        if let Err(e) = plan.remove(EMPTY_PATIENCE) {
            tracing::warn!(error = %e, "cannot remove the job's cgroup");
        }
        true
    }
}

impl Prepared {
    /// A confinement whose child writes "0" into each of `files` (as it would into its
    /// cgroups' `cgroup.procs`) and, with `user`, switches to that user.
    #[cfg(test)]
    pub(crate) fn for_test(files: Vec<std::os::fd::OwnedFd>, user: Option<UnixUser>) -> Prepared {
        Prepared { join: Some(CgroupJoin::into_files(files)), user }
    }

    /// The same without the join: with no user, nothing to do in the child.
    #[cfg(test)]
    pub(crate) fn without_join(self) -> Prepared {
        Prepared { join: None, ..self }
    }

    /// True when the job's child must act between the fork and the exec (join a cgroup,
    /// switch user); otherwise the job can be started without a fork (`posix_spawn`).
    pub fn needs_the_child(&self) -> bool {
        self.join.is_some() || self.user.is_some()
    }

    /// In the forked child, before exec: joins the cgroups, then becomes the user (after which
    /// joining would no longer be allowed). Async-signal-safe.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        if let Some(j) = &self.join {
            j.join()?;
        }
        if let Some(u) = &self.user {
            u.switch()?;
        }
        Ok(())
    }
}

/// What a job asked for, from its first container's resources (the one the process runtime
/// runs): each resource's limit, or its request when it sets no limit.
pub fn job_resources(pod_spec: &serde_json::Value) -> Result<Resources, String> {
    let res = pod_spec.get("containers").and_then(|c| c.get(0)).and_then(|c| c.get("resources"));
    let read = |kind: &str| -> Result<Resources, String> {
        let Some(map) = res.and_then(|r| r.get(kind)).and_then(|m| m.as_object()) else {
            return Ok(Resources::new());
        };
        let pairs: Vec<(String, String)> = map
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => Ok((k.clone(), s.clone())),
                serde_json::Value::Number(n) => Ok((k.clone(), n.to_string())),
                _ => Err(format!("containers[0].resources.{kind}.{k} must be a quantity")),
            })
            .collect::<Result<_, _>>()?;
        Resources::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| format!("containers[0].resources.{kind}.{}: {}", e.resource, e.error))
    };
    let mut out = read("requests")?;
    for (name, v) in read("limits")?.iter() {
        out.set(name.clone(), v);
    }
    Ok(out)
}

/// The agent's side: the hierarchy found at start, the node's devices, the `run_as` rules.
pub struct Confiner {
    tree: Option<CgroupTree>,
    pids_max: Option<u64>,
    run_as: Option<RunAs>,
    allow_root: bool,
    devices: Mutex<DevicePool<RunId>>,
    /// The agent's slot id (see [`slots::slot_name`]).
    slot_id: String,
    slots: Mutex<SlotPool<RunId>>,
    /// The limits each slot holds, as its last job that started had them (a slot not listed:
    /// unknown, read and written as needed); and the limits planned for each run with a slot.
    in_place: Mutex<SlotSettings>,
}

/// What the agent knows of its slots' limits (see [`Confiner::release`]).
#[derive(Default)]
struct SlotSettings {
    slots: HashMap<u32, Vec<(PathBuf, String)>>,
    planned: HashMap<RunId, (u32, Vec<(PathBuf, String)>)>,
}

/// Why a job cannot be confined as configured.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The job's fault or the configuration's: the run fails (not counted against the node).
    #[error("{0}")]
    Job(String),
    /// Not enough free devices: the run goes back to the queue.
    #[error("{0}")]
    Busy(String),
}

impl Confiner {
    /// Finds the cgroup hierarchy (logging whether jobs are confined) and the node's GPUs:
    /// `gpus` as configured, else what `nvidia-smi` lists. `cores` is how many cores the node
    /// has (for pinning); `slot_id` names the agent's cgroup slots ([`slots::agent_slot_id`]).
    pub fn new(
        limits: &LimitsConfig,
        gpus: Option<Vec<String>>,
        run_as: Option<RunAs>,
        allow_root: bool,
        cores: usize,
        slot_id: String,
    ) -> Confiner {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        Self::with_own_cgroup(limits, &own, gpus, run_as, allow_root, cores, slot_id)
    }

    /// [`Confiner::new`] for an agent whose `/proc/self/cgroup` reads `own`.
    fn with_own_cgroup(
        limits: &LimitsConfig,
        own: &str,
        gpus: Option<Vec<String>>,
        run_as: Option<RunAs>,
        allow_root: bool,
        cores: usize,
        slot_id: String,
    ) -> Confiner {
        let tree = if limits.enabled {
            match CgroupTree::detect(&limits.cgroup_root, own, &limits.cgroup_name, limits.cpuset) {
                Ok(t) => {
                    tracing::info!(version = t.version.label(), "jobs are confined in cgroups");
                    Some(t)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no usable cgroup hierarchy: jobs run unconfined (no memory, CPU or pids limits)");
                    None
                }
            }
        } else {
            tracing::warn!("process.limits.enabled = false: jobs run unconfined (no memory, CPU or pids limits)");
            None
        };
        let gpus = gpus.unwrap_or_else(devices::detect_gpus);
        if !gpus.is_empty() {
            tracing::info!(gpus = ?gpus, "GPUs of the node");
        }
        let cpus = if tree.as_ref().is_some_and(CgroupTree::pins_cpus) { (0..cores as u32).collect() } else { vec![] };
        if run_as.is_none() && nix_is_root() {
            tracing::warn!("process.run_as is not set: jobs run as the agent's user, root");
        }
        if run_as.is_some() && !nix_is_root() {
            tracing::warn!("process.run_as is set but the agent is not root: jobs will fail to become their user");
        }
        // Slots an earlier agent left are free until recovery finds a run holding one.
        let mut slots = SlotPool::default();
        let now = Instant::now();
        for name in tree.as_ref().map(CgroupTree::children).unwrap_or_default() {
            if let Some(n) = slot_number(&slot_id, &name) {
                slots.adopt(n, now);
            }
        }
        Confiner {
            tree,
            pids_max: (limits.pids_max > 0).then_some(limits.pids_max),
            run_as,
            allow_root,
            devices: Mutex::new(DevicePool::new(gpus, cpus)),
            slot_id,
            slots: Mutex::new(slots),
            in_place: Mutex::new(SlotSettings::default()),
        }
    }

    /// The value of [`CONFINEMENT_LABEL`] for this node.
    pub fn label(&self) -> &'static str {
        self.tree.as_ref().map_or("none", |t| t.version.label())
    }

    /// How many GPUs the node has.
    pub fn gpu_count(&self) -> usize {
        lock(&self.devices).gpus().len()
    }

    /// The user a job of `queue` submitted by `owner` runs as (looked up), or none without
    /// `run_as`.
    pub fn user_for(&self, queue: &QueueName, owner: Option<&str>) -> Result<Option<UnixUser>, PlanError> {
        let Some(run_as) = &self.run_as else { return Ok(None) };
        let name = run_as.user_for(queue, owner).map_err(PlanError::Job)?;
        let name = name.as_str();
        let u = UnixUser::lookup(name).map_err(|e| PlanError::Job(format!("process.run_as: {e}")))?;
        if u.uid == 0 && !self.allow_root {
            return Err(PlanError::Job(format!(
                "process.run_as: user {name:?} is root, and process.allow_root is not set"
            )));
        }
        Ok(Some(u))
    }

    /// Picks the run's GPUs and cores for what the job asked.
    pub fn assign(&self, run_id: RunId, asked: &Resources) -> Result<Assignment, PlanError> {
        // Extended resources are stored in thousandths, like cpu.
        let gpus = (asked.get(ResourceName::gpu().as_str()).max(0) as usize).div_ceil(1000);
        let cpu = asked.get(ResourceName::cpu().as_str());
        let mut pool = lock(&self.devices);
        let cores = if self.tree.as_ref().is_some_and(CgroupTree::pins_cpus) && cpu > 0 && cpu % 1000 == 0 {
            (cpu / 1000) as usize
        } else {
            0
        };
        let mut a =
            pool.take(run_id, gpus, cores).map_err(|e| PlanError::Busy(format!("not enough free devices: {e}")))?;
        if self.tree.is_some() {
            a.slot = Some(lock(&self.slots).take(run_id));
        }
        Ok(a)
    }

    /// Records what a run found at recovery holds.
    pub fn hold(&self, run_id: RunId, a: Assignment) {
        if let Some(n) = a.slot {
            lock(&self.slots).hold(run_id, n);
        }
        lock(&self.devices).hold(run_id, a);
    }

    /// Frees a run's devices and its cgroup slot; `stuck`: a process of the job did not leave
    /// the slot, which is then never given again. `started`: the job was started, so its
    /// supervisor had put its limits in place, and the next job asking the same needs not
    /// touch them.
    pub fn release(&self, run_id: RunId, stuck: bool, started: bool) {
        lock(&self.devices).release(&run_id);
        let slot = lock(&self.slots).release(&run_id, stuck, Instant::now());
        let mut known = lock(&self.in_place);
        let planned = known.planned.remove(&run_id);
        match (slot, planned) {
            (Some(n), Some((m, settings))) if n == m && started && !stuck => {
                known.slots.insert(n, settings);
            }
            (Some(n), _) => {
                known.slots.remove(&n);
            }
            (None, _) => {}
        }
    }

    /// Removes the cgroups of slots free for longer than `idle` (all free ones: zero, as the
    /// agent stops), and tries again with stuck ones.
    pub fn sweep_slots(&self, idle: Duration) {
        let Some(tree) = &self.tree else { return };
        let Some(before) = Instant::now().checked_sub(idle) else { return };
        let removable = lock(&self.slots).removable(before);
        for n in removable {
            // Taken out of the pool first, so that no run gets it while its cgroup goes.
            if !lock(&self.slots).start_removing(n) {
                continue;
            }
            lock(&self.in_place).slots.remove(&n);
            let plan = tree.plan(&slot_name(&self.slot_id, n), &JobLimits::default(), true);
            match plan.remove(Duration::from_millis(200)) {
                Ok(()) => lock(&self.slots).removed(n),
                Err(e) => {
                    tracing::warn!(slot = n, error = %e, "cannot remove an idle cgroup slot");
                    lock(&self.slots).stuck(n);
                }
            }
        }
    }

    /// The supervisor's part and the extra environment of the job.
    pub fn confinement(
        &self,
        run_id: RunId,
        asked: &Resources,
        assignment: &Assignment,
        user: Option<UnixUser>,
    ) -> (Confinement, Vec<(String, String)>) {
        let mut env = Vec::new();
        if self.gpu_count() > 0 || !assignment.gpus.is_empty() {
            env.extend(assignment.gpu_env());
        }
        if let Some(u) = &user {
            env.extend(u.env());
        }
        let cgroup = self.tree.as_ref().map(|t| {
            let pos = |name: ResourceName| Some(asked.get(name.as_str())).filter(|v| *v > 0);
            let limits = JobLimits {
                memory_bytes: pos(ResourceName::memory()),
                cpu_millis: pos(ResourceName::cpu()),
                pids_max: self.pids_max,
                cpus: assignment.cpus.clone(),
            };
            match assignment.slot {
                Some(n) => {
                    let mut plan = t.plan(&slot_name(&self.slot_id, n), &limits, true);
                    let mut known = lock(&self.in_place);
                    plan.settings_in_place = known.slots.get(&n) == Some(&plan.settings);
                    known.planned.insert(run_id, (n, plan.settings.clone()));
                    plan
                }
                // A run started by an agent before slots: a cgroup named after it.
                None => t.plan(&run_id.to_string(), &limits, false),
            }
        });
        (Confinement { cgroup, user }, env)
    }

    /// Kills what is left of a run whose supervisor vanished, and empties its slot (`slot`, as
    /// recorded for the run) or removes its own cgroups. False when a process would not leave.
    pub fn clean_up(&self, run_id: RunId, slot: Option<u32>) -> bool {
        let Some(t) = &self.tree else { return true };
        match slot {
            Some(n) => t.plan(&slot_name(&self.slot_id, n), &JobLimits::default(), true).empty(EMPTY_PATIENCE),
            None => {
                let plan = t.plan(&run_id.to_string(), &JobLimits::default(), false);
                if let Err(e) = plan.remove(Duration::from_secs(1)) {
                    tracing::warn!(%run_id, error = %e, "cannot remove the run's cgroup");
                }
                true
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_as_maps_queues_and_principals_and_runs_as_the_owner() {
        let q = |s: &str| QueueName::new(s).expect("queue");
        let rules: RunAs = toml::from_str::<toml::Table>(
            "r = [{ queue = \"physics\", user = \"phys\" }, { principal = \"alice\", user = \"alice-batch\" }, \
             { queue = \"ml\", user = \"principal\" }, { user = \"batch\" }]",
        )
        .expect("toml")
        .remove("r")
        .expect("r")
        .try_into()
        .expect("rules");
        assert!(rules.validate().is_ok());
        assert_eq!(rules.user_for(&q("physics"), Some("alice")).as_deref(), Ok("phys"));
        assert_eq!(rules.user_for(&q("other"), Some("alice")).as_deref(), Ok("alice-batch"));
        assert_eq!(rules.user_for(&q("ml"), Some("bob")).as_deref(), Ok("bob"));
        assert_eq!(rules.user_for(&q("other"), Some("bob")).as_deref(), Ok("batch"));
        assert!(rules.user_for(&q("ml"), None).is_err_and(|e| e.contains("no recorded owner")));
        let only = RunAs::Rules(vec![RunAsRule { queue: Some(q("a")), principal: None, user: "u".into() }]);
        assert!(only.user_for(&q("b"), Some("x")).is_err_and(|e| e.contains("maps no user for queue b")));
        let owner = RunAs::User(PRINCIPAL.into());
        assert!(owner.validate().is_ok());
        assert_eq!(owner.user_for(&q("a"), Some("carol")).as_deref(), Ok("carol"));
        assert!(owner.user_for(&q("a"), None).is_err());
        assert_eq!(RunAs::User("batch".into()).user_for(&q("a"), None).as_deref(), Ok("batch"));
        let (key, _) =
            RunAs::Rules(vec![RunAsRule { queue: None, principal: None, user: "a b".into() }]).validate().unwrap_err();
        assert_eq!(key, "process.run_as[0].user");
        let (key, _) = RunAs::Rules(vec![RunAsRule { queue: None, principal: Some(String::new()), user: "u".into() }])
            .validate()
            .unwrap_err();
        assert_eq!(key, "process.run_as[0].principal");
    }

    #[test]
    fn a_slot_whose_last_started_job_had_the_same_limits_is_not_touched_again() {
        let t = tempfile::tempdir().expect("tempdir");
        let own = t.path().join("svc/agent.service");
        std::fs::create_dir_all(&own).expect("mkdir");
        for dir in [t.path(), own.as_path()] {
            std::fs::write(dir.join("cgroup.controllers"), "cpu memory pids").expect("write");
        }
        std::fs::write(own.join("cgroup.subtree_control"), "").expect("write");
        std::fs::write(own.join("cgroup.procs"), "").expect("write");
        let limits: LimitsConfig =
            toml::from_str(&format!("enabled = true\ncgroup_root = {:?}\n", t.path().display().to_string()))
                .expect("limits");
        let c = Confiner::with_own_cgroup(&limits, "0::/svc/agent.service\n", Some(vec![]), None, true, 2, "a".into());
        assert_eq!(c.label(), "cgroup-v2");
        let asks = |cpu: &str| Resources::parse([("cpu", cpu), ("memory", "1Gi")]).expect("resources");
        let run = |n: u128| RunId::from_parts(1, n);
        let in_place = |id: RunId, cpu: &str| {
            let a = c.assign(id, &asks(cpu)).expect("assign");
            let (conf, _) = c.confinement(id, &asks(cpu), &a, None);
            (a.slot, conf.cgroup.expect("a cgroup").settings_in_place)
        };
        // Unknown at first; known after a job that started; forgotten after one that did not,
        // and never assumed for other limits.
        assert_eq!(in_place(run(1), "1"), (Some(0), false));
        c.release(run(1), false, true);
        assert_eq!(in_place(run(2), "1"), (Some(0), true));
        c.release(run(2), false, false);
        assert_eq!(in_place(run(3), "1"), (Some(0), false));
        c.release(run(3), false, true);
        assert_eq!(in_place(run(4), "2"), (Some(0), false));
        // A stuck slot is never given again; the next one is unknown.
        c.release(run(4), true, true);
        assert_eq!(in_place(run(5), "2"), (Some(1), false));
        c.release(run(5), false, true);
        // Removing an idle slot forgets what it held.
        c.sweep_slots(Duration::ZERO);
        assert!(!in_place(run(6), "2").1);
    }

    #[test]
    fn resources_are_limits_else_requests() {
        let spec = serde_json::json!({"containers": [{"resources": {
            "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 1},
            "limits": {"cpu": "2"}}}]});
        let r = job_resources(&spec).expect("valid");
        assert_eq!((r.get("cpu"), r.get("memory"), r.get("nvidia.com/gpu")), (2000, 1 << 30, 1000));
        let bad = serde_json::json!({"containers": [{"resources": {"limits": {"memory": "lots"}}}]});
        assert!(job_resources(&bad).unwrap_err().starts_with("containers[0].resources.limits.memory"));
        assert!(job_resources(&serde_json::json!({})).expect("none").is_zero());
    }
}
