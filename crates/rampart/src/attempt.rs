//! The attempt handle: what the callback knows about the attempt it is running.
//!
//! Every callback takes an [`Attempt`]: its number, its ceiling (the instant by which it must be
//! done), the time left, and its cancellation. There is no callback without it, so the attempt
//! timeout can always reach the work.
//!
//! ```
//! # async fn demo() -> Result<(), rampart::Error<std::io::Error>> {
//! use rampart::Policy;
//!
//! let policy = Policy::builder().build().expect("valid policy");
//! let body = policy
//!     .run(async |attempt| {
//!         tokio::select! {
//!             _ = attempt.cancelled() => Err(std::io::Error::other("cancelled")),
//!             body = fetch(attempt.number()) => body,
//!         }
//!     })
//!     .await?;
//! # let _ = body; Ok(()) }
//! # async fn fetch(_: u32) -> std::io::Result<String> { Ok(String::new()) }
//! ```
//!
//! # Cancellation
//!
//! The attempt is cancelled when its ceiling, `min(attempt timeout, time left)`, passes, or when
//! the caller's token fires. [`Attempt::cancelled`] and [`Attempt::is_cancelled`] cost nothing
//! until then. [`Attempt::token`] creates an owned `CancellationToken` (linked to the caller's)
//! for work the callback spawns; it is made only when asked for, is fresh for every attempt (a
//! token of a finished attempt never sees a later attempt's cancellation), and is cancelled
//! when its attempt times out, is cancelled, or ends in failure.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, Instant};

const TIMED_OUT: u8 = 1;
const CALLER: u8 = 2;
const OBSERVED: u8 = 4;
/// The callback asked for an owned token (so it may be watching it).
const HANDED_OUT: u8 = 8;
/// The owned token was made (for the callback, or armed by the blocking driver).
const MADE: u8 = 16;
/// The callback deferred its breaker evidence ([`Attempt::defer_evidence`]).
const DEFERRED: u8 = 32;

/// Why an attempt's cancellation fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fired {
    /// Its ceiling passed.
    Ceiling,
    /// The caller cancelled.
    Caller,
}

/// The handle a callback receives for one attempt.
pub struct Attempt {
    number: u32,
    /// How many earlier attempts of the call reached their callback, saturating (see
    /// [`resends`](Self::resends)).
    resends: u16,
    ceiling: Option<Duration>,
    /// When the attempt began (`None` for the one attempt of a call that needs no machine,
    /// which has no ceiling): the ceiling's instant is computed from it when asked for (most
    /// attempts finish without anyone asking).
    began: Option<Instant>,
    clock: Clock,
    state: AtomicU8,
    notify: Notify,
    caller: Option<CancellationToken>,
    /// The owned token, made on demand (`MADE` says whether it was). A lock, not a
    /// `OnceLock`: the slot is read only once the token was made, and a lock whose value is
    /// `None` costs nothing to drop, where a `OnceLock`'s drop is a call on every attempt.
    token: Mutex<Option<CancellationToken>>,
}

impl Attempt {
    #[inline(always)]
    pub(crate) fn new(clock: Clock, caller: Option<&CancellationToken>) -> Self {
        Attempt::numbered(clock, caller, 0)
    }

    /// Attempt `number` of a call with no ceiling, ready to run (what `begin` would make of a
    /// new handle, without resetting what is already fresh).
    #[inline(always)]
    pub(crate) fn numbered(clock: Clock, caller: Option<&CancellationToken>, number: u32) -> Self {
        Attempt {
            number,
            resends: 0,
            ceiling: None,
            began: None,
            clock,
            state: AtomicU8::new(0),
            notify: Notify::const_new(),
            caller: caller.cloned(),
            token: Mutex::new(None),
        }
    }

    /// A handle already begun for attempt `number`, as [`begin`](Self::begin) would make it:
    /// what a driver makes for its first attempt.
    #[inline(always)]
    pub(crate) fn begun(
        clock: Clock,
        caller: Option<&CancellationToken>,
        number: u32,
        ceiling: Option<Duration>,
        now: Instant,
        resends: u16,
    ) -> Self {
        Attempt {
            number,
            resends,
            ceiling,
            began: Some(now),
            clock,
            state: AtomicU8::new(0),
            notify: Notify::const_new(),
            caller: caller.cloned(),
            token: Mutex::new(None),
        }
    }

    /// Makes this handle the next attempt's: a new number and ceiling, no cancellation, and no
    /// owned token (a new one is made if the next attempt asks); `resends`: how many earlier
    /// attempts reached their callback.
    #[inline]
    pub(crate) fn begin(
        &mut self,
        number: u32,
        ceiling: Option<Duration>,
        now: Instant,
        resends: u16,
    ) {
        self.number = number;
        self.resends = resends;
        self.ceiling = ceiling;
        self.began = Some(now);
        *self.state.get_mut() = 0;
        self.token
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// Cancels the attempt: its `cancelled()` futures complete and its owned token fires.
    pub(crate) fn fire(&self, why: Fired) {
        let bit = match why {
            Fired::Ceiling => TIMED_OUT,
            Fired::Caller => CALLER,
        };
        self.state.fetch_or(bit, Ordering::AcqRel);
        self.notify.notify_waiters();
        if let Some(token) = self.slot().as_ref() {
            token.cancel();
        }
    }

    /// Ends the attempt: a failed attempt's owned token is cancelled so work it spawned stops.
    #[inline]
    pub(crate) fn end(&self, succeeded: bool) {
        if !succeeded && let Some(token) = self.slot().as_ref() {
            token.cancel();
        }
    }

    /// Whether the callback could have seen the cancellation: it awaited or checked it, or
    /// handed out an owned token.
    pub(crate) fn was_observed(&self) -> bool {
        self.state.load(Ordering::Acquire) & (OBSERVED | HANDED_OUT) != 0
    }

    /// The owned token, made now without counting as handed to the callback: blocking
    /// execution schedules it to fire at the ceiling.
    pub(crate) fn arm_token(&self) -> CancellationToken {
        self.owned()
    }

    /// The owned token, made now if it was not yet.
    fn owned(&self) -> CancellationToken {
        let mut slot = self.slot();
        let token = slot
            .get_or_insert_with(|| match &self.caller {
                Some(caller) => caller.child_token(),
                None => CancellationToken::new(),
            })
            .clone();
        self.state.fetch_or(MADE, Ordering::AcqRel);
        token
    }

    /// The owned token's slot, locked.
    fn slot(&self) -> MutexGuard<'_, Option<CancellationToken>> {
        self.token.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The owned token, if it was made.
    fn made(&self) -> Option<CancellationToken> {
        if self.state.load(Ordering::Acquire) & MADE == 0 {
            return None;
        }
        self.slot().clone()
    }

    /// The clock the attempt's ceiling is measured on: the policy's.
    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The caller's token, if the call was given one.
    pub(crate) fn caller(&self) -> Option<&CancellationToken> {
        self.caller.as_ref()
    }

    /// The attempt's number: 1 for the first call, 2 for the first retry.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// How many earlier attempts of this call reached their callback (were sent): 0 for the
    /// first attempt the dependency sees, whatever its [`number`](Self::number), since an
    /// attempt admission refused never reached it. More than 0 makes this attempt a retry or
    /// a hedge: the retry mark rampart-http writes follows it, and its attempt span records
    /// it as OpenTelemetry's `http.request.resend_count`. Saturates at 65,535.
    pub fn resends(&self) -> u32 {
        u32::from(self.resends)
    }

    /// The attempt's ceiling as a span, `min(attempt timeout, time left)`; `None` when
    /// unbounded.
    pub fn timeout(&self) -> Option<Duration> {
        self.ceiling
    }

    /// The instant of the attempt's ceiling, `min(attempt timeout, time left)` after its
    /// start; `None` when unbounded. (The call's deadline, the instant its caller stops
    /// waiting, is the [`Deadline`](crate::Deadline) the call was given or inherited.)
    #[inline]
    pub fn ceiling(&self) -> Option<Instant> {
        match (self.ceiling, self.began) {
            (Some(ceiling), Some(began)) => began.checked_add(ceiling),
            _ => None,
        }
    }

    /// Time left before the ceiling; `None` when unbounded, zero once it has passed.
    pub fn remaining(&self) -> Option<Duration> {
        self.ceiling()
            .map(|d| d.saturating_duration_since(self.clock.now()))
    }

    /// Whether the attempt has been cancelled (ceiling or caller).
    pub fn is_cancelled(&self) -> bool {
        let state = self.state.load(Ordering::Acquire);
        let token_fired = state & MADE != 0
            && self
                .slot()
                .as_ref()
                .is_some_and(CancellationToken::is_cancelled);
        if state & (TIMED_OUT | CALLER) != 0 || token_fired {
            self.state.fetch_or(OBSERVED, Ordering::AcqRel);
            true
        } else {
            false
        }
    }

    /// Completes when the attempt is cancelled: its ceiling passed or the caller cancelled.
    ///
    /// Cancel safe. Costs no allocation.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            match self.made() {
                None => notified.await,
                // A blocking attempt's token is cancelled by a timer, not through `fire`.
                Some(token) => {
                    let mut token = std::pin::pin!(token.cancelled());
                    std::future::poll_fn(|cx| {
                        if notified.as_mut().poll(cx).is_ready()
                            || token.as_mut().poll(cx).is_ready()
                        {
                            std::task::Poll::Ready(())
                        } else {
                            std::task::Poll::Pending
                        }
                    })
                    .await;
                }
            }
        }
    }

    /// An owned token for work that must outlive a borrow of the attempt (a spawned task, an
    /// outbound call that takes a token, a nested policy's caller token).
    ///
    /// Created on first use (one allocation), linked to the caller's token, cancelled at the
    /// ceiling, and fresh for each attempt.
    pub fn token(&self) -> CancellationToken {
        let token = self.owned();
        if self.state.fetch_or(HANDED_OUT, Ordering::AcqRel) & (TIMED_OUT | CALLER) != 0 {
            token.cancel();
        }
        token
    }

    /// Says that a success of this attempt is not yet evidence of the dependency's health:
    /// its answer will say so later, after the call has returned it. The breaker then counts
    /// nothing for the attempt when it succeeds (a failure counts as ever), and whoever reads
    /// the rest of the answer gives the breaker its verdict with
    /// [`Breaker::record_late`](crate::breaker::Breaker::record_late).
    ///
    /// What it is for: a gRPC call's status comes in the trailers, after the response's
    /// headers, which is when the call returns. rampart-http defers the evidence of a gRPC
    /// response whose status is still to come, and records the status its trailers carry.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use rampart::breaker::{Breaker, BreakerState, Evidence};
    /// use rampart::{Instant, Policy};
    ///
    /// let breaker = Breaker::builder().consecutive_failures(1).build()?;
    /// let policy = Policy::builder().breaker(breaker.clone()).build()?;
    /// // The call succeeds as far as it can tell...
    /// policy
    ///     .run(async |attempt| {
    ///         attempt.defer_evidence();
    ///         Ok::<_, std::io::Error>(())
    ///     })
    ///     .await?;
    /// assert_eq!(breaker.state(Instant::now()), BreakerState::Closed);
    /// // ...and the rest of its answer says the dependency failed.
    /// breaker.record_late(Evidence::Failure, Duration::ZERO, Instant::now());
    /// assert!(matches!(breaker.state(Instant::now()), BreakerState::Open { .. }));
    /// # Ok(()) }
    /// ```
    pub fn defer_evidence(&self) {
        self.state.fetch_or(DEFERRED, Ordering::Release);
    }

    /// Whether the callback deferred its breaker evidence ([`defer_evidence`](Self::defer_evidence)).
    #[inline]
    pub(crate) fn evidence_deferred(&self) -> bool {
        self.state.load(Ordering::Acquire) & DEFERRED != 0
    }

    #[inline]
    pub(crate) fn fired(&self) -> Option<Fired> {
        let state = self.state.load(Ordering::Acquire);
        if state & CALLER != 0 {
            Some(Fired::Caller)
        } else if state & TIMED_OUT != 0 {
            Some(Fired::Ceiling)
        } else {
            None
        }
    }
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("number", &self.number)
            .field("timeout", &self.ceiling)
            .field("cancelled", &self.fired())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_token_is_fresh_for_each_attempt() {
        let mut attempt = Attempt::new(Clock::system(), None);
        attempt.begin(1, None, Instant::now(), 0);
        let first = attempt.token();
        attempt.fire(Fired::Ceiling);
        assert!(first.is_cancelled());
        attempt.begin(2, None, Instant::now(), 1);
        let second = attempt.token();
        assert!(!second.is_cancelled());
        attempt.fire(Fired::Ceiling);
        assert!(second.is_cancelled());
    }

    #[test]
    fn token_asked_for_after_the_fire_is_already_cancelled() {
        let mut attempt = Attempt::new(Clock::system(), None);
        attempt.begin(1, None, Instant::now(), 0);
        attempt.fire(Fired::Ceiling);
        assert!(attempt.token().is_cancelled());
    }

    #[test]
    fn owned_token_follows_the_caller_token() {
        let caller = CancellationToken::new();
        let mut attempt = Attempt::new(Clock::system(), Some(&caller));
        attempt.begin(1, None, Instant::now(), 0);
        let token = attempt.token();
        caller.cancel();
        assert!(token.is_cancelled());
    }

    #[test]
    fn caller_wins_over_ceiling_when_both_fired() {
        let mut attempt = Attempt::new(Clock::system(), None);
        attempt.begin(1, None, Instant::now(), 0);
        attempt.fire(Fired::Ceiling);
        attempt.fire(Fired::Caller);
        assert_eq!(attempt.fired(), Some(Fired::Caller));
        assert!(!attempt.was_observed());
        assert!(attempt.is_cancelled());
        assert!(attempt.was_observed());
    }
}
