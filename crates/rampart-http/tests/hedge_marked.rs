//! Hedging per request (`OutboundBuilder::hedge_marked` and the `Hedged` mark): the marked
//! requests hedge, the others do not, and all of them share their host's one entry, breaker
//! and retry budget. Paused time, against an in-process upstream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use rampart::backoff::Backoff;
use rampart::breaker::{Breaker, StateKind};
use rampart::budget::RetryBudget;
use rampart::hedge::Hedge;
use rampart::{Instant, RejectReason, StopReason};
use rampart_http::{CallReport, ClientError, Hedged, OutboundBuilder, OutboundLayer, ReplayBody};
use tower::ServiceExt;
use tower_layer::Layer;

const MS: Duration = Duration::from_millis(1);
const HOST: &str = "prices.test:80";

/// One request the upstream received: when, and whether it carried the retry mark.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    at: Instant,
    retry: bool,
}

/// An upstream that answers its `n`th request (from 0) as `script(n)` says: a status, after
/// a delay.
#[derive(Clone)]
struct Upstream {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<dyn Fn(usize) -> (u16, Duration) + Send + Sync>,
}

impl Upstream {
    fn new(script: impl Fn(usize) -> (u16, Duration) + Send + Sync + 'static) -> Self {
        Upstream {
            seen: Arc::default(),
            script: Arc::new(script),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    fn service(
        &self,
    ) -> impl tower::Service<
        Request<ReplayBody<Full<Bytes>>>,
        Response = Response<Full<Bytes>>,
        Error = std::convert::Infallible,
        Future: Send,
    > + Clone
    + Send
    + 'static {
        let upstream = self.clone();
        tower::service_fn(move |request: Request<ReplayBody<Full<Bytes>>>| {
            let upstream = upstream.clone();
            async move {
                let (status, delay) = {
                    let mut seen = upstream.seen.lock().expect("seen");
                    seen.push(Seen {
                        at: Instant::now(),
                        retry: request.headers().contains_key("x-rampart-retry"),
                    });
                    (upstream.script)(seen.len() - 1)
                };
                tokio::time::sleep(delay).await;
                Ok(Response::builder()
                    .status(status)
                    .body(Full::default())
                    .expect("valid response"))
            }
        })
    }
}

fn get(hedged: bool) -> Request<Full<Bytes>> {
    let mut request = Request::get("http://prices.test/quote")
        .body(Full::default())
        .expect("valid request");
    if hedged {
        request.extensions_mut().insert(Hedged);
    }
    request
}

/// A layer that hedges marked requests after 20 ms, with no backoff.
fn hedging(builder: OutboundBuilder) -> OutboundLayer {
    builder
        .hedge_marked(Hedge::fixed(20 * MS))
        .policy(|p| {
            p.total_timeout(Duration::from_secs(5))
                .attempt_timeout(Duration::from_secs(1))
                .backoff(Backoff::none())
        })
        .build()
        .expect("valid outbound layer")
}

#[tokio::test(start_paused = true)]
async fn a_marked_request_fires_a_hedge_and_an_unmarked_one_waits_for_its_only_attempt() {
    // Every first leg is slow; a hedge answers at once.
    let upstream = Upstream::new(|n| match n {
        0 | 2 => (200, 100 * MS),
        _ => (200, Duration::ZERO),
    });
    let layer = hedging(OutboundLayer::builder());
    let client = layer.layer(upstream.service());
    let start = Instant::now();

    let response = client.clone().oneshot(get(true)).await.expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(Instant::now() - start, 20 * MS, "the hedge answered");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].at - seen[0].at, 20 * MS);
    assert_eq!((seen[0].retry, seen[1].retry), (false, true));

    let start = Instant::now();
    client.oneshot(get(false)).await.expect("answered");
    assert_eq!(Instant::now() - start, 100 * MS, "no hedge");
    assert_eq!(upstream.seen().len(), 3);
    assert_eq!(layer.hosts(), 1, "one host entry for both");
}

#[tokio::test(start_paused = true)]
async fn a_response_won_by_the_hedge_carries_a_report_of_two_attempts() {
    let upstream = Upstream::new(|n| match n {
        0 => (200, 100 * MS),
        _ => (200, Duration::ZERO),
    });
    let client = hedging(OutboundLayer::builder()).layer(upstream.service());

    let response = client.oneshot(get(true)).await.expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    let report = response
        .extensions()
        .get::<CallReport>()
        .expect("a hedged response carries its report");
    assert_eq!(report.stop(), StopReason::Succeeded);
    assert_eq!(report.attempts(), 2, "the first leg was sent too");
    let logged: Vec<u32> = report.log().iter().map(|record| record.number).collect();
    assert_eq!(logged, [2], "the first leg was dropped unended");
}

#[tokio::test(start_paused = true)]
async fn a_response_of_the_first_leg_after_a_hedge_was_sent_carries_a_report_of_two_attempts() {
    // The first leg answers 10 ms after the hedge started; the hedge would take 100 ms.
    let upstream = Upstream::new(|n| match n {
        0 => (200, 30 * MS),
        _ => (200, 100 * MS),
    });
    let client = hedging(OutboundLayer::builder()).layer(upstream.service());

    let response = client.oneshot(get(true)).await.expect("answered");
    assert_eq!(upstream.seen().len(), 2, "the hedge was sent");
    let report = response
        .extensions()
        .get::<CallReport>()
        .expect("a hedged response carries its report");
    assert_eq!(report.attempts(), 2);
    assert_eq!(report.log().last().map(|record| record.number), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_marked_request_answered_before_its_hedge_was_due_carries_no_report() {
    let upstream = Upstream::new(|_| (200, 5 * MS));
    let client = hedging(OutboundLayer::builder()).layer(upstream.service());

    let response = client.oneshot(get(true)).await.expect("answered");
    assert_eq!(upstream.seen().len(), 1, "no hedge was sent");
    assert!(response.extensions().get::<CallReport>().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_hedge_of_a_marked_request_spends_the_budget_a_plain_retry_then_finds_empty() {
    // One token, never refilled: the hedge takes it.
    let upstream = Upstream::new(|n| match n {
        0 => (200, 100 * MS),
        1 => (200, Duration::ZERO),
        _ => (503, Duration::ZERO),
    });
    let layer = hedging(
        OutboundLayer::builder()
            .budget_per_host(RetryBudget::builder().fraction(0.0).min_per_sec(0.0)),
    );
    let client = layer.layer(upstream.service());

    client.clone().oneshot(get(true)).await.expect("answered");
    assert_eq!(upstream.seen().len(), 2, "the hedge fired");
    let budget = layer.budget(HOST).expect("the host's budget");
    assert_eq!(budget.balance(Instant::now()), 0.0);

    let response = client.oneshot(get(false)).await.expect("the 503");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let report = response.extensions().get::<CallReport>().expect("a report");
    assert_eq!(report.stop(), StopReason::BudgetExhausted);
    assert_eq!(
        upstream.seen().len(),
        3,
        "the plain request's retry was not sent"
    );
}

#[tokio::test(start_paused = true)]
async fn plain_and_marked_failures_open_one_breaker_that_refuses_both() {
    let upstream = Upstream::new(|_| (500, Duration::ZERO));
    let layer = hedging(
        OutboundLayer::builder()
            .max_attempts(2)
            .breaker_per_host(Breaker::builder().consecutive_failures(3)),
    );
    let client = layer.layer(upstream.service());

    // Two failures of a plain request (its attempt and its retry), then the first of a
    // marked one: three in a row on the host's one breaker.
    client.clone().oneshot(get(false)).await.expect("the 500");
    let breaker = layer.breaker(HOST).expect("the host's breaker");
    assert_eq!(breaker.state(Instant::now()).kind(), StateKind::Closed);
    client.clone().oneshot(get(true)).await.expect("the 500");
    assert_eq!(
        upstream.seen().len(),
        3,
        "the marked request's retry was refused"
    );
    assert_eq!(breaker.state(Instant::now()).kind(), StateKind::Open);

    for hedged in [false, true] {
        let error = client
            .clone()
            .oneshot(get(hedged))
            .await
            .expect_err("refused");
        assert!(
            matches!(
                error,
                ClientError::Call(rampart::Error::Rejected {
                    reason: RejectReason::DependencyUnavailable,
                    ..
                })
            ),
            "{error:?}"
        );
    }
    assert_eq!(upstream.seen().len(), 3, "nothing sent while open");
}

#[test]
fn a_hedging_layer_gets_a_budget_sized_for_hedges_unless_one_is_given() {
    let budget_of = |layer: OutboundLayer| {
        let upstream = Upstream::new(|_| (200, Duration::ZERO));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let client = layer.layer(upstream.service());
            client.oneshot(get(false)).await.expect("answered");
        });
        layer.budget(HOST).expect("a budget").fraction()
    };
    let plain = OutboundLayer::builder().build().expect("valid");
    assert_eq!(budget_of(plain), 0.2);
    let marked = OutboundLayer::builder()
        .hedge_marked(Hedge::adaptive())
        .build()
        .expect("valid");
    assert_eq!(budget_of(marked), 0.25);
    let every = OutboundLayer::builder()
        .hedge(Hedge::adaptive())
        .build()
        .expect("valid");
    assert_eq!(budget_of(every), 0.25);
    let given = OutboundLayer::builder()
        .hedge(Hedge::adaptive())
        .budget_per_host(RetryBudget::builder().fraction(0.2))
        .build()
        .expect("valid");
    assert_eq!(budget_of(given), 0.2);
}
