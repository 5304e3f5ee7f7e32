//! Throughput of one policy shared by many threads: the measurement behind the goal "shared
//! state scales across cores" in `bench/BUDGETS.md`.
//!
//! Each thread runs its own current-thread runtime and makes successful calls through the
//! same policy (so the breaker, the retry budget and the latency measurements are shared).
//! The result is calls per second in all, to compare with one thread.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use rampart::Policy;

/// One thread count's result.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    /// Threads sharing the policy.
    pub threads: usize,
    /// Calls per second, all threads together.
    pub calls_per_sec: f64,
}

/// Runs `calls` successful calls on each of `threads` threads through `policy`.
pub fn measure(policy: &Policy, threads: usize, calls: u64) -> Throughput {
    let barrier = Barrier::new(threads + 1);
    let elapsed = std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .expect("runtime");
                barrier.wait();
                rt.block_on(async {
                    for _ in 0..calls {
                        let out = policy
                            .run(async |attempt| Ok::<_, std::io::Error>(attempt.number()))
                            .await;
                        std::hint::black_box(out.is_ok());
                    }
                });
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    });
    Throughput {
        threads,
        calls_per_sec: (threads as u64 * calls) as f64
            / elapsed.max(Duration::from_nanos(1)).as_secs_f64(),
    }
}

/// The same loop with a plain shared atomic counter incremented per call instead of a
/// policy: what one contended cache line costs.
pub fn measure_shared_counter(threads: usize, calls: u64) -> Throughput {
    use std::sync::atomic::{AtomicU64, Ordering};
    let counter = AtomicU64::new(0);
    let barrier = Barrier::new(threads + 1);
    let elapsed = std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                barrier.wait();
                for _ in 0..calls {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    });
    Throughput {
        threads,
        calls_per_sec: (threads as u64 * calls) as f64
            / elapsed.max(Duration::from_nanos(1)).as_secs_f64(),
    }
}
