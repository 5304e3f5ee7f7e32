//! The report of a call, read from the response it returned, and the opt-in switch that turns
//! a final retryable status into an error carrying that response: through reqwest on a
//! loopback server, and through the outbound layer in process.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::any;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use rampart::backoff::Backoff;
use rampart::{DeadlineSource, StopReason};
use rampart_http::reqwest::Client;
use rampart_http::{CallReport, ClientError, OutboundBuilder, OutboundLayer, ReplayBody};
use tower::ServiceExt;
use tower_layer::Layer;

/// A loopback server that answers `status` with the body `busy` to every request.
async fn serve(status: u16) -> SocketAddr {
    let status = StatusCode::from_u16(status).expect("valid status");
    let app = Router::new().route("/", any(move || async move { (status, "busy") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Three attempts within a 5 s deadline, no backoff, and a breaker no test here opens.
fn layer() -> OutboundBuilder {
    OutboundLayer::builder()
        .policy(|p| {
            p.total_timeout(Duration::from_secs(5))
                .attempt_timeout(Duration::from_secs(1))
                .backoff(Backoff::none())
        })
        .breaker_per_host(rampart::breaker::Breaker::builder().consecutive_failures(1_000))
}

fn client(layer: OutboundBuilder) -> Client {
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client");
    Client::with_client(http, &layer.build().expect("valid layer"))
}

fn report(response: &reqwest::Response) -> CallReport {
    *response
        .extensions()
        .get::<CallReport>()
        .expect("a report in the response")
}

#[tokio::test]
async fn a_final_503_carries_its_stop_reason_attempts_and_deadline_in_the_response() {
    let addr = serve(503).await;
    let client = client(layer());
    let response = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .expect("the last response, not an error");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let report = report(&response);
    assert_eq!(report.stop(), StopReason::AttemptsExhausted);
    assert_eq!(report.attempts(), 3);
    assert_eq!(report.log().iter().count(), 3);
    assert_eq!(report.timeout(), Some(Duration::from_secs(5)));
    assert_eq!(report.deadline_source(), Some(DeadlineSource::Policy));
    assert_eq!(
        report.to_string(),
        "attempts exhausted after 3 attempts, within the policy's deadline of 5s"
    );
}

#[tokio::test]
async fn a_success_carries_a_report_of_its_one_attempt() {
    let addr = serve(200).await;
    let client = client(layer());
    let response = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .expect("a response");
    let report = report(&response);
    assert_eq!(report.stop(), StopReason::Succeeded);
    assert_eq!(report.attempts(), 1);
}

#[tokio::test]
async fn a_deadline_shorter_than_the_policys_written_by_the_caller_is_reported_as_inherited() {
    let addr = serve(503).await;
    let client = client(layer());
    let response = client
        .get(format!("http://{addr}/"))
        .header("x-deadline-ms", "2000")
        .send()
        .await
        .expect("a response");
    let report = report(&response);
    assert_eq!(report.deadline_source(), Some(DeadlineSource::Inherited));
    let deadline = report.timeout().expect("a deadline");
    assert!(
        deadline <= Duration::from_secs(2) && deadline > Duration::ZERO,
        "{deadline:?}"
    );
}

#[tokio::test]
async fn with_the_switch_on_a_final_503_is_an_error_carrying_the_response_and_its_report() {
    let addr = serve(503).await;
    let client = client(layer().fail_on_retryable_status(true));
    let error = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .expect_err("a final 503 is an error");
    let report = *error.report().expect("the call's report");
    assert_eq!(report.stop(), StopReason::AttemptsExhausted);
    assert_eq!(report.attempts(), 3);
    assert_eq!(error.status(), StatusCode::BAD_GATEWAY);
    assert!(!error.is_timeout() && !error.is_rejected());
    assert_eq!(
        error.to_string(),
        "upstream answered 503 Service Unavailable, a retryable status: attempts exhausted after 3 attempts, within the policy's deadline of 5s"
    );
    let response: reqwest::Response = match error.into_response() {
        Ok(response) => response,
        Err(error) => panic!("the response is a reqwest one: {error}"),
    };
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.text().await.expect("the body"), "busy");
}

#[tokio::test]
async fn with_the_switch_on_a_503_the_deadline_ran_out_on_is_a_timeout_answering_504() {
    let addr = serve(503).await;
    // The backoff after the first 503 does not fit in the deadline: the call stops at once.
    let client = client(
        OutboundLayer::builder()
            .policy(|p| {
                p.total_timeout(Duration::from_millis(500))
                    .backoff(Backoff::constant(Duration::from_secs(10)))
            })
            .fail_on_retryable_status(true),
    );
    let error = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .expect_err("a final 503 is an error");
    assert_eq!(
        error.report().map(CallReport::stop),
        Some(StopReason::DeadlineExceeded)
    );
    assert!(error.is_timeout());
    assert_eq!(error.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(matches!(error, ClientError::Status(_)));
}

#[tokio::test]
async fn with_the_switch_on_success_and_permanent_statuses_are_still_responses() {
    for status in [200, 404] {
        let addr = serve(status).await;
        let client = client(layer().fail_on_retryable_status(true));
        let response = client
            .get(format!("http://{addr}/"))
            .send()
            .await
            .expect("a response");
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(report(&response).attempts(), 1, "{status}");
    }
}

#[tokio::test]
async fn the_switch_is_set_per_host_and_per_client_over_the_layers() {
    let on = serve(503).await;
    let off = serve(503).await;
    let layer = layer().host_fail_on_retryable_status(&on.to_string(), true);
    let client = client(layer);
    let error = client.get(format!("http://{on}/")).send().await;
    assert!(matches!(error, Err(ClientError::Status(_))), "{error:?}");
    let response = client.get(format!("http://{off}/")).send().await;
    assert!(response.is_ok(), "the layer's setting for other hosts");
    // The client's own setting wins over the layer's and the host's.
    let client = client.fail_on_retryable_status(false);
    assert!(client.get(format!("http://{on}/")).send().await.is_ok());
}

type Upstream = Request<ReplayBody<Full<Bytes>>>;

/// Answers 503 to every request, in process.
fn unavailable()
-> impl tower::Service<Upstream, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|_: Upstream| async {
        let response = Response::builder().status(503).body(Full::default());
        Ok::<_, Infallible>(response.expect("valid response"))
    })
}

fn get() -> Request<Full<Bytes>> {
    Request::get("http://prices.test/")
        .body(Full::default())
        .expect("valid request")
}

#[tokio::test(start_paused = true)]
async fn the_outbound_layer_puts_the_report_in_the_response_and_fails_on_request() {
    let service = layer().build().expect("valid layer").layer(unavailable());
    let response = service.oneshot(get()).await.expect("the last response");
    let report = response
        .extensions()
        .get::<CallReport>()
        .expect("a report in the response");
    assert_eq!(
        (report.stop(), report.attempts()),
        (StopReason::AttemptsExhausted, 3)
    );
    let service = layer()
        .fail_on_retryable_status(true)
        .build()
        .expect("valid layer")
        .layer(unavailable());
    let error = service.oneshot(get()).await.expect_err("a final 503");
    assert_eq!(
        error.report().map(|r| (r.stop(), r.attempts())),
        Some((StopReason::AttemptsExhausted, 3))
    );
    let response: Response<Full<Bytes>> = match error.into_response() {
        Ok(response) => response,
        Err(error) => panic!("the response is the service's: {error}"),
    };
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}
