//! Runs N successful calls of one contender, for instruction counting under callgrind, which
//! is repeatable on a noisy machine where wall-clock timings are not:
//!
//! ```text
//! cargo build --release -p rampart-bench --example instructions
//! for n in 1000 101000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
//!     target/release/examples/instructions full $n 2>&1 | grep refs
//! done   # (refs(101000) - refs(1000)) / 100000 = instructions per call
//! ```
//!
//! Contenders, each beside its floor: `direct` (the callback alone) and `none`
//! (`Policy::none()`); `floor` (the hand-written loop: deadline, attempt timeout, 3 attempts)
//! and `retry-only` (a policy doing that work: no breaker, no budget); `floor2` (the floor plus
//! a hand-written breaker and budget) and `full` (deadline, attempt timeout, 3 attempts,
//! a breaker of five failures in a row as `floor2`'s, budget); also `budget` (`full` without
//! the breaker) and `breaker` (`full` with rampart's default breaker, a ratio window). `bench/scripts/instructions.sh`
//! counts these and the peers of `BENCHMARKS.md` in one run.

use std::hint::black_box;
use std::time::Duration;

use rampart::{Breaker, Policy};
use rampart_bench::floor::{Limits, retry_loop};
use rampart_bench::floor2::{Guards, guarded_loop, same_breaker};

const LIMITS: Limits = Limits {
    max_attempts: 3,
    deadline: Duration::from_secs(2),
    attempt_timeout: Duration::from_millis(500),
    base: Duration::from_millis(100),
};

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "full".to_owned());
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
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
    let policy = match which.as_str() {
        "none" => Policy::none(),
        "retry-only" => bounded().no_budget().build().expect("valid policy"),
        "budget" => bounded().build().expect("valid policy"),
        "full" => bounded()
            .breaker(same_breaker())
            .build()
            .expect("valid policy"),
        // rampart's default breaker: a ratio window.
        "breaker" => bounded()
            .breaker(Breaker::builder().build().expect("valid breaker"))
            .build()
            .expect("valid policy"),
        "direct" | "floor" | "floor2" => Policy::none(), // not used
        other => {
            eprintln!("unknown contender {other}");
            std::process::exit(2);
        }
    };
    let guards = Guards::new();
    rt.block_on(async {
        for i in 0..n {
            let out = match which.as_str() {
                "direct" => Ok::<_, std::io::Error>(black_box(1u32)).map_err(|_| ()),
                "floor" => retry_loop(LIMITS, async |a| Ok::<_, std::io::Error>(black_box(a)))
                    .await
                    .map_err(|_| ()),
                "floor2" => guarded_loop(LIMITS, &guards, async |a| {
                    Ok::<_, std::io::Error>(black_box(a))
                })
                .await
                .map_err(|_| ()),
                _ => policy
                    .run(async |a| Ok::<_, std::io::Error>(black_box(a.number())))
                    .await
                    .map_err(|_| ()),
            };
            black_box((i, out.is_ok()));
        }
    });
}
