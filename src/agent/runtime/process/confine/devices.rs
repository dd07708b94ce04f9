//! Devices given to one job at a time: the node's GPUs, and its cores when jobs are pinned
//! (`cpuset`). The agent picks them when it starts a run and writes them into the run
//! directory (`devices.json`, atomically with the lease), so a restarted agent knows which are
//! taken and a supervisor started again uses the same.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};

/// What one run was given, as recorded in `devices.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// GPU indices (or UUIDs), as the job sees them in `CUDA_VISIBLE_DEVICES`.
    #[serde(default)]
    pub gpus: Vec<String>,
    /// Cores the job is pinned to.
    #[serde(default)]
    pub cpus: Vec<u32>,
    /// The cgroup slot the job runs in (see [`super::slots`]); none: a cgroup named after the
    /// run (agents before slots), or no cgroups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
}

impl Assignment {
    /// True if nothing was given.
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty() && self.cpus.is_empty() && self.slot.is_none()
    }

    /// `CUDA_VISIBLE_DEVICES` and `NVIDIA_VISIBLE_DEVICES` for a job on a node with GPUs: its own,
    /// or none (`void` for the NVIDIA container runtime) when it was given none.
    pub fn gpu_env(&self) -> [(String, String); 2] {
        let list = self.gpus.join(",");
        let nvidia = if list.is_empty() { "void".to_string() } else { list.clone() };
        [("CUDA_VISIBLE_DEVICES".into(), list), ("NVIDIA_VISIBLE_DEVICES".into(), nvidia)]
    }
}

/// The node's devices and who holds them.
#[derive(Debug, Default)]
pub(crate) struct DevicePool<K> {
    gpus: Vec<String>,
    cpus: Vec<u32>,
    held: HashMap<K, Assignment>,
}

/// Not enough free devices for a run.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{wanted} {what} wanted, {free} free of {total}")]
pub(crate) struct Shortage {
    /// `GPUs` or `cores`.
    pub what: &'static str,
    /// How many the job asked for.
    pub wanted: usize,
    /// How many are free.
    pub free: usize,
    /// How many the node has.
    pub total: usize,
}

impl<K: std::hash::Hash + Eq + Clone> DevicePool<K> {
    /// A pool of `gpus` and (for pinning) `cpus`, nothing held.
    pub(crate) fn new(gpus: Vec<String>, cpus: Vec<u32>) -> Self {
        Self { gpus, cpus, held: HashMap::new() }
    }

    /// The node's GPUs.
    pub(crate) fn gpus(&self) -> &[String] {
        &self.gpus
    }

    /// Takes `gpus` GPUs and `cpus` cores for `key` (the lowest free ones), or says what is short.
    pub(crate) fn take(&mut self, key: K, gpus: usize, cpus: usize) -> Result<Assignment, Shortage> {
        let used_g: BTreeSet<&String> = self.held.values().flat_map(|a| a.gpus.iter()).collect();
        let used_c: BTreeSet<u32> = self.held.values().flat_map(|a| a.cpus.iter().copied()).collect();
        let free_g: Vec<String> = self.gpus.iter().filter(|g| !used_g.contains(g)).cloned().collect();
        let free_c: Vec<u32> = self.cpus.iter().copied().filter(|c| !used_c.contains(c)).collect();
        if free_g.len() < gpus {
            return Err(Shortage { what: "GPUs", wanted: gpus, free: free_g.len(), total: self.gpus.len() });
        }
        if free_c.len() < cpus {
            return Err(Shortage { what: "cores", wanted: cpus, free: free_c.len(), total: self.cpus.len() });
        }
        let a = Assignment { gpus: free_g[..gpus].to_vec(), cpus: free_c[..cpus].to_vec(), slot: None };
        if !a.is_empty() {
            self.held.insert(key, a.clone());
        }
        Ok(a)
    }

    /// Records what a run found at recovery holds.
    pub(crate) fn hold(&mut self, key: K, a: Assignment) {
        if !a.is_empty() {
            self.held.insert(key, a);
        }
    }

    /// Frees what `key` held.
    pub(crate) fn release(&mut self, key: &K) {
        self.held.remove(key);
    }
}

/// The GPUs `nvidia-smi` lists (their indices), or none when it is absent or fails.
pub(crate) fn detect_gpus() -> Vec<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index", "--format=csv,noheader"])
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_get_disjoint_devices_until_released() {
        let mut p = DevicePool::new(vec!["0".into(), "1".into(), "2".into()], vec![0, 1, 2, 3]);
        let a = p.take(1, 2, 1).expect("free");
        assert_eq!(a, Assignment { gpus: vec!["0".into(), "1".into()], cpus: vec![0], slot: None });
        assert_eq!(p.take(2, 2, 0).unwrap_err(), Shortage { what: "GPUs", wanted: 2, free: 1, total: 3 });
        let b = p.take(2, 1, 3).expect("free");
        assert_eq!(b, Assignment { gpus: vec!["2".into()], cpus: vec![1, 2, 3], slot: None });
        assert_eq!(p.take(3, 0, 1).unwrap_err().to_string(), "1 cores wanted, 0 free of 4");
        p.release(&1);
        p.hold(4, Assignment { gpus: vec!["1".into()], cpus: vec![], slot: None });
        assert_eq!(p.take(3, 1, 1).expect("free"), Assignment { gpus: vec!["0".into()], cpus: vec![0], slot: None });
        assert_eq!(p.take(5, 0, 0).expect("nothing"), Assignment::default());
    }

    #[test]
    fn gpu_env_names_the_jobs_gpus_or_none() {
        let a = Assignment { gpus: vec!["1".into(), "3".into()], cpus: vec![], slot: None };
        assert_eq!(a.gpu_env()[0], ("CUDA_VISIBLE_DEVICES".to_string(), "1,3".to_string()));
        assert_eq!(a.gpu_env()[1], ("NVIDIA_VISIBLE_DEVICES".to_string(), "1,3".to_string()));
        assert_eq!(Assignment::default().gpu_env()[1].1, "void");
    }
}
