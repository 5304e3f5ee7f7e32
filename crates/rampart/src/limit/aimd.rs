//! AIMD: a concurrency limit that finds the dependency's capacity by itself.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{Bounds, InFlight, MAX_LIMIT, held_retry_after, range_problems};
use crate::admit::{Admit, AdmitContext, Feedback, Refusal};
use crate::error::{ConfigError, ConfigProblem};
use crate::latency::TypicalLatency;
use crate::outcome::AttemptOutcome;

/// Fractional bits of the limit.
const FRAC: u32 = 16;
/// One, in the limit's fixed point.
const ONE: u64 = 1 << FRAC;
/// The limit takes the low 40 bits of the state word, the decrease count the high 24.
const LIMIT_BITS: u32 = 40;
const LIMIT_MASK: u64 = (1 << LIMIT_BITS) - 1;
// `MAX_LIMIT` (10^6) fits: 16.16 fixed point in 40 bits holds up to 2^24.
const _: () = assert!(MAX_LIMIT < 1 << (LIMIT_BITS - FRAC));

/// AIMD: a concurrency limit that finds the dependency's capacity by itself.
///
/// A fixed concurrency limit is a guess, and the right number moves: with the dependency's
/// deploys, its other callers, the time of day. [`Aimd`] learns it the way TCP learns a
/// link's capacity: additive increase, multiplicative decrease. While attempts succeed and at
/// least half the limit is in use, the limit grows by one per round trip; when an attempt
/// times out or the dependency throttles it, the limit is cut by 10 %. It settles just below
/// the point where the dependency starts to fall over, and follows that point as it moves.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use rampart::Policy;
/// use rampart::limit::Aimd;
///
/// let limit = Aimd::new();
/// let policy = Policy::builder()
///     .admit(limit.clone())
///     .build()
///     .expect("valid policy");
/// let v = policy.run(async |_attempt| Ok::<_, std::io::Error>(7)).await;
/// assert_eq!(v.ok(), Some(7));
/// assert_eq!(limit.limit(), 20); // one success at 1 in flight: the limit was not even half used
/// # }
/// ```
///
/// | knob | default | meaning |
/// |---|---|---|
/// | `initial` | 20 | the limit before anything is learned |
/// | `min` | 4 | the limit never falls below this |
/// | `max` | 200 | the limit never grows above this (at most 1 000 000) |
/// | `backoff` | 0.9 | the factor applied on a drop, in `[0.5, 1)` |
///
/// # How attempts count
///
/// When a permit is given back, its [`Feedback`] outcome decides:
///
/// | outcome | meaning here | effect |
/// |---|---|---|
/// | `TimedOut`, `Throttled` | a drop: the dependency is past its capacity | limit × `backoff`, once per congestion event |
/// | `Ok`, `Permanent` | the dependency answered | + 1 / limit, if at least half the limit was in use |
/// | `Transient`, `Refused`, `Cancelled` | says nothing about capacity (an error, not a slowdown; a self-imposed refusal; the caller left) | none |
///
/// A permit dropped without feedback (the caller cancelled, a losing hedge) frees its slot and
/// changes nothing. `Transient` is not a drop: a dependency that fails fast is not overloaded,
/// and the circuit breaker is the tool for it.
///
/// The increase is `1 / limit` per qualifying release, so one limit's worth of releases (one
/// round trip at full use) adds one: the limit grows linearly in time, whatever the request
/// rate. A literal `+1` per release would grow it by the number of releases in the time a
/// timeout takes to show, overshooting far past the capacity before the first drop arrives.
///
/// One decrease per congestion event: a burst of timeouts from one overload (every attempt
/// that was in flight when it began) cuts the limit once, not once per attempt. Each permit
/// remembers the decrease count when it was taken; a drop cuts the limit only if no decrease
/// happened since (TCP's rule of one reduction per window).
///
/// An attempt is refused at once when the limit is reached: no queue (a queue would hide the
/// very latency the limit learns from). The refusal's retry-after is the measured mean time a
/// permit is held (10 ms until measured).
///
/// # Thread safety
///
/// `Send + Sync`, cheap to clone; clones share one limit. In flight is one atomic counter
/// (taken with a compare-and-swap, given back with a subtraction); the limit and the decrease
/// count share one `AtomicU64` updated by compare-and-swap; a release at the maximum only
/// reads it. No lock, no allocation.
///
/// # Events
///
/// A refusal is reported by the executor as `Event::AttemptRefused { by: "aimd limit", .. }`.
/// [`Aimd::limit`] reads the current limit, for a gauge.
#[derive(Clone)]
pub struct Aimd {
    inner: Arc<Inner>,
}

struct Inner {
    in_flight: InFlight,
    /// `decreases << 40 | limit`, the limit in 16.16 fixed point; the count wraps.
    state: AtomicU64,
    bounds: Bounds,
    backoff: f64,
    held: TypicalLatency,
}

/// Held while an attempt admitted by an [`Aimd`] limit runs; dropping it frees the slot.
#[must_use = "dropping the permit frees its slot at once"]
pub struct AimdPermit {
    inner: Arc<Inner>,
    /// The decrease count when the permit was taken (low 24 bits).
    decreases: u64,
}

impl Drop for AimdPermit {
    fn drop(&mut self) {
        self.inner.in_flight.leave();
    }
}

impl fmt::Debug for AimdPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AimdPermit").finish_non_exhaustive()
    }
}

/// Builds an [`Aimd`] limit; see [`Aimd`] for the defaults.
#[must_use]
#[derive(Debug, Clone)]
pub struct AimdBuilder {
    initial: usize,
    min: usize,
    max: usize,
    backoff: f64,
}

impl Aimd {
    /// The defaults: initial 20, min 4, max 200, backoff 0.9.
    pub fn new() -> Aimd {
        Aimd::from_valid(&Aimd::builder())
    }

    /// A builder with the defaults.
    pub fn builder() -> AimdBuilder {
        AimdBuilder {
            initial: 20,
            min: 4,
            max: 200,
            backoff: 0.9,
        }
    }

    fn from_valid(builder: &AimdBuilder) -> Aimd {
        Aimd {
            inner: Arc::new(Inner {
                in_flight: InFlight::default(),
                state: AtomicU64::new(builder.initial as u64 * ONE),
                bounds: Bounds::new(builder.min, builder.max),
                backoff: builder.backoff,
                held: TypicalLatency::default(),
            }),
        }
    }

    /// The current limit: attempts in flight beyond it are refused.
    pub fn limit(&self) -> usize {
        ((self.inner.state.load(Relaxed) & LIMIT_MASK) >> FRAC) as usize
    }

    /// Attempts in flight right now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.get()
    }

    /// The range the limit moves in: `(min, max)`.
    pub fn bounds(&self) -> (usize, usize) {
        self.inner.bounds.get()
    }

    /// Changes the range the limit moves in while it serves, for every clone (to cap it during
    /// an incident, say). The current limit is brought into the new range at once; attempts in
    /// flight above a lower `max` finish, and no attempt is admitted until fewer than the limit
    /// are in flight. What it learns from then on stays in the range. A range the builder
    /// would refuse (`min` 0, `max` above 1 000 000 or below `min`) is refused with a
    /// [`ConfigError`] naming `aimd.min` / `aimd.max` and the values, and changes nothing.
    ///
    /// ```
    /// use rampart::limit::Aimd;
    ///
    /// let limit = Aimd::new(); // starts at 20, within 4..=200
    /// limit.set_bounds(2, 10)?;
    /// assert_eq!((limit.bounds(), limit.limit()), ((2, 10), 10));
    /// let refused = limit.set_bounds(8, 4).unwrap_err();
    /// assert_eq!(refused.to_string(), "aimd.max must be at least min 8 (was 4)");
    /// assert_eq!(limit.bounds(), (2, 10));
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field and value when `min` is 0 or `max` is below `min`; the
    /// limit keeps its range.
    pub fn set_bounds(&self, min: usize, max: usize) -> Result<(), ConfigError> {
        let inner = &*self.inner;
        inner.bounds.set(["aimd.min", "aimd.max"], min, max)?;
        let (min, max) = (min as u64 * ONE, max as u64 * ONE);
        let mut state = inner.state.load(Relaxed);
        loop {
            let limit = state & LIMIT_MASK;
            let clamped = limit.clamp(min, max);
            if clamped == limit {
                return Ok(());
            }
            let next = (state & !LIMIT_MASK) | clamped;
            match inner
                .state
                .compare_exchange_weak(state, next, Relaxed, Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => state = actual,
            }
        }
    }

    fn refusal(&self) -> Refusal {
        Refusal {
            retry_after: Some(held_retry_after(&self.inner.held)),
            by: "aimd limit",
        }
    }
}

impl Default for Aimd {
    fn default() -> Self {
        Aimd::new()
    }
}

impl Inner {
    /// One more per round trip: `1 / limit` per release; a limit above `max` (grown as the
    /// range was lowered) is brought down to it.
    fn increase(&self) {
        let max = self.bounds.get().1 as u64 * ONE;
        let mut state = self.state.load(Relaxed);
        loop {
            let limit = state & LIMIT_MASK;
            if limit == max {
                return;
            }
            let grown = (limit + (ONE * ONE / limit.max(1)).max(1)).min(max);
            let next = (state & !LIMIT_MASK) | grown;
            match self
                .state
                .compare_exchange_weak(state, next, Relaxed, Relaxed)
            {
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
    }

    /// Cuts the limit by `backoff`, unless it was already cut since `decreases`.
    fn decrease(&self, decreases: u64) {
        let (min, max) = self.bounds.get();
        let (min, max) = (min as u64 * ONE, max as u64 * ONE);
        let mut state = self.state.load(Relaxed);
        loop {
            if state >> LIMIT_BITS != decreases {
                return;
            }
            let limit = state & LIMIT_MASK;
            let cut = ((limit as f64 * self.backoff) as u64).clamp(min, max);
            // The count is the high bits: adding one there wraps it.
            let next = (state & !LIMIT_MASK).wrapping_add(1 << LIMIT_BITS) | cut;
            match self
                .state
                .compare_exchange_weak(state, next, Relaxed, Relaxed)
            {
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
    }
}

impl AimdBuilder {
    /// The limit before anything is learned: within `[min, max]`. Default 20.
    pub fn initial(self, initial: usize) -> Self {
        AimdBuilder { initial, ..self }
    }

    /// The lowest the limit goes: at least 1. Default 4.
    pub fn min(self, min: usize) -> Self {
        AimdBuilder { min, ..self }
    }

    /// The highest the limit goes: at least `min`, at most 1 000 000. Default 200.
    pub fn max(self, max: usize) -> Self {
        AimdBuilder { max, ..self }
    }

    /// The factor applied on a drop: in `[0.5, 1)`. Default 0.9.
    pub fn backoff(self, backoff: f64) -> Self {
        AimdBuilder { backoff, ..self }
    }

    /// The limit; or every invalid setting at once.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting at once, each naming its field and value.
    pub fn build(self) -> Result<Aimd, ConfigError> {
        let mut problems = Vec::new();
        let fields = ["aimd.initial", "aimd.min", "aimd.max"];
        bounds_problems(fields, self.initial, self.min, self.max, &mut problems);
        if !(0.5..1.0).contains(&self.backoff) {
            problems.push(ConfigProblem::new(
                "aimd.backoff",
                format!("must be at least 0.5 and below 1 (was {})", self.backoff),
            ));
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        Ok(Aimd::from_valid(&self))
    }
}

/// The checks on `initial`, `min` and `max` that [`Aimd`] and
/// [`Gradient`](super::Gradient) share.
pub(super) fn bounds_problems(
    [initial_field, min_field, max_field]: [&'static str; 3],
    initial: usize,
    min: usize,
    max: usize,
    problems: &mut Vec<ConfigProblem>,
) {
    if !(min..=max).contains(&initial) {
        let message = format!("must be between min {min} and max {max} (was {initial})");
        problems.push(ConfigProblem::new(initial_field, message));
    }
    range_problems([min_field, max_field], min, max, problems);
}

impl Admit for Aimd {
    type Permit = AimdPermit;

    fn load(&self) -> crate::admit::Load {
        crate::admit::Load::new(Some(self.in_flight()), None)
    }

    #[inline]
    fn acquire(
        &self,
        _: &AdmitContext<'_>,
    ) -> impl std::future::Future<Output = Result<AimdPermit, Refusal>> + Send {
        let inner = &self.inner;
        let state = inner.state.load(Relaxed);
        let limit = ((state & LIMIT_MASK) >> FRAC) as usize;
        std::future::ready(if inner.in_flight.try_enter(limit) {
            Ok(AimdPermit {
                inner: Arc::clone(inner),
                decreases: state >> LIMIT_BITS,
            })
        } else {
            Err(self.refusal())
        })
    }

    fn release(&self, permit: AimdPermit, feedback: Feedback) {
        let inner = &*permit.inner;
        match feedback.outcome {
            AttemptOutcome::TimedOut | AttemptOutcome::Throttled => {
                inner.decrease(permit.decreases);
            }
            AttemptOutcome::Ok | AttemptOutcome::Permanent => {
                inner.held.record(feedback.elapsed);
                let limit = (inner.state.load(Relaxed) & LIMIT_MASK) >> FRAC;
                if inner.in_flight.get() as u64 * 2 >= limit {
                    inner.increase();
                }
            }
            _ => {}
        }
        drop(permit);
    }
}

impl fmt::Debug for Aimd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aimd")
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .field("min", &self.bounds().0)
            .field("max", &self.bounds().1)
            .field("backoff", &self.inner.backoff)
            .finish()
    }
}

#[cfg(test)]
#[path = "aimd_tests.rs"]
mod tests;
