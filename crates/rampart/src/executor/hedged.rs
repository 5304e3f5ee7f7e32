//! The hedged executor: the sequential loop's decisions, with up to `max_concurrent` legs in
//! flight at once.
//!
//! The call starts one leg. If the hedge is armed (see [`crate::hedge`]), another leg starts
//! each time the hedge delay passes with no answer, up to `max_concurrent` in flight and
//! `max_attempts` in all, each charged to the retry budget and admitted by the breaker like a
//! retry. The first leg whose outcome is classified Ok wins: the others are cancelled and
//! dropped, neither classified nor breaker evidence. A leg that fails while others are in
//! flight is replaced at once (as a hedge); when the last leg in flight fails, the ordinary
//! decision applies: retry after the backoff, or end the call.
//!
//! The first leg lives inside the call's future; each further leg is one boxed future, so a
//! call whose hedge never fires allocates nothing.

use std::array;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::OnceLock;
use std::task::Poll;

use tokio_util::sync::CancellationToken;

use crate::attempt::Attempt;
use crate::breaker::BreakerPermit;
use crate::classify::{Classify, Verdict};
use crate::clock::{Instant, Sleep};
use crate::error::Error;
use crate::event::Event;
use crate::hedge::{MAX_LEGS, Suppressed};
use crate::policy::Shared;

use super::{CallState, Outcome, Race, Record, Step, execute, sleep_or_cancel};

/// What woke the hedged loop.
enum Wake<O> {
    /// Leg `i` finished: its output and whether it suspended.
    Leg(usize, (Option<O>, bool)),
    /// The hedge delay passed.
    HedgeDue,
}

/// Runs `op` under `shared`, hedged when the policy hedges and the gate allows.
pub(crate) async fn execute_hedged<T, E, C, F, L>(
    shared: &Shared<C>,
    caller: Option<&CancellationToken>,
    op: F,
    mut log: L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    F: AsyncFn(&Attempt) -> Result<T, E>,
    L: Record,
{
    let Some(hedge) = shared.hedge else {
        return execute(shared, caller, op, log).await;
    };
    let mut call = CallState::start(shared, true);
    let delay = match call.hedge_delay(&hedge, call.start) {
        Ok(delay) => delay,
        Err(reason) => {
            call.hedge_suppressed(reason);
            return execute(shared, caller, op, log).await;
        }
    };
    let limit = shared.max_attempts as usize;
    let concurrent = hedge.max_concurrent as usize;

    let attempts: [OnceLock<Attempt>; MAX_LEGS] = array::from_fn(|_| OnceLock::new());
    let mut began: [Option<Instant>; MAX_LEGS] = [None; MAX_LEGS];
    let mut permits: [Option<BreakerPermit<'_>>; MAX_LEGS] = array::from_fn(|_| None);
    let mut primary = pin!(None);
    let mut hedges: [Option<Pin<Box<_>>>; MAX_LEGS] = array::from_fn(|_| None);
    let mut timer = pin!(None::<Sleep>);
    let (mut launched, mut in_flight) = (0usize, 0usize);
    let mut last = None;
    let mut now = call.start;

    let finish = 'call: {
        if caller.is_some_and(CancellationToken::is_cancelled) {
            break 'call call.cancelled(now);
        }
        // Every turn of the loop may start one leg: the first, a hedge that came due, a
        // replacement for a failed leg, or a retry after a backoff.
        loop {
            if launched < limit && in_flight < concurrent {
                let hedging = in_flight > 0;
                let ceiling = if hedging {
                    if call.time_left(now).is_some_and(|left| left.is_zero()) {
                        None
                    } else if let Err(reason) = hedge_gate(&mut call, now) {
                        call.hedge_suppressed(reason);
                        None
                    } else {
                        match call.begin_attempt(now, &mut None::<Outcome<T, E>>) {
                            Ok(ceiling) => Some(ceiling),
                            Err(finish) => break 'call finish,
                        }
                    }
                } else {
                    match call.begin_attempt(now, &mut last) {
                        Ok(ceiling) => Some(ceiling),
                        Err(finish) => break 'call finish,
                    }
                };
                if let Some(ceiling) = ceiling {
                    let permit = if hedging {
                        call.try_admit(now).ok()
                    } else {
                        match call.admit(now, &mut last) {
                            Ok(permit) => Some(permit),
                            Err(finish) => break 'call finish,
                        }
                    };
                    if let Some(permit) = permit {
                        let leg = launched;
                        let attempt = attempts[leg].get_or_init(|| {
                            let mut attempt = Attempt::new(shared.clock.clone(), caller);
                            attempt.begin(call.attempts, ceiling, now);
                            attempt
                        });
                        began[leg] = now;
                        permits[leg] = permit;
                        let race =
                            Race::new(op(attempt), attempt, caller, &shared.clock, shared.mode);
                        if leg == 0 {
                            primary.set(Some(race));
                        } else {
                            hedges[leg] = Some(Box::pin(race));
                        }
                        if hedging {
                            shared.telemetry.emit(Event::HedgeStarted {
                                policy: &shared.name,
                                attempt: attempt.number(),
                                after: call.elapsed(now),
                            });
                        }
                        launched += 1;
                        in_flight += 1;
                    }
                }
                // The next hedge is due one delay from now (at once for a zero delay).
                if launched < limit {
                    let at = now.unwrap_or_else(|| shared.clock.now()) + delay;
                    timer.set(Some(shared.clock.sleep_until(at)));
                } else {
                    timer.set(None);
                }
            }
            let wake = std::future::poll_fn(|cx| {
                if let Some(race) = primary.as_mut().as_pin_mut()
                    && let Poll::Ready(out) = race.poll(cx)
                {
                    return Poll::Ready(Wake::Leg(0, out));
                }
                for (leg, slot) in hedges.iter_mut().enumerate() {
                    if let Some(race) = slot
                        && let Poll::Ready(out) = race.as_mut().poll(cx)
                    {
                        return Poll::Ready(Wake::Leg(leg, out));
                    }
                }
                if in_flight < concurrent
                    && let Some(due) = timer.as_mut().as_pin_mut()
                    && due.poll(cx).is_ready()
                {
                    return Poll::Ready(Wake::HedgeDue);
                }
                Poll::Pending
            })
            .await;

            let (leg, (returned, _suspended)) = match wake {
                Wake::HedgeDue => {
                    timer.set(None);
                    now = call.now();
                    continue;
                }
                Wake::Leg(leg, out) => (leg, out),
            };
            if leg == 0 {
                primary.set(None);
            } else {
                hedges[leg] = None;
            }
            in_flight -= 1;
            now = call.now();
            let Some(attempt) = attempts[leg].get() else {
                unreachable!("a leg that finished was launched")
            };
            let permit = permits[leg].take();
            let Some((outcome, verdict)) =
                call.arbitrate(attempt, returned, caller, began[leg], now)
            else {
                attempt.end(false);
                break 'call call.cancelled(now);
            };
            attempt.end(verdict.is_ok());
            let elapsed = call.elapsed_since(began[leg], now);
            let kind = call.attempt_ended(attempt, &outcome, verdict, elapsed, now, &mut log);
            call.settle(permit, kind, elapsed, now);

            let settled = matches!(verdict, Verdict::Ok | Verdict::Permanent);
            if !settled && in_flight > 0 {
                // Others are still running: this failure is replaced at once, as a hedge.
                last = Some(outcome);
                continue;
            }
            if launched > 1 && verdict.is_ok() {
                shared.telemetry.emit(Event::HedgeWon {
                    policy: &shared.name,
                    attempt: attempt.number(),
                });
            }
            if settled {
                discard(&attempts, &mut primary, &mut hedges, shared);
            }
            match call.decide(outcome, verdict, kind, now) {
                Step::Finish(finish) => break 'call finish,
                Step::Retry(delay, outcome) => {
                    last = Some(outcome);
                    if !delay.is_zero() {
                        let wake = now.unwrap_or_else(|| shared.clock.now()) + delay;
                        if sleep_or_cancel(&shared.clock, wake, caller).await {
                            break 'call call.cancelled(call.now());
                        }
                    }
                    now = call.now();
                }
            }
        }
    };
    discard(&attempts, &mut primary, &mut hedges, shared);
    log.stop(finish.stop);
    finish.outcome
}

/// Whether a hedge may launch now: the process is not draining and the budget pays for it.
fn hedge_gate<C>(call: &mut CallState<'_, C>, now: Option<Instant>) -> Result<(), Suppressed> {
    if call.shared.drain.is_draining() {
        return Err(Suppressed::Draining);
    }
    call.spend_budget(now).map_err(|_| Suppressed::Budget)
}

/// Cancels and drops every leg still in flight, unclassified.
fn discard<W: Future, C>(
    attempts: &[OnceLock<Attempt>; MAX_LEGS],
    primary: &mut Pin<&mut Option<W>>,
    hedges: &mut [Option<Pin<Box<W>>>; MAX_LEGS],
    shared: &Shared<C>,
) {
    let dropped = |leg: usize| {
        if let Some(attempt) = attempts[leg].get() {
            attempt.end(false);
            shared.telemetry.emit(Event::HedgeDiscarded {
                policy: &shared.name,
                attempt: attempt.number(),
            });
        }
    };
    if primary.is_some() {
        primary.set(None);
        dropped(0);
    }
    for (leg, slot) in hedges.iter_mut().enumerate() {
        if slot.take().is_some() {
            dropped(leg);
        }
    }
}
