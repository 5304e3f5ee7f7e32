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
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::admit::Admit;
use crate::attempt::Attempt;
use crate::breaker::BreakerPermit;
use crate::classify::{Classify, Verdict};
use crate::clock::{Instant, Sleep};
use crate::error::Error;
use crate::event::Event;
use crate::hedge::{MAX_LEGS, Suppressed};
use crate::policy::Shared;

use super::{
    Admitted, CallState, Finish, Outcome, Race, Record, Step, admission, admission_now, execute,
    later, sleep_or_cancel,
};

/// What woke the hedged loop.
enum Wake<O> {
    /// Leg `i` finished: its output and whether it suspended.
    Leg(usize, (Option<O>, bool)),
    /// The hedge delay passed.
    HedgeDue,
}

/// Runs `op` under `shared`, hedged when the policy hedges and the gate allows.
pub(crate) async fn execute_hedged<T, E, C, A, F, L>(
    shared: &Shared<C, A>,
    caller: Option<&CancellationToken>,
    op: F,
    mut log: L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    A: Admit,
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
            call.hand_over();
            return execute(shared, caller, op, log).await;
        }
    };
    let limit = shared.max_attempts as usize;
    let concurrent = hedge.max_concurrent as usize;

    let attempts: [OnceLock<Attempt>; MAX_LEGS] = array::from_fn(|_| OnceLock::new());
    let mut began: [Option<Instant>; MAX_LEGS] = [None; MAX_LEGS];
    let mut permits: [Option<BreakerPermit<'_>>; MAX_LEGS] = array::from_fn(|_| None);
    let mut held: [Option<A::Permit>; MAX_LEGS] = array::from_fn(|_| None);
    let mut primary = pin!(None);
    let mut hedges: [Option<Pin<Box<_>>>; MAX_LEGS] = array::from_fn(|_| None);
    let mut timer = pin!(None::<Sleep>);
    let mut hedge_at: Option<Instant> = None;
    let (mut launched, mut in_flight) = (0usize, 0usize);
    // Whether a hedge started in this call, and whether hedging is off for this round.
    let (mut hedged, mut blocked) = (false, false);
    let mut last = None;
    let mut now = call.start;

    let finish = 'call: {
        if caller.is_some_and(CancellationToken::is_cancelled) {
            break 'call call.cancelled(now);
        }
        // Every turn of the loop may start one leg: the first, a hedge that came due, a
        // replacement for a failed leg, or a retry after a backoff.
        loop {
            // A leg that ended without running (admission said no) skips the wait below.
            let mut ended = None;
            if launched < limit && in_flight < concurrent && (in_flight == 0 || !blocked) {
                let leg = launched;
                if in_flight > 0 {
                    // A hedge starts now or not at all, and never holds up the legs in flight.
                    // A hedge that does not start costs no attempt and no budget.
                    match hedge_launch(&mut call, now) {
                        Ok(Some((ceiling, permit, admitted))) => {
                            hedged = true;
                            let attempt = attempts[leg].get_or_init(|| {
                                let mut attempt = Attempt::new(shared.clock.clone(), caller);
                                attempt.begin(call.attempts, ceiling, now);
                                attempt
                            });
                            began[leg] = now;
                            permits[leg] = permit;
                            held[leg] = admitted;
                            let race =
                                Race::new(op(attempt), attempt, caller, &shared.clock, shared.mode);
                            hedges[leg] = Some(Box::pin(race));
                            shared.telemetry.emit(Event::HedgeStarted {
                                policy: &shared.name,
                                attempt: attempt.number(),
                                after: call.elapsed(now),
                            });
                            launched += 1;
                            in_flight += 1;
                        }
                        // No more hedges in this round: a suppressed hedge is not retried
                        // on a timer (with a zero delay that would spin).
                        Ok(None) => blocked = true,
                        Err(finish) => break 'call finish,
                    }
                } else {
                    let (ceiling, permit) = match call.prepare(now, &mut last) {
                        Ok(prepared) => prepared,
                        Err(finish) => break 'call finish,
                    };
                    let attempt = attempts[leg].get_or_init(|| {
                        let mut attempt = Attempt::new(shared.clock.clone(), caller);
                        attempt.begin(call.attempts, ceiling, now);
                        attempt
                    });
                    began[leg] = now;
                    permits[leg] = permit;
                    launched += 1;
                    let cx = call.admit_context(attempt, now);
                    match admission(&shared.admit, &cx, attempt, caller, &shared.clock).await {
                        Admitted::Permit(admitted) => {
                            held[leg] = admitted;
                            let race =
                                Race::new(op(attempt), attempt, caller, &shared.clock, shared.mode);
                            if leg == 0 {
                                primary.set(Some(race));
                            } else {
                                hedges[leg] = Some(Box::pin(race));
                            }
                            in_flight += 1;
                        }
                        Admitted::Refused(refusal) => {
                            now = call.now();
                            ended = Some((leg, call.not_admitted(attempt, Some(refusal))));
                        }
                        Admitted::TimedOut => {
                            now = call.now();
                            ended = Some((leg, call.not_admitted(attempt, None)));
                        }
                        Admitted::Cancelled => break 'call call.cancelled(call.now()),
                    }
                }
                // The next hedge is due one delay from now (at once for a zero delay); its
                // timer is made only if the legs in flight do not answer on their first poll.
                timer.set(None);
                hedge_at = (launched < limit && !blocked).then(|| later(&shared.clock, now, delay));
            }

            let (leg, (outcome, verdict)) = match ended {
                Some(ended) => ended,
                None => {
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
                            && let Some(at) = hedge_at
                        {
                            if timer.is_none() {
                                timer.set(Some(shared.clock.sleep_until(at)));
                            }
                            if timer
                                .as_mut()
                                .as_pin_mut()
                                .is_some_and(|due| due.poll(cx).is_ready())
                            {
                                return Poll::Ready(Wake::HedgeDue);
                            }
                        }
                        Poll::Pending
                    })
                    .await;
                    let (leg, (returned, _suspended)) = match wake {
                        Wake::HedgeDue => {
                            timer.set(None);
                            hedge_at = None;
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
                    match call.arbitrate(attempt, returned, caller, began[leg], now) {
                        Some(arbitrated) => (leg, arbitrated),
                        None => {
                            attempt.end(false);
                            break 'call call.cancelled(now);
                        }
                    }
                }
            };
            let Some(attempt) = attempts[leg].get() else {
                unreachable!("a leg that ended was launched")
            };
            attempt.end(verdict.is_ok());
            let elapsed = call.elapsed_since(began[leg], now);
            let kind = call.attempt_ended(attempt, &outcome, verdict, elapsed, now, &mut log);
            call.release(held[leg].take(), kind, elapsed);
            call.settle(permits[leg].take(), kind, elapsed, now);

            let settled = matches!(verdict, Verdict::Ok | Verdict::Permanent);
            if !settled && in_flight > 0 {
                // Others are still running. A transient failure is replaced at once, as a
                // hedge; a dependency that asked to slow down (or a local refusal) is not.
                if !matches!(verdict, Verdict::Transient) {
                    blocked = true;
                }
                last = Some(outcome);
                continue;
            }
            if hedged && verdict.is_ok() {
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
                        let wake = later(&shared.clock, now, delay);
                        if sleep_or_cancel(&shared.clock, wake, caller).await {
                            break 'call call.cancelled(call.now());
                        }
                    }
                    now = call.now();
                    blocked = false;
                }
            }
        }
    };
    discard(&attempts, &mut primary, &mut hedges, shared);
    log.stop(finish.stop);
    finish.outcome
}

/// What a hedge needs to start now: its ceiling, its breaker permit and its admission permit;
/// `None` (with a `HedgeSuppressed` event) when the deadline, the drain, the breaker, the budget
/// or admission says no. A hedge that does not start is not counted as an attempt; the budget
/// is charged only once the breaker has let it through (a hedge that admission then refuses
/// has spent its token).
#[allow(clippy::type_complexity)]
fn hedge_launch<'p, T, E, C, A: Admit>(
    call: &mut CallState<'p, C, A>,
    now: Option<Instant>,
) -> Result<
    Option<(
        Option<Duration>,
        Option<BreakerPermit<'p>>,
        Option<A::Permit>,
    )>,
    Finish<T, E>,
> {
    if call.time_left(now).is_some_and(|left| left.is_zero()) {
        return Ok(None);
    }
    if call.shared.drain.is_draining() {
        call.hedge_suppressed(Suppressed::Draining);
        return Ok(None);
    }
    let ceiling = call.begin_attempt(now, &mut None::<Outcome<T, E>>)?;
    let Ok(permit) = call.breaker_permit(now) else {
        call.hedge_suppressed(Suppressed::BreakerNotClosed);
        return Ok(None);
    };
    if call.spend_budget(now).is_err() {
        call.hedge_suppressed(Suppressed::Budget);
        return Ok(None);
    }
    let deadline = match (ceiling, now) {
        (Some(ceiling), Some(now)) => now.checked_add(ceiling),
        _ => None,
    };
    let cx = call.admit_context_for(call.attempts + 1, deadline, now);
    let Some(Ok(admitted)) = admission_now(&call.shared.admit, &cx) else {
        call.hedge_suppressed(Suppressed::Admission);
        return Ok(None);
    };
    call.count_attempt();
    Ok(Some((ceiling, permit, admitted)))
}

/// Cancels and drops every leg still in flight, unclassified.
fn discard<W: Future, C, A>(
    attempts: &[OnceLock<Attempt>; MAX_LEGS],
    primary: &mut Pin<&mut Option<W>>,
    hedges: &mut [Option<Pin<Box<W>>>; MAX_LEGS],
    shared: &Shared<C, A>,
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
