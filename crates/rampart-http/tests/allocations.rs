//! Heap allocations the edge layers add to a request, counted (deterministic, so a test):
//! the same requests through an in-process service, with and without the layer.
//! `BUDGETS.md` (in `bench/`) lists where each one goes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use rampart_http::{InboundLayer, OutboundLayer, ReplayBody};
use tower::Service;
use tower_layer::Layer;

/// The outbound layer's allocations per replayable request (a `GET`) above the inner
/// service's own: the boxed call future (1: rampart's call future cannot be named), the copy
/// of the request head for the attempt (2: the header map's index and entries, made with room
/// for the stamped headers), the deadline header's value (1). The copy is what a retry needs:
/// the inner service consumes the request it is given.
const REPLAYABLE_BUDGET: f64 = 4.0;

/// The same for a request sent once (a `POST`): no copy of the head.
const ONCE_BUDGET: f64 = 2.0;

fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an in-process request completes on its first poll"),
    }
}

fn request<B: Default>() -> Request<B> {
    with(http::Method::GET)
}

fn with<B: Default>(method: http::Method) -> Request<B> {
    Request::builder()
        .method(method)
        .uri("http://127.0.0.1:8080/items")
        .header("x-deadline-ms", "5000")
        .body(B::default())
        .expect("valid request")
}

/// Allocations per request made by `send` over `n` requests built beforehand.
fn per_request<R>(n: u64, make: impl Fn() -> R, mut send: impl FnMut(R)) -> f64 {
    let requests: Vec<R> = (0..n).map(|_| make()).collect();
    let counted = allocation_counter::measure(|| {
        for request in requests {
            send(request);
        }
    });
    counted.count_total as f64 / n as f64
}

#[test]
fn the_outbound_layer_adds_a_handful_of_allocations_per_request() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let answer = |_: Request<ReplayBody<Full<Bytes>>>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(Full::<Bytes>::default())))
    };
    let mut direct = tower::service_fn(answer);
    let mut layered = OutboundLayer::new().layer(tower::service_fn(answer));
    // Warm up: the host's policies are made on its first request.
    ready(layered.call(request())).expect("a response");

    let n = 1_000;
    for (method, budget) in [
        (http::Method::GET, REPLAYABLE_BUDGET),
        (http::Method::POST, ONCE_BUDGET),
    ] {
        let base = per_request(
            n,
            || with::<Full<Bytes>>(method.clone()).map(ReplayBody::new),
            |r| drop(ready(direct.call(r))),
        );
        let layered_per_request = per_request(
            n,
            || with::<Full<Bytes>>(method.clone()),
            |r| drop(ready(layered.call(r))),
        );
        let added = layered_per_request - base;
        println!(
            "outbound {method}: {base} allocations per request without the layer, {layered_per_request} with it (+{added})"
        );
        assert!(
            added <= budget,
            "the outbound layer adds {added} allocations per {method} request; the budget is {budget}"
        );
    }
}

#[test]
fn the_inbound_layer_adds_no_allocation_to_a_request() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let handler = |_: Request<Full<Bytes>>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(Full::<Bytes>::default())))
    };
    let mut direct = tower::service_fn(handler);
    let mut layered = InboundLayer::new()
        .reserve(std::time::Duration::from_millis(5))
        .layer(tower::service_fn(handler));
    let n = 1_000;
    let base = per_request(n, request::<Full<Bytes>>, |r| drop(ready(direct.call(r))));
    let with_layer = per_request(n, request::<Full<Bytes>>, |r| drop(ready(layered.call(r))));
    println!("inbound: {base} allocations per request without the layer, {with_layer} with it");
    assert_eq!(with_layer, base);
}
