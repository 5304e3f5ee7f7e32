//! The success path: a callback that answers at once, run directly, through `Policy::none()`,
//! by hand (`floor`: deadline, attempt timeout, 3 attempts), through a policy doing the same
//! work (no breaker, no budget), by hand with a breaker and a budget (`floor2`), and through a
//! full policy (deadline, attempt timeout, 3 attempts, breaker, budget).
//!
//! `cargo bench -p rampart-bench --bench success_path`

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rampart::Policy;
use rampart_bench::floor::{Limits, retry_loop};
use rampart_bench::floor2::{Guards, guarded_loop, same_breaker};

const LIMITS: Limits = Limits {
    max_attempts: 3,
    deadline: Duration::from_secs(2),
    attempt_timeout: Duration::from_millis(500),
    base: Duration::from_millis(100),
};

async fn work(n: u32) -> Result<u32, std::io::Error> {
    Ok(black_box(n))
}

fn success_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let bounded = || {
        Policy::builder()
            .max_attempts(LIMITS.max_attempts)
            .total_timeout(LIMITS.deadline)
            .attempt_timeout(LIMITS.attempt_timeout)
    };
    let retry_only = bounded().no_budget().build().expect("valid policy");
    let full = bounded()
        .breaker(same_breaker())
        .build()
        .expect("valid policy");
    let none = Policy::none();
    let guards = Guards::new();

    let mut group = c.benchmark_group("success_path");
    group.bench_function("direct", |b| {
        b.to_async(&rt).iter(|| async { work(1).await })
    });
    group.bench_function("policy_none", |b| {
        b.to_async(&rt)
            .iter(|| none.run(async |attempt| work(attempt.number()).await))
    });
    group.bench_function("hand_written", |b| {
        b.to_async(&rt)
            .iter(|| retry_loop(LIMITS, async |n| work(n).await))
    });
    group.bench_function("rampart_retry_only", |b| {
        b.to_async(&rt)
            .iter(|| retry_only.run(async |attempt| work(attempt.number()).await))
    });
    group.bench_function("floor2", |b| {
        b.to_async(&rt)
            .iter(|| guarded_loop(LIMITS, &guards, async |n| work(n).await))
    });
    group.bench_function("rampart_full", |b| {
        b.to_async(&rt)
            .iter(|| full.run(async |attempt| work(attempt.number()).await))
    });
    group.finish();
}

criterion_group!(benches, success_path);
criterion_main!(benches);
