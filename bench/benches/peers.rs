//! rampart against its peers (tower, tower-resilience, seatbelt, backon, failsafe) and the
//! hand-written floor, on the same workloads, in one run: see `contenders/mod.rs` for the
//! workloads and `BENCHMARKS.md` for the table and how to regenerate it.
//!
//! `cargo bench -p rampart-bench --bench peers -- --warm-up-time 1 --measurement-time 2`

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

#[path = "contenders/mod.rs"]
#[allow(dead_code)] // the table's titles are for the allocation harness
mod contenders;

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use contenders::{Case, Visitor, Workload, runtime, visit_all};
use criterion::{Criterion, criterion_group, criterion_main};
use tokio::runtime::Runtime;

struct Bench<'a> {
    criterion: &'a mut Criterion,
    rt: &'a Runtime,
}

impl Visitor for Bench<'_> {
    fn case<C: Case>(&mut self, workload: Workload, contender: &'static str, mut case: C) {
        let rt = self.rt;
        let mut group = self.criterion.benchmark_group(workload.id());
        group.bench_function(contender, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let _ = black_box(case.call().await);
                    }
                    start.elapsed()
                })
            });
        });
        group.finish();
    }

    fn shared<C: Case + Clone + Send + 'static>(
        &mut self,
        workload: Workload,
        contender: &'static str,
        case: C,
    ) {
        let mut group = self.criterion.benchmark_group(workload.id());
        group.bench_function(contender, |b| {
            b.iter_custom(|iters| two_threads(&case, iters));
        });
        group.finish();
    }

    fn missing(&mut self, _: Workload, _: &'static str, _: &'static str) {}
}

/// Two threads, each with its own current-thread runtime and a clone of `case`, make `iters`
/// calls each, starting together. Returns half the wall time of the slower one, so that
/// criterion's time per iteration is the time per call of both threads together.
fn two_threads<C: Case + Clone + Send + 'static>(case: &C, iters: u64) -> Duration {
    let start = Barrier::new(2);
    let elapsed = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let mut case = case.clone();
                let start = &start;
                scope.spawn(move || {
                    let rt = runtime();
                    rt.block_on(async {
                        let _ = black_box(case.call().await);
                        start.wait();
                        let began = Instant::now();
                        for _ in 0..iters {
                            let _ = black_box(case.call().await);
                        }
                        began.elapsed()
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a benchmark thread panicked"))
            .max()
            .unwrap_or_default()
    });
    elapsed / 2
}

fn peers(criterion: &mut Criterion) {
    let rt = runtime();
    visit_all(&rt, &mut Bench { criterion, rt: &rt });
}

criterion_group!(benches, peers);
criterion_main!(benches);
