//! Property: the estimate is within the documented error of the true empirical quantile.
#![cfg(not(rampart_loom))]

use std::time::Duration;

use proptest::prelude::*;
use rampart::clock::Instant;
use rampart::latency::window::LatencyWindow;

/// Nanoseconds from 1 µs to 10 s: uniform on a log scale or uniform outright.
fn sample_ns() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0.0f64..=1.0).prop_map(|u| (1e3 * 1e7f64.powf(u)) as u64),
        1_000u64..=10_000_000_000,
    ]
}

proptest! {
    #[test]
    fn the_estimate_lies_above_the_true_quantile_by_at_most_an_eighth(
        samples in prop::collection::vec(sample_ns(), 20..500),
    ) {
        let w = LatencyWindow::new(Duration::from_secs(30), 20);
        let now = Instant::now();
        for &ns in &samples {
            w.record(Duration::from_nanos(ns), now);
        }
        let mut sorted = samples;
        sorted.sort_unstable();
        let n = sorted.len();
        for q in [0.5, 0.9, 0.95, 0.99] {
            // The ceil(q·n)-th smallest sample, as the estimator defines its rank.
            let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
            let truth = u128::from(sorted[rank - 1]);
            let estimate = w.quantile(q, now).unwrap().as_nanos();
            prop_assert!(
                estimate > truth && estimate * 8 <= truth * 9,
                "q = {q}: estimate {estimate} ns, true {truth} ns"
            );
        }
    }
}
