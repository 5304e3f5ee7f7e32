//! The outbound service: one request, one policy call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Request, Response};
use http_body::Body;
use rampart::Attempt;
use rampart::admit::{Admit, Unlimited};
use tower_service::Service;

use super::{Engine, Entry, Host, HostKey, Plan, Repeatable, Stamp, within};
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
    /// The entry of the last request's host, reused while requests go to the same host and
    /// the table keeps it: no lock on the table then. A clone starts without one.
    last: Option<Arc<Entry<Host<A>>>>,
}

impl<S, A> Outbound<S, A> {
    pub(crate) fn new(inner: S, engine: Arc<Engine<A>>, key: Option<Arc<str>>) -> Self {
        Outbound {
            inner,
            engine,
            key,
            last: None,
        }
    }
}

impl<S: Clone, A> Clone for Outbound<S, A> {
    fn clone(&self) -> Self {
        Outbound {
            inner: self.inner.clone(),
            engine: Arc::clone(&self.engine),
            key: self.key.clone(),
            last: None,
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

/// The response future of [`Outbound`]: the policy's call, boxed (its type cannot be named).
pub struct ResponseFuture<T, E> {
    inner: Pin<Box<dyn Future<Output = Result<T, ClientError<E>>> + Send>>,
}

impl<T, E> Future for ResponseFuture<T, E> {
    type Output = Result<T, ClientError<E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
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
        let engine = Arc::clone(&self.engine);
        let key = match &self.key {
            Some(key) => HostKey::Borrowed(key),
            None => HostKey::of(request.uri(), request.headers()),
        };
        let kept = self
            .last
            .as_ref()
            .filter(|entry| entry.is_current() && *entry.value.key == *key.as_str());
        let host = match kept {
            Some(entry) => {
                engine.hosts.touch(entry);
                Ok(Arc::clone(entry))
            }
            None => engine
                .host(&key)
                .inspect(|entry| self.last = Some(Arc::clone(entry))),
        };
        let service = self.inner.clone();
        let (mut parts, body) = request.into_parts();
        let (stamp, caller) = Stamp::prepare(&engine.names, &mut parts.headers);
        let inner: Pin<Box<dyn Future<Output = _> + Send>> = match host {
            // Two futures, so that the common one (no deadline of the caller's) is not as
            // large as the one that also holds the caller's scope.
            Ok(host) => match caller {
                Some(deadline) => Box::pin(within(
                    deadline,
                    send(engine, host, service, parts, body, stamp),
                )),
                None => Box::pin(send(engine, host, service, parts, body, stamp)),
            },
            Err(e) => Box::pin(std::future::ready(Err(ClientError::Call(
                rampart::Error::Config(e),
            )))),
        };
        ResponseFuture { inner }
    }
}

/// Sends a request under its host's policy.
///
/// A plain function returning an `async` block: the block owns its inputs once, where an
/// `async fn` would keep a second copy of its arguments in its state.
#[allow(clippy::manual_async_fn)]
fn send<S, A, B, ResB>(
    engine: Arc<Engine<A>>,
    host: Arc<super::hosts::Entry<Host<A>>>,
    service: S,
    parts: Parts,
    body: B,
    stamp: Stamp,
) -> impl Future<Output = Result<Response<ResB>, ClientError<S::Error>>>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    A: Admit + Clone,
{
    async move {
        let host = &host.value;
        crate::quota::check(host.quota.as_ref(), &host.key, &engine.listeners)?;
        let marked = parts.extensions.get::<Repeatable>().is_some();
        let mut plan = engine.plan(host, &parts.method, marked);
        let body = match plan {
            Plan::Once => Kept::Once(ReplayBody::new(body)),
            Plan::Replay => keep(body, engine.replay_limit)
                .await
                .map_err(|e| ClientError::Body(e.into()))?,
        };
        if plan == Plan::Replay && matches!(body, Kept::Once(_)) {
            engine.not_replayable(host);
            plan = Plan::Once;
        }
        let policy = match plan {
            Plan::Once => &host.once,
            Plan::Replay => &host.full,
        };
        let (replay, once) = match body {
            Kept::Replayable { data, trailers } => (Some((data, trailers)), None),
            Kept::Once(body) => (None, Some(body)),
        };
        // Owned by this block and borrowed by the callback: rampart's call future keeps its
        // callback in several states, so a callback that owned the request would carry it
        // several times over. Behind a mutex (locked once per attempt, uncontended unless
        // legs are hedged) so that the callback is `Sync` for any `Send` service and body.
        let template = Mutex::new(Template {
            stamp,
            service,
            parts: Some(parts),
            replay,
            once,
        });
        let names = &engine.names;
        let op = async |attempt: &Attempt| {
            let mut ready: Option<S> = None;
            // The request is made once the service is ready, so that the deadline written is
            // the time left when the request goes out, and it is not kept across the wait.
            let request = std::future::poll_fn(|cx| {
                let mut template = template.lock().unwrap_or_else(PoisonError::into_inner);
                let service = ready.get_or_insert_with(|| template.service.clone());
                service
                    .poll_ready(cx)
                    .map_ok(|()| template.next(names, attempt))
            })
            .await?;
            let Some(mut service) = ready else {
                unreachable!("a service that was ready was kept")
            };
            let span = crate::observe::attempt_span(request.method(), &host.key, attempt);
            let response = span.instrument(service.call(request)).await;
            span.record_status(crate::observe::status(&response));
            if let (Some(quota), Ok(response)) = (&host.quota, &response) {
                quota.observe(response.headers());
            }
            match response {
                Err(e) if stamp.is_transport_timer(attempt) => {
                    attempt.cancelled().await;
                    Err(e)
                }
                outcome => outcome,
            }
        };
        // `run` hedges when the host's policy hedges (its hedged state boxed by rampart).
        policy.run(op).await.map_err(ClientError::Call)
    }
}

/// What each attempt is made from.
struct Template<S, B> {
    stamp: Stamp,
    service: S,
    parts: Option<Parts>,
    /// The kept body of a replayable request.
    replay: Option<(Bytes, Option<HeaderMap>)>,
    /// The body of a request sent once.
    once: Option<ReplayBody<B>>,
}

impl<S, B> Template<S, B> {
    /// The next attempt's request, its headers stamped: a copy of a replayable request, or
    /// the request itself, once.
    fn next(&mut self, names: &Names, attempt: &Attempt) -> Request<ReplayBody<B>> {
        let (mut parts, body) = match (&self.replay, &self.parts) {
            (Some((data, trailers)), Some(parts)) => (
                copy_head(parts),
                ReplayBody::replay(data.clone(), trailers.clone()),
            ),
            _ => {
                let (Some(parts), Some(body)) = (self.parts.take(), self.once.take()) else {
                    unreachable!("a request that cannot be replayed gets one attempt")
                };
                (parts, body)
            }
        };
        self.stamp.write(names, &mut parts.headers, attempt);
        Request::from_parts(parts, body)
    }
}

/// The headers an attempt's stamp may add to a copy: the deadline, the criticality and the
/// retry mark.
const STAMPED: usize = 3;

/// A copy of a request head, its header map made with room for the stamp (a plain `clone`
/// has no room, and the stamp would grow it).
fn copy_head(parts: &Parts) -> Parts {
    let (mut copy, ()) = Request::new(()).into_parts();
    copy.method = parts.method.clone();
    copy.uri = parts.uri.clone();
    copy.version = parts.version;
    copy.extensions = parts.extensions.clone();
    let mut headers = HeaderMap::with_capacity(parts.headers.len() + STAMPED);
    for (name, value) in &parts.headers {
        headers.append(name.clone(), value.clone());
    }
    copy.headers = headers;
    copy
}
