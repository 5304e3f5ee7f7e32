//! The async driver: waits for what the machine asks, one attempt at a time.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::admit::Admit;
use crate::attempt::Attempt;
use crate::classify::Classify;
use crate::clock::{Clock, Instant, Sleep};
use crate::deadline::Deadline;
use crate::error::Error;
use crate::observe::Reported;
use crate::timeout::PendingAnswer;

use super::machine::{Bounded, untimed, won};
use super::race::{Race, admission};
use super::{
    Callback, Machine, Next, Record, Sequential, Shared, begin, is_cancelled, later,
    passes_through, settle_admission,
};

/// Runs `op` under `shared`, one attempt at a time.
///
/// A plain function returning an `async` block: the block owns its inputs once, where an
/// `async fn` keeps a second copy of its arguments in its state (64 B of every call's future).
#[allow(clippy::manual_async_fn)]
pub(crate) fn drive<T, E, C, A, F, L>(
    shared: &Shared<C, A>,
    caller: Option<&CancellationToken>,
    deadline: Option<Deadline>,
    mut op: F,
    mut log: L,
) -> impl Future<Output = Result<T, Error<E>>>
where
    C: Classify<T, E>,
    A: Admit,
    F: Callback<T, E>,
    L: Record,
{
    async move {
        let live = shared.snapshot();
        // One attempt that nothing can bound, cancel, retry or report needs no machine:
        // nothing can fire, be retried or be reported, so the attempt simply runs (awaited
        // here, not in a nested future of its own), and the machine's `untimed` says what its
        // outcome means.
        if passes_through::<C, A, L>(shared, live, caller, deadline) {
            let attempt = Attempt::numbered(shared.clock.clone(), None, 1);
            let result = op(&attempt).await;
            return untimed(shared, &attempt, result, &mut log);
        }
        // The clock is reached through `shared` each time: a reference to it kept in a local
        // would be one more field of every call's future.
        let mut machine: Machine<'_, T, E, C, A, L, Sequential> =
            begin(shared, live, log, deadline);
        let mut next = machine.start(is_cancelled(caller));
        // The handle is made for the first attempt, and begun again for each later one.
        let mut attempt = match &next {
            Next::Attempt(first) => Attempt::begun(
                shared.clock.clone(),
                caller,
                first.number,
                first.ceiling,
                first.began,
                first.resends,
            ),
            _ => Attempt::new(shared.clock.clone(), caller),
        };
        loop {
            // An attempt is run first, its ticket left in `next` (borrowed) while it runs, so
            // that the success path moves it nowhere. The handle was begun for the ticket where
            // the machine gave it.
            if let Next::Attempt(ticket) = &mut next {
                let after: Next<'_, T, E, A::Permit, Sequential> = 'attempt: {
                    let waited = if ticket.admitted {
                        None
                    } else {
                        let cx = machine.ticket_context(ticket, &attempt);
                        let answer = admission(&shared.admit, &cx, &attempt).await;
                        match settle_admission(&mut machine, ticket.taken(), answer, &shared.clock)
                        {
                            Ok((admitted, waited)) => {
                                *ticket = admitted;
                                waited
                            }
                            Err(next) => break 'attempt next,
                        }
                    };
                    let span = machine.attempt_span(ticket, waited);
                    let mut work = std::pin::pin!(span.clone().instrument(op(&attempt)));
                    // Most attempts finish on their first poll: it is made here, and the race
                    // against the attempt's ceiling and its caller is built only for an
                    // attempt that did not finish.
                    let first = std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx)));
                    // Not a tuple with whether the work suspended, which moves the output
                    // once more: the race is awaited only for work that did suspend, whose
                    // time the call accounts for. An attempt that succeeded on its first poll
                    // took no time the call must account for: the clock is read again only
                    // when the reading will be used.
                    let now;
                    let mut returned = match first.await {
                        Poll::Ready(out) => {
                            now = if machine.measures() || out.is_err() {
                                shared.clock.now()
                            } else {
                                ticket.began
                            };
                            Some(out)
                        }
                        Poll::Pending => {
                            let out = Race::polled(work.as_mut(), &attempt, machine.mode())
                                .await
                                .0;
                            now = shared.clock.now();
                            out
                        }
                    };
                    // A large value (a response) stays in `returned`: the machine decides on
                    // a reference, and the value is moved once, to the call's output. A small
                    // one is handed to the machine and back, which costs it less than a
                    // value kept in memory for the reference. The arms stay apart: one match
                    // over both answers would move the large value once more to get there.
                    if const { moved_in_place::<T, E>() } {
                        let answer = machine.returned_in_place(
                            &attempt,
                            ticket,
                            &mut returned,
                            is_cancelled(caller),
                            now,
                        );
                        span.record_outcome(machine.attempt_outcome());
                        match answer {
                            Ok(()) => {
                                let Next::Attempt(spent) = next else {
                                    unreachable!("the attempt ran from this ticket")
                                };
                                drop(spent);
                                return Ok(won(returned));
                            }
                            Err(next) => next,
                        }
                    } else {
                        let answer =
                            machine.returned(&attempt, ticket, returned, is_cancelled(caller), now);
                        span.record_outcome(machine.attempt_outcome());
                        match answer {
                            Ok(value) => {
                                // Only the ticket is left to drop (its permits went back).
                                let Next::Attempt(spent) = next else {
                                    unreachable!("the attempt ran from this ticket")
                                };
                                drop(spent);
                                return Ok(value);
                            }
                            Err(next) => next,
                        }
                    }
                };
                next = after;
                begin_next(&mut attempt, &next);
                continue;
            }
            // What to wait for next: every other answer but a pause is met in its arm, which
            // goes round again; the pauses share the one await point below, so that the cold
            // steps add nothing to every call's state machine.
            let paused = match next {
                // Run above, before this match.
                Next::Attempt(_) => continue,
                // A zero backoff waits for nothing: the caller's token is checked at once.
                Next::Sleep { from, delay } if delay.is_zero() => {
                    next = machine.woke(from, is_cancelled(caller));
                    begin_next(&mut attempt, &next);
                    continue;
                }
                Next::Sleep { from, delay } => {
                    Paused::sleep(&shared.clock, later(from, delay), caller)
                }
                Next::Generate { future, until } => {
                    Paused::generate(&shared.clock, future, caller, until)
                }
                Next::Hook { future, until } => Paused::hook(shared, future, caller, until),
                Next::Wait(never) => match never {},
                Next::Done(finish) => return finish.outcome,
            };
            let woke = paused.await;
            let now = shared.clock.now();
            next = match woke {
                Woke::Slept { cancelled } => machine.woke(now, cancelled),
                Woke::Generated(answer) => machine.generated(answer, now),
                Woke::Hooked => machine.hooked(now),
            };
            begin_next(&mut attempt, &next);
        }
    }
}

/// Whether an attempt's output is large enough that the driver keeps it in place while the
/// machine decides on a reference ([`Machine::returned_in_place`]) rather than moving it into
/// the machine and back ([`Machine::returned`]): a move of a value this large is a run of
/// stores (past 128 bytes a call to `memcpy`) reading a value just written, where a smaller one
/// moves in registers for less than a reference to it costs. An inline `const` at its use, so
/// that each driver is compiled with one path (a plain call left the other in: W1 +7 to +15).
#[inline(always)]
const fn moved_in_place<T, E>() -> bool {
    std::mem::size_of::<Result<T, E>>() > 64
}

/// Begins `attempt` for the ticket in `next`, if the machine's answer is an attempt: where a
/// ticket is given rather than where it runs, so that the first attempt, begun with the
/// handle, is checked for nothing.
#[inline(always)]
fn begin_next<T, E, P>(attempt: &mut Attempt, next: &Next<'_, T, E, P, Sequential>) {
    if let Next::Attempt(ticket) = next {
        attempt.begin(ticket.number, ticket.ceiling, ticket.began, ticket.resends);
    }
}

pin_project_lite::pin_project! {
    /// A pause in a call: a backoff (ending early if the caller cancels), or a wait on a
    /// generator's or hook's pending answer (boxed: one more allocation, on that path only).
    #[project = PausedProjection]
    enum Paused<'a> {
        Sleep {
            #[pin]
            sleep: Bounding<'a, std::future::Pending<()>>,
        },
        Generate {
            wait: Pin<Box<Bounding<'a, PendingAnswer<Duration>>>>,
        },
        Hook {
            wait: Pin<Box<Bounding<'a, Reported<'a>>>>,
        },
    }
}

/// How a [`Paused`] ended.
enum Woke {
    /// The backoff ended, or the caller cancelled during it.
    Slept { cancelled: bool },
    /// The generator's wait ended so.
    Generated(Bounded<Duration>),
    /// The hook's wait ended (its future completed or panicked, or the wait was cut short).
    Hooked,
}

impl<'a> Paused<'a> {
    /// A backoff until `wake`, ending early if the caller cancels.
    fn sleep(clock: &'a Clock, wake: Instant, caller: Option<&'a CancellationToken>) -> Self {
        let sleep = Bounding::new(clock, std::future::pending(), caller, Some(wake));
        Paused::Sleep { sleep }
    }

    /// A wait on a generator's pending answer, until the caller cancels or `until` passes.
    fn generate(
        clock: &'a Clock,
        future: PendingAnswer<Duration>,
        caller: Option<&'a CancellationToken>,
        until: Option<Instant>,
    ) -> Self {
        Paused::Generate {
            wait: Box::pin(Bounding::new(clock, future, caller, until)),
        }
    }

    /// A wait on an on-timeout hook's pending answer (a panic in it reported), until the
    /// caller cancels or `until` passes.
    fn hook<C, A>(
        shared: &'a Shared<C, A>,
        future: PendingAnswer<()>,
        caller: Option<&'a CancellationToken>,
        until: Option<Instant>,
    ) -> Self {
        let hook = shared.telemetry.awaited(&shared.name, future);
        Paused::Hook {
            wait: Box::pin(Bounding::new(&shared.clock, hook, caller, until)),
        }
    }
}

impl Future for Paused<'_> {
    type Output = Woke;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Woke> {
        match self.project() {
            PausedProjection::Sleep { sleep } => sleep.poll(cx).map(|woke| Woke::Slept {
                cancelled: matches!(woke, Bounded::Cancelled),
            }),
            PausedProjection::Generate { wait } => wait.as_mut().poll(cx).map(Woke::Generated),
            PausedProjection::Hook { wait } => wait.as_mut().poll(cx).map(|_| Woke::Hooked),
        }
    }
}

pin_project_lite::pin_project! {
    /// A wait on `answer` (a generator's or hook's pending answer; for a backoff, one that
    /// never comes) until it comes, the caller cancels or `until` passes (the call's deadline;
    /// a backoff's end). Its poll is never inlined, so the pauses stay out of the code of the
    /// driver's success path.
    pub(crate) struct Bounding<'a, F> {
        #[pin]
        answer: F,
        #[pin]
        cancelled: Option<WaitForCancellationFuture<'a>>,
        #[pin]
        expiry: Option<Sleep>,
    }
}

impl<'a, F: Future> Bounding<'a, F> {
    pub(crate) fn new(
        clock: &Clock,
        answer: F,
        caller: Option<&'a CancellationToken>,
        until: Option<Instant>,
    ) -> Self {
        Bounding {
            answer,
            cancelled: caller.map(CancellationToken::cancelled),
            expiry: until.map(|at| clock.sleep_until(at)),
        }
    }
}

impl<F: Future> Future for Bounding<'_, F> {
    type Output = Bounded<F::Output>;

    #[inline(never)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(cancelled) = this.cancelled.as_pin_mut()
            && cancelled.poll(cx).is_ready()
        {
            return Poll::Ready(Bounded::Cancelled);
        }
        if let Poll::Ready(answer) = this.answer.poll(cx) {
            return Poll::Ready(Bounded::Answered(answer));
        }
        if let Some(expiry) = this.expiry.as_pin_mut()
            && expiry.poll(cx).is_ready()
        {
            return Poll::Ready(Bounded::Expired);
        }
        Poll::Pending
    }
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
