//! The machine's rules, one test each, with no runtime: events fed by hand, instants from a
//! manual clock that only the test moves.
//!
//! Longer than the ~600-line guide, as `machine.rs` is: the machine's rules, one test each, kept
//! beside one another as the rules are.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::*;
use crate::admit::Unlimited;
use crate::backoff::Backoff;
use crate::executor::Report;
use crate::hedge::Hedge;
use crate::{Breaker, ErrorsAreTransient, ManualClock, Policy, RetryBudget};

const MS: Duration = Duration::from_millis(1);

type Plain<'p, 'r, C = ErrorsAreTransient> =
    Machine<'p, u32, &'static str, C, Unlimited, &'r mut Report, Hedging>;

/// A machine for one call of `policy`, begun at `now`, its report kept in `report`.
fn begin<'p, 'r, C: Classify<u32, &'static str>>(
    policy: &'p Policy<C, Unlimited>,
    report: &'r mut Report,
    now: Instant,
) -> Plain<'p, 'r, C> {
    Machine::new(&policy.shared, policy.shared.snapshot(), report, now, None)
}

/// A machine begun at `now` whose first answer is an attempt: the machine, that attempt's
/// ticket and its handle.
fn first_attempt<'p, 'r, C: Classify<u32, &'static str>>(
    policy: &'p Policy<C, Unlimited>,
    report: &'r mut Report,
    now: Instant,
) -> (Plain<'p, 'r, C>, Ticket<'p, ()>, Attempt) {
    let mut machine = begin(policy, report, now);
    let ticket = attempt(machine.start(false));
    let handle = handle(policy, &ticket);
    (machine, ticket, handle)
}

fn kind<T, E, P>(next: &Next<'_, T, E, P, Hedging>) -> &'static str {
    match next {
        Next::Attempt(_) => "an attempt",
        Next::Sleep { .. } => "a sleep",
        Next::Wait(_) => "a wait",
        Next::Generate { .. } => "a generator to await",
        Next::Hook { .. } => "a hook to await",
        Next::Done(_) => "the end",
    }
}

fn attempt<'p, T, E, P>(next: Next<'p, T, E, P, Hedging>) -> Ticket<'p, P> {
    match next {
        Next::Attempt(ticket) => ticket,
        other => panic!("expected an attempt, got {}", kind(&other)),
    }
}

fn done<T, E, P>(next: Next<'_, T, E, P, Hedging>) -> Result<T, Error<E>> {
    match next {
        Next::Done(finish) => finish.outcome,
        other => panic!("expected the end of the call, got {}", kind(&other)),
    }
}

fn sleep<T, E, P>(next: Next<'_, T, E, P, Hedging>) -> Duration {
    match next {
        Next::Sleep { delay, .. } => delay,
        other => panic!("expected a backoff, got {}", kind(&other)),
    }
}

/// The attempt handle a driver would begin for `ticket`.
fn handle<C, A>(policy: &Policy<C, A>, ticket: &Ticket<'_, ()>) -> Attempt {
    let mut attempt = Attempt::new(policy.shared.clock.clone(), None);
    attempt.begin(ticket.number, ticket.ceiling, ticket.began, ticket.resends);
    attempt
}

fn counting_classifier(
    calls: &Arc<AtomicU32>,
    verdict: Verdict,
) -> impl Fn(&Result<u32, &'static str>) -> Verdict + Send + Sync + 'static {
    let calls = Arc::clone(calls);
    move |result| {
        calls.fetch_add(1, Ordering::SeqCst);
        match result {
            Ok(_) => Verdict::Ok,
            Err(_) => verdict,
        }
    }
}

#[test]
fn cancelled_caller_ends_the_call_before_any_attempt() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .build()
        .expect("valid");
    let mut report = Report::default();
    let mut machine = begin(&policy, &mut report, clock.now());
    assert!(matches!(done(machine.start(true)), Err(Error::Cancelled)));
    assert_eq!(machine.attempts, 0);
}

#[test]
fn ceiling_is_the_smaller_of_attempt_timeout_and_time_left() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .total_timeout(1000 * MS)
        .attempt_timeout(700 * MS)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let mut report = Report::default();
    let mut machine = begin(&policy, &mut report, clock.now());
    let first = attempt(machine.start(false));
    assert_eq!(first.ceiling, Some(700 * MS));
    let a = handle(&policy, &first);
    clock.advance(600 * MS);
    let slept = sleep(machine.returned_next(&a, first, Some(Err("reset")), false, clock.now()));
    assert_eq!(slept, Duration::ZERO);
    let second = attempt(machine.woke(clock.now(), false));
    assert_eq!(second.number, 2);
    assert_eq!(second.ceiling, Some(400 * MS), "cut to the time left");
}

#[test]
fn err_returned_after_the_caller_cancelled_is_never_classified() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let policy = Policy::builder()
        .clock(clock.clone())
        .classifier(counting_classifier(&calls, Verdict::Transient))
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    let next = machine.returned_next(&a, ticket, Some(Err("stopped")), true, clock.now());
    assert!(matches!(done(next), Err(Error::Cancelled)));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no classifier consulted");
    drop(machine);
    assert_eq!(report.stop, StopReason::Cancelled);
}

#[test]
fn value_returned_while_the_caller_cancels_is_delivered() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    let next = machine.returned_next(&a, ticket, Some(Ok(7)), true, clock.now());
    assert_eq!(done(next).ok(), Some(7));
}

/// What the machine answers for one attempt's output, decided in place or by value: the
/// answer's kind, the value, the stop reason and the attempts made. A policy of its own for
/// each, so that no state carries over.
fn answered(
    in_place: bool,
    returned: Option<Result<u32, &'static str>>,
    cancelled: bool,
    fired: bool,
) -> (&'static str, Option<u32>, StopReason, u32) {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .attempt_timeout(100 * MS)
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    if fired {
        clock.advance(100 * MS);
        a.fire(Fired::Ceiling);
    }
    let next = if in_place {
        machine.returned_in_place_next(&a, ticket, returned, cancelled, clock.now())
    } else {
        machine.returned_next(&a, ticket, returned, cancelled, clock.now())
    };
    let what = kind(&next);
    let value = match next {
        Next::Done(finish) => finish.outcome.ok(),
        _ => None,
    };
    let attempts = machine.attempts;
    drop(machine);
    (what, value, report.stop, attempts)
}

#[test]
fn an_output_decided_in_place_gets_the_answer_it_gets_by_value() {
    // (the output, whether the caller cancelled, whether the ceiling fired)
    type Case = (Option<Result<u32, &'static str>>, bool, bool);
    let cases: [Case; 6] = [
        (Some(Ok(7)), false, false),
        (Some(Ok(7)), true, false),
        (Some(Ok(7)), false, true),
        (Some(Err("reset")), false, false),
        (Some(Err("reset")), true, false),
        (None, false, true),
    ];
    for (returned, cancelled, fired) in cases {
        assert_eq!(
            answered(false, returned, cancelled, fired),
            answered(true, returned, cancelled, fired),
            "{returned:?}, cancelled {cancelled}, fired {fired}"
        );
    }
}

#[test]
fn permanent_error_after_the_ceiling_stands_and_is_not_retried() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let policy = Policy::builder()
        .clock(clock.clone())
        .attempt_timeout(100 * MS)
        .classifier(counting_classifier(&calls, Verdict::Permanent))
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    clock.advance(100 * MS);
    a.fire(Fired::Ceiling);
    assert!(a.is_cancelled(), "the callback saw its cancellation");
    let next = machine.returned_next(&a, ticket, Some(Err("not found")), false, clock.now());
    assert!(matches!(done(next), Err(Error::Inner("not found"))));
    assert_eq!(machine.attempts, 1);
    drop(machine);
    assert_eq!(report.stop, StopReason::Permanent);
}

#[test]
fn transient_error_after_an_observed_ceiling_is_the_timeout_outcome() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .attempt_timeout(100 * MS)
        .max_attempts(1)
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    clock.advance(100 * MS);
    a.fire(Fired::Ceiling);
    let _token = a.token();
    let next = machine.returned_next(&a, ticket, Some(Err("cancelled")), false, clock.now());
    let Err(Error::AttemptTimeout { timeout, attempts }) = done(next) else {
        panic!("expected the executor's timeout outcome");
    };
    assert_eq!((timeout, attempts), (100 * MS, 1));
}

#[test]
fn breaker_open_after_a_failure_refuses_the_retry_without_sleeping_or_charging_the_budget() {
    let clock = ManualClock::new();
    let budget = RetryBudget::builder().build().expect("valid");
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .break_duration(Duration::from_secs(15))
        .jitter(0.0)
        .build()
        .expect("valid");
    let policy = Policy::builder()
        .clock(clock.clone())
        .budget(budget.clone())
        .breaker(breaker)
        .backoff(Backoff::constant(100 * MS))
        .build()
        .expect("valid");
    let before = budget.balance(clock.now());
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    let next = machine.returned_next(&a, ticket, Some(Err("reset")), false, clock.now());
    let Err(Error::Rejected {
        reason,
        retry_after,
        attempts,
        last,
        ..
    }) = done(next)
    else {
        panic!("expected the breaker's refusal");
    };
    assert_eq!(reason, RejectReason::DependencyUnavailable);
    assert_eq!(retry_after, Some(Duration::from_secs(15)));
    assert_eq!(attempts, 1);
    assert!(matches!(last.as_deref(), Some(Error::Inner("reset"))));
    assert_eq!(budget.balance(clock.now()), before, "nothing charged");
}

#[test]
fn backoff_that_does_not_fit_ends_the_call_saying_so() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .total_timeout(1000 * MS)
        .backoff(Backoff::constant(800 * MS))
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    clock.advance(400 * MS);
    let error = done(machine.returned_next(&a, ticket, Some(Err("reset")), false, clock.now()))
        .expect_err("the backoff does not fit");
    let Error::DeadlineExceeded { unfit, .. } = &error else {
        panic!("expected DeadlineExceeded, got {error}");
    };
    let unfit = unfit.expect("the backoff that did not fit");
    assert_eq!(
        (unfit.delay(), unfit.needed(), unfit.left()),
        (800 * MS, Duration::ZERO, 600 * MS)
    );
    assert_eq!(
        error.to_string(),
        "deadline of 1s exceeded after 1 attempt: the next backoff of 800ms would not fit in the 600ms left"
    );
}

/// A policy with a 1 s deadline, a 50 ms minimum attempt time and a constant `backoff`.
fn min_attempt_time_policy(clock: &ManualClock, backoff: Duration) -> Policy {
    Policy::builder()
        .clock(clock.clone())
        .total_timeout(1000 * MS)
        .min_attempt_time(50 * MS)
        .backoff(Backoff::constant(backoff))
        .build()
        .expect("valid")
}

#[test]
fn a_retry_starts_only_if_it_leaves_the_min_attempt_time() {
    // A 1 s deadline, the first attempt failing at 400 ms: a backoff of 540 ms leaves 60 ms,
    // one of 560 ms leaves 40 ms, less than the 50 ms an attempt needs.
    for (backoff, starts) in [(540 * MS, true), (560 * MS, false)] {
        let clock = ManualClock::new();
        let policy = min_attempt_time_policy(&clock, backoff);
        let mut report = Report::default();
        let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
        clock.advance(400 * MS);
        let next = machine.returned_next(&a, ticket, Some(Err("reset")), false, clock.now());
        if starts {
            assert_eq!(sleep(next), backoff);
            continue;
        }
        let error = done(next).expect_err("the retry would start with too little left");
        let Error::DeadlineExceeded { unfit, .. } = &error else {
            panic!("expected DeadlineExceeded, got {error}");
        };
        let unfit = unfit.expect("the retry that did not fit");
        assert_eq!(
            (unfit.delay(), unfit.needed(), unfit.left()),
            (backoff, 50 * MS, 600 * MS)
        );
        assert!(unfit.is_min_attempt_time());
        assert_eq!(
            error.to_string(),
            "deadline of 1s exceeded after 1 attempt: the next backoff of 560ms and the 50ms \
             min_attempt_time would not fit in the 600ms left"
        );
    }
}

#[test]
fn a_min_attempt_time_as_long_as_the_deadline_is_refused_by_build() {
    let error = Policy::builder()
        .total_timeout(100 * MS)
        .min_attempt_time(100 * MS)
        .build()
        .expect_err("invalid");
    assert_eq!(
        error.problems()[0].message(),
        "must be shorter than the total_timeout (was 100ms, total_timeout 100ms)"
    );
    assert_eq!(error.problems()[0].field(), "min_attempt_time");
}

/// A policy with no backoff, its first attempt failed: the machine answers a sleep of zero,
/// then `check` is given the machine and `woke`'s answer for a caller `cancelled` or not.
fn after_a_zero_backoff(
    cancelled: bool,
    check: impl FnOnce(u32, Next<'_, u32, &'static str, (), Hedging>),
) {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    let slept = sleep(machine.returned_next(&a, ticket, Some(Err("reset")), false, clock.now()));
    assert_eq!(slept, Duration::ZERO, "a zero backoff is still a backoff");
    let next = machine.woke(clock.now(), cancelled);
    check(machine.attempts, next);
}

#[test]
fn zero_backoff_is_a_sleep_of_zero_after_which_the_caller_is_checked() {
    after_a_zero_backoff(false, |_, next| {
        assert_eq!(
            attempt(next).number,
            2,
            "no time passes before the next attempt"
        );
    });
}

#[test]
fn caller_cancelled_during_a_zero_backoff_starts_no_further_attempt() {
    // A `Retrying` listener cancelled the caller: the driver reports it after the zero sleep.
    after_a_zero_backoff(true, |attempts, next| {
        assert!(matches!(done(next), Err(Error::Cancelled)));
        assert_eq!(attempts, 1);
    });
}

#[test]
fn caller_cancelled_with_a_zero_backoff_ends_the_call() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    let next = machine.returned_next(&a, ticket, Some(Err("reset")), true, clock.now());
    assert!(matches!(done(next), Err(Error::Cancelled)));
}

#[test]
fn caller_cancelled_during_backoff_ends_the_call() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .backoff(Backoff::constant(200 * MS))
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    let delay = sleep(machine.returned_next(&a, ticket, Some(Err("reset")), false, clock.now()));
    assert_eq!(delay, 200 * MS);
    clock.advance(50 * MS);
    assert!(matches!(
        done(machine.woke(clock.now(), true)),
        Err(Error::Cancelled)
    ));
    assert_eq!(machine.attempts, 1, "no further attempt");
}

#[test]
fn every_attempt_refused_by_admission_stops_overloaded() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(2)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let mut report = Report::default();
    let mut machine = begin(&policy, &mut report, clock.now());
    let refusal = Refusal {
        retry_after: Some(50 * MS),
        by: "test limit",
    };
    let first = attempt(machine.start(false));
    let now = clock.now();
    let Err(next) = machine.admitted(first, Admitted::Refused(refusal), now) else {
        panic!("a refusal does not run the callback");
    };
    assert_eq!(
        sleep(next),
        50 * MS,
        "the refusal's retry-after is the backoff"
    );
    clock.advance(50 * MS);
    let now = clock.now();
    let second = attempt(machine.woke(now, false));
    let Err(next) = machine.admitted(second, Admitted::Refused(refusal), now) else {
        panic!("a refusal does not run the callback");
    };
    let Err(Error::Rejected {
        reason,
        retry_after,
        ..
    }) = done(next)
    else {
        panic!("expected the refusal");
    };
    assert_eq!(
        (reason, retry_after),
        (RejectReason::Overloaded, Some(50 * MS))
    );
    drop(machine);
    assert_eq!(report.stop, StopReason::Overloaded);
    assert_eq!(report.log.total(), 2);
}

#[test]
fn failed_leg_while_another_runs_is_replaced_at_once_by_a_hedge() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(3)
        .hedge(Hedge::fixed(10 * MS))
        .build()
        .expect("valid");
    let mut report = Report::default();
    let mut machine = begin(&policy, &mut report, clock.now());
    let first = attempt(machine.start(false));
    let due = machine.hedge_due().expect("a hedge is armed");
    assert_eq!(due, clock.now() + 10 * MS);
    clock.advance(10 * MS);
    let second = attempt(machine.hedge(clock.now()));
    assert!(second.admitted, "a hedge is admitted when it starts");
    assert_eq!(second.number, 2);
    let a = handle(&policy, &first);
    let third = attempt(machine.returned_next(&a, first, Some(Err("reset")), false, clock.now()));
    assert_eq!(third.number, 3, "the failed leg was replaced at once");
    let b = handle(&policy, &second);
    assert!(matches!(
        machine.returned_next(&b, second, Some(Err("reset")), false, clock.now()),
        Next::Wait(_)
    ));
    let c = handle(&policy, &third);
    let next = machine.returned_next(&c, third, Some(Ok(3)), false, clock.now());
    assert_eq!(done(next).ok(), Some(3));
}

#[test]
fn throttled_leg_stops_hedging_for_the_round() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(3)
        .hedge(Hedge::fixed(10 * MS))
        .classifier(|r: &Result<u32, &'static str>| match r {
            Ok(_) => Verdict::Ok,
            Err(_) => Verdict::Throttled { retry_after: None },
        })
        .build()
        .expect("valid");
    let mut report = Report::default();
    let mut machine = begin(&policy, &mut report, clock.now());
    let first = attempt(machine.start(false));
    clock.advance(10 * MS);
    let second = attempt(machine.hedge(clock.now()));
    let a = handle(&policy, &first);
    let next = machine.returned_next(&a, first, Some(Err("slow down")), false, clock.now());
    assert!(
        matches!(next, Next::Wait(_)),
        "no replacement for a throttled leg"
    );
    assert_eq!(machine.hedge_due(), None);
    drop(second);
}

fn generate_step<T, E, P>(next: Next<'_, T, E, P, Hedging>) -> Option<Instant> {
    match next {
        Next::Generate { until, .. } => until,
        other => panic!("expected a generator to await, got {}", kind(&other)),
    }
}

fn pending_generator_policy(clock: &ManualClock) -> Policy {
    Policy::builder()
        .clock(clock.clone())
        .total_timeout(Duration::from_secs(1))
        .attempt_timeout_fn(|_| crate::timeout::MaybeAsync::pending(async { 40 * MS }))
        .build()
        .expect("valid")
}

#[test]
fn a_pending_generator_is_a_step_bounded_by_the_deadline_and_its_answer_sets_the_ceiling() {
    let clock = ManualClock::new();
    let policy = pending_generator_policy(&clock);
    let start = clock.now();
    let mut report = Report::default();
    let mut machine = begin(&policy, &mut report, start);
    let until = generate_step(machine.start(false));
    assert_eq!(until, Some(start + Duration::from_secs(1)));
    assert_eq!(machine.attempts, 0, "no attempt counted before the answer");
    clock.advance(5 * MS);
    let ticket = attempt(machine.generated(Bounded::Answered(40 * MS), clock.now()));
    assert_eq!((ticket.number, ticket.ceiling), (1, Some(40 * MS)));
    assert_eq!(
        ticket.began,
        clock.now(),
        "the attempt begins after the answer"
    );
}

#[test]
fn a_pending_generator_cut_short_by_the_caller_or_the_deadline_starts_no_attempt() {
    let clock = ManualClock::new();
    let policy = pending_generator_policy(&clock);
    let mut report = Report::default();
    let mut machine = begin(&policy, &mut report, clock.now());
    generate_step(machine.start(false));
    let next = machine.generated(Bounded::Cancelled, clock.now());
    assert!(matches!(done(next), Err(Error::Cancelled)));
    let mut report = Report::default();
    let mut machine = begin(&policy, &mut report, clock.now());
    generate_step(machine.start(false));
    clock.advance(Duration::from_secs(1));
    let next = machine.generated(Bounded::Expired, clock.now());
    assert!(matches!(
        done(next),
        Err(Error::DeadlineExceeded { attempts: 0, .. })
    ));
    assert_eq!(machine.attempts, 0);
}

#[test]
fn a_pending_on_timeout_hook_is_awaited_before_the_retry_is_decided() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .backoff(Backoff::none())
        .attempt_timeout(100 * MS)
        .on_timeout(|_| crate::timeout::MaybeAsync::pending(async {}))
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    clock.advance(100 * MS);
    let next = machine.returned_next(&a, ticket, None, false, clock.now());
    assert!(matches!(next, Next::Hook { .. }), "got {}", kind(&next));
    assert_eq!(machine.attempts, 1, "nothing decided while the hook runs");
    assert_eq!(sleep(machine.hooked(clock.now())), Duration::ZERO);
    let ticket = attempt(machine.woke(clock.now(), false));
    assert_eq!(ticket.number, 2);
}

#[test]
fn a_blocking_driver_refusing_a_pending_hook_names_on_timeout() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .attempt_timeout(100 * MS)
        .on_timeout(|_| crate::timeout::MaybeAsync::pending(async {}))
        .build()
        .expect("valid");
    let mut report = Report::default();
    let (mut machine, ticket, a) = first_attempt(&policy, &mut report, clock.now());
    let next = machine.returned_next(&a, ticket, None, false, clock.now());
    assert!(matches!(next, Next::Hook { .. }), "got {}", kind(&next));
    match machine.cannot_block(clock.now()).outcome {
        Err(Error::Config(e)) => assert_eq!(e.problems()[0].field(), "on_timeout"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}
