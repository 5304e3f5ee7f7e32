//! The outbound layer against an in-process upstream on paused time: the headers every
//! attempt carries, what is retried, Retry-After, breakers per host and the host table.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use rampart::backoff::Backoff;
use rampart::breaker::{Breaker, StateKind};
use rampart::{Ambient, Criticality, Deadline, Instant, PolicyBuilder, RejectReason};
use rampart_http::{
    ClientError, EdgeEvent, OutboundBuilder, OutboundLayer, Repeatable, ReplayBody,
};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

type UpstreamRequest = Request<ReplayBody<Full<Bytes>>>;

/// One request the upstream received.
#[derive(Debug, Clone)]
struct Call {
    at: Instant,
    host: String,
    uri: String,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
}

impl Call {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii").to_owned())
    }
}

/// What the upstream answers, after how long.
struct Reply {
    status: u16,
    retry_after: Option<&'static str>,
    delay: Duration,
    headers: &'static [(&'static str, &'static str)],
}

fn reply(status: u16) -> Reply {
    Reply {
        status,
        retry_after: None,
        delay: Duration::ZERO,
        headers: &[],
    }
}

/// A trailers-only gRPC answer: HTTP 200 with the status (and more) in the headers.
fn grpc_reply(headers: &'static [(&'static str, &'static str)]) -> Reply {
    Reply {
        headers,
        ..reply(200)
    }
}

type Script = dyn Fn(usize, &Call) -> Reply + Send + Sync;

/// An in-process upstream that records every request and answers by script.
#[derive(Clone)]
struct Upstream {
    calls: Arc<Mutex<Vec<Call>>>,
    script: Arc<Script>,
}

impl Upstream {
    fn new(script: impl Fn(usize, &Call) -> Reply + Send + Sync + 'static) -> Self {
        Upstream {
            calls: Arc::default(),
            script: Arc::new(script),
        }
    }

    fn service(
        &self,
    ) -> impl Service<
        UpstreamRequest,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future: Send,
    > + Clone
    + Send
    + 'static {
        let upstream = self.clone();
        tower::service_fn(move |request: UpstreamRequest| {
            let upstream = upstream.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.expect("infallible").to_bytes();
                let call = Call {
                    at: Instant::now(),
                    host: parts.uri.host().unwrap_or_default().to_owned(),
                    uri: parts.uri.to_string(),
                    method: parts.method,
                    headers: parts.headers,
                    body,
                };
                let reply = {
                    let mut calls = upstream.calls.lock().expect("calls");
                    let reply = (upstream.script)(calls.len(), &call);
                    calls.push(call);
                    reply
                };
                tokio::time::sleep(reply.delay).await;
                let mut response = Response::builder().status(reply.status);
                if let Some(after) = reply.retry_after {
                    response = response.header("retry-after", after);
                }
                for (name, value) in reply.headers {
                    response = response.header(*name, *value);
                }
                Ok::<_, Infallible>(response.body(Full::default()).expect("valid response"))
            }
        })
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls").clone()
    }

    fn header(&self, name: &str) -> Vec<Option<String>> {
        self.calls().iter().map(|c| c.header(name)).collect()
    }
}

fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri)
        .body(Full::default())
        .expect("valid request")
}

fn quick(p: PolicyBuilder) -> PolicyBuilder {
    p.total_timeout(Duration::from_secs(10))
        .no_attempt_timeout()
        .backoff(Backoff::none())
}

fn layer(builder: OutboundBuilder) -> OutboundLayer {
    builder.build().expect("valid outbound layer")
}

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
async fn one_failing_host_opens_its_own_breaker_and_not_another_hosts() {
    let upstream = Upstream::new(|_, call| reply(if call.host == "bad.test" { 500 } else { 200 }));
    let client = layer(
        OutboundLayer::builder()
            .max_attempts(1)
            .breaker(Breaker::builder().consecutive_failures(2).jitter(0.0))
            .policy(quick),
    )
    .layer(upstream.service());
    for _ in 0..2 {
        let response = client
            .clone()
            .oneshot(get("http://bad.test/"))
            .await
            .expect("a response");
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    let error = client
        .clone()
        .oneshot(get("http://bad.test/"))
        .await
        .expect_err("breaker open");
    assert!(matches!(
        error,
        ClientError::Call(rampart::Error::Rejected {
            reason: RejectReason::DependencyUnavailable,
            ..
        })
    ));
    assert_eq!(error.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(error.retry_after().is_some());
    for _ in 0..3 {
        let response = client
            .clone()
            .oneshot(get("http://good.test/"))
            .await
            .expect("a response");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let hosts: Vec<_> = upstream.calls().into_iter().map(|c| c.host).collect();
    assert_eq!(
        hosts,
        [
            "bad.test",
            "bad.test",
            "good.test",
            "good.test",
            "good.test"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_host_table_is_bounded_and_evicts_a_host_not_seen_lately() {
    let upstream = Upstream::new(|_, call| reply(if call.host == "a.test" { 500 } else { 200 }));
    let outbound = layer(
        OutboundLayer::builder()
            .max_attempts(1)
            .max_hosts(2)
            .breaker(Breaker::builder().consecutive_failures(1).jitter(0.0))
            .policy(quick),
    );
    let client = outbound.layer(upstream.service());
    let call = |uri: &'static str| client.clone().oneshot(get(uri));
    call("http://a.test/").await.expect("sent");
    assert!(call("http://a.test/").await.is_err(), "a's breaker is open");
    call("http://b.test/").await.expect("sent");
    // The table is full: c evicts b, seen once, and a, seen again, gets a second chance.
    call("http://c.test/").await.expect("sent");
    assert_eq!(outbound.hosts(), 2);
    assert!(outbound.breaker("b.test:80").is_none(), "b was evicted");
    assert!(outbound.breaker("a.test:80").is_some(), "a was kept");
    // d evicts a, not seen since its second chance, and its open breaker with it.
    call("http://d.test/").await.expect("sent");
    assert!(outbound.breaker("a.test:80").is_none(), "a was evicted");
    call("http://a.test/")
        .await
        .expect("sent with a new breaker");
    let hosts: Vec<_> = upstream.calls().into_iter().map(|c| c.host).collect();
    assert_eq!(hosts, ["a.test", "b.test", "c.test", "d.test", "a.test"]);
}

#[tokio::test(start_paused = true)]
async fn a_service_that_keeps_calling_one_host_keeps_it_in_the_table() {
    let upstream = Upstream::new(|_, _| reply(200));
    let outbound = layer(OutboundLayer::builder().max_hosts(2).policy(quick));
    // One service calling a, through the host it keeps (no table lookup on most requests).
    let mut steady = outbound.layer(upstream.service());
    let mut others = outbound.layer(upstream.service());
    for uri in [
        "http://a.test/",
        "http://a.test/",
        "http://a.test/",
        "http://b.test/", // by the other service
        "http://c.test/", // evicts b
        "http://a.test/",
        "http://d.test/", // evicts c
        "http://a.test/",
        "http://e.test/", // evicts d
    ] {
        let service = if uri == "http://a.test/" {
            &mut steady
        } else {
            &mut others
        };
        ServiceExt::ready(&mut *service)
            .await
            .expect("ready")
            .call(get(uri))
            .await
            .expect("a response");
        if uri == "http://a.test/" {
            assert!(outbound.breaker("a.test:80").is_some(), "a is in the table");
        }
    }
    assert!(outbound.breaker("a.test:80").is_some(), "a stayed");
    assert_eq!(outbound.hosts(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_kept_host_serves_only_its_own_scheme_and_port() {
    // The service keeps a.test:80, its breaker open; the same name on another scheme or port
    // is another host, with its own breaker, and the kept one still refuses.
    let upstream = Upstream::new(|_, call| {
        reply(if call.uri.starts_with("http://a.test/") {
            500
        } else {
            200
        })
    });
    let outbound = layer(
        OutboundLayer::builder()
            .max_attempts(1)
            .breaker(Breaker::builder().consecutive_failures(1).jitter(0.0))
            .policy(quick),
    );
    let mut client = outbound.layer(upstream.service());
    let mut send = async |uri: &str| {
        ServiceExt::ready(&mut client)
            .await
            .expect("ready")
            .call(get(uri))
            .await
    };
    send("http://a.test/").await.expect("sent, answered 500");
    assert!(
        send("http://a.test/").await.is_err(),
        "a.test:80's breaker is open"
    );
    // Each other URI comes right after a request to a.test:80, the host the service keeps.
    for other in ["https://a.test/", "http://a.test:8080/", "http://A.test/"] {
        assert!(
            send("http://a.test/").await.is_err(),
            "a.test:80 still refuses"
        );
        let response = send(other).await;
        if other == "http://A.test/" {
            assert!(response.is_err(), "{other} is a.test:80, its breaker open");
        } else {
            assert_eq!(response.expect("sent").status(), StatusCode::OK, "{other}");
        }
    }
    assert!(
        send("http://a.test:80/").await.is_err(),
        "a.test:80 by its explicit port"
    );
    assert!(outbound.breaker("a.test:443").is_some() && outbound.breaker("a.test:8080").is_some());
    let sent: Vec<_> = upstream.calls().into_iter().map(|c| c.uri).collect();
    assert_eq!(
        sent,
        ["http://a.test/", "https://a.test/", "http://a.test:8080/"]
    );
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

fn grpc_post(headers: &[(&'static str, &'static str)]) -> Request<Full<Bytes>> {
    let mut request = Request::post("http://a.test/pkg.Service/Method")
        .header("content-type", "application/grpc");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Full::default()).expect("valid request");
    request.extensions_mut().insert(Repeatable);
    request
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

#[tokio::test(start_paused = true)]
async fn one_hosts_breaker_can_be_read_and_reset() {
    let upstream = Upstream::new(|n, _| reply(if n < 2 { 500 } else { 200 }));
    let layer = layer(
        OutboundLayer::builder()
            .max_attempts(1)
            .breaker(Breaker::builder().consecutive_failures(2).jitter(0.0))
            .policy(quick),
    );
    let client = layer.layer(upstream.service());
    assert!(layer.breaker("bad.test:80").is_none(), "no such host yet");
    for _ in 0..2 {
        client
            .clone()
            .oneshot(get("http://bad.test/"))
            .await
            .expect("a response");
    }
    let breaker = layer.breaker("bad.test:80").expect("the host's breaker");
    assert_eq!(breaker.state(Instant::now()).kind(), StateKind::Open);
    breaker.reset(Instant::now());
    let response = client
        .oneshot(get("http://bad.test/"))
        .await
        .expect("sent again after the reset");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(upstream.calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_hosts_own_settings_apply_to_that_host_only() {
    let upstream = Upstream::new(|_, _| reply(200));
    let client = layer(
        OutboundLayer::builder()
            .policy(quick)
            .host("slow.test:80", |p| p.total_timeout(Duration::from_secs(60))),
    )
    .layer(upstream.service());
    for uri in ["http://slow.test/", "http://fast.test/"] {
        client.clone().oneshot(get(uri)).await.expect("a response");
    }
    assert_eq!(
        upstream.header("x-deadline-ms"),
        [Some("60000".into()), Some("10000".into())]
    );
}

#[test]
fn a_hosts_invalid_settings_are_reported_by_build_naming_the_host() {
    let error = OutboundLayer::builder()
        .host("bad.test:80", |p| p.total_timeout(Duration::ZERO))
        .build()
        .expect_err("invalid");
    assert_eq!(
        error.problems()[0].field(),
        "host(bad.test:80).total_timeout"
    );
    assert!(
        error
            .to_string()
            .starts_with("host(bad.test:80).total_timeout must be"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn named_host_keys_are_read_as_the_keys_made_from_uris() {
    let upstream = Upstream::new(|_, _| reply(200));
    let layer = layer(
        OutboundLayer::builder()
            .policy(quick)
            .host("Slow.Test", |p| p.total_timeout(Duration::from_secs(60))),
    );
    let client = layer.clone().layer(upstream.service());
    let response = client
        .oneshot(get("http://slow.test/"))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        upstream.header("x-deadline-ms"),
        [Some("60000".into())],
        "the host's own deadline applied"
    );
    assert!(layer.breaker("SLOW.test:80").is_some(), "found in any case");
    assert!(
        layer.breaker("slow.test").is_some(),
        "found without its port"
    );
}
