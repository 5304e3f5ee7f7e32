//! The adaptive attempt ceiling: a multiple of the measured p95, never below its floor, never
//! above the configured timeout, and the configured timeout until enough samples are in.

use std::future::pending;
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::{AdaptiveTimeout, Error, Instant, Policy};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fail")
    }
}

fn policy(configured: Duration) -> Policy {
    Policy::builder()
        .max_attempts(1)
        .total_timeout(Duration::from_secs(30))
        .attempt_timeout(configured)
        .backoff(Backoff::none())
        .adaptive_attempt_timeout(AdaptiveTimeout::default())
        .build()
        .expect("valid")
}

async fn warm(policy: &Policy, sample: Duration, n: u32) {
    for _ in 0..n {
        policy
            .run(async |_a| {
                tokio::time::sleep(sample).await;
                Ok::<_, Fail>(())
            })
            .await
            .expect("success");
    }
}

async fn hanging_call_lasts(policy: &Policy) -> Duration {
    let start = Instant::now();
    let outcome = policy
        .run(async |_a| pending::<Result<(), Fail>>().await)
        .await;
    assert!(
        matches!(outcome, Err(Error::AttemptTimeout { .. })),
        "{outcome:?}"
    );
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn until_twenty_samples_the_configured_timeout_applies() {
    let policy = policy(Duration::from_secs(2));
    warm(&policy, 40 * MS, 19).await;
    assert_eq!(hanging_call_lasts(&policy).await, Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_warm_estimate_cuts_the_ceiling_to_three_times_the_p95() {
    let policy = policy(Duration::from_secs(2));
    warm(&policy, 40 * MS, 20).await;
    let lasted = hanging_call_lasts(&policy).await;
    // 3 × p95, where the histogram reports the p95 of 40 ms samples within 12.5% above it.
    assert!(lasted > 120 * MS && lasted <= 135 * MS, "lasted {lasted:?}");
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_ceiling_never_goes_below_its_floor_or_above_the_configured_timeout() {
    let fast = policy(Duration::from_secs(2));
    warm(&fast, MS, 20).await;
    assert_eq!(hanging_call_lasts(&fast).await, 50 * MS, "the 50 ms floor");
    let slow = policy(Duration::from_millis(300));
    warm(&slow, 200 * MS, 20).await;
    assert_eq!(
        hanging_call_lasts(&slow).await,
        300 * MS,
        "the configured timeout"
    );
}

#[test]
fn invalid_adaptive_settings_are_reported_with_their_values() {
    let err = Policy::builder()
        .adaptive_attempt_timeout(AdaptiveTimeout::default().multiple(0.5).quantile(1.5))
        .build()
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "adaptive_attempt_timeout.multiple must be between 1 and 1000 (was 0.5); adaptive_attempt_timeout.quantile must be between 0 and 1, exclusive (was 1.5)"
    );
}
