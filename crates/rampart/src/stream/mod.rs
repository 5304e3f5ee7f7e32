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
//!     .total_timeout(Duration::from_secs(30))
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
//! [`Error::Inner`]: crate::Error::Inner
//! [`Error::IdleTimeout`]: crate::Error::IdleTimeout
//! [`Error::DeadlineExceeded`]: crate::Error::DeadlineExceeded
//! [`Error::Cancelled`]: crate::Error::Cancelled
//! [`StreamEnd`]: crate::outcome::StreamEnd

mod deliver;
mod open;
mod options;

use std::fmt;

pub use deliver::RampartStream;
pub use options::{StreamDeadline, StreamOptions, StreamOptionsBuilder};

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
