//! Metastable failure: a service at 70 % load takes a 60 s spike to twice that (140 %), then
//! load drops to 90 %, below capacity. A system whose retries and abandoned work keep it
//! overloaded after the trigger is gone stays down; a healthy one comes back. The metric is
//! the time after the spike for goodput to return to 95 % of its level before the spike.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Job, Runner, Size, chain};
use crate::SimError;
use crate::contender::{self, Contender, Hop};
use crate::dist::LogNormal;
use crate::report::{Axis, Band, Chart, ScenarioReport, Series, Table, colors, server_side};
use crate::service::ServiceConfig;
use crate::sim::{Load, drive, virtual_time};

/// How long the edge waits for each root.
pub const PATIENCE: Duration = Duration::from_secs(1);

/// The edge's calls: 4 attempts, a 300 ms timeout, 20 ms backoff base.
pub fn hop() -> Hop {
    Hop::new(Duration::from_millis(300))
}

/// The service: 10 workers (4 when quick), lognormal median 40 ms, p99 120 ms, a queue of
/// 1000.
pub fn service(quick: bool) -> ServiceConfig {
    let time = LogNormal::from_median_p99(Duration::from_millis(40), Duration::from_millis(120));
    ServiceConfig::new("api", if quick { 4 } else { 10 }, 1_000, time)
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
pub fn simulate(contender: Contender, quick: bool, seed: u64) -> Result<Point, SimError> {
    let config = service(quick);
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
    let jobs = contender::ALL
        .into_iter()
        .map(|c| {
            let seed = size.seed_for("metastable");
            let quick = size.quick;
            Job::new(c.name, move || simulate(c, quick, seed))
        })
        .collect();
    let points = runner.run("metastable", jobs)?;
    Ok(summarize(&points, size.quick))
}

fn summarize(points: &[Point], quick: bool) -> ScenarioReport {
    let (before, spike, after) = phases(quick);
    let mut table = Table::new(
        "goodput (answered within 1 s, over capacity) around a spike from 0.7x to 1.4x capacity",
        &[
            "contender",
            "before the spike",
            "during it",
            "last 20 s",
            "recovered after",
            "req/root after the spike",
        ],
    );
    for p in points {
        table.row(vec![
            p.contender.to_owned(),
            format!("{:.2}", p.before),
            format!("{:.2}", p.during),
            format!("{:.2}", p.end),
            match p.recovery {
                None => format!("not within {after} s"),
                Some(0) if p.during >= 0.95 * p.before => "never fell".to_owned(),
                Some(s) => format!("{s} s"),
            },
            format!("{:.2}", p.attempts_after),
        ]);
    }
    let total = before + spike + after;
    let mut series: Vec<Series> = points
        .iter()
        .map(|p| Series {
            name: p.contender.to_owned(),
            color: colors::of(p.contender),
            dashed: false,
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
    let get = |name: &str| points.iter().find(|p| p.contender == name);
    let during = |name: &str| get(name).map_or("-".into(), |p| format!("{:.2}", p.during));
    let rec = |name: &str| {
        get(name).map_or("-".into(), |p| match p.recovery {
            None => format!("does not recover within {after} s"),
            Some(0) if p.during >= 0.95 * p.before => "never fell".to_owned(),
            Some(s) => format!("recovers {s} s after the spike"),
        })
    };
    let end = |name: &str| get(name).map_or("-".into(), |p| format!("{:.2}", p.end));
    let findings = vec![
        format!(
            "During the spike goodput falls to {} (naive) and {} (budgeted) and holds at {} (rampart); once load drops back to 0.9x, naive {}, budgeted {}, rampart {}.",
            during("naive"),
            during("budgeted"),
            during("rampart"),
            rec("naive"),
            rec("budgeted"),
            rec("rampart")
        ),
        format!(
            "Over the last 20 s goodput is {} (naive), {} (budgeted), {} (rampart) of capacity, with 0.9 offered: retries and requests whose callers gave up keep the queue full unless the deadline travels with them.",
            end("naive"),
            end("budgeted"),
            end("rampart")
        ),
    ];
    let data: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "contender": p.contender,
                "goodput_before": p.before,
                "goodput_during_spike": p.during,
                "goodput_last_20s": p.end,
                "recovery_seconds": p.recovery,
                "requests_per_root_after_spike": p.attempts_after,
                "goodput_per_second": p.goodput,
            })
        })
        .collect();
    ScenarioReport {
        name: "metastable",
        title: "coming back after a spike".into(),
        question: "After a 60 s spike to twice the load, with load back below capacity, how long until goodput returns to 95% of its level before the spike?".into(),
        setup: vec![
            format!("The edge → api: 10 workers, lognormal median 40 ms, p99 120 ms (capacity {:.0} requests/s), a queue of 1000 (about 4.5 s of work).", service(quick).capacity()),
            format!("Load: 0.7x capacity for {before} s, 1.4x for {spike} s, then 0.9x for {after} s. The edge waits 1 s per root; its calls: 4 attempts, 300 ms timeout, 20 ms backoff base."),
            "Recovery: the first second after the spike from which the 5 s mean of goodput stays at or above 95% of its mean before the spike for 10 s.".into(),
        ],
        reference: "Naive retries at every hop should not recover: the retries and the work abandoned by callers keep the service overloaded after the trigger is gone (Bronson et al., 'Metastable Failures in Distributed Systems', HotOS 2021).".into(),
        chart,
        tables: vec![table],
        findings,
        notes: vec![server_side()],
        data: json!({ "points": data }),
    }
}
