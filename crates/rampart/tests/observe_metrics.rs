//! The `metrics` feature (issue 12): each scenario, on paused time, moves exactly the metrics
//! the table in `rampart::observe` says, with the labels it says. Each test makes a debugging
//! recorder its thread's recorder for its whole run (the runtime is current-thread): a series
//! is registered on its first use, with the recorder current then.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use rampart::backoff::Backoff;
use rampart::breaker::Breaker;
use rampart::hedge::Hedge;
use rampart::limit::RateLimit;
use rampart::{Instant, Policy, PolicyBuilder, RetryBudget, StopReason, TimeoutMode};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failed")
    }
}

/// Builds `builder` (named `p`), with a fresh debugging recorder as the thread's recorder
/// until the returned `Metrics` is dropped.
fn observed<C, A: rampart::admit::Admit>(builder: PolicyBuilder<C, A>) -> (Policy<C, A>, Metrics) {
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    let guard = metrics::set_default_local_recorder(recorder);
    let policy = builder.name("p").build().expect("valid policy");
    let metrics = Metrics(recorder.snapshotter(), std::cell::OnceCell::new(), guard);
    (policy, metrics)
}

/// One snapshot, taken on first use (a snapshot drains the debugging recorder's histograms),
/// and the guard that keeps the recorder the thread's.
struct Metrics(
    Snapshotter,
    std::cell::OnceCell<Vec<Entry>>,
    #[allow(dead_code)] metrics::LocalRecorderGuard<'static>,
);

type Entry = (String, Vec<(String, String)>, DebugValue);

impl Metrics {
    /// Every metric with its labels (the `policy` label checked and left out) and value.
    fn all(&self) -> &[Entry] {
        self.1.get_or_init(|| self.take())
    }

    fn take(&self) -> Vec<Entry> {
        let mut all: Vec<_> = self
            .0
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let mut labels = Vec::new();
                for label in key.labels() {
                    if label.key() == "policy" {
                        assert_eq!(label.value(), "p", "every metric names its policy");
                    } else {
                        labels.push((label.key().to_owned(), label.value().to_owned()));
                    }
                }
                (key.name().to_owned(), labels, value)
            })
            .collect();
        all.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        all
    }

    /// The counters that moved, as `name{label=value,..} count`.
    fn counters(&self) -> Vec<String> {
        self.all()
            .iter()
            .filter_map(|(name, labels, value)| match value {
                DebugValue::Counter(0) => None,
                DebugValue::Counter(n) => Some(format!("{name}{{{}}} {n}", braces(labels))),
                _ => None,
            })
            .collect()
    }

    /// The values recorded into histogram `name`, as `labels: seconds..`.
    fn histogram(&self, name: &str) -> Vec<String> {
        self.all()
            .iter()
            .filter(|(n, _, _)| n == name)
            .filter_map(|(_, labels, value)| match value {
                DebugValue::Histogram(values) if !values.is_empty() => {
                    let values: Vec<_> = values.iter().map(|v| v.0.to_string()).collect();
                    Some(format!("{}: {}", braces(labels), values.join(" ")))
                }
                _ => None,
            })
            .collect()
    }
}

fn braces(labels: &[(String, String)]) -> String {
    let pairs: Vec<_> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(",")
}

#[tokio::test(start_paused = true)]
async fn a_success_counts_one_call_one_ok_attempt_and_both_durations_in_seconds() {
    let (policy, metrics) = observed(Policy::builder().attempt_timeout(100 * MS));
    let outcome = policy
        .run(async |_a| {
            tokio::time::sleep(10 * MS).await;
            Ok::<_, Fail>(1)
        })
        .await;
    assert_eq!(outcome.ok(), Some(1));
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=ok} 1",
            "rampart.calls{stop_reason=succeeded} 1"
        ]
    );
    assert_eq!(
        metrics.histogram("rampart.call.duration"),
        ["stop_reason=succeeded: 0.01"]
    );
    assert_eq!(
        metrics.histogram("rampart.attempt.duration"),
        ["outcome=ok: 0.01"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_retried_call_counts_each_attempt_by_outcome_and_each_retry() {
    let (policy, metrics) = observed(
        Policy::builder()
            .max_attempts(3)
            .backoff(Backoff::constant(5 * MS)),
    );
    let outcome = policy
        .run(async |a| match a.number() {
            3 => Ok(3),
            _ => Err(Fail),
        })
        .await;
    assert_eq!(outcome.ok(), Some(3));
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=ok} 1",
            "rampart.attempts{outcome=transient} 2",
            "rampart.calls{stop_reason=succeeded} 1",
            "rampart.retries{} 2"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_ignored_moves_timeouts_with_outcome_ignored_not_timed_out() {
    let (policy, metrics) = observed(
        Policy::builder()
            .attempt_timeout(10 * MS)
            .timeout_mode(TimeoutMode::Cooperative),
    );
    let outcome = policy
        .run(async |_a| {
            tokio::time::sleep(30 * MS).await; // ignores its token
            Ok::<_, Fail>(7)
        })
        .await;
    assert_eq!(outcome.ok(), Some(7));
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=ok} 1",
            "rampart.calls{stop_reason=succeeded} 1",
            "rampart.timeouts{outcome=ignored} 1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_ran_a_second_past_its_ceiling_moves_timeouts_with_outcome_orphaned() {
    let (policy, metrics) = observed(
        Policy::builder()
            .attempt_timeout(100 * MS)
            .timeout_mode(TimeoutMode::Cooperative),
    );
    let outcome = policy
        .run(async |_a| {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, Fail>(())
        })
        .await;
    assert!(outcome.is_ok());
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=ok} 1",
            "rampart.calls{stop_reason=succeeded} 1",
            "rampart.timeouts{outcome=ignored} 1",
            "rampart.timeouts{outcome=orphaned} 1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_its_ceiling_decided_moves_timeouts_with_outcome_timed_out() {
    let (policy, metrics) = observed(Policy::builder().max_attempts(1).attempt_timeout(10 * MS));
    let outcome = policy
        .run(async |a| {
            a.cancelled().await;
            Err::<(), _>(Fail)
        })
        .await;
    assert!(outcome.is_err());
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=timed_out} 1",
            "rampart.calls{stop_reason=attempts_exhausted} 1",
            "rampart.timeouts{outcome=timed_out} 1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opening_moves_its_transition_and_the_retry_it_refuses_is_a_breaker_rejection() {
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    let (policy, metrics) = observed(
        Policy::builder()
            .max_attempts(3)
            .backoff(Backoff::none())
            .breaker(breaker),
    );
    let result = policy
        .call()
        .try_run(async |_a| Err::<(), _>(Fail))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::DependencyUnavailable);
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=transient} 1",
            "rampart.breaker.transitions{from=closed,to=open} 1",
            "rampart.calls{stop_reason=dependency_unavailable} 1",
            "rampart.rejections{reason=breaker} 1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_the_budget_refuses_is_a_budget_rejection() {
    let budget = RetryBudget::builder()
        .min_per_sec(2.0)
        .build()
        .expect("valid budget");
    let now = Instant::now();
    while budget.try_spend(now, 0.0).is_ok() {}
    let (policy, metrics) = observed(
        Policy::builder()
            .max_attempts(3)
            .backoff(Backoff::none())
            .budget(budget),
    );
    let result = policy
        .call()
        .try_run(async |_a| Err::<(), _>(Fail))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::BudgetExhausted);
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=transient} 1",
            "rampart.calls{stop_reason=budget_exhausted} 1",
            "rampart.rejections{reason=budget} 1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedge_that_wins_moves_hedges_started_won_and_discarded() {
    let (policy, metrics) = observed(
        Policy::builder()
            .max_attempts(3)
            .total_timeout(Duration::from_secs(10))
            .backoff(Backoff::none())
            .hedge(Hedge::fixed(100 * MS)),
    );
    let outcome = policy
        .run(async |a| {
            let took = if a.number() == 1 { 1_000 * MS } else { 50 * MS };
            tokio::time::sleep(took).await;
            Ok::<_, Fail>(a.number())
        })
        .await;
    assert_eq!(outcome.ok(), Some(2));
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=ok} 1",
            "rampart.calls{stop_reason=succeeded} 1",
            "rampart.hedges{event=discarded} 1",
            "rampart.hedges{event=started} 1",
            "rampart.hedges{event=won} 1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_a_rate_limit_sheds_is_a_rate_rejection_and_the_call_is_overloaded() {
    let limit = RateLimit::builder(1, Duration::from_secs(1))
        .burst(1)
        .build()
        .expect("valid limit");
    let (policy, metrics) = observed(Policy::builder().max_attempts(1).admit(limit));
    let first = policy.run(async |_a| Ok::<_, Fail>(())).await;
    assert!(first.is_ok());
    let second = policy
        .call()
        .try_run(async |_a| Ok::<_, Fail>(()))
        .await
        .expect("not cancelled");
    assert_eq!(second.stop(), StopReason::Overloaded);
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=ok} 1",
            "rampart.attempts{outcome=refused} 1",
            "rampart.calls{stop_reason=overloaded} 1",
            "rampart.calls{stop_reason=succeeded} 1",
            "rampart.rejections{reason=rate} 1"
        ]
    );
}

#[test]
fn a_policy_built_without_a_recorder_records_nothing_and_runs() {
    let policy = Policy::builder().name("p").build().expect("valid policy");
    let outcome = policy.call().run_blocking(|_a| Ok::<_, Fail>(5));
    assert_eq!(outcome.ok(), Some(5));
}

/// An admission component that refuses every attempt (not a rate limit).
struct Closed;

impl rampart::admit::Admit for Closed {
    type Permit = ();

    fn acquire(
        &self,
        _: &rampart::admit::AdmitContext<'_>,
    ) -> impl std::future::Future<Output = Result<(), rampart::admit::Refusal>> + Send {
        std::future::ready(Err(rampart::admit::Refusal {
            retry_after: None,
            by: "closed for the test",
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_by_an_admission_component_that_is_not_a_rate_limit_is_overloaded() {
    let (policy, metrics) = observed(Policy::builder().max_attempts(1).admit(Closed));
    let result = policy
        .call()
        .try_run(async |_a| Ok::<_, Fail>(()))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::Overloaded);
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=refused} 1",
            "rampart.calls{stop_reason=overloaded} 1",
            "rampart.rejections{reason=overloaded} 1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_before_it_ends_counts_as_cancelled() {
    let (policy, metrics) = observed(Policy::builder().max_attempts(1));
    let call = policy.run(async |_a| {
        std::future::pending::<()>().await;
        Ok::<_, Fail>(())
    });
    // Dropped while its attempt is pending (as a caller that stops waiting drops it).
    assert!(
        tokio::time::timeout(10 * MS, call).await.is_err(),
        "the attempt never ends"
    );
    assert_eq!(
        metrics.counters(),
        ["rampart.calls{stop_reason=cancelled} 1"]
    );
}

impl Metrics {
    /// The gauges, as `name{label=value,..} value`.
    fn gauges(&self) -> Vec<String> {
        self.all()
            .iter()
            .filter_map(|(name, labels, value)| match value {
                DebugValue::Gauge(v) => Some(format!("{name}{{{}}} {}", braces(labels), v.0)),
                _ => None,
            })
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn the_breaker_state_and_budget_token_gauges_follow_the_calls() {
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .build()
        .expect("valid breaker");
    let budget = RetryBudget::builder()
        .min_per_sec(2.0)
        .build()
        .expect("valid budget");
    let (policy, metrics) = observed(
        Policy::builder()
            .max_attempts(2)
            .backoff(Backoff::none())
            .breaker(breaker)
            .budget(budget.clone()),
    );
    assert!(policy.run(async |_a| Ok::<_, Fail>(())).await.is_ok());
    let result = policy
        .call()
        .try_run(async |_a| Err::<(), _>(Fail))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::DependencyUnavailable);
    let tokens = budget.balance(Instant::now());
    assert_eq!(
        metrics.gauges(),
        [
            "rampart.breaker.state{state=closed} 0".to_owned(),
            "rampart.breaker.state{state=open} 1".to_owned(),
            format!("rampart.budget.tokens{{}} {tokens}"),
        ],
        "a state the breaker was never in has no series"
    );
}

#[tokio::test(start_paused = true)]
async fn forcing_the_breaker_through_the_policy_moves_its_state_gauge_and_counts_the_transitions() {
    let breaker = Breaker::builder().build().expect("valid breaker");
    let (policy, metrics) = observed(
        Policy::builder()
            .max_attempts(1)
            .no_budget()
            .breaker(breaker),
    );
    assert!(policy.run(async |_a| Ok::<_, Fail>(())).await.is_ok());
    policy
        .breaker()
        .expect("a breaker")
        .isolate(policy.clock().now())
        .expect("a transition");
    policy
        .breaker()
        .expect("a breaker")
        .force_closed(policy.clock().now())
        .expect("a transition");
    assert_eq!(
        metrics.gauges(),
        [
            "rampart.breaker.state{state=closed} 0",
            "rampart.breaker.state{state=forced_closed} 1",
            "rampart.breaker.state{state=isolated} 0",
        ],
        "set by the policy's own method, with no call since"
    );
    let transitions: Vec<_> = metrics
        .counters()
        .into_iter()
        .filter(|c| c.starts_with("rampart.breaker.transitions"))
        .collect();
    assert_eq!(
        transitions,
        [
            "rampart.breaker.transitions{from=closed,to=isolated} 1",
            "rampart.breaker.transitions{from=isolated,to=forced_closed} 1",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_limiter_gauges_count_held_and_queued_attempts_when_a_call_ends() {
    let limit = rampart::limit::ConcurrencyLimit::new(1).queue(1);
    let (policy, metrics) = observed(Policy::builder().max_attempts(1).admit(limit));
    let slow = |policy: Policy<_, _>| {
        tokio::spawn(async move {
            policy
                .run(async |_a| {
                    tokio::time::sleep(100 * MS).await;
                    Ok::<_, Fail>(())
                })
                .await
        })
    };
    let (holding, queued) = (slow(policy.clone()), slow(policy.clone()));
    tokio::time::sleep(MS).await;
    // The slot is held and the queue is full: this call is refused, and its end samples both.
    let refused = policy
        .call()
        .try_run(async |_a| Ok::<_, Fail>(()))
        .await
        .expect("not cancelled");
    assert_eq!(refused.stop(), StopReason::Overloaded);
    assert_eq!(
        metrics.gauges(),
        [
            "rampart.limiter.in_flight{} 1",
            "rampart.limiter.queued{} 1"
        ]
    );
    for call in [holding, queued] {
        assert!(call.await.expect("no panic").is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn a_policy_without_a_breaker_budget_or_limiter_registers_no_gauges() {
    let (policy, metrics) = observed(Policy::builder().max_attempts(1));
    assert!(policy.run(async |_a| Ok::<_, Fail>(())).await.is_ok());
    assert!(metrics.gauges().is_empty(), "{:?}", metrics.gauges());
}

#[tokio::test(start_paused = true)]
async fn a_fallback_that_answers_moves_fallbacks_by_the_stop_reason_it_replaced() {
    let (policy, metrics) = observed(Policy::builder().max_attempts(1));
    let answer = policy
        .call()
        .fallback(rampart::fallback::Fallback::on([StopReason::AttemptsExhausted]).value(1))
        .run(async |_a| Err::<u32, _>(Fail))
        .await;
    assert_eq!(answer.ok(), Some(1));
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=transient} 1",
            "rampart.calls{stop_reason=attempts_exhausted} 1",
            "rampart.fallbacks{stop_reason=attempts_exhausted} 1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_a_dry_run_breaker_would_have_refused_moves_dry_run_rejections() {
    let breaker = Breaker::builder()
        .consecutive_failures(1)
        .jitter(0.0)
        .dry_run(true)
        .build()
        .expect("valid breaker");
    let (policy, metrics) = observed(
        Policy::builder()
            .max_attempts(2)
            .backoff(Backoff::none())
            .breaker(breaker),
    );
    let result = policy
        .call()
        .try_run(async |_a| Err::<(), _>(Fail))
        .await
        .expect("not cancelled");
    assert_eq!(result.stop(), StopReason::AttemptsExhausted);
    assert_eq!(
        metrics.counters(),
        [
            "rampart.attempts{outcome=transient} 2",
            "rampart.breaker.transitions{from=closed,to=open} 1",
            "rampart.calls{stop_reason=attempts_exhausted} 1",
            "rampart.dry_run.rejections{reason=breaker} 1",
            "rampart.retries{} 1"
        ]
    );
}
