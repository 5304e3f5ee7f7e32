//! Deadlines: the instant by which the caller stops waiting.
//!
//! A [`Deadline`] is a point in time, not a span: it does not decay as it is passed along, and
//! "time left" is computed when it is read. The ambient deadline of the current task is
//! [`Deadline::current`]; [`Deadline::scope`] sets one for a future.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use rampart::Deadline;
//!
//! let deadline = Deadline::after(Duration::from_millis(300));
//! deadline
//!     .scope(async {
//!         tokio::time::sleep(Duration::from_millis(100)).await;
//!         assert_eq!(Deadline::current().unwrap().remaining(), Duration::from_millis(200));
//!     })
//!     .await;
//! # }
//! ```

use std::time::Duration;

use crate::clock::Instant;
use crate::drain::Drain;
use crate::error::DeadlineSource;

/// The instant by which a caller stops waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

impl Deadline {
    /// The deadline at `instant`.
    pub const fn at(instant: Instant) -> Self {
        Deadline(instant)
    }

    /// `span` from now on tokio's clock (paused time included). A span too large to represent
    /// is clamped to about thirty years.
    pub fn after(span: Duration) -> Self {
        Deadline::after_from(Instant::now(), span)
    }

    /// `span` after `now` (for a manual clock).
    pub fn after_from(now: Instant, span: Duration) -> Self {
        let far = Duration::from_secs(86_400 * 365 * 30);
        Deadline(now.checked_add(span).unwrap_or_else(|| now + far.min(span)))
    }

    /// The instant.
    pub const fn instant(self) -> Instant {
        self.0
    }

    /// Time left now (tokio's clock); zero once passed.
    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// Time left at `now`; zero once passed.
    pub fn remaining_at(self, now: Instant) -> Duration {
        self.0.saturating_duration_since(now)
    }

    /// Whether it has passed at `now`.
    pub fn is_expired_at(self, now: Instant) -> bool {
        now >= self.0
    }

    /// The earlier of `deadline` and `other`, if either is set.
    #[inline]
    pub(crate) fn earliest(
        deadline: Option<Deadline>,
        other: Option<Deadline>,
    ) -> Option<Deadline> {
        match (deadline, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Where a call's effective deadline came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Policy,
    Inherited,
    Drain,
}

impl Source {
    /// The source `DeadlineExceeded` names; `None` for a drain's grace, which ends a call
    /// (or a stream) rejected as draining instead.
    #[inline]
    pub(crate) fn reported(self) -> Option<DeadlineSource> {
        match self {
            Source::Policy => Some(DeadlineSource::Policy),
            Source::Inherited => Some(DeadlineSource::Inherited),
            Source::Drain => None,
        }
    }
}

/// A call's effective deadline: the earliest of its bounds, resolved once when it starts.
///
/// Kept as the call's start and the span from it, not as an instant: the policy's own
/// deadline, the common one, then costs no addition when the call starts (most calls end
/// on their first attempt without asking for the instant).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Effective {
    /// The start of the call it bounds.
    start: Instant,
    /// From the start of the call: what `DeadlineExceeded` reports.
    pub(crate) span: Duration,
    pub(crate) source: Source,
}

/// An [`Effective`] deadline without its start: what a holder that keeps the call's start
/// already (the call's state machine) stores, 16 bytes less in every call's future.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    /// From the start of the call.
    pub(crate) span: Duration,
    pub(crate) source: Source,
}

impl Bound {
    /// The deadline of a call that starts at `start`, without its start: the earliest of the
    /// policy's `deadline`, the `inherited` one (when the policy reads the ambient deadline)
    /// and the grace of `drain` (when it is draining). The policy's own needs no arithmetic
    /// (nor the start); the others are measured from `start`.
    #[inline(always)]
    pub(crate) fn resolve(
        start: Instant,
        deadline: Option<Duration>,
        inherited: Option<Deadline>,
        drain: &Drain,
    ) -> Option<Bound> {
        if inherited.is_none() && !drain.is_draining() {
            return deadline.map(|span| Bound {
                span,
                source: Source::Policy,
            });
        }
        let bound = deadline.map(|span| Effective {
            start,
            span,
            source: Source::Policy,
        });
        Effective::clamped(start, bound, inherited, drain).map(Effective::bound)
    }

    /// The effective deadline of a call that started at `start`.
    #[inline(always)]
    pub(crate) fn from(self, start: Instant) -> Effective {
        Effective {
            start,
            span: self.span,
            source: self.source,
        }
    }
}

impl Effective {
    /// This deadline without its start.
    #[inline(always)]
    pub(crate) fn bound(self) -> Bound {
        Bound {
            span: self.span,
            source: self.source,
        }
    }

    /// The instant the call's deadline falls on: `span` after its start. (An inherited or
    /// drain deadline that had passed when the call started has a span of zero, so this is
    /// the start: past either way.)
    #[inline]
    pub(crate) fn at(&self) -> Instant {
        crate::clock::saturating_add(self.start, self.span)
    }

    /// [`Bound::resolve`] when an inherited deadline or a drain grace may come
    /// sooner than the policy's `bound`: the earliest instant wins.
    ///
    /// The bounds are compared by their spans from the start, which order them as their
    /// instants do, without adding the policy's span to the start (an instant's addition
    /// and comparison cost several times a subtraction, and this runs for every call given
    /// a deadline). Instants are compared only where spans cannot tell: an instant at or
    /// before the start (its span is zero however early it is), and spans past a century
    /// (where the policy's instant may have saturated at the latest one).
    #[inline(never)]
    fn clamped(
        start: Instant,
        bound: Option<Effective>,
        inherited: Option<Deadline>,
        drain: &Drain,
    ) -> Option<Effective> {
        /// Past this, a span is compared as an instant (see above).
        const FAR: Duration = Duration::from_secs(100 * 365 * 86_400);
        // The earliest bound so far, with its instant when that is before the start (not
        // `start + span`).
        let mut earliest: Option<(Effective, Option<Instant>)> = bound.map(|b| (b, None));
        let mut clamp = |at: Instant, source| {
            let span = at.saturating_duration_since(start);
            let sooner = match &earliest {
                None => true,
                Some((current, before)) if span.is_zero() || before.is_some() => {
                    at < before.unwrap_or_else(|| current.at())
                }
                Some((current, _)) => span < current.span && (span < FAR || at < current.at()),
            };
            if sooner {
                let before = (at < start).then_some(at);
                earliest = Some((
                    Effective {
                        start,
                        span,
                        source,
                    },
                    before,
                ));
            }
        };
        if let Some(inherited) = inherited {
            clamp(inherited.instant(), Source::Inherited);
        }
        if drain.is_draining()
            && let Some(grace) = drain.grace_until()
        {
            clamp(grace, Source::Drain);
        }
        earliest.map(|(bound, _)| bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The effective deadline of a call that starts at `start`.
    fn resolve(
        start: Instant,
        deadline: Option<Duration>,
        inherited: Option<Deadline>,
        drain: &Drain,
    ) -> Option<Effective> {
        Bound::resolve(start, deadline, inherited, drain).map(|bound| bound.from(start))
    }

    #[test]
    fn the_effective_deadline_is_the_earliest_bound_measured_from_the_start() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let drain = Drain::new();
        let policy = resolve(start, Some(ms(500)), None, &drain).expect("a bound");
        assert_eq!(
            (policy.at(), policy.span, policy.source),
            (start + ms(500), ms(500), Source::Policy)
        );
        let later = Deadline::at(start + ms(900));
        let kept = resolve(start, Some(ms(500)), Some(later), &drain).expect("a bound");
        assert_eq!(kept.source, Source::Policy);
        let sooner = Deadline::at(start + ms(300));
        let inherited = resolve(start, Some(ms(500)), Some(sooner), &drain).expect("a bound");
        assert_eq!(
            (inherited.span, inherited.source),
            (ms(300), Source::Inherited)
        );
        drain.begin_at(start, Some(ms(100)));
        let grace = resolve(start, None, Some(sooner), &drain).expect("a bound");
        assert_eq!((grace.span, grace.source), (ms(100), Source::Drain));
        assert!(resolve(start, None, None, &Drain::new()).is_none());
    }

    /// What `clamped` computed before it compared spans: the policy's instant added to the
    /// start, and the bounds compared as instants.
    fn by_instants(
        start: Instant,
        bound: Option<Effective>,
        inherited: Option<Deadline>,
        drain: &Drain,
    ) -> Option<Effective> {
        let mut earliest = bound.map(|b| (b.at(), b));
        let mut clamp = |at: Instant, source| {
            if earliest.is_none_or(|(sooner, _)| at < sooner) {
                let span = at.saturating_duration_since(start);
                earliest = Some((
                    at,
                    Effective {
                        start,
                        span,
                        source,
                    },
                ));
            }
        };
        if let Some(inherited) = inherited {
            clamp(inherited.instant(), Source::Inherited);
        }
        if drain.is_draining()
            && let Some(grace) = drain.grace_until()
        {
            clamp(grace, Source::Drain);
        }
        earliest.map(|(_, bound)| bound)
    }

    #[test]
    fn comparing_spans_picks_the_bound_comparing_instants_picks() {
        // Instants before, at and after the start, equal to the policy's, and spans that
        // saturate the policy's instant: every combination, against the instants' answer.
        let start = Instant::now() + Duration::from_secs(3600);
        let ms = Duration::from_millis;
        let ns = Duration::from_nanos;
        let spans = [
            None,
            Some(Duration::ZERO),
            Some(ns(1)),
            Some(ms(500)),
            Some(Duration::from_secs(200 * 365 * 86_400)),
            Some(Duration::MAX),
        ];
        let offsets: [Option<(bool, Duration)>; 10] = [
            None,
            Some((false, ms(1000))),
            Some((false, ns(1))),
            Some((true, Duration::ZERO)),
            Some((true, ns(1))),
            Some((true, ms(300))),
            Some((true, ms(500))),
            Some((true, ms(900))),
            Some((true, Duration::from_secs(150 * 365 * 86_400))),
            // The latest instant there is.
            Some((true, Duration::MAX)),
        ];
        let instant = |offset: (bool, Duration)| match offset {
            (true, by) => crate::clock::saturating_add(start, by),
            (false, by) => start - by,
        };
        let mut compared = 0;
        for span in spans {
            let bound = span.map(|span| Effective {
                start,
                span,
                source: Source::Policy,
            });
            for inherited in offsets {
                for grace in offsets {
                    let inherited = inherited.map(|o| Deadline::at(instant(o)));
                    let drain = Drain::new();
                    if let Some(grace) = grace {
                        let until = instant(grace);
                        // A drain that began an hour before `until`, its grace an hour.
                        drain.begin_at(
                            until - Duration::from_secs(3600),
                            Some(Duration::from_secs(3600)),
                        );
                    }
                    let key = |e: Option<Effective>| e.map(|e| (e.span, e.source));
                    assert_eq!(
                        key(Effective::clamped(start, bound, inherited, &drain)),
                        key(by_instants(start, bound, inherited, &drain)),
                        "policy {span:?}, inherited {inherited:?}, grace {grace:?}"
                    );
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 6 * 10 * 10);
    }
}
