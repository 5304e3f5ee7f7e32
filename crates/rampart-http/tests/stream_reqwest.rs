//! A real reqwest byte stream (`Response::bytes_stream`) from a loopback server, consumed
//! through `Call::stream`: a response refused before its body starts is retried; a body
//! that breaks after its first chunk reaches the consumer as an error and is not retried; a
//! body that stalls ends with `IdleTimeout`.
//!
//! Real sockets mean real time: the waits are tens of milliseconds, and the assertions are
//! bytes, errors and counts of requests, never durations. Chunks may coalesce on the wire,
//! so the bytes are compared joined.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::StatusCode;
use rampart::backoff::Backoff;
use rampart::stream::{RampartStream, StreamOptions};
use rampart::{Error, Policy};

/// What one step of a response body does after 10 ms.
#[derive(Debug, Clone, Copy)]
enum Step {
    Send(&'static str),
    Break,
    Stall,
}

fn body(steps: Vec<Step>) -> Body {
    Body::from_stream(futures_util::stream::unfold(
        steps.into_iter(),
        |mut steps| async move {
            let step = steps.next()?;
            tokio::time::sleep(Duration::from_millis(10)).await;
            match step {
                Step::Send(text) => Some((Ok(Bytes::from_static(text.as_bytes())), steps)),
                Step::Break => Some((Err(std::io::Error::other("went away")), steps)),
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
        let seen = self.seen.lock().expect("seen");
        seen.iter().filter(|p| *p == path).count()
    }
}

/// Answers by path, counting the requests to it before this one:
/// - `refuse-twice`: 503 twice, then the body `a`, `b`, `c`;
/// - `break-after-one`: `a`, then the connection breaks;
/// - `stall-after-one`: `a`, then silence.
async fn answer(State(server): State<Server>, Path(path): Path<String>) -> Response {
    let earlier = {
        let mut seen = server.seen.lock().expect("seen");
        let earlier = seen.iter().filter(|p| **p == path).count();
        seen.push(path.clone());
        earlier
    };
    let steps = match path.as_str() {
        "refuse-twice" if earlier < 2 => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
        "refuse-twice" => vec![Step::Send("a"), Step::Send("b"), Step::Send("c")],
        "break-after-one" => vec![Step::Send("a"), Step::Break],
        "stall-after-one" => vec![Step::Send("a"), Step::Stall],
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    body(steps).into_response()
}

async fn serve() -> (Server, SocketAddr) {
    let server = Server::default();
    let app = Router::new()
        .route("/{path}", get(answer))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (server, addr)
}

fn policy(max_attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(max_attempts)
        .total_timeout(Duration::from_secs(10))
        .attempt_timeout(Duration::from_secs(5))
        .backoff(Backoff::none())
        .build()
        .expect("valid policy")
}

/// Opens `GET /path` under `policy` as a byte stream: a status the op wants retried is an
/// `Err` (`error_for_status`), as a failed first chunk is. Counts the op's calls in `calls`.
async fn open(
    policy: &Policy,
    options: StreamOptions,
    addr: SocketAddr,
    path: &str,
    calls: &AtomicU32,
) -> Result<
    RampartStream<impl Stream<Item = reqwest::Result<Bytes>> + Unpin + use<>, Bytes>,
    Error<reqwest::Error>,
> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client");
    let url = format!("http://{addr}/{path}");
    policy
        .call()
        .stream(options, async |_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            let response = client.get(&url).send().await?.error_for_status()?;
            Ok(response.bytes_stream())
        })
        .await
}

/// The bytes delivered, joined, and how the stream ended, in words.
async fn consume<S>(stream: RampartStream<S, Bytes>) -> (String, String)
where
    S: Stream<Item = reqwest::Result<Bytes>> + Unpin,
{
    let mut stream = std::pin::pin!(stream);
    let mut bytes = Vec::new();
    let mut end = "end".to_owned();
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(Error::Inner(error)) => {
                end = format!("body error: {}", error.is_body() || error.is_decode())
            }
            Err(Error::IdleTimeout { idle, .. }) => end = format!("idle {idle:?}"),
            Err(other) => end = format!("error {other}"),
        }
    }
    (String::from_utf8(bytes).expect("UTF-8"), end)
}

#[tokio::test]
async fn a_response_refused_before_its_body_is_retried_and_the_body_then_streamed() {
    let (server, addr) = serve().await;
    let calls = AtomicU32::new(0);
    let stream = open(
        &policy(3),
        StreamOptions::default(),
        addr,
        "refuse-twice",
        &calls,
    )
    .await
    .expect("the third request answers");
    assert_eq!(stream.attempts(), 3);
    assert_eq!(consume(stream).await, ("abc".to_owned(), "end".to_owned()));
    assert_eq!(
        (server.seen("refuse-twice"), calls.load(Ordering::SeqCst)),
        (3, 3)
    );
}

#[tokio::test]
async fn a_body_that_breaks_after_its_first_chunk_reaches_the_consumer_and_is_not_retried() {
    let (server, addr) = serve().await;
    let calls = AtomicU32::new(0);
    let stream = open(
        &policy(3),
        StreamOptions::default(),
        addr,
        "break-after-one",
        &calls,
    )
    .await
    .expect("opened with its first chunk");
    assert_eq!(
        consume(stream).await,
        ("a".to_owned(), "body error: true".to_owned())
    );
    assert_eq!(
        (server.seen("break-after-one"), calls.load(Ordering::SeqCst)),
        (1, 1)
    );
}

#[tokio::test]
async fn a_body_that_stalls_ends_with_the_idle_timeout() {
    let (server, addr) = serve().await;
    let calls = AtomicU32::new(0);
    let options = StreamOptions::builder()
        .idle_timeout(Duration::from_millis(50))
        .build()
        .expect("valid options");
    let stream = open(&policy(3), options, addr, "stall-after-one", &calls)
        .await
        .expect("opened with its first chunk");
    assert_eq!(
        consume(stream).await,
        ("a".to_owned(), "idle 50ms".to_owned())
    );
    assert_eq!(
        (server.seen("stall-after-one"), calls.load(Ordering::SeqCst)),
        (1, 1)
    );
}

#[tokio::test]
async fn a_response_refused_on_every_attempt_ends_with_its_last_status() {
    let (server, addr) = serve().await;
    let calls = AtomicU32::new(0);
    let opened = open(
        &policy(2),
        StreamOptions::default(),
        addr,
        "refuse-twice",
        &calls,
    )
    .await;
    let Err(Error::Inner(error)) = opened else {
        panic!("both attempts refused");
    };
    assert_eq!(error.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(server.seen("refuse-twice"), 2);
}
