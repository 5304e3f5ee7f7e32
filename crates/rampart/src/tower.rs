//! A tower layer (feature `tower`): any `tower` service, every call run under a [`Policy`].
//!
//! `tower::retry` and `tower::timeout` compose by nesting, so what a timeout means depends on
//! where it sits (outside the retry it bounds the call, inside it bounds an attempt), and
//! neither knows the other: a retry starts with no time left, a backoff outlasts the
//! deadline. [`PolicyLayer`] puts one policy around the service instead, with rampart's
//! contract: the deadline bounds the whole call, each attempt gets `min(attempt timeout,
//! time left)`, a backoff that will not fit is not slept, the breaker, budget and admission
//! are asked, and the error says which of those ended the call ([`Error`]).
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use rampart::Policy;
//! use rampart::tower::PolicyLayer;
//! use tower::{Layer, ServiceExt};
//!
//! let policy = Policy::builder()
//!     .total_timeout(Duration::from_secs(2))
//!     .attempt_timeout(Duration::from_millis(500))
//!     .build()?;
//! let service = PolicyLayer::new(policy).layer(tower::service_fn(|name: &'static str| async move {
//!     Ok::<_, std::io::Error>(format!("hello, {name}"))
//! }));
//! assert_eq!(service.oneshot("world").await?, "hello, world");
//! # Ok(()) }
//! ```
//!
//! | what | how |
//! |---|---|
//! | requests | `Clone`: every attempt sends its own clone (the first included) |
//! | the inner service | `Clone`: every attempt calls its own clone, made ready inside the attempt, so a wait for readiness counts against the attempt's ceiling |
//! | readiness | [`PolicyService`] is always ready |
//! | responses and errors | classified by the policy's classifier (`Classify<S::Response, S::Error>`); the error is [`Error<S::Error>`] |
//! | cost | one allocation per call: the response future is the policy's call, boxed, because its type cannot be named |
//!
//! The boxed call is the only allocation the layer adds to a call whose policy allocates
//! nothing (`tests/tower.rs` counts it); the clones of the request and of the service are
//! whatever their `Clone` costs.
//!
//! # Per call
//!
//! Each request runs as [`Policy::run`]: a service's `call` has no place for the setters of
//! [`Policy::call`]. What they set, a tower stack gets from elsewhere: a caller's deadline from
//! the ambient context (build the policy with
//! [`use_ambient_deadline`](crate::PolicyBuilder::use_ambient_deadline)`(true)`, and the caller's
//! deadline, set by rampart-http's inbound layer or [`Ambient::scope`](crate::Ambient::scope),
//! bounds the call), cancellation by dropping the response future, a fallback as a layer
//! above this one (`tower::util::MapResult`, say) that sees the [`Error`] and what it says.
//! For the report of a call (its stop reason and attempt log with a success too), call the
//! policy directly: `policy.call().try_run(op)`.
//!
//! # Cancellation
//!
//! Dropping the response future drops the attempt in flight, as dropping
//! [`Policy::run`]'s future does.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};

use tower_layer::Layer;
use tower_service::Service;

use crate::admit::{Admit, Unlimited};
use crate::classify::{Classify, ErrorsAreTransient};
use crate::{Attempt, Error, Policy};

/// Runs every call of the service it wraps under `policy`; see the [module docs](self).
#[must_use]
pub struct PolicyLayer<C = ErrorsAreTransient, A = Unlimited> {
    policy: Policy<C, A>,
}

impl<C, A> PolicyLayer<C, A> {
    /// A layer whose services run their calls under `policy` (clones share its breaker,
    /// budget and estimates).
    pub fn new(policy: Policy<C, A>) -> Self {
        PolicyLayer { policy }
    }
}

impl<C, A> Clone for PolicyLayer<C, A> {
    fn clone(&self) -> Self {
        PolicyLayer {
            policy: self.policy.clone(),
        }
    }
}

impl<C, A> fmt::Debug for PolicyLayer<C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyLayer")
            .field("policy", &self.policy.to_string())
            .finish()
    }
}

impl<S, C, A> Layer<S> for PolicyLayer<C, A> {
    type Service = PolicyService<S, C, A>;

    fn layer(&self, inner: S) -> PolicyService<S, C, A> {
        PolicyService {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// The service [`PolicyLayer`] makes.
pub struct PolicyService<S, C = ErrorsAreTransient, A = Unlimited> {
    inner: S,
    policy: Policy<C, A>,
}

impl<S, C, A> PolicyService<S, C, A> {
    /// `inner` run under `policy`.
    pub fn new(inner: S, policy: Policy<C, A>) -> Self {
        PolicyService { inner, policy }
    }

    /// The service underneath.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, C, A> Clone for PolicyService<S, C, A> {
    fn clone(&self) -> Self {
        PolicyService {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
        }
    }
}

impl<S: fmt::Debug, C, A> fmt::Debug for PolicyService<S, C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyService")
            .field("inner", &self.inner)
            .field("policy", &self.policy.to_string())
            .finish()
    }
}

impl<S, Req, C, A> Service<Req> for PolicyService<S, C, A>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Clone + Send + 'static,
    C: Classify<S::Response, S::Error>,
    A: Admit,
{
    type Response = S::Response;
    type Error = Error<S::Error>;
    type Future = ResponseFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let policy = self.policy.clone();
        // Behind a lock (taken once per attempt, uncontended unless legs are hedged) so that
        // the callback is `Sync` for any `Send` service and request.
        let template = Mutex::new((self.inner.clone(), request));
        // Allocated before it is filled, and filled by a function's return, so that the call
        // is written straight into its box, not made on the stack and copied there whole.
        let call = Box::write(Box::new_uninit(), call(policy, template));
        ResponseFuture {
            inner: Box::into_pin(call),
        }
    }
}

/// `template`'s request sent to a clone of its service under `policy`.
///
/// A plain function returning an `async` block: the block owns its inputs once, and the
/// function's return can be written where its caller wants it (the box).
#[allow(clippy::manual_async_fn)]
fn call<S, Req, C, A>(
    policy: Policy<C, A>,
    template: Mutex<(S, Req)>,
) -> impl Future<Output = Result<S::Response, Error<S::Error>>> + Send
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Clone + Send + 'static,
    C: Classify<S::Response, S::Error>,
    A: Admit,
{
    async move {
        let op = async |_: &Attempt| {
            let (mut service, request) = {
                let template = template.lock().unwrap_or_else(PoisonError::into_inner);
                (template.0.clone(), template.1.clone())
            };
            std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
            service.call(request).await
        };
        policy.run(op).await
    }
}

/// The response future of [`PolicyService`]: the policy's call, boxed (its type cannot be
/// named).
pub struct ResponseFuture<T, E> {
    inner: Pin<Box<dyn Future<Output = Result<T, Error<E>>> + Send>>,
}

impl<T, E> Future for ResponseFuture<T, E> {
    type Output = Result<T, Error<E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<T, E> fmt::Debug for ResponseFuture<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}
