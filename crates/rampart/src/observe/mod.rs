//! Observability without glue: `tracing` events and `metrics` counters and histograms, each
//! behind its own optional feature.
//!
//! Why here and not at the call sites: every [`Event`] of a call already leaves
//! the executor's state machine through one function (the policy's telemetry), so this module
//! is the one place that turns events into log lines and metrics. Each feature's emitting
//! functions are defined twice, once real and once empty, so no call site carries a `cfg`
//! and a build without the features compiles none of it.
//!
//! ```toml
//! rampart = { version = "0.1", features = ["tracing", "metrics"] }
//! ```
//!
//! | feature | what it adds |
//! |---|---|
//! | `metrics` | the counters and histograms below, through the [`metrics`](https://docs.rs/metrics) facade (any exporter) |
//! | `tracing` | one event per [`Event`] at the level below, through [`tracing`](https://docs.rs/tracing) |
//!
//! # Metrics
//!
//! Every metric carries the attribute `policy` (the policy's [`name`]). The names follow
//! OpenTelemetry's semantic-convention style and are stable. Handles are registered with the
//! recorder installed when the policy is **built** (one per label set), so a call allocates
//! nothing for its metrics: install the recorder before building policies.
//!
//! The unit column gives OpenTelemetry's annotation; counters are registered with the `metrics`
//! facade as `Unit::Count` and histograms as `Unit::Seconds`.
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
//!
//! Durations come from the policy's [`Clock`](crate::Clock) (so paused and manual time work);
//! with either feature on, every call reads it (see the cost below).
//!
//! # Tracing
//!
//! Every [`Event`] is also a `tracing` event with target `rampart`, a short phrase as its
//! message ("attempt ended", "timeout ignored: ...") and the event's fields as fields: `TimeoutIgnored` and `OrphanedWork`
//! at `WARN`, `Retrying` and `BreakerTransition` at `INFO`, the rest at `DEBUG`.
//!
//! Each call runs in an `INFO` span `rampart.call` with the fields `policy`, `deadline` (the
//! effective one, recorded when the call starts, if it has one), `attempts` and `stop_reason`
//! (recorded when it ends); each attempt's callback runs in a child span `rampart.attempt`
//! with `number` and `ceiling`. The events above happen inside the call span.
//!
//! # Cost
//!
//! Without the features: none (the empty twins compile to nothing, and the zero-allocation
//! and future-size budgets hold). With either feature on, a call reads the clock and builds
//! its events even without listeners, and `Policy::none()` no longer takes the pass-through
//! shortcut; the success path still allocates nothing. `bench/benches/observability.rs`
//! measures the per-call cost of each feature.
//!
//! [`name`]: crate::PolicyBuilder::name
//! [`StopReason::as_str`]: crate::StopReason::as_str
//! [`AttemptOutcome::as_str`]: crate::AttemptOutcome::as_str
//! [`StateKind::as_str`]: crate::breaker::StateKind::as_str
//! [`RateLimit`]: crate::limit::RateLimit

use std::time::Duration;

use crate::event::Event;

#[cfg_attr(feature = "metrics", path = "metrics.rs")]
#[cfg_attr(not(feature = "metrics"), path = "metrics_off.rs")]
mod metrics;
#[cfg_attr(feature = "tracing", path = "tracing.rs")]
#[cfg_attr(not(feature = "tracing"), path = "tracing_off.rs")]
mod tracing;

pub(crate) use self::tracing::Span;

/// The span of one call of policy `policy` (`rampart.call`); nothing without `tracing`.
#[inline(always)]
pub(crate) fn call_span(policy: &str) -> Span {
    tracing::call(policy)
}

/// The span of attempt `number` with ceiling `ceiling` (`rampart.attempt`); nothing without
/// `tracing`.
#[inline(always)]
pub(crate) fn attempt_span(number: u32, ceiling: Option<Duration>) -> Span {
    tracing::attempt(number, ceiling)
}

/// What one policy reports to `tracing` and `metrics`, built with the policy.
#[derive(Clone, Default)]
pub(crate) struct Observer {
    metrics: metrics::Handles,
}

impl Observer {
    /// Whether any observability feature is compiled in: then every event is built, and
    /// every call reads the clock, even without listeners.
    pub(crate) const ENABLED: bool = cfg!(any(feature = "tracing", feature = "metrics"));

    /// The observer of policy `policy`: registers its metric handles with the current
    /// recorder.
    pub(crate) fn new(policy: &str) -> Self {
        Observer {
            metrics: metrics::Handles::new(policy),
        }
    }

    /// The call began with the effective deadline `deadline` (from its start), if any.
    #[inline(always)]
    pub(crate) fn call_began(&self, deadline: Option<Duration>) {
        tracing::call_began(deadline);
    }

    /// Reports `event`.
    #[inline(always)]
    pub(crate) fn event(&self, event: &Event<'_>) {
        self.metrics.event(event);
        tracing::event(event);
    }
}
