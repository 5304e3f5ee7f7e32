//! The states of a breaker, what one attempt tells it, and the changes it reports.

use std::fmt;
use std::time::Duration;

use crate::outcome::AttemptOutcome;

#[cfg(doc)]
use super::{Breaker, BreakerBuilder};

/// Why the breaker refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// Time left in the break: `None` when isolated, or when half-open with every probe slot
    /// taken (it reopens or closes when a probe ends, or when the probes outlive
    /// [`probe_timeout`](BreakerBuilder::probe_timeout), not at a known time).
    pub retry_after: Option<Duration>,
    /// The transition this refusal caused: half-open → open when the probes in flight had
    /// outlived [`probe_timeout`](BreakerBuilder::probe_timeout) (they count as failed), else
    /// `None`. Report it like any other transition.
    pub transition: Option<Transition>,
}

/// What one attempt says about the dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// It answered (`Ok`). Resets the consecutive-failure count, unless slower than
    /// [`slow_call`](BreakerBuilder::slow_call), which makes it a failure.
    Success,
    /// It failed the way a struggling dependency fails: a transient error or an attempt timeout.
    Failure,
    /// Says nothing about its health: throttled, a permanent error, the caller cancelled or
    /// refused itself. Neither a failure nor a success.
    Ignored,
}

/// What an attempt's outcome says to a breaker, as the executor records it: an answer is a
/// success; a transient failure or a timeout is a failure; anything else (throttled, a
/// permanent error, a refusal, the caller's cancellation) says nothing. The one rule, for an
/// attempt's evidence recorded late too ([`Breaker::record_late`]).
///
/// ```
/// use rampart::breaker::Evidence;
/// use rampart::{AttemptOutcome, Verdict};
///
/// assert_eq!(Evidence::from(AttemptOutcome::TimedOut), Evidence::Failure);
/// let throttled = Verdict::Throttled { retry_after: None };
/// assert_eq!(Evidence::from(AttemptOutcome::from(throttled)), Evidence::Ignored);
/// ```
impl From<AttemptOutcome> for Evidence {
    #[inline]
    fn from(outcome: AttemptOutcome) -> Evidence {
        match outcome {
            AttemptOutcome::Ok => Evidence::Success,
            AttemptOutcome::Transient | AttemptOutcome::TimedOut => Evidence::Failure,
            _ => Evidence::Ignored,
        }
    }
}

/// The state of a breaker at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are rejected for the rest of the break.
    Open {
        /// Time left in the break; zero once it has elapsed and the next acquire will probe.
        remaining: Duration,
    },
    /// A few probe calls go through to test the dependency.
    HalfOpen,
    /// Forced open by [`Breaker::isolate`] until [`Breaker::release`] (or
    /// [`reset`](Breaker::reset)): every call is rejected.
    Isolated,
    /// Forced closed by [`Breaker::force_closed`] until [`Breaker::release`] (or
    /// [`reset`](Breaker::reset)): every call goes through, outcomes are still recorded, and
    /// the breaker never opens.
    ForcedClosed,
}

impl BreakerState {
    /// Which state this is, without the details.
    pub fn kind(&self) -> StateKind {
        match self {
            BreakerState::Closed => StateKind::Closed,
            BreakerState::Open { .. } => StateKind::Open,
            BreakerState::HalfOpen => StateKind::HalfOpen,
            BreakerState::Isolated => StateKind::Isolated,
            BreakerState::ForcedClosed => StateKind::ForcedClosed,
        }
    }
}

/// A change of state, for the caller to report (the breaker emits nothing itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// The state it left.
    pub from: StateKind,
    /// The state it entered.
    pub to: StateKind,
    /// The break it opened for, jitter applied: set exactly when `to` is [`StateKind::Open`].
    pub break_duration: Option<Duration>,
}

/// The states, without their details.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// Calls go through.
    Closed,
    /// Calls are rejected until the break ends.
    Open,
    /// Probe calls test the dependency.
    HalfOpen,
    /// Forced open until released.
    Isolated,
    /// Forced closed until released.
    ForcedClosed,
}

impl StateKind {
    /// A stable lowercase name for logs and metric labels: `closed`, `open`, `half_open`,
    /// `isolated`, `forced_closed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            StateKind::Closed => "closed",
            StateKind::Open => "open",
            StateKind::HalfOpen => "half_open",
            StateKind::Isolated => "isolated",
            StateKind::ForcedClosed => "forced_closed",
        }
    }
}

/// The [`as_str`](StateKind::as_str) name.
impl fmt::Display for StateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
