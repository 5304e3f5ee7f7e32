//! A fleet sharing one rate limit through Redis, measured in real time.
//!
//! ```text
//! cargo run --release -p rampart-redis --example fleet
//! ```
//!
//! Starts its own `redis-server` on a free port (or uses `REDIS_URL`), then for N = 4 and 16
//! instances (each its own client and limiter) sharing 200/s:
//!
//! - *saturated*: every instance calls as fast as it is admitted, for 10 s (`FLEET_SECONDS`);
//!   one more instance makes a single call and stays idle;
//! - *under the limit*: the instances offer 160/s between them, evenly.
//!
//! It prints the aggregate admitted per second, the worst one-second window against the
//! documented bound, each instance's share, the round trips to Redis, and what the idle
//! instance took. A measurement, not a test: the numbers depend on the machine.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use rampart::admit::{Admit, AdmitContext};
use rampart::{Criticality, Instant};
use rampart_redis::{GlobalRateLimit, Redis};

const RATE: u32 = 200;
const BURST: u32 = 20;

/// How an instance offers its calls.
#[derive(Debug, Clone, Copy)]
enum Load {
    /// As fast as it is admitted (a refused call sleeps its retry-after, at most 5 ms).
    Saturated,
    /// This many calls a second, evenly spaced; a refused call is dropped.
    Paced(f64),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds = std::env::var("FLEET_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10u64);
    let run = Duration::from_secs(seconds);
    let Some((_server, url)) = support::RedisServer::from_env_or_start("the fleet example") else {
        return Ok(());
    };
    for instances in [4u32, 16] {
        measure(&url, instances, Load::Saturated, run).await?;
        let offered = 0.8 * f64::from(RATE) / f64::from(instances);
        measure(&url, instances, Load::Paced(offered), run).await?;
    }
    Ok(())
}

async fn measure(
    url: &str,
    instances: u32,
    load: Load,
    run: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let key = format!("fleet-example-{instances}-{}", fastrand_suffix());
    let build = || -> Result<GlobalRateLimit, Box<dyn std::error::Error>> {
        let redis = Redis::open(url)?;
        Ok(
            GlobalRateLimit::builder(&redis, key.as_str(), RATE, Duration::from_secs(1))
                .burst(BURST)
                .instances(instances + 1)
                .build()?,
        )
    };
    let limits = (0..instances)
        .map(|_| build())
        .collect::<Result<Vec<_>, _>>()?;
    let idle = build()?;
    let start = Instant::now();
    let idle_admitted = idle.acquire(&cx()).await.is_ok();
    let workers: Vec<_> = limits
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, limit)| {
            // Paced instances start evenly out of phase, as independent clients would be,
            // rather than all calling at the same instant every period.
            let phase = match load {
                Load::Saturated => Duration::ZERO,
                Load::Paced(per_second) => {
                    Duration::from_secs_f64(i as f64 / f64::from(instances) / per_second)
                }
            };
            tokio::spawn(offer(limit, load, start, start + phase, run))
        })
        .collect();
    let mut shares = Vec::new();
    let mut stamps = Vec::new();
    for worker in workers {
        let admitted = worker.await?;
        shares.push(admitted.len());
        stamps.extend(admitted);
    }
    let elapsed = start.elapsed();
    stamps.sort();
    let total = stamps.len();
    let per_second = per_second(&stamps, run);
    let worst = worst_window(&stamps, Duration::from_secs(1));
    let max_batch = limits[0].max_batch();
    let round_trips: u64 = limits.iter().map(|l| l.stats().round_trips).sum();
    let fallback: u64 = limits.iter().map(|l| l.stats().fallback_admitted).sum();
    let granted: u64 = limits.iter().map(|l| l.stats().granted).sum();
    let held: u64 = limits.iter().map(GlobalRateLimit::held).sum();
    let rate = total as f64 / elapsed.as_secs_f64();
    let whole_bound = f64::from(BURST) + f64::from(RATE) * elapsed.as_secs_f64();
    let window_bound = u64::from(BURST) + u64::from(RATE) + u64::from(instances + 1) * max_batch;
    let label = match load {
        Load::Saturated => "saturated".to_owned(),
        Load::Paced(each) => format!("offering {:.0}/s in all", each * f64::from(instances)),
    };
    println!(
        "{instances} instances + 1 idle, {label}, sharing {RATE}/s (burst {BURST}, max batch {max_batch}) for {elapsed:.2?}"
    );
    println!(
        "  admitted {total} = {rate:.1}/s ({:+.1} % of the limit); {fallback} by the fallback",
        100.0 * (rate / f64::from(RATE) - 1.0)
    );
    println!(
        "  per second: {per_second:?}; over the whole run {:+.0} against limit × elapsed + burst = {whole_bound:.0}",
        total as f64 - whole_bound,
    );
    println!(
        "  worst 1 s window: {worst} (overshoot {:+} over {RATE}; documented bound {window_bound} = burst + rate × 1 s + {} × max batch)",
        worst as i64 - i64::from(RATE),
        instances + 1
    );
    let shares: Vec<String> = shares
        .iter()
        .map(|&n| format!("{:.1}", 100.0 * n as f64 / total.max(1) as f64))
        .collect();
    println!("  shares (%): {}", shares.join(" "));
    println!(
        "  round trips: {round_trips} ({:.1} admissions per round trip); tokens taken {granted}, \
         dropped unspent {}, held at the end {held}",
        total as f64 / round_trips.max(1) as f64,
        granted.saturating_sub(total as u64 + held),
    );
    let idle = idle.stats();
    println!(
        "  idle instance: 1 call ({}), {} batch(es), {} token(s) taken",
        if idle_admitted { "admitted" } else { "refused" },
        idle.round_trips,
        idle.granted
    );
    Ok(())
}

/// One instance's calls from `first` until `run` after `start`; the instants (since
/// `start`) it was admitted at.
async fn offer(
    limit: GlobalRateLimit,
    load: Load,
    start: Instant,
    first: Instant,
    run: Duration,
) -> Vec<Duration> {
    let mut admitted = Vec::new();
    tokio::time::sleep_until(first).await;
    let mut next = first;
    while start.elapsed() < run {
        let result = limit.acquire(&cx()).await;
        if result.is_ok() {
            admitted.push(start.elapsed());
        }
        match (load, result) {
            (Load::Saturated, Ok(())) => {}
            (Load::Saturated, Err(refusal)) => {
                let after = refusal.retry_after.unwrap_or(Duration::from_millis(1));
                tokio::time::sleep(after.min(Duration::from_millis(5))).await;
            }
            (Load::Paced(per_second), _) => {
                next += Duration::from_secs_f64(1.0 / per_second);
                tokio::time::sleep_until(next).await;
            }
        }
    }
    admitted
}

/// Admissions in each whole second of the run.
fn per_second(stamps: &[Duration], run: Duration) -> Vec<usize> {
    let mut seconds = vec![0; usize::try_from(run.as_secs()).unwrap_or(0).max(1)];
    for stamp in stamps {
        if let Some(second) =
            seconds.get_mut(usize::try_from(stamp.as_secs()).unwrap_or(usize::MAX))
        {
            *second += 1;
        }
    }
    seconds
}

/// The most admissions in any window of `width` (stamps sorted).
fn worst_window(stamps: &[Duration], width: Duration) -> usize {
    let mut first = 0;
    let mut worst = 0;
    for (last, stamp) in stamps.iter().enumerate() {
        while *stamp - stamps[first] >= width {
            first += 1;
        }
        worst = worst.max(last + 1 - first);
    }
    worst
}

fn cx() -> AdmitContext<'static> {
    AdmitContext::new("fleet", Criticality::Critical, Instant::now())
}

/// A suffix that keeps the runs of one server apart.
fn fastrand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::process::id())
}
