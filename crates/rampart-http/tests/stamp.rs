//! `outbound::stamp`: the propagation headers written from the callback of a plain policy
//! around any client, attempt by attempt (on tokio's paused time).

use std::sync::Mutex;
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use rampart::backoff::Backoff;
use rampart::{Criticality, Deadline, Policy};
use rampart_http::header::Names;
use rampart_http::outbound::stamp;

const MS: Duration = Duration::from_millis(1);

/// The headers each attempt of a two-attempt call sent, starting from `initial` each time.
async fn sent_per_attempt(policy: &Policy, initial: &HeaderMap) -> Vec<HeaderMap> {
    let names = Names::default();
    let sent = Mutex::new(Vec::new());
    let _ = policy
        .run(async |attempt| {
            let mut headers = initial.clone();
            stamp(&mut headers, &names, attempt);
            sent.lock().expect("sent").push(headers);
            Err::<(), _>(std::io::Error::other("unavailable"))
        })
        .await;
    sent.into_inner().expect("sent")
}

fn two_attempts(attempt_timeout: Duration) -> Policy {
    Policy::builder()
        .max_attempts(2)
        .attempt_timeout(attempt_timeout)
        .backoff(Backoff::none())
        .build()
        .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn each_attempt_carries_its_time_left_and_only_a_retry_carries_the_retry_mark() {
    let sent = sent_per_attempt(&two_attempts(300 * MS), &HeaderMap::new()).await;
    assert_eq!(sent.len(), 2);
    for headers in &sent {
        assert_eq!(headers["x-deadline-ms"], "300");
        assert_eq!(headers["x-criticality"], Criticality::Critical.as_str());
    }
    assert!(sent[0].get("x-rampart-retry").is_none());
    assert_eq!(sent[1]["x-rampart-retry"], "1");
}

#[tokio::test(start_paused = true)]
async fn a_smaller_deadline_the_caller_wrote_is_kept_and_a_larger_one_is_cut() {
    let mut initial = HeaderMap::new();
    initial.insert("x-deadline-ms", HeaderValue::from_static("120"));
    let sent = sent_per_attempt(&two_attempts(300 * MS), &initial).await;
    assert_eq!(
        sent[0]["x-deadline-ms"], "120",
        "never extends the caller's deadline"
    );

    initial.insert("x-deadline-ms", HeaderValue::from_static("5000"));
    let sent = sent_per_attempt(&two_attempts(300 * MS), &initial).await;
    assert_eq!(sent[0]["x-deadline-ms"], "300");
}

#[tokio::test(start_paused = true)]
async fn a_grpc_request_gets_grpc_timeout_and_a_first_attempt_drops_a_copied_retry_mark() {
    let mut initial = HeaderMap::new();
    initial.insert("content-type", HeaderValue::from_static("application/grpc"));
    initial.insert("x-deadline-ms", HeaderValue::from_static("900"));
    initial.insert("x-rampart-retry", HeaderValue::from_static("1"));
    let sent = sent_per_attempt(&two_attempts(250 * MS), &initial).await;
    assert_eq!(
        sent[0]["grpc-timeout"], "250000u",
        "250 ms in the encoding's finest unit"
    );
    assert!(
        sent[0].get("x-deadline-ms").is_none(),
        "one encoding of the deadline"
    );
    assert!(sent[0].get("x-rampart-retry").is_none(), "a first attempt");
    assert_eq!(sent[1]["x-rampart-retry"], "1");
}

#[tokio::test(start_paused = true)]
async fn the_ambient_criticality_is_written() {
    let sent = Criticality::Sheddable
        .scope(sent_per_attempt(&two_attempts(300 * MS), &HeaderMap::new()))
        .await;
    assert_eq!(sent[0]["x-criticality"], "Sheddable");
}

#[tokio::test(start_paused = true)]
async fn a_policy_that_ignores_the_ambient_deadline_still_stamps_no_more_than_it() {
    // The policy is built without `use_ambient_deadline`: its attempts may run 300 ms, but
    // the caller upstream waits 120 ms more, and the header says so.
    let sent = Deadline::after(120 * MS)
        .scope(sent_per_attempt(&two_attempts(300 * MS), &HeaderMap::new()))
        .await;
    assert_eq!(sent[0]["x-deadline-ms"], "120");
    assert_eq!(sent[1]["x-deadline-ms"], "120", "no time passed");
}

#[tokio::test(start_paused = true)]
async fn an_ambient_deadline_later_than_the_attempts_ceiling_leaves_the_ceiling() {
    let sent = Deadline::after(900 * MS)
        .scope(sent_per_attempt(&two_attempts(300 * MS), &HeaderMap::new()))
        .await;
    assert_eq!(sent[0]["x-deadline-ms"], "300");
}

/// In an axum handler behind the inbound layer, a plain default policy around another
/// client: the deadline it stamps is the time the handler's caller has left.
#[cfg(feature = "axum")]
#[tokio::test(start_paused = true)]
async fn in_a_handler_behind_the_inbound_layer_the_stamp_carries_the_callers_time_left() {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use http::Request;
    use http_body_util::BodyExt;
    use rampart_http::InboundLayer;
    use tower::ServiceExt;

    async fn handler() -> String {
        let names = Names::default();
        let policy = Policy::builder()
            .attempt_timeout(Duration::from_secs(2))
            .build()
            .expect("valid policy");
        let sent = policy
            .run(async |attempt| {
                let mut headers = HeaderMap::new();
                stamp(&mut headers, &names, attempt);
                Ok::<_, std::io::Error>(headers)
            })
            .await
            .expect("stamped");
        sent["x-deadline-ms"].to_str().expect("ascii").to_owned()
    }

    let app = Router::new()
        .route("/", get(handler))
        .layer(InboundLayer::new().reserve(20 * MS));
    let request = Request::get("/")
        .header("x-deadline-ms", "250")
        .body(Body::empty())
        .expect("valid request");
    let response = app.oneshot(request).await.expect("infallible");
    let body = response.into_body().collect().await.expect("body");
    assert_eq!(
        body.to_bytes(),
        "230",
        "250 ms less the layer's 20 ms reserve"
    );
}
