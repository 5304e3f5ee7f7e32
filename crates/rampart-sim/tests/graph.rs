//! Graph files: the example parses, every problem is reported at once under its key path, an
//! unknown key is refused with its name, a call with a share is made on that share of the
//! requests, a failure with a time of its own takes it (and the importer writes it so).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rampart::config::{Policies, PolicyConfig};
use rampart_sim::graph::{Graph, run};
use rampart_sim::import::otlp_to_graph;
use rampart_sim::spans::{RecordedSpan, SpanKind, SpanStatus, write_otlp};

const SHOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/graphs/shop.toml");

fn problems(text: &str) -> Vec<String> {
    let error = Graph::parse(text, None).expect_err("the graph is refused");
    error.to_string().split("; ").map(str::to_owned).collect()
}

#[test]
fn the_example_graph_parses_with_each_of_its_scenarios() {
    let graph = Graph::load(Path::new(SHOP), None).expect("shop.toml is valid");
    let names: Vec<&str> = graph.services.iter().map(|s| s.config.name).collect();
    assert_eq!(names, ["cart", "catalog", "db", "frontend", "prices"]);
    assert_eq!(graph.services[graph.entry].config.name, "frontend");
    let tiers: Vec<usize> = graph.services.iter().map(|s| s.tier).collect();
    assert_eq!(tiers, [1, 1, 2, 0, 1]);
    assert_eq!(graph.policies(), ["cart", "catalog", "db", "prices"]);
    assert_eq!(graph.faults.len(), 2);
    assert_eq!(graph.traffic.load.duration.as_secs(), 24);

    let outage = Graph::load(Path::new(SHOP), Some("db-outage")).expect("its scenario is valid");
    assert_eq!(outage.scenario, "db-outage");
    assert_eq!(outage.faults.len(), 1);
    assert_eq!(
        outage.traffic.load, graph.traffic.load,
        "the scenario keeps the traffic"
    );

    let missing = Graph::load(Path::new(SHOP), Some("nope")).expect_err("no such scenario");
    assert!(
        missing
            .to_string()
            .ends_with("scenarios.nope is not in the file (it has: default, db-outage)"),
        "{missing}"
    );
}

#[test]
fn every_problem_of_a_graph_is_reported_at_once_under_its_key_path() {
    let found = problems(
        r#"
        entry = "front"

        [services.front]
        workers = 0
        hold = "1s"
        service_time = { median = "5ms", p99 = "2ms" }
        error_rate = 1.5
        calls = [
          { to = "nowhere", policy = "p", count = 0 },
          { to = "leaf", policy = "p", with_previous = true },
        ]

        [services.leaf]
        workers = 1
        reserve = "5ms"
        enforce = true
        service_time = { histogram = [] }

        [traffic]
        warmup = "5s"
        segments = [{ kind = "ramp", rate = 10, for = "2s" }]

        [[faults]]
        kind = "latency"
        service = "ghost"
        from = "3s"
        to = "1s"
        "#,
    );
    assert_eq!(
        found,
        [
            "services.front.workers must be at least 1 (was 0)",
            "services.front.hold does not apply to fifo admission (was 1s)",
            "services.front.service_time.p99 must be at least the median (was 2ms, median 5ms)",
            "services.front.error_rate must be between 0 and 1 (was 1.5)",
            "services.front.calls[0].to names no service (was \"nowhere\", the services: front, leaf)",
            "services.front.calls[0].count must be at least 1 (was 0)",
            "services.leaf.reserve does not apply to a service without inbound = true (was 5ms)",
            "services.leaf.enforce does not apply to a service without inbound = true (was true)",
            "services.leaf.service_time.histogram must have at least one [latency, weight] pair",
            "traffic.deadline is required",
            "traffic.segments[0].rate does not apply to a ramp segment (give from and to) (was 10)",
            "traffic.segments[0].from is required for a ramp segment",
            "traffic.segments[0].to is required for a ramp segment",
            "faults[0].service names no service (was \"ghost\", the services: front, leaf)",
            "faults[0].from must be before to (was 3s, to 1s)",
            "faults[0].added is required for a latency fault",
        ]
    );
}

#[test]
fn a_call_cycle_and_an_unreached_service_are_refused() {
    let found = problems(
        r#"
        entry = "a"
        [services.a]
        workers = 1
        service_time = { median = "1ms", p99 = "1ms" }
        calls = [{ to = "b", policy = "p" }]
        [services.b]
        workers = 1
        service_time = { median = "1ms", p99 = "1ms" }
        calls = [{ to = "a", policy = "p" }]
        [services.c]
        workers = 1
        service_time = { median = "1ms", p99 = "1ms" }
        [traffic]
        deadline = "1s"
        segments = [{ kind = "steady", rate = 1, for = "1s" }]
        "#,
    );
    assert_eq!(
        found,
        ["services.b.calls[0].to makes a cycle (a → b → a), which a call graph cannot have"]
    );
    let found = problems(
        r#"
        entry = "a"
        [services.a]
        workers = 1
        service_time = { median = "1ms", p99 = "1ms" }
        [services.c]
        workers = 1
        service_time = { median = "1ms", p99 = "1ms" }
        [traffic]
        deadline = "1s"
        segments = [{ kind = "steady", rate = 1, for = "1s" }]
        "#,
    );
    assert_eq!(found, ["services.c is not reached from the entry (a)"]);
}

#[test]
fn an_unknown_key_is_refused_with_its_name() {
    let error = Graph::parse(
        r#"
        entry = "a"
        [services.a]
        workers = 1
        wrokers = 2
        service_time = { median = "1ms", p99 = "1ms" }
        [traffic]
        deadline = "1s"
        segments = [{ kind = "steady", rate = 1, for = "1s" }]
        "#,
        None,
    )
    .expect_err("an unknown key is refused");
    let message = error.to_string();
    assert!(message.contains("unknown field `wrokers`"), "{message}");
    assert!(message.contains("line 5"), "{message}");
    let duration = Graph::parse("entry = \"a\"\n[traffic]\ndeadline = \"300\"\n", None)
        .expect_err("a duration needs a unit");
    assert!(duration.to_string().contains("no unit"), "{duration}");
}

/// `a` calls `b` twice on a quarter of its requests and, at the same time, `c` on every one.
const QUARTER: &str = r#"
entry = "a"

[services.a]
workers = 100
service_time = { histogram = [["1ms", 1]] }
calls = [
  { to = "b", policy = "p", count = 2, share = 0.25 },
  { to = "c", policy = "p", with_previous = true },
]

[services.b]
workers = 100
service_time = { histogram = [["1ms", 1]] }

[services.c]
workers = 100
service_time = { histogram = [["1ms", 1]] }

[traffic]
deadline = "1s"
segments = [{ kind = "steady", rate = 1000, for = "2s" }]
"#;

fn one_attempt() -> BTreeMap<String, PolicyConfig> {
    let file: Policies = toml::from_str("[policies.p]\nmax_attempts = 1\n").expect("a policy file");
    BTreeMap::from([("p".to_owned(), file.resolved("p").expect("named"))])
}

#[test]
fn a_call_with_a_share_of_a_quarter_is_made_on_about_a_quarter_of_the_requests() {
    let graph = Graph::parse(QUARTER, None).expect("valid");
    assert!(
        graph.describe()[0].contains("b x2 at once on 25% of requests (p) + c (p)"),
        "{:?}",
        graph.describe()
    );
    let policies = one_attempt();
    let first = run(&graph, &policies, 11).expect("runs");
    let per_root = |seed| {
        let outcome = run(&graph, &policies, seed).expect("runs");
        let arrivals = |i: usize| outcome.services[i].per_root * outcome.roots as f64;
        (outcome.roots, arrivals(1), arrivals(2))
    };
    let (roots, b, c) = per_root(11);
    assert!(roots > 1_800, "{roots} roots");
    assert_eq!(
        c, roots as f64,
        "the entry beside it is made on every request"
    );
    assert_eq!(b % 2.0, 0.0, "both calls of a drawn request, or neither");
    let share = b / 2.0 / roots as f64;
    assert!(
        (0.22..0.28).contains(&share),
        "made on {share} of the requests"
    );
    assert_eq!(
        run(&graph, &policies, 11).expect("runs"),
        first,
        "the same seed makes the same draws"
    );
    assert_ne!(per_root(12).1, b, "another seed, other draws");
}

#[test]
fn a_share_outside_above_0_to_1_is_refused_under_its_key_path() {
    let graph = |share: &str| {
        format!(
            r#"
            entry = "a"
            [services.a]
            workers = 1
            service_time = {{ median = "1ms", p99 = "1ms" }}
            calls = [{{ to = "b", policy = "p", share = {share} }}]
            [services.b]
            workers = 1
            service_time = {{ median = "1ms", p99 = "1ms" }}
            [traffic]
            deadline = "1s"
            segments = [{{ kind = "steady", rate = 1, for = "1s" }}]
            "#
        )
    };
    for (share, was) in [("0", "0"), ("1.5", "1.5"), ("-0.1", "-0.1"), ("nan", "NaN")] {
        assert_eq!(
            problems(&graph(share)),
            [format!(
                "services.a.calls[0].share must be above 0 and at most 1 (was {was})"
            )]
        );
    }
    let whole = Graph::parse(&graph("1"), None).expect("a share of 1 is every request");
    assert_eq!(whole.services[0].steps[0][0].share, 1.0);
}

/// a → b; b fails half its requests on its own after 50 ms and answers the others in 1 ms.
const SLOW_FAILURES: &str = r#"
entry = "a"

[services.a]
workers = 100
service_time = { histogram = [["1ms", 1]] }
calls = [{ to = "b", policy = "p" }]

[services.b]
workers = 100
service_time = { histogram = [["1ms", 1]] }
error_rate = 0.5
error_time = { histogram = [["50ms", 1]] }

[traffic]
deadline = "1s"
segments = [{ kind = "steady", rate = 200, for = "2s" }]
"#;

#[test]
fn a_request_that_fails_on_its_own_takes_its_error_time_and_an_answered_one_does_not() {
    let graph = Graph::parse(SLOW_FAILURES, None).expect("valid");
    let (_, spans) = run::trace(&graph, &one_attempt(), 3).expect("runs");
    let served: Vec<_> = spans
        .iter()
        .filter(|s| s.service == "b" && s.kind == SpanKind::Server)
        .collect();
    let total = served.len();
    assert!(total > 300, "{total} requests");
    let (failed, answered): (Vec<&RecordedSpan>, Vec<&RecordedSpan>) = served
        .into_iter()
        .partition(|s| s.status == SpanStatus::Http(500));
    assert!(failed.len() > total / 4, "{} failed", failed.len());
    assert!(answered.len() > total / 4, "{} answered", answered.len());
    assert!(
        failed
            .iter()
            .all(|s| s.duration() == Duration::from_millis(50))
    );
    assert!(
        answered
            .iter()
            .all(|s| s.duration() == Duration::from_millis(1))
    );
}

#[test]
fn an_error_time_without_an_error_rate_is_refused_under_its_key_path() {
    let without = SLOW_FAILURES.replace("error_rate = 0.5\n", "");
    assert_eq!(
        problems(&without),
        ["services.b.error_time is set but no request fails on its own (error_rate is 0)"]
    );
}

#[test]
fn the_importer_writes_failures_that_are_the_slow_tail_as_their_own_time() {
    let graph = Graph::parse(SLOW_FAILURES, None).expect("valid");
    let (_, spans) = run::trace(&graph, &one_attempt(), 3).expect("runs");
    let mut otlp = Vec::new();
    write_otlp(&spans, &mut otlp).expect("written");
    let imported = otlp_to_graph(otlp.as_slice()).expect("imports");
    let b = imported.service("b").expect("imported");
    let (answered, failed) = b.split.as_ref().expect("enough failures to split");
    let failed = failed.as_ref().expect("at least SPLIT_AT errors");
    assert_eq!(answered.p50_p99_max[2], Duration::from_millis(1));
    assert_eq!(failed.p50_p99_max[0], Duration::from_millis(50));
    assert_eq!(b.own_timeouts, 0, "a 500 is not a timeout");
    let text = imported.to_toml();
    assert!(text.contains("[services.b.error_time]"), "{text}");
    // What it wrote reads back, and the service time it keeps is the answers' alone.
    let again = Graph::parse(&text, None).expect("the written graph reads back");
    // The importer names each edge's policy after its callee.
    let named_b = BTreeMap::from([("b".to_owned(), one_attempt()["p"].clone())]);
    let (_, spans) = run::trace(&again, &named_b, 3).expect("runs");
    let slow_answers = spans
        .iter()
        .filter(|s| s.service == "b" && s.kind == SpanKind::Server)
        .filter(|s| s.status == SpanStatus::Http(200) && s.duration() > Duration::from_millis(5))
        .count();
    assert_eq!(slow_answers, 0);
}

/// a → b; b hangs on a tenth of its requests, which its caller cuts at its 20 ms ceiling.
const HANGS: &str = r#"
entry = "a"

[services.a]
workers = 100
service_time = { histogram = [["1ms", 1]] }
calls = [{ to = "b", policy = "p" }]

[services.b]
workers = 100
inbound = true
service_time = { histogram = [["1ms", 1]] }
hang_rate = 0.1

[traffic]
deadline = "20ms"
segments = [{ kind = "steady", rate = 200, for = "2s" }]
"#;

#[test]
fn the_importer_writes_a_services_own_timeouts_as_its_hang_rate() {
    let graph = Graph::parse(HANGS, None).expect("valid");
    let (_, spans) = run::trace(&graph, &one_attempt(), 5).expect("runs");
    // A hung request answers nothing in the simulator; where a real server cuts it at its
    // deadline it answers 504 then, which is what this trace says of b.
    let mut spans = spans;
    let hung: Vec<u64> = spans
        .iter()
        .filter(|s| s.service == "a" && s.kind == SpanKind::Client)
        .filter(|s| s.status == SpanStatus::Cancelled)
        .map(|s| s.id)
        .collect();
    assert!(!hung.is_empty(), "some of b's requests hung");
    let last = spans.iter().map(|s| s.id).max().unwrap_or(0);
    for (i, &client) in hung.iter().enumerate() {
        let at = spans
            .iter()
            .find(|s| s.id == client)
            .expect("the client span")
            .clone();
        spans.push(RecordedSpan {
            id: last + 1 + i as u64,
            parent: Some(client),
            service: "b",
            kind: SpanKind::Server,
            status: SpanStatus::Http(504),
            ..at
        });
    }
    let mut otlp = Vec::new();
    write_otlp(&spans, &mut otlp).expect("written");
    let imported = otlp_to_graph(otlp.as_slice()).expect("imports");
    let b = imported.service("b").expect("imported");
    assert_eq!(b.own_timeouts, hung.len() as u64);
    assert_eq!(b.own_errors, 0);
    assert!(
        (0.07..0.13).contains(&b.hang_rate),
        "hang rate {}",
        b.hang_rate
    );
    let text = imported.to_toml();
    assert!(text.contains("hang_rate = "), "{text}");
    assert!(!text.contains("[services.b.error_time]"), "{text}");
    Graph::parse(&text, None).expect("the written graph reads back");
}

#[test]
fn a_calls_wire_is_spent_before_the_callee_sees_each_attempt_and_checked_under_its_key_path() {
    let wired = SLOW_FAILURES
        .replace("error_rate = 0.5\n", "")
        .replace("error_time = { histogram = [[\"50ms\", 1]] }\n", "")
        .replace(
            r#"policy = "p" }"#,
            r#"policy = "p", wire = { histogram = [["3ms", 1]] } }"#,
        );
    let graph = Graph::parse(&wired, None).expect("valid");
    assert!(
        graph.describe()[0].contains("b (p, 3.00 ms on the wire)"),
        "{:?}",
        graph.describe()
    );
    let (_, spans) = run::trace(&graph, &one_attempt(), 3).expect("runs");
    let server: std::collections::HashMap<u64, &RecordedSpan> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server)
        .filter_map(|s| Some((s.parent?, s)))
        .collect();
    let clients: Vec<&RecordedSpan> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Client)
        .collect();
    assert!(clients.len() > 300, "{} attempts", clients.len());
    for client in clients {
        let callee = server[&client.id];
        // 3 ms on the way there, then the callee's 1 ms.
        assert_eq!(callee.start - client.start, Duration::from_millis(3));
        assert_eq!(client.duration(), Duration::from_millis(4));
    }

    let bad = wired.replace(
        r#"wire = { histogram = [["3ms", 1]] }"#,
        r#"wire = { median = "0ms", p99 = "1ms" }"#,
    );
    assert_eq!(
        problems(&bad),
        ["services.a.calls[0].wire.median must be positive (was 0ns)"]
    );
}
