//! Dry run (issue 15): a breaker or limiter in observe-only mode decides and reports what it
//! would have refused, and lets the attempt run.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::breaker::StateKind;
use rampart::limit::{ConcurrencyLimit, DryRun};
use rampart::{Breaker, Event, Instant, Policy, StopReason};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("down")
    }
}

/// Every `WouldReject` as `attempt by`.
fn would_rejects() -> (
    Arc<Mutex<Vec<String>>>,
    impl Fn(&Event<'_>) + Send + Sync + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let listener = move |event: &Event<'_>| {
        if let Event::WouldReject { attempt, by, .. } = event {
            sink.lock().expect("seen").push(format!("{attempt} {by}"));
        }
    };
    (seen, listener)
}

fn breaker(dry_run: bool) -> Breaker {
    Breaker::builder()
        .consecutive_failures(1)
        .break_duration(Duration::from_secs(1))
        .jitter(0.0)
        .probe_successes(1)
        .dry_run(dry_run)
        .build()
        .expect("valid breaker")
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_breaker_that_would_be_open_lets_every_attempt_run_and_reports_each() {
    let (seen, listener) = would_rejects();
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff::none())
        .breaker(breaker(true))
        .listener(listener)
        .build()
        .expect("valid policy");
    let ran = AtomicU32::new(0);
    let result = policy
        .call()
        .try_run(async |_a| {
            ran.fetch_add(1, Ordering::Relaxed);
            Err::<(), _>(Down)
        })
        .await
        .expect("not cancelled");
    assert_eq!(
        result.stop(),
        StopReason::AttemptsExhausted,
        "never refused"
    );
    assert_eq!(ran.load(Ordering::Relaxed), 3);
    assert_eq!(*seen.lock().expect("seen"), ["2 breaker", "3 breaker"]);
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_breaker_opens_and_closes_when_an_enforcing_one_would() {
    let (enforcing, dry) = (breaker(false), breaker(true));
    let policy = |b: &Breaker| {
        Policy::builder()
            .max_attempts(1)
            .breaker(b.clone())
            .build()
            .expect("valid policy")
    };
    let (enforced, observed) = (policy(&enforcing), policy(&dry));
    let states = || {
        let now = Instant::now();
        (enforcing.state(now).kind(), dry.state(now).kind())
    };
    let fail = async |_: &rampart::Attempt| Err::<(), _>(Down);
    let succeed = async |_: &rampart::Attempt| Ok::<(), Down>(());
    let _ = enforced.run(fail).await;
    let _ = observed.run(fail).await;
    assert_eq!(states(), (StateKind::Open, StateKind::Open));
    // During the break: the enforcing breaker refuses, the dry-run one lets the call run and
    // does not learn from it.
    tokio::time::sleep(500 * MS).await;
    assert!(enforced.run(succeed).await.is_err());
    assert!(observed.run(succeed).await.is_ok());
    assert_eq!(states(), (StateKind::Open, StateKind::Open));
    // After it: both probe, and close on the probe's success.
    tokio::time::sleep(600 * MS).await;
    assert!(enforced.run(succeed).await.is_ok());
    assert!(observed.run(succeed).await.is_ok());
    assert_eq!(states(), (StateKind::Closed, StateKind::Closed));
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_limiter_lets_the_attempt_it_would_refuse_run_and_reports_it() {
    let (seen, listener) = would_rejects();
    let limit = DryRun::new(ConcurrencyLimit::new(1));
    let policy = Policy::builder()
        .max_attempts(1)
        .admit(limit.clone())
        .listener(listener)
        .build()
        .expect("valid policy");
    let slow = policy.run(async |_a| {
        tokio::time::sleep(100 * MS).await;
        Ok::<_, Down>(1)
    });
    let quick = async {
        tokio::time::sleep(MS).await;
        let in_flight = limit.inner().in_flight();
        (policy.run(async |_a| Ok::<_, Down>(2)).await, in_flight)
    };
    let (slow, (quick, in_flight)) = tokio::join!(slow, quick);
    assert_eq!((slow.ok(), quick.ok()), (Some(1), Some(2)));
    assert_eq!(in_flight, 1, "the limit held one permit");
    assert_eq!(*seen.lock().expect("seen"), ["1 concurrency limit"]);
    assert_eq!(limit.inner().in_flight(), 0, "nothing leaked");
}

#[test]
fn a_dry_run_breaker_says_so_in_its_description() {
    assert!(
        breaker(true)
            .to_string()
            .ends_with("(dry run: reports, never refuses)")
    );
    assert!(!breaker(false).to_string().contains("dry run"));
}
