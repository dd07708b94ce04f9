//! How soon after a cycle the next may start. `schedule_interval_min` exists so that a leader
//! whose cycles are expensive batches changes instead of deciding back to back; a job that
//! arrives meanwhile waits for the next start. Holding every change back that long when the
//! last cycle decided in a small fraction of it only adds latency: a job submitted 20 ms after
//! the previous cycle would wait the other 80 ms for nothing. So the hold is proportional to what
//! the last cycle cost — [`DUTY_FACTOR`] times the CPU it took to read its snapshot and decide,
//! which bounds the share of the leader's CPU spent deciding — within a tenth of
//! `schedule_interval_min` and the whole of it. Expensive cycles (a fifth of the interval or
//! more) keep the old pace exactly.
//!
//! The cost is CPU time, not wall time: on a machine whose cores are shared, a cycle's wall time
//! also counts its waits for a core, and pacing by it held cycles back further the busier the
//! machine was, though their work was the same.

use std::time::Duration;

/// The next cycle may start this many times the last one's CPU time after it started: the
/// leader spends at most about a fifth of a core deciding while cycles are cheap. The cycle's
/// CPU, not the commit's wait on the disk, is what competes with serving requests.
pub(super) const DUTY_FACTOR: u32 = 5;

/// How long after the last cycle started the next may start, given the configured
/// `schedule_interval_min` (`min`) and the CPU time the last cycle took to read its snapshot
/// and decide (`last_busy`; zero before the first).
pub(super) fn hold(min: Duration, last_busy: Duration) -> Duration {
    last_busy.saturating_mul(DUTY_FACTOR).clamp(min / 10, min)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(100);

    #[test]
    fn a_cheap_cycle_holds_the_next_back_a_tenth_of_the_interval() {
        assert_eq!(hold(MIN, Duration::ZERO), Duration::from_millis(10));
        assert_eq!(hold(MIN, Duration::from_millis(1)), Duration::from_millis(10));
    }

    #[test]
    fn the_hold_grows_with_the_decision_time() {
        assert_eq!(hold(MIN, Duration::from_millis(6)), Duration::from_millis(30));
        assert_eq!(hold(MIN, Duration::from_millis(12)), Duration::from_millis(60));
    }

    #[test]
    fn an_expensive_cycle_keeps_the_configured_interval() {
        assert_eq!(hold(MIN, Duration::from_millis(20)), MIN);
        assert_eq!(hold(MIN, Duration::from_secs(3)), MIN);
        assert_eq!(hold(Duration::from_secs(1), Duration::from_millis(150)), Duration::from_millis(750));
    }

    #[test]
    fn the_hold_never_leaves_its_bounds() {
        for ms in [0u64, 1, 5, 19, 20, 21, 1000, u64::MAX / 4] {
            let h = hold(MIN, Duration::from_millis(ms));
            assert!(h >= MIN / 10 && h <= MIN, "{ms} ms gave {h:?}");
        }
    }
}
