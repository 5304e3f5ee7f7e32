//! The outbound layer's host table against an in-process upstream on paused time: a breaker
//! per host, the table bounded and evicting a host not seen lately, a kept host reused only
//! for its own scheme and port, and a host's own settings.

use std::time::Duration;

use http::StatusCode;
use rampart::breaker::{Breaker, StateKind};
use rampart::{Instant, RejectReason};
use rampart_http::{ClientError, OutboundLayer};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

#[path = "support/upstream.rs"]
mod upstream;

use upstream::*;

#[tokio::test(start_paused = true)]
async fn one_failing_host_opens_its_own_breaker_and_not_another_hosts() {
    let upstream = Upstream::new(|_, call| reply(if call.host == "bad.test" { 500 } else { 200 }));
    let client = layer(
        OutboundLayer::builder()
            .max_attempts(1)
            .breaker_per_host(Breaker::builder().consecutive_failures(2).jitter(0.0))
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
            .breaker_per_host(Breaker::builder().consecutive_failures(1).jitter(0.0))
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
            .breaker_per_host(Breaker::builder().consecutive_failures(1).jitter(0.0))
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
async fn one_hosts_breaker_can_be_read_and_reset() {
    let upstream = Upstream::new(|n, _| reply(if n < 2 { 500 } else { 200 }));
    let layer = layer(
        OutboundLayer::builder()
            .max_attempts(1)
            .breaker_per_host(Breaker::builder().consecutive_failures(2).jitter(0.0))
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
