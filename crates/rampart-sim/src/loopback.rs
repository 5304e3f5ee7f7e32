//! `--loopback`: the `deadline` scenario on three real axum services on 127.0.0.1
//! (edge → middle → leaf), in real time, small and quick, in two shapes: every handler calls
//! downstream itself ([`Shape::Direct`]), or the middle tier queues requests for two workers
//! ([`Shape::QueuedMiddle`]), where work already queued outlives its caller.
//!
//! Longer than the ~600-line guide: the three services, the load that drives them and the report of
//! a run are one real-time scenario, kept in one file so that what runs and what is reported are
//! read side by side.
//!
//! The leaf answers after a lognormal delay (median 3 ms, p99 10 ms), but 5% of its requests
//! never answer (they sleep 30 s). The client gives each root request 500 ms. Two contenders:
//!
//! - `naive`: plain hyper-util clients, each hop a `tokio::time::timeout` of 1 s per attempt
//!   and up to 3 retries, no deadline on the wire, no rampart layer anywhere.
//! - `rampart`: rampart-http's `InboundLayer` on every server and `OutboundLayer` on every
//!   client (the same 4 attempts of at most 1 s each), the client's 500 ms sent as
//!   `X-Deadline-Ms` and propagated along the chain.
//!
//! Wasted leaf work is counted at the leaf: the client records when it gives up on each root
//! (send time + 500 ms) in a shared table, every hop forwards an `x-root-id` header, and a
//! leaf handler that starts after its root's give-up time counts as wasted. The share is
//! wasted leaf starts over all leaf starts (requests a rampart layer refused before the
//! handler ran did no work and are not counted). After the last root the run waits until no
//! edge or middle handler is still running (at most 5 s), so late retries are counted too.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rampart::Ambient;
use rampart::hedge::Hedge;
use rampart_http::{InboundLayer, Outbound, OutboundLayer, ReplayBody};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tower::ServiceExt;
use tower_layer::Layer;

use crate::SimError;
use crate::dist::{LogNormal, derive_seed};
use crate::report::{Axis, Chart, ScenarioReport, Series, Table, colors};
use crate::scenario::pct;

/// Root requests in a full run.
pub const ROOTS: usize = 200;
/// Root requests with `--quick`.
pub const QUICK_ROOTS: usize = 40;
/// Root requests sent per second.
pub const RATE: f64 = 100.0;
/// Share of leaf requests that never answer.
pub const HANG_RATE: f64 = 0.05;
/// How long a hanging leaf request sleeps: past every deadline.
pub const HANG: Duration = Duration::from_secs(30);
/// How long the client waits for each root.
pub const PATIENCE: Duration = crate::scenario::deadline::PATIENCE;
/// Every hop's per-attempt timeout.
pub const HOP_TIMEOUT: Duration = Duration::from_secs(1);
/// Every hop's attempts, the first included.
pub const ATTEMPTS: u32 = 4;
/// The longest wait, after the last root, for the chain's handlers to finish.
pub const DRAIN: Duration = Duration::from_secs(5);
/// The header that carries the root's id (instrumentation, for both contenders).
pub const ROOT_HEADER: &str = "x-root-id";
/// What each rampart server keeps for itself from the deadline it receives.
pub(crate) const RESERVE: Duration = Duration::from_millis(5);

/// Workers of the middle tier in [`Shape::QueuedMiddle`].
pub const MIDDLE_WORKERS: usize = 2;
/// Places in the middle tier's queue in [`Shape::QueuedMiddle`].
pub const MIDDLE_QUEUE: usize = 256;

/// How the chain's middle tier handles a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Every hop handles its request in the handler: a caller that gives up drops the
    /// handler, and hyper's connection cancellation reaches the work.
    Direct,
    /// The middle tier hands each request to [`MIDDLE_WORKERS`] workers through a bounded
    /// queue ([`MIDDLE_QUEUE`] places): work already queued outlives its caller, and only a
    /// deadline that travelled with the request lets a worker skip it.
    QueuedMiddle,
}

impl Shape {
    /// The chain in words, for the table's title.
    pub fn describe(self) -> &'static str {
        match self {
            Shape::Direct => "handlers call downstream themselves",
            Shape::QueuedMiddle => "the middle tier queues requests for 2 workers",
        }
    }
}

/// After how long a hedging contender starts a second leg ([`Mode::RampartHedged`]): past
/// the leaf's p99 (10 ms), far below the client's patience.
pub const HEDGE_AFTER: Duration = Duration::from_millis(20);

/// The contenders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plain clients, per-hop timeouts and retries, no propagation.
    Naive,
    /// rampart-http's layers on every server and client.
    Rampart,
    /// [`Mode::Rampart`] with every client hedging after [`HEDGE_AFTER`] (2 legs at most).
    RampartHedged,
}

impl Mode {
    /// The contender's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Naive => "naive",
            Mode::Rampart => "rampart",
            Mode::RampartHedged => "rampart+hedge",
        }
    }
}

/// One contender's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The contender's name.
    pub contender: &'static str,
    /// Root requests sent.
    pub roots: usize,
    /// Share of roots answered 200 within the client's 500 ms.
    pub in_time: f64,
    /// Share of leaf handler starts whose root's client had already given up.
    pub wasted: f64,
    /// Handler runs per root at the edge, the middle and the leaf.
    pub per_layer: Vec<f64>,
    /// Leaf handler starts.
    pub leaf_starts: usize,
    /// Leaf handler starts after the root's give-up time.
    pub leaf_wasted: usize,
    /// Leaf handler starts that received an `X-Deadline-Ms` header.
    pub leaf_with_deadline: usize,
    /// Whether every edge and middle handler had finished when counting stopped.
    pub drained: bool,
}

/// What the services and the client share: give-up times and counts.
#[derive(Debug, Default)]
struct Record {
    give_up: Mutex<HashMap<u64, Instant>>,
    leaf_attempts: Mutex<HashMap<u64, u32>>,
    starts: [AtomicUsize; 3],
    wasted: AtomicUsize,
    with_deadline: AtomicUsize,
    active: AtomicUsize,
}

/// Counts a running edge or middle handler while it lives.
struct Active(Arc<Record>);

impl Active {
    fn new(record: &Arc<Record>) -> Active {
        record.active.fetch_add(1, Ordering::SeqCst);
        Active(Arc::clone(record))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

type PlainClient = Client<HttpConnector, Full<Bytes>>;
type RampartClient = Outbound<Client<HttpConnector, ReplayBody<Full<Bytes>>>>;

#[derive(Clone)]
enum Next {
    Naive(PlainClient),
    Rampart(RampartClient),
}

#[derive(Clone)]
struct Relay {
    /// 0 for the edge, 1 for the middle.
    layer: usize,
    next: Next,
    uri: String,
    record: Arc<Record>,
}

#[derive(Clone)]
struct Leaf {
    seed: u64,
    record: Arc<Record>,
}

pub(crate) fn root_of(headers: &HeaderMap) -> Option<u64> {
    headers.get(ROOT_HEADER)?.to_str().ok()?.parse().ok()
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn leaf(State(leaf): State<Leaf>, headers: HeaderMap) -> Response {
    let now = Instant::now();
    let record = &leaf.record;
    record.starts[2].fetch_add(1, Ordering::SeqCst);
    if headers.contains_key("x-deadline-ms") {
        record.with_deadline.fetch_add(1, Ordering::SeqCst);
    }
    let root = root_of(&headers).unwrap_or(u64::MAX);
    if lock(&record.give_up)
        .get(&root)
        .is_some_and(|&give_up| now >= give_up)
    {
        record.wasted.fetch_add(1, Ordering::SeqCst);
    }
    // The nth leaf request of a root draws the same fate in both contenders.
    let nth = {
        let mut attempts = lock(&record.leaf_attempts);
        let n = attempts.entry(root).or_insert(0);
        *n += 1;
        *n
    };
    tokio::time::sleep(leaf_delay(leaf.seed, root, nth)).await;
    "ok".into_response()
}

/// How long the `nth` leaf request of root `root` takes (from 1): [`HANG`] with
/// [`HANG_RATE`], else a lognormal draw of median 3 ms and p99 10 ms; the same seed, root and
/// `nth` draw the same time, whoever calls.
pub(crate) fn leaf_delay(seed: u64, root: u64, nth: u32) -> Duration {
    let mut rng = fastrand::Rng::with_seed(derive_seed(seed, &format!("leaf/{root}/{nth}")));
    if rng.f64() < HANG_RATE {
        HANG
    } else {
        LogNormal::from_median_p99(Duration::from_millis(3), Duration::from_millis(10))
            .sample(&mut rng)
    }
}

fn request<B: Default>(uri: &str, root: Option<&HeaderValue>) -> Option<Request<B>> {
    let mut request = Request::get(uri).body(B::default()).ok()?;
    if let Some(root) = root {
        request.headers_mut().insert(ROOT_HEADER, root.clone());
    }
    Some(request)
}

async fn relay(State(hop): State<Relay>, headers: HeaderMap) -> Response {
    let _active = Active::new(&hop.record);
    hop.record.starts[hop.layer].fetch_add(1, Ordering::SeqCst);
    let answered = forward(&hop.next, &hop.uri, headers.get(ROOT_HEADER)).await;
    if answered {
        "ok".into_response()
    } else {
        StatusCode::BAD_GATEWAY.into_response()
    }
}

/// Calls the next hop for root `root`: naive's retry loop, or rampart's outbound layer.
async fn forward(next: &Next, uri: &str, root: Option<&HeaderValue>) -> bool {
    match next {
        Next::Naive(client) => {
            let mut answered = false;
            for attempt in 0..ATTEMPTS {
                if attempt > 0 {
                    // Full jitter on a 20 ms base, doubling.
                    let cap = 20u64 << (attempt - 1);
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=cap))).await;
                }
                let Some(req) = request(uri, root) else {
                    break;
                };
                let call = async {
                    match client.request(req).await {
                        Ok(resp) if resp.status() == StatusCode::OK => {
                            resp.into_body().collect().await.is_ok()
                        }
                        _ => false,
                    }
                };
                if matches!(tokio::time::timeout(HOP_TIMEOUT, call).await, Ok(true)) {
                    answered = true;
                    break;
                }
            }
            answered
        }
        Next::Rampart(client) => match request(uri, root) {
            Some(req) => match client.clone().oneshot(req).await {
                Ok(resp) if resp.status() == StatusCode::OK => {
                    resp.into_body().collect().await.is_ok()
                }
                _ => false,
            },
            None => false,
        },
    }
}

/// One request waiting for a middle-tier worker.
struct Job {
    root: Option<HeaderValue>,
    /// The request's ambient context (its deadline, under rampart's inbound layer).
    ambient: Ambient,
    reply: oneshot::Sender<bool>,
}

#[derive(Clone)]
struct Queued {
    queue: mpsc::Sender<Job>,
    record: Arc<Record>,
}

/// The middle tier with bounded workers: the handler only queues the request and waits for a
/// worker's answer. A caller that gives up drops the handler, not the queued job: the work
/// already queued goes on, as in a thread-pool server.
async fn queued(State(middle): State<Queued>, headers: HeaderMap) -> Response {
    let _active = Active::new(&middle.record);
    middle.record.starts[1].fetch_add(1, Ordering::SeqCst);
    let (reply, answer) = oneshot::channel();
    let job = Job {
        root: headers.get(ROOT_HEADER).cloned(),
        ambient: Ambient::current(),
        reply,
    };
    if middle.queue.try_send(job).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match answer.await {
        Ok(true) => "ok".into_response(),
        _ => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// A middle-tier worker: takes the next job and forwards it. Under rampart a job whose
/// propagated deadline has passed is skipped (the caller is gone), and the forward call runs
/// in the job's ambient scope, so the outbound layer sends the time it has left.
async fn worker(jobs: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>, next: Next, uri: String) {
    loop {
        let Some(job) = jobs.lock().await.recv().await else {
            return;
        };
        let expired = job
            .ambient
            .deadline()
            .is_some_and(|d| d.remaining().is_zero());
        let answered = if expired {
            false
        } else {
            let root = job.root.clone();
            job.ambient.scope(forward(&next, &uri, root.as_ref())).await
        };
        let _ = job.reply.send(answered);
    }
}

/// Serves `app` on a free port of 127.0.0.1 on the current runtime; returns its address.
pub(crate) async fn serve(app: Router) -> Result<SocketAddr, SimError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| SimError::new(format!("cannot bind a loopback port: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| SimError::new(format!("no local address: {e}")))?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// rampart-http's inbound layer as every rampart server of the chain has it: reserve
/// [`RESERVE`], expired requests refused, the deadline enforced on the handler.
pub(crate) fn inbound() -> InboundLayer {
    InboundLayer::new()
        .reserve(RESERVE)
        .reject_expired(true)
        .enforce(true)
}

fn next(mode: Mode) -> Result<Next, SimError> {
    Ok(match mode {
        Mode::Naive => Next::Naive(Client::builder(TokioExecutor::new()).build_http()),
        Mode::Rampart | Mode::RampartHedged => {
            let mut builder = OutboundLayer::builder()
                .max_attempts(ATTEMPTS)
                .policy(|p| p.attempt_timeout(HOP_TIMEOUT));
            if mode == Mode::RampartHedged {
                builder = builder.hedge(Hedge::fixed(HEDGE_AFTER));
            }
            let layer = builder.build()?;
            Next::Rampart(layer.layer(Client::builder(TokioExecutor::new()).build_http()))
        }
    })
}

/// Starts the chain; returns the edge's address.
async fn chain(
    mode: Mode,
    shape: Shape,
    seed: u64,
    record: &Arc<Record>,
) -> Result<SocketAddr, SimError> {
    let layered = |app: Router| match mode {
        Mode::Naive => app,
        Mode::Rampart | Mode::RampartHedged => app.layer(inbound()),
    };
    let leaf_addr = serve(layered(Router::new().route("/", get(leaf)).with_state(
        Leaf {
            seed,
            record: Arc::clone(record),
        },
    )))
    .await?;
    let mut downstream = leaf_addr;
    for layer in [1, 0] {
        let uri = format!("http://{downstream}/");
        let app = match (shape, layer) {
            (Shape::QueuedMiddle, 1) => {
                let (queue, jobs) = mpsc::channel(MIDDLE_QUEUE);
                let jobs = Arc::new(tokio::sync::Mutex::new(jobs));
                for _ in 0..MIDDLE_WORKERS {
                    tokio::spawn(worker(Arc::clone(&jobs), next(mode)?, uri.clone()));
                }
                let middle = Queued {
                    queue,
                    record: Arc::clone(record),
                };
                Router::new().route("/", get(queued)).with_state(middle)
            }
            _ => {
                let hop = Relay {
                    layer,
                    next: next(mode)?,
                    uri,
                    record: Arc::clone(record),
                };
                Router::new().route("/", get(relay)).with_state(hop)
            }
        };
        downstream = serve(layered(app)).await?;
    }
    Ok(downstream)
}

/// Sends `roots` roots at [`RATE`] per second; returns how many were answered in time.
async fn drive(edge: SocketAddr, mode: Mode, roots: usize, record: &Arc<Record>) -> usize {
    let client: PlainClient = Client::builder(TokioExecutor::new()).build_http();
    let uri = format!("http://{edge}/");
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(roots);
    for i in 0..roots {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / RATE)).await;
        let (client, record, uri) = (client.clone(), Arc::clone(record), uri.clone());
        tasks.push(tokio::spawn(async move {
            let root = HeaderValue::from(i as u64);
            let Some(mut req) = request::<Full<Bytes>>(&uri, Some(&root)) else {
                return false;
            };
            if mode != Mode::Naive {
                req.headers_mut().insert(
                    "x-deadline-ms",
                    HeaderValue::from(PATIENCE.as_millis() as u64),
                );
            }
            lock(&record.give_up).insert(i as u64, Instant::now() + PATIENCE);
            let call = async {
                match client.request(req).await {
                    Ok(resp) if resp.status() == StatusCode::OK => {
                        resp.into_body().collect().await.is_ok()
                    }
                    _ => false,
                }
            };
            matches!(tokio::time::timeout(PATIENCE, call).await, Ok(true))
        }));
    }
    let mut in_time = 0;
    for task in tasks {
        if matches!(task.await, Ok(true)) {
            in_time += 1;
        }
    }
    in_time
}

/// Runs one contender on its own runtime and its own three services.
pub fn simulate(mode: Mode, shape: Shape, roots: usize, seed: u64) -> Result<Point, SimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SimError::new(format!("cannot start a runtime: {e}")))?;
    let record = Arc::new(Record::default());
    let (in_time, drained) = runtime.block_on(async {
        let edge = chain(mode, shape, seed, &record).await?;
        let in_time = drive(edge, mode, roots, &record).await;
        let until = Instant::now() + DRAIN;
        while record.active.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok::<_, SimError>((in_time, record.active.load(Ordering::SeqCst) == 0))
    })?;
    // Dropping the runtime ends the servers and the leaf requests still hanging.
    drop(runtime);
    let roots_f = roots.max(1) as f64;
    let starts: Vec<usize> = record
        .starts
        .iter()
        .map(|s| s.load(Ordering::SeqCst))
        .collect();
    let leaf_starts = starts.get(2).copied().unwrap_or(0);
    let leaf_wasted = record.wasted.load(Ordering::SeqCst);
    Ok(Point {
        contender: mode.name(),
        roots,
        in_time: in_time as f64 / roots_f,
        wasted: if leaf_starts == 0 {
            0.0
        } else {
            leaf_wasted as f64 / leaf_starts as f64
        },
        per_layer: starts.iter().map(|&s| s as f64 / roots_f).collect(),
        leaf_starts,
        leaf_wasted,
        leaf_with_deadline: record.with_deadline.load(Ordering::SeqCst),
        drained,
    })
}

/// Runs every contender on the chain of `shape`, one after the other.
pub fn run(shape: Shape, roots: usize, seed: u64) -> Result<Vec<Point>, SimError> {
    [Mode::Naive, Mode::Rampart, Mode::RampartHedged]
        .into_iter()
        .map(|mode| simulate(mode, shape, roots, seed))
        .collect()
}

/// The table, with the same columns as the simulated deadline table's first three.
pub fn table(shape: Shape, points: &[Point]) -> Table {
    let roots = points.first().map_or(0, |p| p.roots);
    let mut table = Table::new(
        format!(
            "loopback, {}: 5% of leaf requests never answer; the client waits 500 ms ({roots} roots at {RATE:.0}/s on 127.0.0.1, real time)",
            shape.describe()
        ),
        &[
            "contender",
            "answered in time",
            "wasted leaf work",
            "edge runs/root",
            "middle runs/root",
            "leaf runs/root",
            "leaf wasted/starts",
            "leaf saw deadline",
        ],
    );
    for p in points {
        let mut row = vec![p.contender.to_owned(), pct(p.in_time), pct(p.wasted)];
        row.extend(p.per_layer.iter().map(|v| format!("{v:.2}")));
        row.push(format!(
            "{}/{}{}",
            p.leaf_wasted,
            p.leaf_starts,
            if p.drained { "" } else { " (not drained)" }
        ));
        row.push(format!("{}/{}", p.leaf_with_deadline, p.leaf_starts));
        table.row(row);
    }
    table
}

/// The finding in one line, computed from the points: a tie when both contenders answer within
/// one percentage point of each other in time and waste within one point, else who is ahead.
pub fn finding(points: &[Point], contender: &str) -> String {
    let by = |name: &str| points.iter().find(|p| p.contender == name);
    let (Some(naive), Some(rampart)) = (by("naive"), by(contender)) else {
        return format!("no finding: naive or {contender} is missing from the run");
    };
    let answered = rampart.in_time - naive.in_time;
    let wasted = rampart.wasted - naive.wasted;
    let verdict = if answered.abs() <= 0.01 && wasted.abs() <= 0.01 {
        format!("Tie for {contender}")
    } else if answered >= -0.01 && wasted <= 0.01 {
        format!("Win for {contender}")
    } else if answered <= 0.01 && wasted >= -0.01 {
        format!("Loss for {contender}")
    } else {
        format!("Mixed for {contender}")
    };
    let leaf = |p: &Point| p.per_layer.get(2).copied().unwrap_or(0.0);
    format!(
        "{verdict} on real sockets: answered in time {} (naive) against {}, wasted leaf work {} against {}, leaf requests per root {:.2} against {:.2}.",
        pct(naive.in_time),
        pct(rampart.in_time),
        pct(naive.wasted),
        pct(rampart.wasted),
        leaf(naive),
        leaf(rampart)
    )
}

/// How wasted leaf work is counted, for the printout.
pub const COUNTING: &str = "wasted leaf work: leaf handler starts after the root's client gave up (send time + 500 ms, kept in a shared table keyed by an x-root-id header every hop forwards), over all leaf handler starts; counted until no edge or middle handler is still running (at most 5 s after the last root).";

/// Why the two contenders can come out even here, unlike in the simulation.
pub const WHY: &str = "unlike the simulation, nothing here holds a worker per request, and over HTTP/1.1 hyper closes the connection of a request whose caller dropped it while axum drops the handler of a closed connection: the client's give-up travels down the chain as cancellation even without a deadline on the wire, so naive's retries after the give-up mostly never start.";

/// Why the queued shape differs, for the printout.
pub const QUEUED_WHY: &str = "with a queue in the middle tier, the caller's give-up drops the middle handler but not its queued job: naive's two workers go on forwarding requests nobody waits for (and each hanging leaf request holds a worker for its 1 s per-hop timeout, so the queue grows); rampart's workers skip a job whose propagated deadline has passed and cut a hanging call at the time left. A shorter naive per-hop timeout would shorten the hold, not the queued dead work.";

/// Both shapes as a section of the report: their tables, a chart of answered in time, the
/// computed findings, and every number.
pub fn scenario(roots: usize, seed: u64) -> Result<ScenarioReport, SimError> {
    let shapes = [Shape::Direct, Shape::QueuedMiddle];
    let mut tables = Vec::new();
    let mut findings = Vec::new();
    let mut data = Vec::new();
    let mut runs = Vec::new();
    for shape in shapes {
        let points = run(shape, roots, seed)?;
        tables.push(table(shape, &points));
        for contender in ["rampart", "rampart+hedge"] {
            findings.push(format!(
                "{}: {}",
                shape.describe(),
                finding(&points, contender)
            ));
        }
        data.push(json!({ "shape": format!("{shape:?}"), "points": json(&points) }));
        runs.push(points);
    }
    findings.push(QUEUED_WHY.to_owned());
    findings.push(format!("Handlers that call downstream themselves: {WHY}"));
    let mut series = Vec::new();
    for mode in [Mode::Naive, Mode::Rampart, Mode::RampartHedged] {
        let points: Vec<(f64, f64)> = runs
            .iter()
            .enumerate()
            .map(|(x, points)| {
                let y = points
                    .iter()
                    .find(|p| p.contender == mode.name())
                    .map_or(f64::NAN, |p| p.in_time * 100.0);
                (x as f64, y)
            })
            .collect();
        series.push(Series::sweep(
            format!("{}: answered in time", mode.name()),
            colors::of(mode.name()),
            points,
        ));
    }
    Ok(ScenarioReport {
        name: "loopback",
        title: "the deadline on real sockets".into(),
        question: "On three real axum services on 127.0.0.1 through rampart-http, with 5% of leaf requests never answering and a client that waits 500 ms: does the propagated deadline matter once hyper's own connection cancellation is there?".into(),
        setup: vec![
            format!("{roots} roots at {RATE:.0}/s per contender and shape, real time; edge → middle → leaf; the leaf answers in a lognormal 3 ms (p99 10 ms), 5% of its requests sleep 30 s."),
            format!("naive: hyper-util clients, {ATTEMPTS} attempts of at most {HOP_TIMEOUT:?} per hop, no deadline on the wire. rampart: rampart-http's InboundLayer (reserve {RESERVE:?}, reject_expired, enforce) and OutboundLayer (the same attempts); rampart+hedge: the same, every client hedging after {HEDGE_AFTER:?}."),
            format!("Two shapes: every handler calls downstream itself; or the middle tier queues requests ({MIDDLE_QUEUE} places) for {MIDDLE_WORKERS} workers, so queued work outlives its caller."),
        ],
        reference: "Google SRE book, ch. 22 'Addressing Cascading Failures': propagate deadlines, and do not do work for a caller that has given up.".into(),
        chart: Chart {
            title: "Answered within 500 ms: handlers calling downstream (0) and a queued middle tier (1)".into(),
            x: Axis::linear("shape (0: direct, 1: queued middle tier)", -0.2, 1.2),
            y: Axis::linear("% of roots answered in time", 0.0, 102.0),
            series,
            bands: Vec::new(),
        },
        tables,
        terms: vec![
            ("answered in time".into(), "share of roots answered 200 within the client's 500 ms".into()),
            ("wasted leaf work".into(), COUNTING.into()),
            ("edge / middle / leaf runs/root".into(), "handler runs at that service over roots (hedges and retries included)".into()),
            ("leaf saw deadline".into(), "leaf handler runs that received an X-Deadline-Ms header".into()),
        ],
        configs: vec![
            ("naive".into(), format!("hyper-util client per hop; {ATTEMPTS} attempts, tokio::time::timeout({HOP_TIMEOUT:?}) each, full-jitter backoff from 20 ms; no deadline on the wire; plain axum servers")),
            ("rampart".into(), format!("rampart-http OutboundLayer per hop (max_attempts {ATTEMPTS}, attempt_timeout {HOP_TIMEOUT:?}, the rest its defaults), InboundLayer on every server (reserve {RESERVE:?}, reject_expired, enforce); the client sends X-Deadline-Ms 500")),
            ("rampart+hedge".into(), format!("rampart, every OutboundLayer with hedge(Hedge::fixed({HEDGE_AFTER:?}))")),
        ],
        findings,
        notes: vec!["Real time on a shared machine: the shares move by a point or two between runs; the directions do not.".into()],
        data: Value::Array(data),
    })
}

/// The points as JSON.
pub fn json(points: &[Point]) -> Value {
    json!({
        "points": points.iter().map(|p| json!({
            "contender": p.contender,
            "roots": p.roots,
            "answered_in_time": p.in_time,
            "wasted_leaf_work": p.wasted,
            "handler_runs_per_root_by_layer": p.per_layer,
            "leaf_starts": p.leaf_starts,
            "leaf_wasted_starts": p.leaf_wasted,
            "leaf_starts_with_deadline": p.leaf_with_deadline,
            "drained": p.drained,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(contender: &'static str, in_time: f64, wasted: f64) -> Point {
        Point {
            contender,
            roots: 100,
            in_time,
            wasted,
            per_layer: vec![1.0, 1.0, 1.0],
            leaf_starts: 100,
            leaf_wasted: 0,
            leaf_with_deadline: 0,
            drained: true,
        }
    }

    #[test]
    fn equal_answers_and_waste_are_reported_as_a_tie() {
        let line = finding(
            &[point("naive", 0.95, 0.0), point("rampart", 0.95, 0.004)],
            "rampart",
        );
        assert!(
            line.starts_with("Tie for rampart on real sockets"),
            "{line}"
        );
    }

    #[test]
    fn fewer_answers_in_time_are_reported_as_a_loss() {
        let line = finding(
            &[point("naive", 0.95, 0.0), point("rampart", 0.90, 0.0)],
            "rampart",
        );
        assert!(line.starts_with("Loss for rampart"), "{line}");
    }
}
