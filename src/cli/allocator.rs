//! The binary's global allocator: mimalloc for the daemons and the heavy verbs, the system
//! allocator for the client and the process runtime's supervisors.
//!
//! The server allocates and frees many small buffers across threads on the submit path, where
//! glibc's malloc took about a fifth of its CPU, so the daemons use mimalloc. A client call is a
//! process that lives a few milliseconds: there mimalloc's arena set-up (reserving and faulting in
//! its first huge page) was the largest single cost of a `convoy submit`, and glibc's malloc is
//! the cheaper choice. The same goes for the supervisors of the process runtime (`agent-supervise`):
//! small processes forked for every job, which mostly sleep; without mimalloc's arenas in the
//! spawner each fork and exit has fewer pages to copy and free.
//!
//! The choice is made once, on the first allocation (before `main`, by the standard library's
//! start-up), from the process's own command line, and never changes: every block is freed by the
//! allocator that made it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;

/// The verbs whose processes allocate heavily across threads: they get mimalloc.
const MIMALLOC_VERBS: &[&[u8]] = &[b"server", b"agent", b"up", b"bench", b"simulate"];

/// Dispatches to mimalloc or the system allocator, as decided by the command line.
pub(crate) struct VerbAllocator;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Whether a command line (`/proc/self/cmdline`: arguments separated by NUL bytes, the program
/// first) runs one of [`MIMALLOC_VERBS`]. Any argument equal to such a verb counts, which may take a
/// client call with such a value (a queue called `server`) for a daemon: that only costs the
/// client its start-up time. A line that cannot be read gets mimalloc, the safe side for
/// a daemon.
pub(crate) fn wants_mimalloc(cmdline: Option<&[u8]>) -> bool {
    let Some(cmdline) = cmdline else { return true };
    cmdline.split(|b| *b == 0).skip(1).any(|arg| MIMALLOC_VERBS.contains(&arg))
}

/// Reads the first 4 KiB of `/proc/self/cmdline` without allocating (the allocator is not chosen
/// yet), and decides. The verb comes early in any command line `convoy` accepts.
#[cold]
fn decide() -> u8 {
    let mut buf = [0u8; 4096];
    // SAFETY: a NUL-terminated path, a buffer we own of the length given, and a descriptor we
    // close; none of these calls allocates.
    let len = unsafe {
        let fd = libc::open(c"/proc/self/cmdline".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            -1
        } else {
            let mut filled = 0usize;
            loop {
                let n = libc::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled);
                if n <= 0 {
                    break;
                }
                filled += n as usize;
                if filled == buf.len() {
                    break;
                }
            }
            libc::close(fd);
            filled as isize
        }
    };
    let cmdline = usize::try_from(len).ok().filter(|n| *n > 0).map(|n| &buf[..n]);
    let choice = if wants_mimalloc(cmdline) { MIMALLOC } else { SYSTEM };
    match CHOICE.compare_exchange(UNDECIDED, choice, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => choice,
        Err(already) => already,
    }
}

#[inline]
fn choice() -> u8 {
    match CHOICE.load(Ordering::Acquire) {
        UNDECIDED => decide(),
        chosen => chosen,
    }
}

// SAFETY: every call goes to one allocator, fixed before the first block is handed out, so each
// block is freed and resized by the allocator that made it; both allocators uphold GlobalAlloc.
unsafe impl GlobalAlloc for VerbAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { if choice() == MIMALLOC { mimalloc::MiMalloc.alloc(layout) } else { System.alloc(layout) } }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe {
            if choice() == MIMALLOC { mimalloc::MiMalloc.alloc_zeroed(layout) } else { System.alloc_zeroed(layout) }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the same allocator (the choice never changes).
        unsafe {
            if choice() == MIMALLOC { mimalloc::MiMalloc.dealloc(ptr, layout) } else { System.dealloc(ptr, layout) }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from the same allocator (the choice never changes).
        unsafe {
            if choice() == MIMALLOC {
                mimalloc::MiMalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wants_mimalloc;

    #[test]
    fn daemons_and_heavy_verbs_get_mimalloc_and_client_calls_do_not() {
        assert!(wants_mimalloc(Some(b"/usr/bin/convoy\0server\0--config\0s.toml\0")));
        assert!(wants_mimalloc(Some(b"convoy\0--server\0http://a:1\0agent\0")));
        assert!(!wants_mimalloc(Some(b"convoy\0agent-supervise\0--spawner\0")));
        assert!(wants_mimalloc(Some(b"convoy\0up\0")));
        assert!(wants_mimalloc(Some(b"convoy\0bench\0submit\0")));
        assert!(wants_mimalloc(Some(b"convoy\0simulate\0s.yaml\0")));
        assert!(!wants_mimalloc(Some(b"convoy\0submit\0--queue\0default\0job.yaml\0")));
        assert!(!wants_mimalloc(Some(b"convoy\0--version\0")));
        assert!(!wants_mimalloc(Some(b"convoy\0")));
        // The program's own name is not a verb, even when it is called `server`.
        assert!(!wants_mimalloc(Some(b"server\0jobs\0")));
        // A prefix of a verb is not the verb.
        assert!(!wants_mimalloc(Some(b"convoy\0queue\0create\0serve\0")));
        assert!(wants_mimalloc(None));
    }
}
