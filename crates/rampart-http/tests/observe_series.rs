//! The series rampart's metrics make for the outbound layer (issue 24): none when the layer is
//! built (no phantom validation policy), then per host on its first request, labelled with the
//! layer's name as `policy` and the host as `server.address`; with
//! `metrics_by_host(false)`, one set of series for the whole layer. Each test makes a
//! debugging recorder its thread's recorder for its whole run (the runtime is
//! current-thread): a series is registered on its first use.
#![cfg(feature = "metrics")]

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use rampart_http::{OutboundBuilder, OutboundLayer, ReplayBody};
use tower::ServiceExt;
use tower_layer::Layer;

type UpstreamRequest = Request<ReplayBody<Full<Bytes>>>;

/// A fresh debugging recorder, the thread's recorder while the guard lives.
fn recorded() -> (Snapshotter, metrics::LocalRecorderGuard<'static>) {
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    (
        recorder.snapshotter(),
        metrics::set_default_local_recorder(recorder),
    )
}

/// Every series, moved or not, as `name{key=value,..}`, sorted.
fn series(snapshotter: &Snapshotter) -> Vec<String> {
    let mut all: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, _)| {
            let key = key.key();
            let labels: Vec<_> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            format!("{}{{{}}}", key.name(), labels.join(","))
        })
        .collect();
    all.sort();
    all
}

/// The series of metric `name`, its labels only.
fn of(series: &[String], name: &str) -> Vec<String> {
    series
        .iter()
        .filter_map(|s| s.strip_prefix(name)?.strip_prefix('{'))
        .map(|labels| labels.trim_end_matches('}').to_owned())
        .collect()
}

/// Sends a `GET` to each of `uris` through a layer built from `builder`, over a service that
/// answers 200.
async fn send(builder: OutboundBuilder, uris: &[&str]) {
    let ok = tower::service_fn(|_: UpstreamRequest| async {
        Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    });
    let client = builder.build().expect("valid outbound layer").layer(ok);
    for uri in uris {
        let request = Request::get(*uri)
            .body(Full::<Bytes>::default())
            .expect("valid request");
        let response = client.clone().oneshot(request).await.expect("a response");
        assert_eq!(response.status(), 200);
    }
}

#[tokio::test(start_paused = true)]
async fn building_an_outbound_layer_registers_no_series_and_no_validation_policy() {
    let (snapshotter, _recorder) = recorded();
    let layer = OutboundLayer::builder()
        .name("prices")
        .host("reports.internal:80", |p| p)
        .build()
        .expect("valid outbound layer");
    assert_eq!(series(&snapshotter), Vec::<String>::new());
    drop(layer);
    send(OutboundLayer::builder().name("prices"), &["http://a.test/"]).await;
    let all = series(&snapshotter);
    assert!(!all.is_empty());
    for s in &all {
        assert!(!s.contains("validation"), "{s}");
        assert!(!s.contains("reports.internal"), "{s}");
        if s.starts_with("rampart.") && !s.starts_with("rampart.http.") {
            assert!(s.contains("policy=prices,"), "{s}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_outbound_layers_series_name_the_layer_as_policy_and_the_host_as_server_address() {
    let (snapshotter, _recorder) = recorded();
    send(
        OutboundLayer::builder().name("prices"),
        &["http://a.test/", "http://a.test/", "http://b.test:8080/"],
    )
    .await;
    let all = series(&snapshotter);
    assert_eq!(
        of(&all, "rampart.calls"),
        [
            "policy=prices,server.address=a.test:80,stop_reason=succeeded",
            "policy=prices,server.address=b.test:8080,stop_reason=succeeded",
        ]
    );
    assert_eq!(
        of(&all, "rampart.breaker.state"),
        [
            "policy=prices,server.address=a.test:80,state=closed",
            "policy=prices,server.address=b.test:8080,state=closed",
        ]
    );
    // Per host: calls and attempts, their durations, the breaker's state and the budget's
    // tokens; nothing for what did not happen (no transition, no rejection, no retry).
    assert_eq!(all.len(), 12, "{all:#?}");
    assert!(
        of(&all, "rampart.breaker.transitions").is_empty(),
        "{all:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_metrics_by_host_the_hosts_share_series_with_no_server_address_or_state_gauges() {
    let (snapshotter, _recorder) = recorded();
    send(
        OutboundLayer::builder()
            .name("webhooks")
            .metrics_by_host(false),
        &["http://a.test/", "http://b.test:8080/", "http://c.test/"],
    )
    .await;
    let all = series(&snapshotter);
    assert!(
        all.iter().all(|s| !s.contains("server.address")),
        "{all:#?}"
    );
    assert_eq!(
        of(&all, "rampart.calls"),
        ["policy=webhooks,stop_reason=succeeded"]
    );
    assert!(of(&all, "rampart.breaker.state").is_empty(), "{all:#?}");
    assert!(of(&all, "rampart.budget.tokens").is_empty(), "{all:#?}");
    assert_eq!(all.len(), 4, "{all:#?}");
}
