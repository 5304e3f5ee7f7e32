//! Two services on loopback, as a team would run them: a "prices" backend behind the inbound
//! layer, flaky on purpose, serving HTTP (axum) and gRPC (tonic, on a port of its own), and an
//! axum "shop" frontend calling it on four routes, each the way a service calls a dependency
//! with rampart:
//!
//! - `/quote/{sku}` through rampart-http's reqwest `Client` (request ids 1, 5, 9, ...);
//! - `/quote-hedged/{sku}` through hyper-util's client under the same `OutboundLayer`, each
//!   request marked `Hedged`: the layer hedges only the marked requests (`hedge_marked`, a
//!   second leg after 10 ms), on the host's one entry, breaker and retry budget (ids 2, 6,
//!   10, ...);
//! - `/quote-plain/{sku}` through reqwest's own client under a plain `Policy`, whose callback
//!   writes each attempt's deadline, criticality and retry mark with `outbound::stamp`, as a
//!   service using any other client would (ids 3, 7, 11, ...);
//! - `/quote-grpc/{sku}` over gRPC, through tonic's own channel under the same layer
//!   (`OutboundLayer::grpc`), the read method named repeatable once on the channel, and the
//!   messages in a codec written by hand (`support/grpc.rs`: no protoc) (ids 4, 8, 12, ...).
//!
//! Then a bounded load loop against the frontend prints, per route, what its callers saw (p50,
//! p99, failures by status) beside what rampart decided: the stop reason of every call, from
//! rampart's own `CallEnded` events and from the call's report (the `CallReport` a response
//! carries, or the plain policy's `try_run`; a gRPC response carries none, so that route's
//! stop reasons are the events'); and, for every route together, rampart's
//! metrics: the `rampart.calls` counter by its labels, and `rampart.hedges`. It checks that
//! they agree: request by request, a caller saw a failure exactly when rampart ended its one
//! call (hedged or not: one `CallEnded`, however many legs) with a stop reason other than
//! `succeeded`; in all, the `rampart.calls` that did not succeed are the callers' failures,
//! and all of them are the requests. The first two routes share their series (`policy` is the
//! layer's name, `server.address` the backend): rampart's metrics are per dependency, and a
//! route's share is read from the events; the gRPC route's `server.address` is the backend's
//! gRPC port, a host entry of its own; the plain policy's series are its own
//! (`prices-plain`).
//!
//! ```sh
//! cargo run -p rampart-http --features reqwest,axum,metrics,tonic --example two_services
//! cargo run -p rampart-http --features reqwest,axum,metrics,tonic --example two_services -- 2000 32 7
//! ```
//!
//! (requests, concurrency, seed). `tests/two_services.rs` runs the same code with a small
//! request count in CI and asserts the agreement; timings, and how many hedges fire, are
//! printed, never asserted. The backend is in `two_services/backend.rs`; what a run saw (a
//! row per request, the counters read back) and the printout are in
//! `two_services/summary.rs`.
//!
//! The metrics are read from a `metrics-util` `DebuggingRecorder`. A service installs its
//! exporter once, for the whole process (`metrics::set_global_recorder`, or the exporter's
//! own `install`), before its first call; here the recorder is this thread's for the run
//! (`metrics::set_default_local_recorder`): the runtime is current-thread, so every task of
//! both services and of the load loop runs on it, and each run (each test) counts its own.
//!
//! The backend's faults come from a seeded generator keyed by the request id and the attempt
//! (the backend's count of that id's requests), so a given id meets the same faults on every
//! run: per attempt, 30% answer `503`, 10% hang past the frontend's attempt timeout, the rest
//! answer within a few milliseconds. Which leg of a hedged call meets which fault depends on
//! which reaches the backend first.
//!
//! Expect `budget_exhausted` among the stop reasons past a hundred requests or so: a 40%
//! fault rate needs a retry for nearly every other call, and the host's retry budget (25% of
//! the successes on a layer that hedges, a floor of 3 a second), which the hedges spend too,
//! funds far fewer; the plain policy's own budget (rampart's defaults, 20%) as well. That
//! refusal is rampart keeping a failing dependency's load near 1.25x instead of 3x; each one
//! is a caller's failure (the backend's last answer), counted on every side.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{Extensions, HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{self, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use metrics_util::debugging::DebuggingRecorder;
use rampart::backoff::Backoff;
use rampart::breaker::Breaker;
use rampart::event::Event;
use rampart::hedge::Hedge;
use rampart::{Policy, StopReason};
use rampart_http::header::Names;
use rampart_http::outbound::stamp;
use rampart_http::reqwest::Client;
use rampart_http::{
    CallReport, ClientError, GrpcChannel, Hedged, HttpClassifier, InboundLayer, Outbound,
    OutboundLayer, Problem, ReplayBody,
};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tower::ServiceExt;
use tower_layer::Layer;

#[path = "two_services/backend.rs"]
mod backend;
#[path = "support/grpc.rs"]
mod grpc;
#[path = "two_services/summary.rs"]
mod summary;

use grpc::Utf8;

use backend::{Prices, price, serve_grpc};
use summary::counters;
pub(crate) use summary::{Row, Summary};

/// The header that carries a request's id from the load loop through both services (gRPC
/// metadata is headers too).
const REQUEST_ID: &str = "x-request-id";

/// The backend's gRPC method for a price.
const GET_PRICE: &str = "/demo.Prices/Get";

/// What the load loop asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Requests sent to the frontend, in all.
    pub(crate) requests: u64,
    /// Requests in flight at once.
    pub(crate) concurrency: u64,
    /// The seed of the backend's faults.
    pub(crate) seed: u64,
}

/// The frontend's four routes to the backend: three through one outbound layer, one through a
/// plain policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/quote/{sku}`: the reqwest `Client`.
    Reqwest,
    /// `/quote-hedged/{sku}`: hyper-util's client under the layer, every request `Hedged`.
    Hedged,
    /// `/quote-plain/{sku}`: reqwest's own client under a plain `Policy`, each attempt
    /// stamped by the callback (`outbound::stamp`).
    Plain,
    /// `/quote-grpc/{sku}`: tonic's channel under the layer (`OutboundLayer::grpc`).
    Grpc,
}

impl Route {
    pub(crate) const ALL: [Route; 4] = [Route::Reqwest, Route::Hedged, Route::Plain, Route::Grpc];

    /// The route of request `id`, the same on every run: ids 1, 5, 9, ... to the first, 2, 6,
    /// 10, ... to the second, 3, 7, 11, ... to the third, 4, 8, 12, ... to the fourth.
    pub(crate) fn of(id: u64) -> Route {
        match id % 4 {
            1 => Route::Reqwest,
            2 => Route::Hedged,
            3 => Route::Plain,
            _ => Route::Grpc,
        }
    }

    fn path(self) -> &'static str {
        match self {
            Route::Reqwest => "/quote",
            Route::Hedged => "/quote-hedged",
            Route::Plain => "/quote-plain",
            Route::Grpc => "/quote-grpc",
        }
    }

    fn client(self) -> &'static str {
        match self {
            Route::Reqwest => "the reqwest Client",
            Route::Hedged => "hyper-util under the OutboundLayer, Hedged",
            Route::Plain => "reqwest's own client under a plain Policy, stamped",
            Route::Grpc => "tonic's channel under the OutboundLayer, repeatable",
        }
    }
}

// --- the frontend --------------------------------------------------------------------------

tokio::task_local! {
    /// The id of the request a frontend handler serves, for rampart's listener: the call runs
    /// in the handler's task, so its events are emitted there.
    static SERVING: u64;
}

/// What the frontend records per request id.
#[derive(Clone, Default)]
struct Record {
    /// rampart's `CallEnded` stop reasons.
    rampart: Arc<Mutex<HashMap<u64, Vec<StopReason>>>>,
    /// The stop reason read from the call's report.
    reports: Arc<Mutex<HashMap<u64, StopReason>>>,
}

impl Record {
    /// Keeps the stop reason of request `id`'s call, as its report said it.
    fn stop(&self, id: u64, stop: StopReason) {
        lock(&self.reports).insert(id, stop);
    }

    /// Keeps the stop reason of the report of the outbound call that gave `outcome`, if it
    /// has one: a response carries it in its extensions (read by `extensions`, the response
    /// type's own), an error that ended on a retryable status in itself; the other errors
    /// (timeouts, refusals, transport) say their reason themselves.
    fn report<R, E>(
        &self,
        id: u64,
        outcome: &Result<R, ClientError<E>>,
        extensions: fn(&R) -> &Extensions,
    ) {
        let report = match outcome {
            Ok(response) => extensions(response).get::<CallReport>(),
            Err(error) => error.report(),
        };
        if let Some(report) = report {
            self.stop(id, report.stop());
        }
    }
}

/// hyper-util's pooled client under the outbound layer: the hedged route's.
type HyperClient = Outbound<legacy::Client<HttpConnector, ReplayBody<Full<Bytes>>>>;

/// tonic's client over its own channel under the outbound layer: the gRPC route's.
type GrpcClient = tonic::client::Grpc<GrpcChannel<Channel>>;

#[derive(Clone)]
struct Shop {
    /// The reqwest client, made from the outbound layer.
    prices: Client,
    /// reqwest's own client, with no policy of its own, and the plain policy the third route
    /// runs it under.
    raw: reqwest::Client,
    plain: Policy<HttpClassifier>,
    /// hyper-util's client under the same layer: services made from one layer share its host
    /// table, so both routes call the backend through one host entry.
    hyper: HyperClient,
    /// tonic's client, its channel under the same layer, to the backend's gRPC port.
    grpc: GrpcClient,
    backend: SocketAddr,
    record: Record,
}

impl Shop {
    fn price_url(&self, sku: u32) -> String {
        format!("http://{}/prices/{sku}", self.backend)
    }
}

/// `/quote/{sku}`: the price through the reqwest `Client`.
async fn quote(State(shop): State<Shop>, Path(sku): Path<u32>, headers: HeaderMap) -> Response {
    let id = request_id(&headers);
    let call = shop
        .prices
        .get(shop.price_url(sku))
        .header(REQUEST_ID, id)
        .send();
    let outcome = SERVING.scope(id, call).await;
    // The report is in every response of the client.
    shop.record
        .report(id, &outcome, reqwest::Response::extensions);
    match outcome {
        Ok(response) => match response.text().await {
            Ok(price) => price.into_response(),
            Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
        },
        // 504 for a timeout, 503 for a refusal, 502 for a 503 that outlived its retries: a
        // problem document, as `ClientError` answers.
        Err(error) => IntoResponse::into_response(error),
    }
}

/// `/quote-hedged/{sku}`: the same call through hyper-util's client under the layer, marked
/// `Hedged`, so that it runs under the host's hedging policy: a second leg after 10 ms if the
/// first has not answered. Its retries and hedges spend the budget `/quote` spends, and its
/// failures count in the same breaker; it ends with one `CallEnded` however many legs ran.
async fn quote_hedged(
    State(shop): State<Shop>,
    Path(sku): Path<u32>,
    headers: HeaderMap,
) -> Response {
    let id = request_id(&headers);
    let mut request = Request::get(shop.price_url(sku))
        .header(REQUEST_ID, id)
        .body(Full::default())
        .expect("a valid request");
    request.extensions_mut().insert(Hedged);
    // In the same task-local scope as `/quote`'s call: the listener finds the id there.
    let outcome = SERVING.scope(id, shop.hyper.oneshot(request)).await;
    // The outbound layer puts the report where the reqwest client does, but for a success
    // of the first attempt (whose report would say only that: the layer's hot path spares
    // the allocation).
    shop.record.report(id, &outcome, http::Response::extensions);
    match outcome {
        Ok(response) => match response.into_body().collect().await {
            Ok(price) => price.to_bytes().into_response(),
            Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
        },
        Err(error) => IntoResponse::into_response(error),
    }
}

/// `/quote-plain/{sku}`: the same call through reqwest's own client under a plain `Policy`,
/// as a service that uses some other client would write it. The callback writes each
/// attempt's deadline, criticality and retry mark itself (`outbound::stamp`); the policy
/// classifies the response as the layer does (`HttpClassifier`: a `503` is retried), and reads
/// the caller's deadline from the ambient context the inbound layer set. `try_run` gives the
/// call's report. What rampart decided answers as a problem document (`Problem::from_error`:
/// `504` for a timeout, `503` for a refusal); a retryable status the call ended on answers
/// `502`, the dependency's own failure.
async fn quote_plain(
    State(shop): State<Shop>,
    Path(sku): Path<u32>,
    headers: HeaderMap,
) -> Response {
    let id = request_id(&headers);
    let (url, names) = (shop.price_url(sku), Names::default());
    let call = shop.plain.call().try_run(async |attempt| {
        let mut headers = HeaderMap::new();
        stamp(&mut headers, &names, attempt);
        shop.raw
            .get(&url)
            .headers(headers)
            .header(REQUEST_ID, id)
            .send()
            .await
    });
    let Ok(result) = SERVING.scope(id, call).await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    shop.record.stop(id, result.stop());
    let stop = result.stop();
    match result.into_result() {
        Ok(response) if stop == StopReason::Succeeded => match response.text().await {
            Ok(price) => price.into_response(),
            Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
        },
        Ok(_) => StatusCode::BAD_GATEWAY.into_response(),
        Err(error) => Problem::from_error(&error).into_response(),
    }
}

/// `/quote-grpc/{sku}`: the price over gRPC, through tonic's own channel under the same
/// outbound layer. The layer retries the backend's `UNAVAILABLE` (the method was named
/// repeatable on the channel) and writes the caller's deadline as `grpc-timeout`; its own
/// decisions reach the handler as a `tonic::Status` (`DEADLINE_EXCEEDED` for a timeout,
/// `UNAVAILABLE` for a refusal), as does a backend's `UNAVAILABLE` that outlived its retries.
/// A gRPC response carries no `CallReport`: this route's stop reasons are the events'.
async fn quote_grpc(
    State(shop): State<Shop>,
    Path(sku): Path<u32>,
    headers: HeaderMap,
) -> Response {
    let id = request_id(&headers);
    let mut client = shop.grpc.clone();
    let mut request = tonic::Request::new(sku.to_string());
    let value = id.to_string().parse().expect("digits are ASCII");
    request.metadata_mut().insert(REQUEST_ID, value);
    let call = async {
        client
            .ready()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let path = PathAndQuery::from_static(GET_PRICE);
        client.unary::<String, String, _>(request, path, Utf8).await
    };
    match SERVING.scope(id, call).await {
        Ok(price) => price.into_inner().into_response(),
        Err(status) => {
            let code = match status.code() {
                Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
                Code::Unavailable | Code::ResourceExhausted => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_GATEWAY,
            };
            (code, status.message().to_owned()).into_response()
        }
    }
}

fn request_id(headers: &HeaderMap) -> u64 {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The frontend's outbound layer: 40 ms per attempt, three attempts (legs of a hedged call
/// included), a breaker that tolerates a bad streak, a fail-on-status switch so that `?`
/// stops on a `503` that outlived its retries, a hedge for the requests marked `Hedged`, and
/// a listener recording every call's stop reason under its request id (the listener is on
/// each of the host's policies, the hedging one included).
fn outbound(record: &Record) -> OutboundLayer {
    let ended = Arc::clone(&record.rampart);
    OutboundLayer::builder()
        .name("prices")
        .breaker_per_host(Breaker::builder().consecutive_failures(20))
        .fail_on_retryable_status(true)
        // The backend answers in 0 to 3 ms when it answers: a leg still out at 10 ms has most
        // likely met a hang, which the attempt timeout would end only at 40 ms.
        .hedge_marked(Hedge::fixed(Duration::from_millis(10)))
        .policy(move |p| {
            let ended = Arc::clone(&ended);
            p.attempt_timeout(Duration::from_millis(40))
                .backoff(Backoff::exponential(Duration::from_millis(2)))
                .listener(move |event| {
                    if let Event::CallEnded { stop, .. } = event {
                        let id = SERVING.try_with(|id| *id).unwrap_or(0);
                        lock(&ended).entry(id).or_default().push(*stop);
                    }
                })
        })
        .build()
        .expect("valid outbound layer")
}

/// The third route's plain policy, with the layer's per-attempt settings: 40 ms per attempt,
/// three attempts, its own breaker and (automatic) retry budget, the caller's deadline read
/// from the ambient context, and the same listener.
fn plain(record: &Record) -> Policy<HttpClassifier> {
    let ended = Arc::clone(&record.rampart);
    Policy::builder()
        .name("prices-plain")
        .classifier(HttpClassifier)
        .max_attempts(3)
        .attempt_timeout(Duration::from_millis(40))
        .backoff(Backoff::exponential(Duration::from_millis(2)))
        .breaker(
            Breaker::builder()
                .consecutive_failures(20)
                .build()
                .expect("valid breaker"),
        )
        .use_ambient_deadline(true)
        .listener(move |event| {
            if let Event::CallEnded { stop, .. } = event {
                let id = SERVING.try_with(|id| *id).unwrap_or(0);
                lock(&ended).entry(id).or_default().push(*stop);
            }
        })
        .build()
        .expect("valid policy")
}

// --- running it ----------------------------------------------------------------------------

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Starts both services on random loopback ports, sends `load` to the frontend, and returns
/// what every side saw. Each request gives the frontend 250 ms (`X-Deadline-Ms`).
pub(crate) async fn run(load: Load) -> Summary {
    // Before the first call: a series is registered with the recorder current at its first
    // use, and keeps recording there.
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let prices = Prices::new(load.seed);
    let backend = serve(
        Router::new()
            .route("/prices/{sku}", get(price))
            .with_state(prices.clone())
            .layer(InboundLayer::new()),
    )
    .await;
    let origin = format!("http://{}", serve_grpc(prices.clone()).await);
    let record = Record::default();
    let layer = outbound(&record);
    let channel = Endpoint::from_shared(origin.clone())
        .expect("a valid origin")
        .connect_lazy();
    let shop = Shop {
        prices: Client::new(&layer).expect("a reqwest client"),
        hyper: layer.layer(legacy::Client::builder(TokioExecutor::new()).build_http()),
        grpc: tonic::client::Grpc::new(layer.grpc(&origin, channel).repeatable(GET_PRICE)),
        raw: reqwest::Client::new(),
        plain: plain(&record),
        backend,
        record: record.clone(),
    };
    let frontend = serve(
        Router::new()
            .route("/quote/{sku}", get(quote))
            .route("/quote-hedged/{sku}", get(quote_hedged))
            .route("/quote-plain/{sku}", get(quote_plain))
            .route("/quote-grpc/{sku}", get(quote_grpc))
            .with_state(shop)
            .layer(InboundLayer::new()),
    )
    .await;

    let mut rows = load_loop(frontend, load).await;
    let mut ended = std::mem::take(&mut *lock(&record.rampart));
    let reports = std::mem::take(&mut *lock(&record.reports));
    for row in &mut rows {
        row.rampart = ended.remove(&row.id).unwrap_or_default();
        row.report = reports.get(&row.id).copied();
    }
    // Every call ended before its response left the frontend: the counts are final.
    let counters = counters(&snapshotter);
    let named = |name: &str| {
        counters
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    };
    Summary {
        rows,
        backend_attempts: prices.served(),
        calls: named("rampart.calls"),
        hedges: named("rampart.hedges"),
    }
}

/// Sends `load` to the frontend at `frontend` with a plain reqwest client, as the frontend's
/// own callers would, each request to its id's route; returns what each got, by id (rampart's
/// side not filled in yet).
async fn load_loop(frontend: SocketAddr, load: Load) -> Vec<Row> {
    let outside = reqwest::Client::new();
    let next = Arc::new(AtomicU64::new(1));
    let rows = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..load.concurrency.max(1))
        .map(|_| {
            let (outside, next, rows) = (outside.clone(), Arc::clone(&next), Arc::clone(&rows));
            tokio::spawn(async move {
                loop {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    if id > load.requests {
                        break;
                    }
                    let path = Route::of(id).path();
                    let started = std::time::Instant::now();
                    let sent = outside
                        .get(format!("http://{frontend}{path}/{}", id % 1000))
                        .header(REQUEST_ID, id)
                        .header("x-deadline-ms", "250")
                        .send()
                        .await;
                    let client = match sent {
                        Ok(response) => {
                            let status = response.status();
                            // Read to the end: the answer is what the caller waited for.
                            match response.bytes().await {
                                Ok(_) => Ok(status),
                                Err(error) => Err(error.to_string()),
                            }
                        }
                        Err(error) => Err(error.to_string()),
                    };
                    lock(&rows).push(Row {
                        id,
                        client,
                        latency: started.elapsed(),
                        rampart: Vec::new(),
                        report: None,
                    });
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a load worker");
    }
    let mut rows = std::mem::take(&mut *lock(&rows));
    rows.sort_by_key(|row| row.id);
    rows
}

#[cfg_attr(test, allow(dead_code))]
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let mut arg = |default| args.next().and_then(Result::ok).unwrap_or(default);
    let load = Load {
        requests: arg(400),
        concurrency: arg(16),
        seed: arg(7),
    };
    println!("{load:?}");
    let summary = run(load).await;
    summary.print();
    for row in summary.disagreements() {
        println!("  disagreement: {row:?}");
    }
}
