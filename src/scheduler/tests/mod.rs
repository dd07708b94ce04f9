//! Scheduler tests: worked examples with exact outcomes, and property tests.

mod examples;
mod properties;
