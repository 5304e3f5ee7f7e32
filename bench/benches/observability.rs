//! The per-call cost of the observability features (issue 12): the success path of
//! `Policy::none()` and of a full policy (deadline, attempt timeout, 3 attempts, breaker,
//! budget), in a group named after the features this bench was built with.
//!
//! - `policy_none`, `rampart_full`: nothing listening (no recorder, no subscriber): rampart's
//!   own share (the clock reads and events a feature makes every call build).
//! - `rampart_full_subscribed` (with `tracing`): a subscriber that enables every span and
//!   event and keeps nothing, so the cost is building and dispatching them.
//! - `rampart_full_prometheus` (with `metrics`): the policy built with the Prometheus
//!   recorder installed, so every event moves a real counter or histogram.
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
use rampart::{Breaker, Policy, PolicyBuilder};

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

fn full() -> PolicyBuilder {
    Policy::builder()
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .breaker(Breaker::builder().build().expect("valid breaker"))
}

/// Enables everything, records nothing: the cost of building spans and events.
struct Listening;

impl tracing::Subscriber for Listening {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        black_box(event);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn observability(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let none = Policy::none();
    let full_policy = full().build().expect("valid policy");
    let mut group = c.benchmark_group(GROUP);
    group.bench_function("policy_none", |b| {
        b.to_async(&rt)
            .iter(|| none.run(async |attempt| work(attempt.number()).await))
    });
    group.bench_function("rampart_full", |b| {
        b.to_async(&rt)
            .iter(|| full_policy.run(async |attempt| work(attempt.number()).await))
    });
    if cfg!(feature = "tracing") {
        let _listening = tracing::subscriber::set_default(Listening);
        group.bench_function("rampart_full_subscribed", |b| {
            b.to_async(&rt)
                .iter(|| full_policy.run(async |attempt| work(attempt.number()).await))
        });
    }
    if cfg!(feature = "metrics") {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        // Each series is registered on its first use: the recorder is the thread's throughout.
        let _recorder = metrics::set_default_local_recorder(&recorder);
        let recorded = full().name("bench").build().expect("valid policy");
        group.bench_function("rampart_full_prometheus", |b| {
            b.to_async(&rt)
                .iter(|| recorded.run(async |attempt| work(attempt.number()).await))
        });
    }
    group.finish();
}

criterion_group!(benches, observability);
criterion_main!(benches);
