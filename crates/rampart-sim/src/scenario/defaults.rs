//! Defaults: which breaker, budget and throttle settings rampart should ship, judged on the
//! retry storm's chain. The leaf error rate is swept from 0 % to 100 % at depths 2, 3 and 4 for
//! the two baselines and for rampart under candidate settings, and each candidate is held to
//! three criteria (issue 25):
//!
//! 1. it answers at least as many roots as the `budgeted` baseline (tower's `TpsBudget` at
//!    rampart's numbers) at every error rate and depth;
//! 2. it never answers none while the leaf still answers a quarter of its calls (75 % leaf
//!    errors, every depth);
//! 3. it keeps the retry-storm result: at most 1.1 leaf requests per root at 100 % leaf
//!    errors, depth 3.
//!
//! The simulations are the retry storm's own ([`retry_storm::simulate`], the same load and the
//! same seed for each depth and error rate), so the rows they share print the same numbers.
//!
//! What it decided: rampart 0.2 defaults to the candidate [`DEFAULTS`] (a breaker that opens
//! only when every call of the last 10 s failed, at least 100 of them, a 20 % retry budget,
//! and a call the budget ended answered upstream as its last failure), the one with the
//! smallest budget that met all three criteria on seeds 1 to 5. It meets criterion 1 partly by
//! spending more retries than tower's budget at 10 %; [`BUDGETED_20`] is tower's budget at the
//! same 20 %, and a finding compares the two.

use std::time::Duration;

use serde_json::{Value, json};

use super::retry_storm::{self, Point, RAMPART_NO_BREAKER};
use super::{Job, Runner, Size, configs, pct};
use crate::SimError;
use crate::contender::{BUDGETED, Contender, NAIVE, RAMPART, Trip};
use crate::report::{Axis, Chart, ScenarioReport, Series, Table, colors};

/// rampart with the breaker and retry budget it defaults to since 0.2 on every hop
/// (`Breaker::builder()` and `RetryBudget::builder()` as they are: what rampart-http's
/// outbound layer gives each host): `failure_ratio(1.0, 10 s, 100)` and a 20 % budget. The
/// breaker follows rampart's default when it changes; the budget's fraction is written here
/// and a test checks it against `RetryBudget::builder()`.
pub const DEFAULTS: Contender = Contender {
    name: "rampart 0.2 defaults",
    trip: Trip::Default,
    budget_fraction: 0.2,
    ..RAMPART
};

/// rampart 0.1's default breaker, `consecutive_failures(5)`, beside the 10 % budget.
pub const CONSECUTIVE_5: Contender = Contender {
    name: "rampart, consecutive 5 (0.1 default)",
    trip: Trip::Consecutive(5),
    ..RAMPART
};

/// tower's `TpsBudget` at 20 %: the baseline at the same number as rampart's 0.2 default
/// budget, so that a win of the default is not only a bigger budget.
pub const BUDGETED_20: Contender = Contender {
    name: "budgeted 20%",
    budget_fraction: 0.2,
    ..BUDGETED
};

/// rampart with a breaker that opens at 90 % failures over 10 s (at least 20 calls).
pub const RATIO_90: Contender = Contender {
    name: "rampart, ratio 90%",
    trip: Trip::Ratio {
        ratio: 0.9,
        window: Duration::from_secs(10),
        min_throughput: 20,
    },
    ..RAMPART
};

/// rampart with a breaker that opens only when every call of the last 10 s failed (at least
/// 20 of them): a breaker for a dependency that is down, not one that is degraded.
pub const RATIO_100: Contender = Contender {
    name: "rampart, ratio 100%",
    trip: Trip::Ratio {
        ratio: 1.0,
        window: Duration::from_secs(10),
        min_throughput: 20,
    },
    ..RAMPART
};

/// The down-only breaker, but not before 100 calls in the window: at 20, the first 20 calls of
/// a run all failing opens it at high but partial error rates.
pub const RATIO_100_OF_100: Contender = Contender {
    name: "rampart, ratio 100% of 100",
    trip: Trip::Ratio {
        ratio: 1.0,
        window: Duration::from_secs(10),
        min_throughput: 100,
    },
    ..RAMPART
};

/// rampart with the client-side adaptive throttle (`k` 2) in place of the breaker.
pub const THROTTLE: Contender = Contender {
    name: "rampart, throttle k=2",
    breaker: false,
    throttle: Some(2.0),
    ..RAMPART
};

/// The throttle beside the down-only breaker.
pub const THROTTLE_RATIO_100: Contender = Contender {
    name: "rampart, throttle k=2 + ratio 100%",
    throttle: Some(2.0),
    ..RATIO_100
};

/// rampart's budget depositing 25 % of each success instead of 10 %, no breaker.
pub const BUDGET_25: Contender = Contender {
    name: "rampart -breaker, budget 25%",
    budget_fraction: 0.25,
    ..RAMPART_NO_BREAKER
};

/// A 25 % budget beside the down-only breaker: more retries than the default.
pub const BUDGET_25_RATIO_100: Contender = Contender {
    name: "rampart, budget 25% + ratio 100% of 100",
    budget_fraction: 0.25,
    ..RATIO_100_OF_100
};

/// rampart's budget depositing 20 % of each success instead of 10 %, no breaker.
pub const BUDGET_20: Contender = Contender {
    name: "rampart -breaker, budget 20%",
    budget_fraction: 0.2,
    ..RAMPART_NO_BREAKER
};

/// rampart without its breaker, its budget's refusals answered upstream as rampart-http 0.1
/// did: 503 with a `Retry-After` of at least 1 s.
pub const REFUSAL_503: Contender = Contender {
    name: "rampart -breaker, refusal as 503",
    budget_refusal_as_failure: false,
    ..RAMPART_NO_BREAKER
};

/// The down-only breaker of at least 100 calls, budget refusals answered as 0.1 did.
pub const REFUSAL_503_RATIO_100: Contender = Contender {
    name: "rampart, ratio 100% of 100 + refusal as 503",
    budget_refusal_as_failure: false,
    ..RATIO_100_OF_100
};

/// rampart's defaults with budget refusals answered as 0.1 did: the ablation of 0.2's answer.
pub const DEFAULTS_REFUSAL_503: Contender = Contender {
    name: "rampart 0.2 defaults + refusal as 503",
    budget_refusal_as_failure: false,
    ..DEFAULTS
};

/// The leaf error rates swept.
pub const ERROR_RATES: [f64; 9] = [0.0, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 1.0];
/// The error rates of a `--quick` run (the columns).
pub const QUICK_ERROR_RATES: [f64; 4] = [0.25, 0.5, 0.75, 1.0];
/// The depths swept.
pub const DEPTHS: [usize; 3] = [2, 3, 4];
/// The depth of a `--quick` run.
pub const QUICK_DEPTHS: [usize; 1] = [3];

/// The leaf error rate at which the leaf still answers a quarter of its calls (criterion 2).
pub const QUARTER: f64 = 0.75;
/// The most leaf requests per root at 100 % leaf errors, depth 3 (criterion 3).
pub const STORM_LIMIT: f64 = 1.1;

/// The rampart candidates, in table order.
pub fn candidates() -> Vec<Contender> {
    vec![
        DEFAULTS,
        RAMPART,
        RAMPART_NO_BREAKER,
        CONSECUTIVE_5,
        RATIO_90,
        RATIO_100,
        RATIO_100_OF_100,
        THROTTLE,
        THROTTLE_RATIO_100,
        BUDGET_20,
        BUDGET_25,
        BUDGET_25_RATIO_100,
        REFUSAL_503,
        REFUSAL_503_RATIO_100,
        DEFAULTS_REFUSAL_503,
    ]
}

/// Every contender: the two baselines, then the candidates.
pub fn contenders() -> Vec<Contender> {
    let mut all = vec![NAIVE, BUDGETED, BUDGETED_20];
    all.extend(candidates());
    all
}

/// How one candidate fares against the three criteria.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The candidate's name.
    pub contender: &'static str,
    /// The smallest `answered - budgeted answered` over every rate and depth, in points, and
    /// where (depth, rate).
    pub worst_margin: (f64, usize, f64),
    /// Roots answered at 75 % leaf errors, the lowest over the depths, and at which depth.
    pub at_quarter: (f64, usize),
    /// Leaf requests per root at 100 % leaf errors, depth 3.
    pub storm: f64,
}

impl Verdict {
    /// Criterion 1: never fewer roots answered than `budgeted`.
    pub fn as_many_as_budgeted(&self) -> bool {
        self.worst_margin.0 >= 0.0
    }

    /// Criterion 2: some roots answered at 75 % leaf errors, at every depth.
    pub fn answers_at_a_quarter(&self) -> bool {
        self.at_quarter.0 > 0.0
    }

    /// Criterion 3: at most 1.1 leaf requests per root at 100 % leaf errors, depth 3.
    pub fn holds_the_storm(&self) -> bool {
        self.storm <= STORM_LIMIT
    }

    /// All three.
    pub fn meets_all(&self) -> bool {
        self.as_many_as_budgeted() && self.answers_at_a_quarter() && self.holds_the_storm()
    }
}

/// Judges every candidate on `points` (the sweep over `rates` and `depths`).
pub fn verdicts(points: &[Point], rates: &[f64], depths: &[usize]) -> Vec<Verdict> {
    let find = |name: &str, depth: usize, rate: f64| {
        points
            .iter()
            .find(|p| p.contender == name && p.depth == depth && p.error_rate == rate)
    };
    candidates()
        .iter()
        .map(|c| {
            let mut worst = (f64::INFINITY, 0, 0.0);
            let mut quarter = (f64::INFINITY, 0);
            for &depth in depths {
                for &rate in rates {
                    if let (Some(p), Some(b)) =
                        (find(c.name, depth, rate), find("budgeted", depth, rate))
                    {
                        let margin = (p.answered - b.answered) * 100.0;
                        if margin < worst.0 {
                            worst = (margin, depth, rate);
                        }
                    }
                }
                if let Some(p) = find(c.name, depth, QUARTER)
                    && p.answered < quarter.0
                {
                    quarter = (p.answered, depth);
                }
            }
            Verdict {
                contender: c.name,
                worst_margin: worst,
                at_quarter: quarter,
                storm: find(c.name, 3, 1.0).map_or(f64::NAN, Point::leaf),
            }
        })
        .collect()
}

/// Runs the sweep.
pub fn run(size: Size, runner: &Runner) -> Result<ScenarioReport, SimError> {
    let (rates, depths) = if size.quick {
        (QUICK_ERROR_RATES.to_vec(), QUICK_DEPTHS.to_vec())
    } else {
        (ERROR_RATES.to_vec(), DEPTHS.to_vec())
    };
    let mut jobs = Vec::new();
    for &depth in &depths {
        for c in contenders() {
            for &rate in &rates {
                // The retry storm's seeds: the rows both scenarios run print the same numbers.
                let seed = size.seed_for(&format!("retry-storm/{depth}/{rate}"));
                let load = retry_storm::load(depth, size.quick);
                jobs.push(Job::new(
                    format!("{} depth {depth} at {}% leaf errors", c.name, rate * 100.0),
                    move || retry_storm::simulate(c, depth, rate, load, seed),
                ));
            }
        }
    }
    let points = runner.run("defaults", jobs)?;
    summarize(
        &points,
        &rates,
        &depths,
        configs(&contenders(), retry_storm::hop())?,
    )
}

fn rate_label(rate: f64) -> String {
    format!("{:.0}%", rate * 100.0)
}

fn yes(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

fn summarize(
    points: &[Point],
    rates: &[f64],
    depths: &[usize],
    configs: Vec<(String, String)>,
) -> Result<ScenarioReport, SimError> {
    let find = |name: &str, depth: usize, rate: f64| {
        points
            .iter()
            .find(|p| p.contender == name && p.depth == depth && p.error_rate == rate)
    };
    // The frontier at one depth and rate: the contenders no other one beats on both roots
    // answered (more) and leaf requests per root (fewer).
    let on_frontier = |p: &Point| {
        !points.iter().any(|q| {
            q.depth == p.depth
                && q.error_rate == p.error_rate
                && q.answered >= p.answered
                && q.leaf() <= p.leaf()
                && (q.answered > p.answered || q.leaf() < p.leaf())
        })
    };
    let mut columns = vec!["contender".to_owned(), "depth".to_owned()];
    columns.extend(rates.iter().map(|&r| rate_label(r)));
    let mut frontier = Table {
        title: "roots answered / leaf requests per root, by leaf error rate (* on the frontier: no contender answers more roots with fewer leaf requests)".into(),
        columns,
        rows: Vec::new(),
    };
    for &depth in depths {
        for c in contenders() {
            let mut row = vec![c.name.to_owned(), depth.to_string()];
            for &rate in rates {
                row.push(find(c.name, depth, rate).map_or("-".into(), |p| {
                    format!(
                        "{} / {:.2}{}",
                        pct(p.answered),
                        p.leaf(),
                        if on_frontier(p) { " *" } else { "" }
                    )
                }));
            }
            frontier.row(row);
        }
    }
    let verdicts = verdicts(points, rates, depths);
    let mut criteria = Table::new(
        "the criteria, candidate by candidate",
        &[
            "candidate",
            "1: >= budgeted everywhere (worst margin, where)",
            "2: answers at 75% leaf errors (lowest, depth)",
            "3: <= 1.1 leaf requests per root at 100%, depth 3",
            "all three",
        ],
    );
    for v in &verdicts {
        criteria.row(vec![
            v.contender.to_owned(),
            format!(
                "{}: {:+.1} points (depth {}, {})",
                yes(v.as_many_as_budgeted()),
                v.worst_margin.0,
                v.worst_margin.1,
                rate_label(v.worst_margin.2)
            ),
            format!(
                "{}: {} (depth {})",
                yes(v.answers_at_a_quarter()),
                pct(v.at_quarter.0),
                v.at_quarter.1
            ),
            format!("{}: {:.2}", yes(v.holds_the_storm()), v.storm),
            yes(v.meets_all()).to_owned(),
        ]);
    }
    // The frontier at depth 3: each contender's points across error rates.
    let depth = if depths.contains(&3) { 3 } else { depths[0] };
    let floor = 0.01;
    let series: Vec<Series> = contenders()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let pts: Vec<(f64, f64)> = rates
                .iter()
                .filter_map(|&r| find(c.name, depth, r))
                .map(|p| (p.leaf().max(floor), p.answered * 100.0))
                .collect();
            // naive, budgeted and budgeted 20% (dashed), rampart's defaults, then the others.
            let color = match i {
                0 | 1 => colors::of(c.name),
                2 => colors::BUDGETED,
                3 => colors::RAMPART,
                4 | 7 => colors::RAMPART_2,
                5 | 8 => colors::RAMPART_3,
                _ => colors::REFERENCE,
            };
            if i == 2 || i >= 7 {
                Series::dashed_sweep(c.name, color, pts)
            } else {
                Series::sweep(c.name, color, pts)
            }
        })
        .collect();
    let chart = Chart {
        title: format!(
            "Roots answered against leaf requests per root, depth {depth}, one point per leaf error rate (0 drawn at 0.01)"
        ),
        x: Axis::log("leaf requests per root (log)", floor, 300.0),
        y: Axis::linear("roots answered (%)", 0.0, 100.0),
        series,
        bands: Vec::new(),
    };
    let met: Vec<&str> = verdicts
        .iter()
        .filter(|v| v.meets_all())
        .map(|v| v.contender)
        .collect();
    let mut findings = vec![if met.is_empty() {
        "Loss: no candidate meets all three criteria; see the criteria table for which each meets, with its numbers.".to_owned()
    } else {
        format!("Win: meeting all three criteria: {}.", met.join(", "))
    }];
    // What a winner pays: its leaf requests per root against budgeted's where the leaf fails
    // partly, at the point where the ratio is largest.
    for name in &met {
        let mut worst: Option<(f64, &Point, &Point)> = None;
        for &depth in depths {
            for &rate in rates.iter().filter(|&&r| r > 0.0 && r < 1.0) {
                if let (Some(p), Some(b)) = (find(name, depth, rate), find("budgeted", depth, rate))
                {
                    let ratio = p.leaf() / b.leaf().max(f64::MIN_POSITIVE);
                    if worst.is_none_or(|(w, _, _)| ratio > w) {
                        worst = Some((ratio, p, b));
                    }
                }
            }
        }
        if let Some((_, p, b)) = worst {
            findings.push(format!(
                "Cost: {name} answers {} where budgeted answers {} (depth {}, {} leaf errors) by sending {:.2} leaf requests per root where budgeted sends {:.2}: it meets criterion 1 partly by spending more retries, not at the same numbers.",
                pct(p.answered),
                pct(b.answered),
                p.depth,
                rate_label(p.error_rate),
                p.leaf(),
                b.leaf()
            ));
        }
    }
    // The default at the same numbers as tower's budget: both at 20 %.
    let mut same = (f64::INFINITY, 0, 0.0, f64::NEG_INFINITY);
    for &depth in depths {
        for &rate in rates {
            if let (Some(p), Some(b)) = (
                find(DEFAULTS.name, depth, rate),
                find(BUDGETED_20.name, depth, rate),
            ) {
                let margin = (p.answered - b.answered) * 100.0;
                if margin < same.0 {
                    same = (margin, depth, rate, same.3);
                }
                same.3 = same.3.max(margin);
            }
        }
    }
    if same.0.is_finite() {
        let verdict = if same.0 >= 0.0 {
            "Win"
        } else if same.3 > 0.0 {
            "Mixed"
        } else {
            "Loss"
        };
        findings.push(format!(
            "{verdict}: at the same 20 % budget, {} answers between {:+.1} (depth {}, {} leaf errors) and {:+.1} points against tower's budget ({}).",
            DEFAULTS.name,
            same.0,
            same.1,
            rate_label(same.2),
            same.3,
            BUDGETED_20.name
        ));
    }
    // Rates where every contender answers the same share (within 0.5 points) at every depth.
    let tied: Vec<String> = rates
        .iter()
        .filter(|&&r| {
            depths.iter().all(|&d| {
                let shares: Vec<f64> = contenders()
                    .iter()
                    .filter_map(|c| find(c.name, d, r))
                    .map(|p| p.answered)
                    .collect();
                let lo = shares.iter().copied().fold(f64::MAX, f64::min);
                let hi = shares.iter().copied().fold(f64::MIN, f64::max);
                !shares.is_empty() && hi - lo <= 0.005
            })
        })
        .map(|&r| rate_label(r))
        .collect();
    findings.push(format!(
        "Tie: at leaf error rates of {} every contender answers the same share of roots at every depth.",
        if tied.is_empty() {
            "none".to_owned()
        } else {
            tied.join(", ")
        }
    ));
    for v in &verdicts {
        findings.push(format!(
            "{}: 1 {} (worst {:+.1} points against budgeted, depth {} at {}), 2 {} ({} answered at 75%, depth {}), 3 {} ({:.2} leaf requests per root at 100%, depth 3).",
            v.contender,
            if v.as_many_as_budgeted() { "met" } else { "missed" },
            v.worst_margin.0,
            v.worst_margin.1,
            rate_label(v.worst_margin.2),
            if v.answers_at_a_quarter() { "met" } else { "missed" },
            pct(v.at_quarter.0),
            v.at_quarter.1,
            if v.holds_the_storm() { "met" } else { "missed" },
            v.storm,
        ));
    }
    let data: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "contender": p.contender,
                "depth": p.depth,
                "leaf_error_rate": p.error_rate,
                "measured_roots": p.roots,
                "leaf_requests_per_root": p.leaf(),
                "answered": p.answered,
                "on_frontier": on_frontier(p),
            })
        })
        .collect();
    let judged: Vec<Value> = verdicts
        .iter()
        .map(|v| {
            json!({
                "contender": v.contender,
                "worst_margin_points": v.worst_margin.0,
                "worst_margin_depth": v.worst_margin.1,
                "worst_margin_rate": v.worst_margin.2,
                "answered_at_75": v.at_quarter.0,
                "leaf_per_root_at_100_depth_3": v.storm,
                "criteria": [v.as_many_as_budgeted(), v.answers_at_a_quarter(), v.holds_the_storm()],
            })
        })
        .collect();
    Ok(ScenarioReport {
        name: "defaults",
        title: "which breaker, budget and throttle rampart should default to".into(),
        question: "Across leaf error rates 0-100% and depths 2-4 of the retry storm's chain, which rampart setting answers at least as many roots as tower's budget, still answers some at 75% leaf errors, and holds the storm at 100%?".into(),
        setup: vec![
            "The retry storm's chain, load and seeds (see retry-storm): every hop 4 attempts, 1 s attempt timeout, 20 ms backoff; the leaf fails at the given rate.".into(),
            "Depth 3: 500 roots/s; depths 2 and 4: 200 roots/s; 3 s, the first not measured. rampart's breakers break for 15 s, longer than the run: once open, a hop stays open.".into(),
            "Every candidate is rampart (budget, propagation, CriticalityLimit, reject_expired) with the breaker, throttle or budget named; its exact policy is printed in the configuration box.".into(),
        ],
        reference: "issue 25's criteria: at least budgeted's roots at every rate; some roots at 75% leaf errors; at most 1.1 leaf requests per root at 100%, depth 3 (the SRE book's budget bound).".into(),
        chart,
        tables: vec![criteria, frontier],
        terms: vec![
            ("a / b".into(), "roots answered (share of measured roots answered Ok within the edge's 30 s) / requests reaching the leaf per measured root".into()),
            ("*".into(), "on the frontier at that depth and rate: no contender answers at least as many roots with at most as many leaf requests, and one of them strictly".into()),
            ("worst margin".into(), "the candidate's roots answered minus budgeted's, in percentage points, at the rate and depth where it is smallest".into()),
            ("default breaker".into(), "Breaker::builder() with nothing set, as rampart-http's outbound layer gives each host".into()),
        ],
        configs,
        findings,
        notes: vec![
            "Criterion 1 is strict: a candidate 0.1 points under budgeted misses it; the margins are printed so that a miss inside the noise of one seed can be read as such.".into(),
        ],
        data: json!({ "points": data, "verdicts": judged }),
    })
}
