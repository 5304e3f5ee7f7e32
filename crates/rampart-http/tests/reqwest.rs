//! The reqwest client against a loopback server: the policy's timeouts are the only ones,
//! every attempt carries the headers, only replayable requests are retried.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::any;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use rampart::backoff::Backoff;
use rampart_http::OutboundLayer;
use rampart_http::reqwest::Client;

/// Every request the server received: headers and body. It answers `status` after `delay`.
#[derive(Clone)]
struct Server {
    seen: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
    status: u16,
    delay: Duration,
}

async fn record(State(server): State<Server>, headers: HeaderMap, body: Bytes) -> StatusCode {
    server.seen.lock().expect("seen").push((headers, body));
    tokio::time::sleep(server.delay).await;
    StatusCode::from_u16(server.status).expect("valid status")
}

async fn serve(status: u16, delay: Duration) -> (Server, SocketAddr) {
    let server = Server {
        seen: Arc::default(),
        status,
        delay,
    };
    let app = Router::new()
        .route("/", any(record))
        .with_state(server.clone());
    (server, serve_app(app).await)
}

/// Serves `app` on a random loopback port, until the test's runtime ends.
async fn serve_app(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

impl Server {
    fn header(&self, name: &str) -> Vec<Option<String>> {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .map(|(h, _)| h.get(name).map(|v| v.to_str().expect("ascii").to_owned()))
            .collect()
    }

    fn bodies(&self) -> Vec<Bytes> {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
}

fn client(attempt_timeout: Duration) -> Client {
    let layer = OutboundLayer::builder()
        .policy(move |p| {
            p.total_timeout(Duration::from_secs(5))
                .attempt_timeout(attempt_timeout)
                .backoff(Backoff::none())
        })
        .breaker_per_host(rampart::Breaker::builder().consecutive_failures(5))
        .build()
        .expect("valid layer");
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client");
    Client::with_client(http, &layer)
}

#[tokio::test]
async fn a_failing_get_is_retried_with_the_deadline_criticality_and_retry_mark() {
    let (server, addr) = serve(500, Duration::ZERO).await;
    let client = client(Duration::from_secs(1));
    let response = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let deadlines = server.header("x-deadline-ms");
    assert_eq!(deadlines.len(), 3);
    for ms in deadlines {
        let ms: u64 = ms.expect("a deadline").parse().expect("a number");
        assert!(ms <= 1000 && ms > 0, "{ms}");
    }
    assert_eq!(
        server.header("x-criticality"),
        vec![Some("Critical".to_owned()); 3]
    );
    assert_eq!(
        server.header("x-rampart-retry"),
        [None, Some("1".into()), Some("1".into())]
    );
}

#[tokio::test]
async fn a_post_is_sent_once_unless_it_is_sent_as_repeatable() {
    let (server, addr) = serve(503, Duration::ZERO).await;
    let client = client(Duration::from_secs(1));
    let post = || {
        client
            .request(Method::POST, format!("http://{addr}/"))
            .body("order-7")
            .build()
            .expect("a request")
    };
    client.execute(post()).await.expect("a response");
    assert_eq!(server.bodies().len(), 1);
    client.execute_repeatable(post()).await.expect("a response");
    assert_eq!(server.bodies(), vec![Bytes::from_static(b"order-7"); 4]);
}

#[tokio::test]
async fn the_attempt_timeout_is_the_transport_timeout() {
    let (_server, addr) = serve(200, Duration::from_secs(3)).await;
    let client = client(Duration::from_millis(50));
    let started = std::time::Instant::now();
    let error = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .expect_err("timed out");
    assert!(error.is_timeout(), "{error}");
    assert_eq!(error.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_request_timeout_set_on_reqwest_is_not_a_second_timeout_system() {
    let (_server, addr) = serve(200, Duration::from_millis(60)).await;
    let client = client(Duration::from_secs(2));
    let request = client
        .get(format!("http://{addr}/"))
        .with_reqwest(|r| r.timeout(Duration::from_millis(5)));
    let response = request.send().await.expect("the policy's timeout applies");
    assert_eq!(response.status(), StatusCode::OK);
}

#[test]
fn the_call_future_is_send() {
    fn assert_send<T: Send>(_: T) {}
    let client = client(Duration::from_secs(1));
    let request = reqwest::Request::new(Method::GET, "http://127.0.0.1:9/".parse().expect("url"));
    assert_send(client.execute(request));
}

#[tokio::test]
async fn try_execute_reports_the_stop_reason_and_the_attempts() {
    let (server, addr) = serve(503, Duration::ZERO).await;
    let client = client(Duration::from_secs(1));
    let get = client
        .request(Method::GET, format!("http://{addr}/"))
        .build()
        .expect("a request");
    let report = client.try_execute(get).await.expect("a report");
    assert_eq!(report.stop(), rampart::StopReason::AttemptsExhausted);
    assert_eq!(report.attempts(), 3);
    assert_eq!(
        report.value().map(reqwest::Response::status),
        Some(StatusCode::SERVICE_UNAVAILABLE)
    );
    let post = client
        .request(Method::POST, format!("http://{addr}/"))
        .body("order-8")
        .build()
        .expect("a request");
    // The host's breaker (5 consecutive failures, set in `client`) opens on the fifth 503.
    let report = client.try_execute_repeatable(post).await.expect("a report");
    assert_eq!(report.stop(), rampart::StopReason::DependencyUnavailable);
    assert_eq!(report.attempts(), 2);
    assert_eq!(
        report.value().map(reqwest::Response::status),
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "the last response is returned, not turned into an error"
    );
    assert_eq!(server.bodies().len(), 5);
}

#[tokio::test]
async fn a_callers_smaller_deadline_header_is_kept() {
    let (server, addr) = serve(200, Duration::ZERO).await;
    let client = client(Duration::from_secs(1));
    client
        .get(format!("http://{addr}/"))
        .header("x-deadline-ms", "40")
        .send()
        .await
        .expect("a response");
    let sent: u64 = server.header("x-deadline-ms")[0]
        .as_deref()
        .expect("a deadline")
        .parse()
        .expect("a number");
    assert!(sent > 0 && sent <= 40, "{sent}");
}

/// Attempts the server saw for each request, and whether every one carried a deadline.
fn attempts_with_deadlines(server: &Server) -> (usize, bool) {
    let deadlines = server.header("x-deadline-ms");
    let stamped = deadlines.iter().all(Option::is_some);
    server.seen.lock().expect("seen").clear();
    (deadlines.len(), stamped)
}

#[tokio::test]
async fn a_request_made_with_request_is_retried_and_stamped_by_the_policy() {
    let (server, addr) = serve(503, Duration::ZERO).await;
    let client = client(Duration::from_secs(1));
    let response = client
        .request(Method::GET, format!("http://{addr}/"))
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.header("x-rampart-retry").len(), 3, "retried");
    for ms in server.header("x-deadline-ms") {
        let ms: u64 = ms.expect("a deadline").parse().expect("a number");
        assert!(ms > 0 && ms <= 1000, "{ms}");
    }
}

#[tokio::test]
async fn every_request_method_of_the_client_goes_through_the_policy() {
    let (server, addr) = serve(503, Duration::ZERO).await;
    let layer = OutboundLayer::builder()
        .policy(|p| {
            p.total_timeout(Duration::from_secs(5))
                .attempt_timeout(Duration::from_secs(1))
                .backoff(Backoff::none())
        })
        // Open on no run of 503s this test makes: each request sees its own attempts.
        .breaker_per_host(rampart::breaker::Breaker::builder().consecutive_failures(1_000))
        .build()
        .expect("valid layer");
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client");
    let client = Client::with_client(http, &layer);
    let url = format!("http://{addr}/");
    let replayable = [
        ("get", client.get(&url)),
        ("put", client.put(&url)),
        ("delete", client.delete(&url)),
        ("head", client.head(&url)),
        ("request", client.request(Method::OPTIONS, &url)),
        ("post, repeatable", client.post(&url).body("a").repeatable()),
        (
            "patch, repeatable",
            client.patch(&url).body("a").repeatable(),
        ),
    ];
    for (name, request) in replayable {
        request.send().await.expect("a response");
        assert_eq!(attempts_with_deadlines(&server), (3, true), "{name}");
    }
    for (name, request) in [("post", client.post(&url)), ("patch", client.patch(&url))] {
        request.body("a").send().await.expect("a response");
        assert_eq!(attempts_with_deadlines(&server), (1, true), "{name}");
    }
}

#[tokio::test]
async fn the_raw_client_is_reached_only_through_bypass_policy_and_is_not_governed() {
    let (server, addr) = serve(503, Duration::ZERO).await;
    let client = client(Duration::from_secs(1));
    let url = format!("http://{addr}/");
    let response = client
        .bypass_policy()
        .get(&url)
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        server.header("x-deadline-ms"),
        [None],
        "one attempt, no total timeout: rampart was bypassed"
    );
    // A request built from the raw client is governed once it is executed by the client.
    let built = client.bypass_policy().get(&url).build().expect("a request");
    client.execute(built).await.expect("a response");
    assert_eq!(server.header("x-deadline-ms").len(), 4);
}

#[tokio::test]
async fn a_url_that_does_not_parse_is_reported_by_send_as_reqwests_error() {
    let client = client(Duration::from_secs(1));
    let error = client
        .get("not a url")
        .send()
        .await
        .expect_err("no request to send");
    let transport = error.transport().expect("reqwest's own error");
    assert!(transport.is_builder(), "{transport}");
    assert_eq!(error.status(), StatusCode::BAD_GATEWAY);
}

#[tokio::test]
async fn a_request_sent_as_hedged_fires_a_hedge_and_a_plain_one_does_not() {
    let (server, addr) = serve(200, Duration::from_millis(100)).await;
    let layer = OutboundLayer::builder()
        .hedge_marked(rampart::hedge::Hedge::fixed(Duration::from_millis(10)))
        .build()
        .expect("valid layer");
    let client = Client::new(&layer).expect("a client");
    let url = format!("http://{addr}/");
    let hedged = client.get(&url).hedged().send().await.expect("answered");
    assert_eq!(hedged.status(), StatusCode::OK);
    assert_eq!(server.header("x-rampart-retry"), [None, Some("1".into())]);
    client.get(&url).send().await.expect("answered");
    assert_eq!(server.header("x-rampart-retry").len(), 3, "no hedge");
}

/// Answers `/ok` with 200 and any other path with 503, each after `delay`, counting the
/// requests for any other path.
async fn serve_by_path(delay: Duration) -> (Arc<Mutex<u32>>, SocketAddr) {
    let failed = Arc::new(Mutex::new(0));
    let counted = failed.clone();
    let app = Router::new().fallback(move |uri: http::Uri| {
        let counted = counted.clone();
        async move {
            tokio::time::sleep(delay).await;
            if uri.path() == "/ok" {
                return StatusCode::OK;
            }
            *counted.lock().expect("counted") += 1;
            StatusCode::SERVICE_UNAVAILABLE
        }
    });
    (failed, serve_app(app).await)
}

#[tokio::test]
async fn a_retry_is_not_sent_with_less_time_left_than_the_host_was_seen_to_need() {
    // The host answers in 250 ms, which one success measures. A 503 that then comes with
    // under 250 ms of the caller's 400 left is not retried: the retry could not be answered
    // in time (the 10 ms floor alone would send it). The margins are wide: the 503 cannot come
    // sooner than 250 ms, and has 150 ms to spare before the caller's deadline.
    let (failed, addr) = serve_by_path(Duration::from_millis(250)).await;
    let client = client(Duration::from_secs(1));
    let ok = client.get(format!("http://{addr}/ok")).send().await;
    assert_eq!(ok.expect("answered").status(), StatusCode::OK);
    let response = rampart::Deadline::after(Duration::from_millis(400))
        .scope(client.get(format!("http://{addr}/fail")).send())
        .await
        .expect("the 503");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(*failed.lock().expect("failed"), 1, "no retry sent");
    let report = response
        .extensions()
        .get::<rampart_http::CallReport>()
        .expect("a report");
    assert_eq!(report.stop(), rampart::StopReason::DeadlineExceeded);
    assert_eq!(report.attempts(), 1);
}
