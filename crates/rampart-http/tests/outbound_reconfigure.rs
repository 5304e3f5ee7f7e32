//! `OutboundLayer::reconfigure` on paused time: the next request after an update runs with
//! the new settings, on a host already in the table and on one first seen later; a request
//! already running keeps its own; a refused update changes nothing and names every problem.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use rampart::PolicyBuilder;
use rampart::backoff::Backoff;
use rampart_http::{OutboundBuilder, OutboundLayer, ReplayBody};
use tower::ServiceExt;
use tower_layer::Layer;

type UpstreamRequest = Request<ReplayBody<Full<Bytes>>>;

/// The host and method of every request the upstream received.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, http::Method, http::HeaderMap)>>>);

impl Seen {
    /// Requests to `host` so far.
    fn to(&self, host: &str) -> usize {
        let seen = self.0.lock().expect("seen");
        seen.iter().filter(|(h, _, _)| h == host).count()
    }

    /// The deadline header of the last request.
    fn last_deadline(&self) -> String {
        let seen = self.0.lock().expect("seen");
        let (_, _, headers) = seen.last().expect("a request");
        headers["x-deadline-ms"].to_str().expect("ascii").to_owned()
    }
}

/// An upstream that answers 503 to every request, the first one after `first_delay`.
fn failing(
    seen: &Seen,
    first_delay: Duration,
) -> impl tower::Service<
    UpstreamRequest,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future: Send,
> + Clone
+ use<> {
    let seen = seen.clone();
    tower::service_fn(move |request: UpstreamRequest| {
        let first = {
            let mut seen = seen.0.lock().expect("seen");
            let host = request.uri().host().unwrap_or_default().to_owned();
            seen.push((host, request.method().clone(), request.headers().clone()));
            seen.len() == 1
        };
        async move {
            if first {
                tokio::time::sleep(first_delay).await;
            }
            Ok(Response::builder()
                .status(503)
                .body(Full::default())
                .expect("valid response"))
        }
    })
}

fn quick(p: PolicyBuilder) -> PolicyBuilder {
    p.total_timeout(Duration::from_secs(10))
        .no_attempt_timeout()
        .backoff(Backoff::none())
}

/// Attempts per request 2, no breaker or budget to stop retries, no backoff.
fn two_attempts() -> OutboundBuilder {
    OutboundLayer::builder()
        .max_attempts(2)
        .no_breaker()
        .no_budget()
        .policy(quick)
}

fn request(method: &str, uri: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(uri)
        .body(Full::default())
        .expect("valid request")
}

/// Sends `request` through `layer` to the upstream and waits for its answer.
async fn send(layer: &OutboundLayer, seen: &Seen, request: Request<Full<Bytes>>) {
    let client = layer.layer(failing(seen, Duration::ZERO));
    let response = client.oneshot(request).await.expect("the last response");
    assert_eq!(response.status(), 503);
}

#[tokio::test(start_paused = true)]
async fn after_reconfigure_the_next_request_makes_the_new_attempts_on_a_known_and_a_new_host() {
    let layer = two_attempts().build().expect("valid layer");
    let seen = Seen::default();
    send(&layer, &seen, request("GET", "http://known.test/")).await;
    assert_eq!(seen.to("known.test"), 2);

    layer.reconfigure(|s| s.max_attempts = 4).expect("valid");
    assert_eq!(layer.settings().max_attempts, 4);
    assert_eq!(
        layer.host_settings("known.test:80").map(|s| s.max_attempts),
        Some(4)
    );
    send(&layer, &seen, request("GET", "http://known.test/")).await;
    assert_eq!(seen.to("known.test"), 2 + 4);
    send(&layer, &seen, request("GET", "http://new.test/")).await;
    assert_eq!(seen.to("new.test"), 4);
    // A request that may be sent only once still is.
    send(&layer, &seen, request("POST", "http://new.test/")).await;
    assert_eq!(seen.to("new.test"), 4 + 1);
}

#[tokio::test(start_paused = true)]
async fn a_host_with_settings_of_its_own_keeps_them_and_takes_the_layers_attempts() {
    let layer = two_attempts()
        .host("slow.test", |p| p.attempt_timeout(Duration::from_secs(5)))
        .build()
        .expect("valid layer");
    layer
        .reconfigure(|s| {
            s.max_attempts = 3;
            s.policy.attempt_timeout = Some(Duration::from_millis(250));
        })
        .expect("valid");
    let seen = Seen::default();
    send(&layer, &seen, request("GET", "http://fast.test/")).await;
    assert_eq!(
        (seen.to("fast.test"), seen.last_deadline()),
        (3, "250".into())
    );
    send(&layer, &seen, request("GET", "http://slow.test/")).await;
    assert_eq!(
        (seen.to("slow.test"), seen.last_deadline()),
        (3, "5000".into())
    );

    layer
        .reconfigure(|s| {
            let slow = s.hosts.get_mut("slow.test:80").expect("the host's own");
            slow.attempt_timeout = Some(Duration::from_secs(1));
        })
        .expect("valid");
    send(&layer, &seen, request("GET", "http://slow.test/")).await;
    assert_eq!(seen.last_deadline(), "1000");
    assert_eq!(
        layer
            .host_settings("slow.test:80")
            .and_then(|s| s.attempt_timeout),
        Some(Duration::from_secs(1))
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_already_running_keeps_the_attempts_it_started_with() {
    let layer = two_attempts().build().expect("valid layer");
    let seen = Seen::default();
    // The first attempt takes 100ms: the update lands while it runs.
    let client = layer.layer(failing(&seen, Duration::from_millis(100)));
    let running = tokio::spawn(client.oneshot(request("GET", "http://known.test/")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(seen.to("known.test"), 1, "the first attempt is in flight");

    layer.reconfigure(|s| s.max_attempts = 5).expect("valid");
    let response = running.await.expect("not panicked").expect("a response");
    assert_eq!(response.status(), 503);
    assert_eq!(seen.to("known.test"), 2, "the running request's 2 attempts");

    send(&layer, &seen, request("GET", "http://known.test/")).await;
    assert_eq!(seen.to("known.test"), 2 + 5);
}

#[tokio::test(start_paused = true)]
async fn a_refused_reconfigure_changes_nothing_and_names_every_problem() {
    let layer = two_attempts()
        .host("reports.test", |p| p.total_timeout(Duration::from_secs(30)))
        .build()
        .expect("valid layer");
    let seen = Seen::default();
    send(&layer, &seen, request("GET", "http://known.test/")).await;

    let refused = layer
        .reconfigure(|s| {
            s.max_attempts = 1;
            s.policy.total_timeout = Some(Duration::ZERO);
            s.policy.backoff = Backoff::exponential(Duration::from_millis(10)).factor(0.5);
            let reports = s.hosts.get_mut("reports.test:80").expect("the host's own");
            reports.attempt_timeout = Some(Duration::ZERO);
        })
        .expect_err("invalid settings");
    let problems: Vec<String> = refused.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        problems,
        [
            "max_attempts must stay above 1 (was 1): the layer was built to retry, and each host's retry budget and hedge are made with it; build the layer again to send every request once",
            "policy.total_timeout must be positive (was 0ns)",
            "policy.backoff.factor must be finite and at least 1 (was 0.5)",
            "hosts.\"reports.test:80\".attempt_timeout must be positive (was 0ns)",
        ]
    );

    let settings = layer.settings();
    assert_eq!(settings.max_attempts, 2);
    assert_eq!(settings.policy.total_timeout, Some(Duration::from_secs(10)));
    assert_eq!(
        settings.hosts["reports.test:80"].total_timeout,
        Some(Duration::from_secs(30))
    );
    send(&layer, &seen, request("GET", "http://known.test/")).await;
    assert_eq!(seen.to("known.test"), 2 + 2);
}

#[test]
fn a_layer_built_to_send_once_refuses_to_retry_live() {
    let layer = OutboundLayer::builder()
        .max_attempts(1)
        .build()
        .expect("valid layer");
    let refused = layer
        .reconfigure(|s| s.max_attempts = 3)
        .expect_err("no budget to retry on");
    assert_eq!(
        refused.to_string(),
        "max_attempts must stay 1 (was 3): the layer was built with one attempt, so its hosts have no retry budget; build the layer again with more attempts to retry"
    );
    assert_eq!(layer.settings().max_attempts, 1);
}
