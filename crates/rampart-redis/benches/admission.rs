//! What a global limit costs: the local admission against rampart's in-process `RateLimit`
//! (ns and allocations per call), and how many calls one Redis round trip admits.
//!
//! ```text
//! cargo bench -p rampart-redis --bench admission
//! ```
//!
//! Starts its own `redis-server` (or uses `REDIS_URL`); without one it says so and stops.
//! Hand-timed (a plain loop around `Instant::now()`), in alternating rounds: the numbers are
//! for comparing the two limiters in one run on one machine, not absolute.

#[path = "../tests/support/mod.rs"]
mod support;

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant as WallClock};

use rampart::admit::{Admit, AdmitContext};
use rampart::limit::RateLimit;
use rampart::{Criticality, Instant};
use rampart_redis::{GlobalRateLimit, Redis};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    // The limiters are built inside the runtime; the calls come from this thread, polled by
    // hand, so that the loop measures the admission and not a scheduler.
    let _inside = runtime.enter();
    let Some((_server, url)) = support::RedisServer::from_env_or_start("the admission benchmark")
    else {
        return Ok(());
    };
    let redis = Redis::open(&url)?;

    println!("local admission, one thread, a limit that is never reached:");
    // A burst far above the calls made: every call is admitted, none refused.
    const BURST: u32 = 100_000_000;
    let local = RateLimit::builder(1_000_000, Duration::from_secs(1))
        .burst(BURST)
        .build()?;
    let global = GlobalRateLimit::builder(&redis, "bench-local", 1_000_000, Duration::from_secs(1))
        .burst(BURST)
        .horizon(Duration::from_secs(1))
        .build()?;
    // Warm up: the first refills size the batch from this thread's demand.
    admit_many(&runtime, &global, 200_000);
    // Rounds of the two in turn; the fastest round of each is the least disturbed by the
    // other work on the machine, the median says how much that disturbed.
    let mut rounds = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        rounds[0].push(measure(&runtime, &local));
        rounds[1].push(measure(&runtime, &global));
    }
    for (name, mut costs) in ["rampart RateLimit", "GlobalRateLimit"]
        .into_iter()
        .zip(rounds)
    {
        costs.sort_by(|a, b| a.nanos.total_cmp(&b.nanos));
        let allocations = costs.iter().map(|c| c.allocations).fold(0.0, f64::max);
        println!(
            "  {name:<18} {:>6.1} ns/call fastest, {:>6.1} median of {ROUNDS} rounds; {allocations:.4} allocations/call on the calling thread",
            costs[0].nanos,
            costs[ROUNDS / 2].nanos,
        );
    }
    let stats = global.stats();
    println!(
        "  GlobalRateLimit: {} calls ({} refused), {} round trips ({:.0} admissions per round trip, batches of at most {})",
        stats.calls,
        stats.refused,
        stats.round_trips,
        stats.calls as f64 / stats.round_trips.max(1) as f64,
        global.max_batch()
    );

    println!("admissions per round trip, one instance calling 100/s under a 200/s limit for 3 s:");
    for horizon in [100, 250, 1_000].map(Duration::from_millis) {
        let limit = GlobalRateLimit::builder(
            &redis,
            format!("bench-horizon-{}", horizon.as_millis()),
            200,
            Duration::from_secs(1),
        )
        .horizon(horizon)
        .build()?;
        let admitted = runtime.block_on(paced(&limit, 100.0, Duration::from_secs(3)));
        let stats = limit.stats();
        println!(
            "  horizon {horizon:>6?} (max batch {:>3}): {admitted} admitted, {} round trips, {:.1} admissions per round trip",
            limit.max_batch(),
            stats.round_trips,
            admitted as f64 / stats.round_trips.max(1) as f64
        );
    }
    Ok(())
}

/// Time and allocations of one admission.
struct Cost {
    nanos: f64,
    allocations: f64,
}

/// Rounds of each limiter.
const ROUNDS: usize = 7;

/// One round: its time per call, then its allocations per call.
fn measure<A: Admit>(runtime: &tokio::runtime::Runtime, limit: &A) -> Cost {
    const CALLS: u64 = 500_000;
    let started = WallClock::now();
    admit_many(runtime, limit, CALLS);
    let nanos = started.elapsed().as_nanos() as f64 / CALLS as f64;
    let counted = allocation_counter::measure(|| admit_many(runtime, limit, CALLS / 10));
    Cost {
        nanos,
        allocations: counted.count_total as f64 / (CALLS / 10) as f64,
    }
}

/// `calls` admissions, each polled once by hand (a refill wait, rare, is driven to its end).
fn admit_many<A: Admit>(runtime: &tokio::runtime::Runtime, limit: &A, calls: u64) {
    let mut task = Context::from_waker(Waker::noop());
    for _ in 0..calls {
        let cx = AdmitContext::new("bench", Criticality::Critical, Instant::now());
        let mut admission = pin!(limit.acquire(&cx));
        let admitted = match admission.as_mut().poll(&mut task) {
            Poll::Ready(result) => result,
            Poll::Pending => runtime.block_on(admission),
        };
        drop(black_box(admitted));
    }
}

/// Calls at `per_second`, evenly, for `run`; how many were admitted.
async fn paced(limit: &GlobalRateLimit, per_second: f64, run: Duration) -> u64 {
    let start = Instant::now();
    let mut next = start;
    let mut admitted = 0;
    while start.elapsed() < run {
        let cx = AdmitContext::new("bench", Criticality::Critical, Instant::now());
        if limit.acquire(&cx).await.is_ok() {
            admitted += 1;
        }
        next += Duration::from_secs_f64(1.0 / per_second);
        tokio::time::sleep_until(next).await;
    }
    admitted
}
