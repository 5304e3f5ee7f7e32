//! The layers' settings as configuration (`rampart_http::config`, feature `serde`): files read
//! from TOML, JSON and YAML, valid and invalid files in tables (unknown keys, every duration
//! form, every problem at once under its key path), the round trip back to text, the settings
//! at work on the wire, and reloading on paused time.
//!
//! Longer than the ~600-line guide, as rampart's own `tests/config.rs` is for policies: one file
//! for the layers' configuration, read as a file's life from its text to a reload.
#![cfg(feature = "serde")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::Full;
use rampart::Policy;
use rampart_http::ReplayBody;
use rampart_http::config::{HttpConfig, InboundConfig, OutboundConfig};
use tower::ServiceExt;
use tower_layer::Layer;

fn read(text: &str) -> HttpConfig {
    toml::from_str(text).unwrap_or_else(|e| panic!("a valid file: {e}\n{text}"))
}

/// Every problem of checking `file`, one string each.
fn problems(file: &HttpConfig) -> Vec<String> {
    let error = file.check().expect_err("an invalid file");
    error.problems().iter().map(ToString::to_string).collect()
}

/// A file with every key of `[inbound]` and `[outbound]`, and a named policy.
const FULL: &str = r#"
[inbound]
name = "edge"
maximum = "30s"
default_timeout = "2s"
reserve = "20ms"
reject_expired = true
enforce = true
dry_run = false
deadline_header = "x-request-deadline-ms"
criticality_header = "x-request-criticality"
retry_header = "x-request-retry"

[outbound]
name = "clients"
max_attempts = 4
max_hosts = 64
replay_limit = 1024
quota = true
fail_on_retryable_status = true
metrics_by_host = false
deadline_header = "x-budget-ms"
criticality_header = "x-priority"
retry_header = "x-again"
breaker = { consecutive_failures = 3, break_duration = "10s" }
budget = { fraction = 0.2, min_per_sec = 5.0 }
hedge_marked = { quantile = 0.9, window = "1m" }

[outbound.policy]
total_timeout = "2s"
attempt_timeout = "500ms"
min_attempt_time = "20ms"
timeout_mode = { kind = "abandon", grace = "5ms" }
backoff = { kind = "constant", delay = "50ms" }
adaptive_attempt_timeout = { multiple = 3.0, quantile = 0.99 }

[outbound.hosts."reports.internal:80"]
total_timeout = "30s"
attempt_timeout = "none"

[outbound.hosts."api.example:443"]
backoff = { delay = "100ms" }

[outbound.host_quota]
"reports.internal:80" = false

[outbound.host_fail_on_retryable_status]
"api.example:443" = false

[defaults]
total_timeout = "1s"

[policies.ledger]
max_attempts = 2
"#;

#[test]
fn a_full_file_reads_every_key_and_checks() {
    let file = read(FULL);
    file.check().expect("a valid file");
    assert_eq!(file.inbound.reserve, Some(Duration::from_millis(20)));
    assert_eq!(
        file.inbound.deadline_header.as_ref().map(|h| h.as_str()),
        Some("x-request-deadline-ms")
    );
    assert_eq!(file.outbound.max_attempts, Some(4));
    assert_eq!(file.outbound.replay_limit, Some(1024));
    assert_eq!(file.outbound.hosts.len(), 2);
    assert_eq!(
        file.outbound.hosts["reports.internal:80"].attempt_timeout,
        Some(None)
    );
    assert_eq!(
        file.policies().get("ledger").expect("valid").max_attempts(),
        2
    );
    let layer = file.outbound.build().expect("a valid layer");
    assert_eq!(
        format!("{layer:?}"),
        r#"OutboundLayer { name: "clients", max_attempts: 4, max_hosts: 64, replay_limit: 1024, .. }"#
    );
}

#[test]
fn the_same_file_reads_the_same_from_toml_json_and_yaml() {
    let from_toml = read(FULL);
    let json = serde_json::to_string(&from_toml).expect("serializable");
    let from_json: HttpConfig = serde_json::from_str(&json).expect("the same file");
    assert_eq!(from_json, from_toml);
    let yaml = serde_norway::to_string(&from_toml).expect("serializable");
    let from_yaml: HttpConfig = serde_norway::from_str(&yaml).expect("the same file");
    assert_eq!(from_yaml, from_toml);

    let by_hand_toml = read(
        r#"
        [outbound]
        max_attempts = 2
        breaker = "none"
        hosts."api.example:443" = { attempt_timeout = "1.5s" }
        "#,
    );
    let by_hand_json: HttpConfig = serde_json::from_str(
        r#"{ "outbound": { "max_attempts": 2, "breaker": "none",
              "hosts": { "api.example:443": { "attempt_timeout": "1.5s" } } } }"#,
    )
    .expect("valid json");
    let by_hand_yaml: HttpConfig = serde_norway::from_str(
        "outbound:\n  max_attempts: 2\n  breaker: none\n  hosts:\n    \"api.example:443\":\n      attempt_timeout: 1.5s\n",
    )
    .expect("valid yaml");
    assert_eq!(by_hand_json, by_hand_toml);
    assert_eq!(by_hand_yaml, by_hand_toml);
    assert_eq!(by_hand_toml.outbound.breaker, Some(None));
}

#[test]
fn valid_files_check_and_build_with_every_duration_form() {
    let durations = [
        "7ns", "3us", "3µs", "250ms", "1.5s", "0.25s", ".5s", "2s", "1m", "1.5m", "1h",
    ];
    for duration in durations {
        let text = format!(
            r#"
            [inbound]
            maximum = "{duration}"
            default_timeout = "{duration}"
            reserve = "{duration}"

            [outbound.policy]
            total_timeout = "2h"
            attempt_timeout = "{duration}"
            "#
        );
        let file = read(&text);
        file.check().unwrap_or_else(|e| panic!("{duration}: {e}"));
        let layer = file
            .outbound
            .build()
            .unwrap_or_else(|e| panic!("{duration}: {e}"));
        drop(layer);
        assert_eq!(
            file.inbound.maximum,
            Some(rampart::config::parse_duration(duration).expect("a duration"))
        );
    }
    let valid = [
        "",
        "[inbound]\n",
        "[outbound]\n",
        "[outbound]\nbreaker = \"none\"\nbudget = \"none\"\n",
        "[outbound]\nmax_attempts = 1\n",
        "[outbound]\nhedge = { delay = \"50ms\", max_concurrent = 3 }\n",
        "[outbound]\nbreaker = { failure_ratio = 0.5, window = \"30s\", min_throughput = 20 }\n",
        "[outbound.policy]\ntotal_timeout = \"none\"\nattempt_timeout = \"none\"\n",
        "[outbound.policy]\ntimeout_mode = { kind = \"cooperative\" }\n",
        "[outbound.hosts.\"api:443\"]\nbackoff = { kind = \"none\" }\n",
        "[outbound.host_quota]\n\"api:443\" = true\n",
        "[inbound]\ndeadline_header = \"X-Deadline\"\n",
        "[policies.a]\nmax_attempts = 2\n",
    ];
    for text in valid {
        read(text)
            .check()
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
    }
}

#[test]
fn an_unknown_key_is_refused_with_its_path() {
    let cases = [
        ("[inboud]\n", "unknown field `inboud`"),
        ("[inbound]\nreserv = \"1s\"\n", "unknown field `reserv`"),
        (
            "[outbound]\nmax_atempts = 2\n",
            "unknown field `max_atempts`",
        ),
        (
            "[outbound.policy]\nattempt_timout = \"1s\"\n",
            "unknown field `attempt_timout`",
        ),
        (
            "[outbound.hosts.\"api:443\"]\ntotal_timout = \"1s\"\n",
            "unknown field `total_timout`",
        ),
        (
            "[outbound]\nbreaker = { consecutive = 3 }\n",
            "unknown field `consecutive`",
        ),
        (
            "[outbound]\nhedge = { delay = \"1s\", legs = 2 }\n",
            "unknown field `legs`",
        ),
    ];
    for (text, message) in cases {
        let error = toml::from_str::<HttpConfig>(text)
            .expect_err(text)
            .to_string();
        assert!(error.contains(message), "{text}: {error}");
    }
    // Where the key is, as each format crate reports it: TOML quotes the line, YAML names
    // the path.
    let text = "[outbound]\nhosts.\"api:443\" = { total_timout = \"1s\" }\n";
    let error = toml::from_str::<HttpConfig>(text)
        .expect_err("unknown key")
        .to_string();
    assert!(
        error.contains("2 | hosts.\"api:443\" = { total_timout = \"1s\" }"),
        "{error}"
    );
    let json = r#"{ "outbound": { "policy": { "total_timout": "1s" } } }"#;
    let error = serde_json::from_str::<HttpConfig>(json).expect_err("unknown key");
    assert!(
        error.to_string().contains("unknown field `total_timout`"),
        "{error}"
    );
    let yaml = "outbound:\n  hosts:\n    \"api:443\":\n      total_timout: 1s\n";
    let error = serde_norway::from_str::<HttpConfig>(yaml).expect_err("unknown key");
    assert!(
        error
            .to_string()
            .starts_with("outbound.hosts.api:443: unknown field `total_timout`"),
        "{error}"
    );
}

#[test]
fn a_malformed_value_is_refused_with_the_value() {
    let cases = [
        (
            "[inbound]\nreserve = \"20\"\n",
            r#"invalid duration "20": no unit"#,
        ),
        ("[inbound]\nmaximum = \"-1s\"\n", "must not be negative"),
        (
            "[outbound]\ndeadline_header = \"x deadline\"\n",
            r#"invalid header name "x deadline""#,
        ),
        (
            "[inbound]\nretry_header = \"\"\n",
            r#"invalid header name """#,
        ),
        (
            "[outbound]\nbreaker = \"off\"\n",
            r#"invalid value: string "off""#,
        ),
        ("[outbound]\nmax_attempts = -1\n", "invalid value"),
    ];
    for (text, message) in cases {
        let error = toml::from_str::<HttpConfig>(text)
            .expect_err(text)
            .to_string();
        assert!(error.contains(message), "{text}: {error}");
    }
}

#[test]
fn every_problem_of_the_file_is_reported_at_once_under_its_key_path() {
    let cases: [(&str, &[&str]); 6] = [
        (
            r#"
            [outbound]
            max_attempts = 0
            [outbound.hosts."api.example:443"]
            attempt_timeout = "0ns"
            "#,
            &[
                "outbound.max_attempts must be at least 1 (was 0)",
                "outbound.hosts.\"api.example:443\".attempt_timeout must be positive (was 0ns)",
            ],
        ),
        (
            // A problem of a setting a host inherits is named once, under `policy`.
            r#"
            [outbound.policy]
            attempt_timeout = "0ns"
            [outbound.hosts."a:80"]
            total_timeout = "1s"
            [outbound.hosts."b:80"]
            total_timeout = "0ns"
            [policies.ledger]
            max_attempts = 0
            "#,
            &[
                "outbound.policy.attempt_timeout must be positive (was 0ns)",
                "outbound.hosts.\"b:80\".total_timeout must be positive (was 0ns)",
                "policies.ledger.max_attempts must be at least 1 (was 0)",
            ],
        ),
        (
            // The layer's keys are not a policy's or a host's.
            r#"
            [outbound.policy]
            max_attempts = 2
            use_ambient_deadline = false
            [outbound.hosts."a:80"]
            breaker = "none"
            hedge = { delay = "10ms" }
            "#,
            &[
                "outbound.policy.max_attempts is the layer's, for every host: set it beside `policy`",
                "outbound.policy.use_ambient_deadline is always on in the outbound layer (its policies read the ambient deadline)",
                "outbound.hosts.\"a:80\".breaker is the layer's, for every host: set it beside `policy`",
                "outbound.hosts.\"a:80\".hedge is the layer's, for every host: set `hedge` or `hedge_marked` beside `policy`",
            ],
        ),
        (
            // Sections of the layer, each with its own problems, and the policy's besides.
            r#"
            [outbound]
            breaker = { consecutive_failures = 0, jitter = 2.0 }
            budget = { fraction = 2.0 }
            hedge = { delay = "10ms" }
            hedge_marked = { quantile = 0.9, max_concurrent = 9 }
            [outbound.policy]
            backoff = { kind = "constant", delay = "1s", factor = 2.0 }
            "#,
            &[
                "outbound.hedge_marked cannot be set with hedge (set one of them)",
                "outbound.breaker.consecutive_failures must be at least 1 (was 0)",
                "outbound.breaker.jitter must be in [0, 1) (was 2)",
                "outbound.budget.fraction must be between 0 and 1 (was 2)",
                "outbound.policy.backoff.factor does not apply to a constant backoff (was 2)",
                "outbound.hedge_marked.max_concurrent must be between 2 and 8 (was 9)",
            ],
        ),
        (
            // Two keys of one map that name the same host.
            r#"
            [outbound.hosts."API.example:80"]
            total_timeout = "1s"
            [outbound.hosts."api.example"]
            total_timeout = "2s"
            [outbound.host_quota]
            "a:80" = true
            "a" = false
            "#,
            &[
                "outbound.hosts.\"api.example\" names the same host as \"API.example:80\" (api.example:80)",
                "outbound.host_quota.\"a:80\" names the same host as \"a\" (a:80)",
            ],
        ),
        (
            // A host's own setting against one it inherits is the host's problem.
            r#"
            [outbound.policy]
            total_timeout = "1s"
            [outbound.hosts."a:80"]
            attempt_timeout = "2s"
            min_attempt_time = "1s"
            "#,
            &[
                "outbound.hosts.\"a:80\".min_attempt_time must be shorter than the total_timeout (was 1s, total_timeout 1s)",
            ],
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(problems(&read(text)), expected, "{text}");
    }
}

#[test]
fn a_file_written_back_is_the_file_read_and_builds_the_same_layer() {
    let file = read(FULL);
    let layer = file.outbound.build().expect("a valid layer");
    let text = toml::to_string(&file).expect("serializable");
    let again = read(&text);
    assert_eq!(again, file);
    assert_eq!(
        format!("{:?}", again.outbound.build().expect("a valid layer")),
        format!("{layer:?}")
    );
    // Written back in the file's own forms: durations as text, `"none"`, header names.
    for line in [
        "reserve = \"20ms\"",
        "deadline_header = \"x-budget-ms\"",
        "attempt_timeout = \"none\"",
        "[outbound.hosts.\"api.example:443\"",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    // A default file writes nothing; a file of one key writes that key.
    assert_eq!(
        toml::to_string(&HttpConfig::default()).expect("serializable"),
        ""
    );
    let one = read("[outbound]\nmax_attempts = 2\n");
    assert_eq!(
        toml::to_string(&one).expect("serializable"),
        "[outbound]\nmax_attempts = 2\n"
    );
}

/// An upstream that answers 503 to every request and keeps the headers of each.
fn failing_upstream(
    seen: Arc<Mutex<Vec<HeaderMap>>>,
) -> impl tower::Service<
    Request<ReplayBody<Full<Bytes>>>,
    Response = Response<Full<Bytes>>,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone {
    tower::service_fn(move |request: Request<ReplayBody<Full<Bytes>>>| {
        seen.lock().expect("seen").push(request.headers().clone());
        async move {
            Ok(Response::builder()
                .status(503)
                .body(Full::default())
                .expect("valid response"))
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_configured_layer_makes_its_attempts_and_writes_its_header_names() {
    let config: OutboundConfig = toml::from_str(
        r#"
        max_attempts = 2
        deadline_header = "x-budget-ms"
        retry_header = "x-again"
        breaker = "none"
        policy = { total_timeout = "2s", backoff = { kind = "constant", delay = "10ms", jitter = "none" } }
        "#,
    )
    .expect("valid");
    let seen = Arc::default();
    let client = config
        .build()
        .expect("valid")
        .layer(failing_upstream(Arc::clone(&seen)));
    let request = Request::get("http://prices.test/quote")
        .body(Full::default())
        .expect("valid request");
    let response = client.oneshot(request).await.expect("the last response");
    assert_eq!(response.status(), 503);
    let seen = seen.lock().expect("seen");
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|h| h.contains_key("x-budget-ms") && !h.contains_key("x-deadline-ms"))
    );
    assert!(!seen[0].contains_key("x-again") && seen[1].contains_key("x-again"));
}

#[tokio::test(start_paused = true)]
async fn a_host_section_bounds_that_host_alone() {
    let config: OutboundConfig = toml::from_str(
        r#"
        max_attempts = 1
        policy = { total_timeout = "2s" }
        hosts."slow.test:80" = { total_timeout = "30s" }
        "#,
    )
    .expect("valid");
    let seen = Arc::default();
    let client = config
        .build()
        .expect("valid")
        .layer(failing_upstream(Arc::clone(&seen)));
    let mut deadlines = Vec::new();
    for uri in ["http://fast.test/", "http://slow.test/"] {
        let request = Request::get(uri)
            .body(Full::default())
            .expect("valid request");
        client.clone().oneshot(request).await.expect("a response");
        let seen = seen.lock().expect("seen");
        let last = seen.last().expect("a request");
        deadlines.push(last["x-deadline-ms"].to_str().expect("ascii").to_owned());
    }
    assert_eq!(deadlines, ["2000", "10000"]); // the slow host's attempt timeout, rampart's 10s
}

#[test]
fn the_inbound_section_applies_to_the_layer_given() {
    let config: InboundConfig = toml::from_str(
        r#"
        maximum = "30s"
        reserve = "20ms"
        reject_expired = true
        deadline_header = "x-budget-ms"
        "#,
    )
    .expect("valid");
    let layer = config.apply(rampart_http::InboundLayer::new());
    let debug = format!("{layer:?}");
    for part in [
        "deadline: \"x-budget-ms\"",
        "maximum: Some(30s)",
        "reserve: 20ms",
        "reject_expired: true",
        "enforce: false",
    ] {
        assert!(debug.contains(part), "{part} in {debug}");
    }
}

/// Runs `policy` on an operation that always fails, and returns the attempts it made.
async fn attempts_of(policy: &Policy) -> u32 {
    let attempts = AtomicU32::new(0);
    let outcome = policy
        .run(async |_attempt| {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(std::io::Error::other("unavailable"))
        })
        .await;
    assert!(outcome.is_err());
    attempts.load(Ordering::SeqCst)
}

#[tokio::test(start_paused = true)]
async fn a_reload_applies_the_live_settings_and_names_a_changed_header_for_a_restart() {
    let file = read(
        r#"
        [outbound]
        deadline_header = "x-deadline-ms"

        [policies.inventory]
        max_attempts = 2
        backoff = { kind = "none" }
        budget = "none"
        "#,
    );
    let outbound = file.outbound.build().expect("valid");
    let policies: BTreeMap<String, Policy> = file.policies().build().expect("valid");
    assert_eq!(attempts_of(&policies["inventory"]).await, 2);

    let next = read(
        r#"
        [outbound]
        max_attempts = 4
        deadline_header = "x-budget-ms"

        [policies.inventory]
        max_attempts = 3
        backoff = { kind = "none" }
        budget = "none"
        "#,
    );
    let reloaded = file
        .reload(&next, &outbound, &policies)
        .expect("a valid file");
    assert_eq!(
        reloaded.applied,
        ["outbound.max_attempts", "policies.inventory.max_attempts"]
    );
    assert_eq!(reloaded.restart, ["outbound.deadline_header"]);
    // The next call, on the same policy and the same layer, makes the new number of attempts.
    assert_eq!(attempts_of(&policies["inventory"]).await, 3);
    assert_eq!(outbound.settings().max_attempts, 4);

    // The layers' fixed settings and a policy's each need a restart, by key path; a host's
    // new timeout is applied.
    let later = read(
        r#"
        [inbound]
        reserve = "10ms"

        [outbound]
        max_attempts = 1
        deadline_header = "x-budget-ms"
        hosts."api:443" = { total_timeout = "1s", adaptive_attempt_timeout = { multiple = 3.0 } }

        [policies.inventory]
        max_attempts = 3
        backoff = { kind = "none" }
        budget = { fraction = 0.5 }
        "#,
    );
    let reloaded = next
        .reload(&later, &outbound, &policies)
        .expect("a valid file");
    assert_eq!(
        reloaded.applied,
        ["outbound.hosts.\"api:443\".total_timeout"]
    );
    assert_eq!(
        reloaded.restart,
        [
            "inbound.reserve",
            "outbound.hosts.\"api:443\".adaptive_attempt_timeout",
            "outbound.max_attempts",
            "policies.inventory.budget"
        ]
    );
    let settings = outbound.settings();
    assert_eq!(settings.max_attempts, 4, "retries are not stopped live");
    assert_eq!(
        settings.hosts["api:443"].total_timeout,
        Some(Duration::from_secs(1))
    );
}

#[tokio::test(start_paused = true)]
async fn a_reload_of_a_changed_outbound_attempt_timeout_applies_it_live() {
    let file = read(
        r#"
        [outbound]
        max_attempts = 1

        [outbound.policy]
        total_timeout = "2s"
        attempt_timeout = "500ms"

        [outbound.hosts."slow.test:80"]
        attempt_timeout = "1s"
        "#,
    );
    let outbound = file.outbound.build().expect("valid");
    let seen = Arc::default();
    let client = outbound.layer(failing_upstream(Arc::clone(&seen)));
    let deadline = async |uri: &str| {
        let request = Request::get(uri)
            .body(Full::default())
            .expect("valid request");
        client.clone().oneshot(request).await.expect("a response");
        let seen = seen.lock().expect("seen");
        let last = seen.last().expect("a request");
        last["x-deadline-ms"].to_str().expect("ascii").to_owned()
    };
    assert_eq!(deadline("http://fast.test/").await, "500");
    assert_eq!(deadline("http://slow.test/").await, "1000");

    let next = read(
        &toml::to_string(&file)
            .expect("serializable")
            .replace("500ms", "250ms"),
    );
    let policies = BTreeMap::<String, Policy>::new();
    let reloaded = file
        .reload(&next, &outbound, &policies)
        .expect("a valid file");
    assert_eq!(reloaded.applied, ["outbound.policy.attempt_timeout"]);
    assert!(reloaded.restart.is_empty(), "{:?}", reloaded.restart);
    // The host already in the table and one first seen now take the new timeout; the host
    // with its own keeps it.
    assert_eq!(deadline("http://fast.test/").await, "250");
    assert_eq!(deadline("http://new.test/").await, "250");
    assert_eq!(deadline("http://slow.test/").await, "1000");
}

#[tokio::test(start_paused = true)]
async fn a_reload_of_an_invalid_file_changes_nothing_and_names_every_problem() {
    let file = read("[policies.inventory]\nmax_attempts = 2\nbackoff = { kind = \"none\" }\n");
    let outbound = file.outbound.build().expect("valid");
    let policies = file.policies().build().expect("valid");
    let next = read(
        r#"
        [outbound]
        max_attempts = 0

        [outbound.policy]
        attempt_timeout = "1s"

        [policies.inventory]
        max_attempts = 5
        attempt_timeout = "0ns"
        "#,
    );
    let error = file
        .reload(&next, &outbound, &policies)
        .expect_err("an invalid file");
    assert_eq!(
        error.to_string(),
        "outbound.max_attempts must be at least 1 (was 0); \
         policies.inventory.attempt_timeout must be positive (was 0ns)"
    );
    assert_eq!(policies["inventory"].max_attempts(), 2);
    let settings = outbound.settings();
    assert_eq!(settings.max_attempts, 3);
    assert_eq!(
        settings.policy.attempt_timeout,
        Some(Duration::from_secs(10))
    );
}

#[tokio::test(start_paused = true)]
async fn a_reload_changes_the_breakers_thresholds_live_and_names_a_new_mode_for_a_restart() {
    let with = |breaker: &str| read(&format!("[outbound]\nbreaker = {breaker}\n"));
    let file = with("{ consecutive_failures = 5 }");
    let outbound = file.outbound.build().expect("valid");
    let seen = Arc::default();
    let client = outbound.layer(failing_upstream(Arc::clone(&seen)));
    let request = Request::get("http://prices.test/")
        .body(Full::default())
        .expect("valid request");
    client.oneshot(request).await.expect("a response");
    let breaker = outbound
        .breaker("prices.test:80")
        .expect("a host in the table");

    let next = with("{ consecutive_failures = 3, break_duration = \"5s\" }");
    let policies = BTreeMap::<String, Policy>::new();
    let reloaded = file
        .reload(&next, &outbound, &policies)
        .expect("a valid file");
    assert_eq!(reloaded.applied, ["outbound.breaker"]);
    assert!(reloaded.restart.is_empty(), "{:?}", reloaded.restart);
    let wanted = rampart::Breaker::builder()
        .consecutive_failures(3)
        .break_duration(Duration::from_secs(5));
    assert_eq!(outbound.settings().breaker, Some(wanted));
    // The host's breaker took it, its count kept: the request's three failed attempts and
    // one more failure open it, where five would have been needed before.
    let now = rampart::clock::Instant::now();
    let permit = breaker.try_acquire(now).expect("closed");
    let opened = permit.record(rampart::breaker::Evidence::Failure, Duration::ZERO, now);
    assert!(opened.is_some());

    for changed in [
        "{ failure_ratio = 0.5, window = \"10s\", min_throughput = 20 }",
        "\"none\"",
    ] {
        let reloaded = next
            .reload(&with(changed), &outbound, &policies)
            .expect("a valid file");
        assert!(reloaded.applied.is_empty(), "{:?}", reloaded.applied);
        assert_eq!(reloaded.restart, ["outbound.breaker"], "{changed}");
    }
}
