//! Admission inside the executor: a refusal is processed as if the callback had returned it,
//! permits are released on every path, and a queued attempt leaves the queue when its time is
//! up.

use std::future::{Future, pending};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::admit::{Admit, AdmitContext, Feedback, Refusal};
use rampart::backoff::Backoff;
use rampart::limit::ConcurrencyLimit;
use rampart::{Criticality, Error, Instant, Policy, RejectReason, RetryBudget, StopReason};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, PartialEq, Eq)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fail")
    }
}

/// Refuses every attempt, counting how often it was asked.
#[derive(Clone, Default)]
struct RefuseAll(Arc<AtomicU32>);

impl Admit for RefuseAll {
    type Permit = ();

    fn acquire(&self, _: &AdmitContext<'_>) -> impl Future<Output = Result<(), Refusal>> + Send {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Err(Refusal {
            retry_after: Some(50 * MS),
            by: "test refuser",
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn refusing_every_attempt_never_runs_the_callback_nor_charges_the_budget() {
    let refuser = RefuseAll::default();
    let budget = RetryBudget::builder()
        .min_per_sec(0.0)
        .build()
        .expect("valid");
    let policy = Policy::builder()
        .max_attempts(4)
        .backoff(Backoff::none())
        .budget(budget.clone())
        .admit(refuser.clone())
        .build()
        .expect("valid");
    let ran = AtomicU32::new(0);
    let start = Instant::now();
    let result = policy
        .call()
        .try_run(async |_a| {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
        .await
        .expect("not cancelled");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the callback never ran");
    assert_eq!(
        refuser.0.load(Ordering::SeqCst),
        4,
        "asked once per attempt"
    );
    assert_eq!(result.attempts(), 4);
    assert_eq!(result.stop(), StopReason::Overloaded);
    assert_eq!(
        budget.balance(Instant::now()),
        1.0,
        "the budget was not charged"
    );
    assert_eq!(
        start.elapsed(),
        150 * MS,
        "retried after each refusal's retry-after"
    );
    match result.into_result() {
        Err(Error::Rejected {
            reason: RejectReason::Overloaded,
            retry_after,
            attempts: 4,
            ..
        }) => assert_eq!(retry_after, Some(50 * MS)),
        other => panic!("expected an overload rejection, got {other:?}"),
    }
}

fn limited(limit: &ConcurrencyLimit) -> Policy<rampart::ErrorsAreTransient, ConcurrencyLimit> {
    Policy::builder()
        .max_attempts(1)
        .no_budget()
        .admit(limit.clone())
        .build()
        .expect("valid")
}

#[tokio::test(start_paused = true)]
async fn with_a_limit_of_one_and_no_queue_a_second_call_is_refused_at_once() {
    let limit = ConcurrencyLimit::new(1);
    let policy = limited(&limit);
    let first = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async move |_a| {
                    tokio::time::sleep(100 * MS).await;
                    Ok::<_, Fail>("first")
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(limit.in_flight(), 1);
    let start = Instant::now();
    let second = policy.run(async |_a| Ok::<_, Fail>("second")).await;
    assert_eq!(start.elapsed(), Duration::ZERO, "refused at once");
    match second {
        Err(Error::Rejected {
            reason: RejectReason::Overloaded,
            retry_after: Some(after),
            ..
        }) => assert!(after > Duration::ZERO),
        other => panic!("expected an overload rejection, got {other:?}"),
    }
    assert_eq!(first.await.expect("joined").ok(), Some("first"));
    assert_eq!(limit.in_flight(), 0, "the permit was released");
    let third = policy.run(async |_a| Ok::<_, Fail>("third")).await;
    assert_eq!(third.ok(), Some("third"));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_or_panicking_attempt_releases_its_permit() {
    let limit = ConcurrencyLimit::new(1);
    let policy = limited(&limit);
    let dropped = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_a| pending::<Result<(), Fail>>().await)
                .await
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(limit.in_flight(), 1);
    dropped.abort();
    let _ = dropped.await;
    assert_eq!(
        limit.in_flight(),
        0,
        "dropping the call released the permit"
    );
    let panicking = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_a| -> Result<(), Fail> { panic!("callback bug") })
                .await
        })
    };
    assert!(panicking.await.is_err(), "the panic reached the task");
    assert_eq!(limit.in_flight(), 0, "unwinding released the permit");
}

#[tokio::test(start_paused = true)]
async fn a_queued_attempt_leaves_the_queue_when_its_deadline_passes() {
    let limit = ConcurrencyLimit::new(1).queue(4);
    let policy = Policy::builder()
        .max_attempts(1)
        .total_timeout(200 * MS)
        .no_budget()
        .admit(limit.clone())
        .build()
        .expect("valid");
    let holder = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async move |_a| {
                    tokio::time::sleep(150 * MS).await;
                    Ok::<_, Fail>(())
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    let waiter = {
        let policy = policy.clone();
        tokio::spawn(async move {
            tokio::time::sleep(100 * MS).await;
            let start = Instant::now();
            let outcome = policy.run(async move |_a| Ok::<_, Fail>(())).await;
            (outcome, start.elapsed())
        })
    };
    holder.await.expect("joined").expect("holder succeeded");
    let (outcome, waited) = waiter.await.expect("joined");
    assert!(
        outcome.is_ok(),
        "admitted when the holder finished: {outcome:?}"
    );
    assert_eq!(waited, 50 * MS);

    // Now a holder that outlasts the waiter's deadline.
    let holder = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_a| pending::<Result<(), Fail>>().await)
                .await
        })
    };
    tokio::task::yield_now().await;
    let start = Instant::now();
    let outcome = policy.run(async |_a| Ok::<_, Fail>(())).await;
    assert_eq!(start.elapsed(), 200 * MS, "left the queue at its deadline");
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { .. })),
        "{outcome:?}"
    );
    assert_eq!(limit.queued(), 0);
    let _ = holder.await;
}

/// Admits everything, recording the level it is told and the feedback it is given back.
#[derive(Clone, Default)]
struct Recorder {
    levels: Arc<Mutex<Vec<Criticality>>>,
    feedback: Arc<Mutex<Vec<Feedback>>>,
}

impl Admit for Recorder {
    type Permit = ();

    fn acquire(&self, cx: &AdmitContext<'_>) -> impl Future<Output = Result<(), Refusal>> + Send {
        self.levels.lock().expect("levels").push(cx.level);
        std::future::ready(Ok(()))
    }

    fn release(&self, (): (), feedback: Feedback) {
        self.feedback.lock().expect("feedback").push(feedback);
    }
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_policy_tells_its_admission_component_the_level_and_the_attempts_duration() {
    // No deadline, no timeout, no budget, no listener: only admission needs the clock and the
    // level, and the policy reads both for it.
    let recorder = Recorder::default();
    let policy = Policy::builder()
        .max_attempts(1)
        .use_ambient_criticality(true)
        .admit(recorder.clone())
        .build()
        .expect("an admission component reads the level");
    let outcome = Criticality::Sheddable
        .scope(policy.run(async |_a| {
            tokio::time::sleep(30 * MS).await;
            Ok::<_, Fail>(())
        }))
        .await;
    assert!(outcome.is_ok());
    assert_eq!(
        *recorder.levels.lock().expect("levels"),
        [Criticality::Sheddable]
    );
    assert_eq!(
        *recorder.feedback.lock().expect("feedback"),
        [Feedback::new(rampart::AttemptOutcome::Ok, 30 * MS)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_pair_asks_both_and_a_refusal_by_the_second_gives_the_first_permit_back() {
    let limit = ConcurrencyLimit::new(1);
    let refuser = RefuseAll::default();
    let policy = Policy::builder()
        .max_attempts(1)
        .no_budget()
        .admit((limit.clone(), refuser.clone()))
        .build()
        .expect("valid");
    let outcome = policy.run(async |_a| Ok::<_, Fail>(())).await;
    assert!(matches!(
        outcome,
        Err(Error::Rejected {
            reason: RejectReason::Overloaded,
            ..
        })
    ));
    assert_eq!(refuser.0.load(Ordering::SeqCst), 1);
    assert_eq!(
        limit.in_flight(),
        0,
        "the first component's permit came back"
    );
}

#[tokio::test(start_paused = true)]
async fn the_first_attempt_sent_after_refused_ones_is_not_a_retry_and_resends_count_only_sent_ones()
{
    // One permit per 100 ms, taken before the call: attempt 1 is refused (nothing sent), and
    // attempt 2, after the refusal's retry-after, is the first the dependency sees; it fails,
    // attempt 3 is refused again, and attempt 4 follows a sent one.
    let limit = rampart::limit::RateLimit::new(1, 100 * MS).expect("valid limit");
    limit.try_acquire(Instant::now()).expect("the one permit");
    let policy = Policy::builder()
        .max_attempts(4)
        .backoff(Backoff::none())
        .admit(limit)
        .build()
        .expect("valid");
    let seen = Mutex::new(Vec::new());
    let outcome = policy
        .run(async |attempt| {
            seen.lock()
                .expect("seen")
                .push((attempt.number(), attempt.resends()));
            match attempt.number() {
                2 => Err(Fail),
                _ => Ok(()),
            }
        })
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(
        *seen.lock().expect("seen"),
        [(2, 0), (4, 1)],
        "attempt 2 was the first sent; attempt 4 followed one sent one"
    );
}
