//! Running a checked graph under one set of policies: the services built callees first, each
//! call entry with a client of its own (its own policy, so its own breaker, budget and latency
//! estimate, as each caller has in production), the edge sending the traffic, then what the
//! run measured.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rampart::breaker::StateKind;
use rampart::config::{BackoffKind, PolicyConfig};
use rampart::drain::Drain;
use rampart::hedge::Suppressed;
use rampart::{Event, Policy, StopReason};

use super::Graph;
use crate::SimError;
use crate::contender::{Classifier, Client, Wire, classify};
use crate::dist::derive_seed;
use crate::plan::{Calls, Plan, Share};
use crate::service::{Downstream, Service};
use crate::sim::{drive, quantile, virtual_time};
use crate::spans::{RecordedSpan, SpanSink};

/// What one run of a graph measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Measured roots (sent after the warm-up).
    pub roots: usize,
    /// Share of measured roots answered Ok before their deadline.
    pub answered_in_time: f64,
    /// Measured roots answered in time per second of the measured window.
    pub goodput: f64,
    /// Latency at the edge of the measured roots answered in time: p50, p99, p99.9 (nearest
    /// rank; zero when none was answered).
    pub latency: [Duration; 3],
    /// Each service, in the graph's order.
    pub services: Vec<ServiceOutcome>,
    /// Each call entry's client (the edge's first), in the graph's order.
    pub edges: Vec<EdgeOutcome>,
}

/// What one service saw.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceOutcome {
    /// Its name.
    pub name: String,
    /// Calls from the entry.
    pub tier: usize,
    /// Requests that reached it (every attempt and hedge) per measured root.
    pub per_root: f64,
    /// Requests it shed (full queue, or refused by its limit), measured.
    pub shed: u64,
    /// Requests refused for their deadline without work, measured.
    pub expired: u64,
    /// Worker time spent on measured requests.
    pub work: Duration,
    /// Of `work`, the time spent on requests whose root's caller had stopped waiting when the
    /// work finished.
    pub wasted: Duration,
}

/// What one client did, counted from its policy's events over the whole run (warm-up
/// included).
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeOutcome {
    /// The key path of the call (`traffic.policy` for the edge's).
    pub path: String,
    /// `caller → callee`.
    pub label: String,
    /// The policy's name.
    pub policy: String,
    /// The policy's `explain()` as built for this run.
    pub explain: String,
    /// Calls made.
    pub calls: u64,
    /// Attempts made (the first of each call included, hedges included).
    pub attempts: u64,
    /// Retries (backoff sleeps).
    pub retries: u64,
    /// Times the breaker opened.
    pub breaker_opens: u64,
    /// Calls the breaker refused (stopped as `dependency_unavailable`).
    pub breaker_refused: u64,
    /// Retries and hedges the retry budget refused.
    pub budget_refused: u64,
    /// Hedges started.
    pub hedges: u64,
}

impl Outcome {
    /// Worker time on measured requests over every service, and the part of it wasted.
    pub fn work(&self) -> (Duration, Duration) {
        self.services
            .iter()
            .fold((Duration::ZERO, Duration::ZERO), |(w, x), s| {
                (w + s.work, x + s.wasted)
            })
    }

    /// The share of worker time spent for callers that had gone.
    pub fn wasted_share(&self) -> f64 {
        let (work, wasted) = self.work();
        if work.is_zero() {
            0.0
        } else {
            wasted.as_secs_f64() / work.as_secs_f64()
        }
    }

    /// Requests per root reaching the deepest tier's services, summed.
    pub fn leaf_per_root(&self) -> f64 {
        let deepest = self.services.iter().map(|s| s.tier).max().unwrap_or(0);
        self.services
            .iter()
            .filter(|s| s.tier == deepest)
            .map(|s| s.per_root)
            .sum()
    }

    /// The sum of a counter over every client.
    pub fn total(&self, counter: fn(&EdgeOutcome) -> u64) -> u64 {
        self.edges.iter().map(counter).sum()
    }
}

#[derive(Default)]
struct Activity {
    calls: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    opens: AtomicU64,
    breaker_refused: AtomicU64,
    budget_refused: AtomicU64,
    hedges: AtomicU64,
}

impl Activity {
    fn record(&self, event: &Event<'_>) {
        let add = |counter: &AtomicU64, n: u64| {
            counter.fetch_add(n, Ordering::Relaxed);
        };
        match event {
            Event::CallEnded { stop, attempts, .. } => {
                add(&self.calls, 1);
                add(&self.attempts, u64::from(*attempts));
                match stop {
                    StopReason::DependencyUnavailable => add(&self.breaker_refused, 1),
                    StopReason::BudgetExhausted => add(&self.budget_refused, 1),
                    _ => {}
                }
            }
            Event::Retrying { .. } => add(&self.retries, 1),
            Event::BreakerTransition {
                to: StateKind::Open,
                ..
            } => add(&self.opens, 1),
            Event::HedgeStarted { .. } => add(&self.hedges, 1),
            Event::HedgeSuppressed {
                reason: Suppressed::Budget,
                ..
            } => add(&self.budget_refused, 1),
            _ => {}
        }
    }

    fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// `config` with a seed for its backoff and breaker jitter where it sets none, so that a run
/// depends on its seed alone.
pub fn seeded(config: &PolicyConfig, seed: u64) -> PolicyConfig {
    let mut config = config.clone();
    let mut backoff = config.backoff.take().unwrap_or_default();
    if backoff.kind != Some(BackoffKind::None) && backoff.seed.is_none() {
        backoff.seed = Some(seed);
    }
    config.backoff = Some(backoff);
    if let Some(Some(breaker)) = &mut config.breaker
        && breaker.seed.is_none()
    {
        breaker.seed = Some(derive_seed(seed, "breaker"));
    }
    config
}

/// The policy of one call entry, named as in the file, reading replies with [`classify`].
///
/// # Errors
///
/// The configuration's problems (a policy file checks them all before any run).
pub fn build_policy(config: &PolicyConfig, name: &str) -> Result<Policy<Classifier>, SimError> {
    let builder = Policy::builder()
        .name(name)
        .drain(&Drain::new())
        .classifier(classify as Classifier);
    Ok(config.build(builder)?)
}

fn policy_with(
    config: &PolicyConfig,
    name: &str,
    seed: u64,
    activity: &Arc<Activity>,
) -> Result<Policy<Classifier>, SimError> {
    let seen = Arc::clone(activity);
    let builder = Policy::builder()
        .name(name)
        .drain(&Drain::new())
        .listener(move |event: &Event<'_>| seen.record(event))
        .classifier(classify as Classifier);
    Ok(seeded(config, seed).build(builder)?)
}

/// The edge's own policy when the traffic names none: one attempt, bounded by the root's
/// deadline (the ambient one), no budget.
fn edge_policy(activity: &Arc<Activity>) -> Result<Policy<Classifier>, SimError> {
    let seen = Arc::clone(activity);
    Ok(Policy::builder()
        .name("edge")
        .max_attempts(1)
        .no_attempt_timeout()
        .use_ambient_deadline(true)
        .no_budget()
        .drain(&Drain::new())
        .listener(move |event: &Event<'_>| seen.record(event))
        .classifier(classify as Classifier)
        .build()?)
}

/// One client's description and counters.
struct Entry {
    /// Where it sorts in the report: the caller's tier and name, then the call's place.
    rank: (usize, String, usize),
    path: String,
    label: String,
    policy: String,
    explain: String,
    activity: Arc<Activity>,
}

struct Built {
    services: Vec<Option<Rc<Service>>>,
    edges: Vec<Entry>,
    /// Where every service records its spans, when the run records them.
    spans: Option<Rc<SpanSink>>,
}

/// Runs `graph` once under `policies` (each policy's resolved configuration, by name), with
/// every random draw seeded from `seed`.
///
/// # Errors
///
/// A policy the graph names is missing or does not build, or the runtime cannot start.
pub fn run(
    graph: &Graph,
    policies: &BTreeMap<String, PolicyConfig>,
    seed: u64,
) -> Result<Outcome, SimError> {
    Ok(run_with(graph, policies, seed, false)?.0)
}

/// Runs `graph` as [`run()`] does, the same seed giving the same outcome, and records its
/// spans: a SERVER span for each request a service answered, a CLIENT span for each attempt
/// a handler made (see [`crate::spans`]), in the order they ended. Write them with
/// [`write_otlp`](crate::spans::write_otlp).
///
/// # Errors
///
/// As [`run()`].
pub fn trace(
    graph: &Graph,
    policies: &BTreeMap<String, PolicyConfig>,
    seed: u64,
) -> Result<(Outcome, Vec<RecordedSpan>), SimError> {
    run_with(graph, policies, seed, true)
}

fn run_with(
    graph: &Graph,
    policies: &BTreeMap<String, PolicyConfig>,
    seed: u64,
    record: bool,
) -> Result<(Outcome, Vec<RecordedSpan>), SimError> {
    let load = graph.traffic.load.clone();
    let linger = graph.traffic.linger;
    let (roots, stats, edges, spans) = virtual_time(|| async move {
        let mut built = Built {
            services: vec![None; graph.services.len()],
            edges: Vec::new(),
            spans: record.then(SpanSink::new),
        };
        for i in 0..graph.services.len() {
            build(graph, policies, seed, i, &mut built)?;
        }
        let entry = built.services[graph.entry]
            .clone()
            .ok_or_else(|| SimError::new("the entry service was not built"))?;
        let activity = Arc::new(Activity::default());
        let (policy, name, path) = match &graph.traffic.policy {
            Some(name) => {
                let config = lookup(policies, name)?;
                let seed = derive_seed(seed, "traffic.policy");
                (
                    policy_with(config, name, seed, &activity)?,
                    name.clone(),
                    "traffic.policy",
                )
            }
            None => (edge_policy(&activity)?, "(built in)".to_owned(), "traffic"),
        };
        built.edges.push(Entry {
            rank: (0, String::new(), 0),
            path: path.to_owned(),
            label: format!("edge → {}", entry.config().name),
            policy: name,
            explain: policy.explain(),
            activity,
        });
        built.edges.sort_by(|a, b| a.rank.cmp(&b.rank));
        let client = Client::with_policy(entry, policy, graph.traffic.propagate, None);
        let roots = drive(client, &load, derive_seed(seed, "traffic"), linger).await;
        let stats: Vec<_> = built
            .services
            .iter()
            .map(|s| s.as_ref().map(|s| s.stats()).unwrap_or_default())
            .collect();
        let spans = built.spans.map(|s| s.close()).unwrap_or_default();
        Ok::<_, SimError>((roots, stats, built.edges, spans))
    })??;
    let measured: Vec<_> = roots.iter().filter(|r| r.measured).collect();
    let mut latencies: Vec<Duration> = measured.iter().filter_map(|r| r.answered).collect();
    latencies.sort_unstable();
    let n = measured.len().max(1) as f64;
    let window = load_window(graph);
    let outcome = Outcome {
        roots: measured.len(),
        answered_in_time: latencies.len() as f64 / n,
        goodput: latencies.len() as f64 / window,
        latency: [0.5, 0.99, 0.999].map(|q| quantile(&latencies, q)),
        services: graph
            .services
            .iter()
            .zip(stats)
            .map(|(node, s)| ServiceOutcome {
                name: node.config.name.to_owned(),
                tier: node.tier,
                per_root: s.arrivals as f64 / n,
                shed: s.shed,
                expired: s.expired,
                work: s.work,
                wasted: s.wasted,
            })
            .collect(),
        edges: edges
            .into_iter()
            .map(|c| (c.path, c.label, c.policy, c.explain, c.activity))
            .map(|(path, label, policy, explain, a)| EdgeOutcome {
                path,
                label,
                policy,
                explain,
                calls: Activity::read(&a.calls),
                attempts: Activity::read(&a.attempts),
                retries: Activity::read(&a.retries),
                breaker_opens: Activity::read(&a.opens),
                breaker_refused: Activity::read(&a.breaker_refused),
                budget_refused: Activity::read(&a.budget_refused),
                hedges: Activity::read(&a.hedges),
            })
            .collect(),
    };
    Ok((outcome, spans))
}

/// Seconds of the measured window (the segments after the warm-up).
fn load_window(graph: &Graph) -> f64 {
    let load = &graph.traffic.load;
    load.duration
        .saturating_sub(load.warmup)
        .as_secs_f64()
        .max(1e-9)
}

fn lookup<'a>(
    policies: &'a BTreeMap<String, PolicyConfig>,
    name: &str,
) -> Result<&'a PolicyConfig, SimError> {
    policies
        .get(name)
        .ok_or_else(|| SimError::new(format!("no policy named {name:?} in the policy file")))
}

/// Builds service `i` after its callees (the graph has no cycles).
fn build(
    graph: &Graph,
    policies: &BTreeMap<String, PolicyConfig>,
    seed: u64,
    i: usize,
    built: &mut Built,
) -> Result<Rc<Service>, SimError> {
    if let Some(service) = &built.services[i] {
        return Ok(Rc::clone(service));
    }
    let node = &graph.services[i];
    let mut steps = Vec::with_capacity(node.steps.len());
    let mut place = 0;
    for step in &node.steps {
        let mut calls = Vec::with_capacity(step.len());
        for edge in step {
            place += 1;
            let callee = build(graph, policies, seed, edge.to, built)?;
            let activity = Arc::new(Activity::default());
            let config = lookup(policies, &edge.policy)?;
            let policy = policy_with(
                config,
                &edge.policy,
                derive_seed(seed, &edge.path),
                &activity,
            )?;
            built.edges.push(Entry {
                rank: (node.tier + 1, node.config.name.to_owned(), place),
                path: format!("{}.policy", edge.path),
                label: format!("{} → {}", node.config.name, callee.config().name),
                policy: edge.policy.clone(),
                explain: policy.explain(),
                activity,
            });
            calls.push(Calls {
                client: Client::with_policy(
                    callee,
                    policy,
                    edge.propagate,
                    edge.wire.clone().map(|time| {
                        Wire::new(time, derive_seed(seed, &format!("{}.wire", edge.path)))
                    }),
                ),
                count: edge.count,
                parallel: edge.parallel,
                share: (edge.share < 1.0).then(|| {
                    Share::new(
                        edge.share,
                        derive_seed(seed, &format!("{}.share", edge.path)),
                    )
                }),
            });
        }
        steps.push(calls);
    }
    let downstream = if steps.is_empty() {
        Downstream::None
    } else {
        Downstream::Plan(Rc::new(Plan { steps }))
    };
    let service = Service::new(
        node.config.clone(),
        node.server,
        downstream,
        derive_seed(seed, node.config.name),
    )?;
    if let Some(sink) = &built.spans {
        service.record_spans(Rc::clone(sink));
    }
    built.services[i] = Some(Rc::clone(&service));
    Ok(service)
}
