//! Observability without glue: `tracing` spans and events, and `metrics` counters,
//! histograms and gauges, each behind its own optional feature.
//!
//! Why here and not at the call sites: every [`Event`] of a call already leaves
//! the executor's state machine through one function (the policy's telemetry), so this module
//! is the one place that turns events into log lines and metrics. Each feature's emitting
//! functions are defined twice, once real and once empty, so no call site carries a `cfg`
//! and a build without the features compiles none of it.
//!
//! ```toml
//! rampart = { version = "0.2", features = ["tracing", "metrics"] }
//! ```
//!
//! | feature | what it adds |
//! |---|---|
//! | `metrics` | the counters, histograms and gauges below, through the [`metrics`](https://docs.rs/metrics) facade (any exporter) |
//! | `tracing` | the spans below, and one event per [`Event`] at the level below, through [`tracing`](https://docs.rs/tracing) |
//!
//! # Metrics
//!
//! Every metric carries the attribute `policy` (the policy's [`name`], or the value a
//! [`MetricLabels`] gives it), then the attributes its [`MetricLabels`] adds (rampart-http's
//! outbound layer adds `server.address`). The names follow OpenTelemetry's
//! semantic-convention style and are stable.
//!
//! A series (one metric with one set of attribute values) is registered with the recorder on
//! its **first use**, and its handle kept by the policy: a call allocates nothing for its
//! metrics once each of its series exists. So a policy has no series before its first call,
//! and never has one for a combination that does not happen: a breaker transition from a
//! state to itself, a hedge of a policy that does not hedge, a stop reason never seen.
//! Install the recorder before the first call (before building policies is simplest): a
//! series first used with no recorder keeps recording nowhere.
//!
//! `cargo run -p rampart --example observability --features metrics` prints the series count
//! of one policy (with a breaker and a retry budget, histograms of 10 buckets) before any call
//! and after 100 calls to a dependency failing one attempt in three: 0 and 45 (303 and 303
//! when every combination was registered at build, as in 0.1; 235 each with the exporter's
//! default summaries).
//!
//! The unit column gives OpenTelemetry's annotation; counters and gauges are registered with
//! the `metrics` facade as `Unit::Count` and histograms as `Unit::Seconds`.
//!
//! | name | kind | unit | attributes | when it moves |
//! |---|---|---|---|---|
//! | `rampart.calls` | counter | `{call}` | `policy`, `stop_reason` ([`StopReason::as_str`]) | once per call, when it ends |
//! | `rampart.call.duration` | histogram | `s` | `policy`, `stop_reason` | once per call, when it ends |
//! | `rampart.attempts` | counter | `{attempt}` | `policy`, `outcome` ([`AttemptOutcome::as_str`]) | once per attempt that ended (refused ones included) |
//! | `rampart.attempt.duration` | histogram | `s` | `policy`, `outcome` | once per attempt that ended |
//! | `rampart.timeouts` | counter | `{timeout}` | `policy`, `outcome`: `timed_out` \| `ignored` \| `orphaned` | an attempt's ceiling decided it; a result past the ceiling was kept; an awaited attempt overran its ceiling by more than 1 s |
//! | `rampart.retries` | counter | `{retry}` | `policy` | before each backoff sleep |
//! | `rampart.rejections` | counter | `{rejection}` | `policy`, `reason`: `breaker` \| `budget` \| `overloaded` \| `rate` \| `draining` | a call ended rejected by the breaker, the budget or a drain; admission refused an attempt (`rate` for a [`RateLimit`], `overloaded` for any other component) |
//! | `rampart.breaker.transitions` | counter | `{transition}` | `policy`, `from`, `to` ([`StateKind::as_str`]) | the policy's breaker changed state |
//! | `rampart.hedges` | counter | `{hedge}` | `policy`, `event`: `started` \| `won` \| `discarded` \| `suppressed` | a hedged call's legs |
//! | `rampart.dry_run.rejections` | counter | `{attempt}` | `policy`, `reason`: `breaker` \| `overloaded` \| `rate` | a [dry-run](crate::breaker::BreakerBuilder::dry_run) breaker or [`DryRun`](crate::limit::DryRun) limiter would have refused an attempt, which ran |
//! | `rampart.fallbacks` | counter | `{call}` | `policy`, `stop_reason` | a [fallback](crate::fallback) answered a call that stopped for `stop_reason` |
//! | `rampart.stream.ended` | counter | `{stream}` | `policy`, `reason` ([`StreamEnd::as_str`]) | once per stream a [`Call::stream`](crate::Call::stream) call opened, when it ends |
//! | `rampart.stream.items` | counter | `{item}` | `policy` | when a stream ends, by the items it delivered |
//! | `rampart.breaker.state` | gauge | `1` | `policy`, `state` ([`StateKind::as_str`]) | set when a call ends, and when the breaker's manual control (`Breaker::reset`, `isolate`, `force_closed`, `release`) changes its state: 1 for the breaker's current state, 0 for the states it was set in before (policies with a breaker) |
//! | `rampart.budget.tokens` | gauge | `{token}` | `policy` | set when a call ends: the retry budget's balance (policies with a budget) |
//! | `rampart.limiter.in_flight` | gauge | `{attempt}` | `policy` | set when a call ends: attempts holding an admission permit ([`Admit::load`]; limiters that count them) |
//! | `rampart.limiter.queued` | gauge | `{attempt}` | `policy` | set when a call ends: attempts waiting in admission's queue ([`Admit::load`]) |
//!
//! Gauges exist only for the parts a policy has, and `rampart.breaker.state` only for the
//! states its breaker was set in (the state left is set to 0).
//! [`MetricLabels::state_gauges`] turns off the breaker's and the budget's.
//!
//! A series that exists is never removed: a counter a new combination starts is new to the
//! exporter at its first value (Prometheus' `increase` counts from the first sample it sees).
//!
//! Durations come from the policy's [`Clock`](crate::Clock) (so paused and manual time work).
//!
//! # Tracing
//!
//! Every [`Event`] is also a `tracing` event with target `rampart`, a short phrase as its
//! message ("attempt ended", "timeout ignored: ...") and the event's fields as fields:
//! `TimeoutIgnored` and `OrphanedWork` at `WARN`; `Retrying`, `BreakerTransition`,
//! `WouldReject`, `FallbackUsed` and `Reconfigured` at `INFO`; the rest at `DEBUG`.
//!
//! | span | level | fields |
//! |---|---|---|
//! | `rampart.call` | `INFO` | `policy`; `deadline` (the effective one, recorded when the call starts, if it has one); `attempts` and `stop_reason` (recorded when it ends) |
//! | `rampart.attempt` | `INFO` | `number`, `ceiling`, `admission_wait` (how long admission kept it waiting, when the call reads the clock), `outcome` ([`AttemptOutcome::as_str`], recorded when it ends) |
//! | `rampart.stream` | `INFO` | `policy`; `items` and `end` ([`StreamEnd::as_str`], recorded when the stream ends) |
//!
//! Each attempt's callback runs in its `rampart.attempt` span, a child of the call's; the
//! events happen inside the call span. A stream's delivery phase (after its call ended with
//! the first item) is a `rampart.stream` span, a child of the call's, and its `StreamEnded`
//! event happens inside it. A hedged call's legs each have their own attempt span
//! under the one call span. [`Ambient::spawn`], [`Ambient::spawn_blocking`],
//! [`Ambient::bind`] and [`Ambient::carry`] carry the current span into the new task, so a
//! call made there is a child of the span that spawned it.
//!
//! # Cost
//!
//! Without the features: none (the empty twins compile to nothing, and the zero-allocation
//! and future-size budgets hold). With `tracing` alone, a call checks once whether a
//! subscriber listens to target `rampart` (a cached per-callsite check); if none does, it
//! reads no clock and builds no event, and `Policy::none()` keeps its pass-through
//! shortcut. With `metrics`, every call reads the clock and builds its events (the `metrics`
//! facade cannot tell whether a recorder is installed) and `Policy::none()` loses the
//! shortcut. The success path allocates nothing either way
//! (`tests/observe_allocations.rs`). `bench/benches/observability.rs` measures the per-call
//! cost of each feature; BENCHMARKS.md has the numbers.
//!
//! [`name`]: crate::PolicyBuilder::name
//! [`StopReason::as_str`]: crate::StopReason::as_str
//! [`AttemptOutcome::as_str`]: crate::AttemptOutcome::as_str
//! [`StateKind::as_str`]: crate::breaker::StateKind::as_str
//! [`StreamEnd::as_str`]: crate::outcome::StreamEnd::as_str
//! [`Call::stream`]: crate::Call::stream
//! [`RateLimit`]: crate::limit::RateLimit
//! [`Admit::load`]: crate::admit::Admit::load
//! [`Ambient::spawn`]: crate::Ambient::spawn
//! [`Ambient::spawn_blocking`]: crate::Ambient::spawn_blocking
//! [`Ambient::bind`]: crate::Ambient::bind
//! [`Ambient::carry`]: crate::Ambient::carry

use std::time::Duration;

use crate::event::Event;

#[cfg_attr(feature = "metrics", path = "metrics.rs")]
#[cfg_attr(not(feature = "metrics"), path = "metrics_off.rs")]
mod metrics;
#[cfg_attr(feature = "tracing", path = "tracing.rs")]
#[cfg_attr(not(feature = "tracing"), path = "tracing_off.rs")]
mod tracing;

mod telemetry;

pub(crate) use self::telemetry::{Reported, StreamReporter, Telemetry};
pub(crate) use self::tracing::{LastOutcome, Span};

/// The span of one call of policy `policy` (`rampart.call`); nothing without `tracing`.
#[inline(always)]
pub(crate) fn call_span(policy: &str) -> Span {
    tracing::call(policy)
}

/// The span of attempt `number` of the call whose span is `call`, with ceiling `ceiling`,
/// admitted after waiting `admission_wait` (`rampart.attempt`); nothing without `tracing`.
#[inline(always)]
pub(crate) fn attempt_span(
    call: &Span,
    number: u32,
    ceiling: Option<Duration>,
    admission_wait: Option<Duration>,
) -> Span {
    tracing::attempt(call, number, ceiling, admission_wait)
}

/// The span of the delivery phase of a stream opened by the call whose span is `call`
/// (`rampart.stream`, a child of it); nothing without `tracing`.
#[inline(always)]
pub(crate) fn stream_span(call: &Span, policy: &str) -> Span {
    tracing::stream(call, policy)
}

/// The span the current code runs in, to carry into a spawned task; nothing without
/// `tracing`.
#[inline(always)]
pub(crate) fn current_span() -> Span {
    tracing::current()
}

/// How a policy's metrics are labelled: the value of their `policy` attribute, the
/// attributes beside it, and whether the gauges of the policy's own breaker and budget are
/// reported. Given to [`PolicyBuilder::metric_labels`](crate::PolicyBuilder::metric_labels);
/// without the `metrics` feature it is kept and unused.
///
/// rampart-http's outbound layer labels each host's policies with the layer's name as
/// `policy` and the host as `server.address`, so that a dashboard groups a dependency's hosts
/// under one name.
///
/// ```
/// use rampart::Policy;
/// use rampart::observe::MetricLabels;
///
/// let policy = Policy::builder()
///     .name("inventory 10.0.0.7:8080") // events, errors and `explain` say this
///     .metric_labels(
///         MetricLabels::new()
///             .policy("inventory")
///             .attribute("server.address", "10.0.0.7:8080"),
///     )
///     .build()
///     .expect("valid policy");
/// # drop(policy);
/// ```
///
/// | knob | default | meaning |
/// |---|---|---|
/// | [`policy`](Self::policy) | the policy's [name](crate::PolicyBuilder::name) | the `policy` attribute of every metric |
/// | [`attribute`](Self::attribute) | none | attributes every metric carries after `policy` |
/// | [`state_gauges`](Self::state_gauges) | on | `rampart.breaker.state` and `rampart.budget.tokens` reported |
#[derive(Debug, Clone)]
pub struct MetricLabels {
    pub(crate) policy: Option<Box<str>>,
    pub(crate) attributes: Vec<(&'static str, Box<str>)>,
    pub(crate) state_gauges: bool,
}

impl MetricLabels {
    /// The defaults of the table above: `policy` is the policy's name, nothing else.
    pub fn new() -> Self {
        MetricLabels {
            policy: None,
            attributes: Vec::new(),
            state_gauges: true,
        }
    }

    /// The value of the `policy` attribute (default: the policy's name).
    pub fn policy(mut self, value: impl Into<String>) -> Self {
        self.policy = Some(value.into().into_boxed_str());
        self
    }

    /// An attribute every metric of the policy carries, after `policy` and before the
    /// metric's own (OpenTelemetry's names: `server.address`, `service.name`, ...). A later
    /// call with the same key replaces the earlier value.
    pub fn attribute(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.attributes.retain(|(k, _)| *k != key);
        self.attributes.push((key, value.into().into_boxed_str()));
        self
    }

    /// Whether the gauges of the policy's own breaker and retry budget
    /// (`rampart.breaker.state`, `rampart.budget.tokens`) are reported (default on). Turn
    /// them off where several policies with breakers or budgets of their own share the same
    /// labels: each would overwrite the others' values. Admission's gauges are not affected.
    pub fn state_gauges(mut self, on: bool) -> Self {
        self.state_gauges = on;
        self
    }
}

impl Default for MetricLabels {
    fn default() -> Self {
        MetricLabels::new()
    }
}

/// What one policy reports to `tracing` and `metrics`, built with the policy.
#[derive(Clone, Default)]
pub(crate) struct Observer {
    metrics: metrics::Handles,
}

impl Observer {
    /// The observer of policy `policy`, labelled by `labels`, which has `parts`. Nothing is
    /// registered with a recorder yet: each series is registered on its first use.
    pub(crate) fn new(policy: &str, labels: &MetricLabels, parts: Parts) -> Self {
        Observer {
            metrics: metrics::Handles::new(policy, labels, parts),
        }
    }

    /// Whether a call must build its events and read the clock for them: with `metrics`
    /// compiled in, always (the facade cannot tell whether a recorder listens); with
    /// `tracing` only, when a subscriber is interested in target `rampart` (a cached
    /// per-callsite check); never without either.
    #[inline(always)]
    pub(crate) fn is_active(&self) -> bool {
        metrics::ACTIVE || tracing::is_active()
    }

    /// The call whose span is `span` began with the effective deadline `deadline` (from its
    /// start), if any.
    #[inline(always)]
    pub(crate) fn call_began(&self, span: &Span, deadline: Option<Duration>) {
        tracing::call_began(span, deadline);
    }

    /// Reports `event` of the call whose span is `span`.
    #[inline(always)]
    pub(crate) fn event(&self, span: &Span, event: &Event<'_>) {
        self.metrics.event(event);
        tracing::event(span, event);
    }

    /// Sets the gauges from the state a call just left behind at `now`: the breaker's state,
    /// the budget's tokens, admission's in-flight and queued attempts.
    #[inline(always)]
    pub(crate) fn sample<A: crate::admit::Admit>(&self, gauges: &Gauges<'_, A>) {
        self.metrics.sample(gauges);
    }
}

/// Which stateful parts a policy has, so that only their gauges are registered.
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Parts {
    pub(crate) breaker: bool,
    pub(crate) budget: bool,
    /// Admission's load at build time: a count it tracks is `Some`.
    pub(crate) load: crate::admit::Load,
}

/// What the gauges read at the end of a call.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Gauges<'a, A> {
    pub(crate) breaker: Option<&'a crate::Breaker>,
    pub(crate) budget: Option<&'a crate::RetryBudget>,
    /// Asked for its [`load`](crate::admit::Admit::load) only when its gauges exist.
    pub(crate) admit: &'a A,
    pub(crate) now: Option<crate::clock::Instant>,
}
