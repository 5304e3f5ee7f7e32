//! Policies as configuration (`rampart::config`, feature `serde`): reading a file of named
//! policies, inheriting `[defaults]`, reporting every problem under its key path, durations
//! as text, the round trip back to text, the built policies at work, and reloading. One file
//! for the one concern, a little past the size guide: it reads as the life of a file, from
//! its text to a reload.
#![cfg(feature = "serde")]

#[path = "support/cases.rs"]
mod cases;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use rampart::config::{
    BackoffKind, Policies, PolicyConfig, TimeoutModeKind, format_duration, parse_duration,
};
use rampart::{Error, Policy, TimeoutMode};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn read(text: &str) -> Policies {
    toml::from_str(text).expect("a valid file")
}

/// Every problem of building `file`, one string each.
fn problems(file: &Policies) -> Vec<String> {
    let error = file.build().expect_err("an invalid file");
    error.problems().iter().map(ToString::to_string).collect()
}

const FULL: &str = r#"
[defaults]
max_attempts = 3
total_timeout = "2s"
attempt_timeout = "500ms"
min_attempt_time = "50ms"
use_ambient_deadline = true
timeout_mode = { kind = "abandon", grace = "10ms" }

[defaults.backoff]
kind = "exponential"
base = "50ms"
factor = 3.0
max = "1s"
jitter = "equal"
throttled_base = "2s"
seed = 7

[defaults.budget]
fraction = 0.2
min_per_sec = 5.0

[defaults.breaker]
consecutive_failures = 4
slow_call = "1s"
break_duration = "10s"
max_break = "1m"
jitter = 0.0
seed = 1
half_open_probes = 2
probe_successes = 3
probe_timeout = "5s"
dry_run = false

[policies.prices]
attempt_timeout = "200ms"
hedge = { delay = "50ms", max_concurrent = 3 }

[policies.search]
max_attempts = 2
use_ambient_criticality = true
timeout_mode = { kind = "cooperative" }
breaker = { failure_ratio = 0.5, window = "30s", min_throughput = 20 }
hedge = { quantile = 0.9, window = "1m", min_samples = 10, floor = "5ms" }
adaptive_attempt_timeout = { multiple = 4.0, quantile = 0.99, window = "2m", min_samples = 50, floor = "20ms" }

[policies.payments]
max_attempts = 1
total_timeout = "5s"
attempt_timeout = "none"
budget = "none"
breaker = "none"

[policies.reports]
backoff = { kind = "constant", delay = "250ms" }
"#;

#[test]
fn a_full_file_builds_every_named_policy_with_its_settings() {
    let policies = read(FULL).build().expect("a valid file");
    let names: Vec<_> = policies.keys().map(String::as_str).collect();
    assert_eq!(names, ["payments", "prices", "reports", "search"]);
    let explained: Vec<_> = policies.values().map(Policy::explain).collect();
    assert_eq!(
        explained,
        [
            "payments: 1 attempt, total 5s, no attempt timeout (abandon after 10ms grace)",
            "prices: 3 attempts, total 2s, attempt 200ms (abandon after 10ms grace), \
             exponential 50ms x3 max 1s equal jitter, budget 20%, breaker: open after 4 \
             consecutive failures, successes taking 1s or more count as failures, break 10s \
             doubling to 1m, hedge after 50ms, 3 legs",
            "reports: 3 attempts, total 2s, attempt 500ms (abandon after 10ms grace), \
             constant 250ms, budget 20%, breaker: open after 4 consecutive failures, successes \
             taking 1s or more count as failures, break 10s doubling to 1m",
            "search: 2 attempts, total 2s, attempt 500ms (cooperative), exponential 50ms x3 \
             max 1s equal jitter, budget 20%, breaker: open at 50% failures over 30s (at least \
             20 calls), successes taking 1s or more count as failures, break 10s doubling to 1m, \
             hedge at p90 over 60s, 2 legs",
        ]
    );
    let payments = &policies["payments"];
    assert!(payments.budget().is_none() && payments.breaker().is_none());
    assert_eq!(payments.settings().min_attempt_time, ms(50));
}

#[test]
fn json_reads_the_same_file_as_toml() {
    let from_toml = read(FULL);
    let json = serde_json::to_string(&from_toml).expect("serializable");
    let from_json: Policies = serde_json::from_str(&json).expect("the same file");
    assert_eq!(from_json, from_toml);
    let hand_written: Policies = serde_json::from_str(
        r#"{ "defaults": { "total_timeout": "1.5s" },
             "policies": { "prices": { "attempt_timeout": "none", "breaker": "none" } } }"#,
    )
    .expect("valid json");
    let prices = hand_written.get("prices").expect("valid");
    assert_eq!(prices.total_timeout(), Some(ms(1500)));
    assert_eq!(prices.attempt_timeout(), None);
}

#[test]
fn yaml_reads_the_same_file_as_toml_and_json() {
    let from_toml = read(FULL);
    let yaml = serde_norway::to_string(&from_toml).expect("serializable");
    let from_yaml: Policies = serde_norway::from_str(&yaml).expect("the same file");
    assert_eq!(from_yaml, from_toml);
    let hand_written: Policies = serde_norway::from_str(
        "defaults:\n  total_timeout: 1.5s\n  backoff: { kind: constant, delay: 250ms }\n\
         policies:\n  prices:\n    attempt_timeout: none\n    breaker: none\n",
    )
    .expect("valid yaml");
    let from_json: Policies = serde_json::from_str(
        r#"{ "defaults": { "total_timeout": "1.5s", "backoff": { "kind": "constant", "delay": "250ms" } },
             "policies": { "prices": { "attempt_timeout": "none", "breaker": "none" } } }"#,
    )
    .expect("valid json");
    assert_eq!(hand_written, from_json);
    let prices = hand_written.get("prices").expect("valid");
    assert_eq!(prices.total_timeout(), Some(ms(1500)));
    assert_eq!(prices.attempt_timeout(), None);
    let error = serde_norway::from_str::<Policies>("policies:\n  a:\n    total_timout: 1s\n")
        .expect_err("unknown key");
    assert!(
        error.to_string().contains("unknown field `total_timout`"),
        "{error}"
    );
}

#[test]
fn a_policy_inherits_what_it_leaves_out_and_keeps_what_it_sets() {
    let file = read(
        r#"
        [defaults]
        max_attempts = 4
        total_timeout = "3s"
        backoff = { base = "20ms", max = "2s" }
        breaker = { consecutive_failures = 3, break_duration = "5s", max_break = "5s" }

        [policies.a]

        [policies.b]
        max_attempts = 2
        backoff = { max = "500ms" }
        breaker = { break_duration = "1s" }
        "#,
    );
    let a = file.resolved("a").expect("in the file");
    assert_eq!(a, file.defaults);
    let b = file.resolved("b").expect("in the file");
    assert_eq!(b.max_attempts, Some(2));
    assert_eq!(b.total_timeout, Some(Some(Duration::from_secs(3))));
    let backoff = b.backoff.expect("inherited");
    assert_eq!((backoff.base, backoff.max), (Some(ms(20)), Some(ms(500))));
    let breaker = b.breaker.flatten().expect("inherited");
    assert_eq!(breaker.consecutive_failures, Some(3));
    assert_eq!(breaker.break_duration, Some(ms(1000)));
    assert_eq!(breaker.max_break, Some(ms(5000)));

    let built = file.build().expect("valid");
    assert_eq!(built["a"].max_attempts(), 4);
    assert_eq!(built["b"].max_attempts(), 2);
    assert_eq!(built["b"].settings().backoff.max_delay(), ms(500));
    assert!(built["b"].explain().contains("break 1s doubling to 5s"));
    // Each policy has a breaker of its own.
    let (a, b) = (built["a"].breaker(), built["b"].breaker());
    assert!(a.is_some() && b.is_some());
}

#[test]
fn a_section_naming_another_mode_drops_the_defaults_keys_of_the_mode_it_leaves() {
    let file = read(
        r#"
        [defaults]
        backoff = { kind = "exponential", base = "20ms", factor = 3.0, max = "2s" }
        breaker = { consecutive_failures = 3, break_duration = "5s" }
        hedge = { quantile = 0.9, max_concurrent = 3 }
        timeout_mode = { grace = "10ms" }

        [policies.a]
        backoff = { kind = "constant", delay = "100ms" }
        breaker = { failure_ratio = 0.5, window = "10s", min_throughput = 5 }
        hedge = { delay = "30ms" }
        timeout_mode = { kind = "cooperative" }
        "#,
    );
    let a = file.resolved("a").expect("in the file");
    let backoff = a.backoff.clone().expect("set");
    assert_eq!(backoff.kind, Some(BackoffKind::Constant));
    assert_eq!(
        (backoff.base, backoff.factor, backoff.max),
        (None, None, None)
    );
    let breaker = a.breaker.clone().flatten().expect("set");
    assert_eq!(breaker.consecutive_failures, None);
    assert_eq!(breaker.break_duration, Some(Duration::from_secs(5)));
    let hedge = a.hedge.clone().flatten().expect("set");
    assert_eq!((hedge.quantile, hedge.max_concurrent), (None, Some(3)));
    let mode = a.timeout_mode.expect("set");
    assert_eq!(
        (mode.kind, mode.grace),
        (Some(TimeoutModeKind::Cooperative), None)
    );
    assert_eq!(
        file.get("a").expect("valid").explain(),
        "a: 3 attempts, total 30s, attempt 10s (cooperative), constant 100ms, budget 20%, \
         breaker: open at 50% failures over 10s (at least 5 calls), break 5s doubling to 2m, \
         hedge after 30ms, 3 legs"
    );
}

#[test]
fn none_turns_off_a_bound_or_a_section_the_defaults_set() {
    let file = read(
        r#"
        [defaults]
        total_timeout = "1s"
        breaker = { consecutive_failures = 3 }
        hedge = { delay = "10ms" }
        adaptive_attempt_timeout = { multiple = 2.0 }

        [policies.plain]
        total_timeout = "none"
        attempt_timeout = "none"
        breaker = "none"
        hedge = "none"
        adaptive_attempt_timeout = "none"
        budget = "none"
        "#,
    );
    let plain = file.get("plain").expect("valid");
    assert_eq!(
        plain.explain(),
        "plain: 3 attempts, no total timeout, no attempt timeout, exponential 100ms x2 max 30s full jitter"
    );
    assert!(plain.breaker().is_none() && plain.budget().is_none());
}

#[test]
fn every_problem_of_every_policy_is_reported_at_once_under_its_key_path() {
    let file = read(
        r#"
        [policies.prices]
        attempt_timeout = "0ns"
        max_attempts = 0
        backoff = { factor = 0.5, max = "48h" }

        [policies.search]
        total_timeout = "100ms"
        min_attempt_time = "100ms"
        breaker = { consecutive_failures = 0, jitter = 1.5 }
        budget = { fraction = 2.0 }
        hedge = { delay = "2h", max_concurrent = 9 }
        "#,
    );
    assert_eq!(
        problems(&file),
        [
            "policies.prices.max_attempts must be at least 1 (was 0)",
            "policies.prices.attempt_timeout must be positive (was 0ns)",
            "policies.prices.backoff.max must be at most 24h (was 172800s)",
            "policies.prices.backoff.factor must be finite and at least 1 (was 0.5)",
            "policies.search.budget.fraction must be between 0 and 1 (was 2)",
            "policies.search.breaker.consecutive_failures must be at least 1 (was 0)",
            "policies.search.breaker.jitter must be in [0, 1) (was 1.5)",
            "policies.search.min_attempt_time must be shorter than the total_timeout (was 100ms, total_timeout 100ms)",
            "policies.search.hedge.delay must be at most 1h (was 7200s)",
            "policies.search.hedge.max_concurrent must be between 2 and 8 (was 9)",
        ]
    );
}

#[test]
fn a_problem_inherited_from_the_defaults_is_named_once_under_defaults() {
    let file = read(
        r#"
        [defaults]
        attempt_timeout = "0s"
        breaker = { break_duration = "0s" }

        [policies.a]
        [policies.b]
        [policies.c]
        attempt_timeout = "0ms"
        breaker = { break_duration = "0s" }
        "#,
    );
    assert_eq!(
        problems(&file),
        [
            "defaults.breaker.break_duration must be positive (was 0ns)",
            "defaults.attempt_timeout must be positive (was 0ns)",
            "policies.c.breaker.break_duration must be positive (was 0ns)",
            "policies.c.attempt_timeout must be positive (was 0ns)",
        ]
    );
}

#[test]
fn settings_that_do_not_go_together_are_problems_under_their_key_path() {
    let file = read(
        r#"
        [policies.a]
        backoff = { kind = "constant", factor = 2.0, base = "10ms" }
        timeout_mode = { kind = "cooperative", grace = "1s" }

        [policies.b]
        backoff = { kind = "linear" }
        breaker = { consecutive_failures = 3, failure_ratio = 0.5 }
        hedge = { delay = "10ms", quantile = 0.9 }

        [policies.c]
        breaker = { failure_ratio = 0.5 }
        backoff = { kind = "decorrelated", base = "10ms", jitter = "full" }

        [policies.d]
        breaker = { window = "10s" }
        "#,
    );
    assert_eq!(
        problems(&file),
        [
            "policies.a.timeout_mode.grace does not apply to the cooperative mode (was 1s)",
            "policies.a.backoff.delay is required for a constant backoff",
            "policies.a.backoff.base does not apply to a constant backoff (was 10ms)",
            "policies.a.backoff.factor does not apply to a constant backoff (was 2)",
            "policies.b.backoff.step is required for a linear backoff",
            "policies.b.breaker.consecutive_failures cannot be set with failure_ratio (was 3, failure_ratio 0.5)",
            "policies.b.hedge.delay cannot be set with quantile, window, min_samples or floor, the adaptive delay's settings (was 10ms)",
            "policies.c.backoff.jitter does not apply to a decorrelated backoff (was full)",
            "policies.c.breaker.window is required with failure_ratio",
            "policies.c.breaker.min_throughput is required with failure_ratio",
            "policies.d.breaker.window does not apply to a breaker without failure_ratio (was 10s)",
        ]
    );
}

#[test]
fn an_unknown_key_is_refused_with_its_name() {
    let cases = [
        ("[policies.a]\natempt_timeout = \"1s\"\n", "atempt_timeout"),
        ("[defaults]\nretries = 3\n", "retries"),
        ("[policy.a]\nmax_attempts = 3\n", "policy"),
        ("[policies.a.breaker]\nthreshold = 3\n", "threshold"),
        (
            "[policies.a]\nbackoff = { kind = \"exponential\", bsae = \"1s\" }\n",
            "bsae",
        ),
        (
            "[policies.a]\nhedge = { delay = \"1s\", legs = 2 }\n",
            "legs",
        ),
    ];
    for (text, key) in cases {
        let error = toml::from_str::<Policies>(text)
            .expect_err(text)
            .to_string();
        assert!(
            error.contains(&format!("unknown field `{key}`")),
            "{text}: {error}"
        );
    }
    let json = r#"{ "policies": { "a": { "total_timeout": "1s", "total_timout": "2s" } } }"#;
    let error = serde_json::from_str::<Policies>(json).expect_err("unknown key");
    assert!(
        error.to_string().contains("unknown field `total_timout`"),
        "{error}"
    );
}

#[test]
fn a_malformed_value_is_refused_with_the_value() {
    let cases = [
        (
            "total_timeout = \"250\"",
            "invalid duration \"250\": no unit",
        ),
        (
            "total_timeout = \"-1s\"",
            "invalid duration \"-1s\": must not be negative",
        ),
        (
            "min_attempt_time = \"5 days\"",
            "invalid duration \"5 days\": unknown unit",
        ),
        ("total_timeout = 250", "a duration such as"),
        ("breaker = \"off\"", "a table of settings, or \"none\""),
        ("backoff = { kind = \"fibonacci\" }", "fibonacci"),
    ];
    for (line, message) in cases {
        let text = format!("[policies.a]\n{line}\n");
        let error = toml::from_str::<Policies>(&text)
            .expect_err(line)
            .to_string();
        assert!(error.contains(message), "{line}: {error}");
    }
}

#[test]
fn get_names_a_policy_the_file_does_not_have() {
    let file = read("[policies.prices]\n[policies.search]\n");
    let error = file.get("payments").expect_err("not in the file");
    assert_eq!(
        error.to_string(),
        "policies.payments is not in the file (it has prices, search)"
    );
}

#[test]
fn get_with_keeps_what_the_builder_brings_and_names_the_policy() {
    let file = read("[policies.disk]\nmax_attempts = 2\n");
    let seen = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&seen);
    let policy = file
        .get_with(
            "disk",
            Policy::builder()
                .name("replaced")
                .max_attempts(9)
                .listener(move |_| {
                    counted.fetch_add(1, Ordering::Relaxed);
                }),
        )
        .expect("valid");
    assert_eq!((policy.name(), policy.max_attempts()), ("disk", 2));
    let outcome = policy.call().run_blocking(|_| Ok::<_, std::io::Error>(1));
    assert_eq!(outcome.expect("ok"), 1);
    assert!(
        seen.load(Ordering::Relaxed) > 0,
        "the builder's listener was kept"
    );
}

#[test]
fn a_file_serialized_and_read_back_is_the_same_file() {
    let file = read(FULL);
    let text = toml::to_string(&file).expect("serializable");
    let again: Policies = toml::from_str(&text).expect("readable");
    assert_eq!(again, file, "{text}");
    // Durations are written the way they were read.
    assert!(text.contains("attempt_timeout = \"500ms\""), "{text}");
    assert!(text.contains("max_break = \"1m\""), "{text}");
    assert!(text.contains("attempt_timeout = \"none\""), "{text}");
    assert!(text.contains("breaker = \"none\""), "{text}");
    // And build the same policies.
    let explain = |file: &Policies| -> Vec<String> {
        let built = file.build().expect("valid");
        built.values().map(Policy::explain).collect()
    };
    assert_eq!(explain(&again), explain(&file));
}

#[test]
fn a_configured_policy_explains_the_settings_its_configuration_states() {
    let file = read(FULL);
    for (name, policy) in file.build().expect("valid") {
        let config = file.resolved(&name).expect("in the file");
        let settings = policy.settings();
        assert_eq!(Some(settings.max_attempts), config.max_attempts.or(Some(3)));
        assert_eq!(settings.total_timeout, config.total_timeout.expect("set"));
        assert_eq!(
            settings.attempt_timeout,
            config.attempt_timeout.expect("set")
        );
        assert_eq!(Some(settings.min_attempt_time), config.min_attempt_time);
        let mode = config.timeout_mode.expect("set");
        let expected = match mode.kind {
            Some(TimeoutModeKind::Cooperative) => TimeoutMode::Cooperative,
            _ => TimeoutMode::Abandon {
                grace: mode.grace.unwrap_or_default(),
            },
        };
        assert_eq!(settings.timeout_mode, expected);
        let backoff = config.backoff.expect("set");
        assert_eq!(
            Some(settings.backoff.max_delay()),
            backoff.max.or(Some(Duration::from_secs(30)))
        );
        match config.budget.clone() {
            Some(None) => assert!(policy.budget().is_none()),
            Some(Some(budget)) => {
                let built = policy.budget().expect("a budget");
                assert_eq!(Some(built.fraction()), budget.fraction);
                assert_eq!(Some(built.min_per_sec()), budget.min_per_sec);
            }
            None => unreachable!("the defaults set a budget"),
        }
        assert_eq!(
            policy.breaker().is_some(),
            config.breaker.clone().flatten().is_some()
        );
    }
    // The same explanation as a policy built by hand with the same settings.
    let by_hand = Policy::builder()
        .name("prices")
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(ms(200))
        .min_attempt_time(ms(50))
        .use_ambient_deadline(true)
        .timeout_mode(TimeoutMode::Abandon { grace: ms(10) })
        .backoff(
            rampart::backoff::Backoff::exponential(ms(50))
                .factor(3.0)
                .max(Duration::from_secs(1))
                .jitter(rampart::backoff::Jitter::Equal)
                .throttled_base(Duration::from_secs(2))
                .seed(7),
        )
        .budget(
            rampart::RetryBudget::builder()
                .fraction(0.2)
                .min_per_sec(5.0)
                .build()
                .expect("valid"),
        )
        .breaker(
            rampart::Breaker::builder()
                .consecutive_failures(4)
                .slow_call(Duration::from_secs(1))
                .break_duration(Duration::from_secs(10))
                .max_break(Duration::from_secs(60))
                .jitter(0.0)
                .seed(1)
                .half_open_probes(2)
                .probe_successes(3)
                .probe_timeout(Duration::from_secs(5))
                .build()
                .expect("valid"),
        )
        .hedge(rampart::hedge::Hedge::fixed(ms(50)).max_concurrent(3))
        .build()
        .expect("valid");
    assert_eq!(
        file.get("prices").expect("valid").explain(),
        by_hand.explain()
    );
}

#[tokio::test(start_paused = true)]
async fn a_configured_policy_retries_the_configured_number_of_attempts() {
    let file = read(
        r#"
        [defaults]
        max_attempts = 4
        backoff = { kind = "constant", delay = "100ms" }

        [policies.flaky]

        [policies.once]
        max_attempts = 1
        "#,
    );
    for (name, expected) in [("flaky", 4), ("once", 1)] {
        let policy = file.get(name).expect("valid");
        let attempts = AtomicU32::new(0);
        let outcome = policy
            .run(async |_attempt| {
                attempts.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(std::io::Error::other("unavailable"))
            })
            .await;
        assert!(matches!(outcome, Err(Error::Inner(_))), "{name}");
        assert_eq!(attempts.load(Ordering::SeqCst), expected, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_configured_attempt_timeout_bounds_each_attempt() {
    let file = read(
        "[policies.slow]\nmax_attempts = 3\nattempt_timeout = \"200ms\"\nbackoff = { kind = \"none\" }\n",
    );
    let policy = file.get("slow").expect("valid");
    let attempts = AtomicU32::new(0);
    let outcome = policy
        .run(async |_attempt| {
            attempts.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<(), std::io::Error>>().await
        })
        .await;
    match outcome {
        Err(Error::AttemptTimeout { timeout, attempts }) => {
            assert_eq!((timeout, attempts), (ms(200), 3));
        }
        other => panic!("expected the attempt timeout, got {other:?}"),
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
}

#[test]
fn a_policy_config_alone_builds_on_the_builder_it_is_given() {
    let config: PolicyConfig =
        toml::from_str("max_attempts = 2\ntotal_timeout = \"750ms\"\n").expect("valid");
    let policy = config
        .build(Policy::builder().name("alone"))
        .expect("valid");
    assert_eq!(policy.max_attempts(), 2);
    assert_eq!(policy.total_timeout(), Some(ms(750)));
    let text = toml::to_string(&config).expect("serializable");
    assert_eq!(text, "max_attempts = 2\ntotal_timeout = \"750ms\"\n");
}

proptest! {
    #![proptest_config(cases::cases(256))]

    #[test]
    fn formatting_then_parsing_a_duration_gives_it_back(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let duration = Duration::new(secs, nanos);
        prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
    }

    #[test]
    fn formatting_then_parsing_a_short_duration_gives_it_back(nanos in 0u64..10_000_000_000_000) {
        let duration = Duration::from_nanos(nanos);
        prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
    }

    #[test]
    fn a_decimal_number_of_a_unit_reads_as_that_many_nanoseconds(
        whole in 0u64..1_000_000,
        fraction in 0u32..1000,
        unit in prop::sample::select(vec![("us", 1_000u64), ("ms", 1_000_000), ("s", 1_000_000_000), ("m", 60_000_000_000), ("h", 3_600_000_000_000)]),
    ) {
        let text = format!("{whole}.{fraction:03}{}", unit.0);
        let nanos = u128::from(whole) * u128::from(unit.1) + u128::from(fraction) * u128::from(unit.1) / 1000;
        prop_assert_eq!(parse_duration(&text).map(|d| d.as_nanos()), Ok(nanos));
    }

    #[test]
    fn parsing_never_panics_on_any_text(text in "\\PC{0,24}") {
        let _ = parse_duration(&text);
    }
}

#[tokio::test(start_paused = true)]
async fn a_reload_applies_what_runs_live_and_names_what_needs_a_restart() {
    let file = read(
        r#"
        [defaults]
        backoff = { kind = "none" }

        [policies.prices]
        max_attempts = 2
        breaker = { consecutive_failures = 5, jitter = 0.0 }

        [policies.search]
        breaker = { consecutive_failures = 5 }

        [policies.once]
        max_attempts = 1

        [policies.gone]
        "#,
    );
    let policies = file.build().expect("valid");
    let next = read(
        r#"
        [defaults]
        backoff = { kind = "none" }

        [policies.prices]
        max_attempts = 4
        attempt_timeout = "300ms"
        breaker = { consecutive_failures = 1, jitter = 0.0 }
        hedge = { delay = "50ms" }
        budget = { fraction = 0.5 }

        [policies.search]
        breaker = { failure_ratio = 0.5, window = "10s", min_throughput = 5 }

        [policies.once]
        max_attempts = 3
        total_timeout = "1s"

        [policies.new]
        "#,
    );
    let restart = file.reload(&next, &policies).expect("a valid file");
    assert_eq!(
        restart,
        [
            "policies.gone",
            "policies.new",
            "policies.once.max_attempts",
            "policies.prices.budget",
            "policies.prices.hedge",
            "policies.search.breaker",
        ]
    );
    let prices = &policies["prices"];
    assert_eq!(
        (prices.max_attempts(), prices.attempt_timeout()),
        (4, Some(ms(300)))
    );
    // The breaker's new threshold applies: one failed call of 4 attempts opens it after the
    // first, and the other 3 are refused without running.
    let attempts = AtomicU32::new(0);
    let outcome = prices
        .run(async |_attempt| {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(std::io::Error::other("unavailable"))
        })
        .await;
    assert!(outcome.is_err());
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert!(prices.explain().contains("breaker: open after 1 failure"));
    // The one-attempt policy has no retry budget: its other live settings still apply.
    let once = &policies["once"];
    assert_eq!(
        (once.max_attempts(), once.total_timeout()),
        (1, Some(Duration::from_secs(1)))
    );
    // The search breaker's mode is fixed at build: it still opens after 5 failures.
    assert!(
        policies["search"]
            .explain()
            .contains("after 5 consecutive failures")
    );
}

#[test]
fn a_reload_of_an_invalid_file_changes_nothing_and_names_every_problem() {
    let file = read("[policies.prices]\nmax_attempts = 2\n[policies.search]\n");
    let policies = file.build().expect("valid");
    let next = read(
        "[policies.prices]\nmax_attempts = 5\n[policies.search]\ntotal_timeout = \"0s\"\nmax_attempts = 0\n",
    );
    let error = file.reload(&next, &policies).expect_err("invalid");
    assert_eq!(
        error.to_string(),
        "policies.search.max_attempts must be at least 1 (was 0); \
         policies.search.total_timeout must be positive (was 0ns)"
    );
    assert_eq!(policies["prices"].max_attempts(), 2);
    // Nothing changed, nothing to restart.
    assert_eq!(
        file.reload(&file, &policies).expect("valid"),
        Vec::<String>::new()
    );
}
