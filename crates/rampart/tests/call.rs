//! The one way to start a call with more than its callback: `policy.call()`, its setters in
//! any order, and every finisher with every setter (on tokio's paused time).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::fallback::Fallback;
use rampart::{CancellationToken, Deadline, Error, Policy, StopReason};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, PartialEq, Eq)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("down")
    }
}

fn failing_policy() -> Policy {
    Policy::builder()
        .max_attempts(2)
        .backoff(Backoff::none())
        .build()
        .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn setters_in_either_order_give_the_same_call() {
    let policy = failing_policy();
    let token = CancellationToken::new();
    let deadline = Deadline::after(100 * MS);
    let first = policy
        .call()
        .token(&token)
        .deadline(deadline)
        .try_run(async |attempt| Ok::<_, Down>(attempt.remaining()))
        .await
        .expect("not cancelled");
    let second = policy
        .call()
        .deadline(deadline)
        .token(&token)
        .try_run(async |attempt| Ok::<_, Down>(attempt.remaining()))
        .await
        .expect("not cancelled");
    assert_eq!(first.value(), Some(&Some(100 * MS)));
    assert_eq!(first.value(), second.value());
}

#[tokio::test(start_paused = true)]
async fn a_fallback_set_before_or_after_the_token_answers_the_same() {
    let policy = failing_policy();
    let token = CancellationToken::new();
    let answered = |fallback_first: bool| {
        let call = policy.call();
        let fallback = Fallback::on([StopReason::AttemptsExhausted]).value(7);
        let call = if fallback_first {
            call.fallback(fallback).token(&token)
        } else {
            call.token(&token).fallback(fallback)
        };
        call.run(async |_attempt| Err::<u32, _>(Down))
    };
    assert_eq!(answered(true).await.ok(), Some(7));
    assert_eq!(answered(false).await.ok(), Some(7));
}

#[tokio::test(start_paused = true)]
async fn the_earliest_of_two_given_deadlines_applies() {
    let policy = failing_policy();
    let left = policy
        .call()
        .deadline(Deadline::after(300 * MS))
        .deadline(Deadline::after(100 * MS))
        .run(async |attempt| Ok::<_, Down>(attempt.remaining()))
        .await;
    assert_eq!(left.ok().flatten(), Some(100 * MS));
}

#[test]
fn a_blocking_call_falls_back_to_a_value_and_reports_it() {
    let (policy, used) =
        fallbacks_counted(Policy::builder().max_attempts(2).backoff(Backoff::none()));
    let attempts = AtomicU32::new(0);
    let report = policy
        .call()
        .fallback(Fallback::on([StopReason::AttemptsExhausted]).value(7))
        .try_run_blocking(|_attempt| {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(Down)
        })
        .expect("not cancelled");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(report.value(), Some(&7));
    assert_eq!(report.stop(), StopReason::AttemptsExhausted);
    assert!(report.fell_back());
    assert_eq!(used.load(Ordering::SeqCst), 1, "one FallbackUsed event");
}

#[test]
fn a_blocking_call_cancelled_by_an_on_retry_hook_before_a_zero_backoff_sends_no_retry() {
    let token = CancellationToken::new();
    let canceller = token.clone();
    let policy = Policy::builder()
        .backoff(Backoff::none())
        .on_retry(move |_retry| canceller.cancel())
        .build()
        .expect("valid policy");
    let attempts = AtomicU32::new(0);
    let outcome = policy.call().token(&token).run_blocking(|_attempt| {
        attempts.fetch_add(1, Ordering::SeqCst);
        Err::<u32, _>(Down)
    });
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

/// Counts the `FallbackUsed` events a policy emits.
fn fallbacks_counted(builder: rampart::PolicyBuilder) -> (Policy, Arc<AtomicU32>) {
    let used = Arc::new(AtomicU32::new(0));
    let seen = used.clone();
    let policy = builder
        .listener(move |event| {
            if let rampart::Event::FallbackUsed { .. } = event {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()
        .expect("valid policy");
    (policy, used)
}

#[test]
fn a_blocking_call_whose_fallback_answers_with_a_pending_future_fails_naming_it() {
    let (policy, used) =
        fallbacks_counted(Policy::builder().name("recommendations").max_attempts(1));
    let outcome = policy
        .call()
        .fallback(
            Fallback::on([StopReason::AttemptsExhausted])
                .with(async |_error| std::future::pending::<Result<u32, Error<Down>>>().await),
        )
        .run_blocking(|_attempt| Err::<u32, _>(Down));
    match outcome {
        Err(Error::Config(error)) => assert_eq!(
            error.to_string(),
            "fallback of policy `recommendations` answered with a future that is not ready; a blocking call cannot await it: answer with `value`, or run the call with `run`"
        ),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert_eq!(
        used.load(Ordering::SeqCst),
        0,
        "a fallback that never answered was not used"
    );
}

#[test]
fn a_blocking_call_with_a_cancelled_token_runs_nothing_and_never_falls_back() {
    let policy = failing_policy();
    let token = CancellationToken::new();
    token.cancel();
    let attempts = AtomicU32::new(0);
    let outcome = policy
        .call()
        .token(&token)
        .fallback(Fallback::on([StopReason::Cancelled, StopReason::AttemptsExhausted]).value(7))
        .run_blocking(|_attempt| {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(Down)
        });
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_with_every_setter_is_send_and_runs_in_a_spawned_task() {
    let policy = Arc::new(failing_policy());
    let token = CancellationToken::new();
    let handle = tokio::spawn(async move {
        let sku = String::from("sku-1");
        policy
            .call()
            .token(&token)
            .deadline(Deadline::after(100 * MS))
            .fallback(Fallback::on([StopReason::AttemptsExhausted]).value(0))
            .run(async |_attempt| {
                let _borrowed: &str = &sku;
                Err::<u32, _>(Down)
            })
            .await
    });
    assert_eq!(handle.await.expect("no panic").ok(), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_report_names_the_deadline_that_applied_and_where_it_came_from() {
    let policy = Policy::builder()
        .total_timeout(500 * MS)
        .build()
        .expect("valid policy");
    let own = policy
        .call()
        .try_run(async |_attempt| Ok::<_, Down>(()))
        .await
        .expect("not cancelled");
    assert_eq!(own.timeout(), Some(500 * MS));
    assert_eq!(own.deadline_source(), Some(rampart::DeadlineSource::Policy));

    let given = policy
        .call()
        .deadline(Deadline::after(120 * MS))
        .try_run(async |_attempt| Ok::<_, Down>(()))
        .await
        .expect("not cancelled");
    assert_eq!(given.timeout(), Some(120 * MS), "the caller's is earlier");
    assert_eq!(
        given.deadline_source(),
        Some(rampart::DeadlineSource::Inherited)
    );

    let unbounded = Policy::none()
        .call()
        .try_run(async |_attempt| Ok::<_, Down>(()))
        .await
        .expect("not cancelled");
    assert_eq!(unbounded.timeout(), None);
    assert_eq!(unbounded.deadline_source(), None);
}

#[tokio::test(start_paused = true)]
async fn each_retry_counts_the_attempts_sent_before_it() {
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff::none())
        .build()
        .expect("valid policy");
    let seen = std::sync::Mutex::new(Vec::new());
    let outcome = policy
        .run(async |attempt| {
            let resent = (attempt.number(), attempt.resends());
            seen.lock().expect("seen").push(resent);
            Err::<(), _>(Down)
        })
        .await;
    assert!(outcome.is_err());
    assert_eq!(*seen.lock().expect("seen"), [(1, 0), (2, 1), (3, 2)]);
}
