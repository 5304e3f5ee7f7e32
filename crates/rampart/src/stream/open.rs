//! The open phase: [`Call::stream`] opens the stream and pulls its first item as one call of
//! the policy, retried as any call is until that item arrives.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures_core::Stream;

use super::deliver::{Bounds, Report};
use super::{First, RampartStream, StreamDeadline, StreamOptions};
use crate::admit::Admit;
use crate::attempt::Attempt;
use crate::classify::Classify;
use crate::clock::Instant;
use crate::deadline::Effective;
use crate::error::Error;
use crate::executor::{AttemptFuture, Call, Callback, Record, Settled, Shared, execute};
use crate::fallback::NoFallback;
use crate::observe::{Span, StreamReporter};
use crate::outcome::StopReason;
use crate::result::AttemptRecord;

impl<C, A> Call<'_, C, A, NoFallback> {
    /// Opens a stream under the call's policy, retrying until its first item arrives, and returns
    /// the stream of its items bounded by `options`; see the [module docs](crate::stream).
    ///
    /// `op` is a callback as for [`run`](crate::Policy::run) (an async closure taking the
    /// [`Attempt`]) that opens the stream. The classifier sees each attempt as a
    /// `Result<First<S, T>, E>`: the opened stream's first item, or the error that opening it
    /// or its first item gave. A classifier generic over the value (the default, [`IoErrors`])
    /// needs nothing more.
    ///
    /// The stream must be `Unpin`, as tonic's `Streaming` and reqwest's `bytes_stream()` are;
    /// return any other as `Box::pin(stream)` (one allocation per attempt, none per item).
    ///
    /// # Cancellation
    ///
    /// Dropping the returned future drops the attempt in flight, as for `run`. Dropping the
    /// stream drops its source. Cancelling the caller's [token](Call::token) also ends the
    /// stream once it is open, with [`Error::Cancelled`]. A stream has no fallback: this
    /// finisher is there only while the call has none.
    ///
    /// # Errors
    ///
    /// What ended the opening, as [`Call::run`] returns it: the last attempt's error
    /// ([`Error::Inner`]) when the policy gave up, or the policy's own decision (the deadline
    /// or an attempt's ceiling passed, a refusal, cancellation). Errors after the first item
    /// are the stream's items, not this future's.
    ///
    /// [`IoErrors`]: crate::IoErrors
    pub async fn stream<S, T, E, F>(
        self,
        options: StreamOptions,
        mut op: F,
    ) -> Result<RampartStream<S, T>, Error<E>>
    where
        C: Classify<First<S, T>, E>,
        A: Admit,
        F: Callback<S, E>,
        S: Stream<Item = Result<T, E>> + Unpin,
    {
        let shared = self.shared();
        let caller = self.caller();
        let deadline = self.given_deadline();
        // The open phase is the call itself: the state machine resolves its deadline and
        // counts its attempts, and says what they were when the call settles.
        let mut opening = Opening::default();
        let first = execute(
            shared,
            caller,
            deadline,
            first_item::<F, S, _>(move |attempt| FirstItem::new(op(attempt))),
            &mut opening,
        )
        .await?;
        let report = match (&opening.span, shared.telemetry.is_listened()) {
            (Some(call), true) => Some(Report {
                reporter: reporter_of(shared),
                span: crate::observe::stream_span(call, &shared.name),
                start: opening.start,
            }),
            _ => None,
        };
        Ok(RampartStream::new(
            first,
            Bounds {
                clock: shared.clock.clone(),
                bound: match options.deadline() {
                    StreamDeadline::WholeStream => opening.deadline,
                    StreamDeadline::FirstItem => None,
                },
                idle: options.idle_timeout(),
                caller: caller.cloned(),
                attempts: opening.attempts,
                report,
            },
        ))
    }
}

/// What the open phase's call settled with (see [`Settled`]).
#[derive(Default)]
struct Opening {
    attempts: u32,
    start: Option<Instant>,
    deadline: Option<Effective>,
    span: Option<Span>,
}

impl Record for &mut Opening {
    const TIMED: bool = false;

    #[inline(always)]
    fn record(&mut self, _: AttemptRecord) {}

    #[inline(always)]
    fn stop(&mut self, _: StopReason) {}

    #[inline(always)]
    fn settled(&mut self, call: Settled<'_>) {
        self.attempts = call.attempts;
        self.start = call.start;
        self.deadline = call.deadline;
        self.span = call.span.cloned();
    }
}

/// The reporter of `shared`'s streams, made on first use.
fn reporter_of<C, A>(shared: &Shared<C, A>) -> Arc<StreamReporter> {
    Arc::clone(shared.streams.get_or_init(|| {
        Arc::new(StreamReporter {
            name: shared.name.clone(),
            telemetry: shared.telemetry.clone(),
        })
    }))
}

/// Gives the closure that wraps a stream op its higher-ranked signature: for every attempt
/// borrowed for `'a`, the op's future for `'a` followed by the first item.
fn first_item<F, S, W>(wrapped: W) -> W
where
    F: for<'a> AttemptFuture<'a>,
    W: for<'a> FnMut(&'a Attempt) -> FirstItem<<F as AttemptFuture<'a>>::Fut, S>,
{
    wrapped
}

pin_project_lite::pin_project! {
    /// One attempt of the open phase: the op's future, then the stream's first item.
    struct FirstItem<Fut, S> {
        #[pin]
        open: Option<Fut>,
        stream: Option<S>,
    }
}

impl<Fut, S> FirstItem<Fut, S> {
    fn new(open: Fut) -> Self {
        FirstItem {
            open: Some(open),
            stream: None,
        }
    }
}

impl<Fut, S, T, E> Future for FirstItem<Fut, S>
where
    Fut: Future<Output = Result<S, E>>,
    S: Stream<Item = Result<T, E>> + Unpin,
{
    type Output = Result<First<S, T>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(open) = this.open.as_mut().as_pin_mut() {
            let opened = ready!(open.poll(cx));
            this.open.set(None);
            *this.stream = Some(opened?);
        }
        // Polled after it completed: it never completes again.
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Pending;
        };
        let first = ready!(Pin::new(stream).poll_next(cx));
        let Some(stream) = this.stream.take() else {
            return Poll::Pending;
        };
        Poll::Ready(match first {
            Some(Ok(item)) => Ok(First {
                stream,
                item: Some(item),
            }),
            Some(Err(e)) => Err(e),
            None => Ok(First { stream, item: None }),
        })
    }
}
