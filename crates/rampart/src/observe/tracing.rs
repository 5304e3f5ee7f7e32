//! The `tracing` feature: each event as a `tracing` event, target `rampart`, at its level.

use tracing::{debug, info, warn};

use crate::event::Event;

/// Logs `event`: timeout diagnostics warn, retries and breaker transitions inform, the rest
/// is debug detail.
#[inline]
pub(super) fn event(event: &Event<'_>) {
    match *event {
        Event::AttemptEnded {
            policy,
            attempt,
            outcome,
            elapsed,
        } => debug!(
            target: "rampart",
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
        } => debug!(target: "rampart", policy, attempt, after = ?after, "hedge started"),
        Event::HedgeWon { policy, attempt } => {
            debug!(target: "rampart", policy, attempt, "hedge won");
        }
        Event::HedgeDiscarded { policy, attempt } => {
            debug!(target: "rampart", policy, attempt, "hedge discarded");
        }
        Event::HedgeSuppressed { policy, reason } => {
            debug!(target: "rampart", policy, reason = ?reason, "hedge suppressed");
        }
        Event::CallEnded {
            policy,
            stop,
            attempts,
            elapsed,
        } => debug!(
            target: "rampart",
            policy,
            stop_reason = stop.as_str(),
            attempts,
            elapsed = ?elapsed,
            "call ended"
        ),
    }
}
