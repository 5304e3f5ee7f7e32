//! What a streaming call allocates (issue 15), counted, never timed: with every bound
//! configured (deadline, idle timeout, caller token) but none firing, delivering an item
//! allocates nothing, whether the source has it ready or makes the consumer wait for it (which
//! re-arms the idle timer).

use std::cell::Cell;
use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_core::Stream;
use rampart::stream::{RampartStream, StreamOptions};
use rampart::{Breaker, CancellationToken, Policy};

/// Polls a future that must be ready at once.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a call whose first item is ready completes on its first poll"),
    }
}

/// Items 0, 1, 2... for ever; while `hesitant`, each one only on the second poll (the first
/// answers `Pending` and wakes the consumer), so the consumer waits for every item.
struct Counter {
    next: u64,
    hesitant: Rc<Cell<bool>>,
    asked: bool,
}

impl Stream for Counter {
    type Item = Result<u64, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.hesitant.get() && !self.asked {
            self.asked = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.asked = false;
        self.next += 1;
        Poll::Ready(Some(Ok(self.next - 1)))
    }
}

fn full_policy() -> Policy {
    Policy::builder()
        .name("full")
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .breaker(Breaker::builder().build().expect("valid breaker"))
        .build()
        .expect("valid policy")
}

/// A current-thread runtime with its timer, entered for the calling thread.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// A `Counter` stream opened under `policy` with every bound configured: the policy's
/// deadline, an idle timeout and the caller's `token`. The source hesitates while `waits` is
/// set (the open phase needs its first item at once).
fn open(
    policy: &Policy,
    token: &CancellationToken,
    waits: &Rc<Cell<bool>>,
) -> RampartStream<Counter, u64> {
    let options = StreamOptions::builder()
        .idle_timeout(Duration::from_secs(5))
        .build()
        .expect("valid options");
    ready(policy.call().token(token).stream(options, async |_| {
        Ok::<_, std::io::Error>(Counter {
            next: 0,
            hesitant: waits.clone(),
            asked: false,
        })
    }))
    .expect("opened")
}

/// Allocations while `items` items are delivered, after the first two (the first is pulled
/// by the open phase; asking for the second registers the deadline's timer).
fn allocations_per_items(policy: &Policy, hesitant: bool, items: u64) -> u64 {
    let rt = runtime();
    let _context = rt.enter();
    let token = CancellationToken::new();
    let waits = Rc::new(Cell::new(false));
    let mut stream = pin!(open(policy, &token, &waits));
    let mut cx = Context::from_waker(Waker::noop());
    let mut next = |stream: &mut Pin<&mut RampartStream<Counter, u64>>, expected: u64| loop {
        match Stream::poll_next(stream.as_mut(), &mut cx) {
            Poll::Ready(Some(Ok(n))) => {
                assert_eq!(n, expected);
                return;
            }
            Poll::Ready(other) => panic!("expected item {expected}, got {other:?}"),
            Poll::Pending if hesitant => {}
            Poll::Pending => panic!("a ready source's item is delivered at once"),
        }
    };
    next(&mut stream, 0);
    waits.set(hesitant);
    next(&mut stream, 1);
    let counted = allocation_counter::measure(|| {
        for n in 2..items + 2 {
            next(&mut stream, n);
        }
    });
    counted.count_total
}

#[test]
fn delivering_ready_items_with_every_bound_configured_allocates_nothing() {
    assert_eq!(allocations_per_items(&full_policy(), false, 10_000), 0);
}

#[test]
fn delivering_items_the_consumer_waits_for_re_arms_the_idle_timer_without_allocating() {
    assert_eq!(allocations_per_items(&full_policy(), true, 10_000), 0);
}

#[test]
fn a_pass_through_policys_stream_allocates_nothing_per_item() {
    assert_eq!(allocations_per_items(&Policy::none(), false, 10_000), 0);
}

/// Allocations of `calls` stream calls under `policy`: open, deliver the first item, drop.
fn allocations_per_open(policy: &Policy, calls: u32) -> u64 {
    let rt = runtime();
    let _context = rt.enter();
    let token = CancellationToken::new();
    let waits = Rc::new(Cell::new(false));
    let call = || {
        let mut stream = pin!(open(policy, &token, &waits));
        let first = Stream::poll_next(stream.as_mut(), &mut Context::from_waker(Waker::noop()));
        assert!(matches!(first, Poll::Ready(Some(Ok(0)))));
    };
    call();
    allocation_counter::measure(|| (0..calls).for_each(|_| call())).count_total
}

#[test]
fn opening_a_stream_under_the_full_policy_allocates_nothing() {
    assert_eq!(allocations_per_open(&full_policy(), 1_000), 0);
}

/// A recorder whose counters are plain atomics (recording allocates nothing), so whatever
/// the counting allocator sees is rampart's.
#[cfg(feature = "metrics")]
mod recorded {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    #[derive(Default)]
    pub(super) struct Atomics {
        counters: Mutex<Vec<(String, Arc<AtomicU64>)>>,
    }

    impl Recorder for Atomics {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let value = Arc::new(AtomicU64::new(0));
            let labels: Vec<_> = key.labels().map(|l| l.value().to_owned()).collect();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let mut counters = self.counters.lock().expect("counters");
            counters.push((name, value.clone()));
            Counter::from_arc(value)
        }

        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }

        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    impl Atomics {
        pub(super) fn count(&self, name: &str) -> u64 {
            let counters = self.counters.lock().expect("counters");
            let found = counters.iter().find(|(n, _)| n == name);
            found.map_or(0, |(_, v)| v.load(Ordering::Relaxed))
        }
    }
}

#[cfg(feature = "metrics")]
#[test]
fn opening_a_stream_and_reporting_its_end_allocates_nothing_with_a_recorder_installed() {
    let recorder = recorded::Atomics::default();
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let policy = full_policy();
    // Each call opens a stream, takes its first item and drops it: a `dropped` end, reported.
    assert_eq!(allocations_per_open(&policy, 1_000), 0);
    assert_eq!(recorder.count("rampart.stream.ended{full,dropped}"), 1_001);
    assert_eq!(recorder.count("rampart.stream.items{full}"), 1_001);
    assert_eq!(recorder.count("rampart.calls{full,succeeded}"), 1_001);
}
