//! A simulated service: `workers` handlers, a bounded queue, a lognormal service time, injected
//! faults, and the downstream calls each handler makes through a client.
//!
//! Longer than the ~600-line guide: the service's queue, workers, faults and inbound edge are
//! one simulated process, and its invariants (what a worker may see) are easier to check in one
//! file.
//!
//! A caller [`submit`](Service::submit)s a [`Request`] and awaits the reply. What crosses the
//! "wire" is what an HTTP request would carry: a deadline as remaining whole milliseconds
//! (`X-Deadline-Ms`) and a criticality name (`X-Criticality`). The service reads them the way
//! rampart's inbound edge does ([`Criticality::parse_inbound`]; a missing or zero deadline is
//! no deadline) and runs each handler inside an [`Ambient`] scope built from them, so the
//! policies the handler calls through see exactly what propagation delivered.
//!
//! Nothing is cancelled over the wire: a caller that stops waiting (its timeout fired, its
//! own caller went away) leaves its request queued or running here, as an HTTP/1.1 server
//! would. Only a deadline that travelled with the request lets the service skip dead work.
//!
//! A service admits work one of two ways ([`Admission`]): a plain FIFO queue in front of its
//! workers (the baselines), or rampart's [`CriticalityLimit`], asked directly for every request
//! the way rampart-http's `InboundLayer::admit` asks it (the rampart contender). In front of
//! either, a rampart service reads the wire the way rampart-http's `InboundLayer` does
//! ([`ServerSide`]): the deadline minus a configured reserve, `reject_expired` on arrival, a
//! 503 with `Retry-After` for a refusal. That reading is written here, a stand-in for the
//! layer itself (the simulated services have no HTTP requests); `--loopback` runs the real
//! layer.
//!
//! Time is tokio's paused clock, whose timer wheel ticks in whole milliseconds: every service
//! time is rounded up to the next millisecond.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use rampart::admit::{Admit, AdmitContext, Feedback};
use rampart::limit::CriticalityLimit;
use rampart::{Ambient, AttemptOutcome, Criticality, Deadline, Instant, Verdict};
use tokio::sync::oneshot;

use crate::SimError;
use crate::contender::{Client, classify, whole_seconds};
use crate::dist::ServiceTime;
use crate::plan::Plan;
use crate::spans::{OpenSpan, SpanKind, SpanParent, SpanSink};

/// Why a request failed, as its caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The handler failed (an HTTP 500), or the service was down (connection refused).
    Error,
    /// The service shed the request (an HTTP 503), with the `Retry-After` it sent, if any: a
    /// plain FIFO sends none, rampart-http always sends one (whole seconds, at least 1).
    Overloaded(Option<Duration>),
    /// The request arrived with no more than the service's reserve left, or a rampart policy
    /// found its inherited deadline spent (an HTTP 504).
    Expired,
    /// The caller's own timeout fired before the answer came.
    Timeout,
    /// A retry budget or a breaker refused to send the request.
    Refused,
}

/// What a caller gets back: `Ok` or why not.
pub type Reply = Result<(), Failure>;

/// Simulator bookkeeping carried with every request and invisible to every policy: which root
/// request it serves and when that root's caller stops waiting.
#[derive(Debug, Clone, Copy)]
pub struct Trace {
    /// The root request's number.
    pub root: u64,
    /// When the root's caller stops waiting.
    pub root_deadline: Instant,
    /// Whether the root falls in the measured window (after warm-up).
    pub measured: bool,
    /// The span the request is sent or handled under, when the run records spans
    /// ([`crate::spans`]); `None` otherwise, and for a root as the edge sends it.
    pub span: Option<SpanParent>,
}

/// One request on the wire.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// `X-Deadline-Ms`: whole milliseconds the caller will still wait; `None` when the caller
    /// does not propagate deadlines.
    pub deadline_ms: Option<u64>,
    /// `X-Criticality`: a level name; `None` when the caller does not propagate it.
    pub criticality: Option<&'static str>,
    /// The kind of request (its route). A public edge that classifies by route
    /// ([`LevelSource::Route`]) assigns the level from it by local code.
    pub route: Criticality,
    /// Bookkeeping.
    pub trace: Trace,
}

/// Where a service takes the level of a request from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LevelSource {
    /// The `X-Criticality` name, through [`Criticality::parse_inbound`] (which clamps
    /// `CriticalPlus` to `Critical`).
    Wire,
    /// The request's route, by the service's own code: a public edge, which trusts no header
    /// and may assign `CriticalPlus`.
    Route,
}

/// How a service queues and sheds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// One FIFO queue of [`ServiceConfig::queue`] places in front of the workers; a request
    /// arriving at a full queue is rejected (503).
    Fifo,
    /// rampart's [`CriticalityLimit`], one per service, asked directly for every request (as a
    /// server layer asks it): capacity the service's workers, queue [`ServiceConfig::queue`],
    /// and `hold`. Each request asks with its level (from the wire or its route) and its
    /// deadline (received minus the reserve) as the ceiling, and stops waiting at that
    /// deadline. The permit is held while the handler runs (downstream calls included). A
    /// refusal, or a wait that reaches the deadline, is answered 503 with `Retry-After`, as
    /// rampart-http's `InboundLayer::admit` answers it.
    Criticality {
        /// How long a refusal of a level keeps every level below it refused
        /// ([`CriticalityLimitBuilder::hold`](rampart::limit::CriticalityLimitBuilder::hold)).
        hold: Duration,
    },
}

/// The server side of a contender: how its services admit work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSide {
    /// The queue discipline.
    pub admission: Admission,
    /// Read the wire as rampart-http's `InboundLayer` does: `X-Deadline-Ms` minus
    /// [`reserve`](Self::reserve) becomes the handler's ambient deadline (and the limit's
    /// ceiling), `X-Criticality` its level. Without it the service ignores both headers (a
    /// plain server); the levels are still counted for the report.
    pub inbound: bool,
    /// What the service keeps for itself from a received deadline (`InboundLayer::reserve`).
    pub reserve: Duration,
    /// Answer 504 at once, without work, when a request arrives with no more than the reserve
    /// left (`InboundLayer::reject_expired`); checked on arrival only, as the layer does.
    pub reject_expired: bool,
    /// Answer 504 at the deadline (received minus the reserve) a request that is still being
    /// handled, its work and calls dropped (`InboundLayer::enforce`): a hung request too.
    pub enforce: bool,
}

impl ServerSide {
    /// The configuration in one line, for the report.
    pub fn describe(&self) -> String {
        let admission = match self.admission {
            Admission::Fifo => "one FIFO queue of the service's queue length in front of its workers, 503 without Retry-After when full".to_owned(),
            Admission::Criticality { hold } => format!(
                "rampart's CriticalityLimit (capacity = workers, queue = the service's queue, hold {} s, arrival order within a level, min_time_left the measured hold: the limit's defaults), refusals and queue waits past the deadline answered 503 with Retry-After (whole seconds, at least 1)",
                hold.as_secs_f64()
            ),
        };
        if !self.inbound {
            return format!("{admission}; no deadline or criticality read");
        }
        format!(
            "{admission}; inbound edge as rampart-http's InboundLayer: X-Deadline-Ms minus a {} ms reserve, X-Criticality (CriticalPlus clamped), reject_expired {}, enforce {}",
            self.reserve.as_millis(),
            if self.reject_expired { "on" } else { "off" },
            if self.enforce { "on" } else { "off" }
        )
    }
}

/// A window of virtual time, from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Start, from the start of the run.
    pub from: Duration,
    /// End, from the start of the run.
    pub to: Duration,
}

impl Window {
    fn contains(&self, at: Duration) -> bool {
        self.from <= at && at < self.to
    }
}

/// Injected faults. The default injects none.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Share of handled requests that fail (after their service time).
    pub error_rate: f64,
    /// Share of handled requests that never answer (and hold no worker).
    pub hang_rate: f64,
    /// Share of handled requests that take [`straggler`](Self::straggler) instead of a draw.
    pub straggler_rate: f64,
    /// How long a straggler takes.
    pub straggler: Duration,
    /// While inside this window every request fails at once (connection refused).
    pub outage: Option<Window>,
    /// From this offset on, only this many workers. FIFO services only: a
    /// [`CriticalityLimit`]'s capacity is fixed when it is built, so [`Service::new`] refuses
    /// this with [`Admission::Criticality`].
    pub capacity_drop: Option<(Duration, u32)>,
}

/// A fault that starts and ends during a run (a graph file's `[[faults]]`); several may
/// overlap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimedFault {
    /// Inside the window every request fails at once (connection refused).
    Outage(Window),
    /// Inside the window every handler takes this much longer (counted from when it starts).
    AddedLatency(Window, Duration),
    /// Inside the window only this many workers (at least 1) serve; a [`CriticalityLimit`]
    /// gets this capacity at the window's start and its own back at the end.
    LostCapacity(Window, u32),
}
/// What a service is.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Its name in the report.
    pub name: &'static str,
    /// Requests handled at once.
    pub workers: u32,
    /// Requests waiting at most (beyond the ones being handled): the FIFO's places, or the
    /// [`CriticalityLimit`]'s queue.
    pub queue: usize,
    /// Time a handler works on a request before its downstream calls.
    pub service_time: ServiceTime,
    /// Time a handler works on a request that fails on its own
    /// ([`Faults::error_rate`]) before it fails; `None`: its `service_time`.
    pub error_time: Option<ServiceTime>,
    /// Injected faults.
    pub faults: Faults,
    /// Faults that start and end during the run (none in the built-in scenarios).
    pub timeline: Vec<TimedFault>,
    /// Where the level of a request comes from.
    pub levels: LevelSource,
    /// Record when each handler starts, and at what level (for priority inversions).
    pub record_starts: bool,
}

impl ServiceConfig {
    /// A service with no faults that reads levels from the wire.
    pub fn new(
        name: &'static str,
        workers: u32,
        queue: usize,
        service_time: impl Into<ServiceTime>,
    ) -> Self {
        ServiceConfig {
            name,
            workers,
            queue,
            service_time: service_time.into(),
            error_time: None,
            faults: Faults::default(),
            timeline: Vec::new(),
            levels: LevelSource::Wire,
            record_starts: false,
        }
    }

    /// Requests per second it can handle: workers over mean service time (faults aside).
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers) / self.service_time.mean().as_secs_f64()
    }
}

/// The calls a handler makes after its own work.
#[derive(Clone)]
pub enum Downstream {
    /// None: a leaf.
    None,
    /// One call through this client.
    Call(Rc<Client>),
    /// This many calls at once through this client; the answer waits for all of them and
    /// fails if any failed.
    FanOut(Rc<Client>, u32),
    /// A graph file's calls: steps in sequence, each step's calls at once.
    Plan(Rc<Plan>),
}

/// Counters of one service over a run. Counts marked *measured* only include requests whose
/// root fell in the measured window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceStats {
    /// Requests that reached the service (every attempt and hedge), measured.
    pub arrivals: u64,
    /// Requests handled to the end (answered Ok or with an injected error), measured.
    pub handled: u64,
    /// Requests rejected or shed because the queue was full (or refused by the limit), measured.
    pub shed: u64,
    /// Requests refused without work for their deadline (504 on arrival, or a wait for the
    /// limit that reached the deadline), measured.
    pub expired: u64,
    /// Requests that never answered, measured.
    pub hung: u64,
    /// Requests refused during an outage, measured.
    pub refused: u64,
    /// Worker time spent on measured requests.
    pub work: Duration,
    /// Worker time spent on measured requests whose root's caller had already stopped waiting
    /// when the work finished.
    pub wasted: Duration,
    /// Levels the handlers ran at, by [`Criticality`] order, measured.
    pub levels: [u64; 4],
    /// The largest queue length seen.
    pub max_queue: usize,
    /// When each handler started (from the start of the run) and its level, if the service
    /// records them (measured or not).
    pub starts: Vec<(Duration, Criticality)>,
}

struct Queued {
    request: Request,
    reply: oneshot::Sender<Reply>,
    deadline: Option<Instant>,
    level: Criticality,
    /// Its SERVER span, when the run records spans.
    span: Option<OpenSpan>,
}

impl Queued {
    /// Answers the request (and ends its span).
    fn answer(self, reply: Reply) {
        answer(self.reply, self.span, reply);
    }
}

struct State {
    /// Workers busy (FIFO services).
    busy: u32,
    /// The FIFO queue.
    queue: VecDeque<Queued>,
    rng: fastrand::Rng,
    stats: ServiceStats,
    /// Reply channels of requests that never answer, kept so their callers keep waiting.
    black_hole: Vec<oneshot::Sender<Reply>>,
}

/// A running simulated service. Lives on one thread (`Rc`), in a tokio `LocalSet`.
pub struct Service {
    config: ServiceConfig,
    server: ServerSide,
    downstream: Downstream,
    /// The admission limit of an [`Admission::Criticality`] service.
    limit: Option<CriticalityLimit>,
    start: Instant,
    state: RefCell<State>,
    /// Latest time any handler finished: for tests.
    last_finish: Cell<Option<Instant>>,
    /// Where its spans and its callers' go, when the run records spans.
    spans: OnceCell<Rc<SpanSink>>,
}

impl Service {
    /// A service started now (virtual time), its randomness seeded by `seed`. Fails when its
    /// limit cannot be built, or a capacity drop is asked of a limit-admitted service.
    pub fn new(
        config: ServiceConfig,
        server: ServerSide,
        downstream: Downstream,
        seed: u64,
    ) -> Result<Rc<Service>, SimError> {
        let limit = match server.admission {
            Admission::Fifo => None,
            Admission::Criticality { .. } if config.faults.capacity_drop.is_some() => {
                return Err(SimError::new(format!(
                    "{}: a capacity drop is simulated for FIFO services only",
                    config.name
                )));
            }
            Admission::Criticality { hold } => Some(
                CriticalityLimit::builder(usize::try_from(config.workers).unwrap_or(usize::MAX))
                    .queue(config.queue)
                    .hold(hold)
                    .build()?,
            ),
        };
        let service = Rc::new(Service {
            config,
            server,
            downstream,
            limit,
            start: Instant::now(),
            state: RefCell::new(State {
                busy: 0,
                queue: VecDeque::new(),
                rng: fastrand::Rng::with_seed(seed),
                stats: ServiceStats::default(),
                black_hole: Vec::new(),
            }),
            last_finish: Cell::new(None),
            spans: OnceCell::new(),
        });
        service.schedule_capacity();
        Ok(service)
    }

    /// For each [`TimedFault::LostCapacity`], a task that resizes the limit at the window's
    /// start and end (a limit-admitted service), or starts workers for what queued once the
    /// window ends (a FIFO service).
    fn schedule_capacity(self: &Rc<Self>) {
        for fault in &self.config.timeline {
            let &TimedFault::LostCapacity(window, left) = fault else {
                continue;
            };
            let service = Rc::clone(self);
            tokio::task::spawn_local(async move {
                let at = |offset| tokio::time::sleep_until(service.start + offset);
                if let Some(limit) = &service.limit {
                    at(window.from).await;
                    let workers = service.workers_at(Instant::now()).min(left).max(1);
                    let _ = limit.set_capacity(usize::try_from(workers).unwrap_or(1));
                    at(window.to).await;
                    let workers = service.workers_at(Instant::now());
                    let _ = limit.set_capacity(usize::try_from(workers).unwrap_or(1));
                } else {
                    at(window.to).await;
                    service.refill();
                }
            });
        }
    }

    /// Starts workers for queued requests while there are fewer busy than workers.
    fn refill(self: &Rc<Self>) {
        loop {
            let mut state = self.state.borrow_mut();
            if state.busy >= self.workers_at(Instant::now()) {
                return;
            }
            let Some(item) = self.next(&mut state) else {
                return;
            };
            state.busy += 1;
            drop(state);
            let service = Rc::clone(self);
            tokio::task::spawn_local(async move { service.work(item).await });
        }
    }

    /// Whether a [`TimedFault::Outage`] covers `at` (from the start of the run).
    fn out_at(&self, at: Duration) -> bool {
        self.config
            .timeline
            .iter()
            .any(|f| matches!(f, TimedFault::Outage(w) if w.contains(at)))
    }

    /// The latency every [`TimedFault::AddedLatency`] covering `at` adds.
    fn added_latency_at(&self, at: Duration) -> Duration {
        self.config
            .timeline
            .iter()
            .map(|f| match f {
                TimedFault::AddedLatency(w, added) if w.contains(at) => *added,
                _ => Duration::ZERO,
            })
            .sum()
    }

    /// Its configuration.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Records a SERVER span for each request it answers, and lets its callers' clients
    /// record their attempts, into `sink` (see [`crate::spans`]). A service records into one
    /// sink at most: a second call is ignored.
    pub fn record_spans(&self, sink: Rc<SpanSink>) {
        let _ = self.spans.set(sink);
    }

    /// The sink it records spans into, if any.
    pub fn span_sink(&self) -> Option<&Rc<SpanSink>> {
        self.spans.get()
    }

    /// Its counters so far.
    pub fn stats(&self) -> ServiceStats {
        self.state.borrow().stats.clone()
    }

    fn workers_at(&self, now: Instant) -> u32 {
        let since_start = now.duration_since(self.start);
        let workers = match self.config.faults.capacity_drop {
            Some((at, workers)) if since_start >= at => workers,
            _ => self.config.workers,
        };
        self.config
            .timeline
            .iter()
            .fold(workers, |workers, fault| match fault {
                TimedFault::LostCapacity(w, left) if w.contains(since_start) => workers.min(*left),
                _ => workers,
            })
    }

    /// Sends `request`; the receiver yields the reply (or never, for a request that hangs).
    pub fn submit(self: &Rc<Self>, request: Request) -> oneshot::Receiver<Reply> {
        let (reply, receiver) = oneshot::channel();
        let now = Instant::now();
        let measured = request.trace.measured;
        let mut state = self.state.borrow_mut();
        if measured {
            state.stats.arrivals += 1;
        }
        let since_start = now.duration_since(self.start);
        if self
            .config
            .faults
            .outage
            .is_some_and(|w| w.contains(since_start))
            || self.out_at(since_start)
        {
            if measured {
                state.stats.refused += 1;
            }
            let _ = reply.send(Err(Failure::Error));
            return receiver;
        }
        // The inbound edge: the wire values, read as rampart-http's InboundLayer reads them.
        let left = request
            .deadline_ms
            .filter(|&ms| ms > 0 && self.server.inbound)
            .map(Duration::from_millis);
        let deadline = left.map(|left| now + left.saturating_sub(self.server.reserve));
        let level = match self.config.levels {
            LevelSource::Wire => Criticality::from_inbound(request.criticality),
            LevelSource::Route => request.route,
        };
        let span = self.spans.get().map(|sink| {
            sink.open(
                SpanKind::Server,
                self.config.name,
                &request.trace,
                request.trace.span,
                0,
            )
        });
        let item = Queued {
            request,
            reply,
            deadline,
            level,
            span,
        };
        if self.server.reject_expired && left.is_some_and(|left| left <= self.server.reserve) {
            expire(&mut state, item, Failure::Expired);
            return receiver;
        }
        if self.limit.is_some() {
            drop(state);
            let service = Rc::clone(self);
            tokio::task::spawn_local(async move { service.admit(item).await });
            return receiver;
        }
        if state.busy < self.workers_at(now) {
            state.busy += 1;
            drop(state);
            let service = Rc::clone(self);
            tokio::task::spawn_local(async move { service.work(item).await });
            return receiver;
        }
        self.enqueue(&mut state, item);
        receiver
    }

    /// Queues `item` in the FIFO, or rejects it when the queue is full.
    fn enqueue(&self, state: &mut State, item: Queued) {
        if state.queue.len() >= self.config.queue {
            shed(state, item, Failure::Overloaded(None));
            return;
        }
        state.queue.push_back(item);
        state.stats.max_queue = state.stats.max_queue.max(state.queue.len());
    }

    /// Admits `item` through the limit (waiting at most until its deadline), handles it, and
    /// gives the permit back with how the handler went.
    async fn admit(self: Rc<Self>, item: Queued) {
        let Some(limit) = &self.limit else {
            return;
        };
        let mut cx = AdmitContext::new(self.config.name, item.level, Instant::now());
        cx.deadline = item.deadline;
        let mut acquire = std::pin::pin!(limit.acquire(&cx));
        // One poll answers at once or queues the request: then read the queue's length.
        let first = std::future::poll_fn(|task| Poll::Ready(acquire.as_mut().poll(task))).await;
        {
            let mut state = self.state.borrow_mut();
            state.stats.max_queue = state.stats.max_queue.max(limit.queued());
        }
        let answer = match (first, item.deadline) {
            (Poll::Ready(answer), _) => Some(answer),
            (Poll::Pending, None) => Some(acquire.await),
            (Poll::Pending, Some(deadline)) => {
                tokio::time::timeout_at(deadline, acquire).await.ok()
            }
        };
        let permit = match answer {
            Some(Ok(permit)) => permit,
            Some(Err(refusal)) => {
                let after = whole_seconds(refusal.retry_after);
                shed(
                    &mut self.state.borrow_mut(),
                    item,
                    Failure::Overloaded(Some(after)),
                );
                return;
            }
            None => {
                // rampart-http: "a queue wait that outlasts the deadline is answered 503".
                let after = whole_seconds(None);
                expire(
                    &mut self.state.borrow_mut(),
                    item,
                    Failure::Overloaded(Some(after)),
                );
                return;
            }
        };
        let began = Instant::now();
        match self.handle(item).await {
            Some(reply) => {
                let outcome = match classify(&reply) {
                    Verdict::Ok => AttemptOutcome::Ok,
                    Verdict::Throttled { .. } => AttemptOutcome::Throttled,
                    _ => AttemptOutcome::Transient,
                };
                limit.release(permit, Feedback::new(outcome, Instant::now() - began));
            }
            // A hung request holds no worker: its slot is free at once.
            None => drop(permit),
        }
    }

    /// The next request to handle from the FIFO.
    fn next(&self, state: &mut State) -> Option<Queued> {
        state.queue.pop_front()
    }

    /// One worker: handles `first`, then whatever is queued, then leaves.
    async fn work(self: Rc<Self>, first: Queued) {
        let mut item = first;
        loop {
            let _ = self.handle(item).await;
            let now = Instant::now();
            let mut state = self.state.borrow_mut();
            if state.busy > self.workers_at(now) {
                state.busy -= 1;
                return;
            }
            match self.next(&mut state) {
                Some(next) => item = next,
                None => {
                    state.busy -= 1;
                    return;
                }
            }
        }
    }

    /// Handles one request inside the ambient scope its wire values describe; returns the reply
    /// it sent, `None` when it hung.
    async fn handle(&self, item: Queued) -> Option<Reply> {
        let Queued {
            request,
            reply,
            deadline,
            level,
            span,
        } = item;
        let measured = request.trace.measured;
        let faults = &self.config.faults;
        let (hang, took, failed) = {
            let mut state = self.state.borrow_mut();
            if measured {
                state.stats.levels[level as usize] += 1;
            }
            if self.config.record_starts {
                let at = Instant::now().duration_since(self.start);
                state.stats.starts.push((at, level));
            }
            let rng = &mut state.rng;
            let hang = faults.hang_rate > 0.0 && rng.f64() < faults.hang_rate;
            let straggles = faults.straggler_rate > 0.0 && rng.f64() < faults.straggler_rate;
            let took = if straggles {
                faults.straggler
            } else {
                self.config.service_time.sample(rng)
            };
            let since_start = Instant::now().duration_since(self.start);
            let took = took + self.added_latency_at(since_start);
            let failed = faults.error_rate > 0.0 && rng.f64() < faults.error_rate;
            // Drawn only for a failure with a time of its own, so that a service without one
            // draws exactly what it drew before.
            let took = match (&self.config.error_time, failed) {
                (Some(error_time), true) => {
                    error_time.sample(rng) + self.added_latency_at(since_start)
                }
                _ => took,
            };
            (hang, took, failed)
        };
        // With `enforce`, the inbound layer answers 504 at the deadline whatever the handler
        // is doing.
        let cut = deadline.filter(|_| self.server.inbound && self.server.enforce);
        if hang {
            let mut state = self.state.borrow_mut();
            if measured {
                state.stats.hung += 1;
            }
            let Some(at) = cut else {
                state.black_hole.push(reply);
                return None;
            };
            drop(state);
            // Holds no worker, as an unanswered hung request holds none.
            tokio::task::spawn_local(async move {
                tokio::time::sleep_until(at).await;
                answer(reply, span, Err(Failure::Expired));
            });
            return None;
        }
        let began = Instant::now();
        let worked = match cut {
            Some(at) => tokio::time::timeout_at(at, tokio::time::sleep(took))
                .await
                .is_ok(),
            None => {
                tokio::time::sleep(took).await;
                true
            }
        };
        let done = Instant::now();
        self.last_finish.set(Some(done));
        {
            let mut state = self.state.borrow_mut();
            if measured {
                let spent = done - began;
                state.stats.work += spent;
                if done > request.trace.root_deadline {
                    state.stats.wasted += spent;
                }
                state.stats.handled += 1;
            }
        }
        let trace = Trace {
            span: span.as_ref().map(OpenSpan::parent),
            ..request.trace
        };
        if !worked {
            answer(reply, span, Err(Failure::Expired));
            return Some(Err(Failure::Expired));
        }
        if failed {
            answer(reply, span, Err(Failure::Error));
            return Some(Err(Failure::Error));
        }
        if matches!(self.downstream, Downstream::None) {
            // A leaf: no calls to make, so no scope to build for them.
            answer(reply, span, Ok(()));
            return Some(Ok(()));
        }
        let mut ambient = Ambient::new();
        if let Some(deadline) = deadline {
            ambient = ambient.with_deadline(Deadline::at(deadline));
        }
        if request.criticality.is_some() || self.config.levels == LevelSource::Route {
            ambient = ambient.with_criticality(level);
        }
        // Bound inside a synchronous scope rather than with `ambient.scope(..)`: that one is
        // an `async fn` holding the calls' future twice (as its argument and as what it
        // awaits), which would make every worker task 0.5 KB larger. The same context either
        // way: a worker task has none of its own to merge with.
        let calls = ambient.sync_scope(|| Ambient::bind(self.call_downstream(trace)));
        let outcome = match cut {
            Some(at) => tokio::time::timeout_at(at, calls)
                .await
                .unwrap_or(Err(Failure::Expired)),
            None => calls.await,
        };
        answer(reply, span, outcome);
        Some(outcome)
    }

    async fn call_downstream(&self, trace: Trace) -> Reply {
        match &self.downstream {
            Downstream::None => Ok(()),
            Downstream::Call(client) => client.call(trace, Criticality::current()).await,
            Downstream::FanOut(client, n) => {
                let level = Criticality::current();
                let legs: Vec<_> = (0..*n)
                    .map(|_| {
                        let client = Rc::clone(client);
                        tokio::task::spawn_local(Ambient::bind(async move {
                            client.call(trace, level).await
                        }))
                    })
                    .collect();
                let mut outcome = Ok(());
                for leg in legs {
                    match leg.await {
                        Ok(Ok(())) => {}
                        Ok(Err(failure)) => outcome = outcome.and(Err(failure)),
                        Err(_) => outcome = outcome.and(Err(Failure::Error)),
                    }
                }
                outcome
            }
            Downstream::Plan(plan) => plan.call(trace).await,
        }
    }
}

/// Sends `outcome` to the caller and ends the request's span with it.
fn answer(reply: oneshot::Sender<Reply>, span: Option<OpenSpan>, outcome: Reply) {
    let _ = reply.send(outcome);
    if let Some(span) = span {
        span.end(&outcome);
    }
}

fn shed(state: &mut State, item: Queued, why: Failure) {
    if item.request.trace.measured {
        state.stats.shed += 1;
    }
    item.answer(Err(why));
}

fn expire(state: &mut State, item: Queued, why: Failure) {
    if item.request.trace.measured {
        state.stats.expired += 1;
    }
    item.answer(Err(why));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::LogNormal;
    use crate::sim::virtual_time;

    const MS: Duration = Duration::from_millis(1);

    fn config(workers: u32, queue: usize) -> ServiceConfig {
        ServiceConfig::new(
            "svc",
            workers,
            queue,
            LogNormal::from_median_p99(10 * MS, 10 * MS),
        )
    }

    const FIFO: ServerSide = ServerSide {
        admission: Admission::Fifo,
        inbound: false,
        reserve: Duration::ZERO,
        reject_expired: false,
        enforce: false,
    };
    const RAMPART: ServerSide = ServerSide {
        admission: Admission::Criticality {
            hold: Duration::from_secs(1),
        },
        inbound: true,
        reserve: Duration::from_millis(5),
        reject_expired: true,
        enforce: false,
    };
    const SHED: Reply = Err(Failure::Overloaded(Some(Duration::from_secs(1))));

    fn request(deadline_ms: Option<u64>, level: Criticality) -> Request {
        Request {
            deadline_ms,
            criticality: Some(level.as_str()),
            route: level,
            trace: Trace {
                root: 0,
                root_deadline: Instant::now() + Duration::from_secs(60),
                measured: true,
                span: None,
            },
        }
    }

    /// Submits every request at once; returns each reply with when it came.
    async fn replies(service: &Rc<Service>, requests: Vec<Request>) -> Vec<(Reply, Duration)> {
        let start = Instant::now();
        let waits: Vec<_> = requests
            .into_iter()
            .map(|r| {
                let receiver = service.submit(r);
                tokio::task::spawn_local(async move {
                    let reply = receiver.await.unwrap_or(Err(Failure::Error));
                    (reply, Instant::now() - start)
                })
            })
            .collect();
        let mut out = Vec::new();
        for wait in waits {
            out.push(wait.await.unwrap_or((Err(Failure::Error), Duration::MAX)));
        }
        out
    }

    #[test]
    fn a_fifo_queue_serves_in_order_and_rejects_when_full() {
        let out = virtual_time(|| async {
            let s = Service::new(config(1, 1), FIFO, Downstream::None, 1).unwrap();
            let r = request(None, Criticality::Critical);
            let out = replies(&s, vec![r, r, r]).await;
            (out, s.stats())
        })
        .expect("runtime");
        let (out, stats) = out;
        assert_eq!(out[0], (Ok(()), 10 * MS));
        assert_eq!(out[1], (Ok(()), 20 * MS));
        assert_eq!(out[2].0, Err(Failure::Overloaded(None)));
        assert_eq!((stats.arrivals, stats.handled, stats.shed), (3, 2, 1));
        assert_eq!(stats.work, 20 * MS);
    }

    #[test]
    fn the_criticality_limit_sheds_the_lowest_level_and_serves_the_highest_first() {
        let (out, levels) = virtual_time(|| async {
            let s = Service::new(config(1, 2), RAMPART, Downstream::None, 1).unwrap();
            let out = replies(
                &s,
                vec![
                    request(None, Criticality::Sheddable), // straight to the worker
                    request(None, Criticality::Sheddable), // queued
                    request(None, Criticality::SheddablePlus), // queued
                    request(None, Criticality::Critical),  // full: evicts the Sheddable
                    request(None, Criticality::Sheddable), // full, nothing lower: rejected
                ],
            )
            .await;
            (out, s.stats().levels)
        })
        .expect("runtime");
        assert_eq!(out[0], (Ok(()), 10 * MS));
        assert_eq!(out[1].0, SHED);
        assert_eq!(out[3], (Ok(()), 20 * MS), "Critical before SheddablePlus");
        assert_eq!(out[2], (Ok(()), 30 * MS));
        assert_eq!(out[4].0, SHED);
        assert_eq!(levels, [1, 1, 1, 0]);
    }

    #[test]
    fn a_refused_level_keeps_the_levels_below_it_refused_for_the_hold() {
        let out = virtual_time(|| async {
            let s = Service::new(config(1, 1), RAMPART, Downstream::None, 1).unwrap();
            let critical = request(None, Criticality::Critical);
            let sheddable = request(None, Criticality::Sheddable);
            // Running, queued, refused (nothing lower to evict), refused by the hold.
            let mut out = replies(&s, vec![critical, critical, critical, sheddable]).await;
            // Nothing waits now, but the hold (1 s) is not over.
            out.extend(replies(&s, vec![sheddable]).await);
            tokio::time::sleep(Duration::from_secs(1)).await;
            out.extend(replies(&s, vec![sheddable]).await);
            out
        })
        .expect("runtime");
        assert_eq!(out[0], (Ok(()), 10 * MS));
        assert_eq!(out[1], (Ok(()), 20 * MS));
        assert_eq!(out[2].0, SHED);
        assert_eq!(out[3].0, SHED);
        assert_eq!(out[4].0, SHED, "held at 20 ms");
        assert_eq!(out[5], (Ok(()), 10 * MS), "the hold is over");
    }

    #[test]
    fn a_request_waits_for_the_limit_no_longer_than_its_deadline_less_the_reserve() {
        let (out, stats) = virtual_time(|| async {
            let s = Service::new(config(1, 5), RAMPART, Downstream::None, 1).unwrap();
            let out = replies(
                &s,
                vec![
                    request(Some(1_000), Criticality::Critical),
                    request(Some(1_000), Criticality::Critical),
                    request(Some(20), Criticality::Critical),
                ],
            )
            .await;
            (out, s.stats())
        })
        .expect("runtime");
        assert_eq!(out[0], (Ok(()), 10 * MS));
        assert_eq!(out[1], (Ok(()), 20 * MS));
        // Its ceiling is 20 ms less the 5 ms reserve. When the first slot frees at 10 ms it has
        // 5 ms left, under the 10 ms a permit is held: the limit refuses it then, rather than
        // let it wait to its ceiling or start work that cannot finish.
        assert_eq!(
            out[2],
            (SHED, 10 * MS),
            "refused at 10 ms, before its 15 ms ceiling"
        );
        assert_eq!(
            (stats.handled, stats.shed, stats.expired, stats.max_queue),
            (2, 1, 0, 2)
        );
    }

    #[test]
    fn a_limit_admitted_service_refuses_a_capacity_drop() {
        let mut c = config(2, 10);
        c.faults.capacity_drop = Some((Duration::ZERO, 1));
        let built =
            virtual_time(|| async { Service::new(c, RAMPART, Downstream::None, 1).is_err() })
                .expect("runtime");
        assert!(built);
    }

    #[test]
    fn the_wire_clamps_critical_plus_and_a_route_edge_does_not() {
        let (wire, route) = virtual_time(|| async {
            let mut r = request(None, Criticality::CriticalPlus);
            let wire = Service::new(config(1, 1), RAMPART, Downstream::None, 1).unwrap();
            replies(&wire, vec![r]).await;
            let mut edge = config(1, 1);
            edge.levels = LevelSource::Route;
            let route = Service::new(edge, RAMPART, Downstream::None, 1).unwrap();
            r.criticality = None;
            replies(&route, vec![r]).await;
            (wire.stats().levels, route.stats().levels)
        })
        .expect("runtime");
        assert_eq!(wire, [0, 0, 1, 0]);
        assert_eq!(route, [0, 0, 0, 1]);
    }

    #[test]
    fn a_deadline_no_longer_than_the_reserve_gets_504_without_work_and_a_longer_one_is_served() {
        let (out, stats) = virtual_time(|| async {
            let s = Service::new(config(1, 1), RAMPART, Downstream::None, 1).unwrap();
            let out = replies(
                &s,
                vec![
                    request(Some(5), Criticality::Critical),
                    // 1 ms after the reserve: served, and late (a configured reserve, not an
                    // oracle of the service time).
                    request(Some(6), Criticality::Critical),
                ],
            )
            .await;
            (out, s.stats())
        })
        .expect("runtime");
        assert_eq!(out[0], (Err(Failure::Expired), Duration::ZERO));
        assert_eq!(out[1], (Ok(()), 10 * MS));
        assert_eq!((stats.expired, stats.handled), (1, 1));
    }

    #[test]
    fn enforce_answers_504_at_the_deadline_less_the_reserve_work_and_hangs_alike() {
        const ENFORCED: ServerSide = ServerSide {
            admission: Admission::Fifo,
            inbound: true,
            reserve: Duration::from_millis(5),
            reject_expired: true,
            enforce: true,
        };
        let (work, hang, none) = virtual_time(|| async {
            let s = Service::new(config(2, 10), ENFORCED, Downstream::None, 1).unwrap();
            // 10 ms of work: cut at 12 − 5 ms, done within 20 − 5 ms.
            let work = replies(
                &s,
                vec![
                    request(Some(12), Criticality::Critical),
                    request(Some(20), Criticality::Critical),
                ],
            )
            .await;
            let mut c = config(1, 10);
            c.faults.hang_rate = 1.0;
            let s = Service::new(c, ENFORCED, Downstream::None, 1).unwrap();
            // Each answered at its own deadline: the first holds the one worker no longer
            // than an unanswered hung request would.
            let hang = replies(
                &s,
                vec![
                    request(Some(50), Criticality::Critical),
                    request(Some(30), Criticality::Critical),
                ],
            )
            .await;
            let receiver = s.submit(request(None, Criticality::Critical));
            let none = tokio::time::timeout(Duration::from_secs(60), receiver).await;
            (work, hang, none.is_err())
        })
        .expect("runtime");
        assert_eq!(work, [(Err(Failure::Expired), 7 * MS), (Ok(()), 10 * MS)]);
        assert_eq!(
            hang,
            [
                (Err(Failure::Expired), 45 * MS),
                (Err(Failure::Expired), 25 * MS)
            ]
        );
        assert!(none, "with no deadline, a hung request never answers");
    }

    #[test]
    fn timed_faults_strike_inside_their_window_only() {
        let window = |from: u32, to: u32| Window {
            from: from * MS,
            to: to * MS,
        };
        let (outage, slow, fifo, limit) = virtual_time(|| async {
            let r = request(None, Criticality::Critical);
            let mut c = config(2, 10);
            c.timeline = vec![TimedFault::Outage(window(50, 100))];
            let s = Service::new(c, FIFO, Downstream::None, 1).unwrap();
            let mut outage = replies(&s, vec![r]).await;
            tokio::time::sleep(50 * MS).await;
            outage.extend(replies(&s, vec![r]).await);
            tokio::time::sleep(50 * MS).await;
            outage.extend(replies(&s, vec![r]).await);

            let mut c = config(2, 10);
            c.timeline = vec![
                TimedFault::AddedLatency(window(0, 20), 5 * MS),
                TimedFault::AddedLatency(window(0, 100), 10 * MS),
            ];
            let s = Service::new(c, FIFO, Downstream::None, 1).unwrap();
            let mut slow = replies(&s, vec![r]).await;
            tokio::time::sleep(100 * MS).await;
            slow.extend(replies(&s, vec![r]).await);

            // Two workers, one of them lost from 0 to 15 ms: the second request waits for the
            // first, the third (sent once the window is over) does not.
            let mut c = config(2, 10);
            c.timeline = vec![TimedFault::LostCapacity(window(0, 15), 1)];
            let s = Service::new(c, FIFO, Downstream::None, 1).unwrap();
            let mut fifo = replies(&s, vec![r, r]).await;
            fifo.extend(replies(&s, vec![r, r]).await);

            let mut c = config(2, 10);
            c.timeline = vec![TimedFault::LostCapacity(window(0, 15), 1)];
            let s = Service::new(c, RAMPART, Downstream::None, 1).unwrap();
            tokio::task::yield_now().await;
            let limit = replies(&s, vec![r, r]).await;
            (outage, slow, fifo, limit)
        })
        .expect("runtime");
        assert_eq!(outage[0], (Ok(()), 10 * MS), "before the window");
        assert_eq!(
            outage[1],
            (Err(Failure::Error), Duration::ZERO),
            "inside it"
        );
        assert_eq!(outage[2], (Ok(()), 10 * MS), "after it");
        assert_eq!(slow[0], (Ok(()), 25 * MS), "both windows add their latency");
        assert_eq!(slow[1], (Ok(()), 10 * MS), "none after them");
        assert_eq!(fifo[1], (Ok(()), 20 * MS), "one worker inside the window");
        assert_eq!((fifo[2], fifo[3]), ((Ok(()), 10 * MS), (Ok(()), 10 * MS)));
        assert_eq!(limit[1], (Ok(()), 20 * MS), "the limit resized to one");
    }

    #[test]
    fn outages_capacity_drops_and_hangs_do_what_they_say() {
        let (outage, drop, hang) = virtual_time(|| async {
            let r = request(None, Criticality::Critical);
            let mut c = config(2, 10);
            c.faults.outage = Some(Window {
                from: Duration::ZERO,
                to: 100 * MS,
            });
            let s = Service::new(c, FIFO, Downstream::None, 1).unwrap();
            let mut outage = replies(&s, vec![r]).await;
            tokio::time::sleep(100 * MS).await;
            outage.extend(replies(&s, vec![r]).await);

            let mut c = config(2, 10);
            c.faults.capacity_drop = Some((Duration::ZERO, 1));
            let s = Service::new(c, FIFO, Downstream::None, 1).unwrap();
            let drop = replies(&s, vec![r, r]).await;

            let mut c = config(2, 10);
            c.faults.hang_rate = 1.0;
            let s = Service::new(c, FIFO, Downstream::None, 1).unwrap();
            let receiver = s.submit(r);
            let hang = tokio::time::timeout(Duration::from_secs(60), receiver).await;
            (outage, drop, hang.is_err())
        })
        .expect("runtime");
        assert_eq!(outage[0], (Err(Failure::Error), Duration::ZERO));
        assert_eq!(outage[1], (Ok(()), 10 * MS));
        assert_eq!(
            drop[1],
            (Ok(()), 20 * MS),
            "one worker left: the second waits"
        );
        assert!(hang, "a hung request never answers");
    }
}
