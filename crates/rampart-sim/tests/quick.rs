//! `--quick` runs of every scenario with a fixed seed: calibration first, then the direction of
//! every comparison (never wall-clock time), then determinism (the same seed gives a
//! byte-identical `report.json`).

use std::sync::OnceLock;

use rampart_sim::cli::Options;
use rampart_sim::report::Report;
use rampart_sim::scenario::Runner;
use serde_json::Value;

const SEED: u64 = 42;

fn options() -> Options {
    Options {
        quick: true,
        seed: SEED,
        ..Options::default()
    }
}

fn runner() -> Runner {
    Runner::new(2, false)
}

/// One quick run of everything, shared by the tests that read it.
fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| rampart_sim::run(&options(), &runner()).expect("the quick run succeeds"))
}

/// The data points of scenario `name`.
fn points(name: &str) -> Vec<Value> {
    let scenario = report()
        .scenarios
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no scenario {name}"));
    scenario.data["points"]
        .as_array()
        .unwrap_or_else(|| panic!("{name} has points"))
        .clone()
}

/// The point of scenario `name` matching every `(key, value)`.
fn point(name: &str, keys: &[(&str, Value)]) -> Value {
    points(name)
        .into_iter()
        .find(|p| keys.iter().all(|(k, v)| &p[*k] == v))
        .unwrap_or_else(|| panic!("{name}: no point with {keys:?}"))
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is a number"))
}

#[test]
fn calibration_reproduces_the_arithmetic_first() {
    let report = report();
    assert_eq!(report.calibration.len(), 2);
    for check in &report.calibration {
        assert!(
            check.passed(),
            "{}: expected {} ± {}, measured {}",
            check.name,
            check.expected,
            check.tolerance,
            check.measured
        );
    }
    // 4^3 exactly: no tolerance.
    assert_eq!(report.calibration[0].measured, 64.0);
}

#[test]
fn retry_storm_naive_multiplies_by_four_per_layer_and_budgets_do_not() {
    for (depth, leaf) in [(3u64, 64.0), (5, 1024.0)] {
        let at = |contender: &str| {
            let p = point(
                "retry-storm",
                &[
                    ("contender", contender.into()),
                    ("depth", depth.into()),
                    ("leaf_error_rate", 1.0.into()),
                ],
            );
            let layers: Vec<f64> = p["requests_per_root_by_layer"]
                .as_array()
                .expect("layers")
                .iter()
                .map(num)
                .collect();
            layers
        };
        let naive = at("naive");
        assert_eq!(naive.last().copied(), Some(leaf), "naive at depth {depth}");
        let expected: Vec<f64> = (1..=depth as i32).map(|k| 4f64.powi(k)).collect();
        assert_eq!(naive, expected);
        let rampart = at("rampart");
        let budgeted = at("budgeted");
        let budget_only = at("rampart -breaker");
        let last = |v: &[f64]| v.last().copied().unwrap_or(f64::MAX);
        assert!(
            last(&budgeted) < leaf / 8.0,
            "budgeted at depth {depth}: {budgeted:?}"
        );
        assert!(
            last(&rampart) < last(&budgeted),
            "{rampart:?} vs {budgeted:?}"
        );
        if depth == 3 {
            // Quick runs are short: at depth 5 and a few roots per second, the budgets' initial
            // tokens are not spent yet.
            assert!(
                last(&budget_only) < 1.5,
                "rampart -breaker: {budget_only:?}"
            );
        }
    }
}

#[test]
fn deadline_propagation_holds_without_tuning_and_a_tuned_baseline_ties() {
    let at = |contender: &str, factor: f64| {
        point(
            "deadline",
            &[
                ("contender", contender.into()),
                ("timeout_over_patience", factor.into()),
            ],
        )
    };
    let wasted = |p: &Value| num(&p["wasted_leaf_work"]);
    let in_time = |p: &Value| num(&p["answered_in_time"]);
    // A per-hop timeout longer than the edge's patience: naive works for roots that gave up.
    let (naive, rampart) = (at("naive", 2.0), at("rampart", 2.0));
    assert!(wasted(&naive) > 0.05, "naive wastes leaf work: {naive}");
    assert!(
        wasted(&rampart) < wasted(&naive) / 5.0,
        "{rampart} vs {naive}"
    );
    assert!(in_time(&rampart) > in_time(&naive));
    // Tuned (200 ms per hop), naive answers as well: a tie, reported as one.
    assert!(in_time(&at("naive", 0.4)) >= 0.95);
    for factor in [0.3, 0.4, 1.0, 2.0] {
        let hedged = at("rampart+hedge", factor);
        assert!(
            in_time(&hedged) >= in_time(&at("rampart", factor)),
            "{hedged}"
        );
        assert!(
            in_time(&hedged) >= 0.95 && wasted(&hedged) <= 0.01,
            "{hedged}"
        );
    }
}

#[test]
fn tail_hedging_cuts_the_tail_for_a_few_percent_more_requests() {
    let at = |contender: &str| point("tail", &[("contender", contender.into())]);
    let plain = at("rampart");
    let hedged = at("rampart+hedge 10ms");
    assert!(num(&hedged["max_ms"]) <= num(&plain["max_ms"]), "{hedged}");
    assert!(num(&hedged["max_ms"]) < 100.0, "{hedged}");
    assert!(num(&hedged["p99_ms"]) < num(&plain["p99_ms"]));
    let extra = num(&hedged["extra_leaf_load"]);
    assert!(extra > 0.0 && extra < 0.05, "extra load {extra}");
    assert_eq!(num(&plain["extra_leaf_load"]), 0.0);
}

#[test]
fn overload_rampart_keeps_goodput_and_sheds_by_level() {
    let at = |contender: &str, m: f64| {
        point(
            "overload",
            &[
                ("contender", contender.into()),
                ("offered_over_capacity", m.into()),
                ("queue", 40u64.into()),
            ],
        )
    };
    for m in [2.0, 10.0] {
        let (naive, rampart) = (at("naive", m), at("rampart", m));
        assert!(num(&rampart["goodput"]) > 0.8, "{rampart}");
        assert!(num(&rampart["goodput"]) > num(&naive["goodput"]));
        assert!(num(&rampart["inversions"]) < num(&naive["inversions"]));
        assert!(num(&rampart["inversions"]) < 0.01, "{rampart}");
        // The least important level goes first; the most important is kept.
        let levels = rampart["levels"].as_array().expect("levels");
        let lost = |i: usize| num(&levels[i]["not_answered"]);
        assert!(lost(0) >= lost(3), "{levels:?}");
        assert!(lost(3) < 0.05, "{levels:?}");
    }
    // Below capacity everyone answers about everything.
    for c in ["naive", "budgeted", "rampart"] {
        assert!(num(&at(c, 0.5)["goodput"]) > 0.4);
    }
}

#[test]
fn metastable_naive_stays_down_and_ends_below_a_budget_without_a_breaker() {
    let queue = 40u64;
    let at = |contender: &str| {
        point(
            "metastable",
            &[("contender", contender.into()), ("queue", queue.into())],
        )
    };
    let naive = at("naive");
    assert!(naive["recovery_seconds"].is_null(), "{naive}");
    // Whether they are back within the quick run's 20 s depends on the seed (tests/seeds.rs).
    for c in ["budgeted", "rampart -breaker"] {
        let p = at(c);
        assert!(num(&p["goodput_last_20s"]) > num(&naive["goodput_last_20s"]));
    }
}

#[test]
fn the_same_seed_gives_a_byte_identical_report() {
    let again = rampart_sim::run(&options(), &runner()).expect("the second run succeeds");
    let first = report().json_text().expect("json");
    let second = again.json_text().expect("json");
    assert!(
        first == second,
        "report.json differs between two runs with seed {SEED}"
    );
    assert!(
        !first.contains("wall"),
        "no wall-clock numbers in the report"
    );
}

#[test]
fn the_report_renders_html_with_one_chart_per_scenario() {
    let html = report().html().expect("html");
    assert_eq!(
        html.matches("<svg").count(),
        rampart_sim::scenario::ALL.len()
    );
    assert!(html.contains("rampart's own CriticalityLimit"));
    assert!(
        html.contains("stand-in"),
        "reject_expired is still simulated here"
    );
    assert!(html.contains("loopback"));
    let dir = std::env::temp_dir().join(format!("rampart-sim-test-{}", std::process::id()));
    let index = report().write(&dir).expect("writes");
    assert!(index.ends_with("index.html"));
    for file in ["report.json", "retry-storm.svg", "metastable.svg"] {
        assert!(dir.join(file).is_file(), "{file}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
