//! The permit an attempt holds while the breaker counts it.

use std::fmt;
use std::time::Duration;

#[cfg(doc)]
use super::BreakerBuilder;
use super::word::Word;
use super::{Breaker, Evidence, StateKind, Transition};
use crate::clock::Instant;

/// Held for one attempt. Dropping it without [`record`](Self::record) counts as
/// [`Evidence::Ignored`] (and frees its probe slot).
pub struct BreakerPermit<'a> {
    pub(super) breaker: &'a Breaker,
    pub(super) admitted: Word,
    /// Whether taking this permit turned the breaker open → half-open (kept as a flag, not as
    /// the `Transition`, so that the permit a call holds across its attempt stays small).
    pub(super) opened_probe: bool,
    /// Whether a re-opening by expired probes came just before `opened_probe` (its break is
    /// kept by the breaker, under its generation: see [`expired`](Self::expired)).
    pub(super) after_expiry: bool,
    pub(super) settled: bool,
}

impl BreakerPermit<'_> {
    /// Whether this attempt is a half-open probe.
    #[inline]
    pub fn is_probe(&self) -> bool {
        self.admitted.kind() == StateKind::HalfOpen
    }

    /// The transition taking this permit caused: open → half-open for the first probe after a
    /// break, else `None`.
    pub fn transition(&self) -> Option<Transition> {
        self.opened_probe.then_some(Transition {
            from: StateKind::Open,
            to: StateKind::HalfOpen,
            break_duration: None,
        })
    }

    /// The re-opening that came before [`transition`](Self::transition): half-open → open,
    /// when the probes in flight had outlived the
    /// [`probe_timeout`](BreakerBuilder::probe_timeout) and the break that followed their
    /// timeout was already over when this permit was asked for (this attempt is the trial
    /// after it). Report it first.
    #[inline]
    pub fn expired(&self) -> Option<Transition> {
        if !self.after_expiry {
            return None;
        }
        self.expired_transition()
    }

    /// [`expired`](Self::expired) for a permit taken after probes expired: what the lock
    /// holds. Out of line, so that every call's check of the flag stays small.
    #[cold]
    fn expired_transition(&self) -> Option<Transition> {
        let (generation, nanos) = self.breaker.shared.lock().expired;
        (generation == self.admitted.generation()).then(|| Transition {
            from: StateKind::HalfOpen,
            to: StateKind::Open,
            break_duration: Some(Duration::from_nanos(nanos)),
        })
    }

    /// Reports the attempt's outcome; `elapsed` is how long it took (for
    /// [`slow_call`](BreakerBuilder::slow_call)). Returns the transition it caused, if any.
    // Always inlined: it is on every call's success path, whose common case is a few loads
    // (the rest is out of line), and out of line the permit would go through memory.
    #[inline(always)]
    pub fn record(
        mut self,
        evidence: Evidence,
        elapsed: Duration,
        now: Instant,
    ) -> Option<Transition> {
        self.settled = true;
        self.breaker
            .shared
            .record(self.admitted, evidence, elapsed, now)
    }
}

impl Drop for BreakerPermit<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.settled && self.is_probe() {
            self.breaker.shared.release_probe(self.admitted);
        }
    }
}

impl fmt::Debug for BreakerPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerPermit")
            .field("is_probe", &self.is_probe())
            .field("transition", &self.transition())
            .finish_non_exhaustive()
    }
}
