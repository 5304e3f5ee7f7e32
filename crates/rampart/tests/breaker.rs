//! The breaker's behaviour through its public API, with explicit instants (no sleeping).
//!
//! Longer than the ~600-line guide: one file for the breaker's public behaviour, state by state,
//! sharing its instants and helpers.
// Test helpers and property bodies unwrap: a failure is the test's report.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rampart::breaker::*;
use rampart::clock::Instant;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn exact() -> BreakerBuilder {
    Breaker::builder().consecutive_failures(5).jitter(0.0)
}

fn record(b: &Breaker, evidence: Evidence, now: Instant) -> Option<Transition> {
    b.try_acquire(now)
        .expect("admitted")
        .record(evidence, MS, now)
}

fn fail_n(b: &Breaker, n: usize, now: Instant) -> Vec<Transition> {
    (0..n)
        .filter_map(|_| record(b, Evidence::Failure, now))
        .collect()
}

fn opened(from: StateKind, secs: u64) -> Transition {
    let t = record_sample();
    assert_eq!(t.to, StateKind::Open);
    let mut t = t;
    t.from = from;
    t.break_duration = Some(Duration::from_secs(secs));
    t
}

/// A real `Transition` to edit (it is `#[non_exhaustive]`, so tests cannot build one).
fn record_sample() -> Transition {
    let b = exact().consecutive_failures(1).build().unwrap();
    record(&b, Evidence::Failure, Instant::now()).unwrap()
}

/// Opens `b` (five failures in a row) at `at` and returns the transition.
fn open_at(b: &Breaker, at: Instant) -> Transition {
    let mut ts = fail_n(b, 5, at);
    assert_eq!(ts.len(), 1);
    ts.remove(0)
}

#[test]
fn four_failures_a_success_and_four_more_stay_closed_and_a_fifth_consecutive_failure_opens() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    assert!(fail_n(&b, 4, t0).is_empty());
    assert_eq!(record(&b, Evidence::Success, t0), None);
    assert!(fail_n(&b, 4, t0).is_empty());
    assert_eq!(b.state(t0), BreakerState::Closed);
    let t = record(&b, Evidence::Failure, t0).unwrap();
    assert_eq!(t, opened(StateKind::Closed, 15));
    assert_eq!(
        b.state(t0),
        BreakerState::Open {
            remaining: 15 * SEC
        }
    );
}

#[test]
fn any_number_of_ignored_outcomes_never_opens_it() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    for i in 0..1000 {
        assert_eq!(record(&b, Evidence::Ignored, t0 + i * MS), None);
    }
    assert_eq!(b.state(t0 + SEC), BreakerState::Closed);
}

#[test]
fn ignored_outcomes_do_not_reset_the_consecutive_count() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    assert!(fail_n(&b, 4, t0).is_empty());
    for _ in 0..10 {
        assert_eq!(record(&b, Evidence::Ignored, t0), None);
        drop(b.try_acquire(t0).unwrap());
    }
    assert_eq!(
        record(&b, Evidence::Failure, t0),
        Some(opened(StateKind::Closed, 15))
    );
}

#[test]
fn open_rejects_with_the_time_left_and_admits_a_probe_exactly_when_the_break_ends() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    open_at(&b, t0);
    let at = t0 + 4 * SEC;
    assert_eq!(
        b.state(at),
        BreakerState::Open {
            remaining: 11 * SEC
        }
    );
    let rejected = b.try_acquire(at).unwrap_err();
    assert_eq!(rejected.retry_after, Some(11 * SEC));

    let just_before = t0 + 15 * SEC - Duration::from_nanos(1);
    let rejected = b.try_acquire(just_before).unwrap_err();
    assert_eq!(rejected.retry_after, Some(Duration::from_nanos(1)));

    let probe = b.try_acquire(t0 + 15 * SEC).unwrap();
    assert!(probe.is_probe());
    let t = probe.transition().unwrap();
    assert_eq!(
        (t.from, t.to, t.break_duration),
        (StateKind::Open, StateKind::HalfOpen, None)
    );
    assert_eq!(b.state(t0 + 15 * SEC), BreakerState::HalfOpen);
}

#[test]
fn each_failed_probe_doubles_the_break_up_to_two_minutes() {
    let b = exact().build().unwrap();
    let mut now = Instant::now();
    assert_eq!(open_at(&b, now).break_duration, Some(15 * SEC));
    for secs in [30, 60, 120, 120, 120] {
        now += b.state(now).remaining_or_zero();
        let probe = b.try_acquire(now).unwrap();
        let t = probe.record(Evidence::Failure, MS, now).unwrap();
        assert_eq!(t, opened(StateKind::HalfOpen, secs));
        assert_eq!(
            b.state(now),
            BreakerState::Open {
                remaining: Duration::from_secs(secs)
            }
        );
    }
}

trait Remaining {
    fn remaining_or_zero(&self) -> Duration;
}

impl Remaining for BreakerState {
    fn remaining_or_zero(&self) -> Duration {
        match self {
            BreakerState::Open { remaining } => *remaining,
            _ => Duration::ZERO,
        }
    }
}

#[test]
fn two_successful_probes_close_it_and_the_next_opening_is_back_to_fifteen_seconds() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    open_at(&b, t0);
    let mut now = t0 + 15 * SEC;
    // A failed probe first, so the next break would be 60 s if closing did not reset it.
    b.try_acquire(now)
        .unwrap()
        .record(Evidence::Failure, MS, now)
        .unwrap();
    now += 30 * SEC;
    let first = b.try_acquire(now).unwrap();
    assert_eq!(first.record(Evidence::Success, MS, now), None);
    assert_eq!(b.state(now), BreakerState::HalfOpen);
    let second = b.try_acquire(now).unwrap();
    assert!(second.is_probe());
    assert_eq!(second.transition(), None);
    let t = second.record(Evidence::Success, MS, now).unwrap();
    assert_eq!(
        (t.from, t.to, t.break_duration),
        (StateKind::HalfOpen, StateKind::Closed, None)
    );
    assert_eq!(b.state(now), BreakerState::Closed);
    assert!(!b.try_acquire(now).unwrap().is_probe());
    assert_eq!(open_at(&b, now).break_duration, Some(15 * SEC));
}

#[test]
fn a_concurrent_acquire_is_rejected_while_the_probe_is_in_flight_and_dropping_the_probe_frees_it() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    open_at(&b, t0);
    let now = t0 + 15 * SEC;
    let probe = b.try_acquire(now).unwrap();
    assert_eq!(
        b.try_acquire(now).unwrap_err(),
        Rejected {
            retry_after: None,
            transition: None,
        }
    );
    drop(probe);
    assert_eq!(b.state(now), BreakerState::HalfOpen);
    let probe = b.try_acquire(now).unwrap();
    assert!(probe.is_probe());
    assert_eq!(probe.transition(), None);
}

#[test]
fn an_ignored_probe_frees_its_slot_without_deciding_anything() {
    let b = exact().probe_successes(1).build().unwrap();
    let t0 = Instant::now();
    open_at(&b, t0);
    let now = t0 + 15 * SEC;
    assert_eq!(
        b.try_acquire(now)
            .unwrap()
            .record(Evidence::Ignored, MS, now),
        None
    );
    assert_eq!(b.state(now), BreakerState::HalfOpen);
    let t = b
        .try_acquire(now)
        .unwrap()
        .record(Evidence::Success, MS, now)
        .unwrap();
    assert_eq!(t.to, StateKind::Closed);
}

#[test]
fn half_open_admits_as_many_probes_at_once_as_configured() {
    let b = exact().half_open_probes(3).build().unwrap();
    let t0 = Instant::now();
    open_at(&b, t0);
    let now = t0 + 15 * SEC;
    let probes: Vec<_> = (0..3).map(|_| b.try_acquire(now).unwrap()).collect();
    assert!(probes.iter().all(BreakerPermit::is_probe));
    assert_eq!(
        probes.iter().filter(|p| p.transition().is_some()).count(),
        1
    );
    assert!(b.try_acquire(now).is_err());
    let mut probes = probes.into_iter();
    let first = probes.next().unwrap();
    assert_eq!(first.record(Evidence::Success, MS, now), None);
    assert!(
        b.try_acquire(now).is_ok(),
        "a recorded probe frees its slot"
    );
    let second = probes.next().unwrap();
    assert_eq!(
        second.record(Evidence::Success, MS, now).unwrap().to,
        StateKind::Closed
    );
    // The third probe belongs to a half-open period that is over: it changes nothing.
    let third = probes.next().unwrap();
    assert_eq!(third.record(Evidence::Failure, MS, now), None);
    assert_eq!(b.state(now), BreakerState::Closed);
}

#[test]
fn isolate_rejects_without_retry_after_and_never_heals_until_reset() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    let t = b.isolate(t0).unwrap();
    assert_eq!(
        (t.from, t.to, t.break_duration),
        (StateKind::Closed, StateKind::Isolated, None)
    );
    assert_eq!(b.isolate(t0), None);
    for later in [t0, t0 + 15 * SEC, t0 + 3600 * SEC] {
        assert_eq!(
            b.try_acquire(later).unwrap_err(),
            Rejected {
                retry_after: None,
                transition: None,
            }
        );
        assert_eq!(b.state(later), BreakerState::Isolated);
    }
    let t = b.reset(t0 + 3600 * SEC).unwrap();
    assert_eq!((t.from, t.to), (StateKind::Isolated, StateKind::Closed));
    assert_eq!(b.state(t0 + 3600 * SEC), BreakerState::Closed);
    assert_eq!(b.reset(t0 + 3600 * SEC), None);
}

#[test]
fn reset_clears_the_consecutive_count_and_the_doubling() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    assert!(fail_n(&b, 4, t0).is_empty());
    assert_eq!(b.reset(t0), None);
    assert!(fail_n(&b, 4, t0).is_empty());
    assert_eq!(
        record(&b, Evidence::Failure, t0).unwrap().to,
        StateKind::Open
    );
    let now = t0 + 15 * SEC;
    let t = b
        .try_acquire(now)
        .unwrap()
        .record(Evidence::Failure, MS, now);
    assert_eq!(t.unwrap().break_duration, Some(30 * SEC));
    assert_eq!(b.reset(now).unwrap().from, StateKind::Open);
    assert_eq!(open_at(&b, now).break_duration, Some(15 * SEC));
}

#[test]
fn jitter_never_lengthens_a_break() {
    let b = Breaker::builder()
        .consecutive_failures(5)
        .jitter(0.5)
        .seed(7)
        .build()
        .unwrap();
    let t0 = Instant::now();
    let mut breaks = Vec::new();
    for _ in 0..100 {
        breaks.push(open_at(&b, t0).break_duration.unwrap());
        b.reset(t0).unwrap();
    }
    assert!(
        breaks.iter().all(|d| *d > 15 * SEC / 2 && *d <= 15 * SEC),
        "{breaks:?}"
    );
    assert!(
        breaks.iter().any(|d| *d != breaks[0]),
        "jitter varies the break"
    );
    let again = Breaker::builder()
        .consecutive_failures(5)
        .jitter(0.5)
        .seed(7)
        .build()
        .unwrap();
    assert_eq!(
        open_at(&again, t0).break_duration,
        Some(breaks[0]),
        "seeded: reproducible"
    );
}

#[test]
fn a_success_that_took_at_least_the_slow_call_threshold_counts_as_a_failure() {
    let b = exact()
        .consecutive_failures(2)
        .slow_call(2 * SEC)
        .build()
        .unwrap();
    let t0 = Instant::now();
    let slow = |b: &Breaker, took| {
        b.try_acquire(t0)
            .unwrap()
            .record(Evidence::Success, took, t0)
    };
    assert_eq!(slow(&b, 2 * SEC), None);
    assert_eq!(
        slow(&b, 2 * SEC - MS),
        None,
        "a fast success resets the count"
    );
    assert_eq!(slow(&b, 2 * SEC), None);
    assert_eq!(slow(&b, 5 * SEC).unwrap().to, StateKind::Open);
}

fn ratio_breaker() -> Breaker {
    exact().failure_ratio(0.5, 10 * SEC, 10).build().unwrap()
}

#[test]
fn failure_ratio_waits_for_the_minimum_throughput() {
    let b = ratio_breaker();
    let t0 = Instant::now();
    assert!(fail_n(&b, 9, t0).is_empty());
    assert_eq!(b.state(t0), BreakerState::Closed);
    assert_eq!(
        record(&b, Evidence::Failure, t0 + SEC),
        Some(opened(StateKind::Closed, 15))
    );
}

#[test]
fn failure_ratio_opens_on_the_failure_that_reaches_the_ratio() {
    let b = ratio_breaker();
    let t0 = Instant::now();
    for i in 0..4 {
        assert_eq!(record(&b, Evidence::Success, t0 + i * MS), None);
        assert_eq!(record(&b, Evidence::Failure, t0 + i * MS), None);
    }
    // 4 of 9, then 5 of 10 after a success and a failure.
    assert_eq!(record(&b, Evidence::Success, t0 + SEC), None);
    assert_eq!(
        record(&b, Evidence::Failure, t0 + SEC),
        Some(opened(StateKind::Closed, 15))
    );
}

#[test]
fn failure_ratio_stays_closed_below_the_ratio() {
    let b = ratio_breaker();
    let t0 = Instant::now();
    for _ in 0..6 {
        record(&b, Evidence::Success, t0);
    }
    assert!(fail_n(&b, 5, t0).is_empty(), "5 of 11 is below 50%");
    assert_eq!(
        record(&b, Evidence::Failure, t0).unwrap().to,
        StateKind::Open
    );
}

#[test]
fn calls_older_than_the_window_no_longer_count() {
    let b = ratio_breaker();
    let t0 = Instant::now();
    assert!(fail_n(&b, 9, t0).is_empty());
    assert_eq!(record(&b, Evidence::Failure, t0 + 10 * SEC), None);
    assert!(fail_n(&b, 8, t0 + 12 * SEC).is_empty());
    assert_eq!(
        record(&b, Evidence::Failure, t0 + 12 * SEC).unwrap().to,
        StateKind::Open
    );
}

#[test]
fn closing_forgets_the_failures_in_the_window() {
    let b = ratio_breaker();
    let t0 = Instant::now();
    assert_eq!(fail_n(&b, 10, t0).len(), 1);
    let now = t0 + 15 * SEC;
    for _ in 0..2 {
        b.try_acquire(now)
            .unwrap()
            .record(Evidence::Success, MS, now);
    }
    assert_eq!(b.state(now), BreakerState::Closed);
    assert!(fail_n(&b, 9, now).is_empty());
}

#[test]
fn state_never_consumes_a_probe() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    open_at(&b, t0);
    let now = t0 + 15 * SEC;
    for _ in 0..10 {
        assert_eq!(
            b.state(now),
            BreakerState::Open {
                remaining: Duration::ZERO
            }
        );
    }
    let probe = b.try_acquire(now).unwrap();
    for _ in 0..10 {
        assert_eq!(b.state(now), BreakerState::HalfOpen);
    }
    assert!(probe.is_probe());
}

#[test]
fn an_outcome_from_before_the_breaker_opened_changes_nothing() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    let stale = b.try_acquire(t0).unwrap();
    open_at(&b, t0);
    let now = t0 + 15 * SEC;
    let probe = b.try_acquire(now).unwrap();
    assert_eq!(stale.record(Evidence::Failure, MS, now), None);
    assert_eq!(b.state(now), BreakerState::HalfOpen);
    assert_eq!(probe.record(Evidence::Success, MS, now), None);
}

#[test]
fn clones_share_one_state() {
    let a = exact().consecutive_failures(1).build().unwrap();
    let b = a.clone();
    let t0 = Instant::now();
    record(&a, Evidence::Failure, t0).unwrap();
    assert_eq!(b.try_acquire(t0).unwrap_err().retry_after, Some(15 * SEC));
}

#[test]
fn a_failure_rate_exactly_at_the_threshold_opens_the_breaker() {
    // 7 of 25 is 28 %: "at least 0.28" must open, although `0.28 * 25.0` is 7.000000000000001.
    let b = exact().failure_ratio(0.28, 10 * SEC, 25).build().unwrap();
    let t0 = Instant::now();
    for _ in 0..18 {
        assert_eq!(record(&b, Evidence::Success, t0), None);
    }
    assert!(
        fail_n(&b, 6, t0).is_empty(),
        "24 calls: below min_throughput"
    );
    let t = record(&b, Evidence::Failure, t0).expect("7 of 25 is at the threshold");
    assert_eq!((t.from, t.to), (StateKind::Closed, StateKind::Open));
}

#[test]
fn the_failure_ratio_threshold_is_compared_exactly_for_every_rate_in_percent() {
    for percent in [
        1u64, 5, 7, 10, 14, 15, 20, 28, 29, 30, 35, 56, 57, 58, 70, 90, 99, 100,
    ] {
        let ratio = percent as f64 / 100.0;
        for total in 1..=30u64 {
            for failures in 1..=total {
                let b = exact()
                    .failure_ratio(ratio, 10 * SEC, u32::try_from(total).unwrap())
                    .build()
                    .unwrap();
                let t0 = Instant::now();
                for _ in failures..total {
                    record(&b, Evidence::Success, t0);
                }
                let opened = !fail_n(&b, failures as usize, t0).is_empty();
                let at_least = failures * 100 >= percent * total;
                assert_eq!(
                    opened, at_least,
                    "{failures} failures of {total} at a threshold of {ratio}"
                );
            }
        }
    }
}

#[test]
fn a_probe_that_never_finishes_counts_as_failed_after_the_probe_timeout() {
    let clock = rampart::ManualClock::new();
    let b = exact().probe_timeout(5 * SEC).build().unwrap();
    open_at(&b, clock.now());
    clock.advance(15 * SEC);
    // The probe hangs: no attempt timeout, no deadline, never recorded, never dropped.
    let stuck = b.try_acquire(clock.now()).unwrap();
    assert!(stuck.is_probe());
    clock.advance(5 * SEC - Duration::from_nanos(1));
    assert_eq!(
        b.try_acquire(clock.now()).unwrap_err(),
        Rejected {
            retry_after: None,
            transition: None,
        },
        "the probe still has time"
    );
    assert_eq!(b.state(clock.now()), BreakerState::HalfOpen);
    clock.advance(Duration::from_nanos(1));
    let rejected = b.try_acquire(clock.now()).unwrap_err();
    let reopened = rejected.transition.expect("the refusal re-opened it");
    assert_eq!(
        reopened,
        opened(StateKind::HalfOpen, 30),
        "the break doubled"
    );
    assert_eq!(rejected.retry_after, Some(30 * SEC));
    assert_eq!(
        b.state(clock.now()),
        BreakerState::Open {
            remaining: 30 * SEC
        }
    );
    clock.advance(30 * SEC);
    let probe = b
        .try_acquire(clock.now())
        .expect("a new probe after the break");
    assert!(probe.is_probe());
    let half_open = probe.transition().expect("open -> half-open");
    assert_eq!(
        (half_open.from, half_open.to),
        (StateKind::Open, StateKind::HalfOpen)
    );
    // The hung probe's late answer belongs to a period that is over.
    assert_eq!(stuck.record(Evidence::Failure, MS, clock.now()), None);
    assert_eq!(b.state(clock.now()), BreakerState::HalfOpen);
    assert_eq!(probe.record(Evidence::Success, MS, clock.now()), None);
    let t = record(&b, Evidence::Success, clock.now()).expect("closed");
    assert_eq!(t.to, StateKind::Closed);
}

/// A breaker with a 5 s break and a 15 s probe timeout, opened at 0; its first probe is let
/// in at 5 s and never settles (its permit is leaked, as a hung attempt holds it).
fn a_probe_hangs_at_5s_with_a_15s_probe_timeout() -> (rampart::ManualClock, Breaker) {
    let clock = rampart::ManualClock::new();
    let b = exact()
        .break_duration(5 * SEC)
        .probe_timeout(15 * SEC)
        .build()
        .unwrap();
    open_at(&b, clock.now());
    clock.advance(5 * SEC);
    let hung = b.try_acquire(clock.now()).expect("the first probe");
    assert!(hung.is_probe());
    std::mem::forget(hung);
    (clock, b)
}

#[test]
fn the_break_after_a_hung_probe_runs_from_its_timeout_so_a_later_caller_is_a_trial() {
    // A 5 s break, a 15 s probe timeout: the probe hangs at 5 s and times out at 20 s; the
    // re-opened break (10 s, doubled) ends at 30 s. A caller arriving at 65 s is the trial,
    // not refused for 10 more seconds from its own arrival.
    let (clock, b) = a_probe_hangs_at_5s_with_a_15s_probe_timeout();
    clock.advance(60 * SEC);
    let trial = b
        .try_acquire(clock.now())
        .expect("the break that followed the probe's timeout is over");
    assert!(trial.is_probe());
    assert_eq!(
        trial.expired(),
        Some(opened(StateKind::HalfOpen, 10)),
        "the hung probe re-opened the breaker at its timeout, for the doubled break"
    );
    let half_open = trial.transition().expect("open -> half-open");
    assert_eq!(
        (half_open.from, half_open.to),
        (StateKind::Open, StateKind::HalfOpen)
    );
}

#[test]
fn a_caller_inside_the_break_after_a_hung_probe_waits_only_for_what_is_left_of_it() {
    let (clock, b) = a_probe_hangs_at_5s_with_a_15s_probe_timeout();
    // The probe timed out at 20 s; its 10 s break ends at 30 s. At 24 s, 6 s are left.
    clock.advance(19 * SEC);
    let refused = b.try_acquire(clock.now()).unwrap_err();
    assert_eq!(refused.retry_after, Some(6 * SEC));
    assert_eq!(refused.transition, Some(opened(StateKind::HalfOpen, 10)));
}

#[test]
fn the_probe_timeout_runs_from_the_last_probe_let_in() {
    let clock = rampart::ManualClock::new();
    let b = exact()
        .half_open_probes(2)
        .probe_successes(3)
        .probe_timeout(5 * SEC)
        .build()
        .unwrap();
    open_at(&b, clock.now());
    clock.advance(15 * SEC);
    let first = b.try_acquire(clock.now()).unwrap();
    clock.advance(4 * SEC);
    let second = b.try_acquire(clock.now()).unwrap();
    clock.advance(4 * SEC);
    // Both slots taken, the first 8 s ago, but the second only 4 s ago.
    let rejected = b.try_acquire(clock.now()).unwrap_err();
    assert_eq!(rejected.transition, None);
    clock.advance(SEC);
    let reopened = b.try_acquire(clock.now()).unwrap_err().transition.unwrap();
    assert_eq!(
        (reopened.from, reopened.to),
        (StateKind::HalfOpen, StateKind::Open)
    );
    drop((first, second));
}

#[test]
fn a_probe_that_finishes_in_time_is_never_expired() {
    let clock = rampart::ManualClock::new();
    let b = exact().probe_timeout(5 * SEC).build().unwrap();
    open_at(&b, clock.now());
    clock.advance(15 * SEC);
    let probe = b.try_acquire(clock.now()).unwrap();
    clock.advance(4 * SEC);
    assert_eq!(probe.record(Evidence::Success, MS, clock.now()), None);
    // A free slot long after: let in, not expired, whatever the time since the first probe.
    clock.advance(60 * SEC);
    let next = b.try_acquire(clock.now()).expect("a free slot");
    assert_eq!(next.transition(), None);
    assert_eq!(
        next.record(Evidence::Success, MS, clock.now()).unwrap().to,
        StateKind::Closed
    );
}
