//! The Unix user a job runs as (`[process] run_as`): which user a job gets, looking the user up,
//! and the switch in the forked child (`setgroups`, `setgid`, `setuid`, all async-signal-safe).

use serde::{Deserialize, Serialize};
use std::ffi::{CStr, CString};
use std::io;
use std::path::PathBuf;

/// A looked-up Unix user, as the supervisor needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnixUser {
    /// The user name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// All its groups (primary included), as `initgroups` would set them.
    pub groups: Vec<u32>,
    /// Its home directory.
    pub home: PathBuf,
}

/// Why a user could not be looked up.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// No such user in the passwd database.
    #[error("no Unix user {0:?} on this node")]
    Unknown(String),
    /// The name cannot be a user name.
    #[error("{0:?} is not a valid user name")]
    Invalid(String),
    /// The lookup itself failed.
    #[error("looking up user {name:?}: {source}")]
    Lookup {
        /// The user name.
        name: String,
        /// The error.
        source: io::Error,
    },
}

impl UnixUser {
    /// Looks `name` up (passwd and group databases; thread-safe).
    pub fn lookup(name: &str) -> Result<UnixUser, UserError> {
        let c_name = CString::new(name).map_err(|_| UserError::Invalid(name.to_string()))?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: a zeroed passwd is a valid out-parameter.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        loop {
            // SAFETY: all pointers are valid for the call; buf outlives the use of pwd's fields.
            let rc =
                unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
            if rc == libc::ERANGE && buf.len() < 1 << 20 {
                buf.resize(buf.len() * 4, 0);
                continue;
            }
            if rc != 0 {
                return Err(UserError::Lookup { name: name.into(), source: io::Error::from_raw_os_error(rc) });
            }
            break;
        }
        if result.is_null() {
            return Err(UserError::Unknown(name.to_string()));
        }
        let (uid, gid) = (pwd.pw_uid, pwd.pw_gid);
        // SAFETY: pw_dir points into buf, NUL-terminated by getpwnam_r.
        let home = unsafe { CStr::from_ptr(pwd.pw_dir) }.to_string_lossy().into_owned();
        let mut groups: Vec<libc::gid_t> = vec![0; 64];
        loop {
            let mut n = groups.len() as libc::c_int;
            // SAFETY: groups has room for n entries; getgrouplist writes at most n and says how many.
            let rc = unsafe { libc::getgrouplist(c_name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
            if rc >= 0 {
                groups.truncate(n.max(0) as usize);
                break;
            }
            if groups.len() >= 65536 {
                groups = vec![gid];
                break;
            }
            groups.resize((n.max(0) as usize).max(groups.len() * 2), 0);
        }
        Ok(UnixUser { name: name.to_string(), uid, gid, groups, home: PathBuf::from(home) })
    }

    /// Becomes this user: groups, then gid, then uid (after which no more changes are allowed).
    /// Async-signal-safe, for `pre_exec`.
    pub fn switch(&self) -> io::Result<()> {
        // The raw system calls, not glibc's wrappers: in a process that had threads, glibc
        // changes the ids of every thread it knows of, and a child started with CLONE_VM
        // (`spawn_confined`) shares the memory where the supervisor's threads are listed.
        // SAFETY: plain system calls on valid memory (groups lives as long as self).
        unsafe {
            let n =
                libc::c_long::try_from(self.groups.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            if libc::syscall(ids::SETGROUPS, n, self.groups.as_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(ids::SETGID, self.gid as libc::c_long) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(ids::SETUID, self.uid as libc::c_long) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The variables a login would set for this user.
    pub fn env(&self) -> [(String, String); 3] {
        [
            ("USER".into(), self.name.clone()),
            ("LOGNAME".into(), self.name.clone()),
            ("HOME".into(), self.home.to_string_lossy().into_owned()),
        ]
    }
}

/// Gives `path` to the user (its run directory and logs), without following symlinks.
pub(crate) fn chown(path: &std::path::Path, user: &UnixUser) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))
}

/// The system calls that set 32-bit ids: on 32-bit x86 and ARM the plain ones take 16 bits.
mod ids {
    #[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
    pub(super) use libc::{SYS_setgid as SETGID, SYS_setgroups as SETGROUPS, SYS_setuid as SETUID};
    #[cfg(any(target_arch = "x86", target_arch = "arm"))]
    pub(super) use libc::{SYS_setgid32 as SETGID, SYS_setgroups32 as SETGROUPS, SYS_setuid32 as SETUID};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_up_root_and_rejects_unknown_users() {
        let root = UnixUser::lookup("root").expect("root exists");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0), "{:?}", root.groups);
        let e = UnixUser::lookup("convoy-no-such-user-xyz").unwrap_err();
        assert_eq!(e.to_string(), "no Unix user \"convoy-no-such-user-xyz\" on this node");
        assert!(matches!(UnixUser::lookup("a\0b"), Err(UserError::Invalid(_))));
    }
}
