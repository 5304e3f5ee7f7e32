//! Runs every rule fixture in `tests/fixtures/` and compares the findings
//! with the `// expect: CODE` markers, line by line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rampart_lint::{Finding, Rule, lint_source};

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

/// Every finding in fixture `name`.
fn lint_fixture(name: &str) -> Vec<Finding> {
    match lint_source(name, &read_fixture(name)) {
        Ok(findings) => findings,
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
fn attempt_timeouts_longer_than_the_total_timeout_are_reported() {
    assert_fixture("r004.rs", Rule::R004);
}

#[test]
fn components_built_in_loops_and_callbacks_are_reported() {
    assert_fixture("r005.rs", Rule::R005);
}

#[test]
fn policies_built_per_request_and_run_in_a_handler_are_reported() {
    assert_fixture("r006.rs", Rule::R006);
}

#[test]
fn plain_spawns_of_ambient_work_in_a_request_scope_are_reported() {
    assert_fixture("r007.rs", Rule::R007);
}

#[test]
fn requests_sent_through_the_raw_reqwest_client_are_reported() {
    assert_fixture("r008.rs", Rule::R008);
}

#[test]
fn the_raw_reqwest_client_is_told_what_it_skips_and_how_to_send_under_the_policy() {
    assert_eq!(
        first_finding("r008.rs", Rule::R008),
        Some((
            "`bypass_policy()` is the reqwest client underneath rampart: what is sent through it has no deadline or attempt timeout, no retry, breaker, budget or quota, and carries no deadline, criticality or retry mark to the next service".to_owned(),
            "send through the rampart client's own `get`, `post`, ..., `request` (or give the built request to its `execute`); keep `bypass_policy()` for a request that must not be governed".to_owned(),
        ))
    );
}

#[test]
fn the_documented_usage_is_clean() {
    let source = read_fixture("clean.rs");
    assert!(expected(&source).is_empty());
    assert_eq!(reported("clean.rs", &source), BTreeSet::new());
}

#[test]
fn findings_carry_the_documented_messages() {
    let findings = lint_fixture("r004.rs");
    let first = findings.iter().find(|finding| finding.rule == Rule::R004);
    assert_eq!(
        first.map(|finding| finding.message.as_str()),
        Some(
            "attempt timeout 10s is longer than the total timeout 5s; every attempt will be cut to the deadline"
        )
    );

    let findings = lint_fixture("r001.rs");
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

/// The first finding of `rule` in fixture `name`, as (message, help).
fn first_finding(name: &str, rule: Rule) -> Option<(String, String)> {
    lint_fixture(name)
        .into_iter()
        .find(|finding| finding.rule == rule)
        .map(|finding| (finding.message, finding.help))
}

#[test]
fn per_request_policies_are_told_what_state_they_lose_and_where_to_keep_it() {
    assert_eq!(
        first_finding("r006.rs", Rule::R006),
        Some((
            "`Policy` built per request and run in the handler: breaker, retry budget and latency estimate are per policy, so this one's breaker never opens and its budget is never spent".to_owned(),
            "build it once, at startup, and keep it in the handler's state, a `OnceLock` or a struct field (clones share state)".to_owned(),
        ))
    );
}

#[test]
fn plain_spawns_are_told_the_ambient_context_stays_behind_and_which_helper_carries_it() {
    assert_eq!(
        first_finding("r007.rs", Rule::R007),
        Some((
            "`tokio::spawn` does not carry the ambient deadline and criticality into the task: what reads them there (a policy with `use_ambient_deadline` / `use_ambient_criticality`, `Deadline::current()`) sees none".to_owned(),
            "spawn it with `rampart::Ambient::spawn` (or wrap the future in `rampart::Ambient::bind`), which carries them into the task".to_owned(),
        ))
    );
}

#[test]
fn weird_input_is_an_error_or_quiet_never_a_panic() {
    for source in [
        "",
        "fn",
        "\u{feff}fn main() {}",
        "fn main() { policy.run(); policy.call().token().run(|x| x); }",
        "fn main() { Duration::from_secs(99999999999999999999999999999999999999999) }",
        "fn main() { p.total_timeout(Duration::from_secs_f64(1e400)).attempt_timeout(Duration::MAX); }",
        "macro_rules! m { ($x:expr) => { policy.run(|_| $x) }; }",
        "fn main() { m!(a b c); vec![Policy::none(); 3]; }",
        "fn main() { let s = \"ünïcödé\"; policy.call().run_blocking(|_| s); }",
    ] {
        let _ = lint_source("weird.rs", source);
    }
    assert!(lint_source("broken.rs", "fn main( {").is_err());
}
