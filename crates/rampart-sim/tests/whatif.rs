//! `what-if`: a small graph under two policy files gives the same numbers for the same seed,
//! and the one-change-at-a-time attribution lists exactly the settings that differ.

use std::path::Path;

use rampart_sim::graph::Graph;
use rampart_sim::scenario::Runner;
use rampart_sim::whatif::{self, PolicyFile};

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
fn the_example_policy_files_fit_the_example_graph() {
    let graph = Graph::load(Path::new(SHOP), None).expect("valid");
    for name in ["current.toml", "proposed.toml"] {
        let path = Path::new(POLICIES).join(name);
        let file = PolicyFile::load(&path, &graph).expect("a valid policy file");
        assert_eq!(file.resolved.len(), 4, "{name}");
    }
}
