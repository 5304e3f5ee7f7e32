//! What `try_run` returns: the outcome with why the call stopped and what each attempt did.
//!
//! ```
//! # async fn demo() {
//! use rampart::{Policy, StopReason};
//!
//! let policy = Policy::builder().build().expect("valid policy");
//! let result = policy
//!     .call().try_run(async |_attempt| Ok::<_, std::io::Error>(7))
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

use crate::error::{DeadlineSource, Error};
use crate::outcome::{AttemptOutcome, StopReason};

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

/// The last [`LOGGED_ATTEMPTS`] attempts of a call, kept inline (no allocation), with the
/// count of all of them.
///
/// The log lists the attempts that ended; the count also includes the legs of a hedged call
/// that another leg's answer made moot (dropped unclassified, they have no outcome to list):
/// a call won by its hedge counts 2 attempts and lists one.
#[derive(Clone, Copy, Default)]
pub struct AttemptLog {
    /// A ring: the `n`th record pushed (0-based) lives at `n % LOGGED_ATTEMPTS`.
    records: [Option<AttemptRecord>; LOGGED_ATTEMPTS],
    /// Records pushed.
    ended: u32,
    /// Attempts made: at least `ended`, more when legs of a hedged call were dropped.
    total: u32,
}

impl AttemptLog {
    pub(crate) fn push(&mut self, record: AttemptRecord) {
        self.records[self.ended as usize % LOGGED_ATTEMPTS] = Some(record);
        self.ended = self.ended.saturating_add(1);
        self.total = self.total.max(self.ended);
    }

    /// The call made `attempts` attempts in all, those pushed and those dropped unended.
    pub(crate) fn made(&mut self, attempts: u32) {
        self.total = self.total.max(attempts);
    }

    /// The logged attempts, oldest first: the last [`LOGGED_ATTEMPTS`] of the call.
    pub fn iter(&self) -> impl Iterator<Item = &AttemptRecord> {
        let split = match self.ended as usize {
            total if total > LOGGED_ATTEMPTS => total % LOGGED_ATTEMPTS,
            _ => 0,
        };
        let (newer, older) = self.records.split_at(split);
        older.iter().chain(newer).flatten()
    }

    /// The last attempt, if any ran.
    pub fn last(&self) -> Option<&AttemptRecord> {
        let index = (self.ended as usize).checked_sub(1)? % LOGGED_ATTEMPTS;
        self.records[index].as_ref()
    }

    /// Attempts made, including those the log no longer keeps and the legs of a hedged call
    /// dropped unended.
    pub fn total(&self) -> u32 {
        self.total
    }
}

impl fmt::Debug for AttemptLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(number: u32) -> AttemptRecord {
        AttemptRecord {
            number,
            outcome: AttemptOutcome::Transient,
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn log_keeps_the_last_attempts_oldest_first_and_counts_all() {
        let mut log = AttemptLog::default();
        for number in 1..=6 {
            log.push(record(number));
        }
        let kept: Vec<u32> = log.iter().map(|r| r.number).collect();
        assert_eq!(kept, [3, 4, 5, 6]);
        assert_eq!(log.total(), 6);
        assert_eq!(log.last().map(|r| r.number), Some(6));
    }

    #[test]
    fn log_of_fewer_attempts_than_it_keeps_lists_them_all() {
        let mut log = AttemptLog::default();
        log.push(record(1));
        log.push(record(2));
        let kept: Vec<u32> = log.iter().map(|r| r.number).collect();
        assert_eq!(kept, [1, 2]);
        assert_eq!(AttemptLog::default().last(), None);
    }

    #[test]
    fn log_counts_dropped_hedge_legs_but_lists_only_the_attempts_that_ended() {
        let mut log = AttemptLog::default();
        log.push(record(2));
        log.made(2);
        assert_eq!(log.total(), 2);
        let kept: Vec<u32> = log.iter().map(|r| r.number).collect();
        assert_eq!(kept, [2]);
        assert_eq!(log.last().map(|r| r.number), Some(2));
    }
}

/// A finished call: its outcome, why it stopped, and its attempts.
#[derive(Debug)]
pub struct CallResult<T, E> {
    pub(crate) outcome: Result<T, Error<E>>,
    pub(crate) stop: StopReason,
    pub(crate) log: AttemptLog,
    /// The deadline that applied (from the call's start) and where it came from (`None` for
    /// a drain's grace).
    pub(crate) deadline: Option<(Duration, Option<DeadlineSource>)>,
    pub(crate) fell_back: bool,
}

impl<T, E> CallResult<T, E> {
    /// Why the call stopped: what the policy decided, also when a
    /// [fallback](crate::fallback) then answered.
    pub fn stop(&self) -> StopReason {
        self.stop
    }

    /// Whether a [fallback](crate::fallback) answered (its value or its error is the
    /// outcome).
    pub fn fell_back(&self) -> bool {
        self.fell_back
    }

    /// The deadline that applied to the call, as a timeout (the time from the call's start to
    /// it): the earliest of the policy's own, the one the call was given or inherited (see
    /// [`deadline_source`](Self::deadline_source)) and a drain's grace; `None` when nothing
    /// bounded the call. What a `DeadlineExceeded` would have named as its `timeout`.
    pub fn timeout(&self) -> Option<Duration> {
        self.deadline.map(|(span, _)| span)
    }

    /// Where the deadline of [`timeout`](Self::timeout) came from: the policy's own, or one
    /// the call was given or inherited from its caller; `None` when there was none, or when a
    /// drain's grace was the earliest bound.
    pub fn deadline_source(&self) -> Option<DeadlineSource> {
        self.deadline.and_then(|(_, source)| source)
    }

    /// Attempts made, the legs of a hedged call included (also those dropped when another
    /// leg answered).
    pub fn attempts(&self) -> u32 {
        self.log.total()
    }

    /// The last attempts of the call (see [`AttemptLog`]).
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
    ///
    /// # Errors
    ///
    /// The call's [`Error`], as `run` would have returned it.
    pub fn into_result(self) -> Result<T, Error<E>> {
        self.outcome
    }
}
