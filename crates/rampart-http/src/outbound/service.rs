//! The outbound service: one request, one policy call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use rampart::Attempt;
use rampart::admit::{Admit, Unlimited};
use tower_service::Service;

use super::{Engine, Host, HostKey, Plan, Repeatable, stamp};
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
}

impl<S, A> Outbound<S, A> {
    pub(crate) fn new(inner: S, engine: Arc<Engine<A>>) -> Self {
        Outbound { inner, engine }
    }
}

impl<S: Clone, A> Clone for Outbound<S, A> {
    fn clone(&self) -> Self {
        Outbound {
            inner: self.inner.clone(),
            engine: Arc::clone(&self.engine),
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
        let key = HostKey::of(request.uri(), request.headers());
        let engine = Arc::clone(&self.engine);
        let service = self.inner.clone();
        let inner: Pin<Box<dyn Future<Output = _> + Send>> = match engine.host(&key) {
            Ok(host) => Box::pin(send(engine, host, service, request)),
            Err(e) => Box::pin(std::future::ready(Err(ClientError::Call(
                rampart::Error::Config(e),
            )))),
        };
        ResponseFuture { inner }
    }
}

/// Sends `request` under its host's policy.
async fn send<S, A, B, ResB>(
    engine: Arc<Engine<A>>,
    host: Arc<super::hosts::Entry<Host<A>>>,
    service: S,
    request: Request<B>,
) -> Result<Response<ResB>, ClientError<S::Error>>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    A: Admit + Clone,
{
    let host = &host.value;
    let (parts, body) = request.into_parts();
    let marked = parts.extensions.get::<Repeatable>().is_some();
    let plan = engine.plan(host, &parts.method, marked);
    let names = engine.names.clone();
    let kept = match plan {
        Plan::Once => Kept::Once(ReplayBody::new(body)),
        Plan::Replay => keep(body, engine.replay_limit)
            .await
            .map_err(|e| ClientError::Body(e.into()))?,
    };
    match kept {
        Kept::Once(body) => {
            if plan == Plan::Replay {
                engine.not_replayable(host);
            }
            let mut request = Some((service, parts, body));
            host.once
                .run(async move |attempt| {
                    let Some((service, parts, body)) = request.take() else {
                        unreachable!("a one-attempt policy runs its callback once")
                    };
                    send_attempt(&names, service, parts, body, attempt).await
                })
                .await
                .map_err(ClientError::Call)
        }
        Kept::Replayable { data, trailers } => {
            // Behind a mutex so that the callback is `Sync` (hedged legs share it) for any
            // `Send` service; each attempt clones the service out of it.
            let service = Mutex::new(service);
            host.full
                .run_hedged(async move |attempt| {
                    let service = service
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    let body = ReplayBody::replay(data.clone(), trailers.clone());
                    send_attempt(&names, service, parts.clone(), body, attempt).await
                })
                .await
                .map_err(ClientError::Call)
        }
    }
}

/// One attempt: stamp the headers, wait for the service, send.
async fn send_attempt<S, B>(
    names: &Names,
    mut service: S,
    mut parts: Parts,
    body: ReplayBody<B>,
    attempt: &Attempt,
) -> Result<S::Response, S::Error>
where
    S: Service<Request<ReplayBody<B>>>,
{
    stamp(names, &mut parts.headers, attempt);
    std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
    service.call(Request::from_parts(parts, body)).await
}
