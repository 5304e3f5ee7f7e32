//! Events and hooks: what a policy tells the outside world about its calls.
//!
//! A listener sees every [`Event`]: one per attempt, one per retry, the timeout diagnostics,
//! and exactly one terminal [`Event::CallEnded`] per call. Hooks ([`on_retry`], [`on_timeout`])
//! are the narrower, typed form of the same. Listeners and hooks must be `Send + Sync`, and may
//! run concurrently when a policy is shared. The data they are handed is borrowed, so it cannot
//! be retained. Listeners and `on_retry` are synchronous; `on_timeout` may answer with a future
//! ([`MaybeAsync`](crate::timeout::MaybeAsync)), which an async call awaits.
//!
//! A listener or hook that panics (or whose future panics) never changes a call's outcome: the
//! panic is caught and reported to the policy's [`on_callback_error`] diagnostics callback (and
//! dropped silently if there is none).
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! use rampart::{Event, Policy};
//!
//! let retries = Arc::new(AtomicU32::new(0));
//! let seen = retries.clone();
//! let policy = Policy::builder()
//!     .listener(move |event: &Event<'_>| {
//!         if let Event::Retrying { .. } = event {
//!             seen.fetch_add(1, Ordering::Relaxed);
//!         }
//!     })
//!     .build()
//!     .expect("valid policy");
//! # drop(policy);
//! ```
//!
//! | event | when |
//! |---|---|
//! | `AttemptEnded` | every attempt, with its outcome and duration |
//! | `Retrying` | before each backoff sleep, with the delay |
//! | `TimeoutIgnored` | an attempt finished after its ceiling fired, and its result was kept |
//! | `OrphanedWork` | an attempt that was awaited past its ceiling overran it by more than 1 s |
//! | `AttemptAbandoned` | an attempt was dropped at its ceiling plus grace |
//! | `AttemptRefused` | admission refused an attempt (it did not run) |
//! | `BreakerTransition` | the policy's breaker opened, went half-open, closed, was isolated or reset |
//! | `HedgeStarted`, `HedgeWon`, `HedgeDiscarded`, `HedgeSuppressed` | a hedged call's legs |
//! | `CallEnded` | exactly once per call, with its stop reason |
//! | `WouldReject` | a dry-run breaker or admission component would have refused an attempt that runs anyway |
//! | `FallbackUsed` | a [fallback](crate::fallback) answered the call, after its `CallEnded` |
//! | `StreamEnded` | a stream opened by [`Call::stream`](crate::Call::stream) ended (after its call's `CallEnded`), with why and the items it delivered |
//! | `Reconfigured` | [`Policy::reconfigure`](crate::Policy::reconfigure) replaced the policy's settings (outside any call) |
//!
//! [`on_retry`]: crate::PolicyBuilder::on_retry
//! [`on_timeout`]: crate::PolicyBuilder::on_timeout
//! [`on_callback_error`]: crate::PolicyBuilder::on_callback_error

use std::time::Duration;

use crate::breaker::StateKind;
use crate::hedge::Suppressed;
use crate::outcome::{AttemptOutcome, StopReason, StreamEnd};

/// Something a policy did, handed to its listeners.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An attempt ended.
    AttemptEnded {
        /// The policy's name.
        policy: &'a str,
        /// The attempt's number, 1-based.
        attempt: u32,
        /// How it ended.
        outcome: AttemptOutcome,
        /// How long it ran.
        elapsed: Duration,
    },
    /// The executor is about to sleep, then try again.
    Retrying {
        /// The policy's name.
        policy: &'a str,
        /// The attempt that just failed.
        attempt: u32,
        /// How it failed.
        outcome: AttemptOutcome,
        /// The backoff about to be slept.
        delay: Duration,
    },
    /// An attempt finished after its ceiling fired, and its result was delivered anyway.
    TimeoutIgnored {
        /// The policy's name.
        policy: &'a str,
        /// The attempt.
        attempt: u32,
        /// Its ceiling.
        ceiling: Duration,
        /// How long it actually ran.
        elapsed: Duration,
    },
    /// An attempt that was awaited past its ceiling finally returned more than 1 s late:
    /// something in it ignores its token.
    OrphanedWork {
        /// The policy's name.
        policy: &'a str,
        /// The attempt.
        attempt: u32,
        /// Its ceiling.
        ceiling: Duration,
        /// How far past the ceiling it ran.
        overrun: Duration,
    },
    /// An attempt was dropped at its ceiling plus grace (abandon mode).
    AttemptAbandoned {
        /// The policy's name.
        policy: &'a str,
        /// The attempt.
        attempt: u32,
        /// Its ceiling.
        ceiling: Duration,
        /// The grace it was given after the ceiling.
        grace: Duration,
    },
    /// Admission refused an attempt (it did not run); the refusal stands in for the attempt's
    /// outcome.
    AttemptRefused {
        /// The policy's name.
        policy: &'a str,
        /// The attempt.
        attempt: u32,
        /// The refusing component.
        by: &'static str,
        /// When it expects room.
        retry_after: Option<Duration>,
    },
    /// The policy's circuit breaker changed state.
    BreakerTransition {
        /// The policy's name.
        policy: &'a str,
        /// The state it left.
        from: StateKind,
        /// The state it entered.
        to: StateKind,
        /// How long it stays open, when it opened.
        break_duration: Option<Duration>,
    },
    /// A hedged call launched another leg.
    HedgeStarted {
        /// The policy's name.
        policy: &'a str,
        /// The new leg's attempt number.
        attempt: u32,
        /// Time from the start of the call.
        after: Duration,
    },
    /// A leg of a hedged call won (only when more than one leg ran).
    HedgeWon {
        /// The policy's name.
        policy: &'a str,
        /// The winning leg's attempt number.
        attempt: u32,
    },
    /// A losing leg was cancelled and dropped, unclassified.
    HedgeDiscarded {
        /// The policy's name.
        policy: &'a str,
        /// The dropped leg's attempt number.
        attempt: u32,
    },
    /// A hedge was not armed or not launched, and why.
    HedgeSuppressed {
        /// The policy's name.
        policy: &'a str,
        /// Why.
        reason: Suppressed,
    },
    /// The call ended. Exactly one per call.
    CallEnded {
        /// The policy's name.
        policy: &'a str,
        /// Why it stopped.
        stop: StopReason,
        /// Attempts made.
        attempts: u32,
        /// Time from the start of the call (zero when the policy reads no clock).
        elapsed: Duration,
    },
    /// A component in dry-run mode would have refused this attempt, and let it run: a
    /// [dry-run breaker](crate::breaker::BreakerBuilder::dry_run) or an admission component
    /// wrapped in [`limit::DryRun`](crate::limit::DryRun).
    WouldReject {
        /// The policy's name.
        policy: &'a str,
        /// The attempt that ran anyway.
        attempt: u32,
        /// The component that would have refused: `"breaker"`, or the admission component's
        /// [`Refusal::by`](crate::admit::Refusal::by).
        by: &'static str,
        /// The retry-after it would have given.
        retry_after: Option<Duration>,
    },
    /// A [fallback](crate::fallback) answered a call that ended with an error; after the
    /// call's `CallEnded`.
    FallbackUsed {
        /// The policy's name.
        policy: &'a str,
        /// Why the call stopped (what the fallback replaced).
        stop: StopReason,
    },
    /// A stream opened by [`Call::stream`](crate::Call::stream) ended: exactly once per
    /// opened stream, after the `CallEnded` of the call that opened it.
    StreamEnded {
        /// The policy's name.
        policy: &'a str,
        /// Why it ended.
        end: StreamEnd,
        /// Items delivered to the consumer (the first included; not the error that ended it).
        items: u64,
        /// Time from the start of the call that opened it (zero when the policy reads no
        /// clock).
        elapsed: Duration,
    },
    /// [`Policy::reconfigure`](crate::Policy::reconfigure) replaced the policy's live
    /// settings; calls that start from now on use them. Not part of any call.
    Reconfigured {
        /// The policy's name.
        policy: &'a str,
    },
}

/// Handed to an [`on_retry`](crate::PolicyBuilder::on_retry) hook before each backoff.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RetryInfo<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// The attempt that failed.
    pub attempt: u32,
    /// How it failed.
    pub outcome: AttemptOutcome,
    /// The backoff about to be slept.
    pub delay: Duration,
}

/// Handed to an [`on_timeout`](crate::PolicyBuilder::on_timeout) hook when the executor's
/// attempt ceiling decided an attempt's outcome.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct TimeoutInfo<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// The attempt that timed out.
    pub attempt: u32,
    /// The ceiling it ran into.
    pub timeout: Duration,
}

/// A listener or hook failed; handed to the diagnostics callback.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CallbackFailure<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// Which callback: `"listener"`, `"on_retry"` or `"on_timeout"`.
    pub callback: &'static str,
    /// The panic message, when it was a string.
    pub message: &'a str,
}
