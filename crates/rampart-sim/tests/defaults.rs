//! The `defaults` scenario at `--quick` size with a fixed seed: the shape of its tables, its
//! determinism, and the verdicts it reaches (issue 25's three criteria): rampart's 0.2
//! defaults meet all three, 0.1's `consecutive_failures(5)` misses two, and answering a
//! call the budget ended with a 503 and a `Retry-After`, as 0.1 did, costs criterion 1.

use std::sync::OnceLock;

use rampart::budget::RetryBudget;
use rampart_sim::report::ScenarioReport;
use rampart_sim::scenario::defaults::{
    self, CONSECUTIVE_5, DEFAULTS, QUICK_DEPTHS, QUICK_ERROR_RATES, RATIO_100_OF_100,
    REFUSAL_503_RATIO_100,
};
use rampart_sim::scenario::{Runner, Size};
use serde_json::Value;

const SIZE: Size = Size {
    quick: true,
    seed: 42,
};

fn run() -> ScenarioReport {
    defaults::run(SIZE, &Runner::new(2, false)).expect("the quick sweep runs")
}

fn report() -> &'static ScenarioReport {
    static REPORT: OnceLock<ScenarioReport> = OnceLock::new();
    REPORT.get_or_init(run)
}

fn verdict(name: &str) -> &'static Value {
    report().data["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .find(|v| v["contender"] == name)
        .unwrap_or_else(|| panic!("no verdict for {name}"))
}

fn criteria(name: &str) -> [bool; 3] {
    let c = &verdict(name)["criteria"];
    [0, 1, 2].map(|i| c[i].as_bool().expect("a criterion is a bool"))
}

fn point(name: &str, rate: f64) -> &'static Value {
    report().data["points"]
        .as_array()
        .expect("points")
        .iter()
        .find(|p| p["contender"] == name && p["depth"] == 3 && p["leaf_error_rate"] == rate)
        .unwrap_or_else(|| panic!("no point for {name} at {rate}"))
}

#[test]
fn the_sweep_prints_a_criteria_row_per_candidate_and_a_frontier_row_per_contender_and_depth() {
    let report = report();
    let [criteria, frontier] = &report.tables[..] else {
        panic!("two tables, got {}", report.tables.len());
    };
    assert_eq!(criteria.columns.len(), 5);
    let names: Vec<&str> = criteria.rows.iter().map(|r| r[0].as_str()).collect();
    let candidates: Vec<&str> = defaults::candidates().iter().map(|c| c.name).collect();
    assert_eq!(names, candidates);
    assert_eq!(frontier.columns.len(), 2 + QUICK_ERROR_RATES.len());
    assert_eq!(
        frontier.rows.len(),
        defaults::contenders().len() * QUICK_DEPTHS.len()
    );
    // Every compared configuration is printed beside its result.
    for c in defaults::contenders() {
        assert!(
            report.configs.iter().any(|(name, _)| name == c.name),
            "no configuration printed for {}",
            c.name
        );
    }
    let points = report.data["points"].as_array().expect("points");
    assert_eq!(
        points.len(),
        defaults::contenders().len() * QUICK_DEPTHS.len() * QUICK_ERROR_RATES.len()
    );
}

#[test]
fn the_same_seed_gives_the_same_sweep() {
    let again = run();
    assert_eq!(again.data, report().data);
    assert_eq!(again.findings, report().findings);
}

#[test]
fn naive_sends_four_cubed_to_the_leaf_and_the_breakers_hold_the_storm() {
    assert_eq!(
        point("naive", 1.0)["leaf_requests_per_root"].as_f64(),
        Some(64.0)
    );
    for name in [DEFAULTS.name, CONSECUTIVE_5.name, RATIO_100_OF_100.name] {
        let storm = verdict(name)["leaf_per_root_at_100_depth_3"]
            .as_f64()
            .expect("a number");
        assert!(storm <= defaults::STORM_LIMIT, "{name}: {storm}");
    }
}

#[test]
fn rampart_0_1_s_default_breaker_answers_no_root_while_the_leaf_answers_a_quarter() {
    assert_eq!(
        point(CONSECUTIVE_5.name, defaults::QUARTER)["answered"].as_f64(),
        Some(0.0)
    );
    assert_eq!(criteria(CONSECUTIVE_5.name), [false, false, true]);
    // The down-only breaker with 0.1's 10 % budget, its refusals answered 503 as 0.1 did,
    // still loses to tower's budget (those answers, not its breaker), but answers at 75 %.
    assert_eq!(criteria(REFUSAL_503_RATIO_100.name), [false, true, true]);
}

#[test]
fn rampart_s_defaults_meet_all_three() {
    assert_eq!(criteria(DEFAULTS.name), [true, true, true]);
    let at_quarter = point(DEFAULTS.name, defaults::QUARTER)["answered"]
        .as_f64()
        .expect("a number");
    let budgeted = point("budgeted", defaults::QUARTER)["answered"]
        .as_f64()
        .expect("a number");
    assert!(at_quarter >= budgeted, "{at_quarter} < {budgeted}");
}

#[test]
fn the_defaults_contender_is_configured_as_rampart_s_defaults() {
    let budget = RetryBudget::builder().build().expect("the default budget");
    assert_eq!(DEFAULTS.budget_fraction, budget.fraction());
    assert_eq!(DEFAULTS.trip, rampart_sim::contender::Trip::Default);
}

#[test]
fn the_default_is_compared_with_tower_s_budget_at_the_same_fraction() {
    let findings = &report().findings;
    assert!(
        findings
            .iter()
            .any(|f| f.contains("at the same 20 % budget") && f.contains("budgeted 20%")),
        "{findings:?}"
    );
}
