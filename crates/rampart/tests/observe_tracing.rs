//! The `tracing` feature (issue 12): a capturing subscriber sees one `rampart.call` span per
//! call with its fields, a `rampart.attempt` span per attempt, and each event at its level.

use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::breaker::Breaker;
use rampart::{Policy, TimeoutMode};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failed")
    }
}

#[path = "support/capture.rs"]
mod support;
use support::capture;

#[tokio::test(start_paused = true)]
async fn a_retried_call_has_one_call_span_an_attempt_span_each_and_retries_at_info() {
    let (capture, _guard) = capture();
    let policy = Policy::builder()
        .name("p")
        .max_attempts(2)
        .total_timeout(Duration::from_secs(1))
        .backoff(Backoff::constant(5 * MS))
        .build()
        .expect("valid policy");
    let outcome = policy
        .run(async |a| match a.number() {
            2 => Ok(2),
            _ => Err(Fail),
        })
        .await;
    assert_eq!(outcome.ok(), Some(2));
    assert_eq!(
        capture.lines(),
        [
            "DEBUG attempt ended policy=\"p\" attempt=1 outcome=\"transient\" in rampart.call",
            "INFO retrying policy=\"p\" attempt=1 outcome=\"transient\" delay=5ms in rampart.call",
            "span rampart.attempt number=1 ceiling=1s outcome=\"transient\"",
            "DEBUG attempt ended policy=\"p\" attempt=2 outcome=\"ok\" in rampart.call",
            "DEBUG call ended policy=\"p\" stop_reason=\"succeeded\" attempts=2 in rampart.call",
            "span rampart.attempt number=2 ceiling=995ms outcome=\"ok\"",
            "span rampart.call policy=\"p\" deadline=1s attempts=2 stop_reason=\"succeeded\"",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_ignored_and_orphaned_work_are_warnings() {
    let (capture, _guard) = capture();
    let policy = Policy::builder()
        .name("p")
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .timeout_mode(TimeoutMode::Cooperative)
        .build()
        .expect("valid policy");
    let outcome = policy
        .run(async |_a| {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, Fail>(())
        })
        .await;
    assert!(outcome.is_ok());
    let warnings: Vec<_> = capture
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("WARN"))
        .map(|l| l.split(':').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(warnings, ["WARN orphaned work", "WARN timeout ignored"]);
}

#[tokio::test(start_paused = true)]
async fn a_breaker_transition_is_logged_at_info_with_its_states() {
    let (capture, _guard) = capture();
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    let policy = Policy::builder()
        .name("p")
        .max_attempts(1)
        .breaker(breaker)
        .build()
        .expect("valid policy");
    let _ = policy.run(async |_a| Err::<(), _>(Fail)).await;
    let infos: Vec<_> = capture
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("INFO"))
        .collect();
    assert_eq!(
        infos,
        [
            "INFO breaker transition policy=\"p\" from=\"closed\" to=\"open\" break_duration=Some(15s) in rampart.call"
        ]
    );
}

#[test]
fn a_blocking_call_runs_in_its_call_span_too() {
    let (capture, _guard) = capture();
    let policy = Policy::builder()
        .name("p")
        .max_attempts(1)
        .build()
        .expect("valid policy");
    assert_eq!(
        policy.call().run_blocking(|_a| Ok::<_, Fail>(1)).ok(),
        Some(1)
    );
    let lines = capture.lines();
    assert_eq!(
        lines.last().map(String::as_str),
        Some("span rampart.call policy=\"p\" deadline=30s attempts=1 stop_reason=\"succeeded\"")
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_span_records_its_admission_wait_and_its_outcome() {
    let (capture, _guard) = capture();
    let policy = Policy::builder()
        .name("p")
        .max_attempts(1)
        .admit(rampart::limit::ConcurrencyLimit::new(1).queue(1))
        .build()
        .expect("valid policy");
    let hold = policy.run(async |_a| {
        tokio::time::sleep(30 * MS).await;
        Ok::<_, Fail>(())
    });
    let wait = policy.run(async |_a| Err::<(), _>(Fail));
    let (held, waited) = tokio::join!(hold, wait);
    assert!(held.is_ok() && waited.is_err());
    let spans: Vec<_> = capture
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("span rampart.attempt"))
        .collect();
    assert_eq!(
        spans,
        [
            "span rampart.attempt number=1 ceiling=10s admission_wait=0ns outcome=\"ok\"",
            "span rampart.attempt number=1 ceiling=10s admission_wait=30ms outcome=\"transient\"",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_in_a_task_from_ambient_spawn_is_a_child_of_the_spawning_span() {
    let (capture, _guard) = capture();
    let policy = Policy::builder()
        .name("p")
        .max_attempts(1)
        .build()
        .expect("valid policy");
    let request = tracing::info_span!("request");
    let task = request.in_scope(|| {
        rampart::Ambient::spawn(async move { policy.run(async |_a| Ok::<_, Fail>(1)).await })
    });
    assert_eq!(task.await.expect("no panic").ok(), Some(1));
    assert_eq!(
        capture.parents(),
        [
            "request in none",
            "rampart.call in request",
            "rampart.attempt in rampart.call"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedged_calls_legs_each_have_an_attempt_span_under_the_one_call_span() {
    let (capture, _guard) = capture();
    let policy = Policy::builder()
        .name("p")
        .max_attempts(2)
        .total_timeout(Duration::from_secs(10))
        .backoff(Backoff::none())
        .hedge(rampart::hedge::Hedge::fixed(100 * MS))
        .build()
        .expect("valid policy");
    let outcome = policy
        .run(async |a| {
            let took = if a.number() == 1 { 1_000 * MS } else { 50 * MS };
            tokio::time::sleep(took).await;
            Ok::<_, Fail>(a.number())
        })
        .await;
    assert_eq!(outcome.ok(), Some(2));
    assert_eq!(
        capture.parents(),
        [
            "rampart.call in none",
            "rampart.attempt in rampart.call",
            "rampart.attempt in rampart.call"
        ]
    );
    let spans: Vec<_> = capture
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("span rampart.attempt"))
        .collect();
    // The winner records its outcome; the primary, discarded unfinished, has none.
    assert_eq!(
        spans,
        [
            "span rampart.attempt number=2 ceiling=9.9s outcome=\"ok\"",
            "span rampart.attempt number=1 ceiling=10s",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_reconfiguration_is_logged_at_info_outside_any_call() {
    let (capture, _guard) = capture();
    let policy = Policy::builder().name("p").build().expect("valid policy");
    policy
        .reconfigure(|s| s.max_attempts = 0)
        .expect_err("invalid");
    policy
        .reconfigure(|s| s.max_attempts = 2)
        .expect("valid update");
    assert_eq!(
        capture.lines(),
        ["INFO policy reconfigured: calls starting now use the new settings policy=\"p\" in none"]
    );
}
