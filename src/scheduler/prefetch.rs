//! A hint that the cycle is about to read a value behind a pointer: the processor starts
//! loading its cache lines and goes on without waiting.
//!
//! The build reads every queued job's `JobInfo` once, through its `Arc`. Those records lie
//! wherever the state allocated them, so at scale each is a cache miss, and the loop, too long
//! for the processor to run several iterations ahead, waited out one miss after another (most of
//! the build's time at 1M queued jobs). The list of pointers is in order, so the records a few
//! jobs ahead are known and can be asked for early.

/// Jobs ahead of the one being read whose records are asked for.
const AHEAD: usize = 8;

/// `items` in order; as each is yielded, the record `record` reaches from the item [`AHEAD`]
/// places further on is asked for.
#[inline(always)]
pub(super) fn ahead<'s, T, U: 's>(items: &'s [T], record: impl Fn(&'s T) -> &'s U) -> impl Iterator<Item = &'s T> {
    items.iter().enumerate().map(move |(i, item)| {
        if let Some(next) = items.get(i + AHEAD) {
            prefetch(record(next));
        }
        item
    })
}

/// Starts loading every cache line of `value`. Does nothing on other architectures.
#[inline(always)]
fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = (value as *const T).cast::<i8>();
        let size = std::mem::size_of::<T>();
        let mut offset = 0;
        while offset < size {
            // SAFETY: a prefetch reads nothing into the program and cannot fault, whatever the
            // address; it only asks the cache for a line. SSE is part of x86_64's baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset)) };
            offset += 64;
        }
        if size > 0 {
            // The last line, when the value does not start on a line's boundary.
            // SAFETY: as above.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(size - 1)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
