//! The manual clock drives a policy on a multi-threaded runtime: the test decides when time
//! moves, and every duration is exact.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::testing::{advance_until, wait_for_pending};
use rampart::{Error, ManualClock, Policy};

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_timeout_then_retry_on_a_manual_clock_across_threads() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(2)
        .attempt_timeout(SEC)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let start = clock.now();
    let mut call = tokio::spawn(async move {
        policy
            .run(async |attempt| {
                seen.fetch_add(1, Ordering::SeqCst);
                attempt.cancelled().await;
                Err::<(), _>("cancelled")
            })
            .await
    });
    wait_for_pending(
        &mut call,
        || attempts.load(Ordering::SeqCst) == 1 && clock.sleepers() == 1,
        "the first timed attempt",
    )
    .await
    .expect("first attempt");
    advance_until(
        &clock,
        SEC,
        || attempts.load(Ordering::SeqCst) == 2 && clock.sleepers() == 1,
        "the retry attempt",
        1,
    )
    .await
    .expect("retry");
    advance_until(&clock, SEC, || call.is_finished(), "the final timeout", 1)
        .await
        .expect("final timeout");
    let outcome = call.await.expect("joined");
    assert!(matches!(
        outcome,
        Err(Error::AttemptTimeout { attempts: 2, .. })
    ));
    assert_eq!(clock.now() - start, 2 * SEC);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_on_a_manual_clock_waits_for_the_test_to_move_time() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(2)
        .no_total_timeout()
        .backoff(Backoff::constant(30 * SEC))
        .build()
        .expect("valid");
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let mut call = tokio::spawn(async move {
        policy
            .run(async |attempt| {
                seen.fetch_add(1, Ordering::SeqCst);
                if attempt.resends() > 0 {
                    Ok(())
                } else {
                    Err("unavailable")
                }
            })
            .await
    });
    wait_for_pending(&mut call, || clock.sleepers() == 1, "the 30s backoff")
        .await
        .expect("backoff");
    let stalled = advance_until(
        &clock,
        10 * SEC,
        || attempts.load(Ordering::SeqCst) == 2,
        "the retry",
        2,
    )
    .await
    .expect_err("20s of a 30s backoff is not enough");
    assert_eq!(
        stalled.to_string(),
        "waiting for the retry: condition not met after 2 advances of 10s (20s of virtual time)"
    );
    advance_until(&clock, 10 * SEC, || call.is_finished(), "the retry", 1)
        .await
        .expect("retry after 30s");
    assert!(call.await.expect("joined").is_ok());
}

/// A call that fails three times, 400 ms apart, with its 30 s deadline asleep on the clock
/// too: 1.2 s of virtual time. `calls` counts the attempts.
fn three_backoffs(clock: &ManualClock, calls: &Arc<AtomicU32>) -> tokio::task::JoinHandle<()> {
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(4)
        .backoff(Backoff::constant(Duration::from_millis(400)))
        .build()
        .expect("valid");
    let seen = calls.clone();
    tokio::spawn(async move {
        let outcome = policy
            .run(async |_attempt| {
                seen.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>("unavailable")
            })
            .await;
        assert!(outcome.is_err());
    })
}

#[tokio::test(flavor = "current_thread")]
async fn advance_until_jumps_over_steps_that_wake_nobody() {
    let clock = ManualClock::new();
    let attempts = Arc::new(AtomicU32::new(0));
    let start = clock.now();
    let call = three_backoffs(&clock, &attempts);
    let mut checks = 0_u32;
    advance_until(
        &clock,
        Duration::from_millis(10),
        || {
            checks += 1;
            call.is_finished()
        },
        "the last attempt",
        200,
    )
    .await
    .expect("three backoffs of 400 ms fit in 200 steps of 10 ms");
    assert_eq!(attempts.load(Ordering::SeqCst), 4);
    assert_eq!(clock.now() - start, Duration::from_millis(1_200));
    // 120 steps of 10 ms, of which only the 3 that end a backoff wake anyone: the whole
    // scenario takes fewer rounds of the runtime than one step took when every step waited
    // 10,000 rounds for its condition.
    assert!(checks < 10_000, "{checks} checks of the condition");
}

#[tokio::test(flavor = "current_thread")]
async fn advance_until_keeps_to_whole_steps_and_counts_the_steps_it_skips() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .max_attempts(2)
        .backoff(Backoff::constant(SEC))
        .build()
        .expect("valid");
    let start = clock.now();
    let mut call = tokio::spawn(async move {
        policy
            .run(async |attempt| {
                if attempt.resends() > 0 {
                    Ok(())
                } else {
                    Err("unavailable")
                }
            })
            .await
    });
    wait_for_pending(&mut call, || clock.sleepers() > 0, "the backoff")
        .await
        .expect("backoff");
    let step = Duration::from_millis(300);
    let stalled = advance_until(&clock, step, || call.is_finished(), "the retry", 3)
        .await
        .expect_err("900 ms of a 1 s backoff");
    assert_eq!(
        stalled.to_string(),
        "waiting for the retry: condition not met after 3 advances of 300ms (900ms of virtual time)"
    );
    advance_until(&clock, step, || call.is_finished(), "the retry", 1)
        .await
        .expect("the fourth step ends the backoff");
    assert_eq!(clock.now() - start, 4 * step);
    assert!(call.await.expect("joined").is_ok());
}
