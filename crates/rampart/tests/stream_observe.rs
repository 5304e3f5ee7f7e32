//! The delivery phase of a stream under the `metrics` and `tracing` features: its end moves
//! `rampart.stream.ended{reason}` and `rampart.stream.items`, and is a `rampart.stream` span
//! (a child of the call's) with its `items` and `end`, holding a DEBUG "stream ended" event.

use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use futures_util::StreamExt;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use rampart::stream::{RampartStream, StreamOptions};
use rampart::{Error, Policy, PolicyBuilder};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failed")
    }
}

type Source = Pin<Box<dyn Stream<Item = Result<u32, Fail>> + Send>>;

/// `items` items, one every 10 ms, then silence (`stall`) or the end.
fn source(items: u32, stall: bool) -> Source {
    Box::pin(futures_util::stream::unfold(0, move |n| async move {
        if n == items {
            if stall {
                std::future::pending::<()>().await;
            }
            return None;
        }
        tokio::time::sleep(10 * MS).await;
        Some((Ok(n), n + 1))
    }))
}

async fn open(
    policy: &Policy,
    options: StreamOptions,
    items: u32,
    stall: bool,
) -> RampartStream<Source, u32> {
    policy
        .call()
        .stream(options, async |_| Ok::<_, Fail>(source(items, stall)))
        .await
        .expect("opened")
}

async fn consume(stream: RampartStream<Source, u32>) -> Vec<Result<u32, Error<Fail>>> {
    stream.collect().await
}

fn idle(idle: Duration) -> StreamOptions {
    StreamOptions::builder()
        .idle_timeout(idle)
        .build()
        .expect("valid options")
}

// ---- metrics ------------------------------------------------------------------------------

/// Builds `builder` (named `p`), with a fresh debugging recorder as the thread's recorder
/// while the returned guard lives (a series is registered on its first use).
fn observed(builder: PolicyBuilder) -> (Policy, Snapshotter, metrics::LocalRecorderGuard<'static>) {
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    let guard = metrics::set_default_local_recorder(recorder);
    let policy = builder.name("p").build().expect("valid policy");
    (policy, recorder.snapshotter(), guard)
}

/// The `rampart.stream.*` counters that moved, as `name{label=value} count`.
fn stream_counters(snapshotter: &Snapshotter) -> Vec<String> {
    let mut moved: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let key = key.key();
            let DebugValue::Counter(n @ 1..) = value else {
                return None;
            };
            if !key.name().starts_with("rampart.stream.") {
                return None;
            }
            let labels: Vec<_> = key
                .labels()
                .filter(|l| l.key() != "policy")
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            Some(format!("{}{{{}}} {n}", key.name(), labels.join(",")))
        })
        .collect();
    moved.sort();
    moved
}

#[tokio::test(start_paused = true)]
async fn streams_that_end_move_stream_ended_by_reason_and_stream_items_by_their_items() {
    let (policy, metrics, _recorder) =
        observed(Policy::builder().total_timeout(Duration::from_secs(5)));
    assert!(
        stream_counters(&metrics).is_empty(),
        "registered, not moved"
    );
    consume(open(&policy, StreamOptions::default(), 3, false).await).await;
    consume(open(&policy, StreamOptions::default(), 2, false).await).await;
    let stalled = consume(open(&policy, idle(50 * MS), 4, true).await).await;
    assert!(matches!(
        stalled.last(),
        Some(Err(Error::IdleTimeout { .. }))
    ));
    let mut dropped = Box::pin(open(&policy, StreamOptions::default(), 9, false).await);
    assert!(dropped.next().await.is_some());
    drop(dropped);
    assert_eq!(
        stream_counters(&metrics),
        [
            "rampart.stream.ended{reason=completed} 2",
            "rampart.stream.ended{reason=dropped} 1",
            "rampart.stream.ended{reason=idle_timeout} 1",
            "rampart.stream.items{} 10",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_never_opened_moves_no_stream_metric() {
    let (policy, metrics, _recorder) = observed(Policy::builder().max_attempts(2));
    let opened = policy
        .call()
        .stream(StreamOptions::default(), async |_| Err::<Source, _>(Fail))
        .await;
    assert!(opened.is_err());
    assert!(stream_counters(&metrics).is_empty());
}

// ---- tracing ------------------------------------------------------------------------------

#[path = "support/capture.rs"]
mod capture;
use capture::capture;

/// The lines about calls and streams (attempts left out).
fn call_lines(capture: &capture::Capture) -> Vec<String> {
    let lines = capture.all();
    lines
        .into_iter()
        .filter(|l| !l.contains("attempt ended") && !l.contains("rampart.attempt"))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_delivery_phase_is_a_stream_span_under_the_call_span_recording_its_items_and_end() {
    let (capture, _guard) = capture();
    let policy = Policy::builder().name("p").build().expect("valid policy");
    let items = consume(open(&policy, idle(50 * MS), 2, true).await).await;
    assert_eq!(items.len(), 3, "two items, then the idle error");
    assert_eq!(
        call_lines(&capture),
        [
            "new rampart.call in none",
            "DEBUG call ended policy=\"p\" stop_reason=\"succeeded\" attempts=1 in rampart.call",
            "new rampart.stream in rampart.call",
            "DEBUG stream ended policy=\"p\" end=\"idle_timeout\" items=2 in rampart.stream",
            "span rampart.stream policy=\"p\" items=2 end=\"idle_timeout\"",
            "span rampart.call policy=\"p\" deadline=30s attempts=1 stop_reason=\"succeeded\"",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_dropped_before_its_end_records_end_dropped_on_its_span() {
    let (capture, _guard) = capture();
    let policy = Policy::builder().name("p").build().expect("valid policy");
    let mut stream = Box::pin(open(&policy, StreamOptions::default(), 5, false).await);
    assert!(stream.next().await.is_some());
    assert!(stream.next().await.is_some());
    drop(stream);
    let lines = call_lines(&capture);
    assert!(
        lines.contains(&"span rampart.stream policy=\"p\" items=2 end=\"dropped\"".to_owned()),
        "{lines:#?}"
    );
}
