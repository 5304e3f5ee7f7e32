//! Real tonic channels and a real gRPC server on loopback: tonic's `Grpc` client over
//! `OutboundLayer::grpc`, and a hyper HTTP/2 server running tonic's `server::Grpc` behind the
//! inbound layer. No codegen: messages are UTF-8 strings through a hand-written codec.
//!
//! Longer than the ~600-line guide: one real tonic server and channel set-up serves every test;
//! split, each file would stand up its own.
//!
//! Real sockets mean real time: the waits are tens of milliseconds, and the assertions are
//! statuses, attempt counts and the values the server saw, never durations.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Empty};
use rampart::admit::{Admit, AdmitContext, Refusal};
use rampart::backoff::Backoff;
use rampart::breaker::{Breaker, BreakerBuilder};
use rampart::hedge::Hedge;
use rampart::{ConfigError, Deadline, StopReason};
use rampart_http::{CallReport, GrpcChannel, InboundLayer, OutboundLayer, Repeatable, ReplayBody};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tower_layer::Layer;

#[path = "../examples/support/grpc.rs"]
mod grpc_support;
use grpc_support::{Utf8, serve_h2};

/// What the server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    grpc_timeout: Option<Duration>,
    /// The time left on the handler's ambient deadline when it started.
    ambient_left: Option<Duration>,
    /// Whether it carried the retry mark (a retry or a hedge).
    retry: bool,
}

/// The server's record of what it was sent.
#[derive(Clone, Default)]
struct Server {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn seen(&self, path: &str) -> Vec<Seen> {
        let seen = self.seen.lock().expect("seen");
        seen.iter().filter(|s| s.path == path).cloned().collect()
    }

    /// Answers by path:
    /// - `/t.T/Flaky`: `UNAVAILABLE` (trailers-only) twice, then `ok`;
    /// - `/t.T/FlakyTrailers`: `UNAVAILABLE` in the trailers of a 200 twice, then `ok`;
    /// - `/t.T/Slow`: `ok` after 250 ms;
    /// - `/t.T/SlowFirst...` (any path that starts so): `ok`, after 1 s to its first request;
    /// - `/t.T/Echo`: the handler's ambient time left, in whole milliseconds.
    async fn handle(
        self,
        request: Request<hyper::body::Incoming>,
    ) -> Result<Response<tonic::body::Body>, Infallible> {
        let path = request.uri().path().to_owned();
        let ambient_left = Deadline::current().map(Deadline::remaining);
        let earlier = {
            let mut seen = self.seen.lock().expect("seen");
            let earlier = seen.iter().filter(|s| s.path == path).count();
            seen.push(Seen {
                path: path.clone(),
                grpc_timeout: request
                    .headers()
                    .get("grpc-timeout")
                    .and_then(|v| rampart_http::header::parse_grpc_timeout(v.as_bytes())),
                ambient_left,
                retry: request.headers().contains_key("x-rampart-retry"),
            });
            earlier
        };
        if path == "/t.T/FlakyTrailers" && earlier < 2 {
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", "14".parse().expect("valid"));
            trailers.insert("grpc-message", "warming%20up".parse().expect("valid"));
            let body = Empty::<Bytes>::new()
                .map_err(|e: Infallible| match e {})
                .with_trailers(async move { Some(Ok(trailers)) });
            let response = Response::builder()
                .header("content-type", "application/grpc")
                .body(tonic::body::Body::new(body))
                .expect("valid response");
            return Ok(response);
        }
        let answer = tower::service_fn(move |_: tonic::Request<String>| {
            let path = path.clone();
            async move {
                match path.as_str() {
                    "/t.T/Flaky" if earlier < 2 => Err(Status::unavailable("warming up")),
                    "/t.T/Slow" => {
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        Ok(tonic::Response::new("ok".to_owned()))
                    }
                    slow if slow.starts_with("/t.T/SlowFirst") && earlier == 0 => {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        Ok(tonic::Response::new("ok".to_owned()))
                    }
                    "/t.T/Echo" => Ok(tonic::Response::new(
                        ambient_left.map_or("none".to_owned(), |d| d.as_millis().to_string()),
                    )),
                    _ => Ok(tonic::Response::new("ok".to_owned())),
                }
            }
        });
        Ok(tonic::server::Grpc::new(Utf8).unary(answer, request).await)
    }
}

/// Serves `server` on loopback over HTTP/2 behind `inbound`, until the test's runtime ends.
async fn serve<A: Admit + Clone>(server: Server, inbound: InboundLayer<A>) -> SocketAddr {
    let service = inbound.layer(tower::service_fn(move |request| {
        server.clone().handle(request)
    }));
    serve_h2(service).await
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("valid endpoint")
        .connect()
        .await
        .expect("connected")
}

fn layer() -> OutboundLayer {
    OutboundLayer::builder()
        .policy(|p| {
            p.total_timeout(Duration::from_secs(10))
                .attempt_timeout(Duration::from_secs(5))
                .backoff(Backoff::none())
        })
        .build()
        .expect("valid outbound layer")
}

/// A server behind a plain inbound layer, and a channel to it under `layer`.
async fn connected(layer: &OutboundLayer) -> (Server, GrpcChannel<Channel>) {
    let server = Server::default();
    let addr = serve(server.clone(), InboundLayer::new()).await;
    let client = layer.grpc(&addr.to_string(), channel(addr).await);
    (server, client)
}

/// One unary call through `client`, marked repeatable when asked, with an optional
/// timeout of the caller's own.
async fn call(
    client: &GrpcChannel<Channel>,
    path: &'static str,
    repeatable: bool,
    timeout: Option<Duration>,
) -> Result<String, Status> {
    let mut grpc = tonic::client::Grpc::new(client.clone());
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let mut request = tonic::Request::new("hello".to_owned());
    if repeatable {
        request.extensions_mut().insert(Repeatable);
    }
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    let response = grpc
        .unary(request, PathAndQuery::from_static(path), Utf8)
        .await?;
    Ok(response.into_inner())
}

#[tokio::test]
async fn a_trailers_only_unavailable_is_retried_and_then_answered() {
    let (server, client) = connected(&layer()).await;
    let answer = call(&client, "/t.T/Flaky", true, None).await;
    assert_eq!(answer.expect("answered"), "ok");
    assert_eq!(server.seen("/t.T/Flaky").len(), 3);
}

#[tokio::test]
async fn an_unavailable_in_the_trailers_is_retried_and_then_answered() {
    let (server, client) = connected(&layer()).await;
    let answer = call(&client, "/t.T/FlakyTrailers", true, None).await;
    assert_eq!(answer.expect("answered"), "ok");
    assert_eq!(server.seen("/t.T/FlakyTrailers").len(), 3);
}

#[tokio::test]
async fn a_call_not_marked_repeatable_is_sent_once_and_its_unavailable_returned() {
    let (server, client) = connected(&layer()).await;
    let status = call(&client, "/t.T/Flaky", false, None)
        .await
        .expect_err("unavailable");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "warming up");
    assert_eq!(server.seen("/t.T/Flaky").len(), 1);
}

#[tokio::test]
async fn the_callers_smaller_timeout_is_kept_and_ends_the_call_with_deadline_exceeded() {
    let (server, client) = connected(&layer()).await;
    let status = call(&client, "/t.T/Slow", true, Some(Duration::from_millis(100)))
        .await
        .expect_err("the 250 ms handler outlives the caller's 100 ms");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        status.message().starts_with("inherited deadline of"),
        "rampart decided, not tonic's timer: {status:?}"
    );
    let seen = server.seen("/t.T/Slow");
    assert_eq!(seen.len(), 1, "one attempt: no time for another");
    let sent = seen[0].grpc_timeout.expect("a grpc-timeout");
    assert!(sent <= Duration::from_millis(100), "sent {sent:?}");
}

#[tokio::test]
async fn the_inbound_handler_sees_the_grpc_timeout_as_its_ambient_deadline() {
    let (server, client) = connected(&layer()).await;
    let answer = call(&client, "/t.T/Echo", false, Some(Duration::from_secs(2)))
        .await
        .expect("answered");
    let left: u64 = answer.parse().expect("a number of milliseconds");
    assert!(left > 0 && left <= 2000, "the handler had {left} ms");
    let seen = server.seen("/t.T/Echo");
    let sent = seen[0].grpc_timeout.expect("a grpc-timeout");
    assert!(sent <= Duration::from_secs(2), "sent {sent:?}");
    assert!(seen[0].ambient_left.is_some_and(|d| d <= sent));
}

#[tokio::test]
async fn an_open_breaker_reaches_the_tonic_caller_as_unavailable_with_pushback() {
    let layer = opened_by_two_failures();
    let (server, client) = connected(&layer).await;
    for _ in 0..2 {
        let status = call(&client, "/t.T/Flaky", false, None)
            .await
            .expect_err("the server is warming up");
        assert_eq!(status.message(), "warming up", "the server's own status");
    }
    let status = refused_by_the_open_breaker(&server, &client, "/t.T/Flaky").await;
    assert_eq!(status.code(), Code::Unavailable);
    let pushback = status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .expect("a pushback in milliseconds");
    assert!(pushback > 0 && pushback <= 30_000, "pushback {pushback}");
    assert_eq!(
        server.seen("/t.T/Flaky").len(),
        2,
        "the third call was not sent"
    );
}

#[tokio::test]
async fn each_channel_is_its_own_host_entry() {
    let server = Server::default();
    let one = serve(server.clone(), InboundLayer::new()).await;
    let two = serve(server.clone(), InboundLayer::new()).await;
    let layer = layer();
    let first = layer.grpc(&one.to_string(), channel(one).await);
    let second = layer.grpc(&two.to_string(), channel(two).await);
    call(&first, "/t.T/Echo", false, None)
        .await
        .expect("answered");
    call(&second, "/t.T/Echo", false, None)
        .await
        .expect("answered");
    assert_eq!(layer.hosts(), 2);
}

#[tokio::test]
async fn an_origin_with_a_scheme_names_the_same_host_entry_as_host_and_port() {
    let server = Server::default();
    let addr = serve(server.clone(), InboundLayer::new()).await;
    let layer = layer();
    let with_scheme = layer.grpc(&format!("http://{addr}"), channel(addr).await);
    let without = layer.grpc(&addr.to_string(), channel(addr).await);
    for client in [&with_scheme, &without] {
        call(client, "/t.T/Echo", false, None)
            .await
            .expect("answered");
    }
    assert_eq!(layer.hosts(), 1);
    assert!(layer.breaker(&addr.to_string()).is_some());
}

#[tokio::test]
async fn a_method_named_repeatable_on_the_channel_is_retried_without_a_request_extension() {
    let (server, client) = connected(&layer()).await;
    let client = client.repeatable("/t.T/Flaky");
    let answer = call(&client, "/t.T/Flaky", false, None).await;
    assert_eq!(answer.expect("answered"), "ok");
    assert_eq!(server.seen("/t.T/Flaky").len(), 3);
}

#[tokio::test]
async fn a_service_named_repeatable_retries_its_methods_and_no_other_services() {
    let (server, client) = connected(&layer()).await;
    let client = client
        .repeatable("t.T/*")
        .repeatable("/other.Service/Flaky");
    let answer = call(&client, "/t.T/FlakyTrailers", false, None).await;
    assert_eq!(answer.expect("answered"), "ok");
    assert_eq!(server.seen("/t.T/FlakyTrailers").len(), 3);
    let (server, client) = connected(&layer()).await;
    let client = client.repeatable("/t.T/Echo");
    let status = call(&client, "/t.T/Flaky", false, None)
        .await
        .expect_err("not named: sent once");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.seen("/t.T/Flaky").len(), 1);
}

#[tokio::test]
async fn a_method_named_unary_is_sent_once_and_an_unavailable_in_its_trailers_opens_the_breaker() {
    let layer = opened_by_two_failures();
    let (server, client) = connected(&layer).await;
    two_unavailable_trailers_open_the_breaker(&server, &client.unary("/t.T/FlakyTrailers")).await;
}

/// Two calls of `/t.T/FlakyTrailers`, each answered `UNAVAILABLE` in its trailers and sent
/// once, open a breaker of two consecutive failures: the third is not sent.
async fn two_unavailable_trailers_open_the_breaker(server: &Server, client: &GrpcChannel<Channel>) {
    for _ in 0..2 {
        let status = call(client, "/t.T/FlakyTrailers", false, None)
            .await
            .expect_err("the server is warming up");
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.message(), "warming up", "the server's own status");
    }
    assert_eq!(server.seen("/t.T/FlakyTrailers").len(), 2, "each sent once");
    refused_by_the_open_breaker(server, client, "/t.T/FlakyTrailers").await;
}

/// Calls `method` a third time, after two calls that opened the breaker: the call is refused
/// here, its status saying so, and the server saw only the two. Returns the refusal.
async fn refused_by_the_open_breaker(
    server: &Server,
    client: &GrpcChannel<Channel>,
    method: &'static str,
) -> Status {
    let status = call(client, method, false, None)
        .await
        .expect_err("the breaker is open");
    assert!(
        status.message().contains("circuit breaker open"),
        "{status:?}"
    );
    assert_eq!(server.seen(method).len(), 2, "the third call was not sent");
    status
}

/// A call named neither repeatable nor unary is not read ahead: its status comes after the
/// call returned, and the breaker hears it then. Twice `UNAVAILABLE` in the trailers of a 200
/// opens a breaker of two consecutive failures, as the same status in the headers does; a
/// success in the trailers clears the count.
#[tokio::test]
async fn an_unavailable_in_the_trailers_of_a_call_named_nothing_opens_the_breaker() {
    let layer = opened_by_two_failures();
    let (server, client) = connected(&layer).await;
    two_unavailable_trailers_open_the_breaker(&server, &client).await;
}

/// The success in the trailers counts too: an `UNAVAILABLE`, an `OK`, an `UNAVAILABLE` never
/// make two failures in a row.
#[tokio::test]
async fn an_ok_in_the_trailers_of_a_call_named_nothing_clears_the_failures_before_it() {
    let layer = OutboundLayer::builder()
        .breaker_per_host(Breaker::builder().consecutive_failures(2))
        .build()
        .expect("valid outbound layer");
    let (_server, client) = connected(&layer).await;
    call(&client, "/t.T/FlakyTrailers", false, None)
        .await
        .expect_err("the server is warming up");
    call(&client, "/t.T/Echo", false, None)
        .await
        .expect("answered, OK in its trailers");
    call(&client, "/t.T/FlakyTrailers", false, None)
        .await
        .expect_err("the server is warming up");
    // One failure since the OK: still closed.
    call(&client, "/t.T/Echo", false, None)
        .await
        .expect("answered: the breaker is closed");
}

/// A deferred status is judged with the attempt's time to its answer: two calls of
/// `/t.T/Slow` (answered `ok` in the trailers, after 250 ms), each a slow call to a breaker
/// that counts a success over 100 ms as a failure, open it.
#[tokio::test]
async fn a_slow_call_whose_ok_comes_in_the_trailers_counts_as_slow() {
    let slow = two_failures().slow_call(Duration::from_millis(100));
    let layer = OutboundLayer::builder()
        .breaker_per_host(slow)
        .build()
        .expect("valid outbound layer");
    let (server, client) = connected(&layer).await;
    for _ in 0..2 {
        call(&client, "/t.T/Slow", false, None)
            .await
            .expect("answered, slowly");
    }
    refused_by_the_open_breaker(&server, &client, "/t.T/Slow").await;
}

/// Breakers that open after two failures in a row, for 30 s.
fn two_failures() -> BreakerBuilder {
    Breaker::builder()
        .consecutive_failures(2)
        .break_duration(Duration::from_secs(30))
}

/// A layer whose breakers open after two failures in a row, for 30 s.
fn opened_by_two_failures() -> OutboundLayer {
    OutboundLayer::builder()
        .breaker_per_host(two_failures())
        .build()
        .expect("valid outbound layer")
}

/// A layer that hedges the calls that ask, 20 ms after the first leg went out.
fn hedging_layer() -> OutboundLayer {
    OutboundLayer::builder()
        .hedge_marked(Hedge::fixed(Duration::from_millis(20)))
        .policy(|p| {
            p.total_timeout(Duration::from_secs(10))
                .attempt_timeout(Duration::from_secs(5))
                .backoff(Backoff::none())
        })
        .build()
        .expect("valid outbound layer")
}

#[tokio::test]
async fn a_method_named_hedged_sends_a_hedge_that_answers_and_the_report_counts_both_legs() {
    let layer = hedging_layer();
    let (server, client) = connected(&layer).await;
    let client = client
        .repeatable("/t.T/*")
        .hedged("/t.T/SlowFirst")
        .expect("repeatable, on a layer that hedges");
    let mut grpc = tonic::client::Grpc::new(client.clone());
    grpc.ready().await.expect("ready");
    let response = grpc
        .unary(
            tonic::Request::new("hello".to_owned()),
            PathAndQuery::from_static("/t.T/SlowFirst"),
            Utf8,
        )
        .await
        .expect("answered by the hedge");
    let report = response
        .extensions()
        .get::<CallReport>()
        .copied()
        .expect("a hedged response carries its report");
    assert_eq!(response.into_inner(), "ok");
    assert_eq!(
        (report.stop(), report.attempts()),
        (StopReason::Succeeded, 2)
    );
    assert_eq!(
        report.log().last().map(|record| record.number),
        Some(2),
        "the hedge won"
    );
    let seen = server.seen("/t.T/SlowFirst");
    assert_eq!(
        seen.iter().map(|s| s.retry).collect::<Vec<_>>(),
        [false, true],
        "the first leg, then its hedge with the retry mark"
    );

    // A repeatable method not named hedged waits for its only attempt, on the same host.
    let answer = call(&client, "/t.T/SlowFirstUnhedged", false, None).await;
    assert_eq!(answer.expect("answered"), "ok");
    assert_eq!(server.seen("/t.T/SlowFirstUnhedged").len(), 1, "no hedge");
    assert_eq!(layer.hosts(), 1);
}

#[tokio::test]
async fn hedging_a_method_not_named_repeatable_is_refused_at_setup_naming_it() {
    let layer = hedging_layer();
    let channel = || {
        layer.grpc(
            "inventory:50051",
            Endpoint::from_static("http://inventory:50051").connect_lazy(),
        )
    };
    let problem = |outcome: Result<GrpcChannel<Channel>, ConfigError>| {
        let error = outcome.expect_err("refused");
        assert_eq!(error.problems().len(), 1, "{error}");
        error.problems()[0].clone()
    };

    let not_named = problem(channel().hedged("/t.T/Put"));
    assert_eq!(not_named.field(), "hedged(/t.T/Put)");
    assert!(
        not_named.message().contains("named `repeatable` first"),
        "{not_named}"
    );
    let unary = problem(channel().unary("/t.T/Put").hedged("/t.T/Put"));
    assert_eq!(
        unary.field(),
        "hedged(/t.T/Put)",
        "`unary` sends once: not repeatable"
    );
    let other = problem(channel().repeatable("/t.T/Get").hedged("/t.T/Put"));
    assert_eq!(other.field(), "hedged(/t.T/Put)");
    let wider = problem(channel().repeatable("/t.T/Get").hedged("/t.T/*"));
    assert_eq!(
        wider.field(),
        "hedged(/t.T/*)",
        "one repeatable method is not its service"
    );

    assert!(channel().repeatable("/t.T/Get").hedged("/t.T/Get").is_ok());
    assert!(channel().repeatable("t.T/*").hedged("/t.T/Get").is_ok());
    assert!(channel().repeatable("/t.T/*").hedged("/t.T/*").is_ok());
}

#[tokio::test]
async fn hedging_a_method_on_a_layer_that_hedges_nothing_is_refused_at_setup() {
    let channel = Endpoint::from_static("http://inventory:50051").connect_lazy();
    let error = layer()
        .grpc("inventory:50051", channel)
        .repeatable("/t.T/Get")
        .hedged("/t.T/Get")
        .expect_err("the layer hedges nothing");
    assert_eq!(
        error.to_string(),
        "hedged(/t.T/Get) would do nothing: the layer hedges no request (build it with \
         `OutboundBuilder::hedge_marked`, and more than one attempt)"
    );
}

/// Refuses every request, asking for 250 ms.
#[derive(Debug, Clone, Copy)]
struct Refuse;

impl Admit for Refuse {
    type Permit = ();

    async fn acquire(&self, _: &AdmitContext<'_>) -> Result<(), Refusal> {
        Err(Refusal {
            retry_after: Some(Duration::from_millis(250)),
            by: "test refusal",
        })
    }
}

#[tokio::test]
async fn a_refusal_answers_unavailable_with_pushback_beside_retry_after() {
    let server = Server::default();
    let addr = serve(server.clone(), InboundLayer::new().admit(Refuse)).await;
    let mut grpc = tonic::client::Grpc::new(channel(addr).await);
    grpc.ready().await.expect("ready");
    let status = grpc
        .unary::<String, String, _>(
            tonic::Request::new("hello".to_owned()),
            PathAndQuery::from_static("/t.T/Echo"),
            Utf8,
        )
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::Unavailable);
    let metadata = status.metadata();
    assert_eq!(
        metadata
            .get("grpc-retry-pushback-ms")
            .map(|v| v.to_str().ok()),
        Some(Some("250"))
    );
    assert_eq!(
        metadata.get("retry-after").map(|v| v.to_str().ok()),
        Some(Some("1"))
    );
    assert!(server.seen("/t.T/Echo").is_empty());
}

/// A tonic client's request reaches the outbound service with no origin (the channel adds it
/// below): under the plain layer, it is refused before anything is sent, with an error that
/// names the way in.
#[tokio::test]
async fn a_tonic_channel_under_the_plain_layer_is_refused_with_an_error_naming_grpc() {
    let server = Server::default();
    let addr = serve(server.clone(), InboundLayer::new()).await;
    let layer = layer();
    let channel = channel(addr).await;
    let into_tonic =
        |request: Request<ReplayBody<tonic::body::Body>>| request.map(tonic::body::Body::new);
    let plain = tower::ServiceBuilder::new()
        .layer(layer.clone())
        .map_request(into_tonic)
        .service(channel.clone());
    let keyed = layer.layer_for(
        &addr.to_string(),
        tower::ServiceBuilder::new()
            .map_request(into_tonic)
            .service(channel.clone()),
    );
    for outcome in [
        unary(plain, "/t.T/Echo").await,
        unary(keyed, "/t.T/Echo").await,
    ] {
        let status = outcome.expect_err("refused");
        assert_eq!(status.code(), Code::Unknown, "{status:?}");
        assert!(
            status.message().contains(
                "put the channel under the layer with `OutboundLayer::grpc(origin, channel)`"
            ),
            "{status:?}"
        );
    }
    assert!(server.seen("/t.T/Echo").is_empty(), "nothing was sent");
    assert_eq!(layer.hosts(), 0, "no host entry was made");

    let through_grpc = layer.grpc(&addr.to_string(), channel);
    let answer = call(&through_grpc, "/t.T/Echo", false, None).await;
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(server.seen("/t.T/Echo").len(), 1);
}

/// One unary call of `path` through any service a tonic client takes.
async fn unary<S>(service: S, path: &'static str) -> Result<String, Status>
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut grpc = tonic::client::Grpc::new(service);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.into().to_string()))?;
    let request = tonic::Request::new("hello".to_owned());
    let response = grpc
        .unary(request, PathAndQuery::from_static(path), Utf8)
        .await?;
    Ok(response.into_inner())
}
