//! The processes of a fault run: `convoy server`s (one spare among them, for membership
//! changes), fake `convoy agent`s that journal their runs, and a small tmpfs under each server's
//! data directory (root) so that one disk can be filled. A server that exits without being told
//! to is started again, as systemd's `Restart=on-failure` would.

use super::net::Network;
use anyhow::{Context, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Free space each server keeps (`server.disk_reserve`) in a fault run.
pub(super) const DISK_RESERVE: u64 = 16 << 20;

/// A server of the run.
pub(super) struct Member {
    /// Its index; its node id is one more.
    pub index: usize,
    /// Its directory (configuration, log, data).
    pub dir: PathBuf,
    /// Its base URL.
    pub url: String,
    /// Its process, while it runs.
    pub child: Option<Child>,
    /// Stopped by the run on purpose: not to be started again until the run says so.
    pub held_down: bool,
    /// A member of the cluster (the spare is not, until added).
    pub joined: bool,
}

impl Member {
    /// Its data directory.
    pub(super) fn data(&self) -> PathBuf {
        self.dir.join("data")
    }
}

/// A fake agent of the run.
pub(super) struct AgentProc {
    /// Its directory (configuration, log, journal).
    pub dir: PathBuf,
    /// Its process, while it runs.
    pub child: Option<Child>,
}

/// A tmpfs mounted on a server's data directory.
pub(super) struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> anyhow::Result<Tmpfs> {
        std::fs::create_dir_all(path)?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .context("running mount")?
            .success();
        if !ok {
            bail!("mount -t tmpfs on {} failed", path.display());
        }
        Ok(Tmpfs { path: path.to_path_buf() })
    }

    /// Writes a filler file until at most `left` bytes are free.
    pub(super) fn fill(&self, left: u64) {
        use std::io::Write;
        let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(self.path.join("filler")) else {
            return;
        };
        let chunk = vec![0u8; 1 << 20];
        loop {
            let free = convoy::disk_space::free_bytes(&self.path).unwrap_or(0);
            if free <= left {
                break;
            }
            let n = ((free - left) as usize).clamp(4096, chunk.len());
            if f.write_all(&chunk[..n]).is_err() {
                break;
            }
        }
    }

    /// Removes the filler.
    pub(super) fn unfill(&self) {
        let _ = std::fs::remove_file(self.path.join("filler"));
    }

    /// Removes everything on it but the mount itself.
    fn wipe(&self) -> anyhow::Result<()> {
        for e in std::fs::read_dir(&self.path)? {
            let p = e?.path();
            if p.is_dir() { std::fs::remove_dir_all(&p)? } else { std::fs::remove_file(&p)? }
        }
        Ok(())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Everything the run started.
pub(super) struct Fleet {
    /// The servers, the spare last.
    pub members: Vec<Member>,
    /// The agents.
    pub agents: Vec<AgentProc>,
    /// Where the servers listen.
    pub net: Network,
    /// The servers' tmpfs, by index (none without root).
    pub disks: Vec<Option<Tmpfs>>,
    /// Times a server that exited by itself was started again.
    pub restarts: usize,
    exe: PathBuf,
}

/// Timings of the servers.
pub(super) struct Timings {
    /// `cluster.heartbeat_interval`, if not the default.
    pub heartbeat: Option<String>,
    /// `cluster.election_timeout`, if not the default.
    pub election: Option<String>,
}

impl Fleet {
    /// Prepares `servers` servers and one spare in `dir` (each on a tmpfs with `disks`), and
    /// `agents` agents; starts nothing.
    pub(super) fn prepare(
        dir: &Path,
        servers: usize,
        agents: usize,
        net: Network,
        disks: bool,
        timings: &Timings,
    ) -> anyhow::Result<Fleet> {
        let exe = std::env::current_exe().context("locating the convoy binary")?;
        let urls: Vec<String> = (0..=servers).map(|i| format!("http://{}", net.listen(i))).collect();
        let peers = |n: usize| {
            let list: Vec<String> = (0..n).map(|i| format!("{{ id = {}, addr = \"{}\" }}", i + 1, urls[i])).collect();
            format!("[{}]", list.join(", "))
        };
        let mut members = Vec::new();
        let mut mounts = Vec::new();
        for (i, url) in urls.iter().enumerate() {
            let spare = i == servers;
            let mdir = dir.join(format!("server-{}", i + 1));
            std::fs::create_dir_all(&mdir)?;
            let data = mdir.join("data");
            mounts.push(if disks { Some(Tmpfs::mount(&data, "256m")?) } else { None });
            // The spare's peers name the cluster and itself, so that it waits to be added.
            let peer_list = if spare { peers(servers + 1) } else { peers(servers) };
            let mut config = format!(
                "[server]\nlisten = \"{}\"\nadvertise = \"{}\"\nnode_id = {}\ndata_dir = \"{}\"\nplain_http = true\n\
                 disk_reserve = {DISK_RESERVE}\nexecutor_timeout = \"60s\"\n\n[scheduler]\nschedule_interval_min = \"50ms\"\n\
                 schedule_interval_max = \"500ms\"\n\n[auth]\nenabled = false\n\n[cluster]\npeers = {peer_list}\n",
                net.listen(i),
                url,
                i + 1,
                data.display()
            );
            if let Some(h) = &timings.heartbeat {
                config.push_str(&format!("heartbeat_interval = \"{h}\"\n"));
            }
            if let Some(e) = &timings.election {
                config.push_str(&format!("election_timeout = \"{e}\"\n"));
            }
            std::fs::write(mdir.join("convoy.toml"), &config)?;
            members.push(Member {
                index: i,
                dir: mdir,
                url: url.clone(),
                child: None,
                held_down: spare,
                joined: !spare,
            });
        }
        let servers_toml: Vec<String> = urls[..servers].iter().map(|u| format!("\"{u}\"")).collect();
        let mut agent_procs = Vec::new();
        for a in 0..agents {
            let adir = dir.join(format!("agent-{a}"));
            std::fs::create_dir_all(&adir)?;
            let toml = format!(
                "executor = \"agent-{a}\"\nservers = [{}]\ndata_dir = \"{}\"\nruntime = \"fake\"\nmax_backoff = \"1s\"\n\
                 poll_wait = \"5s\"\n[fake]\njournal = true\n[[fake.node_groups]]\ncount = 4\nname_prefix = \"a{a}n\"\n\
                 allocatable = {{ cpu = \"4\", memory = \"16Gi\" }}\n",
                servers_toml.join(", "),
                adir.join("data").display()
            );
            std::fs::write(adir.join("agent.toml"), toml)?;
            agent_procs.push(AgentProc { dir: adir, child: None });
        }
        Ok(Fleet { members, agents: agent_procs, net, disks: mounts, restarts: 0, exe })
    }

    /// Starts server `i`, in its namespace.
    pub(super) fn start(&mut self, i: usize) -> anyhow::Result<()> {
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new().create(true).append(true).open(m.dir.join("server.log"))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("server").arg("--config").arg(m.dir.join("convoy.toml"));
        cmd.env("NO_COLOR", "1").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log));
        self.net.place(i, &mut cmd)?;
        let child = cmd.spawn().context("starting convoy server")?;
        let m = &mut self.members[i];
        m.child = Some(child);
        m.held_down = false;
        Ok(())
    }

    /// kill -9 of server `i`; it stays down until started.
    pub(super) fn kill(&mut self, i: usize) {
        let m = &mut self.members[i];
        m.held_down = true;
        if let Some(mut c) = m.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `sig` to server `i`.
    pub(super) fn signal(&self, i: usize, sig: i32) {
        if let Some(c) = &self.members[i].child {
            // SAFETY: signalling a child process of this run.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// Deletes server `i`'s data (it must be down).
    pub(super) fn wipe(&mut self, i: usize) -> anyhow::Result<()> {
        match &self.disks[i] {
            Some(fs) => fs.wipe(),
            None => {
                let data = self.members[i].data();
                if data.exists() {
                    std::fs::remove_dir_all(&data)?;
                }
                Ok(())
            }
        }
    }

    /// Starts agent `a`.
    pub(super) fn start_agent(&mut self, a: usize) -> anyhow::Result<()> {
        let dir = self.agents[a].dir.clone();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("agent.log"))?;
        let child = Command::new(&self.exe)
            .args(["agent", "--config"])
            .arg(dir.join("agent.toml"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting convoy agent")?;
        self.agents[a].child = Some(child);
        Ok(())
    }

    /// kill -9 of agent `a`.
    pub(super) fn kill_agent(&mut self, a: usize) {
        if let Some(mut c) = self.agents[a].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again every server that exited by itself (a fatal storage error) and is not held
    /// down; says which.
    pub(super) fn supervise(&mut self) -> anyhow::Result<Vec<usize>> {
        let mut restarted = Vec::new();
        for i in 0..self.members.len() {
            let m = &mut self.members[i];
            let exited = match m.child.as_mut() {
                Some(c) => c.try_wait()?.is_some(),
                None => !m.held_down,
            };
            if exited && !m.held_down {
                m.child = None;
                self.start(i)?;
                self.restarts += 1;
                restarted.push(i);
            }
        }
        Ok(restarted)
    }

    /// The URLs of the servers in the cluster.
    pub(super) fn urls(&self) -> Vec<String> {
        self.members.iter().filter(|m| m.joined).map(|m| m.url.clone()).collect()
    }

    /// Stops everything (servers and agents), then the network and disks go with `self`.
    pub(super) fn stop_all(&mut self) {
        for a in 0..self.agents.len() {
            self.kill_agent(a);
        }
        for i in 0..self.members.len() {
            self.signal(i, libc::SIGCONT);
            self.kill(i);
        }
    }
}

impl Fleet {
    /// Stops everything, then unmounts the disks and removes the namespaces.
    pub(super) fn release(&mut self) {
        self.stop_all();
        self.disks.clear();
        self.net = Network::Loopback(Vec::new());
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// `GET /v1/cluster` of `url`, if it answers within half a second.
pub(super) async fn status(http: &reqwest::Client, url: &str) -> Option<Value> {
    let r = http.get(format!("{url}/v1/cluster")).timeout(Duration::from_millis(500)).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json().await.ok()
}
