//! The faults of a fault run: what each does to the fleet, how long it lasts, and how it heals.

use super::fleet::{DISK_RESERVE, Fleet, status};
use super::workload::uniform;
use anyhow::{Context, bail};
use rand_core::Rng;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    /// kill -9 of the leader, started again after a while.
    KillLeader,
    /// kill -9 of a follower, started again after a while.
    KillFollower,
    /// kill -9 of an agent, started again after a while.
    KillAgent,
    /// SIGSTOP of the leader, SIGCONT 1 to `max_hold` seconds later.
    PauseLeader,
    /// SIGSTOP of a follower, then SIGCONT.
    PauseFollower,
    /// The leader cut off from every peer (blackhole routes both ways); clients still reach it.
    PartitionLeader,
    /// One follower cut off from the leader alone.
    PartitionFollower,
    /// A minority of the servers cut off from the majority.
    PartitionMinority,
    /// One server's data directory filled: below its reserve, or to the last byte.
    DiskFull,
    /// A follower's data directory wiped: it is removed from the cluster and added again.
    WipeRejoin,
    /// A spare server added to the cluster (`convoy cluster add`), then removed.
    Membership,
}

impl Kind {
    /// Every kind.
    pub(super) const ALL: [Kind; 11] = [
        Kind::KillLeader,
        Kind::KillFollower,
        Kind::KillAgent,
        Kind::PauseLeader,
        Kind::PauseFollower,
        Kind::PartitionLeader,
        Kind::PartitionFollower,
        Kind::PartitionMinority,
        Kind::DiskFull,
        Kind::WipeRejoin,
        Kind::Membership,
    ];

    /// Its name in figures and flags.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::KillLeader => "kill_leader",
            Kind::KillFollower => "kill_follower",
            Kind::KillAgent => "kill_agent",
            Kind::PauseLeader => "pause_leader",
            Kind::PauseFollower => "pause_follower",
            Kind::PartitionLeader => "partition_leader",
            Kind::PartitionFollower => "partition_follower",
            Kind::PartitionMinority => "partition_minority",
            Kind::DiskFull => "disk_full",
            Kind::WipeRejoin => "wipe_rejoin",
            Kind::Membership => "membership",
        }
    }

    /// The kind named `s`.
    pub(super) fn parse(s: &str) -> anyhow::Result<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s.trim()).with_context(|| {
            let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
            format!("--kinds: unknown fault kind {s:?} (known: {})", names.join(", "))
        })
    }

    /// Whether this machine can inject it: partitions need network namespaces, a full disk a
    /// tmpfs of its own (both root).
    pub(super) fn possible(self, partitions: bool, disks: bool) -> bool {
        match self {
            Kind::PartitionLeader | Kind::PartitionFollower | Kind::PartitionMinority => partitions,
            Kind::DiskFull => disks,
            _ => true,
        }
    }
}

/// A fault as injected: its kind, target in words, and the servers not on the majority side.
pub(super) struct Injected {
    pub target: String,
    pub minority: Vec<usize>,
    healing: Healing,
}

/// What healing a fault takes.
enum Healing {
    StartServer(usize),
    StartAgent(usize),
    Resume(usize),
    Reconnect,
    Unfill(usize),
    Nothing,
    RemoveSpare(usize),
}

/// Waits until the servers in the cluster agree on a serving leader; its index.
pub(super) async fn leader(fleet: &Mutex<Fleet>, http: &reqwest::Client, within: Duration) -> anyhow::Result<usize> {
    let deadline = Instant::now() + within;
    loop {
        let members: Vec<(usize, String)> = {
            let f = fleet.lock().await;
            f.members.iter().filter(|m| m.joined && m.child.is_some()).map(|m| (m.index, m.url.clone())).collect()
        };
        let mut named = Vec::new();
        let mut serving = None;
        for (i, url) in &members {
            let st = status(http, url).await;
            named.push(st.as_ref().and_then(|s| s["leader"].as_u64()));
            if st.as_ref().is_some_and(|s| s["serving"] == true) {
                serving = Some(*i);
            }
        }
        if let Some(l) = serving {
            let agreeing = named.iter().filter(|n| **n == Some(l as u64 + 1)).count();
            if agreeing * 2 > members.len() {
                return Ok(l);
            }
        }
        if Instant::now() > deadline {
            bail!("no serving leader that a majority follows within {within:?}: {named:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A random member of the cluster other than `not`.
fn other(fleet: &Fleet, not: usize, rng: &mut impl Rng) -> usize {
    let others: Vec<usize> = fleet.members.iter().filter(|m| m.joined && m.index != not).map(|m| m.index).collect();
    others[(rng.next_u64() % others.len() as u64) as usize]
}

/// How long a fault lasts: 1 s to `max` seconds.
fn hold(rng: &mut impl Rng, max: f64) -> Duration {
    Duration::from_secs_f64(uniform(rng, 1.0, max.max(1.0)))
}

/// Injects a fault of `kind`; returns it and how long to hold it.
pub(super) async fn inject(
    kind: Kind,
    fleet: &Mutex<Fleet>,
    http: &reqwest::Client,
    rng: &mut impl Rng,
    max_hold: f64,
) -> anyhow::Result<(Injected, Duration)> {
    let l = leader(fleet, http, Duration::from_secs(30)).await?;
    let held = hold(rng, max_hold);
    let mut f = fleet.lock().await;
    let injected = match kind {
        Kind::KillLeader | Kind::KillFollower => {
            let t = if kind == Kind::KillLeader { l } else { other(&f, l, rng) };
            f.kill(t);
            Injected { target: format!("server {}", t + 1), minority: vec![t], healing: Healing::StartServer(t) }
        }
        Kind::KillAgent => {
            let a = (rng.next_u64() % f.agents.len().max(1) as u64) as usize;
            f.kill_agent(a);
            Injected { target: format!("agent {a}"), minority: vec![], healing: Healing::StartAgent(a) }
        }
        Kind::PauseLeader | Kind::PauseFollower => {
            let t = if kind == Kind::PauseLeader { l } else { other(&f, l, rng) };
            f.signal(t, libc::SIGSTOP);
            Injected { target: format!("server {}", t + 1), minority: vec![t], healing: Healing::Resume(t) }
        }
        Kind::PartitionLeader | Kind::PartitionFollower | Kind::PartitionMinority => {
            let joined: Vec<usize> = f.members.iter().filter(|m| m.joined).map(|m| m.index).collect();
            let (side, links) = match kind {
                Kind::PartitionLeader => (vec![l], joined.iter().filter(|j| **j != l).map(|j| (l, *j)).collect()),
                Kind::PartitionFollower => {
                    let t = other(&f, l, rng);
                    (vec![t], vec![(t, l)])
                }
                _ => {
                    let mut rest = joined.clone();
                    let mut side = Vec::new();
                    while side.len() < (joined.len() - 1) / 2 {
                        side.push(rest.remove((rng.next_u64() % rest.len() as u64) as usize));
                    }
                    let links = side.iter().flat_map(|s| rest.iter().map(move |r| (*s, *r))).collect();
                    (side, links)
                }
            };
            for (a, b) in links {
                f.net.cut(a, b)?;
            }
            let names: Vec<String> = side.iter().map(|s| (s + 1).to_string()).collect();
            // A follower cut from the leader alone still reaches a majority.
            let minority = if kind == Kind::PartitionFollower { vec![] } else { side };
            Injected { target: format!("servers {}", names.join(", ")), minority, healing: Healing::Reconnect }
        }
        Kind::DiskFull => {
            let t = other(&f, usize::MAX, rng);
            let left = if rng.next_u64().is_multiple_of(2) { DISK_RESERVE / 2 } else { 0 };
            if let Some(fs) = &f.disks[t] {
                fs.fill(left);
            }
            let target = format!("server {} ({left} bytes left)", t + 1);
            Injected { target, minority: vec![], healing: Healing::Unfill(t) }
        }
        Kind::WipeRejoin => {
            let t = other(&f, l, rng);
            f.kill(t);
            let leader_url = f.members[l].url.clone();
            drop(f);
            remove(http, &leader_url, t).await?;
            let mut f = fleet.lock().await;
            f.wipe(t)?;
            f.start(t)?;
            let (url, addr) = (leader_url, f.members[t].url.clone());
            drop(f);
            add(http, &url, t, &addr).await?;
            let injected =
                Injected { target: format!("server {}", t + 1), minority: vec![t], healing: Healing::Nothing };
            return Ok((injected, Duration::ZERO));
        }
        Kind::Membership => {
            let spare = f.members.len() - 1;
            f.start(spare)?;
            let (url, addr) = (f.members[l].url.clone(), f.members[spare].url.clone());
            drop(f);
            add(http, &url, spare, &addr).await?;
            fleet.lock().await.members[spare].joined = true;
            let target = format!("server {} added", spare + 1);
            return Ok((Injected { target, minority: vec![spare], healing: Healing::RemoveSpare(spare) }, held));
        }
    };
    // A kill is healed sooner: a service manager restarts a crashed server within seconds.
    let held = if matches!(kind, Kind::KillLeader | Kind::KillFollower | Kind::KillAgent) {
        held.min(Duration::from_secs(5))
    } else {
        held
    };
    Ok((injected, held))
}

/// Heals a fault.
pub(super) async fn heal(fault: &Injected, fleet: &Mutex<Fleet>, http: &reqwest::Client) -> anyhow::Result<()> {
    let mut f = fleet.lock().await;
    match fault.healing {
        Healing::StartServer(t) => f.start(t)?,
        Healing::StartAgent(a) => f.start_agent(a)?,
        Healing::Resume(t) => f.signal(t, libc::SIGCONT),
        Healing::Reconnect => f.net.heal()?,
        Healing::Unfill(t) => {
            if let Some(fs) = &f.disks[t] {
                fs.unfill();
            }
        }
        Healing::Nothing => {}
        Healing::RemoveSpare(spare) => {
            drop(f);
            let l = leader(fleet, http, Duration::from_secs(30)).await?;
            let url = fleet.lock().await.members[l].url.clone();
            remove(http, &url, spare).await?;
            let mut f = fleet.lock().await;
            f.members[spare].joined = false;
            f.kill(spare);
            f.wipe(spare)?;
        }
    }
    Ok(())
}

/// `convoy cluster add`: adds server `i` at `addr` through the leader at `url`, retrying while
/// the cluster cannot take it (an election, another change under way).
async fn add(http: &reqwest::Client, url: &str, i: usize, addr: &str) -> anyhow::Result<()> {
    let body = json!({"id": i + 1, "addr": addr});
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = http.post(format!("{url}/v1/cluster/members?wait_seconds=20")).json(&body).send().await;
        match r {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) if Instant::now() > deadline => bail!("adding server {}: {} {}", i + 1, r.status(), r.text().await?),
            Err(e) if Instant::now() > deadline => bail!("adding server {}: {e}", i + 1),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// `convoy cluster remove`: removes server `i` through the server at `url`, retrying likewise.
async fn remove(http: &reqwest::Client, url: &str, i: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = http.delete(format!("{url}/v1/cluster/members/{}", i + 1)).send().await;
        match r {
            Ok(r) if r.status().is_success() || r.status().as_u16() == 404 => return Ok(()),
            Ok(r) if Instant::now() > deadline => {
                bail!("removing server {}: {} {}", i + 1, r.status(), r.text().await?)
            }
            Err(e) if Instant::now() > deadline => bail!("removing server {}: {e}", i + 1),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}
