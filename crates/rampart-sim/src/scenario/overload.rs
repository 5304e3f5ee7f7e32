//! Overload: offered load from 0.5x to 10x a service's capacity, with a criticality mix. An
//! ideal server answers its full capacity in time however much is offered (goodput 1.0), and
//! sheds the least important requests first (no priority inversions).
//!
//! The rampart contender's service admits every request through rampart's own
//! [`CriticalityLimit`](rampart::limit::CriticalityLimit)
//! ([`Admission::Criticality`](crate::service::Admission::Criticality)): capacity the service's
//! workers, queue the service's queue, hold [`SHED_HOLD`](crate::contender::SHED_HOLD). The
//! baselines' service keeps one FIFO queue of the same size. The queue is sized to the latency
//! target (100 places, about 0.44 s of work against the caller's 1 s), and swept, since a FIFO
//! baseline's goodput depends on it.

use std::time::Duration;

use rampart::Criticality;
use serde_json::{Value, json};

use super::{Job, Runner, Size, configs, pct, removed};
use crate::SimError;
use crate::contender::{self, Contender, Feature, Hop, RAMPART};
use crate::dist::LogNormal;
use crate::report::{Axis, Chart, ScenarioReport, Series, Table, colors};
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
/// The queue sized to the latency target: 100 places in front of 10 workers (about 0.44 s of
/// work, under the caller's 1 s); 40 in front of the 4 workers of a `--quick` run.
pub const QUEUE: usize = 100;
/// The careful queue of a `--quick` run.
pub const QUICK_QUEUE: usize = 40;
/// Queue lengths swept at [`SWEEP_AT`].
pub const QUEUES: [usize; 5] = [10, 30, 100, 300, 1_000];
/// The queue lengths of a `--quick` run.
pub const QUICK_QUEUES: [usize; 2] = [40, 400];
/// The offered load (x capacity) of the queue sweep and the ablations.
pub const SWEEP_AT: f64 = 10.0;

/// The careful queue length.
pub fn careful_queue(quick: bool) -> usize {
    if quick { QUICK_QUEUE } else { QUEUE }
}

/// The edge's calls: 4 attempts, a 500 ms attempt timeout (half the edge's patience), 20 ms
/// backoff base.
pub fn hop() -> Hop {
    Hop::new(PATIENCE / 2)
}

/// The ablations: rampart with one feature removed (it does not hedge here).
pub fn ablations() -> Vec<Contender> {
    Feature::ALL
        .into_iter()
        .filter(|&f| f != Feature::Hedging)
        .map(|f| RAMPART.without(f))
        .collect()
}

/// The service: a public edge service that classifies requests by route; 10 workers (4 when
/// quick), lognormal median 40 ms, p99 120 ms, `queue` places.
pub fn service(quick: bool, queue: usize) -> ServiceConfig {
    let time = LogNormal::from_median_p99(Duration::from_millis(40), Duration::from_millis(120));
    let workers = if quick { 4 } else { 10 };
    let mut config = ServiceConfig::new("api", workers, queue, time);
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
    /// The queue's places.
    pub queue: usize,
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
    queue: usize,
    quick: bool,
    seed: u64,
) -> Result<Point, SimError> {
    let config = service(quick, queue);
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
        queue,
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
    let queues: &[usize] = if size.quick { &QUICK_QUEUES } else { &QUEUES };
    let quick = size.quick;
    let careful = careful_queue(quick);
    let mut jobs = Vec::new();
    let mut add = |c: Contender, m: f64, queue: usize| {
        let seed = size.seed_for(&format!("overload/{m}"));
        jobs.push(Job::new(
            format!("{} at {m}x capacity, queue {queue}", c.name),
            move || simulate(c, m, queue, quick, seed),
        ));
    };
    for c in contender::ALL {
        for &m in multiples {
            add(c, m, careful);
        }
        for &q in queues.iter().filter(|&&q| q != careful) {
            add(c, SWEEP_AT, q);
        }
    }
    for c in ablations() {
        add(c, SWEEP_AT, careful);
    }
    let points = runner.run("overload", jobs)?;
    let mut all = contender::ALL.to_vec();
    all.extend(ablations());
    summarize(
        &points,
        multiples,
        queues,
        careful,
        service(quick, careful).capacity(),
        configs(&all, hop())?,
    )
}

fn summarize(
    points: &[Point],
    multiples: &[f64],
    queues: &[usize],
    careful: usize,
    capacity: f64,
    configs: Vec<(String, String)>,
) -> Result<ScenarioReport, SimError> {
    let find_at = |name: &str, m: f64, q: usize| {
        points
            .iter()
            .find(|p| p.contender == name && p.multiple == m && p.queue == q)
    };
    let find = |name: &str, m: f64| find_at(name, m, careful);
    let mut columns = vec!["contender".to_owned()];
    columns.extend(multiples.iter().map(|m| format!("{m}x")));
    let mut goodput = Table {
        title: format!(
            "goodput (answered within 1 s, per second, over capacity), by offered load; queue {careful}"
        ),
        columns: columns.clone(),
        rows: Vec::new(),
    };
    let mut inv = Table {
        title: format!("priority inversions, by offered load; queue {careful}"),
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
        format!("share of roots not answered in time, per level; queue {careful}"),
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
    let mut qcolumns = vec!["contender".to_owned()];
    qcolumns.extend(queues.iter().map(|q| format!("queue {q}")));
    let mut by_queue = Table {
        title: format!("goodput / priority inversions at {SWEEP_AT}x capacity, by queue length"),
        columns: qcolumns,
        rows: Vec::new(),
    };
    for c in contender::ALL {
        let mut row = vec![c.name.to_owned()];
        for &q in queues {
            row.push(find_at(c.name, SWEEP_AT, q).map_or("-".into(), |p| {
                format!("{:.2} / {}", p.goodput, pct(p.inversions))
            }));
        }
        by_queue.row(row);
    }
    let mut ablation = Table::new(
        format!(
            "ablations at {SWEEP_AT}x capacity, queue {careful}: rampart with one feature removed"
        ),
        &[
            "contender",
            "feature removed",
            "goodput",
            "inversions",
            "Critical lost",
            "CriticalPlus lost",
            "req/root",
        ],
    );
    let mut ablated = vec![RAMPART];
    ablated.extend(ablations());
    for c in &ablated {
        if let Some(p) = find(c.name, SWEEP_AT) {
            ablation.row(vec![
                c.name.to_owned(),
                removed(c),
                format!("{:.2}", p.goodput),
                pct(p.inversions),
                pct(p.levels[2].1),
                pct(p.levels[3].1),
                format!("{:.2}", p.attempts),
            ]);
        }
    }
    let max = multiples.last().copied().unwrap_or(10.0);
    let mut series: Vec<Series> = contender::ALL
        .iter()
        .map(|c| {
            Series::sweep(
                c.name,
                colors::of(c.name),
                multiples
                    .iter()
                    .map(|&m| (m, find(c.name, m).map_or(f64::NAN, |p| p.goodput)))
                    .collect(),
            )
        })
        .collect();
    series.push(Series {
        name: "ideal: min(offered, 1)".into(),
        color: colors::REFERENCE,
        dashed: true,
        markers: false,
        points: vec![(multiples[0], multiples[0]), (1.0, 1.0), (max, 1.0)],
    });
    let chart = Chart {
        title: format!("Goodput vs offered load (queue {careful})"),
        x: Axis::log("offered load (x capacity, log)", multiples[0], max),
        y: Axis::linear("goodput (answered in time / capacity)", 0.0, 1.2),
        series,
        bands: Vec::new(),
    };
    let over: Vec<f64> = multiples.iter().copied().filter(|&m| m >= 2.0).collect();
    let worst = |name: &str| {
        over.iter()
            .filter_map(|&m| find(name, m))
            .map(|p| (p.goodput, p.inversions))
            .fold((f64::MAX, 0.0f64), |(g, i), (pg, pi)| {
                (g.min(pg), i.max(pi))
            })
    };
    let summary = |name: &str| {
        let (g, i) = worst(name);
        format!("{name} {g:.2} (inversions at most {})", pct(i))
    };
    let goal = |name: &str| {
        let (g, i) = worst(name);
        if g >= 0.95 && i == 0.0 {
            "met"
        } else {
            "missed"
        }
    };
    let lost =
        |name: &str, level: usize| find(name, max).map_or("-".into(), |p| pct(p.levels[level].1));
    // Win when rampart loses less of both top levels than each baseline does.
    let top = |name: &str| find(name, max).map(|p| (p.levels[2].1, p.levels[3].1));
    let top_verdict = match (top("rampart"), top("naive"), top("budgeted")) {
        (Some(r), Some(n), Some(b)) if r.0 < n.0.min(b.0) && r.1 < n.1.min(b.1) => "Win",
        (Some(r), Some(n), Some(b)) if r.0 > n.0.max(b.0) && r.1 > n.1.max(b.1) => "Loss",
        (Some(_), Some(_), Some(_)) => "Mixed",
        _ => "Missing",
    };
    let qrange = |name: &str| {
        let values: Vec<f64> = queues
            .iter()
            .filter_map(|&q| find_at(name, SWEEP_AT, q))
            .map(|p| p.goodput)
            .collect();
        let lo = values.iter().copied().fold(f64::MAX, f64::min);
        let hi = values.iter().copied().fold(f64::MIN, f64::max);
        format!("{lo:.2} to {hi:.2}")
    };
    let ties: Vec<String> = multiples
        .iter()
        .filter(|&&m| {
            let g = |n: &str| find(n, m).map_or(f64::NAN, |p| p.goodput);
            (g("naive") - g("rampart")).abs() <= 0.02
                && (g("budgeted") - g("rampart")).abs() <= 0.02
        })
        .map(|m| format!("{m}x"))
        .collect();
    let ab = |f: Feature| {
        find(f.ablation_name(), SWEEP_AT).map_or("-".into(), |p| {
            format!("goodput {:.2}, inversions {}", p.goodput, pct(p.inversions))
        })
    };
    let losses: Vec<String> = multiples
        .iter()
        .filter_map(|&m| {
            let g = |n: &str| find(n, m).map_or(f64::NAN, |p| p.goodput);
            let best = g("naive").max(g("budgeted"));
            (g("rampart") < best - 0.02)
                .then(|| format!("{m}x ({:.2} against {best:.2})", g("rampart")))
        })
        .collect();
    let limiter_breaker = find(Feature::Limiter.ablation_name(), SWEEP_AT)
        .filter(|p| p.attempts < 0.1)
        .map_or(String::new(), |_| {
            " (it sent almost nothing: the FIFO's 503s carry no Retry-After, so the shared classifier calls them transient, and rampart's breaker opened on them)".to_owned()
        });
    let findings = vec![
        if losses.is_empty() {
            "Goodput against the better baseline: rampart is below it (by more than 0.02) at no load level.".to_owned()
        } else {
            format!(
                "Loss: rampart's goodput is below the better baseline's (by more than 0.02) at {}. Above 2.5x one level alone (Critical) offers more than the capacity; the CriticalityLimit serves a level in arrival order and refuses a waiter left with less than a permit's mean hold (its adaptive LIFO, `lifo_after`, is off by default and not used here).",
                losses.join(", ")
            )
        },
        format!(
            "Lowest goodput from 2x to {max}x with the queue sized to the latency target ({careful} places): {}, {}, {}. Goal (at least 0.95 with zero inversions): rampart {}, naive {}, budgeted {}.",
            summary("naive"),
            summary("budgeted"),
            summary("rampart"),
            goal("rampart"),
            goal("naive"),
            goal("budgeted"),
        ),
        if ties.is_empty() {
            "Tie on goodput (within 0.02 of rampart for both baselines) at no load level."
                .to_owned()
        } else {
            format!(
                "Tie on goodput (within 0.02 of rampart for both baselines) at {}: a right-sized FIFO queue keeps goodput there; what it cannot do is choose whom to serve.",
                ties.join(", ")
            )
        },
        format!(
            "{}: at {max}x rampart loses {} of Critical and {} of CriticalPlus roots, against {} and {} (naive) and {} and {} (budgeted): the FIFO sheds by arrival, whatever the level.",
            top_verdict,
            lost("rampart", 2),
            lost("rampart", 3),
            lost("naive", 2),
            lost("naive", 3),
            lost("budgeted", 2),
            lost("budgeted", 3),
        ),
        format!(
            "The baselines depend on the queue: at {SWEEP_AT}x their goodput runs {} (naive) and {} (budgeted) over queues of {} to {} places; rampart's {}.",
            qrange("naive"),
            qrange("budgeted"),
            queues.first().copied().unwrap_or(0),
            queues.last().copied().unwrap_or(0),
            qrange("rampart"),
        ),
        format!(
            "Attribution at {SWEEP_AT}x: without the CriticalityLimit (FIFO instead) rampart gets {}{limiter_breaker}; without propagation {}; without the budget {}; without the breaker {}; without reject_expired {}.",
            ab(Feature::Limiter),
            ab(Feature::Propagation),
            ab(Feature::Budget),
            ab(Feature::Breaker),
            ab(Feature::RejectExpired),
        ),
    ];
    let data: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "contender": p.contender,
                "offered_over_capacity": p.multiple,
                "queue": p.queue,
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
    Ok(ScenarioReport {
        name: "overload",
        title: "goodput and who gets shed under overload".into(),
        question: "From 0.5x to 10x capacity, with a criticality mix, how much is answered in time, who is shed, and how often is a more important request dropped while a less important one is served?".into(),
        setup: vec![
            format!("The edge → api: 10 workers, lognormal median 40 ms, p99 120 ms (capacity {capacity:.0} requests/s), a queue of {careful} places (about {:.2} s of work, under the caller's 1 s), swept from {} to {} at {SWEEP_AT}x. api is a public edge service: it assigns each request's level from its route (local code, so CriticalPlus is reachable).", careful as f64 / capacity, queues.first().copied().unwrap_or(0), queues.last().copied().unwrap_or(0)),
            "Mix: CriticalPlus 10%, Critical 40%, SheddablePlus 30%, Sheddable 20%. The edge waits 1 s per root; its calls: 4 attempts, 500 ms attempt timeout, 20 ms backoff base.".into(),
            format!("Servers: naive and budgeted, one FIFO queue in front of the workers; rampart, rampart's CriticalityLimit with capacity = the workers, the same queue length, a hold of {:?} and its defaults otherwise (arrival order within a level, min_time_left the measured hold), asked with each request's level and propagated deadline (a request waits at most until its deadline less the reserve).", contender::SHED_HOLD),
            "15 s per load level, the first 5 s not measured.".into(),
        ],
        reference: "The ideal: goodput 1.0 at every overload level and zero priority inversions (Google SRE book, ch. 21 'Handling Overload': criticality-aware shedding).".into(),
        chart,
        tables: vec![goodput, shed, inv, by_queue, ablation],
        terms: vec![
            ("goodput".into(), "root requests answered Ok within the edge's 1 s, per second of the measured window (counted when answered), over the service's capacity; 1.0 is the ideal above capacity".into()),
            ("0.5x … 10x".into(), "offered root requests per second over the service's capacity".into()),
            ("priority inversions".into(), "share of the service's handler starts in the measured window that went to a lower level while a more important root, which was then not answered in time, was waiting (sent at most 1 s earlier)".into()),
            ("Sheddable … CriticalPlus".into(), "share of that level's measured roots not answered Ok within 1 s".into()),
            ("req/root".into(), "requests (every attempt) that reached the service, over measured roots".into()),
            ("queue N".into(), "the waiting places in front of the workers: the FIFO's, or the CriticalityLimit's queue".into()),
        ],
        configs,
        findings,
        notes: Vec::new(),
        data: json!({ "capacity_per_sec": capacity, "careful_queue": careful, "sweep_at": SWEEP_AT, "points": data }),
    })
}
