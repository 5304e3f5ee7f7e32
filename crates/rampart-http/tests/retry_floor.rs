//! The outbound layer's floor under a retry (`DEFAULT_MIN_ATTEMPT_TIME`): a retry is not sent
//! with less time left than it, on paused time against an in-process upstream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use rampart::backoff::Backoff;
use rampart::{Deadline, PolicyBuilder, StopReason};
use rampart_http::outbound::DEFAULT_MIN_ATTEMPT_TIME;
use rampart_http::{CallReport, ClientError, OutboundBuilder, OutboundLayer, ReplayBody};
use tower::ServiceExt;
use tower_layer::Layer;

const MS: Duration = Duration::from_millis(1);

/// How each attempt fails, after how long.
#[derive(Clone, Copy)]
enum Failure {
    Status503,
    Transport,
}

/// An upstream whose every attempt fails `after` its start, recording the `X-Deadline-Ms`
/// each one carried.
#[derive(Clone)]
struct Upstream {
    seen: Arc<Mutex<Vec<Option<String>>>>,
    after: Duration,
    failure: Failure,
}

impl Upstream {
    fn new(after: Duration, failure: Failure) -> Self {
        Upstream {
            seen: Arc::default(),
            after,
            failure,
        }
    }

    fn seen(&self) -> Vec<Option<String>> {
        self.seen.lock().expect("seen").clone()
    }

    fn service(
        &self,
    ) -> impl tower::Service<
        Request<ReplayBody<Full<Bytes>>>,
        Response = Response<Full<Bytes>>,
        Error = std::io::Error,
        Future: Send,
    > + Clone
    + Send
    + 'static {
        let upstream = self.clone();
        tower::service_fn(move |request: Request<ReplayBody<Full<Bytes>>>| {
            let upstream = upstream.clone();
            async move {
                let deadline = request
                    .headers()
                    .get("x-deadline-ms")
                    .map(|v| v.to_str().expect("ascii").to_owned());
                upstream.seen.lock().expect("seen").push(deadline);
                tokio::time::sleep(upstream.after).await;
                match upstream.failure {
                    Failure::Status503 => Ok(Response::builder()
                        .status(StatusCode::SERVICE_UNAVAILABLE)
                        .body(Full::default())
                        .expect("valid response")),
                    Failure::Transport => Err(std::io::Error::other("connection reset")),
                }
            }
        })
    }
}

fn get() -> Request<Full<Bytes>> {
    Request::get("http://prices.test/")
        .body(Full::default())
        .expect("valid request")
}

/// A 100 ms deadline, no attempt timeout, no backoff: the time left after an attempt is the
/// deadline less the attempt's duration.
fn within_100ms(p: PolicyBuilder) -> PolicyBuilder {
    p.total_timeout(100 * MS)
        .no_attempt_timeout()
        .backoff(Backoff::none())
}

fn layer(builder: OutboundBuilder) -> OutboundLayer {
    builder.build().expect("valid outbound layer")
}

#[test]
fn the_default_floor_is_10ms() {
    assert_eq!(DEFAULT_MIN_ATTEMPT_TIME, 10 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_retry_with_less_than_the_floor_left_is_not_sent_and_the_call_ends_deadline_exceeded() {
    let upstream = Upstream::new(95 * MS, Failure::Transport);
    let client = layer(OutboundLayer::builder().policy(within_100ms)).layer(upstream.service());
    let error = client.oneshot(get()).await.expect_err("out of time");
    assert_eq!(
        upstream.seen(),
        [Some("100".to_owned())],
        "one attempt sent"
    );
    let Some(rampart::Error::DeadlineExceeded {
        attempts, unfit, ..
    }) = error.call()
    else {
        panic!("deadline exceeded: {error:?}");
    };
    assert_eq!(*attempts, 1);
    let Some(unfit) = unfit else {
        panic!("the retry that did not fit: {error:?}");
    };
    assert_eq!(
        (unfit.delay(), unfit.needed(), unfit.left()),
        (Duration::ZERO, DEFAULT_MIN_ATTEMPT_TIME, 5 * MS)
    );
    assert!(unfit.is_min_attempt_time());
    assert!(
        error.to_string().ends_with(
            "the next backoff of 0ns and the 10ms min_attempt_time would not fit in the 5ms left"
        ),
        "the message names the floor that did not fit: {error}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_503_with_less_than_the_floor_left_is_returned_with_a_deadline_exceeded_report() {
    let upstream = Upstream::new(95 * MS, Failure::Status503);
    let client = layer(OutboundLayer::builder().policy(within_100ms)).layer(upstream.service());
    let response = client.oneshot(get()).await.expect("the 503");
    assert_eq!(upstream.seen().len(), 1, "one attempt sent");
    let report = response.extensions().get::<CallReport>().expect("a report");
    assert_eq!(
        (report.stop(), report.attempts()),
        (StopReason::DeadlineExceeded, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn an_inherited_deadline_gets_the_same_floor() {
    let upstream = Upstream::new(45 * MS, Failure::Transport);
    let client = OutboundLayer::new().layer(upstream.service());
    let error = Deadline::after(50 * MS)
        .scope(client.oneshot(get()))
        .await
        .expect_err("out of time");
    assert_eq!(upstream.seen(), [Some("50".to_owned())], "one attempt sent");
    assert!(
        matches!(
            error,
            ClientError::Call(rampart::Error::DeadlineExceeded { unfit: Some(_), .. })
        ),
        "{error:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_with_the_floor_left_is_sent_carrying_what_is_left() {
    let upstream = Upstream::new(85 * MS, Failure::Transport);
    let client = layer(OutboundLayer::builder().policy(within_100ms)).layer(upstream.service());
    client.oneshot(get()).await.expect_err("out of time");
    assert_eq!(
        upstream.seen(),
        [Some("100".to_owned()), Some("15".to_owned())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_policy_may_set_its_own_floor_zero_included() {
    let upstream = Upstream::new(95 * MS, Failure::Transport);
    let client = layer(
        OutboundLayer::builder().policy(|p| within_100ms(p).min_attempt_time(Duration::ZERO)),
    )
    .layer(upstream.service());
    client.oneshot(get()).await.expect_err("out of time");
    assert_eq!(
        upstream.seen(),
        [Some("100".to_owned()), Some("5".to_owned())]
    );

    let upstream = Upstream::new(60 * MS, Failure::Transport);
    let client = layer(OutboundLayer::builder().host("prices.test:80", |p| {
        within_100ms(p).min_attempt_time(50 * MS)
    }))
    .layer(upstream.service());
    client.oneshot(get()).await.expect_err("out of time");
    assert_eq!(upstream.seen().len(), 1, "40 ms left, 50 needed");
}

#[test]
fn a_deadline_not_longer_than_the_floor_builds_without_it_and_a_floor_of_ones_own_is_checked() {
    let short = OutboundLayer::builder()
        .policy(|p| p.total_timeout(DEFAULT_MIN_ATTEMPT_TIME))
        .build();
    assert!(short.is_ok(), "{short:?}");
    let error = OutboundLayer::builder()
        .policy(|p| p.total_timeout(20 * MS).min_attempt_time(20 * MS))
        .build()
        .expect_err("a floor of its own as long as the deadline");
    let fields: Vec<_> = error.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, ["min_attempt_time"]);
}
