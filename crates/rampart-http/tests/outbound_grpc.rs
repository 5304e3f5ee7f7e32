//! gRPC through the outbound layer against an in-process upstream on paused time: the
//! `grpc-timeout` every attempt carries, a request with no origin refused, the statuses
//! retried (with pushback) and not, and the transport's own timer losing its tie to rampart's.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use rampart_http::{OutboundLayer, Repeatable};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

#[path = "support/upstream.rs"]
mod upstream;

use upstream::*;

#[tokio::test(start_paused = true)]
async fn a_grpc_request_carries_grpc_timeout_instead() {
    let upstream = Upstream::new(|_, _| reply(200));
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let mut request = Request::post("http://a.test/pkg.Service/Method")
        .header("content-type", "application/grpc")
        .header("grpc-timeout", "1H")
        .header("x-deadline-ms", "77")
        .body(Full::default())
        .expect("valid request");
    request.extensions_mut().insert(Repeatable);
    client.oneshot(request).await.expect("a response");
    let call = &upstream.calls()[0];
    assert_eq!(call.header("grpc-timeout").as_deref(), Some("10000000u"));
    assert_eq!(call.header("x-deadline-ms"), None);
}

#[tokio::test(start_paused = true)]
async fn a_grpc_request_with_no_origin_is_refused_and_one_with_an_origin_sent() {
    let upstream = Upstream::new(|_, _| grpc_reply(&[("grpc-status", "0")]));
    let layer = layer(OutboundLayer::builder().policy(quick));
    let relative = || {
        Request::post("/pkg.Service/Method")
            .header("content-type", "application/grpc+proto")
            .body(Full::default())
            .expect("valid request")
    };
    for client in [
        layer.layer(upstream.service()),
        layer.layer_for("a.test:50051", upstream.service()),
    ] {
        let error = client.oneshot(relative()).await.expect_err("refused");
        let Some(rampart::Error::Config(config)) = error.call() else {
            panic!("a configuration error: {error:?}");
        };
        assert_eq!(config.problems()[0].field(), "grpc");
        assert!(
            error
                .to_string()
                .contains("OutboundLayer::grpc(origin, channel)")
        );
    }
    assert!(upstream.calls().is_empty());
    let absolute = grpc_post(&[]);
    let client = layer.layer(upstream.service());
    client.oneshot(absolute).await.expect("sent");
    assert_eq!(upstream.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_grpc_unavailable_is_retried_and_then_answered() {
    let upstream = Upstream::new(|n, _| {
        if n < 2 {
            grpc_reply(&[("grpc-status", "14")])
        } else {
            grpc_reply(&[("grpc-status", "0")])
        }
    });
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let response = client.oneshot(grpc_post(&[])).await.expect("a response");
    assert_eq!(response.headers()["grpc-status"], "0");
    assert_eq!(upstream.calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_grpc_resource_exhausted_is_retried_after_its_pushback() {
    let upstream = Upstream::new(|n, _| {
        if n == 0 {
            grpc_reply(&[("grpc-status", "8"), ("grpc-retry-pushback-ms", "750")])
        } else {
            grpc_reply(&[("grpc-status", "0")])
        }
    });
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    client.oneshot(grpc_post(&[])).await.expect("a response");
    let calls = upstream.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].at - calls[0].at, Duration::from_millis(750));
}

#[tokio::test(start_paused = true)]
async fn a_negative_pushback_is_not_retried_and_other_grpc_errors_are_permanent() {
    for headers in [
        &[("grpc-status", "14"), ("grpc-retry-pushback-ms", "-1")][..],
        &[("grpc-status", "5")],
    ] {
        let upstream = Upstream::new(move |_, _| grpc_reply(headers));
        let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
        let response = client.oneshot(grpc_post(&[])).await.expect("a response");
        assert_eq!(response.headers()["grpc-status"], headers[0].1);
        assert_eq!(upstream.calls().len(), 1, "{headers:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_grpc_deadline_exceeded_reply_is_not_a_success() {
    let upstream = Upstream::new(|n, _| {
        grpc_reply(if n == 0 {
            &[("grpc-status", "4")]
        } else {
            &[("grpc-status", "0")]
        })
    });
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let response = client.oneshot(grpc_post(&[])).await.expect("a response");
    assert_eq!(response.headers()["grpc-status"], "0");
    assert_eq!(upstream.calls().len(), 2, "retried as a timed-out attempt");
}

/// A transport that gives up on its own when the `grpc-timeout` it was sent runs out, as a
/// tonic channel does.
fn timing_out_transport()
-> impl Service<UpstreamRequest, Response = Response<Full<Bytes>>, Error = &'static str, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|request: UpstreamRequest| async move {
        let timeout = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| rampart_http::header::parse_grpc_timeout(v.as_bytes()))
            .expect("a grpc-timeout");
        tokio::time::sleep(timeout).await;
        Err::<Response<Full<Bytes>>, _>("timeout expired")
    })
}

#[tokio::test(start_paused = true)]
async fn a_transport_timer_armed_from_the_header_loses_the_tie_to_ramparts_timer() {
    let client = layer(
        OutboundLayer::builder()
            .max_attempts(1)
            .policy(|p| quick(p).attempt_timeout(Duration::from_millis(300))),
    )
    .layer(timing_out_transport());
    let error = client
        .oneshot(grpc_post(&[]))
        .await
        .expect_err("the attempt timed out");
    assert!(error.is_timeout(), "{error}");
    assert!(error.transport().is_none(), "{error}");
}
