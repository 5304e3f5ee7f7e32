//! A call graph described in a file (TOML): services, their calls and client policies by name,
//! the root traffic over time and faults over time; checked with every problem at once under
//! its key path, then run by [`run()`] on the simulator's engine (the real rampart executor
//! against simulated services, in virtual time).
//!
//! Teams change retry, timeout, budget and hedging settings blind; a graph file describes
//! their own services, so that `rampart-sim what-if` ([`crate::whatif`]) can run the same
//! traffic and faults under two policy files and show what each setting moves.
//! `crates/rampart-sim/graphs/shop.toml` is a documented example.
//!
//! ```toml
//! entry = "frontend"                   # the service the edge sends root requests to
//!
//! [services.frontend]
//! workers = 32
//! queue = 64
//! admission = "criticality"            # rampart's CriticalityLimit; "fifo" (default) otherwise
//! inbound = true                       # read X-Deadline-Ms and X-Criticality as InboundLayer does
//! reserve = "5ms"
//! service_time = { median = "2ms", p99 = "8ms" }
//! calls = [
//!   { to = "catalog", policy = "catalog" },
//!   { to = "prices", policy = "prices", count = 4, with_previous = true },
//!   { to = "reviews", policy = "reviews", share = 0.1 },   # on 10% of requests
//! ]
//!
//! [services.catalog]
//! workers = 16
//! service_time = { histogram = [["3ms", 60], ["8ms", 30], ["40ms", 10]] }
//!
//! [services.reviews]
//! workers = 4
//! service_time = { median = "10ms", p99 = "50ms" }
//!
//! [services.prices]
//! workers = 24
//! service_time = { median = "5ms", p99 = "30ms" }
//! error_rate = 0.01
//!
//! [traffic]
//! deadline = "500ms"
//! warmup = "2s"
//! mix = { sheddable = 0.3, critical = 0.7 }
//! segments = [
//!   { kind = "steady", rate = 300, for = "10s" },
//!   { kind = "ramp", from = 300, to = 600, for = "5s" },
//!   { kind = "spike", rate = 1200, for = "2s" },
//! ]
//!
//! [[faults]]
//! kind = "latency"
//! service = "prices"
//! from = "5s"
//! to = "9s"
//! added = "50ms"
//!
//! [scenarios.prices-down]              # --scenario prices-down: other faults, same traffic
//! summary = "prices refuses every request for 3 s"
//! faults = [{ kind = "outage", service = "prices", from = "6s", to = "9s" }]
//! ```
//!
//! # The keys
//!
//! Durations are written as in rampart's policy files (`"250ms"`, `"2s"`, `"1.5s"`). An
//! unknown key is refused with its name; a key that does not apply (a `hold` on a FIFO
//! service, a `rate` on a ramp) is a problem too.
//!
//! | key | form | default |
//! |---|---|---|
//! | `entry` | the name of the service the edge calls | required |
//! | `services.NAME.workers` | requests handled at once, at least 1 | required |
//! | `services.NAME.queue` | requests waiting at most beyond those handled | 0 |
//! | `services.NAME.admission` | `"fifo"`, or `"criticality"` (rampart's `CriticalityLimit`: capacity the workers, queue the queue) with its `hold` | fifo; hold 1s |
//! | `services.NAME.inbound` | read the deadline and level from the wire as rampart-http's `InboundLayer`, with `reserve`, `reject_expired` and `enforce` (answer 504 at the deadline, received less the reserve, a request still being handled, its calls dropped; a hung one too) | false; 0, false, false |
//! | `services.NAME.levels` | where a request's level comes from: `"wire"` or `"route"` (the root's own level: a public edge) | wire |
//! | `services.NAME.service_time` | `{ median, p99 }` (lognormal) or `{ histogram = [[latency, weight], ...] }` (each latency drawn in proportion to its weight) | required |
//! | `services.NAME.error_rate`, `hang_rate` | shares of handled requests that fail (a 500) or never answer | 0 |
//! | `services.NAME.error_time` | how long a request that fails on its own works before failing, in `service_time`'s forms (failures that are the slow tail: requests cut at a deadline); only with an `error_rate` | its `service_time` |
//! | `services.NAME.calls[i]` | `to` (the callee), `policy` (a name in the policy file), `count` (calls per request), `mode` (`"parallel"` or `"sequence"`: how the `count` calls go), `share` (the share of the handler's requests that make the entry's calls, above 0 and at most 1: a cache miss, a feature flag), `with_previous` (run alongside the entry before instead of after it), `propagate` (send the deadline and level), `wire` (each attempt's time outside the callee: on the wire both ways and in the caller's client stack, in `service_time`'s forms, drawn before the callee sees the attempt) | count 1, parallel, share 1 (every request), false, true, none |
//! | `traffic.deadline` | how long the edge waits for each root | required |
//! | `traffic.warmup`, `linger` | roots sent before `warmup` are not measured; the run goes on `linger` after the last root | 0, 30s |
//! | `traffic.policy`, `propagate` | the policy the edge calls the entry through; whether it sends the root's deadline and level | one attempt under the root's deadline; true |
//! | `traffic.mix` | shares of roots by level: `sheddable`, `sheddable_plus`, `critical`, `critical_plus` | every root critical |
//! | `traffic.segments[i]` | `{ kind = "steady", rate, for }`, `{ kind = "ramp", from, to, for }` (cut into 100 ms steps), `{ kind = "spike", rate, for }`: one after another, rates in roots per second (Poisson arrivals) | required |
//! | `faults[i]` | `kind` (`"outage"`: every request refused; `"latency"`: each handler takes `added` longer; `"capacity"`: only `workers` left), `service`, `from`, `to` (from the start of the run) | none |
//! | `scenarios.NAME` | `summary`, and the `traffic` or `faults` it gives instead of the file's | none |
//!
//! Calls run in order, one entry after another; entries marked `with_previous` run at once
//! with the entry before them; a failed call fails the handler (see [`crate::plan`]). An
//! entry with a `share` is drawn for each request the handler makes (all its `count` calls,
//! or none), from a generator of its own seeded from the run's seed and the entry's key path:
//! the same seed makes the same draws, and a share on one entry moves no other entry's draws.
//! A call graph has no cycles, and every service must be reached from the entry (a call with
//! a share counts as reaching its callee).

pub mod check;
pub mod file;
pub mod run;
pub mod traffic;

use std::path::Path;
use std::time::Duration;

use crate::SimError;
use crate::dist::ServiceTime;
use crate::service::{ServerSide, ServiceConfig, TimedFault};
use crate::sim::Load;

pub use file::GraphFile;
pub use run::{EdgeOutcome, Outcome, ServiceOutcome, run};

/// The name of a file's own traffic and faults, as `--scenario` takes it.
pub const DEFAULT_SCENARIO: &str = "default";

/// A checked graph, one scenario's traffic and faults in place.
#[derive(Debug, Clone)]
pub struct Graph {
    /// The scenario's name ([`DEFAULT_SCENARIO`] for the file's own).
    pub scenario: String,
    /// Its summary line, if it has one.
    pub summary: Option<String>,
    /// The service the edge calls (an index into `services`).
    pub entry: usize,
    /// The services, in the file's order of names.
    pub services: Vec<Node>,
    /// The root requests.
    pub traffic: Traffic,
    /// The faults, by service name (already in each service's timeline).
    pub faults: Vec<(String, TimedFault)>,
}

/// One service of a graph.
#[derive(Debug, Clone)]
pub struct Node {
    /// What the service is (its name, workers, queue, service time, faults).
    pub config: ServiceConfig,
    /// How it admits work.
    pub server: ServerSide,
    /// Its calls: steps in order, each step's calls at once.
    pub steps: Vec<Vec<Edge>>,
    /// Calls from the entry (the entry is tier 0; a service reached two ways, the shorter).
    pub tier: usize,
}

/// One entry of a service's calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    /// The callee (an index into the graph's services).
    pub to: usize,
    /// The client policy, by name in the policy file.
    pub policy: String,
    /// Calls per request.
    pub count: u32,
    /// The share of the caller's requests that make the calls (1: every request).
    pub share: f64,
    /// The `count` calls go at once (or one after another).
    pub parallel: bool,
    /// The caller sends the deadline and level on the wire.
    pub propagate: bool,
    /// The time each attempt spends outside the callee (the wire, the client's stack), if
    /// any: drawn for each attempt, before the callee sees it.
    pub wire: Option<ServiceTime>,
    /// Its key path (`services.frontend.calls[0]`).
    pub path: String,
}

/// The root requests of a scenario.
#[derive(Debug, Clone)]
pub struct Traffic {
    /// The rates over time, warm-up, deadline and level mix.
    pub load: Load,
    /// The policy the edge calls the entry through (a built-in single attempt when `None`).
    pub policy: Option<String>,
    /// The edge sends the root's deadline and level.
    pub propagate: bool,
    /// How long the run goes on after the last root is sent.
    pub linger: Duration,
    /// The segments, one line each.
    pub segments: Vec<String>,
}

impl Graph {
    /// Reads and checks the graph file at `path`, with `scenario`'s traffic and faults.
    ///
    /// # Errors
    ///
    /// A [`SimError`] naming the file: it cannot be read, it is not valid TOML or has an
    /// unknown key (the toml crate's message, with the line), or every problem
    /// [`GraphFile::check`] finds.
    pub fn load(path: &Path, scenario: Option<&str>) -> Result<Graph, SimError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SimError::new(format!("cannot read {}: {e}", path.display())))?;
        Graph::parse(&text, scenario).map_err(|e| SimError::new(format!("{}: {e}", path.display())))
    }

    /// Reads and checks a graph file's text, with `scenario`'s traffic and faults.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load), without the file's name.
    pub fn parse(text: &str, scenario: Option<&str>) -> Result<Graph, SimError> {
        let file: GraphFile = toml::from_str(text).map_err(|e| SimError::new(e.to_string()))?;
        file.check(scenario)
            .map_err(|e| SimError::new(e.to_string()))
    }

    /// The names of the policies the graph calls through, sorted, each once.
    pub fn policies(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .services
            .iter()
            .flat_map(|s| s.steps.iter().flatten())
            .map(|e| e.policy.as_str())
            .chain(self.traffic.policy.as_deref())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Where each policy is used: `(key path of the call, policy name)`, in file order.
    pub fn uses(&self) -> Vec<(String, &str)> {
        let mut uses: Vec<(String, &str)> = self
            .services
            .iter()
            .flat_map(|s| s.steps.iter().flatten())
            .map(|e| (format!("{}.policy", e.path), e.policy.as_str()))
            .collect();
        if let Some(policy) = &self.traffic.policy {
            uses.insert(0, ("traffic.policy".to_owned(), policy.as_str()));
        }
        uses
    }

    /// The graph in a few lines: the services with their tier and calls, the traffic, the
    /// faults.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut order: Vec<&Node> = self.services.iter().collect();
        order.sort_by_key(|n| n.tier);
        for node in order {
            let c = &node.config;
            let calls: Vec<String> = node
                .steps
                .iter()
                .map(|step| {
                    step.iter()
                        .map(|e| {
                            let to = self.services[e.to].config.name;
                            let times = if e.count == 1 {
                                String::new()
                            } else if e.parallel {
                                format!(" x{} at once", e.count)
                            } else {
                                format!(" x{} in turn", e.count)
                            };
                            let share = if e.share < 1.0 {
                                format!(" on {}% of requests", e.share * 100.0)
                            } else {
                                String::new()
                            };
                            let wire = e.wire.as_ref().map_or(String::new(), |w| {
                                format!(", {:.2} ms on the wire", w.mean().as_secs_f64() * 1e3)
                            });
                            format!("{to}{times}{share} ({}{wire})", e.policy)
                        })
                        .collect::<Vec<_>>()
                        .join(" + ")
                })
                .collect();
            lines.push(format!(
                "tier {} {}: {} workers, queue {}, mean service time {:.1} ms{}{}; calls {}",
                node.tier,
                c.name,
                c.workers,
                c.queue,
                c.service_time.mean().as_secs_f64() * 1e3,
                match (c.faults.error_rate > 0.0, &c.error_time) {
                    (true, Some(t)) => format!(
                        ", {}% errors (after a mean {:.1} ms)",
                        c.faults.error_rate * 100.0,
                        t.mean().as_secs_f64() * 1e3
                    ),
                    (true, None) => format!(", {}% errors", c.faults.error_rate * 100.0),
                    (false, _) => String::new(),
                },
                if c.faults.hang_rate > 0.0 {
                    format!(", {}% hang", c.faults.hang_rate * 100.0)
                } else {
                    String::new()
                },
                if calls.is_empty() {
                    "nothing".to_owned()
                } else {
                    calls.join(", then ")
                },
            ));
        }
        let t = &self.traffic;
        lines.push(format!(
            "traffic: {}; edge deadline {} ms, first {} s not measured",
            t.segments.join(", then "),
            t.load.patience.as_millis(),
            t.load.warmup.as_secs_f64()
        ));
        for (service, fault) in &self.faults {
            let secs = |w: &crate::service::Window| {
                format!("{} s to {} s", w.from.as_secs_f64(), w.to.as_secs_f64())
            };
            lines.push(match fault {
                TimedFault::Outage(w) => format!("fault: {service} down from {}", secs(w)),
                TimedFault::AddedLatency(w, added) => format!(
                    "fault: {service} +{} ms per request from {}",
                    added.as_millis(),
                    secs(w)
                ),
                TimedFault::LostCapacity(w, left) => {
                    format!("fault: {service} down to {left} workers from {}", secs(w))
                }
            });
        }
        lines
    }
}
