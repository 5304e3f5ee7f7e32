//! One attempt raced against its ceiling and its caller's cancellation.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::admit::{Admit, AdmitContext, Refusal};
use crate::attempt::{Attempt, Fired};
use crate::clock::{Clock, Sleep};
use crate::policy::TimeoutMode;

pin_project_lite::pin_project! {
    /// One attempt raced against its ceiling and its caller's cancellation.
    ///
    /// The work is polled first; the timer and the cancellation are armed only if it is not
    /// ready at once, so an attempt that completes on its first poll costs no timer. Once armed,
    /// a wake-up checks the ceiling and the caller *before* polling the work again: a scope
    /// whose ceiling has passed fires its attempt's cancellation first, which is what makes an
    /// outer scope win over an inner one whose ceiling falls on the same instant.
    #[project = RaceProj]
    pub(crate) struct Race<'a, W> {
        #[pin]
        work: W,
        #[pin]
        timer: Option<Sleep>,
        #[pin]
        cancel: Option<WaitForCancellationFuture<'a>>,
        attempt: &'a Attempt,
        caller: Option<&'a CancellationToken>,
        clock: &'a Clock,
        mode: TimeoutMode,
        armed: bool,
    }
}

impl<'a, W> Race<'a, W> {
    /// Races `work` (the callback's future for `attempt`) against the attempt's ceiling and the
    /// caller's cancellation.
    pub(crate) fn new(
        work: W,
        attempt: &'a Attempt,
        caller: Option<&'a CancellationToken>,
        clock: &'a Clock,
        mode: TimeoutMode,
    ) -> Self {
        Race {
            work,
            timer: None,
            cancel: None,
            attempt,
            caller,
            clock,
            mode,
            armed: false,
        }
    }
}

impl<W: Future> Future for Race<'_, W> {
    /// The work's output (`None` when it was abandoned), and whether the work suspended.
    type Output = (Option<W::Output>, bool);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if *this.armed {
            signal(&mut this, cx);
        }
        loop {
            if let Poll::Ready(out) = this.work.as_mut().poll(cx) {
                return Poll::Ready((Some(out), *this.armed));
            }
            if !*this.armed {
                *this.armed = true;
                if let Some(at) = this.attempt.deadline() {
                    this.timer.set(Some(this.clock.sleep_until(at)));
                }
                if let Some(caller) = *this.caller {
                    this.cancel.set(Some(caller.cancelled()));
                }
                if signal(&mut this, cx) {
                    continue;
                }
                return Poll::Pending;
            }
            if this.attempt.fired().is_some()
                && matches!(this.mode, TimeoutMode::Abandon { .. })
                && let Some(grace) = this.timer.as_mut().as_pin_mut()
                && grace.poll(cx).is_ready()
            {
                return Poll::Ready((None, true));
            }
            return Poll::Pending;
        }
    }
}

/// Checks the ceiling, then the caller; fires the attempt's cancellation if either has come.
/// Returns whether it fired now. In abandon mode the timer is re-armed for the grace.
fn signal<W>(this: &mut RaceProj<'_, '_, W>, cx: &mut Context<'_>) -> bool {
    if this.attempt.fired().is_some() {
        return false;
    }
    let ceiling = this
        .timer
        .as_mut()
        .as_pin_mut()
        .is_some_and(|timer| timer.poll(cx).is_ready());
    let why = if ceiling {
        Fired::Ceiling
    } else if this
        .cancel
        .as_mut()
        .as_pin_mut()
        .is_some_and(|cancel| cancel.poll(cx).is_ready())
    {
        Fired::Caller
    } else {
        return false;
    };
    this.attempt.fire(why);
    this.cancel.set(None);
    match *this.mode {
        TimeoutMode::Cooperative => this.timer.set(None),
        TimeoutMode::Abandon { grace } => {
            let from = match why {
                Fired::Ceiling => this.attempt.deadline(),
                Fired::Caller => None,
            }
            .unwrap_or_else(|| this.clock.now());
            let until = from.checked_add(grace).unwrap_or(from);
            this.timer.set(Some(this.clock.sleep_until(until)));
        }
    }
    true
}

/// How an attempt's admission ended.
pub(crate) enum Admitted<P> {
    /// Admitted: run the callback, holding the permit (`None` when nothing was asked).
    Permit(Option<P>),
    /// Refused.
    Refused(Refusal),
    /// The attempt's ceiling passed while it waited.
    TimedOut,
    /// The caller cancelled while it waited.
    Cancelled,
}

/// Asks `admit` for the attempt. A wait is raced against the attempt's ceiling and the
/// caller's cancellation by the same [`Race`] that runs the attempt (with no grace): a queued
/// attempt whose time is up leaves the queue at once.
pub(crate) async fn admission<A: Admit>(
    admit: &A,
    cx: &AdmitContext<'_>,
    attempt: &Attempt,
    caller: Option<&CancellationToken>,
    clock: &Clock,
) -> Admitted<A::Permit> {
    let no_grace = TimeoutMode::Abandon {
        grace: std::time::Duration::ZERO,
    };
    match Race::new(admit.acquire(cx), attempt, caller, clock, no_grace).await {
        (Some(Ok(permit)), _) => Admitted::Permit(Some(permit)),
        (Some(Err(refusal)), _) => Admitted::Refused(refusal),
        (None, _) if attempt.fired() == Some(Fired::Caller) => Admitted::Cancelled,
        (None, _) => Admitted::TimedOut,
    }
}

/// Asks `admit` without waiting: the answer if it is immediate, `None` if it would wait. For
/// hedges, which must not hold up the legs in flight.
pub(crate) fn admission_now<A: Admit>(
    admit: &A,
    cx: &AdmitContext<'_>,
) -> Option<Result<Option<A::Permit>, Refusal>> {
    if A::ALWAYS_ADMITS {
        return Some(Ok(None));
    }
    let mut acquire = std::pin::pin!(admit.acquire(cx));
    let mut task = Context::from_waker(std::task::Waker::noop());
    match acquire.as_mut().poll(&mut task) {
        Poll::Ready(answer) => Some(answer.map(Some)),
        Poll::Pending => None,
    }
}
