//! Where the servers of a fault run listen: each in a network namespace of its own on a bridge
//! the run makes (root), so that links between servers can be cut with blackhole routes while
//! the clients and agents, outside, still reach every server; or, without root, on loopback
//! ports (no partitions then).

use anyhow::{Context, bail};
use std::os::fd::AsRawFd;
use std::process::Command;

/// The port every namespaced server listens on.
const PORT: u16 = 7070;

/// The servers' network.
pub(super) enum Network {
    /// One namespace per server on a bridge.
    Namespaces(Namespaces),
    /// Loopback, a port per server.
    Loopback(Vec<u16>),
}

impl Network {
    /// Namespaces for `n` servers if `want` (and root), else loopback ports.
    pub(super) fn new(n: usize, want: bool) -> anyhow::Result<Network> {
        if want {
            return Ok(Network::Namespaces(Namespaces::create(n)?));
        }
        let ports = (0..n)
            .map(|_| Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()))
            .collect::<anyhow::Result<Vec<u16>>>()?;
        Ok(Network::Loopback(ports))
    }

    /// The address server `i` listens on (and is reached at).
    pub(super) fn listen(&self, i: usize) -> String {
        match self {
            Network::Namespaces(ns) => format!("{}:{PORT}", ns.ip(i)),
            Network::Loopback(ports) => format!("127.0.0.1:{}", ports[i]),
        }
    }

    /// True if links can be cut.
    pub(super) fn can_partition(&self) -> bool {
        matches!(self, Network::Namespaces(_))
    }

    /// Makes `cmd` start in server `i`'s namespace.
    pub(super) fn place(&self, i: usize, cmd: &mut Command) -> anyhow::Result<()> {
        if let Network::Namespaces(ns) = self {
            ns.place(i, cmd)?;
        }
        Ok(())
    }

    /// Cuts the links between servers `a` and `b`, both ways.
    pub(super) fn cut(&self, a: usize, b: usize) -> anyhow::Result<()> {
        match self {
            Network::Namespaces(ns) => ns.cut(a, b),
            Network::Loopback(_) => bail!("links between loopback servers cannot be cut"),
        }
    }

    /// Restores every link.
    pub(super) fn heal(&self) -> anyhow::Result<()> {
        match self {
            Network::Namespaces(ns) => ns.heal(),
            Network::Loopback(_) => Ok(()),
        }
    }
}

/// Network namespaces `cvc<pid>-<i>` on the bridge `cvc<pid>br`, addresses `10.A.B.(10+i)`
/// (A and B from the pid, so that concurrent runs do not share a subnet).
pub(super) struct Namespaces {
    prefix: String,
    subnet: (u8, u8),
    count: usize,
}

/// Runs `ip` with `args`, failing with its error output.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Runs `ip` inside namespace `ns`.
fn ip_in(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut all = vec!["netns", "exec", ns, "ip"];
    all.extend_from_slice(args);
    ip(&all)
}

impl Namespaces {
    /// Makes the bridge and `n` namespaces, each with a veth pair on the bridge. Leftovers of
    /// runs whose process is gone are removed first.
    fn create(n: usize) -> anyhow::Result<Namespaces> {
        remove_stale();
        let pid = std::process::id();
        // Interface names hold at most 15 bytes: `cvc<pid>s<i>a` does for any pid and i < 10.
        let prefix = format!("cvc{pid}");
        let subnet = (200 + (pid % 50) as u8, ((pid / 50) % 250) as u8);
        let ns = Namespaces { prefix, subnet, count: n };
        ns.build().inspect_err(|_| ns.remove())?;
        Ok(ns)
    }

    fn build(&self) -> anyhow::Result<()> {
        let bridge = self.bridge();
        let (a, b) = self.subnet;
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("10.{a}.{b}.1/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..self.count {
            let (name, outer, inner) = (self.name(i), format!("{}s{i}a", self.prefix), format!("{}s{i}b", self.prefix));
            ip(&["netns", "add", &name])?;
            ip(&["link", "add", &outer, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &name])?;
            ip(&["link", "set", &outer, "master", &bridge])?;
            ip(&["link", "set", &outer, "up"])?;
            ip_in(&name, &["addr", "add", &format!("{}/24", self.ip(i)), "dev", &inner])?;
            ip_in(&name, &["link", "set", &inner, "up"])?;
            ip_in(&name, &["link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    fn bridge(&self) -> String {
        format!("{}br", self.prefix)
    }

    fn name(&self, i: usize) -> String {
        format!("{}-{i}", self.prefix)
    }

    fn ip(&self, i: usize) -> String {
        format!("10.{}.{}.{}", self.subnet.0, self.subnet.1, 10 + i)
    }

    /// Makes `cmd` join namespace `i` before it runs.
    fn place(&self, i: usize, cmd: &mut Command) -> anyhow::Result<()> {
        use std::os::unix::process::CommandExt;
        let path = format!("/run/netns/{}", self.name(i));
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        // SAFETY: setns is async-signal-safe; the descriptor stays open in `file`, which the
        // closure owns until the child has run it.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    fn cut(&self, a: usize, b: usize) -> anyhow::Result<()> {
        ip_in(&self.name(a), &["route", "replace", "blackhole", &format!("{}/32", self.ip(b))])?;
        ip_in(&self.name(b), &["route", "replace", "blackhole", &format!("{}/32", self.ip(a))])
    }

    fn heal(&self) -> anyhow::Result<()> {
        for i in 0..self.count {
            ip_in(&self.name(i), &["route", "flush", "type", "blackhole"])?;
        }
        Ok(())
    }

    /// Deletes the namespaces (their veth ends go with them) and the bridge.
    fn remove(&self) {
        for i in 0..self.count {
            let _ = ip(&["netns", "del", &self.name(i)]);
            let _ = ip(&["link", "del", &format!("{}s{i}a", self.prefix)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Removes the namespaces and bridges of fault runs whose process is gone.
fn remove_stale() {
    let alive = |owner: &str| owner.parse::<u32>().is_ok_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix("cvc") else { continue };
        let owner = rest.split('-').next().unwrap_or_default();
        if !alive(owner) {
            let _ = ip(&["netns", "del", name]);
        }
    }
    let Ok(out) = Command::new("ip").args(["-o", "link", "show", "type", "bridge"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split(':').nth(1).map(str::trim) else { continue };
        let Some(owner) = name.strip_prefix("cvc").and_then(|r| r.strip_suffix("br")) else { continue };
        if !alive(owner) {
            let _ = ip(&["link", "del", name]);
        }
    }
}
