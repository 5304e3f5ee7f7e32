//! Every decision of a call, as one state machine with no I/O.
//!
//! Longer than the project's ~600-line guide on purpose: this is the one place a reader sees
//! the whole life of a call, and every rule the drivers obey is here, in the contract's order.
//!
//! A driver (the async loop in `run.rs`, the hedged loop in `hedged.rs`, the blocking loop in
//! `crate::blocking`) tells the machine what happened and does what it answers:
//!
//! | the driver reports | the machine answers ([`Next`]) |
//! |---|---|
//! | [`start`](Machine::start): the call began at the instant given to [`Machine::new`] (caller cancelled or not) | run an attempt ([`Ticket`]), or done |
//! | [`admitted`](Machine::admitted): admission's answer for the attempt | run the callback, or what follows a refusal |
//! | [`returned`](Machine::returned): the attempt ended (its output, or abandoned) | the value (the success path, answered at once), or: sleep, run the next attempt, wait for other legs, or done |
//! | [`woke`](Machine::woke): the backoff ended (or the caller cancelled during it) | run the next attempt, or done |
//! | [`hedge`](Machine::hedge): the hedge delay passed | run a hedge leg (already admitted), or wait |
//! | [`generated`](Machine::generated): a generator's pending answer came (or the caller cancelled) | as after the generator's answer at once |
//! | [`hooked`](Machine::hooked): the on-timeout hook's pending answer came | as after the timed-out attempt |
//!
//! Time is an argument, and always there: every event carries the driver's clock reading, so
//! no rule can be skipped for want of one. A call that needs no reading at all (one attempt,
//! nothing that bounds, cancels, retries or reports it: `Policy::none()`) never builds a
//! machine; its driver runs the attempt and [`untimed`] says what the outcome means, with no
//! way to reach a breaker, budget or deadline rule. Which of the two a call is, is decided in
//! one place ([`passes_through`](super::passes_through)).
//!
//! Each driver meets only the answers it can get: the machine's [`Shape`] says whether
//! [`Next::Wait`] (wait on legs in flight) is one of them. The async and blocking drivers'
//! machines are [`Sequential`], whose `Wait` has no value, so their match has no arm that
//! cannot run; the hedged driver's is [`Hedging`].
//!
//! The machine never sleeps, polls or spawns; the shared state it consults (breaker, budget, latency estimates, a non-waiting admission try
//! for hedges) answers at once. A timeout generator or on-timeout hook that answers with a
//! future is a step it hands the driver ([`Next::Generate`], [`Next::Hook`]): the async
//! drivers await it and report back, the blocking one refuses it
//! ([`cannot_block`](Machine::cannot_block)). Its rules, in the contract's order:
//!
//! 1. Start: a cancelled caller ends the call before anything runs. The effective deadline
//!    is resolved once: the earliest of the policy's, the ambient one (if the policy reads
//!    it) and the drain grace (if draining).
//! 2. Before each attempt: no time left ends the call (`DeadlineExceeded`); the ceiling is
//!    `min(attempt timeout, time left)` (a generated or adaptive timeout is resolved here; a
//!    generator's future is awaited first, and a caller who cancels meanwhile ends the call
//!    before the callback starts); the breaker is asked (an open breaker ends the call,
//!    rejected); then the attempt counts.
//! 3. Admission's refusal stands in for the attempt's outcome; a queue wait that outlived the
//!    ceiling is a self-imposed timeout (neither breaker evidence nor charged to the budget).
//! 4. Arbitration: caller cancellation wins (only a value classified Ok is still returned,
//!    and an `Err` after the caller cancelled is never classified); else a fired ceiling turns
//!    the attempt's own cancellation outcome (an `Err` from a callback that observed its
//!    cancellation) into the timeout outcome, unless the classifier calls that error
//!    Permanent; else the outcome stands.
//! 5. After an attempt (and, when its ceiling decided it, the on-timeout hook, awaited if it
//!    answered with a future): Ok → deposit to the budget, done. Permanent → done. The time
//!    left set the ceiling that expired → `DeadlineExceeded`, on the last attempt as on any
//!    other. Attempts exhausted → done with the last outcome (`Overloaded` when admission
//!    refused it). Deadline spent → `DeadlineExceeded`. Draining → rejected. The breaker
//!    open for longer than the backoff → rejected now, nothing charged. The budget refuses
//!    (unless the outcome was a self-imposed refusal) → rejected. Backoff plus typical
//!    latency will not fit → `DeadlineExceeded`, saying so; but when that wait was a local
//!    refusal's retry-after, the call ends with the refusal and its retry-after
//!    (`Overloaded`). Else sleep (a zero backoff too: the caller's token is checked after
//!    it) and go to 2.
//! 6. Hedging: while legs are in flight, a failed leg is replaced at once (a transient
//!    failure) or hedging stops for this round (any other failure); the first Ok wins and the
//!    others are discarded unclassified.

use std::time::Duration;

use crate::admit::{Admit, AdmitContext, Feedback, Refusal};
use crate::ambient::Ambient;
use crate::attempt::{Attempt, Fired};
use crate::backoff::{BackoffInput, Curve};
use crate::breaker::{Breaker, BreakerPermit, BreakerState, Evidence, StateKind, Transition};
use crate::classify::{Classify, Verdict};
use crate::clock::Instant;
use crate::criticality::Criticality;
use crate::deadline::{Bound, Deadline, Effective};
use crate::error::{ConfigError, ConfigProblem, Error, RejectReason, Unfit};
use crate::event::{Event, RetryInfo, TimeoutInfo};
use crate::hedge::{Delay, Suppressed};
use crate::observe::{Gauges, LastOutcome, Span};
use crate::outcome::{AttemptOutcome, StopReason};
use crate::result::AttemptRecord;
use crate::timeout::{MAX_GENERATED, MaybeAsync, PendingAnswer, TimeoutContext, TimeoutMode};

use super::race::{Admitted, admission_now};
use super::shared::{Live, Shared};
use super::{ORPHAN_THRESHOLD, Record};

/// How a call ended: what `run` returns (the stop reason went to the log).
pub(crate) struct Finish<T, E> {
    pub(crate) outcome: Result<T, Error<E>>,
}

/// Which driver a machine answers: it fixes whether [`Next::Wait`] can be one of the answers.
/// A sequential driver's machine never answers it (its `W` is uninhabited, so the driver's
/// match needs no arm that cannot run); a hedged driver's does.
pub(crate) trait Shape: Sized {
    /// The value of [`Next::Wait`], if this driver can be asked to wait on legs.
    const WAIT: Option<Self>;
    /// Whether this driver can have legs in flight, which the machine then counts (a
    /// sequential call has one attempt at a time, and nothing to count).
    const LEGS: bool;
    /// Where the machine counts the legs: [`Legs`] for a driver that can have several in
    /// flight, nothing for a sequential one (whose machine, in every call's future, then
    /// carries no bytes for them).
    type Legs: Default + Counts;
}

/// Where a machine counts its legs ([`Shape::Legs`]).
pub(crate) trait Counts {
    /// The counts, `None` where there are none: they then read as [`Legs::IDLE`], and are
    /// never written.
    fn counts(&mut self) -> Option<&mut Legs>;
    /// The counts as they read.
    fn read(&self) -> &Legs;
}

impl Counts for Legs {
    #[inline(always)]
    fn counts(&mut self) -> Option<&mut Legs> {
        Some(self)
    }

    #[inline(always)]
    fn read(&self) -> &Legs {
        self
    }
}

/// A sequential machine's legs: none counted, one attempt at a time.
#[derive(Debug, Default)]
pub(crate) struct NoLegs;

impl Counts for NoLegs {
    #[inline(always)]
    fn counts(&mut self) -> Option<&mut Legs> {
        None
    }

    #[inline(always)]
    fn read(&self) -> &Legs {
        &Legs::IDLE
    }
}

/// The shape of the async and blocking drivers: one attempt at a time, never a wait on legs.
pub(crate) enum Sequential {}

impl Shape for Sequential {
    const WAIT: Option<Self> = None;
    const LEGS: bool = false;
    type Legs = NoLegs;
}

/// The shape of the hedged driver: legs in flight, which it waits on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hedging;

impl Shape for Hedging {
    const WAIT: Option<Self> = Some(Hedging);
    const LEGS: bool = true;
    type Legs = Legs;
}

/// What the driver does next.
pub(crate) enum Next<'p, T, E, P, W> {
    /// Begin an attempt with this ticket: ask admission unless it is already
    /// [`admitted`](Ticket::admitted), then run the callback.
    Attempt(Ticket<'p, P>),
    /// Sleep `delay` from `from` (the reading the machine was given), ending early if the
    /// caller cancels; then [`Machine::woke`].
    Sleep { from: Instant, delay: Duration },
    /// Hedged calls only (a sequential driver's `W` has no value): wait for a leg in flight or
    /// the hedge delay ([`Machine::hedge_due`]).
    Wait(W),
    /// The timeout generator answered with this future: await it until it answers, the
    /// caller cancels or `until` (the call's deadline) passes, then [`Machine::generated`].
    /// Legs in flight go on meanwhile (and bound it themselves).
    Generate {
        future: PendingAnswer<Duration>,
        until: Option<Instant>,
    },
    /// The on-timeout hook answered with this future: await it (reporting a panic) until it
    /// completes, the caller cancels or `until` (the call's deadline) passes, then
    /// [`Machine::hooked`].
    Hook {
        future: PendingAnswer<()>,
        until: Option<Instant>,
    },
    /// The call is over.
    Done(Finish<T, E>),
}

/// Admission's answer as the machine takes it: the ticket to run the callback with, or what
/// comes instead.
pub(crate) type Let<'p, T, E, P, W> = Result<Ticket<'p, P>, Next<'p, T, E, P, W>>;

/// An attempt the machine let start: what the driver begins the [`Attempt`] with, and the
/// permits it holds until it hands the ticket back with the attempt's end.
pub(crate) struct Ticket<'p, P> {
    pub(crate) number: u32,
    pub(crate) ceiling: Option<Duration>,
    pub(crate) began: Instant,
    /// Whether admission has answered already (nothing to ask, or a hedge admitted at once).
    pub(crate) admitted: bool,
    /// How many earlier attempts of the call reached their callback (were not refused by
    /// admission): more than none makes this one a retry or a hedge ([`Attempt::resends`]).
    /// Saturating at `u16::MAX`: a `u32` would grow every call's future by 16 bytes.
    pub(crate) resends: u16,
    breaker: Option<BreakerPermit<'p>>,
    permit: Option<P>,
}

impl<'p, P> Ticket<'p, P> {
    /// This ticket, its permits moved out of `self` (for an end decided off the success path,
    /// which takes the ticket whole).
    #[inline(always)]
    pub(crate) fn taken(&mut self) -> Ticket<'p, P> {
        Ticket {
            number: self.number,
            ceiling: self.ceiling,
            began: self.began,
            admitted: self.admitted,
            resends: self.resends,
            breaker: self.breaker.take(),
            permit: self.permit.take(),
        }
    }
}

/// How a bounded wait on a generator or hook ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bounded<O> {
    /// It answered.
    Answered(O),
    /// The caller cancelled first.
    Cancelled,
    /// The call's deadline passed first.
    Expired,
}

/// What a driver awaits for the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Nothing,
    /// A timeout generator's future (no other attempt or hedge starts meanwhile).
    Generator,
    /// The on-timeout hook's future; the timed-out outcome waits in `last`.
    Hook,
}

/// A timeout generator's answer, valid or not.
enum Generated {
    /// The timeout for the attempt (the fixed one when there is no generator).
    Now(Option<Duration>),
    /// A future of it.
    Later(PendingAnswer<Duration>),
}

/// An attempt's outcome after arbitration (caller cancellation is decided before this).
enum Outcome<T, E> {
    /// The callback returned this.
    Returned(Result<T, E>),
    /// The executor's own timeout outcome: the ceiling decided the attempt (whether the time
    /// left set that ceiling is the machine's `cut_by_deadline`).
    TimedOut { ceiling: Duration },
    /// Admission refused the attempt; the callback did not run.
    Refused(Refusal),
    /// The ceiling passed while the attempt waited for admission; the callback did not run.
    Unadmitted { ceiling: Duration },
}

/// The legs of a hedged call (a sequential call, one attempt at a time, counts none:
/// [`Shape::Legs`]).
#[derive(Debug, Default)]
pub(crate) struct Legs {
    /// The hedge delay, when the gate let this call hedge.
    delay: Option<Duration>,
    /// Legs in flight at once, at most `max_concurrent` (hence a byte: at most `MAX_LEGS`).
    concurrent: u8,
    launched: u32,
    in_flight: u8,
    /// No more hedges in this round (a suppressed or non-transient leg).
    blocked: bool,
    /// Whether a hedge started in this call.
    hedged: bool,
    due: Option<Instant>,
}

impl Legs {
    /// No leg in flight, none launched, no hedging armed: a sequential call's counts.
    const IDLE: Legs = Legs {
        delay: None,
        concurrent: 0,
        launched: 0,
        in_flight: 0,
        blocked: false,
        hedged: false,
        due: None,
    };
}

/// The state of one call: everything its decisions need.
pub(crate) struct Machine<'p, T, E, C, A, L: Record, W: Shape> {
    shared: &'p Shared<C, A>,
    /// The live settings this call started with, kept to its end.
    live: &'p Live,
    log: L,
    start: Instant,
    /// The effective deadline, measured from `start`.
    deadline: Option<Bound>,
    level: Criticality,
    attempts: u32,
    /// Attempts that admission refused (or that outwaited their ceiling in its queue): the
    /// callback did not run for them, nothing was sent. A call whose every attempt admission
    /// refused stops `Overloaded`.
    refused: u32,
    /// Whether the callback ran at least once (a call whose every attempt admission refused
    /// stops `Overloaded`).
    ran: bool,
    /// Whether the time left set the ceiling of the attempt that timed out last (it was not
    /// longer than the attempt timeout): its timeout then ends the call `DeadlineExceeded`,
    /// whichever attempt it was.
    cut_by_deadline: bool,
    previous_delay: Duration,
    /// The backoff's generator, once `seeded` (at the first random backoff of the call). A
    /// flag beside it rather than an `Option`, whose tag would take 8 more bytes of every
    /// call's future.
    rng: fastrand::Rng,
    seeded: bool,
    /// The last failed attempt's outcome, kept for the error that ends the call.
    last: Option<Outcome<T, E>>,
    legs: W::Legs,
    /// The call's `rampart.call` span: the parent of its attempts' spans and of its events
    /// (nothing without `tracing`).
    span: Span,
    /// How the attempt that ended last ended, for its span (nothing without `tracing`).
    outcome: LastOutcome,
    /// Whether the terminal event went out; if not when the machine is dropped (the call's
    /// future was dropped, or a callback panicked), the drop sends it.
    ended: bool,
    /// What the driver awaits for the machine (a generator's or hook's future), if anything.
    awaiting: Awaiting,
    /// Which driver this machine answers.
    shape: std::marker::PhantomData<fn() -> W>,
}

impl<T, E, C, A, L: Record, W: Shape> Drop for Machine<'_, T, E, C, A, L, W> {
    /// A call that ended (every call that returned) has nothing to do here: only that check
    /// is inlined into every call's future.
    #[inline(always)]
    fn drop(&mut self) {
        if !self.ended {
            self.dropped_unended();
        }
    }
}

impl<T, E, C, A, L: Record, W: Shape> Machine<'_, T, E, C, A, L, W> {
    /// The call's future was dropped (or a callback panicked) before the call ended: the
    /// terminal event goes out now, if anyone listens.
    #[cold]
    #[inline(never)]
    fn dropped_unended(&mut self) {
        if self.shared.telemetry.is_listened() {
            let now = self.shared.clock.now();
            self.shared.telemetry.emit(
                &self.span,
                Event::CallEnded {
                    policy: &self.shared.name,
                    stop: StopReason::Cancelled,
                    attempts: self.attempts,
                    elapsed: self.elapsed(now),
                },
            );
        }
    }
}

impl<'p, T, E, C, A, L, W> Machine<'p, T, E, C, A, L, W>
where
    W: Shape,
    C: Classify<T, E>,
    A: Admit,
    L: Record,
{
    /// A call of `shared` with the settings `live`, beginning at `now`, within the deadline
    /// `given` to the call as well ([`Call::deadline`](crate::Call::deadline)).
    #[inline(always)]
    pub(crate) fn new(
        shared: &'p Shared<C, A>,
        live: &'p Live,
        log: L,
        now: Instant,
        given: Option<Deadline>,
    ) -> Self {
        // The ambient context is read only by a policy that reads it; the others take the
        // constants at once (not an empty context read back from the stack).
        let (level, inherited) = if shared.ambient_deadline || shared.ambient_criticality {
            let ambient = Ambient::current();
            let level = match shared.ambient_criticality {
                true => ambient.criticality(),
                false => Criticality::Critical,
            };
            let inherited = Deadline::earliest(
                ambient.deadline().filter(|_| shared.ambient_deadline),
                given,
            );
            (level, inherited)
        } else {
            (Criticality::Critical, given)
        };
        let deadline = Bound::resolve(now, live.total_timeout, inherited, &shared.drain);
        let span = crate::observe::call_span(&shared.name);
        shared
            .telemetry
            .observer
            .call_began(&span, deadline.map(|b| b.span));
        Machine {
            span,
            shared,
            live,
            log,
            start: now,
            deadline,
            level,
            attempts: 0,
            ran: false,
            refused: 0,
            cut_by_deadline: false,
            previous_delay: Duration::ZERO,
            rng: fastrand::Rng::with_seed(0),
            seeded: false,
            last: None,
            legs: W::Legs::default(),
            outcome: LastOutcome::new(),
            ended: false,
            awaiting: Awaiting::Nothing,
            shape: std::marker::PhantomData,
        }
    }

    /// How the attempt that ended last ended, for its span.
    #[inline(always)]
    pub(crate) fn attempt_outcome(&self) -> Option<AttemptOutcome> {
        self.outcome.get()
    }

    /// The span of `ticket`'s attempt, a child of the call's, admitted after `waited`.
    #[inline(always)]
    pub(crate) fn attempt_span(
        &self,
        ticket: &Ticket<'p, A::Permit>,
        waited: Option<Duration>,
    ) -> Span {
        crate::observe::attempt_span(&self.span, ticket.number, ticket.ceiling, waited)
    }

    /// What happens to an attempt at its ceiling, in the settings this call started with.
    #[inline(always)]
    pub(crate) fn mode(&self) -> &'p TimeoutMode {
        &self.live.mode
    }

    /// Whether attempt durations are wanted even for an attempt that finished on its first
    /// poll (a log or a listener reports them).
    #[inline(always)]
    pub(crate) fn measures(&self) -> bool {
        L::TIMED || self.shared.telemetry.is_listened()
    }

    // ---- events -------------------------------------------------------------------------

    /// Rule 1: the call begins; `cancelled` is whether the caller already cancelled.
    #[inline(always)]
    pub(crate) fn start(&mut self, cancelled: bool) -> Next<'p, T, E, A::Permit, W> {
        let now = self.start;
        if cancelled {
            return Next::Done(self.cancelled(now));
        }
        if W::LEGS
            && let Some(hedge) = self.shared.hedge
        {
            let delay = self.hedge_delay(now);
            if let Some(legs) = self.legs.counts() {
                // Validation bounds `max_concurrent` by `MAX_LEGS` (8).
                legs.concurrent = u8::try_from(hedge.max_concurrent).unwrap_or(u8::MAX);
                legs.delay = delay.ok();
            }
            if let Err(reason) = delay {
                self.suppressed(reason);
            }
        }
        self.next_attempt(now)
    }

    /// Rule 3: admission answered for the attempt of `ticket`. `Ok` hands the ticket back,
    /// holding its permit: run the callback.
    pub(crate) fn admitted(
        &mut self,
        mut ticket: Ticket<'p, A::Permit>,
        answer: Admitted<A::Permit>,
        now: Instant,
    ) -> Let<'p, T, E, A::Permit, W> {
        let (outcome, retry_after) = match answer {
            Admitted::Permit(permit) => {
                if let Some(refusal) = permit.as_ref().and_then(A::dry_refusal) {
                    self.would_reject(ticket.number, refusal.by, refusal.retry_after);
                }
                ticket.permit = permit;
                ticket.admitted = true;
                return Ok(ticket);
            }
            Admitted::Cancelled => return Err(Next::Done(self.cancelled(now))),
            Admitted::Refused(refusal) => {
                self.shared.telemetry.emit(
                    &self.span,
                    Event::AttemptRefused {
                        policy: &self.shared.name,
                        attempt: ticket.number,
                        by: refusal.by,
                        retry_after: refusal.retry_after,
                    },
                );
                (Outcome::Refused(refusal), refusal.retry_after)
            }
            Admitted::TimedOut => {
                let ceiling = ticket.ceiling.unwrap_or(Duration::ZERO);
                (Outcome::Unadmitted { ceiling }, None)
            }
        };
        self.refused += 1;
        Err(self.ended(None, ticket, outcome, Verdict::Refused { retry_after }, now))
    }

    /// Rule 4: the attempt of `ticket` ended with `returned` (`None`: abandoned at its ceiling
    /// plus grace); `cancelled` is whether the caller has cancelled. `Ok` is the call's value:
    /// the attempt succeeded and the call is over (rule 5's first case, the success path,
    /// answered without building an outcome or a `Next`).
    #[inline(always)]
    pub(crate) fn returned(
        &mut self,
        attempt: &Attempt,
        ticket: &mut Ticket<'p, A::Permit>,
        returned: Option<Result<T, E>>,
        cancelled: bool,
        now: Instant,
    ) -> Result<T, Next<'p, T, E, A::Permit, W>> {
        match returned {
            Some(result @ Ok(_)) if self.succeeded(attempt, ticket, &result, cancelled, now) => {
                let Ok(value) = result else {
                    unreachable!("matched as a value above")
                };
                Ok(value)
            }
            returned => Err(self.arbitrate(attempt, ticket.taken(), returned, cancelled, now)),
        }
    }

    /// [`returned`](Self::returned), the same rules, the attempt's output left where the
    /// driver keeps it: `Ok(())` says the attempt succeeded and the call is over, its value
    /// the `Some(Ok(_))` in `returned` (taken with [`won`]); on every other end the output is
    /// taken. The success path is decided on a reference, so that a large value (a response)
    /// is not moved into the machine and back out. (A small one costs less moved: its
    /// driver keeps it in registers rather than in memory for the reference.)
    #[inline(always)]
    pub(crate) fn returned_in_place(
        &mut self,
        attempt: &Attempt,
        ticket: &mut Ticket<'p, A::Permit>,
        returned: &mut Option<Result<T, E>>,
        cancelled: bool,
        now: Instant,
    ) -> Result<(), Next<'p, T, E, A::Permit, W>> {
        if let Some(result @ Ok(_)) = &*returned
            && self.succeeded(attempt, ticket, result, cancelled, now)
        {
            return Ok(());
        }
        Err(self.arbitrate(attempt, ticket.taken(), returned.take(), cancelled, now))
    }

    /// The success path, both forms' one rule: whether the attempt's value (`result`, an
    /// `Ok`), classified Ok,
    /// came before its ceiling fired with the caller still waiting; if so, it is settled as
    /// the call's success (its end reported, its permits given back, the budget credited) and
    /// the call is closed. Else nothing is done, and the caller arbitrates.
    #[inline(always)]
    fn succeeded(
        &mut self,
        attempt: &Attempt,
        ticket: &mut Ticket<'p, A::Permit>,
        result: &Result<T, E>,
        cancelled: bool,
        now: Instant,
    ) -> bool {
        if cancelled
            || attempt.fired().is_some()
            || !self.shared.classifier.classify(result).is_ok()
        {
            return false;
        }
        self.ran = true;
        let number = ticket.number;
        self.settle(Some(attempt), ticket, AttemptOutcome::Ok, now);
        self.won(number, now);
        self.close(StopReason::Succeeded, now);
        true
    }

    /// [`returned`](Self::returned) as one `Next`, the success path's value in `Done`.
    #[cfg(test)]
    pub(crate) fn returned_next(
        &mut self,
        attempt: &Attempt,
        ticket: Ticket<'p, A::Permit>,
        returned: Option<Result<T, E>>,
        cancelled: bool,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        let mut ticket = ticket;
        match self.returned(attempt, &mut ticket, returned, cancelled, now) {
            Ok(value) => Next::Done(Finish { outcome: Ok(value) }),
            Err(next) => next,
        }
    }

    /// [`returned_in_place`](Self::returned_in_place) as one `Next`, as
    /// [`returned_next`](Self::returned_next) gives [`returned`](Self::returned).
    #[cfg(test)]
    pub(crate) fn returned_in_place_next(
        &mut self,
        attempt: &Attempt,
        ticket: Ticket<'p, A::Permit>,
        returned: Option<Result<T, E>>,
        cancelled: bool,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        let (mut ticket, mut returned) = (ticket, returned);
        match self.returned_in_place(attempt, &mut ticket, &mut returned, cancelled, now) {
            Ok(()) => Next::Done(Finish {
                outcome: Ok(won(returned)),
            }),
            Err(next) => next,
        }
    }

    /// Rule 4 for every end but the success path: arbitration, then rule 5.
    #[inline(never)]
    fn arbitrate(
        &mut self,
        attempt: &Attempt,
        ticket: Ticket<'p, A::Permit>,
        returned: Option<Result<T, E>>,
        cancelled: bool,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        self.ran = true;
        let fired = attempt.fired();
        let caller = cancelled || fired == Some(Fired::Caller);
        let ceiling = ticket.ceiling.unwrap_or(Duration::ZERO);
        let (outcome, verdict) = match returned {
            None => {
                self.shared.telemetry.emit(
                    &self.span,
                    Event::AttemptAbandoned {
                        policy: &self.shared.name,
                        attempt: ticket.number,
                        ceiling,
                        grace: match self.live.mode {
                            TimeoutMode::Abandon { grace } => grace,
                            TimeoutMode::Cooperative => Duration::ZERO,
                        },
                    },
                );
                if caller {
                    return self.cancelled_attempt(attempt, now);
                }
                (self.timed_out_outcome(&ticket), Verdict::Transient)
            }
            // The executor decides caller cancellation; no classifier is asked about it.
            Some(Err(_)) if caller => return self.cancelled_attempt(attempt, now),
            Some(result) => {
                let late = fired == Some(Fired::Ceiling);
                if late {
                    self.overrun(attempt, &ticket, now);
                }
                let verdict = self.shared.classifier.classify(&result);
                if caller && !verdict.is_ok() {
                    return self.cancelled_attempt(attempt, now);
                }
                if late && !caller {
                    self.late(attempt, &ticket, result, verdict, now)
                } else {
                    (Outcome::Returned(result), verdict)
                }
            }
        };
        self.ended(Some(attempt), ticket, outcome, verdict, now)
    }

    /// The backoff ended at `now`, or the caller cancelled during it.
    pub(crate) fn woke(&mut self, now: Instant, cancelled: bool) -> Next<'p, T, E, A::Permit, W> {
        if cancelled {
            return Next::Done(self.cancelled(now));
        }
        self.next_attempt(now)
    }

    /// When the next hedge is due, if one may start: the gate let this call hedge, a leg is
    /// free and attempts are left.
    pub(crate) fn hedge_due(&self) -> Option<Instant> {
        let legs = self.legs.read();
        let free = legs.in_flight < legs.concurrent && legs.launched < self.live.max_attempts;
        if free && !legs.blocked {
            legs.due
        } else {
            None
        }
    }

    /// Rule 6: the hedge delay passed (or a leg failed while others run): a hedge starts now,
    /// admitted at once, or not at all. A hedge that does not start costs no attempt and no
    /// budget; the budget is charged once the breaker has let it through.
    pub(crate) fn hedge(&mut self, now: Instant) -> Next<'p, T, E, A::Permit, W> {
        if let Some(legs) = self.legs.counts() {
            legs.due = None;
        }
        if self.awaiting == Awaiting::Generator || !self.hedge_free() {
            return self.wait();
        }
        let remaining = self.remaining(now);
        if remaining == Some(Duration::ZERO) {
            return self.no_hedge(None);
        }
        if self.shared.drain.is_draining() {
            return self.no_hedge(Some(Suppressed::Draining));
        }
        match self.generate(remaining, now) {
            Ok(Generated::Now(timeout)) => self.hedge_with(timeout, remaining, now),
            Ok(Generated::Later(future)) => self.generating(future),
            Err(finish) => Next::Done(finish),
        }
    }

    /// Whether a hedge could start now: hedging armed, not blocked, a leg free, attempts left.
    fn hedge_free(&self) -> bool {
        let legs = self.legs.read();
        legs.delay.is_some()
            && !legs.blocked
            && legs.in_flight > 0
            && legs.in_flight < legs.concurrent
            && legs.launched < self.live.max_attempts
    }

    /// A hedge with attempt timeout `timeout`: the breaker, the budget and admission at once.
    fn hedge_with(
        &mut self,
        timeout: Option<Duration>,
        remaining: Option<Duration>,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        let ceiling = self.ceiling(timeout, now, remaining);
        let Ok(breaker) = self.breaker_permit(now) else {
            return self.no_hedge(Some(Suppressed::BreakerNotClosed));
        };
        if self.spend_budget(now).is_err() {
            return self.no_hedge(Some(Suppressed::Budget));
        }
        let deadline = ceiling.and_then(|ceiling| now.checked_add(ceiling));
        let cx = self.admit_context(self.attempts + 1, deadline, now);
        let Some(Ok(permit)) = admission_now(&self.shared.admit, &cx) else {
            return self.no_hedge(Some(Suppressed::Admission));
        };
        if let Some(legs) = self.legs.counts() {
            legs.hedged = true;
        }
        let ticket = self.issue(ceiling, breaker, now, true, permit);
        self.shared.telemetry.emit(
            &self.span,
            Event::HedgeStarted {
                policy: &self.shared.name,
                attempt: ticket.number,
                after: self.elapsed(now),
            },
        );
        Next::Attempt(ticket)
    }

    /// Rule 2, resumed: the generator's pending answer came at `now`, or the caller
    /// cancelled or the deadline passed first (and no callback starts). The answer is
    /// validated and the attempt (or hedge, while legs are in flight) goes on as if it had
    /// been given at once, with the gates asked again at `now`.
    #[inline(never)]
    pub(crate) fn generated(
        &mut self,
        answer: Bounded<Duration>,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        self.awaiting = Awaiting::Nothing;
        let timeout = match answer {
            Bounded::Answered(timeout) => timeout,
            Bounded::Cancelled => return Next::Done(self.cancelled(now)),
            Bounded::Expired if self.legs.read().in_flight == 0 => {
                return Next::Done(self.deadline_exceeded(None, now));
            }
            Bounded::Expired => return self.no_hedge(None),
        };
        if let Err(finish) = self.checked(timeout, now) {
            return Next::Done(finish);
        }
        let remaining = self.remaining(now);
        if self.legs.read().in_flight == 0 {
            if remaining == Some(Duration::ZERO) {
                return Next::Done(self.deadline_exceeded(None, now));
            }
            return self.gated(Some(timeout), remaining, now);
        }
        // A hedge: a leg may have ended while the generator ran.
        if !self.hedge_free() {
            return self.wait();
        }
        if remaining == Some(Duration::ZERO) {
            return self.no_hedge(None);
        }
        if self.shared.drain.is_draining() {
            return self.no_hedge(Some(Suppressed::Draining));
        }
        self.hedge_with(Some(timeout), remaining, now)
    }

    /// Rule 5, resumed: the on-timeout hook's pending answer came (or its future panicked,
    /// which was reported, or the wait was cut short by the caller or the deadline); the
    /// timed-out attempt's outcome stands.
    #[inline(never)]
    pub(crate) fn hooked(&mut self, now: Instant) -> Next<'p, T, E, A::Permit, W> {
        self.awaiting = Awaiting::Nothing;
        // The timed-out outcome waited in `last`, where the decision leaves it anyway; the
        // number only names a hedge that won, which a timed-out attempt never is.
        let Some(outcome) = self.last.take() else {
            unreachable!("a driver reports a hook only when the machine handed it one")
        };
        let number = self.attempts;
        self.decide(
            number,
            outcome,
            Verdict::Transient,
            AttemptOutcome::TimedOut,
            now,
        )
    }

    /// A blocking call met a generator or hook that answered with a future: it never blocks
    /// its thread on one, so the call ends here with a configuration error naming it.
    #[cold]
    pub(crate) fn cannot_block(&mut self, now: Instant) -> Finish<T, E> {
        // A blocking call runs one attempt at a time: the hook's is the last one counted.
        let (field, attempt) = match self.awaiting {
            Awaiting::Hook => ("on_timeout", self.attempts),
            _ => ("attempt_timeout_fn", self.attempts + 1),
        };
        self.awaiting = Awaiting::Nothing;
        let problem = ConfigProblem::new(
            field,
            format!(
                "of policy `{}` answered attempt {attempt} with a future (`MaybeAsync::Pending`); a blocking call cannot await it: answer at once, or run the call with `run`",
                self.shared.name
            ),
        );
        self.config_error(problem, now)
    }

    /// A leg still in flight was dropped because another settled the call: unclassified,
    /// not breaker evidence.
    pub(crate) fn discarded(&self, attempt: &Attempt) {
        attempt.end(false);
        self.shared.telemetry.emit(
            &self.span,
            Event::HedgeDiscarded {
                policy: &self.shared.name,
                attempt: attempt.number(),
            },
        );
    }

    /// What an admission component is told about the attempt of `ticket`, begun as `attempt`.
    pub(crate) fn ticket_context(
        &self,
        ticket: &Ticket<'p, A::Permit>,
        attempt: &Attempt,
    ) -> AdmitContext<'p> {
        self.admit_context(ticket.number, attempt.ceiling(), ticket.began)
    }

    /// What an admission component is told about attempt `number` with ceiling `deadline`.
    pub(crate) fn admit_context(
        &self,
        number: u32,
        deadline: Option<Instant>,
        now: Instant,
    ) -> AdmitContext<'p> {
        AdmitContext {
            policy: &self.shared.name,
            attempt: number,
            level: self.level,
            deadline,
            now,
            clock: &self.shared.clock,
        }
    }

    /// Ends the call before any attempt: the policy cannot run this way.
    #[cold]
    pub(crate) fn config_error(&mut self, problem: ConfigProblem, now: Instant) -> Finish<T, E> {
        let error = Error::Config(ConfigError::new(vec![problem]));
        self.finish(Err(error), StopReason::Config, now)
    }

    // ---- rule 2: before an attempt ------------------------------------------------------

    /// The next attempt's ticket, or why no attempt may start.
    #[inline(always)]
    fn next_attempt(&mut self, now: Instant) -> Next<'p, T, E, A::Permit, W> {
        let remaining = self.remaining(now);
        if remaining == Some(Duration::ZERO) {
            return Next::Done(self.deadline_exceeded(None, now));
        }
        match self.generate(remaining, now) {
            Ok(Generated::Now(timeout)) => self.gated(timeout, remaining, now),
            Ok(Generated::Later(future)) => self.generating(future),
            Err(finish) => Next::Done(finish),
        }
    }

    /// The next attempt with attempt timeout `timeout`: its ceiling, then the breaker.
    #[inline(always)]
    fn gated(
        &mut self,
        timeout: Option<Duration>,
        remaining: Option<Duration>,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        let ceiling = self.ceiling(timeout, now, remaining);
        // A closed breaker's permit (or none) is taken inline; a breaker that is not closed is
        // asked out of line, which issues the ticket itself, so that its answer does not pass
        // through memory on the way to every call's ticket.
        let breaker = match &self.shared.breaker {
            None => None,
            Some(breaker) => match breaker.closed_permit() {
                Some(permit) => Some(permit),
                None => return self.gated_by(breaker, ceiling, now),
            },
        };
        Next::Attempt(self.issue(ceiling, breaker, now, A::ALWAYS_ADMITS, None))
    }

    /// [`gated`](Self::gated) when the breaker was not closed at its first look: its answer,
    /// then the ticket, or the call rejected.
    #[inline(never)]
    fn gated_by(
        &mut self,
        breaker: &'p Breaker,
        ceiling: Option<Duration>,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        match self.breaker_asked(breaker, now) {
            Ok(permit) => Next::Attempt(self.issue(ceiling, permit, now, A::ALWAYS_ADMITS, None)),
            Err(retry_after) => {
                let reason = RejectReason::DependencyUnavailable;
                Next::Done(self.reject(reason, retry_after, now))
            }
        }
    }

    /// Hands the driver a generator's future to await.
    #[cold]
    fn generating(&mut self, future: PendingAnswer<Duration>) -> Next<'p, T, E, A::Permit, W> {
        self.awaiting = Awaiting::Generator;
        let until = self.deadline().map(|bound| bound.at());
        Next::Generate { future, until }
    }

    /// Counts an attempt the gates let start and arms the next hedge.
    #[inline(always)]
    fn issue(
        &mut self,
        ceiling: Option<Duration>,
        breaker: Option<BreakerPermit<'p>>,
        now: Instant,
        admitted: bool,
        permit: Option<A::Permit>,
    ) -> Ticket<'p, A::Permit> {
        let sent = self.attempts.saturating_sub(self.refused);
        let resends = u16::try_from(sent).unwrap_or(u16::MAX);
        self.attempts += 1;
        if let Some(legs) = self.legs.counts() {
            legs.launched += 1;
            legs.in_flight = legs.in_flight.saturating_add(1);
            // The next hedge is due one delay from now (at once for a zero delay).
            legs.due = legs
                .delay
                .map(|delay| crate::clock::saturating_add(now, delay));
        }
        Ticket {
            number: self.attempts,
            ceiling,
            began: now,
            admitted,
            resends,
            breaker,
            permit,
        }
    }

    /// The next attempt's timeout before the time left: the generator's answer (validated
    /// when given at once), else the fixed one.
    #[inline(always)]
    fn generate(
        &mut self,
        remaining: Option<Duration>,
        now: Instant,
    ) -> Result<Generated, Finish<T, E>> {
        let shared = self.shared;
        let Some(generator) = &shared.timeout_fn else {
            return Ok(Generated::Now(self.live.attempt_timeout));
        };
        let answer = generator(&TimeoutContext {
            policy: &shared.name,
            attempt: self.attempts + 1,
            default: self.live.attempt_timeout,
            remaining,
        });
        match answer {
            MaybeAsync::Ready(timeout) => self.checked(timeout, now).map(Generated::Now),
            MaybeAsync::Pending(future) => Ok(Generated::Later(future)),
        }
    }

    /// A generated timeout, if valid: positive and at most a day.
    #[inline(always)]
    fn checked(
        &mut self,
        timeout: Duration,
        now: Instant,
    ) -> Result<Option<Duration>, Finish<T, E>> {
        if !timeout.is_zero() && timeout <= MAX_GENERATED {
            return Ok(Some(timeout));
        }
        Err(self.invalid_generated(timeout, now))
    }

    /// Ends the call: the generator returned `timeout`, which no attempt may have.
    #[cold]
    #[inline(never)]
    fn invalid_generated(&mut self, timeout: Duration, now: Instant) -> Finish<T, E> {
        let rule = match timeout.is_zero() {
            true => "it must return a positive duration",
            false => "it must return at most 24h",
        };
        let problem = ConfigProblem::new(
            "attempt_timeout_fn",
            format!(
                "of policy `{}` returned {timeout:?} for attempt {}; {rule}",
                self.shared.name,
                self.attempts + 1
            ),
        );
        self.config_error(problem, now)
    }

    /// `min(attempt timeout, time left)`, with an adaptive timeout resolved.
    #[inline(always)]
    fn ceiling(
        &self,
        timeout: Option<Duration>,
        now: Instant,
        remaining: Option<Duration>,
    ) -> Option<Duration> {
        let shared = self.shared;
        let timeout = match (&shared.adaptive, &shared.latency.ceiling) {
            (Some(adaptive), Some(estimate)) => match estimate.get(now) {
                Some(measured) => Some(adaptive.ceiling(measured, timeout)),
                None => timeout,
            },
            _ => timeout,
        };
        match (timeout, remaining) {
            (Some(t), Some(r)) => Some(t.min(r)),
            (t, r) => t.or(r),
        }
    }

    /// The breaker's answer for the next attempt; `Err` carries its retry-after.
    #[inline(always)]
    fn breaker_permit(&self, now: Instant) -> Result<Option<BreakerPermit<'p>>, Option<Duration>> {
        let Some(breaker) = &self.shared.breaker else {
            return Ok(None);
        };
        // Closed, the common case: a permit that moved nothing, so nothing to report.
        if let Some(permit) = breaker.closed_permit() {
            return Ok(Some(permit));
        }
        self.breaker_asked(breaker, now)
    }

    /// The breaker's answer when it was not closed at its first look: the transitions that
    /// asking it caused are reported, and a dry-run breaker's refusal lets the attempt run.
    #[inline(never)]
    fn breaker_asked(
        &self,
        breaker: &'p Breaker,
        now: Instant,
    ) -> Result<Option<BreakerPermit<'p>>, Option<Duration>> {
        let permit = match breaker.try_acquire(now) {
            Ok(permit) => permit,
            Err(rejected) => {
                if let Some(transition) = rejected.transition {
                    self.breaker_moved(transition);
                }
                if breaker.is_dry_run() {
                    self.would_reject(self.attempts + 1, crate::breaker::BY, rejected.retry_after);
                    return Ok(None);
                }
                return Err(rejected.retry_after);
            }
        };
        if let Some(transition) = permit.expired() {
            self.breaker_moved(transition);
        }
        if let Some(transition) = permit.transition() {
            self.breaker_moved(transition);
        }
        Ok(Some(permit))
    }

    /// A dry-run component `by` would have refused attempt `attempt`, which runs anyway.
    #[cold]
    fn would_reject(&self, attempt: u32, by: &'static str, retry_after: Option<Duration>) {
        self.shared.telemetry.emit(
            &self.span,
            Event::WouldReject {
                policy: &self.shared.name,
                attempt,
                by,
                retry_after,
            },
        );
    }

    /// Whether this call may hedge, and after how long: not `Sheddable`, not draining, the
    /// breaker closed, the estimate warm, and the delay shorter than the time left.
    fn hedge_delay(&self, now: Instant) -> Result<Duration, Suppressed> {
        let Some(hedge) = self.shared.hedge else {
            return Err(Suppressed::Cold);
        };
        if self.level.is_sheddable() {
            return Err(Suppressed::Sheddable);
        }
        if self.shared.drain.is_draining() {
            return Err(Suppressed::Draining);
        }
        if let Some(breaker) = &self.shared.breaker
            && !breaker.is_dry_run()
            && !matches!(
                breaker.state(now).kind(),
                StateKind::Closed | StateKind::ForcedClosed
            )
        {
            return Err(Suppressed::BreakerNotClosed);
        }
        let delay = match hedge.delay {
            Delay::Fixed(delay) => delay,
            Delay::Adaptive { floor, .. } => match self.shared.latency.hedge.as_ref() {
                Some(estimate) => match estimate.get(now) {
                    Some(quantile) => quantile.max(floor),
                    None => return Err(Suppressed::Cold),
                },
                None => return Err(Suppressed::Cold),
            },
        };
        if self.remaining(now).is_some_and(|left| delay >= left) {
            return Err(Suppressed::NoTime);
        }
        Ok(delay)
    }

    /// Wait on the legs in flight: reached only with a leg in flight (a hedge, or a failed
    /// leg while others run), which only a hedged call has.
    fn wait(&self) -> Next<'p, T, E, A::Permit, W> {
        match W::WAIT {
            Some(wait) => Next::Wait(wait),
            None => unreachable!(
                "a sequential call has at most one leg, and waits on none (legs in flight: {})",
                self.legs.read().in_flight
            ),
        }
    }

    /// No hedge in this round (`why`, if it is worth an event).
    #[cold]
    fn no_hedge(&mut self, why: Option<Suppressed>) -> Next<'p, T, E, A::Permit, W> {
        if let Some(legs) = self.legs.counts() {
            legs.blocked = true;
        }
        if let Some(why) = why {
            self.suppressed(why);
        }
        self.wait()
    }

    #[cold]
    fn suppressed(&self, reason: Suppressed) {
        self.shared.telemetry.emit(
            &self.span,
            Event::HedgeSuppressed {
                policy: &self.shared.name,
                reason,
            },
        );
    }

    // ---- rule 4: arbitration ------------------------------------------------------------

    /// The caller cancelled while the attempt ran (and it did not succeed).
    #[cold]
    fn cancelled_attempt(
        &mut self,
        attempt: &Attempt,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        attempt.end(false);
        if let Some(legs) = self.legs.counts() {
            legs.in_flight = legs.in_flight.saturating_sub(1);
        }
        Next::Done(self.cancelled(now))
    }

    /// The timeout outcome of the attempt of `ticket`, noting whether the time left set its
    /// ceiling (the ceiling reached the call's deadline).
    fn timed_out_outcome(&mut self, ticket: &Ticket<'p, A::Permit>) -> Outcome<T, E> {
        let ceiling = ticket.ceiling.unwrap_or(Duration::ZERO);
        self.cut_by_deadline = self
            .deadline()
            .is_some_and(|bound| crate::clock::saturating_add(ticket.began, ceiling) >= bound.at());
        Outcome::TimedOut { ceiling }
    }

    /// Reports an awaited attempt that overran its ceiling by more than the orphan threshold.
    #[cold]
    fn overrun(&self, attempt: &Attempt, ticket: &Ticket<'p, A::Permit>, now: Instant) {
        let ceiling = ticket.ceiling.unwrap_or(Duration::ZERO);
        let overrun = elapsed_since(ticket.began, now).saturating_sub(ceiling);
        if overrun > ORPHAN_THRESHOLD {
            self.shared.telemetry.emit(
                &self.span,
                Event::OrphanedWork {
                    policy: &self.shared.name,
                    attempt: attempt.number(),
                    ceiling,
                    overrun,
                },
            );
        }
    }

    /// An attempt that returned after its ceiling fired: the cancellation outcome of a
    /// callback that observed its cancellation is the timeout outcome, unless the classifier
    /// calls the error permanent; any other result is kept, with a `TimeoutIgnored` event.
    #[cold]
    fn late(
        &mut self,
        attempt: &Attempt,
        ticket: &Ticket<'p, A::Permit>,
        result: Result<T, E>,
        verdict: Verdict,
        now: Instant,
    ) -> (Outcome<T, E>, Verdict) {
        let ceiling = ticket.ceiling.unwrap_or(Duration::ZERO);
        if result.is_err() && attempt.was_observed() {
            if verdict == Verdict::Permanent {
                return (Outcome::Returned(result), verdict);
            }
            return (self.timed_out_outcome(ticket), Verdict::Transient);
        }
        self.shared.telemetry.emit(
            &self.span,
            Event::TimeoutIgnored {
                policy: &self.shared.name,
                attempt: attempt.number(),
                ceiling,
                elapsed: elapsed_since(ticket.began, now),
            },
        );
        (Outcome::Returned(result), verdict)
    }

    // ---- rule 5: after an attempt -------------------------------------------------------

    /// Ends the attempt of `ticket` (reports it, gives back its permits with its outcome)
    /// and decides what comes next.
    #[inline(always)]
    fn ended(
        &mut self,
        attempt: Option<&Attempt>,
        ticket: Ticket<'p, A::Permit>,
        outcome: Outcome<T, E>,
        verdict: Verdict,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        let number = ticket.number;
        let kind = attempt_outcome(&outcome, verdict);
        let mut ticket = ticket;
        self.settle(attempt, &mut ticket, kind, now);
        // The ceiling decided the attempt: its hook runs now that the attempt's end is
        // reported and its permits and timer released, before anything else is decided.
        if let Outcome::TimedOut { ceiling } = outcome
            && self.shared.telemetry.on_timeout.is_some()
            && let Some(hook) = self.timed_out(number, ceiling)
        {
            self.last = Some(outcome);
            return hook;
        }
        self.decide(number, outcome, verdict, kind, now)
    }

    /// Ends the attempt of `ticket`, which ended `kind`: reports it and gives back its
    /// permits with its outcome.
    #[inline(always)]
    fn settle(
        &mut self,
        attempt: Option<&Attempt>,
        ticket: &mut Ticket<'p, A::Permit>,
        kind: AttemptOutcome,
        now: Instant,
    ) {
        if let Some(attempt) = attempt {
            attempt.end(kind == AttemptOutcome::Ok);
        }
        if let Some(legs) = self.legs.counts() {
            legs.in_flight = legs.in_flight.saturating_sub(1);
        }
        let elapsed = elapsed_since(ticket.began, now);
        self.report(ticket.number, kind, elapsed, now);
        if let Some(permit) = ticket.permit.take() {
            let feedback = Feedback {
                outcome: kind,
                elapsed,
            };
            self.shared.admit.release(permit, feedback);
        }
        if let Some(permit) = ticket.breaker.take() {
            let evidence = match kind {
                // A success whose answer is still to come says nothing yet: its evidence is
                // recorded late, by whoever reads the rest (`Attempt::defer_evidence`).
                AttemptOutcome::Ok if attempt.is_some_and(Attempt::evidence_deferred) => {
                    Evidence::Ignored
                }
                kind => Evidence::from(kind),
            };
            if let Some(transition) = permit.record(evidence, elapsed, now) {
                self.breaker_moved(transition);
            }
        }
    }

    /// Calls the on-timeout hook for attempt `number`; a future it answers with is the
    /// driver's to await (the timed-out outcome then waits in `last`).
    #[cold]
    #[inline(never)]
    fn timed_out(
        &mut self,
        number: u32,
        ceiling: Duration,
    ) -> Option<Next<'p, T, E, A::Permit, W>> {
        let future = self.shared.telemetry.timed_out(TimeoutInfo {
            policy: &self.shared.name,
            attempt: number,
            timeout: ceiling,
        })?;
        self.awaiting = Awaiting::Hook;
        let until = self.deadline().map(|bound| bound.at());
        Some(Next::Hook { future, until })
    }

    /// Tells listeners, the log and the latency estimates.
    #[inline(always)]
    fn report(&mut self, number: u32, kind: AttemptOutcome, elapsed: Duration, now: Instant) {
        let policy = &*self.shared.name;
        let telemetry = &self.shared.telemetry;
        self.outcome.set(kind);
        if telemetry.is_listened() {
            telemetry.emit(
                &self.span,
                Event::AttemptEnded {
                    policy,
                    attempt: number,
                    outcome: kind,
                    elapsed,
                },
            );
        }
        self.log.record(AttemptRecord {
            number,
            outcome: kind,
            elapsed,
        });
        if kind == AttemptOutcome::Ok && !elapsed.is_zero() {
            self.shared.latency.record(elapsed, now);
        }
    }

    /// Rule 5 (and rule 6 while other legs are in flight).
    #[inline(always)]
    fn decide(
        &mut self,
        number: u32,
        outcome: Outcome<T, E>,
        verdict: Verdict,
        kind: AttemptOutcome,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        match verdict {
            Verdict::Ok => {
                self.won(number, now);
                let result = self.result(outcome);
                return Next::Done(self.finish(result, StopReason::Succeeded, now));
            }
            Verdict::Permanent => {
                let result = self.result(outcome);
                return Next::Done(self.finish(result, StopReason::Permanent, now));
            }
            _ => {}
        }
        self.retry_or_stop(outcome, verdict, kind, now)
    }

    /// Rule 5 after attempt `number` succeeded: the hedge that won is reported, the budget
    /// credited.
    #[inline(always)]
    fn won(&mut self, number: u32, now: Instant) {
        if self.legs.read().hedged {
            self.shared.telemetry.emit(
                &self.span,
                Event::HedgeWon {
                    policy: &self.shared.name,
                    attempt: number,
                },
            );
        }
        if let Some(budget) = &self.shared.budget {
            budget.deposit(now);
        }
    }

    /// Rule 5 after a failed attempt: retry, hedge, or stop. Out of line, so that the cold
    /// decisions do not weigh on the register allocation of the success path it is inlined
    /// into (every call's state machine).
    #[inline(never)]
    fn retry_or_stop(
        &mut self,
        outcome: Outcome<T, E>,
        verdict: Verdict,
        kind: AttemptOutcome,
        now: Instant,
    ) -> Next<'p, T, E, A::Permit, W> {
        if let Some(legs) = self.legs.counts()
            && legs.in_flight > 0
        {
            // Other legs are running. A transient failure is replaced at once, as a hedge; a
            // dependency that asked to slow down (or a local refusal) is not.
            if verdict != Verdict::Transient {
                legs.blocked = true;
            }
            self.last = Some(outcome);
            return self.hedge(now);
        }
        // No leg left: a hedge's generator still running is moot (its driver drops it).
        self.awaiting = Awaiting::Nothing;
        // The time left set the ceiling that expired: the deadline ended the call, on the
        // last attempt as on any other.
        let deadline_cut = self.cut_by_deadline && matches!(outcome, Outcome::TimedOut { .. });
        self.last = Some(outcome);
        if deadline_cut {
            return Next::Done(self.deadline_exceeded(None, now));
        }
        if self.attempts >= self.live.max_attempts {
            let stop = match (&self.last, self.ran) {
                (Some(Outcome::Refused(_)), false) => StopReason::Overloaded,
                _ => StopReason::AttemptsExhausted,
            };
            let result = self.last_result();
            return Next::Done(self.finish(result, stop, now));
        }
        let remaining = self.remaining(now);
        if remaining == Some(Duration::ZERO) {
            return Next::Done(self.deadline_exceeded(None, now));
        }
        if self.shared.drain.is_draining() {
            return Next::Done(self.reject(RejectReason::Draining, None, now));
        }
        let curve = match verdict {
            Verdict::Throttled { .. } => Curve::Throttled,
            _ => Curve::Transient,
        };
        let delay = self.backoff(curve, verdict.retry_after());
        // A breaker that will still be open when the backoff ends refuses the retry now: no
        // sleep, no budget charged for an attempt that would never run.
        if let Some(breaker) = &self.shared.breaker
            && !breaker.is_dry_run()
        {
            match breaker.state(now) {
                BreakerState::Open { remaining } if remaining > delay => {
                    let reason = RejectReason::DependencyUnavailable;
                    return Next::Done(self.reject(reason, Some(remaining), now));
                }
                BreakerState::Isolated => {
                    let reason = RejectReason::DependencyUnavailable;
                    return Next::Done(self.reject(reason, None, now));
                }
                _ => {}
            }
        }
        if !matches!(verdict, Verdict::Refused { .. })
            && let Err(retry_after) = self.spend_budget(now)
        {
            return Next::Done(self.reject(RejectReason::BudgetExhausted, retry_after, now));
        }
        let floor = self.live.min_attempt_time;
        let needed = self.shared.latency.typical.get().max(floor);
        if let Some(left) = remaining
            && delay.saturating_add(needed) >= left
        {
            // A local refusal asked for a wait the deadline cannot give: the refusal, with its
            // retry-after, is the answer (the deadline did not end the call; the limit did).
            if let Verdict::Refused {
                retry_after: Some(_),
            } = verdict
            {
                let result = self.last_result();
                return Next::Done(self.finish(result, StopReason::Overloaded, now));
            }
            let unfit = Unfit::new(delay, left, needed, needed == floor);
            return Next::Done(self.deadline_exceeded(Some(unfit), now));
        }
        self.shared.telemetry.retrying(
            &self.span,
            RetryInfo {
                policy: &self.shared.name,
                attempt: self.attempts,
                outcome: kind,
                delay,
            },
        );
        if let Some(legs) = self.legs.counts() {
            legs.blocked = false;
        }
        // A zero delay is a backoff too: the driver checks the caller's token before the next
        // attempt (a `Retrying` listener may have cancelled it).
        Next::Sleep { from: now, delay }
    }

    /// Charges one retry (or hedge) to the budget. A `Sheddable` call must leave half of it.
    fn spend_budget(&self, now: Instant) -> Result<(), Option<Duration>> {
        match &self.shared.budget {
            Some(budget) => {
                let reserve = if self.level.is_sheddable() { 0.5 } else { 0.0 };
                budget.try_spend(now, reserve)
            }
            None => Ok(()),
        }
    }

    fn backoff(&mut self, curve: Curve, retry_after: Option<Duration>) -> Duration {
        let backoff = &self.live.backoff;
        let input = BackoffInput {
            retry: self.attempts,
            curve,
            previous: self.previous_delay,
        };
        let delay = if backoff.is_random() {
            let shared = self.shared;
            if !self.seeded {
                let call = match backoff.is_seeded() {
                    true => shared
                        .seeded_calls
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    false => 0,
                };
                self.rng = backoff.rng(call);
                self.seeded = true;
            }
            backoff.delay(input, retry_after, &mut self.rng)
        } else {
            // No randomness to draw: no generator to seed.
            backoff.delay(input, retry_after, &mut fastrand::Rng::with_seed(0))
        };
        self.previous_delay = delay;
        delay
    }

    #[cold]
    fn breaker_moved(&self, transition: Transition) {
        self.shared.telemetry.emit(
            &self.span,
            Event::BreakerTransition {
                policy: &self.shared.name,
                from: transition.from,
                to: transition.to,
                break_duration: transition.break_duration,
            },
        );
    }

    // ---- endings ------------------------------------------------------------------------

    /// The outcome as the caller sees it: a value (even one classified transient) is returned
    /// as a value; the callback's error unchanged; the executor's timeout as `AttemptTimeout`.
    #[inline(always)]
    fn result(&self, outcome: Outcome<T, E>) -> Result<T, Error<E>> {
        match outcome {
            Outcome::Returned(Ok(value)) => Ok(value),
            Outcome::Returned(Err(e)) => Err(Error::Inner(e)),
            Outcome::TimedOut { ceiling } | Outcome::Unadmitted { ceiling } => {
                Err(Error::AttemptTimeout {
                    timeout: ceiling,
                    attempts: self.attempts,
                })
            }
            Outcome::Refused(refusal) => Err(Error::Rejected {
                reason: RejectReason::Overloaded,
                retry_after: refusal.retry_after,
                attempts: self.attempts,
                refused: self.refused,
                last: None,
            }),
        }
    }

    /// The last failure as the caller sees it, consumed.
    fn last_result(&mut self) -> Result<T, Error<E>> {
        match self.last.take() {
            Some(outcome) => self.result(outcome),
            None => Err(Error::Cancelled),
        }
    }

    /// A component refused the call: `Rejected` with the last failure (a last value, even one
    /// classified transient, is returned as the value).
    #[cold]
    fn reject(
        &mut self,
        reason: RejectReason,
        retry_after: Option<Duration>,
        now: Instant,
    ) -> Finish<T, E> {
        let stop = match reason {
            RejectReason::BudgetExhausted => StopReason::BudgetExhausted,
            RejectReason::DependencyUnavailable => StopReason::DependencyUnavailable,
            RejectReason::Overloaded => StopReason::Overloaded,
            RejectReason::Draining => StopReason::Draining,
        };
        let result = match self.last.take().map(|outcome| self.result(outcome)) {
            Some(Ok(value)) => Ok(value),
            last => Err(Error::Rejected {
                reason,
                retry_after,
                attempts: self.attempts,
                refused: self.refused,
                last: last.and_then(Result::err).map(Box::new),
            }),
        };
        self.finish(result, stop, now)
    }

    #[cold]
    fn deadline_exceeded(&mut self, unfit: Option<Unfit>, now: Instant) -> Finish<T, E> {
        let Some(bound) = self.deadline() else {
            unreachable!("a deadline is exceeded only when there is one")
        };
        let Some(source) = bound.source.reported() else {
            return self.reject(RejectReason::Draining, None, now);
        };
        let result = match self.last.take().map(|outcome| self.result(outcome)) {
            Some(Ok(value)) => Ok(value),
            last => Err(Error::DeadlineExceeded {
                timeout: bound.span,
                source,
                attempts: self.attempts,
                unfit,
                last: last.and_then(Result::err).map(Box::new),
            }),
        };
        self.finish(result, StopReason::DeadlineExceeded, now)
    }

    #[cold]
    fn cancelled(&mut self, now: Instant) -> Finish<T, E> {
        self.finish(Err(Error::Cancelled), StopReason::Cancelled, now)
    }

    /// Ends the call: exactly one terminal event.
    #[inline(always)]
    fn finish(
        &mut self,
        outcome: Result<T, Error<E>>,
        stop: StopReason,
        now: Instant,
    ) -> Finish<T, E> {
        self.close(stop, now);
        Finish { outcome }
    }

    /// The call ended for `stop`: the log and listeners are told, once.
    #[inline(always)]
    fn close(&mut self, stop: StopReason, now: Instant) {
        self.ended = true;
        self.log.stop(stop);
        self.log.settled(super::Settled {
            attempts: self.attempts,
            start: Some(self.start),
            deadline: self.deadline(),
            span: Some(&self.span),
        });
        let shared = self.shared;
        if shared.telemetry.is_listened() {
            shared.telemetry.emit(
                &self.span,
                Event::CallEnded {
                    policy: &shared.name,
                    stop,
                    attempts: self.attempts,
                    elapsed: self.elapsed(now),
                },
            );
            shared.telemetry.observer.sample(&Gauges {
                breaker: shared.breaker.as_ref(),
                budget: shared.budget.as_ref(),
                admit: &shared.admit,
                now: Some(now),
            });
        }
    }

    // ---- time ---------------------------------------------------------------------------

    #[inline(always)]
    fn remaining(&self, now: Instant) -> Option<Duration> {
        let bound = self.deadline()?;
        // At the start of the call (the first attempt) no time has been spent yet.
        if now == self.start {
            return Some(bound.span);
        }
        Some(bound.at().saturating_duration_since(now))
    }
}

impl<T, E, C, A, L: Record, W: Shape> Machine<'_, T, E, C, A, L, W> {
    fn elapsed(&self, now: Instant) -> Duration {
        elapsed_since(self.start, now)
    }

    /// The call's effective deadline, if it has one.
    #[inline(always)]
    fn deadline(&self) -> Option<Effective> {
        self.deadline.map(|bound| bound.from(self.start))
    }
}

/// The value of an attempt that [`Machine::returned_in_place`] said won the call.
#[inline(always)]
pub(crate) fn won<T, E>(returned: Option<Result<T, E>>) -> T {
    let Some(Ok(value)) = returned else {
        unreachable!("the machine answered a value")
    };
    value
}

/// The end of a call with one attempt and nothing that reads the clock, fires, retries or
/// listens (the pass-through driver's, for `Policy::none()`): the attempt returned `result`.
/// Rule 5 for a single attempt: Ok → `Succeeded`, Permanent → `Permanent`, anything else →
/// `AttemptsExhausted`, the callback's own outcome returned unchanged. No breaker, budget or
/// latency estimate is consulted: a policy with any of them reads the clock and never gets
/// here.
#[inline(always)]
pub(crate) fn untimed<T, E, C, A, L>(
    shared: &Shared<C, A>,
    attempt: &Attempt,
    result: Result<T, E>,
    log: &mut L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    L: Record,
{
    let verdict = shared.classifier.classify(&result);
    attempt.end(verdict.is_ok());
    log.stop(match verdict {
        Verdict::Ok => StopReason::Succeeded,
        Verdict::Permanent => StopReason::Permanent,
        _ => StopReason::AttemptsExhausted,
    });
    log.settled(super::Settled {
        attempts: 1,
        start: None,
        deadline: None,
        span: None,
    });
    result.map_err(Error::Inner)
}

/// Time from `began` to `now` (zero, with no subtraction, when they are the same reading).
#[inline(always)]
fn elapsed_since(began: Instant, now: Instant) -> Duration {
    if now == began {
        return Duration::ZERO;
    }
    now.saturating_duration_since(began)
}

fn attempt_outcome<T, E>(outcome: &Outcome<T, E>, verdict: Verdict) -> AttemptOutcome {
    match (outcome, verdict) {
        (Outcome::TimedOut { .. }, _) => AttemptOutcome::TimedOut,
        (Outcome::Refused(_) | Outcome::Unadmitted { .. }, _) => AttemptOutcome::Refused,
        (_, verdict) => AttemptOutcome::from(verdict),
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
