//! The `tracing` feature: each event as a `tracing` event, target `rampart`, at its level.

use std::future::Future;
use std::time::Duration;

use tracing::field::Empty;
use tracing::{Level, debug, info, info_span, warn};

use crate::event::Event;
use crate::outcome::AttemptOutcome;

/// A call's or an attempt's span.
#[derive(Clone)]
pub(crate) struct Span(tracing::Span);

impl Span {
    /// `future`, polled inside this span.
    #[inline]
    pub(crate) fn instrument<F: Future>(self, future: F) -> tracing::instrument::Instrumented<F> {
        tracing::Instrument::instrument(future, self.0)
    }

    /// Runs `f` inside this span.
    #[inline]
    pub(crate) fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.in_scope(f)
    }

    /// Records an attempt's `outcome` on its span.
    #[inline]
    pub(crate) fn record_outcome(&self, outcome: Option<AttemptOutcome>) {
        if let Some(outcome) = outcome {
            self.0.record("outcome", outcome.as_str());
        }
    }
}

/// The outcome of the attempt that ended last, kept for its span.
pub(crate) struct LastOutcome(Option<AttemptOutcome>);

impl LastOutcome {
    #[inline]
    pub(crate) fn new() -> Self {
        LastOutcome(None)
    }

    #[inline]
    pub(crate) fn set(&mut self, outcome: AttemptOutcome) {
        self.0 = Some(outcome);
    }

    #[inline]
    pub(crate) fn get(&self) -> Option<AttemptOutcome> {
        self.0
    }
}

/// Whether a subscriber listens to target `rampart` at all (its most permissive level
/// decides; cached per callsite, so a process without a subscriber pays one load).
#[inline]
pub(super) fn is_active() -> bool {
    tracing::enabled!(target: "rampart", Level::ERROR)
}

#[inline]
pub(super) fn current() -> Span {
    Span(tracing::Span::current())
}

#[inline]
pub(super) fn call(policy: &str) -> Span {
    Span(info_span!(
        target: "rampart",
        "rampart.call",
        policy,
        deadline = Empty,
        attempts = Empty,
        stop_reason = Empty
    ))
}

#[inline]
pub(super) fn attempt(
    call: &Span,
    number: u32,
    ceiling: Option<Duration>,
    admission_wait: Option<Duration>,
) -> Span {
    Span(info_span!(
        target: "rampart",
        parent: &call.0,
        "rampart.attempt",
        number,
        ceiling = ceiling.map(tracing::field::debug),
        admission_wait = admission_wait.map(tracing::field::debug),
        outcome = Empty
    ))
}

#[inline]
pub(super) fn stream(call: &Span, policy: &str) -> Span {
    Span(info_span!(
        target: "rampart",
        parent: &call.0,
        "rampart.stream",
        policy,
        items = Empty,
        end = Empty
    ))
}

#[inline]
pub(super) fn call_began(span: &Span, deadline: Option<Duration>) {
    if let Some(deadline) = deadline {
        span.0.record("deadline", tracing::field::debug(deadline));
    }
}

/// Logs `event`: timeout diagnostics warn, retries and breaker transitions inform, the rest
/// is debug detail.
#[inline]
pub(super) fn event(span: &Span, event: &Event<'_>) {
    let call = &span.0;
    match *event {
        Event::AttemptEnded {
            policy,
            attempt,
            outcome,
            elapsed,
        } => debug!(
            target: "rampart",
            parent: call,
            policy,
            attempt,
            outcome = outcome.as_str(),
            elapsed = ?elapsed,
            "attempt ended"
        ),
        Event::Retrying {
            policy,
            attempt,
            outcome,
            delay,
        } => info!(
            target: "rampart",
            parent: call,
            policy,
            attempt,
            outcome = outcome.as_str(),
            delay = ?delay,
            "retrying"
        ),
        Event::TimeoutIgnored {
            policy,
            attempt,
            ceiling,
            elapsed,
        } => warn!(
            target: "rampart",
            parent: call,
            policy,
            attempt,
            ceiling = ?ceiling,
            elapsed = ?elapsed,
            "timeout ignored: the attempt returned after its ceiling and its result was kept"
        ),
        Event::OrphanedWork {
            policy,
            attempt,
            ceiling,
            overrun,
        } => warn!(
            target: "rampart",
            parent: call,
            policy,
            attempt,
            ceiling = ?ceiling,
            overrun = ?overrun,
            "orphaned work: the attempt ignored its cancellation and overran its ceiling"
        ),
        Event::AttemptAbandoned {
            policy,
            attempt,
            ceiling,
            grace,
        } => debug!(
            target: "rampart",
            parent: call,
            policy,
            attempt,
            ceiling = ?ceiling,
            grace = ?grace,
            "attempt abandoned"
        ),
        Event::AttemptRefused {
            policy,
            attempt,
            by,
            retry_after,
        } => debug!(
            target: "rampart",
            parent: call,
            policy,
            attempt,
            by,
            retry_after = ?retry_after,
            "attempt refused"
        ),
        Event::BreakerTransition {
            policy,
            from,
            to,
            break_duration,
        } => info!(
            target: "rampart",
            parent: call,
            policy,
            from = from.as_str(),
            to = to.as_str(),
            break_duration = ?break_duration,
            "breaker transition"
        ),
        Event::HedgeStarted {
            policy,
            attempt,
            after,
        } => debug!(
            target: "rampart",
            parent: call, policy, attempt, after = ?after, "hedge started"),
        Event::HedgeWon { policy, attempt } => {
            debug!(
            target: "rampart",
            parent: call, policy, attempt, "hedge won");
        }
        Event::HedgeDiscarded { policy, attempt } => {
            debug!(
            target: "rampart",
            parent: call, policy, attempt, "hedge discarded");
        }
        Event::HedgeSuppressed { policy, reason } => {
            debug!(
            target: "rampart",
            parent: call, policy, reason = ?reason, "hedge suppressed");
        }
        Event::WouldReject {
            policy,
            attempt,
            by,
            retry_after,
        } => info!(
            target: "rampart",
            parent: call,
            policy,
            attempt,
            by,
            retry_after = ?retry_after,
            "dry run: would have refused this attempt, which runs anyway"
        ),
        Event::Reconfigured { policy } => info!(
            target: "rampart",
            parent: call,
            policy,
            "policy reconfigured: calls starting now use the new settings"
        ),
        Event::FallbackUsed { policy, stop } => info!(
            target: "rampart",
            parent: call,
            policy,
            stop_reason = stop.as_str(),
            "fallback answered"
        ),
        Event::StreamEnded {
            policy,
            end,
            items,
            elapsed,
        } => {
            call.record("items", items);
            call.record("end", end.as_str());
            debug!(
                target: "rampart",
                parent: call,
                policy,
                end = end.as_str(),
                items,
                elapsed = ?elapsed,
                "stream ended"
            );
        }
        Event::CallEnded {
            policy,
            stop,
            attempts,
            elapsed,
        } => {
            call.record("attempts", attempts);
            call.record("stop_reason", stop.as_str());
            debug!(
            target: "rampart",
            parent: call,
                policy,
                stop_reason = stop.as_str(),
                attempts,
                elapsed = ?elapsed,
                "call ended"
            );
        }
    }
}
