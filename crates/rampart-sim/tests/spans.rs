//! The spans a graph run records: one SERVER span per request answered, one CLIENT span per
//! attempt, linked by their ids, at the virtual times the run had; recording them changes
//! nothing the run measures.

use std::collections::BTreeMap;
use std::time::Duration;

use rampart::config::{Policies, PolicyConfig};
use rampart_sim::graph::Graph;
use rampart_sim::graph::run::{run, trace};
use rampart_sim::spans::{RecordedSpan, SpanKind, SpanStatus};

/// web works 2 ms and calls db, which takes 50 ms: each of web's two attempts times out at
/// 20 ms, and web answers 504.
const SLOW_DB: &str = r#"
entry = "web"

[services.web]
workers = 100
service_time = { histogram = [["2ms", 1]] }
calls = [{ to = "db", policy = "db" }]

[services.db]
workers = 100
service_time = { histogram = [["50ms", 1]] }

[traffic]
deadline = "1s"
segments = [{ kind = "steady", rate = 20, for = "1s" }]
"#;

const POLICIES: &str = r#"
[policies.db]
max_attempts = 2
attempt_timeout = "20ms"
backoff = { kind = "none" }
budget = "none"
breaker = "none"
"#;

fn policies() -> BTreeMap<String, PolicyConfig> {
    let file: Policies = toml::from_str(POLICIES).expect("a policy file");
    BTreeMap::from([("db".to_owned(), file.resolved("db").expect("named"))])
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn an_attempt_that_times_out_is_a_cancelled_client_span_and_its_callee_answers_anyway() {
    let graph = Graph::parse(SLOW_DB, None).expect("valid");
    let (_, spans) = trace(&graph, &policies(), 3).expect("runs");
    let mut traces: BTreeMap<u64, Vec<&RecordedSpan>> = BTreeMap::new();
    for span in &spans {
        traces.entry(span.trace).or_default().push(span);
    }
    assert!(traces.len() > 5, "{} roots", traces.len());
    for (root, spans) in traces {
        let find = |kind: SpanKind, service: &str, resend: Option<u32>| -> Vec<&RecordedSpan> {
            spans
                .iter()
                .copied()
                .filter(|s| s.kind == kind && s.service == service)
                .filter(|s| resend.is_none_or(|r| s.resend == r))
                .collect()
        };
        let [web] = find(SpanKind::Server, "web", None)[..] else {
            panic!("root {root}: one request to web");
        };
        let [first] = find(SpanKind::Client, "web", Some(0))[..] else {
            panic!("root {root}: one first attempt");
        };
        let [retry] = find(SpanKind::Client, "web", Some(1))[..] else {
            panic!("root {root}: one retry");
        };
        let db = find(SpanKind::Server, "db", None);
        assert_eq!(spans.len(), 5, "root {root}: nothing else");
        let t = web.start;

        assert_eq!(web.parent, None, "the edge is not traced");
        assert_eq!((web.end - t, web.status), (42 * MS, SpanStatus::Http(504)));
        for (attempt, from) in [(first, 2 * MS), (retry, 22 * MS)] {
            assert_eq!(attempt.parent, Some(web.id));
            assert_eq!((attempt.start - t, attempt.duration()), (from, 20 * MS));
            assert_eq!(attempt.status, SpanStatus::Cancelled);
            let under: Vec<_> = db.iter().filter(|s| s.parent == Some(attempt.id)).collect();
            let [server] = under[..] else {
                panic!("root {root}: one db request under each attempt");
            };
            assert_eq!((server.start, server.duration()), (attempt.start, 50 * MS));
            assert_eq!(server.status, SpanStatus::Http(200));
        }
    }
}

#[test]
fn recording_spans_changes_nothing_the_run_measures() {
    let graph = Graph::parse(SLOW_DB, None).expect("valid");
    let plain = run(&graph, &policies(), 3).expect("runs");
    let (traced, _) = trace(&graph, &policies(), 3).expect("runs");
    assert_eq!(plain, traced);
}
