//! The inbound layer on a `ManualClock`: a whole axum router whose layer and handler policies
//! share one time line that moves only when the test advances it.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use rampart::testing::{advance_until, wait_for_pending};
use rampart::{Error, ManualClock, Policy};
use rampart_http::InboundLayer;
use tower::ServiceExt;

const MS: Duration = Duration::from_millis(1);

fn request(deadline_ms: &str) -> Request<Body> {
    Request::get("/slow")
        .header("x-deadline-ms", deadline_ms)
        .body(Body::empty())
        .expect("valid request")
}

async fn text(response: http::Response<Body>) -> String {
    let body = response.into_body().collect().await.expect("body");
    String::from_utf8(body.to_bytes().to_vec()).expect("utf-8")
}

#[tokio::test]
async fn enforce_on_a_manual_clock_answers_504_when_the_test_moves_time_to_the_deadline() {
    let clock = ManualClock::new();
    // A handler that waits on the same clock far longer than the caller will.
    let waits = rampart::Clock::from(clock.clone());
    let app = Router::new()
        .route(
            "/slow",
            get(move || {
                let waits = waits.clone();
                async move {
                    waits
                        .sleep_until(waits.now() + Duration::from_secs(60))
                        .await;
                    "too late"
                }
            }),
        )
        .layer(InboundLayer::new().enforce(true).clock(clock.clone()));
    let start = clock.now();
    let mut call = tokio::spawn(app.oneshot(request("250")));
    // The handler's sleep and the layer's deadline: two sleepers, and no answer while time
    // stands still.
    wait_for_pending(
        &mut call,
        || clock.sleepers() == 2,
        "the handler and the deadline",
    )
    .await
    .expect("both asleep on the clock");
    advance_until(&clock, 10 * MS, || call.is_finished(), "the 504", 100)
        .await
        .expect("answered at the deadline");
    assert_eq!(clock.now() - start, 250 * MS);
    let response = call.await.expect("joined").expect("infallible");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(
        text(response)
            .await
            .contains("urn:rampart:deadline-exceeded")
    );
}

#[tokio::test]
async fn a_handlers_policy_on_the_layers_clock_stops_at_the_received_deadline() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .clock(clock.clone())
        .use_ambient_deadline(true)
        .total_timeout(Duration::from_secs(30))
        .build()
        .expect("valid");
    let layer = InboundLayer::new().clock(policy.clock().clone());
    let app = Router::new()
        .route(
            "/slow",
            get(move || {
                let policy = policy.clone();
                async move {
                    let outcome = policy
                        .run(async |_attempt| std::future::pending::<Result<(), &str>>().await)
                        .await;
                    match outcome {
                        Err(Error::DeadlineExceeded { .. }) => "deadline exceeded",
                        _ => "something else",
                    }
                }
            }),
        )
        .layer(layer);
    let start = clock.now();
    let mut call = tokio::spawn(app.oneshot(request("400")));
    wait_for_pending(&mut call, || clock.sleepers() > 0, "the policy's deadline")
        .await
        .expect("the call waits on the clock");
    advance_until(&clock, 10 * MS, || call.is_finished(), "the answer", 100)
        .await
        .expect("answered at the received deadline, not the policy's 30 s");
    assert_eq!(clock.now() - start, 400 * MS);
    let response = call.await.expect("joined").expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(text(response).await, "deadline exceeded");
}
