use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::*;
use crate::Criticality;
use crate::clock::Instant;

fn now_or_never<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an aimd limit never waits"),
    }
}

fn take(limit: &Aimd) -> Result<AimdPermit, Refusal> {
    let cx = AdmitContext::new("test", Criticality::Critical, Instant::now());
    now_or_never(limit.acquire(&cx))
}

fn back(limit: &Aimd, permit: AimdPermit, outcome: AttemptOutcome) {
    limit.release(permit, Feedback::new(outcome, Duration::from_millis(5)));
}

#[test]
fn set_bounds_brings_the_limit_into_the_range_and_what_it_learns_stays_there() {
    let limit = Aimd::builder().initial(20).build().expect("valid");
    limit.set_bounds(2, 10).expect("a valid range");
    assert_eq!((limit.bounds(), limit.limit()), ((2, 10), 10));
    // Steady full use would grow it; the new max holds it.
    let mut held: Vec<_> = (0..10).map(|_| take(&limit).expect("room")).collect();
    for _ in 0..100 {
        back(&limit, held.remove(0), AttemptOutcome::Ok);
        held.push(take(&limit).expect("room"));
    }
    assert_eq!(limit.limit(), 10);
    // Timeouts would cut it below the old min of 4; the new min of 2 holds it.
    for _ in 0..50 {
        let permit = held.pop().unwrap_or_else(|| take(&limit).expect("room"));
        back(&limit, permit, AttemptOutcome::TimedOut);
    }
    assert_eq!(limit.limit(), 2);
    drop(held);
    limit.set_bounds(30, 40).expect("a valid range");
    assert_eq!(limit.limit(), 30, "raised to the new min at once");
}

#[test]
fn a_limit_grown_above_a_lowered_max_is_brought_down_by_the_next_success() {
    let limit = Aimd::builder().initial(20).build().expect("valid");
    // As if a release had grown it just after an update lowered the range.
    limit
        .inner
        .bounds
        .set(["aimd.min", "aimd.max"], 4, 10)
        .expect("valid");
    let mut held: Vec<_> = (0..12).map(|_| take(&limit).expect("room")).collect();
    assert_eq!(limit.limit(), 20);
    // A success at more than half use, which would grow a limit within its range.
    back(&limit, held.remove(0), AttemptOutcome::Ok);
    assert_eq!(limit.limit(), 10);
}

#[test]
fn set_bounds_refuses_a_range_the_builder_refuses_and_changes_nothing() {
    let limit = Aimd::new();
    let refused = limit.set_bounds(0, 2_000_000).expect_err("invalid");
    assert_eq!(
        refused.to_string(),
        "aimd.min must be at least 1 (was 0); aimd.max must be at most 1000000 (was 2000000)"
    );
    let refused = limit.set_bounds(8, 4).expect_err("invalid");
    assert_eq!(
        refused.to_string(),
        "aimd.max must be at least min 8 (was 4)"
    );
    assert_eq!((limit.bounds(), limit.limit()), ((4, 200), 20));
}

#[test]
fn the_limit_is_enforced_at_once_without_a_queue() {
    let limit = Aimd::builder()
        .initial(4)
        .min(1)
        .max(10)
        .build()
        .expect("valid");
    let held: Vec<_> = (0..4).map(|_| take(&limit).expect("room")).collect();
    let refusal = take(&limit).expect_err("full");
    assert_eq!(refusal.by, "aimd limit");
    assert_eq!(refusal.retry_after, Some(Duration::from_millis(10)));
    drop(held);
    assert_eq!(limit.in_flight(), 0);
    assert!(take(&limit).is_ok());
}

#[test]
fn a_round_trip_of_successes_at_full_use_adds_one() {
    let limit = Aimd::builder().initial(10).build().expect("valid");
    let mut held: Vec<_> = (0..10).map(|_| take(&limit).expect("room")).collect();
    // Steady full use: each release is replaced at once, so it counts at 10 in flight.
    let mut releases = 0;
    while limit.limit() < 20 {
        back(&limit, held.remove(0), AttemptOutcome::Ok);
        held.push(take(&limit).expect("room"));
        releases += 1;
        if releases == 10 {
            assert_eq!(limit.limit(), 10, "10 × 1/10.x is just short of one");
        }
        if releases == 11 {
            assert_eq!(limit.limit(), 11);
        }
    }
    // From 10 to 20: one round trip at each limit, 10 + 11 + .. + 19 = 145 releases.
    assert!((140..=150).contains(&releases), "{releases}");
}

#[test]
fn releases_below_half_use_do_not_count() {
    let limit = Aimd::builder().initial(10).build().expect("valid");
    let held: Vec<_> = (0..10).map(|_| take(&limit).expect("room")).collect();
    for permit in held {
        back(&limit, permit, AttemptOutcome::Ok);
    }
    // Released at 10, 9, .., 1 in flight: only 10 down to 5 were at least half of 10.
    let grown = (limit.inner.state.load(Relaxed) & LIMIT_MASK) as f64 / ONE as f64;
    assert!((grown - 10.58).abs() < 0.01, "{grown}");
}

#[test]
fn successes_at_low_use_do_not_grow_the_limit() {
    let limit = Aimd::new();
    for _ in 0..1_000 {
        let permit = take(&limit).expect("room");
        back(&limit, permit, AttemptOutcome::Ok);
    }
    assert_eq!(limit.limit(), 20);
}

#[test]
fn a_burst_of_timeouts_from_one_overload_cuts_the_limit_once() {
    let limit = Aimd::new();
    let held: Vec<_> = (0..20).map(|_| take(&limit).expect("room")).collect();
    for permit in held {
        back(&limit, permit, AttemptOutcome::TimedOut);
    }
    assert_eq!(limit.limit(), 18);
    // A permit taken after the cut may cut again.
    let permit = take(&limit).expect("room");
    back(&limit, permit, AttemptOutcome::Throttled);
    assert_eq!(limit.limit(), 16); // 18 × 0.9 = 16.2
}

#[test]
fn the_limit_stays_within_min_and_max() {
    let limit = Aimd::builder()
        .initial(5)
        .min(4)
        .max(6)
        .build()
        .expect("valid");
    for _ in 0..50 {
        let permit = take(&limit).expect("room");
        back(&limit, permit, AttemptOutcome::TimedOut);
    }
    assert_eq!(limit.limit(), 4);
    for _ in 0..100 {
        let held: Vec<_> = (0..4).map(|_| take(&limit).expect("room")).collect();
        for permit in held {
            back(&limit, permit, AttemptOutcome::Ok);
        }
    }
    assert_eq!(limit.limit(), 6);
}

#[test]
fn errors_cancellations_and_dropped_permits_leave_the_limit_alone() {
    let limit = Aimd::new();
    let held: Vec<_> = (0..20).map(|_| take(&limit).expect("room")).collect();
    for (i, permit) in held.into_iter().enumerate() {
        match i % 4 {
            0 => back(&limit, permit, AttemptOutcome::Transient),
            1 => back(&limit, permit, AttemptOutcome::Refused),
            2 => back(&limit, permit, AttemptOutcome::Cancelled),
            _ => drop(permit),
        }
    }
    assert_eq!(limit.limit(), 20);
    assert_eq!(limit.in_flight(), 0);
}

#[test]
fn the_decrease_count_wraps_without_confusing_a_permit() {
    let limit = Aimd::new();
    let last = (1 << (64 - LIMIT_BITS)) - 1;
    limit
        .inner
        .state
        .store((last << LIMIT_BITS) | (20 * ONE), Relaxed);
    let old = take(&limit).expect("room");
    assert_eq!(old.decreases, last);
    back(&limit, old, AttemptOutcome::TimedOut);
    assert_eq!(limit.inner.state.load(Relaxed) >> LIMIT_BITS, 0, "wrapped");
    assert_eq!(limit.limit(), 18);
    let new = take(&limit).expect("room");
    back(&limit, new, AttemptOutcome::TimedOut);
    assert_eq!(limit.limit(), 16);
}

#[test]
fn invalid_settings_are_all_reported_with_their_values() {
    let err = Aimd::builder()
        .initial(0)
        .min(0)
        .max(2_000_000)
        .backoff(1.0)
        .build()
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "aimd.min must be at least 1 (was 0); aimd.max must be at most 1000000 (was 2000000); aimd.backoff must be at least 0.5 and below 1 (was 1)"
    );
    let err = Aimd::builder()
        .min(10)
        .max(5)
        .backoff(f64::NAN)
        .build()
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "aimd.initial must be between min 10 and max 5 (was 20); aimd.max must be at least min 10 (was 5); aimd.backoff must be at least 0.5 and below 1 (was NaN)"
    );
}
