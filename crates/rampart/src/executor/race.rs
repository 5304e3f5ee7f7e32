//! One attempt raced against its ceiling and its caller's cancellation.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::admit::{Admit, AdmitContext, Refusal};
use crate::attempt::{Attempt, Fired};
use crate::clock::Sleep;
use crate::timeout::TimeoutMode;

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
        // The caller's token and the clock are the attempt's own: not kept twice.
        attempt: &'a Attempt,
        mode: &'a TimeoutMode,
        armed: bool,
        // Whether the work had its first poll before the race was built.
        polled: bool,
    }
}

impl<'a, W> Race<'a, W> {
    /// Races `work` (the callback's future for `attempt`) against the attempt's ceiling and its
    /// caller's cancellation, measured on the attempt's clock.
    pub(crate) fn new(work: W, attempt: &'a Attempt, mode: &'a TimeoutMode) -> Self {
        Race {
            work,
            timer: None,
            cancel: None,
            attempt,
            mode,
            armed: false,
            polled: false,
        }
    }

    /// [`new`](Self::new) for work that was polled once already, and was not ready: the
    /// race's first poll arms the timer and the caller's cancellation without polling the
    /// work again.
    pub(crate) fn polled(work: W, attempt: &'a Attempt, mode: &'a TimeoutMode) -> Self {
        Race {
            polled: true,
            ..Race::new(work, attempt, mode)
        }
    }
}

impl<W: Future> Future for Race<'_, W> {
    /// The work's output (`None` when it was abandoned), and whether the work suspended.
    type Output = (Option<W::Output>, bool);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Most attempts finish on their first poll: that poll projects nothing but the work.
        if !self.armed {
            if !self.polled
                && let Poll::Ready(out) = self.as_mut().project().work.poll(cx)
            {
                return Poll::Ready((Some(out), false));
            }
            return self.resume(cx, false);
        }
        self.resume(cx, true)
    }
}

impl<W: Future> Race<'_, W> {
    /// The race after the work's first poll: arms the timer and the caller's cancellation,
    /// then waits; `poll_work`: whether to poll the work first (not right after that poll).
    #[inline(never)]
    fn resume(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut poll_work: bool,
    ) -> Poll<(Option<W::Output>, bool)> {
        let mut this = self.project();
        if *this.armed {
            signal(&mut this, cx);
        }
        loop {
            if poll_work && let Poll::Ready(out) = this.work.as_mut().poll(cx) {
                return Poll::Ready((Some(out), *this.armed));
            }
            poll_work = true;
            if !*this.armed {
                *this.armed = true;
                if let Some(why) = this.attempt.fired() {
                    // Cancelled before it started: it gets its grace, no more.
                    fired(&mut this, why);
                } else {
                    if let Some(at) = this.attempt.ceiling() {
                        this.timer.set(Some(this.attempt.clock().sleep_until(at)));
                    }
                    if let Some(caller) = this.attempt.caller() {
                        this.cancel.set(Some(caller.cancelled()));
                    }
                    if signal(&mut this, cx) {
                        continue;
                    }
                    return Poll::Pending;
                }
            }
            if this.attempt.fired().is_some() && matches!(**this.mode, TimeoutMode::Abandon { .. })
            {
                // During the grace after the ceiling, the caller can still end the wait.
                if this
                    .cancel
                    .as_mut()
                    .as_pin_mut()
                    .is_some_and(|cancel| cancel.poll(cx).is_ready())
                {
                    this.attempt.fire(Fired::Caller);
                    return Poll::Ready((None, true));
                }
                if this
                    .timer
                    .as_mut()
                    .as_pin_mut()
                    .is_some_and(|grace| grace.poll(cx).is_ready())
                {
                    return Poll::Ready((None, true));
                }
            }
            return Poll::Pending;
        }
    }
}

/// Checks the ceiling, then the caller; fires the attempt's cancellation if either has come.
/// Returns whether it fired now.
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
    fired(this, why);
    true
}

/// After the attempt's cancellation fired: in abandon mode the timer is re-armed for the
/// grace (and the caller's cancellation stays armed to cut the grace short); in cooperative
/// mode nothing but the work is awaited.
fn fired<W>(this: &mut RaceProj<'_, '_, W>, why: Fired) {
    let clock = this.attempt.clock();
    match **this.mode {
        TimeoutMode::Cooperative => {
            this.timer.set(None);
            this.cancel.set(None);
        }
        TimeoutMode::Abandon { grace } => {
            let from = match why {
                Fired::Ceiling => this.attempt.ceiling(),
                Fired::Caller => None,
            }
            .unwrap_or_else(|| clock.now());
            let until = crate::clock::saturating_add(from, grace);
            this.timer.set(Some(clock.sleep_until(until)));
            if why == Fired::Caller {
                this.cancel.set(None);
            } else if this.cancel.is_none()
                && let Some(caller) = this.attempt.caller()
            {
                this.cancel.set(Some(caller.cancelled()));
            }
        }
    }
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

/// No grace for an admission wait: a queued attempt whose time is up leaves the queue at once.
static NO_GRACE: TimeoutMode = TimeoutMode::Abandon {
    grace: std::time::Duration::ZERO,
};

/// Asks `admit` for the attempt. A wait is raced against the attempt's ceiling and its
/// caller's cancellation by the same [`Race`] that runs the attempt (with no grace): a queued
/// attempt whose time is up leaves the queue at once.
///
/// A named future rather than an `async fn`: it is the race alone, where an `async fn` would
/// keep its arguments beside it, in every call's state machine.
pub(crate) fn admission<'a, A: Admit>(
    admit: &'a A,
    cx: &'a AdmitContext<'a>,
    attempt: &'a Attempt,
) -> Admission<'a, impl Future<Output = Result<A::Permit, Refusal>> + 'a> {
    Admission {
        race: Race::new(admit.acquire(cx), attempt, &NO_GRACE),
    }
}

pin_project_lite::pin_project! {
    /// Admission's wait: [`admission`]'s future.
    pub(crate) struct Admission<'a, F> {
        #[pin]
        race: Race<'a, F>,
    }
}

impl<P, F: Future<Output = Result<P, Refusal>>> Future for Admission<'_, F> {
    type Output = Admitted<P>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Admitted<P>> {
        let mut race = self.project().race;
        let (answer, _) = std::task::ready!(race.as_mut().poll(cx));
        let attempt = race.attempt;
        // The caller wins every tie, and a permit that arrives once the attempt was cancelled
        // (its ceiling or its caller came first) is given back: the attempt does not start.
        if attempt
            .caller()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Poll::Ready(Admitted::Cancelled);
        }
        Poll::Ready(match answer {
            Some(Ok(permit)) if attempt.fired().is_none() => Admitted::Permit(Some(permit)),
            Some(Err(refusal)) => Admitted::Refused(refusal),
            _ => Admitted::TimedOut,
        })
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
