//! Streaming: a call whose answer is a stream, retried only until its first item arrives.
//!
//! A server-streaming RPC, a chunked download or a watch is one call that answers many times.
//! Retrying it is safe only until the consumer has seen something: once an item is delivered,
//! a retry would deliver it again (or skip what the first stream had promised). So a stream
//! call has two phases:
//!
//! 1. **Open (retried).** The op opens the stream, and the first item is pulled, as one attempt
//!    of an ordinary call under the policy: the attempt timeout bounds opening plus the first
//!    item, and backoff, the breaker, the retry budget, admission and hedging apply exactly as
//!    for [`Policy::run`](crate::Policy::run) (it is one call of the same state machine, whose effective deadline
//!    and attempt count the stream then keeps). The first item decides the attempt: an `Err`
//!    is a failed attempt (the classifier decides whether it is retried), an `Ok` item or a
//!    clean end of the stream is a value (the classifier sees it as a [`First`]).
//! 2. **Deliver (never retried).** The [`RampartStream`] yields the first item, then the rest.
//!    It ends with an error, and drops the source stream, when an item is an `Err`
//!    ([`Error::Inner`]), when no item arrives within the idle timeout
//!    ([`Error::IdleTimeout`]), when the call's deadline passes ([`Error::DeadlineExceeded`];
//!    the policy's deadline from the start of the call, or the inherited one when the policy
//!    uses the ambient deadline), or when the caller's token fires ([`Error::Cancelled`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), rampart::Error<std::io::Error>> {
//! use std::time::Duration;
//! use futures_util::StreamExt;
//! use rampart::Policy;
//! use rampart::stream::StreamOptions;
//!
//! let policy = Policy::builder()
//!     .deadline(Duration::from_secs(30))
//!     .attempt_timeout(Duration::from_secs(2))
//!     .build()
//!     .expect("valid policy");
//! let options = StreamOptions::builder()
//!     .idle_timeout(Duration::from_secs(5))
//!     .build()
//!     .expect("valid options");
//!
//! // The op opens the stream for each attempt (here, a stream of three prices).
//! let prices = policy
//!     .call()
//!     .stream(options, async |_attempt| {
//!         Ok::<_, std::io::Error>(futures_util::stream::iter([Ok(101), Ok(102), Ok(103)]))
//!     })
//!     .await?;
//! let mut prices = std::pin::pin!(prices);
//! let mut total = 0;
//! while let Some(price) = prices.next().await {
//!     total += price?;
//! }
//! assert_eq!(total, 306);
//! # Ok(()) }
//! ```
//!
//! # Options
//!
//! | option | default | meaning |
//! |---|---|---|
//! | [`idle_timeout`](StreamOptionsBuilder::idle_timeout) | none | the longest wait for the next item once the first was delivered; must be positive |
//! | [`deadline`](StreamOptionsBuilder::deadline) | [`StreamDeadline::WholeStream`] | whether the call's deadline bounds the whole stream or only opening it and its first item |
//!
//! There is no default idle timeout: a watch may legitimately be silent for minutes. The
//! policy's deadline (30 s unless configured) bounds the whole stream by default; a long-lived
//! subscription takes [`StreamDeadline::FirstItem`] and an idle timeout instead.
//!
//! # The bounds, exactly
//!
//! - The idle clock runs only while the consumer waits: it starts when the consumer asks for
//!   the next item and the source has none ready, so a slow consumer is never taken for a
//!   silent source. An item that is ready wins over an idle timer that has expired.
//! - The deadline wins over a ready item: once it has passed, the source is not asked for
//!   another item (the clock is read each time the consumer asks, so a source that always has
//!   an item ready is ended too). The first item, pulled before it, is always delivered.
//! - The caller's cancellation (with [`Call::token`](crate::Call::token)) wins over both, and ends the
//!   stream at once, even while the consumer waits.
//! - After the stream ends (an error, or the source's own end), it yields `None` for ever.
//!
//! # Cost
//!
//! Opening a stream, delivering its items and reporting its end allocate nothing
//! (`tests/stream_allocations.rs`, with and without a `metrics` recorder installed): the
//! first stream of a policy opened while something listens makes the policy's one shared
//! reporter (a copy of its listeners and metric handles), and every later one shares it.
//! Nothing listening, a stream reports nothing and holds no reporter. A `tracing` subscriber
//! that records the `rampart.stream` span may allocate for it, as for any span. An item
//! costs a clock read when a deadline bounds the stream. One timer serves both time
//! bounds; it is armed only while the consumer waits, at the earlier of the deadline and the
//! end of the idle window, so with an idle timeout each wait after an item re-arms it.
//!
//! # Plugging in tonic and reqwest
//!
//! Both answer with a `Stream<Item = Result<_, _>>`, so the op returns them as they are. For a
//! tonic server-streaming RPC, the op awaits the client method and returns
//! `response.into_inner()`, a `tonic::Streaming<T>` (whose items are `Result<T, Status>`); the
//! classifier sees a `tonic::Status` when opening or the first message fails. For a reqwest
//! download, the op awaits `client.get(url).send()`, turns a status it wants retried into an
//! `Err` (`error_for_status()`), and returns `response.bytes_stream()` (items
//! `Result<Bytes, reqwest::Error>`). Both are `Unpin` (tonic 0.14, reqwest 0.13); a stream
//! that is not (an `async` generator, say) is returned as `Box::pin(stream)`: one allocation
//! per attempt, none per item. Opening and the items must fail with one error type, as both
//! do. Dropping a `Streaming` cancels its RPC and dropping a body closes its connection, so a
//! stream that ends early (an idle timeout, the deadline) releases what it held.
//!
//! # Cancellation
//!
//! Dropping the future of [`Call::stream`](crate::Call::stream) drops the attempt in flight; dropping the
//! [`RampartStream`] drops the source stream. Cancelling the caller's token ends the stream
//! with [`Error::Cancelled`], at once. The attempt's own token
//! ([`Attempt::token`](crate::Attempt::token)) is not cancelled when the stream ends: work the
//! op spawned with it learns of the end from the stream's drop (a closed channel, say).
//!
//! # Panics
//!
//! With the system clock, a stream bounded by a deadline or an idle timeout needs a tokio
//! runtime with its time driver, as `tokio::time::sleep` does.
//!
//! # Events
//!
//! The open phase is an ordinary call and reports its events ([`Event`]), metrics and spans:
//! each attempt, each retry, one `CallEnded` (which says `Succeeded` when the first item
//! arrived). The delivery phase of a stream that opened reports one [`Event::StreamEnded`]
//! when it ends, with why ([`StreamEnd`]: the source's end, an error item, the idle timeout,
//! the deadline, a drain's grace, the caller's cancellation, or the consumer dropping it first)
//! and how many items it delivered. With the `metrics` feature it moves
//! `rampart.stream.ended{reason}` and `rampart.stream.items`; with `tracing`, the delivery
//! phase is a `rampart.stream` span under the call's span, which records `items` and `end`
//! (see [`observe`](crate::observe)). A call that fails to open a stream reports no
//! `StreamEnded`: its `CallEnded` says how it ended.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::sync::{Arc, Mutex};
//! use futures_util::StreamExt;
//! use rampart::outcome::StreamEnd;
//! use rampart::stream::StreamOptions;
//! use rampart::{Event, Policy};
//!
//! let ends = Arc::new(Mutex::new(Vec::new()));
//! let seen = ends.clone();
//! let policy = Policy::builder()
//!     .listener(move |event: &Event<'_>| {
//!         if let Event::StreamEnded { end, items, .. } = *event {
//!             seen.lock().unwrap().push((end, items));
//!         }
//!     })
//!     .build()
//!     .expect("valid policy");
//! let stream = policy
//!     .call()
//!     .stream(StreamOptions::default(), async |_attempt| {
//!         Ok::<_, std::io::Error>(futures_util::stream::iter([Ok(1), Ok(2)]))
//!     })
//!     .await
//!     .expect("opened");
//! let items: Vec<_> = stream.collect().await;
//! assert_eq!(items.len(), 2);
//! assert_eq!(*ends.lock().unwrap(), [(StreamEnd::Completed, 2)]);
//! # }
//! ```
//!
//! [`Event`]: crate::Event
//! [`Event::StreamEnded`]: crate::Event::StreamEnded

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_core::{FusedStream, Stream};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::admit::Admit;
use crate::attempt::Attempt;
use crate::classify::Classify;
use crate::clock::{Clock, Instant, Sleep, saturating_add};
use crate::deadline::Effective;
use crate::error::{ConfigError, ConfigProblem, Error, RejectReason};
use crate::event::Event;
use crate::executor::{AttemptFuture, Call, Callback, Record, Settled, Shared, execute};
use crate::fallback::NoFallback;
use crate::observe::{Span, StreamReporter};
use crate::outcome::{StopReason, StreamEnd};
use crate::result::AttemptRecord;

/// How a stream call is bounded once its first item has arrived: see the
/// [module table](self). Cheap to copy; build it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamOptions {
    idle_timeout: Option<Duration>,
    deadline: StreamDeadline,
}

/// What the call's deadline bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StreamDeadline {
    /// The whole stream: it ends with [`Error::DeadlineExceeded`] when the deadline passes.
    #[default]
    WholeStream,
    /// Only opening the stream and its first item (the retried phase); the items after it are
    /// bounded by the idle timeout and the caller alone.
    FirstItem,
}

impl StreamOptions {
    /// A builder with the defaults in the [module table](self).
    pub fn builder() -> StreamOptionsBuilder {
        StreamOptionsBuilder {
            options: StreamOptions::default(),
        }
    }

    /// The longest wait for an item after the first, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }

    /// What the call's deadline bounds.
    pub fn deadline(&self) -> StreamDeadline {
        self.deadline
    }
}

/// Builds [`StreamOptions`]; [`build`](Self::build) validates them.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until built"]
pub struct StreamOptionsBuilder {
    options: StreamOptions,
}

impl StreamOptionsBuilder {
    /// The longest wait for the next item once the first was delivered (default none; must be
    /// positive). A stall this long ends the stream with [`Error::IdleTimeout`].
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.options.idle_timeout = Some(idle);
        self
    }

    /// No idle timeout (the default).
    pub fn no_idle_timeout(mut self) -> Self {
        self.options.idle_timeout = None;
        self
    }

    /// What the call's deadline bounds (default [`StreamDeadline::WholeStream`]).
    pub fn deadline(mut self, bounds: StreamDeadline) -> Self {
        self.options.deadline = bounds;
        self
    }

    /// The options, or every problem with them, each naming the field and the value.
    pub fn build(self) -> Result<StreamOptions, ConfigError> {
        match self.options.idle_timeout {
            Some(idle) if idle.is_zero() => Err(ConfigError::new(vec![ConfigProblem::new(
                "idle_timeout",
                "must be positive (was 0ns)",
            )])),
            _ => Ok(self.options),
        }
    }
}

/// An opened stream and its first item (`None` when the stream ended before one): the value a
/// stream call's classifier sees for an attempt that did not fail.
pub struct First<S, T> {
    stream: S,
    item: Option<T>,
}

impl<S, T> First<S, T> {
    /// The first item, or `None` when the stream ended cleanly before delivering one.
    pub fn item(&self) -> Option<&T> {
        self.item.as_ref()
    }

    /// The opened stream (its first item already taken).
    pub fn stream(&self) -> &S {
        &self.stream
    }
}

impl<S, T: fmt::Debug> fmt::Debug for First<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("First")
            .field("item", &self.item)
            .finish_non_exhaustive()
    }
}

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
                bound: match options.deadline {
                    StreamDeadline::WholeStream => opening.deadline,
                    StreamDeadline::FirstItem => None,
                },
                idle: options.idle_timeout,
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

/// Where and since when a listened-to stream reports its end.
struct Report {
    reporter: Arc<StreamReporter>,
    /// The stream's `rampart.stream` span.
    span: Span,
    /// The start of the call that opened it.
    start: Option<Instant>,
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

/// The error that ends a stream at its deadline, and its end: `DeadlineExceeded`, or the
/// drain's rejection when the bound was a drain's grace (as for a call).
#[cold]
fn exceeded<E>(bound: Effective, attempts: u32) -> (Error<E>, StreamEnd) {
    match bound.source.reported() {
        Some(source) => (
            Error::DeadlineExceeded {
                deadline: bound.span,
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
struct Bounds {
    clock: Clock,
    bound: Option<Effective>,
    idle: Option<Duration>,
    caller: Option<CancellationToken>,
    /// Attempts the open phase counted.
    attempts: u32,
    /// Where the end is reported, when something listened as the stream opened; taken when
    /// it is.
    report: Option<Report>,
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
    fn new(first: First<S, T>, bounds: Bounds) -> Self {
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
        self.bounds.bound.map(|b| b.at)
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
            && now >= bound.at
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
                let deadline = this.bounds.bound.map(|b| (b.at, Fire::Deadline(b)));
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
