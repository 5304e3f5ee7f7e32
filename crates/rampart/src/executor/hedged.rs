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
use std::task::Poll;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::admit::Admit;
use crate::attempt::Attempt;
use crate::classify::Classify;
use crate::clock::Sleep;
use crate::deadline::Deadline;
use crate::error::Error;
use crate::hedge::MAX_LEGS;
use crate::timeout::PendingAnswer;

use super::machine::Bounded;
use super::machine::Ticket;
use super::race::{Race, admission};
use super::run::{Bounding, sleep_or_cancel};
use super::{Callback, Next, Record, Shared, begin, is_cancelled, later, settle_admission};

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
    let mut machine = begin(shared, live, log, deadline);
    // One attempt handle per leg; leg `i` is attempt `i + 1` (`max_attempts <= MAX_LEGS`).
    let attempts: [OnceLock<Attempt>; MAX_LEGS] = array::from_fn(|_| OnceLock::new());
    let mut tickets: [Option<Ticket<'_, A::Permit>>; MAX_LEGS] = array::from_fn(|_| None);
    let mut primary = pin!(None);
    let mut hedges: [Option<Pin<Box<_>>>; MAX_LEGS] = array::from_fn(|_| None);
    let mut spans: [Option<crate::observe::Span>; MAX_LEGS] = array::from_fn(|_| None);
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
                    attempt.begin(ticket.number, ticket.ceiling, ticket.began, ticket.retry);
                    attempt
                });
                let (ticket, waited) = if ticket.admitted {
                    (ticket, None)
                } else {
                    let cx = machine.ticket_context(&ticket, attempt);
                    let answer = admission(&shared.admit, &cx, attempt, caller, clock).await;
                    match settle_admission(&mut machine, ticket, answer, clock) {
                        Ok(admitted) => admitted,
                        Err(next) => break 'attempt next,
                    }
                };
                let span = machine.attempt_span(&ticket, waited);
                let callback = span.clone().instrument(op(attempt));
                spans[leg] = Some(span);
                let race = Race::new(callback, attempt, caller, clock, machine.mode());
                if leg == 0 {
                    primary.set(Some(race));
                } else {
                    hedges[leg] = Some(Box::pin(race));
                }
                tickets[leg] = Some(ticket);
                Next::Wait
            }
            Next::Wait => {
                let due = machine.hedge_due();
                if due != timer_at {
                    timer.set(None);
                    timer_at = due;
                }
                // The legs first, then the hedge timer (made only if no leg answers at once).
                let wake = std::future::poll_fn(|cx| {
                    if let Some(race) = primary.as_mut().as_pin_mut()
                        && let Poll::Ready((out, _)) = race.poll(cx)
                    {
                        return Poll::Ready(Wake::Leg(0, out));
                    }
                    for (leg, slot) in hedges.iter_mut().enumerate() {
                        if let Some(race) = slot
                            && let Poll::Ready((out, _)) = race.as_mut().poll(cx)
                        {
                            return Poll::Ready(Wake::Leg(leg, out));
                        }
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
                        if leg == 0 {
                            primary.set(None);
                        } else {
                            hedges[leg] = None;
                        }
                        let (Some(ticket), Some(attempt)) =
                            (tickets[leg].take(), attempts[leg].get())
                        else {
                            unreachable!("a leg that finished was started")
                        };
                        let next = machine.returned(
                            attempt,
                            ticket,
                            returned,
                            is_cancelled(caller),
                            clock.now(),
                        );
                        if let Some(span) = spans[leg].take() {
                            span.record_outcome(machine.attempt_outcome());
                        }
                        let next = match next {
                            Ok(value) => break Ok(value),
                            Err(next) => next,
                        };
                        // Anything but waiting on the legs makes a hedge's generator moot.
                        if !matches!(next, Next::Wait) {
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
            Next::Generate { future, .. }
                if primary.is_some() || hedges.iter().any(Option::is_some) =>
            {
                generator = Some(future);
                Next::Wait
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
    if primary.is_some() {
        primary.set(None);
        if let Some(attempt) = attempts[0].get() {
            machine.discarded(attempt);
        }
    }
    for (leg, slot) in hedges.iter_mut().enumerate() {
        if slot.take().is_some()
            && let Some(attempt) = attempts[leg].get()
        {
            machine.discarded(attempt);
        }
    }
    outcome
}
