//! Classification: what an attempt's outcome means for the rest of the call.
//!
//! The executor knows three things on its own: the caller cancelled, the attempt ran past its
//! ceiling, or the callback returned. What a returned value or error *means* (retry it? is the
//! dependency overloaded? is it hopeless?) is the classifier's call, and its answer is a
//! [`Verdict`].
//!
//! A generic error type cannot be inspected, so the default, [`ErrorsAreTransient`], treats
//! every `Err` as [`Verdict::Transient`] and every `Ok` as [`Verdict::Ok`]. [`IoErrors`] knows
//! `std::io::Error` kinds. Any `Fn(&Result<T, E>) -> Verdict` is a classifier too:
//!
//! ```
//! use std::time::Duration;
//! use rampart::{Policy, Verdict};
//!
//! #[derive(Debug)]
//! enum ApiError { NotFound, Busy { retry_after_ms: u64 }, Flaky }
//!
//! let policy = Policy::builder()
//!     .classifier(|outcome: &Result<String, ApiError>| match outcome {
//!         Ok(_) => Verdict::Ok,
//!         Err(ApiError::NotFound) => Verdict::Permanent,
//!         Err(ApiError::Busy { retry_after_ms }) => Verdict::Throttled {
//!             retry_after: Some(Duration::from_millis(*retry_after_ms)),
//!         },
//!         Err(ApiError::Flaky) => Verdict::Transient,
//!     })
//!     .build()
//!     .expect("valid policy");
//! # drop(policy);
//! ```
//!
//! Caller cancellation is never classified: no classifier can turn it into anything else.

use std::io;
use std::time::Duration;

/// What an attempt's outcome means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Success: return it.
    Ok,
    /// A failure that may pass: retry on the short curve; evidence for a circuit breaker.
    Transient,
    /// The dependency asked us to slow down: retry on the long curve (or after `retry_after`);
    /// never breaker evidence.
    Throttled {
        /// How long the dependency asked us to wait, if it said.
        retry_after: Option<Duration>,
    },
    /// Retrying cannot help: return at once.
    Permanent,
    /// A self-imposed refusal (a local limiter said no): retried after `retry_after`, never
    /// charged to the retry budget, never breaker evidence.
    Refused {
        /// When the refusing component expects to have room again, if it knows.
        retry_after: Option<Duration>,
    },
}

impl Verdict {
    /// Whether this outcome ends the call as a success.
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Ok)
    }

    /// Whether the executor may try again after this outcome.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Verdict::Ok | Verdict::Permanent)
    }

    /// The retry-after carried by a throttled or refused verdict.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Verdict::Throttled { retry_after } | Verdict::Refused { retry_after } => *retry_after,
            _ => None,
        }
    }
}

/// Decides the [`Verdict`] of an attempt's outcome.
///
/// Implemented for every `Fn(&Result<T, E>) -> Verdict + Send + Sync + 'static`. Called once
/// per attempt, synchronously, possibly from many calls at once.
pub trait Classify<T, E>: Send + Sync + 'static {
    /// The verdict for one attempt's outcome.
    fn classify(&self, outcome: &Result<T, E>) -> Verdict;
}

impl<T, E, F> Classify<T, E> for F
where
    F: Fn(&Result<T, E>) -> Verdict + Send + Sync + 'static,
{
    fn classify(&self, outcome: &Result<T, E>) -> Verdict {
        self(outcome)
    }
}

/// The default classifier: every `Err` is [`Verdict::Transient`], every `Ok` is [`Verdict::Ok`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorsAreTransient;

impl<T, E> Classify<T, E> for ErrorsAreTransient {
    #[inline]
    fn classify(&self, outcome: &Result<T, E>) -> Verdict {
        match outcome {
            Ok(_) => Verdict::Ok,
            Err(_) => Verdict::Transient,
        }
    }
}

/// A classifier for `std::io::Error`: connection failures, resets and timeouts are
/// [`Verdict::Transient`]; everything else (not found, permission denied, invalid input, ...)
/// is [`Verdict::Permanent`].
#[derive(Debug, Clone, Copy, Default)]
pub struct IoErrors;

impl IoErrors {
    /// Whether an I/O error of this kind may pass if tried again.
    pub fn is_transient(kind: io::ErrorKind) -> bool {
        use io::ErrorKind::*;
        matches!(
            kind,
            ConnectionRefused
                | ConnectionReset
                | ConnectionAborted
                | NotConnected
                | BrokenPipe
                | TimedOut
                | Interrupted
                | WouldBlock
                | UnexpectedEof
                | HostUnreachable
                | NetworkUnreachable
                | NetworkDown
                | ResourceBusy
        )
    }
}

impl<T> Classify<T, io::Error> for IoErrors {
    fn classify(&self, outcome: &Result<T, io::Error>) -> Verdict {
        match outcome {
            Ok(_) => Verdict::Ok,
            Err(e) if IoErrors::is_transient(e.kind()) => Verdict::Transient,
            Err(_) => Verdict::Permanent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_connection_errors_are_transient_and_not_found_is_permanent() {
        let c = IoErrors;
        let refused: Result<(), _> = Err(io::Error::from(io::ErrorKind::ConnectionRefused));
        let missing: Result<(), _> = Err(io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(c.classify(&refused), Verdict::Transient);
        assert_eq!(c.classify(&missing), Verdict::Permanent);
        assert_eq!(c.classify(&Ok::<(), io::Error>(())), Verdict::Ok);
    }

    #[test]
    fn default_classifier_retries_every_error() {
        let c = ErrorsAreTransient;
        assert_eq!(c.classify(&Err::<(), _>("x")), Verdict::Transient);
        assert_eq!(c.classify(&Ok::<_, ()>(1)), Verdict::Ok);
    }

    #[test]
    fn retry_after_is_read_from_throttled_and_refused_only() {
        let d = Some(Duration::from_secs(1));
        assert_eq!(Verdict::Throttled { retry_after: d }.retry_after(), d);
        assert_eq!(Verdict::Refused { retry_after: d }.retry_after(), d);
        assert_eq!(Verdict::Transient.retry_after(), None);
        assert!(!Verdict::Permanent.is_retryable());
    }
}
