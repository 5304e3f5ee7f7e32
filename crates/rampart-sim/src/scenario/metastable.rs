//! Metastable failure: a service at 70 % load takes a 60 s spike to twice that (140 %), then
//! load drops to 90 %, below capacity. A system whose retries and abandoned work keep it
//! overloaded after the trigger is gone stays down; a healthy one comes back. The metric is
//! the time after the spike for goodput to return to 95 % of its level before the spike.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Job, Runner, Size, chain, configs, removed};
use crate::SimError;
use crate::contender::{self, Contender, Feature, Hop, RAMPART};
use crate::dist::LogNormal;
use crate::report::{Axis, Band, Chart, ScenarioReport, Series, Table, colors};
use crate::scenario::overload::{QUEUE, QUICK_QUEUE, careful_queue};
use crate::service::ServiceConfig;
use crate::sim::{Load, drive, virtual_time};

/// How long the edge waits for each root.
pub const PATIENCE: Duration = Duration::from_secs(1);

/// The edge's calls: 4 attempts, a 300 ms timeout, 20 ms backoff base.
pub fn hop() -> Hop {
    Hop::new(Duration::from_millis(300))
}

/// Queue lengths swept (the careful one, sized to the latency target, is the overload
/// scenario's: [`QUEUE`]).
pub const QUEUES: [usize; 4] = [30, QUEUE, 300, 1_000];
/// The queue lengths of a `--quick` run.
pub const QUICK_QUEUES: [usize; 2] = [QUICK_QUEUE, 400];

/// The ablations: rampart with one feature removed (it does not hedge here).
pub fn ablations() -> Vec<Contender> {
    Feature::ALL
        .into_iter()
        .filter(|&f| f != Feature::Hedging)
        .map(|f| RAMPART.without(f))
        .collect()
}

/// The service: 10 workers (4 when quick), lognormal median 40 ms, p99 120 ms, `queue`
/// places.
pub fn service(quick: bool, queue: usize) -> ServiceConfig {
    let time = LogNormal::from_median_p99(Duration::from_millis(40), Duration::from_millis(120));
    ServiceConfig::new("api", if quick { 4 } else { 10 }, queue, time)
}

/// The phases, in seconds: before the spike, the spike, after it.
pub fn phases(quick: bool) -> (u64, u64, u64) {
    if quick { (8, 10, 20) } else { (30, 60, 120) }
}

/// One simulation's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The contender's name.
    pub contender: &'static str,
    /// The queue's places.
    pub queue: usize,
    /// Roots answered in time per second (by the second they were answered), over capacity.
    pub goodput: Vec<f64>,
    /// Mean goodput before the spike (its first quarter left out).
    pub before: f64,
    /// Mean goodput during the spike.
    pub during: f64,
    /// Mean goodput over the last 20 s.
    pub end: f64,
    /// Seconds after the spike until goodput is back to 95 % of `before` (and stays there for
    /// 10 s); `None` if it never is.
    pub recovery: Option<u64>,
    /// Requests reaching the service per root, after the spike.
    pub attempts_after: f64,
}

/// Runs one contender through the spike.
pub fn simulate(
    contender: Contender,
    queue: usize,
    quick: bool,
    seed: u64,
) -> Result<Point, SimError> {
    let config = service(quick, queue);
    let capacity = config.capacity();
    let (before, spike, after) = phases(quick);
    let total = before + spike + after;
    let load = Load {
        phases: vec![
            (Duration::from_secs(before), 0.7 * capacity),
            (Duration::from_secs(before + spike), 1.4 * capacity),
            (Duration::from_secs(total), 0.9 * capacity),
        ],
        duration: Duration::from_secs(total),
        warmup: Duration::from_secs(before + spike),
        patience: PATIENCE,
        patience_change: None,
        mix: crate::sim::ALL_CRITICAL,
    };
    let (roots, arrivals) = virtual_time(|| async move {
        let (client, services) = chain(contender, vec![config], hop(), seed)?;
        let roots = drive(client, &load, seed, Duration::from_secs(30)).await;
        let arrivals = services.first().map_or(0, |s| s.stats().arrivals);
        Ok::<_, SimError>((roots, arrivals))
    })??;
    let mut per_second = vec![0u64; total as usize];
    for root in &roots {
        if let Some(latency) = root.answered
            && let Some(slot) = per_second.get_mut((root.sent + latency).as_secs() as usize)
        {
            *slot += 1;
        }
    }
    let goodput: Vec<f64> = per_second.iter().map(|&n| n as f64 / capacity).collect();
    let mean = |from: u64, to: u64| {
        let span = &goodput[from as usize..to as usize];
        span.iter().sum::<f64>() / span.len().max(1) as f64
    };
    let level_before = mean(before / 4, before);
    let spike_end = before + spike;
    let smooth = |t: u64| mean(t.saturating_sub(4), t + 1);
    let recovery = (spike_end..total).find(|&t| {
        (t..(t + 10).min(total)).all(|u| smooth(u) >= 0.95 * level_before) && t + 10 <= total
    });
    let measured_after = roots.iter().filter(|r| r.measured).count();
    Ok(Point {
        contender: contender.name,
        queue,
        before: level_before,
        during: mean(before, spike_end),
        end: mean(total - 20, total),
        recovery: recovery.map(|t| t - spike_end),
        attempts_after: arrivals as f64 / measured_after.max(1) as f64,
        goodput,
    })
}

/// Runs the scenario.
pub fn run(size: Size, runner: &Runner) -> Result<ScenarioReport, SimError> {
    let quick = size.quick;
    let careful = careful_queue(quick);
    let queues: &[usize] = if quick { &QUICK_QUEUES } else { &QUEUES };
    let seed = size.seed_for("metastable");
    let mut jobs = Vec::new();
    for c in contender::ALL {
        for &q in queues {
            jobs.push(Job::new(format!("{} queue {q}", c.name), move || {
                simulate(c, q, quick, seed)
            }));
        }
    }
    for c in ablations() {
        jobs.push(Job::new(format!("{} queue {careful}", c.name), move || {
            simulate(c, careful, quick, seed)
        }));
    }
    let points = runner.run("metastable", jobs)?;
    let mut all = contender::ALL.to_vec();
    all.extend(ablations());
    summarize(&points, quick, queues, configs(&all, hop())?)
}

/// How a recovery reads in a table.
fn recovery(p: &Point, after: u64) -> String {
    match p.recovery {
        None => format!("not within {after} s"),
        Some(0) if p.during >= 0.95 * p.before => "never fell".to_owned(),
        Some(s) => format!("{s} s"),
    }
}

fn summarize(
    all_points: &[Point],
    quick: bool,
    queues: &[usize],
    configs: Vec<(String, String)>,
) -> Result<ScenarioReport, SimError> {
    let careful = careful_queue(quick);
    let points: Vec<&Point> = all_points
        .iter()
        .filter(|p| p.queue == careful && contender::ALL.iter().any(|c| c.name == p.contender))
        .collect();
    let find_at = |name: &str, q: usize| {
        all_points
            .iter()
            .find(|p| p.contender == name && p.queue == q)
    };
    let (before, spike, after) = phases(quick);
    let mut table = Table::new(
        format!(
            "goodput (answered within 1 s, over capacity) around a spike from 0.7x to 1.4x capacity; queue {careful}"
        ),
        &[
            "contender",
            "before the spike",
            "during it",
            "last 20 s",
            "recovered after",
            "req/root after the spike",
        ],
    );
    let mut ablated = vec![RAMPART];
    ablated.extend(ablations());
    let mut ablation = Table::new(
        format!("ablations, queue {careful}: rampart with one feature removed"),
        &[
            "contender",
            "feature removed",
            "during the spike",
            "last 20 s",
            "recovered after",
            "req/root after",
        ],
    );
    for c in &ablated {
        if let Some(p) = find_at(c.name, careful) {
            ablation.row(vec![
                c.name.to_owned(),
                removed(c),
                format!("{:.2}", p.during),
                format!("{:.2}", p.end),
                recovery(p, after),
                format!("{:.2}", p.attempts_after),
            ]);
        }
    }
    let mut qcolumns = vec!["contender".to_owned()];
    qcolumns.extend(queues.iter().map(|q| format!("queue {q}")));
    let mut by_queue = Table {
        title: "goodput during the spike / recovery after it, by queue length".into(),
        columns: qcolumns,
        rows: Vec::new(),
    };
    for c in contender::ALL {
        let mut row = vec![c.name.to_owned()];
        for &q in queues {
            row.push(find_at(c.name, q).map_or("-".into(), |p| {
                format!("{:.2} / {}", p.during, recovery(p, after))
            }));
        }
        by_queue.row(row);
    }
    for p in &points {
        table.row(vec![
            p.contender.to_owned(),
            format!("{:.2}", p.before),
            format!("{:.2}", p.during),
            format!("{:.2}", p.end),
            recovery(p, after),
            format!("{:.2}", p.attempts_after),
        ]);
    }
    let total = before + spike + after;
    let mut series: Vec<Series> = points
        .iter()
        .enumerate()
        .map(|(i, p)| Series {
            name: p.contender.to_owned(),
            color: colors::of(p.contender),
            dashed: i == 1,
            markers: false,
            points: p
                .goodput
                .iter()
                .enumerate()
                .map(|(t, &g)| (t as f64 + 0.5, g))
                .collect(),
        })
        .collect();
    series.push(Series {
        name: "offered (roots/s over capacity)".into(),
        color: colors::REFERENCE,
        dashed: true,
        markers: false,
        points: vec![
            (0.0, 0.7),
            (before as f64, 0.7),
            (before as f64, 1.4),
            ((before + spike) as f64, 1.4),
            ((before + spike) as f64, 0.9),
            (total as f64, 0.9),
        ],
    });
    let chart = Chart {
        title: "Goodput over time around a 2x spike (shaded)".into(),
        x: Axis::linear("time (s)", 0.0, total as f64),
        y: Axis::linear("goodput (answered in time / capacity)", 0.0, 1.6),
        series,
        bands: vec![Band {
            from: before as f64,
            to: (before + spike) as f64,
        }],
    };
    let get = |name: &str| find_at(name, careful);
    let during = |name: &str| get(name).map_or("-".into(), |p| format!("{:.2}", p.during));
    let rec = |name: &str| {
        get(name).map_or("-".into(), |p| match p.recovery {
            None => format!("does not recover within {after} s"),
            Some(0) if p.during >= 0.95 * p.before => "never fell".to_owned(),
            Some(s) => format!("recovers {s} s after the spike"),
        })
    };
    let end = |name: &str| get(name).map_or("-".into(), |p| format!("{:.2}", p.end));
    let secs = |name: &str| get(name).and_then(|p| p.recovery);
    let goal = |name: &str| match secs(name) {
        Some(s) if s <= 2 => "met",
        _ => "missed",
    };
    let qsummary = |name: &str| {
        queues
            .iter()
            .filter_map(|&q| find_at(name, q).map(|p| format!("{} at {q}", recovery(p, after))))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ab = |f: Feature| {
        find_at(f.ablation_name(), careful).map_or("-".into(), |p| {
            format!(
                "{:.2} during the spike, recovery {}",
                p.during,
                recovery(p, after)
            )
        })
    };
    let findings = vec![
        format!(
            "With the queue sized to the latency target ({careful} places), goodput during the spike is {} (naive), {} (budgeted), {} (rampart); once load drops back to 0.9x, naive {}, budgeted {}, rampart {}. Goal (back within 2 s): rampart {}, naive {}, budgeted {}.",
            during("naive"),
            during("budgeted"),
            during("rampart"),
            rec("naive"),
            rec("budgeted"),
            rec("rampart"),
            goal("rampart"),
            goal("naive"),
            goal("budgeted"),
        ),
        format!(
            "During the spike (one level, 1.4x capacity) rampart's goodput is {} (baselines {} and {}; the ideal 1.0): within the level the CriticalityLimit serves in arrival order and refuses a waiter left with less than a permit's mean hold, so the capacity goes to requests whose caller still waits. Without the breaker rampart {}.",
            during("rampart"),
            during("naive"),
            during("budgeted"),
            rec(Feature::Breaker.ablation_name()),
        ),
        format!(
            "Over the last 20 s goodput is {} (naive), {} (budgeted), {} (rampart) of capacity, with 0.9 offered.",
            end("naive"),
            end("budgeted"),
            end("rampart")
        ),
        format!(
            "The baselines' recovery depends on the queue: naive {}; budgeted {}; rampart {}. A long FIFO queue holds work whose callers gave up; a short one sheds early enough to come back.",
            qsummary("naive"),
            qsummary("budgeted"),
            qsummary("rampart"),
        ),
        format!(
            "Attribution (queue {careful}): without the CriticalityLimit {}; without propagation {}; without the budget {}; without the breaker {}; without reject_expired {}.",
            ab(Feature::Limiter),
            ab(Feature::Propagation),
            ab(Feature::Budget),
            ab(Feature::Breaker),
            ab(Feature::RejectExpired),
        ),
    ];
    let data: Vec<Value> = all_points
        .iter()
        .map(|p| {
            json!({
                "contender": p.contender,
                "queue": p.queue,
                "goodput_before": p.before,
                "goodput_during_spike": p.during,
                "goodput_last_20s": p.end,
                "recovery_seconds": p.recovery,
                "requests_per_root_after_spike": p.attempts_after,
                "goodput_per_second": p.goodput,
            })
        })
        .collect();
    let capacity = service(quick, careful).capacity();
    Ok(ScenarioReport {
        name: "metastable",
        title: "coming back after a spike".into(),
        question: "After a 60 s spike to twice the load, with load back below capacity, how long until goodput returns to 95% of its level before the spike?".into(),
        setup: vec![
            format!("The edge → api: 10 workers, lognormal median 40 ms, p99 120 ms (capacity {capacity:.0} requests/s), a queue of {careful} places (about {:.2} s of work), swept over {}.", careful as f64 / capacity, queues.iter().map(|q| q.to_string()).collect::<Vec<_>>().join(", ")),
            format!("Load: 0.7x capacity for {before} s, 1.4x for {spike} s, then 0.9x for {after} s. The edge waits 1 s per root; its calls: 4 attempts, 300 ms attempt timeout, 20 ms backoff base."),
            "Recovery: the first second after the spike from which the 5 s mean of goodput stays at or above 95% of its mean before the spike for 10 s.".into(),
        ],
        reference: "Naive retries at every hop should not recover: the retries and the work abandoned by callers keep the service overloaded after the trigger is gone (Bronson et al., 'Metastable Failures in Distributed Systems', HotOS 2021).".into(),
        chart,
        tables: vec![table, by_queue, ablation],
        terms: vec![
            ("goodput".into(), "root requests answered Ok within the edge's 1 s, per second (counted in the second they were answered), over the service's capacity".into()),
            ("before the spike / during it / last 20 s".into(), "mean goodput over the last three quarters of the phase before the spike, over the spike, and over the last 20 s of the run".into()),
            ("recovered after".into(), "seconds after the spike ends until the 5 s mean of goodput is back to 95% of its level before the spike and stays there for 10 s; 'never fell' when it held 95% during the spike".into()),
            ("req/root after the spike".into(), "requests (every attempt) that reached the service after the spike, over the roots sent after it".into()),
            ("queue N".into(), "the waiting places in front of the workers: the FIFO's, or the CriticalityLimit's queue".into()),
        ],
        configs,
        findings,
        notes: Vec::new(),
        data: json!({ "careful_queue": careful, "points": data }),
    })
}
