//! Chaos injection through the public API, on tokio's paused time: what each kind does to an
//! attempt and how the policy meets it, the switch at run time, the seed, `Send`, and the
//! allocation-free path with chaos configured but idle.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::chaos::{Chaos, Injection, InjectionKind};
use rampart::hedge::Hedge;
use rampart::{CancellationToken, Error, Policy, StopReason, TimeoutMode, Verdict};
use tokio::time::Instant;

#[path = "support/ready.rs"]
mod support;
use support::ready;

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, PartialEq)]
enum Fail {
    Injected,
    Real,
    Stopped,
}

/// Delays every attempt by `delay`.
fn delaying<T>(delay: Duration) -> Chaos<T, Fail> {
    Chaos::builder()
        .latency(1.0, delay)
        .build()
        .expect("valid chaos")
}

/// `attempts` attempts with a 100 ms ceiling in `mode`, no backoff.
fn bounded(attempts: u32, mode: TimeoutMode) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .attempt_timeout(100 * MS)
        .timeout_mode(mode)
        .backoff(Backoff::none())
        .build()
        .expect("valid policy")
}

fn retrying(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .backoff(Backoff::none())
        .build()
        .expect("valid policy")
}

/// Records every injection it is told of.
fn recorder() -> (
    Arc<Mutex<Vec<Injection>>>,
    impl Fn(Injection) + Send + Sync + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (seen, move |injection| {
        sink.lock().expect("injections").push(injection)
    })
}

#[tokio::test(start_paused = true)]
async fn a_fault_at_rate_one_fails_every_attempt_without_running_the_work_and_the_policy_retries_it()
 {
    let (seen, hook) = recorder();
    let chaos = Chaos::builder()
        .fault(1.0, || Fail::Injected)
        .on_inject(hook)
        .build()
        .expect("valid chaos");
    let worked = AtomicU32::new(0);
    let result = retrying(3)
        .call()
        .try_run(chaos.wrap(async |_| {
            worked.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, Fail>(7)
        }))
        .await
        .expect("not cancelled");
    assert_eq!(result.attempts(), 3);
    assert_eq!(result.stop(), StopReason::AttemptsExhausted);
    assert!(matches!(
        result.into_result(),
        Err(Error::Inner(Fail::Injected))
    ));
    assert_eq!(worked.load(Ordering::SeqCst), 0);
    assert_eq!(chaos.injected(InjectionKind::Fault), 3);
    let attempts: Vec<_> = seen
        .lock()
        .expect("injections")
        .iter()
        .map(|i| (i.kind, i.call, i.attempt))
        .collect();
    assert_eq!(
        attempts,
        [1, 2, 3].map(|n| (InjectionKind::Fault, 0, n)),
        "one call, three attempts, each told"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fault_switched_off_after_the_first_attempt_lets_the_retry_reach_the_work() {
    let chaos = Chaos::builder()
        .fault(1.0, || Fail::Injected)
        .build()
        .expect("valid chaos");
    let switch = chaos.switch();
    let on_error = chaos.switch();
    let policy = Policy::builder()
        .max_attempts(2)
        .backoff(Backoff::none())
        .classifier(move |result: &Result<u32, Fail>| {
            // The classifier runs between the attempts: turn chaos off there.
            on_error.disable();
            match result {
                Ok(_) => Verdict::Ok,
                Err(_) => Verdict::Transient,
            }
        })
        .build()
        .expect("valid policy");
    let value = policy
        .run(chaos.wrap(async |attempt| Ok::<_, Fail>(attempt.number())))
        .await;
    assert_eq!(value.expect("the retry reached the work"), 2);
    assert!(!switch.is_enabled());
    assert_eq!(chaos.injected(InjectionKind::Fault), 1);
}

#[tokio::test(start_paused = true)]
async fn latency_at_rate_one_delays_each_attempt_by_exactly_the_configured_duration() {
    let chaos = delaying(300 * MS);
    let began = Instant::now();
    let starts = Mutex::new(Vec::new());
    let value = retrying(3)
        .run(chaos.wrap(async |attempt| {
            starts.lock().expect("starts").push(Instant::now() - began);
            match attempt.number() {
                1 | 2 => Err(Fail::Real),
                n => Ok(n),
            }
        }))
        .await;
    assert_eq!(value.expect("third attempt succeeds"), 3);
    assert_eq!(
        *starts.lock().expect("starts"),
        [300 * MS, 600 * MS, 900 * MS]
    );
    assert_eq!(chaos.injected(InjectionKind::Latency), 3);
}

#[tokio::test(start_paused = true)]
async fn latency_past_the_attempt_timeout_times_the_attempt_out_before_the_work_runs() {
    let chaos = delaying(Duration::from_secs(1));
    let policy = bounded(2, TimeoutMode::default());
    let worked = AtomicU32::new(0);
    let began = Instant::now();
    let outcome = policy
        .run(chaos.wrap(async |_| {
            worked.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Fail>(())
        }))
        .await;
    assert!(matches!(
        outcome,
        Err(Error::AttemptTimeout { timeout, attempts: 2 }) if timeout == 100 * MS
    ));
    assert_eq!(
        Instant::now() - began,
        200 * MS,
        "each attempt cut at its ceiling"
    );
    assert_eq!(
        worked.load(Ordering::SeqCst),
        0,
        "abandoned during the delay"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cooperative_attempts_delay_ends_at_its_ceiling_and_the_work_sees_it_cancelled() {
    let chaos = delaying(Duration::from_secs(1));
    let policy = bounded(1, TimeoutMode::Cooperative);
    let began = Instant::now();
    let outcome = policy
        .run(chaos.wrap(async |attempt| {
            if attempt.is_cancelled() {
                return Err(Fail::Stopped);
            }
            Ok(())
        }))
        .await;
    assert!(matches!(
        outcome,
        Err(Error::AttemptTimeout { attempts: 1, .. })
    ));
    assert_eq!(Instant::now() - began, 100 * MS, "not the full second");
}

#[tokio::test(start_paused = true)]
async fn an_abandoning_policys_grace_lets_the_work_answer_after_a_delay_cut_at_the_ceiling() {
    let chaos = delaying(Duration::from_secs(1));
    let policy = bounded(1, TimeoutMode::Abandon { grace: 50 * MS });
    let began = Instant::now();
    let value = policy.run(chaos.wrap(async |_| Ok::<_, Fail>(5))).await;
    assert_eq!(value.expect("answered within the grace"), 5);
    assert_eq!(Instant::now() - began, 100 * MS);
}

#[tokio::test(start_paused = true)]
async fn the_caller_cancelling_during_an_injected_delay_ends_the_call_at_once() {
    let chaos = delaying(Duration::from_secs(10));
    let policy = retrying(3);
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(50 * MS).await;
        cancel.cancel();
    });
    let began = Instant::now();
    let outcome = policy
        .call()
        .token(&token)
        .run(chaos.wrap(async |_| Ok::<_, Fail>(())))
        .await;
    assert!(matches!(outcome, Err(Error::Cancelled)));
    assert_eq!(Instant::now() - began, 50 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_hedging_policy_runs_wrapped_legs_at_once_each_with_its_own_delay() {
    let chaos = delaying(Duration::from_secs(1));
    let policy = Policy::builder()
        .max_attempts(2)
        .hedge(Hedge::fixed(100 * MS))
        .build()
        .expect("valid policy");
    let began = Instant::now();
    let value = policy
        .run(chaos.wrap(async |attempt| Ok::<_, Fail>(attempt.number())))
        .await;
    assert_eq!(value.expect("the first leg answers"), 1);
    assert_eq!(Instant::now() - began, Duration::from_secs(1));
    assert_eq!(
        chaos.injected(InjectionKind::Latency),
        2,
        "the hedge was delayed too"
    );
}

#[tokio::test(start_paused = true)]
async fn an_injected_outcome_is_returned_without_running_the_work() {
    let chaos = Chaos::builder()
        .outcome(1.0, || 42)
        .build()
        .expect("valid chaos");
    let worked = AtomicU32::new(0);
    let value = retrying(3)
        .run(chaos.wrap(async |_| {
            worked.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, Fail>(7)
        }))
        .await;
    assert_eq!(value.expect("injected value"), 42);
    assert_eq!(worked.load(Ordering::SeqCst), 0);
    assert_eq!(chaos.injected(InjectionKind::Outcome), 1);
}

#[tokio::test(start_paused = true)]
async fn a_fault_and_an_outcome_on_the_same_attempt_is_the_fault_and_only_it_is_counted() {
    let chaos = Chaos::builder()
        .fault(1.0, || Fail::Injected)
        .outcome(1.0, || 42)
        .build()
        .expect("valid chaos");
    let outcome = Policy::none()
        .run(chaos.wrap(async |_| Ok::<u32, Fail>(7)))
        .await;
    assert!(matches!(outcome, Err(Error::Inner(Fail::Injected))));
    assert_eq!(chaos.injected(InjectionKind::Fault), 1);
    assert_eq!(chaos.injected(InjectionKind::Outcome), 0);
}

#[tokio::test(start_paused = true)]
async fn inject_in_a_hand_written_callback_delays_then_answers_without_polling_the_work() {
    let chaos = Chaos::builder()
        .latency(1.0, 20 * MS)
        .outcome(1.0, || 42)
        .build()
        .expect("valid chaos");
    let polled = AtomicU32::new(0);
    let began = Instant::now();
    let value = Policy::none()
        .run(async |attempt| {
            let work = async {
                polled.fetch_add(1, Ordering::SeqCst);
                Ok::<u32, Fail>(7)
            };
            chaos.inject(attempt, work).await
        })
        .await;
    assert_eq!(value.expect("injected value"), 42);
    assert_eq!(Instant::now() - began, 20 * MS);
    assert_eq!(polled.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn rate_zero_never_injects_anything() {
    let (seen, hook) = recorder();
    let chaos = Chaos::builder()
        .fault(0.0, || Fail::Injected)
        .latency(0.0, Duration::from_secs(1))
        .outcome(0.0, || 0)
        .seed(3)
        .on_inject(hook)
        .build()
        .expect("valid chaos");
    let policy = Policy::none();
    for call in 0..1_000u32 {
        let value = policy.run(chaos.wrap(async |_| Ok::<_, Fail>(call))).await;
        assert_eq!(value.expect("the work's value"), call);
    }
    assert!(seen.lock().expect("injections").is_empty());
    for kind in [
        InjectionKind::Fault,
        InjectionKind::Latency,
        InjectionKind::Outcome,
    ] {
        assert_eq!(chaos.injected(kind), 0, "{kind}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_switch_turns_injection_off_and_on_between_calls() {
    let chaos = Chaos::builder()
        .fault(1.0, || Fail::Injected)
        .enabled(false)
        .build()
        .expect("valid chaos");
    let switch = chaos.switch();
    let policy = Policy::none();
    let call = async || policy.run(chaos.wrap(async |_| Ok::<_, Fail>(1))).await;
    assert!(call().await.is_ok(), "built switched off");
    switch.enable();
    assert!(chaos.is_enabled());
    assert!(matches!(call().await, Err(Error::Inner(Fail::Injected))));
    switch.disable();
    assert!(call().await.is_ok());
    switch.enable();
    switch
        .set_rate(InjectionKind::Fault, 0.0)
        .expect("valid rate");
    assert!(call().await.is_ok(), "rate 0 while on");
    assert_eq!(chaos.injected(InjectionKind::Fault), 1);
}

/// Which of 1000 calls an even-odds fault hit, for `seed`.
async fn faults_for(seed: u64) -> Vec<bool> {
    let chaos = Chaos::builder()
        .fault(0.5, || Fail::Injected)
        .seed(seed)
        .build()
        .expect("valid chaos");
    let policy = Policy::none();
    let mut hits = Vec::with_capacity(1_000);
    for _ in 0..1_000 {
        let outcome = policy.run(chaos.wrap(async |_| Ok::<_, Fail>(()))).await;
        hits.push(outcome.is_err());
    }
    hits
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_1000_decisions_and_another_seed_differs() {
    let first = faults_for(11).await;
    assert_eq!(first, faults_for(11).await);
    let other = faults_for(12).await;
    let differ = first.iter().zip(&other).filter(|(a, b)| a != b).count();
    // Two independent even-odds sequences differ in about half their places.
    assert!((300..700).contains(&differ), "{differ} of 1000 differ");
    let hit = first.iter().filter(|&&h| h).count();
    assert!((400..600).contains(&hit), "{hit} of 1000 at rate 0.5");
}

#[tokio::test(start_paused = true)]
async fn a_retrys_decision_depends_on_its_call_and_attempt_not_on_other_calls() {
    let decide = async |interleaved: bool| {
        let (seen, hook) = recorder();
        let chaos = Chaos::builder()
            .fault(0.5, || Fail::Injected)
            .seed(5)
            .on_inject(hook)
            .build()
            .expect("valid chaos");
        let policy = retrying(4);
        let work = async |_: &rampart::Attempt| {
            tokio::task::yield_now().await;
            Err::<(), _>(Fail::Real)
        };
        let first = chaos.wrap(work);
        let second = chaos.wrap(work);
        if interleaved {
            let (a, b) = tokio::join!(policy.run(first), policy.run(second));
            assert!(a.is_err() && b.is_err());
        } else {
            assert!(policy.run(first).await.is_err());
            assert!(policy.run(second).await.is_err());
        }
        let mut seen = seen.lock().expect("injections").clone();
        seen.sort_by_key(|i| (i.call, i.attempt));
        seen
    };
    assert_eq!(decide(false).await, decide(true).await);
}

struct Backend {
    calls: AtomicU32,
}

impl Backend {
    async fn fetch(&self, sku: &str, token: CancellationToken) -> Result<u32, Fail> {
        tokio::time::sleep(5 * MS).await;
        if token.is_cancelled() {
            return Err(Fail::Stopped);
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(sku.len() as u32)
    }
}

struct PriceClient {
    policy: Policy,
    chaos: Chaos<u32, Fail>,
    backend: Backend,
}

impl PriceClient {
    async fn get_price(&self, sku: &str) -> Result<u32, Error<Fail>> {
        self.policy
            .run(
                self.chaos
                    .wrap(async |attempt| self.backend.fetch(sku, attempt.token()).await),
            )
            .await
    }
}

#[tokio::test(start_paused = true)]
async fn a_wrapped_borrowing_call_is_send_and_runs_in_a_spawned_task() {
    let chaos = Chaos::builder()
        .fault(1.0, || Fail::Injected)
        .latency(1.0, 10 * MS)
        .enabled(false)
        .build()
        .expect("valid chaos");
    let client = Arc::new(PriceClient {
        policy: retrying(3),
        chaos: chaos.clone(),
        backend: Backend {
            calls: AtomicU32::new(0),
        },
    });
    let spawned = Arc::clone(&client);
    let price = tokio::spawn(async move { spawned.get_price("sku-42").await })
        .await
        .expect("task");
    assert_eq!(price.expect("chaos off"), 6);
    chaos.switch().enable();
    let spawned = Arc::clone(&client);
    let price = tokio::spawn(async move { spawned.get_price("sku-42").await })
        .await
        .expect("task");
    assert!(matches!(price, Err(Error::Inner(Fail::Injected))));
    assert_eq!(client.backend.calls.load(Ordering::SeqCst), 1);
}

fn allocations_per_call(chaos: &Chaos<u32, Fail>, calls: u32) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let policy = Policy::builder()
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .build()
        .expect("valid policy");
    let call = || ready(policy.run(chaos.wrap(async |attempt| Ok::<_, Fail>(attempt.number()))));
    call().expect("warm-up");
    allocation_counter::measure(|| {
        for _ in 0..calls {
            call().expect("success");
        }
    })
    .count_total
}

fn configured(enabled: bool, rate: f64) -> Chaos<u32, Fail> {
    Chaos::builder()
        .fault(rate, || Fail::Injected)
        .latency(rate, Duration::from_secs(1))
        .outcome(rate, || 0)
        .on_inject(|_| {})
        .enabled(enabled)
        .build()
        .expect("valid chaos")
}

#[test]
fn switched_off_chaos_allocates_nothing_per_call() {
    assert_eq!(allocations_per_call(&configured(false, 1.0), 1_000), 0);
}

#[test]
fn switched_on_chaos_at_rate_zero_allocates_nothing_per_call() {
    let chaos = configured(true, 0.0);
    assert_eq!(allocations_per_call(&chaos, 1_000), 0);
    assert_eq!(chaos.injected(InjectionKind::Fault), 0);
}

#[test]
fn an_injected_outcome_allocates_nothing_per_call() {
    let chaos = Chaos::builder()
        .outcome(1.0, || 9)
        .build()
        .expect("valid chaos");
    assert_eq!(allocations_per_call(&chaos, 1_000), 0);
    assert_eq!(chaos.injected(InjectionKind::Outcome), 1_001);
}

#[cfg(feature = "tracing")]
#[path = "support/capture.rs"]
mod capture;

/// With the `tracing` feature, each injection is a `DEBUG` event with target `rampart::chaos`.
#[cfg(feature = "tracing")]
mod traced {
    use rampart::Policy;
    use rampart::chaos::Chaos;

    use super::{Fail, capture};

    #[tokio::test(start_paused = true)]
    async fn each_injection_is_a_debug_event_naming_its_kind_call_and_attempt() {
        let (capture, _guard) = capture::capture();
        let chaos = Chaos::builder()
            .outcome(1.0, || 3)
            .build()
            .expect("valid chaos");
        let value = Policy::none()
            .run(chaos.wrap(async |_| Ok::<u32, Fail>(0)))
            .await;
        assert_eq!(value.expect("injected value"), 3);
        assert_eq!(
            capture.of_target("rampart::chaos"),
            ["DEBUG chaos injected kind=\"outcome\" call=0 attempt=1 in none"]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_injection_hook_does_not_end_the_call() {
    let chaos = Chaos::builder()
        .outcome(1.0, || 5)
        .on_inject(|_| panic!("a broken hook"))
        .build()
        .expect("valid chaos");
    let value = retrying(1)
        .run(chaos.wrap(async |_| Ok::<u32, Fail>(0)))
        .await;
    assert_eq!(value.ok(), Some(5), "the injected value still answers");
}
