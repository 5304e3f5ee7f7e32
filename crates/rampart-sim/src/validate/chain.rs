//! The loopback chain under a policy file, traced: edge → middle → leaf on 127.0.0.1, each a
//! real axum service behind rampart-http's `InboundLayer`, each client rampart-http's
//! `OutboundLayer` built from the file's policy named after its callee (`middle`, `leaf`).
//! The leaf is the `--loopback` leaf ([`crate::loopback`]): a lognormal 3 ms (p99 10 ms), and
//! 5% of its requests never answer.
//!
//! Every service records a SERVER span per request it receives (outside its inbound layer, so
//! a request the layer refuses is recorded with its 503 or 504) and a CLIENT span per attempt
//! its client sends (under the outbound layer, so each retry and hedge is one, its
//! `http.request.resend_count` how many attempts of its call were sent before it), into one
//! [`Recorder`]. The load generator is not traced: each root's trace starts at the edge's
//! SERVER span.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request as AxumRequest, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, Error as ClientError};
use hyper_util::rt::TokioExecutor;
use rampart::config::PolicyConfig;
use rampart_http::config::OutboundConfig;
use rampart_http::{Outbound, OutboundLayer, ReplayBody};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

use super::record::{Context, Open, Recorder, TRACEPARENT};
use crate::SimError;
use crate::loopback::{PATIENCE, ROOT_HEADER, inbound, leaf_delay, lock, root_of, serve};
use crate::spans::{RecordedSpan, SpanKind, SpanStatus};

/// The longest wait, after the last root, for every span to end.
const DRAIN: Duration = Duration::from_secs(5);

/// What one run of the chain measured.
#[derive(Debug, Clone)]
pub struct Run {
    /// Root requests sent.
    pub roots: usize,
    /// Roots answered 200 within the client's patience.
    pub in_time: usize,
    /// Each root answered in time: from sending to the whole answer, sorted.
    pub latencies: Vec<Duration>,
    /// Requests that reached the leaf (every attempt and hedge, before its inbound layer).
    pub leaf_requests: usize,
    /// Every span recorded, in the order they ended.
    pub spans: Vec<RecordedSpan>,
    /// Whether every span had ended when recording stopped.
    pub drained: bool,
}

/// What the services, their clients and the load generator share.
#[derive(Debug)]
struct Shared {
    recorder: Arc<Recorder>,
    /// Attempts sent under each SERVER span: the next attempt's resend count.
    attempts: Mutex<HashMap<u64, u32>>,
    /// Leaf requests per root: each draws its fate by its place.
    leaf_nth: Mutex<HashMap<u64, u32>>,
    leaf_requests: AtomicUsize,
    seed: u64,
}

type Plain = Client<HttpConnector, ReplayBody<Full<Bytes>>>;

/// The attempt-level client under the outbound layer: records a CLIENT span per attempt.
#[derive(Clone)]
struct Traced {
    inner: Plain,
    service: &'static str,
    shared: Arc<Shared>,
}

impl Service<Request<ReplayBody<Full<Bytes>>>> for Traced {
    type Response = Response<Body>;
    type Error = ClientError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, ClientError>> + Send>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<ReplayBody<Full<Bytes>>>) -> Self::Future {
        let parent = request.headers().get(TRACEPARENT).and_then(Context::parse);
        let trace = parent.map_or(0, |p| p.trace);
        let resend = parent.map_or(0, |p| {
            let mut attempts = lock(&self.shared.attempts);
            let n = attempts.entry(p.span).or_insert(0);
            *n += 1;
            *n - 1
        });
        let span = self.shared.recorder.open(
            SpanKind::Client,
            self.service,
            trace,
            parent.map(|p| p.span),
            resend,
        );
        request
            .headers_mut()
            .insert(TRACEPARENT, span.context().header());
        let answer = self.inner.request(request);
        Box::pin(async move {
            let answer = answer.await;
            span.end(match &answer {
                Ok(response) => SpanStatus::Http(response.status().as_u16()),
                // A refused or broken connection, as the simulator records one.
                Err(_) => SpanStatus::Http(500),
            });
            answer.map(|response| response.map(Body::new))
        })
    }
}

/// Records each request's SERVER span around everything else the service does.
#[derive(Clone)]
struct Server {
    service: &'static str,
    shared: Arc<Shared>,
}

async fn server_span(
    State(server): State<Server>,
    mut request: AxumRequest,
    next: Next,
) -> Response {
    let headers = request.headers();
    let parent = headers.get(TRACEPARENT).and_then(Context::parse);
    let trace = parent.map_or_else(|| root_of(headers).unwrap_or(0), |p| p.trace);
    if server.service == "leaf" {
        server.shared.leaf_requests.fetch_add(1, Ordering::SeqCst);
    }
    let span: Open = server.shared.recorder.open(
        SpanKind::Server,
        server.service,
        trace,
        parent.map(|p| p.span),
        0,
    );
    request.extensions_mut().insert(span.context());
    let response = next.run(request).await;
    span.end(SpanStatus::Http(response.status().as_u16()));
    response
}

/// The edge's and the middle's handler: one call to the next service, under its SERVER span.
#[derive(Clone)]
struct Hop {
    client: Outbound<Traced>,
    uri: String,
}

async fn relay(
    State(hop): State<Hop>,
    Extension(context): Extension<Context>,
    headers: HeaderMap,
) -> Response {
    let Ok(mut request) = Request::get(&hop.uri).body(Full::<Bytes>::default()) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if let Some(root) = headers.get(ROOT_HEADER) {
        request.headers_mut().insert(ROOT_HEADER, root.clone());
    }
    request.headers_mut().insert(TRACEPARENT, context.header());
    match hop.client.oneshot(request).await {
        Ok(response) if response.status() == StatusCode::OK => {
            match response.into_body().collect().await {
                Ok(_) => "ok".into_response(),
                Err(_) => StatusCode::BAD_GATEWAY.into_response(),
            }
        }
        _ => StatusCode::BAD_GATEWAY.into_response(),
    }
}

async fn leaf(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let root = root_of(&headers).unwrap_or(u64::MAX);
    let nth = {
        let mut seen = lock(&shared.leaf_nth);
        let n = seen.entry(root).or_insert(0);
        *n += 1;
        *n
    };
    tokio::time::sleep(leaf_delay(shared.seed, root, nth)).await;
    "ok".into_response()
}

/// rampart-http's outbound layer with `config`'s settings: the attempts, breaker, budget and
/// hedge as the layer's own, the rest as its policy's.
///
/// # Errors
///
/// The settings' problems, as rampart-http reports them.
pub fn outbound(config: &PolicyConfig) -> Result<OutboundLayer, SimError> {
    let mut policy = config.clone();
    let mut layer = OutboundConfig::default();
    layer.max_attempts = policy.max_attempts.take();
    layer.breaker = policy.breaker.take();
    layer.budget = policy.budget.take();
    layer.hedge = policy.hedge.take().flatten();
    // Always on in the outbound layer.
    policy.use_ambient_deadline = None;
    policy.use_ambient_criticality = None;
    layer.policy = policy;
    Ok(layer.build()?)
}

/// Starts the chain with `middle` and `leaf` as the clients' settings; returns the edge's
/// address.
async fn chain(
    middle: &PolicyConfig,
    leaf_policy: &PolicyConfig,
    shared: &Arc<Shared>,
) -> Result<SocketAddr, SimError> {
    let traced = |app: Router, service: &'static str| {
        let server = Server {
            service,
            shared: Arc::clone(shared),
        };
        app.layer(inbound())
            .layer(middleware::from_fn_with_state(server, server_span))
    };
    let leaf_app = Router::new()
        .route("/", get(leaf))
        .with_state(Arc::clone(shared));
    let mut downstream = serve(traced(leaf_app, "leaf")).await?;
    for (service, config) in [("middle", leaf_policy), ("edge", middle)] {
        let client = Traced {
            inner: Client::builder(TokioExecutor::new()).build_http(),
            service,
            shared: Arc::clone(shared),
        };
        let hop = Hop {
            client: outbound(config)?.layer(client),
            uri: format!("http://{downstream}/"),
        };
        let app = Router::new().route("/", get(relay)).with_state(hop);
        downstream = serve(traced(app, service)).await?;
    }
    Ok(downstream)
}

/// Sends `roots` roots at `rate` per second, each with the client's patience on the wire;
/// returns each root's latency if it was answered 200 in time.
async fn drive(edge: SocketAddr, roots: usize, rate: f64) -> Vec<Option<Duration>> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let uri = format!("http://{edge}/");
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(roots);
    for i in 0..roots {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        let (client, uri) = (client.clone(), uri.clone());
        tasks.push(tokio::spawn(async move {
            let mut request = Request::get(&uri).body(Full::<Bytes>::default()).ok()?;
            let headers = request.headers_mut();
            headers.insert(ROOT_HEADER, HeaderValue::from(i as u64));
            headers.insert(
                "x-deadline-ms",
                HeaderValue::from(PATIENCE.as_millis() as u64),
            );
            let sent = Instant::now();
            let call = async {
                let response = client.request(request).await.ok()?;
                if response.status() != StatusCode::OK {
                    return None;
                }
                response.into_body().collect().await.ok()?;
                Some(sent.elapsed())
            };
            tokio::time::timeout(PATIENCE, call).await.ok().flatten()
        }));
    }
    let mut answered = Vec::with_capacity(roots);
    for task in tasks {
        answered.push(task.await.ok().flatten());
    }
    answered
}

/// Runs the chain once on its own runtime: `roots` roots at `rate` per second, the clients
/// under `middle` (edge → middle) and `leaf` (middle → leaf), leaf fates drawn from `seed`.
///
/// # Errors
///
/// A policy does not build, a port cannot be bound, or the runtime cannot start.
pub fn run(
    middle: &PolicyConfig,
    leaf_policy: &PolicyConfig,
    roots: usize,
    rate: f64,
    seed: u64,
) -> Result<Run, SimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SimError::new(format!("cannot start a runtime: {e}")))?;
    let shared = Arc::new(Shared {
        recorder: Recorder::new(),
        attempts: Mutex::new(HashMap::new()),
        leaf_nth: Mutex::new(HashMap::new()),
        leaf_requests: AtomicUsize::new(0),
        seed,
    });
    let (answered, drained) = runtime.block_on(async {
        let edge = chain(middle, leaf_policy, &shared).await?;
        let answered = drive(edge, roots, rate).await;
        let until = Instant::now() + DRAIN;
        while shared.recorder.open_spans() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok::<_, SimError>((answered, shared.recorder.open_spans() == 0))
    })?;
    let spans = shared.recorder.close();
    // Dropping the runtime ends the servers and whatever still hangs, unrecorded.
    drop(runtime);
    let mut latencies: Vec<Duration> = answered.iter().flatten().copied().collect();
    latencies.sort_unstable();
    Ok(Run {
        roots,
        in_time: latencies.len(),
        latencies,
        leaf_requests: shared.leaf_requests.load(Ordering::SeqCst),
        spans,
        drained,
    })
}
