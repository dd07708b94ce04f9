//! Control groups for jobs of the process runtime: finding the hierarchy the agent may use
//! (cgroup v2, or the v1 controllers), and the plan of one job's cgroup: the directories to
//! create, the limits to write, where its OOM kills are counted.
//!
//! Everything works over a root directory (`/sys/fs/cgroup` on a real machine), so the same code
//! runs on a cgroup file system faked in a temporary directory. The agent works out the plan
//! ([`CgroupTree::plan`]); the supervisor carries it out ([`CgroupPlan::create`], then
//! [`CgroupJoin`] in the forked child, [`CgroupPlan::remove`] at the end), so a job costs a few
//! `mkdir`, `write` and `rmdir` calls and no extra process.

use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cgroup version the agent confines jobs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CgroupVersion {
    /// The legacy hierarchies, one per controller.
    V1,
    /// The unified hierarchy.
    V2,
}

impl CgroupVersion {
    /// `cgroup-v1` or `cgroup-v2`, as the node label says it.
    pub fn label(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "cgroup-v1",
            CgroupVersion::V2 => "cgroup-v2",
        }
    }
}

/// Why no hierarchy could be used.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Nothing usable is mounted (or the controllers are missing).
    #[error("{0}")]
    Unavailable(String),
    /// A file of the hierarchy could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io { path: path.to_path_buf(), source }
}

/// Where the agent puts its jobs' cgroups: one parent directory per hierarchy (v2: one; v1: one
/// per controller used), each `<agent's own cgroup>/<name>`.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupTree {
    /// v1 or v2.
    pub version: CgroupVersion,
    /// v2: the parent. v1: the parent in the memory, cpu and pids hierarchies, in that order,
    /// then cpuset when pinning is on.
    parents: Vec<PathBuf>,
    /// Whether `memory.swap.max` (v2) or `memory.memsw.limit_in_bytes` (v1) exists, so swap is
    /// held to the memory limit too.
    swap_file: bool,
    /// Whether jobs can be pinned to cores (`cpuset` controller).
    cpuset: bool,
}

/// The limits of one job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobLimits {
    /// Memory limit in bytes.
    pub memory_bytes: Option<i64>,
    /// CPU quota in millicores.
    pub cpu_millis: Option<i64>,
    /// Most processes and threads at once.
    pub pids_max: Option<u64>,
    /// Cores the job is pinned to.
    pub cpus: Vec<u32>,
}

/// v1's memory limit and memory+swap limit files.
const V1_MEMORY_LIMIT: &str = "memory.limit_in_bytes";
const V1_MEMSW_LIMIT: &str = "memory.memsw.limit_in_bytes";

/// The v2 cgroup the agent moves itself into, so that its own can hand controllers down.
const AGENT_LEAF: &str = "agent";
/// CFS period used for quotas (the kernel's default).
const CPU_PERIOD_US: i64 = 100_000;
/// The smallest quota the kernel takes.
const CPU_MIN_QUOTA_US: i64 = 1_000;
/// Processes of Convoy's own in a slot besides the job: the slot's holder, which supervises the
/// job (see [`CgroupPlan::holder`]). A slot's pids limit is the job's plus these.
pub const SLOT_OWN_PIDS: u64 = 1;

impl CgroupTree {
    /// Finds the hierarchy under `root` (`/sys/fs/cgroup`) given the agent's own
    /// `/proc/self/cgroup`, and prepares the parent directory `name` in it. cgroup v2 is used
    /// when mounted at `root` with the memory, cpu and pids controllers available to the agent's
    /// cgroup; otherwise the v1 hierarchies `root/{memory,cpu,pids}`.
    pub fn detect(root: &Path, proc_self_cgroup: &str, name: &str, cpuset: bool) -> Result<CgroupTree, CgroupError> {
        let own_v2 = proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::"));
        if root.join("cgroup.controllers").exists() {
            let own = own_v2.ok_or_else(|| {
                CgroupError::Unavailable("cgroup v2 is mounted but /proc/self/cgroup has no 0:: line".into())
            })?;
            return Self::prepare_v2(root, own, name, cpuset);
        }
        let mut parents = Vec::new();
        let mut missing = Vec::new();
        let wanted: &[&str] = if cpuset { &["memory", "cpu", "pids", "cpuset"] } else { &["memory", "cpu", "pids"] };
        for ctl in wanted {
            let own = v1_own(proc_self_cgroup, ctl);
            let mount = root.join(ctl);
            match own {
                Some(own) if mount.join("cgroup.procs").exists() => parents.push(mount.join(relative(own)).join(name)),
                _ => missing.push(*ctl),
            }
        }
        if !missing.is_empty() {
            return Err(CgroupError::Unavailable(format!(
                "neither cgroup v2 at {} nor the v1 controllers {} (missing: {})",
                root.display(),
                wanted.join(", "),
                missing.join(", ")
            )));
        }
        for p in &parents {
            std::fs::create_dir_all(p).map_err(io_err(p))?;
        }
        if cpuset {
            // A v1 cpuset takes no process until its cpus and mems are set: inherit the parent's.
            let set = &parents[3];
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let from = set.parent().map(|p| p.join(file)).unwrap_or_default();
                let value = std::fs::read_to_string(&from).map_err(io_err(&from))?;
                let to = set.join(file);
                if std::fs::read_to_string(&to).map(|v| v.trim().is_empty()).unwrap_or(true) {
                    std::fs::write(&to, value.trim()).map_err(io_err(&to))?;
                }
            }
        }
        let swap_file = parents[0].join("memory.memsw.limit_in_bytes").exists();
        Ok(CgroupTree { version: CgroupVersion::V1, parents, swap_file, cpuset })
    }

    fn prepare_v2(root: &Path, own: &str, name: &str, cpuset: bool) -> Result<CgroupTree, CgroupError> {
        let own = v2_own(own);
        let own_dir = root.join(relative(own));
        let mut needed = vec!["memory", "cpu", "pids"];
        if cpuset {
            needed.push("cpuset");
        }
        let available = read_trimmed(&own_dir.join("cgroup.controllers"))?;
        let missing: Vec<_> = needed.iter().filter(|c| !available.split_whitespace().any(|a| a == **c)).collect();
        if !missing.is_empty() {
            return Err(CgroupError::Unavailable(format!(
                "cgroup v2 at {} does not delegate {:?} to the agent's cgroup {own} (under systemd: Delegate=yes)",
                root.display(),
                missing
            )));
        }
        let enable: String = needed.iter().map(|c| format!("+{c} ")).collect();
        let enabled = read_trimmed(&own_dir.join("cgroup.subtree_control"))?;
        if !needed.iter().all(|c| enabled.split_whitespace().any(|e| e == *c)) && own_dir != root {
            // No process may sit in a cgroup that hands controllers to its children: move the
            // agent's own processes into a leaf first (what Delegate=yes units must do).
            let leaf = own_dir.join(AGENT_LEAF);
            std::fs::create_dir_all(&leaf).map_err(io_err(&leaf))?;
            let procs = read_trimmed(&own_dir.join("cgroup.procs"))?;
            for pid in procs.lines() {
                // A process may have ended meanwhile.
                let _ = std::fs::write(leaf.join("cgroup.procs"), pid);
            }
        }
        write_file(&own_dir.join("cgroup.subtree_control"), enable.trim())?;
        let parent = own_dir.join(name);
        std::fs::create_dir_all(&parent).map_err(io_err(&parent))?;
        write_file(&parent.join("cgroup.subtree_control"), enable.trim())?;
        let swap_file = parent.join("memory.swap.max").exists();
        Ok(CgroupTree { version: CgroupVersion::V2, parents: vec![parent], swap_file, cpuset })
    }

    /// True when jobs can be pinned to cores.
    pub fn pins_cpus(&self) -> bool {
        self.cpuset
    }

    /// The names of the cgroups under the agent's parent (in the first hierarchy).
    pub fn children(&self) -> Vec<String> {
        let Some(parent) = self.parents.first() else { return Vec::new() };
        let Ok(entries) = std::fs::read_dir(parent) else { return Vec::new() };
        entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }

    /// The plan for the cgroup `name` (a slot, or a run id) with `limits`. A `reused` cgroup may
    /// hold an earlier job's limits, so every limit is written, a missing one as "no limit".
    pub fn plan(&self, name: &str, limits: &JobLimits, reused: bool) -> CgroupPlan {
        let dirs: Vec<PathBuf> = self.parents.iter().map(|p| p.join(name)).collect();
        let mut settings = Vec::new();
        let cpus = limits.cpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let quota = limits.cpu_millis.map(|m| (m.saturating_mul(CPU_PERIOD_US) / 1000).max(CPU_MIN_QUOTA_US));
        match self.version {
            CgroupVersion::V2 => {
                let d = &dirs[0];
                if let Some(m) = limits.memory_bytes {
                    settings.push((d.join("memory.max"), m.to_string()));
                    if self.swap_file {
                        settings.push((d.join("memory.swap.max"), "0".into()));
                    }
                    // Like Kubernetes: an OOM kill takes the whole job, not one of its processes.
                    settings.push((d.join("memory.oom.group"), "1".into()));
                } else if reused {
                    settings.push((d.join("memory.max"), "max".into()));
                    if self.swap_file {
                        settings.push((d.join("memory.swap.max"), "max".into()));
                    }
                    settings.push((d.join("memory.oom.group"), "0".into()));
                }
                match quota {
                    Some(q) => settings.push((d.join("cpu.max"), format!("{q} {CPU_PERIOD_US}"))),
                    None if reused => settings.push((d.join("cpu.max"), format!("max {CPU_PERIOD_US}"))),
                    None => {}
                }
                match limits.pids_max {
                    Some(p) => settings.push((d.join("pids.max"), slot_pids(p, reused))),
                    None if reused => settings.push((d.join("pids.max"), "max".into())),
                    None => {}
                }
                // An empty cpuset.cpus is the parent's set.
                if self.cpuset && (reused || !cpus.is_empty()) {
                    settings.push((d.join("cpuset.cpus"), cpus));
                }
                CgroupPlan {
                    reused,
                    holder: None,
                    settings_in_place: false,
                    oom_counter: Some(d.join("memory.events")),
                    kill_file: Some(d.join("cgroup.kill")),
                    memory_bytes: limits.memory_bytes,
                    dirs,
                    settings,
                }
            }
            CgroupVersion::V1 => {
                let (mem, cpu, pids) = (&dirs[0], &dirs[1], &dirs[2]);
                let memory = limits.memory_bytes.map(|m| m.to_string()).or_else(|| reused.then(|| "-1".into()));
                if let Some(m) = memory {
                    settings.push((mem.join(V1_MEMORY_LIMIT), m.clone()));
                    if self.swap_file {
                        // After the memory limit: memsw may never be below it (a raised limit is
                        // written the other way round, see `CgroupPlan::create`).
                        settings.push((mem.join(V1_MEMSW_LIMIT), m));
                    }
                }
                match quota {
                    // A new cgroup's period is the kernel's default, CPU_PERIOD_US.
                    Some(q) => settings.push((cpu.join("cpu.cfs_quota_us"), q.to_string())),
                    None if reused => settings.push((cpu.join("cpu.cfs_quota_us"), "-1".into())),
                    None => {}
                }
                match limits.pids_max {
                    Some(p) => settings.push((pids.join("pids.max"), slot_pids(p, reused))),
                    None if reused => settings.push((pids.join("pids.max"), "max".into())),
                    None => {}
                }
                if let Some(set) = dirs.get(3) {
                    let all = set.parent().map(|p| p.join("cpuset.cpus")).unwrap_or_default();
                    let mems = set.parent().map(|p| p.join("cpuset.mems")).unwrap_or_default();
                    let mems = std::fs::read_to_string(mems).map(|s| s.trim().to_string()).unwrap_or_default();
                    let cpus = if cpus.is_empty() {
                        std::fs::read_to_string(all).map(|s| s.trim().to_string()).unwrap_or_default()
                    } else {
                        cpus
                    };
                    settings.push((set.join("cpuset.cpus"), cpus));
                    settings.push((set.join("cpuset.mems"), mems));
                }
                CgroupPlan {
                    reused,
                    holder: None,
                    settings_in_place: false,
                    oom_counter: Some(mem.join("memory.oom_control")),
                    kill_file: None,
                    memory_bytes: limits.memory_bytes,
                    dirs,
                    settings,
                }
            }
        }
    }
}

/// One job's cgroups, worked out by the agent and carried out by the supervisor.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupPlan {
    /// The job's cgroup in each hierarchy; the job joins every one.
    pub dirs: Vec<PathBuf>,
    /// A slot kept by the agent: emptied at the end, not removed.
    #[serde(default)]
    pub reused: bool,
    /// The pid of the slot's holder ([`super::super::spawner`]) when it supervises the job: the
    /// job is in the slot from the start and joins nothing but v1's memory cgroup (moving a
    /// process between cgroups is most of what confinement costs on v1). The holder is not the
    /// job's: never killed with it, nor counted as left behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<i32>,
    /// The agent knows the slot holds `settings` already (its last job, which started, had the
    /// same): they are neither read nor written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settings_in_place: bool,
    /// Files written once the directories exist, in order: the limits.
    pub settings: Vec<(PathBuf, String)>,
    /// The file whose `oom_kill` line counts the job's OOM kills (v2 `memory.events`, v1
    /// `memory.oom_control`).
    pub oom_counter: Option<PathBuf>,
    /// v2's `cgroup.kill`: kills everything in the cgroup at once.
    pub kill_file: Option<PathBuf>,
    /// The memory limit, for the OOM message.
    pub memory_bytes: Option<i64>,
}

/// What the forked child does before exec to be in the job's cgroups: write to the open
/// `cgroup.procs` files of those it is not in yet, and, forked inside a v2 slot, give up the
/// OOM killer's protection of the slot's own processes.
pub struct CgroupJoin {
    procs: Vec<OwnedFd>,
    spared: bool,
}

impl CgroupPlan {
    /// Creates the directories (an existing one is reused: a supervisor started again), writes
    /// the limits and opens the files the child joins through.
    pub fn create(&self) -> Result<CgroupJoin, CgroupError> {
        // Opening `cgroup.procs` first finds a kept slot without a failing mkdir per hierarchy.
        let mut fds = Vec::with_capacity(self.dirs.len());
        for d in self.dirs.iter().filter(|d| self.holder.is_none() || !self.held_by_holder(d)) {
            let p = d.join("cgroup.procs");
            let open = || std::fs::OpenOptions::new().write(true).open(&p);
            let f = match open() {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    match std::fs::create_dir(d) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(io_err(d)(e)),
                    }
                    open().map_err(io_err(&p))?
                }
                Err(e) => return Err(io_err(&p)(e)),
            };
            fds.push(OwnedFd::from(f));
        }
        let settings = if self.settings_in_place { &[][..] } else { &self.settings[..] };
        for (i, (file, value)) in settings.iter().enumerate() {
            // A slot often holds the same limits already (jobs of a job set ask alike), and some
            // writes cost far more than a read: a CPU quota makes the kernel check every cgroup's.
            if self.reused && read_small(file).is_ok_and(|now| now.trim() == value) {
                continue;
            }
            match std::fs::write(file, value) {
                Ok(()) => {}
                Err(e) => self.write_again(i, e)?,
            }
        }
        let spared = self.holder.is_some() && self.v1_memory_dir().is_none();
        Ok(CgroupJoin { procs: fds, spared })
    }

    /// For the slot's holder: makes the slot's cgroups (with this job's limits) and moves the
    /// calling process into those it holds (see [`Self::held_by_holder`]); on v2 spared by the
    /// OOM killer first, which takes `CAP_SYS_RESOURCE`: without it this fails, and supervisors
    /// are forked outside the slot.
    pub fn enter_as_holder(&self) -> Result<(), CgroupError> {
        if self.v1_memory_dir().is_none() {
            let adj = Path::new("/proc/self/oom_score_adj");
            write_proc_self(c"/proc/self/oom_score_adj", b"-1000").map_err(io_err(adj))?;
        }
        drop(CgroupPlan { holder: None, ..self.clone() }.create()?);
        for d in self.dirs.iter().filter(|d| self.held_by_holder(d)) {
            write_file(&d.join("cgroup.procs"), "0")?;
        }
        Ok(())
    }

    /// The job's memory cgroup on v1, where the memory hierarchy is one of several.
    fn v1_memory_dir(&self) -> Option<&Path> {
        let counter = self.oom_counter.as_deref()?;
        (counter.file_name()? == "memory.oom_control").then(|| counter.parent()).flatten()
    }

    /// Whether the slot's holder joins `dir`: every one but v1's memory cgroup, which the job
    /// joins alone, so that the OOM killer never picks the holder (and its
    /// pages are not the job's). On v2 there is one cgroup, and the holder is in it spared by
    /// the OOM killer.
    fn held_by_holder(&self, dir: &Path) -> bool {
        self.v1_memory_dir() != Some(dir)
    }

    /// Processes in the cgroup that are not the job's: the calling supervisor and the slot's
    /// holder (the same process when the holder supervises the job).
    fn own(&self) -> [i32; 2] {
        match self.holder {
            Some(h) => [std::process::id() as i32, h],
            None => [0, 0],
        }
    }

    /// The pids in `dir`'s `cgroup.procs` that are the job's.
    fn job_pids(&self, dir: &Path) -> Vec<i32> {
        let own = self.own();
        let text = read_small(&dir.join("cgroup.procs")).unwrap_or_default();
        text.lines().filter_map(|l| l.trim().parse::<i32>().ok()).filter(|p| *p > 0 && !own.contains(p)).collect()
    }

    /// A limit of a reused v1 memory cgroup the kernel refused: raised above the memory+swap
    /// limit (EINVAL: write that one first), or lowered below what an earlier job's page cache
    /// still holds (EBUSY: give the cache back first).
    fn write_again(&self, i: usize, e: io::Error) -> Result<(), CgroupError> {
        let (file, value) = &self.settings[i];
        let named = |name: &str| file.file_name().is_some_and(|f| f == name);
        if !self.reused || !named(V1_MEMORY_LIMIT) {
            return Err(io_err(file)(e));
        }
        match e.raw_os_error() {
            Some(libc::EINVAL) => {
                let memsw = self.settings.iter().find(|(f, _)| f.file_name().is_some_and(|n| n == V1_MEMSW_LIMIT));
                let Some((sw_file, sw_value)) = memsw else { return Err(io_err(file)(e)) };
                write_file(sw_file, sw_value)?;
            }
            Some(libc::EBUSY) => {
                let empty = file.with_file_name("memory.force_empty");
                write_file(&empty, "0")?;
            }
            _ => return Err(io_err(file)(e)),
        }
        write_file(file, value)
    }

    /// OOM kills counted in the job's cgroup so far (0 when unreadable).
    pub fn oom_kills(&self) -> u64 {
        let Some(file) = &self.oom_counter else { return 0 };
        let text = read_small(file).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
    }

    /// Kills whatever is left in the job's cgroups and removes them. Gives up after `patience`
    /// (a process stuck in the kernel): the directories then stay until the agent sweeps them.
    pub fn remove(&self, patience: Duration) -> io::Result<()> {
        let until = Instant::now() + patience;
        let mut killed = false;
        for d in self.dirs.iter().rev() {
            loop {
                match std::fs::remove_dir(d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < until => {
                        if !killed {
                            self.kill_all();
                            killed = true;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// For a reused slot: kills whatever is left of the job in its cgroups and waits until they
    /// are empty; false when something is still there after `patience` (a process stuck in the
    /// kernel), so the slot must not be given to another job. Only the first hierarchy is looked
    /// at: a job's processes are in all of them, and only root may move one out of one.
    pub fn empty(&self, patience: Duration) -> bool {
        let until = Instant::now() + patience;
        let mut killed = false;
        loop {
            let busy = self.dirs.first().is_some_and(|d| !self.job_pids(d).is_empty());
            if !busy {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            if !killed {
                self.kill_all();
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL to every process in the job's cgroups, also those that left its process group.
    pub fn kill_all(&self) {
        // `cgroup.kill` would take the holder too.
        if let Some(k) = self.kill_file.as_ref().filter(|_| self.holder.is_none())
            && std::fs::write(k, "1").is_ok()
        {
            return;
        }
        for d in &self.dirs {
            for pid in self.job_pids(d) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

impl CgroupJoin {
    /// A join that writes into `files` instead of `cgroup.procs` files (tests of the child's
    /// steps, without cgroups).
    #[cfg(test)]
    pub(crate) fn into_files(files: Vec<OwnedFd>) -> CgroupJoin {
        CgroupJoin { procs: files, spared: false }
    }

    /// Moves the calling process into the job's cgroups. Async-signal-safe, for `pre_exec`.
    pub fn join(&self) -> io::Result<()> {
        if self.spared {
            // The slot's holder is spared by the OOM killer; the job is not.
            write_proc_self(c"/proc/self/oom_score_adj", b"0")?;
        }
        for fd in &self.procs {
            // "0" is the writing process itself.
            // SAFETY: writes two bytes from a static buffer to an open descriptor.
            let n = unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// A pids limit as written: a slot also holds its holder.
fn slot_pids(job: u64, reused: bool) -> String {
    if reused { job.saturating_add(SLOT_OWN_PIDS) } else { job }.to_string()
}

/// The cgroup of controller `ctl` in a v1 `/proc/self/cgroup`.
fn v1_own<'a>(proc_self_cgroup: &'a str, ctl: &str) -> Option<&'a str> {
    proc_self_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctls, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctls.split(',').any(|c| c == ctl).then_some(path)
    })
}

/// The v2 cgroup the agent works in: its own, or one level up when it sits in the leaf (moved
/// there by an earlier agent of the same unit, or started there by systemd's
/// DelegateSubgroup=agent).
fn v2_own(own: &str) -> &str {
    match own.rsplit_once('/') {
        Some((parent, AGENT_LEAF)) if !parent.is_empty() => parent,
        _ => own,
    }
}

/// Removes the cgroup slots of the agent with slot id `slot_id` (see [`super::slots`]) under
/// `root`'s parent `name`, for a process in the same cgroups as that agent was (`/proc/self/cgroup`
/// text): what a benchmark or test that started an agent, and stopped it without a clean
/// shutdown, leaves behind. Whatever still runs in them is killed. Returns how many went.
pub fn remove_agent_slots(root: &Path, proc_self_cgroup: &str, name: &str, slot_id: &str) -> usize {
    let parents: Vec<PathBuf> = if root.join("cgroup.controllers").exists() {
        let own = proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::"));
        own.map(|o| root.join(relative(v2_own(o))).join(name)).into_iter().collect()
    } else {
        ["memory", "cpu", "pids", "cpuset"]
            .iter()
            .filter_map(|ctl| v1_own(proc_self_cgroup, ctl).map(|own| root.join(ctl).join(relative(own)).join(name)))
            .collect()
    };
    let mut removed = 0;
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(&parent) else { continue };
        for entry in entries.flatten() {
            let is_slot = entry.file_name().to_str().is_some_and(|n| super::slots::slot_number(slot_id, n).is_some());
            if is_slot {
                let plan = CgroupPlan { dirs: vec![entry.path()], ..CgroupPlan::default() };
                if plan.remove(Duration::from_millis(500)).is_ok() {
                    removed += 1;
                }
            }
        }
    }
    removed
}

fn relative(own: &str) -> &str {
    own.trim_start_matches('/')
}

/// A cgroup file's text in as few system calls as it takes: open, one read, close. The kernel
/// fills the buffer as far as the text goes, so a short read is the whole of it (what
/// `read_to_string` would learn with a `statx` and a second read, per file, per job).
fn read_small(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = [0u8; 512];
    let mut text = Vec::new();
    loop {
        let n = f.read(&mut buf)?;
        text.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            break;
        }
    }
    String::from_utf8(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn read_trimmed(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(io_err(path))
}

/// Writes `value` to a file of `/proc/self` with open, write and close only: async-signal-safe,
/// for a forked child.
fn write_proc_self(path: &std::ffi::CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the descriptor is closed on every path out.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, value.as_ptr().cast(), value.len());
        let err = (n < 0).then(io::Error::last_os_error);
        libc::close(fd);
        err.map_or(Ok(()), Err)
    }
}

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v2 hierarchy: the root with its controllers, the agent's cgroup `/svc/agent.service`.
    fn fake_v2(controllers: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        let own = t.path().join("svc/agent.service");
        std::fs::create_dir_all(&own).expect("mkdir");
        std::fs::write(t.path().join("cgroup.controllers"), controllers).expect("write");
        std::fs::write(own.join("cgroup.controllers"), controllers).expect("write");
        std::fs::write(own.join("cgroup.subtree_control"), "").expect("write");
        std::fs::write(own.join("cgroup.procs"), "41\n42\n").expect("write");
        t
    }

    #[test]
    fn v2_moves_the_agent_to_a_leaf_enables_controllers_and_plans_limits() {
        let t = fake_v2("cpuset cpu io memory pids");
        let tree = CgroupTree::detect(t.path(), "0::/svc/agent.service\n", "convoy", false).expect("usable");
        assert_eq!(tree.version, CgroupVersion::V2);
        let own = t.path().join("svc/agent.service");
        // The fake file system keeps only the last write; the kernel would list both pids.
        assert_eq!(std::fs::read_to_string(own.join("agent/cgroup.procs")).expect("leaf"), "42");
        // A restarted agent found in the leaf uses the same parent.
        let again = CgroupTree::detect(t.path(), "0::/svc/agent.service/agent\n", "convoy", false).expect("usable");
        assert_eq!(again, tree);
        assert_eq!(std::fs::read_to_string(own.join("cgroup.subtree_control")).expect("r"), "+memory +cpu +pids");
        assert_eq!(
            std::fs::read_to_string(own.join("convoy/cgroup.subtree_control")).expect("r"),
            "+memory +cpu +pids"
        );
        let limits =
            JobLimits { memory_bytes: Some(1 << 30), cpu_millis: Some(1500), pids_max: Some(64), cpus: vec![] };
        let plan = tree.plan("r1", &limits, false);
        let d = own.join("convoy/r1");
        assert_eq!(plan.dirs, std::slice::from_ref(&d));
        assert_eq!(
            plan.settings,
            [
                (d.join("memory.max"), "1073741824".to_string()),
                (d.join("memory.oom.group"), "1".to_string()),
                (d.join("cpu.max"), "150000 100000".to_string()),
                (d.join("pids.max"), "64".to_string()),
            ]
        );
        // The supervisor's side on the fake: files written, procs opened, OOMs counted.
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("cgroup.procs"), "").expect("write");
        let _join = plan.create().expect("create");
        assert_eq!(std::fs::read_to_string(d.join("cpu.max")).expect("r"), "150000 100000");
        assert_eq!(plan.oom_kills(), 0);
        std::fs::write(d.join("memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n").expect("write");
        assert_eq!(plan.oom_kills(), 1);
    }

    #[test]
    fn a_reused_slot_gets_every_limit_written_a_missing_one_as_none() {
        let t = fake_v2("cpuset cpu io memory pids");
        std::fs::create_dir_all(t.path().join("svc/agent.service/convoy")).expect("mkdir");
        std::fs::write(t.path().join("svc/agent.service/convoy/memory.swap.max"), "").expect("write");
        let tree = CgroupTree::detect(t.path(), "0::/svc/agent.service\n", "convoy", true).expect("usable");
        let d = t.path().join("svc/agent.service/convoy/slot-x-0");
        let plan = tree.plan("slot-x-0", &JobLimits::default(), true);
        assert!(plan.reused);
        assert_eq!(
            plan.settings,
            [
                (d.join("memory.max"), "max".to_string()),
                (d.join("memory.swap.max"), "max".to_string()),
                (d.join("memory.oom.group"), "0".to_string()),
                (d.join("cpu.max"), "max 100000".to_string()),
                (d.join("pids.max"), "max".to_string()),
                (d.join("cpuset.cpus"), String::new()),
            ]
        );
        // A cgroup of its own starts without limits: nothing to reset.
        assert!(tree.plan("r9", &JobLimits::default(), false).settings.is_empty());

        let r = t.path().join("v1");
        for ctl in ["memory", "cpu", "pids"] {
            std::fs::create_dir_all(r.join(ctl).join("convoy")).expect("mkdir");
            std::fs::write(r.join(ctl).join("cgroup.procs"), "").expect("write");
        }
        std::fs::write(r.join("memory/convoy/memory.memsw.limit_in_bytes"), "").expect("write");
        let v1 = CgroupTree::detect(&r, "4:memory:/\n2:cpu:/\n3:pids:/\n", "convoy", false).expect("usable");
        let plan = v1.plan("slot-x-1", &JobLimits::default(), true);
        let (mem, cpu, pids) =
            (r.join("memory/convoy/slot-x-1"), r.join("cpu/convoy/slot-x-1"), r.join("pids/convoy/slot-x-1"));
        assert_eq!(
            plan.settings,
            [
                (mem.join("memory.limit_in_bytes"), "-1".to_string()),
                (mem.join("memory.memsw.limit_in_bytes"), "-1".to_string()),
                (cpu.join("cpu.cfs_quota_us"), "-1".to_string()),
                (pids.join("pids.max"), "max".to_string()),
            ]
        );
    }

    #[test]
    fn limits_known_to_be_in_place_are_neither_read_nor_written() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = t.path().join("slot");
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("cgroup.procs"), "").expect("write");
        std::fs::write(d.join("pids.max"), "64").expect("write");
        let mut plan = CgroupPlan {
            dirs: vec![d.clone()],
            reused: true,
            settings: vec![(d.join("pids.max"), "128".into())],
            ..CgroupPlan::default()
        };
        plan.settings_in_place = true;
        plan.create().expect("create");
        assert_eq!(std::fs::read_to_string(d.join("pids.max")).expect("read"), "64");
        plan.settings_in_place = false;
        plan.create().expect("create");
        assert_eq!(std::fs::read_to_string(d.join("pids.max")).expect("read"), "128");
    }

    #[test]
    fn emptying_a_slot_waits_for_its_processes_and_gives_up_after_the_patience() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = t.path().join("slot");
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("cgroup.procs"), "").expect("write");
        let plan = CgroupPlan { dirs: vec![d.clone()], reused: true, ..CgroupPlan::default() };
        assert!(plan.empty(Duration::from_millis(50)));
        // A pid no process has (above pid_max): it never leaves, so the slot is stuck.
        std::fs::write(d.join("cgroup.procs"), "2147483647\n").expect("write");
        let start = Instant::now();
        assert!(!plan.empty(Duration::from_millis(50)));
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn v2_without_delegated_controllers_is_unavailable() {
        let t = fake_v2("cpu io");
        let e = CgroupTree::detect(t.path(), "0::/svc/agent.service\n", "convoy", false).unwrap_err();
        assert!(e.to_string().contains("Delegate=yes") && e.to_string().contains("\"memory\""), "{e}");
    }

    #[test]
    fn v1_uses_each_controllers_own_path_and_copies_cpusets() {
        let t = tempfile::tempdir().expect("tempdir");
        let r = t.path();
        for (ctl, own) in [("memory", "job/a"), ("cpu", ""), ("pids", ""), ("cpuset", "")] {
            std::fs::create_dir_all(r.join(ctl).join(own)).expect("mkdir");
            std::fs::write(r.join(ctl).join("cgroup.procs"), "").expect("write");
        }
        std::fs::write(r.join("cpuset/cpuset.cpus"), "0-3\n").expect("write");
        std::fs::write(r.join("cpuset/cpuset.mems"), "0\n").expect("write");
        std::fs::create_dir_all(r.join("memory/job/a/convoy")).expect("mkdir");
        std::fs::write(r.join("memory/job/a/convoy/memory.memsw.limit_in_bytes"), "").expect("write");
        let proc = "9:pids:/\n4:memory:/job/a\n3:cpuset:/\n1:cpu,cpuacct:/\n0::/\n";
        let tree = CgroupTree::detect(r, proc, "convoy", true).expect("usable");
        assert_eq!(tree.version, CgroupVersion::V1);
        assert_eq!(std::fs::read_to_string(r.join("cpuset/convoy/cpuset.cpus")).expect("r"), "0-3");
        let plan = tree.plan(
            "r2",
            &JobLimits { memory_bytes: Some(1000), cpu_millis: Some(1), pids_max: None, cpus: vec![1, 2] },
            false,
        );
        let (mem, cpu, set) = (r.join("memory/job/a/convoy/r2"), r.join("cpu/convoy/r2"), r.join("cpuset/convoy/r2"));
        assert_eq!(plan.dirs, [mem.clone(), cpu.clone(), r.join("pids/convoy/r2"), set.clone()]);
        assert_eq!(
            plan.settings,
            [
                (mem.join("memory.limit_in_bytes"), "1000".to_string()),
                (mem.join("memory.memsw.limit_in_bytes"), "1000".to_string()),
                // 1m is below the kernel's smallest quota.
                (cpu.join("cpu.cfs_quota_us"), "1000".to_string()),
                (set.join("cpuset.cpus"), "1,2".to_string()),
                (set.join("cpuset.mems"), "0".to_string()),
            ]
        );
        assert_eq!(plan.oom_counter, Some(mem.join("memory.oom_control")));
    }

    /// On v1 a slot's holder joins every hierarchy but memory, and a job forked inside then
    /// joins memory alone; the holder counts in the pids limit, and neither it nor the calling
    /// supervisor is ever taken for what the job left behind.
    #[test]
    fn a_v1_slot_holder_joins_all_but_memory_and_the_job_then_joins_memory_alone() {
        let t = tempfile::tempdir().expect("tempdir");
        let r = t.path();
        for ctl in ["memory", "cpu", "pids"] {
            std::fs::create_dir_all(r.join(ctl).join("convoy")).expect("mkdir");
            std::fs::write(r.join(ctl).join("cgroup.procs"), "").expect("write");
        }
        let v1 = CgroupTree::detect(r, "4:memory:/\n2:cpu:/\n3:pids:/\n", "convoy", false).expect("usable");
        let limits =
            JobLimits { memory_bytes: Some(1 << 26), cpu_millis: Some(1000), pids_max: Some(12), cpus: vec![] };
        let (mem, cpu, pids) =
            (r.join("memory/convoy/slot-x-0"), r.join("cpu/convoy/slot-x-0"), r.join("pids/convoy/slot-x-0"));
        let plan = v1.plan("slot-x-0", &limits, true);
        assert!(plan.settings.contains(&(pids.join("pids.max"), (12 + SLOT_OWN_PIDS).to_string())));
        // A cgroup of the run's own holds the job alone.
        assert!(
            v1.plan("r1", &limits, false).settings.contains(&(r.join("pids/convoy/r1/pids.max"), "12".to_string()))
        );

        // The holder makes the slot, writes the limits and joins cpu and pids ("0": itself).
        for d in [&mem, &cpu, &pids] {
            std::fs::create_dir_all(d).expect("mkdir");
            std::fs::write(d.join("cgroup.procs"), "").expect("write");
        }
        plan.enter_as_holder().expect("holder");
        assert_eq!(std::fs::read_to_string(mem.join("memory.limit_in_bytes")).expect("r"), "67108864");
        assert_eq!(std::fs::read_to_string(mem.join("cgroup.procs")).expect("r"), "");
        assert_eq!(std::fs::read_to_string(cpu.join("cgroup.procs")).expect("r"), "0");
        assert_eq!(std::fs::read_to_string(pids.join("cgroup.procs")).expect("r"), "0");

        // The supervisor it forked opens the memory cgroup alone for the job to join.
        let holder = 4_000_000;
        let inside = CgroupPlan { holder: Some(holder), settings_in_place: true, ..plan.clone() };
        let join = inside.create().expect("create");
        assert_eq!(join.procs.len(), 1);
        assert!(!join.spared, "on v1 nothing of the slot's own is in its memory cgroup");
        assert_eq!(plan.create().expect("create").procs.len(), 3, "without a holder the job joins all three");

        // Left-behind processes are the job's only: not the caller, not the holder.
        let me = std::process::id() as i32;
        std::fs::write(cpu.join("cgroup.procs"), format!("{me}\n{holder}\n77\n")).expect("write");
        assert_eq!(inside.job_pids(&cpu), [77]);
        assert_eq!(plan.job_pids(&cpu), [me, holder, 77]);
        std::fs::write(mem.join("cgroup.procs"), "").expect("write");
        assert!(inside.empty(Duration::ZERO));
        std::fs::write(mem.join("cgroup.procs"), "77\n").expect("write");
        assert!(!inside.empty(Duration::ZERO));
    }

    #[test]
    fn v1_without_a_controller_is_unavailable() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(t.path().join("memory")).expect("mkdir");
        std::fs::write(t.path().join("memory/cgroup.procs"), "").expect("write");
        let e = CgroupTree::detect(t.path(), "4:memory:/\n", "convoy", false).unwrap_err();
        assert!(e.to_string().contains("missing: cpu, pids"), "{e}");
    }
}
