//! Model checks of the breaker's concurrent paths under loom: every interleaving of two
//! threads. Run with
//! `RUSTFLAGS="--cfg rampart_loom" cargo test --release --test loom_breaker`.
#![cfg(rampart_loom)]

use std::time::Duration;

use loom::thread;
use rampart::breaker::*;
use rampart::clock::Instant;

const MS: Duration = Duration::from_millis(1);

fn breaker() -> Breaker {
    Breaker::builder().jitter(0.0).build().unwrap()
}

/// Records `n` failures at `now` from this thread.
fn fail(b: &Breaker, n: usize, now: Instant) {
    for _ in 0..n {
        if let Ok(p) = b.try_acquire(now) {
            p.record(Evidence::Failure, MS, now);
        }
    }
}

/// Tries to take a probe at `now` and keeps it (never recorded, never dropped, so its slot
/// stays taken): `Some(whether taking it moved open -> half-open)` if admitted.
fn take_probe(b: &Breaker, now: Instant) -> Option<bool> {
    let permit = b.try_acquire(now).ok()?;
    assert!(permit.is_probe());
    let moved = permit.transition().is_some();
    std::mem::forget(permit);
    Some(moved)
}

/// Runs `f` on a clone of `b` in a second thread and on `b` in this one; both results.
fn both<T: Send + 'static>(b: &Breaker, f: fn(&Breaker) -> T) -> [T; 2] {
    let other = b.clone();
    let h = thread::spawn(move || f(&other));
    let mine = f(b);
    [mine, h.join().unwrap()]
}

fn t0() -> Instant {
    // One instant for every execution: loom has no clock, and each model run builds a new
    // breaker whose time base is the first instant it sees.
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *T0.get_or_init(Instant::now)
}

fn at_break_end() -> Instant {
    t0() + Duration::from_secs(15)
}

#[test]
fn two_threads_taking_the_first_probe_after_the_break_get_exactly_one() {
    loom::model(|| {
        let b = breaker();
        fail(&b, 5, t0());
        let got = both(&b, |b| take_probe(b, at_break_end()));
        let winners: Vec<bool> = got.into_iter().flatten().collect();
        assert_eq!(
            winners,
            [true],
            "one probe, and it reports open -> half-open"
        );
        assert_eq!(b.state(at_break_end()), BreakerState::HalfOpen);
    });
}

#[test]
fn two_threads_acquiring_a_half_open_breaker_with_one_free_slot_get_exactly_one_probe() {
    loom::model(|| {
        let b = breaker();
        fail(&b, 5, t0());
        // A first probe succeeds: still half-open, with the one slot free again.
        let at = at_break_end();
        b.try_acquire(at).unwrap().record(Evidence::Success, MS, at);
        let got = both(&b, |b| take_probe(b, at_break_end()));
        let winners: Vec<bool> = got.into_iter().flatten().collect();
        assert_eq!(winners, [false], "one probe, and no transition");
    });
}

#[test]
fn two_threads_recording_the_fifth_failure_get_exactly_one_opening() {
    loom::model(|| {
        let b = breaker();
        fail(&b, 4, t0());
        let got = both(&b, |b| {
            let p = b.try_acquire(t0()).ok()?;
            p.record(Evidence::Failure, MS, t0())
        });
        let opened: Vec<_> = got.into_iter().flatten().collect();
        assert_eq!(opened.len(), 1, "{opened:?}");
        assert_eq!(
            (opened[0].from, opened[0].to),
            (StateKind::Closed, StateKind::Open)
        );
        let remaining = Duration::from_secs(15);
        assert_eq!(b.state(t0()), BreakerState::Open { remaining });
    });
}

#[test]
fn a_success_and_a_failure_recorded_together_leave_a_consistent_count() {
    loom::model(|| {
        let b = breaker();
        fail(&b, 4, t0());
        let other = b.clone();
        let h = thread::spawn(move || {
            let p = other.try_acquire(t0()).ok()?;
            p.record(Evidence::Success, MS, t0())
        });
        let mine = b
            .try_acquire(t0())
            .unwrap()
            .record(Evidence::Failure, MS, t0());
        assert_eq!(
            h.join().unwrap(),
            None,
            "a success never moves a closed breaker"
        );
        match mine {
            // The failure was counted first, as the fifth: open; the success changed nothing.
            Some(t) => assert_eq!(t.to, StateKind::Open),
            // The success reset the count first: exactly one failure is counted now.
            None => {
                fail(&b, 3, t0());
                assert_eq!(b.state(t0()), BreakerState::Closed);
                fail(&b, 1, t0());
                assert_eq!(b.state(t0()).kind(), StateKind::Open);
            }
        }
    });
}

#[test]
fn two_failures_recorded_together_in_ratio_mode_are_both_counted() {
    loom::model(|| {
        // Two successes, then two failures at once: whichever counts second sees 2 of 4 (50 %)
        // and opens; a lost or unseen failure would leave it closed.
        let b = Breaker::builder()
            .failure_ratio(0.5, Duration::from_secs(10), 3)
            .jitter(0.0)
            .build()
            .unwrap();
        for _ in 0..2 {
            b.try_acquire(t0())
                .unwrap()
                .record(Evidence::Success, MS, t0());
        }
        let got = both(&b, |b| {
            b.try_acquire(t0())
                .ok()?
                .record(Evidence::Failure, MS, t0())
        });
        assert_eq!(got.into_iter().flatten().count(), 1);
    });
}
