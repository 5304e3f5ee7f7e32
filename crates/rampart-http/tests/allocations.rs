//! Heap allocations the edge layers add to a request, counted (deterministic, so a test):
//! the same requests through an in-process service, with and without the layer.
//! `BUDGETS.md` (in `bench/`) lists where each one goes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use rampart_http::{InboundLayer, OutboundLayer, ReplayBody};
use tower::Service;
use tower_layer::Layer;

/// The outbound layer's allocations per replayable request (a `GET` whose header map has
/// room for the stamped headers) above the inner service's own:
///
/// 1. the boxed call future (rampart's call future cannot be named on stable Rust);
/// 2. the copy of the request's headers kept for a retry, a flat list (the first attempt
///    takes the request itself, head and all, and the retry's header map is made only for a
///    retry).
///
/// The deadline header's value costs none: it is cut from a per-thread buffer that the values
/// share (see `header::number`), one allocation per about 200 values at worst, none here
/// since each value dies with its request.
const REPLAYABLE_BUDGET: f64 = 2.0;

/// The same for a request sent once (a `POST`): the boxed call future alone; no copy.
const ONCE_BUDGET: f64 = 1.0;

/// What a replayable request with no header at all costs more: its header map's first
/// allocation (two: index and entries), which the stamped headers need, where the inner
/// service alone never allocates it. Its flat copy is empty, and free.
const NO_HEADERS_EXTRA: f64 = 1.0;

/// What each header value built from a `&str` (not `HeaderValue::from_static`) costs a
/// replayable request more: its first clone makes bytes' shared count (a one-time promotion).
const PER_COPIED_VALUE: f64 = 1.0;

/// What tower's retry between two timeouts adds to the same `GET`, and the same stack
/// writing the headers the layer writes (`benches/support/tower_peer.rs`): the numbers
/// `BENCHMARKS.md` publishes beside the layer's. A tower update that changes them fails here,
/// and the table changes with it.
const TOWER: f64 = 3.0;
const TOWER_STAMPED: f64 = 11.0;
/// The stamped stack without the call's deadline in the extensions.
const TOWER_STAMPED_FIXED: f64 = 5.0;

#[path = "../benches/support/tower_peer.rs"]
mod tower_peer;

/// What is sent, how each request is made, the allocations the layer may add to it.
type Case = (&'static str, fn() -> Request<Full<Bytes>>, f64);

fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an in-process request completes on its first poll"),
    }
}

fn request<B: Default>() -> Request<B> {
    with(http::Method::GET)
}

/// A request with a caller's deadline, its name built from a string (every attempt writes
/// the value anew, and the copy kept for a retry leaves it out: cloning that name would
/// allocate its shared count), and an `accept` header (which a retry needs a copy of).
fn with<B: Default>(method: http::Method) -> Request<B> {
    Request::builder()
        .method(method)
        .uri("http://127.0.0.1:8080/items")
        .header("x-deadline-ms", HeaderValue::from_static("5000"))
        .header("accept", HeaderValue::from_static("application/json"))
        .body(B::default())
        .expect("valid request")
}

/// The same `GET` without any header.
fn bare<B: Default>() -> Request<B> {
    Request::get("http://127.0.0.1:8080/items")
        .body(B::default())
        .expect("valid request")
}

/// The same `GET` with its `accept` value built from a `&str`.
fn built<B: Default>() -> Request<B> {
    Request::get("http://127.0.0.1:8080/items")
        .header("accept", "application/json")
        .body(B::default())
        .expect("valid request")
}

/// The runtime the layers' timers are made on (nothing is awaited on it).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// A service or handler that answers at once.
fn answer(
    _: Request<Full<Bytes>>,
) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>> {
    std::future::ready(Ok(Response::new(Full::default())))
}

/// Allocations per request made by `send` over `n` requests built beforehand.
fn per_request<R>(n: u64, make: impl Fn() -> R, mut send: impl FnMut(R)) -> f64 {
    let requests: Vec<R> = (0..n).map(|_| make()).collect();
    let counted = allocation_counter::measure(|| {
        for request in requests {
            send(request);
        }
    });
    counted.count_total as f64 / n as f64
}

#[test]
fn the_outbound_layer_adds_a_handful_of_allocations_per_request() {
    let rt = runtime();
    let _context = rt.enter();
    let answer = |_: Request<ReplayBody<Full<Bytes>>>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(Full::<Bytes>::default())))
    };
    let mut direct = tower::service_fn(answer);
    let mut layered = OutboundLayer::new().layer(tower::service_fn(answer));

    let n = 1_000;
    let cases: [Case; 4] = [
        ("GET", || with(http::Method::GET), REPLAYABLE_BUDGET),
        ("POST", || with(http::Method::POST), ONCE_BUDGET),
        (
            "GET without headers",
            bare,
            REPLAYABLE_BUDGET + NO_HEADERS_EXTRA,
        ),
        (
            "GET with a value from a &str",
            built,
            REPLAYABLE_BUDGET + PER_COPIED_VALUE,
        ),
    ];
    // Warm up, one request of each case: the host's policies are made on its first request,
    // and with the `metrics` feature each series is registered on its first use (a `POST`
    // runs under the host's one-attempt policy, whose series are its own).
    for (_, make, _) in &cases {
        ready(layered.call(make())).expect("a response");
    }
    for (what, make, budget) in cases {
        let base = per_request(
            n,
            || make().map(ReplayBody::new),
            |r| drop(ready(direct.call(r))),
        );
        let layered_per_request = per_request(n, make, |r| drop(ready(layered.call(r))));
        let added = layered_per_request - base;
        println!(
            "outbound {what}: {base} allocations per request without the layer, {layered_per_request} with it (+{added})"
        );
        assert!(
            added <= budget,
            "the outbound layer adds {added} allocations per {what} request; the budget is {budget}"
        );
    }
}

fn get() -> Request<Full<Bytes>> {
    with(http::Method::GET)
}

/// Allocations per `GET` sent through `stack`, made ready before each.
fn through<S: Service<Request<Full<Bytes>>>>(n: u64, mut stack: S) -> f64 {
    per_request(n, get, |r| {
        if ready(std::future::poll_fn(|cx| stack.poll_ready(cx))).is_err() {
            panic!("tower's stack is always ready");
        }
        drop(ready(stack.call(r)));
    })
}

#[test]
fn tower_retry_and_timeouts_add_the_allocations_published_beside_the_layer() {
    let rt = runtime();
    let _context = rt.enter();
    let mut direct = tower::service_fn(answer);
    let n = 1_000;
    let base = per_request(n, get, |r| drop(ready(direct.call(r))));
    let tower = through(n, tower_peer::retry_timeout(tower::service_fn(answer))) - base;
    let stamped = through(
        n,
        tower_peer::retry_timeout_stamped(tower::service_fn(answer)),
    ) - base;
    let fixed = through(
        n,
        tower_peer::retry_timeout_stamped_fixed(tower::service_fn(answer)),
    ) - base;
    println!(
        "tower adds {tower} allocations per GET, {stamped} writing the headers, {fixed} without the call's deadline"
    );
    assert_eq!(
        (tower, stamped, fixed),
        (TOWER, TOWER_STAMPED, TOWER_STAMPED_FIXED)
    );
}

#[test]
fn the_inbound_layer_adds_no_allocation_to_a_request() {
    let rt = runtime();
    let _context = rt.enter();
    let mut direct = tower::service_fn(answer);
    let mut layered = InboundLayer::new()
        .reserve(std::time::Duration::from_millis(5))
        .layer(tower::service_fn(answer));
    let n = 1_000;
    let base = per_request(n, request::<Full<Bytes>>, |r| drop(ready(direct.call(r))));
    let with_layer = per_request(n, request::<Full<Bytes>>, |r| drop(ready(layered.call(r))));
    println!("inbound: {base} allocations per request without the layer, {with_layer} with it");
    assert_eq!(with_layer, base);
}

/// A recorder whose handles are plain atomics: recording allocates nothing, so whatever the
/// counting allocator sees is the layer's and rampart's.
#[cfg(feature = "metrics")]
mod recorded {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString,
        Unit,
    };

    #[derive(Default)]
    pub(super) struct Atomics {
        counters: Mutex<Vec<(String, Arc<AtomicU64>)>>,
    }

    struct Records(AtomicU64);

    impl HistogramFn for Records {
        fn record(&self, _value: f64) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
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
            Gauge::from_arc(Arc::new(AtomicU64::new(0)))
        }

        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(Records(AtomicU64::new(0))))
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
fn with_a_recorder_installed_a_warm_hosts_series_cost_its_requests_no_allocation() {
    let recorder = recorded::Atomics::default();
    // For the whole test: each series is registered on its first use (the warm-up request).
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let rt = runtime();
    let _context = rt.enter();
    let answer = |_: Request<ReplayBody<Full<Bytes>>>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(Full::<Bytes>::default())))
    };
    let mut direct = tower::service_fn(answer);
    let mut layered = OutboundLayer::new().layer(tower::service_fn(answer));
    ready(layered.call(request())).expect("a response");

    let n = 1_000;
    let get = || with(http::Method::GET);
    let base = per_request(
        n,
        || get().map(ReplayBody::new),
        |r| drop(ready(direct.call(r))),
    );
    let layered_per_request = per_request(n, get, |r| drop(ready(layered.call(r))));
    let added = layered_per_request - base;
    println!("outbound GET with a recorder: +{added} allocations per request");
    assert!(
        added <= REPLAYABLE_BUDGET,
        "the outbound layer adds {added} allocations per GET with a recorder; the budget is {REPLAYABLE_BUDGET}"
    );
    assert_eq!(
        recorder.count("rampart.calls{outbound,127.0.0.1:8080,succeeded}"),
        n + 1,
        "every request counted, under the layer's name and the host"
    );
}

#[test]
fn deadline_values_allocate_nothing_while_none_outlives_its_request() {
    use std::time::Duration;
    // The first buffer of the thread's values, made before counting.
    drop(rampart_http::header::format_deadline_ms(Some(
        Duration::from_millis(1),
    )));
    // Far more distinct values than one buffer holds: each is dropped before the next is
    // made, as a request's header dies with it, so the full buffer is taken back each time
    // (the value the thread keeps for its next request is let go first).
    let counted = allocation_counter::measure(|| {
        for ms in 2..=5_000u64 {
            drop(rampart_http::header::format_deadline_ms(Some(
                Duration::from_millis(ms),
            )));
        }
    });
    assert_eq!(counted.count_total, 0);
}
