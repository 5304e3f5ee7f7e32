//! Behaviour of the windowed latency histogram through its public API.
#![cfg(not(rampart_loom))]

use std::time::Duration;

use rampart::clock::Instant;
use rampart::latency::window::LatencyWindow;

const WINDOW: Duration = Duration::from_secs(30);
const SLICE: Duration = Duration::from_secs(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `estimate` lies above `truth` by at most an eighth of it.
fn within_an_eighth_above(estimate: Duration, truth: Duration) -> bool {
    estimate > truth && estimate.as_nanos() * 8 <= truth.as_nanos() * 9
}

#[test]
fn nineteen_samples_give_no_quantile_and_the_twentieth_gives_one() {
    let w = LatencyWindow::new(WINDOW, 20);
    let base = Instant::now();
    for i in 1..=19 {
        w.record(ms(i), base + ms(i));
    }
    let now = base + ms(100);
    assert_eq!(w.count(now), 19);
    assert_eq!(w.quantile(0.95, now), None);
    w.record(ms(20), base + ms(20));
    assert_eq!(w.count(now), 20);
    assert!(w.quantile(0.95, now).is_some());
}

#[test]
fn a_hundred_samples_give_quantiles_within_an_eighth_above_the_true_ones() {
    let w = LatencyWindow::new(WINDOW, 20);
    let base = Instant::now();
    for i in 1..=100 {
        w.record(ms(i), base + ms(i));
    }
    let now = base + ms(200);
    let p50 = w.quantile(0.5, now).unwrap();
    let p95 = w.quantile(0.95, now).unwrap();
    let p0 = w.quantile(0.0, now).unwrap();
    let p100 = w.quantile(1.0, now).unwrap();
    assert!(within_an_eighth_above(p50, ms(50)), "p50 = {p50:?}");
    assert!(within_an_eighth_above(p95, ms(95)), "p95 = {p95:?}");
    assert!(within_an_eighth_above(p0, ms(1)), "p0 = {p0:?}");
    assert!(within_an_eighth_above(p100, ms(100)), "p100 = {p100:?}");
    assert!(p0 <= p50 && p50 <= p95 && p95 <= p100);
}

#[test]
fn samples_older_than_the_window_stop_counting_while_newer_ones_still_count() {
    let w = LatencyWindow::new(WINDOW, 1);
    let base = Instant::now();
    for _ in 0..30 {
        w.record(ms(900), base);
    }
    w.record(ms(10), base + Duration::from_secs(12));
    assert_eq!(w.count(base + WINDOW - SLICE), 31);
    let later = base + WINDOW + SLICE;
    assert_eq!(w.count(later), 1);
    assert_eq!(w.quantile(1.0, later), w.quantile(0.0, later));
    assert!(within_an_eighth_above(
        w.quantile(1.0, later).unwrap(),
        ms(10)
    ));
    let much_later = base + Duration::from_secs(12) + WINDOW;
    assert_eq!(w.count(much_later), 0);
    assert_eq!(w.quantile(0.5, much_later), None);
}

#[test]
fn a_slot_reused_after_hours_does_not_resurrect_old_counts() {
    let w = LatencyWindow::new(WINDOW, 20);
    let base = Instant::now();
    for i in 0..40 {
        w.record(Duration::from_secs(3), base + ms(i * 100));
    }
    assert_eq!(w.count(base + ms(4000)), 40);
    // Three hours is a whole number of slots: the same slice index comes round again.
    let later = base + Duration::from_secs(3 * 3600);
    assert_eq!(w.count(later), 0);
    for _ in 0..20 {
        w.record(ms(7), later);
    }
    assert_eq!(w.count(later), 20);
    let p100 = w.quantile(1.0, later).unwrap();
    assert!(within_an_eighth_above(p100, ms(7)), "p100 = {p100:?}");
}

#[test]
fn four_threads_recording_at_once_lose_no_sample() {
    let w = LatencyWindow::new(WINDOW, 20);
    let now = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for i in 0..10_000 {
                    w.record(ms(i % 100 + 1), now);
                }
            });
        }
    });
    assert_eq!(w.count(now), 40_000);
    let p50 = w.quantile(0.5, now).unwrap();
    assert!(within_an_eighth_above(p50, ms(50)), "p50 = {p50:?}");
}

#[test]
fn extreme_inputs_never_panic_and_clamp_to_the_edge_buckets() {
    let w = LatencyWindow::new(WINDOW, 20);
    let now = Instant::now();
    for _ in 0..10 {
        w.record(Duration::ZERO, now);
        w.record(Duration::MAX, now);
    }
    let lowest = w.quantile(0.0, now).unwrap();
    let highest = w.quantile(1.0, now).unwrap();
    assert_eq!(lowest, Duration::from_nanos(576));
    assert_eq!(highest, Duration::from_nanos(1 << 42));
    assert_eq!(w.quantile(-1.0, now), Some(lowest));
    assert_eq!(w.quantile(1.5, now), Some(highest));
    assert_eq!(w.quantile(f64::NEG_INFINITY, now), Some(lowest));
    assert_eq!(w.quantile(f64::INFINITY, now), Some(highest));
    assert_eq!(w.quantile(f64::NAN, now), None);
}

#[test]
fn degenerate_windows_and_sample_floors_never_panic() {
    let now = Instant::now();
    for window in [Duration::ZERO, Duration::from_nanos(1), Duration::MAX] {
        for min_samples in [0, 1, u32::MAX] {
            let w = LatencyWindow::new(window, min_samples);
            assert_eq!(w.quantile(0.5, now), None, "empty window");
            w.record(ms(1), now);
            w.record(ms(1), now + Duration::from_secs(86_400));
            let _ = w.count(now);
            let _ = w.quantile(0.5, now + Duration::from_secs(86_400));
        }
    }
    // No samples never gives a quantile, even when none are required.
    let w = LatencyWindow::new(WINDOW, 0);
    assert_eq!(w.quantile(0.5, now), None);
    w.record(ms(3), now);
    assert!(within_an_eighth_above(w.quantile(0.5, now).unwrap(), ms(3)));
}

#[test]
fn a_window_is_send_and_sync() {
    fn shared<T: Send + Sync>() {}
    shared::<LatencyWindow>();
}
