//! Overload: offered load from 0.5x to 10x a service's capacity, with a criticality mix. An
//! ideal server answers its full capacity in time however much is offered (goodput 1.0), and
//! sheds the least important requests first (no priority inversions).
//!
//! The rampart contender's service admits every request through rampart's own
//! [`CriticalityLimit`](rampart::limit::CriticalityLimit)
//! ([`Admission::Criticality`](crate::service::Admission::Criticality)): capacity the service's
//! workers, queue the service's queue, hold [`SHED_HOLD`](crate::contender::SHED_HOLD). The
//! baselines' service keeps one FIFO queue of the same size.

use std::time::Duration;

use rampart::Criticality;
use serde_json::{Value, json};

use super::{Job, Runner, Size, pct};
use crate::SimError;
use crate::contender::{self, Contender, Hop};
use crate::dist::LogNormal;
use crate::report::{Axis, Chart, ScenarioReport, Series, Table, colors, server_side};
use crate::service::{LevelSource, ServiceConfig};
use crate::sim::{Load, Mix, Root, drive, virtual_time};

/// The level mix: Sheddable 20 %, SheddablePlus 30 %, Critical 40 %, CriticalPlus 10 %.
pub const MIX: Mix = [0.2, 0.3, 0.4, 0.1];
/// Offered load as multiples of capacity.
pub const MULTIPLES: [f64; 10] = [0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0];
/// The multiples of a `--quick` run.
pub const QUICK_MULTIPLES: [f64; 3] = [0.5, 2.0, 10.0];
/// How long the edge waits for each root.
pub const PATIENCE: Duration = Duration::from_secs(1);

/// The edge's calls: 4 attempts, a 1 s timeout (the edge's whole patience: a request is not
/// abandoned while its caller still waits), 20 ms backoff base.
pub fn hop() -> Hop {
    Hop::new(PATIENCE)
}

/// The service: a public edge service that classifies requests by route; 10 workers (4 when
/// quick), lognormal median 40 ms, p99 120 ms, a queue of 1000.
pub fn service(quick: bool) -> ServiceConfig {
    let time = LogNormal::from_median_p99(Duration::from_millis(40), Duration::from_millis(120));
    let workers = if quick { 4 } else { 10 };
    let mut config = ServiceConfig::new("api", workers, 1_000, time);
    config.levels = LevelSource::Route;
    config.record_starts = true;
    config
}

/// One simulation's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The contender's name.
    pub contender: &'static str,
    /// Offered load over capacity.
    pub multiple: f64,
    /// Measured roots.
    pub roots: usize,
    /// Roots answered in time per second of the measured window (by when they were answered),
    /// over capacity.
    pub goodput: f64,
    /// Per level (`Sheddable` first): measured roots, and the share not answered in time.
    pub levels: [(usize, f64); 4],
    /// Share of the service's work (handler starts in the measured window) that went to a lower
    /// level while a more important root, then not answered in time, was waiting.
    pub inversions: f64,
    /// Requests reaching the service per measured root.
    pub attempts: f64,
}

/// Runs one load level.
pub fn simulate(
    contender: Contender,
    multiple: f64,
    quick: bool,
    seed: u64,
) -> Result<Point, SimError> {
    let config = service(quick);
    let capacity = config.capacity();
    let (secs, warm) = if quick { (3.0, 1.0) } else { (15.0, 5.0) };
    let mut load = Load::constant(
        capacity * multiple,
        Duration::from_secs_f64(secs),
        Duration::from_secs_f64(warm),
        PATIENCE,
    );
    load.mix = MIX;
    let (roots, stats) = virtual_time(|| async move {
        let (client, services) = super::chain(contender, vec![config], hop(), seed)?;
        let roots = drive(client, &load, seed, Duration::from_secs(30)).await;
        let stats = services.first().map(|s| s.stats()).unwrap_or_default();
        Ok::<_, SimError>((roots, stats))
    })??;
    let measured: Vec<&Root> = roots.iter().filter(|r| r.measured).collect();
    // Goodput counts answers given inside the measured window, while the load is on.
    let window = Duration::from_secs_f64(warm)..Duration::from_secs_f64(secs);
    let answered = roots
        .iter()
        .filter(|r| r.answered.is_some_and(|l| window.contains(&(r.sent + l))))
        .count();
    let mut levels = [(0usize, 0.0f64); 4];
    for (i, level) in Criticality::ALL.into_iter().enumerate() {
        let of_level: Vec<_> = measured.iter().filter(|r| r.level == level).collect();
        let failed = of_level.iter().filter(|r| r.answered.is_none()).count();
        levels[i] = (of_level.len(), failed as f64 / of_level.len().max(1) as f64);
    }
    Ok(Point {
        contender: contender.name,
        multiple,
        roots: measured.len(),
        goodput: answered as f64 / (secs - warm) / capacity,
        levels,
        inversions: inversions(&measured, &stats.starts, PATIENCE, &window),
        attempts: stats.arrivals as f64 / measured.len().max(1) as f64,
    })
}

/// Priority inversions: the share of the service's handler starts inside `window` that went to
/// a request of a lower level while a more important root, which was then not answered in time,
/// was waiting (sent at most `patience` earlier). Each start counts once: capacity spent on less
/// important work while more important work was lost.
pub fn inversions(
    roots: &[&Root],
    starts: &[(Duration, Criticality)],
    patience: Duration,
    window: &std::ops::Range<Duration>,
) -> f64 {
    let mut failed: [Vec<Duration>; 4] = Default::default();
    for r in roots.iter().filter(|r| r.answered.is_none()) {
        failed[r.level as usize].push(r.sent);
    }
    for sent in &mut failed {
        sent.sort();
    }
    let waiting = |sent: &[Duration], at: Duration| {
        let from = sent.partition_point(|&s| s + patience <= at);
        sent.get(from).is_some_and(|&s| s <= at)
    };
    let inside: Vec<_> = starts
        .iter()
        .filter(|(at, _)| window.contains(at))
        .collect();
    let inverted = inside
        .iter()
        .filter(|&&&(at, level)| failed[level as usize + 1..].iter().any(|f| waiting(f, at)))
        .count();
    inverted as f64 / inside.len().max(1) as f64
}

/// Runs the scenario.
pub fn run(size: Size, runner: &Runner) -> Result<ScenarioReport, SimError> {
    let multiples: &[f64] = if size.quick {
        &QUICK_MULTIPLES
    } else {
        &MULTIPLES
    };
    let mut jobs = Vec::new();
    for c in contender::ALL {
        for &m in multiples {
            let seed = size.seed_for(&format!("overload/{m}"));
            let quick = size.quick;
            jobs.push(Job::new(
                format!("{} at {m}x capacity", c.name),
                move || simulate(c, m, quick, seed),
            ));
        }
    }
    let points = runner.run("overload", jobs)?;
    Ok(summarize(
        &points,
        multiples,
        service(size.quick).capacity(),
    ))
}

fn summarize(points: &[Point], multiples: &[f64], capacity: f64) -> ScenarioReport {
    let find = |name: &str, m: f64| {
        points
            .iter()
            .find(|p| p.contender == name && p.multiple == m)
    };
    let mut columns = vec!["contender".to_owned()];
    columns.extend(multiples.iter().map(|m| format!("{m}x")));
    let mut goodput = Table {
        title: "goodput (answered within 1 s, per second, over capacity), by offered load".into(),
        columns: columns.clone(),
        rows: Vec::new(),
    };
    let mut inv = Table {
        title: "priority inversions: share of the service's work started on a lower level while a more important request, then not answered in time, was waiting".into(),
        columns,
        rows: Vec::new(),
    };
    for c in contender::ALL {
        let mut row = vec![c.name.to_owned()];
        let mut irow = row.clone();
        for &m in multiples {
            let p = find(c.name, m);
            row.push(p.map_or("-".into(), |p| format!("{:.2}", p.goodput)));
            irow.push(p.map_or("-".into(), |p| pct(p.inversions)));
        }
        goodput.row(row);
        inv.row(irow);
    }
    let mut shed = Table::new(
        "share of roots not answered in time, per level",
        &[
            "contender",
            "load",
            "Sheddable",
            "SheddablePlus",
            "Critical",
            "CriticalPlus",
            "req/root",
        ],
    );
    let shown: Vec<f64> = multiples
        .iter()
        .copied()
        .filter(|&m| m == 2.0 || m == 5.0 || m == 10.0)
        .collect();
    for &m in &shown {
        for c in contender::ALL {
            if let Some(p) = find(c.name, m) {
                let mut row = vec![c.name.to_owned(), format!("{m}x")];
                row.extend(p.levels.iter().map(|&(_, failed)| pct(failed)));
                row.push(format!("{:.2}", p.attempts));
                shed.row(row);
            }
        }
    }
    let max = multiples.last().copied().unwrap_or(10.0);
    let mut series: Vec<Series> = contender::ALL
        .iter()
        .map(|c| Series {
            name: c.name.to_owned(),
            color: colors::of(c.name),
            dashed: false,
            points: multiples
                .iter()
                .filter_map(|&m| find(c.name, m).map(|p| (m, p.goodput)))
                .collect(),
        })
        .collect();
    series.push(Series {
        name: "ideal: min(offered, 1)".into(),
        color: colors::REFERENCE,
        dashed: true,
        points: vec![(multiples[0], multiples[0]), (1.0, 1.0), (max, 1.0)],
    });
    let chart = Chart {
        title: "Goodput vs offered load".into(),
        x: Axis::log("offered load (x capacity, log)", multiples[0], max),
        y: Axis::linear("goodput (answered in time / capacity)", 0.0, 1.2),
        series,
        bands: Vec::new(),
    };
    let g = |name: &str, m: f64| find(name, m).map_or("-".into(), |p| format!("{:.2}", p.goodput));
    let i = |name: &str, m: f64| find(name, m).map_or("-".into(), |p| pct(p.inversions));
    let findings = vec![
        format!(
            "At {max}x capacity goodput is {} for naive, {} for budgeted and {} for rampart (ideal 1.0): a FIFO queue longer than the caller's patience serves requests nobody waits for.",
            g("naive", max),
            g("budgeted", max),
            g("rampart", max)
        ),
        format!(
            "rampart's CriticalityLimit (the lowest level shed first, the highest waiting level served first) keeps priority inversions at {} at {max}x, against {} (naive) and {} (budgeted), whose FIFO queues serve requests in arrival order whatever their level.",
            i("rampart", max),
            i("naive", max),
            i("budgeted", max)
        ),
    ];
    let data: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "contender": p.contender,
                "offered_over_capacity": p.multiple,
                "measured_roots": p.roots,
                "goodput": p.goodput,
                "inversions": p.inversions,
                "requests_per_root": p.attempts,
                "levels": Criticality::ALL.iter().zip(p.levels).map(|(l, (n, failed))| json!({
                    "level": l.as_str(), "roots": n, "not_answered": failed,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    ScenarioReport {
        name: "overload",
        title: "goodput and who gets shed under overload".into(),
        question: "From 0.5x to 10x capacity, with a criticality mix, how much is answered in time, who is shed, and how often is a more important request dropped while a less important one is served?".into(),
        setup: vec![
            format!("The edge → api: 10 workers, lognormal median 40 ms, p99 120 ms (capacity {capacity:.0} requests/s), a queue of 1000. api is a public edge service: it assigns each request's level from its route (local code, so CriticalPlus is reachable)."),
            "Mix: CriticalPlus 10%, Critical 40%, SheddablePlus 30%, Sheddable 20%. The edge waits 1 s per root; its calls: 4 attempts, 1 s timeout (all of its patience), 20 ms backoff base.".into(),
            format!("Servers: naive and budgeted, one FIFO queue of 1000 in front of the workers; rampart, rampart's CriticalityLimit with capacity = the workers, a queue of 1000 and a hold of {:?}, asked with each request's level and propagated deadline (a request waits at most until its deadline).", contender::SHED_HOLD),
            "15 s per load level, the first 5 s not measured.".into(),
        ],
        reference: "The ideal: goodput 1.0 at every overload level and zero priority inversions (Google SRE book, ch. 21 'Handling Overload': criticality-aware shedding).".into(),
        chart,
        tables: vec![goodput, shed, inv],
        findings,
        notes: vec![server_side()],
        data: json!({ "capacity_per_sec": capacity, "points": data }),
    }
}
