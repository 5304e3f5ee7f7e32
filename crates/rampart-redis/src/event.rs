//! Events: a limiter leaving the shared quota for its local fallback, and coming back.
//!
//! | event | when |
//! |---|---|
//! | [`LimitEvent::Fallback`] | a Redis operation failed or ran out of time: calls are now admitted by the local fallback |
//! | [`LimitEvent::Rejoined`] | Redis answered again: calls are admitted from the shared quota |
//!
//! Each is emitted once per transition, never once per call. A listener is synchronous,
//! `Send + Sync`, runs on the task that performed the refill, and may run concurrently with
//! calls; one that panics is ignored.

use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;

/// A change of where a limiter takes its permits from.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum LimitEvent<'a> {
    /// Redis could not be reached (or did not answer within the timeout): the limiter now
    /// admits from its local fallback and probes Redis every `probe_every`.
    Fallback {
        /// The limiter's Redis key.
        key: &'a str,
        /// What failed, with the server, the key and the bound.
        error: &'a StoreError,
    },
    /// Redis answered again: the limiter admits from the shared quota.
    Rejoined {
        /// The limiter's Redis key.
        key: &'a str,
        /// How long the limiter was on its fallback.
        after: Duration,
    },
}

/// A listener, shared by the clones of a limiter.
pub(crate) type Listener = Arc<dyn Fn(&LimitEvent<'_>) + Send + Sync>;
