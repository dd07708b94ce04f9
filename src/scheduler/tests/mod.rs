//! Scheduler tests: worked examples with exact outcomes, and property tests.

mod backoff;
mod cordon;
mod cycle_build;
mod examples;
mod fence_paths;
mod hierarchy;
mod max_min;
mod pool_policies;
mod properties;
mod queue_policies;
mod reservation;
