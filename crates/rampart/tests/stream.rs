//! Streaming calls (issue 15) on tokio's paused time: retried only until the first item, then
//! bounded by the idle timeout, the deadline and the caller; every duration asserted is
//! virtual.
//!
//! Longer than the ~600-line guide: one file for streaming calls, from the open phase to the
//! stream's end, sharing its sources and helpers.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_core::Stream;
use futures_util::StreamExt;
use rampart::backoff::Backoff;
use rampart::drain::Drain;
use rampart::hedge::Hedge;
use rampart::stream::{First, RampartStream, StreamDeadline, StreamOptions};
use rampart::testing::{advance_until, wait_for_pending};
use rampart::{
    CancellationToken, Classify, Deadline, DeadlineSource, Error, ManualClock, Policy, Verdict,
};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fail {
    Reset,
    Refused,
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fail::Reset => "reset",
            Fail::Refused => "refused",
        })
    }
}

/// The source streams of these tests: boxed, because `unfold` is not `Unpin`.
type Source = Pin<Box<dyn Stream<Item = Result<u32, Fail>> + Send>>;

/// Each item after its delay in milliseconds; then silence (`stall`) or the end.
fn script<const N: usize>(steps: [(u64, Result<u32, Fail>); N], stall: bool) -> Source {
    let steps = steps.into_iter();
    Box::pin(futures_util::stream::unfold(
        steps,
        move |mut steps| async move {
            match steps.next() {
                Some((ms, item)) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Some((item, steps))
                }
                None if stall => std::future::pending().await,
                None => None,
            }
        },
    ))
}

/// Items 1, 2, 3... one every `every`, without end.
fn ticking(every: Duration) -> Source {
    Box::pin(futures_util::stream::unfold(0, move |n| async move {
        tokio::time::sleep(every).await;
        Some((Ok(n + 1), n + 1))
    }))
}

/// Every item the stream gives, in words (`Err` items by their message).
async fn drain(stream: RampartStream<Source, u32>) -> Vec<String> {
    let mut stream = std::pin::pin!(stream);
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(match item {
            Ok(n) => n.to_string(),
            Err(e) => e.to_string(),
        });
    }
    assert!(stream.next().await.is_none(), "an ended stream stays ended");
    items
}

/// Opens a stream under `policy` whose attempt `n` (counted from 0, hedged legs included)
/// opens `attempt(n)`; returns what opening gave and how many times the op was called.
async fn open<C>(
    policy: &Policy<C>,
    options: StreamOptions,
    attempt: impl Fn(u32) -> Result<Source, Fail>,
) -> (Result<RampartStream<Source, u32>, Error<Fail>>, u32)
where
    C: Classify<First<Source, u32>, Fail>,
{
    let calls = AtomicU32::new(0);
    let opened = policy
        .call()
        .stream(options, async |_| {
            attempt(calls.fetch_add(1, Ordering::SeqCst))
        })
        .await;
    (opened, calls.load(Ordering::SeqCst))
}

fn options() -> StreamOptions {
    StreamOptions::default()
}

fn idle(idle: Duration) -> StreamOptions {
    StreamOptions::builder()
        .idle_timeout(idle)
        .build()
        .expect("valid options")
}

#[tokio::test(start_paused = true)]
async fn retried_while_the_first_item_fails_and_the_stream_that_delivers_one_is_kept() {
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff::constant(100 * MS))
        .build()
        .expect("valid");
    let start = Instant::now();
    let (opened, calls) = open(&policy, options(), |n| match n {
        0 => Ok(script([(10, Err(Fail::Reset))], false)),
        1 => Err(Fail::Refused),
        _ => Ok(script([(10, Ok(1)), (10, Ok(2))], false)),
    })
    .await;
    let stream = opened.expect("the third attempt delivers an item");
    assert_eq!((calls, stream.attempts()), (3, 3));
    assert_eq!(drain(stream).await, ["1", "2"]);
    // 10 (the failing first item) + 100 + 0 (the failed open) + 100 + 10 + 10.
    assert_eq!(start.elapsed(), 230 * MS);
}

#[tokio::test(start_paused = true)]
async fn an_error_after_the_first_item_ends_the_stream_and_the_op_is_not_called_again() {
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let (opened, calls) = open(&policy, options(), |_| {
        Ok(script(
            [(10, Ok(1)), (10, Err(Fail::Reset)), (10, Ok(3))],
            false,
        ))
    })
    .await;
    assert_eq!(drain(opened.expect("opened")).await, ["1", "reset"]);
    assert_eq!(calls, 1);
}

#[tokio::test(start_paused = true)]
async fn a_stall_ends_the_stream_with_the_idle_error_at_exactly_the_idle_timeout() {
    let policy = Policy::builder().build().expect("valid");
    let start = Instant::now();
    let (opened, _) = open(&policy, idle(50 * MS), |_| {
        Ok(script([(10, Ok(1)), (49, Ok(2))], true))
    })
    .await;
    let mut stream = std::pin::pin!(opened.expect("opened"));
    assert_eq!(stream.next().await.map(Result::ok), Some(Some(1)));
    assert_eq!(stream.next().await.map(Result::ok), Some(Some(2)));
    let stalled = stream.next().await.expect("the idle error");
    assert!(matches!(
        stalled,
        Err(Error::IdleTimeout { idle, items: 2 }) if idle == 50 * MS
    ));
    assert_eq!(start.elapsed(), (10 + 49 + 50) * MS);
    assert!(stream.next().await.is_none());
    assert!(stream.is_ended());
}

#[tokio::test(start_paused = true)]
async fn an_item_arriving_exactly_at_the_idle_timeout_wins_over_the_idle_timer() {
    let policy = Policy::builder().build().expect("valid");
    let (opened, _) = open(&policy, idle(50 * MS), |_| {
        Ok(script([(1, Ok(1)), (50, Ok(2))], true))
    })
    .await;
    assert_eq!(
        drain(opened.expect("opened")).await,
        [
            "1",
            "2",
            "stream stalled: no item within its 50ms idle timeout after 2 items"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_idle_clock_runs_only_while_the_consumer_waits() {
    let policy = Policy::builder().build().expect("valid");
    let (opened, _) = open(&policy, idle(50 * MS), |_| {
        Ok(script([(1, Ok(1)), (0, Ok(2)), (40, Ok(3))], false))
    })
    .await;
    let mut stream = std::pin::pin!(opened.expect("opened"));
    assert_eq!(stream.next().await.map(Result::ok), Some(Some(1)));
    // A consumer busy for longer than the idle timeout is not a silent source.
    tokio::time::sleep(200 * MS).await;
    let rest: Vec<_> = stream.map(Result::ok).collect().await;
    assert_eq!(rest, [Some(2), Some(3)]);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_ends_a_stream_that_keeps_producing_at_exactly_the_deadline() {
    let policy = Policy::builder()
        .total_timeout(1000 * MS)
        .build()
        .expect("valid");
    let start = Instant::now();
    let (opened, _) = open(&policy, options(), |_| Ok(ticking(100 * MS))).await;
    let stream = opened.expect("opened");
    assert_eq!(stream.deadline(), Some(start + 1000 * MS));
    let items = drain(stream).await;
    // Items at 100..=900 ms; at 1000 ms the deadline wins over the item due then.
    assert_eq!(items.len(), 10);
    assert_eq!(items[..9], ["1", "2", "3", "4", "5", "6", "7", "8", "9"]);
    assert_eq!(items[9], "deadline of 1s exceeded after 1 attempt");
    assert_eq!(start.elapsed(), 1000 * MS);
}

#[tokio::test(start_paused = true)]
async fn when_the_idle_timeout_and_the_deadline_fall_together_the_deadline_ends_the_stream() {
    let policy = Policy::builder()
        .total_timeout(300 * MS)
        .build()
        .expect("valid");
    let (opened, _) = open(&policy, idle(100 * MS), |_| {
        Ok(script([(100, Ok(1)), (100, Ok(2))], true))
    })
    .await;
    assert_eq!(
        drain(opened.expect("opened")).await,
        ["1", "2", "deadline of 300ms exceeded after 1 attempt"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_error_of_a_stream_has_the_deadline_source_and_attempts() {
    let policy = Policy::builder()
        .total_timeout(1000 * MS)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let (opened, _) = open(&policy, options(), |n| match n {
        0 => Err(Fail::Reset),
        _ => Ok(script([(10, Ok(1))], true)),
    })
    .await;
    let mut stream = std::pin::pin!(opened.expect("opened"));
    assert!(matches!(stream.next().await, Some(Ok(1))));
    let Some(Err(Error::DeadlineExceeded {
        timeout: deadline,
        source,
        attempts,
        unfit,
        last,
    })) = stream.next().await
    else {
        panic!("expected the deadline to end the stream");
    };
    assert_eq!(deadline, 1000 * MS);
    assert_eq!(source, DeadlineSource::Policy);
    assert_eq!(attempts, 2);
    assert!(unfit.is_none() && last.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_first_item_deadline_bounds_only_opening_and_lets_the_stream_outlive_it() {
    let policy = Policy::builder()
        .total_timeout(1000 * MS)
        .build()
        .expect("valid");
    let options = StreamOptions::builder()
        .deadline(StreamDeadline::FirstItem)
        .build()
        .expect("valid");
    let start = Instant::now();
    let (opened, _) = open(&policy, options, |_| {
        Ok(Box::pin(ticking(100 * MS).take(15)))
    })
    .await;
    let stream = opened.expect("opened");
    assert_eq!(stream.deadline(), None);
    assert_eq!(drain(stream).await.len(), 15);
    assert_eq!(start.elapsed(), 1500 * MS);
}

#[tokio::test(start_paused = true)]
async fn caller_cancellation_ends_a_waiting_stream_at_once() {
    let policy = Policy::builder().build().expect("valid");
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(250 * MS).await;
        cancel.cancel();
    });
    let start = Instant::now();
    let stream = policy
        .call()
        .token(&token)
        .stream(options(), async |_| Ok::<_, Fail>(ticking(100 * MS)))
        .await
        .expect("opened");
    assert_eq!(
        drain(stream).await,
        ["1", "2", "call cancelled by the caller"]
    );
    assert_eq!(start.elapsed(), 250 * MS);
}

#[tokio::test(start_paused = true)]
async fn caller_cancellation_wins_over_a_ready_item() {
    let policy = Policy::builder().build().expect("valid");
    let token = CancellationToken::new();
    let stream = policy
        .call()
        .token(&token)
        .stream(options(), async |_| {
            Ok::<_, Fail>(futures_util::stream::iter([Ok(1u32), Ok(2)]))
        })
        .await
        .expect("opened");
    let mut stream = std::pin::pin!(stream);
    assert!(matches!(stream.next().await, Some(Ok(1))));
    token.cancel();
    assert!(matches!(stream.next().await, Some(Err(Error::Cancelled))));
    assert!(stream.next().await.is_none());
    assert_eq!(stream.items(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_bounds_opening_and_the_first_item_only() {
    let policy = Policy::builder()
        .attempt_timeout(500 * MS)
        .backoff(Backoff::none())
        .build()
        .expect("valid");
    let start = Instant::now();
    let (opened, calls) = open(&policy, options(), |n| match n {
        0 => Ok(script([(600, Ok(1))], false)),
        _ => Ok(script([(10, Ok(1)), (700, Ok(2))], false)),
    })
    .await;
    let stream = opened.expect("the second attempt delivers in time");
    assert_eq!(drain(stream).await, ["1", "2"]);
    assert_eq!(calls, 2);
    assert_eq!(start.elapsed(), (500 + 10 + 700) * MS);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_ends_before_its_first_item_is_an_empty_success() {
    let policy = Policy::builder().max_attempts(3).build().expect("valid");
    let (opened, calls) = open(&policy, options(), |_| Ok(script([], false))).await;
    let stream = opened.expect("an empty stream is a value");
    assert!(stream.is_ended());
    assert!(drain(stream).await.is_empty());
    assert_eq!(calls, 1);
}

#[tokio::test(start_paused = true)]
async fn the_classifier_sees_the_first_item_and_may_retry_an_empty_stream_or_stop_on_a_permanent_error()
 {
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff::none())
        .classifier(|r: &Result<First<Source, u32>, Fail>| match r {
            Err(Fail::Refused) => Verdict::Permanent,
            Err(Fail::Reset) => Verdict::Transient,
            Ok(first) if first.item().is_none() => Verdict::Transient,
            Ok(_) => Verdict::Ok,
        })
        .build()
        .expect("valid");
    let (opened, calls) = open(&policy, options(), |n| match n {
        0 => Ok(script([], false)),
        _ => Ok(script([(5, Err(Fail::Refused))], false)),
    })
    .await;
    assert!(matches!(opened, Err(Error::Inner(Fail::Refused))));
    assert_eq!(calls, 2, "the permanent error is not retried");
}

#[tokio::test(start_paused = true)]
async fn an_inherited_deadline_ends_the_stream_when_the_caller_upstream_stops_waiting() {
    let policy = Policy::builder()
        .use_ambient_deadline(true)
        .build()
        .expect("valid");
    let start = Instant::now();
    let (opened, _) = Deadline::after(300 * MS)
        .scope(open(&policy, options(), |_| Ok(ticking(100 * MS))))
        .await;
    // Consumed outside the scope: the bound was resolved when the call started.
    assert_eq!(
        drain(opened.expect("opened")).await,
        [
            "1",
            "2",
            "inherited deadline of 300ms exceeded after 1 attempt"
        ]
    );
    assert_eq!(start.elapsed(), 300 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_given_to_the_call_ends_the_stream_like_an_inherited_one() {
    let policy = Policy::builder().build().expect("valid");
    let start = Instant::now();
    let opened = policy
        .call()
        .deadline(Deadline::after(300 * MS))
        .stream(options(), async |_| Ok(ticking(100 * MS)))
        .await;
    assert_eq!(
        drain(opened.expect("opened")).await,
        [
            "1",
            "2",
            "inherited deadline of 300ms exceeded after 1 attempt"
        ]
    );
    assert_eq!(start.elapsed(), 300 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_drains_grace_ends_the_stream_with_the_drains_rejection() {
    let drain_switch = Drain::new();
    let policy = Policy::builder()
        .drain(&drain_switch)
        .build()
        .expect("valid");
    drain_switch.begin(Some(250 * MS));
    let (opened, _) = open(&policy, options(), |_| Ok(ticking(100 * MS))).await;
    assert_eq!(
        drain(opened.expect("opened")).await,
        ["1", "2", "rejected: process draining after 1 attempt sent"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedging_policy_keeps_the_stream_of_the_first_leg_to_deliver_an_item() {
    let policy = Policy::builder()
        .max_attempts(2)
        .hedge(Hedge::fixed(50 * MS))
        .build()
        .expect("valid");
    let start = Instant::now();
    let (opened, calls) = open(&policy, options(), |n| match n {
        0 => Ok(script([(500, Ok(10)), (1, Ok(11))], false)),
        _ => Ok(script([(10, Ok(20)), (1, Ok(21))], false)),
    })
    .await;
    let stream = opened.expect("the hedge delivers first");
    assert_eq!(drain(stream).await, ["20", "21"]);
    assert_eq!(calls, 2);
    assert_eq!(start.elapsed(), (50 + 10 + 1) * MS);
}

#[test]
fn stream_options_default_to_no_idle_timeout_and_the_deadline_bounding_the_whole_stream() {
    let options = StreamOptions::builder().build().expect("valid");
    assert_eq!(options, StreamOptions::default());
    assert_eq!(options.idle_timeout(), None);
    assert_eq!(options.deadline(), StreamDeadline::WholeStream);
    let cleared = StreamOptions::builder()
        .idle_timeout(Duration::from_secs(1))
        .no_idle_timeout()
        .build()
        .expect("valid");
    assert_eq!(cleared.idle_timeout(), None);
}

#[test]
fn a_zero_idle_timeout_is_refused_when_the_options_are_built_naming_the_field_and_value() {
    let err = StreamOptions::builder()
        .idle_timeout(Duration::ZERO)
        .build()
        .expect_err("a zero idle timeout is invalid");
    assert_eq!(err.problems()[0].field(), "idle_timeout");
    assert_eq!(err.to_string(), "idle_timeout must be positive (was 0ns)");
}

struct Prices {
    policy: Policy,
    feed: Vec<u32>,
}

impl Prices {
    async fn watch(&self, sku: &str) -> Result<Vec<u32>, Error<Fail>> {
        let stream = self
            .policy
            .call()
            .stream(options(), async |_| {
                let feed = self.feed.iter().map(|p| Ok(p + sku.len() as u32));
                Ok::<_, Fail>(futures_util::stream::iter(feed.collect::<Vec<_>>()))
            })
            .await?;
        let stream = std::pin::pin!(stream);
        stream.collect::<Vec<_>>().await.into_iter().collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_call_borrowing_its_environment_runs_in_a_spawned_task() {
    let prices = Arc::new(Prices {
        policy: Policy::builder().build().expect("valid"),
        feed: vec![100, 200],
    });
    let watched = tokio::spawn(async move { prices.watch("sku").await })
        .await
        .expect("task");
    assert_eq!(watched.expect("prices"), [103, 203]);
}

/// A source that always has its next item ready, and takes 10 ms of (paused) time to make it,
/// without ever letting its task yield.
struct Busy(u32);

impl Stream for Busy {
    type Item = Result<u32, Fail>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let advance = std::pin::pin!(tokio::time::advance(10 * MS));
        // The first poll moves the paused clock; the yield that follows is not awaited.
        let _ = std::future::Future::poll(advance, cx);
        self.0 += 1;
        std::task::Poll::Ready(Some(Ok(self.0)))
    }
}

#[tokio::test(start_paused = true)]
async fn a_source_that_always_has_an_item_ready_is_still_ended_at_the_deadline() {
    let policy = Policy::builder()
        .total_timeout(100 * MS)
        .build()
        .expect("valid");
    let start = Instant::now();
    let stream = policy
        .call()
        .stream(options(), async |_| Ok::<_, Fail>(Busy(0)))
        .await
        .expect("opened");
    let items: Vec<_> = std::pin::pin!(stream).take(1_000).collect().await;
    // Items made at 10..=100 ms; asked for at 100 ms, the next one is not.
    assert_eq!(items.len(), 11);
    assert!(matches!(items[10], Err(Error::DeadlineExceeded { .. })));
    assert_eq!(start.elapsed(), 100 * MS);
}

#[tokio::test]
async fn a_stream_on_a_manual_clock_idles_out_only_when_the_clock_reaches_the_idle_timeout() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .build()
        .expect("valid");
    let stream = policy
        .call()
        .stream(idle(Duration::from_secs(5)), async |_| {
            let first = futures_util::stream::iter([Ok::<u32, Fail>(1)]);
            Ok::<_, Fail>(first.chain(futures_util::stream::pending()))
        })
        .await
        .expect("opened");
    let mut consumer = tokio::spawn(async move {
        let items: Vec<_> = std::pin::pin!(stream).collect().await;
        items
            .into_iter()
            .map(|i| i.map_err(|e| e.to_string()))
            .collect::<Vec<_>>()
    });
    // One timer, at the earlier of the idle window's end and the deadline (30 s).
    wait_for_pending(&mut consumer, || clock.sleepers() == 1, "the stall")
        .await
        .expect("the consumer waits");
    let early = advance_until(&clock, 4_999 * MS, || consumer.is_finished(), "no end", 1).await;
    assert!(
        early.is_err(),
        "a millisecond before the idle timeout, the stream still waits"
    );
    advance_until(&clock, MS, || consumer.is_finished(), "the idle timeout", 1)
        .await
        .expect("the idle timeout ends the stream");
    let items = consumer.await.expect("consumer");
    assert_eq!(
        items,
        [
            Ok(1),
            Err("stream stalled: no item within its 5s idle timeout after 1 item".to_owned())
        ]
    );
}

// ---- events: the delivery phase reports its end ---------------------------------------

/// Every `StreamEnded` (its end and items) and `CallEnded` (its stop reason) the policy
/// built from `builder` reports, in order.
type Ends = Arc<std::sync::Mutex<Vec<String>>>;

fn listened(builder: rampart::PolicyBuilder) -> (Policy, Ends) {
    let ends = Ends::default();
    let seen = ends.clone();
    let policy = builder
        .listener(move |event: &rampart::Event<'_>| {
            let line = match *event {
                rampart::Event::StreamEnded { end, items, .. } => format!("stream {end} {items}"),
                rampart::Event::CallEnded { stop, attempts, .. } => {
                    format!("call {} {attempts}", stop.as_str())
                }
                _ => return,
            };
            seen.lock().expect("ends").push(line);
        })
        .build()
        .expect("valid policy");
    (policy, ends)
}

fn ends(ends: &Ends) -> Vec<String> {
    ends.lock().expect("ends").clone()
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_completes_reports_one_stream_ended_after_its_call_ended_with_its_items() {
    let (policy, seen) = listened(Policy::builder().max_attempts(2).backoff(Backoff::none()));
    let (opened, _) = open(&policy, options(), |n| match n {
        0 => Err(Fail::Refused),
        _ => Ok(script([(1, Ok(1)), (1, Ok(2)), (1, Ok(3))], false)),
    })
    .await;
    let stream = opened.expect("opened");
    assert_eq!(
        ends(&seen),
        ["call succeeded 2"],
        "nothing yet from the stream"
    );
    assert_eq!(drain(stream).await, ["1", "2", "3"]);
    assert_eq!(ends(&seen), ["call succeeded 2", "stream completed 3"]);
}

#[tokio::test(start_paused = true)]
async fn each_way_a_stream_ends_is_its_stream_ended_reason() {
    let token = CancellationToken::new();
    let drain_switch = Drain::new();
    let (policy, seen) = listened(
        Policy::builder()
            .total_timeout(1_000 * MS)
            .drain(&drain_switch)
            .max_attempts(1),
    );
    let failed = |_| Ok(script([(1, Ok(1)), (1, Err(Fail::Reset))], false));
    let (opened, _) = open(&policy, options(), failed).await;
    drain(opened.expect("opened")).await;
    let stalls = |_| Ok(script([(1, Ok(1))], true));
    let (opened, _) = open(&policy, idle(50 * MS), stalls).await;
    drain(opened.expect("opened")).await;
    let (opened, _) = open(&policy, options(), |_| Ok(ticking(100 * MS))).await;
    drain(opened.expect("opened")).await;
    let cancelled = policy
        .call()
        .token(&token)
        .stream(options(), async |_| Ok::<_, Fail>(ticking(100 * MS)))
        .await
        .expect("opened");
    // Items at 100 (the first, while opening), 200 and 300 ms; cancelled at 350 ms.
    let cancel = async {
        tokio::time::sleep(250 * MS).await;
        token.cancel();
    };
    let (items, ()) = tokio::join!(drain(cancelled), cancel);
    assert_eq!(
        items.last().map(String::as_str),
        Some("call cancelled by the caller")
    );
    let (opened, _) = open(&policy, options(), |_| Ok(ticking(10 * MS))).await;
    let mut dropped = Box::pin(opened.expect("opened"));
    assert!(dropped.next().await.is_some_and(|i| i.is_ok()));
    assert!(dropped.next().await.is_some_and(|i| i.is_ok()));
    drop(dropped);
    drain_switch.begin(Some(150 * MS));
    let (opened, _) = open(&policy, options(), |_| Ok(ticking(100 * MS))).await;
    drain(opened.expect("opened")).await;
    let streams: Vec<_> = ends(&seen)
        .into_iter()
        .filter(|line| line.starts_with("stream"))
        .collect();
    assert_eq!(
        streams,
        [
            "stream failed 1",
            "stream idle_timeout 1",
            "stream deadline_exceeded 9",
            "stream cancelled 3",
            "stream dropped 2",
            "stream draining 1",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_to_open_reports_its_call_ended_and_no_stream_ended() {
    let (policy, seen) = listened(Policy::builder().max_attempts(2).backoff(Backoff::none()));
    let (opened, calls) = open(&policy, options(), |_| Err(Fail::Refused)).await;
    assert!(opened.is_err());
    assert_eq!(calls, 2);
    assert_eq!(ends(&seen), ["call attempts_exhausted 2"]);
}

#[tokio::test(start_paused = true)]
async fn a_stream_empty_from_the_start_reports_completed_with_no_items_once() {
    let (policy, seen) = listened(Policy::builder());
    let (opened, _) = open(&policy, options(), |_| Ok(script([], false))).await;
    assert!(drain(opened.expect("opened")).await.is_empty());
    let (opened, _) = open(&policy, options(), |_| Ok(script([], false))).await;
    drop(opened.expect("opened"));
    assert_eq!(
        ends(&seen),
        [
            "call succeeded 1",
            "stream completed 0",
            "call succeeded 1",
            "stream completed 0"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_stream_ended_event_says_the_time_since_the_call_started() {
    let elapsed = Arc::new(std::sync::Mutex::new(None));
    let seen = elapsed.clone();
    let policy = Policy::builder()
        .listener(move |event: &rampart::Event<'_>| {
            if let rampart::Event::StreamEnded { elapsed, .. } = *event {
                *seen.lock().expect("elapsed") = Some(elapsed);
            }
        })
        .build()
        .expect("valid policy");
    let (opened, _) = open(&policy, options(), |_| {
        Ok(script([(30, Ok(1)), (20, Ok(2))], false))
    })
    .await;
    drain(opened.expect("opened")).await;
    assert_eq!(*elapsed.lock().expect("elapsed"), Some(50 * MS));
}
