//! The validation's own tests: the filled graph, the JSON, the report's tables.

use super::phases::PARTS;
use super::*;
use crate::loopback::PATIENCE;
use crate::report::escape;
use crate::spans::SpanStatus;

fn server(id: u64, millis: u64, status: SpanStatus) -> RecordedSpan {
    RecordedSpan {
        trace: id,
        id,
        parent: None,
        service: "leaf",
        kind: SpanKind::Server,
        start: Duration::ZERO,
        end: Duration::from_millis(millis),
        status,
        resend: 0,
    }
}

#[test]
fn failures_in_the_slowest_twentieth_are_counted_as_slow() {
    let mut spans: Vec<RecordedSpan> = (0..38)
        .map(|i| server(i, 3, SpanStatus::Http(200)))
        .collect();
    spans.push(server(38, 480, SpanStatus::Http(504)));
    spans.push(server(39, 3, SpanStatus::Http(500)));
    let found = slow_failures(&spans, "leaf").expect("two failed");
    assert_eq!((found.failed, found.slow), (2, 1));
    assert_eq!(found.p95, Duration::from_millis(3));
    assert_eq!(slow_failures(&spans[..38], "leaf"), None);
}

/// The loopback chain's shape as the importer writes it, every leaf request hanging, 20
/// roots; [`fill`] gives it the 500 ms deadline and the inbound layer of every hop.
const HANGING_CHAIN: &str = r#"
entry = "edge"

[services.edge]
service_time = { histogram = [["200us", 1]] }
calls = [{ to = "middle", policy = "middle" }]

[services.middle]
service_time = { histogram = [["200us", 1]] }
calls = [{ to = "leaf", policy = "leaf" }]

[services.leaf]
service_time = { histogram = [["3ms", 1]] }
hang_rate = 1.0

[traffic]
segments = [{ kind = "steady", rate = 10, for = "2s" }]
"#;

fn hanging_chain_under(file: usize) -> Outcome {
    let graph = fill(HANGING_CHAIN).expect("filled in");
    let graph = Graph::parse(&graph, None).expect("the chain's graph is valid");
    let (_, name, text) = FILES[file];
    let policies = toml::from_str(text).expect("the policy file parses");
    let file = PolicyFile::check(Path::new(name), policies, &graph).expect("it checks");
    crate::graph::run(&graph, &file.resolved, 1).expect("the run succeeds")
}

#[test]
fn a_hung_leaf_request_takes_the_deadline_so_the_baseline_sends_no_retry() {
    // As rampart-http's outbound layer does, every client reads the ambient deadline. The
    // leaf answers 504 at its deadline (485 ms): the middle has 5 ms of its own left, the
    // edge 10 ms of its own, neither more than the 10 ms floor, so neither retries.
    let baseline = hanging_chain_under(0);
    assert!(baseline.roots > 0);
    assert_eq!(baseline.answered_in_time, 0.0);
    assert_eq!(baseline.leaf_per_root(), 1.0);
    // A 50 ms attempt timeout leaves time for all three of the middle's attempts, and
    // for all three of the edge's, each a middle request of three.
    assert_eq!(hanging_chain_under(1).leaf_per_root(), 9.0);
}

/// The chain simulated in place of the real one: [`HANGING_CHAIN`] with one leaf request
/// in ten hanging, traced under `file`'s policies, counted as the chain counts itself (a
/// leaf request is one the middle sent: a hung one records no SERVER span).
fn simulated_chain(file: &Policies) -> Result<chain::Run, SimError> {
    let graph = fill(HANGING_CHAIN)?
        .replace("hang_rate = 1.0", "hang_rate = 0.1")
        .replace("rate = 10", "rate = 30");
    let graph = Graph::parse(&graph, None).map_err(|e| SimError::new(e.to_string()))?;
    let resolved: BTreeMap<String, PolicyConfig> = ["middle", "leaf"]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), file.resolved(name)?)))
        .collect();
    let (_, spans) = crate::graph::run::trace(&graph, &resolved, 1)?;
    let handled = |service: &'static str| {
        spans
            .iter()
            .filter(move |s| s.service == service && s.kind == SpanKind::Server)
    };
    let mut latencies: Vec<Duration> = handled("edge")
        .filter(|s| s.status == SpanStatus::Http(200) && s.duration() <= PATIENCE)
        .map(RecordedSpan::duration)
        .collect();
    latencies.sort_unstable();
    Ok(chain::Run {
        roots: handled("edge").count(),
        in_time: latencies.len(),
        latencies,
        leaf_requests: spans
            .iter()
            .filter(|s| s.service == "middle" && s.kind == SpanKind::Client)
            .count(),
        spans,
        drained: true,
    })
}

#[test]
fn the_html_page_is_self_contained_and_holds_every_cell_of_the_tables() {
    let v = run_with(60, 1, &Runner::new(1, false), simulated_chain).expect("it runs");
    let page = v.html();
    assert!(
        page.starts_with("<!DOCTYPE html>"),
        "{}",
        &page[..40.min(page.len())]
    );
    assert!(page.trim_end().ends_with("</html>"));
    for linked in ["<script", "<link", "src=", "@import"] {
        assert!(!page.contains(linked), "the page links {linked}");
    }
    for table in v.tables() {
        for row in &table.rows {
            for cell in row {
                assert!(page.contains(&escape(cell)), "{cell} is not on the page");
            }
        }
    }
    assert!(
        page.contains(&escape(FILES[0].1)),
        "the recorded file is named"
    );
}

#[test]
fn the_json_holds_every_number_of_the_tables_and_what_was_imported() {
    let v = run_with(60, 1, &Runner::new(1, false), simulated_chain).expect("it runs");
    let json = v.json();
    assert_eq!(json["seed"], 1);
    assert_eq!(json["roots_per_real_run"], 60);
    assert_eq!(json["rate_per_s"], RATE);
    assert_eq!(json["imported"]["entry"], "edge");
    assert_eq!(json["imported"]["spans"], v.imported.spans);
    let leaf = json["imported"]["services"]
        .as_array()
        .expect("services")
        .iter()
        .find(|s| s["name"] == "leaf")
        .expect("the leaf was imported");
    assert!(leaf["requests"].as_u64() > Some(0));
    assert_eq!(json["filled"]["traffic.deadline"], "500ms");
    assert_eq!(json["filled"]["services.*.inbound"], true);
    assert_eq!(json["filled"]["services.*.workers"], 10_000);

    let files = json["files"].as_array().expect("files");
    assert_eq!(files.len(), FILES.len());
    assert!(
        v.rows.iter().any(|r| r.phases.iter().any(Option::is_some)),
        "some root sent a second leaf attempt"
    );
    for ((file, row), (name, path, _)) in files.iter().zip(&v.rows).zip(FILES) {
        assert_eq!((&file["name"], &file["path"]), (&name.into(), &path.into()));
        assert_eq!(file["change"], row.change.as_str());
        let leaf = &file["policies"]["leaf"];
        assert!(leaf["explain"].is_string(), "{leaf}");
        assert_eq!(leaf["resolved"]["use_ambient_deadline"], true);
        for (side, numbers) in [("predicted", row.predicted), ("measured", row.measured)] {
            let n = &file[side];
            assert_eq!(n["answered_in_time"], numbers.in_time, "{path} {side}");
            assert_eq!(n["p99_ms"], ms(numbers.p99), "{path} {side}");
            assert_eq!(n["leaf_requests_per_root"], numbers.leaf_per_root);
        }
        let error = row.predicted.leaf_per_root - row.measured.leaf_per_root;
        assert_eq!(file["error"]["leaf_requests_per_root"], error);
        assert_eq!(file["predicted_roots"], row.predicted_roots);
        for (phases, side) in row.phases.iter().zip(["predicted", "measured"]) {
            let json = &file["second_attempt_roots"][side];
            match phases {
                Some(p) => {
                    assert_eq!(json["roots"], p.roots, "{path} {side}");
                    for (part, mean) in PARTS.iter().zip(p.means) {
                        assert_eq!(json["mean_ms"][part], mean, "{path} {side} {part}");
                    }
                }
                None => assert!(json.is_null(), "{path} {side}: {json}"),
            }
        }
        assert_eq!(file["drained"], true);
        assert_eq!(file["outcome"]["measured_roots"], row.outcome.roots);
        assert_eq!(
            file["outcome"]["leaf_requests_per_root"],
            row.predicted.leaf_per_root
        );
    }
    assert_eq!(files[0]["change"], "");
    assert_eq!(
        files[1]["change"],
        "policies.leaf.attempt_timeout: 1s → 50ms"
    );

    let effects = json["effects"].as_array().expect("effects");
    let names: Vec<&Value> = effects.iter().map(|e| &e["change"]).collect();
    assert_eq!(names, ["shorter attempt timeout", "hedging on"]);
    let (base, hedged) = (&v.rows[0], &v.rows[2]);
    let predicted = hedged.predicted.leaf_per_root - base.predicted.leaf_per_root;
    let measured = hedged.measured.leaf_per_root - base.measured.leaf_per_root;
    let effect = &effects[1];
    assert_eq!(effect["predicted"]["leaf_requests_per_root"], predicted);
    assert_eq!(effect["measured"]["leaf_requests_per_root"], measured);
    assert_eq!(
        effect["error"]["leaf_requests_per_root"],
        predicted - measured
    );

    // Written as `--json` writes it: the same JSON, pretty, one line at the end.
    let path =
        std::env::temp_dir().join(format!("rampart-sim-validate-{}.json", std::process::id()));
    v.write_json(&path).expect("written");
    let text = std::fs::read_to_string(&path).expect("the JSON file");
    std::fs::remove_file(&path).expect("cleaned up");
    let pretty = serde_json::to_string_pretty(&json).expect("formatted");
    assert_eq!(text, pretty + "\n");
}

#[test]
fn every_validate_policy_reads_the_ambient_deadline_as_the_outbound_layer_does() {
    for (_, name, text) in FILES {
        let file: Policies = toml::from_str(text).expect("the policy file parses");
        for policy in ["middle", "leaf"] {
            let config = file.resolved(policy).expect("the policy is there");
            assert_eq!(config.use_ambient_deadline, Some(true), "{name}: {policy}");
        }
    }
}

#[test]
fn filling_in_sets_the_deadline_every_services_inbound_layer_and_no_worker_limit() {
    let imported = "entry = \"a\"\n[services.a]\nworkers = 3\n[services.b]\nworkers = 1\n\
                    [traffic]\ndeadline = \"9s\"\n";
    let filled: toml::Table = toml::from_str(&fill(imported).expect("filled")).expect("toml");
    assert_eq!(filled["traffic"]["deadline"].as_str(), Some("500ms"));
    for service in ["a", "b"] {
        let s = &filled["services"][service];
        assert_eq!(s["inbound"].as_bool(), Some(true));
        assert_eq!(s["reserve"].as_str(), Some("5ms"));
        assert_eq!(s["reject_expired"].as_bool(), Some(true));
        assert_eq!(s["enforce"].as_bool(), Some(true));
        assert_eq!(s["workers"].as_integer(), Some(10_000));
    }
}
