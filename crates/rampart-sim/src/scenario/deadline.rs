//! Deadline propagation: a chain api → mid → leaf where some leaf requests never answer, and
//! an edge that gives each root request 500 ms. Without propagation every hop works to its own
//! fixed timeout, holding workers for requests nobody is waiting for and retrying after the
//! root has given up; with it, every hop knows how long its caller will still wait.
//!
//! Metrics: the share of root requests answered within 500 ms, and the share of the leaf's
//! work spent on requests whose root had already given up ("wasted work").

use std::time::Duration;

use serde_json::{Value, json};

use super::{Job, Runner, Size, chain, pct};
use crate::SimError;
use crate::contender::{self, Contender, Hedging, Hop, RAMPART};
use crate::dist::LogNormal;
use crate::report::{Axis, Chart, ScenarioReport, Series, Table, colors, server_side};
use crate::service::ServiceConfig;
use crate::sim::{Load, drive, virtual_time};

/// rampart hedging every hop at its p95 (adaptive), the way to answer past a request that
/// never returns.
pub const RAMPART_HEDGED: Contender = RAMPART.hedged(
    "rampart+hedge",
    Hedging::Adaptive {
        quantile: 0.95,
        floor: Duration::from_millis(10),
    },
);

/// Shares of leaf requests that never answer, swept for the chart; the headline is 5 %.
pub const HANG_RATES: [f64; 5] = [0.0, 0.01, 0.02, 0.05, 0.1];
/// The headline share.
pub const HEADLINE: f64 = 0.05;
/// How long the edge waits for each root.
pub const PATIENCE: Duration = Duration::from_millis(500);

/// The contenders of this scenario.
pub fn contenders() -> Vec<Contender> {
    let mut all = contender::ALL.to_vec();
    all.push(RAMPART_HEDGED);
    all
}

/// Every hop: 4 attempts, a 1 s timeout, 20 ms backoff base.
pub fn hop() -> Hop {
    Hop::new(Duration::from_secs(1))
}

/// The services: api (200 workers) → mid (60 workers, about 2.5 times what it needs when
/// nothing hangs) → leaf (1000 workers, median 20 ms); a fifth of that when quick, for a
/// fifth of the load.
pub fn services(hang_rate: f64, quick: bool) -> Vec<ServiceConfig> {
    let scale = if quick { 5 } else { 1 };
    let fast = LogNormal::from_median_p99(Duration::from_millis(2), Duration::from_millis(8));
    let leaf_time =
        LogNormal::from_median_p99(Duration::from_millis(20), Duration::from_millis(80));
    let mut leaf = ServiceConfig::new("leaf", 1_000 / scale, 2_000, leaf_time);
    leaf.faults.hang_rate = hang_rate;
    vec![
        ServiceConfig::new("api", 200 / scale, 2_000, fast),
        ServiceConfig::new("mid", 60 / scale, 2_000, fast),
        leaf,
    ]
}

/// The load: 1000 roots/s for 12 s (the first 2 s not measured); 200/s for 3 s when quick.
pub fn load(quick: bool) -> Load {
    if quick {
        Load::constant(
            200.0,
            Duration::from_secs(3),
            Duration::from_secs(1),
            PATIENCE,
        )
    } else {
        Load::constant(
            1_000.0,
            Duration::from_secs(12),
            Duration::from_secs(2),
            PATIENCE,
        )
    }
}

/// One simulation's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The contender's name.
    pub contender: &'static str,
    /// Share of leaf requests that never answer.
    pub hang_rate: f64,
    /// Measured roots.
    pub roots: usize,
    /// Share of measured roots answered within the edge's 500 ms.
    pub in_time: f64,
    /// Share of the leaf's work spent after its root had given up.
    pub wasted: f64,
    /// Requests per root at api, mid and leaf.
    pub per_layer: Vec<f64>,
    /// The mid tier's longest queue.
    pub mid_max_queue: usize,
}

/// Runs one chain.
pub fn simulate(
    contender: Contender,
    hang_rate: f64,
    quick: bool,
    seed: u64,
) -> Result<Point, SimError> {
    let configs = services(hang_rate, quick);
    let load = load(quick);
    let (roots, stats) = virtual_time(|| async move {
        let (client, services) = chain(contender, configs, hop(), seed)?;
        let roots = drive(client, &load, seed, Duration::from_secs(60)).await;
        let stats: Vec<_> = services.iter().map(|s| s.stats()).collect();
        Ok::<_, SimError>((roots, stats))
    })??;
    let measured = roots.iter().filter(|r| r.measured).count().max(1);
    let in_time = roots
        .iter()
        .filter(|r| r.measured && r.answered.is_some())
        .count();
    let leaf = stats.last().cloned().unwrap_or_default();
    let wasted = if leaf.work.is_zero() {
        0.0
    } else {
        leaf.wasted.as_secs_f64() / leaf.work.as_secs_f64()
    };
    Ok(Point {
        contender: contender.name,
        hang_rate,
        roots: measured,
        in_time: in_time as f64 / measured as f64,
        wasted,
        per_layer: stats
            .iter()
            .map(|s| s.arrivals as f64 / measured as f64)
            .collect(),
        mid_max_queue: stats.get(1).map_or(0, |s| s.max_queue),
    })
}

/// Runs the scenario.
pub fn run(size: Size, runner: &Runner) -> Result<ScenarioReport, SimError> {
    let rates: &[f64] = if size.quick { &[HEADLINE] } else { &HANG_RATES };
    let mut jobs = Vec::new();
    for c in contenders() {
        for &rate in rates {
            let seed = size.seed_for(&format!("deadline/{rate}"));
            let quick = size.quick;
            jobs.push(Job::new(
                format!("{} with {}% of leaf requests hanging", c.name, rate * 100.0),
                move || simulate(c, rate, quick, seed),
            ));
        }
    }
    let points = runner.run("deadline", jobs)?;
    Ok(summarize(&points, rates))
}

fn summarize(points: &[Point], rates: &[f64]) -> ScenarioReport {
    let find = |name: &str, rate: f64| {
        points
            .iter()
            .find(|p| p.contender == name && p.hang_rate == rate)
    };
    let mut headline = Table::new(
        "5% of leaf requests never answer; the edge waits 500 ms",
        &[
            "contender",
            "answered in time",
            "wasted leaf work",
            "api req/root",
            "mid req/root",
            "leaf req/root",
            "mid max queue",
        ],
    );
    for c in contenders() {
        if let Some(p) = find(c.name, HEADLINE) {
            let mut row = vec![c.name.to_owned(), pct(p.in_time), pct(p.wasted)];
            row.extend(p.per_layer.iter().map(|v| format!("{v:.2}")));
            row.push(p.mid_max_queue.to_string());
            headline.row(row);
        }
    }
    let mut tables = vec![headline];
    if rates.len() > 1 {
        let mut columns = vec!["contender".to_owned()];
        columns.extend(rates.iter().map(|r| format!("{:.0}% hang", r * 100.0)));
        let mut sweep = Table {
            title:
                "answered in time / wasted leaf work, by share of leaf requests that never answer"
                    .into(),
            columns,
            rows: Vec::new(),
        };
        for c in contenders() {
            let mut row = vec![c.name.to_owned()];
            for &rate in rates {
                row.push(find(c.name, rate).map_or("-".into(), |p| {
                    format!("{} / {}", pct(p.in_time), pct(p.wasted))
                }));
            }
            sweep.row(row);
        }
        tables.push(sweep);
    }
    let mut series = Vec::new();
    for c in contenders() {
        let pts = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
            rates
                .iter()
                .filter_map(|&r| find(c.name, r).map(|p| (r * 100.0, f(p) * 100.0)))
                .collect()
        };
        series.push(Series {
            name: format!("{}: answered in time", c.name),
            color: colors::of(c.name),
            dashed: false,
            points: pts(|p| p.in_time),
        });
        series.push(Series {
            name: format!("{}: wasted leaf work", c.name),
            color: colors::of(c.name),
            dashed: true,
            points: pts(|p| p.wasted),
        });
    }
    series.push(Series {
        name: "SRE book at 5%, no propagation: 19.6%".into(),
        color: colors::REFERENCE,
        dashed: false,
        points: vec![
            (HEADLINE * 100.0 - 0.6, 19.6),
            (HEADLINE * 100.0 + 0.6, 19.6),
        ],
    });
    let chart = Chart {
        title: "Answered within 500 ms (solid) and leaf work wasted (dashed)".into(),
        x: Axis::linear(
            "leaf requests that never answer (%)",
            0.0,
            rates.last().copied().unwrap_or(0.1) * 100.0,
        ),
        y: Axis::linear("% of roots (solid) / % of leaf work (dashed)", 0.0, 102.0),
        series,
        bands: Vec::new(),
    };
    let get = |name: &str| find(name, HEADLINE);
    let show = |name: &str, f: fn(&Point) -> f64| get(name).map_or("-".into(), |p| pct(f(p)));
    let findings = vec![
        format!(
            "With 5% of leaf requests hanging, {} of roots are answered in time by naive, {} by budgeted, {} by rampart and {} by rampart hedging at p95.",
            show("naive", |p| p.in_time),
            show("budgeted", |p| p.in_time),
            show("rampart", |p| p.in_time),
            show(RAMPART_HEDGED.name, |p| p.in_time),
        ),
        format!(
            "Without propagation {} (naive) and {} (budgeted) of the leaf's work serves roots that already gave up; with the deadline on the wire, {} (rampart).",
            show("naive", |p| p.wasted),
            show("budgeted", |p| p.wasted),
            show("rampart", |p| p.wasted),
        ),
    ];
    let data: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "contender": p.contender,
                "hang_rate": p.hang_rate,
                "measured_roots": p.roots,
                "answered_in_time": p.in_time,
                "wasted_leaf_work": p.wasted,
                "requests_per_root_by_layer": p.per_layer,
                "mid_max_queue": p.mid_max_queue,
            })
        })
        .collect();
    ScenarioReport {
        name: "deadline",
        title: "a deadline that travels with the request".into(),
        question: "When 5% of leaf requests never answer and the edge waits 500 ms, how many roots are answered in time, and how much leaf work serves roots that already gave up?".into(),
        setup: vec![
            "The edge → api (200 workers) → mid (60 workers: 2.5 times what it needs when nothing hangs) → leaf (1000 workers). Workers are held while a handler waits on its downstream call (thread per request).".into(),
            "api and mid: lognormal median 2 ms, p99 8 ms. Leaf: median 20 ms, p99 80 ms; a share of its requests never answer (and hold no worker).".into(),
            "Every hop: 4 attempts, 1 s timeout, 20 ms backoff base. The edge waits 500 ms per root. 1000 roots/s for 12 s, the first 2 s not measured.".into(),
            "rampart sends min(attempt ceiling, time left) as X-Deadline-Ms; each service reads it into the ambient deadline of its handler, and answers 504 at once when less than its p99 service time is left.".into(),
        ],
        reference: "Google SRE book, ch. 22 'Addressing Cascading Failures', bimodal latency: with 5% of requests never completing and a long deadline, hung requests hold every thread and only 19.6% of requests are served.".into(),
        chart,
        tables,
        findings,
        notes: vec![
            "Wasted work counts leaf service time that ended after its root's 500 ms had passed.".into(),
            server_side(),
        ],
        data: json!({ "points": data }),
    }
}
