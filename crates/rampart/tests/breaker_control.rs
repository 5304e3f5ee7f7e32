//! Manual control of a breaker (force open, force closed, release) and live changes of its
//! thresholds that keep its state. Explicit instants; no waiting.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::breaker::{Breaker, BreakerState, Evidence, StateKind, Transition};
use rampart::clock::Instant;
use rampart::{Error, Event, Policy, RejectReason};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn consecutive(n: u32) -> Breaker {
    Breaker::builder()
        .consecutive_failures(n)
        .jitter(0.0)
        .build()
        .expect("valid breaker")
}

/// One failure at `now`, and the transition it caused.
fn fail(b: &Breaker, now: Instant) -> Option<Transition> {
    b.try_acquire(now)
        .expect("admitted")
        .record(Evidence::Failure, ms(1), now)
}

/// Records `n` outcomes of `evidence` at `now`; panics if one is refused.
fn record(b: &Breaker, n: u32, evidence: Evidence, now: Instant) {
    for _ in 0..n {
        let permit = b.try_acquire(now).expect("admitted");
        permit.record(evidence, ms(1), now);
    }
}

#[test]
fn force_closed_admits_everything_and_never_opens() {
    let b = consecutive(2);
    let t0 = Instant::now();
    let forced = b.force_closed(t0).expect("a transition");
    assert_eq!(
        (forced.from, forced.to),
        (StateKind::Closed, StateKind::ForcedClosed)
    );
    record(&b, 10, Evidence::Failure, t0);
    assert_eq!(b.state(t0), BreakerState::ForcedClosed);
    assert!(!b.try_acquire(t0).expect("admitted").is_probe());
    assert_eq!(b.force_closed(t0), None, "already forced closed");
}

#[test]
fn force_closed_from_open_admits_at_once() {
    let b = consecutive(1);
    let t0 = Instant::now();
    record(&b, 1, Evidence::Failure, t0);
    assert_eq!(b.state(t0).kind(), StateKind::Open);
    let forced = b.force_closed(t0).expect("a transition");
    assert_eq!(
        (forced.from, forced.to),
        (StateKind::Open, StateKind::ForcedClosed)
    );
    assert!(b.try_acquire(t0).is_ok());
}

#[test]
fn released_from_forced_closed_the_failures_recorded_while_forced_still_count() {
    let b = consecutive(3);
    let t0 = Instant::now();
    b.force_closed(t0);
    record(&b, 5, Evidence::Failure, t0);
    let released = b.release(t0).expect("a transition");
    assert_eq!(
        (released.from, released.to),
        (StateKind::ForcedClosed, StateKind::Closed)
    );
    assert_eq!(b.state(t0), BreakerState::Closed);
    let opened = fail(&b, t0).expect("the next failure opens it");
    assert_eq!(opened.to, StateKind::Open);
}

#[test]
fn a_success_while_forced_closed_resets_the_count_it_keeps() {
    let b = consecutive(3);
    let t0 = Instant::now();
    b.force_closed(t0);
    record(&b, 5, Evidence::Failure, t0);
    record(&b, 1, Evidence::Success, t0);
    b.release(t0);
    record(&b, 2, Evidence::Failure, t0);
    assert_eq!(b.state(t0), BreakerState::Closed, "two failures of three");
}

#[test]
fn isolation_rejects_everything_until_released_and_then_counts_start_from_zero() {
    let b = consecutive(2);
    let t0 = Instant::now();
    record(&b, 1, Evidence::Failure, t0);
    b.isolate(t0).expect("a transition");
    let refused = b.try_acquire(t0 + Duration::from_secs(3600)).unwrap_err();
    assert_eq!(refused.retry_after, None);
    let released = b.release(t0).expect("a transition");
    assert_eq!(
        (released.from, released.to),
        (StateKind::Isolated, StateKind::Closed)
    );
    record(&b, 1, Evidence::Failure, t0);
    assert_eq!(
        b.state(t0),
        BreakerState::Closed,
        "the failure before isolation is gone"
    );
}

#[test]
fn release_changes_nothing_when_nothing_is_forced() {
    let b = consecutive(1);
    let t0 = Instant::now();
    assert_eq!(b.release(t0), None);
    record(&b, 1, Evidence::Failure, t0);
    assert_eq!(b.release(t0), None);
    assert_eq!(b.state(t0).kind(), StateKind::Open);
}

#[test]
fn forcing_one_way_then_the_other_moves_between_the_forced_states() {
    let b = consecutive(1);
    let t0 = Instant::now();
    b.isolate(t0);
    let t = b.force_closed(t0).expect("a transition");
    assert_eq!(
        (t.from, t.to),
        (StateKind::Isolated, StateKind::ForcedClosed)
    );
    let t = b.isolate(t0).expect("a transition");
    assert_eq!(
        (t.from, t.to),
        (StateKind::ForcedClosed, StateKind::Isolated)
    );
    let t = b.reset(t0).expect("reset ends a forced state too");
    assert_eq!(t.to, StateKind::Closed);
}

#[test]
fn an_open_breaker_stays_open_when_its_thresholds_change_and_the_next_break_uses_them() {
    let b = Breaker::builder()
        .consecutive_failures(1)
        .break_duration(Duration::from_secs(10))
        .jitter(0.0)
        .build()
        .expect("valid");
    let t0 = Instant::now();
    record(&b, 1, Evidence::Failure, t0);
    b.reconfigure(|b| {
        b.break_duration(Duration::from_secs(2))
            .max_break(Duration::from_secs(2))
            .probe_successes(1)
    })
    .expect("valid update");
    // The running break keeps its end.
    assert_eq!(
        b.state(t0 + Duration::from_secs(5)),
        BreakerState::Open {
            remaining: Duration::from_secs(5)
        }
    );
    // A failed probe opens it again, for the new break.
    let probe = b
        .try_acquire(t0 + Duration::from_secs(10))
        .expect("a probe");
    let reopened = probe
        .record(Evidence::Failure, ms(1), t0 + Duration::from_secs(10))
        .expect("re-opened");
    assert_eq!(reopened.break_duration, Some(Duration::from_secs(2)));
}

#[test]
fn lowering_the_consecutive_threshold_counts_the_failures_already_seen() {
    let b = consecutive(5);
    let t0 = Instant::now();
    record(&b, 3, Evidence::Failure, t0);
    b.reconfigure(|b| b.consecutive_failures(2)).expect("valid");
    let opened = fail(&b, t0);
    assert_eq!(opened.map(|t| t.to), Some(StateKind::Open));
}

#[test]
fn raising_the_consecutive_threshold_keeps_a_breaker_closed_that_would_have_opened() {
    let b = consecutive(2);
    let t0 = Instant::now();
    record(&b, 1, Evidence::Failure, t0);
    b.reconfigure(|b| b.consecutive_failures(4)).expect("valid");
    record(&b, 2, Evidence::Failure, t0);
    assert_eq!(b.state(t0), BreakerState::Closed);
    record(&b, 1, Evidence::Failure, t0);
    assert_eq!(b.state(t0).kind(), StateKind::Open);
}

#[test]
fn ratio_thresholds_change_live_over_the_counts_already_in_the_window() {
    let b = Breaker::builder()
        .failure_ratio(0.5, Duration::from_secs(10), 10)
        .jitter(0.0)
        .build()
        .expect("valid");
    let t0 = Instant::now();
    record(&b, 3, Evidence::Failure, t0);
    record(&b, 1, Evidence::Success, t0);
    b.reconfigure(|b| b.failure_ratio(0.5, Duration::from_secs(10), 4))
        .expect("valid");
    let opened = fail(&b, t0);
    assert_eq!(opened.map(|t| t.to), Some(StateKind::Open), "4 of 5 failed");
}

#[test]
fn a_slow_call_threshold_set_live_turns_slow_successes_into_failures() {
    let b = consecutive(1);
    let t0 = Instant::now();
    b.reconfigure(|b| b.slow_call(ms(100))).expect("valid");
    let opened = b
        .try_acquire(t0)
        .expect("admitted")
        .record(Evidence::Success, ms(150), t0);
    assert_eq!(opened.map(|t| t.to), Some(StateKind::Open));
}

#[test]
fn a_rejected_breaker_update_changes_nothing_and_says_why() {
    let b = consecutive(5);
    let before = b.to_string();
    let error = b
        .reconfigure(|b| {
            b.break_duration(Duration::from_secs(1))
                .jitter(1.5)
                .half_open_probes(0)
        })
        .expect_err("invalid");
    let problems: Vec<_> = error.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        problems,
        [
            "breaker.jitter must be in [0, 1) (was 1.5)",
            "breaker.half_open_probes must be at least 1 (was 0)"
        ]
    );
    assert_eq!(
        b.to_string(),
        before,
        "the valid break duration was not applied either"
    );
}

#[test]
fn a_running_breaker_keeps_its_mode_window_and_seed() {
    let ratio = Breaker::builder()
        .failure_ratio(0.5, Duration::from_secs(10), 4)
        .seed(1)
        .build()
        .expect("valid");
    let error = ratio
        .reconfigure(|b| b.failure_ratio(0.5, Duration::from_secs(20), 4).seed(2))
        .expect_err("fixed at build");
    let fields: Vec<_> = error.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, ["breaker.failure_ratio", "breaker.seed"]);
    assert!(
        error.to_string().contains("was 20s, running 10s"),
        "{error}"
    );
    let error = ratio
        .reconfigure(|b| b.consecutive_failures(3))
        .expect_err("mode fixed at build");
    assert_eq!(error.problems()[0].field(), "breaker.consecutive_failures");
    let error = consecutive(3)
        .reconfigure(|b| b.failure_ratio(0.5, Duration::from_secs(10), 4))
        .expect_err("mode fixed at build");
    assert_eq!(error.problems()[0].field(), "breaker.failure_ratio");
}

#[test]
fn every_clone_of_a_breaker_sees_its_update() {
    let b = consecutive(5);
    let clone = b.clone();
    b.reconfigure(|b| b.consecutive_failures(1)).expect("valid");
    let t0 = Instant::now();
    record(&clone, 1, Evidence::Failure, t0);
    assert_eq!(b.state(t0).kind(), StateKind::Open);
}

#[tokio::test(start_paused = true)]
async fn a_policys_forced_breaker_is_reported_and_obeyed() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let events = seen.clone();
    let policy = Policy::builder()
        .max_attempts(1)
        .no_budget()
        .breaker(consecutive(1))
        .listener(move |event| {
            if let Event::BreakerTransition { from, to, .. } = event {
                events.lock().expect("events").push((*from, *to));
            }
        })
        .build()
        .expect("valid");
    let fail = async || {
        policy
            .run(async |_| Err::<(), _>(std::io::Error::other("down")))
            .await
    };
    policy
        .breaker()
        .expect("a breaker")
        .force_closed(policy.clock().now())
        .expect("a transition");
    for _ in 0..3 {
        assert!(
            matches!(fail().await, Err(Error::Inner(_))),
            "runs while forced closed"
        );
    }
    policy
        .breaker()
        .expect("a breaker")
        .release(policy.clock().now())
        .expect("a transition");
    assert!(matches!(fail().await, Err(Error::Inner(_))));
    assert_eq!(
        policy.breaker_state().map(|s| s.kind()),
        Some(StateKind::Open)
    );
    policy
        .breaker()
        .expect("a breaker")
        .isolate(policy.clock().now())
        .expect("a transition");
    assert!(matches!(
        fail().await,
        Err(Error::Rejected {
            reason: RejectReason::DependencyUnavailable,
            retry_after: None,
            ..
        })
    ));
    assert_eq!(
        policy
            .breaker()
            .expect("a breaker")
            .release(policy.clock().now())
            .map(|t| t.to),
        Some(StateKind::Closed)
    );
    use StateKind::*;
    assert_eq!(
        *seen.lock().expect("events"),
        [
            (Closed, ForcedClosed),
            (ForcedClosed, Closed),
            (Closed, Open),
            (Open, Isolated),
            (Isolated, Closed)
        ]
    );
}

fn ratio(ratio: f64, min_throughput: u32) -> Breaker {
    Breaker::builder()
        .failure_ratio(ratio, Duration::from_secs(10), min_throughput)
        .jitter(0.0)
        .build()
        .expect("valid breaker")
}

#[test]
fn failures_counted_before_force_closed_still_count_after_release() {
    let b = consecutive(3);
    let t0 = Instant::now();
    record(&b, 2, Evidence::Failure, t0);
    b.force_closed(t0).expect("a transition");
    b.release(t0).expect("a transition");
    let opened = fail(&b, t0);
    assert_eq!(
        opened.map(|t| t.to),
        Some(StateKind::Open),
        "2 failures before forcing and 1 after release reach 3"
    );
}

#[test]
fn a_release_whose_carried_failures_reach_the_threshold_stays_closed_until_the_next_failure() {
    let b = consecutive(3);
    let t0 = Instant::now();
    record(&b, 2, Evidence::Failure, t0);
    b.force_closed(t0);
    record(&b, 1, Evidence::Failure, t0);
    let released = b.release(t0).expect("a transition");
    assert_eq!(
        (released.from, released.to),
        (StateKind::ForcedClosed, StateKind::Closed),
        "3 failures of 3 carried, but a release never opens it"
    );
    assert_eq!(b.state(t0), BreakerState::Closed);
    let opened = fail(&b, t0);
    assert_eq!(opened.map(|t| t.to), Some(StateKind::Open));
}

#[test]
fn a_failure_admitted_before_force_closed_and_recorded_while_forced_is_counted() {
    let b = consecutive(2);
    let t0 = Instant::now();
    let in_flight = b.try_acquire(t0).expect("admitted");
    b.force_closed(t0).expect("a transition");
    assert_eq!(
        in_flight.record(Evidence::Failure, ms(1), t0),
        None,
        "forced closed never opens"
    );
    b.release(t0).expect("a transition");
    let opened = fail(&b, t0);
    assert_eq!(opened.map(|t| t.to), Some(StateKind::Open), "1 + 1 of 2");
}

#[test]
fn a_success_admitted_before_force_closed_and_recorded_while_forced_resets_the_count() {
    let b = consecutive(3);
    let t0 = Instant::now();
    let in_flight = b.try_acquire(t0).expect("admitted");
    b.force_closed(t0);
    record(&b, 2, Evidence::Failure, t0);
    in_flight.record(Evidence::Success, ms(1), t0);
    b.release(t0);
    record(&b, 2, Evidence::Failure, t0);
    assert_eq!(
        b.state(t0),
        BreakerState::Closed,
        "the success cleared the 2 failures recorded while forced"
    );
}

#[test]
fn a_failure_admitted_while_forced_closed_and_recorded_after_release_can_open_it() {
    let b = consecutive(1);
    let t0 = Instant::now();
    b.force_closed(t0);
    let in_flight = b.try_acquire(t0).expect("admitted");
    b.release(t0).expect("a transition");
    let opened = in_flight
        .record(Evidence::Failure, ms(1), t0)
        .expect("the failure counts in the closed state it returns to");
    assert_eq!(
        (opened.from, opened.to),
        (StateKind::Closed, StateKind::Open)
    );
}

#[test]
fn in_ratio_mode_outcomes_in_flight_across_force_closed_and_release_count_in_the_window() {
    let b = ratio(0.5, 3);
    let t0 = Instant::now();
    let before = [
        b.try_acquire(t0).expect("admitted"),
        b.try_acquire(t0).expect("admitted"),
    ];
    b.force_closed(t0).expect("a transition");
    for permit in before {
        assert_eq!(permit.record(Evidence::Failure, ms(1), t0), None, "forced");
    }
    let during = b.try_acquire(t0).expect("admitted");
    b.release(t0).expect("a transition");
    let opened = during.record(Evidence::Failure, ms(1), t0);
    assert_eq!(
        opened.map(|t| t.to),
        Some(StateKind::Open),
        "3 failures of 3"
    );
}

#[test]
fn in_ratio_mode_forcing_an_open_breaker_closed_starts_its_window_afresh() {
    let b = ratio(0.5, 2);
    let t0 = Instant::now();
    record(&b, 2, Evidence::Failure, t0);
    assert_eq!(b.state(t0).kind(), StateKind::Open);
    b.force_closed(t0).expect("a transition");
    b.release(t0).expect("a transition");
    record(&b, 1, Evidence::Failure, t0);
    assert_eq!(
        b.state(t0),
        BreakerState::Closed,
        "1 call in the window, below the minimum of 2: the failures that opened it are gone"
    );
}

#[test]
fn an_attempt_in_flight_across_isolation_counts_for_nothing() {
    let b = consecutive(1);
    let t0 = Instant::now();
    let closed = b.try_acquire(t0).expect("admitted");
    b.force_closed(t0);
    let forced = b.try_acquire(t0).expect("admitted");
    b.isolate(t0).expect("a transition");
    b.force_closed(t0).expect("a transition");
    b.release(t0).expect("a transition");
    assert_eq!(closed.record(Evidence::Failure, ms(1), t0), None);
    assert_eq!(forced.record(Evidence::Failure, ms(1), t0), None);
    assert_eq!(
        b.state(t0),
        BreakerState::Closed,
        "one failure of one would open it"
    );
}

#[test]
fn a_failure_admitted_while_forced_closed_and_recorded_after_a_reset_counts_against_the_cleared_count()
 {
    let b = consecutive(2);
    let t0 = Instant::now();
    b.force_closed(t0);
    record(&b, 1, Evidence::Failure, t0);
    let in_flight = b.try_acquire(t0).expect("admitted");
    let reset = b.reset(t0).expect("a transition");
    assert_eq!(
        (reset.from, reset.to),
        (StateKind::ForcedClosed, StateKind::Closed)
    );
    assert_eq!(
        in_flight.record(Evidence::Failure, ms(1), t0),
        None,
        "1 failure of 2: the one before the reset is cleared"
    );
    let opened = fail(&b, t0);
    assert_eq!(
        opened.map(|t| t.to),
        Some(StateKind::Open),
        "the late failure counted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_manual_change_of_a_shared_breaker_is_reported_by_every_policy_built_with_it() {
    let breaker = consecutive(1);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let built = |name: &'static str| {
        let events = seen.clone();
        Policy::builder()
            .name(name)
            .breaker(breaker.clone())
            .listener(move |event| {
                if let Event::BreakerTransition { policy, to, .. } = event {
                    events
                        .lock()
                        .expect("events")
                        .push((policy.to_string(), *to));
                }
            })
            .build()
            .expect("valid")
    };
    let (reads, writes) = (built("reads"), built("writes"));
    let gone = built("gone");
    drop(gone);
    breaker.isolate(reads.clock().now()).expect("a transition");
    let mut events = seen.lock().expect("events").clone();
    events.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        events,
        [
            ("reads".to_owned(), StateKind::Isolated),
            ("writes".to_owned(), StateKind::Isolated),
        ],
        "each live policy reports it once; a dropped one is not told"
    );
    drop(writes);
}
