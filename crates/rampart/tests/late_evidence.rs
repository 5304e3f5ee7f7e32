//! Breaker evidence that comes after the call returned: an attempt that defers it
//! (`Attempt::defer_evidence`) counts nothing when it succeeds, and `Breaker::record_late`
//! counts what its answer said later, reported to the policies that use the breaker. On
//! tokio's paused clock or explicit instants; no waiting.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::breaker::{Breaker, BreakerState, Evidence, StateKind};
use rampart::clock::Instant;
use rampart::{Error, Event, Policy, RejectReason};

fn consecutive(n: u32) -> Breaker {
    Breaker::builder()
        .consecutive_failures(n)
        .break_duration(Duration::from_secs(5))
        .jitter(0.0)
        .build()
        .expect("valid breaker")
}

/// Opened by one failure for 5 s; half-open, one probe, which closes it by succeeding.
fn one_probe() -> Breaker {
    Breaker::builder()
        .consecutive_failures(1)
        .break_duration(Duration::from_secs(5))
        .jitter(0.0)
        .half_open_probes(1)
        .probe_successes(1)
        .build()
        .expect("valid breaker")
}

/// One attempt per call, every error a failure the breaker counts.
fn policy(breaker: &Breaker) -> Policy {
    Policy::builder()
        .max_attempts(1)
        .breaker(breaker.clone())
        .build()
        .expect("valid policy")
}

async fn fails(policy: &Policy) {
    let result = policy
        .run(async |_| Err::<(), _>(std::io::Error::other("down")))
        .await;
    assert!(result.is_err());
}

/// A call that succeeds, deferring its evidence if `defer`.
async fn succeeds(policy: &Policy, defer: bool) {
    policy
        .run(async |attempt| {
            if defer {
                attempt.defer_evidence();
            }
            Ok::<_, std::io::Error>(())
        })
        .await
        .expect("answered");
}

#[tokio::test(start_paused = true)]
async fn a_deferred_success_does_not_clear_the_failures_before_it() {
    // Failure, success, failure: the success clears the count, so two in a row never come.
    let breaker = consecutive(2);
    let p = policy(&breaker);
    fails(&p).await;
    succeeds(&p, false).await;
    fails(&p).await;
    assert_eq!(breaker.state(Instant::now()), BreakerState::Closed);

    // The same with the success deferred: it says nothing, and the second failure opens it.
    let breaker = consecutive(2);
    let p = policy(&breaker);
    fails(&p).await;
    succeeds(&p, true).await;
    fails(&p).await;
    assert_eq!(breaker.state(Instant::now()).kind(), StateKind::Open);
}

#[tokio::test(start_paused = true)]
async fn a_deferred_attempt_that_fails_counts_as_a_failure() {
    let breaker = consecutive(1);
    let p = policy(&breaker);
    let result = p
        .run(async |attempt| {
            attempt.defer_evidence();
            Err::<(), _>(std::io::Error::other("down"))
        })
        .await;
    assert!(result.is_err());
    assert_eq!(breaker.state(Instant::now()).kind(), StateKind::Open);
}

#[tokio::test(start_paused = true)]
async fn late_failures_open_the_breaker_and_the_policy_reports_it() {
    let events: Arc<Mutex<Vec<(StateKind, StateKind)>>> = Arc::default();
    let seen = Arc::clone(&events);
    let breaker = consecutive(2);
    let p = Policy::builder()
        .max_attempts(1)
        .breaker(breaker.clone())
        .listener(move |event| {
            if let Event::BreakerTransition { from, to, .. } = event {
                seen.lock().expect("not poisoned").push((*from, *to));
            }
        })
        .build()
        .expect("valid policy");
    for _ in 0..2 {
        succeeds(&p, true).await;
        breaker.record_late(Evidence::Failure, Duration::ZERO, Instant::now());
    }
    assert_eq!(breaker.state(Instant::now()).kind(), StateKind::Open);
    assert_eq!(
        *events.lock().expect("not poisoned"),
        [(StateKind::Closed, StateKind::Open)]
    );
    let refused = p
        .run(async |_| Ok::<_, std::io::Error>(()))
        .await
        .expect_err("the breaker is open");
    assert!(matches!(
        refused,
        Error::Rejected {
            reason: RejectReason::DependencyUnavailable,
            ..
        }
    ));
}

#[test]
fn late_evidence_half_open_takes_a_probe_slot_and_can_close_the_breaker() {
    let breaker = one_probe();
    let t0 = Instant::now();
    breaker.record_late(Evidence::Failure, Duration::ZERO, t0);
    let later = t0 + Duration::from_secs(5);
    // The break is over: the late success is the probe, and closes it.
    let closed = breaker
        .record_late(Evidence::Success, Duration::ZERO, later)
        .expect("a transition");
    assert_eq!(
        (closed.from, closed.to),
        (StateKind::HalfOpen, StateKind::Closed)
    );
    assert_eq!(breaker.state(later), BreakerState::Closed);

    // With the one probe slot taken by a call in flight, late evidence is dropped.
    breaker.record_late(Evidence::Failure, Duration::ZERO, later);
    let after = later + Duration::from_secs(10);
    let probe = breaker.try_acquire(after).expect("the probe");
    assert!(probe.is_probe());
    assert_eq!(
        breaker.record_late(Evidence::Success, Duration::ZERO, after),
        None
    );
    assert!(breaker.state(after) == BreakerState::HalfOpen);
    drop(probe);
}

#[test]
fn late_evidence_while_open_or_isolated_is_dropped() {
    let breaker = consecutive(1);
    let t0 = Instant::now();
    breaker.record_late(Evidence::Failure, Duration::ZERO, t0);
    assert_eq!(
        breaker.record_late(Evidence::Success, Duration::ZERO, t0),
        None
    );
    assert_eq!(breaker.state(t0).kind(), StateKind::Open);
    breaker.isolate(t0);
    assert_eq!(
        breaker.record_late(Evidence::Success, Duration::ZERO, t0),
        None
    );
    assert_eq!(breaker.state(t0).kind(), StateKind::Isolated);
}

#[tokio::test(start_paused = true)]
async fn a_deferred_probe_frees_its_slot_and_its_late_verdict_closes_the_breaker() {
    let breaker = one_probe();
    let p = policy(&breaker);
    fails(&p).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    // The probe succeeds as far as it can tell, deferring its evidence: it counts for
    // nothing, and its slot is free again for the next probe.
    succeeds(&p, true).await;
    assert_eq!(breaker.state(Instant::now()), BreakerState::HalfOpen);
    let next = breaker
        .try_acquire(Instant::now())
        .expect("the slot is free");
    assert!(next.is_probe());
    drop(next);
    // Its verdict, when it comes, takes the free slot and closes the breaker.
    let closed = breaker
        .record_late(Evidence::Success, Duration::ZERO, Instant::now())
        .expect("a transition");
    assert_eq!(closed.to, StateKind::Closed);
}
