//! Building a breaker: validation, description, and settings at their extremes.

use std::time::Duration;

use rampart::breaker::*;
use rampart::clock::Instant;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn record(b: &Breaker, evidence: Evidence, now: Instant) -> Option<Transition> {
    b.try_acquire(now)
        .expect("admitted")
        .record(evidence, MS, now)
}

#[test]
fn build_reports_every_problem_at_once() {
    let err = Breaker::builder()
        .consecutive_failures(0)
        .break_duration(Duration::ZERO)
        .probe_successes(0)
        .build()
        .unwrap_err();
    let problems: Vec<_> = err
        .problems()
        .iter()
        .map(|p| (p.field(), p.message()))
        .collect();
    assert_eq!(
        problems,
        [
            ("breaker.consecutive_failures", "must be at least 1 (was 0)"),
            ("breaker.break_duration", "must be positive (was 0ns)"),
            ("breaker.probe_successes", "must be at least 1 (was 0)"),
        ]
    );
}

#[test]
fn build_checks_the_ratio_mode_and_the_break_bounds() {
    let err = Breaker::builder()
        .failure_ratio(1.5, Duration::ZERO, 0)
        .slow_call(Duration::ZERO)
        .max_break(SEC)
        .jitter(-0.1)
        .half_open_probes(0)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "breaker.failure_ratio ratio must be in (0, 1] (was 1.5); \
         breaker.failure_ratio window must be positive (was 0ns); \
         breaker.failure_ratio min_throughput must be at least 1 (was 0); \
         breaker.slow_call must be positive (was 0ns); \
         breaker.max_break must be at least the break duration 15s (was 1s); \
         breaker.jitter must be in [0, 1) (was -0.1); \
         breaker.half_open_probes must be at least 1 (was 0)"
    );
}

#[test]
fn the_last_mode_set_wins() {
    let b = Breaker::builder()
        .consecutive_failures(0)
        .failure_ratio(0.5, SEC, 1);
    assert!(b.build().is_ok());
}

#[test]
fn display_says_when_it_opens_and_for_how_long() {
    let b = Breaker::builder().build().unwrap();
    assert_eq!(
        b.to_string(),
        "breaker: open at 100% failures over 10s (at least 100 calls), break 15s doubling to 2m"
    );
    let b = Breaker::builder()
        .failure_ratio(0.5, 30 * SEC, 10)
        .slow_call(2 * SEC)
        .break_duration(SEC)
        .max_break(SEC)
        .build()
        .unwrap();
    assert_eq!(
        b.to_string(),
        "breaker: open at 50% failures over 30s (at least 10 calls), \
         successes taking 2s or more count as failures, break 1s"
    );
}

#[test]
fn extreme_settings_do_not_panic() {
    let t0 = Instant::now();
    let b = Breaker::builder()
        .consecutive_failures(1)
        .break_duration(Duration::MAX)
        .max_break(Duration::MAX)
        .jitter(0.999)
        .half_open_probes(65_535)
        .probe_successes(65_535)
        .build()
        .unwrap();
    let t = record(&b, Evidence::Failure, t0).unwrap();
    assert!(t.break_duration.unwrap() > Duration::ZERO);
    assert!(b.try_acquire(t0 + 1000 * 3600 * SEC).is_err());
    let b = Breaker::builder()
        .consecutive_failures(1)
        .break_duration(Duration::from_nanos(1))
        .jitter(0.999)
        .failure_ratio(1.0, Duration::from_nanos(1), 1)
        .build()
        .unwrap();
    let t = record(&b, Evidence::Failure, t0).unwrap();
    assert_eq!(t.break_duration, Some(Duration::from_nanos(1)));
    // An instant before the breaker's time base counts as the base.
    assert!(b.try_acquire(t0 - SEC).is_err());
    assert!(b.try_acquire(t0 + SEC).unwrap().is_probe());
}
