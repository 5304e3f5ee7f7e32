//! Quota headers: each form parsed, malformed values ignored, and the outbound layer
//! refusing a host whose quota is spent, on virtual time (paused tokio time, or the policy's
//! manual clock).
//!
//! Longer than the ~600-line guide: one file for the one concern, each quota header form with its
//! table of cases beside the layer's refusals that read them.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use rampart::backoff::Backoff;
use rampart::clock::ManualClock;
use rampart_http::quota::{self, Reading};
use rampart_http::{ClientError, EdgeEvent, OutboundBuilder, OutboundLayer};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

#[path = "support/upstream.rs"]
mod upstream;

use upstream::{Reply, Upstream, UpstreamRequest, get};

type Headers = &'static [(&'static str, &'static str)];

fn headers(pairs: Pairs<'_>) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let name: http::HeaderName = name.parse().expect("valid name");
        map.append(name, HeaderValue::from_bytes(value).expect("valid value"));
    }
    map
}

/// Response headers, as written.
type Pairs<'a> = &'a [(&'a str, &'a [u8])];

/// A reading in whole seconds: remaining, reset, limit, window.
type Read = (u64, Option<u64>, Option<u64>, Option<u64>);

/// What `parse` makes of `pairs`, with the wall clock at 1,700,000,000 s past the epoch.
fn read(pairs: Pairs<'_>) -> Option<Read> {
    let unix_now = Duration::from_secs(1_700_000_000);
    quota::parse(&headers(pairs), unix_now).map(|r: Reading| {
        (
            r.remaining,
            r.reset.map(|d| d.as_secs()),
            r.limit,
            r.window.map(|d| d.as_secs()),
        )
    })
}

#[test]
fn each_header_form_is_parsed() {
    let cases: &[(&str, Pairs<'_>, Read)] = &[
        (
            "current draft, with its policy",
            &[
                ("ratelimit", b"\"default\";r=0;t=30"),
                ("ratelimit-policy", b"\"default\";q=100;w=60"),
            ],
            (0, Some(30), Some(100), Some(60)),
        ),
        (
            "current draft, no policy field",
            &[("ratelimit", b"\"default\";r=7;t=5")],
            (7, Some(5), None, None),
        ),
        (
            "current draft, the binding policy of several (fewest remaining)",
            &[
                ("ratelimit", b"\"burst\";r=5;t=1, \"day\";r=0;t=3600"),
                (
                    "ratelimit-policy",
                    b"\"burst\";q=10;w=1, \"day\";q=1000;w=86400",
                ),
            ],
            (0, Some(3600), Some(1000), Some(86400)),
        ),
        (
            "current draft, equal remaining: the later reset",
            &[("ratelimit", b"a;r=0;t=10,b;r=0;t=40,c;r=0;t=20")],
            (0, Some(40), None, None),
        ),
        (
            "current draft, two field lines read as one list",
            &[
                ("ratelimit", b"\"a\";r=9;t=1"),
                ("ratelimit", b"\"b\";r=2;t=8"),
                ("ratelimit-policy", b"\"b\";q=50"),
            ],
            (2, Some(8), Some(50), None),
        ),
        (
            "current draft, other parameters and spaces skipped",
            &[
                (
                    "ratelimit",
                    b"  \"default\";r=3;t=10;pk=:Zm9vYmFy:;x=?1;y=1.5  ",
                ),
                (
                    "ratelimit-policy",
                    b"\"default\";q=100;qu=\"requests\";w=60",
                ),
            ],
            (3, Some(10), Some(100), Some(60)),
        ),
        (
            "current draft, no reset",
            &[("ratelimit", b"\"default\";r=0")],
            (0, None, None, None),
        ),
        (
            "current draft, an unreadable policy field is left out",
            &[
                ("ratelimit", b"\"default\";r=1;t=2"),
                ("ratelimit-policy", b"\"default\";q=-5"),
            ],
            (1, Some(2), None, None),
        ),
        (
            "draft 07, one dictionary",
            &[("ratelimit", b"limit=100, remaining=0, reset=30")],
            (0, Some(30), Some(100), None),
        ),
        (
            "draft 07, two field lines: a later key overrides, parameters and other keys skipped",
            &[
                ("ratelimit", b"limit=10, remaining=5"),
                ("ratelimit", b"remaining=0;w=1, reset=5, policy=\"day\""),
            ],
            (0, Some(5), Some(10), None),
        ),
        (
            "draft 07, no reset",
            &[("ratelimit", b"remaining=3")],
            (3, None, None, None),
        ),
        (
            "draft 07 before the older drafts' integers",
            &[
                ("ratelimit-remaining", b"9"),
                ("ratelimit", b"remaining=1, reset=2"),
            ],
            (1, Some(2), None, None),
        ),
        (
            "a malformed draft 07 dictionary falls back to X-RateLimit",
            &[
                ("ratelimit", b"remaining=-1, reset=2"),
                ("x-ratelimit-remaining", b"4"),
            ],
            (4, None, None, None),
        ),
        (
            "older drafts",
            &[
                ("ratelimit-limit", b"100"),
                ("ratelimit-remaining", b"0"),
                ("ratelimit-reset", b"30"),
            ],
            (0, Some(30), Some(100), None),
        ),
        (
            "older drafts, a policy after the limit",
            &[
                ("ratelimit-limit", b"100, 100;w=60"),
                ("ratelimit-remaining", b" 42 "),
            ],
            (42, None, Some(100), None),
        ),
        (
            "X-RateLimit, delta seconds",
            &[
                ("x-ratelimit-limit", b"5000"),
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-reset", b"45"),
            ],
            (0, Some(45), Some(5000), None),
        ),
        (
            "X-RateLimit, a Unix timestamp 45 s ahead",
            &[
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-reset", b"1700000045"),
            ],
            (0, Some(45), None, None),
        ),
        (
            "X-RateLimit, a Unix timestamp already past: reset now",
            &[
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-reset", b"1699999000"),
            ],
            (0, Some(0), None, None),
        ),
        (
            "a reset more than a day away is unknown",
            &[
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-reset", b"90000"),
            ],
            (0, None, None, None),
        ),
        (
            "a timestamp in milliseconds is unknown",
            &[
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-reset", b"1700000045000"),
            ],
            (0, None, None, None),
        ),
        (
            "a number past u64 saturates",
            &[
                ("x-ratelimit-remaining", b"99999999999999999999999999"),
                ("x-ratelimit-reset", b"99999999999999999999999999"),
            ],
            (u64::MAX, None, None, None),
        ),
        (
            "the current draft is read before the others",
            &[
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-reset", b"45"),
                ("ratelimit-remaining", b"1"),
                ("ratelimit", b"\"default\";r=9;t=3"),
            ],
            (9, Some(3), None, None),
        ),
        (
            "the older drafts before X-RateLimit",
            &[
                ("x-ratelimit-remaining", b"0"),
                ("ratelimit-remaining", b"1"),
                ("ratelimit-reset", b"2"),
            ],
            (1, Some(2), None, None),
        ),
        (
            "a malformed RateLimit falls back to X-RateLimit",
            &[
                ("ratelimit", b"\"default\";r=zero"),
                ("x-ratelimit-remaining", b"4"),
            ],
            (4, None, None, None),
        ),
    ];
    for (what, pairs, expected) in cases {
        assert_eq!(read(pairs), Some(*expected), "{what}");
    }
}

#[test]
fn malformed_quota_headers_are_ignored() {
    let cases: &[(&str, Pairs<'_>)] = &[
        ("no quota headers", &[("content-type", b"text/plain")]),
        ("negative remaining", &[("ratelimit", b"\"d\";r=-1;t=30")]),
        ("remaining a token", &[("ratelimit", b"\"d\";r=zero;t=30")]),
        ("remaining a decimal", &[("ratelimit", b"\"d\";r=1.5;t=30")]),
        (
            "remaining a string",
            &[("ratelimit", b"\"d\";r=\"0\";t=30")],
        ),
        ("reset negative", &[("ratelimit", b"\"d\";r=0;t=-30")]),
        ("no remaining", &[("ratelimit", b"\"d\";t=30")]),
        ("an unterminated string", &[("ratelimit", b"\"d;r=0;t=30")]),
        ("a bad escape", &[("ratelimit", b"\"d\\x\";r=0;t=30")]),
        ("a trailing comma", &[("ratelimit", b"\"d\";r=0;t=30,")]),
        ("an empty member", &[("ratelimit", b"\"d\";r=0,,\"e\";r=1")]),
        ("an inner list", &[("ratelimit", b"(\"d\");r=0;t=30")]),
        ("an uppercase key", &[("ratelimit", b"\"d\";R=0;t=30")]),
        (
            "sixteen digits",
            &[("ratelimit", b"\"d\";r=1234567890123456")],
        ),
        (
            "one malformed member spoils the field",
            &[("ratelimit", b"\"a\";r=0;t=30, \"b\";r=x")],
        ),
        ("not ASCII", &[("ratelimit", b"\"d\xff\";r=0;t=30")]),
        ("garbage after an item", &[("ratelimit", b"\"d\";r=0 t=30")]),
        (
            "draft 07, no remaining",
            &[("ratelimit", b"limit=10, reset=5")],
        ),
        (
            "draft 07, remaining a token",
            &[("ratelimit", b"remaining=none, reset=5")],
        ),
        (
            "draft 07, reset a decimal",
            &[("ratelimit", b"remaining=0, reset=1.5")],
        ),
        (
            "draft 07, remaining with no value (true)",
            &[("ratelimit", b"remaining, reset=5")],
        ),
        (
            "draft 07, an uppercase key",
            &[("ratelimit", b"Remaining=0, reset=5")],
        ),
        (
            "draft 07, a trailing comma",
            &[("ratelimit", b"remaining=0, reset=5,")],
        ),
        ("X remaining negative", &[("x-ratelimit-remaining", b"-1")]),
        ("X remaining a word", &[("x-ratelimit-remaining", b"ten")]),
        ("X remaining empty", &[("x-ratelimit-remaining", b"")]),
        ("X remaining hex", &[("x-ratelimit-remaining", b"0x10")]),
        (
            "X remaining twice",
            &[
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-remaining", b"5"),
            ],
        ),
        (
            "older remaining a date",
            &[("ratelimit-remaining", b"Wed, 21 Oct 2015")],
        ),
    ];
    for (what, pairs) in cases {
        assert_eq!(read(pairs), None, "{what}");
    }
    // A malformed reset leaves the remaining count, with the reset unknown.
    assert_eq!(
        read(&[
            ("x-ratelimit-remaining", b"0"),
            ("x-ratelimit-reset", b"soon")
        ]),
        Some((0, None, None, None))
    );
}

/// Bytes a quota header might hold: noise, and near misses of each form.
fn quota_bytes() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        "[ -~]{0,40}",
        "[\"a-z;,=:?@()\\\\ .*0-9-]{0,40}",
        " ?\"[a-z]{0,3}\";r=-?[0-9]{0,17};t=-?[0-9]{0,17}(;pk=:[a-z]*:)?(, ?)?",
        " ?-?[0-9]{0,22} ?",
        " ?(limit|remaining|reset)(=-?[0-9.]{0,17})?(;w=[0-9]{0,3})?(, ?(limit|remaining|reset)=-?[0-9]{0,17}){0,3},?",
    ]
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(
        values in proptest::collection::vec(quota_bytes(), 8),
        unix in proptest::prelude::any::<u64>(),
    ) {
        let names = [
            "ratelimit",
            "ratelimit",
            "ratelimit-policy",
            "ratelimit-remaining",
            "ratelimit-reset",
            "ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ];
        let mut map = HeaderMap::new();
        for (name, value) in names.iter().zip(&values) {
            if let Ok(value) = HeaderValue::from_str(value) {
                map.append(*name, value);
            }
        }
        if let Some(reading) = quota::parse(&map, Duration::from_secs(unix)) {
            proptest::prop_assert!(reading.reset.is_none_or(|r| r <= quota::MAX_RESET));
        }
    }
}

/// An upstream answering each request with the status, delay and headers `script` gives for
/// its number and path.
fn scripted(
    script: impl Fn(usize, &str) -> (u16, Duration, Headers) + Send + Sync + 'static,
) -> Upstream {
    Upstream::new(move |n, call| {
        let (status, delay, headers) = script(n, &call.path);
        Reply {
            status,
            delay,
            headers,
            retry_after: None,
        }
    })
}

const SPENT_30S: Headers = &[("ratelimit", "\"default\";r=0;t=30")];
const LEFT_5: Headers = &[("ratelimit", "\"default\";r=5;t=30")];

fn quick(builder: OutboundBuilder) -> OutboundLayer {
    builder
        .policy(|p| {
            p.total_timeout(Duration::from_secs(60))
                .no_attempt_timeout()
                .backoff(Backoff::none())
        })
        .build()
        .expect("valid outbound layer")
}

/// The refusal's retry-after, or a panic if the outcome was anything else.
fn refused<T>(outcome: Result<T, ClientError<Infallible>>) -> Duration {
    match outcome {
        Err(ClientError::QuotaSpent { retry_after, .. }) => retry_after,
        Err(e) => panic!("expected a quota refusal, got {e}"),
        Ok(_) => panic!("expected a quota refusal, got a response"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_spent_quota_refuses_locally_without_reaching_the_upstream() {
    let upstream = scripted(|_, _| (200, Duration::ZERO, SPENT_30S));
    let client = quick(OutboundLayer::builder().quota(true)).layer(upstream.service());
    let first = client.clone().oneshot(get("http://api.test/")).await;
    assert_eq!(first.expect("a response").status(), StatusCode::OK);
    let second = client.clone().oneshot(get("http://api.test/")).await;
    assert_eq!(refused(second), Duration::from_secs(30));
    assert_eq!(
        upstream.calls().len(),
        1,
        "the refused request was not sent"
    );
    // Another host's quota is its own.
    let other = client.oneshot(get("http://other.test/")).await;
    assert!(other.is_ok());
    assert_eq!(upstream.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_refusals_retry_after_is_the_time_left_to_the_reset() {
    let upstream = scripted(|_, _| (200, Duration::ZERO, SPENT_30S));
    let client = quick(OutboundLayer::builder().quota(true)).layer(upstream.service());
    client
        .clone()
        .oneshot(get("http://api.test/"))
        .await
        .expect("a response");
    tokio::time::advance(Duration::from_millis(12_500)).await;
    let outcome = client.oneshot(get("http://api.test/")).await;
    let error = outcome.expect_err("refused");
    assert_eq!(error.retry_after(), Some(Duration::from_millis(17_500)));
    let response = error.into_problem_response();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "18");
    assert_eq!(upstream.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn traffic_resumes_once_the_reset_passes() {
    let upstream = scripted(|n, _| match n {
        0 => (200, Duration::ZERO, SPENT_30S),
        _ => (200, Duration::ZERO, &[]),
    });
    let client = quick(OutboundLayer::builder().quota(true)).layer(upstream.service());
    client
        .clone()
        .oneshot(get("http://api.test/"))
        .await
        .expect("a response");
    tokio::time::advance(Duration::from_millis(29_999)).await;
    let early = client.clone().oneshot(get("http://api.test/")).await;
    assert_eq!(refused(early), Duration::from_millis(1));
    tokio::time::advance(Duration::from_millis(1)).await;
    let after = client.oneshot(get("http://api.test/")).await;
    assert!(
        after.is_ok(),
        "sent at the reset, no response needed to clear it"
    );
    assert_eq!(upstream.calls().len(), 2);
}

#[tokio::test]
async fn the_reset_is_kept_on_the_policys_clock() {
    // tokio's time is real here: only the policy's manual clock moves.
    let manual = ManualClock::new();
    let upstream = scripted(|n, _| match n {
        0 => (
            200,
            Duration::ZERO,
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "30")],
        ),
        _ => (200, Duration::ZERO, &[]),
    });
    let clock = manual.clone();
    let client = OutboundLayer::builder()
        .quota(true)
        .policy(move |p| p.clock(clock.clone()).backoff(Backoff::none()))
        .build()
        .expect("valid outbound layer")
        .layer(upstream.service());
    client
        .clone()
        .oneshot(get("http://api.test/"))
        .await
        .expect("a response");
    manual.advance(Duration::from_secs(29));
    let early = client.clone().oneshot(get("http://api.test/")).await;
    assert_eq!(refused(early), Duration::from_secs(1));
    manual.advance(Duration::from_secs(1));
    assert!(client.oneshot(get("http://api.test/")).await.is_ok());
    assert_eq!(upstream.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_response_with_quota_left_or_a_reset_now_clears_a_spent_one() {
    const RESET_NOW: Headers = &[("ratelimit", "\"default\";r=0;t=0")];
    for clearing in [LEFT_5, RESET_NOW] {
        // `/slow` answers after a second with `clearing`; `/spent` at once, spent.
        let upstream = scripted(move |_, path| match path {
            "/slow" => (200, Duration::from_secs(1), clearing),
            "/spent" => (200, Duration::ZERO, SPENT_30S),
            _ => (200, Duration::ZERO, &[]),
        });
        let client = quick(OutboundLayer::builder().quota(true)).layer(upstream.service());
        let slow = tokio::spawn(client.clone().oneshot(get("http://api.test/slow")));
        tokio::task::yield_now().await;
        client
            .clone()
            .oneshot(get("http://api.test/spent"))
            .await
            .expect("a response");
        let meanwhile = client.clone().oneshot(get("http://api.test/other")).await;
        assert_eq!(refused(meanwhile), Duration::from_secs(30));
        slow.await.expect("task").expect("a response");
        let after = client.oneshot(get("http://api.test/other")).await;
        assert!(after.is_ok(), "the later answer ({clearing:?}) cleared it");
        assert_eq!(upstream.calls().len(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_is_still_retried_after_it() {
    let upstream = scripted(|n, _| match n {
        0 => (
            429,
            Duration::ZERO,
            &[("retry-after", "2"), ("ratelimit", "\"default\";r=0;t=2")],
        ),
        _ => (200, Duration::ZERO, LEFT_5),
    });
    let client = quick(OutboundLayer::builder().quota(true)).layer(upstream.service());
    let started = tokio::time::Instant::now();
    let response = client
        .clone()
        .oneshot(get("http://api.test/"))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        upstream.calls().len(),
        2,
        "the retry was sent, after the Retry-After"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert!(client.oneshot(get("http://api.test/")).await.is_ok());
    assert_eq!(upstream.calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn quota_headers_are_ignored_unless_turned_on() {
    let upstream = scripted(|_, _| (200, Duration::ZERO, SPENT_30S));
    let client = quick(OutboundLayer::builder()).layer(upstream.service());
    for _ in 0..3 {
        assert!(
            client
                .clone()
                .oneshot(get("http://api.test/"))
                .await
                .is_ok()
        );
    }
    assert_eq!(
        upstream.calls().len(),
        3,
        "off by default: every request is sent"
    );
}

#[tokio::test(start_paused = true)]
async fn host_quota_turns_it_on_or_off_for_one_host() {
    let upstream = scripted(|_, _| (200, Duration::ZERO, SPENT_30S));
    let only_api =
        quick(OutboundLayer::builder().host_quota("API.test", true)).layer(upstream.service());
    let _ = only_api.clone().oneshot(get("http://api.test/")).await;
    let _ = only_api.clone().oneshot(get("http://other.test/")).await;
    refused(only_api.clone().oneshot(get("http://api.test/")).await);
    assert!(only_api.oneshot(get("http://other.test/")).await.is_ok());
    assert_eq!(upstream.calls().len(), 3);

    let upstream = scripted(|_, _| (200, Duration::ZERO, SPENT_30S));
    let all_but_api = quick(
        OutboundLayer::builder()
            .quota(true)
            .host_quota("api.test:80", false),
    )
    .layer(upstream.service());
    let _ = all_but_api.clone().oneshot(get("http://api.test/")).await;
    let _ = all_but_api.clone().oneshot(get("http://other.test/")).await;
    assert!(
        all_but_api
            .clone()
            .oneshot(get("http://api.test/"))
            .await
            .is_ok()
    );
    refused(all_but_api.oneshot(get("http://other.test/")).await);
    assert_eq!(upstream.calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_reported_as_an_event() {
    let events: Arc<Mutex<Vec<(String, Duration)>>> = Arc::default();
    let seen = Arc::clone(&events);
    let upstream = scripted(|_, _| (200, Duration::ZERO, SPENT_30S));
    let client = quick(OutboundLayer::builder().quota(true).listener(move |event| {
        if let EdgeEvent::QuotaRefused { host, retry_after } = event {
            seen.lock()
                .expect("events")
                .push(((*host).to_owned(), *retry_after));
        }
    }))
    .layer(upstream.service());
    let _ = client.clone().oneshot(get("http://api.test/")).await;
    assert!(events.lock().expect("events").is_empty());
    let _ = client.oneshot(get("http://api.test/")).await;
    assert_eq!(
        *events.lock().expect("events"),
        [("api.test:80".to_owned(), Duration::from_secs(30))]
    );
}

#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn a_refusal_moves_the_quota_refused_counter() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // For the whole test: a series is registered on its first use.
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let upstream = scripted(|_, _| (200, Duration::ZERO, SPENT_30S));
    let client = quick(OutboundLayer::builder().quota(true)).layer(upstream.service());
    let count = || {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .find_map(|(key, _, _, value)| match value {
                DebugValue::Counter(n)
                    if key.key().name() == "rampart.http.client.quota_refused" =>
                {
                    Some(n)
                }
                _ => None,
            })
    };
    let _ = client.clone().oneshot(get("http://api.test/")).await;
    assert_eq!(count(), None, "no series before the first refusal");
    let _ = client.clone().oneshot(get("http://api.test/")).await;
    let _ = client.oneshot(get("http://api.test/")).await;
    assert_eq!(count(), Some(2));
}

/// Runs an in-process request to completion on its first poll.
fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("an in-process request completes on its first poll"),
    }
}

#[test]
fn reading_quota_headers_allocates_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    // Every answer carries each form of quota header, with quota left.
    let answer = |_: UpstreamRequest| {
        let mut response = Response::new(Full::<Bytes>::default());
        let headers = response.headers_mut();
        headers.insert(
            "ratelimit",
            HeaderValue::from_static("\"default\";r=5;t=30"),
        );
        headers.insert(
            "ratelimit-policy",
            HeaderValue::from_static("\"default\";q=100;w=60"),
        );
        headers.insert("x-ratelimit-remaining", HeaderValue::from_static("5"));
        headers.insert("x-ratelimit-reset", HeaderValue::from_static("1700000045"));
        std::future::ready(Ok::<_, Infallible>(response))
    };
    let per_request = |on: bool| {
        let mut client = OutboundLayer::builder()
            .quota(on)
            .build()
            .expect("valid outbound layer")
            .layer(tower::service_fn(answer));
        // Warm up: the host's policies are made on its first request.
        ready(client.call(get("http://127.0.0.1:8080/"))).expect("a response");
        let n = 200;
        let requests: Vec<_> = (0..n).map(|_| get("http://127.0.0.1:8080/")).collect();
        let counted = allocation_counter::measure(|| {
            for request in requests {
                drop(ready(client.call(request)));
            }
        });
        counted.count_total as f64 / f64::from(n)
    };
    let off = per_request(false);
    let on = per_request(true);
    println!("{off} allocations per request with quota off, {on} with it on");
    assert_eq!(on, off);
}

#[cfg(feature = "reqwest")]
#[tokio::test]
async fn the_reqwest_client_refuses_a_spent_host_too() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::routing::get as route;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let app = axum::Router::new().route(
        "/",
        route(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { ([("ratelimit", "\"default\";r=0;t=30")], "spent") }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let manual = ManualClock::new();
    let clock = manual.clone();
    let layer = OutboundLayer::builder()
        .quota(true)
        .policy(move |p| p.clock(clock.clone()).backoff(Backoff::none()))
        .build()
        .expect("valid outbound layer");
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client");
    let client = rampart_http::reqwest::Client::with_client(http, &layer);
    let url = format!("http://{addr}/");
    let first = client.get(&url).send().await;
    assert_eq!(first.expect("a response").status(), StatusCode::OK);
    manual.advance(Duration::from_secs(10));
    let second = client.get(&url).send().await;
    let error = second.expect_err("refused");
    assert!(
        matches!(&error, ClientError::QuotaSpent { host, .. } if host.starts_with("127.0.0.1:")),
        "{error}"
    );
    assert!(error.is_rejected());
    assert_eq!(error.retry_after(), Some(Duration::from_secs(20)));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the refused request was not sent"
    );
    manual.advance(Duration::from_secs(20));
    let third = client.get(&url).send().await;
    assert!(third.is_ok(), "sent again at the reset");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
