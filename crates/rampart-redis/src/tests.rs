//! The lease logic on fake stores and tokio's paused time: batch sizing, demand, the timeout
//! bound, the fallback and the return from it. No Redis, no real time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::admit::{Admit, AdmitContext};
use rampart::clock::{Clock, ManualClock};
use rampart::{Criticality, Instant};

use crate::error::StoreError;
use crate::event::LimitEvent;
use crate::store::{BucketSpec, SlotSpec, Store, StoreFuture, TokenGrant};
use crate::{GlobalConcurrencyBuilder, GlobalRateLimitBuilder};

const MS: Duration = Duration::from_millis(1);

/// How the fake store answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Answer,
    Fail,
    Hang,
}

/// A store in memory: a pool of tokens the test fills by hand, and a slot table.
struct Fake {
    mode: Mutex<Mode>,
    tokens: AtomicU64,
    slots: Mutex<HashMap<String, u64>>,
    operations: AtomicU64,
}

impl Fake {
    fn new(tokens: u64) -> Arc<Fake> {
        Arc::new(Fake {
            mode: Mutex::new(Mode::Answer),
            tokens: AtomicU64::new(tokens),
            slots: Mutex::new(HashMap::new()),
            operations: AtomicU64::new(0),
        })
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().expect("mode") = mode;
    }

    /// Counts the operation and fails or hangs as told.
    async fn enter(&self, key: &str) -> Result<(), StoreError> {
        self.operations.fetch_add(1, Ordering::Relaxed);
        let mode = *self.mode.lock().expect("mode");
        match mode {
            Mode::Answer => Ok(()),
            Mode::Fail => Err(StoreError::reply(
                "fake:6379",
                key,
                "fake",
                "refused".into(),
            )),
            Mode::Hang => std::future::pending().await,
        }
    }

    fn leased(&self) -> u64 {
        self.slots.lock().expect("slots").values().sum()
    }
}

impl Store for Fake {
    fn take_tokens<'a>(
        &'a self,
        bucket: &'a BucketSpec,
        want: u64,
        take: u64,
        refill: u64,
    ) -> StoreFuture<'a, TokenGrant> {
        Box::pin(async move {
            self.enter(&bucket.key).await?;
            let there = self.tokens.load(Ordering::Relaxed);
            let granted = if there < take { 0 } else { want.min(there) };
            let left = self.tokens.fetch_sub(granted, Ordering::Relaxed) - granted;
            Ok(TokenGrant {
                granted,
                wait: if left < refill {
                    50 * MS
                } else {
                    Duration::ZERO
                },
            })
        })
    }

    fn lease_slots<'a>(&'a self, slots: &'a SlotSpec, want: u64) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            self.enter(&slots.key).await?;
            let mut table = self.slots.lock().expect("slots");
            let others: u64 = table
                .iter()
                .filter(|(name, _)| **name != slots.instance)
                .map(|(_, held)| held)
                .sum();
            let granted = want.min(slots.max.saturating_sub(others));
            table.insert(slots.instance.clone(), granted);
            Ok(granted)
        })
    }

    fn server(&self) -> &str {
        "fake:6379"
    }
}

fn cx(now: Instant) -> AdmitContext<'static> {
    AdmitContext::new("test", Criticality::Critical, now)
}

/// Lets the spawned refills run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

fn rate(fake: &Arc<Fake>, permits: u32) -> GlobalRateLimitBuilder {
    GlobalRateLimitBuilder::with_store(
        Arc::clone(fake) as Arc<dyn Store>,
        "vendor".into(),
        permits,
        Duration::from_secs(1),
    )
}

fn concurrency(fake: &Arc<Fake>, max: u32) -> GlobalConcurrencyBuilder {
    GlobalConcurrencyBuilder::with_store(Arc::clone(fake) as Arc<dyn Store>, "pool".into(), max)
}

/// Records the events a limiter emits.
fn recorder() -> (
    Arc<Mutex<Vec<String>>>,
    impl Fn(&LimitEvent<'_>) + Send + Sync,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let listener = move |event: &LimitEvent<'_>| {
        let line = match event {
            LimitEvent::Fallback { key, error } => format!("fallback {key}: {error}"),
            LimitEvent::Rejoined { key, .. } => format!("rejoined {key}"),
        };
        sink.lock().expect("events").push(line);
    };
    (seen, listener)
}

#[tokio::test(start_paused = true)]
async fn a_busy_instance_admits_most_calls_locally_from_batches_sized_by_its_demand() {
    let fake = Fake::new(1_000_000);
    let limit = rate(&fake, 1_000).build().expect("valid");
    assert_eq!(
        limit.max_batch(),
        100,
        "the whole rate over the 100 ms horizon"
    );
    let mut admitted = 0;
    for _ in 0..2_000 {
        if limit.acquire(&cx(Instant::now())).await.is_ok() {
            admitted += 1;
        }
        assert!(
            limit.held() <= limit.max_batch(),
            "never more than one batch"
        );
        settle().await;
        tokio::time::advance(MS).await;
    }
    let stats = limit.stats();
    assert_eq!(admitted, 2_000);
    assert_eq!(stats.fallback_admitted, 0);
    // 1 000 calls a second × 100 ms: batches of 100, once demand is measured.
    assert!(stats.round_trips <= 40, "{stats:?}");
    assert_eq!(stats.granted - limit.held(), 2_000);
}

#[tokio::test(start_paused = true)]
async fn an_idle_instance_takes_one_small_batch_and_never_refills_by_itself() {
    let fake = Fake::new(1_000_000);
    let limit = rate(&fake, 1_000).build().expect("valid");
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
    settle().await;
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    let stats = limit.stats();
    assert_eq!(stats.round_trips, 1, "{stats:?}");
    assert!(
        stats.granted <= 1,
        "one call in a minute sizes a batch of one: {stats:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn tokens_unspent_after_the_batch_ttl_are_dropped_not_spent_late() {
    let fake = Fake::new(1_000_000);
    let limit = rate(&fake, 1_000)
        .batch_ttl(Duration::from_secs(1))
        .build()
        .expect("valid");
    for _ in 0..50 {
        assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
        settle().await;
        tokio::time::advance(MS).await;
    }
    assert!(limit.held() > 0, "a busy instance holds tokens");
    tokio::time::advance(Duration::from_secs(2)).await;
    let before = fake.operations.load(Ordering::Relaxed);
    assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
    assert_eq!(
        fake.operations.load(Ordering::Relaxed),
        before + 1,
        "the expired batch was dropped and a new one taken"
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_bucket_refuses_at_once_with_the_stores_wait_and_asks_no_sooner() {
    let fake = Fake::new(0);
    let limit = rate(&fake, 100).build().expect("valid");
    let refusal = limit
        .acquire(&cx(Instant::now()))
        .await
        .expect_err("no tokens");
    assert_eq!(refusal.by, "global rate limit");
    // The store's 50 ms, doubled for a refill that got nothing, plus up to half at random.
    let after = refusal.retry_after.expect("a retry-after");
    assert!((100 * MS..=150 * MS).contains(&after), "{after:?}");
    // Within the wait the store is not asked again.
    for _ in 0..10 {
        assert!(limit.acquire(&cx(Instant::now())).await.is_err());
        settle().await;
    }
    assert_eq!(fake.operations.load(Ordering::Relaxed), 1);
    fake.tokens.store(10, Ordering::Relaxed);
    tokio::time::advance(after).await;
    assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
    assert_eq!(fake.operations.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_store_is_waited_for_no_longer_than_the_timeout() {
    let fake = Fake::new(1_000);
    fake.set(Mode::Hang);
    let (events, listener) = recorder();
    let limit = rate(&fake, 100)
        .instances(10)
        .timeout(100 * MS)
        .on_event(listener)
        .build()
        .expect("valid");
    let start = Instant::now();
    let admitted = limit.acquire(&cx(start)).await;
    assert_eq!(
        start.elapsed(),
        100 * MS,
        "exactly the bound, on paused time"
    );
    assert!(admitted.is_ok(), "admitted by the fallback");
    settle().await;
    assert!(limit.is_on_fallback());
    let events = events.lock().expect("events").clone();
    assert_eq!(
        events,
        [
            "fallback vendor: redis at fake:6379 did not finish the rate refill of key 'vendor' within 100ms"
        ]
    );
    // On the fallback, no call waits at all.
    let now = Instant::now();
    let _ = limit.acquire(&cx(now)).await;
    assert_eq!(Instant::now(), now);
}

#[tokio::test(start_paused = true)]
async fn a_failing_store_switches_to_the_fallback_and_it_rejoins_when_the_store_answers() {
    let fake = Fake::new(1_000_000);
    fake.set(Mode::Fail);
    let (events, listener) = recorder();
    let limit = rate(&fake, 100)
        .instances(10)
        .probe_every(Duration::from_secs(1))
        .on_event(listener)
        .build()
        .expect("valid");
    // The fallback: ceil(100 / 10) = 10 a second, a burst of 10.
    let now = Instant::now();
    let mut admitted = 0;
    for _ in 0..40 {
        if limit.acquire(&cx(now)).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10, "the fallback's burst, and no more");
    assert!(limit.is_on_fallback());
    assert_eq!(
        fake.operations.load(Ordering::Relaxed),
        1,
        "probes wait for probe_every"
    );
    fake.set(Mode::Answer);
    tokio::time::advance(Duration::from_secs(1)).await;
    // This call starts a probe and is served by the fallback; the probe brings it back.
    assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
    settle().await;
    assert!(!limit.is_on_fallback());
    assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
    let events = events.lock().expect("events").clone();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[0].starts_with("fallback vendor: redis at fake:6379 gave an unexpected reply"));
    assert_eq!(events[1], "rejoined vendor");
}

#[tokio::test(start_paused = true)]
async fn a_fleet_of_concurrency_limits_never_leases_more_than_the_max() {
    let fake = Fake::new(0);
    let a = concurrency(&fake, 4).instances(2).build().expect("valid");
    let b = concurrency(&fake, 4).instances(2).build().expect("valid");
    let mut held = Vec::new();
    for _ in 0..10 {
        for limit in [&a, &b] {
            if let Ok(permit) = limit.acquire(&cx(Instant::now())).await {
                held.push(permit);
            }
            settle().await;
            assert!(fake.leased() <= 4, "{}", fake.leased());
        }
    }
    assert_eq!(held.len(), 4);
    assert_eq!(a.in_use() + b.in_use(), 4);
    let refusal = a.acquire(&cx(Instant::now())).await.expect_err("full");
    assert_eq!(refusal.by, "global concurrency");
    drop(held);
    assert_eq!(a.in_use() + b.in_use(), 0);
    // Renewals shrink the idle leases: to a spare slot while the last calls are recent, then
    // to nothing.
    for _ in 0..2 {
        tokio::time::advance(Duration::from_secs(4)).await;
        settle().await;
    }
    assert_eq!(fake.leased(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_limit_on_its_fallback_admits_its_share_and_gives_slots_back() {
    let fake = Fake::new(0);
    fake.set(Mode::Fail);
    let limit = concurrency(&fake, 10).instances(4).build().expect("valid");
    let mut held = Vec::new();
    for _ in 0..10 {
        if let Ok(permit) = limit.acquire(&cx(Instant::now())).await {
            held.push(permit);
        }
        settle().await;
    }
    assert!(limit.is_on_fallback());
    assert_eq!(held.len(), 3, "ceil(10 / 4)");
    drop(held);
    assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_gives_the_lease_up() {
    let fake = Fake::new(0);
    let limit = concurrency(&fake, 8).build().expect("valid");
    let permit = limit.acquire(&cx(Instant::now())).await.expect("room");
    settle().await;
    assert!(fake.leased() >= 1);
    drop(permit);
    drop(limit);
    settle().await;
    assert_eq!(fake.leased(), 0);
}

#[tokio::test]
async fn invalid_settings_are_all_reported_with_their_values() {
    let fake = Fake::new(0);
    let err = rate(&fake, 0)
        .burst(0)
        .timeout(Duration::ZERO)
        .instances(0)
        .max_batch(0)
        .build()
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "global_rate_limit.timeout must be positive (was 0ns); \
         global_rate_limit.instances must be at least 1 (was 0); \
         global_rate_limit.max_batch must be at least 1 (was 0); \
         global_rate_limit.permits must be at least 1 (was 0); \
         global_rate_limit.burst must be at least 1 (was 0)"
    );
    let err = concurrency(&fake, 0)
        .lease_ttl(Duration::from_millis(200))
        .build()
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "global_concurrency.max must be at least 1 (was 0); \
         global_concurrency.lease_ttl must be at least 3 × timeout, so that a renewal fits before it lapses (was 200ms with a timeout of 100ms)"
    );
    // The largest timeout is refused, not overflowed (3 × timeout saturates).
    let err = concurrency(&fake, 1)
        .timeout(Duration::MAX)
        .build()
        .expect_err("invalid");
    assert!(
        err.to_string().starts_with("global_concurrency.timeout"),
        "{err}"
    );
    let err =
        GlobalRateLimitBuilder::with_store(fake, String::new(), 2_000_000, Duration::from_secs(1))
            .build()
            .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "global_rate_limit.key must not be empty (was \"\"); \
         global_rate_limit.per must give each permit at least 1µs: at most 1e6 permits a second (was 2000000 per 1s)"
    );
}

#[test]
fn building_outside_a_runtime_is_an_error_not_a_panic() {
    let fake = Fake::new(0);
    let err = rate(&fake, 10).build().expect_err("no runtime");
    assert_eq!(
        err.to_string(),
        "global_rate_limit.runtime must be built inside a tokio runtime, which runs its refills (none is running on this thread)"
    );
    let err = concurrency(&fake, 10).build().expect_err("no runtime");
    assert_eq!(err.problems()[0].field(), "global_concurrency.runtime");
}

#[test]
fn a_bad_redis_url_is_refused_without_echoing_it() {
    let err = crate::Redis::open("http://user:secret@host/").expect_err("not redis");
    assert_eq!(err.problems()[0].field(), "redis.url");
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn an_admission_from_the_batch_allocates_nothing() {
    let fake = Fake::new(1_000_000);
    let limit = rate(&fake, 1_000).build().expect("valid");
    // Busy until a full batch is held: well above the mark that starts a refill.
    while limit.held() < 90 {
        let _ = limit.acquire(&cx(Instant::now())).await;
        settle().await;
        tokio::time::advance(MS / 10).await;
    }
    let mut task = std::task::Context::from_waker(std::task::Waker::noop());
    let now = Instant::now();
    let counted = allocation_counter::measure(|| {
        for _ in 0..10 {
            let cx = cx(now);
            let admission = std::pin::pin!(limit.acquire(&cx));
            assert!(matches!(
                admission.poll(&mut task),
                std::task::Poll::Ready(Ok(()))
            ));
        }
    });
    assert_eq!(counted.count_total, 0, "{counted:?}");
    assert_eq!(
        fake.operations.load(Ordering::Relaxed),
        limit.stats().round_trips
    );
}

#[test]
fn a_limiter_that_outlives_its_runtime_drops_without_a_panic() {
    let fake = Fake::new(0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (limit, permit) = runtime.block_on(async {
        let limit = concurrency(&fake, 4).build().expect("valid");
        let permit = limit.acquire(&cx(Instant::now())).await.expect("room");
        (limit, permit)
    });
    drop(runtime);
    assert_eq!(limit.leased(), 1);
    // The lease cannot be given up without the runtime: it is left to expire.
    drop(permit);
    drop(limit);
    assert_eq!(fake.leased(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_takes_the_last_token_that_a_refill_ahead_of_need_leaves() {
    let fake = Fake::new(1_000_000);
    let limit = rate(&fake, 1_000).build().expect("valid");
    while limit.held() < 50 {
        let _ = limit.acquire(&cx(Instant::now())).await;
        settle().await;
        tokio::time::advance(MS / 10).await;
    }
    // One token left in the store: fewer than half a batch, so refills ahead of need take
    // nothing while this instance spends what it holds.
    fake.tokens.store(1, Ordering::Relaxed);
    while limit.held() > 0 {
        assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
        settle().await;
    }
    assert_eq!(fake.tokens.load(Ordering::Relaxed), 1);
    // Once the store's wait has passed, a call that waits takes the one token there is.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(limit.acquire(&cx(Instant::now())).await.is_ok());
    assert_eq!(fake.tokens.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn renewals_keep_the_slots_in_use_leased_and_shrink_to_them() {
    let fake = Fake::new(0);
    let limit = concurrency(&fake, 8)
        .lease_ttl(Duration::from_secs(3))
        .build()
        .expect("valid");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(limit.acquire(&cx(Instant::now())).await.expect("room"));
        settle().await;
    }
    let before = fake.operations.load(Ordering::Relaxed);
    // Ten renewal periods (a second each), far past the lease time: every renewal asks the
    // store again, and never for less than the three slots in use.
    for _ in 0..10 {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert!(fake.leased() >= 3, "{} leased", fake.leased());
    }
    let renewals = fake.operations.load(Ordering::Relaxed) - before;
    assert!(renewals >= 9, "{renewals} renewals in 10 periods");
    // Two of the three calls end: the idle slots go back, the one in use stays.
    held.truncate(1);
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
    }
    assert_eq!(limit.in_use(), 1);
    assert_eq!(fake.leased(), 1);
}

#[tokio::test]
async fn a_hanging_store_is_timed_out_on_the_policys_clock() {
    // A manual clock and real (unpaused) time: only the manual clock moves, and the 10 s
    // bound can be reached on it alone.
    let fake = Fake::new(1_000);
    fake.set(Mode::Hang);
    let limit = rate(&fake, 100)
        .instances(10)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("valid");
    let manual = ManualClock::new();
    let clock = Clock::from(manual.clone());
    let call = {
        let limit = limit.clone();
        let clock = clock.clone();
        tokio::spawn(async move {
            let mut cx = cx(clock.now());
            cx.clock = &clock;
            limit.acquire(&cx).await.map(drop)
        })
    };
    settle().await;
    assert!(!call.is_finished(), "the call waits for the refill");
    manual.advance(Duration::from_secs(10));
    settle().await;
    assert!(
        call.await.expect("the call ran").is_ok(),
        "admitted by the fallback"
    );
    assert!(
        limit.is_on_fallback(),
        "the refill gave up at the bound on the policy's clock"
    );
}
