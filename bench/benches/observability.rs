//! The per-call cost of the observability features (issue 12): the success path of
//! `Policy::none()` and of a full policy (deadline, attempt timeout, 3 attempts, breaker,
//! budget), in a group named after the features this bench was built with. No recorder or
//! subscriber is installed, so this is rampart's own share (clock reads, events built and
//! dispatched to no-op handles); an exporter adds its own.
//!
//! ```text
//! cargo bench -p rampart-bench --bench observability
//! cargo bench -p rampart-bench --bench observability --features metrics
//! cargo bench -p rampart-bench --bench observability --features tracing
//! cargo bench -p rampart-bench --bench observability --features tracing,metrics
//! ```

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rampart::{Breaker, Policy};

async fn work(n: u32) -> Result<u32, std::io::Error> {
    Ok(black_box(n))
}

/// The features this bench was built with, as its group's name.
const GROUP: &str = match (cfg!(feature = "tracing"), cfg!(feature = "metrics")) {
    (false, false) => "observability/off",
    (true, false) => "observability/tracing",
    (false, true) => "observability/metrics",
    (true, true) => "observability/tracing+metrics",
};

fn observability(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let none = Policy::none();
    let full = Policy::builder()
        .max_attempts(3)
        .deadline(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .breaker(Breaker::builder().build().expect("valid breaker"))
        .build()
        .expect("valid policy");
    let mut group = c.benchmark_group(GROUP);
    group.bench_function("policy_none", |b| {
        b.to_async(&rt)
            .iter(|| none.run(async |attempt| work(attempt.number()).await))
    });
    group.bench_function("rampart_full", |b| {
        b.to_async(&rt)
            .iter(|| full.run(async |attempt| work(attempt.number()).await))
    });
    group.finish();
}

criterion_group!(benches, observability);
criterion_main!(benches);
