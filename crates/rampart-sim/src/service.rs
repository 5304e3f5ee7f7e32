//! A simulated service: `workers` handlers, a bounded queue, a lognormal service time, injected
//! faults, and the downstream calls each handler makes through a client.
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
//! Time is tokio's paused clock, whose timer wheel ticks in whole milliseconds: every service
//! time is rounded up to the next millisecond.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use rampart::{Ambient, Criticality, Deadline, Instant};
use tokio::sync::oneshot;

use crate::contender::Client;
use crate::dist::LogNormal;

/// Why a request failed, as its caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The handler failed (an HTTP 500), or the service was down (connection refused).
    Error,
    /// The service shed the request: its queue was full (an HTTP 503).
    Overloaded,
    /// The request's deadline had passed, or too little of it was left to answer (an HTTP 504
    /// from the inbound edge).
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

/// How a service queues and sheds, and whether it honours the deadline it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// One FIFO queue; a request arriving at a full queue is rejected.
    Fifo,
    /// **Stand-in for rampart's criticality-aware limiter** (being built in parallel, not yet
    /// available): the queue is ordered by level, then arrival; a full queue first drops
    /// requests that cannot be answered in time, then sheds the newest request of the lowest
    /// level below the arriving one, else rejects the arriving one.
    Shedding,
}

/// The server side of a contender: how its services admit work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSide {
    /// The queue discipline.
    pub admission: Admission,
    /// Answer `Expired` at once, without work, when a request's propagated deadline leaves
    /// less than its p99 service time (rampart-http's `reject_expired`, simulated here).
    pub reject_expired: bool,
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
    /// From this offset on, only this many workers.
    pub capacity_drop: Option<(Duration, u32)>,
}

/// What a service is.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Its name in the report.
    pub name: &'static str,
    /// Requests handled at once.
    pub workers: u32,
    /// Requests waiting at most (beyond the ones being handled).
    pub queue: usize,
    /// Time a handler works on a request before its downstream calls.
    pub service_time: LogNormal,
    /// Injected faults.
    pub faults: Faults,
    /// Where the level of a request comes from.
    pub levels: LevelSource,
    /// Record when each handler starts, and at what level (for priority inversions).
    pub record_starts: bool,
}

impl ServiceConfig {
    /// A service with no faults that reads levels from the wire.
    pub fn new(name: &'static str, workers: u32, queue: usize, service_time: LogNormal) -> Self {
        ServiceConfig {
            name,
            workers,
            queue,
            service_time,
            faults: Faults::default(),
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
}

/// Counters of one service over a run. Counts marked *measured* only include requests whose
/// root fell in the measured window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceStats {
    /// Requests that reached the service (every attempt and hedge), measured.
    pub arrivals: u64,
    /// Requests handled to the end (answered Ok or with an injected error), measured.
    pub handled: u64,
    /// Requests rejected or shed because the queue was full, measured.
    pub shed: u64,
    /// Requests answered `Expired` without work, measured.
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
}

struct State {
    busy: u32,
    /// One FIFO per level (a FIFO service uses only the first).
    queues: [VecDeque<Queued>; 4],
    queued: usize,
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
    start: Instant,
    min_time: Duration,
    state: RefCell<State>,
    /// Latest time any handler finished: for tests.
    last_finish: Cell<Option<Instant>>,
}

impl Service {
    /// A service started now (virtual time), its randomness seeded by `seed`.
    pub fn new(
        config: ServiceConfig,
        server: ServerSide,
        downstream: Downstream,
        seed: u64,
    ) -> Rc<Service> {
        let min_time = config.service_time.quantile(0.99);
        Rc::new(Service {
            config,
            server,
            downstream,
            start: Instant::now(),
            min_time,
            state: RefCell::new(State {
                busy: 0,
                queues: Default::default(),
                queued: 0,
                rng: fastrand::Rng::with_seed(seed),
                stats: ServiceStats::default(),
                black_hole: Vec::new(),
            }),
            last_finish: Cell::new(None),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Its counters so far.
    pub fn stats(&self) -> ServiceStats {
        self.state.borrow().stats.clone()
    }

    fn workers_at(&self, now: Instant) -> u32 {
        match self.config.faults.capacity_drop {
            Some((at, workers)) if now.duration_since(self.start) >= at => workers,
            _ => self.config.workers,
        }
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
        {
            if measured {
                state.stats.refused += 1;
            }
            let _ = reply.send(Err(Failure::Error));
            return receiver;
        }
        // The inbound edge: the wire values, read as rampart-http reads them.
        let deadline = request
            .deadline_ms
            .filter(|&ms| ms > 0)
            .map(|ms| now + Duration::from_millis(ms));
        let level = match self.config.levels {
            LevelSource::Wire => Criticality::from_inbound(request.criticality),
            LevelSource::Route => request.route,
        };
        let item = Queued {
            request,
            reply,
            deadline,
            level,
        };
        if state.busy < self.workers_at(now) {
            state.busy += 1;
            drop(state);
            let service = Rc::clone(self);
            tokio::task::spawn_local(async move { service.work(item).await });
            return receiver;
        }
        self.enqueue(&mut state, item, now);
        receiver
    }

    /// Whether a request can no longer be answered in time (only when the server honours
    /// propagated deadlines and one was sent).
    fn hopeless(&self, item: &Queued, now: Instant) -> bool {
        self.server.reject_expired
            && item
                .deadline
                .is_some_and(|d| d.saturating_duration_since(now) < self.min_time)
    }

    fn enqueue(&self, state: &mut State, item: Queued, now: Instant) {
        let slot = match self.server.admission {
            Admission::Fifo => 0,
            Admission::Shedding => item.level as usize,
        };
        if state.queued >= self.config.queue {
            match self.server.admission {
                Admission::Fifo => {
                    shed(state, item, Failure::Overloaded);
                    return;
                }
                Admission::Shedding => {
                    // Drop what cannot be answered in time first (oldest first in each level).
                    for level in 0..4 {
                        while state.queues[level]
                            .front()
                            .is_some_and(|q| self.hopeless(q, now))
                        {
                            if let Some(dead) = state.queues[level].pop_front() {
                                state.queued -= 1;
                                expire(state, dead);
                            }
                        }
                    }
                    if state.queued >= self.config.queue {
                        let lowest = (0..4).find(|&l| !state.queues[l].is_empty());
                        match lowest {
                            Some(lowest) if lowest < slot => {
                                if let Some(victim) = state.queues[lowest].pop_back() {
                                    state.queued -= 1;
                                    shed(state, victim, Failure::Overloaded);
                                }
                            }
                            _ => {
                                shed(state, item, Failure::Overloaded);
                                return;
                            }
                        }
                    }
                }
            }
        }
        state.queues[slot].push_back(item);
        state.queued += 1;
        state.stats.max_queue = state.stats.max_queue.max(state.queued);
    }

    /// The next request to handle: the oldest of the highest level, skipping hopeless ones.
    fn next(&self, state: &mut State, now: Instant) -> Option<Queued> {
        for level in (0..4).rev() {
            while let Some(item) = state.queues[level].pop_front() {
                state.queued -= 1;
                if self.hopeless(&item, now) {
                    expire(state, item);
                    continue;
                }
                return Some(item);
            }
        }
        None
    }

    /// One worker: handles `first`, then whatever is queued, then leaves.
    async fn work(self: Rc<Self>, first: Queued) {
        let mut item = first;
        loop {
            let now = Instant::now();
            if self.hopeless(&item, now) {
                expire(&mut self.state.borrow_mut(), item);
            } else {
                self.handle(item).await;
            }
            let now = Instant::now();
            let mut state = self.state.borrow_mut();
            if state.busy > self.workers_at(now) {
                state.busy -= 1;
                return;
            }
            match self.next(&mut state, now) {
                Some(next) => item = next,
                None => {
                    state.busy -= 1;
                    return;
                }
            }
        }
    }

    /// Handles one request inside the ambient scope its wire values describe.
    async fn handle(&self, item: Queued) {
        let Queued {
            request,
            reply,
            deadline,
            level,
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
            let failed = faults.error_rate > 0.0 && rng.f64() < faults.error_rate;
            (hang, took, failed)
        };
        if hang {
            let mut state = self.state.borrow_mut();
            if measured {
                state.stats.hung += 1;
            }
            state.black_hole.push(reply);
            return;
        }
        let began = Instant::now();
        tokio::time::sleep(took).await;
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
        if failed {
            let _ = reply.send(Err(Failure::Error));
            return;
        }
        let mut ambient = Ambient::new();
        if let Some(deadline) = deadline {
            ambient = ambient.with_deadline(Deadline::at(deadline));
        }
        if request.criticality.is_some() || self.config.levels == LevelSource::Route {
            ambient = ambient.with_criticality(level);
        }
        let outcome = ambient.scope(self.call_downstream(request.trace)).await;
        let _ = reply.send(outcome);
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
        }
    }
}

fn shed(state: &mut State, item: Queued, why: Failure) {
    if item.request.trace.measured {
        state.stats.shed += 1;
    }
    let _ = item.reply.send(Err(why));
}

fn expire(state: &mut State, item: Queued) {
    if item.request.trace.measured {
        state.stats.expired += 1;
    }
    let _ = item.reply.send(Err(Failure::Expired));
}

#[cfg(test)]
mod tests {
    use super::*;
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
        reject_expired: false,
    };
    const RAMPART: ServerSide = ServerSide {
        admission: Admission::Shedding,
        reject_expired: true,
    };

    fn request(deadline_ms: Option<u64>, level: Criticality) -> Request {
        Request {
            deadline_ms,
            criticality: Some(level.as_str()),
            route: level,
            trace: Trace {
                root: 0,
                root_deadline: Instant::now() + Duration::from_secs(60),
                measured: true,
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
            let s = Service::new(config(1, 1), FIFO, Downstream::None, 1);
            let r = request(None, Criticality::Critical);
            let out = replies(&s, vec![r, r, r]).await;
            (out, s.stats())
        })
        .expect("runtime");
        let (out, stats) = out;
        assert_eq!(out[0], (Ok(()), 10 * MS));
        assert_eq!(out[1], (Ok(()), 20 * MS));
        assert_eq!(out[2].0, Err(Failure::Overloaded));
        assert_eq!((stats.arrivals, stats.handled, stats.shed), (3, 2, 1));
        assert_eq!(stats.work, 20 * MS);
    }

    #[test]
    fn the_stand_in_sheds_the_lowest_level_and_serves_the_highest_first() {
        let (out, levels) = virtual_time(|| async {
            let s = Service::new(config(1, 2), RAMPART, Downstream::None, 1);
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
        assert_eq!(out[1].0, Err(Failure::Overloaded));
        assert_eq!(out[3], (Ok(()), 20 * MS), "Critical before SheddablePlus");
        assert_eq!(out[2], (Ok(()), 30 * MS));
        assert_eq!(out[4].0, Err(Failure::Overloaded));
        assert_eq!(levels, [1, 1, 1, 0]);
    }

    #[test]
    fn the_wire_clamps_critical_plus_and_a_route_edge_does_not() {
        let (wire, route) = virtual_time(|| async {
            let mut r = request(None, Criticality::CriticalPlus);
            let wire = Service::new(config(1, 1), RAMPART, Downstream::None, 1);
            replies(&wire, vec![r]).await;
            let mut edge = config(1, 1);
            edge.levels = LevelSource::Route;
            let route = Service::new(edge, RAMPART, Downstream::None, 1);
            r.criticality = None;
            replies(&route, vec![r]).await;
            (wire.stats().levels, route.stats().levels)
        })
        .expect("runtime");
        assert_eq!(wire, [0, 0, 1, 0]);
        assert_eq!(route, [0, 0, 0, 1]);
    }

    #[test]
    fn a_propagated_deadline_too_short_to_answer_gets_504_without_work() {
        let (out, stats) = virtual_time(|| async {
            let s = Service::new(config(1, 1), RAMPART, Downstream::None, 1);
            let out = replies(
                &s,
                vec![
                    request(Some(5), Criticality::Critical),
                    request(Some(50), Criticality::Critical),
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
    fn outages_capacity_drops_and_hangs_do_what_they_say() {
        let (outage, drop, hang) = virtual_time(|| async {
            let r = request(None, Criticality::Critical);
            let mut c = config(2, 10);
            c.faults.outage = Some(Window {
                from: Duration::ZERO,
                to: 100 * MS,
            });
            let s = Service::new(c, FIFO, Downstream::None, 1);
            let mut outage = replies(&s, vec![r]).await;
            tokio::time::sleep(100 * MS).await;
            outage.extend(replies(&s, vec![r]).await);

            let mut c = config(2, 10);
            c.faults.capacity_drop = Some((Duration::ZERO, 1));
            let s = Service::new(c, FIFO, Downstream::None, 1);
            let drop = replies(&s, vec![r, r]).await;

            let mut c = config(2, 10);
            c.faults.hang_rate = 1.0;
            let s = Service::new(c, FIFO, Downstream::None, 1);
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
