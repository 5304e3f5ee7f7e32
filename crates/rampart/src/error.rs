//! Errors: what went wrong with a call, with the numbers that explain it.
//!
//! A call fails with one [`Error<E>`]. rampart invents an error only for what it decided itself
//! (the caller cancelled, an attempt ran past its ceiling, the deadline ran out, a component
//! refused); the callback's own error comes back unchanged in [`Error::Inner`]. Messages are
//! lowercase and give the values involved:
//!
//! ```
//! use std::time::Duration;
//! use rampart::Error;
//!
//! let e: Error<std::io::Error> = Error::AttemptTimeout { timeout: Duration::from_secs(5), attempts: 1 };
//! assert_eq!(e.to_string(), "attempt timed out at its 5s ceiling after 1 attempt");
//! assert!(e.is_timeout());
//! ```
//!
//! A policy that cannot be built, or a dynamic value that is invalid when a call resolves it,
//! is a [`ConfigError`]: it lists every problem at once, each naming the field and the value.
//!
//! Which errors are worth retrying later? [`Error::Cancelled`] and [`Error::Config`] never are;
//! timeouts and rejections usually are, after [`Error::retry_after`] when it is given.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// Why a call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error<E> {
    /// The callback's own error, unchanged: the last attempt's, when retries ran out or the
    /// classifier called it permanent.
    Inner(E),
    /// The caller cancelled (its token fired). Never retried, never counted.
    Cancelled,
    /// The last attempt ran past its ceiling, `min(attempt timeout, time left)`.
    AttemptTimeout {
        /// The ceiling that applied to the last attempt.
        timeout: Duration,
        /// Attempts made, the timed-out one included.
        attempts: u32,
    },
    /// The call's deadline ran out, or the backoff before the next attempt would not fit in it.
    DeadlineExceeded {
        /// The deadline that applied, as a timeout: the time from the start of the call to it
        /// (the clamped one when an inherited deadline was shorter than the policy's). A
        /// deadline is an instant; this is its distance from the call's start.
        timeout: Duration,
        /// Which deadline that was: the policy's own, or the one inherited from the caller.
        source: DeadlineSource,
        /// Attempts made.
        attempts: u32,
        /// When the call ended because the next backoff would not fit in the time left: that
        /// backoff, the time a retry needed after it, and the time that was left.
        unfit: Option<Unfit>,
        /// The last attempt's failure, if an attempt ran (also [`source`](StdError::source)).
        last: Option<Box<Error<E>>>,
    },
    /// A [stream](crate::stream) delivered no item within its idle timeout: the source went
    /// silent between items (never before the first, which the attempt timeout bounds).
    IdleTimeout {
        /// The idle timeout that applied.
        idle: Duration,
        /// Items the stream had delivered.
        items: u64,
    },
    /// A component refused the call or its next attempt.
    Rejected {
        /// Which component refused.
        reason: RejectReason,
        /// When it expects to have room again, if it knows.
        retry_after: Option<Duration>,
        /// Attempts made before the refusal, the ones admission refused included.
        attempts: u32,
        /// Of `attempts`, those that admission refused before the callback ran: nothing was
        /// sent for them. `attempts - refused` attempts reached the dependency.
        refused: u32,
        /// The last attempt's failure, if an attempt ran (also [`source`](StdError::source)).
        last: Option<Box<Error<E>>>,
    },
    /// The policy's configuration is invalid for this call (a dynamic value it resolved).
    Config(ConfigError),
}

/// A backoff that was not slept because it would not fit in the time left before the
/// deadline: with the time a retry needs added (the policy's
/// [`min_attempt_time`](crate::PolicyBuilder::min_attempt_time), or the typical attempt
/// latency when longer), a retry started then could not finish.
///
/// ```
/// # fn demo(error: &rampart::Error<std::io::Error>) {
/// if let rampart::Error::DeadlineExceeded { unfit: Some(unfit), .. } = error {
///     println!(
///         "a retry needed {:?} after a backoff of {:?}; {:?} were left",
///         unfit.needed(),
///         unfit.delay(),
///         unfit.left()
///     );
/// }
/// # }
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Unfit {
    // In nanoseconds (saturating at `u64::MAX`, some 584 years): three durations and what set
    // the third take the room of two `Duration`s, so that `Error<E>` stays 64 bytes (and the
    // call futures that hold one within their size budgets).
    delay: u64,
    left: u64,
    needed: u64,
    by: Needed,
}

/// What set the time a retry needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needed {
    /// The policy's `min_attempt_time` (also when the typical latency is as long).
    MinAttemptTime,
    /// The typical attempt latency, longer than `min_attempt_time`.
    TypicalLatency,
}

impl Unfit {
    /// The backoff `delay` that would not fit in the `left` before the deadline, with the
    /// `needed` a retry takes: the policy's `min_attempt_time` when `floor`, else the typical
    /// latency.
    #[cold]
    pub(crate) fn new(delay: Duration, left: Duration, needed: Duration, floor: bool) -> Self {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Unfit {
            delay: nanos(delay),
            left: nanos(left),
            needed: nanos(needed),
            by: if floor {
                Needed::MinAttemptTime
            } else {
                Needed::TypicalLatency
            },
        }
    }

    /// The backoff the call would have slept.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay)
    }

    /// The time that was left before the deadline.
    pub fn left(&self) -> Duration {
        Duration::from_nanos(self.left)
    }

    /// The time a retry was assumed to need after the backoff: the policy's
    /// [`min_attempt_time`](crate::PolicyBuilder::min_attempt_time), or the dependency's
    /// typical attempt latency as measured when that is longer; zero when neither is set or
    /// known (then the backoff alone did not fit).
    pub fn needed(&self) -> Duration {
        Duration::from_nanos(self.needed)
    }

    /// Whether [`needed`](Self::needed) is the policy's
    /// [`min_attempt_time`](crate::PolicyBuilder::min_attempt_time) (the floor), not the
    /// typical latency measured.
    pub fn is_min_attempt_time(&self) -> bool {
        self.by == Needed::MinAttemptTime
    }
}

impl fmt::Debug for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unfit")
            .field("delay", &self.delay())
            .field("left", &self.left())
            .field("needed", &self.needed())
            .field("min_attempt_time", &self.is_min_attempt_time())
            .finish()
    }
}

impl fmt::Display for Unfit {
    /// `the next backoff of 0ns and the 10ms min_attempt_time would not fit in the 5ms left`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (delay, left, needed) = (self.delay(), self.left(), self.needed());
        write!(f, "the next backoff of {delay:?} ")?;
        match self.by {
            _ if needed.is_zero() => {}
            Needed::MinAttemptTime => write!(f, "and the {needed:?} min_attempt_time ")?,
            Needed::TypicalLatency => {
                write!(f, "and the {needed:?} an attempt typically takes ")?;
            }
        }
        write!(f, "would not fit in the {left:?} left")
    }
}

/// Where the deadline that ended a call came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadlineSource {
    /// The policy's own: the call's start plus its [`total_timeout`](crate::PolicyBuilder::total_timeout).
    Policy,
    /// The caller's deadline: the ambient one, or one given to the call with
    /// [`Call::deadline`](crate::Call::deadline); the time the caller upstream was still waiting.
    Inherited,
}

/// The component that refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// The retry budget had no token for this retry.
    BudgetExhausted,
    /// The circuit breaker is open (or its half-open probes are taken).
    DependencyUnavailable,
    /// An admission component (limiter, shedder) refused every attempt it was asked about.
    Overloaded,
    /// The process is draining: no further attempts start.
    Draining,
}

impl RejectReason {
    /// A stable lowercase name for logs and metric labels: `budget_exhausted`,
    /// `dependency_unavailable`, `overloaded`, `draining` (the [`StopReason`] of the call it
    /// ends has the same name).
    ///
    /// [`StopReason`]: crate::StopReason
    pub const fn as_str(self) -> &'static str {
        match self {
            RejectReason::BudgetExhausted => "budget_exhausted",
            RejectReason::DependencyUnavailable => "dependency_unavailable",
            RejectReason::Overloaded => "overloaded",
            RejectReason::Draining => "draining",
        }
    }
}

/// In words, for messages (`circuit breaker open`); [`RejectReason::as_str`] is the label form.
impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RejectReason::BudgetExhausted => "retry budget exhausted",
            RejectReason::DependencyUnavailable => "circuit breaker open",
            RejectReason::Overloaded => "admission refused",
            RejectReason::Draining => "process draining",
        })
    }
}

impl<E> Error<E> {
    /// Whether the caller cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled)
    }

    /// Whether a time bound ended the call: an attempt timeout, the deadline, or a stream's
    /// idle timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            Error::AttemptTimeout { .. }
                | Error::DeadlineExceeded { .. }
                | Error::IdleTimeout { .. }
        )
    }

    /// Whether a component refused the call.
    pub fn is_rejected(&self) -> bool {
        matches!(self, Error::Rejected { .. })
    }

    /// The callback's own error, if that is what this is.
    pub fn inner(&self) -> Option<&E> {
        match self {
            Error::Inner(e) => Some(e),
            _ => None,
        }
    }

    /// The callback's own error, if that is what this is.
    pub fn into_inner(self) -> Option<E> {
        match self {
            Error::Inner(e) => Some(e),
            _ => None,
        }
    }

    /// The last attempt's failure carried by a deadline or rejection error, else `self`.
    pub fn last(&self) -> &Error<E> {
        match self {
            Error::DeadlineExceeded { last: Some(l), .. }
            | Error::Rejected { last: Some(l), .. } => l,
            _ => self,
        }
    }

    /// Attempts made, when the error knows.
    pub fn attempts(&self) -> Option<u32> {
        match self {
            Error::AttemptTimeout { attempts, .. }
            | Error::DeadlineExceeded { attempts, .. }
            | Error::Rejected { attempts, .. } => Some(*attempts),
            _ => None,
        }
    }

    /// When to try again, if a refusing component said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Rejected { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

struct Attempts(u32);

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1 => f.write_str("1 attempt"),
            n => write!(f, "{n} attempts"),
        }
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Inner(e) => e.fmt(f),
            Error::Cancelled => f.write_str("call cancelled by the caller"),
            Error::AttemptTimeout { timeout, attempts } => write!(
                f,
                "attempt timed out at its {timeout:?} ceiling after {}",
                Attempts(*attempts)
            ),
            Error::DeadlineExceeded {
                timeout: deadline,
                source,
                attempts,
                unfit,
                ..
            } => {
                let inherited = match source {
                    DeadlineSource::Policy => "",
                    DeadlineSource::Inherited => "inherited ",
                };
                if *attempts == 0 {
                    write!(
                        f,
                        "{inherited}deadline of {deadline:?} had passed before the first attempt"
                    )?;
                } else {
                    write!(
                        f,
                        "{inherited}deadline of {deadline:?} exceeded after {}",
                        Attempts(*attempts)
                    )?;
                }
                match unfit {
                    Some(unfit) => write!(f, ": {unfit}"),
                    None => Ok(()),
                }
            }
            Error::IdleTimeout { idle, items } => {
                let s = if *items == 1 { "" } else { "s" };
                write!(
                    f,
                    "stream stalled: no item within its {idle:?} idle timeout after {items} item{s}"
                )
            }
            Error::Rejected {
                reason,
                retry_after,
                attempts,
                refused,
                ..
            } => {
                let sent = attempts.saturating_sub(*refused);
                match (*attempts, *refused) {
                    (0, _) => write!(f, "rejected: {reason} before the first attempt")?,
                    (_, 0) => write!(f, "rejected: {reason} after {} sent", Attempts(sent))?,
                    (n, r) if r == n => {
                        write!(
                            f,
                            "rejected: {reason}; nothing sent, {} refused",
                            Attempts(r)
                        )?;
                    }
                    (_, r) => write!(
                        f,
                        "rejected: {reason} after {} sent and {} refused",
                        Attempts(sent),
                        Attempts(r)
                    )?,
                }
                match retry_after {
                    Some(after) => write!(f, "; retry after {after:?}"),
                    None => Ok(()),
                }
            }
            Error::Config(e) => write!(f, "invalid configuration: {e}"),
        }
    }
}

impl<E: StdError + 'static> StdError for Error<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Inner(e) => e.source(),
            Error::DeadlineExceeded { last: Some(l), .. }
            | Error::Rejected { last: Some(l), .. } => Some(l.as_ref()),
            Error::Config(e) => Some(e),
            _ => None,
        }
    }
}

/// One invalid setting: the field and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    field: Cow<'static, str>,
    message: String,
}

impl ConfigProblem {
    /// The setting `field` (a builder's setter, prefixed by what it configures where that
    /// helps: `"breaker.jitter"`) and what is wrong with it, with the value (`"must be
    /// between 0 and 1 (was 1.5)"`). Public so that crates building on rampart (rampart-redis)
    /// report their settings the same way.
    #[cold]
    pub fn new(field: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        ConfigProblem {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The builder field (or generator) at fault, e.g. `"attempt_timeout"`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong, with the value, e.g. `"must be positive (was 0ns)"`.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.message)
    }
}

/// Every problem found in a configuration, reported at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<ConfigProblem>,
}

impl ConfigError {
    /// An error of `problems` (at least one, in the order the builder checks its settings).
    #[cold]
    pub fn new(problems: Vec<ConfigProblem>) -> Self {
        ConfigError { problems }
    }

    /// The problems, in the order the builder's fields are declared.
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            problem.fmt(f)?;
        }
        Ok(())
    }
}

impl StdError for ConfigError {}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
