//! The limiters through a policy, on virtual time: the rate limit's window, the adaptive limits
//! against a simulated dependency, adaptive throttling's refusal probability, and shedding by
//! the caller's criticality.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rampart::admit::{Admit, AdmitContext, Feedback};
use rampart::limit::{Aimd, CriticalityLimit, Gradient, RateLimit, Throttle};
use rampart::{
    AttemptOutcome, Criticality, Error, ErrorsAreTransient, Event, Instant, ManualClock, Policy,
    RejectReason,
};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, PartialEq, Eq)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fail")
    }
}

fn one_attempt<A: Admit>(admit: A) -> Policy<ErrorsAreTransient, A> {
    Policy::builder()
        .max_attempts(1)
        .admit(admit)
        .build()
        .expect("valid")
}

fn overloaded<T: std::fmt::Debug>(result: Result<T, Error<Fail>>) -> Option<Duration> {
    match result {
        Err(Error::Rejected {
            reason: RejectReason::Overloaded,
            retry_after,
            ..
        }) => retry_after,
        other => panic!("expected an overload rejection, got {other:?}"),
    }
}

// ---- Rate limit -----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_rate_limit_of_two_per_second_refuses_a_third_immediate_call_and_admits_it_after_the_window()
 {
    let policy = one_attempt(RateLimit::new(2, Duration::from_secs(1)).expect("valid"));
    let start = Instant::now();
    for n in 0..2 {
        assert_eq!(policy.run(async |_| Ok::<_, Fail>(n)).await.ok(), Some(n));
    }
    let retry_after = overloaded(policy.run(async |_| Ok::<_, Fail>(3)).await);
    assert_eq!(start.elapsed(), Duration::ZERO, "refused at once");
    let retry_after = retry_after.expect("a retry-after");
    assert!(retry_after > Duration::ZERO);
    assert_eq!(retry_after, 500 * MS, "when the next permit is due");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(policy.run(async |_| Ok::<_, Fail>(3)).await.ok(), Some(3));
}

#[tokio::test]
async fn a_rate_limit_runs_on_the_policys_manual_clock() {
    let manual = ManualClock::new();
    let refused = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&refused);
    let policy = Policy::builder()
        .max_attempts(1)
        .clock(manual.clone())
        .listener(move |event: &Event<'_>| {
            if let Event::AttemptRefused {
                by, retry_after, ..
            } = event
            {
                seen.lock().expect("events").push((*by, *retry_after));
            }
        })
        .admit(
            RateLimit::builder(10, Duration::from_secs(1))
                .burst(1)
                .build()
                .expect("valid"),
        )
        .build()
        .expect("valid");
    assert!(policy.run(async |_| Ok::<_, Fail>(())).await.is_ok());
    assert!(policy.run(async |_| Ok::<_, Fail>(())).await.is_err());
    manual.advance(99 * MS);
    assert_eq!(
        overloaded(policy.run(async |_| Ok::<_, Fail>(())).await),
        Some(MS)
    );
    manual.advance(MS);
    assert!(policy.run(async |_| Ok::<_, Fail>(())).await.is_ok());
    assert_eq!(
        *refused.lock().expect("events"),
        [("rate limit", Some(100 * MS)), ("rate limit", Some(MS))]
    );
}

// ---- Adaptive limits against a simulated dependency ------------------------------------------

/// A dependency with a true concurrency capacity of 50: up to 50 requests in flight take
/// 20 ms; each one beyond adds 100 ms, so every request started past the capacity runs into
/// its 100 ms attempt ceiling.
#[derive(Clone, Default)]
struct Dependency {
    in_flight: Arc<AtomicUsize>,
}

struct Leaving(Arc<AtomicUsize>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Dependency {
    const CAPACITY: usize = 50;

    async fn call(&self) -> Result<(), Fail> {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _leaving = Leaving(Arc::clone(&self.in_flight));
        let excess = n.saturating_sub(Self::CAPACITY) as u32;
        tokio::time::sleep(20 * MS + excess * 100 * MS).await;
        Ok(())
    }
}

/// 120 closed-loop clients calling through `admit` for `run`; samples `limit` every 100 ms.
/// A refused client waits the refusal's retry-after, then calls again.
async fn drive<A: Admit + Clone>(admit: A, limit: impl Fn() -> usize, run: Duration) -> Vec<usize> {
    let dependency = Dependency::default();
    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(100 * MS)
        .admit(admit)
        .build()
        .expect("valid");
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..120)
        .map(|_| {
            let policy = policy.clone();
            let dependency = dependency.clone();
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let dependency = dependency.clone();
                    let outcome = policy.run(async |_| dependency.call().await).await;
                    if let Err(Error::Rejected { retry_after, .. }) = outcome {
                        tokio::time::sleep(retry_after.unwrap_or(MS)).await;
                    }
                }
            })
        })
        .collect();
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < run {
        tokio::time::sleep(100 * MS).await;
        samples.push(limit());
    }
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.expect("client");
    }
    samples
}

fn summary(samples: &[usize]) -> (f64, usize, usize) {
    let mean = samples.iter().sum::<usize>() as f64 / samples.len() as f64;
    let min = samples.iter().copied().min().unwrap_or(0);
    let max = samples.iter().copied().max().unwrap_or(0);
    (mean, min, max)
}

#[tokio::test(start_paused = true)]
async fn the_aimd_limit_converges_within_ten_percent_of_the_dependencys_capacity() {
    let aimd = Aimd::new();
    let samples = drive(aimd.clone(), || aimd.limit(), Duration::from_secs(30)).await;
    // The first 10 s find the capacity; the last 20 s must hold it.
    let (mean, min, max) = summary(&samples[100..]);
    println!(
        "aimd: first 2 s {:?}; last 20 s mean {mean:.1}, min {min}, max {max}",
        &samples[..20]
    );
    let capacity = Dependency::CAPACITY as f64;
    assert!(
        (mean - capacity).abs() <= capacity * 0.1,
        "mean limit {mean:.1} over the last 20 s, capacity {capacity}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_gradient_limit_settles_near_the_dependencys_capacity() {
    let gradient = Gradient::new();
    let samples = drive(
        gradient.clone(),
        || gradient.limit(),
        Duration::from_secs(30),
    )
    .await;
    let (mean, min, max) = summary(&samples[100..]);
    println!(
        "gradient: first 2 s {:?}; last 20 s mean {mean:.1}, min {min}, max {max}",
        &samples[..20]
    );
    let capacity = Dependency::CAPACITY as f64;
    assert!(
        (mean - capacity).abs() <= capacity * 0.2,
        "mean limit {mean:.1} over the last 20 s, capacity {capacity}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_limit_measures_attempts_through_a_policy_that_reads_no_other_clock() {
    // One attempt, no total timeout, no timeout, no listener: admission alone makes the policy read
    // the clock, so the limit's feedback carries each attempt's duration.
    let gradient = Gradient::builder()
        .initial(1)
        .min(1)
        .max(1)
        .build()
        .expect("valid");
    let policy = Policy::builder()
        .max_attempts(1)
        .no_total_timeout()
        .no_attempt_timeout()
        .admit(gradient.clone())
        .build()
        .expect("valid");
    let slow = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_| {
                    tokio::time::sleep(30 * MS).await;
                    Ok::<_, Fail>(())
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    let first = overloaded(policy.run(async |_| Ok::<_, Fail>(())).await);
    assert_eq!(first, Some(10 * MS), "unmeasured yet");
    slow.await.expect("joined").expect("ran");
    let slow = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(async |_| {
                    tokio::time::sleep(30 * MS).await;
                    Ok::<_, Fail>(())
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    let second = overloaded(policy.run(async |_| Ok::<_, Fail>(())).await);
    assert_eq!(second, Some(30 * MS), "the measured time a permit is held");
    slow.await.expect("joined").expect("ran");
}

// ---- Adaptive throttling -------------------------------------------------------------------

fn now_or_never<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a throttle never waits"),
    }
}

/// A throttle seeded with `seed` whose window holds 100 requests and 40 accepts at `now`.
fn throttle_at_100_requests_40_accepts(seed: u64, now: Instant) -> Throttle {
    let throttle = Throttle::builder()
        .k(2.0)
        .seed(seed)
        .build()
        .expect("valid");
    let cx = AdmitContext::new("test", Criticality::Critical, now);
    for n in 0..100 {
        // The first 40 are accepted; later ones are rejected by the dependency (or refused
        // here, which counts as a request all the same).
        if let Ok(permit) = now_or_never(throttle.acquire(&cx)) {
            let outcome = if n < 40 {
                AttemptOutcome::Ok
            } else {
                AttemptOutcome::Throttled
            };
            throttle.release(permit, Feedback::new(outcome, MS));
        }
    }
    throttle
}

#[test]
fn with_100_requests_and_40_accepts_and_k_2_the_refusal_probability_is_20_in_101() {
    let now = Instant::now();
    let throttle = throttle_at_100_requests_40_accepts(0, now);
    assert_eq!(throttle.counts(Criticality::Critical, now), (100, 40));
    let expected = 20.0 / 101.0;
    assert_eq!(throttle.probability(Criticality::Critical, now), expected);
    assert_eq!(throttle.probability(Criticality::Sheddable, now), 0.0);
    // 10,000 tries, each the 101st request of its own seeded throttle.
    let tries = 10_000;
    let cx = AdmitContext::new("test", Criticality::Critical, now);
    let refused = (0..tries)
        .filter(|&seed| {
            let throttle = throttle_at_100_requests_40_accepts(seed, now);
            now_or_never(throttle.acquire(&cx)).is_err()
        })
        .count();
    let rate = refused as f64 / tries as f64;
    println!("refused {refused} of {tries}: {rate:.4} (expected {expected:.4})");
    // 4 standard deviations: sqrt(p(1-p)/n) is 0.004.
    assert!((rate - expected).abs() < 0.016, "measured {rate}");
}

#[test]
fn a_lower_k_set_live_sheds_more_over_the_counts_already_in_the_window() {
    let now = Instant::now();
    let throttle = throttle_at_100_requests_40_accepts(0, now);
    throttle.set_k(1.5).expect("a valid k");
    // (100 - 1.5 x 40) / 101, over the same counts.
    assert_eq!(
        throttle.probability(Criticality::Critical, now),
        40.0 / 101.0
    );
    let refused = throttle.set_k(f64::NAN).expect_err("not finite");
    assert_eq!(
        refused.to_string(),
        "throttle.k must be finite and at least 1 (was NaN)"
    );
    assert_eq!(throttle.k(), 1.5);
}

#[tokio::test(start_paused = true)]
async fn a_throttled_dependency_is_throttled_locally_and_the_rest_still_reaches_it() {
    let throttle = Throttle::builder().seed(11).build().expect("valid");
    let policy = Policy::builder()
        .max_attempts(1)
        .classifier(|r: &Result<(), Fail>| match r {
            Ok(()) => rampart::Verdict::Ok,
            Err(Fail) => rampart::Verdict::Throttled { retry_after: None },
        })
        .admit(throttle.clone())
        .build()
        .expect("valid");
    let sent = AtomicUsize::new(0);
    let mut refused_here = 0;
    for n in 0..1_000 {
        // The dependency accepts one request in four.
        let outcome = policy
            .run(async |_| {
                sent.fetch_add(1, Ordering::SeqCst);
                if n % 4 == 0 { Ok(()) } else { Err(Fail) }
            })
            .await;
        if matches!(outcome, Err(Error::Rejected { .. })) {
            refused_here += 1;
        }
    }
    let sent = sent.load(Ordering::SeqCst);
    println!("sent {sent}, refused locally {refused_here}");
    assert_eq!(sent + refused_here, 1_000);
    assert!(refused_here > 200, "throttled locally: {refused_here}");
    let p = throttle.probability(Criticality::Critical, Instant::now());
    assert!(p > 0.2 && p < 1.0, "{p}");
}

// ---- Shedding by criticality through a policy --------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_critical_call_evicts_a_queued_sheddable_one_through_the_policy() {
    let limit = CriticalityLimit::builder(1)
        .queue(1)
        .build()
        .expect("valid");
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&refusals);
    let policy = Policy::builder()
        .max_attempts(1)
        .use_ambient_criticality(true)
        .listener(move |event: &Event<'_>| {
            if let Event::AttemptRefused { by, .. } = event {
                seen.lock().expect("events").push(*by);
            }
        })
        .admit(limit.clone())
        .build()
        .expect("one attempt with an admission component reads the level");
    let call = |level: Criticality, label: u32| {
        let policy = policy.clone();
        tokio::spawn(async move {
            let outcome = level
                .scope(policy.run(async |_| {
                    tokio::time::sleep(100 * MS).await;
                    Ok::<_, Fail>(label)
                }))
                .await;
            (outcome, Instant::now())
        })
    };
    let start = Instant::now();
    let first = call(Criticality::Critical, 1);
    tokio::task::yield_now().await;
    let sheddable = call(Criticality::Sheddable, 2);
    tokio::task::yield_now().await;
    assert_eq!((limit.in_flight(), limit.queued()), (1, 1));
    let critical = call(Criticality::Critical, 3);
    let (outcome, at) = sheddable.await.expect("joined");
    assert_eq!(at - start, Duration::ZERO, "evicted at once");
    assert!(overloaded(outcome).is_some());
    assert_eq!(*refusals.lock().expect("events"), ["criticality limit"]);
    let (outcome, at) = first.await.expect("joined");
    assert_eq!((outcome.ok(), at - start), (Some(1), 100 * MS));
    let (outcome, at) = critical.await.expect("joined");
    assert_eq!((outcome.ok(), at - start), (Some(3), 200 * MS));
    // The shed level stays out for the hold (1 s) after its refusal... and only lower levels:
    // nothing is below Sheddable, so a Sheddable call is admitted again at once.
    let again = call(Criticality::Sheddable, 4);
    assert_eq!(again.await.expect("joined").0.ok(), Some(4));
}
