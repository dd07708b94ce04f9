//! Free space on a file system, and recognising a full disk in an I/O error: what the server's
//! disk guard, Raft's snapshot builder and the agent's run directories share.

use std::io;
use std::path::Path;

/// Bytes available to unprivileged writers on `dir`'s file system.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: statvfs fills the zeroed struct for a NUL-terminated path it only reads.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// True if `e` (or the I/O error it wraps) says the disk is full or the quota is used up.
pub fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull
        || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || e.get_ref().and_then(|inner| inner.downcast_ref::<io::Error>()).is_some_and(is_disk_full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_directory_has_free_space_and_a_full_disk_is_recognised_through_wrapping() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
        let full = io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(is_disk_full(&full));
        assert!(is_disk_full(&io::Error::other(full)));
        assert!(!is_disk_full(&io::Error::from_raw_os_error(libc::EACCES)));
    }
}
