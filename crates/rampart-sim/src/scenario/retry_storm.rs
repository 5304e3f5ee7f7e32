//! Retry storm: a chain of services, the leaf failing at rates from 0.1 % to 100 %. With 4
//! attempts at every hop, each layer multiplies the load on the next by up to 4, so at 100 %
//! failure a depth-3 chain sends 4³ = 64 requests to the leaf per root request. Retry budgets
//! bound the multiplication; the metric is attempts per root request at each layer.
//!
//! Every service has ample workers, so the counts are pure amplification, not queueing.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Job, Runner, Size, chain, configs, pct, removed};
use crate::SimError;
use crate::contender::{self, Contender, Feature, Hop, RAMPART};
use crate::dist::LogNormal;
use crate::report::{Axis, Chart, ScenarioReport, Series, Table, colors};
use crate::service::ServiceConfig;
use crate::sim::{Load, drive, virtual_time};

/// rampart without its breaker: the budget alone.
pub const RAMPART_NO_BREAKER: Contender = RAMPART.without(Feature::Breaker);

/// The features whose removal is run at depth 3 (the breaker's is in the main sweep; this
/// scenario does not hedge).
pub const ABLATED: [Feature; 4] = [
    Feature::Budget,
    Feature::Propagation,
    Feature::Limiter,
    Feature::RejectExpired,
];
/// The leaf error rates of the ablations.
pub const ABLATION_RATES: [f64; 2] = [0.5, 1.0];

/// The leaf error rates swept.
pub const ERROR_RATES: [f64; 9] = [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0];
/// The error rates of a `--quick` run.
pub const QUICK_ERROR_RATES: [f64; 4] = [0.01, 0.1, 0.5, 1.0];

const NAMES: [&str; 5] = ["s1", "s2", "s3", "s4", "s5"];

/// The contenders of this scenario's sweep.
pub fn contenders() -> Vec<Contender> {
    let mut all = contender::ALL.to_vec();
    all.push(RAMPART_NO_BREAKER);
    all
}

/// The ablations (depth 3 only).
pub fn ablations() -> Vec<Contender> {
    ABLATED.into_iter().map(|f| RAMPART.without(f)).collect()
}

/// The per-hop settings: 4 attempts, a 1 s timeout, 20 ms backoff base.
pub fn hop() -> Hop {
    Hop::new(Duration::from_secs(1))
}

/// One simulation's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The contender's name.
    pub contender: &'static str,
    /// Services in the chain.
    pub depth: usize,
    /// The leaf's error rate.
    pub error_rate: f64,
    /// Measured root requests.
    pub roots: usize,
    /// Requests per measured root reaching each service, `s1` first.
    pub per_layer: Vec<f64>,
    /// Share of measured roots answered Ok.
    pub answered: f64,
}

impl Point {
    /// Requests per root at the leaf.
    pub fn leaf(&self) -> f64 {
        self.per_layer.last().copied().unwrap_or(0.0)
    }
}

/// The load for a chain of `depth` (a deeper chain costs 4x more per root for the naive
/// contender at 100 % failure, so it gets fewer roots per second).
pub fn load(depth: usize, quick: bool) -> Load {
    let (rate, secs, warm) = match (depth, quick) {
        (3, false) => (500.0, 3.0, 1.0),
        (_, false) => (200.0, 3.0, 1.0),
        (3, true) => (100.0, 1.5, 0.5),
        (_, true) => (8.0, 1.5, 0.5),
    };
    Load::constant(
        rate,
        Duration::from_secs_f64(secs),
        Duration::from_secs_f64(warm),
        Duration::from_secs(30),
    )
}

/// Runs one chain: `contender`, `depth` services, the leaf failing at `error_rate`.
pub fn simulate(
    contender: Contender,
    depth: usize,
    error_rate: f64,
    load: Load,
    seed: u64,
) -> Result<Point, SimError> {
    let service_time =
        LogNormal::from_median_p99(Duration::from_millis(2), Duration::from_millis(10));
    let configs: Vec<ServiceConfig> = (0..depth)
        .map(|i| {
            let mut config = ServiceConfig::new(NAMES[i], 1_000_000, 1_000_000, service_time);
            if i + 1 == depth {
                config.faults.error_rate = error_rate;
            }
            config
        })
        .collect();
    let (roots, stats) = virtual_time(|| async move {
        let (client, services) = chain(contender, configs, hop(), seed)?;
        let roots = drive(client, &load, seed, Duration::from_secs(120)).await;
        let stats: Vec<_> = services.iter().map(|s| s.stats()).collect();
        Ok::<_, SimError>((roots, stats))
    })??;
    let measured = roots.iter().filter(|r| r.measured).count();
    let answered = roots
        .iter()
        .filter(|r| r.measured && r.answered.is_some())
        .count();
    let per = |n: u64| n as f64 / measured.max(1) as f64;
    Ok(Point {
        contender: contender.name,
        depth,
        error_rate,
        roots: measured,
        per_layer: stats.iter().map(|s| per(s.arrivals)).collect(),
        answered: answered as f64 / measured.max(1) as f64,
    })
}

/// Runs the scenario.
pub fn run(size: Size, runner: &Runner) -> Result<ScenarioReport, SimError> {
    let rates: Vec<f64> = if size.quick {
        QUICK_ERROR_RATES.to_vec()
    } else {
        ERROR_RATES.to_vec()
    };
    let mut jobs = Vec::new();
    for depth in [3usize, 5] {
        for c in contenders() {
            for &rate in &rates {
                let seed = size.seed_for(&format!("retry-storm/{depth}/{rate}"));
                let load = load(depth, size.quick);
                jobs.push(Job::new(
                    format!("{} depth {depth} at {}% leaf errors", c.name, rate * 100.0),
                    move || simulate(c, depth, rate, load, seed),
                ));
            }
        }
    }
    for c in ablations() {
        for rate in ABLATION_RATES {
            let seed = size.seed_for(&format!("retry-storm/3/{rate}"));
            let load = load(3, size.quick);
            jobs.push(Job::new(
                format!("{} depth 3 at {}% leaf errors", c.name, rate * 100.0),
                move || simulate(c, 3, rate, load, seed),
            ));
        }
    }
    let points = runner.run("retry-storm", jobs)?;
    let mut all = contenders();
    all.extend(ablations());
    summarize(&points, &rates, configs(&all, hop())?)
}

fn rate_label(rate: f64) -> String {
    let p = rate * 100.0;
    if p < 1.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

fn summarize(
    points: &[Point],
    rates: &[f64],
    configs: Vec<(String, String)>,
) -> Result<ScenarioReport, SimError> {
    let find = |name: &str, depth: usize, rate: f64| {
        points
            .iter()
            .find(|p| p.contender == name && p.depth == depth && p.error_rate == rate)
    };
    let mut columns = vec!["contender".to_owned(), "depth".to_owned()];
    columns.extend(rates.iter().map(|&r| rate_label(r)));
    let mut leaf = Table {
        title: "requests reaching the leaf per root request, by leaf error rate".into(),
        columns: columns.clone(),
        rows: Vec::new(),
    };
    let mut answered = Table {
        title: "root requests answered, by leaf error rate".into(),
        columns,
        rows: Vec::new(),
    };
    let mut layers = Table::new(
        "requests per root request at each layer, leaf failing 100%",
        &["contender", "depth", "s1", "s2", "s3", "s4", "s5"],
    );
    for depth in [3usize, 5] {
        for c in contenders() {
            let mut row = vec![c.name.to_owned(), depth.to_string()];
            let mut ok = row.clone();
            for &rate in rates {
                let p = find(c.name, depth, rate);
                row.push(p.map_or("-".into(), |p| format!("{:.2}", p.leaf())));
                ok.push(p.map_or("-".into(), |p| super::pct(p.answered)));
            }
            leaf.row(row);
            answered.row(ok);
            if let Some(p) = find(c.name, depth, 1.0) {
                let mut row = vec![c.name.to_owned(), depth.to_string()];
                for i in 0..5 {
                    row.push(p.per_layer.get(i).map_or("".into(), |v| format!("{v:.2}")));
                }
                layers.row(row);
            }
        }
    }
    let mut ablation = Table::new(
        "ablations, depth 3: rampart with one feature removed (leaf requests per root / roots answered)",
        &[
            "contender",
            "feature removed",
            "50% leaf errors",
            "100% leaf errors",
        ],
    );
    let mut ablated = vec![RAMPART, RAMPART_NO_BREAKER];
    ablated.extend(ablations());
    for c in &ablated {
        let mut row = vec![c.name.to_owned(), removed(c)];
        for rate in ABLATION_RATES {
            row.push(find(c.name, 3, rate).map_or("-".into(), |p| {
                format!("{:.2} / {}", p.leaf(), pct(p.answered))
            }));
        }
        ablation.row(row);
    }
    // Zero (a leaf behind an open breaker gets nothing) is drawn on the bottom edge.
    let floor = 0.01;
    let mut series = Vec::new();
    for c in contenders() {
        for depth in [3usize, 5] {
            let points: Vec<(f64, f64)> = rates
                .iter()
                .map(|&r| {
                    (
                        r * 100.0,
                        find(c.name, depth, r).map_or(f64::NAN, |p| p.leaf().max(floor)),
                    )
                })
                .collect();
            let name = format!("{} (depth {depth})", c.name);
            let color = colors::of(c.name);
            series.push(if depth == 5 {
                Series::dashed_sweep(name, color, points)
            } else {
                Series::sweep(name, color, points)
            });
        }
    }
    for (depth, value) in [(3usize, 64.0), (5, 1024.0)] {
        series.push(Series {
            name: format!("4^{depth} = {value}"),
            color: colors::REFERENCE,
            dashed: true,
            markers: false,
            points: vec![(rates[0] * 100.0, value), (100.0, value)],
        });
    }
    let chart = Chart {
        title: "Requests reaching the leaf per root request (0 drawn at 0.01)".into(),
        x: Axis::log("leaf error rate (%)", rates[0] * 100.0, 100.0),
        y: Axis::log("requests at the leaf per root (log)", floor, 2_000.0),
        series,
        bands: Vec::new(),
    };
    let at = |name: &str, depth: usize| find(name, depth, 1.0).map_or(f64::NAN, Point::leaf);
    let ok = |name: &str, depth: usize, rate: f64| {
        find(name, depth, rate).map_or("-".into(), |p| pct(p.answered))
    };
    let nb = RAMPART_NO_BREAKER.name;
    // The error rates where every contender sends the same load to the leaf (within 0.01) and
    // answers the same share (within 0.5 points): ties.
    let tied: Vec<String> = rates
        .iter()
        .filter(|&&r| {
            let all: Vec<&Point> = contenders()
                .iter()
                .filter_map(|c| find(c.name, 3, r))
                .collect();
            let spread = |f: fn(&Point) -> f64| {
                let (lo, hi) = all
                    .iter()
                    .map(|p| f(p))
                    .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
                hi - lo
            };
            !all.is_empty() && spread(Point::leaf) <= 0.01 && spread(|p| p.answered) <= 0.005
        })
        .map(|&r| rate_label(r))
        .collect();
    let findings = vec![
        format!(
            "Win: at 100% leaf failure the naive chain sends {:.0} requests to the leaf per root at depth 3 and {:.0} at depth 5 (4^3, 4^5); tower's TpsBudget holds it to {:.2} and {:.2}, rampart's budget alone ({nb}) to {:.2} and {:.2}, rampart with its breaker to {:.2} and {:.2} (goal at depth 3: at most 1.1).",
            at("naive", 3),
            at("naive", 5),
            at("budgeted", 3),
            at("budgeted", 5),
            at(nb, 3),
            at(nb, 5),
            at("rampart", 3),
            at("rampart", 5)
        ),
        format!(
            "Loss: budgets and breakers cost availability at middling error rates. At 50% leaf errors, depth 3, naive answers {}, budgeted {}, rampart without its breaker {}, and rampart {}: with half the calls failing, the failure-ratio breaker (50% of at least 20 calls in 10 s) opens on every hop and refuses calls for its 15 s break and more.",
            ok("naive", 3, 0.5),
            ok("budgeted", 3, 0.5),
            ok(nb, 3, 0.5),
            ok("rampart", 3, 0.5),
        ),
        format!(
            "Tie: at leaf error rates of {} every contender sends the same load and answers the same share at depth 3; retries only matter once failures are common.",
            if tied.is_empty() {
                "none".to_owned()
            } else {
                tied.join(", ")
            }
        ),
        format!(
            "Attribution: without its budget rampart sends {} leaf requests per root at 100% failure, depth 3 (the breaker alone); the features that act on other failures (propagation, the limiter, reject_expired) change nothing here (see the ablation table).",
            find(Feature::Budget.ablation_name(), 3, 1.0)
                .map_or("-".into(), |p| format!("{:.2}", p.leaf())),
        ),
    ];
    let data: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "contender": p.contender,
                "depth": p.depth,
                "leaf_error_rate": p.error_rate,
                "measured_roots": p.roots,
                "requests_per_root_by_layer": p.per_layer,
                "answered": p.answered,
            })
        })
        .collect();
    Ok(ScenarioReport {
        name: "retry-storm",
        title: "retries multiply down a chain".into(),
        question: "How many requests reach each layer of a chain per root request when the leaf fails, with 4 attempts at every hop?".into(),
        setup: vec![
            "A chain s1 → s2 → s3 (and → s4 → s5); the edge calls s1. Every hop: 4 attempts, 1 s attempt timeout (the edge waits 30 s), 20 ms full-jitter exponential backoff.".into(),
            "Service time lognormal, median 2 ms, p99 10 ms; a million workers per service (no queueing: the counts are pure amplification). The leaf fails at the given rate (a 500); the others never fail on their own.".into(),
            "Depth 3: 500 roots/s for 3 s, the first second not measured (so budgets that start full are spent). Depth 5: 200 roots/s. The edge waits 30 s for each root.".into(),
            "rampart has a failure-ratio breaker (50% of at least 20 calls in 10 s, 15 s break) on every hop; rampart -breaker is the same without it.".into(),
        ],
        reference: "naive retries reach 4^3 = 64 requests at the leaf at 100% failure (Google SRE book, ch. 22 'Addressing Cascading Failures'); the SRE book's per-client retry budget (retries at most 10% of requests) keeps the growth to about 1.1x per layer.".into(),
        chart,
        tables: vec![leaf, layers, answered, ablation],
        terms: vec![
            ("s1 … s5".into(), "the services of the chain, s1 the one the edge calls, the last one the leaf".into()),
            ("requests per root".into(), "requests (every attempt) that reached the service, over the measured root requests".into()),
            ("answered".into(), "share of measured root requests answered Ok within the edge's 30 s".into()),
            ("0.1% … 100%".into(), "the share of the leaf's requests that fail".into()),
            ("feature removed".into(), "the one rampart feature the ablation turns off; everything else as rampart".into()),
        ],
        configs,
        findings,
        notes: vec![
            "rampart's budget deposits 10% of each success and has a floor of 3 retries/s (capacity 30, starts full); tower's TpsBudget here is configured with the same numbers (10%, 3/s over 10 s) and deposited on every success as tower's documentation does; the bucket shapes differ (a token bucket against a sliding 10 s window).".into(),
        ],
        data: json!({ "points": data }),
    })
}
