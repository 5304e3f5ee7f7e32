//! Two services on loopback, as a team would run them: an axum "prices" backend behind the
//! inbound layer, flaky on purpose, and an axum "shop" frontend calling it through
//! rampart-http's reqwest `Client`; then a bounded load loop against the frontend that prints
//! what its callers saw (p50, p99, failures by status) beside what rampart decided: the stop
//! reason of every call, from rampart's own `CallEnded` events and from the `CallReport` each
//! response carries, and rampart's metrics, the `rampart.calls` counter by its labels. It
//! checks that they agree: request by request, a caller saw a failure exactly when rampart
//! ended its one call with a stop reason other than `succeeded`; in all, the `rampart.calls`
//! that did not succeed are the callers' failures, and all of them are the requests.
//!
//! ```sh
//! cargo run -p rampart-http --features reqwest,axum,metrics --example two_services
//! cargo run -p rampart-http --features reqwest,axum,metrics --example two_services -- 2000 32 7
//! ```
//!
//! (requests, concurrency, seed). `tests/two_services.rs` runs the same code with a small
//! request count in CI and asserts the agreement; timings are printed, never asserted. What a
//! run saw (a row per request, the counters read back) and the printout are in
//! `two_services/summary.rs`.
//!
//! The metrics are read from a `metrics-util` `DebuggingRecorder`. A service installs its
//! exporter once, for the whole process (`metrics::set_global_recorder`, or the exporter's
//! own `install`), before its first call; here the recorder is this thread's for the run
//! (`metrics::set_default_local_recorder`): the runtime is current-thread, so every task of
//! both services and of the load loop runs on it, and each run (each test) counts its own.
//!
//! The backend's faults come from a seeded generator keyed by the request id and the attempt,
//! so a given id meets the same faults on every run, whatever the interleaving: per attempt,
//! 30% answer `503`, 10% hang past the frontend's attempt timeout, the rest answer within a
//! few milliseconds.
//!
//! Expect `budget_exhausted` among the stop reasons past a hundred requests or so: a 40% fault
//! rate needs a retry for nearly every other call, and the host's retry budget (20% of the
//! successes, a floor of 3 a second) funds far fewer. That refusal is rampart keeping a
//! failing dependency's load near 1.2x instead of 3x; each one is a caller's failure (the
//! backend's last answer), counted on both sides.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, StatusCode};
use metrics_util::debugging::DebuggingRecorder;
use rampart::StopReason;
use rampart::backoff::Backoff;
use rampart::breaker::Breaker;
use rampart::event::Event;
use rampart_http::reqwest::Client;
use rampart_http::{CallReport, InboundLayer, OutboundLayer};

#[path = "two_services/summary.rs"]
mod summary;

use summary::counter;
pub(crate) use summary::{Row, Summary};

/// The header that carries a request's id from the load loop through both services.
const REQUEST_ID: &str = "x-request-id";

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

// --- the backend ---------------------------------------------------------------------------

/// The prices service: its faults, and the attempts it has seen per request id.
#[derive(Clone)]
struct Prices {
    seed: u64,
    attempts: Arc<Mutex<HashMap<u64, u64>>>,
    served: Arc<AtomicU64>,
}

/// SplitMix64's finalizer: the seeded generator, stateless, keyed by what it mixes.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What one attempt meets at the backend.
enum Fault {
    Unavailable,
    Hang,
    Answer { after: Duration },
}

impl Prices {
    fn fault(&self, id: u64, attempt: u64) -> Fault {
        let draw = mix(mix(self.seed ^ mix(id)) ^ attempt) % 100;
        match draw {
            0..30 => Fault::Unavailable,
            30..40 => Fault::Hang,
            _ => Fault::Answer {
                after: Duration::from_millis(draw % 4),
            },
        }
    }
}

async fn price(State(prices): State<Prices>, Path(sku): Path<u32>, headers: HeaderMap) -> Response {
    prices.served.fetch_add(1, Ordering::Relaxed);
    let id = request_id(&headers);
    let attempt = {
        let mut attempts = prices
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let seen = attempts.entry(id).or_insert(0);
        *seen += 1;
        *seen
    };
    match prices.fault(id, attempt) {
        Fault::Unavailable => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Fault::Hang => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            StatusCode::OK.into_response()
        }
        Fault::Answer { after } => {
            tokio::time::sleep(after).await;
            format!("sku {sku}: {}.{:02} EUR", 10 + sku % 90, sku % 100).into_response()
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

#[derive(Clone)]
struct Shop {
    prices: Client,
    backend: SocketAddr,
    record: Record,
}

async fn quote(State(shop): State<Shop>, Path(sku): Path<u32>, headers: HeaderMap) -> Response {
    let id = request_id(&headers);
    let call = shop
        .prices
        .get(format!("http://{}/prices/{sku}", shop.backend))
        .header(REQUEST_ID, id)
        .send();
    let outcome = SERVING.scope(id, call).await;
    // The report is in every response of the client, and in the error of a call that ended
    // on a retryable status; the other errors (timeouts, refusals, transport) say their
    // reason themselves.
    let report = match &outcome {
        Ok(response) => response.extensions().get::<CallReport>(),
        Err(error) => error.report(),
    };
    if let Some(report) = report {
        lock(&shop.record.reports).insert(id, report.stop());
    }
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

/// The frontend's outbound layer: 40 ms per attempt, three attempts, a breaker that tolerates
/// a bad streak, a fail-on-status switch so that `?` stops on a `503` that outlived its
/// retries, and a listener recording every call's stop reason under its request id.
fn outbound(record: &Record) -> OutboundLayer {
    let ended = Arc::clone(&record.rampart);
    OutboundLayer::builder()
        .name("prices")
        .breaker(Breaker::builder().consecutive_failures(20))
        .fail_on_retryable_status(true)
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
    let prices = Prices {
        seed: load.seed,
        attempts: Arc::default(),
        served: Arc::default(),
    };
    let backend = serve(
        Router::new()
            .route("/prices/{sku}", get(price))
            .with_state(prices.clone())
            .layer(InboundLayer::new()),
    )
    .await;
    let record = Record::default();
    let shop = Shop {
        prices: Client::new(&outbound(&record)).expect("a reqwest client"),
        backend,
        record: record.clone(),
    };
    let frontend = serve(
        Router::new()
            .route("/quote/{sku}", get(quote))
            .with_state(shop)
            .layer(InboundLayer::new()),
    )
    .await;

    // The load loop: a plain reqwest client, as the frontend's own callers would have.
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
                    let started = std::time::Instant::now();
                    let sent = outside
                        .get(format!("http://{frontend}/quote/{}", id % 1000))
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
                    lock(&rows).push((id, client, started.elapsed()));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a load worker");
    }

    let mut ended = std::mem::take(&mut *lock(&record.rampart));
    let reports = std::mem::take(&mut *lock(&record.reports));
    let mut rows: Vec<Row> = std::mem::take(&mut *lock(&rows))
        .into_iter()
        .map(|(id, client, latency)| Row {
            id,
            client,
            latency,
            rampart: ended.remove(&id).unwrap_or_default(),
            report: reports.get(&id).copied(),
        })
        .collect();
    rows.sort_by_key(|row| row.id);
    Summary {
        rows,
        backend_attempts: prices.served.load(Ordering::Relaxed),
        // Every call ended before its response left the frontend: the counts are final.
        calls: counter(&snapshotter, "rampart.calls"),
    }
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
