//! A first look at rampart: a flaky dependency, a policy, and what the policy did.
//!
//! Run with `cargo run --example quickstart -p rampart`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::{Event, Policy};

/// A pretend dependency: fails twice, then answers; each call takes 20 ms.
async fn flaky_inventory(
    calls: &AtomicU32,
    token: rampart::CancellationToken,
) -> Result<u32, String> {
    tokio::select! {
        _ = token.cancelled() => Err("cancelled".to_owned()),
        _ = tokio::time::sleep(Duration::from_millis(20)) => {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err("503 service unavailable".to_owned()),
                _ => Ok(42),
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policy = Policy::builder()
        .name("inventory")
        .max_attempts(4)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .backoff(Backoff::exponential(Duration::from_millis(50)).seed(7))
        .listener(|event: &Event<'_>| match event {
            Event::AttemptEnded {
                attempt,
                outcome,
                elapsed,
                ..
            } => {
                println!("  attempt {attempt}: {outcome:?} after {elapsed:.1?}");
            }
            Event::Retrying { delay, .. } => println!("  retrying in {delay:.1?}"),
            _ => {}
        })
        .build()?;
    println!("policy: {}", policy.explain());

    let calls = AtomicU32::new(0);
    let result = policy
        .call()
        .try_run(async |attempt| flaky_inventory(&calls, attempt.token()).await)
        .await?;
    println!(
        "stopped: {} after {} attempts; value: {:?}",
        result.stop(),
        result.attempts(),
        result.value()
    );

    let impatient = Policy::builder()
        .name("impatient")
        .max_attempts(3)
        .total_timeout(Duration::from_millis(30))
        .build()?;
    let outcome = impatient
        .run(async |attempt| flaky_inventory(&AtomicU32::new(0), attempt.token()).await)
        .await;
    match outcome {
        Ok(v) => println!("impatient: {v}"),
        Err(e) => println!("impatient: {e}"),
    }
    Ok(())
}
