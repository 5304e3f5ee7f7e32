//! One policy (deadline, attempt timeout, 3 attempts, breaker, retry budget) shared by 1, 2,
//! 4, 8, ... threads, up to the machine's cores: calls per second and the ratio to one thread.
//!
//! `cargo run --release -p rampart-bench --example scaling -- [CALLS_PER_THREAD]`

use std::time::Duration;

use rampart::{Breaker, Policy};
use rampart_bench::scaling::{measure, measure_shared_counter};

fn main() {
    let calls: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let policy = Policy::builder()
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .breaker(Breaker::builder().build().expect("valid breaker"))
        .build()
        .expect("valid policy");
    let mut counts = vec![1];
    while counts.last().is_some_and(|&n| n * 2 <= cores) {
        counts.push(counts.last().map_or(1, |n| n * 2));
    }
    if counts.last() != Some(&cores) {
        counts.push(cores);
    }
    println!("{cores} cores, {calls} calls per thread");
    println!("| threads | policy calls/s | x of 1 thread | shared counter x |");
    println!("|---|---|---|---|");
    // A warm-up run, then every thread count in turn; ratios are to the 1-thread row.
    let _ = measure(&policy, 1, calls / 4);
    let (mut base, mut counter_base) = (None, None);
    for &threads in &counts {
        let t = measure(&policy, threads, calls).calls_per_sec;
        let c = measure_shared_counter(threads, calls * 20).calls_per_sec;
        let base = *base.get_or_insert(t);
        let counter_base = *counter_base.get_or_insert(c);
        println!(
            "| {threads} | {t:.0} | {:.2}x | {:.2}x |",
            t / base,
            c / counter_base
        );
    }
}
