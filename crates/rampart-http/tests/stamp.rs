//! `outbound::stamp`: the propagation headers written from the callback of a plain policy
//! around any client, attempt by attempt (on tokio's paused time).

use std::sync::Mutex;
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use rampart::backoff::Backoff;
use rampart::{Criticality, Policy};
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
