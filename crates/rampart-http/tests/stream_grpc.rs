//! A real tonic server-streaming RPC on loopback, consumed through `Call::stream`: the
//! stream is retried only until its first message arrives; a failure after it reaches the
//! consumer; a stall ends it with `IdleTimeout`. No codegen: messages are UTF-8 strings
//! through a hand-written codec.
//!
//! Real sockets mean real time: the waits are tens of milliseconds, and the assertions are
//! messages, statuses and counts of requests, never durations.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use http::Request;
use http::uri::PathAndQuery;
use rampart::backoff::Backoff;
use rampart::stream::{RampartStream, StreamOptions};
use rampart::{Error, Policy};
use tonic::codec::Streaming;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

#[path = "../examples/support/grpc.rs"]
mod grpc_support;
use grpc_support::{Utf8, serve_h2};

/// What one step of a server stream does after a short wait.
#[derive(Debug, Clone, Copy)]
enum Step {
    Send(&'static str),
    Fail,
    Stall,
}

type Messages = Pin<Box<dyn Stream<Item = Result<String, Status>> + Send>>;

/// The messages of `steps`, each after 10 ms; the stream ends after the last.
fn messages(steps: Vec<Step>) -> Messages {
    Box::pin(futures_util::stream::unfold(
        steps.into_iter(),
        |mut steps| async move {
            let step = steps.next()?;
            tokio::time::sleep(Duration::from_millis(10)).await;
            match step {
                Step::Send(text) => Some((Ok(text.to_owned()), steps)),
                Step::Fail => Some((Err(Status::unavailable("went away")), steps)),
                Step::Stall => std::future::pending().await,
            }
        },
    ))
}

/// The requests the server received, by path.
#[derive(Clone, Default)]
struct Server {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn seen(&self, path: &str) -> usize {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|p| *p == path)
            .count()
    }

    /// Answers by path, counting the requests to it before this one (`earlier`):
    /// - `/t.T/RefuseTwice`: `UNAVAILABLE` (trailers-only) twice, then `a`, `b`, `c`;
    /// - `/t.T/FailFirstTwice`: a stream whose first message is `UNAVAILABLE` twice, then
    ///   `a`, `b`;
    /// - `/t.T/FailAfterOne`: `a`, then `UNAVAILABLE`;
    /// - `/t.T/StallAfterOne`: `a`, then silence.
    async fn handle(
        self,
        request: Request<hyper::body::Incoming>,
    ) -> Result<http::Response<tonic::body::Body>, Infallible> {
        let path = request.uri().path().to_owned();
        let earlier = {
            let mut seen = self.seen.lock().expect("seen");
            let earlier = seen.iter().filter(|p| **p == path).count();
            seen.push(path.clone());
            earlier
        };
        let answer = tower::service_fn(move |_: tonic::Request<String>| {
            let path = path.clone();
            async move {
                let steps = match path.as_str() {
                    "/t.T/RefuseTwice" if earlier < 2 => {
                        return Err(Status::unavailable("warming up"));
                    }
                    "/t.T/RefuseTwice" => vec![Step::Send("a"), Step::Send("b"), Step::Send("c")],
                    "/t.T/FailFirstTwice" if earlier < 2 => vec![Step::Fail],
                    "/t.T/FailFirstTwice" => vec![Step::Send("a"), Step::Send("b")],
                    "/t.T/FailAfterOne" => vec![Step::Send("a"), Step::Fail],
                    "/t.T/StallAfterOne" => vec![Step::Send("a"), Step::Stall],
                    _ => return Err(Status::unimplemented("no such method")),
                };
                Ok(tonic::Response::new(messages(steps)))
            }
        });
        Ok(tonic::server::Grpc::new(Utf8)
            .server_streaming(answer, request)
            .await)
    }
}

/// Serves `server` on loopback over HTTP/2, until the test's runtime ends.
async fn serve(server: Server) -> SocketAddr {
    serve_h2(tower::service_fn(move |request| {
        server.clone().handle(request)
    }))
    .await
}

async fn connected() -> (Server, Channel) {
    let server = Server::default();
    let addr = serve(server.clone()).await;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("valid endpoint")
        .connect()
        .await
        .expect("connected");
    (server, channel)
}

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .total_timeout(Duration::from_secs(10))
        .attempt_timeout(Duration::from_secs(5))
        .backoff(Backoff::none())
        .build()
        .expect("valid policy")
}

/// Opens the server-streaming RPC `path` under `policy`: each attempt is a new RPC, whose
/// `Streaming` is the stream. Returns what opening gave and how many RPCs the op started.
async fn open(
    policy: &Policy,
    options: StreamOptions,
    channel: &Channel,
    path: &'static str,
) -> Result<RampartStream<Streaming<String>, String>, Error<Status>> {
    policy
        .call()
        .stream(options, async |_attempt| {
            let mut grpc = tonic::client::Grpc::new(channel.clone());
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            let request = tonic::Request::new("watch".to_owned());
            let response = grpc
                .server_streaming(request, PathAndQuery::from_static(path), Utf8)
                .await?;
            Ok(response.into_inner())
        })
        .await
}

/// Every message, then the error that ended the stream (by its kind), in words.
async fn consume(stream: RampartStream<Streaming<String>, String>) -> Vec<String> {
    let mut stream = std::pin::pin!(stream);
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(match item {
            Ok(message) => message,
            Err(Error::Inner(status)) => format!("status {:?}", status.code()),
            Err(Error::IdleTimeout { items, .. }) => format!("idle after {items}"),
            Err(other) => format!("error {other}"),
        });
    }
    items
}

fn idle(idle: Duration) -> StreamOptions {
    StreamOptions::builder()
        .idle_timeout(idle)
        .build()
        .expect("valid options")
}

#[tokio::test]
async fn an_rpc_refused_unavailable_before_its_first_message_is_retried_and_then_streamed() {
    let (server, channel) = connected().await;
    let stream = open(
        &policy(),
        StreamOptions::default(),
        &channel,
        "/t.T/RefuseTwice",
    )
    .await
    .expect("the third RPC opens");
    assert_eq!(stream.attempts(), 3);
    assert_eq!(consume(stream).await, ["a", "b", "c"]);
    assert_eq!(server.seen("/t.T/RefuseTwice"), 3);
}

#[tokio::test]
async fn an_rpc_whose_first_message_is_an_unavailable_status_is_retried() {
    let (server, channel) = connected().await;
    let stream = open(
        &policy(),
        StreamOptions::default(),
        &channel,
        "/t.T/FailFirstTwice",
    )
    .await
    .expect("the third RPC delivers a message");
    assert_eq!(consume(stream).await, ["a", "b"]);
    assert_eq!(server.seen("/t.T/FailFirstTwice"), 3);
}

#[tokio::test]
async fn an_unavailable_after_the_first_message_reaches_the_consumer_and_is_not_retried() {
    let (server, channel) = connected().await;
    let stream = open(
        &policy(),
        StreamOptions::default(),
        &channel,
        "/t.T/FailAfterOne",
    )
    .await
    .expect("opened");
    assert_eq!(consume(stream).await, ["a", "status Unavailable"]);
    assert_eq!(server.seen("/t.T/FailAfterOne"), 1);
}

#[tokio::test]
async fn a_stalled_rpc_ends_with_the_idle_timeout_after_its_messages() {
    let (server, channel) = connected().await;
    let stream = open(
        &policy(),
        idle(Duration::from_millis(50)),
        &channel,
        "/t.T/StallAfterOne",
    )
    .await
    .expect("opened");
    assert_eq!(consume(stream).await, ["a", "idle after 1"]);
    assert_eq!(server.seen("/t.T/StallAfterOne"), 1);
}

#[tokio::test]
async fn an_rpc_that_keeps_failing_before_its_first_message_ends_with_its_last_status() {
    let (server, channel) = connected().await;
    let policy = Policy::builder()
        .max_attempts(2)
        .backoff(Backoff::none())
        .build()
        .expect("valid policy");
    let opened = open(
        &policy,
        StreamOptions::default(),
        &channel,
        "/t.T/RefuseTwice",
    )
    .await;
    let Err(Error::Inner(status)) = opened else {
        panic!("two attempts, both refused: {opened:?}");
    };
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "warming up");
    assert_eq!(server.seen("/t.T/RefuseTwice"), 2);
}
