//! What `try_run` returns: the outcome with why the call stopped and what each attempt did.
//!
//! ```
//! # async fn demo() {
//! use rampart::{Policy, StopReason};
//!
//! let policy = Policy::builder().build().expect("valid policy");
//! let result = policy
//!     .try_run(async |_attempt| Ok::<_, std::io::Error>(7))
//!     .await
//!     .expect("not cancelled");
//! assert_eq!(result.stop(), StopReason::Succeeded);
//! assert_eq!(result.attempts(), 1);
//! assert_eq!(result.into_result().ok(), Some(7));
//! # }
//! ```
//!
//! Caller cancellation is still an error here ([`Cancelled`]): a caller that cancelled is not
//! waiting for a report.

use std::fmt;
use std::time::Duration;

use crate::error::Error;
use crate::event::AttemptOutcome;

/// Why a call stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// The caller cancelled the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cancelled;

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("call cancelled by the caller")
    }
}

impl std::error::Error for Cancelled {}

/// One attempt, as the log remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The attempt's number, 1-based.
    pub number: u32,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// How long it ran.
    pub elapsed: Duration,
}

/// How many attempts the log keeps inline.
pub const LOGGED_ATTEMPTS: usize = 4;

/// The first [`LOGGED_ATTEMPTS`] attempts of a call, kept inline (no allocation).
#[derive(Clone, Copy, Default)]
pub struct AttemptLog {
    records: [Option<AttemptRecord>; LOGGED_ATTEMPTS],
    total: u32,
}

impl AttemptLog {
    pub(crate) fn push(&mut self, record: AttemptRecord) {
        if let Some(slot) = self.records.get_mut(self.total as usize) {
            *slot = Some(record);
        }
        self.total += 1;
    }

    /// The logged attempts, first first.
    pub fn iter(&self) -> impl Iterator<Item = &AttemptRecord> {
        self.records.iter().flatten()
    }

    /// Attempts made, including those beyond what the log kept.
    pub fn total(&self) -> u32 {
        self.total
    }
}

impl fmt::Debug for AttemptLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A finished call: its outcome, why it stopped, and its attempts.
#[derive(Debug)]
pub struct CallResult<T, E> {
    pub(crate) outcome: Result<T, Error<E>>,
    pub(crate) stop: StopReason,
    pub(crate) log: AttemptLog,
}

impl<T, E> CallResult<T, E> {
    /// Why the call stopped.
    pub fn stop(&self) -> StopReason {
        self.stop
    }

    /// Attempts made.
    pub fn attempts(&self) -> u32 {
        self.log.total()
    }

    /// The first attempts of the call.
    pub fn log(&self) -> &AttemptLog {
        &self.log
    }

    /// The value, if the call returned one (a value classified transient counts: it is
    /// returned, not turned into an error).
    pub fn value(&self) -> Option<&T> {
        self.outcome.as_ref().ok()
    }

    /// The error, if the call failed.
    pub fn error(&self) -> Option<&Error<E>> {
        self.outcome.as_ref().err()
    }

    /// The outcome, as `run` would have returned it.
    pub fn into_result(self) -> Result<T, Error<E>> {
        self.outcome
    }
}
