//! Latency measurements a policy keeps about its dependency.
//!
//! - [`window::LatencyWindow`]: a windowed histogram of successful attempts, read as a
//!   quantile by hedging (the hedge delay) and by the adaptive attempt ceiling.
//! - The typical latency (below, internal): the executor's estimate of how long an attempt
//!   takes, used in one place: a backoff is not slept when `delay + typical latency` would not
//!   fit in the time left, because the attempt after it would very likely run out of time
//!   anyway. It is zero until the first success is measured.
//!
//! An exponentially weighted moving average (weight 1/8) in one atomic. Shared by every call
//! through a policy, so it is written only when the average moves by more than 1/16 of itself:
//! a steady dependency reads it and leaves the cache line alone.

pub mod window;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Default)]
pub(crate) struct TypicalLatency {
    nanos: AtomicU64,
}

impl TypicalLatency {
    /// The current estimate (zero until measured).
    #[inline]
    pub(crate) fn get(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// Folds in one successful attempt's duration.
    #[inline]
    pub(crate) fn record(&self, sample: Duration) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX);
        let old = self.nanos.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample
        } else {
            old - old / 8 + sample / 8
        };
        if new.abs_diff(old) > old / 16 {
            // A lost race between two writers loses one sample of an average: harmless.
            self.nanos.store(new.max(1), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_is_taken_as_is_then_averaged() {
        let t = TypicalLatency::default();
        assert_eq!(t.get(), Duration::ZERO);
        t.record(Duration::from_millis(80));
        assert_eq!(t.get(), Duration::from_millis(80));
        t.record(Duration::from_millis(160));
        assert_eq!(t.get(), Duration::from_millis(90));
    }

    #[test]
    fn small_moves_do_not_write() {
        let t = TypicalLatency::default();
        t.record(Duration::from_millis(100));
        t.record(Duration::from_millis(104));
        assert_eq!(t.get(), Duration::from_millis(100));
    }
}
