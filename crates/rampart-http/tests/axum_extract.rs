//! The axum extractors for the request's deadline and criticality, in a handler behind the
//! inbound layer, through the router (feature `axum`).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::Request;
use http_body_util::BodyExt;
use rampart::Criticality;
use rampart_http::InboundLayer;
use rampart_http::extract::{RequestCriticality, RequestDeadline};
use tower::ServiceExt;

/// Answers what the handler's extractors saw: milliseconds left (or "none") and the level.
async fn seen(
    RequestDeadline(deadline): RequestDeadline,
    RequestCriticality(level): RequestCriticality,
) -> String {
    let left = deadline.map_or("none".to_owned(), |d| d.remaining().as_millis().to_string());
    format!("{left} {level}")
}

async fn get_seen(app: Router, headers: &[(&str, &str)]) -> String {
    let mut request = Request::get("/")
        .body(Body::empty())
        .expect("valid request");
    for (name, value) in headers {
        request.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).expect("valid name"),
            value.parse().expect("valid value"),
        );
    }
    let response = app.oneshot(request).await.expect("infallible");
    let body = response.into_body().collect().await.expect("body");
    String::from_utf8(body.to_bytes().to_vec()).expect("utf-8")
}

#[tokio::test(start_paused = true)]
async fn a_handler_extracts_the_deadline_less_the_reserve_and_the_criticality_the_layer_read() {
    let app = Router::new()
        .route("/", get(seen))
        .layer(InboundLayer::new().reserve(Duration::from_millis(20)));
    let answer = get_seen(
        app,
        &[("x-deadline-ms", "300"), ("x-criticality", "Sheddable")],
    )
    .await;
    assert_eq!(answer, "280 Sheddable");
}

#[tokio::test(start_paused = true)]
async fn a_request_without_headers_extracts_no_total_timeout_and_critical() {
    let app = Router::new()
        .route("/", get(seen))
        .layer(InboundLayer::new());
    assert_eq!(
        get_seen(app, &[]).await,
        format!("none {}", Criticality::Critical)
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_extracts_the_deadline_the_layers_default_timeout_gives_a_request_that_sent_none()
{
    let app = Router::new()
        .route("/", get(seen))
        .layer(InboundLayer::new().default_timeout(Duration::from_secs(2)));
    assert_eq!(get_seen(app, &[]).await, "2000 Critical");
}
