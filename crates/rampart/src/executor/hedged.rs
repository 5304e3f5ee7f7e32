//! The hedged driver: the machine's decisions with up to `max_concurrent` legs in flight.
//!
//! The call starts one leg. When the machine armed a hedge (see [`crate::hedge`]), another leg
//! starts each time the hedge delay passes with no answer, as the machine allows (it charges
//! the budget, asks the breaker and admission). The first leg classified Ok wins; the others
//! are cancelled and dropped, neither classified nor breaker evidence.
//!
//! A hedge's timeout generator that answers with a future is awaited alongside the legs in
//! flight (no other hedge starts meanwhile); an on-timeout hook's future is awaited alone.
//!
//! A call of a hedging policy keeps this driver's state in one box (so that calls of policies
//! that do not hedge carry none of it); the first leg lives in it, each further leg is one
//! more box.

use std::array;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::admit::Admit;
use crate::attempt::Attempt;
use crate::classify::Classify;
use crate::clock::Sleep;
use crate::deadline::Deadline;
use crate::error::Error;
use crate::hedge::MAX_LEGS;
use crate::observe::Span;
use crate::timeout::PendingAnswer;

use super::machine::Bounded;
use super::machine::Ticket;
use super::race::{Race, admission};
use super::run::{Bounding, sleep_or_cancel};
use super::{
    Callback, Hedging, Machine, Next, Record, Shared, begin, is_cancelled, later, settle_admission,
};

/// What woke the driver while legs were in flight.
enum Wake<O> {
    /// Leg `i` finished with this output (`None`: abandoned).
    Leg(usize, Option<O>),
    /// The hedge delay passed.
    HedgeDue,
    /// A hedge's timeout generator answered.
    Generated(Duration),
}

/// Runs `op` under `shared`, hedged as the machine allows.
pub(crate) async fn drive<T, E, C, A, F, L>(
    shared: &Shared<C, A>,
    caller: Option<&CancellationToken>,
    deadline: Option<Deadline>,
    mut op: F,
    log: L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    A: Admit,
    F: Callback<T, E>,
    L: Record,
{
    let clock = &shared.clock;
    let live = shared.snapshot();
    let mut machine: Machine<'_, T, E, C, A, L, Hedging> = begin(shared, live, log, deadline);
    // One attempt handle per leg; leg `i` is attempt `i + 1` (`max_attempts <= MAX_LEGS`).
    let attempts: [OnceLock<Attempt>; MAX_LEGS] = array::from_fn(|_| OnceLock::new());
    let mut flight = pin!(Flight::new());
    let mut timer = pin!(None::<Sleep>);
    let mut timer_at = None;
    // A hedge's generator future, awaited alongside the legs in flight.
    let mut generator: Option<PendingAnswer<Duration>> = None;

    let mut next = machine.start(is_cancelled(caller));
    let outcome = loop {
        next = match next {
            Next::Attempt(ticket) => 'attempt: {
                let leg = ticket.number.saturating_sub(1) as usize;
                let Some(slot) = attempts.get(leg) else {
                    unreachable!("validation caps a hedging policy's attempts at {MAX_LEGS}")
                };
                let attempt = slot.get_or_init(|| {
                    let mut attempt = Attempt::new(clock.clone(), caller);
                    attempt.begin(ticket.number, ticket.ceiling, ticket.began, ticket.resends);
                    attempt
                });
                let (ticket, waited) = if ticket.admitted {
                    (ticket, None)
                } else {
                    let cx = machine.ticket_context(&ticket, attempt);
                    let answer = admission(&shared.admit, &cx, attempt).await;
                    match settle_admission(&mut machine, ticket, answer, clock) {
                        Ok(admitted) => admitted,
                        Err(next) => break 'attempt next,
                    }
                };
                let span = machine.attempt_span(&ticket, waited);
                let callback = span.clone().instrument(op(attempt));
                let race = Race::new(callback, attempt, machine.mode());
                flight.as_mut().launch(leg, Leg { ticket, span }, race);
                Next::Wait(Hedging)
            }
            Next::Wait(Hedging) => {
                let due = machine.hedge_due();
                if due != timer_at {
                    timer.set(None);
                    timer_at = due;
                }
                // The legs first, then the hedge timer (made only if no leg answers at once).
                let wake = std::future::poll_fn(|cx| {
                    if let Poll::Ready((leg, out)) = flight.as_mut().poll_legs(cx) {
                        return Poll::Ready(Wake::Leg(leg, out));
                    }
                    if let Some(future) = generator.as_mut()
                        && let Poll::Ready(timeout) = future.as_mut().poll(cx)
                    {
                        return Poll::Ready(Wake::Generated(timeout));
                    }
                    if let Some(at) = timer_at {
                        if timer.is_none() {
                            timer.set(Some(clock.sleep_until(at)));
                        }
                        if timer
                            .as_mut()
                            .as_pin_mut()
                            .is_some_and(|t| t.poll(cx).is_ready())
                        {
                            return Poll::Ready(Wake::HedgeDue);
                        }
                    }
                    Poll::Pending
                })
                .await;
                match wake {
                    Wake::HedgeDue => {
                        timer.set(None);
                        timer_at = None;
                        machine.hedge(clock.now())
                    }
                    Wake::Generated(timeout) => {
                        generator = None;
                        machine.generated(Bounded::Answered(timeout), clock.now())
                    }
                    Wake::Leg(leg, returned) => {
                        let (Some(Leg { mut ticket, span }), Some(attempt)) =
                            (flight.as_mut().land(leg), attempts[leg].get())
                        else {
                            unreachable!("a leg that finished was started")
                        };
                        let next = machine.returned(
                            attempt,
                            &mut ticket,
                            returned,
                            is_cancelled(caller),
                            clock.now(),
                        );
                        span.record_outcome(machine.attempt_outcome());
                        let next = match next {
                            Ok(value) => break Ok(value),
                            Err(next) => next,
                        };
                        // Anything but waiting on the legs makes a hedge's generator moot.
                        if !matches!(next, Next::Wait(_)) {
                            generator = None;
                        }
                        next
                    }
                }
            }
            // A zero backoff waits for nothing: the caller's token is checked at once.
            Next::Sleep { from, delay } if delay.is_zero() => {
                machine.woke(from, is_cancelled(caller))
            }
            Next::Sleep { from, delay } => {
                let cancelled = sleep_or_cancel(clock, later(from, delay), caller).await;
                machine.woke(clock.now(), cancelled)
            }
            // A leg's generator: with legs in flight (a hedge) it runs alongside them, whose
            // races watch the caller and the deadline; else it is awaited, bounded by both.
            Next::Generate { future, .. } if flight.in_flight() => {
                generator = Some(future);
                Next::Wait(Hedging)
            }
            Next::Generate { future, until } => {
                let answer = Bounding::new(clock, future, caller, until).await;
                machine.generated(answer, clock.now())
            }
            // The hook is awaited alone: the legs in flight are not polled meanwhile.
            Next::Hook { future, until } => {
                let hook = shared.telemetry.awaited(&shared.name, future);
                let _ = Bounding::new(clock, hook, caller, until).await;
                machine.hooked(clock.now())
            }
            Next::Done(finish) => break finish.outcome,
        };
    };
    // Every leg still in flight lost: cancelled and dropped, unclassified.
    for leg in flight.as_mut().abandon() {
        if let Some(attempt) = attempts[leg].get() {
            machine.discarded(attempt);
        }
    }
    outcome
}

/// A leg in flight: the ticket it holds and its span (its race is in [`Flight`]).
struct Leg<'p, P> {
    ticket: Ticket<'p, P>,
    span: Span,
}

pin_project_lite::pin_project! {
    /// The legs in flight; leg `i` is attempt `i + 1`. The first leg's race lives inline in
    /// the call's (boxed) state, each hedge's in one more box.
    struct Flight<'p, P, R> {
        #[pin]
        primary: Option<R>,
        hedges: [Option<Pin<Box<R>>>; MAX_LEGS],
        legs: [Option<Leg<'p, P>>; MAX_LEGS],
    }
}

impl<'p, P, O, R: Future<Output = (Option<O>, bool)>> Flight<'p, P, R> {
    fn new() -> Self {
        Flight {
            primary: None,
            hedges: array::from_fn(|_| None),
            legs: array::from_fn(|_| None),
        }
    }

    /// Starts leg `leg` (`leg < MAX_LEGS`, as the machine's attempt numbers are).
    fn launch(self: Pin<&mut Self>, leg: usize, state: Leg<'p, P>, race: R) {
        let mut this = self.project();
        if leg == 0 {
            this.primary.set(Some(race));
        } else {
            this.hedges[leg] = Some(Box::pin(race));
        }
        this.legs[leg] = Some(state);
    }

    /// Whether any leg is in flight.
    fn in_flight(&self) -> bool {
        self.legs.iter().any(Option::is_some)
    }

    /// The first leg, in leg order, that finished: its number and output (`None`: abandoned
    /// at its ceiling plus grace).
    fn poll_legs(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<(usize, Option<O>)> {
        let this = self.project();
        if let Some(race) = this.primary.as_pin_mut()
            && let Poll::Ready((out, _)) = race.poll(cx)
        {
            return Poll::Ready((0, out));
        }
        for (leg, slot) in this.hedges.iter_mut().enumerate() {
            if let Some(race) = slot
                && let Poll::Ready((out, _)) = race.as_mut().poll(cx)
            {
                return Poll::Ready((leg, out));
            }
        }
        Poll::Pending
    }

    /// Leg `leg` finished: its race is dropped, its ticket and span handed back.
    fn land(self: Pin<&mut Self>, leg: usize) -> Option<Leg<'p, P>> {
        let mut this = self.project();
        if leg == 0 {
            this.primary.set(None);
        } else {
            this.hedges[leg] = None;
        }
        this.legs[leg].take()
    }

    /// Drops every leg still in flight; the numbers of the legs dropped.
    fn abandon(self: Pin<&mut Self>) -> impl Iterator<Item = usize> {
        let mut this = self.project();
        this.primary.set(None);
        for hedge in this.hedges.iter_mut() {
            *hedge = None;
        }
        let mut dropped = [false; MAX_LEGS];
        for (leg, state) in this.legs.iter_mut().enumerate() {
            dropped[leg] = state.take().is_some();
        }
        (0..MAX_LEGS).filter(move |&leg| dropped[leg])
    }
}
