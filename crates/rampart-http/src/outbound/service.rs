//! The outbound service: one request, one policy call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{
    Extensions, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri, Version,
};
use http_body::Body;
use rampart::admit::{Admit, Unlimited};
use rampart::{Attempt, Cancelled, Deadline};
use tower_service::Service;

use super::hosts::Kept as KeptHost;
use super::{Engine, Hedged, Host, HostKey, Plan, Read, Repeatable, Stamp, within};
use crate::body::{Kept, ReplayBody, keep};
use crate::error::{BoxError, ClientError};
use crate::header::Names;

/// The service [`OutboundLayer`](super::OutboundLayer) makes.
///
/// It is always ready: the inner service is cloned for each attempt and made ready inside the
/// attempt, so a wait for readiness counts against the attempt's ceiling.
pub struct Outbound<S, A = Unlimited> {
    inner: S,
    engine: Arc<Engine<A>>,
    /// The host entry of every request, when it was named (see
    /// [`OutboundLayer::layer_for`](super::OutboundLayer::layer_for)).
    key: Option<Arc<str>>,
    /// The host of the last request, reused while requests go to the same host and the table
    /// has evicted no host since: no lock on the table then. A clone starts without one.
    last: Option<KeptHost<Host<A>>>,
    /// How the service was made: by [`Layer::layer`](tower_layer::Layer::layer) or
    /// [`layer_for`](super::OutboundLayer::layer_for), which refuse what only a tonic channel
    /// sends, or by `OutboundLayer::grpc`, which is the way in for it.
    way: Way,
}

/// How an [`Outbound`] was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// `layer` or `layer_for`: a gRPC request with no origin is refused.
    Http,
    /// `OutboundLayer::grpc`: under a tonic channel.
    #[cfg_attr(not(feature = "tonic"), allow(dead_code))]
    Grpc,
}

impl<S, A> Outbound<S, A> {
    pub(crate) fn new(inner: S, engine: Arc<Engine<A>>, key: Option<Arc<str>>, way: Way) -> Self {
        Outbound {
            inner,
            engine,
            key,
            last: None,
            way,
        }
    }

    /// Whether the layer hedges any request.
    #[cfg_attr(not(feature = "tonic"), allow(dead_code))]
    pub(crate) fn hedges(&self) -> bool {
        self.engine.hedges()
    }
}

impl<S: Clone, A> Clone for Outbound<S, A> {
    fn clone(&self) -> Self {
        Outbound {
            inner: self.inner.clone(),
            engine: Arc::clone(&self.engine),
            key: self.key.clone(),
            last: None,
            way: self.way,
        }
    }
}

impl<S: fmt::Debug, A> fmt::Debug for Outbound<S, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbound")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

type BoxedCall<T, E> = Pin<Box<dyn Future<Output = Result<T, ClientError<E>>> + Send>>;

/// The response future of [`Outbound`]: the policy's call, boxed (its type cannot be named
/// on stable Rust), or the error that stopped it before it began.
pub struct ResponseFuture<T, E> {
    inner: Call<T, E>,
}

enum Call<T, E> {
    Running(BoxedCall<T, E>),
    Failed(Option<ClientError<E>>),
}

// Nothing in it is pinned in place: the call is behind its box, and the error is only moved.
impl<T, E> Unpin for ResponseFuture<T, E> {}

impl<T, E> Future for ResponseFuture<T, E> {
    type Output = Result<T, ClientError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().inner {
            Call::Running(call) => call.as_mut().poll(cx),
            Call::Failed(error) => match error.take() {
                Some(error) => Poll::Ready(Err(error)),
                None => panic!("outbound response future polled after completion"),
            },
        }
    }
}

impl<T, E> fmt::Debug for ResponseFuture<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<S, A, B, ResB> Service<Request<B>> for Outbound<S, A>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResB: Send + 'static,
    A: Admit + Clone,
{
    type Response = Response<ResB>;
    type Error = ClientError<S::Error>;
    type Future = ResponseFuture<Response<ResB>, S::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if self.way == Way::Http && is_channel_grpc(&request) {
            return ResponseFuture {
                inner: Call::Failed(Some(grpc_not_through_grpc())),
            };
        }
        let host = match &self.key {
            Some(key) => self
                .engine
                .kept_host(&mut self.last, &HostKey::Borrowed(key)),
            None => match self.engine.kept_for(&self.last, request.uri()) {
                Some(host) => Ok(host),
                None => {
                    let key = HostKey::of(request.uri(), request.headers());
                    self.engine.kept_host(&mut self.last, &key)
                }
            },
        };
        let host = match host {
            Ok(host) => host,
            Err(e) => {
                let error = ClientError::Call(rampart::Error::Config(e));
                return ResponseFuture {
                    inner: Call::Failed(Some(error)),
                };
            }
        };
        // The request goes straight behind the template's lock (see `send`) and is prepared
        // there, so that it is moved into its place once.
        let mut template = Mutex::new(Template::new(
            self.inner.clone(),
            request.map(ReplayBody::new),
        ));
        let unshared = template.get_mut().unwrap_or_else(PoisonError::into_inner);
        let caller = unshared.prepare(&host.edge.names);
        // Allocated before the call's future is made, so that the future is written straight
        // into its box, not made on the stack and copied there whole.
        let call = Box::write(Box::new_uninit(), send(host, template, caller));
        ResponseFuture {
            inner: Call::Running(Box::into_pin(call)),
        }
    }
}

/// Sends a request under its host's policy.
///
/// A plain function returning an `async` block: the block owns its inputs once, where an
/// `async fn` would keep a second copy of its arguments in its state.
#[allow(clippy::manual_async_fn)]
fn send<S, A, B, ResB>(
    host: Arc<Host<A>>,
    mut template: Mutex<Template<S, B>>,
    caller: Option<Deadline>,
) -> impl Future<Output = Result<Response<ResB>, ClientError<S::Error>>>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResB: Send + 'static,
    A: Admit + Clone,
{
    // Owned by this block and borrowed by the callback: rampart's call future keeps its
    // callback in several states, so a callback that owned the request would carry it several
    // times over. Behind a mutex (locked twice per attempt, never across a wait, and
    // uncontended unless legs are hedged) so that the callback is `Sync` for any `Send`
    // service and body. Made before the block, so that the block holds the request once: a
    // block's input keeps its place in the block's state after it is moved out. Locked by
    // the caller, who makes the template in place behind it: locking it here would move
    // the template once more (640 bytes).
    async move {
        let host = &*host;
        let names = &host.edge.names;
        crate::quota::check(host.quota.as_ref(), &host.key, &host.edge.listeners)?;
        let unshared = template.get_mut().unwrap_or_else(PoisonError::into_inner);
        let stamp = unshared.stamp;
        let (method, marked, hedged) = unshared.head();
        let mut plan = host.plan(method, marked);
        if plan == Plan::Replay {
            let kept = unshared
                .keep(names, host.edge.replay_limit)
                .await
                .map_err(|e| ClientError::Body(e.into()))?;
            if !kept {
                host.not_replayable();
                plan = Plan::Once;
            }
        }
        let policy = match plan {
            Plan::Once => &host.once,
            Plan::Replay => host.replay(hedged),
        };
        let op = async |attempt: &Attempt| {
            // Cloned under the lock, made ready without it: a hedged leg may want the
            // template while this one waits for its service.
            let mut service = lock(&template).service.clone();
            let mut waited = false;
            std::future::poll_fn(|cx| {
                let ready = service.poll_ready(cx);
                waited |= ready.is_pending();
                ready
            })
            .await?;
            // Nothing awaited since the attempt began (no admission queue, the service ready
            // at once): its start's reading is the time left's (see `Read::AtStart`).
            let read = match A::ALWAYS_ADMITS && !waited {
                true => Read::AtStart,
                false => Read::Now,
            };
            // The request is made once the service is ready, so that the deadline written is
            // the time left when the request goes out, and it is not kept across the wait.
            // Each block ends the storage of what it made before the next await: a local stays
            // in the callback's future while its scope lasts, moved out or not, and that future
            // is held (and moved) with the whole call.
            let sent = {
                let request = lock(&template).next(names, attempt, read);
                let span = crate::observe::attempt_span(request.method(), &host.key, attempt);
                span.run(service.call(request))
            };
            let error = {
                #[allow(unused_mut)]
                let mut response = sent.await;
                if let (Some(quota), Ok(response)) = (&host.quota, &response) {
                    quota.observe(response.headers());
                }
                // A gRPC call not read ahead is sent once: under the host's `once` policy,
                // whose breaker is the host's.
                #[cfg(feature = "tonic")]
                if stamp.grpc
                    && let Ok(response) = &mut response
                {
                    crate::grpc::defer_status(response, attempt, &host.once);
                }
                match response {
                    Err(e) if stamp.is_transport_timer(attempt) => e,
                    outcome => return outcome,
                }
            };
            attempt.cancelled().await;
            Err(error)
        };
        // `try_run` hedges when the host's policy hedges (its hedged state boxed by rampart).
        // Matched, not through `map_err` and `?`: each is a move of the report (and the
        // response in it).
        match within(policy, caller).try_run(op).await {
            Ok(result) => crate::report::finish(result, host.fail_on_status, true),
            Err(Cancelled) => Err(ClientError::Call(rampart::Error::Cancelled)),
        }
    }
}

/// Whether the request is what a tonic client sends into a channel: gRPC, and no origin in
/// its URI (the channel adds it, below any layer). Only a transport that adds the origin can
/// send it, and under the plain layer its host entry would be `""` for every channel and
/// rampart's decisions would reach the tonic client as `UNKNOWN`.
fn is_channel_grpc<B>(request: &Request<B>) -> bool {
    request.uri().authority().is_none() && crate::header::is_grpc(request.headers())
}

/// The error of a gRPC request sent into a tonic channel through the plain layer.
#[cold]
fn grpc_not_through_grpc<E>() -> ClientError<E> {
    let problem = rampart::ConfigProblem::new(
        "grpc",
        "a gRPC request with no origin in its URI (a tonic channel under `OutboundLayer::layer` \
         or `layer_for`) was not sent: put the channel under the layer with \
         `OutboundLayer::grpc(origin, channel)` (feature `tonic`), which keys its host entry by \
         the origin and answers rampart's decisions as `tonic::Status`",
    );
    ClientError::Call(rampart::Error::Config(rampart::ConfigError::new(vec![
        problem,
    ])))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What each attempt is made from.
struct Template<S, B> {
    stamp: Stamp,
    service: S,
    /// The request itself, for the first attempt (a replayable request's with a copy of the
    /// kept body): moved into it, head and all, no copy made.
    first: Option<Request<ReplayBody<B>>>,
    /// What a later attempt of a replayable request (a retry, a hedged leg) is made from.
    again: Option<Again>,
}

/// A replayable request's head, kept for its later attempts, and its kept body.
struct Again {
    method: Method,
    uri: Uri,
    version: Version,
    /// The headers as a flat list: one allocation (none when there are none), where a
    /// `HeaderMap` would make two. A later attempt makes its map from it.
    headers: Vec<(HeaderName, HeaderValue)>,
    extensions: Extensions,
    data: Bytes,
    trailers: Option<HeaderMap>,
}

impl<S, B> Template<S, B> {
    /// The template of a request sent as it is, once, unless [`keep`](Self::keep) reads its
    /// body for replay; [`prepare`](Self::prepare) it before its first attempt.
    fn new(service: S, request: Request<ReplayBody<B>>) -> Self {
        Template {
            stamp: Stamp::UNPREPARED,
            service,
            first: Some(request),
            again: None,
        }
    }

    /// Reads the request's headers for its stamp ([`Stamp::prepare`]): the caller's
    /// deadline, if any.
    fn prepare(&mut self, names: &Names) -> Option<Deadline> {
        let Some(request) = &mut self.first else {
            unreachable!("prepared before the first attempt")
        };
        let (stamp, caller) = Stamp::prepare(names, request.headers_mut());
        self.stamp = stamp;
        caller
    }

    /// The request's method, and whether its caller marked it [`Repeatable`] and
    /// [`Hedged`], before its first attempt.
    fn head(&self) -> (&Method, bool, bool) {
        match &self.first {
            Some(request) => {
                let extensions = request.extensions();
                (
                    request.method(),
                    extensions.get::<Repeatable>().is_some(),
                    extensions.get::<Hedged>().is_some(),
                )
            }
            None => unreachable!("read before the first attempt"),
        }
    }

    /// Reads the body of the request for replay, up to `limit` bytes, and keeps a copy of the
    /// request for later attempts: whether it was kept (else the request is sent once, the
    /// bytes read put back before the rest).
    async fn keep(&mut self, names: &Names, limit: usize) -> Result<bool, B::Error>
    where
        B: Body + Unpin,
    {
        // The body is taken out and put back: the request itself stays where it is (moving
        // it would copy its head, some 350 bytes, each way).
        let Some(request) = &mut self.first else {
            unreachable!("kept before the first attempt")
        };
        // A body already at its end (a `GET`'s, most often) has nothing to read: no reading
        // future is made for it.
        let (data, trailers) = if request.body().is_end_stream() {
            (Bytes::new(), None)
        } else {
            let taken = std::mem::replace(request.body_mut(), ReplayBody::buffered(Bytes::new()));
            let Some(body) = taken.into_unread() else {
                unreachable!("the caller's body, as `new` took it")
            };
            match keep(body, limit).await? {
                Kept::Replayable { data, trailers } => (data, trailers),
                Kept::Once(body) => {
                    *request.body_mut() = body;
                    return Ok(false);
                }
            }
        };
        *request.body_mut() = ReplayBody::replay(data.clone(), trailers.clone());
        // Without what every attempt's stamp replaces: a copy of the caller's deadline would
        // be written over (and a name built from a string makes its shared count on its
        // first clone: an allocation). A loop, not an iterator's `collect`: the filtered
        // iterator's size is not known, and its `collect` cost half as much again.
        let mut headers = Vec::with_capacity(request.headers().len());
        for (name, value) in request.headers() {
            if !self.stamp.replaces(names, name) {
                headers.push((name.clone(), value.clone()));
            }
        }
        self.again = Some(Again {
            method: request.method().clone(),
            uri: request.uri().clone(),
            version: request.version(),
            headers,
            extensions: request.extensions().clone(),
            data,
            trailers,
        });
        Ok(true)
    }

    /// The next attempt's request, its headers stamped: the request itself first, then a copy
    /// of a replayable request's.
    fn next(&mut self, names: &Names, attempt: &Attempt, read: Read) -> Request<ReplayBody<B>> {
        // The first request is stamped where it lies and moved once, out of the template.
        if let Some(first) = &mut self.first {
            self.stamp.write(names, first.headers_mut(), attempt, read);
            return self
                .first
                .take()
                .unwrap_or_else(|| unreachable!("stamped above"));
        }
        let Some(again) = &self.again else {
            unreachable!("a request that cannot be replayed gets one attempt")
        };
        let mut request = again.request();
        // The copy left the caller's deadline out.
        let stamp = self.stamp.copied();
        stamp.write(names, request.headers_mut(), attempt, read);
        request
    }
}

/// The headers an attempt's stamp may add to a copy: the deadline, the criticality and the
/// retry mark.
const STAMPED: usize = 3;

impl Again {
    /// A copy of the request, its header map made with room for the stamp (a map with no
    /// room would grow, allocating again).
    fn request<B>(&self) -> Request<ReplayBody<B>> {
        let mut request =
            Request::new(ReplayBody::replay(self.data.clone(), self.trailers.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = self.version;
        *request.extensions_mut() = self.extensions.clone();
        let headers = request.headers_mut();
        headers.reserve(self.headers.len() + STAMPED);
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        request
    }
}
