//! A deadline given to one call (`Call::deadline`): it bounds the call like
//! the ambient deadline does, the earliest bound wins, and nothing is made ambient. All on
//! tokio's paused time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::hedge::Hedge;
use rampart::{CancellationToken, Deadline, DeadlineSource, Error, Instant, Policy};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

#[derive(Debug, PartialEq, Eq)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("upstream failed")
    }
}

async fn takes_500ms() -> Result<&'static str, Fail> {
    tokio::time::sleep(500 * MS).await;
    Ok("done")
}

/// The span and source of a call's `DeadlineExceeded`, and its attempts.
fn exceeded<T: std::fmt::Debug>(
    outcome: Result<T, Error<Fail>>,
) -> (Duration, DeadlineSource, u32) {
    match outcome {
        Err(Error::DeadlineExceeded {
            timeout: deadline,
            source,
            attempts,
            ..
        }) => (deadline, source, attempts),
        other => panic!("expected the deadline to end the call, got {other:?}"),
    }
}

fn slow_policy(ambient: bool) -> Policy {
    Policy::builder()
        .total_timeout(30 * SEC)
        .use_ambient_deadline(ambient)
        .build()
        .expect("valid")
}

#[tokio::test(start_paused = true)]
async fn a_given_200ms_deadline_cuts_a_30s_policy_that_ignores_the_ambient_one() {
    let policy = slow_policy(false);
    let start = Instant::now();
    let outcome = policy
        .call()
        .deadline(Deadline::after(200 * MS))
        .run(async |_attempt| takes_500ms().await)
        .await;
    assert_eq!(exceeded(outcome), (200 * MS, DeadlineSource::Inherited, 1));
    assert_eq!(start.elapsed(), 200 * MS);
}

#[tokio::test(start_paused = true)]
async fn the_earliest_of_the_given_the_ambient_and_the_policys_deadline_applies() {
    let policy = slow_policy(true);
    let given_first = Deadline::after(300 * MS)
        .scope(
            policy
                .call()
                .deadline(Deadline::after(100 * MS))
                .run(async |_attempt| takes_500ms().await),
        )
        .await;
    assert_eq!(
        exceeded(given_first),
        (100 * MS, DeadlineSource::Inherited, 1)
    );

    let ambient_first = Deadline::after(100 * MS)
        .scope(
            policy
                .call()
                .deadline(Deadline::after(300 * MS))
                .run(async |_attempt| takes_500ms().await),
        )
        .await;
    assert_eq!(
        exceeded(ambient_first),
        (100 * MS, DeadlineSource::Inherited, 1)
    );

    let tight = Policy::builder()
        .total_timeout(50 * MS)
        .build()
        .expect("valid");
    let policy_first = tight
        .call()
        .deadline(Deadline::after(300 * MS))
        .run(async |_attempt| takes_500ms().await)
        .await;
    assert_eq!(exceeded(policy_first), (50 * MS, DeadlineSource::Policy, 1));
}

#[tokio::test(start_paused = true)]
async fn within_twice_keeps_the_earlier_deadline() {
    let policy = slow_policy(false);
    let outcome = policy
        .call()
        .deadline(Deadline::after(100 * MS))
        .deadline(Deadline::after(300 * MS))
        .run(async |_attempt| takes_500ms().await)
        .await;
    assert_eq!(exceeded(outcome).0, 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_given_deadline_reaches_the_attempt_but_is_not_made_ambient() {
    let policy = slow_policy(false);
    let seen = policy
        .call()
        .deadline(Deadline::after(200 * MS))
        .run(async |attempt| Ok::<_, Fail>((attempt.remaining(), Deadline::current())))
        .await;
    assert_eq!(seen.ok(), Some((Some(200 * MS), None)));
}

#[tokio::test(start_paused = true)]
async fn a_given_deadline_bounds_a_call_of_policy_none() {
    let start = Instant::now();
    let outcome = Policy::none()
        .call()
        .deadline(Deadline::after(100 * MS))
        .run(async |_attempt| takes_500ms().await)
        .await;
    // Its one attempt is cut at the deadline: the deadline ended the call, as it would have
    // on any attempt.
    assert!(
        matches!(
            outcome,
            Err(Error::DeadlineExceeded {
                timeout: deadline,
                attempts: 1,
                ..
            }) if deadline == 100 * MS
        ),
        "got {outcome:?}"
    );
    assert_eq!(start.elapsed(), 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_given_deadline_stops_the_retries_of_a_call_and_counts_its_attempts() {
    let policy = Policy::builder()
        .max_attempts(10)
        .backoff(Backoff::constant(40 * MS))
        .build()
        .expect("valid");
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    let outcome = policy
        .call()
        .deadline(Deadline::after(250 * MS))
        .run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(60 * MS).await;
            Err::<(), _>(Fail)
        })
        .await;
    // Attempts at 0, 100 and 200 ms: the third is cut at 250 ms.
    assert_eq!(exceeded(outcome), (250 * MS, DeadlineSource::Inherited, 3));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(start.elapsed(), 250 * MS);
}

/// How a hedged call (legs every 50 ms, up to 3) that never succeeds ends within 120 ms:
/// given the deadline (`given`) or inheriting it from the ambient scope.
async fn hedged_within_120ms(given: bool) -> ((Duration, DeadlineSource, u32), u32, Duration) {
    let policy = Policy::builder()
        .max_attempts(3)
        .hedge(Hedge::fixed(50 * MS))
        .use_ambient_deadline(!given)
        .build()
        .expect("valid");
    let legs = AtomicU32::new(0);
    let op = async |_attempt: &rampart::Attempt| {
        legs.fetch_add(1, Ordering::SeqCst);
        takes_500ms().await
    };
    let start = Instant::now();
    let deadline = Deadline::after(120 * MS);
    let outcome = if given {
        policy.call().deadline(deadline).run(op).await
    } else {
        deadline.scope(policy.run(op)).await
    };
    (
        exceeded(outcome),
        legs.load(Ordering::SeqCst),
        start.elapsed(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_given_deadline_bounds_a_hedged_call_exactly_as_the_ambient_one_does() {
    let given = hedged_within_120ms(true).await;
    assert_eq!(given, hedged_within_120ms(false).await);
    let ((deadline, source, _), legs, elapsed) = given;
    assert_eq!(
        (deadline, source, elapsed),
        (120 * MS, DeadlineSource::Inherited, 120 * MS)
    );
    assert!(legs >= 2, "the hedge at 50 ms ran");
}

#[tokio::test(start_paused = true)]
async fn a_call_with_a_token_and_a_given_deadline_is_still_cancelled_by_its_caller() {
    let policy = slow_policy(false);
    let token = CancellationToken::new();
    let cancel = async {
        tokio::time::sleep(50 * MS).await;
        token.cancel();
    };
    let start = Instant::now();
    let (outcome, ()) = tokio::join!(
        policy
            .call()
            .token(&token)
            .deadline(Deadline::after(200 * MS))
            .run(async |_attempt| takes_500ms().await),
        cancel
    );
    assert!(matches!(outcome, Err(Error::Cancelled)), "{outcome:?}");
    assert_eq!(start.elapsed(), 50 * MS);
}
