//! The importer: OTLP JSON spans, built here by hand with known timings, become the graph they
//! show (fan-out, sequence or parallel, errors, workers, traffic), and the graph file it
//! writes reads back with the graph module's own reader and check. The same spans as Jaeger's
//! JSON give the same graph. Malformed files give an error naming the line (OTLP) or the
//! place in the document (Jaeger), never a panic.
//!
//! Longer than the ~600-line guide: the OTLP and Jaeger readers, and the errors of each, are
//! checked against the same hand-built spans; split, each file would build them again.

use std::collections::BTreeMap;
use std::time::Duration;

use rampart_sim::graph::Graph;
use rampart_sim::graph::file::Mode;
use rampart_sim::import::{ImportedGraph, jaeger_to_graph, otlp_to_graph};
use serde_json::{Value, json};

const SERVER: u8 = 2;
const CLIENT: u8 = 3;
/// Where the fixtures' clocks start, in nanoseconds since the epoch.
const EPOCH: u64 = 1_700_000_000_000_000_000;
const ROOTS: u64 = 40;
/// A root request starts every 10 ms.
const EVERY_US: u64 = 10_000;

/// One span of a fixture; times in microseconds from the start of its root.
#[derive(Clone)]
struct S {
    service: &'static str,
    id: String,
    parent: String,
    kind: u8,
    start: u64,
    end: u64,
    http: Option<u16>,
}

fn span(service: &'static str, id: &str, parent: &str, kind: u8, start: u64, end: u64) -> S {
    S {
        service,
        id: id.to_owned(),
        parent: parent.to_owned(),
        kind,
        start,
        end,
        http: None,
    }
}

/// A client span and the server span under it, `id` and `id.s`.
fn call(from: &'static str, to: &'static str, parent: &str, id: &str, at: (u64, u64)) -> [S; 2] {
    let server = format!("{id}.s");
    [
        span(from, id, parent, CLIENT, at.0, at.1),
        span(to, &server, id, SERVER, at.0 + 200, at.1 - 200),
    ]
}

/// The lines of a file: each root's spans, one export request per service, as the
/// collector batches them.
fn file(root: impl Fn(u64) -> Vec<S>) -> String {
    let mut lines = Vec::new();
    for r in 0..ROOTS {
        let spans = root(r);
        let mut by_service: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
        for s in spans {
            let offset = EPOCH + r * EVERY_US * 1_000;
            let mut attributes = Vec::new();
            if let Some(code) = s.http {
                attributes.push(json!({
                    "key": "http.response.status_code",
                    "value": { "intValue": code.to_string() }
                }));
            }
            by_service.entry(s.service).or_default().push(json!({
                "traceId": format!("{r:032x}"),
                "spanId": s.id,
                "parentSpanId": s.parent,
                "name": "GET /",
                "kind": s.kind,
                "startTimeUnixNano": (offset + s.start * 1_000).to_string(),
                "endTimeUnixNano": (offset + s.end * 1_000).to_string(),
                "status": if s.http.is_some_and(|c| c >= 500) { json!({ "code": 2 }) } else { json!({}) },
                "attributes": attributes,
            }));
        }
        for (service, spans) in by_service {
            let request = json!({ "resourceSpans": [{
                "resource": { "attributes": [
                    { "key": "service.name", "value": { "stringValue": service } }
                ]},
                "scopeSpans": [{ "scope": { "name": "fixture" }, "spans": spans }]
            }]});
            lines.push(request.to_string());
        }
    }
    lines.join("\n") + "\n"
}

/// frontend (30 ms) → catalog (once, 2–8 ms) → db (twice, one after the other).
fn chain() -> String {
    file(|_| {
        let mut spans = vec![span("frontend", "f", "", SERVER, 0, 30_000)];
        spans.extend(call("frontend", "catalog", "f", "fc", (2_000, 8_000)));
        // catalog's server span is 2.2–7.8 ms; it waits on db 3–4.5 and 5–6.5 ms.
        spans.extend(call("catalog", "db", "fc.s", "cd1", (3_000, 4_500)));
        spans.extend(call("catalog", "db", "fc.s", "cd2", (5_000, 6_500)));
        spans
    })
}

/// frontend (30 ms) → prices four times at once (one of them answering 500) and, at the same
/// time, cart once. The frontend answers 500 when a price failed.
fn fan_out() -> String {
    file(|_| {
        let mut spans = vec![S {
            http: Some(500),
            ..span("frontend", "f", "", SERVER, 0, 30_000)
        }];
        for i in 0..4u64 {
            let [client, mut server] = call(
                "frontend",
                "prices",
                "f",
                &format!("fp{i}"),
                (5_000 + i * 100, 15_000 + i * 1_000),
            );
            server.http = Some(if i == 0 { 500 } else { 200 });
            spans.extend([client, server]);
        }
        spans.extend(call("frontend", "cart", "f", "fk", (6_000, 12_000)));
        spans
    })
}

fn import(text: &str) -> ImportedGraph {
    otlp_to_graph(text.as_bytes()).expect("the fixture imports")
}

#[test]
fn a_three_service_chain_gives_each_edge_its_fan_out_and_order() {
    let g = import(&chain());
    assert_eq!(g.entry, "frontend");
    assert_eq!(g.spans, ROOTS * 7);
    assert_eq!(g.traces, ROOTS);
    assert!(g.notes.is_empty(), "{:?}", g.notes);
    let names: Vec<&str> = g.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["catalog", "db", "frontend"]);

    let frontend = g.service("frontend").expect("frontend");
    assert_eq!(frontend.requests, ROOTS);
    assert_eq!(frontend.calls.len(), 1);
    let catalog_call = &frontend.calls[0];
    assert_eq!(catalog_call.to, "catalog");
    assert_eq!((catalog_call.per_parent, catalog_call.count), (1.0, 1));
    assert_eq!(
        catalog_call.mode, None,
        "never more than one call per request"
    );

    let catalog = g.service("catalog").expect("catalog");
    let db_call = &catalog.calls[0];
    assert_eq!(db_call.to, "db");
    assert_eq!((db_call.calls, db_call.parents), (2 * ROOTS, ROOTS));
    assert_eq!((db_call.per_parent, db_call.count), (2.0, 2));
    assert_eq!(db_call.mode, Some(Mode::Sequence));
    assert_eq!((db_call.several, db_call.overlapped), (ROOTS, 0));
    assert_eq!(db_call.most_at_once, 1);
    assert_eq!(db_call.error_rate, 0.0);
    // db's server spans: 1.5 ms less 0.4 ms.
    assert_eq!(
        db_call.latency.buckets,
        [(Duration::from_micros(1_100), 2 * ROOTS)]
    );
    // Each CLIENT span starts 0.2 ms before its SERVER span and ends 0.2 ms after it.
    assert_eq!(
        db_call.wire.buckets,
        [(Duration::from_micros(400), 2 * ROOTS)]
    );
    assert_eq!(
        catalog_call.wire.buckets,
        [(Duration::from_micros(400), ROOTS)]
    );

    // Own time: catalog's 5.6 ms less 3 ms in db; the frontend's 30 ms less 6 ms in catalog.
    assert_eq!(
        catalog.own_time.buckets,
        [(Duration::from_micros(2_600), ROOTS)]
    );
    assert_eq!(
        frontend.own_time.buckets,
        [(Duration::from_millis(24), ROOTS)]
    );

    // A 30 ms request every 10 ms: three at once (one ends as the fourth starts).
    assert_eq!(frontend.workers, 3);
    assert_eq!(catalog.workers, 1);
    assert_eq!(g.service("db").expect("db").workers, 1);

    // 40 roots, one every 10 ms: 100 per second over 390 ms.
    assert_eq!(g.traffic.roots, ROOTS);
    assert_eq!(g.traffic.window, Duration::from_millis(390));
    assert_eq!(g.traffic.segments.len(), 1);
    assert!((g.traffic.segments[0].1 - 100.0).abs() < 1e-6);
}

#[test]
fn a_parallel_fan_out_with_errors_on_one_edge() {
    let g = import(&fan_out());
    let frontend = g.service("frontend").expect("frontend");
    let order: Vec<&str> = frontend.calls.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(order, ["prices", "cart"], "in order of their start");

    let prices = &frontend.calls[0];
    assert_eq!((prices.per_parent, prices.count), (4.0, 4));
    assert_eq!(prices.mode, Some(Mode::Parallel));
    assert_eq!((prices.several, prices.overlapped), (ROOTS, ROOTS));
    // Four at once per request, and the next request's four start while three of these
    // are still in flight (the first ends as the next first starts).
    assert_eq!(prices.most_at_once, 7);
    assert!(!prices.with_previous);
    assert_eq!(prices.failed, ROOTS);
    assert_eq!(prices.error_rate, 0.25);
    let by_status: Vec<(&str, u64)> = prices
        .by_status
        .iter()
        .map(|(s, n)| (s.as_str(), *n))
        .collect();
    assert_eq!(by_status, [("http 200", 3 * ROOTS), ("http 500", ROOTS)]);

    let cart = &frontend.calls[1];
    assert!(cart.with_previous, "cart runs while the prices are asked");
    assert_eq!(cart.error_rate, 0.0);
    assert_eq!(cart.by_status.get("ok"), Some(&ROOTS));

    // prices fails on its own; the frontend fails only because a price failed.
    assert_eq!(g.service("prices").expect("prices").error_rate, 0.25);
    assert_eq!((frontend.own_errors, frontend.error_rate), (0, 0.0));
    // Own time: 30 ms less the union of 5–18 ms (prices) and 6–12 ms (cart).
    assert_eq!(
        frontend.own_time.buckets,
        [(Duration::from_millis(17), ROOTS)]
    );
}

#[test]
fn the_written_graph_file_reads_back_with_the_graph_reader_and_check() {
    let chain = import(&chain()).to_toml();
    let graph = Graph::parse(&chain, None).unwrap_or_else(|e| panic!("{e}\n{chain}"));
    let name = |i: usize| graph.services[i].config.name;
    assert_eq!(name(graph.entry), "frontend");
    let catalog = graph
        .services
        .iter()
        .find(|s| s.config.name == "catalog")
        .expect("catalog");
    assert_eq!(catalog.steps.len(), 1);
    let db = &catalog.steps[0][0];
    assert_eq!((name(db.to), db.policy.as_str()), ("db", "db"));
    assert_eq!((db.count, db.parallel), (2, false));
    assert_eq!(catalog.config.workers, 1);
    assert_eq!(catalog.config.queue, 0);
    assert_eq!(
        catalog.config.service_time.mean(),
        Duration::from_micros(2_600)
    );
    assert_eq!(graph.traffic.load.duration, Duration::from_millis(390));
    for marked in [
        "queue = 0  # not inferred",
        "admission = \"fifo\"  # not inferred",
        "# hang_rate: none seen",
        "# mix: not inferred",
        "Policy: define [policies.db].",
    ] {
        assert!(chain.contains(marked), "{marked:?} in\n{chain}");
    }

    let fan_out = import(&fan_out()).to_toml();
    let graph = Graph::parse(&fan_out, None).unwrap_or_else(|e| panic!("{e}\n{fan_out}"));
    let frontend = &graph.services[graph.entry];
    assert_eq!(frontend.steps.len(), 1, "prices and cart in one step");
    let step: Vec<(&str, u32, bool)> = frontend.steps[0]
        .iter()
        .map(|e| (graph.services[e.to].config.name, e.count, e.parallel))
        .collect();
    assert_eq!(step, [("prices", 4, true), ("cart", 1, true)]);
    let prices = graph
        .services
        .iter()
        .find(|s| s.config.name == "prices")
        .expect("prices");
    assert_eq!(prices.config.faults.error_rate, 0.25);
    assert_eq!(graph.policies(), ["cart", "prices"]);
}

#[test]
fn a_call_made_by_a_quarter_of_the_requests_is_written_as_a_share() {
    // frontend reads db twice, one after the other, on every fourth root only.
    let quarter = file(|r| {
        let mut spans = vec![span("frontend", "f", "", SERVER, 0, 30_000)];
        if r % 4 == 0 {
            spans.extend(call("frontend", "db", "f", "fd1", (2_000, 4_000)));
            spans.extend(call("frontend", "db", "f", "fd2", (5_000, 7_000)));
        }
        spans
    });
    let imported = import(&quarter);
    let db = &imported.service("frontend").expect("frontend").calls[0];
    assert_eq!((db.callers, db.parents), (ROOTS / 4, ROOTS));
    assert_eq!((db.per_parent, db.share, db.count), (0.5, 0.25, 2));
    let text = imported.to_toml();
    assert!(text.contains("count = 2, share = 0.25"), "{text}");
    let graph = Graph::parse(&text, None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let edge = &graph.services[graph.entry].steps[0][0];
    assert_eq!((edge.count, edge.share, edge.parallel), (2, 0.25, false));

    let every = import(&chain());
    let catalog = &every.service("frontend").expect("frontend").calls[0];
    assert_eq!(catalog.share, 1.0, "a call on every request has no share");
    assert!(!every.to_toml().contains("share"));
}

/// `text` with `change` applied to every span.
fn edit(text: &str, change: impl Fn(&mut Value)) -> String {
    text.lines()
        .map(|line| {
            let mut request: Value = serde_json::from_str(line).expect("fixture JSON");
            for resource in request["resourceSpans"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                for scope in resource["scopeSpans"].as_array_mut().into_iter().flatten() {
                    for span in scope["spans"].as_array_mut().into_iter().flatten() {
                        change(span);
                    }
                }
            }
            request.to_string() + "\n"
        })
        .collect()
}

#[test]
fn retries_are_counted_apart_from_the_fan_out() {
    let text = file(|_| {
        let mut spans = vec![span("web", "w", "", SERVER, 0, 20_000)];
        spans.extend(call("web", "db", "w", "a", (1_000, 4_000)));
        spans.extend(call("web", "db", "w", "b", (5_000, 8_000)));
        spans
    });
    // The second call is a retry of the first.
    let text = edit(&text, |span| {
        if span["spanId"] == "b" {
            span["attributes"] = json!([
                { "key": "http.request.resend_count", "value": { "intValue": "1" } }
            ]);
        }
    });
    let g = import(&text);
    let db = &g.service("web").expect("web").calls[0];
    assert_eq!((db.calls, db.retries, db.count), (ROOTS, ROOTS, 1));
    assert_eq!(db.mode, None, "one first attempt per request");
    assert_eq!(db.latency.samples, 2 * ROOTS, "every attempt's latency");
}

#[test]
fn spans_with_missing_parents_are_reported_not_guessed() {
    // The frontend's client spans to the catalog were not exported: the catalog's server
    // spans name a parent that is not there.
    let text = chain()
        .lines()
        .map(|line| {
            let mut request: Value = serde_json::from_str(line).expect("fixture JSON");
            if let Some(spans) =
                request["resourceSpans"][0]["scopeSpans"][0]["spans"].as_array_mut()
            {
                spans.retain(|s| s["spanId"] != "fc");
            }
            request.to_string() + "\n"
        })
        .collect::<String>();
    let g = import(&text);
    assert_eq!(g.entry, "frontend");
    assert!(g.service("frontend").expect("frontend").calls.is_empty());
    assert!(
        g.notes[0].starts_with("40 spans name a parent that is not in the file (line 1 span fc.s"),
        "{:?}",
        g.notes
    );
    assert!(
        g.notes
            .iter()
            .any(|n| n.contains("never reaches catalog, db")),
        "{:?}",
        g.notes
    );
    assert_eq!(g.services.len(), 1, "the catalog is not made a root");
    let toml = g.to_toml();
    assert!(
        toml.contains("# Left out:\n#   - 40 spans name a parent"),
        "{toml}"
    );
    Graph::parse(&toml, None).unwrap_or_else(|e| panic!("{e}\n{toml}"));
}

#[test]
fn a_load_generators_client_spans_and_internal_spans_are_passed_through() {
    const INTERNAL: u8 = 1;
    let g = import(&file(|_| {
        // loadgen's client span is the trace's root; web's handler calls db from inside an
        // internal span; web also reaches cache with no client span of its own (it
        // propagates the context from the internal span).
        let mut spans = vec![span("loadgen", "l", "", CLIENT, 0, 20_000)];
        spans.push(span("web", "w", "l", SERVER, 500, 19_500));
        spans.push(span("web", "i", "w", INTERNAL, 1_000, 9_000));
        spans.extend(call("web", "db", "i", "d", (2_000, 6_000)));
        spans.push(span("cache", "c", "i", SERVER, 6_500, 8_500));
        spans
    }));
    assert_eq!(g.entry, "web", "the roots are web's requests");
    assert_eq!(g.traffic.roots, ROOTS);
    assert!(g.service("loadgen").is_none());
    assert!(
        g.notes[0].starts_with("40 client spans belong to no request of their service"),
        "{:?}",
        g.notes
    );
    let web = g.service("web").expect("web");
    let calls: Vec<(&str, bool)> = web
        .calls
        .iter()
        .map(|c| (c.to.as_str(), c.with_previous))
        .collect();
    assert_eq!(calls, [("db", false), ("cache", false)]);
    // 19 ms less 4 ms in db and 2 ms in cache.
    assert_eq!(web.own_time.buckets, [(Duration::from_millis(13), ROOTS)]);
}

/// A line holding one span of `service` with `fields` replacing the defaults.
fn one_span(service: Value, fields: Value) -> String {
    let mut s = json!({
        "traceId": "t", "spanId": "a", "kind": 2,
        "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
    });
    let Value::Object(fields) = fields else {
        panic!("fields must be an object");
    };
    for (k, v) in fields {
        s[k] = v;
    }
    let mut name = json!({ "key": "service.name" });
    name["value"] = service;
    json!({ "resourceSpans": [{
        "resource": { "attributes": [name] },
        "scopeSpans": [{ "spans": [s] }]
    }]})
    .to_string()
}

#[test]
fn each_malformed_line_is_named_with_its_number_and_fault() {
    let good = one_span(json!({ "stringValue": "web" }), json!({}));
    let other = one_span(json!({ "stringValue": "web" }), json!({ "spanId": "b" }));
    let cases = [
        (
            "{not json".to_owned(),
            "not JSON: key must be a string, at column 2",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"t""#.to_owned(),
            "cut short (is the file truncated?): EOF while parsing",
        ),
        (
            r#"{"resourceSpans":7}"#.to_owned(),
            "not an OTLP JSON export request: invalid type: integer `7`, expected a sequence",
        ),
        (
            one_span(json!({ "intValue": "3" }), json!({})),
            "resourceSpans[0] has no service.name string attribute",
        ),
        (
            one_span(json!({ "stringValue": "web" }), json!({ "spanId": "" })),
            "spanId is empty",
        ),
        (
            one_span(
                json!({ "stringValue": "web" }),
                json!({ "endTimeUnixNano": "500" }),
            ),
            "endTimeUnixNano 500 is before startTimeUnixNano 1000",
        ),
        (
            one_span(
                json!({ "stringValue": "web" }),
                json!({ "startTimeUnixNano": "soon" }),
            ),
            "startTimeUnixNano is not a whole number of nanoseconds (was \"soon\")",
        ),
        (
            one_span(
                json!({ "stringValue": "web" }),
                json!({ "kind": "SPAN_KIND_SOMETIMES" }),
            ),
            "kind is not a SpanKind (was \"SPAN_KIND_SOMETIMES\")",
        ),
        (
            good.clone(),
            "span a of trace t appears twice (first on line 1)",
        ),
    ];
    for (third, expected) in cases {
        let text = format!("{good}\n\n{other}\n{third}\n");
        let e = otlp_to_graph(text.as_bytes()).expect_err(expected);
        assert_eq!(e.line(), Some(4), "{e}");
        assert!(e.to_string().starts_with("line 4: "), "{e}");
        assert!(e.message().contains(expected), "{e}\nexpected: {expected}");
    }
}

#[test]
fn a_file_cut_anywhere_in_a_line_says_so_with_that_line() {
    let text = chain();
    let lines: Vec<&str> = text.lines().collect();
    let keep = lines[..9].join("\n") + "\n";
    let cut = &lines[9][..lines[9].len() / 2];
    let e = otlp_to_graph(format!("{keep}{cut}").as_bytes()).expect_err("truncated");
    assert_eq!(e.line(), Some(10));
    assert!(e.message().starts_with("cut short"), "{e}");
}

#[test]
fn a_file_with_nothing_to_build_from_is_an_error_of_the_whole_file() {
    let e = otlp_to_graph(&b""[..]).expect_err("empty");
    assert_eq!((e.line(), e.message()), (None, "the file has no spans"));
    let client_only = one_span(json!({ "stringValue": "web" }), json!({ "kind": 3 }));
    let e = otlp_to_graph(client_only.as_bytes()).expect_err("no root");
    assert_eq!(e.line(), None);
    assert!(e.message().starts_with("no root request"), "{e}");
    let e = otlp_to_graph(&b"{}\n\xff\n"[..]).expect_err("not UTF-8");
    assert_eq!((e.line(), e.message()), (Some(2), "not UTF-8 text"));
}

#[test]
fn arbitrary_bytes_and_damaged_files_give_an_error_or_a_graph_never_a_panic() {
    let mut rng = fastrand::Rng::with_seed(25);
    let sample = fan_out();
    let sample = sample.as_bytes();
    let alphabet = br#"{}[]":,0123456789-.eE tfnrua\"spanIdkindtraceId"#;
    for round in 0..3_000 {
        let bytes: Vec<u8> = match round % 3 {
            // Random bytes, mostly from JSON's alphabet.
            0 => (0..rng.usize(0..200))
                .map(|_| {
                    if rng.bool() {
                        alphabet[rng.usize(..alphabet.len())]
                    } else {
                        rng.u8(..)
                    }
                })
                .collect(),
            // The fixture with a few bytes changed.
            1 => {
                let mut b = sample.to_vec();
                for _ in 0..rng.usize(1..8) {
                    let at = rng.usize(..b.len());
                    b[at] = alphabet[rng.usize(..alphabet.len())];
                }
                b
            }
            // The fixture cut anywhere.
            _ => sample[..rng.usize(..sample.len())].to_vec(),
        };
        if let Ok(graph) = otlp_to_graph(&bytes[..]) {
            let toml = graph.to_toml();
            // Whatever was read, the text is TOML (the check may refuse the graph).
            assert!(
                toml.parse::<toml::Table>().is_ok(),
                "round {round}: not TOML:\n{toml}"
            );
        }
    }
}

/// The spans of an OTLP file as Jaeger's JSON (pretty, as its UI downloads it): one trace per
/// trace id, each service a process, times in microseconds, the kind and the attributes as
/// tags, a failed status as the `error` tag, the parent as a `CHILD_OF` reference.
fn to_jaeger(otlp: &str) -> String {
    let mut traces: BTreeMap<String, (Vec<Value>, Vec<String>)> = BTreeMap::new();
    for line in otlp.lines().filter(|l| !l.trim().is_empty()) {
        let request: Value = serde_json::from_str(line).expect("fixture JSON");
        for resource in request["resourceSpans"].as_array().into_iter().flatten() {
            let service = resource["resource"]["attributes"][0]["value"]["stringValue"]
                .as_str()
                .expect("a service")
                .to_owned();
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let trace = span["traceId"].as_str().expect("a trace").to_owned();
                    let (spans, processes) = traces.entry(trace.clone()).or_default();
                    let process = match processes.iter().position(|p| *p == service) {
                        Some(at) => at,
                        None => {
                            processes.push(service.clone());
                            processes.len() - 1
                        }
                    };
                    let micros = |key: &str| {
                        span[key]
                            .as_str()
                            .expect("nanoseconds")
                            .parse::<u64>()
                            .expect("a number")
                            / 1_000
                    };
                    let kind = match span["kind"].as_u64() {
                        Some(2) => "server",
                        Some(3) => "client",
                        _ => "internal",
                    };
                    let mut tags =
                        vec![json!({ "key": "span.kind", "type": "string", "value": kind })];
                    for a in span["attributes"].as_array().into_iter().flatten() {
                        let value = &a["value"]["intValue"];
                        let number: i64 = value.as_str().map_or_else(
                            || value.as_i64().expect("an integer"),
                            |t| t.parse().expect("an integer"),
                        );
                        tags.push(json!({ "key": a["key"], "type": "int64", "value": number }));
                    }
                    if span["status"]["code"] == 2 {
                        tags.push(json!({ "key": "error", "type": "bool", "value": true }));
                    }
                    let parent = span["parentSpanId"].as_str().unwrap_or("");
                    let references = if parent.is_empty() {
                        json!([])
                    } else {
                        json!([{ "refType": "CHILD_OF", "traceID": trace, "spanID": parent }])
                    };
                    spans.push(json!({
                        "traceID": trace,
                        "spanID": span["spanId"],
                        "operationName": span["name"],
                        "references": references,
                        "startTime": micros("startTimeUnixNano"),
                        "duration": micros("endTimeUnixNano") - micros("startTimeUnixNano"),
                        "tags": tags,
                        "logs": [],
                        "processID": format!("p{}", process + 1),
                        "warnings": null,
                    }));
                }
            }
        }
    }
    let data: Vec<Value> = traces
        .into_iter()
        .map(|(id, (spans, processes))| {
            let processes: serde_json::Map<String, Value> = processes
                .into_iter()
                .enumerate()
                .map(|(i, service)| {
                    (
                        format!("p{}", i + 1),
                        json!({ "serviceName": service, "tags": [] }),
                    )
                })
                .collect();
            json!({ "traceID": id, "spans": spans, "processes": processes, "warnings": null })
        })
        .collect();
    let document = json!({ "data": data, "total": 0, "limit": 0, "offset": 0, "errors": null });
    serde_json::to_string_pretty(&document).expect("written")
}

#[test]
fn a_jaeger_file_gives_the_graph_its_otlp_twin_gives() {
    for (name, otlp) in [("chain", chain()), ("fan-out", fan_out())] {
        let jaeger = jaeger_to_graph(to_jaeger(&otlp).as_bytes()).expect("the Jaeger twin imports");
        assert_eq!(jaeger, import(&otlp), "{name}");
    }
    // A retry is read from its tag.
    let mut document: Value = serde_json::from_str(&to_jaeger(&chain())).expect("JSON");
    for trace in document["data"].as_array_mut().expect("data") {
        for span in trace["spans"].as_array_mut().expect("spans") {
            if span["spanID"] == "cd2" {
                span["tags"].as_array_mut().expect("tags").push(
                    json!({ "key": "http.request.resend_count", "type": "int64", "value": 1 }),
                );
            }
        }
    }
    let g = jaeger_to_graph(document.to_string().as_bytes()).expect("imports");
    let db = &g.service("catalog").expect("catalog").calls[0];
    assert_eq!((db.calls, db.retries, db.count), (ROOTS, ROOTS, 1));
}

/// The chain as Jaeger's JSON, with `change` applied to the document.
fn jaeger_with(change: impl FnOnce(&mut Value)) -> String {
    let mut document: Value = serde_json::from_str(&to_jaeger(&chain())).expect("JSON");
    change(&mut document);
    document.to_string()
}

#[test]
fn each_malformed_jaeger_trace_or_span_is_named_by_its_place_in_the_document() {
    fn span(d: &mut Value) -> &mut Value {
        &mut d["data"][1]["spans"][2]
    }
    let cases: Vec<(String, &str)> = vec![
        (
            jaeger_with(|d| d["data"] = json!(7)),
            "no \"data\" array of traces: not Jaeger's JSON",
        ),
        (
            jaeger_with(|d| d["data"][1] = json!("x")),
            "data[1] is not an object (a trace)",
        ),
        (
            jaeger_with(|d| d["data"][1]["processes"] = json!([])),
            "data[1].processes is not an object (was [])",
        ),
        (
            jaeger_with(|d| span(d)["spanID"] = json!("")),
            "data[1].spans[2].spanID is missing or empty",
        ),
        (
            jaeger_with(|d| {
                span(d).as_object_mut().expect("a span").remove("startTime");
            }),
            "data[1].spans[2].startTime is not a whole number of microseconds (was missing)",
        ),
        (
            jaeger_with(|d| span(d)["duration"] = json!(-5)),
            "data[1].spans[2].duration is not a whole number of microseconds (was -5)",
        ),
        (
            jaeger_with(|d| span(d)["startTime"] = json!(1.5)),
            "data[1].spans[2].startTime is not a whole number of microseconds (was 1.5)",
        ),
        (
            jaeger_with(|d| span(d)["startTime"] = json!(u64::MAX)),
            "data[1].spans[2]: startTime or duration is too large to be nanoseconds",
        ),
        (
            jaeger_with(|d| span(d)["processID"] = json!("p9")),
            "data[1].spans[2].processID \"p9\" names no process of its trace (it has: p1, p2, p3)",
        ),
        (
            jaeger_with(|d| span(d)["tags"] = json!(5)),
            "data[1].spans[2].tags is not an array (was 5)",
        ),
        (
            jaeger_with(|d| {
                let first = d["data"][1]["spans"][0].clone();
                d["data"][1]["spans"]
                    .as_array_mut()
                    .expect("spans")
                    .push(first);
            }),
            "data[1].spans[7]: span fc.s of trace 00000000000000000000000000000001 appears twice (first at data[1].spans[0])",
        ),
    ];
    for (text, expected) in cases {
        let e = jaeger_to_graph(text.as_bytes()).expect_err(expected);
        assert_eq!(e.line(), None, "{e}");
        assert!(
            e.message().starts_with(expected),
            "{e}\nexpected: {expected}"
        );
    }
}

#[test]
fn a_jaeger_file_that_is_not_json_is_named_by_its_line_and_column() {
    let text = to_jaeger(&chain());
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines[..40].join("\n");
    let e = jaeger_to_graph(cut.as_bytes()).expect_err("truncated");
    assert_eq!(e.line(), Some(40), "{e}");
    assert!(e.message().starts_with("cut short"), "{e}");
    let e = jaeger_to_graph(&b"{\"data\": [}"[..]).expect_err("not JSON");
    assert_eq!(e.line(), Some(1));
    assert!(e.message().starts_with("not JSON"), "{e}");
    let e = jaeger_to_graph(&b"\xff"[..]).expect_err("not UTF-8");
    assert!(e.message().starts_with("cannot be read"), "{e}");
    let e = jaeger_to_graph(&br#"{"data": []}"#[..]).expect_err("no spans");
    assert_eq!(e.message(), "the file has no spans");
}

#[test]
fn arbitrary_bytes_and_damaged_jaeger_files_give_an_error_or_a_graph_never_a_panic() {
    let mut rng = fastrand::Rng::with_seed(25);
    // Three traces on one line: every round reads the whole document.
    let mut document: Value = serde_json::from_str(&to_jaeger(&fan_out())).expect("JSON");
    document["data"].as_array_mut().expect("data").truncate(3);
    let sample = document.to_string();
    let sample = sample.as_bytes();
    let alphabet = br#"{}[]":,0123456789-.eE tfnrua\"datspnIDrefTypCHILD_OFprocessID"#;
    for round in 0..3_000 {
        let bytes: Vec<u8> = match round % 3 {
            // Random bytes, mostly from JSON's alphabet.
            0 => (0..rng.usize(0..200))
                .map(|_| {
                    if rng.bool() {
                        alphabet[rng.usize(..alphabet.len())]
                    } else {
                        rng.u8(..)
                    }
                })
                .collect(),
            // The fixture with a few bytes changed.
            1 => {
                let mut b = sample.to_vec();
                for _ in 0..rng.usize(1..8) {
                    let at = rng.usize(..b.len());
                    b[at] = alphabet[rng.usize(..alphabet.len())];
                }
                b
            }
            // The fixture cut anywhere.
            _ => sample[..rng.usize(..sample.len())].to_vec(),
        };
        if let Ok(graph) = jaeger_to_graph(&bytes[..]) {
            let toml = graph.to_toml();
            assert!(
                toml.parse::<toml::Table>().is_ok(),
                "round {round}: not TOML:\n{toml}"
            );
        }
    }
}

#[test]
fn a_call_its_caller_stopped_waiting_for_gives_no_wire_time() {
    let g = import(&file(|_| {
        let mut spans = vec![span("frontend", "f", "", SERVER, 0, 30_000)];
        spans.extend(call("frontend", "db", "f", "a", (1_000, 5_000)));
        // Cut by its attempt timeout at 10 ms; db answered at 12 ms.
        spans.push(span("frontend", "b", "f", CLIENT, 6_000, 10_000));
        spans.push(span("db", "b.s", "b", SERVER, 6_300, 12_000));
        spans
    }));
    let db = &g.service("frontend").expect("frontend").calls[0];
    assert_eq!(db.calls, 2 * ROOTS);
    assert_eq!(db.wire.samples, ROOTS, "only the answered calls");
    assert_eq!(db.wire.buckets, [(Duration::from_micros(400), ROOTS)]);
}
