//! The vocabulary that events, results and metrics share: why a call stopped
//! ([`StopReason`]), how one attempt ended ([`AttemptOutcome`]),
//!
//! and why a stream opened by [`Call::stream`](crate::Call::stream) ended
//! ([`StreamEnd`]). Their one path is this module (the first two are also at the crate root).
//! Each has a stable lowercase name, [`as_str`](StopReason::as_str), for logs and metric
//! labels.
//!
//! ```
//! use rampart::{AttemptOutcome, StopReason};
//!
//! assert_eq!(StopReason::DeadlineExceeded.as_str(), "deadline_exceeded");
//! assert_eq!(AttemptOutcome::TimedOut.to_string(), "timed_out");
//! ```

use std::fmt;

/// Why a call stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// An attempt succeeded.
    Succeeded,
    /// An attempt's outcome was classified permanent.
    Permanent,
    /// `max_attempts` attempts were made.
    AttemptsExhausted,
    /// The deadline ran out, or the next backoff would not fit in it.
    DeadlineExceeded,
    /// The retry budget refused the next retry.
    BudgetExhausted,
    /// The circuit breaker refused.
    DependencyUnavailable,
    /// An admission component refused.
    Overloaded,
    /// The process is draining.
    Draining,
    /// The caller cancelled.
    Cancelled,
    /// A dynamic configuration value was invalid for this call.
    Config,
}

impl StopReason {
    /// A stable lowercase name for logs and metric labels: `succeeded`, `permanent`,
    /// `attempts_exhausted`, `deadline_exceeded`, `budget_exhausted`,
    /// `dependency_unavailable`, `overloaded`, `draining`, `cancelled`, `config`.
    pub const fn as_str(self) -> &'static str {
        match self {
            StopReason::Succeeded => "succeeded",
            StopReason::Permanent => "permanent",
            StopReason::AttemptsExhausted => "attempts_exhausted",
            StopReason::DeadlineExceeded => "deadline_exceeded",
            StopReason::BudgetExhausted => "budget_exhausted",
            StopReason::DependencyUnavailable => "dependency_unavailable",
            StopReason::Overloaded => "overloaded",
            StopReason::Draining => "draining",
            StopReason::Cancelled => "cancelled",
            StopReason::Config => "config",
        }
    }
}

/// In words, for messages (`deadline exceeded`); [`StopReason::as_str`] is the label form.
impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Succeeded => "succeeded",
            StopReason::Permanent => "permanent failure",
            StopReason::AttemptsExhausted => "attempts exhausted",
            StopReason::DeadlineExceeded => "deadline exceeded",
            StopReason::BudgetExhausted => "budget exhausted",
            StopReason::DependencyUnavailable => "dependency unavailable",
            StopReason::Overloaded => "overloaded",
            StopReason::Draining => "draining",
            StopReason::Cancelled => "cancelled",
            StopReason::Config => "invalid configuration",
        })
    }
}

/// How one attempt ended, as the executor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// Classified [`Verdict::Ok`](crate::Verdict::Ok).
    Ok,
    /// Classified transient.
    Transient,
    /// Classified throttled.
    Throttled,
    /// Classified permanent.
    Permanent,
    /// Classified refused (a self-imposed refusal).
    Refused,
    /// Ran past its ceiling (the executor's own timeout outcome, transient).
    TimedOut,
    /// The caller cancelled while it ran.
    Cancelled,
}

/// The outcome of an attempt whose answer was classified `verdict` (an attempt the executor
/// cut at its ceiling, or that admission refused, has its own outcome instead).
impl From<crate::Verdict> for AttemptOutcome {
    #[inline]
    fn from(verdict: crate::Verdict) -> AttemptOutcome {
        match verdict {
            crate::Verdict::Ok => AttemptOutcome::Ok,
            crate::Verdict::Transient => AttemptOutcome::Transient,
            crate::Verdict::Throttled { .. } => AttemptOutcome::Throttled,
            crate::Verdict::Permanent => AttemptOutcome::Permanent,
            crate::Verdict::Refused { .. } => AttemptOutcome::Refused,
        }
    }
}

impl AttemptOutcome {
    /// A stable lowercase name for logs and metric labels: `ok`, `transient`, `throttled`,
    /// `permanent`, `refused`, `timed_out`, `cancelled`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Ok => "ok",
            AttemptOutcome::Transient => "transient",
            AttemptOutcome::Throttled => "throttled",
            AttemptOutcome::Permanent => "permanent",
            AttemptOutcome::Refused => "refused",
            AttemptOutcome::TimedOut => "timed_out",
            AttemptOutcome::Cancelled => "cancelled",
        }
    }
}

/// The [`as_str`](AttemptOutcome::as_str) name.
impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
/// Why a stream opened by [`Call::stream`](crate::Call::stream) ended: the `end` of
/// [`Event::StreamEnded`](crate::Event::StreamEnded) and the `reason` of the
/// `rampart.stream.ended` metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamEnd {
    /// The source ended on its own (`completed`).
    Completed,
    /// An item was an error, delivered as [`Error::Inner`](crate::Error::Inner) (`failed`).
    Failed,
    /// No item arrived within the idle timeout: [`Error::IdleTimeout`](crate::Error::IdleTimeout) (`idle_timeout`).
    IdleTimeout,
    /// The call's deadline passed: [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded) (`deadline_exceeded`).
    DeadlineExceeded,
    /// The policy's drain grace passed: [`Error::Rejected`](crate::Error::Rejected) as draining (`draining`).
    Draining,
    /// The caller's token fired: [`Error::Cancelled`](crate::Error::Cancelled) (`cancelled`).
    Cancelled,
    /// The consumer dropped the stream before it ended (`dropped`).
    Dropped,
}

impl StreamEnd {
    /// The stable name, as metrics and spans carry it.
    pub const fn as_str(self) -> &'static str {
        match self {
            StreamEnd::Completed => "completed",
            StreamEnd::Failed => "failed",
            StreamEnd::IdleTimeout => "idle_timeout",
            StreamEnd::DeadlineExceeded => "deadline_exceeded",
            StreamEnd::Draining => "draining",
            StreamEnd::Cancelled => "cancelled",
            StreamEnd::Dropped => "dropped",
        }
    }
}
impl fmt::Display for StreamEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
