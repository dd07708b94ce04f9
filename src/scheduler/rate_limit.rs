//! Token-bucket scheduling rate limits, global and per queue. Only new placements take tokens;
//! putting an evicted job back is free. The buckets are input and output of a cycle, so the
//! scheduler stays a pure function.

use super::config::SchedulerConfig;
use crate::model::QueueName;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One bucket, in thousandths of a token so refills never round away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenBucket {
    /// Tokens left, in thousandths (1000 = one job may be scheduled).
    pub milli_tokens: i64,
    /// When it was last refilled (ms since the epoch); `None` = never used, starts full.
    pub updated_ms: Option<i64>,
}

impl TokenBucket {
    fn refill(&mut self, rate: f64, burst: u64, now_ms: i64) {
        let cap = (burst as i64).saturating_mul(1000);
        self.milli_tokens = match self.updated_ms {
            None => cap,
            Some(t) => {
                let dt = now_ms.saturating_sub(t).max(0) as f64;
                // rate is per second and dt in ms, so rate * dt is already in milli-tokens.
                let add = (rate * dt).floor().min(cap as f64) as i64;
                self.milli_tokens.saturating_add(add).min(cap)
            }
        };
        self.updated_ms = Some(now_ms);
    }

    fn whole_tokens(&self) -> u64 {
        (self.milli_tokens.max(0) / 1000) as u64
    }
}

/// Which token bucket ran dry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateScope {
    /// The global scheduling rate.
    Global,
    /// The job's queue's scheduling rate.
    Queue,
}

/// All buckets, carried from one cycle to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimiterState {
    /// The bucket of the global scheduling rate.
    pub global: TokenBucket,
    /// Each queue's bucket.
    pub queues: BTreeMap<QueueName, TokenBucket>,
}

/// The buckets during a cycle.
#[derive(Clone)]
pub(crate) struct RateLimits {
    global: Option<TokenBucket>,
    /// The global bucket's burst (with a global rate).
    global_burst: u64,
    per_queue: Option<(f64, u64)>,
    queues: BTreeMap<QueueName, TokenBucket>,
    now_ms: i64,
}

impl RateLimits {
    /// Refills the buckets for `now_ms`.
    pub(crate) fn start(state: &RateLimiterState, cfg: &SchedulerConfig, now_ms: i64) -> Self {
        let global = (cfg.maximum_scheduling_rate > 0.0).then(|| {
            let mut b = state.global;
            b.refill(cfg.maximum_scheduling_rate, cfg.maximum_scheduling_burst, now_ms);
            b
        });
        let per_queue = (cfg.maximum_per_queue_scheduling_rate > 0.0)
            .then_some((cfg.maximum_per_queue_scheduling_rate, cfg.maximum_per_queue_scheduling_burst));
        let mut queues = BTreeMap::new();
        if let Some((rate, burst)) = per_queue {
            for (q, b) in &state.queues {
                let mut b = *b;
                b.refill(rate, burst, now_ms);
                queues.insert(q.clone(), b);
            }
        }
        Self { global, global_burst: cfg.maximum_scheduling_burst, per_queue, queues, now_ms }
    }

    fn queue_bucket(&mut self, q: &QueueName) -> Option<&mut TokenBucket> {
        let (rate, burst) = self.per_queue?;
        let now = self.now_ms;
        Some(self.queues.entry(q.clone()).or_insert_with(|| {
            let mut b = TokenBucket::default();
            b.refill(rate, burst, now);
            b
        }))
    }

    /// Ok if `n` tokens are available in both the global and the queue's bucket.
    #[inline]
    pub(crate) fn check(&mut self, q: &QueueName, n: u64) -> Result<(), RateScope> {
        if let Some(g) = &self.global
            && g.whole_tokens() < n
        {
            return Err(RateScope::Global);
        }
        if let Some(b) = self.queue_bucket(q)
            && b.whole_tokens() < n
        {
            return Err(RateScope::Queue);
        }
        Ok(())
    }

    /// The bucket, with its burst, that could not give `n` tokens even full: a gang of `n` can
    /// never be scheduled while it is in force.
    pub(crate) fn burst_below(&self, n: u64) -> Option<(RateScope, u64)> {
        if self.global.is_some() && self.global_burst < n {
            return Some((RateScope::Global, self.global_burst));
        }
        match self.per_queue {
            Some((_, burst)) if burst < n => Some((RateScope::Queue, burst)),
            _ => None,
        }
    }

    /// True if the global bucket cannot give even one token.
    pub(crate) fn global_exhausted(&self) -> bool {
        self.global.is_some_and(|g| g.whole_tokens() == 0)
    }

    /// Takes `n` tokens (after a successful `check`).
    #[inline]
    pub(crate) fn take(&mut self, q: &QueueName, n: u64) {
        let milli = (n as i64).saturating_mul(1000);
        if let Some(g) = &mut self.global {
            g.milli_tokens -= milli;
        }
        if let Some(b) = self.queue_bucket(q) {
            b.milli_tokens -= milli;
        }
    }

    /// The state to hand to the next cycle.
    pub(crate) fn finish(self) -> RateLimiterState {
        RateLimiterState { global: self.global.unwrap_or_default(), queues: self.queues }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rate: f64, burst: u64, qrate: f64, qburst: u64) -> SchedulerConfig {
        SchedulerConfig {
            maximum_scheduling_rate: rate,
            maximum_scheduling_burst: burst,
            maximum_per_queue_scheduling_rate: qrate,
            maximum_per_queue_scheduling_burst: qburst,
            ..Default::default()
        }
    }

    #[test]
    fn bucket_starts_full_and_refills_by_rate() {
        let q = QueueName::new("a").unwrap();
        let c = cfg(2.0, 5, 0.0, 0);
        let mut rl = RateLimits::start(&RateLimiterState::default(), &c, 0);
        assert!(rl.check(&q, 5).is_ok());
        assert_eq!(rl.check(&q, 6), Err(RateScope::Global));
        rl.take(&q, 5);
        assert!(rl.global_exhausted());
        let state = rl.finish();
        // 1.5 s at 2 jobs/s = 3 tokens.
        let mut rl = RateLimits::start(&state, &c, 1500);
        assert!(rl.check(&q, 3).is_ok());
        assert_eq!(rl.check(&q, 4), Err(RateScope::Global));
        // Never more than the burst.
        let mut rl = RateLimits::start(&state, &c, 1_000_000);
        assert_eq!(rl.check(&q, 6), Err(RateScope::Global));
    }

    #[test]
    fn per_queue_buckets_are_separate() {
        let (a, b) = (QueueName::new("a").unwrap(), QueueName::new("b").unwrap());
        let c = cfg(0.0, 0, 1.0, 2);
        let mut rl = RateLimits::start(&RateLimiterState::default(), &c, 0);
        rl.take(&a, 2);
        assert_eq!(rl.check(&a, 1), Err(RateScope::Queue));
        assert!(rl.check(&b, 2).is_ok());
        let s = rl.finish();
        assert_eq!(s.queues.len(), 2);
    }

    #[test]
    fn unlimited_when_rate_is_zero() {
        let q = QueueName::new("a").unwrap();
        let mut rl = RateLimits::start(&RateLimiterState::default(), &SchedulerConfig::default(), 0);
        assert!(rl.check(&q, 1_000_000).is_ok());
        assert!(!rl.global_exhausted());
    }
}
