//! The inbound layer on paused time, without sockets: what the handler sees, what the layer
//! answers itself, enforcement and admission.
//!
//! Longer than the ~600-line guide: one file for the inbound layer's behaviour without sockets,
//! sharing its handlers and service helpers.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use rampart::limit::ConcurrencyLimit;
use rampart::{Ambient, Criticality};
use rampart_http::{EdgeEvent, InboundLayer, ResponseBody};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

/// What the handler saw: time left (ms), level, retry mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    left_ms: Option<u128>,
    level: Criticality,
    has_level: bool,
    retry: bool,
}

/// A handler that records its ambient context and answers 200 after `delay`.
#[derive(Clone)]
struct Handler {
    seen: Arc<Mutex<Vec<Seen>>>,
    delay: Duration,
}

impl Handler {
    fn new(delay: Duration) -> Self {
        Handler {
            seen: Arc::default(),
            delay,
        }
    }

    fn service(
        &self,
    ) -> impl Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future: Send,
    > + Clone
    + Send
    + 'static {
        let handler = self.clone();
        tower::service_fn(move |_: Request<Full<Bytes>>| {
            let handler = handler.clone();
            async move {
                let ambient = Ambient::current();
                handler.seen.lock().expect("seen").push(Seen {
                    left_ms: ambient.deadline().map(|d| d.remaining().as_millis()),
                    level: ambient.criticality(),
                    has_level: ambient.has_criticality(),
                    retry: ambient.is_inbound_retry(),
                });
                tokio::time::sleep(handler.delay).await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
            }
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }
}

fn request(headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut request = Request::get("/")
        .body(Full::default())
        .expect("valid request");
    for (name, value) in headers {
        request.headers_mut().append(
            http::HeaderName::from_bytes(name.as_bytes()).expect("valid header name"),
            value.parse().expect("valid header value"),
        );
    }
    request
}

async fn text(response: Response<ResponseBody<Full<Bytes>>>) -> String {
    let body = response.into_body().collect().await.expect("infallible");
    String::from_utf8(body.to_bytes().to_vec()).expect("utf-8")
}

#[tokio::test(start_paused = true)]
async fn an_expired_request_is_answered_504_without_running_the_handler() {
    let handler = Handler::new(Duration::ZERO);
    let events = Arc::new(AtomicU32::new(0));
    let counted = events.clone();
    let service = InboundLayer::new()
        .reject_expired(true)
        .reserve(Duration::from_millis(50))
        .listener(move |e: &EdgeEvent<'_>| {
            if matches!(e, EdgeEvent::ExpiredOnArrival { .. }) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        })
        .layer(handler.service());
    let response = service
        .oneshot(request(&[("x-deadline-ms", "10")]))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body = text(response).await;
    assert!(
        body.contains("\"type\":\"urn:rampart:deadline-expired-on-arrival\""),
        "{body}"
    );
    assert!(body.contains("10 ms left"), "{body}");
    assert!(handler.seen().is_empty(), "the handler ran");
    assert_eq!(events.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn the_reserve_is_subtracted_from_what_the_handler_sees() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new()
        .reject_expired(true)
        .reserve(Duration::from_secs(2))
        .layer(handler.service());
    let response = service
        .oneshot(request(&[("x-deadline-ms", "5000")]))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let left = handler.seen()[0].left_ms.expect("a deadline");
    assert!(left <= 3000 && left > 2900, "{left}");
}

#[tokio::test(start_paused = true)]
async fn a_deadline_above_the_maximum_is_no_total_timeout_at_all() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new()
        .maximum(Duration::from_secs(5))
        .layer(handler.service());
    service
        .oneshot(request(&[("x-deadline-ms", "3600000")]))
        .await
        .expect("infallible");
    assert_eq!(handler.seen()[0].left_ms, None);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_a_deadline_gets_the_default_one() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new()
        .default_timeout(Duration::from_millis(300))
        .reserve(Duration::from_millis(20))
        .layer(handler.service());
    service
        .clone()
        .oneshot(request(&[]))
        .await
        .expect("infallible");
    service
        .oneshot(request(&[("x-deadline-ms", "100")]))
        .await
        .expect("infallible");
    let left: Vec<_> = handler.seen().iter().map(|s| s.left_ms).collect();
    assert_eq!(left, [Some(280), Some(80)]);
}

#[tokio::test(start_paused = true)]
async fn malformed_deadlines_are_ignored_and_the_last_of_several_values_counts() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new().layer(handler.service());
    for value in ["0", "-5", "200ms", "2.5", " 200", "2147483648"] {
        service
            .clone()
            .oneshot(request(&[("x-deadline-ms", value)]))
            .await
            .expect("infallible");
    }
    service
        .oneshot(request(&[
            ("x-deadline-ms", "9000"),
            ("x-deadline-ms", "300"),
        ]))
        .await
        .expect("infallible");
    let seen = handler.seen();
    assert!(seen[..6].iter().all(|s| s.left_ms.is_none()), "{seen:?}");
    assert_eq!(seen[6].left_ms, Some(300));
}

#[tokio::test(start_paused = true)]
async fn an_expired_request_still_reaches_the_handler_by_default() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new()
        .reserve(Duration::from_millis(50))
        .layer(handler.service());
    let response = service
        .oneshot(request(&[("x-deadline-ms", "10")]))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(handler.seen()[0].left_ms, Some(0));
}

#[tokio::test(start_paused = true)]
async fn inbound_critical_plus_is_read_as_critical_and_a_missing_level_as_unset() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new().layer(handler.service());
    for headers in [
        &[("x-criticality", "CriticalPlus")][..],
        &[("x-criticality", "sheddable")],
        &[("x-criticality", "urgent")],
        &[],
    ] {
        service
            .clone()
            .oneshot(request(headers))
            .await
            .expect("infallible");
    }
    let levels: Vec<_> = handler
        .seen()
        .iter()
        .map(|s| (s.level, s.has_level))
        .collect();
    assert_eq!(
        levels,
        [
            (Criticality::Critical, true),
            (Criticality::Sheddable, true),
            (Criticality::Critical, false),
            (Criticality::Critical, false),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_marked_as_a_retry_is_served_as_one() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new().layer(handler.service());
    service
        .clone()
        .oneshot(request(&[("x-rampart-retry", "1")]))
        .await
        .expect("infallible");
    service.oneshot(request(&[])).await.expect("infallible");
    let retries: Vec<_> = handler.seen().iter().map(|s| s.retry).collect();
    assert_eq!(retries, [true, false]);
}

/// A handler that notes whether it finished or was dropped first.
#[derive(Clone, Default)]
struct Watched {
    finished: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Watched {
    fn service(
        &self,
        work: Duration,
    ) -> impl Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future: Send,
    > + Clone
    + Send
    + 'static {
        let watched = self.clone();
        tower::service_fn(move |_: Request<Full<Bytes>>| {
            let watched = watched.clone();
            async move {
                let _guard = DropFlag(watched.dropped.clone());
                tokio::time::sleep(work).await;
                watched.finished.store(true, Ordering::SeqCst);
                Ok::<_, Infallible>(Response::new(Full::default()))
            }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn with_enforce_on_the_handler_is_dropped_at_the_deadline() {
    let watched = Watched::default();
    let service = InboundLayer::new()
        .enforce(true)
        .layer(watched.service(Duration::from_secs(5)));
    let started = tokio::time::Instant::now();
    let response = service
        .oneshot(request(&[("x-deadline-ms", "200")]))
        .await
        .expect("infallible");
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(
        text(response)
            .await
            .contains("urn:rampart:deadline-exceeded")
    );
    assert!(watched.dropped.load(Ordering::SeqCst));
    assert!(!watched.finished.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn without_enforce_the_handler_runs_past_the_deadline() {
    let watched = Watched::default();
    let service = InboundLayer::new().layer(watched.service(Duration::from_secs(1)));
    let response = service
        .oneshot(request(&[("x-deadline-ms", "200")]))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(watched.finished.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn admission_that_refuses_answers_503_with_retry_after() {
    let limit = ConcurrencyLimit::new(1);
    let watched = Watched::default();
    let mut service = InboundLayer::new()
        .admit(limit.clone())
        .layer(watched.service(Duration::from_secs(1)));
    let first = service.call(request(&[]));
    let running = tokio::spawn(first);
    tokio::task::yield_now().await;
    let refused = service
        .clone()
        .oneshot(request(&[("x-criticality", "Sheddable")]))
        .await
        .expect("infallible");
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    let body = text(refused).await;
    assert!(body.contains("urn:rampart:overloaded"), "{body}");
    assert!(body.contains("Sheddable"), "{body}");
    let admitted = running.await.expect("task").expect("infallible");
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(limit.available(), 1, "the permit was released");
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_leaves_the_queue_at_its_deadline_with_503() {
    let limit = ConcurrencyLimit::new(1).queue(4);
    let watched = Watched::default();
    let mut service = InboundLayer::new()
        .admit(limit.clone())
        .layer(watched.service(Duration::from_secs(5)));
    let running = tokio::spawn(service.call(request(&[])));
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();
    let queued = service
        .clone()
        .oneshot(request(&[("x-deadline-ms", "300")]))
        .await
        .expect("infallible");
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    assert_eq!(queued.status(), StatusCode::SERVICE_UNAVAILABLE);
    running.abort();
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_runs_when_a_permit_frees_up() {
    let limit = ConcurrencyLimit::new(1).queue(4);
    let watched = Watched::default();
    let mut service = InboundLayer::new()
        .admit(limit.clone())
        .layer(watched.service(Duration::from_millis(100)));
    let first = tokio::spawn(service.call(request(&[])));
    tokio::task::yield_now().await;
    let second = service
        .clone()
        .oneshot(request(&[("x-deadline-ms", "1000")]))
        .await
        .expect("infallible");
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(
        first.await.expect("task").expect("infallible").status(),
        StatusCode::OK
    );
    assert_eq!(limit.available(), 1);
}

#[tokio::test(start_paused = true)]
async fn grpcs_own_retry_mark_is_served_as_a_retry() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new().layer(handler.service());
    for attempts in ["1", "0"] {
        service
            .clone()
            .oneshot(request(&[
                ("content-type", "application/grpc"),
                ("grpc-previous-rpc-attempts", attempts),
            ]))
            .await
            .expect("infallible");
    }
    let retries: Vec<_> = handler.seen().iter().map(|s| s.retry).collect();
    assert_eq!(retries, [true, false]);
}

#[tokio::test(start_paused = true)]
async fn the_smallest_of_the_mesh_deadline_headers_is_the_handlers_deadline() {
    let handler = Handler::new(Duration::ZERO);
    let service = InboundLayer::new().layer(handler.service());
    for headers in [
        &[("x-envoy-expected-rq-timeout-ms", "300")][..],
        &[("connect-timeout-ms", "400")],
        &[
            ("x-deadline-ms", "900"),
            ("x-envoy-expected-rq-timeout-ms", "700"),
            ("connect-timeout-ms", "600"),
            ("grpc-timeout", "500m"),
        ],
    ] {
        service
            .clone()
            .oneshot(request(headers))
            .await
            .expect("infallible");
    }
    let left: Vec<_> = handler.seen().iter().map(|s| s.left_ms).collect();
    assert_eq!(left, [Some(300), Some(400), Some(500)]);
}

#[tokio::test(start_paused = true)]
async fn an_expired_request_is_refused_in_its_own_protocols_form() {
    // (request headers, status, content type, what the answer carries)
    type Headers = &'static [(&'static str, &'static str)];
    let table: [(Headers, StatusCode, &str, &str); 2] = [
        (
            &[
                ("content-type", "application/grpc"),
                ("grpc-timeout", "20m"),
            ],
            StatusCode::OK,
            "application/grpc",
            "grpc-status 4",
        ),
        (
            &[
                ("content-type", "application/json"),
                ("connect-protocol-version", "1"),
                ("connect-timeout-ms", "20"),
            ],
            StatusCode::GATEWAY_TIMEOUT,
            "application/json",
            r#"{"code":"deadline_exceeded","message":"#,
        ),
    ];
    for (headers, status, content_type, carries) in table {
        let handler = Handler::new(Duration::ZERO);
        let service = InboundLayer::new()
            .reject_expired(true)
            .reserve(Duration::from_millis(50))
            .layer(handler.service());
        let response = service.oneshot(request(headers)).await.expect("infallible");
        assert_eq!(response.status(), status, "{carries}");
        assert_eq!(response.headers()["content-type"], content_type);
        let grpc_status = response
            .headers()
            .get("grpc-status")
            .map(|v| format!("grpc-status {}", v.to_str().expect("ascii")));
        let body = text(response).await;
        let answer = grpc_status.unwrap_or(body);
        assert!(answer.starts_with(carries), "{answer}");
        assert!(handler.seen().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn a_connect_streaming_request_gets_its_error_as_the_streams_end_not_the_unary_json() {
    for codec in ["application/connect+proto", "application/connect+json"] {
        let handler = Handler::new(Duration::ZERO);
        let service = InboundLayer::new()
            .reject_expired(true)
            .reserve(Duration::from_millis(50))
            .layer(handler.service());
        let response = service
            .oneshot(request(&[
                ("content-type", codec),
                ("connect-timeout-ms", "20"),
            ]))
            .await
            .expect("infallible");
        // Connect streams carry their errors in the stream: HTTP 200, the request's codec.
        assert_eq!(response.status(), StatusCode::OK, "{codec}");
        assert_eq!(response.headers()["content-type"], codec);
        let body = response.into_body().collect().await.expect("infallible");
        let body = body.to_bytes();
        assert_eq!(body[0], 0x02, "{codec}: an end-of-stream message");
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        assert_eq!(len, body.len() - 5);
        let json = std::str::from_utf8(&body[5..]).expect("json");
        assert!(
            json.starts_with(r#"{"error":{"code":"deadline_exceeded","message":"#),
            "{json}"
        );
        assert!(handler.seen().is_empty());
    }
}

/// Every dry-run event, as `expire` or `shed by`.
fn dry_run_events() -> (
    Arc<Mutex<Vec<String>>>,
    impl Fn(&EdgeEvent<'_>) + Send + Sync + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let listener = move |event: &EdgeEvent<'_>| {
        let line = match event {
            EdgeEvent::WouldExpire { left, .. } => format!("expire {}ms", left.as_millis()),
            EdgeEvent::WouldShed { by, .. } => format!("shed {by}"),
            _ => return,
        };
        sink.lock().expect("seen").push(line);
    };
    (seen, listener)
}

#[tokio::test(start_paused = true)]
async fn in_dry_run_an_expired_request_is_reported_and_still_served() {
    let handler = Handler::new(Duration::ZERO);
    let (seen, listener) = dry_run_events();
    let service = InboundLayer::new()
        .reject_expired(true)
        .reserve(Duration::from_millis(50))
        .dry_run(true)
        .listener(listener)
        .layer(handler.service());
    let response = service
        .oneshot(request(&[("x-deadline-ms", "10")]))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(handler.seen().len(), 1, "the handler ran");
    assert_eq!(*seen.lock().expect("seen"), ["expire 10ms"]);
}

#[tokio::test(start_paused = true)]
async fn in_dry_run_a_request_admission_would_refuse_is_reported_and_served_without_a_permit() {
    let limit = ConcurrencyLimit::new(1);
    let watched = Watched::default();
    let (seen, listener) = dry_run_events();
    let mut service = InboundLayer::new()
        .admit(limit.clone())
        .dry_run(true)
        .listener(listener)
        .layer(watched.service(Duration::from_secs(1)));
    let running = tokio::spawn(service.call(request(&[])));
    tokio::task::yield_now().await;
    let second = tokio::spawn(service.clone().oneshot(request(&[])));
    tokio::task::yield_now().await;
    assert_eq!(
        limit.available(),
        0,
        "only the first request holds the permit"
    );
    for response in [running, second] {
        let response = response.await.expect("task").expect("infallible");
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(*seen.lock().expect("seen"), ["shed concurrency limit"]);
    assert_eq!(limit.available(), 1, "the one permit was released");
}

#[tokio::test(start_paused = true)]
async fn in_dry_run_a_queued_request_whose_deadline_passes_in_the_queue_is_reported_and_served() {
    let limit = ConcurrencyLimit::new(1).queue(4);
    let watched = Watched::default();
    let (seen, listener) = dry_run_events();
    let mut service = InboundLayer::new()
        .admit(limit.clone())
        .dry_run(true)
        .listener(listener)
        .layer(watched.service(Duration::from_secs(5)));
    let running = tokio::spawn(service.call(request(&[])));
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();
    let queued = tokio::spawn(
        service
            .clone()
            .oneshot(request(&[("x-deadline-ms", "300")])),
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        *seen.lock().expect("seen"),
        ["shed admission queue (the deadline passed while waiting)"],
        "reported when its deadline passed in the queue"
    );
    assert_eq!(
        limit.available(),
        0,
        "the first request holds the one permit; the queued one runs without"
    );
    let queued = queued.await.expect("task").expect("infallible");
    assert_eq!(queued.status(), StatusCode::OK, "served anyway");
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(5300),
        "300 ms in the queue, then its 5 s of work"
    );
    running.await.expect("task").expect("infallible");
    assert_eq!(limit.available(), 1, "the one permit taken was released");
}
