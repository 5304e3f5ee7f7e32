//! Errors: a builder's settings that cannot work ([`ConfigError`]), and a Redis operation that
//! failed or did not answer in time ([`StoreError`]).
//!
//! A limiter never returns a [`StoreError`] to a call: a failed refill switches it to its local
//! fallback and is reported once, in [`LimitEvent::Fallback`](crate::LimitEvent::Fallback).
//! The error says which server, which key, which operation and, for a timeout, which bound.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// One invalid setting: the field and what was wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    field: String,
    message: String,
}

impl ConfigProblem {
    #[cold]
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigProblem {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The setting, e.g. `"global_rate_limit.permits"`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong with it, with the value, e.g. `"must be at least 1 (was 0)"`.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.message)
    }
}

/// Every invalid setting of a builder, reported at once by `build()`.
///
/// Permanent: the same settings fail the same way. Fix the named fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<ConfigProblem>,
}

impl ConfigError {
    pub(crate) fn new(problems: Vec<ConfigProblem>) -> Self {
        ConfigError { problems }
    }

    /// The problems, in the order the builder checks them.
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
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl StdError for ConfigError {}

/// A Redis operation of a limiter that failed or did not finish within its bound.
///
/// Transient as far as the limiter is concerned: it serves calls from its local fallback and
/// tries Redis again every `probe_every`.
#[derive(Debug)]
pub struct StoreError {
    /// The server, as `host:port` (never the password of a URL).
    server: String,
    /// The Redis key of the limiter.
    key: String,
    /// What was being done: `"rate refill"`, `"lease"`, `"connect"`.
    op: &'static str,
    kind: StoreErrorKind,
}

#[derive(Debug)]
enum StoreErrorKind {
    Timeout(Duration),
    Redis(redis::RedisError),
    Reply(String),
}

impl StoreError {
    /// The operation did not finish within `timeout`.
    #[cold]
    pub(crate) fn timeout(server: &str, key: &str, op: &'static str, timeout: Duration) -> Self {
        StoreError::with(server, key, op, StoreErrorKind::Timeout(timeout))
    }

    /// The client or the server reported an error.
    #[cold]
    pub(crate) fn redis(server: &str, key: &str, op: &'static str, e: redis::RedisError) -> Self {
        StoreError::with(server, key, op, StoreErrorKind::Redis(e))
    }

    /// The server answered something the limiter's script never returns.
    #[cold]
    pub(crate) fn reply(server: &str, key: &str, op: &'static str, what: String) -> Self {
        StoreError::with(server, key, op, StoreErrorKind::Reply(what))
    }

    fn with(server: &str, key: &str, op: &'static str, kind: StoreErrorKind) -> Self {
        StoreError {
            server: server.to_owned(),
            key: key.to_owned(),
            op,
            kind,
        }
    }

    /// Whether the operation ran out of its time bound (as opposed to failing).
    pub fn is_timeout(&self) -> bool {
        matches!(self.kind, StoreErrorKind::Timeout(_))
    }

    /// The server, as `host:port`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The limiter's Redis key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let StoreError {
            server, key, op, ..
        } = self;
        match &self.kind {
            StoreErrorKind::Timeout(bound) => write!(
                f,
                "redis at {server} did not finish the {op} of key '{key}' within {bound:?}"
            ),
            StoreErrorKind::Redis(e) => {
                write!(f, "redis at {server} failed the {op} of key '{key}': {e}")
            }
            StoreErrorKind::Reply(what) => write!(
                f,
                "redis at {server} gave an unexpected reply to the {op} of key '{key}': {what}"
            ),
        }
    }
}

impl StdError for StoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &self.kind {
            StoreErrorKind::Redis(e) => Some(e),
            _ => None,
        }
    }
}
