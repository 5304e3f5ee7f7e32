//! Calls through `rampart::tower::PolicyService`, for counting instructions with callgrind
//! (times on a shared machine move by ±30 %; instructions do not):
//!
//! ```text
//! cargo build --release -p rampart --features tower --example profile_tower
//! valgrind --tool=callgrind --toggle-collect='profile_tower::measured*' \
//!     target/release/examples/profile_tower layer 20000
//! ```
//!
//! Run it for N and 2N calls and subtract: `(refs(2N) - refs(N)) / N` is the cost of one call.
//! `layer` calls an inner service that answers at once through a `PolicyLayer` with a full
//! policy (total timeout, attempt timeout, 3 attempts, breaker, automatic budget); `direct`
//! calls the same service without the layer.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rampart::tower::PolicyLayer;
use rampart::{Breaker, ManualClock, Policy};
use tower_layer::Layer;
use tower_service::Service;

/// Answers every request at once with the request itself.
#[derive(Clone, Copy)]
struct Echo;

impl Service<u64> for Echo {
    type Response = u64;
    type Error = Infallible;
    type Future = Ready<Result<u64, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: u64) -> Self::Future {
        ready(Ok(request))
    }
}

/// `future`'s output, polled once: every service here answers at once.
fn once<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the inner service answers at once"),
    }
}

#[inline(never)]
fn measured_layer<S: Service<u64, Response = u64>>(service: &mut S, calls: u64) -> u64 {
    let mut sum = 0;
    for n in 0..calls {
        if let Ok(answer) = once(service.call(std::hint::black_box(n))) {
            sum += answer;
        }
    }
    sum
}

#[inline(never)]
fn measured_direct(service: &mut Echo, calls: u64) -> u64 {
    measured_layer(service, calls)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "layer".to_owned());
    let calls: u64 = args.next().map_or(Ok(20_000), |n| n.parse())?;
    // A manual clock: the policy's timers need no runtime, so the call is polled by hand.
    let policy = Policy::builder()
        .clock(ManualClock::new())
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .breaker(Breaker::builder().consecutive_failures(5).build()?)
        .build()?;
    let sum = match which.as_str() {
        "layer" => measured_layer(&mut PolicyLayer::new(policy).layer(Echo), calls),
        "direct" => measured_direct(&mut Echo, calls),
        other => return Err(format!("unknown case {other:?}: layer or direct").into()),
    };
    println!("{which}: {calls} calls, checksum {sum}");
    Ok(())
}
