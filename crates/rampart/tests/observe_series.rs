//! Which series a policy's metrics make (issue 24), read from the Prometheus exporter's text:
//! none before the first call, then one for each combination that happened and for no other
//! (no breaker transition from a state to itself, no reason never seen), labelled as
//! [`MetricLabels`] says. Each test makes the exporter its thread's recorder for its whole run
//! (the runtime is current-thread): a series is registered on its first use.
#![cfg(feature = "metrics")]

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use rampart::backoff::Backoff;
use rampart::observe::MetricLabels;
use rampart::{Breaker, Policy, PolicyBuilder};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failed")
    }
}

/// A Prometheus recorder, the thread's recorder until the guard is dropped.
fn prometheus() -> (
    &'static PrometheusRecorder,
    metrics::LocalRecorderGuard<'static>,
) {
    let recorder: &'static PrometheusRecorder =
        Box::leak(Box::new(PrometheusBuilder::new().build_recorder()));
    (recorder, metrics::set_default_local_recorder(recorder))
}

/// The series of an exposition (its lines that are not blank or comments), sorted, values
/// left out.
fn series(recorder: &PrometheusRecorder) -> Vec<String> {
    let text = recorder.handle().render();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.rsplit_once(' ').map_or(line, |(s, _)| s).to_owned())
        .collect();
    lines.sort();
    lines
}

/// The series of metric `name`, its labels only.
fn of(series: &[String], name: &str) -> Vec<String> {
    series
        .iter()
        .filter_map(|s| s.strip_prefix(name)?.strip_prefix('{'))
        .map(|labels| labels.trim_end_matches('}').to_owned())
        .collect()
}

/// A policy with a breaker and a budget that retries a flaky dependency.
fn full() -> PolicyBuilder {
    Policy::builder()
        .name("inventory")
        .max_attempts(3)
        .backoff(Backoff::constant(2 * MS))
        .breaker(Breaker::builder().build().expect("valid breaker"))
}

/// Fails every third attempt (counting across calls).
async fn flaky(policy: &Policy, calls: u32) {
    for call in 0..calls {
        let _ = policy
            .run(async |a| match (call + a.number()) % 3 {
                0 => Err(Fail),
                _ => Ok(()),
            })
            .await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_policy_has_no_series_before_its_first_call() {
    let (recorder, _guard) = prometheus();
    let policy = full().build().expect("valid policy");
    assert_eq!(series(recorder), Vec::<String>::new());
    drop(policy);
}

#[tokio::test(start_paused = true)]
async fn after_100_calls_only_the_combinations_that_happened_have_series() {
    let (recorder, _guard) = prometheus();
    let policy = full().build().expect("valid policy");
    flaky(&policy, 100).await;
    let series = series(recorder);
    // Summaries: 7 quantiles, a sum and a count per label set.
    let summary = |name: &str, labels: &str| {
        let mut lines: Vec<_> = ["0", "0.5", "0.9", "0.95", "0.99", "0.999", "1"]
            .iter()
            .map(|q| format!("{name}{{policy=\"inventory\",{labels},quantile=\"{q}\"}}"))
            .collect();
        lines.push(format!("{name}_count{{policy=\"inventory\",{labels}}}"));
        lines.push(format!("{name}_sum{{policy=\"inventory\",{labels}}}"));
        lines
    };
    let mut expected = vec![
        "rampart_attempts{policy=\"inventory\",outcome=\"ok\"}".to_owned(),
        "rampart_attempts{policy=\"inventory\",outcome=\"transient\"}".to_owned(),
        "rampart_breaker_state{policy=\"inventory\",state=\"closed\"}".to_owned(),
        "rampart_budget_tokens{policy=\"inventory\"}".to_owned(),
        "rampart_calls{policy=\"inventory\",stop_reason=\"succeeded\"}".to_owned(),
        "rampart_retries{policy=\"inventory\"}".to_owned(),
    ];
    expected.extend(summary("rampart_attempt_duration", "outcome=\"ok\""));
    expected.extend(summary("rampart_attempt_duration", "outcome=\"transient\""));
    expected.extend(summary(
        "rampart_call_duration",
        "stop_reason=\"succeeded\"",
    ));
    expected.sort();
    assert_eq!(series, expected);
    assert_eq!(series.len(), 33, "235 before issue 24, traffic or not");
}

#[tokio::test(start_paused = true)]
async fn no_breaker_transition_from_a_state_to_itself_has_a_series() {
    let (recorder, _guard) = prometheus();
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .break_duration(10 * MS)
        .probe_successes(1)
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    let policy = Policy::builder()
        .name("inventory")
        .max_attempts(1)
        .breaker(breaker)
        .build()
        .expect("valid policy");
    // Closed to open, then (after the break) half-open to closed, twice.
    for _ in 0..2 {
        let _ = policy.run(async |_a| Err::<(), _>(Fail)).await;
        tokio::time::sleep(20 * MS).await;
        let _ = policy.run(async |_a| Ok::<_, Fail>(())).await;
    }
    let transitions = of(&series(recorder), "rampart_breaker_transitions");
    assert_eq!(
        transitions,
        [
            "policy=\"inventory\",from=\"closed\",to=\"open\"",
            "policy=\"inventory\",from=\"half_open\",to=\"closed\"",
            "policy=\"inventory\",from=\"open\",to=\"half_open\"",
        ]
    );
    for t in &transitions {
        let from = t.split("from=").nth(1).and_then(|r| r.split(',').next());
        let to = t.split("to=").nth(1);
        assert_ne!(from, to, "{t}");
    }
    let states = of(&series(recorder), "rampart_breaker_state");
    assert_eq!(
        states,
        [
            "policy=\"inventory\",state=\"closed\"",
            "policy=\"inventory\",state=\"open\"",
        ],
        "only the states the gauge was set in (half-open lasted one probe, within a call)"
    );
}

#[tokio::test(start_paused = true)]
async fn metric_labels_name_the_policy_attribute_and_add_attributes_after_it() {
    let (recorder, _guard) = prometheus();
    let policy = Policy::builder()
        .name("inventory 10.0.0.7:8080")
        .max_attempts(1)
        .metric_labels(
            MetricLabels::new()
                .policy("inventory")
                .attribute("server.address", "10.0.0.7:8080"),
        )
        .build()
        .expect("valid policy");
    assert!(policy.run(async |_a| Ok::<_, Fail>(())).await.is_ok());
    assert_eq!(
        of(&series(recorder), "rampart_calls"),
        ["policy=\"inventory\",server_address=\"10.0.0.7:8080\",stop_reason=\"succeeded\""]
    );
    assert_eq!(
        policy.name(),
        "inventory 10.0.0.7:8080",
        "the name is unchanged"
    );
}

#[tokio::test(start_paused = true)]
async fn without_state_gauges_a_policy_reports_no_breaker_or_budget_gauge() {
    let (recorder, _guard) = prometheus();
    let policy = full()
        .metric_labels(MetricLabels::new().state_gauges(false))
        .build()
        .expect("valid policy");
    flaky(&policy, 10).await;
    let series = series(recorder);
    assert!(
        of(&series, "rampart_breaker_state").is_empty(),
        "{series:?}"
    );
    assert!(
        of(&series, "rampart_budget_tokens").is_empty(),
        "{series:?}"
    );
    assert!(!of(&series, "rampart_calls").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_recorder_installed_after_the_policy_was_built_gets_its_series() {
    let policy = full().build().expect("valid policy");
    let (recorder, _guard) = prometheus();
    flaky(&policy, 3).await;
    assert_eq!(
        of(&series(recorder), "rampart_calls"),
        ["policy=\"inventory\",stop_reason=\"succeeded\""]
    );
}
