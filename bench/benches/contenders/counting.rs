//! Allocations per call, counted by `allocation-counter`'s global allocator: for the
//! allocation harness (`examples/allocations.rs`) and its test, never for the timed benches
//! (a counting allocator would slow down the contenders that allocate).

use std::hint::black_box;
use std::sync::Barrier;

use tokio::runtime::Runtime;

use super::contenders::{Case, runtime};

/// Allocations and bytes per call, averaged over a run of calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PerCall {
    /// Heap allocations per call.
    pub(crate) allocations: f64,
    /// Bytes allocated per call.
    pub(crate) bytes: f64,
}

/// Calls measured per cell, after as many warm-up calls.
pub(crate) const CALLS: u32 = 1_000;

/// Counts what `calls` calls allocate on this thread, inside one `block_on` (whose own cost,
/// measured on an empty future, is subtracted). The calls' future is boxed before counting
/// starts: `block_on` boxes a large future itself (over 2 KiB in a debug build).
fn count<C: Case>(rt: &Runtime, case: &mut C, calls: u32) -> (u64, u64) {
    rt.block_on(async {
        for _ in 0..calls {
            let _ = black_box(case.call().await);
        }
    });
    let empty = allocation_counter::measure(|| rt.block_on(async {}));
    let mut run = Box::pin(async {
        for _ in 0..calls {
            let _ = black_box(case.call().await);
        }
    });
    let info = allocation_counter::measure(|| rt.block_on(run.as_mut()));
    (
        info.count_total.saturating_sub(empty.count_total),
        info.bytes_total.saturating_sub(empty.bytes_total),
    )
}

/// Allocations per call of `case` on `rt`.
pub(crate) fn per_call<C: Case>(rt: &Runtime, case: &mut C) -> PerCall {
    let (allocations, bytes) = count(rt, case, CALLS);
    PerCall {
        allocations: allocations as f64 / f64::from(CALLS),
        bytes: bytes as f64 / f64::from(CALLS),
    }
}

/// Allocations per call of `case` shared by two threads, each with its own runtime and clone,
/// calling at the same time.
pub(crate) fn per_call_two_threads<C: Case + Clone + Send + 'static>(case: &C) -> PerCall {
    let start = Barrier::new(2);
    let (allocations, bytes) = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let mut case = case.clone();
                let start = &start;
                scope.spawn(move || {
                    let rt = runtime();
                    start.wait();
                    count(&rt, &mut case, CALLS)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a counting thread panicked"))
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    });
    let calls = 2.0 * f64::from(CALLS);
    PerCall {
        allocations: allocations as f64 / calls,
        bytes: bytes as f64 / calls,
    }
}
