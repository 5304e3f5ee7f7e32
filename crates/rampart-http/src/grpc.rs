//! tonic (feature `tonic`): a tonic channel under the outbound layer, and rampart's decisions
//! as `tonic::Status`.
//!
//! A tonic client sends relative URIs (`/pkg.Service/Method`): its channel adds the origin
//! later, below any layer. So a channel is put under the [outbound layer](crate::outbound)
//! with its origin named: [`OutboundLayer::grpc`] makes a [`GrpcChannel`] whose requests all
//! use the host entry of that origin (one breaker and one budget), and which tonic's
//! `Grpc` client takes as it is:
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use rampart_http::OutboundLayer;
//! use tonic::transport::Endpoint;
//!
//! let layer = OutboundLayer::builder()
//!     .policy(|p| p.total_timeout(Duration::from_secs(2)).attempt_timeout(Duration::from_millis(500)))
//!     .build()?;
//! let channel = Endpoint::from_static("http://inventory:50051").connect_lazy();
//! let channel = layer
//!     .grpc("http://inventory:50051", channel) // the one line
//!     .repeatable("/inventory.Stock/Get"); // a method safe to send again: retried
//! let client = tonic::client::Grpc::new(channel);
//! # drop(client); Ok(()) }
//! ```
//!
//! It is the one way in for a tonic channel: under [`Layer::layer`](tower_layer::Layer::layer)
//! (or [`layer_for`](OutboundLayer::layer_for)), a tonic client's request, which has no
//! origin in its URI, is refused with an error naming `OutboundLayer::grpc` (there its host
//! entry would be `""` for every channel, and rampart's timeouts would reach the client as
//! `UNKNOWN`).
//!
//! The origin is the channel's endpoint, with or without its scheme (`http://inventory:50051`
//! or `inventory:50051`); it names the host entry. gRPC calls are `POST`s, so a call is sent
//! once unless it may be sent again: name such methods (idempotent reads, writes with a
//! request id the server deduplicates) once on the channel with
//! [`repeatable`](GrpcChannel::repeatable), or mark a single request with the [`Repeatable`]
//! extension. The example `grpc_unary` (`cargo run -p rampart-http --features tonic --example
//! grpc_unary`) makes a unary call this way without protoc or generated code: tonic's `Grpc`
//! client, a path and a codec.
//!
//! What the channel adds to the [outbound layer](crate::outbound)'s behaviour:
//!
//! | what | how |
//! |---|---|
//! | errors | `tonic::Status`, from [`ClientError`] (see the table below); tonic's `Grpc` client passes it to the caller as it is |
//! | trailers | the response of a [`Repeatable`] call, or of a method named [`unary`](GrpcChannel::unary), is read ahead, up to the [replay limit](crate::OutboundBuilder::replay_limit), so that the `grpc-status` in its trailers is classified (see [`crate::classify`]; a named future per attempt, no box, and the trailers copied into the response's extensions only when their status is not OK); the caller gets the same frames. Any other call's 200 whose status is still to come is handed to the caller as it arrives, and the `grpc-status` its trailers bring is the host breaker's evidence when they come ([`Attempt::defer_evidence`], [`Breaker::record_late`]) |
//! | the caller's timeout | tonic's `set_timeout` writes `grpc-timeout`; the call runs within it and never extends it |
//! | the timer tie | the channel arms its own timer from the `grpc-timeout` an attempt carries; when it fires with the attempt's ceiling (all but) reached, rampart's timer decides, so the caller sees `DEADLINE_EXCEEDED`, not tonic's `CANCELLED` |
//!
//! Only mark unary (and client-streaming) calls `Repeatable`: a server-streaming response is
//! read ahead too, so its first messages reach the caller only when the stream ends or passes
//! the replay limit.
//!
//! On a layer that hedges the requests that ask for it
//! ([`hedge_marked`](crate::OutboundBuilder::hedge_marked)), a repeatable method named
//! [`hedged`](GrpcChannel::hedged) on the channel hedges every call, as a request marked
//! [`Hedged`] does, on the host's one entry (one breaker, one budget) with the other calls:
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use rampart::hedge::Hedge;
//! use rampart_http::OutboundLayer;
//! use tonic::transport::Endpoint;
//!
//! let layer = OutboundLayer::builder().hedge_marked(Hedge::adaptive()).build()?;
//! let channel = Endpoint::from_static("http://inventory:50051").connect_lazy();
//! let channel = layer
//!     .grpc("http://inventory:50051", channel)
//!     .repeatable("/inventory.Stock/*")
//!     .hedged("/inventory.Stock/Get")?; // a method whose tail matters
//! # drop(channel); Ok(()) }
//! ```
//!
//! A call neither repeatable nor named unary is not read ahead (the channel cannot tell a
//! unary call from a streaming one): its 200 is handed to the caller at once, and the
//! `grpc-status` in its trailers reaches the caller and, when the trailers come, the host's
//! breaker (an `UNAVAILABLE` there is a failure, an `OK` a success, or a failure when the
//! attempt's time to its headers was over the breaker's
//! [`slow_call`](rampart::breaker::BreakerBuilder::slow_call); for a server stream, when the
//! stream ends). Until then the call counts for nothing: its success at the headers is no
//! evidence. What such a call's trailers cannot change is the call itself, which has
//! returned: it is not retried, its report says it succeeded, and
//! [`fail_on_retryable_status`](crate::OutboundBuilder::fail_on_retryable_status) cannot see
//! the status. Name a method that must not be sent twice (a write without a request id)
//! [`unary`](GrpcChannel::unary) for those; a trailers-only answer (the status in the
//! headers, as tonic's server sends an error before any message) is classified either way.
//!
//! | rampart decided | `tonic::Code` | `grpc-retry-pushback-ms` |
//! |---|---|---|
//! | deadline exceeded, attempt timeout | `DeadlineExceeded` | |
//! | circuit breaker open, draining | `Unavailable` | the refusal's retry-after (1 s when it gave none) |
//! | admission refused (rate or concurrency limit), retry budget exhausted before any attempt failed | `ResourceExhausted` | the same |
//! | retry budget exhausted after a failed attempt | the last failure's status (the dependency's own `UNAVAILABLE`, say) | |
//! | the caller cancelled | `Cancelled` | |
//! | invalid configuration, request body unreadable | `Internal` | |
//! | the transport's own error | what tonic makes of it (`Status::from_error`) | |
//! | a retryable status ended the call ([`ClientError::Status`], with [`fail_on_retryable_status`](crate::OutboundBuilder::fail_on_retryable_status) on) | `DeadlineExceeded` when the deadline ran out on it, else `Unavailable` | |

// Longer than the ~600-line guide by its documentation: some 200 of its lines are the module's
// docs (the way in for a tonic channel, what is read ahead, the status table); the code is about
// 500, its tests in `grpc_tests.rs`.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use rampart::admit::{Admit, Unlimited};
use rampart::breaker::{Breaker, Evidence};
use rampart::clock::Clock;
use rampart::{Attempt, ConfigError, ConfigProblem, RejectReason};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tower_service::Service;

use crate::body::{Keep, Kept, ReplayBody, keep};
use crate::classify::Trailers;
use crate::error::{BoxError, ClientError};
use crate::header::{GRPC_RETRY_PUSHBACK_MS, GRPC_STATUS, format_pushback, last};
use crate::outbound::{Hedged, Outbound, OutboundLayer, Repeatable, ResponseFuture, Way};

impl<A> OutboundLayer<A> {
    /// A tonic channel (or any service over `tonic::body::Body`) under this layer, every
    /// request keyed by `origin` in the host table, its errors as `tonic::Status`. See
    /// [`crate::grpc`].
    ///
    /// `origin` is the channel's endpoint, with or without a scheme: `http://inventory:50051`
    /// and `inventory:50051` name the same host entry, `inventory:50051`, as the keys the
    /// layer makes from URIs do; without a port, a scheme gives its own (80 for `http`, 443
    /// for `https`).
    pub fn grpc<S>(&self, origin: &str, channel: S) -> GrpcChannel<S, A> {
        let limit = self.engine().edge.replay_limit;
        GrpcChannel {
            inner: self.keyed(
                &origin_key(origin),
                ReadAhead {
                    inner: channel,
                    limit,
                },
                Way::Grpc,
            ),
            methods: Arc::from([]),
        }
    }
}

/// The host key of a channel's origin: `host:port` as given, or the authority of a URI with a
/// scheme, its port explicit.
fn origin_key(origin: &str) -> Cow<'_, str> {
    let Ok(uri) = origin.parse::<http::Uri>() else {
        return Cow::Borrowed(origin);
    };
    let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
        return Cow::Borrowed(origin);
    };
    let default = if *scheme == http::uri::Scheme::HTTPS {
        443
    } else {
        80
    };
    let port = authority.port_u16().unwrap_or(default);
    Cow::Owned(format!("{}:{port}", authority.host()))
}

/// A tonic channel under an [`OutboundLayer`]: made by [`OutboundLayer::grpc`].
pub struct GrpcChannel<S, A = Unlimited> {
    inner: Outbound<ReadAhead<S>, A>,
    /// The methods named on the channel, in the order they were given.
    methods: Arc<[(Method, Mark)]>,
}

/// What naming a method on a [`GrpcChannel`] does to its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// [`GrpcChannel::repeatable`]: sent as [`Repeatable`].
    Repeatable,
    /// [`GrpcChannel::unary`]: read ahead to its trailers, sent once.
    Unary,
    /// [`GrpcChannel::hedged`]: sent as [`Hedged`] (it is also named repeatable).
    Hedged,
}

/// In a request's extensions, between the channel and [`ReadAhead`]: read the response ahead
/// to its trailers although the call is not [`Repeatable`].
#[derive(Debug, Clone, Copy)]
struct ReadTrailers;

/// A method named to [`GrpcChannel::repeatable`]: a path, or every path under a service.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Method {
    /// `/pkg.Service/Method`.
    Exact(Box<str>),
    /// `/pkg.Service/`, from `/pkg.Service/*`.
    Service(Box<str>),
}

impl Method {
    fn parse(method: &str) -> Method {
        let path = if method.starts_with('/') {
            method.to_owned()
        } else {
            format!("/{method}")
        };
        match path.strip_suffix('*') {
            Some(service) if service.ends_with('/') => Method::Service(service.into()),
            _ => Method::Exact(path.into()),
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            Method::Exact(method) => path == &**method,
            Method::Service(service) => path.starts_with(&**service),
        }
    }

    /// Whether every path `other` matches, this one matches.
    fn covers(&self, other: &Method) -> bool {
        match (self, other) {
            (_, Method::Exact(path)) => self.matches(path),
            (Method::Service(service), Method::Service(other)) => other.starts_with(&**service),
            (Method::Exact(_), Method::Service(_)) => false,
        }
    }
}

impl fmt::Display for Method {
    /// The method as it is written: `/pkg.Service/Method`, or `/pkg.Service/*`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Exact(path) => f.write_str(path),
            Method::Service(service) => write!(f, "{service}*"),
        }
    }
}

impl<S, A> GrpcChannel<S, A> {
    /// Sends every call of `method` as [`Repeatable`]: retried, hedged and read ahead to its
    /// trailers as a `GET` would be, with no extension on each request. For methods that may
    /// run twice without harm: reads, and writes with a request id the server deduplicates.
    ///
    /// `method` is the gRPC path, `/package.Service/Method` (the leading `/` may be left
    /// out), or `/package.Service/*` for every method of a service. Only unary and
    /// client-streaming methods: a server-streaming response is read ahead too (see the
    /// [module docs](crate::grpc)).
    ///
    /// ```
    /// use rampart_http::OutboundLayer;
    /// use tonic::transport::Endpoint;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let layer = OutboundLayer::new();
    /// let channel = Endpoint::from_static("http://inventory:50051").connect_lazy();
    /// let channel = layer
    ///     .grpc("http://inventory:50051", channel)
    ///     .repeatable("/inventory.Stock/Get")
    ///     .repeatable("/inventory.Catalog/*");
    /// # drop(channel); }
    /// ```
    pub fn repeatable(self, method: &str) -> Self {
        self.name(Method::parse(method), Mark::Repeatable)
    }

    /// Reads every response of `method` ahead to its trailers, as a repeatable call's is, but
    /// sends each call once: the `grpc-status` in the trailers is classified before the call
    /// returns, so that an `UNAVAILABLE` there is the call's outcome (its report's stop reason,
    /// and a [`ClientError::Status`] with
    /// [`fail_on_retryable_status`](crate::OutboundBuilder::fail_on_retryable_status)), where
    /// a call named nothing returns at its headers and only the breaker hears its trailers.
    /// For a unary or client-streaming method that must not be sent twice; `method` is written
    /// as for [`repeatable`](Self::repeatable), which reads ahead too and needs no `unary`.
    pub fn unary(self, method: &str) -> Self {
        self.name(Method::parse(method), Mark::Unary)
    }

    /// Hedges every call of `method`, as a request marked [`Hedged`] is: on a layer built
    /// with [`hedge_marked`](crate::OutboundBuilder::hedge_marked), each call runs under the
    /// host's hedging policy (the layer's [`Hedge`](rampart::hedge::Hedge), its adaptive
    /// delay learned from the hedged calls alone), on the host's one entry, breaker and retry
    /// budget; each hedge that fires spends a token of that budget. On a layer that hedges
    /// every repeatable request ([`hedge`](crate::OutboundBuilder::hedge)) it changes
    /// nothing. `method` is written as for [`repeatable`](Self::repeatable).
    ///
    /// A hedge sends the call more than once, so only a repeatable method may be hedged: name
    /// it (or its service) [`repeatable`](Self::repeatable) first.
    ///
    /// ```
    /// use rampart::hedge::Hedge;
    /// use rampart_http::OutboundLayer;
    /// use tonic::transport::Endpoint;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let layer = OutboundLayer::builder()
    ///     .hedge_marked(Hedge::adaptive())
    ///     .build()
    ///     .expect("valid layer");
    /// let channel = Endpoint::from_static("http://inventory:50051").connect_lazy();
    /// let channel = layer.grpc("http://inventory:50051", channel);
    /// let error = channel
    ///     .clone()
    ///     .hedged("/inventory.Stock/Put")
    ///     .expect_err("not repeatable");
    /// assert!(error.to_string().starts_with("hedged(/inventory.Stock/Put) needs the method"));
    /// let channel = channel
    ///     .repeatable("/inventory.Stock/Get")
    ///     .hedged("/inventory.Stock/Get")
    ///     .expect("repeatable, on a layer that hedges");
    /// # drop(channel); }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] whose problem's field is `hedged(method)`, when `method` is not
    /// covered by a method or service named [`repeatable`](Self::repeatable) before, or when
    /// the layer hedges no request (built with neither `hedge_marked` nor `hedge`, or with
    /// `max_attempts(1)`), where the setting would do nothing.
    pub fn hedged(self, method: &str) -> Result<Self, ConfigError> {
        let method = Method::parse(method);
        let field = || format!("hedged({method})");
        let mut problems = Vec::new();
        let repeatable = self
            .methods
            .iter()
            .any(|(named, mark)| *mark == Mark::Repeatable && named.covers(&method));
        if !repeatable {
            problems.push(ConfigProblem::new(
                field(),
                "needs the method (or its service) named `repeatable` first: a hedge sends the \
                 call more than once",
            ));
        }
        if !self.inner.hedges() {
            problems.push(ConfigProblem::new(
                field(),
                "would do nothing: the layer hedges no request (build it with \
                 `OutboundBuilder::hedge_marked`, and more than one attempt)",
            ));
        }
        if problems.is_empty() {
            Ok(self.name(method, Mark::Hedged))
        } else {
            Err(ConfigError::new(problems))
        }
    }

    fn name(mut self, method: Method, mark: Mark) -> Self {
        let mut methods = self.methods.to_vec();
        methods.push((method, mark));
        self.methods = Arc::from(methods);
        self
    }
}

impl<S: Clone, A> Clone for GrpcChannel<S, A> {
    fn clone(&self) -> Self {
        GrpcChannel {
            inner: self.inner.clone(),
            methods: Arc::clone(&self.methods),
        }
    }
}

impl<S: fmt::Debug, A> fmt::Debug for GrpcChannel<S, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcChannel")
            .field("inner", &self.inner)
            .field("methods", &self.methods)
            .finish()
    }
}

impl<S, A, B, ResB> Service<Request<B>> for GrpcChannel<S, A>
where
    S: Service<Request<tonic::body::Body>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Unpin + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError>,
    A: Admit + Clone,
{
    type Response = Response<tonic::body::Body>;
    type Error = Status;
    type Future = GrpcFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> GrpcFuture {
        let path = request.uri().path();
        let (mut repeatable, mut unary, mut hedged) = (false, false, false);
        for (_, mark) in self
            .methods
            .iter()
            .filter(|(method, _)| method.matches(path))
        {
            match mark {
                Mark::Repeatable => repeatable = true,
                Mark::Unary => unary = true,
                Mark::Hedged => hedged = true,
            }
        }
        let extensions = request.extensions_mut();
        if repeatable {
            extensions.insert(Repeatable);
            if hedged {
                extensions.insert(Hedged);
            }
        } else if unary {
            extensions.insert(ReadTrailers);
        }
        GrpcFuture {
            inner: self.inner.call(request),
        }
    }
}

/// The response future of [`GrpcChannel`]: the outbound call, its error as a `Status`.
pub struct GrpcFuture {
    inner: ResponseFuture<Response<tonic::body::Body>, BoxError>,
}

impl Future for GrpcFuture {
    type Output = Result<Response<tonic::body::Body>, Status>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let outcome = ready!(Pin::new(&mut self.inner).poll(cx));
        Poll::Ready(outcome.map_err(Status::from).map(|mut response| {
            match response.extensions_mut().remove::<LateStatus>() {
                Some(late) => response.map(|inner| {
                    tonic::body::Body::new(StatusWatch {
                        inner,
                        late: Some(late),
                    })
                }),
                None => response,
            }
        }))
    }
}

impl fmt::Debug for GrpcFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GrpcFuture")
    }
}

/// rampart's decisions as the status a tonic caller expects; see the [module table](self).
impl<E: Into<BoxError> + fmt::Display> From<ClientError<E>> for Status {
    fn from(error: ClientError<E>) -> Status {
        let message = match &error {
            ClientError::Call(rampart::Error::Inner(_)) => String::new(),
            ClientError::Call(e) => e.to_string(),
            ClientError::Body(_) | ClientError::QuotaSpent { .. } | ClientError::Status(_) => {
                error.to_string()
            }
        };
        match error {
            ClientError::Call(rampart::Error::Inner(e)) => Status::from_error(e.into()),
            // The dependency's failure stands; the budget only declined to retry it.
            ClientError::Call(rampart::Error::Rejected {
                reason: RejectReason::BudgetExhausted,
                last: Some(last),
                ..
            }) => Status::from(ClientError::Call(*last)),
            ClientError::Call(_) | ClientError::Status(_) if error.is_timeout() => {
                Status::deadline_exceeded(message)
            }
            ClientError::Status(_) => Status::unavailable(message),
            ClientError::Call(rampart::Error::Rejected {
                reason,
                retry_after,
                ..
            }) => {
                let code = match reason {
                    RejectReason::DependencyUnavailable | RejectReason::Draining => {
                        Code::Unavailable
                    }
                    _ => Code::ResourceExhausted,
                };
                let mut pushback = HeaderMap::new();
                pushback.insert(GRPC_RETRY_PUSHBACK_MS, format_pushback(retry_after));
                Status::with_metadata(code, message, MetadataMap::from_headers(pushback))
            }
            ClientError::QuotaSpent { retry_after, .. } => {
                let mut pushback = HeaderMap::new();
                pushback.insert(GRPC_RETRY_PUSHBACK_MS, format_pushback(Some(retry_after)));
                Status::with_metadata(
                    Code::ResourceExhausted,
                    message,
                    MetadataMap::from_headers(pushback),
                )
            }
            ClientError::Call(rampart::Error::Cancelled) => Status::cancelled(message),
            _ => Status::internal(message),
        }
    }
}

/// Between the outbound layer and a tonic channel: the body in tonic's type, and the response
/// of a repeatable call read ahead to its trailers.
#[derive(Debug, Clone)]
pub(crate) struct ReadAhead<S> {
    inner: S,
    limit: usize,
}

impl<S, B, ResB> Service<Request<ReplayBody<B>>> for ReadAhead<S>
where
    S: Service<Request<tonic::body::Body>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Unpin + Send + 'static,
    ResB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = ReadAheadFuture<S::Future, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReplayBody<B>>) -> Self::Future {
        let extensions = request.extensions();
        let read_ahead =
            extensions.get::<Repeatable>().is_some() || extensions.get::<ReadTrailers>().is_some();
        ReadAheadFuture {
            state: ReadState::Calling {
                call: self.inner.call(request.map(tonic::body::Body::new)),
                read_ahead,
                limit: self.limit,
            },
        }
    }
}

pin_project! {
    /// An attempt's response, read ahead to its trailers when the call is repeatable (or its
    /// method named unary): a named
    /// future, not a box per attempt.
    pub(crate) struct ReadAheadFuture<F, ResB> {
        #[pin]
        state: ReadState<F, ResB>,
    }
}

pin_project! {
    #[project = ReadStateProj]
    enum ReadState<F, ResB> {
        Calling { #[pin] call: F, read_ahead: bool, limit: usize },
        Reading { parts: Option<http::response::Parts>, body: Keep<ResB> },
        Done,
    }
}

impl<F, E, ResB> Future for ReadAheadFuture<F, ResB>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    E: Into<BoxError>,
    ResB: Body<Data = Bytes> + Unpin + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Output = Result<Response<tonic::body::Body>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                ReadStateProj::Calling {
                    call,
                    read_ahead,
                    limit,
                } => {
                    let mut response = ready!(call.poll(cx)).map_err(Into::into)?;
                    if response.headers().contains_key(GRPC_STATUS) {
                        this.state.set(ReadState::Done);
                        return Poll::Ready(Ok(response.map(tonic::body::Body::new)));
                    }
                    if !*read_ahead {
                        // A 200 whose status comes in the trailers, after the call returns.
                        if response.status() == http::StatusCode::OK {
                            response.extensions_mut().insert(StatusToCome);
                        }
                        this.state.set(ReadState::Done);
                        return Poll::Ready(Ok(response.map(tonic::body::Body::new)));
                    }
                    let limit = *limit;
                    let (parts, body) = response.into_parts();
                    this.state.set(ReadState::Reading {
                        parts: Some(parts),
                        body: keep(body, limit),
                    });
                }
                ReadStateProj::Reading { parts, body } => {
                    let kept = ready!(Pin::new(body).poll(cx)).map_err(Into::into)?;
                    let Some(mut parts) = parts.take() else {
                        unreachable!("a response is read ahead once")
                    };
                    let body = match kept {
                        Kept::Replayable { data, trailers } => {
                            // Copied for the classifier only when they say something other
                            // than OK: an OK in the trailers means what no trailers mean (the
                            // 200 is a success), so a successful call copies nothing.
                            if let Some(trailers) = trailers.as_ref().filter(|t| !says_ok(t)) {
                                parts.extensions.insert(Trailers(trailers.clone()));
                            }
                            tonic::body::Body::new(ReplayBody::<ResB>::replay(data, trailers))
                        }
                        Kept::Once(body) => tonic::body::Body::new(body),
                    };
                    this.state.set(ReadState::Done);
                    return Poll::Ready(Ok(Response::from_parts(parts, body)));
                }
                ReadStateProj::Done => panic!("a read-ahead future polled after it answered"),
            }
        }
    }
}

/// In a response's extensions, from [`ReadAhead`] to the outbound call: a 200 not read ahead,
/// whose `grpc-status` is still to come in its trailers.
#[derive(Debug, Clone, Copy)]
struct StatusToCome;

/// In a response's extensions, from the outbound call to [`GrpcFuture`]: the breaker that is to
/// hear the status the trailers bring, the clock it reads its instants on, and how long the
/// attempt took to its answer (what the breaker's `slow_call` judges).
#[derive(Clone)]
struct LateStatus {
    breaker: Breaker,
    clock: Clock,
    elapsed: Duration,
}

/// The outbound call's part for a response whose status is still to come: its attempt's
/// success is no evidence yet ([`Attempt::defer_evidence`]), and the host's breaker goes with
/// the response, for [`GrpcFuture`] to give the body that reads the trailers. Out of line:
/// only a gRPC request's answer comes here.
#[inline(never)]
pub(crate) fn defer_status<B, C, A>(
    response: &mut Response<B>,
    attempt: &Attempt,
    policy: &rampart::Policy<C, A>,
) {
    if response.extensions_mut().remove::<StatusToCome>().is_some()
        && let Some(breaker) = policy.breaker()
    {
        attempt.defer_evidence();
        // The attempt's time to its answer: its ceiling's span less the time left now (an
        // attempt with no ceiling is not timed, and counts as quick).
        let elapsed = attempt
            .timeout()
            .zip(attempt.remaining())
            .map_or(Duration::ZERO, |(span, left)| span.saturating_sub(left));
        response.extensions_mut().insert(LateStatus {
            breaker: breaker.clone(),
            clock: policy.clock().clone(),
            elapsed,
        });
    }
}

pin_project! {
    /// A response body whose trailers' `grpc-status` is its call's breaker evidence, recorded
    /// when they arrive ([`Breaker::record_late`]); a body that ends or is dropped without
    /// them records nothing.
    struct StatusWatch {
        #[pin]
        inner: tonic::body::Body,
        late: Option<LateStatus>,
    }
}

impl Body for StatusWatch {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && let Some(trailers) = frame.trailers_ref()
            && let Some(late) = this.late.take()
        {
            let verdict = crate::classify::HttpClassifier::verdict_with_trailers(
                http::StatusCode::OK,
                &HeaderMap::new(),
                Some(trailers),
            );
            // The evidence the executor would record for the attempt, had it seen them. Never
            // slow: the time of the rest of a stream says nothing of the dependency.
            let evidence = Evidence::from(rampart::AttemptOutcome::from(verdict));
            late.breaker
                .record_late(evidence, late.elapsed, late.clock.now());
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether trailers carry no `grpc-status` but `0` (OK), and so change no verdict.
fn says_ok(trailers: &HeaderMap) -> bool {
    last(trailers, &GRPC_STATUS).is_none_or(|status| status.as_bytes() == b"0")
}

#[cfg(test)]
#[path = "grpc_tests.rs"]
mod tests;
