//! With the `axum` feature, a handler returns rampart's decisions as responses directly.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use rampart_http::{ClientError, Problem};
use tower::ServiceExt;

async fn overloaded() -> Result<&'static str, ClientError<std::io::Error>> {
    Err(ClientError::Call(rampart::Error::Rejected {
        reason: rampart::RejectReason::BudgetExhausted,
        retry_after: Some(Duration::from_millis(2500)),
        attempts: 2,
        refused: 0,
        last: None,
    }))
}

async fn too_late() -> Problem {
    Problem::new(
        StatusCode::GATEWAY_TIMEOUT,
        rampart_http::problem::DEADLINE_EXCEEDED,
        "Deadline exceeded",
        "no time left",
    )
}

#[tokio::test]
async fn client_errors_and_problems_are_responses() {
    let app = Router::new()
        .route("/overloaded", get(overloaded))
        .route("/late", get(too_late));
    let response = app
        .clone()
        .oneshot(
            Request::get("/overloaded")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "3");
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("urn:rampart:budget-exhausted"),
        "{body:?}"
    );

    let response = app
        .oneshot(Request::get("/late").body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
}
