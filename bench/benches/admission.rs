//! The admitted path of every limiter: one acquire (ready at once) and one release, alone and
//! with two threads sharing the limiter; and one call through a policy, for scale.
//!
//! `cargo bench -p rampart-bench --bench admission`

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::sync::Barrier;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rampart::admit::{Admit, AdmitContext, Feedback, Unlimited};
use rampart::limit::{Aimd, ConcurrencyLimit, CriticalityLimit, Gradient, RateLimit, Throttle};
use rampart::{AttemptOutcome, Criticality, Policy};

/// One admitted attempt: acquire (which must be ready at once) and release with a success.
#[inline]
fn admit_once<A: Admit>(admit: &A, cx: &AdmitContext<'_>) {
    let mut acquire = std::pin::pin!(admit.acquire(cx));
    let permit = match acquire
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(Ok(permit)) => permit,
        Poll::Ready(Err(refusal)) => panic!("refused on the admitted path: {refusal:?}"),
        Poll::Pending => panic!("the admitted path must not wait"),
    };
    admit.release(
        black_box(permit),
        Feedback::new(AttemptOutcome::Ok, Duration::from_micros(50)),
    );
}

/// `iters` admitted attempts on each of two threads at once; the time of the slower thread.
fn contended<A: Admit + Clone>(admit: &A, iters: u64) -> Duration {
    let barrier = Barrier::new(3);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            let admit = admit.clone();
            let barrier = &barrier;
            scope.spawn(move || {
                let cx = AdmitContext::new("bench", Criticality::Critical, rampart::Instant::now());
                barrier.wait();
                for _ in 0..iters {
                    admit_once(&admit, &cx);
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

/// Every limiter, set up so that every attempt of the benchmark is admitted.
struct Limiters {
    concurrency: ConcurrencyLimit,
    rate: RateLimit,
    aimd: Aimd,
    gradient: Gradient,
    criticality: CriticalityLimit,
    throttle: Throttle,
}

impl Limiters {
    fn new() -> Self {
        Limiters {
            concurrency: ConcurrencyLimit::new(1_000),
            // Far more than a thread can take; `now` is fixed, so the burst must cover a run.
            rate: RateLimit::builder(1_000_000_000, Duration::from_secs(1))
                .burst(u32::MAX)
                .build()
                .expect("valid"),
            aimd: Aimd::new(),
            gradient: Gradient::new(),
            criticality: CriticalityLimit::new(1_000).expect("valid"),
            throttle: Throttle::builder().seed(1).build().expect("valid"),
        }
    }
}

fn admitted(c: &mut Criterion) {
    let limiters = Limiters::new();
    let cx = AdmitContext::new("bench", Criticality::Critical, rampart::Instant::now());
    let mut group = c.benchmark_group("admitted");
    group.bench_function("unlimited", |b| b.iter(|| admit_once(&Unlimited, &cx)));
    group.bench_function("concurrency_limit", |b| {
        b.iter(|| admit_once(&limiters.concurrency, &cx))
    });
    group.bench_function("rate_limit", |b| b.iter(|| admit_once(&limiters.rate, &cx)));
    group.bench_function("aimd", |b| b.iter(|| admit_once(&limiters.aimd, &cx)));
    group.bench_function("gradient", |b| {
        b.iter(|| admit_once(&limiters.gradient, &cx))
    });
    group.bench_function("criticality_limit", |b| {
        b.iter(|| admit_once(&limiters.criticality, &cx))
    });
    group.bench_function("throttle", |b| {
        b.iter(|| admit_once(&limiters.throttle, &cx))
    });
    group.finish();
}

fn contended_two_threads(c: &mut Criterion) {
    let limiters = Limiters::new();
    let mut group = c.benchmark_group("admitted_2_threads");
    macro_rules! two_threads {
        ($name:literal, $admit:expr) => {
            group.bench_function(BenchmarkId::from_parameter($name), |b| {
                b.iter_custom(|iters| contended($admit, iters))
            });
        };
    }
    two_threads!("unlimited", &Unlimited);
    two_threads!("concurrency_limit", &limiters.concurrency);
    two_threads!("rate_limit", &limiters.rate);
    two_threads!("aimd", &limiters.aimd);
    two_threads!("gradient", &limiters.gradient);
    two_threads!("criticality_limit", &limiters.criticality);
    two_threads!("throttle", &limiters.throttle);
    group.finish();
}

fn through_a_policy(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let limiters = Limiters::new();
    let plain = Policy::builder().max_attempts(1).build().expect("valid");
    let rate = Policy::builder()
        .max_attempts(1)
        .admit(limiters.rate)
        .build()
        .expect("valid");
    let criticality = Policy::builder()
        .max_attempts(1)
        .admit(limiters.criticality)
        .build()
        .expect("valid");
    let mut group = c.benchmark_group("policy_one_attempt");
    group.bench_function("unlimited", |b| {
        b.to_async(&rt)
            .iter(|| plain.run(async |a| Ok::<_, std::io::Error>(black_box(a.number()))))
    });
    group.bench_function("rate_limit", |b| {
        b.to_async(&rt)
            .iter(|| rate.run(async |a| Ok::<_, std::io::Error>(black_box(a.number()))))
    });
    group.bench_function("criticality_limit", |b| {
        b.to_async(&rt)
            .iter(|| criticality.run(async |a| Ok::<_, std::io::Error>(black_box(a.number()))))
    });
    group.finish();
}

criterion_group!(benches, admitted, contended_two_threads, through_a_policy);
criterion_main!(benches);
