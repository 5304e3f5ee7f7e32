//! Circuit breaker: stops calling a dependency that keeps failing, for a while.
//!
//! When a dependency is down, calling it anyway wastes the caller's time (every call waits for
//! its timeout) and the dependency's chance to recover (every call is more load on something
//! already struggling). A breaker watches the outcomes of calls and, once they look bad enough,
//! *opens*: calls fail fast with [`Rejected`] for a break, and afterwards a few probe calls find
//! out whether the dependency is back.
//!
//! ```
//! use std::time::Duration;
//! use rampart::breaker::{Breaker, BreakerState, Evidence, StateKind};
//! use rampart::clock::Instant;
//!
//! let breaker = Breaker::builder().consecutive_failures(2).jitter(0.0).build()?;
//! let t0 = Instant::now();
//! let ms = Duration::from_millis;
//!
//! // Two failures in a row open it for 15 s.
//! let first = breaker.try_acquire(t0).unwrap().record(Evidence::Failure, ms(20), t0);
//! assert_eq!(first, None);
//! let opened = breaker.try_acquire(t0).unwrap().record(Evidence::Failure, ms(20), t0).unwrap();
//! assert_eq!((opened.from, opened.to), (StateKind::Closed, StateKind::Open));
//!
//! // Open: fail fast, and say when to come back.
//! let rejected = breaker.try_acquire(t0 + ms(1_000)).unwrap_err();
//! assert_eq!(rejected.retry_after, Some(ms(14_000)));
//!
//! // After the break, a probe goes through; two successful probes close it.
//! for _ in 0..2 {
//!     let probe = breaker.try_acquire(t0 + ms(15_000)).unwrap();
//!     assert!(probe.is_probe());
//!     probe.record(Evidence::Success, ms(20), t0 + ms(15_020));
//! }
//! assert_eq!(breaker.state(t0 + ms(15_020)), BreakerState::Closed);
//! # Ok::<(), rampart::error::ConfigError>(())
//! ```
//!
//! # Defaults
//!
//! | Setting | Default | |
//! |---|---|---|
//! | mode | [`failure_ratio`](BreakerBuilder::failure_ratio)`(1.0, 10 s, 100)` | opens when every call of the last 10 s failed, at least 100 of them; or [`consecutive_failures`](BreakerBuilder::consecutive_failures)`(n)` |
//! | [`slow_call`](BreakerBuilder::slow_call) | off | a success this slow counts as a failure |
//! | [`break_duration`](BreakerBuilder::break_duration) | 15 s | doubles per consecutive opening |
//! | [`max_break`](BreakerBuilder::max_break) | 2 min | cap on the doubling |
//! | [`jitter`](BreakerBuilder::jitter) | 0.1 | shortens a break by up to 10 %, never lengthens it |
//! | [`half_open_probes`](BreakerBuilder::half_open_probes) | 1 | probes in flight at once |
//! | [`probe_successes`](BreakerBuilder::probe_successes) | 2 | successful probes that close it |
//! | [`probe_timeout`](BreakerBuilder::probe_timeout) | 15 s | probes unfinished this long count as failed |
//! | [`dry_run`](BreakerBuilder::dry_run) | `false` | observe only: report what it would refuse, refuse nothing |
//!
//! # When a hard breaker is the wrong tool
//!
//! A breaker refuses *everything* once it opens, for a whole break. That is right for a
//! dependency that is down (every call would fail anyway, and the fast refusal saves the
//! caller's time and the dependency's recovery) and wrong for one that is *degraded*: a
//! dependency that still answers a quarter of its calls is worth a quarter of the callers'
//! work, and a breaker turns that partial failure into a total one. Most thresholds open on a
//! degraded dependency:
//!
//! - [`consecutive_failures`](BreakerBuilder::consecutive_failures)`(n)` opens as soon as `n`
//!   failures happen to fall in a row, which at a 25 % error rate happens within a few thousand
//!   calls for `n` = 5 (`0.25⁵ ≈ 1/1000`), rampart 0.1's default.
//! - A ratio below the error rate opens by construction; and on a chain of services each hop
//!   sees the failures of everything below it *plus the retries of those failures*, so an
//!   upper hop's failure ratio is above the leaf's error rate: a 90 % ratio opens at 90 % leaf
//!   errors.
//! - A breaker of `1.0` (every call in the window failed) still opens on a run of bad luck if
//!   `min_throughput` is small: at a 90 % error rate the first 20 calls all fail about one
//!   time in eight.
//!
//! The simulator's `defaults` scenario measures this on the retry storm's chain (4 attempts a
//! hop, rampart's retry budget, a breaker on every hop, the leaf failing at 0–100 %, depths
//! 2–4, seeds 1–5). With rampart 0.1's default, `consecutive_failures(5)` (what rampart-http's
//! outbound layer gave each host), depth 3, seed 1, no root is answered from 25 % leaf errors
//! on, where tower's retry budget alone answers all of them; over the five seeds it falls 85 to
//! 100 points below tower's budget somewhere between 25 and 40 %.
//! `failure_ratio(0.5, 10 s, 20)` answers none from 50 % on at the same depth. Of the
//! thresholds tried, only `failure_ratio(1.0, 10 s, 100)` answered exactly the roots the budget
//! alone answers at every partial error rate, and still sent nothing to a leaf failing 100 %:
//! it is the default since 0.2. So: use a breaker for a dependency that is *down* (a ratio of
//! 1.0 or close to it, with a `min_throughput` of about 100), and let the
//! [retry budget](crate::budget) bound the load on one that is degraded: it caps retries at a
//! share of the traffic instead of refusing all of it. The client-side
//! [`Throttle`](crate::limit::Throttle) refuses in proportion to failures rather than all at
//! once, but on a chain its refusals reach the hop above as refusals and compound: in each of
//! the five seeds it collapsed to no answers somewhere between 10 and 40 % leaf errors.
//!
//! The default never opens for a dependency called fewer than 100 times in 10 s: at lower
//! traffic a breaker has too few calls to tell down from degraded, and the retry budget's
//! per-second floor is what bounds the retries. Where a dead low-traffic dependency should
//! still be refused fast, set [`consecutive_failures`](BreakerBuilder::consecutive_failures)
//! (and accept that a run of failures on a degraded one opens it too).
//!
//! # Evidence
//!
//! The caller reports each attempt as [`Evidence`]: only failures count against the dependency.
//! [`Evidence::Ignored`] (throttled, permanent errors, the caller's own cancellation or refusal)
//! neither counts as a failure nor resets the consecutive count. A permit dropped without
//! [`record`](BreakerPermit::record) counts as ignored.
//!
//! # States and transitions
//!
//! *Closed* admits everything. *Open* rejects until its break has elapsed; the first
//! [`try_acquire`](Breaker::try_acquire) at or after that instant turns it *half-open* and takes
//! a probe slot (until then [`state`](Breaker::state) reads `Open { remaining: 0 }`). *Half-open*
//! admits up to `half_open_probes` probes at once, closes after `probe_successes` successful
//! probes and re-opens on a failed one, with the break doubled (up to `max_break`); a full close
//! resets the doubling. Probes that never finish do not hold it half-open for ever: once every
//! slot has been taken for `probe_timeout` since the last probe was let in, the first
//! `try_acquire` counts them as failed and re-opens it (the refusal carries that transition in
//! [`Rejected::transition`]); after the break a new probe goes through. Until that acquire,
//! [`state`](Breaker::state) still reads `HalfOpen`.
//!
//! # Manual control
//!
//! Two forced states override the rules above until [`release`](Breaker::release) returns the
//! breaker to normal operation (closed), or [`reset`](Breaker::reset) closes it and clears
//! its counts:
//!
//! | method | state | admits | records outcomes |
//! |---|---|---|---|
//! | [`isolate`](Breaker::isolate) (force open) | [`Isolated`](StateKind::Isolated) | nothing (`retry_after: None`) | nothing runs |
//! | [`force_closed`](Breaker::force_closed) | [`ForcedClosed`](StateKind::ForcedClosed) | everything | yes, but never opens |
//!
//! Closed and forced closed, the two states that admit everything, are one family: a switch
//! between them ([`force_closed`](Breaker::force_closed) from closed,
//! [`release`](Breaker::release) from forced closed) keeps the counts (the consecutive
//! failures, the ratio window), and the attempts in flight across it still count when they
//! finish, by the rule of the state they finish in. A release never opens the breaker by
//! itself: if the failures it carries back reach the threshold, the next failure opens it.
//! Every other way into either state counts from zero. These four are the only manual
//! control: every policy built with the breaker reports each change they make to its own
//! listeners ([`Event::BreakerTransition`](crate::Event::BreakerTransition)), metrics and
//! traces, as it reports a change a call caused. The thresholds themselves change at run time with
//! [`reconfigure`](Breaker::reconfigure), which keeps the state.
//!
//! The breaker emits nothing itself. Every change of state is handed to whoever caused it as a
//! [`Transition`]: from [`BreakerPermit::record`], [`isolate`](Breaker::isolate),
//! [`force_closed`](Breaker::force_closed), [`release`](Breaker::release),
//! [`reset`](Breaker::reset), for open → half-open [`BreakerPermit::transition`] on the first
//! probe's permit, and for probes that outlived their timeout [`Rejected::transition`] on the
//! refusal that noticed it. Taken in order they form one chain, each `from` the previous `to`.
//!
//! An outcome counts only in the period it was admitted in: a permit taken while closed that
//! records after the breaker opened or was isolated (even once it is closed again) changes
//! nothing, and neither does a probe from an earlier half-open period. Closed and forced
//! closed are one period across a switch between them (see manual control above).
//!
//! # Thread safety
//!
//! A [`Breaker`] is `Send + Sync`; its clones share one state. The state is one atomic word:
//! `try_acquire` while closed is a single atomic load, and recording a success while closed with
//! no failures counted is a single load too (consecutive mode). Failures, probes and half-open
//! bookkeeping are compare-and-swap loops on that word; a mutex is taken only to change state
//! and to let a probe in (a few times per half-open period), so that expiring probes cannot
//! race a new one. A refusal while every probe slot is taken reads the word and one more
//! atomic.
//! In ratio mode outcomes go to per-thread stripes of counters, so cores recording at once do
//! not contend on one cache line.
//!
//! Instants are kept as nanoseconds since the first `now` the breaker needs (an earlier instant
//! reads as that one), so every `now` handed to one breaker must come from the same clock.

// Longer than the ~600-line guide by its documentation: about 320 of its lines are the breaker's
// docs (its states, its defaults, the module template); the code is about 330, the state machine
// and its windows in the other files of `breaker/`.

mod builder;
mod permit;
mod shared;
mod state;
#[cfg(all(test, not(rampart_loom)))]
mod tests;
mod window;
mod word;

use std::fmt;
use std::time::Duration;

pub use builder::BreakerBuilder;
use builder::Config;
pub use permit::BreakerPermit;
use shared::{Shared, nanos_of};
pub use state::{BreakerState, Evidence, Rejected, StateKind, Transition};
use word::Word;

use crate::clock::Instant;
use crate::error::ConfigError;
use crate::sync::Arc;

/// The `by` of a dry-run breaker's [`Event::WouldReject`](crate::Event::WouldReject).
pub(crate) const BY: &str = "breaker";

/// A circuit breaker for one dependency. Clones share its state.
#[derive(Clone)]
pub struct Breaker {
    shared: Arc<Shared>,
}

/// What is told of a change of a breaker's state made outside a call: a manual one
/// ([`reset`](Breaker::reset), [`isolate`](Breaker::isolate),
/// [`force_closed`](Breaker::force_closed), [`release`](Breaker::release)) or late evidence
/// ([`record_late`](Breaker::record_late)). Each policy built with the breaker registers one,
/// which reports the change to that policy's listeners, metrics and traces.
pub(crate) trait Watcher: Send + Sync {
    /// `breaker` changed as `transition` says, at `now`.
    fn moved(&self, breaker: &Breaker, transition: Transition, now: Instant);
}

impl Breaker {
    /// A builder with every default (see the [module table](self#defaults)).
    pub fn builder() -> BreakerBuilder {
        BreakerBuilder::new()
    }

    fn from_config(config: Config) -> Breaker {
        Breaker {
            shared: Arc::new(Shared::new(config)),
        }
    }

    /// Asks to make one attempt at `now`. While closed this is one atomic load. When open, the
    /// first call at or after the end of the break turns it half-open and gets the probe
    /// (see [`BreakerPermit::transition`]); half-open admits only free probe slots, and
    /// re-opens when the probes holding them have outlived the
    /// [`probe_timeout`](BreakerBuilder::probe_timeout) (see [`Rejected::transition`]).
    ///
    /// # Errors
    ///
    /// [`Rejected`] while the breaker is open (with the time left of the break), isolated, or
    /// half-open with every probe slot taken; it carries the transition the refusal caused, if any.
    #[inline]
    pub fn try_acquire(&self, now: Instant) -> Result<BreakerPermit<'_>, Rejected> {
        match self.closed_permit() {
            Some(permit) => Ok(permit),
            None => self.try_acquire_slow(now),
        }
    }

    /// Records evidence about an attempt that already ended: one whose callback called
    /// [`Attempt::defer_evidence`](crate::Attempt::defer_evidence) because its answer was
    /// still to come (a gRPC status in the trailers of a response its caller was handed
    /// first). It counts as an attempt's outcome would if the breaker admitted an attempt
    /// now: closed (or forced closed), it is counted; half-open, it takes a free probe slot
    /// and counts as that probe (so that calls whose evidence always comes late can still
    /// close the breaker); open, isolated, or half-open with every slot taken, it is dropped.
    /// `elapsed` is what [`slow_call`](BreakerBuilder::slow_call) judges: the attempt's time
    /// to its first answer, not the time the rest of it took.
    ///
    /// Every transition it causes (taking the probe slot may turn an open breaker whose break
    /// is over half-open first) is reported to the policies that use the breaker, their events
    /// and gauges, as a manual change is; the one the evidence itself caused is returned.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart::breaker::{Breaker, BreakerState, Evidence};
    /// use rampart::clock::Instant;
    ///
    /// let breaker = Breaker::builder().consecutive_failures(2).build()?;
    /// let now = Instant::now();
    /// assert_eq!(breaker.record_late(Evidence::Failure, Duration::ZERO, now), None);
    /// let opened = breaker.record_late(Evidence::Failure, Duration::ZERO, now);
    /// assert_eq!(opened.map(|t| t.to), Some(rampart::breaker::StateKind::Open));
    /// // Open: late evidence is dropped.
    /// assert_eq!(breaker.record_late(Evidence::Success, Duration::ZERO, now), None);
    /// assert!(matches!(breaker.state(now), BreakerState::Open { .. }));
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    pub fn record_late(
        &self,
        evidence: Evidence,
        elapsed: Duration,
        now: Instant,
    ) -> Option<Transition> {
        let permit = match self.try_acquire(now) {
            Ok(permit) => permit,
            Err(rejected) => {
                self.told(rejected.transition, now);
                return None;
            }
        };
        self.told(permit.expired(), now);
        self.told(permit.transition(), now);
        let transition = permit.record(evidence, elapsed, now);
        self.told(transition, now)
    }

    /// [`try_acquire`](Self::try_acquire) while closed: one load, inlined into the caller, and
    /// a permit that moved nothing; `None` when the breaker is not closed.
    #[inline(always)]
    pub(crate) fn closed_permit(&self) -> Option<BreakerPermit<'_>> {
        let word = self.shared.load();
        if matches!(word.kind(), StateKind::Closed | StateKind::ForcedClosed) {
            return Some(BreakerPermit {
                breaker: self,
                admitted: word,
                opened_probe: false,
                after_expiry: false,
                settled: false,
            });
        }
        None
    }

    /// [`try_acquire`](Self::try_acquire) when the breaker was not closed at its first look.
    #[inline(never)]
    fn try_acquire_slow(&self, now: Instant) -> Result<BreakerPermit<'_>, Rejected> {
        let s = &*self.shared;
        // A re-opening by expired probes, reported with whatever this acquire ends in.
        let mut expired: Option<Transition> = None;
        loop {
            let word = s.load();
            let (admitted, opened_probe) = match word.kind() {
                StateKind::Closed | StateKind::ForcedClosed => (word, false),
                StateKind::Isolated => {
                    return Err(Rejected {
                        retry_after: None,
                        transition: expired,
                    });
                }
                StateKind::HalfOpen => {
                    let t = s.nanos(now);
                    if word.in_flight() >= s.config().config.half_open_probes {
                        if !s.probes_expired(t) {
                            return Err(Rejected {
                                retry_after: None,
                                transition: expired,
                            });
                        }
                        // Every probe in flight has outlived the probe timeout: they failed, and
                        // the break runs from their timeout. Look again: it may be over.
                        if let Some(reopened) = s.expire_probes(word, t) {
                            expired = Some(reopened);
                        }
                        continue;
                    }
                    let (generation, successes) = (word.generation(), word.successes());
                    let next = Word::half_open(generation, word.in_flight() + 1, successes);
                    let mut transitions = s.lock();
                    if !s.swap(word, next) {
                        continue;
                    }
                    s.probe_admitted(&mut transitions, t);
                    (next, false)
                }
                StateKind::Open => {
                    let t = s.nanos(now);
                    if t < word.open_until() {
                        let left = Duration::from_nanos(word.open_until() - t);
                        return Err(Rejected {
                            retry_after: Some(left),
                            transition: expired,
                        });
                    }
                    let mut transitions = s.lock();
                    let next = Word::half_open(transitions.next_generation(), 1, 0);
                    if !s.swap(word, next) {
                        continue;
                    }
                    s.probe_admitted(&mut transitions, t);
                    if let Some(nanos) = expired.and_then(|t| t.break_duration) {
                        transitions.expired = (next.generation(), nanos_of(nanos).max(1));
                    }
                    (next, true)
                }
            };
            return Ok(BreakerPermit {
                breaker: self,
                admitted,
                opened_probe,
                after_expiry: opened_probe && expired.is_some(),
                settled: false,
            });
        }
    }

    /// Whether this breaker only observes ([`BreakerBuilder::dry_run`]): it never refuses.
    pub fn is_dry_run(&self) -> bool {
        self.shared.is_dry_run()
    }

    /// The state at `now`, changing nothing (no probe is taken).
    pub fn state(&self, now: Instant) -> BreakerState {
        let word = self.shared.load();
        match word.kind() {
            StateKind::Closed => BreakerState::Closed,
            StateKind::HalfOpen => BreakerState::HalfOpen,
            StateKind::Isolated => BreakerState::Isolated,
            StateKind::ForcedClosed => BreakerState::ForcedClosed,
            StateKind::Open => {
                let left = word.open_until().saturating_sub(self.shared.nanos(now));
                BreakerState::Open {
                    remaining: Duration::from_nanos(left),
                }
            }
        }
    }

    /// Forces the breaker open (Hystrix's *force open*) until [`release`](Self::release) or
    /// [`reset`](Self::reset): every acquire is rejected with `retry_after: None`, and no
    /// probe is let in. `None` if it was already isolated; from forced closed it turns to
    /// isolated.
    ///
    /// Isolation changes what is admitted, so it starts a new period: attempts in flight when
    /// it is isolated (and probes) count for nothing whenever they finish, even after a
    /// release, and the counts are not carried through it.
    #[doc(alias = "force_open")]
    pub fn isolate(&self, now: Instant) -> Option<Transition> {
        self.told(self.force(now, StateKind::Isolated), now)
    }

    /// Forces the breaker closed (Hystrix's *force closed*) until [`release`](Self::release)
    /// or [`reset`](Self::reset): every acquire is admitted (not as a probe), outcomes are
    /// still recorded (the consecutive failures in the state, the ratio window's counts) but
    /// never open it. Use it to keep calling a dependency the breaker would cut off, while
    /// watching what it would see. `None` if it was already forced closed; from isolated it
    /// turns to forced closed.
    ///
    /// From closed it is a switch inside the closed family, which keeps what the breaker
    /// counted: the consecutive failures are carried into forced closed, the ratio window is
    /// kept, and attempts in flight across the switch still count when they finish (as
    /// outcomes while forced: counted, never opening it). From open, half-open or isolated it
    /// starts from zero (no failures, an empty window), and the attempts and probes admitted
    /// before it count for nothing.
    pub fn force_closed(&self, now: Instant) -> Option<Transition> {
        self.told(self.force(now, StateKind::ForcedClosed), now)
    }

    /// Ends a forced state ([`isolate`](Self::isolate) or
    /// [`force_closed`](Self::force_closed)) and returns the breaker to normal operation,
    /// closed. `None` (and nothing changes) when it was not forced.
    ///
    /// Released from forced closed, it is a switch inside the closed family: the breaker keeps
    /// what it counted while forced (and before, if it was forced from closed), and attempts
    /// admitted while forced still count when they finish, as outcomes of the closed breaker: a
    /// late failure can open it. The release itself never opens it, even when the failures it
    /// carries back reach the threshold: it returns closed and the next failure opens it (in
    /// consecutive mode a success first clears the count; in ratio mode the window is judged
    /// again on the next failure), as after lowering a threshold with
    /// [`reconfigure`](Self::reconfigure). Released from isolation, its counts are cleared (as
    /// by [`reset`](Self::reset)) and nothing admitted before the isolation counts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart::breaker::{Breaker, BreakerState, Evidence, StateKind};
    /// use rampart::clock::Instant;
    ///
    /// let breaker = Breaker::builder().consecutive_failures(2).build()?;
    /// let now = Instant::now();
    /// let fail = || breaker.try_acquire(now).unwrap().record(Evidence::Failure, Duration::ZERO, now);
    /// breaker.force_closed(now);
    /// assert_eq!(fail(), None);
    /// assert_eq!(fail(), None, "forced closed: counted, never opens");
    /// assert_eq!(breaker.release(now).map(|t| t.to), Some(StateKind::Closed));
    /// assert_eq!(breaker.state(now), BreakerState::Closed, "2 failures of 2, still closed");
    /// assert_eq!(fail().map(|t| t.to), Some(StateKind::Open), "the next failure opens it");
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    pub fn release(&self, now: Instant) -> Option<Transition> {
        self.told(self.released(now), now)
    }

    fn released(&self, now: Instant) -> Option<Transition> {
        let s = &*self.shared;
        s.nanos(now);
        let mut transitions = s.lock();
        loop {
            let word = s.load();
            let next = match word.kind() {
                // Inside the closed family: the same period, its counts kept.
                StateKind::ForcedClosed => Word::closed(word.generation(), word.failures()),
                StateKind::Isolated => {
                    if let Some(window) = &s.window {
                        window.clear();
                    }
                    Word::closed(transitions.next_generation(), 0)
                }
                _ => return None,
            };
            transitions.openings = 0;
            if s.swap(word, next) {
                return Some(s.transition(word, next, None));
            }
        }
    }

    /// Replaces the breaker's settings while it runs, keeping its state: `update` is handed a
    /// builder holding the current settings, and what it returns is checked exactly as
    /// [`BreakerBuilder::build`] checks it. A rejected update changes nothing and its error
    /// names every field and value it refused. `update` runs under the lock the breaker's own
    /// transitions take: keep it to setting values (it must not call this breaker's methods,
    /// which would deadlock, and while it runs no attempt can open or probe the breaker).
    ///
    /// Every clone sees the update at once; the state (closed, open with its break, half-open
    /// with its probes, forced), the consecutive failures, the ratio window's counts and the
    /// doubling of the break are kept, and the new thresholds apply from the next outcome:
    /// lowering `consecutive_failures` to or below the failures already counted opens it on the
    /// next failure; a break already running keeps its end, the next one uses the new
    /// durations. Two things cannot change on a running breaker, and an update that changes them
    /// is rejected: the mode (consecutive or ratio) with the ratio's window (the counts are kept
    /// in that window), and the [`seed`](BreakerBuilder::seed). As for a policy's
    /// [`reconfigure`](crate::Policy::reconfigure), an update keeps the settings it replaced
    /// allocated until the breaker is dropped (an update that changes nothing replaces
    /// nothing), and nothing on the success path waits or locks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart::breaker::{Breaker, Evidence};
    /// use rampart::clock::Instant;
    ///
    /// let breaker = Breaker::builder().consecutive_failures(5).build()?;
    /// let now = Instant::now();
    /// breaker.try_acquire(now).unwrap().record(Evidence::Failure, Duration::ZERO, now);
    /// breaker.reconfigure(|b| b.consecutive_failures(2).break_duration(Duration::from_secs(5)))?;
    /// // The failure counted before the update counts towards the new threshold.
    /// let opened = breaker.try_acquire(now).unwrap().record(Evidence::Failure, Duration::ZERO, now);
    /// assert!(opened.is_some());
    ///
    /// let refused = breaker.reconfigure(|b| b.consecutive_failures(0)).unwrap_err();
    /// assert_eq!(refused.to_string(), "breaker.consecutive_failures must be at least 1 (was 0)");
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting of the update (the breaker keeps its
    /// settings), or `reconfigure` after the most updates a breaker keeps.
    pub fn reconfigure(
        &self,
        update: impl FnOnce(BreakerBuilder) -> BreakerBuilder,
    ) -> Result<(), ConfigError> {
        let s = &*self.shared;
        let mut transitions = s.lock();
        let running = s.config().config.clone();
        let updated = update(BreakerBuilder::from_config(running.clone())).into_config();
        let problems = updated.problems_as_update_of(&running);
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        if updated == running {
            // Nothing to replace: an update that changes nothing keeps nothing allocated.
            return Ok(());
        }
        if !s.replace_config(&mut transitions, updated) {
            return Err(ConfigError::new(vec![crate::swap::too_many_updates()]));
        }
        Ok(())
    }

    /// Tells every live [`Watcher`] of a change made outside a call (a manual one, or late
    /// evidence), outside the transition lock so that a listener may look at the breaker, and
    /// hands the change back.
    fn told(&self, transition: Option<Transition>, now: Instant) -> Option<Transition> {
        let transition = transition?;
        let watchers: Vec<std::sync::Arc<dyn Watcher>> = {
            let mut watchers = self.shared.watchers();
            watchers.retain(|w| w.strong_count() > 0);
            watchers
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .collect()
        };
        for watcher in watchers {
            watcher.moved(self, transition, now);
        }
        Some(transition)
    }

    /// Registers `watcher` to be told of every manual change of state, as long as it lives.
    pub(crate) fn watch(&self, watcher: &std::sync::Arc<dyn Watcher>) {
        self.shared
            .watchers()
            .push(std::sync::Arc::downgrade(watcher));
    }

    /// Moves to the forced state `to` (isolated or forced closed), from whatever state.
    fn force(&self, now: Instant, to: StateKind) -> Option<Transition> {
        let s = &*self.shared;
        s.nanos(now);
        let mut transitions = s.lock();
        loop {
            let word = s.load();
            let from = word.kind();
            if from == to {
                return None;
            }
            let next = match to {
                // Inside the closed family: the same period, its counts kept.
                StateKind::ForcedClosed if from == StateKind::Closed => {
                    Word::forced_closed(word.generation(), word.failures())
                }
                // Into the closed family from outside it: a new period, counting from zero.
                StateKind::ForcedClosed => {
                    if let Some(window) = &s.window {
                        window.clear();
                    }
                    Word::forced_closed(transitions.next_generation(), 0)
                }
                _ => Word::isolated(transitions.next_generation()),
            };
            if s.swap(word, next) {
                return Some(s.transition(word, next, None));
            }
        }
    }

    /// Closes the breaker and clears its counts (and the doubling of its break), from any
    /// state, forced ones included. `None` if it was already closed (its counts are cleared
    /// all the same). From closed or forced closed the attempts in flight still count when
    /// they finish, against the cleared counts; from open, half-open or isolated they count
    /// for nothing.
    pub fn reset(&self, now: Instant) -> Option<Transition> {
        self.told(self.cleared(now), now)
    }

    fn cleared(&self, now: Instant) -> Option<Transition> {
        let s = &*self.shared;
        s.nanos(now);
        let mut transitions = s.lock();
        transitions.openings = 0;
        if let Some(window) = &s.window {
            window.clear();
        }
        loop {
            let word = s.load();
            let next = match word.kind() {
                StateKind::Closed if word.failures() == 0 => return None,
                // Inside the closed family: the same period, its count cleared.
                StateKind::Closed | StateKind::ForcedClosed => Word::closed(word.generation(), 0),
                _ => Word::closed(transitions.next_generation(), 0),
            };
            if s.swap(word, next) {
                return (word.kind() != StateKind::Closed).then(|| s.transition(word, next, None));
            }
        }
    }
}

impl fmt::Display for Breaker {
    /// One line, e.g. `breaker: open after 5 consecutive failures, break 15s doubling to 2m`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.config().config.fmt(f)
    }
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("config", &self.shared.config().config)
            .field("state", &self.shared.load().kind())
            .finish()
    }
}
