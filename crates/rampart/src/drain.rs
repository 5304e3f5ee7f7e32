//! Draining: a process that is shutting down stops retrying and hedging, and gives its
//! remaining calls no more than the grace it has left.
//!
//! [`Drain::begin`] is one-way and the first call wins. While draining, a policy attached to the
//! drain (every policy is attached to [`Drain::global`] unless given its own):
//!
//! - starts no retry and no hedge: a call whose attempt failed ends with stop reason
//!   [`Draining`](crate::StopReason::Draining) and [`Error::Rejected`](crate::Error::Rejected)
//!   with reason [`Draining`](crate::RejectReason::Draining), carrying the attempt's error;
//! - clamps the deadline of every new call to the grace left, so that requests still in flight
//!   finish their downstream calls in time; once the grace is spent, a call starts no attempt.
//!
//! ```
//! use std::time::Duration;
//! use rampart::drain::Drain;
//!
//! let drain = Drain::new();
//! assert!(!drain.is_draining());
//! assert!(drain.begin(Some(Duration::from_secs(5))));
//! assert!(!drain.begin(None), "the first call wins");
//! assert!(drain.is_draining());
//! ```
//!
//! Checking whether a process drains costs one atomic load per call.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use crate::clock::Instant;

/// A one-way switch into draining, shared by the policies attached to it.
#[derive(Clone, Default)]
pub struct Drain {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    draining: AtomicBool,
    /// When the grace ends; `None` inside means no grace bound.
    until: OnceLock<Option<Instant>>,
}

static GLOBAL: LazyLock<Drain> = LazyLock::new(Drain::new);

impl Drain {
    /// A drain of its own (for tests, or a component that shuts down alone).
    pub fn new() -> Self {
        Drain::default()
    }

    /// The process-wide drain every policy is attached to by default.
    pub fn global() -> &'static Drain {
        &GLOBAL
    }

    /// Starts draining now (tokio's clock), with `grace` for the calls still in flight.
    /// Returns whether this call started it; later calls change nothing.
    ///
    /// `None`, or a grace too long to be added to `now` (such as `Duration::MAX`), leaves the
    /// calls in flight unbounded by the drain: it never clamps their deadlines.
    pub fn begin(&self, grace: Option<Duration>) -> bool {
        self.begin_at(Instant::now(), grace)
    }

    /// [`begin`](Self::begin) at an explicit instant (for a manual clock).
    pub fn begin_at(&self, now: Instant, grace: Option<Duration>) -> bool {
        // A grace past the end of representable time is no bound at all, never zero.
        let until = grace.and_then(|g| now.checked_add(g));
        let started = self.state.until.set(until).is_ok();
        self.state.draining.store(true, Ordering::Release);
        started
    }

    /// Whether draining has begun.
    #[inline]
    pub fn is_draining(&self) -> bool {
        self.state.draining.load(Ordering::Acquire)
    }

    /// When the grace ends, if draining with a grace.
    pub fn grace_until(&self) -> Option<Instant> {
        self.state.until.get().copied().flatten()
    }
}

impl fmt::Debug for Drain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drain")
            .field("draining", &self.is_draining())
            .field("grace_until", &self.grace_until())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_begin_wins_and_there_is_no_way_back() {
        let drain = Drain::new();
        let now = Instant::now();
        assert!(drain.begin_at(now, Some(Duration::from_secs(5))));
        assert!(!drain.begin_at(now, Some(Duration::from_secs(60))));
        assert_eq!(drain.grace_until(), Some(now + Duration::from_secs(5)));
        assert!(drain.is_draining());
    }

    #[test]
    fn a_grace_too_long_to_add_is_unbounded_not_zero() {
        let drain = Drain::new();
        assert!(drain.begin_at(Instant::now(), Some(Duration::MAX)));
        assert!(drain.is_draining());
        assert_eq!(drain.grace_until(), None, "no clamp, and never `now`");
    }

    #[test]
    fn clones_share_one_switch() {
        let drain = Drain::new();
        let other = drain.clone();
        other.begin(None);
        assert!(drain.is_draining());
        assert_eq!(drain.grace_until(), None);
    }
}
