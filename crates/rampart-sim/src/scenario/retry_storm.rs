//! Retry storm: a chain of services, the leaf failing at rates from 0.1 % to 100 %. With 4
//! attempts at every hop, each layer multiplies the load on the next by up to 4, so at 100 %
//! failure a depth-3 chain sends 4³ = 64 requests to the leaf per root request. Retry budgets
//! bound the multiplication; the metric is attempts per root request at each layer.
//!
//! Every service has ample workers, so the counts are pure amplification, not queueing.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Job, Runner, Size, chain};
use crate::SimError;
use crate::contender::{self, Contender, Hop, RAMPART};
use crate::dist::LogNormal;
use crate::report::{Axis, Chart, ScenarioReport, Series, Table, colors};
use crate::service::ServiceConfig;
use crate::sim::{Load, drive, virtual_time};

/// rampart with a failure-ratio breaker on every hop: only this scenario shows it.
pub const RAMPART_BREAKER: Contender = RAMPART.with_breaker("rampart+breaker");

/// The leaf error rates swept.
pub const ERROR_RATES: [f64; 9] = [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0];
/// The error rates of a `--quick` run.
pub const QUICK_ERROR_RATES: [f64; 4] = [0.01, 0.1, 0.5, 1.0];

const NAMES: [&str; 5] = ["s1", "s2", "s3", "s4", "s5"];

/// The contenders of this scenario.
pub fn contenders() -> Vec<Contender> {
    let mut all = contender::ALL.to_vec();
    all.push(RAMPART_BREAKER);
    all
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
    let points = runner.run("retry-storm", jobs)?;
    Ok(summarize(&points, &rates))
}

fn rate_label(rate: f64) -> String {
    let p = rate * 100.0;
    if p < 1.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

fn summarize(points: &[Point], rates: &[f64]) -> ScenarioReport {
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
    let mut series = Vec::new();
    for c in contender::ALL {
        for depth in [3usize, 5] {
            let points: Vec<(f64, f64)> = rates
                .iter()
                .filter_map(|&r| find(c.name, depth, r).map(|p| (r * 100.0, p.leaf())))
                .collect();
            series.push(Series {
                name: format!("{} (depth {depth})", c.name),
                color: colors::of(c.name),
                dashed: depth == 5,
                points,
            });
        }
    }
    for (depth, value) in [(3usize, 64.0), (5, 1024.0)] {
        series.push(Series {
            name: format!("4^{depth} = {value}"),
            color: colors::REFERENCE,
            dashed: true,
            points: vec![(rates[0] * 100.0, value), (100.0, value)],
        });
    }
    let chart = Chart {
        title: "Requests reaching the leaf per root request".into(),
        x: Axis::log("leaf error rate (%)", rates[0] * 100.0, 100.0),
        y: Axis::log("requests at the leaf per root (log)", 0.5, 2_000.0),
        series,
        bands: Vec::new(),
    };
    let at = |name: &str, depth: usize| find(name, depth, 1.0).map_or(f64::NAN, Point::leaf);
    let findings = vec![
        format!(
            "At 100% leaf failure the naive chain sends {:.0} requests to the leaf per root at depth 3 and {:.0} at depth 5 (4^3, 4^5); the hand-written 20% budget holds it to {:.2} and {:.2}, rampart's budget to {:.2} and {:.2}.",
            at("naive", 3),
            at("naive", 5),
            at("budgeted", 3),
            at("budgeted", 5),
            at("rampart", 3),
            at("rampart", 5)
        ),
        format!(
            "Budgets cost availability at middling error rates (at 50% leaf errors, depth 3: naive answers {}, rampart {}); with a breaker, a dead leaf gets {:.2} requests per root.",
            find("naive", 3, 0.5).map_or("-".into(), |p| super::pct(p.answered)),
            find("rampart", 3, 0.5).map_or("-".into(), |p| super::pct(p.answered)),
            at(RAMPART_BREAKER.name, 3)
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
    ScenarioReport {
        name: "retry-storm",
        title: "retries multiply down a chain".into(),
        question: "How many requests reach each layer of a chain per root request when the leaf fails, with 4 attempts at every hop?".into(),
        setup: vec![
            "A chain s1 → s2 → s3 (and → s4 → s5); the edge calls s1. Every hop: 4 attempts, 1 s timeout, 20 ms full-jitter exponential backoff.".into(),
            "Service time lognormal, median 2 ms, p99 10 ms; a million workers per service (no queueing: the counts are pure amplification). The leaf fails at the given rate; the others never fail on their own.".into(),
            "Depth 3: 500 roots/s for 3 s, the first second not measured (so budgets that start full are spent). Depth 5: 200 roots/s. The edge waits 30 s for each root.".into(),
            "rampart+breaker adds a failure-ratio breaker (50% of at least 20 calls in 10 s, 15 s break) to every hop.".into(),
        ],
        reference: "naive retries reach 4^3 = 64 requests at the leaf at 100% failure (Google SRE book, ch. 22 'Addressing Cascading Failures'); the SRE book's per-client retry budget (retries at most 10% of requests) keeps the growth to about 1.1x per layer.".into(),
        chart,
        tables: vec![leaf, layers, answered],
        findings,
        notes: vec![
            "rampart+breaker is in the tables, not in the chart: a leaf behind an open breaker gets no requests, and zero has no place on a log scale.".into(),
            "rampart's budget deposits 10% of each success (not of each request) and has a floor of 3 retries/s, so at 100% failure it allows only its floor; the hand-written budget (tower's design) deposits for every request and allows 20% plus 10 retries/s.".into(),
        ],
        data: json!({ "points": data }),
    }
}
