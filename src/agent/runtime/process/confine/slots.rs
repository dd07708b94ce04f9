//! Cgroup slots: the agent keeps its jobs' cgroups and gives each new job a free one, instead of
//! making a cgroup for every job and removing it at the end. Creating and removing a cgroup is
//! what confinement costs most (v1: a directory in three hierarchies, and the kernel tearing a
//! memory cgroup down), while a kept one only has its limits written again. Slots left free for
//! a while are removed, so an idle agent holds no cgroups of its jobs.
//!
//! This is the bookkeeping only: which slot a run holds, which are free since when, which must
//! not be given again (something of an earlier job would not leave).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

/// The file in the agent's data directory that holds the agent's slot id.
pub const SLOT_ID_FILE: &str = "cgroup-slot-id";

/// The name of slot `n` of the agent `agent` (its slot id) under the jobs' parent cgroup. The
/// id keeps two agents on one machine (tests, benchmarks) out of each other's slots.
pub fn slot_name(agent: &str, n: u32) -> String {
    format!("slot-{agent}-{n}")
}

/// The slot number of a cgroup named by [`slot_name`] for `agent`.
pub fn slot_number(agent: &str, name: &str) -> Option<u32> {
    name.strip_prefix("slot-")?.strip_prefix(agent)?.strip_prefix('-')?.parse().ok()
}

/// The agent's slot id: read from `data_dir`, or made (8 random hex digits) and stored there on
/// first start, so that a restarted agent finds its slots again.
pub fn agent_slot_id(data_dir: &std::path::Path) -> std::io::Result<String> {
    let file = data_dir.join(SLOT_ID_FILE);
    match std::fs::read_to_string(&file) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 4];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = data_dir.join(format!(".{SLOT_ID_FILE}.tmp"));
    std::fs::write(&tmp, &id)?;
    std::fs::rename(&tmp, &file)?;
    Ok(id)
}

/// Which slots exist, who holds them, and since when the free ones are free.
#[derive(Debug)]
pub struct SlotPool<K> {
    held: HashMap<K, u32>,
    /// Free slots with the time they became free.
    free: BTreeMap<u32, Instant>,
    /// Slots that kept a process of an earlier job: never given again; removed when they empty.
    stuck: BTreeSet<u32>,
    /// Numbers below `next` whose cgroups do not exist (removed).
    unmade: BTreeSet<u32>,
    /// The number after the highest one in use.
    next: u32,
}

impl<K> Default for SlotPool<K> {
    fn default() -> Self {
        Self { held: HashMap::new(), free: BTreeMap::new(), stuck: BTreeSet::new(), unmade: BTreeSet::new(), next: 0 }
    }
}

impl<K: std::hash::Hash + Eq + Clone> SlotPool<K> {
    /// Gives `key` the lowest free slot (its cgroup exists), or else the lowest number whose
    /// cgroup is still to be made.
    pub fn take(&mut self, key: K) -> u32 {
        if let Some(&n) = self.held.get(&key) {
            return n;
        }
        let n = match (self.free.pop_first(), self.unmade.pop_first()) {
            (Some((n, _)), unmade) => {
                if let Some(u) = unmade {
                    self.unmade.insert(u);
                }
                n
            }
            (None, Some(n)) => n,
            (None, None) => {
                self.next += 1;
                self.next - 1
            }
        };
        self.held.insert(key, n);
        n
    }

    /// Records that slot `n`'s cgroup exists, left by an earlier agent: free unless a run found
    /// at recovery holds it.
    pub fn adopt(&mut self, n: u32, now: Instant) {
        if !self.held.values().any(|h| *h == n) {
            self.grow_to(n);
            self.free.insert(n, now);
        }
    }

    /// Records that `key` holds slot `n` (a run found at recovery).
    pub fn hold(&mut self, key: K, n: u32) {
        self.free.remove(&n);
        self.stuck.remove(&n);
        self.grow_to(n);
        self.held.insert(key, n);
    }

    /// Makes `n` a number below `next`, the ones skipped counted as unmade.
    fn grow_to(&mut self, n: u32) {
        self.unmade.remove(&n);
        while self.next <= n {
            if self.next < n {
                self.unmade.insert(self.next);
            }
            self.next += 1;
        }
    }

    /// The slot `key` holds.
    pub fn of(&self, key: &K) -> Option<u32> {
        self.held.get(key).copied()
    }

    /// `key` is done with its slot: free again at `now`, or stuck when a process of the job
    /// would not leave it.
    pub fn release(&mut self, key: &K, stuck: bool, now: Instant) -> Option<u32> {
        let n = self.held.remove(key)?;
        if stuck {
            self.stuck.insert(n);
        } else {
            self.free.insert(n, now);
        }
        Some(n)
    }

    /// Free slots that became free at or before `before`, and the stuck ones: the ones to remove.
    pub fn removable(&self, before: Instant) -> Vec<u32> {
        let idle = self.free.iter().filter(|(_, since)| **since <= before).map(|(n, _)| *n);
        idle.chain(self.stuck.iter().copied()).collect()
    }

    /// Slot `n` was removed: it is neither free nor stuck any more, and may be made again.
    pub fn removed(&mut self, n: u32) {
        self.free.remove(&n);
        self.stuck.remove(&n);
        if n < self.next && !self.held.values().any(|h| *h == n) {
            self.unmade.insert(n);
        }
        // Keep numbers low: give back the top of the range.
        while self.next > 0 && self.unmade.remove(&(self.next - 1)) {
            self.next -= 1;
        }
    }

    /// Takes slot `n` out of the free (or stuck) ones to remove its cgroup; false when it is no
    /// longer there (a run took it meanwhile).
    pub fn start_removing(&mut self, n: u32) -> bool {
        self.free.remove(&n).is_some() || self.stuck.remove(&n)
    }

    /// Slot `n` could not be removed because something is in it: keep it out of use.
    pub fn stuck(&mut self, n: u32) {
        self.free.remove(&n);
        self.stuck.insert(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn slot_names_carry_the_agents_id_and_the_id_is_kept_in_the_data_dir() {
        assert_eq!(slot_name("0a1b2c3d", 7), "slot-0a1b2c3d-7");
        assert_eq!(slot_number("0a1b2c3d", "slot-0a1b2c3d-7"), Some(7));
        assert_eq!(slot_number("0a1b2c3d", "slot-ffffffff-7"), None);
        assert_eq!(slot_number("0a1b2c3d", "01JABCDEF"), None);
        let t = tempfile::tempdir().expect("tempdir");
        let id = agent_slot_id(t.path()).expect("made");
        assert_eq!(id.len(), 8);
        assert_eq!(agent_slot_id(t.path()).expect("read"), id);
        let other = tempfile::tempdir().expect("tempdir");
        assert_ne!(agent_slot_id(other.path()).expect("made"), id);
    }

    #[test]
    fn runs_get_the_lowest_free_slot_and_stuck_ones_are_never_given_again() {
        let t0 = Instant::now();
        let mut p: SlotPool<&str> = SlotPool::default();
        assert_eq!((p.take("a"), p.take("b"), p.take("c")), (0, 1, 2));
        assert_eq!(p.take("a"), 0, "a run asking again keeps its slot");
        assert_eq!(p.release(&"b", false, t0), Some(1));
        assert_eq!(p.release(&"a", true, t0), Some(0));
        assert_eq!(p.release(&"a", false, t0), None);
        // 1 is free, 0 is stuck: the next run gets 1, then a new one.
        assert_eq!((p.take("d"), p.take("e")), (1, 3));
        assert_eq!(p.of(&"e"), Some(3));
        assert_eq!(p.removable(t0), vec![0]);
        assert!(p.start_removing(0));
        p.removed(0);
        assert_eq!(p.take("f"), 0, "a removed slot may be made again");
    }

    #[test]
    fn only_slots_idle_long_enough_are_removed_and_numbers_shrink_back() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        let mut p: SlotPool<u32> = SlotPool::default();
        for k in 0..4 {
            p.take(k);
        }
        p.release(&3, false, t0);
        p.release(&2, false, t1);
        assert_eq!(p.removable(t0), vec![3]);
        assert_eq!(p.removable(t1), vec![2, 3]);
        assert!(p.start_removing(3) && p.start_removing(2));
        assert!(!p.start_removing(2), "being removed: not free any more");
        assert_eq!(p.take(8), 4, "a slot being removed is not given");
        p.release(&8, false, t1);
        p.removed(3);
        p.removed(2);
        assert!(p.start_removing(4));
        p.removed(4);
        assert_eq!(p.take(9), 2, "numbering went back to the highest slot in use");
        // A slot that cannot be removed because a process is in it is stuck, not free.
        p.release(&9, false, t0);
        p.stuck(2);
        assert_eq!(p.take(10), 3);
        assert_eq!(p.removable(t1), vec![2]);
    }

    #[test]
    fn slots_found_at_recovery_are_held_and_the_others_left_on_disk_are_free() {
        let t0 = Instant::now();
        let mut p: SlotPool<&str> = SlotPool::default();
        p.hold("old", 5);
        for n in [1, 5, 7] {
            p.adopt(n, t0);
        }
        assert_eq!(p.of(&"old"), Some(5));
        assert_eq!(p.removable(t0), vec![1, 7], "5 is held, not free");
        // Existing cgroups first, then the lowest number still to be made.
        assert_eq!((p.take("a"), p.take("b"), p.take("c"), p.take("d")), (1, 7, 0, 2));
        p.release(&"b", false, t0);
        assert!(p.start_removing(7));
        p.removed(7);
        assert_eq!(p.take("e"), 3, "7 was the top: numbering shrank to 6, and 3 is the lowest unmade");
    }
}
