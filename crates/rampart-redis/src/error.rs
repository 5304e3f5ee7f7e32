//! Errors: a builder's settings that cannot work ([`rampart::ConfigError`], rampart's own, each
//! problem naming its field: `global_rate_limit.permits`), and a Redis operation that failed or
//! did not answer in time ([`StoreError`]).
//!
//! A limiter never returns a [`StoreError`] to a call: a failed refill switches it to its local
//! fallback and is reported once, in [`LimitEvent::Fallback`](crate::LimitEvent::Fallback).
//! The error says which server, which key, which operation and, for a timeout, which bound.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

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
