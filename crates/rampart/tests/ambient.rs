//! The ambient deadline and criticality across awaits, tasks and threads, and what a policy
//! that opted in does with them; draining. All on tokio's paused time.

use std::future::pending;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::drain::Drain;
use rampart::{
    Ambient, Criticality, Deadline, DeadlineSource, Error, Instant, Policy, RejectReason,
    StopReason,
};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

#[derive(Debug, PartialEq, Eq)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("upstream failed")
    }
}

fn slow_policy(opt_in: bool) -> Policy {
    Policy::builder()
        .total_timeout(30 * SEC)
        .use_ambient_deadline(opt_in)
        .drain(&Drain::new())
        .build()
        .expect("valid")
}

async fn takes_500ms() -> Result<&'static str, Fail> {
    tokio::time::sleep(500 * MS).await;
    Ok("done")
}

#[tokio::test(start_paused = true)]
async fn an_inherited_200ms_deadline_cuts_a_30s_policy_to_200ms() {
    let policy = slow_policy(true);
    let start = Instant::now();
    let outcome = Deadline::after(200 * MS)
        .scope(policy.run(async |_attempt| takes_500ms().await))
        .await;
    match outcome {
        Err(Error::DeadlineExceeded {
            timeout: deadline,
            source,
            attempts,
            ..
        }) => {
            assert_eq!(deadline, 200 * MS);
            assert_eq!(source, DeadlineSource::Inherited);
            assert_eq!(attempts, 1);
        }
        other => panic!("expected the inherited deadline, got {other:?}"),
    }
    assert_eq!(start.elapsed(), 200 * MS);
}

#[tokio::test(start_paused = true)]
async fn without_opting_in_the_ambient_deadline_is_ignored() {
    let policy = slow_policy(false);
    let outcome = Deadline::after(200 * MS)
        .scope(policy.run(async |_attempt| takes_500ms().await))
        .await;
    assert_eq!(outcome.ok(), Some("done"));
}

#[tokio::test(start_paused = true)]
async fn an_inherited_deadline_that_has_passed_runs_no_attempt() {
    let policy = slow_policy(true);
    let calls = AtomicU32::new(0);
    let deadline = Deadline::after(100 * MS);
    tokio::time::sleep(150 * MS).await;
    let outcome = deadline
        .scope(policy.run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            takes_500ms().await
        }))
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let error = outcome.expect_err("expired");
    assert!(matches!(
        error,
        Error::DeadlineExceeded {
            attempts: 0,
            source: DeadlineSource::Inherited,
            ..
        }
    ));
    assert_eq!(
        error.to_string(),
        "inherited deadline of 0ns had passed before the first attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn the_ambient_scope_crosses_awaits_spawns_and_blocking_threads_through_the_helpers() {
    let ambient = Ambient::new()
        .with_deadline(Deadline::after(SEC))
        .with_criticality(Criticality::SheddablePlus);
    ambient
        .scope(async {
            tokio::time::sleep(100 * MS).await;
            assert_eq!(Deadline::current().map(Deadline::remaining), Some(900 * MS));
            let spawned = Ambient::spawn(async { (Deadline::current(), Criticality::current()) });
            let (deadline, level) = spawned.await.expect("joined");
            assert!(deadline.is_some());
            assert_eq!(level, Criticality::SheddablePlus);
            let blocking = Ambient::spawn_blocking(Criticality::current);
            assert_eq!(blocking.await.expect("joined"), Criticality::SheddablePlus);
            let thread = std::thread::spawn(Ambient::carry(Criticality::current));
            assert_eq!(thread.join().expect("joined"), Criticality::SheddablePlus);
            let plain = tokio::spawn(async { Deadline::current() });
            assert_eq!(
                plain.await.expect("joined"),
                None,
                "no helper, no ambient deadline"
            );
        })
        .await;
}

#[test]
fn ambient_criticality_on_a_policy_with_nothing_to_gate_is_a_configuration_error() {
    let err = Policy::builder()
        .max_attempts(1)
        .use_ambient_criticality(true)
        .build()
        .expect_err("nothing to gate");
    assert_eq!(
        err.to_string(),
        "use_ambient_criticality has nothing to gate: the policy makes one attempt and does not hedge"
    );
}

fn draining_policy(drain: &Drain) -> Policy {
    Policy::builder()
        .max_attempts(3)
        .total_timeout(10 * SEC)
        .backoff(Backoff::none())
        .drain(drain)
        .build()
        .expect("valid")
}

#[tokio::test(start_paused = true)]
async fn a_draining_process_does_not_retry_and_says_so() {
    let drain = Drain::new();
    let policy = draining_policy(&drain);
    drain.begin(Some(5 * SEC));
    let result = policy
        .call()
        .try_run(async |_attempt| Err::<(), _>(Fail))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::Draining);
    assert_eq!(result.attempts(), 1);
    match result.into_result() {
        Err(Error::Rejected {
            reason: RejectReason::Draining,
            last: Some(last),
            ..
        }) => assert_eq!(last.into_inner(), Some(Fail)),
        other => panic!("expected a draining rejection, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_draining_process_clamps_new_calls_to_the_grace_left_then_starts_none() {
    let drain = Drain::new();
    let policy = draining_policy(&drain);
    drain.begin(Some(SEC));
    tokio::time::sleep(400 * MS).await;
    let start = Instant::now();
    let outcome = policy
        .call()
        .try_run(async |_attempt| pending::<Result<(), Fail>>().await)
        .await
        .expect("not cancelled");
    assert_eq!(
        start.elapsed(),
        600 * MS,
        "the attempt is cut to the grace left"
    );
    assert_eq!(outcome.stop(), StopReason::Draining);
    let calls = AtomicU32::new(0);
    let late = policy
        .call()
        .try_run(async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        })
        .await
        .expect("not cancelled");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(late.stop(), StopReason::Draining);
}
