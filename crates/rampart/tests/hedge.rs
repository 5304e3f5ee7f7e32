//! Hedging on paused time: when a second leg starts, who wins, what happens to the loser, and
//! every gate that keeps a call to one leg.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::breaker::Breaker;
use rampart::drain::Drain;
use rampart::hedge::Hedge;
use rampart::{Criticality, Error, Event, Instant, Policy, PolicyBuilder, RetryBudget, StopReason};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, PartialEq, Eq)]
struct Fail(u32);

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "leg {} failed", self.0)
    }
}

/// Every event's name, in order.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<String>>>);

impl Events {
    fn listener(&self) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
        let events = self.0.clone();
        move |event: &Event<'_>| {
            let name = match event {
                Event::HedgeStarted { attempt, .. } => format!("started {attempt}"),
                Event::HedgeWon { attempt, .. } => format!("won {attempt}"),
                Event::HedgeDiscarded { attempt, .. } => format!("discarded {attempt}"),
                Event::HedgeSuppressed { reason, .. } => format!("suppressed: {reason}"),
                _ => return,
            };
            events.lock().expect("events").push(name);
        }
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().expect("events").clone()
    }
}

fn hedging(hedge: Hedge, events: &Events) -> PolicyBuilder {
    Policy::builder()
        .max_attempts(3)
        .total_timeout(Duration::from_secs(10))
        .backoff(Backoff::none())
        .hedge(hedge)
        .drain(&Drain::new())
        .listener(events.listener())
}

/// Leg 1 answers after 1 s; later legs after 50 ms. Records when each leg started.
async fn slow_first_leg(
    n: u32,
    starts: &Mutex<Vec<(u32, Duration)>>,
    t0: Instant,
) -> Result<u32, Fail> {
    starts.lock().expect("starts").push((n, t0.elapsed()));
    let took = if n == 1 { 1_000 * MS } else { 50 * MS };
    tokio::time::sleep(took).await;
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_leg_gets_a_hedge_after_the_delay_and_the_first_ok_wins() {
    let events = Events::default();
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .build()
        .expect("valid");
    let starts = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let result = policy
        .call()
        .try_run(async |attempt| slow_first_leg(attempt.number(), &starts, t0).await)
        .await
        .expect("not cancelled");
    assert_eq!(result.value(), Some(&2), "the hedge answered first");
    assert_eq!(t0.elapsed(), 150 * MS);
    assert_eq!(
        *starts.lock().expect("starts"),
        [(1, Duration::ZERO), (2, 100 * MS)]
    );
    assert_eq!(events.all(), ["started 2", "won 2", "discarded 1"]);
    assert_eq!(result.stop(), StopReason::Succeeded);
}

#[tokio::test(start_paused = true)]
async fn a_call_won_by_its_hedge_counts_both_legs_and_logs_the_winner() {
    let events = Events::default();
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .build()
        .expect("valid");
    let starts = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let result = policy
        .call()
        .try_run(async |attempt| slow_first_leg(attempt.number(), &starts, t0).await)
        .await
        .expect("not cancelled");
    assert_eq!(result.value(), Some(&2));
    assert_eq!(result.attempts(), 2, "the dropped first leg counts");
    let logged: Vec<u32> = result.log().iter().map(|record| record.number).collect();
    assert_eq!(logged, [2], "only the leg that ended is listed");
    assert_eq!(
        result.log().last().map(|record| record.elapsed),
        Some(50 * MS)
    );
}

#[tokio::test(start_paused = true)]
async fn the_losing_leg_is_dropped_and_its_token_cancelled() {
    let events = Events::default();
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .build()
        .expect("valid");
    let tokens = Mutex::new(Vec::new());
    let outcome = policy
        .run(async |attempt| {
            tokens.lock().expect("tokens").push(attempt.token());
            if attempt.number() == 1 {
                std::future::pending::<()>().await;
            }
            Ok::<_, Fail>(attempt.number())
        })
        .await;
    assert_eq!(outcome.ok(), Some(2));
    let tokens = tokens.lock().expect("tokens");
    assert!(tokens[0].is_cancelled(), "the loser's token fired");
    assert!(!tokens[1].is_cancelled(), "the winner's did not");
}

#[tokio::test(start_paused = true)]
async fn a_zero_delay_launches_every_concurrent_leg_at_once() {
    let events = Events::default();
    let policy = hedging(Hedge::fixed(Duration::ZERO).max_concurrent(3), &events)
        .build()
        .expect("valid");
    let starts = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let _ = policy
        .run(async |attempt| slow_first_leg(attempt.number(), &starts, t0).await)
        .await;
    let starts = starts.lock().expect("starts");
    assert_eq!(
        *starts,
        [
            (1, Duration::ZERO),
            (2, Duration::ZERO),
            (3, Duration::ZERO)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_leg_is_replaced_at_once_while_another_is_in_flight() {
    let events = Events::default();
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .build()
        .expect("valid");
    let starts = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let outcome = policy
        .run(async |attempt| {
            starts
                .lock()
                .expect("starts")
                .push((attempt.number(), t0.elapsed()));
            match attempt.number() {
                1 => {
                    tokio::time::sleep(1_000 * MS).await;
                    Ok(1)
                }
                2 => {
                    tokio::time::sleep(20 * MS).await;
                    Err(Fail(2))
                }
                n => {
                    tokio::time::sleep(10 * MS).await;
                    Ok(n)
                }
            }
        })
        .await;
    assert_eq!(outcome.ok(), Some(3));
    assert_eq!(
        *starts.lock().expect("starts"),
        [(1, Duration::ZERO), (2, 100 * MS), (3, 120 * MS)]
    );
}

async fn legs_made(policy: &Policy) -> u32 {
    let legs = AtomicU32::new(0);
    let _ = policy
        .run(async |attempt| {
            legs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(if attempt.number() == 1 {
                500 * MS
            } else {
                10 * MS
            })
            .await;
            Ok::<_, Fail>(())
        })
        .await;
    legs.load(Ordering::SeqCst)
}

#[tokio::test(start_paused = true)]
async fn a_sheddable_call_is_never_hedged() {
    let events = Events::default();
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .use_ambient_criticality(true)
        .build()
        .expect("valid");
    let legs = Criticality::Sheddable.scope(legs_made(&policy)).await;
    assert_eq!(legs, 1);
    assert_eq!(events.all(), ["suppressed: sheddable call"]);
    assert_eq!(
        Criticality::SheddablePlus.scope(legs_made(&policy)).await,
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_draining_process_makes_one_call() {
    let events = Events::default();
    let drain = Drain::new();
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .drain(&drain)
        .build()
        .expect("valid");
    drain.begin(None);
    assert_eq!(legs_made(&policy).await, 1);
    assert_eq!(events.all(), ["suppressed: process draining"]);
}

#[tokio::test(start_paused = true)]
async fn a_cold_adaptive_estimate_makes_one_call_and_a_warm_one_hedges_at_its_p95() {
    let events = Events::default();
    let policy = hedging(Hedge::adaptive().min_samples(20), &events)
        .build()
        .expect("valid");
    assert_eq!(legs_made(&policy).await, 1);
    assert_eq!(events.all(), ["suppressed: latency estimate cold"]);
    // Twenty quick successes of 40 ms warm the estimate.
    for _ in 0..19 {
        policy
            .run(async |_a| {
                tokio::time::sleep(40 * MS).await;
                Ok::<_, Fail>(())
            })
            .await
            .expect("success");
    }
    let starts = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let _ = policy
        .run(async |attempt| slow_first_leg(attempt.number(), &starts, t0).await)
        .await;
    let starts = starts.lock().expect("starts");
    assert_eq!(starts.len(), 2, "{starts:?}");
    // The p95 of 40 ms samples, as the histogram reports it: within 12.5% above 40 ms.
    let hedge_at = starts[1].1;
    assert!(
        hedge_at > 40 * MS && hedge_at <= 45 * MS,
        "hedged after {hedge_at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_that_is_not_closed_makes_one_call() {
    let events = Events::default();
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    breaker.isolate(Instant::now());
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .breaker(breaker)
        .build()
        .expect("valid");
    let outcome = policy.run(async |_a| Ok::<_, Fail>(())).await;
    assert!(outcome.is_err(), "an isolated breaker rejects the call");
    assert_eq!(events.all(), ["suppressed: breaker not closed"]);
}

#[tokio::test(start_paused = true)]
async fn every_hedge_is_charged_to_the_budget_and_an_empty_one_suppresses_it() {
    let events = Events::default();
    let budget = RetryBudget::builder()
        .min_per_sec(0.0)
        .fraction(0.0)
        .build()
        .expect("valid budget");
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .budget(budget.clone())
        .build()
        .expect("valid");
    assert_eq!(legs_made(&policy).await, 2, "the one token funds one hedge");
    assert_eq!(budget.balance(Instant::now()), 0.0);
    assert_eq!(legs_made(&policy).await, 1);
    assert!(
        events
            .all()
            .contains(&"suppressed: retry budget exhausted".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn a_delay_that_does_not_fit_the_deadline_makes_one_call() {
    let events = Events::default();
    let policy = hedging(Hedge::fixed(100 * MS), &events)
        .total_timeout(80 * MS)
        .build()
        .expect("valid");
    let _ = policy.run(async |_a| Ok::<_, Fail>(())).await;
    assert_eq!(
        events.all(),
        ["suppressed: delay does not fit the deadline"]
    );
}

#[test]
fn a_hedging_policy_refuses_a_blocking_call_naming_the_option() {
    let policy = Policy::builder()
        .name("search")
        .hedge(Hedge::fixed(10 * MS))
        .build()
        .expect("valid");
    let ran = AtomicU32::new(0);
    let outcome = policy.call().run_blocking(|_a| {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Fail>(())
    });
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    match outcome {
        Err(Error::Config(e)) => {
            assert_eq!(e.problems()[0].field(), "hedge");
            assert!(e.to_string().contains("policy `search`"), "{e}");
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}
