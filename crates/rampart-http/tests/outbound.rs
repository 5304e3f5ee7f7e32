//! The outbound layer against an in-process upstream on paused time: the headers every
//! attempt carries, what is retried, Retry-After, a caller's deadline, hedged legs. gRPC over
//! the layer is in `outbound_grpc.rs`, the host table and per-host breakers and settings in
//! `outbound_hosts.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use rampart::backoff::Backoff;
use rampart::{Ambient, Criticality, Deadline, Instant};
use rampart_http::{EdgeEvent, OutboundLayer, Repeatable};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

#[path = "support/upstream.rs"]
mod upstream;

use upstream::*;

#[tokio::test(start_paused = true)]
async fn each_attempt_carries_the_time_left_on_the_deadline() {
    let upstream = Upstream::new(|_, _| Reply {
        delay: Duration::from_secs(2),
        ..reply(503)
    });
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let response = client
        .oneshot(get("http://a.test/"))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        upstream.header("x-deadline-ms"),
        [
            Some("10000".into()),
            Some("8000".into()),
            Some("6000".into())
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn each_attempt_carries_its_ceiling_when_the_attempt_timeout_is_shorter() {
    let upstream = Upstream::new(|_, _| Reply {
        delay: Duration::from_secs(2),
        ..reply(500)
    });
    let client = layer(
        OutboundLayer::builder().policy(|p| quick(p).attempt_timeout(Duration::from_secs(3))),
    )
    .layer(upstream.service());
    client
        .oneshot(get("http://a.test/"))
        .await
        .expect("a response");
    assert_eq!(
        upstream.header("x-deadline-ms"),
        vec![Some("3000".to_owned()); 3]
    );
}

#[tokio::test(start_paused = true)]
async fn the_ambient_deadline_bounds_what_is_written() {
    let upstream = Upstream::new(|_, _| reply(200));
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    Deadline::after(Duration::from_millis(1234))
        .scope(client.oneshot(get("http://a.test/")))
        .await
        .expect("a response");
    assert_eq!(upstream.header("x-deadline-ms"), [Some("1234".into())]);
}

#[tokio::test(start_paused = true)]
async fn an_expired_ambient_deadline_sends_nothing() {
    let upstream = Upstream::new(|_, _| reply(200));
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let deadline = Deadline::after(Duration::from_millis(5));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let error = deadline
        .scope(client.oneshot(get("http://a.test/")))
        .await
        .expect_err("expired");
    assert!(error.is_timeout(), "{error}");
    assert_eq!(error.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(upstream.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn criticality_and_the_retry_mark_replace_what_the_caller_wrote() {
    let upstream = Upstream::new(|n, _| reply(if n < 2 { 500 } else { 200 }));
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let mut request = get("http://a.test/");
    let headers = request.headers_mut();
    headers.insert("x-criticality", "CriticalPlus".parse().expect("valid"));
    headers.insert("x-rampart-retry", "1".parse().expect("valid"));
    headers.insert("x-deadline-ms", "999999".parse().expect("valid"));
    client.oneshot(request).await.expect("a response");
    let calls = upstream.calls();
    assert_eq!(calls.len(), 3);
    for call in &calls {
        assert_eq!(call.header("x-criticality").as_deref(), Some("Critical"));
        assert_eq!(call.headers.get_all("x-deadline-ms").iter().count(), 1);
    }
    assert_eq!(calls[0].header("x-deadline-ms").as_deref(), Some("10000"));
    assert_eq!(
        upstream.header("x-rampart-retry"),
        [None, Some("1".into()), Some("1".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn an_unlabeled_call_sends_critical_and_a_labeled_one_its_level() {
    let upstream = Upstream::new(|_, _| reply(200));
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    client
        .clone()
        .oneshot(get("http://a.test/"))
        .await
        .expect("a response");
    Criticality::Sheddable
        .scope(client.oneshot(get("http://a.test/")))
        .await
        .expect("a response");
    assert_eq!(
        upstream.header("x-criticality"),
        [Some("Critical".into()), Some("Sheddable".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_503_with_retry_after_is_retried_after_it() {
    let upstream = Upstream::new(|n, _| match n {
        0 => Reply {
            retry_after: Some("1"),
            ..reply(503)
        },
        _ => reply(200),
    });
    let client = layer(OutboundLayer::builder().policy(|p| {
        p.total_timeout(Duration::from_secs(10))
            .backoff(Backoff::exponential(Duration::from_millis(10)))
    }))
    .layer(upstream.service());
    let response = client
        .oneshot(get("http://a.test/"))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    let calls = upstream.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].at - calls[0].at, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_post_is_sent_once_and_a_marked_post_is_retried_with_the_same_body() {
    let upstream = Upstream::new(|_, _| reply(500));
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let post = || {
        Request::post("http://a.test/orders")
            .body(Full::new(Bytes::from_static(b"{\"sku\":42}")))
            .expect("valid request")
    };
    let response = client.clone().oneshot(post()).await.expect("a response");
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(upstream.calls().len(), 1);

    let mut marked = post();
    marked.extensions_mut().insert(Repeatable);
    client.oneshot(marked).await.expect("a response");
    let calls = upstream.calls();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|c| c.method == Method::POST));
    assert!(calls.iter().all(|c| c.body == "{\"sku\":42}"));
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_replay_limit_gets_one_attempt_and_an_event() {
    let upstream = Upstream::new(|_, _| reply(500));
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let client = layer(
        OutboundLayer::builder()
            .policy(quick)
            .replay_limit(4)
            .listener(move |e: &EdgeEvent<'_>| {
                if let EdgeEvent::NotReplayable { host, limit } = e {
                    seen.lock().expect("events").push(format!("{host} {limit}"));
                }
            }),
    )
    .layer(upstream.service());
    let request = Request::put("http://a.test/blob")
        .body(Full::new(Bytes::from_static(b"0123456789")))
        .expect("valid request");
    client.oneshot(request).await.expect("a response");
    let calls = upstream.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body, "0123456789");
    assert_eq!(*events.lock().expect("events"), ["a.test:80 4"]);
}

#[tokio::test(start_paused = true)]
async fn inside_a_request_that_arrived_as_a_retry_a_call_attempts_once() {
    let upstream = Upstream::new(|_, _| reply(503));
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let client = layer(OutboundLayer::builder().policy(quick).listener(
        move |e: &EdgeEvent<'_>| {
            if let EdgeEvent::RetriesSuppressed { host, method } = e {
                seen.lock()
                    .expect("events")
                    .push(format!("{method} {host}"));
            }
        },
    ))
    .layer(upstream.service());
    let response = Ambient::new()
        .with_inbound_retry()
        .scope(client.oneshot(get("http://a.test/")))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(upstream.calls().len(), 1);
    assert_eq!(*events.lock().expect("events"), ["GET a.test:80"]);
}

#[tokio::test(start_paused = true)]
async fn each_hedged_leg_carries_its_own_deadline_and_the_retry_mark() {
    let upstream = Upstream::new(|n, _| Reply {
        delay: if n == 0 {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(10)
        },
        ..reply(200)
    });
    let client = layer(
        OutboundLayer::builder()
            .hedge(rampart::hedge::Hedge::fixed(Duration::from_millis(100)))
            .policy(|p| {
                p.total_timeout(Duration::from_secs(2))
                    .attempt_timeout(Duration::from_millis(1500))
                    .drain(&rampart::drain::Drain::new())
            }),
    )
    .layer(upstream.service());
    let started = Instant::now();
    let response = client
        .oneshot(get("http://a.test/"))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(110),
        "the hedge won"
    );
    assert_eq!(
        upstream.header("x-deadline-ms"),
        [Some("1500".into()), Some("1500".into())]
    );
    assert_eq!(upstream.header("x-rampart-retry"), [None, Some("1".into())]);
}

#[test]
fn invalid_policy_settings_are_reported_by_build() {
    let error = OutboundLayer::builder()
        .max_attempts(0)
        .policy(|p| p.total_timeout(Duration::ZERO))
        .build()
        .expect_err("invalid");
    let fields: Vec<_> = error.problems().iter().map(|p| p.field()).collect();
    assert_eq!(fields, ["max_attempts", "total_timeout"]);
}

#[test]
fn the_response_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let upstream = Upstream::new(|_, _| reply(200));
    let mut client = OutboundLayer::new().layer(upstream.service());
    let future = client.call(get("http://a.test/"));
    assert_send(&future);
}

#[tokio::test(start_paused = true)]
async fn a_malformed_caller_deadline_is_ignored_and_not_forwarded_by_any_attempt() {
    let upstream = Upstream::new(|n, _| reply(if n == 0 { 500 } else { 200 }));
    // No deadline and no attempt timeout: nothing bounds the call, so nothing is written.
    let client = layer(OutboundLayer::builder().policy(|p| {
        p.no_total_timeout()
            .no_attempt_timeout()
            .backoff(Backoff::none())
    }))
    .layer(upstream.service());
    let mut request = get("http://a.test/");
    request
        .headers_mut()
        .insert("x-deadline-ms", "soon".parse().expect("valid"));
    let response = client.oneshot(request).await.expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(upstream.header("x-deadline-ms"), [None, None]);
}

#[tokio::test(start_paused = true)]
async fn a_callers_smaller_deadline_is_kept_and_a_larger_one_cut_to_the_time_left() {
    let upstream = Upstream::new(|_, _| reply(200));
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let mut small = get("http://a.test/");
    small
        .headers_mut()
        .insert("x-deadline-ms", "250".parse().expect("valid"));
    client.clone().oneshot(small).await.expect("a response");
    let mut large = get("http://a.test/");
    large
        .headers_mut()
        .insert("x-deadline-ms", "999999".parse().expect("valid"));
    client.clone().oneshot(large).await.expect("a response");
    client
        .oneshot(grpc_post(&[("grpc-timeout", "100m")]))
        .await
        .expect("a response");
    assert_eq!(
        upstream.header("x-deadline-ms"),
        [Some("250".into()), Some("10000".into()), None]
    );
    assert_eq!(
        upstream.calls()[2].header("grpc-timeout").as_deref(),
        Some("100000u")
    );
}

/// `inner`, not ready until `wait` has passed since it was first asked; each clone (the
/// layer clones its service for each attempt) waits anew.
struct SlowToReady<S> {
    inner: S,
    wait: Duration,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S: Clone> Clone for SlowToReady<S> {
    fn clone(&self) -> Self {
        SlowToReady {
            inner: self.inner.clone(),
            wait: self.wait,
            sleep: None,
        }
    }
}

impl<S: Service<R>, R> Service<R> for SlowToReady<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        let wait = self.wait;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(wait)));
        std::task::ready!(sleep.as_mut().poll(cx));
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.inner.call(request)
    }
}

#[tokio::test(start_paused = true)]
async fn the_time_left_is_read_after_a_wait_for_the_service() {
    // Each attempt waits 300 ms for its service before its request is made: the deadline
    // written counts the wait (the attempt's start no longer says the time left).
    let upstream = Upstream::new(|n, _| reply(if n == 0 { 503 } else { 200 }));
    let slow = SlowToReady {
        inner: upstream.service(),
        wait: Duration::from_millis(300),
        sleep: None,
    };
    let client = layer(OutboundLayer::builder().policy(quick)).layer(slow);
    let response = client
        .oneshot(get("http://a.test/"))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        upstream.header("x-deadline-ms"),
        [Some("9700".into()), Some("9400".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn the_time_left_is_read_after_a_wait_in_an_admission_queue() {
    // One attempt at a time: the second request waits in the queue while the first is
    // answered (500 ms), and its deadline counts the wait.
    let upstream = Upstream::new(|_, _| Reply {
        delay: Duration::from_millis(500),
        ..reply(200)
    });
    let limit = rampart::limit::ConcurrencyLimit::new(1).queue(1);
    let built = OutboundLayer::builder().policy(quick).admit(limit).build();
    let client = built
        .expect("valid outbound layer")
        .layer(upstream.service());
    let (first, second) = tokio::join!(
        client.clone().oneshot(get("http://a.test/")),
        client.clone().oneshot(get("http://a.test/")),
    );
    first.expect("a response");
    second.expect("a response");
    assert_eq!(
        upstream.header("x-deadline-ms"),
        [Some("10000".into()), Some("9500".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn the_first_request_sent_after_a_local_refusal_carries_no_retry_mark() {
    // One permit per 100 ms, taken before the call: attempt 1 is refused here (nothing
    // sent), attempt 2 is the first the upstream sees and gets a 503, attempt 3 is refused
    // again, and attempt 4 follows a request that was sent.
    let upstream = Upstream::new(|n, _| reply(if n == 0 { 503 } else { 200 }));
    let limit = rampart::limit::RateLimit::new(1, Duration::from_millis(100)).expect("valid");
    limit.try_acquire(Instant::now()).expect("the one permit");
    let client = OutboundLayer::builder()
        .max_attempts(4)
        .policy(quick)
        .admit(limit)
        .build()
        .expect("valid outbound layer")
        .layer(upstream.service());
    let response = client
        .oneshot(get("http://a.test/"))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        upstream.header("x-rampart-retry"),
        [None, Some("1".into())],
        "the upstream saw no retry mark on the first request it got"
    );
}

#[tokio::test(start_paused = true)]
async fn a_callers_deadline_written_twice_is_replaced_by_one_value() {
    let upstream = Upstream::new(|n, _| reply(if n == 0 { 503 } else { 200 }));
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let mut request = get("http://a.test/");
    request
        .headers_mut()
        .append("x-deadline-ms", "250".parse().expect("valid"));
    request
        .headers_mut()
        .append("x-deadline-ms", "400".parse().expect("valid"));
    client.oneshot(request).await.expect("a response");
    let written: Vec<Vec<String>> = upstream
        .calls()
        .iter()
        .map(|call| {
            call.headers
                .get_all("x-deadline-ms")
                .iter()
                .map(|v| v.to_str().expect("ascii").to_owned())
                .collect()
        })
        .collect();
    // The last value counts; every attempt carries one value.
    assert_eq!(written, [vec!["400".to_owned()], vec!["400".to_owned()]]);
}

#[tokio::test(start_paused = true)]
async fn the_callers_own_deadline_ends_the_call_with_ramparts_timeout() {
    let upstream = Upstream::new(|_, _| Reply {
        delay: Duration::from_millis(250),
        ..grpc_reply(&[("grpc-status", "0")])
    });
    let client = layer(OutboundLayer::builder().policy(quick)).layer(upstream.service());
    let started = Instant::now();
    let error = client
        .oneshot(grpc_post(&[("grpc-timeout", "100m")]))
        .await
        .expect_err("the caller's 100 ms ran out");
    assert!(error.is_timeout(), "{error}");
    assert_eq!(Instant::now() - started, Duration::from_millis(100));
    assert_eq!(upstream.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_that_leaves_less_than_the_min_attempt_time_sends_nothing_more() {
    let upstream = Upstream::new(|_, _| Reply {
        retry_after: Some("9"),
        ..reply(503)
    });
    let client = layer(
        OutboundLayer::builder().policy(|p| quick(p).min_attempt_time(Duration::from_millis(1500))),
    )
    .layer(upstream.service());
    // 10 s deadline, a 9 s Retry-After: the retry would start with 1 s left.
    let response = client
        .oneshot(get("http://a.test/"))
        .await
        .expect("the last response");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(upstream.calls().len(), 1);
}
