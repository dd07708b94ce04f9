//! Tests that need root (mounts, network namespaces, other users): whether they must run, and
//! small file systems of their own.

use std::path::{Path, PathBuf};

/// True if the environment variable `name` is `1`: the one convention of every
/// `CONVOY_REQUIRE_*` switch (CI sets them so that what they guard is never skipped there).
pub(crate) fn required(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// True if this process runs as root. Otherwise the test named `what` is skipped with a line
/// saying so, unless `CONVOY_REQUIRE_ROOT=1` (CI runs as root and sets it), where it fails.
pub(crate) fn root_or_skip(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(!required("CONVOY_REQUIRE_ROOT"), "{what} needs root, and CONVOY_REQUIRE_ROOT=1 says it must run");
    eprintln!("skipped: {what} needs root (mounts a file system of its own)");
    false
}

/// A tmpfs of a given size mounted on a directory; unmounted when dropped.
pub(crate) struct Tmpfs {
    pub path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`48m`) on `path` (created if missing).
    pub(crate) fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).expect("mount point");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .expect("mount runs");
        assert!(status.success(), "mount -t tmpfs on {} failed", path.display());
        Tmpfs { path: path.to_path_buf() }
    }

    /// Bytes free on it.
    pub(crate) fn free(&self) -> u64 {
        convoy::disk_space::free_bytes(&self.path).expect("statvfs")
    }

    /// Grows the file `name` on it until at most `left` bytes are free (or it is full).
    pub(crate) fn fill_until(&self, name: &str, left: u64) {
        use std::io::Write;
        let mut f =
            std::fs::OpenOptions::new().create(true).append(true).open(self.path.join(name)).expect("filler file");
        let chunk = vec![0u8; 256 << 10];
        while self.free() > left {
            let n = (self.free() - left).min(chunk.len() as u64) as usize;
            if f.write_all(&chunk[..n.max(4096)]).is_err() {
                break;
            }
        }
        let _ = f.sync_all();
    }

    /// Deletes the file `name` on it.
    pub(crate) fn remove(&self, name: &str) {
        std::fs::remove_file(self.path.join(name)).expect("remove filler");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a process that still holds a file there (a server being killed) does not keep it.
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
