//! The reqwest client's attempts as spans, on a loopback server: one `rampart.http.attempt`
//! span per attempt with the `tracing` feature, none without it (the feature-off twin).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::any;
use http::StatusCode;
use rampart::backoff::Backoff;
use rampart_http::OutboundLayer;
use rampart_http::reqwest::Client;

#[path = "support/spans.rs"]
mod spans;

use spans::Spans;

/// A loopback server that answers `status` to every request.
async fn serve(status: u16) -> SocketAddr {
    let status = StatusCode::from_u16(status).expect("valid status");
    let app = Router::new().route("/", any(move || async move { status }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn client() -> Client {
    let layer = OutboundLayer::builder()
        .policy(|p| {
            p.total_timeout(Duration::from_secs(5))
                .attempt_timeout(Duration::from_secs(1))
                .backoff(Backoff::none())
        })
        .build()
        .expect("valid layer");
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client");
    Client::with_client(http, &layer)
}

/// The span line of one attempt to `addr`, as the `tracing` feature writes it.
#[cfg(feature = "tracing")]
fn attempt(method: &str, addr: SocketAddr, resends: Option<u32>, status: u16) -> String {
    let resends = resends.map_or(String::new(), |n| format!(" http.request.resend_count={n}"));
    format!(
        "rampart.http.attempt http.request.method=\"{method}\" server.address=\"{addr}\"{resends} http.response.status_code={status} in rampart.attempt"
    )
}

#[cfg(feature = "tracing")]
#[tokio::test]
async fn each_reqwest_attempt_has_a_span_with_its_resend_count_and_status() {
    let spans = Spans::default();
    let _guard = spans.capture();
    let addr = serve(503).await;
    let client = client();
    let url = format!("http://{addr}/");
    let response = client.get(&url).send().await.expect("a response");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        spans.take(),
        [
            attempt("GET", addr, None, 503),
            attempt("GET", addr, Some(1), 503),
            attempt("GET", addr, Some(2), 503),
        ]
    );
    // A request sent once has one span too.
    client
        .post(&url)
        .body("order-7")
        .send()
        .await
        .expect("a response");
    assert_eq!(spans.take(), [attempt("POST", addr, None, 503)]);
}

#[cfg(feature = "tracing")]
#[tokio::test]
async fn a_reqwest_attempt_that_fails_in_transport_has_a_span_without_a_status() {
    let spans = Spans::default();
    let _guard = spans.capture();
    // A port bound and closed again: nothing listens there.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port")
        .local_addr()
        .expect("bound");
    let client = client();
    let error = client
        .post(format!("http://{addr}/"))
        .send()
        .await
        .expect_err("connection refused");
    assert!(error.transport().is_some(), "{error}");
    assert_eq!(
        spans.take(),
        [format!(
            "rampart.http.attempt http.request.method=\"POST\" server.address=\"{addr}\" in rampart.attempt"
        )]
    );
}

#[cfg(not(feature = "tracing"))]
#[tokio::test]
async fn without_the_tracing_feature_reqwest_attempts_open_no_span() {
    let spans = Spans::default();
    let _guard = spans.capture();
    let addr = serve(503).await;
    let client = client();
    let response = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(spans.take(), Vec::<String>::new());
}
