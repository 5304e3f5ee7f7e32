//! `what-if`: a small graph under two policy files gives the same numbers for the same seed,
//! the one-change-at-a-time attribution lists exactly the settings that differ, and the JSON
//! and HTML it writes hold those numbers.

use std::path::Path;

use rampart_sim::cli::WhatIfOptions;
use rampart_sim::graph::{Graph, Outcome};
use rampart_sim::scenario::{Runner, ms, pct};
use rampart_sim::whatif::{self, PolicyFile};
use serde_json::Value;

const SHOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/graphs/shop.toml");
const POLICIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/graphs/policies");

/// Two services, a spike and a latency fault: about 250 roots, well under a second in debug.
const SMALL: &str = r#"
entry = "api"

[services.api]
workers = 8
queue = 8
admission = "criticality"
inbound = true
service_time = { median = "1ms", p99 = "3ms" }
calls = [{ to = "db", policy = "db", count = 2 }]

[services.db]
workers = 4
queue = 8
inbound = true
service_time = { histogram = [["2ms", 8], ["30ms", 2]] }
error_rate = 0.05

[traffic]
deadline = "100ms"
warmup = "500ms"
mix = { sheddable = 0.5, critical = 0.5 }
segments = [
  { kind = "steady", rate = 100, for = "1s" },
  { kind = "spike", rate = 300, for = "500ms" },
]

[[faults]]
kind = "latency"
service = "db"
from = "800ms"
to = "1200ms"
added = "20ms"
"#;

const A: &str = r#"
[defaults]
max_attempts = 2
attempt_timeout = "40ms"
use_ambient_deadline = true

[policies.db]
"#;

const B: &str = r#"
[defaults]
max_attempts = 3
attempt_timeout = "40ms"
use_ambient_deadline = true

[policies.db]
attempt_timeout = "20ms"
"#;

fn small(a: &str, b: &str) -> whatif::WhatIf {
    let graph = Graph::parse(SMALL, None).expect("the small graph is valid");
    let a = PolicyFile::parse(Path::new("a.toml"), a, &graph).expect("A is valid");
    let b = PolicyFile::parse(Path::new("b.toml"), b, &graph).expect("B is valid");
    whatif::run(graph, a, b, 7, &Runner::new(2, false)).expect("the runs succeed")
}

#[test]
fn a_small_graph_under_two_policy_files_gives_the_same_numbers_twice() {
    let first = small(A, B);
    let second = small(A, B);
    assert_eq!(first.json(), second.json());
    assert_eq!(first.text(), second.text());
    let [a, b] = &first.outcomes;
    assert!(a.roots > 150, "{} measured roots", a.roots);
    assert_eq!(a.roots, b.roots, "the same traffic for both files");
    assert_ne!(a, b, "the files differ, and so do their runs");
    assert!(a.answered_in_time > 0.0 && b.answered_in_time > 0.0);
    let text = first.text();
    for line in [
        "A = a.toml: each policy the graph calls through, as resolved",
        "  db: 2 attempts, total 30s, attempt 40ms (abandon)",
        "  db: 3 attempts, total 30s, attempt 20ms (abandon)",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
}

#[test]
fn the_attribution_lists_exactly_the_settings_that_differ() {
    let report = small(A, B);
    let changes: Vec<(&str, &str, &str)> = report
        .attribution
        .iter()
        .map(|a| {
            let c = &a.change;
            (c.path.as_str(), c.from.as_str(), c.to.as_str())
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("policies.db.attempt_timeout", "40ms", "20ms"),
            ("policies.db.max_attempts", "2", "3"),
        ]
    );
    // One change alone is A with that setting only.
    let alone = &report.attribution[1].change.policies["db"];
    assert_eq!(alone.max_attempts, Some(3));
    assert_eq!(
        alone.attempt_timeout,
        Some(Some(std::time::Duration::from_millis(40)))
    );
    let same = small(A, A);
    assert!(
        same.attribution.is_empty(),
        "a file against itself changes nothing"
    );
    assert_eq!(same.outcomes[0], same.outcomes[1]);
}

#[test]
fn each_policy_the_graph_names_must_be_in_each_file() {
    let graph = Graph::parse(SMALL, None).expect("valid");
    let error = PolicyFile::parse(
        Path::new("a.toml"),
        "[policies.cache]\nmax_attempts = 0\n",
        &graph,
    )
    .expect_err("db is missing and cache is invalid");
    assert_eq!(
        error.to_string(),
        "a.toml: graph services.api.calls[0].policy names no policy in the file (was \"db\", the file has: cache); \
         policies.cache.max_attempts must be at least 1 (was 0)"
    );
}

#[test]
fn a_call_from_a_service_that_receives_deadlines_through_a_policy_that_ignores_them_is_noted() {
    let graph = Graph::parse(SMALL, None).expect("valid");
    let noted = PolicyFile::parse(Path::new("a.toml"), "[policies.db]\n", &graph).expect("valid");
    assert_eq!(noted.notes.len(), 1, "{:?}", noted.notes);
    assert!(
        noted.notes[0].starts_with(
            "services.api.calls[0].policy: \"db\" does not read the deadline api receives"
        ),
        "{}",
        noted.notes[0]
    );
    let reads = PolicyFile::parse(Path::new("a.toml"), A, &graph).expect("valid");
    assert!(reads.notes.is_empty(), "{:?}", reads.notes);
}

#[test]
fn the_example_policy_files_fit_the_example_graph() {
    let graph = Graph::load(Path::new(SHOP), None).expect("valid");
    for name in ["current.toml", "proposed.toml"] {
        let path = Path::new(POLICIES).join(name);
        let file = PolicyFile::load(&path, &graph).expect("a valid policy file");
        assert_eq!(file.resolved.len(), 4, "{name}");
        assert!(file.notes.is_empty(), "{name}: {:?}", file.notes);
    }
}

#[test]
fn the_html_page_is_self_contained_and_shows_each_files_policies_beside_its_numbers() {
    let report = small(A, B);
    let html = report.html(Path::new("graphs/small.toml"));
    for outside in [
        "<script",
        "<link",
        "src=",
        "href=",
        "@import",
        "url(",
        "@font-face",
    ] {
        assert!(
            !html.contains(outside),
            "the page reaches outside: {outside}"
        );
    }
    for shown in [
        "<title>rampart-sim what-if: graphs/small.toml</title>",
        "<th>A a.toml</th><th>B b.toml</th><th>B - A</th>",
        "<tr><td>policy db</td>",
        "db: 2 attempts, total 30s, attempt 40ms (abandon)",
        "db: 3 attempts, total 30s, attempt 20ms (abandon)",
        "<td>policies.db.attempt_timeout</td><td>40ms → 20ms</td>",
        "<td>policies.db.max_attempts</td><td>2 → 3</td>",
    ] {
        assert!(html.contains(shown), "no {shown:?} in the page");
    }
    let [a, b] = &report.outcomes;
    let p99 = |o: &Outcome| format!("{:.1}", ms(o.latency[1]));
    let row = |name: &str, va: String, vb: String| {
        format!("<tr><td>{name}</td><td>{va}</td><td>{vb}</td>")
    };
    for expected in [
        row("measured roots", a.roots.to_string(), b.roots.to_string()),
        row(
            "answered in time",
            pct(a.answered_in_time),
            pct(b.answered_in_time),
        ),
        row(
            "goodput (/s)",
            format!("{:.1}", a.goodput),
            format!("{:.1}", b.goodput),
        ),
        row("edge p99 (ms)", p99(a), p99(b)),
    ] {
        assert!(html.contains(&expected), "no {expected:?} in the page");
    }
}

#[test]
fn what_if_writes_json_that_parses_back_to_its_numbers_and_the_html_page_beside_it() {
    let report = small(A, B);
    let dir = std::env::temp_dir().join(format!("rampart-sim-whatif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    let options = WhatIfOptions {
        graph: "graphs/small.toml".into(),
        policies: ["a.toml".into(), "b.toml".into()],
        scenario: None,
        seed: 7,
        json: Some(dir.join("what-if.json")),
        html: Some(dir.join("what-if.html")),
        jobs: 1,
    };
    let written = report.write(&options).expect("written");
    let kinds: Vec<&str> = written.iter().map(|(kind, _)| *kind).collect();
    assert_eq!(kinds, ["json", "html"]);
    let text = std::fs::read_to_string(dir.join("what-if.json")).expect("the JSON file");
    let html = std::fs::read_to_string(dir.join("what-if.html")).expect("the HTML file");
    std::fs::remove_dir_all(&dir).expect("cleaned up");

    let mut json: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(json["graph_file"], "graphs/small.toml");
    json.as_object_mut()
        .expect("an object")
        .remove("graph_file");
    assert_same("", &json, &report.json());
    for (file, outcome) in json["files"]
        .as_array()
        .expect("files")
        .iter()
        .zip(&report.outcomes)
    {
        let goodput = file["outcome"]["goodput_per_s"].as_f64().expect("a number");
        assert!((goodput - outcome.goodput).abs() <= 1e-12 * outcome.goodput);
        assert_eq!(file["outcome"]["measured_roots"], outcome.roots);
        assert!(file["policies"]["db"]["explain"].is_string());
    }
    assert_eq!(html, report.html(Path::new("graphs/small.toml")));
}

/// `read` is `written` read back: the same keys and strings, numbers to the last digit or
/// two (serde_json's default parser may round a float's last bit).
fn assert_same(at: &str, read: &Value, written: &Value) {
    match (read, written) {
        (Value::Object(r), Value::Object(w)) => {
            assert_eq!(
                r.keys().collect::<Vec<_>>(),
                w.keys().collect::<Vec<_>>(),
                "{at}"
            );
            for (key, value) in r {
                assert_same(&format!("{at}.{key}"), value, &w[key]);
            }
        }
        (Value::Array(r), Value::Array(w)) => {
            assert_eq!(r.len(), w.len(), "{at}");
            for (i, (r, w)) in r.iter().zip(w).enumerate() {
                assert_same(&format!("{at}[{i}]"), r, w);
            }
        }
        (Value::Number(r), Value::Number(w)) => {
            let (r, w) = (r.as_f64().expect("finite"), w.as_f64().expect("finite"));
            assert!(
                (r - w).abs() <= 1e-12 * w.abs(),
                "{at}: {r} read, {w} written"
            );
        }
        _ => assert_eq!(read, written, "{at}"),
    }
}
