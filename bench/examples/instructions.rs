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
//! Contenders: `floor` (the hand-written loop), `none` (`Policy::none()`), `full` (deadline,
//! attempt timeout, 3 attempts, budget), `breaker` (`full` plus a circuit breaker).

use std::hint::black_box;
use std::time::Duration;

use rampart::{Breaker, Policy};
use rampart_bench::floor::{Limits, retry_loop};

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
    let full = || {
        Policy::builder()
            .max_attempts(LIMITS.max_attempts)
            .deadline(LIMITS.deadline)
            .attempt_timeout(LIMITS.attempt_timeout)
    };
    let policy = match which.as_str() {
        "none" => Policy::none(),
        "breaker" => full()
            .breaker(Breaker::builder().build().expect("valid breaker"))
            .build()
            .expect("valid policy"),
        _ => full().build().expect("valid policy"),
    };
    rt.block_on(async {
        for i in 0..n {
            let out = if which == "floor" {
                retry_loop(LIMITS, async |a| Ok::<_, std::io::Error>(black_box(a)))
                    .await
                    .map_err(|_| ())
            } else {
                policy
                    .run(async |a| Ok::<_, std::io::Error>(black_box(a.number())))
                    .await
                    .map_err(|_| ())
            };
            black_box((i, out.is_ok()));
        }
    });
}
