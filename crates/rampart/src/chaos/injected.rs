//! [`Injected`]: one attempt with chaos, the future that runs the injected delay, then the
//! work or the injected answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Chaos;
use crate::attempt::Attempt;
use crate::clock::Sleep;

impl<T, E> Chaos<T, E> {
    /// Attempt `attempt` of call `call` with what is decided for it; `work` is called only
    /// when no fault or outcome replaces it.
    pub(super) fn start<'a, W>(
        &self,
        call: u64,
        attempt: &'a Attempt,
        work: impl FnOnce() -> W,
    ) -> Injected<'a, W, T, E> {
        let plan = self.plan(call, attempt);
        let work = plan.answer.is_none().then(work);
        // A zero delay is injected (and counted) without a timer.
        let delay = plan.delay.filter(|delay| !delay.is_zero()).map(|delay| {
            let clock = attempt.clock();
            clock.sleep_until(crate::clock::saturating_add(clock.now(), delay))
        });
        Injected {
            attempt,
            delay,
            work,
            answer: plan.answer,
        }
    }
}

pin_project_lite::pin_project! {
    /// One attempt with chaos: an injected delay, then the work or an injected answer.
    /// Returned by [`Chaos::wrap`]'s callback and by [`Chaos::inject`].
    ///
    /// Polled again after it completed, it stays pending.
    #[must_use = "futures do nothing unless polled"]
    pub struct Injected<'a, W, T, E> {
        attempt: &'a Attempt,
        #[pin]
        delay: Option<Sleep>,
        #[pin]
        work: Option<W>,
        answer: Option<Result<T, E>>,
    }
}

impl<'a, W, T, E> Injected<'a, W, T, E> {
    /// The work, untouched.
    #[inline]
    pub(super) fn pass(attempt: &'a Attempt, work: W) -> Self {
        Injected {
            attempt,
            delay: None,
            work: Some(work),
            answer: None,
        }
    }
}

impl<W, T, E> Future for Injected<'_, W, T, E>
where
    W: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(delay) = this.delay.as_mut().as_pin_mut() {
            if this.attempt.is_cancelled() {
                // Cut short; what comes next comes at the next poll, as it would for work
                // that was pending when the attempt was cancelled: within the grace of an
                // abandoning policy, at once for a cooperative one.
                this.delay.set(None);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if delay.poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.delay.set(None);
        }
        if let Some(answer) = this.answer.take() {
            return Poll::Ready(answer);
        }
        match this.work.as_pin_mut() {
            Some(work) => work.poll(cx),
            None => Poll::Pending,
        }
    }
}

impl<W, T, E> fmt::Debug for Injected<'_, W, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Injected")
            .field("attempt", &self.attempt.number())
            .field("delayed", &self.delay.is_some())
            .field("answered", &self.answer.is_some())
            .finish_non_exhaustive()
    }
}
