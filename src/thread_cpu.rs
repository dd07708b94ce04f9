//! The CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): what a piece of work
//! cost in CPU, whatever else competed for the cores meanwhile. The scheduling loop paces its
//! cycles by it.

use std::time::Duration;

/// CPU time used by the calling thread so far; `None` where the clock is unavailable.
fn now() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(u64::try_from(ts.tv_sec).ok()?, u32::try_from(ts.tv_nsec).ok()?))
}

/// Runs `f` and returns its result with the CPU time the calling thread spent in it (`None`
/// where the clock is unavailable). `f` must not move to another thread: a plain function.
pub(crate) fn measure<T>(f: impl FnOnce() -> T) -> (T, Option<Duration>) {
    let before = now();
    let out = f();
    let spent = now().zip(before).map(|(after, before)| after.saturating_sub(before));
    (out, spent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_counted_and_sleep_is_not() {
        // Work until the clock has moved by 20 ms of CPU (or 10 s have passed: a clock that
        // does not move fails below instead of hanging).
        let (_, spun) = measure(|| {
            let (start, wall) = (now().expect("the thread CPU clock"), std::time::Instant::now());
            let mut x = 0u64;
            while now().expect("clock").saturating_sub(start) < Duration::from_millis(20)
                && wall.elapsed() < Duration::from_secs(10)
            {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            x
        });
        assert!(spun.expect("measured") >= Duration::from_millis(20));
        // A sleep of 200 ms costs next to no CPU (generously: under 100 ms on a busy machine).
        let ((), slept) = measure(|| std::thread::sleep(Duration::from_millis(200)));
        assert!(slept.expect("measured") < Duration::from_millis(100), "{slept:?}");
    }
}
