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

use crate::clock::Instant;
use window::LatencyWindow;

/// Everything a policy measures about its successful attempts.
#[derive(Debug)]
pub(crate) struct Latency {
    pub(crate) typical: TypicalLatency,
    /// The hedge delay's estimate, when the policy hedges adaptively.
    pub(crate) hedge: Option<Estimate>,
    /// The adaptive attempt ceiling's estimate, when the policy has one.
    pub(crate) ceiling: Option<Estimate>,
}

impl Latency {
    pub(crate) fn new(hedge: Option<Estimate>, ceiling: Option<Estimate>) -> Self {
        Latency {
            typical: TypicalLatency::default(),
            hedge,
            ceiling,
        }
    }

    /// Folds in one successful attempt's duration.
    #[inline]
    pub(crate) fn record(&self, sample: Duration, now: Instant) {
        self.typical.record(sample);
        for estimate in [&self.hedge, &self.ceiling].into_iter().flatten() {
            estimate.window.record(sample, now);
        }
    }
}

/// A quantile of a [`LatencyWindow`], recomputed at most every 1/60 of the window once it is
/// known (a read of the histogram is one pass over its counters; a call reads this value).
pub(crate) struct Estimate {
    window: LatencyWindow,
    quantile: f64,
    base: Instant,
    refresh_nanos: u64,
    /// The cached quantile in nanoseconds; zero when not known yet.
    value: AtomicU64,
    /// When it was computed, in nanoseconds since `base`.
    computed: AtomicU64,
}

impl Estimate {
    pub(crate) fn new(window: Duration, min_samples: u32, quantile: f64, base: Instant) -> Self {
        Estimate {
            window: LatencyWindow::new(window, min_samples),
            quantile,
            base,
            refresh_nanos: u64::try_from((window / 60).as_nanos()).unwrap_or(u64::MAX),
            value: AtomicU64::new(0),
            computed: AtomicU64::new(0),
        }
    }

    /// The quantile at `now`, or `None` while the window holds too few samples.
    pub(crate) fn get(&self, now: Instant) -> Option<Duration> {
        let since =
            u64::try_from(now.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        let cached = self.value.load(Ordering::Relaxed);
        if cached != 0
            && since.saturating_sub(self.computed.load(Ordering::Relaxed)) < self.refresh_nanos
        {
            return Some(Duration::from_nanos(cached));
        }
        let fresh = self.window.quantile(self.quantile, now);
        let nanos = fresh.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
        });
        // Two readers refreshing at once store nearly the same value: harmless.
        self.value.store(nanos, Ordering::Relaxed);
        self.computed.store(since, Ordering::Relaxed);
        fresh
    }
}

impl std::fmt::Debug for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Estimate")
            .field("quantile", &self.quantile)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

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
