//! Deadline propagation: a chain api → mid → leaf where some leaf requests never answer, and
//! an edge that gives each root request 500 ms. Without propagation every hop works to its own
//! per-attempt timeout, holding workers for requests nobody is waiting for and retrying after
//! the root has given up; with it, every hop knows how long its caller will still wait.
//!
//! Longer than the ~600-line guide: the scenario's contenders, its ablations and its sweeps (hang
//! rate, depth, budget cut) run the same chain and share one summary.
//!
//! A baseline's result here depends on its per-hop timeout, so the timeout is swept from 0.3x
//! to 2x the edge's patience, the same for every contender, instead of picking one point: the
//! claim for propagation is that it holds without that tuning.
//!
//! Metrics: the share of root requests answered within 500 ms, and the share of the leaf's
//! work spent on requests whose root had already given up ("wasted work").

use std::time::Duration;

use serde_json::{Value, json};

use super::{Job, Runner, Size, chain, configs, pct, removed};
use crate::SimError;
use crate::contender::{self, Contender, Feature, Hedging, Hop, RAMPART};
use crate::dist::LogNormal;
use crate::report::{Axis, Chart, ScenarioReport, Series, Table, colors};
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

/// The share of leaf requests that never answer.
pub const HANG_RATE: f64 = 0.05;
/// How long the edge waits for each root.
pub const PATIENCE: Duration = Duration::from_millis(500);
/// Per-hop (per-attempt) timeouts swept, as multiples of the edge's patience.
pub const TIMEOUT_FACTORS: [f64; 8] = [0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0];
/// The factors of a `--quick` run.
pub const QUICK_TIMEOUT_FACTORS: [f64; 4] = [0.3, 0.4, 1.0, 2.0];
/// The careful engineer's point: a per-hop timeout of 0.4x the edge's patience (200 ms),
/// where the headline table and the ablations run.
pub const CAREFUL: f64 = 0.4;

/// The contenders of the sweep.
pub fn contenders() -> Vec<Contender> {
    let mut all = contender::ALL.to_vec();
    all.push(RAMPART_HEDGED);
    all
}

/// The ablations: the hedged rampart with one feature removed (without hedging it is
/// `rampart`, already in the sweep).
pub fn ablations() -> Vec<Contender> {
    Feature::ALL
        .into_iter()
        .filter(|&f| f != Feature::Hedging)
        .map(|f| RAMPART_HEDGED.without(f))
        .collect()
}

/// Every hop: 4 attempts, a per-attempt timeout of `factor` times the edge's patience, 20 ms
/// backoff base.
pub fn hop(factor: f64) -> Hop {
    Hop::new(PATIENCE.mul_f64(factor))
}

/// The chain's length (services, the edge's api and the leaf included) everywhere but the
/// depth sweep.
pub const DEPTH: usize = 3;
/// The depth sweep, at the careful per-hop timeout.
pub const DEPTHS: [usize; 4] = [2, 3, 4, 6];
/// The depth sweep when quick.
pub const QUICK_DEPTHS: [usize; 2] = [3, 6];
/// The edge's patience from halfway through the budget-change run (it starts at
/// [`PATIENCE`]); the per-hop timeout stays the one tuned for [`PATIENCE`].
pub const BUDGET_CUT: Duration = Duration::from_millis(200);

/// The services: api (200 workers) → mid (60 workers, about 2.5 times what it needs when
/// nothing hangs) → leaf (1000 workers, median 20 ms); a fifth of that when quick, for a
/// fifth of the load.
pub fn services(hang_rate: f64, quick: bool) -> Vec<ServiceConfig> {
    services_at(hang_rate, quick, DEPTH)
}

/// [`services`] with `depth` services in all: api, `depth - 2` mid tiers, the leaf (at least
/// api and leaf).
pub fn services_at(hang_rate: f64, quick: bool, depth: usize) -> Vec<ServiceConfig> {
    let scale = if quick { 5 } else { 1 };
    let fast = LogNormal::from_median_p99(Duration::from_millis(2), Duration::from_millis(8));
    let leaf_time =
        LogNormal::from_median_p99(Duration::from_millis(20), Duration::from_millis(80));
    let mut leaf = ServiceConfig::new("leaf", 1_000 / scale, 2_000, leaf_time);
    leaf.faults.hang_rate = hang_rate;
    let mut chain = vec![ServiceConfig::new("api", 200 / scale, 2_000, fast)];
    for _ in 2..depth.max(2) {
        chain.push(ServiceConfig::new("mid", 60 / scale, 2_000, fast));
    }
    chain.push(leaf);
    chain
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
    /// The per-hop timeout over the edge's patience.
    pub factor: f64,
    /// Services in the chain.
    pub depth: usize,
    /// Whether the edge's patience was cut halfway through the run ([`BUDGET_CUT`]).
    pub cut: bool,
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

impl Point {
    /// Requests per root at the leaf.
    pub fn leaf(&self) -> f64 {
        self.per_layer.last().copied().unwrap_or(0.0)
    }
}

/// Runs one chain of [`DEPTH`] services.
pub fn simulate(
    contender: Contender,
    factor: f64,
    quick: bool,
    seed: u64,
) -> Result<Point, SimError> {
    simulate_at_depth(contender, factor, DEPTH, quick, seed)
}

/// Runs one chain of [`DEPTH`] services at the careful per-hop timeout while the edge's
/// patience drops from [`PATIENCE`] to [`BUDGET_CUT`] halfway through the run.
pub fn simulate_budget_cut(
    contender: Contender,
    quick: bool,
    seed: u64,
) -> Result<Point, SimError> {
    let mut load = load(quick);
    load.patience_change = Some((load.duration / 2, BUDGET_CUT));
    run_chain(contender, CAREFUL, DEPTH, load, quick, seed, true)
}

/// Runs one chain of `depth` services.
pub fn simulate_at_depth(
    contender: Contender,
    factor: f64,
    depth: usize,
    quick: bool,
    seed: u64,
) -> Result<Point, SimError> {
    run_chain(contender, factor, depth, load(quick), quick, seed, false)
}

fn run_chain(
    contender: Contender,
    factor: f64,
    depth: usize,
    load: Load,
    quick: bool,
    seed: u64,
    cut: bool,
) -> Result<Point, SimError> {
    let configs = services_at(HANG_RATE, quick, depth);
    let (roots, stats) = virtual_time(|| async move {
        let (client, services) = chain(contender, configs, hop(factor), seed)?;
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
        factor,
        depth,
        cut,
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
    let factors: &[f64] = if size.quick {
        &QUICK_TIMEOUT_FACTORS
    } else {
        &TIMEOUT_FACTORS
    };
    let mut jobs = Vec::new();
    let quick = size.quick;
    for c in contenders() {
        for &factor in factors {
            let seed = size.seed_for(&format!("deadline/{factor}"));
            jobs.push(Job::new(
                format!(
                    "{} with a per-hop timeout of {factor}x the patience",
                    c.name
                ),
                move || simulate(c, factor, quick, seed),
            ));
        }
    }
    let depths: &[usize] = if size.quick { &QUICK_DEPTHS } else { &DEPTHS };
    for c in contenders() {
        for &depth in depths.iter().filter(|&&d| d != DEPTH) {
            let seed = size.seed_for(&format!("deadline/depth/{depth}"));
            jobs.push(Job::new(
                format!("{} through {depth} services at {CAREFUL}x", c.name),
                move || simulate_at_depth(c, CAREFUL, depth, quick, seed),
            ));
        }
    }
    for c in contenders() {
        let seed = size.seed_for("deadline/budget-cut");
        jobs.push(Job::new(
            format!(
                "{} while the edge's patience drops to {BUDGET_CUT:?}",
                c.name
            ),
            move || simulate_budget_cut(c, quick, seed),
        ));
    }
    for c in ablations() {
        let seed = size.seed_for(&format!("deadline/{CAREFUL}"));
        jobs.push(Job::new(
            format!("{} with a per-hop timeout of {CAREFUL}x", c.name),
            move || simulate(c, CAREFUL, quick, seed),
        ));
    }
    let points = runner.run("deadline", jobs)?;
    let mut all = contenders();
    all.extend(ablations());
    summarize(&points, factors, depths, configs(&all, hop(CAREFUL))?)
}

/// `a` against `b` on a share where higher is better: "wins", "ties" (within half a point)
/// or "loses".
pub fn versus(a: f64, b: f64) -> &'static str {
    if (a - b).abs() <= 0.005 {
        "ties"
    } else if a > b {
        "wins"
    } else {
        "loses"
    }
}

fn summarize(
    points: &[Point],
    factors: &[f64],
    depths: &[usize],
    configs: Vec<(String, String)>,
) -> Result<ScenarioReport, SimError> {
    let find = |name: &str, factor: f64| {
        points
            .iter()
            .find(|p| p.contender == name && p.factor == factor && p.depth == DEPTH && !p.cut)
    };
    let at_depth = |name: &str, depth: usize| {
        points
            .iter()
            .find(|p| p.contender == name && p.factor == CAREFUL && p.depth == depth && !p.cut)
    };
    let cut = |name: &str| points.iter().find(|p| p.contender == name && p.cut);
    let ms = |factor: f64| PATIENCE.mul_f64(factor).as_millis();
    let mut headline = Table::new(
        format!(
            "5% of leaf requests never answer; the edge waits 500 ms; per-hop timeout {} ms ({CAREFUL}x)",
            ms(CAREFUL)
        ),
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
    let row_of = |name: &str, p: &Point| {
        let mut row = vec![name.to_owned(), pct(p.in_time), pct(p.wasted)];
        row.extend(p.per_layer.iter().map(|v| format!("{v:.2}")));
        row.push(p.mid_max_queue.to_string());
        row
    };
    for c in contenders() {
        if let Some(p) = find(c.name, CAREFUL) {
            headline.row(row_of(c.name, p));
        }
    }
    let mut columns = vec!["contender".to_owned()];
    columns.extend(factors.iter().map(|&f| format!("{} ms ({f}x)", ms(f))));
    let mut sweep = Table {
        title: "answered in time / wasted leaf work, by per-hop timeout (5% of leaf requests hang)"
            .into(),
        columns,
        rows: Vec::new(),
    };
    for c in contenders() {
        let mut row = vec![c.name.to_owned()];
        for &f in factors {
            row.push(find(c.name, f).map_or("-".into(), |p| {
                format!("{} / {}", pct(p.in_time), pct(p.wasted))
            }));
        }
        sweep.row(row);
    }
    let mut columns = vec!["contender".to_owned()];
    columns.extend(depths.iter().map(|d| format!("{d} services")));
    let mut deep = Table {
        title: format!(
            "answered in time / wasted leaf work, by call depth, per-hop timeout {} ms ({CAREFUL}x)",
            ms(CAREFUL)
        ),
        columns,
        rows: Vec::new(),
    };
    for c in contenders() {
        let mut row = vec![c.name.to_owned()];
        for &d in depths {
            row.push(at_depth(c.name, d).map_or("-".into(), |p| {
                format!("{} / {}", pct(p.in_time), pct(p.wasted))
            }));
        }
        deep.row(row);
    }
    let deepest = depths.iter().copied().max().unwrap_or(DEPTH);
    let depth_finding = {
        let show = |name: &str| {
            at_depth(name, deepest).map_or("-".into(), |p| {
                format!("{} in time / {} wasted", pct(p.in_time), pct(p.wasted))
            })
        };
        let (verdict, waste) = match (at_depth("rampart", deepest), at_depth("naive", deepest)) {
            (Some(r), Some(n)) => {
                let waste = if n.wasted > r.wasted + 0.005 {
                    format!(
                        "naive's wasted leaf work grows with depth (to {} through {deepest} services, against {} for rampart)",
                        pct(n.wasted),
                        pct(r.wasted)
                    )
                } else {
                    format!(
                        "the wasted leaf work is level ({} against {})",
                        pct(n.wasted),
                        pct(r.wasted)
                    )
                };
                (versus(r.in_time, n.in_time), waste)
            }
            _ => ("-", "-".to_owned()),
        };
        format!(
            "Call depth, with the careful per-hop timeout ({} ms) kept: through {deepest} services naive answers {}, budgeted {}, rampart {}, rampart+hedge {}: on answers rampart {verdict} against naive, and {waste}.",
            ms(CAREFUL),
            show("naive"),
            show("budgeted"),
            show("rampart"),
            show(RAMPART_HEDGED.name),
        )
    };
    let mut budget = Table::new(
        format!(
            "the edge's patience drops from 500 ms to {} ms halfway through the run; per-hop timeout kept at {} ms (tuned for 500)",
            BUDGET_CUT.as_millis(),
            ms(CAREFUL)
        ),
        &[
            "contender",
            "answered in time",
            "wasted leaf work",
            "leaf req/root",
        ],
    );
    for c in contenders() {
        if let Some(p) = cut(c.name) {
            budget.row(vec![
                c.name.to_owned(),
                pct(p.in_time),
                pct(p.wasted),
                format!("{:.2}", p.leaf()),
            ]);
        }
    }
    let budget_finding = match (cut("naive"), cut("rampart"), cut(RAMPART_HEDGED.name)) {
        (Some(n), Some(r), Some(h)) => format!(
            "When the edge's budget drops from 500 ms to {} ms at run time and the per-hop timeout stays tuned for 500 ms: naive answers {} in time and wastes {} of the leaf's work, rampart {} / {}, rampart+hedge {} / {}: on answers rampart {} against naive, and on waste (lower is better) rampart {}.",
            BUDGET_CUT.as_millis(),
            pct(n.in_time),
            pct(n.wasted),
            pct(r.in_time),
            pct(r.wasted),
            pct(h.in_time),
            pct(h.wasted),
            versus(r.in_time, n.in_time),
            versus(n.wasted, r.wasted),
        ),
        _ => "The budget-change run is missing a contender.".to_owned(),
    };
    let mut ablation = Table::new(
        format!(
            "ablations at {} ms ({CAREFUL}x): rampart+hedge with one feature removed",
            ms(CAREFUL)
        ),
        &[
            "contender",
            "feature removed",
            "answered in time",
            "wasted leaf work",
            "leaf req/root",
        ],
    );
    let mut ablated = vec![RAMPART_HEDGED];
    ablated.extend(ablations());
    for c in &ablated {
        if let Some(p) = find(c.name, CAREFUL) {
            ablation.row(vec![
                c.name.to_owned(),
                removed(c),
                pct(p.in_time),
                pct(p.wasted),
                format!("{:.2}", p.leaf()),
            ]);
        }
    }
    if let Some(p) = find(RAMPART.name, CAREFUL) {
        ablation.row(vec![
            format!("{} (= rampart)", Feature::Hedging.ablation_name()),
            Feature::Hedging.label().to_owned(),
            pct(p.in_time),
            pct(p.wasted),
            format!("{:.2}", p.leaf()),
        ]);
    }
    let mut series = Vec::new();
    for c in contenders() {
        let pts = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
            factors
                .iter()
                .map(|&x| (x, find(c.name, x).map_or(f64::NAN, |p| f(p) * 100.0)))
                .collect()
        };
        let color = colors::of(c.name);
        series.push(Series::sweep(
            format!("{}: answered in time", c.name),
            color,
            pts(|p| p.in_time),
        ));
        series.push(Series::dashed_sweep(
            format!("{}: wasted leaf work", c.name),
            color,
            pts(|p| p.wasted),
        ));
    }
    let chart = Chart {
        title: "Answered within 500 ms (solid) and leaf work wasted (dashed), by per-hop timeout"
            .into(),
        x: Axis::linear(
            "per-hop timeout (x the edge's 500 ms patience)",
            factors.first().copied().unwrap_or(0.3) - 0.05,
            factors.last().copied().unwrap_or(2.0) + 0.05,
        ),
        y: Axis::linear("% of roots (solid) / % of leaf work (dashed)", 0.0, 102.0),
        series,
        bands: Vec::new(),
    };
    let range = |name: &str, f: fn(&Point) -> f64| {
        let values: Vec<(f64, f64)> = factors
            .iter()
            .filter_map(|&x| find(name, x).map(|p| (x, f(p))))
            .collect();
        let lo = values
            .iter()
            .copied()
            .fold((f64::NAN, f64::MAX), |a, b| if b.1 < a.1 { b } else { a });
        let hi = values
            .iter()
            .copied()
            .fold((f64::NAN, f64::MIN), |a, b| if b.1 > a.1 { b } else { a });
        (lo, hi)
    };
    let span = |name: &str| {
        let ((lo_x, lo), _) = range(name, |p| p.in_time);
        let (_, (hi_x, hi)) = range(name, |p| p.wasted);
        format!(
            "{name} answers {} at worst ({} ms) and wastes {} at worst ({} ms)",
            pct(lo),
            ms(lo_x),
            pct(hi),
            ms(hi_x)
        )
    };
    let goal = |name: &str| {
        let ((_, lo), _) = range(name, |p| p.in_time);
        let (_, (_, hi)) = range(name, |p| p.wasted);
        if lo >= 0.95 && hi <= 0.01 {
            "met"
        } else {
            "missed"
        }
    };
    let careful = |name: &str| find(name, CAREFUL);
    let show = |name: &str, f: fn(&Point) -> f64| careful(name).map_or("-".into(), |p| pct(f(p)));
    let vs = |a: &str, b: &str| match (careful(a), careful(b)) {
        (Some(a), Some(b)) => versus(a.in_time, b.in_time),
        _ => "-",
    };
    let rh = RAMPART_HEDGED.name;
    let findings = vec![
        format!(
            "At the careful setting ({} ms per hop, {CAREFUL}x the patience) naive answers {} in time wasting {} of the leaf's work, budgeted {} / {}, rampart {} / {}, rampart+hedge {} / {}: rampart {} against naive there, rampart+hedge {}.",
            ms(CAREFUL),
            show("naive", |p| p.in_time),
            show("naive", |p| p.wasted),
            show("budgeted", |p| p.in_time),
            show("budgeted", |p| p.wasted),
            show("rampart", |p| p.in_time),
            show("rampart", |p| p.wasted),
            show(rh, |p| p.in_time),
            show(rh, |p| p.wasted),
            vs("rampart", "naive"),
            vs(rh, "naive"),
        ),
        format!(
            "Across the sweep ({} to {} ms per hop): {}; {}; {}; {}.",
            ms(factors.first().copied().unwrap_or(0.3)),
            ms(factors.last().copied().unwrap_or(2.0)),
            span("naive"),
            span("budgeted"),
            span("rampart"),
            span(rh),
        ),
        format!(
            "Goal (at least 95% answered in time with at most 1% wasted leaf work at every per-hop timeout): rampart {}, rampart+hedge {}, naive {}, budgeted {}.",
            goal("rampart"),
            goal(rh),
            goal("naive"),
            goal("budgeted"),
        ),
        format!(
            "Attribution at {} ms: without hedging rampart answers {} (a root whose leaf request hangs waits for an attempt timeout and a retry); without propagation rampart+hedge answers {} and wastes {}; without reject_expired it wastes {}.",
            ms(CAREFUL),
            show("rampart", |p| p.in_time),
            show(Feature::Propagation.ablation_name(), |p| p.in_time),
            show(Feature::Propagation.ablation_name(), |p| p.wasted),
            show(Feature::RejectExpired.ablation_name(), |p| p.wasted),
        ),
        depth_finding,
        budget_finding,
    ];
    let data: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "contender": p.contender,
                "hang_rate": HANG_RATE,
                "timeout_over_patience": p.factor,
                "services": p.depth,
                "patience_cut_halfway_ms": p.cut.then(|| BUDGET_CUT.as_millis() as u64),
                "per_hop_timeout_ms": ms(p.factor) as u64,
                "measured_roots": p.roots,
                "answered_in_time": p.in_time,
                "wasted_leaf_work": p.wasted,
                "requests_per_root_by_layer": p.per_layer,
                "mid_max_queue": p.mid_max_queue,
            })
        })
        .collect();
    Ok(ScenarioReport {
        name: "deadline",
        title: "a deadline that travels with the request".into(),
        question: "When 5% of leaf requests never answer and the edge waits 500 ms, how many roots are answered in time, and how much leaf work serves roots that already gave up, whatever the per-hop timeout?".into(),
        setup: vec![
            "The edge → api (200 workers) → mid (60 workers: 2.5 times what it needs when nothing hangs) → leaf (1000 workers). Workers are held while a handler waits on its downstream call (thread per request).".into(),
            "api and mid: lognormal median 2 ms, p99 8 ms. Leaf: median 20 ms, p99 80 ms; 5% of its requests never answer (and hold no worker).".into(),
            "Every hop: 4 attempts, the same per-attempt timeout for every contender, swept from 150 ms (0.3x) to 1 s (2x); 20 ms backoff base. The edge waits 500 ms per root. 1000 roots/s for 12 s, the first 2 s not measured.".into(),
            format!("rampart sends min(attempt ceiling, time left) as X-Deadline-Ms; each service subtracts its configured {} ms reserve and uses the rest as the ambient deadline of its handler, and answers 504 at once when a request arrives with no more than the reserve left.", contender::RESERVE.as_millis()),
        ],
        reference: "Google SRE book, ch. 22 'Addressing Cascading Failures', bimodal latency: with 5% of requests never completing and a long deadline, hung requests hold every thread and only 19.6% of requests are served.".into(),
        chart,
        tables: vec![headline, sweep, deep, budget, ablation],
        terms: vec![
            ("answered in time".into(), "share of measured root requests answered Ok within the edge's 500 ms".into()),
            ("wasted leaf work".into(), "leaf service time that ended after its root's 500 ms had passed, over all leaf service time (measured roots)".into()),
            ("api / mid / leaf req/root".into(), "requests (every attempt and hedge) that reached that service, over measured roots".into()),
            ("mid max queue".into(), "the longest the mid tier's queue got (FIFO places or CriticalityLimit waiters) during the run".into()),
            ("150 ms (0.3x) … 1000 ms (2x)".into(), "the per-hop per-attempt timeout, the same for every contender and every hop, as a multiple of the edge's patience".into()),
            ("2 … 6 services".into(), "the chain's length: api, mid tiers (each like the mid above), the leaf; at the careful per-hop timeout".into()),
        ],
        configs,
        findings,
        notes: vec![
            "The box at the top shows the configuration at the careful point; the sweep changes only the attempt timeout, for every contender alike.".into(),
        ],
        data: json!({ "hang_rate": HANG_RATE, "careful_factor": CAREFUL, "points": data }),
    })
}
