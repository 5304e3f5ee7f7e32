//! The timeout generator and the on-timeout hook answering at once or with a future
//! (`MaybeAsync`): awaited by async calls, refused by blocking ones, validated, bounded by the
//! caller's cancellation (the generator) and never changing an outcome (the hook).

use std::future::pending;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::event::CallbackFailure;
use rampart::hedge::Hedge;
use rampart::timeout::MaybeAsync;
use rampart::{CancellationToken, Error, ManualClock, Policy};
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Fail;

fn counter() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

/// A shared list of what happened, in order.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, what: impl Into<String>) {
        self.0.lock().expect("log").push(what.into());
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("log"))
    }
}

fn config_problem<T: std::fmt::Debug>(outcome: Result<T, Error<Fail>>) -> (String, String) {
    match outcome {
        Err(Error::Config(e)) => (e.problems()[0].field().to_owned(), e.to_string()),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

/// The configuration problem `policy`'s call ends with, checking that its callback never ran.
async fn refused_before_the_callback(policy: &Policy) -> (String, String) {
    let calls = counter();
    let outcome = policy
        .run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the callback never starts");
    config_problem(outcome)
}

#[tokio::test(start_paused = true)]
async fn an_async_generators_answer_is_the_attempts_ceiling() {
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout_fn(|_| {
            MaybeAsync::pending(async {
                sleep(10 * MS).await;
                40 * MS
            })
        })
        .build()
        .expect("valid");
    let start = Instant::now();
    let seen = Arc::new(Mutex::new(None));
    let outcome = policy
        .run(async |attempt| {
            *seen.lock().expect("seen") = attempt.timeout();
            pending::<Result<(), Fail>>().await
        })
        .await;
    assert_eq!(*seen.lock().expect("seen"), Some(40 * MS));
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { timeout, attempts: 1 }) if timeout == 40 * MS)
    );
    assert_eq!(start.elapsed(), 50 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_caller_cancel_while_the_generator_runs_starts_no_callback_and_ends_cancelled() {
    let policy = Policy::builder()
        .attempt_timeout_fn(|_| {
            MaybeAsync::pending(async {
                sleep(Duration::from_secs(1)).await;
                100 * MS
            })
        })
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        sleep(100 * MS).await;
        canceller.cancel();
    });
    let calls = counter();
    let start = Instant::now();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(start.elapsed(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn an_async_generator_answering_zero_is_a_config_error_before_the_callback_starts() {
    let policy = Policy::builder()
        .name("search")
        .attempt_timeout_fn(|_| MaybeAsync::pending(async { Duration::ZERO }))
        .build()
        .expect("valid");
    let (field, message) = refused_before_the_callback(&policy).await;
    assert_eq!(field, "attempt_timeout_fn");
    assert_eq!(
        message,
        "attempt_timeout_fn of policy `search` returned 0ns for attempt 1; it must return a positive duration"
    );
}

#[tokio::test(start_paused = true)]
async fn a_generated_timeout_over_a_day_is_a_config_error_naming_the_value() {
    let policy = Policy::builder()
        .name("search")
        .attempt_timeout_fn(|_| Duration::from_secs(25 * 3600))
        .build()
        .expect("valid");
    let (field, message) = refused_before_the_callback(&policy).await;
    assert_eq!(field, "attempt_timeout_fn");
    assert_eq!(
        message,
        "attempt_timeout_fn of policy `search` returned 90000s for attempt 1; it must return at most 24h"
    );
}

#[tokio::test(start_paused = true)]
async fn an_async_on_timeout_hook_is_awaited_before_the_retry_and_before_the_result() {
    let log = Log::default();
    let hook_log = log.clone();
    let policy = Policy::builder()
        .max_attempts(2)
        .backoff(rampart::backoff::Backoff::none())
        .attempt_timeout(100 * MS)
        .on_timeout(move |info| {
            let log = hook_log.clone();
            let attempt = info.attempt;
            log.push(format!("hook {attempt} started"));
            MaybeAsync::pending(async move {
                sleep(50 * MS).await;
                log.push(format!("hook {attempt} done"));
            })
        })
        .build()
        .expect("valid");
    let start = Instant::now();
    let outcome = policy
        .run(async |attempt| {
            log.push(format!("attempt {}", attempt.number()));
            pending::<Result<(), Fail>>().await
        })
        .await;
    log.push("returned");
    assert!(matches!(
        outcome,
        Err(Error::AttemptTimeout { attempts: 2, .. })
    ));
    assert_eq!(
        log.take(),
        [
            "attempt 1",
            "hook 1 started",
            "hook 1 done",
            "attempt 2",
            "hook 2 started",
            "hook 2 done",
            "returned"
        ]
    );
    assert_eq!(start.elapsed(), 300 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_async_hook_is_reported_and_the_timeout_outcome_stands() {
    let failures = Log::default();
    let seen = failures.clone();
    let policy = Policy::builder()
        .name("search")
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .on_timeout(|_| {
            MaybeAsync::pending(async {
                sleep(MS).await;
                panic!("hook broke");
            })
        })
        .on_callback_error(move |failure: &CallbackFailure<'_>| {
            seen.push(format!(
                "{} {} {}",
                failure.policy, failure.callback, failure.message
            ));
        })
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |_attempt| pending::<Result<(), Fail>>().await)
        .await;
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { timeout, attempts: 1 }) if timeout == 100 * MS)
    );
    assert_eq!(failures.take(), ["search on_timeout hook broke"]);
}

#[tokio::test(start_paused = true)]
async fn a_hedges_async_generator_runs_while_the_first_leg_goes_on() {
    let calls = counter();
    let policy = Policy::builder()
        .max_attempts(2)
        .hedge(Hedge::fixed(10 * MS))
        .attempt_timeout_fn(|cx| match cx.attempt {
            1 => MaybeAsync::Ready(Duration::from_secs(1)),
            _ => MaybeAsync::pending(async {
                sleep(20 * MS).await;
                Duration::from_secs(1)
            }),
        })
        .build()
        .expect("valid");
    let start = Instant::now();
    let outcome = policy
        .run(async |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            sleep(25 * MS).await;
            Ok::<_, Fail>(attempt.number())
        })
        .await;
    assert_eq!(outcome.ok(), Some(1));
    // The first leg answered at 25 ms, while the hedge's generator (10 ms to 30 ms) ran.
    assert_eq!(start.elapsed(), 25 * MS);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hedges_async_generator_answer_starts_the_hedge() {
    let policy = Policy::builder()
        .max_attempts(2)
        .hedge(Hedge::fixed(10 * MS))
        .attempt_timeout_fn(|cx| match cx.attempt {
            1 => MaybeAsync::Ready(Duration::from_secs(1)),
            _ => MaybeAsync::pending(async {
                sleep(20 * MS).await;
                Duration::from_secs(2)
            }),
        })
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |attempt| match attempt.number() {
            1 => pending::<Result<_, Fail>>().await,
            _ => Ok(attempt.timeout()),
        })
        .await;
    assert_eq!(outcome.ok(), Some(Some(Duration::from_secs(2))));
}

/// A blocking attempt that outlives its ceiling (the manual clock moved past it) and observes
/// its cancellation: the ceiling decides it.
fn overrun(clock: &ManualClock, attempt: &rampart::Attempt) -> Result<(), Fail> {
    clock.advance(Duration::from_secs(1));
    assert!(attempt.is_cancelled());
    Err(Fail)
}

#[test]
fn a_blocking_call_refuses_a_pending_generator_naming_it() {
    let policy = Policy::builder()
        .name("search")
        .attempt_timeout_fn(|_| MaybeAsync::pending(async { 100 * MS }))
        .build()
        .expect("valid");
    let calls = counter();
    let outcome = policy.call().run_blocking(|_attempt| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Fail>(())
    });
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let (field, message) = config_problem(outcome);
    assert_eq!(field, "attempt_timeout_fn");
    assert_eq!(
        message,
        "attempt_timeout_fn of policy `search` answered attempt 1 with a future (`MaybeAsync::Pending`); a blocking call cannot await it: answer at once, or run the call with `run`"
    );
}

#[test]
fn a_blocking_call_refuses_a_pending_on_timeout_hook_naming_it() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .name("search")
        .clock(clock.clone())
        .max_attempts(2)
        .attempt_timeout(100 * MS)
        .on_timeout(|_| MaybeAsync::pending(async {}))
        .build()
        .expect("valid");
    let calls = counter();
    let outcome = policy.call().run_blocking(|attempt| {
        calls.fetch_add(1, Ordering::SeqCst);
        overrun(&clock, attempt)
    });
    // Refused at the hook: no retry follows.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let (field, message) = config_problem(outcome);
    assert_eq!(field, "on_timeout");
    assert_eq!(
        message,
        "on_timeout of policy `search` answered attempt 1 with a future (`MaybeAsync::Pending`); a blocking call cannot await it: answer at once, or run the call with `run`"
    );
}

#[test]
fn ready_answers_work_in_a_blocking_call() {
    let clock = ManualClock::new();
    let hooks = counter();
    let hooked = hooks.clone();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(1)
        .attempt_timeout_fn(|_| MaybeAsync::Ready(300 * MS))
        .on_timeout(move |info| {
            assert_eq!(info.timeout, 300 * MS);
            hooked.fetch_add(1, Ordering::SeqCst);
            MaybeAsync::Ready(())
        })
        .build()
        .expect("valid");
    let seen = Mutex::new(None);
    let outcome = policy.call().run_blocking(|attempt| {
        *seen.lock().expect("seen") = attempt.timeout();
        overrun(&clock, attempt)
    });
    assert_eq!(*seen.lock().expect("seen"), Some(300 * MS));
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { timeout, attempts: 1 }) if timeout == 300 * MS),
        "{outcome:?}"
    );
    assert_eq!(hooks.load(Ordering::SeqCst), 1);
}

#[path = "support/ready.rs"]
mod support;

#[test]
fn a_sync_generator_and_hook_leave_the_success_path_allocation_free() {
    let policy = Policy::builder()
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout_fn(|cx| Duration::from_millis(100) * cx.attempt)
        .on_timeout(|_| {})
        .build()
        .expect("valid");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let call = || support::ready(policy.run(async |attempt| Ok::<_, Fail>(attempt.timeout())));
    assert_eq!(call().ok(), Some(Some(Duration::from_millis(100))));
    let counted = allocation_counter::measure(|| {
        for _ in 0..1_000 {
            call().ok();
        }
    });
    assert_eq!(counted.count_total, 0);
}

#[tokio::test(start_paused = true)]
async fn a_generator_still_running_at_the_deadline_ends_the_call_without_starting_it() {
    let policy = Policy::builder()
        .total_timeout(200 * MS)
        .attempt_timeout_fn(|_| {
            MaybeAsync::pending(async {
                sleep(Duration::from_secs(1)).await;
                100 * MS
            })
        })
        .build()
        .expect("valid");
    let calls = counter();
    let start = Instant::now();
    let outcome = policy
        .run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
        .await;
    assert!(
        matches!(outcome, Err(Error::DeadlineExceeded { attempts: 0, .. })),
        "{outcome:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(start.elapsed(), 200 * MS);
}

/// A policy of one 100 ms attempt whose hook logs its start and, a second later, its end.
fn slow_hook_policy(deadline: Duration, log: &Log) -> Policy {
    let log = log.clone();
    Policy::builder()
        .max_attempts(1)
        .total_timeout(deadline)
        .attempt_timeout(100 * MS)
        .on_timeout(move |_| {
            let log = log.clone();
            log.push("hook started");
            MaybeAsync::pending(async move {
                sleep(Duration::from_secs(1)).await;
                log.push("hook done");
            })
        })
        .build()
        .expect("valid")
}

#[tokio::test(start_paused = true)]
async fn an_async_hook_still_running_at_the_deadline_is_dropped_and_the_outcome_stands() {
    let log = Log::default();
    let policy = slow_hook_policy(150 * MS, &log);
    let start = Instant::now();
    let outcome = policy
        .run(async |_attempt| pending::<Result<(), Fail>>().await)
        .await;
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { timeout, attempts: 1 }) if timeout == 100 * MS),
        "{outcome:?}"
    );
    assert_eq!(start.elapsed(), 150 * MS);
    assert_eq!(log.take(), ["hook started"]);
}

#[tokio::test(start_paused = true)]
async fn a_caller_cancel_during_an_async_hook_stops_the_wait_and_the_outcome_stands() {
    let log = Log::default();
    let policy = slow_hook_policy(Duration::from_secs(30), &log);
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        sleep(120 * MS).await;
        canceller.cancel();
    });
    let start = Instant::now();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |_attempt| pending::<Result<(), Fail>>().await)
        .await;
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { attempts: 1, .. })),
        "{outcome:?}"
    );
    assert_eq!(start.elapsed(), 120 * MS);
    assert_eq!(log.take(), ["hook started"]);
}
