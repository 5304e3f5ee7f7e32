//! The async driver: waits for what the machine asks, one attempt at a time.

use std::future::Future;
use std::task::Poll;

use tokio_util::sync::CancellationToken;

use crate::admit::Admit;
use crate::attempt::Attempt;
use crate::classify::{Classify, Verdict};
use crate::clock::{Clock, Instant};
use crate::error::Error;
use crate::outcome::StopReason;

use super::race::{Race, admission};
use super::{Callback, Machine, Next, Record, Shared, is_cancelled, later, read, waited};

/// Runs `op` under `shared`, one attempt at a time.
pub(crate) async fn drive<T, E, C, A, F, L>(
    shared: &Shared<C, A>,
    caller: Option<&CancellationToken>,
    mut op: F,
    mut log: L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    A: Admit,
    F: Callback<T, E>,
    L: Record,
{
    let live = shared.snapshot();
    if live.pass_through
        && caller.is_none()
        && !L::TIMED
        && !shared.drain.is_draining()
        && !shared.telemetry.observer.is_active()
    {
        return pass_through(shared, op, &mut log).await;
    }
    let clock = &shared.clock;
    let timed = Machine::<T, E, C, A, L>::timed(shared, live, false);
    let mut machine = Machine::new(shared, live, log, read(clock, timed));
    let mut attempt = Attempt::new(clock.clone(), caller);
    let mut next = machine.start(is_cancelled(caller));
    loop {
        next = match next {
            Next::Attempt(ticket) => 'attempt: {
                attempt.begin(ticket.number, ticket.ceiling, ticket.began);
                let (ticket, waited) = if ticket.admitted {
                    (ticket, None)
                } else {
                    let cx = machine.ticket_context(&ticket, &attempt);
                    let answer = admission(&shared.admit, &cx, &attempt, caller, clock).await;
                    let now = read(clock, timed);
                    let waited = waited(ticket.began, now);
                    match machine.admitted(ticket, answer, now) {
                        Ok(ticket) => (ticket, waited),
                        Err(next) => break 'attempt next,
                    }
                };
                let span = machine.attempt_span(&ticket, waited);
                let callback = span.clone().instrument(op(&attempt));
                let race = Race::new(callback, &attempt, caller, clock, live.mode);
                let (returned, suspended) = race.await;
                // An attempt that succeeded on its first poll took no time the call must account
                // for: the clock is read again only when the reading will be used.
                let fresh = suspended || machine.measures() || !matches!(returned, Some(Ok(_)));
                let now = if fresh {
                    read(clock, timed)
                } else {
                    ticket.began
                };
                let next = machine.returned(&attempt, ticket, returned, is_cancelled(caller), now);
                span.record_outcome(machine.attempt_outcome());
                next
            }
            Next::Sleep { from, delay } => {
                let cancelled = sleep_or_cancel(clock, later(clock, from, delay), caller).await;
                machine.woke(read(clock, timed), cancelled)
            }
            Next::Wait => unreachable!("only a hedged call waits on legs"),
            Next::Done(finish) => return finish.outcome,
        };
    }
}

/// The driver for a policy with one attempt, no bound, no listener and no caller token
/// (`Policy::none()`): nothing can fire, be retried or be reported, so the attempt simply
/// runs. The outcome and stop reason are the ones the machine would give.
#[inline(always)]
async fn pass_through<T, E, C, A, F, L>(
    shared: &Shared<C, A>,
    mut op: F,
    log: &mut L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    A: Admit,
    F: Callback<T, E>,
    L: Record,
{
    let attempt = Attempt::numbered(shared.clock.clone(), None, 1);
    let result = op(&attempt).await;
    let verdict = shared.classifier.classify(&result);
    attempt.end(verdict.is_ok());
    log.stop(match verdict {
        Verdict::Ok => StopReason::Succeeded,
        Verdict::Permanent => StopReason::Permanent,
        _ => StopReason::AttemptsExhausted,
    });
    result.map_err(Error::Inner)
}

/// Sleeps until `wake`; returns true, at once, if the caller cancels first.
pub(crate) async fn sleep_or_cancel(
    clock: &Clock,
    wake: Instant,
    caller: Option<&CancellationToken>,
) -> bool {
    let sleep = clock.sleep_until(wake);
    let Some(caller) = caller else {
        sleep.await;
        return false;
    };
    let mut sleep = std::pin::pin!(sleep);
    let mut cancelled = std::pin::pin!(caller.cancelled());
    std::future::poll_fn(|cx| {
        if cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(true);
        }
        sleep.as_mut().poll(cx).map(|()| false)
    })
    .await
}
