//! The limiters against a real `redis-server` on 127.0.0.1 (started by the tests; skipped
//! with a message when the binary is missing).
//!
//! Nothing here asserts a timing: the fleet test asserts the documented bound, which holds
//! however slow the machine is; the partition and crash tests bound their waits with safety
//! timeouts generous enough never to fire on a working limiter.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::admit::{Admit, AdmitContext};
use rampart::{Criticality, Instant, Policy};
use rampart_redis::{GlobalConcurrency, GlobalRateLimit, LimitEvent, Redis};
use support::RedisServer;

/// Far beyond any bound under test: reaching it means the limiter is broken, not slow.
const SAFETY: Duration = Duration::from_secs(5);

fn cx() -> AdmitContext<'static> {
    AdmitContext::new("test", Criticality::Critical, Instant::now())
}

/// Runs `instances` limiters (each with its own client) sharing 200/s for `run`, every one as
/// busy as it can be, plus one instance that makes a single call; checks the bound.
async fn fleet_stays_within_the_documented_bound(server: &RedisServer, instances: u32) {
    const RATE: u32 = 200;
    const BURST: u32 = 20;
    let run = Duration::from_millis(1_500);
    let key = format!("fleet-{instances}");
    let build = || {
        let redis = Redis::open(&server.url()).expect("url");
        GlobalRateLimit::builder(&redis, key.as_str(), RATE, Duration::from_secs(1))
            .burst(BURST)
            .instances(instances + 1)
            // Generous, so that a loaded CI machine does not push the fleet onto its fallback.
            .timeout(Duration::from_secs(1))
            .build()
            .expect("valid")
    };
    let limits: Vec<GlobalRateLimit> = (0..instances).map(|_| build()).collect();
    let idle = build();
    let start = Instant::now();
    // Before the busy ones drain the bucket; then it stays quiet for the whole run.
    assert!(
        idle.acquire(&cx()).await.is_ok(),
        "the idle instance's one call"
    );
    let workers: Vec<_> = limits
        .iter()
        .cloned()
        .map(|limit| {
            tokio::spawn(async move {
                let mut admitted = 0u64;
                while start.elapsed() < run {
                    match limit.acquire(&cx()).await {
                        Ok(()) => admitted += 1,
                        Err(refusal) => {
                            let after = refusal.retry_after.unwrap_or(Duration::from_millis(1));
                            tokio::time::sleep(after.min(Duration::from_millis(5))).await;
                        }
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for worker in workers {
        admitted += worker.await.expect("worker");
    }
    let elapsed = start.elapsed();
    let fallback: u64 = limits.iter().map(|l| l.stats().fallback_admitted).sum();
    let max_batch = limits[0].max_batch();
    let shared = admitted - fallback;
    let bound = f64::from(RATE) * elapsed.as_secs_f64()
        + f64::from(BURST)
        + f64::from(instances + 1) * max_batch as f64;
    let round_trips: u64 = limits.iter().map(|l| l.stats().round_trips).sum();
    println!(
        "{instances} instances, {elapsed:?}: {admitted} admitted ({fallback} by the fallback), \
         {:.1}/s; bound {bound:.0}; {round_trips} round trips",
        admitted as f64 / elapsed.as_secs_f64()
    );
    assert!(
        shared as f64 <= bound,
        "{shared} admitted from the shared quota in {elapsed:?}, over the bound {bound:.0}"
    );
    let idle = idle.stats();
    assert_eq!(
        idle.round_trips, 1,
        "the idle instance took one batch: {idle:?}"
    );
    assert!(idle.granted <= max_batch, "{idle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_4_and_of_16_never_admits_more_than_the_documented_bound() {
    let Some(server) = RedisServer::start("fleet") else {
        return;
    };
    fleet_stays_within_the_documented_bound(&server, 4).await;
    fleet_stays_within_the_documented_bound(&server, 16).await;
}

/// Cuts Redis off in the middle of a run (`cut`), then brings it back (`heal`): every call
/// returns within the timeout (plus a safety margin), calls keep being admitted under the
/// fallback, and the limiter rejoins the shared quota. Returns the events, for the caller to
/// check what the failure looked like.
async fn partition(
    server: &mut RedisServer,
    key: &str,
    cut: fn(&mut RedisServer),
    heal: fn(&mut RedisServer),
) -> Vec<String> {
    let timeout = Duration::from_millis(100);
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let redis = Redis::open(&server.url()).expect("url");
    let limit = GlobalRateLimit::builder(&redis, key, 1_000, Duration::from_secs(1))
        .instances(4)
        .timeout(timeout)
        .probe_every(Duration::from_millis(200))
        .on_event(move |event| {
            let line = match event {
                LimitEvent::Fallback { error, .. } => format!("fallback: {error}"),
                LimitEvent::Rejoined { .. } => "rejoined".to_owned(),
                _ => "other".to_owned(),
            };
            seen.lock().expect("events").push(line);
        })
        .build()
        .expect("valid");
    let mut slowest = Duration::ZERO;
    // One call, bounded by a safety margin past the timeout; whether it was admitted.
    let mut call = async || {
        let started = Instant::now();
        let admitted = tokio::time::timeout(timeout + SAFETY, limit.acquire(&cx()))
            .await
            .expect("no call waits on Redis past its timeout")
            .is_ok();
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(4)).await;
        admitted
    };
    for _ in 0..20 {
        assert!(call().await, "Redis is up, the quota is large");
    }
    assert!(!limit.is_on_fallback());

    cut(server);
    let give_up = Instant::now() + SAFETY;
    while !limit.is_on_fallback() || limit.stats().fallback_admitted == 0 {
        assert!(Instant::now() < give_up, "no fallback: {:?}", limit.stats());
        call().await;
    }
    // Under the fallback (1 000 / 4 = 250 a second) calls keep being admitted.
    let mut admitted = 0;
    for _ in 0..50 {
        admitted += u32::from(call().await);
    }
    assert!(admitted > 0, "the fallback admitted nothing");

    heal(server);
    let give_up = Instant::now() + SAFETY;
    while limit.is_on_fallback() {
        assert!(
            Instant::now() < give_up,
            "never rejoined: {:?}",
            limit.stats()
        );
        call().await;
    }
    assert!(call().await, "admitted from the shared quota again");
    println!(
        "{key}: slowest call {slowest:?} (timeout {timeout:?}); {:?}",
        limit.stats()
    );
    let events = events.lock().expect("events").clone();
    assert!(events.len() >= 2, "{events:?}");
    assert!(
        events[0].starts_with("fallback: redis at 127.0.0.1:"),
        "{events:?}"
    );
    assert!(events[0].contains(&format!("key '{key}'")), "{events:?}");
    assert_eq!(
        events.last().map(String::as_str),
        Some("rejoined"),
        "{events:?}"
    );
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_calls_go_on_under_the_fallback_and_rejoin_after_restart() {
    let Some(mut server) = RedisServer::start("partition") else {
        return;
    };
    partition(
        &mut server,
        "stopped",
        RedisServer::stop,
        RedisServer::restart,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_hangs_is_waited_for_no_longer_than_the_timeout() {
    let Some(mut server) = RedisServer::start("hang") else {
        return;
    };
    let events = partition(&mut server, "hung", |s| s.pause(), |s| s.resume()).await;
    assert!(
        events[0].ends_with("of key 'hung' within 100ms"),
        "a frozen server is a timeout: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_instances_leases_expire_and_the_fleet_regains_them() {
    let Some(server) = RedisServer::start("crash") else {
        return;
    };
    let lease_ttl = Duration::from_secs(1);
    let url = server.url();
    // The crashed instance: its own runtime, four permits taken, then the runtime is torn
    // down (no renewal, its connection closed) and nothing is released.
    let crashed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let held = runtime.block_on(async {
            let redis = Redis::open(&url).expect("url");
            let limit = GlobalConcurrency::builder(&redis, "crash", 4)
                .lease_ttl(lease_ttl)
                .build()
                .expect("valid");
            let mut permits = Vec::new();
            let give_up = Instant::now() + SAFETY;
            while permits.len() < 4 {
                assert!(Instant::now() < give_up, "{:?}", limit.stats());
                match limit.acquire(&cx()).await {
                    Ok(permit) => permits.push(permit),
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            (limit.instance().to_owned(), limit, permits)
        });
        let (instance, limit, permits) = held;
        std::mem::forget((limit, permits));
        drop(runtime);
        instance
    })
    .join()
    .expect("the crashed instance ran");

    let redis = Redis::open(&server.url()).expect("url");
    let survivor = GlobalConcurrency::builder(&redis, "crash", 4)
        .lease_ttl(lease_ttl)
        .build()
        .expect("valid");
    let refusal = survivor
        .acquire(&cx())
        .await
        .expect_err("the crashed instance holds every slot");
    assert_eq!(refusal.by, "global concurrency");
    // The lease that was set: at most the lease time, and counting down.
    let mut connection = server.connection().await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg("{crash}:leases")
        .query_async(&mut connection)
        .await
        .expect("PTTL");
    assert!(0 < ttl && ttl <= 1_000, "{ttl} ms");
    let expiry: f64 = redis::cmd("ZSCORE")
        .arg("{crash}:leases")
        .arg(&crashed)
        .query_async(&mut connection)
        .await
        .expect("the crashed instance's lease");
    assert!(expiry > 0.0);

    let started = Instant::now();
    let permit = loop {
        assert!(
            started.elapsed() < lease_ttl + SAFETY,
            "the slots never came back"
        );
        match survivor.acquire(&cx()).await {
            Ok(permit) => break permit,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    println!(
        "slots back after {:?} (lease time {lease_ttl:?})",
        started.elapsed()
    );
    let gone: Option<f64> = redis::cmd("ZSCORE")
        .arg("{crash}:leases")
        .arg(&crashed)
        .query_async(&mut connection)
        .await
        .expect("ZSCORE");
    assert_eq!(gone, None, "the expired lease was removed");
    drop(permit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_admits_through_both_global_limits() {
    let Some(server) = RedisServer::start("policy") else {
        return;
    };
    let redis = Redis::open(&server.url()).expect("url");
    let rate = GlobalRateLimit::builder(&redis, "policy-rate", 100, Duration::from_secs(1))
        .build()
        .expect("valid");
    let concurrency = GlobalConcurrency::builder(&redis, "policy-slots", 8)
        .build()
        .expect("valid");
    let policy = Policy::builder()
        .admit((rate.clone(), concurrency.clone()))
        .build()
        .expect("valid");
    for i in 0..10 {
        let value = policy
            .run(async |_attempt| Ok::<_, std::io::Error>(i))
            .await
            .expect("admitted");
        assert_eq!(value, i);
    }
    assert_eq!(concurrency.in_use(), 0, "every permit given back");
    assert_eq!(rate.stats().refused, 0);
    drop((rate, concurrency, policy));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_never_has_more_calls_in_flight_than_the_max() {
    let Some(server) = RedisServer::start("concurrency fleet") else {
        return;
    };
    const MAX: u64 = 8;
    let in_flight = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let redis = Redis::open(&server.url()).expect("url");
        let limit = GlobalConcurrency::builder(&redis, "fleet-slots", 8)
            .instances(4)
            // Generous, so that a loaded CI machine does not push the fleet onto its fallback.
            .timeout(Duration::from_secs(1))
            .build()
            .expect("valid");
        // Eight callers per instance, each holding its slot for a moment.
        for _ in 0..8 {
            let (limit, in_flight, most) =
                (limit.clone(), Arc::clone(&in_flight), Arc::clone(&most));
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..40 {
                    match limit.acquire(&cx()).await {
                        Ok(permit) => {
                            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                            drop(permit);
                            admitted += 1;
                        }
                        Err(refusal) => {
                            let after = refusal.retry_after.unwrap_or(Duration::from_millis(1));
                            tokio::time::sleep(after).await;
                        }
                    }
                }
                (admitted, limit.stats().fallback_admitted)
            }));
        }
    }
    let (mut admitted, mut fallback) = (0, false);
    for task in tasks {
        let (ok, by_fallback) = task.await.expect("caller");
        admitted += ok;
        fallback |= by_fallback > 0;
    }
    let most = most.load(Ordering::SeqCst);
    println!(
        "{admitted} calls admitted (fallback used: {fallback}), at most {most} in flight at once (max {MAX})"
    );
    assert!(admitted > 0);
    // The documented bound: the max while every instance reaches Redis; an instance that
    // did not (in time) may add its fallback share, ceil(8 / 4).
    let bound = if fallback { MAX + 4 * 2 } else { MAX };
    assert!(
        most <= bound,
        "{most} in flight across the fleet, over {bound}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_with_a_shorter_lease_never_shortens_the_tables_expiry() {
    let Some(server) = RedisServer::start("mixed-ttl") else {
        return;
    };
    let redis = Redis::open(&server.url()).expect("url");
    let long = GlobalConcurrency::builder(&redis, "mixed", 4)
        .lease_ttl(Duration::from_secs(60))
        .build()
        .expect("valid");
    let short = GlobalConcurrency::builder(&redis, "mixed", 4)
        .lease_ttl(Duration::from_secs(1))
        .build()
        .expect("valid");
    let give_up = Instant::now() + SAFETY;
    let mut held = Vec::new();
    for limit in [&long, &short] {
        loop {
            assert!(Instant::now() < give_up, "{:?}", limit.stats());
            match limit.acquire(&cx()).await {
                Ok(permit) => break held.push(permit),
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }
    // The short lease was written last; the keys must still outlive the 60 s one, or they
    // would vanish (and with them the long lease's count) a second from now.
    let mut connection = server.connection().await;
    for key in ["{mixed}:leases", "{mixed}:slots"] {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut connection)
            .await
            .expect("PTTL");
        assert!(ttl > 30_000, "{key} expires in {ttl} ms");
    }
    drop(held);
}
