//! The edge's observability (issues 12 and 24): inbound requests counted by what the layer
//! did, the single-attempt decisions of the outbound layer, each outbound attempt in a
//! `rampart.http.attempt` span with OpenTelemetry's HTTP attributes, and the series the
//! outbound layer's policies make (`tests/observe_series.rs` has them).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use rampart::admit::Admit;
use rampart::backoff::Backoff;
use rampart::limit::ConcurrencyLimit;
use rampart_http::{InboundLayer, OutboundBuilder, OutboundLayer, ReplayBody};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

#[path = "support/spans.rs"]
mod spans;

use spans::Spans;

/// A fresh debugging recorder, the thread's recorder while the guard lives: a series is
/// registered on its first use, with the recorder current then (the runtime is
/// current-thread, so the whole test runs on this thread).
fn recorded() -> (Snapshotter, metrics::LocalRecorderGuard<'static>) {
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    (
        recorder.snapshotter(),
        metrics::set_default_local_recorder(recorder),
    )
}

/// The counters that moved, as `name{labels} count`, sorted.
fn counters(snapshotter: &Snapshotter) -> Vec<String> {
    let mut lines: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) if n > 0 => {
                let key = key.key();
                let labels: Vec<_> = key
                    .labels()
                    .filter(|l| l.key() != "policy")
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                Some(format!("{}{{{}}} {n}", key.name(), labels.join(",")))
            }
            _ => None,
        })
        .filter(|line| line.starts_with("rampart.http"))
        .collect();
    lines.sort();
    lines
}

fn handler(
    delay: Duration,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future: Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_: Request<Full<Bytes>>| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
    })
}

fn request(deadline_ms: Option<&str>) -> Request<Full<Bytes>> {
    let mut builder = Request::get("/");
    if let Some(ms) = deadline_ms {
        builder = builder.header("x-deadline-ms", ms);
    }
    builder.body(Full::default()).expect("valid request")
}

#[tokio::test(start_paused = true)]
async fn inbound_requests_are_counted_by_what_the_layer_did_with_them() {
    let (snapshotter, _recorder) = recorded();
    let mut service = InboundLayer::new()
        .reject_expired(true)
        .reserve(Duration::from_millis(50))
        .enforce(true)
        .admit(ConcurrencyLimit::new(1))
        .layer(handler(Duration::from_secs(1)));
    // Holds the one permit for a second.
    let holding = tokio::spawn(service.call(request(Some("5000"))));
    tokio::task::yield_now().await;
    let shed = service
        .clone()
        .oneshot(request(None))
        .await
        .expect("infallible");
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    let expired = service
        .clone()
        .oneshot(request(Some("10")))
        .await
        .expect("infallible");
    assert_eq!(expired.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        holding.await.expect("task").expect("infallible").status(),
        StatusCode::OK
    );
    // Admitted, and dropped at its deadline (550 ms, less the 50 ms reserve).
    let enforced = service
        .oneshot(request(Some("550")))
        .await
        .expect("infallible");
    assert_eq!(enforced.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        counters(&snapshotter),
        [
            "rampart.http.server.enforced{} 1",
            "rampart.http.server.requests{result=admitted} 2",
            "rampart.http.server.requests{result=expired} 1",
            "rampart.http.server.requests{result=shed} 1",
        ]
    );
}

type UpstreamRequest = Request<ReplayBody<Full<Bytes>>>;

/// Answers 503 to the first request and 200 after.
fn flaky()
-> impl Service<UpstreamRequest, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    let seen = Arc::new(Mutex::new(0u32));
    tower::service_fn(move |_: UpstreamRequest| {
        let seen = seen.clone();
        async move {
            let n = {
                let mut seen = seen.lock().expect("seen");
                *seen += 1;
                *seen
            };
            let status = if n == 1 { 503 } else { 200 };
            let response = Response::builder().status(status).body(Full::default());
            Ok::<_, Infallible>(response.expect("valid response"))
        }
    })
}

fn quick(p: rampart::PolicyBuilder) -> rampart::PolicyBuilder {
    p.total_timeout(Duration::from_secs(10))
        .no_attempt_timeout()
        .backoff(Backoff::none())
}

fn get() -> Request<Full<Bytes>> {
    Request::get("http://a.test/")
        .body(Full::default())
        .expect("valid request")
}

/// The spans of a call whose first request sent met `flaky`'s 503 and whose resend got its 200.
const SENT_THEN_RESENT: [&str; 2] = [
    "rampart.http.attempt http.request.method=\"GET\" server.address=\"a.test:80\" http.response.status_code=503 in rampart.attempt",
    "rampart.http.attempt http.request.method=\"GET\" server.address=\"a.test:80\" http.request.resend_count=1 http.response.status_code=200 in rampart.attempt",
];

/// The `rampart.http.attempt` spans of one `GET` to `flaky` through the layer `builder` makes,
/// which answers it 200 in the end.
async fn spans_of_a_call<A: Admit + Clone>(builder: OutboundBuilder<A>) -> Vec<String> {
    let spans = Spans::default();
    let _guard = spans.capture();
    let client = builder
        .policy(quick)
        .build()
        .expect("valid outbound layer")
        .layer(flaky());
    let response = client.oneshot(get()).await.expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    spans.take()
}

#[tokio::test(start_paused = true)]
async fn each_outbound_attempt_has_a_span_with_its_resend_count_and_status() {
    let spans = spans_of_a_call(OutboundLayer::builder()).await;
    assert_eq!(spans, SENT_THEN_RESENT);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_refused_locally_is_not_counted_as_a_resend() {
    // One permit per 100 ms, taken before the call: attempts 1 and 3 are refused here and
    // open no span; attempt 2 is the first sent, attempt 4 its one resend.
    let limit = rampart::limit::RateLimit::new(1, Duration::from_millis(100)).expect("valid");
    limit
        .try_acquire(rampart::Instant::now())
        .expect("the one permit");
    let spans = spans_of_a_call(OutboundLayer::builder().max_attempts(4).admit(limit)).await;
    assert_eq!(spans, SENT_THEN_RESENT);
}

#[tokio::test(start_paused = true)]
async fn in_dry_run_a_request_that_would_have_expired_is_admitted_and_counted_as_such() {
    let (snapshotter, _recorder) = recorded();
    let service = InboundLayer::new()
        .reject_expired(true)
        .reserve(Duration::from_millis(50))
        .dry_run(true)
        .layer(handler(Duration::ZERO));
    let response = service
        .oneshot(request(Some("10")))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        counters(&snapshotter),
        [
            "rampart.http.server.dry_run{would=expire} 1",
            "rampart.http.server.requests{result=admitted} 1",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn outbound_requests_given_one_attempt_are_counted_by_why() {
    let (snapshotter, _recorder) = recorded();
    let ok = tower::service_fn(|_: UpstreamRequest| async {
        Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    });
    let client = OutboundLayer::builder()
        .replay_limit(4)
        .build()
        .expect("valid outbound layer")
        .layer(ok);
    let get = |body: &'static str| {
        Request::get("http://a.test/")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .expect("valid request")
    };
    // Inside a request that arrived as a retry: one attempt.
    let inbound_retry = rampart::Ambient::new().with_inbound_retry();
    let response = inbound_retry
        .scope(client.clone().oneshot(get("")))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    // A body past the replay limit: streamed once.
    let response = client
        .clone()
        .oneshot(get("ten bytes!"))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    // A replayable request within the limit is counted nowhere.
    client.oneshot(get("ok")).await.expect("a response");
    assert_eq!(
        counters(&snapshotter),
        [
            "rampart.http.client.single_attempt{reason=inbound_retry} 1",
            "rampart.http.client.single_attempt{reason=not_replayable} 1",
        ]
    );
}
