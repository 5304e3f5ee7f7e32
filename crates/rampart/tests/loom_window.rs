//! Loom models of slice rotation: run with
//! `RUSTFLAGS="--cfg rampart_loom" cargo test --release --test loom_window`.
//!
//! Under loom the window is tiny: 2 slices per window, 1 stripe, 4 buckets (512 ns .. 2 µs).
#![cfg(rampart_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use rampart::clock::Instant;
use rampart::latency::window::LatencyWindow;

/// A 2 s window: slots of 1 s, slot `s` in slice `s % 2`.
const WINDOW: Duration = Duration::from_secs(2);

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

/// Records a 600 ns sample into slot 0, then, at once, a 1.5 µs sample at `other_ms` on a
/// second thread and one at `my_ms` on this one; returns the window and the base instant.
fn race(other_ms: u64, my_ms: u64) -> (Arc<LatencyWindow>, Instant) {
    let w = Arc::new(LatencyWindow::new(WINDOW, 1));
    let base = Instant::now();
    w.record(Duration::from_nanos(600), at(base, 100)); // slot 0
    let w2 = Arc::clone(&w);
    let t = thread::spawn(move || w2.record(Duration::from_nanos(1500), at(base, other_ms)));
    w.record(Duration::from_nanos(1500), at(base, my_ms));
    t.join().unwrap();
    (w, base)
}

#[test]
fn two_threads_rotating_the_same_slice_reset_it_exactly_once() {
    loom::model(|| {
        // Both record into slot 2, which reuses slot 0's slice.
        let (w, base) = race(2_100, 2_200);
        assert_eq!(w.resets(), 1);
        // The claimer's own sample always counts; the other may be wiped by the zeroing.
        let n = w.count(at(base, 2_500));
        assert!((1..=2).contains(&n), "count {n}");
        // Slot 0's 600 ns sample never comes back: every sample left is 1.5 µs.
        assert_eq!(
            w.quantile(0.0, at(base, 2_500)),
            Some(Duration::from_nanos(1536))
        );
    });
}

#[test]
fn a_record_into_the_old_slot_while_another_thread_rotates_it_is_counted_once_or_lost() {
    loom::model(|| {
        // One thread still records into slot 0 while the other claims its slice for slot 2.
        let (w, base) = race(2_100, 200);
        assert_eq!(w.resets(), 1);
        // The late sample is wiped, dropped, or counted in slot 2; slot 0's first never is.
        let n = w.count(at(base, 2_500));
        assert!((1..=2).contains(&n), "count {n}");
        assert_eq!(
            w.quantile(0.0, at(base, 2_500)),
            Some(Duration::from_nanos(1536))
        );
    });
}

#[test]
fn a_reader_never_mixes_a_reused_slice_old_and_new_counts() {
    loom::model(|| {
        let w = Arc::new(LatencyWindow::new(WINDOW, 2));
        let base = Instant::now();
        w.record(Duration::from_nanos(600), at(base, 1_100)); // slot 1, slice 1
        let w2 = Arc::clone(&w);
        // Slot 3 reuses slice 1.
        let t = thread::spawn(move || w2.record(Duration::from_nanos(1500), at(base, 3_100)));
        // A reader in slot 2 accepts both slot 1 and slot 3, but never both at once.
        assert!(w.count(at(base, 2_100)) <= 1);
        assert_eq!(w.quantile(0.5, at(base, 2_100)), None);
        t.join().unwrap();
        // Slice 1 was claimed twice: by slot 1 (from its initial epoch 0), then by slot 3.
        assert_eq!(w.resets(), 2);
        assert_eq!(w.count(at(base, 2_100)), 1);
        assert_eq!(w.quantile(0.0, at(base, 2_100)), None);
    });
}
