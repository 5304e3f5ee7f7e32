//! The executor contract (`CONTRACT.md` at the repository root), one test per rule, on tokio's
//! paused time: every duration asserted here is exact virtual time.
//!
//! Longer than the ~600-line guide on purpose: the contract is read rule by rule, so its tests
//! stay in one file, read beside `CONTRACT.md`, whose rules name the tests that pin them.

use std::future::pending;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::{
    AttemptOutcome, CancellationToken, Error, Event, Instant, Policy, StopReason, TimeoutMode,
    Verdict,
};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// The callback's own error type: it carries the attempt number so tests can check that the
/// last error comes back unchanged.
#[derive(Debug, PartialEq, Eq)]
struct Fail(u32);

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "failure on attempt {}", self.0)
    }
}

fn counter() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

/// Collects every event a policy emits, as owned strings.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    fn listener(&self) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
        let events = self.0.clone();
        move |event: &Event<'_>| {
            let name = format!("{event:?}");
            let kind = name.split([' ', '{']).next().unwrap_or_default().to_owned();
            events.lock().expect("recorder").push(kind);
        }
    }

    fn count(&self, kind: &str) -> usize {
        self.0
            .lock()
            .expect("recorder")
            .iter()
            .filter(|k| *k == kind)
            .count()
    }
}

#[tokio::test(start_paused = true)]
async fn caller_token_cancelled_before_the_call_runs_no_attempt() {
    let policy = Policy::builder().build().expect("valid");
    let token = CancellationToken::new();
    token.cancel();
    let calls = counter();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn caller_cancel_during_a_30s_backoff_returns_at_once() {
    let policy = Policy::builder()
        .total_timeout(Duration::from_secs(120))
        .backoff(Backoff::constant(Duration::from_secs(30)))
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(SEC).await;
        canceller.cancel();
    });
    let calls = counter();
    let start = Instant::now();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Fail(attempt.number()))
        })
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(
        start.elapsed(),
        SEC,
        "no virtual time passes beyond the cancel"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn caller_cancelled_by_a_retrying_listener_before_a_zero_backoff_starts_no_attempt() {
    let token = CancellationToken::new();
    let canceller = token.clone();
    let policy = Policy::builder()
        .backoff(Backoff::none())
        .on_retry(move |_retry| canceller.cancel())
        .build()
        .expect("valid");
    let calls = counter();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Fail(attempt.number()))
        })
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)), "got {outcome:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "no attempt after the cancel"
    );
}

#[tokio::test(start_paused = true)]
async fn caller_cancel_while_an_attempt_returns_a_value_returns_the_value() {
    let policy = Policy::builder().build().expect("valid");
    let token = CancellationToken::new();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |_attempt| {
            tokio::time::sleep(10 * MS).await;
            token.cancel();
            Ok::<_, Fail>("paid")
        })
        .await;
    assert_eq!(outcome.ok(), Some("paid"));
}

#[tokio::test(start_paused = true)]
async fn callback_that_cancels_the_caller_and_fails_gets_cancelled_without_retry() {
    let policy = Policy::builder()
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let calls = counter();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            token.cancel();
            Err::<(), _>(Fail(attempt.number()))
        })
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn caller_cancellation_is_neither_breaker_evidence_nor_charged_to_the_budget() {
    let policy = Policy::builder()
        .breaker(
            rampart::Breaker::builder()
                .consecutive_failures(1)
                .build()
                .expect("valid breaker"),
        )
        .build()
        .expect("valid");
    let balance = policy.budget_balance();
    let token = CancellationToken::new();
    for _ in 0..3 {
        token.cancel();
        let outcome = policy
            .call()
            .token(&token)
            .run(async |attempt| Err::<(), _>(Fail(attempt.number())))
            .await;
        assert!(matches!(outcome, Err(Error::Cancelled)));
    }
    let cancelled_mid_call = CancellationToken::new();
    let outcome = policy
        .call()
        .token(&cancelled_mid_call)
        .run(async |attempt| {
            cancelled_mid_call.cancel();
            Err::<(), _>(Fail(attempt.number()))
        })
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(
        policy.breaker_state(),
        Some(rampart::breaker::BreakerState::Closed),
        "a breaker that opens after one failure saw none"
    );
    assert_eq!(policy.budget_balance(), balance, "nothing charged");
}

#[tokio::test(start_paused = true)]
async fn no_time_left_after_a_failed_attempt_ends_deadline_exceeded_with_that_failure() {
    // Cooperative mode: the attempt ignores its ceiling and fails after the deadline passed,
    // so the ceiling did not decide it; with attempts left, no time is.
    let policy = Policy::builder()
        .max_attempts(3)
        .total_timeout(100 * MS)
        .timeout_mode(TimeoutMode::Cooperative)
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |attempt| {
            tokio::time::sleep(150 * MS).await;
            Err::<(), _>(Fail(attempt.number()))
        })
        .await;
    match outcome {
        Err(Error::DeadlineExceeded {
            timeout: deadline,
            attempts,
            last,
            ..
        }) => {
            assert_eq!((deadline, attempts), (100 * MS, 1));
            assert_eq!(last.and_then(|l| l.into_inner()), Some(Fail(1)));
        }
        other => panic!("expected deadline exceeded, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn caller_cancel_during_an_attempt_signals_its_token_and_is_not_a_timeout() {
    let timeouts = counter();
    let seen = timeouts.clone();
    let policy = Policy::builder()
        .on_timeout(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(2 * SEC).await;
        canceller.cancel();
    });
    let start = Instant::now();
    let outcome = policy
        .call()
        .token(&token)
        .run(async |attempt| {
            attempt.cancelled().await;
            Err::<(), _>(Fail(attempt.number()))
        })
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(start.elapsed(), 2 * SEC);
    assert_eq!(timeouts.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn attempt_that_honours_its_token_times_out_and_the_retry_gets_a_fresh_token() {
    let policy = Policy::builder()
        .attempt_timeout(5 * SEC)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let tokens = Mutex::new(Vec::new());
    let start = Instant::now();
    let result = policy
        .call()
        .try_run(async |attempt| {
            let token = attempt.token();
            tokens.lock().expect("tokens").push(token.clone());
            if attempt.number() == 1 {
                token.cancelled().await;
                return Err(Fail(1));
            }
            Ok("second")
        })
        .await
        .expect("not cancelled");
    assert_eq!(result.attempts(), 2);
    assert_eq!(result.stop(), StopReason::Succeeded);
    assert_eq!(result.value(), Some(&"second"));
    assert_eq!(start.elapsed(), 5 * SEC);
    let outcomes: Vec<_> = result.log().iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, [AttemptOutcome::TimedOut, AttemptOutcome::Ok]);
    let tokens = tokens.lock().expect("tokens");
    assert!(tokens[0].is_cancelled(), "the first attempt's token fired");
    assert!(
        !tokens[1].is_cancelled(),
        "the second attempt's token did not"
    );
}

#[tokio::test(start_paused = true)]
async fn late_value_in_cooperative_mode_is_delivered_with_one_timeout_ignored_and_no_hook() {
    let recorder = Recorder::default();
    let hooks = counter();
    let hook_count = hooks.clone();
    let policy = Policy::builder()
        .attempt_timeout(10 * MS)
        .timeout_mode(TimeoutMode::Cooperative)
        .listener(recorder.listener())
        .on_timeout(move |_| {
            hook_count.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .expect("valid");
    let start = Instant::now();
    let outcome = policy
        .run(async |_attempt| {
            tokio::time::sleep(30 * MS).await; // ignores its token
            Ok::<_, Fail>(7)
        })
        .await;
    assert_eq!(outcome.ok(), Some(7));
    assert_eq!(start.elapsed(), 30 * MS);
    assert_eq!(recorder.count("TimeoutIgnored"), 1);
    assert_eq!(hooks.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn awaited_attempt_more_than_a_second_past_its_ceiling_is_reported_as_orphaned_work() {
    let overruns = Arc::new(Mutex::new(Vec::new()));
    let seen = overruns.clone();
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .timeout_mode(TimeoutMode::Cooperative)
        .listener(move |event: &Event<'_>| {
            if let Event::OrphanedWork { overrun, .. } = event {
                seen.lock().expect("overruns").push(*overrun);
            }
        })
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |_attempt| {
            tokio::time::sleep(2 * SEC).await;
            Ok::<_, Fail>(())
        })
        .await;
    assert!(outcome.is_ok());
    assert_eq!(*overruns.lock().expect("overruns"), [1_900 * MS]);
}

/// Records the instant it is dropped.
struct DropClock(Arc<Mutex<Option<Instant>>>);

impl Drop for DropClock {
    fn drop(&mut self) {
        *self.0.lock().expect("drop clock") = Some(Instant::now());
    }
}

#[tokio::test(start_paused = true)]
async fn abandon_mode_drops_a_callback_that_never_returns_at_ceiling_plus_grace() {
    let recorder = Recorder::default();
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .timeout_mode(TimeoutMode::Abandon { grace: 50 * MS })
        .listener(recorder.listener())
        .build()
        .expect("valid");
    let dropped = Arc::new(Mutex::new(None));
    let start = Instant::now();
    let outcome = policy
        .run(async |_attempt| {
            let _guard = DropClock(dropped.clone());
            pending::<Result<(), Fail>>().await
        })
        .await;
    assert!(matches!(
        outcome,
        Err(Error::AttemptTimeout { timeout, attempts: 1 }) if timeout == 100 * MS
    ));
    assert_eq!(start.elapsed(), 150 * MS);
    let dropped_at = dropped
        .lock()
        .expect("dropped")
        .expect("the attempt was dropped");
    assert_eq!(dropped_at - start, 150 * MS);
    assert_eq!(recorder.count("AttemptAbandoned"), 1);
}

#[tokio::test(start_paused = true)]
async fn one_attempt_with_a_shorter_deadline_ends_deadline_exceeded_at_the_deadline() {
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(Duration::from_secs(600))
        .total_timeout(5 * SEC)
        .build()
        .expect("valid");
    let start = Instant::now();
    let outcome = policy
        .run(async |_attempt| pending::<Result<(), Fail>>().await)
        .await;
    assert_eq!(start.elapsed(), 5 * SEC);
    match outcome {
        Err(Error::DeadlineExceeded {
            timeout: deadline,
            attempts,
            last,
            ..
        }) => {
            assert_eq!((deadline, attempts), (5 * SEC, 1));
            assert!(
                matches!(last.as_deref(), Some(Error::AttemptTimeout { timeout, .. }) if *timeout == 5 * SEC),
                "the attempt cut at the deadline is the last failure, got {last:?}"
            );
        }
        other => panic!("expected deadline exceeded, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_last_attempt_cut_by_the_deadline_ends_as_an_earlier_one_would() {
    // 100 ms attempts in a 250 ms deadline: the third attempt's ceiling is the 50 ms left.
    let policy = Policy::builder()
        .max_attempts(3)
        .attempt_timeout(100 * MS)
        .total_timeout(250 * MS)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let calls = counter();
    let outcome = policy
        .run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            pending::<Result<(), Fail>>().await
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    match &outcome {
        Err(Error::DeadlineExceeded {
            timeout: deadline,
            attempts,
            ..
        }) => assert_eq!((*deadline, *attempts), (250 * MS, 3)),
        other => panic!("expected deadline exceeded, got {other:?}"),
    }
    let message = outcome.expect_err("failed").to_string();
    assert!(message.contains("250ms"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn an_attempt_cut_by_its_own_timeout_with_time_left_stays_an_attempt_timeout() {
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .total_timeout(SEC)
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |_attempt| pending::<Result<(), Fail>>().await)
        .await;
    match outcome {
        Err(Error::AttemptTimeout { timeout, attempts }) => {
            assert_eq!((timeout, attempts), (100 * MS, 1));
        }
        other => panic!("expected an attempt timeout, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_local_refusal_whose_wait_does_not_fit_ends_with_the_refusal_and_its_retry_after() {
    // One permit a second; a 500 ms deadline. The second call is refused for 1 s, which does
    // not fit: it ends with that refusal, not with a deadline 0 ms into its 500.
    let limit = rampart::limit::RateLimit::new(1, SEC).expect("valid");
    let policy = Policy::builder()
        .total_timeout(500 * MS)
        .admit(limit)
        .build()
        .expect("valid");
    let first = policy.run(async |_attempt| Ok::<_, Fail>(())).await;
    assert!(first.is_ok());
    let calls = counter();
    let start = Instant::now();
    let outcome = policy
        .call()
        .try_run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
        .await
        .expect("not cancelled");
    assert_eq!(start.elapsed(), Duration::ZERO, "nothing was slept");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing was sent");
    assert_eq!(outcome.stop(), StopReason::Overloaded);
    match outcome.into_result() {
        Err(
            error @ Error::Rejected {
                reason: rampart::RejectReason::Overloaded,
                retry_after: Some(retry_after),
                attempts: 1,
                refused: 1,
                ..
            },
        ) => {
            assert_eq!(retry_after, SEC);
            assert_eq!(
                error.to_string(),
                "rejected: admission refused; nothing sent, 1 attempt refused; retry after 1s",
                "the message says nothing reached the dependency"
            );
        }
        other => panic!("expected the refusal, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_servers_throttle_whose_wait_does_not_fit_still_ends_deadline_exceeded() {
    let policy = Policy::builder()
        .total_timeout(500 * MS)
        .classifier(|result: &Result<(), Fail>| match result {
            Ok(()) => Verdict::Ok,
            Err(_) => Verdict::Throttled {
                retry_after: Some(SEC),
            },
        })
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |attempt| Err::<(), _>(Fail(attempt.number())))
        .await;
    assert!(
        matches!(outcome, Err(Error::DeadlineExceeded { attempts: 1, .. })),
        "got {outcome:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn backoff_that_does_not_fit_the_deadline_is_not_slept() {
    let policy = Policy::builder()
        .total_timeout(SEC)
        .backoff(Backoff::constant(2 * SEC))
        .build()
        .expect("valid");
    let start = Instant::now();
    let outcome = policy
        .run(async |attempt| Err::<(), _>(Fail(attempt.number())))
        .await;
    assert_eq!(start.elapsed(), Duration::ZERO);
    match outcome {
        Err(Error::DeadlineExceeded {
            timeout: deadline,
            attempts,
            last,
            ..
        }) => {
            assert_eq!((deadline, attempts), (SEC, 1));
            assert_eq!(last.and_then(|l| l.into_inner()), Some(Fail(1)));
        }
        other => panic!("expected deadline exceeded, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn typical_latency_counts_against_the_time_left_before_a_backoff() {
    let policy = Policy::builder()
        .max_attempts(5)
        .total_timeout(SEC)
        .attempt_timeout(SEC)
        .backoff(Backoff::constant(300 * MS))
        .build()
        .expect("valid");
    // One success that took 500 ms teaches the policy its typical latency.
    policy
        .run(async |_attempt| {
            tokio::time::sleep(500 * MS).await;
            Ok::<_, Fail>(())
        })
        .await
        .expect("success");
    let start = Instant::now();
    let result = policy
        .call()
        .try_run(async |attempt| Err::<(), _>(Fail(attempt.number())))
        .await
        .expect("not cancelled");
    // t=0: fail, 300 + 500 < 1000 so sleep; t=300ms: fail, 300 + 500 >= 700 so stop.
    assert_eq!(result.stop(), StopReason::DeadlineExceeded);
    assert_eq!(result.attempts(), 2);
    assert_eq!(start.elapsed(), 300 * MS);
    let Some(Error::DeadlineExceeded {
        unfit: Some(unfit), ..
    }) = result.error()
    else {
        panic!("the backoff that did not fit: {:?}", result.error());
    };
    assert_eq!((unfit.delay(), unfit.left()), (300 * MS, 700 * MS));
    assert!(!unfit.is_min_attempt_time(), "the latency, not the floor");
    assert_eq!(
        result.error().map(ToString::to_string).as_deref(),
        Some(&*format!(
            "deadline of 1s exceeded after 2 attempts: the next backoff of 300ms and the {:?} \
             an attempt typically takes would not fit in the 700ms left",
            unfit.needed()
        ))
    );
}

#[tokio::test(start_paused = true)]
async fn permanent_error_is_returned_unchanged_after_one_attempt() {
    let policy = Policy::builder()
        .classifier(|r: &Result<(), Fail>| match r {
            Ok(()) => Verdict::Ok,
            Err(_) => Verdict::Permanent,
        })
        .build()
        .expect("valid");
    let result = policy
        .call()
        .try_run(async |attempt| Err::<(), _>(Fail(attempt.number())))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::Permanent);
    assert_eq!(result.attempts(), 1);
    assert_eq!(
        result.into_result().err().and_then(Error::into_inner),
        Some(Fail(1))
    );
}

#[tokio::test(start_paused = true)]
async fn transient_error_is_retried_until_max_attempts_and_the_last_is_returned_unchanged() {
    let policy = Policy::builder()
        .max_attempts(4)
        .backoff(Backoff::constant(10 * MS))
        .build()
        .expect("valid");
    let start = Instant::now();
    let result = policy
        .call()
        .try_run(async |attempt| Err::<(), _>(Fail(attempt.number())))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::AttemptsExhausted);
    assert_eq!(result.attempts(), 4);
    assert_eq!(start.elapsed(), 30 * MS);
    assert_eq!(
        result.into_result().err().and_then(Error::into_inner),
        Some(Fail(4))
    );
}

#[tokio::test(start_paused = true)]
async fn final_value_classified_transient_is_returned_as_the_value() {
    let policy = Policy::builder()
        .backoff(Backoff::none())
        .classifier(|r: &Result<u16, Fail>| match r {
            Ok(503) | Err(_) => Verdict::Transient,
            Ok(_) => Verdict::Ok,
        })
        .build()
        .expect("valid");
    let result = policy
        .call()
        .try_run(async |_attempt| Ok::<u16, Fail>(503))
        .await
        .expect("not cancelled");
    assert_eq!(result.attempts(), 3);
    assert_eq!(result.stop(), StopReason::AttemptsExhausted);
    assert_eq!(result.into_result().ok(), Some(503));
}

#[tokio::test(start_paused = true)]
async fn retry_after_from_a_throttled_verdict_wins_over_the_curve() {
    let policy = Policy::builder()
        .max_attempts(2)
        .backoff(Backoff::exponential(10 * MS))
        .classifier(|r: &Result<(), Fail>| match r {
            Ok(()) => Verdict::Ok,
            Err(_) => Verdict::Throttled {
                retry_after: Some(3 * SEC),
            },
        })
        .build()
        .expect("valid");
    let start = Instant::now();
    let _ = policy
        .run(async |attempt| Err::<(), _>(Fail(attempt.number())))
        .await;
    assert_eq!(start.elapsed(), 3 * SEC);
}

#[tokio::test(start_paused = true)]
async fn timeout_generator_returning_zero_fails_the_call_before_the_callback_starts() {
    let policy = Policy::builder()
        .name("search")
        .attempt_timeout_fn(|_| Duration::ZERO)
        .build()
        .expect("valid");
    let calls = counter();
    let outcome = policy
        .run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    match outcome {
        Err(Error::Config(e)) => {
            assert_eq!(e.problems()[0].field(), "attempt_timeout_fn");
            assert_eq!(
                e.to_string(),
                "attempt_timeout_fn of policy `search` returned 0ns for attempt 1; it must return a positive duration"
            );
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn timeout_generator_sets_each_attempts_ceiling() {
    let policy = Policy::builder()
        .max_attempts(2)
        .backoff(Backoff::none())
        .attempt_timeout_fn(|ctx| ctx.attempt * 100 * MS)
        .build()
        .expect("valid");
    let start = Instant::now();
    let outcome = policy
        .run(async |_attempt| pending::<Result<(), Fail>>().await)
        .await;
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { timeout, attempts: 2 }) if timeout == 200 * MS)
    );
    assert_eq!(start.elapsed(), 300 * MS);
}

#[test]
fn build_reports_zero_attempts_and_zero_timeouts_together() {
    let err = Policy::builder()
        .max_attempts(0)
        .total_timeout(Duration::ZERO)
        .attempt_timeout(Duration::ZERO)
        .build()
        .expect_err("invalid");
    let fields: Vec<_> = err.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, ["max_attempts", "total_timeout", "attempt_timeout"]);
}

/// An outer and an inner policy, each counting its own on-timeout hook.
fn nested(outer: Duration, inner: Duration) -> (Policy, Policy, Arc<AtomicU32>, Arc<AtomicU32>) {
    let (outer_hits, inner_hits) = (counter(), counter());
    let (o, i) = (outer_hits.clone(), inner_hits.clone());
    let outer = Policy::builder()
        .name("outer")
        .max_attempts(1)
        .attempt_timeout(outer)
        .on_timeout(move |_| {
            o.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .expect("valid");
    let inner = Policy::builder()
        .name("inner")
        .max_attempts(1)
        .attempt_timeout(inner)
        .on_timeout(move |_| {
            i.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .expect("valid");
    (outer, inner, outer_hits, inner_hits)
}

async fn run_nested(outer: &Policy, inner: &Policy) -> Result<(), Error<Error<Fail>>> {
    outer
        .run(async |attempt| {
            let token = attempt.token();
            inner
                .call()
                .token(&token)
                .run(async |inner_attempt| {
                    inner_attempt.cancelled().await;
                    Err::<(), _>(Fail(inner_attempt.number()))
                })
                .await
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn nested_policy_when_the_outer_ceiling_fires_first_only_the_outer_reports_a_timeout() {
    let (outer, inner, outer_hits, inner_hits) = nested(SEC, 5 * SEC);
    let outcome = run_nested(&outer, &inner).await;
    assert!(matches!(outcome, Err(Error::AttemptTimeout { timeout, .. }) if timeout == SEC));
    assert_eq!(outer_hits.load(Ordering::SeqCst), 1);
    assert_eq!(inner_hits.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn nested_policy_with_ceilings_on_the_same_instant_lets_the_outer_win() {
    let (outer, inner, outer_hits, inner_hits) = nested(SEC, SEC);
    let outcome = run_nested(&outer, &inner).await;
    assert!(matches!(outcome, Err(Error::AttemptTimeout { timeout, .. }) if timeout == SEC));
    assert_eq!(outer_hits.load(Ordering::SeqCst), 1);
    assert_eq!(inner_hits.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn nested_policy_when_the_inner_ceiling_fires_first_the_inner_reports_it() {
    let (outer, inner, outer_hits, inner_hits) = nested(5 * SEC, SEC);
    let outcome = run_nested(&outer, &inner).await;
    let inner_error = outcome.expect_err("failed").into_inner();
    assert!(matches!(inner_error, Some(Error::AttemptTimeout { .. })));
    assert_eq!(outer_hits.load(Ordering::SeqCst), 0);
    assert_eq!(inner_hits.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn panicking_listener_and_hook_never_change_the_outcome_and_are_reported() {
    let reported = Arc::new(Mutex::new(Vec::new()));
    let seen = reported.clone();
    let policy = Policy::builder()
        .name("payments")
        .max_attempts(2)
        .backoff(Backoff::none())
        .listener(|_| panic!("listener bug"))
        .on_retry(|_| panic!("retry hook bug"))
        .on_callback_error(move |failure| {
            seen.lock().expect("reported").push(format!(
                "{} {} {}",
                failure.policy, failure.callback, failure.message
            ));
        })
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |attempt| {
            if attempt.number() == 1 {
                Err(Fail(1))
            } else {
                Ok(2)
            }
        })
        .await;
    assert_eq!(outcome.ok(), Some(2));
    let reported = reported.lock().expect("reported");
    assert!(reported.contains(&"payments on_retry retry hook bug".to_owned()));
    assert!(reported.contains(&"payments listener listener bug".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn every_call_emits_exactly_one_terminal_event() {
    let recorder = Recorder::default();
    let policy = Policy::builder()
        .attempt_timeout(SEC)
        .backoff(Backoff::none())
        .listener(recorder.listener())
        .build()
        .expect("valid");
    let token = CancellationToken::new();
    let _ = policy.run(async |_a| Ok::<_, Fail>(())).await;
    let _ = policy.run(async |a| Err::<(), _>(Fail(a.number()))).await;
    let _ = policy
        .run(async |_a| pending::<Result<(), Fail>>().await)
        .await;
    token.cancel();
    let _ = policy
        .call()
        .token(&token)
        .run(async |_a| Ok::<_, Fail>(()))
        .await;
    assert_eq!(recorder.count("CallEnded"), 4);
    assert_eq!(recorder.count("AttemptEnded"), 1 + 3 + 3);
    assert_eq!(recorder.count("Retrying"), 2 + 2);
}

#[tokio::test(start_paused = true)]
async fn try_run_reports_caller_cancellation_as_an_error() {
    let policy = Policy::builder().build().expect("valid");
    let token = CancellationToken::new();
    token.cancel();
    let result = policy
        .call()
        .token(&token)
        .try_run(async |_a| Ok::<_, Fail>(()))
        .await;
    assert!(result.is_err());
}

#[tokio::test(start_paused = true)]
async fn owned_token_of_a_failed_attempt_is_cancelled_when_it_ends() {
    let policy = Policy::builder()
        .max_attempts(2)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let tokens = Mutex::new(Vec::new());
    let _ = policy
        .run(async |attempt| {
            tokens.lock().expect("tokens").push(attempt.token());
            if attempt.number() == 1 {
                Err(Fail(1))
            } else {
                Ok(())
            }
        })
        .await;
    let tokens = tokens.lock().expect("tokens");
    assert!(tokens[0].is_cancelled());
    assert!(!tokens[1].is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn error_returned_after_the_ceiling_without_looking_at_the_token_is_kept() {
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(10 * MS)
        .timeout_mode(TimeoutMode::Cooperative)
        .build()
        .expect("valid");
    let outcome = policy
        .run(async |_attempt| {
            tokio::time::sleep(20 * MS).await;
            Err::<(), _>(Fail(1))
        })
        .await;
    assert_eq!(outcome.err().and_then(Error::into_inner), Some(Fail(1)));
}

#[tokio::test(start_paused = true)]
async fn call_future_is_send_and_can_be_spawned() {
    let policy = Policy::builder().build().expect("valid");
    let calls = counter();
    let seen = calls.clone();
    let handle = tokio::spawn(async move {
        policy
            .run(async |attempt| {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(MS).await;
                Ok::<_, Fail>(attempt.number())
            })
            .await
    });
    assert_eq!(handle.await.expect("joined").ok(), Some(1));
}
