//! The delivery phase: [`RampartStream`] yields the first item and the rest, never retried,
//! and ends the stream at the idle timeout, the deadline or the caller's cancellation,
//! reporting how it ended.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::{FusedStream, Stream};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::First;
use crate::clock::{Clock, Instant, Sleep, saturating_add};
use crate::deadline::Effective;
use crate::error::{Error, RejectReason};
use crate::event::Event;
use crate::observe::{Span, StreamReporter};
use crate::outcome::StreamEnd;

/// Where and since when a listened-to stream reports its end.
pub(super) struct Report {
    pub(super) reporter: Arc<StreamReporter>,
    /// The stream's `rampart.stream` span.
    pub(super) span: Span,
    /// The start of the call that opened it.
    pub(super) start: Option<Instant>,
}

impl Report {
    #[cold]
    fn emit(self, clock: &Clock, end: StreamEnd, items: u64) {
        let elapsed = match self.start {
            Some(start) => clock.now().saturating_duration_since(start),
            None => Duration::ZERO,
        };
        let reporter = &*self.reporter;
        reporter.telemetry.emit(
            &self.span,
            Event::StreamEnded {
                policy: &reporter.name,
                end,
                items,
                elapsed,
            },
        );
    }
}

/// The error that ends a stream at its deadline, and its end: `DeadlineExceeded`, or the
/// drain's rejection when the bound was a drain's grace (as for a call).
#[cold]
fn exceeded<E>(bound: Effective, attempts: u32) -> (Error<E>, StreamEnd) {
    match bound.source.reported() {
        Some(source) => (
            Error::DeadlineExceeded {
                timeout: bound.span,
                source,
                attempts,
                unfit: None,
                last: None,
            },
            StreamEnd::DeadlineExceeded,
        ),
        None => (
            Error::Rejected {
                reason: RejectReason::Draining,
                retry_after: None,
                attempts,
                // The stream opened: its delivery is what the drain ended.
                refused: 0,
                last: None,
            },
            StreamEnd::Draining,
        ),
    }
}

/// Which time bound a stream's timer is armed for.
#[derive(Debug, Clone, Copy)]
enum Fire {
    Deadline(Effective),
    Idle(Duration),
}

/// What bounds a stream after its first item.
pub(super) struct Bounds {
    pub(super) clock: Clock,
    pub(super) bound: Option<Effective>,
    pub(super) idle: Option<Duration>,
    pub(super) caller: Option<CancellationToken>,
    /// Attempts the open phase counted.
    pub(super) attempts: u32,
    /// Where the end is reported, when something listened as the stream opened; taken when
    /// it is.
    pub(super) report: Option<Report>,
}

pin_project_lite::pin_project! {
    /// The items of a stream opened by [`Call::stream`](crate::Call::stream): the first item, then the rest,
    /// ending with an error when a bound fires (see the [module docs](crate::stream)).
    ///
    /// Not `Unpin` (it holds its timer inline): pin it (`std::pin::pin!`, or `Box::pin`)
    /// before calling `StreamExt::next`.
    #[must_use = "streams do nothing unless polled"]
    #[project = RampartStreamProj]
    pub struct RampartStream<S, T> {
        source: Option<S>,
        first: Option<T>,
        bounds: Bounds,
        // One timer for both time bounds, armed only while the consumer waits, at the earlier
        // of the deadline and the end of the idle window.
        #[pin]
        timer: Option<Sleep>,
        // The instant `timer` is armed for.
        armed: Option<Instant>,
        // When the idle window ends: set when the consumer starts waiting, cleared by an item.
        stall_at: Option<Instant>,
        #[pin]
        cancelled: Option<WaitForCancellationFutureOwned>,
        items: u64,
    }

    impl<S, T> PinnedDrop for RampartStream<S, T> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(report) = this.bounds.report.take() {
                // Not reported yet: the consumer let go first (unless nothing was left).
                let end = match this.first.is_none() && this.source.is_none() {
                    true => StreamEnd::Completed,
                    false => StreamEnd::Dropped,
                };
                report.emit(&this.bounds.clock, end, *this.items);
            }
        }
    }
}

impl<S, T> RampartStream<S, T> {
    pub(super) fn new(first: First<S, T>, bounds: Bounds) -> Self {
        let cancelled = bounds
            .caller
            .clone()
            .map(CancellationToken::cancelled_owned);
        let First { stream, item } = first;
        RampartStream {
            // A stream that ended before its first item is not polled again.
            source: item.is_some().then_some(stream),
            first: item,
            bounds,
            timer: None,
            armed: None,
            stall_at: None,
            cancelled,
            items: 0,
        }
    }

    /// Items delivered so far, the first included.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// Attempts the call that opened the stream counted (hedged legs included).
    pub fn attempts(&self) -> u32 {
        self.bounds.attempts
    }

    /// The instant of the deadline that bounds the stream, if one does.
    pub fn deadline(&self) -> Option<Instant> {
        self.bounds.bound.map(|b| b.at())
    }

    /// Whether the stream has ended: every item it will give has been given.
    pub fn is_ended(&self) -> bool {
        self.first.is_none() && self.source.is_none()
    }
}

impl<S, T, E> RampartStream<S, T>
where
    S: Stream<Item = Result<T, E>> + Unpin,
{
    /// Ends the stream for `end`: the source and every timer are dropped, and `error` is its
    /// last item.
    #[cold]
    fn end(
        mut this: RampartStreamProj<'_, S, T>,
        error: Error<E>,
        end: StreamEnd,
    ) -> Poll<Option<Result<T, Error<E>>>> {
        Self::close(&mut this, end);
        Poll::Ready(Some(Err(error)))
    }

    fn close(this: &mut RampartStreamProj<'_, S, T>, end: StreamEnd) {
        *this.source = None;
        this.timer.set(None);
        this.cancelled.set(None);
        Self::report(this, end);
    }

    /// Reports the end, if something listens and it was not reported yet.
    #[inline(always)]
    fn report(this: &mut RampartStreamProj<'_, S, T>, end: StreamEnd) {
        if let Some(report) = this.bounds.report.take() {
            report.emit(&this.bounds.clock, end, *this.items);
        }
    }
}

impl<S, T, E> Stream for RampartStream<S, T>
where
    S: Stream<Item = Result<T, E>> + Unpin,
{
    type Item = Result<T, Error<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Some(item) = this.first.take() {
            *this.items += 1;
            return Poll::Ready(Some(Ok(item)));
        }
        let Some(source) = this.source.as_mut() else {
            // A stream that ended before its first item ends here.
            Self::report(&mut this, StreamEnd::Completed);
            return Poll::Ready(None);
        };
        // Caller cancellation wins, then the deadline; both before a ready item. The deadline
        // is read from the clock: a timer fires only when the runtime gets to run its timers,
        // which a task whose source always has an item ready may never let it do (and tokio's
        // budget keeps a timer pending until the task yields). The timer is polled only to
        // wake a consumer that waits.
        if this
            .bounds
            .caller
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Self::end(this, Error::Cancelled, StreamEnd::Cancelled);
        }
        let clock = &this.bounds.clock;
        let now = this.bounds.bound.map(|bound| (bound, clock.now()));
        if let Some((bound, now)) = now
            && now >= bound.at()
        {
            let (error, end) = exceeded(bound, this.bounds.attempts);
            return Self::end(this, error, end);
        }
        match Pin::new(source).poll_next(cx) {
            Poll::Ready(Some(Ok(item))) => {
                *this.items += 1;
                *this.stall_at = None;
                Poll::Ready(Some(Ok(item)))
            }
            Poll::Ready(Some(Err(e))) => Self::end(this, Error::Inner(e), StreamEnd::Failed),
            Poll::Ready(None) => {
                Self::close(&mut this, StreamEnd::Completed);
                Poll::Ready(None)
            }
            Poll::Pending => {
                let clock = &this.bounds.clock;
                if let Some(idle) = this.bounds.idle
                    && this.stall_at.is_none()
                {
                    // The idle window opens now: the consumer asked, and the source has
                    // nothing ready.
                    let now = now.map_or_else(|| clock.now(), |(_, now)| now);
                    *this.stall_at = Some(saturating_add(now, idle));
                }
                // The earlier of the two time bounds; the deadline when they fall together.
                let deadline = this.bounds.bound.map(|b| (b.at(), Fire::Deadline(b)));
                let stall = this.bounds.idle.zip(*this.stall_at);
                let stall = stall.map(|(idle, at)| (at, Fire::Idle(idle)));
                let due = match (deadline, stall) {
                    (Some(deadline), Some(stall)) if stall.0 < deadline.0 => Some(stall),
                    (Some(deadline), _) => Some(deadline),
                    (None, stall) => stall,
                };
                if let Some((at, fire)) = due {
                    if *this.armed != Some(at) {
                        this.timer.set(Some(clock.sleep_until(at)));
                        *this.armed = Some(at);
                    }
                    if let Some(timer) = this.timer.as_mut().as_pin_mut()
                        && timer.poll(cx).is_ready()
                    {
                        let (error, end) = match fire {
                            Fire::Deadline(bound) => exceeded(bound, this.bounds.attempts),
                            Fire::Idle(idle) => (
                                Error::IdleTimeout {
                                    idle,
                                    items: *this.items,
                                },
                                StreamEnd::IdleTimeout,
                            ),
                        };
                        return Self::end(this, error, end);
                    }
                }
                if let Some(cancelled) = this.cancelled.as_mut().as_pin_mut()
                    && cancelled.poll(cx).is_ready()
                {
                    return Self::end(this, Error::Cancelled, StreamEnd::Cancelled);
                }
                Poll::Pending
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let first = usize::from(self.first.is_some());
        let (low, high) = match &self.source {
            Some(source) => source.size_hint(),
            None => (0, Some(0)),
        };
        // A bound may end the stream early with an error: in place of any item after the
        // first, or of the source's own end.
        let high = high.and_then(|h| h.checked_add(first + 1));
        (first + low.min(1), high)
    }
}

impl<S, T, E> FusedStream for RampartStream<S, T>
where
    S: Stream<Item = Result<T, E>> + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.is_ended()
    }
}

impl<S, T> fmt::Debug for RampartStream<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RampartStream")
            .field("items", &self.items)
            .field("attempts", &self.bounds.attempts)
            .field("idle_timeout", &self.bounds.idle)
            .field("deadline", &self.bounds.bound.map(|b| b.span))
            .field("ended", &self.is_ended())
            .finish()
    }
}
