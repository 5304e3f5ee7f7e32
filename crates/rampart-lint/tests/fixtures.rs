//! Runs every rule fixture in `tests/fixtures/` and compares the findings
//! with the `// expect: CODE` markers, line by line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rampart_lint::{Rule, lint_source};

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read_fixture(name: &str) -> String {
    let path = fixture_path(name);
    match std::fs::read_to_string(&path) {
        Ok(source) => source,
        Err(error) => panic!("cannot read {}: {error}", path.display()),
    }
}

/// The `(line, code)` pairs marked with `// expect: R001, R002` comments.
fn expected(source: &str) -> BTreeSet<(usize, String)> {
    let mut pairs = BTreeSet::new();
    for (index, line) in source.lines().enumerate() {
        let Some((_, codes)) = line.split_once("// expect:") else {
            continue;
        };
        for code in codes
            .split(',')
            .map(str::trim)
            .filter(|code| !code.is_empty())
        {
            assert!(
                Rule::from_code(code).is_some(),
                "line {}: unknown code `{code}` in expectation",
                index + 1
            );
            pairs.insert((index + 1, code.to_owned()));
        }
    }
    pairs
}

/// The `(line, code)` pairs the linter reports.
fn reported(name: &str, source: &str) -> BTreeSet<(usize, String)> {
    match lint_source(name, source) {
        Ok(findings) => findings
            .into_iter()
            .map(|finding| (finding.line, finding.rule.code().to_owned()))
            .collect(),
        Err(error) => panic!("fixture {name} does not parse: {error}"),
    }
}

fn assert_fixture(name: &str, rule: Rule) {
    let source = read_fixture(name);
    let expected = expected(&source);
    assert!(
        expected.iter().any(|(_, code)| code == rule.code()),
        "fixture {name} expects no {rule} finding at all"
    );
    let reported = reported(name, &source);
    let missing: Vec<_> = expected.difference(&reported).collect();
    let unexpected: Vec<_> = reported.difference(&expected).collect();
    assert!(
        missing.is_empty() && unexpected.is_empty(),
        "{name}: missing {missing:?}, unexpected {unexpected:?}"
    );
}

#[test]
fn callbacks_ignoring_their_attempt_are_reported() {
    assert_fixture("r001.rs", Rule::R001);
}

#[test]
fn caller_and_fresh_tokens_inside_callbacks_are_reported() {
    assert_fixture("r002.rs", Rule::R002);
}

#[test]
fn builder_values_that_build_rejects_are_reported() {
    assert_fixture("r003.rs", Rule::R003);
}

#[test]
fn attempt_timeouts_longer_than_the_deadline_are_reported() {
    assert_fixture("r004.rs", Rule::R004);
}

#[test]
fn components_built_in_loops_and_callbacks_are_reported() {
    assert_fixture("r005.rs", Rule::R005);
}

#[test]
fn the_documented_usage_is_clean() {
    let source = read_fixture("clean.rs");
    assert!(expected(&source).is_empty());
    assert_eq!(reported("clean.rs", &source), BTreeSet::new());
}

#[test]
fn findings_carry_the_documented_messages() {
    let source = read_fixture("r004.rs");
    let findings = match lint_source("r004.rs", &source) {
        Ok(findings) => findings,
        Err(error) => panic!("{error}"),
    };
    let first = findings.iter().find(|finding| finding.rule == Rule::R004);
    assert_eq!(
        first.map(|finding| finding.message.as_str()),
        Some(
            "attempt timeout 10s is longer than the deadline 5s; every attempt will be cut to the deadline"
        )
    );

    let source = read_fixture("r001.rs");
    let findings = match lint_source("r001.rs", &source) {
        Ok(findings) => findings,
        Err(error) => panic!("{error}"),
    };
    let named = findings
        .iter()
        .find(|finding| finding.message.contains("`attempt`"));
    assert_eq!(
        named.map(|finding| (finding.message.as_str(), finding.help.as_str())),
        Some((
            "callback never uses its attempt handle `attempt`; the ceiling drops the attempt's future (the default abandon mode) but cannot stop work that outlives it (a spawned task, a thread) or a cooperative-mode attempt",
            "pass `attempt.token()` (or `attempt`) to the work so the ceiling can cancel it"
        ))
    );
    let blocking = findings
        .iter()
        .find(|finding| finding.message.contains("`a`"));
    assert_eq!(
        blocking.map(|finding| finding.message.as_str()),
        Some(
            "callback never uses its attempt handle `a`; a blocking attempt is never abandoned, so its ceiling cannot stop this work"
        )
    );
}

#[test]
fn weird_input_is_an_error_or_quiet_never_a_panic() {
    for source in [
        "",
        "fn",
        "\u{feff}fn main() {}",
        "fn main() { policy.run(); policy.with_token().run(|x| x); }",
        "fn main() { Duration::from_secs(99999999999999999999999999999999999999999) }",
        "fn main() { p.deadline(Duration::from_secs_f64(1e400)).attempt_timeout(Duration::MAX); }",
        "macro_rules! m { ($x:expr) => { policy.run(|_| $x) }; }",
        "fn main() { m!(a b c); vec![Policy::none(); 3]; }",
        "fn main() { let s = \"ünïcödé\"; policy.run_blocking(|_| s); }",
    ] {
        let _ = lint_source("weird.rs", source);
    }
    assert!(lint_source("broken.rs", "fn main( {").is_err());
}
