//! `validate --quick`: the loopback chain traced on real sockets, its spans imported, the
//! what-if of both changes, each change run for real. Real time, so only the structure is
//! pinned (the imported graph, the tables' rows and columns, every number finite), never a
//! value.

use rampart_sim::scenario::Runner;
use rampart_sim::spans::SpanKind;
use rampart_sim::validate::{self, FILES, QUICK_ROOTS};

/// Every cell of a table's number columns, as a number: `98.3%`, `+2.3 pts`, `-3.6`.
fn number(cell: &str) -> f64 {
    let digits = cell.trim_end_matches(" pts").trim_end_matches('%');
    digits
        .parse()
        .unwrap_or_else(|e| panic!("{cell:?} is not a number: {e}"))
}

#[test]
fn quick_validation_prints_predicted_against_measured_for_each_policy_file_in_finite_numbers() {
    let result = validate::run(QUICK_ROOTS, 1, &Runner::new(2, false)).expect("the validation");
    println!("{}", result.text());

    // The chain's spans: a SERVER span per request at each service (a request the middle
    // refuses as expired on a loaded machine goes no further), CLIENT spans under them.
    let servers = result
        .spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server)
        .count();
    assert!(servers >= 2 * QUICK_ROOTS, "{servers} SERVER spans");
    assert!(result.spans.iter().any(|s| s.kind == SpanKind::Client));
    // The importer found the chain.
    let g = &result.imported;
    assert_eq!(g.entry, "edge");
    assert_eq!(g.traffic.roots, QUICK_ROOTS as u64);
    let calls = |s: &str| -> Vec<String> {
        let service = g.service(s).expect("imported");
        service.calls.iter().map(|c| c.to.clone()).collect()
    };
    assert_eq!(calls("edge"), ["middle"]);
    assert_eq!(calls("middle"), ["leaf"]);
    assert!(calls("leaf").is_empty());

    // One row per policy file, the baseline first; each change named by its setting.
    let files: Vec<&str> = result.rows.iter().map(|r| r.file).collect();
    assert_eq!(files, FILES.map(|f| f.1));
    assert!(result.rows[0].change.is_empty());
    assert_eq!(
        result.rows[1].change,
        "policies.leaf.attempt_timeout: 1s → 50ms"
    );
    assert!(result.rows[2].change.starts_with("policies.leaf.hedge:"));
    for row in &result.rows {
        let names: Vec<&str> = row.config.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["leaf", "middle"], "each policy's configuration");
    }

    let [side, effect, phases] = result.tables();
    assert_eq!(side.rows.len(), 3, "baseline and both changes");
    assert_eq!(effect.rows.len(), 2, "both changes against the baseline");
    for table in [&side, &effect] {
        assert_eq!(table.columns.len(), 10);
        for row in &table.rows {
            assert_eq!(row.len(), table.columns.len());
            for cell in &row[1..] {
                assert!(number(cell).is_finite(), "{cell}");
            }
        }
    }
    // Where the roots that sent a second leaf attempt spent their time: per file with any,
    // a row of roots and one per part, a number or a dash where one side had none.
    assert_eq!(phases.columns.len(), 5);
    assert_eq!(phases.rows.len() % (1 + validate::phases::PARTS.len()), 0);
    for row in &phases.rows {
        assert_eq!(row.len(), 5);
        for cell in row[2..].iter().filter(|c| !c.is_empty() && *c != "–") {
            assert!(number(cell).is_finite(), "{cell}");
        }
    }
}
