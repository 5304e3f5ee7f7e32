//! The edge layers' cost per loopback request: a hyper-util client against a hyper server on
//! 127.0.0.1, plain, plain under a `tokio::time::timeout` (the cost of having any timeout at
//! all), with the outbound layer (default policy: 3 attempts, deadline, attempt timeout,
//! breaker and budget per host), and against a server behind the inbound layer.
//!
//! `in_process` measures the layers alone, against an inner service that answers at once,
//! beside tower's own retry between two timeouts (`tower_retry_timeout`), and the same writing
//! the headers the outbound layer writes (`tower_retry_timeout_stamped`; `_fixed` without
//! the call's deadline, `X-Deadline-Ms` always 10 s); their configuration
//! is in `support/tower_peer.rs`, and `handler_direct` is their inner service alone.
//!
//! `cargo bench -p rampart-http --bench http_edge`

// `criterion_group!` defines an undocumented public function.
#![allow(missing_docs)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rampart_http::{InboundLayer, OutboundLayer, ReplayBody};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

#[path = "support/tower_peer.rs"]
mod tower_peer;

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

/// A hyper HTTP/1 server on a loopback port, serving `service` on every connection.
async fn serve<S>(service: S) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<Full<Bytes>>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    serve_any(service).await
}

async fn serve_any<S, B>(service: S) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.expect("accept");
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

fn http_edge(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (plain_server, inbound_server) = rt.block_on(async {
        let plain = serve(tower::service_fn(hello)).await;
        let inbound = serve_any(InboundLayer::new().layer(tower::service_fn(hello))).await;
        (plain, inbound)
    });
    let plain = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let layered = OutboundLayer::new()
        .layer(Client::builder(TokioExecutor::new()).build_http::<ReplayBody<Full<Bytes>>>());

    let plain_uri = format!("http://{plain_server}/");
    let inbound_uri = format!("http://{inbound_server}/");
    let request = |uri: &str| {
        Request::get(uri)
            .header("x-deadline-ms", "5000")
            .body(Full::<Bytes>::default())
            .expect("valid request")
    };

    let mut group = c.benchmark_group("loopback");
    group.bench_function("plain_hyper_util", |b| {
        b.to_async(&rt).iter(|| async {
            let response = plain.request(request(&plain_uri)).await.expect("response");
            response.into_body().collect().await.expect("body")
        })
    });
    group.bench_function("plain_hyper_util_with_timeout", |b| {
        b.to_async(&rt).iter(|| async {
            let send = plain.request(request(&plain_uri));
            let response = tokio::time::timeout(Duration::from_secs(10), send)
                .await
                .expect("in time")
                .expect("response");
            response.into_body().collect().await.expect("body")
        })
    });
    group.bench_function("outbound_layer", |b| {
        b.to_async(&rt).iter(|| async {
            let response = layered
                .clone()
                .oneshot(request(&plain_uri))
                .await
                .expect("response");
            response.into_body().collect().await.expect("body")
        })
    });
    group.bench_function("inbound_layer_server", |b| {
        b.to_async(&rt).iter(|| async {
            let response = plain
                .request(request(&inbound_uri))
                .await
                .expect("response");
            response.into_body().collect().await.expect("body")
        })
    });
    group.finish();
}

/// The layers alone: an inner service that answers at once, so what is measured is the
/// layer's own work per request (policy, host table, header writing, boxing), which the
/// loopback numbers above hide in their noise.
fn in_process(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let answer = |_: Request<ReplayBody<Full<Bytes>>>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(Full::<Bytes>::default())))
    };
    let direct = tower::service_fn(answer);
    let layered = OutboundLayer::new().layer(tower::service_fn(answer));
    let handler = |_: Request<Full<Bytes>>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(Full::<Bytes>::default())))
    };
    let inbound = InboundLayer::new().layer(tower::service_fn(handler));
    let request = || {
        Request::get("http://127.0.0.1:8080/")
            .header("x-deadline-ms", "5000")
            .body(Full::<Bytes>::default())
            .expect("valid request")
    };

    let mut group = c.benchmark_group("in_process");
    group.bench_function("direct", |b| {
        b.to_async(&rt)
            .iter(|| direct.oneshot(request().map(ReplayBody::new)))
    });
    group.bench_function("outbound_layer", |b| {
        b.to_async(&rt).iter(|| layered.clone().oneshot(request()))
    });
    // One service for every request, as a client kept in a handler's state is: its host is
    // the one it kept, without a lookup in the host table.
    let mut kept = layered.clone();
    group.bench_function("outbound_layer_kept", |b| {
        b.to_async(&rt).iter(|| kept.call(request()))
    });
    // tower's retry between two timeouts, without and with the headers the layer writes
    // (see `support/tower_peer.rs`); `handler_direct` below is their inner service alone.
    let tower_stack = tower_peer::retry_timeout(tower::service_fn(handler));
    group.bench_function("tower_retry_timeout", |b| {
        b.to_async(&rt)
            .iter(|| tower_stack.clone().oneshot(request()))
    });
    let tower_stamped = tower_peer::retry_timeout_stamped(tower::service_fn(handler));
    group.bench_function("tower_retry_timeout_stamped", |b| {
        b.to_async(&rt)
            .iter(|| tower_stamped.clone().oneshot(request()))
    });
    let tower_fixed = tower_peer::retry_timeout_stamped_fixed(tower::service_fn(handler));
    group.bench_function("tower_retry_timeout_stamped_fixed", |b| {
        b.to_async(&rt)
            .iter(|| tower_fixed.clone().oneshot(request()))
    });
    group.bench_function("handler_direct", |b| {
        b.to_async(&rt)
            .iter(|| tower::service_fn(handler).oneshot(request()))
    });
    group.bench_function("inbound_layer", |b| {
        b.to_async(&rt).iter(|| inbound.clone().oneshot(request()))
    });
    group.finish();
}

criterion_group!(benches, http_edge, in_process);
criterion_main!(benches);
