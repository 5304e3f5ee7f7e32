//! In-process requests through the outbound layer, for counting instructions with callgrind
//! (times on a shared machine move by ±30 %; instructions do not):
//!
//! ```text
//! cargo build --release -p rampart-http --example profile_outbound
//! valgrind --tool=callgrind --toggle-collect='profile_outbound::measured*' \
//!     target/release/examples/profile_outbound outbound 20000
//! ```
//!
//! Run it for N and 2N requests and subtract: `(refs(2N) - refs(N)) / N` is the cost of one
//! request; `direct` is the same request to the inner service without the layer.
//! `outbound` and `direct` send a request without headers; `outbound-headers` and
//! `direct-headers` one with a caller's deadline and an `accept` header; `outbound-clone` the
//! same through a clone of the service per request (the host looked up in the table each
//! time, where `outbound` reuses the host its service kept); `outbound-varied` the same as
//! `outbound-headers` with a caller's deadline that changes from one request to the next
//! (each deadline value written is then formatted anew: count it against
//! `direct-headers`). `outbound-headers` takes a third
//! argument, the layer's configuration, to show what each part of the policy costs: `default`,
//! `no-breaker` (the work tower-stamped does: retries under a budget, no breaker),
//! `no-breaker-budget`, `once` (one attempt: no copy kept for a retry), `once-no-breaker-budget`,
//! or `no-deadline` (no deadline, no attempt timeout).
//!
//! `tower` is tower's own answer to the same request, as a careful engineer following tower's
//! docs would stack it: `retry` (3 attempts, 5xx and errors retried, a `TpsBudget` with
//! tower's defaults, 100 ms backoff, the request cloned for each attempt) between two
//! `timeout`s (30 s around the call, 10 s per attempt: the layer's defaults). It does less
//! than the layer: no breaker, no deadline or criticality header, no host table, no caller's
//! deadline read. `tower-stamped` is the same stack writing the headers rampart writes, the
//! way tower's users write them: the call's deadline put in the request's extensions above
//! the retry, and a `map_request` below it writing the time left (at most the attempt's 10 s)
//! in `X-Deadline-Ms` and the criticality in `X-Criticality`. `tower-stamped-fixed` writes the
//! same headers without carrying the deadline (`X-Deadline-Ms` always the attempt's 10 s).
//! `direct-plain` is their inner service called directly (the body not wrapped in a
//! `ReplayBody`).
//!
//! `time` measures wall-clock time instead, robustly on a shared machine: it runs the
//! contenders in turn for `rounds` rounds of `n` requests each and keeps each one's fastest
//! round (other load only ever slows a round down):
//!
//! ```text
//! cargo run --release -p rampart-http --example profile_outbound -- time 20000 30
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use rampart_http::{OutboundLayer, ReplayBody};
use tower::Service;
use tower_layer::Layer;

#[path = "../benches/support/tower_peer.rs"]
mod tower_peer;

fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the inner service answers at once"),
    }
}

fn request<B: Default>() -> Request<B> {
    Request::get("http://127.0.0.1:8080/items")
        .body(B::default())
        .unwrap_or_else(|e| unreachable!("a valid request: {e}"))
}

/// The same request with a caller's deadline and an `accept` header, as a client in a
/// handler sends it.
fn with_headers<B: Default>() -> Request<B> {
    Request::get("http://127.0.0.1:8080/items")
        .header("x-deadline-ms", http::HeaderValue::from_static("5000"))
        .header("accept", http::HeaderValue::from_static("application/json"))
        .body(B::default())
        .unwrap_or_else(|e| unreachable!("a valid request: {e}"))
}

fn answer(
    _: Request<ReplayBody<Full<Bytes>>>,
) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>> {
    std::future::ready(Ok(Response::new(Full::default())))
}

#[inline(never)]
fn measured_direct(n: u64) {
    let mut direct = tower::service_fn(answer);
    for _ in 0..n {
        let _ = ready(direct.call(request::<Full<Bytes>>().map(ReplayBody::new)));
    }
}

#[inline(never)]
fn measured_outbound(n: u64) {
    let mut layered = OutboundLayer::new().layer(tower::service_fn(answer));
    for _ in 0..n {
        let _ = ready(layered.call(request::<Full<Bytes>>()));
    }
}

#[inline(never)]
fn measured_direct_headers(n: u64) {
    let mut direct = tower::service_fn(answer);
    for _ in 0..n {
        let _ = ready(direct.call(with_headers::<Full<Bytes>>().map(ReplayBody::new)));
    }
}

/// Callers' deadlines that differ from one request to the next (`outbound-varied`).
const VARIED: [&str; 5] = ["5000", "4000", "3000", "2000", "1000"];

/// A request like [`with_headers`]'s whose caller's deadline is `VARIED[i % 5]`.
fn with_varied<B: Default>(i: u64) -> Request<B> {
    let deadline = VARIED[(i % VARIED.len() as u64) as usize];
    Request::get("http://127.0.0.1:8080/items")
        .header("x-deadline-ms", http::HeaderValue::from_static(deadline))
        .header("accept", http::HeaderValue::from_static("application/json"))
        .body(B::default())
        .unwrap_or_else(|e| unreachable!("a valid request: {e}"))
}

/// Requests whose deadline header differs from the last one's, so that no value written is
/// the one its thread wrote last (the value is formatted anew for every request).
#[inline(never)]
fn measured_outbound_varied(n: u64) {
    let mut layered = OutboundLayer::new().layer(tower::service_fn(answer));
    for i in 0..n {
        let _ = ready(layered.call(with_varied::<Full<Bytes>>(i)));
    }
}

/// The layer as `variant` configures it (see the module docs).
fn layer(variant: &str) -> OutboundLayer {
    let builder = OutboundLayer::builder();
    let builder = match variant {
        "no-breaker" => builder.no_breaker(),
        "no-breaker-budget" => builder.no_breaker().no_budget(),
        "once" => builder.max_attempts(1),
        "once-no-breaker-budget" => builder.max_attempts(1).no_breaker().no_budget(),
        "no-deadline" => builder.policy(|p| p.no_total_timeout().no_attempt_timeout()),
        _ => builder,
    };
    builder
        .build()
        .unwrap_or_else(|e| unreachable!("a valid layer: {e}"))
}

#[inline(never)]
fn measured_outbound_headers(n: u64, variant: &str) {
    let mut layered = layer(variant).layer(tower::service_fn(answer));
    for _ in 0..n {
        let _ = ready(layered.call(with_headers::<Full<Bytes>>()));
    }
}

/// A clone of the service per request, as `oneshot` on a shared client does: the host is
/// looked up in the table each time.
#[inline(never)]
fn measured_outbound_clone(n: u64) {
    let layered = OutboundLayer::new().layer(tower::service_fn(answer));
    for _ in 0..n {
        let _ = ready(layered.clone().call(with_headers::<Full<Bytes>>()));
    }
}

fn answer_plain(
    _: Request<Full<Bytes>>,
) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>> {
    std::future::ready(Ok(Response::new(Full::default())))
}

/// `n` requests through a tower stack, made ready before each.
fn through<S>(mut stack: S, n: u64)
where
    S: Service<Request<Full<Bytes>>>,
{
    for _ in 0..n {
        let _ = ready(std::future::poll_fn(|cx| stack.poll_ready(cx)));
        let _ = ready(stack.call(with_headers::<Full<Bytes>>()));
    }
}

/// The tower stacks' inner service alone, made ready before each request as they are.
#[inline(never)]
fn measured_direct_plain(n: u64) {
    through(tower::service_fn(answer_plain), n);
}

#[inline(never)]
fn measured_tower(n: u64) {
    through(
        tower_peer::retry_timeout(tower::service_fn(answer_plain)),
        n,
    );
}

/// tower's stack with the headers rampart writes (see the module docs).
#[inline(never)]
fn measured_tower_stamped(n: u64) {
    through(
        tower_peer::retry_timeout_stamped(tower::service_fn(answer_plain)),
        n,
    );
}

/// The same headers without the call's deadline (see the module docs).
#[inline(never)]
fn measured_tower_stamped_fixed(n: u64) {
    through(
        tower_peer::retry_timeout_stamped_fixed(tower::service_fn(answer_plain)),
        n,
    );
}

/// A mode's name and its loop of `n` requests.
type Contender = (&'static str, fn(u64));

/// Each contender's fastest round of `n` requests, in nanoseconds per request, over
/// `rounds` rounds run in turn; and what the layer adds to the direct request.
fn time(n: u64, rounds: u32) {
    let contenders: [Contender; 9] = [
        ("direct", measured_direct),
        ("outbound", measured_outbound),
        ("direct-headers", measured_direct_headers),
        ("outbound-headers", |n| {
            measured_outbound_headers(n, "default")
        }),
        ("outbound-clone", measured_outbound_clone),
        ("direct-plain", measured_direct_plain),
        ("tower", measured_tower),
        ("tower-stamped", measured_tower_stamped),
        ("tower-stamped-fixed", measured_tower_stamped_fixed),
    ];
    let mut best = [f64::INFINITY; 9];
    for _ in 0..rounds {
        for (best, (_, run)) in best.iter_mut().zip(&contenders) {
            let start = std::time::Instant::now();
            run(n);
            let per_request = start.elapsed().as_nanos() as f64 / n as f64;
            *best = best.min(per_request);
        }
    }
    println!("fastest of {rounds} rounds of {n} requests, ns per request:");
    for ((name, _), best) in contenders.iter().zip(best) {
        println!("  {name:<17} {best:8.1}");
    }
    println!(
        "the layer's own: {:.1} ns without headers, {:.1} with, {:.1} through a clone",
        best[1] - best[0],
        best[3] - best[2],
        best[4] - best[2]
    );
    println!("{}", tower_peer::CONFIGURATION);
    println!(
        "tower's retry and timeouts, their own: {:.1} ns; with rampart's headers written: {:.1} ns; \
         the same with a fixed X-Deadline-Ms: {:.1} ns",
        best[6] - best[5],
        best[7] - best[5],
        best[8] - best[5]
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "outbound".to_owned());
    let n = args.next().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    else {
        eprintln!("no runtime");
        return;
    };
    let _context = rt.enter();
    match which.as_str() {
        "time" => time(n, args.next().and_then(|r| r.parse().ok()).unwrap_or(30)),
        "direct" => measured_direct(n),
        "direct-headers" => measured_direct_headers(n),
        "outbound-headers" => measured_outbound_headers(n, &args.next().unwrap_or_default()),
        "outbound-clone" => measured_outbound_clone(n),
        "outbound-varied" => measured_outbound_varied(n),
        "direct-plain" => measured_direct_plain(n),
        "tower" => measured_tower(n),
        "tower-stamped" => measured_tower_stamped(n),
        "tower-stamped-fixed" => measured_tower_stamped_fixed(n),
        _ => measured_outbound(n),
    }
}
