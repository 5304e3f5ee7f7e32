//! The inbound layer: the received deadline and criticality become the handler's ambient
//! context.
//!
//! A service holding 200 ms of its caller's patience should not let the next service work for
//! ten seconds. [`InboundLayer`] reads what the caller sent (the smallest of `X-Deadline-Ms`,
//! `grpc-timeout`, Envoy's `x-envoy-expected-rq-timeout-ms` and Connect's
//! `Connect-Timeout-Ms`; `X-Criticality`; the retry mark; see [`crate::header`]) and runs the
//! handler's future inside an [`Ambient`] scope that says so. Every rampart policy inside that
//! opted in to the ambient deadline (the outbound layer's policies always do) then ends its
//! calls when the caller stops waiting, and an expired request makes no outbound call at all.
//!
//! It is a plain `tower` layer over `http::Request`, so it works under axum, hyper and tonic:
//!
//! ```
//! # async fn demo() {
//! use std::time::Duration;
//! use axum::{Router, routing::get};
//! use rampart_http::InboundLayer;
//!
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(
//!         InboundLayer::new()
//!             .maximum(Duration::from_secs(30))
//!             .reserve(Duration::from_millis(20))
//!             .reject_expired(true),
//!     );
//! # drop(app);
//! # }
//! ```
//!
//! | option | default | meaning |
//! |---|---|---|
//! | [`maximum`](InboundLayer::maximum) | none | a received deadline above it is ignored entirely (not clamped) |
//! | [`default_timeout`](InboundLayer::default_timeout) | none | the timeout of a request that brings no deadline: its deadline is that long after it arrives (an edge service's budget per request) |
//! | [`reserve`](InboundLayer::reserve) | 0 | subtracted from the received deadline: the time this service needs to answer; a negative result is expired |
//! | [`reject_expired`](InboundLayer::reject_expired) | off | answer 504 without running the handler when the time left does not exceed the reserve |
//! | [`admit`](InboundLayer::admit) | none | an [`Admit`] component asked before the handler runs; a refusal is a 503 with `Retry-After` |
//! | [`enforce`](InboundLayer::enforce) | off | drop the handler's future at the deadline and answer 504 |
//! | [`dry_run`](InboundLayer::dry_run) | off | `reject_expired` and `admit` report what they would refuse and serve it anyway |
//! | [`clock`](InboundLayer::clock) | [`Clock::system`] | where the received deadline is measured from and `enforce` waits |
//! | header names | `x-deadline-ms`, `x-criticality`, `x-rampart-retry` | see [`crate::header::Names`] |
//!
//! Why `reject_expired` is off by default: an expired request may still be answerable (from a
//! cache, say), and refusing it is a decision only the service can make. With it off, the
//! handler runs with a deadline already passed, and every outbound call it makes fails fast
//! without reaching the network.
//!
//! A request marked as a retry (`X-Rampart-Retry: 1`, or gRPC's own
//! `grpc-previous-rpc-attempts` of 1 or more) is served with
//! [`Ambient::with_inbound_retry`]: the outbound layer then makes one attempt per call, so
//! that only the layer directly above a failure retries and retries do not multiply down the
//! call graph.
//!
//! The layer's own answers are problem documents (see [`crate::problem`]), trailers-only
//! gRPC responses for gRPC requests (a refusal with `grpc-retry-pushback-ms` beside
//! `Retry-After`), Connect's JSON errors (`{"code":"deadline_exceeded",...}`) for unary
//! Connect requests (those with `Connect-Protocol-Version` or `Connect-Timeout-Ms`), and for a
//! Connect streaming request (an `application/connect+...` content type) the same error as its
//! stream's end-of-stream message, in an HTTP 200 of the request's content type (see
//! [`Problem::into_connect_stream_response`]). The form is read from the request only when the
//! layer answers it (or, with `enforce`, before the handler takes the request).
//!
//! # Testing
//!
//! The layer waits on tokio's clock by default, so tokio's paused time (`#[tokio::test(start_paused
//! = true)]`, tokio's `test-util` feature) tests a whole router, layer, handlers and the
//! policies inside them, with no test code of rampart's: time stands still while anything
//! can run and jumps to the next timer when nothing can.
//!
//! ```
//! use std::time::Duration;
//! use axum::{Router, body::Body, routing::get};
//! use rampart_http::InboundLayer;
//! use tower::ServiceExt;
//!
//! # fn main() {
//! // `#[tokio::test(start_paused = true)]` in a test; spelt out for the doctest.
//! let runtime = tokio::runtime::Builder::new_current_thread()
//!     .enable_time()
//!     .start_paused(true)
//!     .build()
//!     .expect("runtime");
//! runtime.block_on(async {
//!     let app = Router::new()
//!         .route("/", get(|| async {
//!             tokio::time::sleep(Duration::from_secs(60)).await;
//!             "too late"
//!         }))
//!         .layer(InboundLayer::new().enforce(true));
//!     let request = http::Request::get("/")
//!         .header("x-deadline-ms", "250")
//!         .body(Body::empty())
//!         .expect("valid request");
//!     let start = tokio::time::Instant::now();
//!     let response = app.oneshot(request).await.expect("infallible");
//!     assert_eq!(response.status(), http::StatusCode::GATEWAY_TIMEOUT);
//!     assert_eq!(start.elapsed(), Duration::from_millis(250)); // exactly, in no real time
//! });
//! # }
//! ```
//!
//! A test on a [`ManualClock`](rampart::ManualClock) gives the layer the clock its policies
//! run on ([`clock`](InboundLayer::clock)), and moves it with
//! [`rampart::testing::advance_until`].
//!
//! # Cancellation
//!
//! With `enforce` on, the handler's future is dropped at the deadline: code after its next
//! `.await` does not run. Work it spawned is not stopped, unless it watches the deadline.
//!
//! # Events
//!
//! `ExpiredOnArrival`, `Shed` and `Enforced`: see [`crate::event`].

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use rampart::admit::{Admit, AdmitContext, Feedback, Refusal, Unlimited};
use rampart::clock::{Clock, Instant, Sleep};
use rampart::{Ambient, AttemptOutcome, Criticality, Deadline, Verdict};
use tower_layer::Layer;
use tower_service::Service;

use crate::body::ResponseBody;
use crate::classify::HttpClassifier;
use crate::event::{EdgeEvent, Listeners};
use crate::header::{Names, Received, is_connect, is_grpc};
use crate::problem::{self, Problem};

/// Puts the received deadline and criticality into the handler's ambient scope; see the
/// [module docs](self).
#[derive(Clone)]
#[must_use]
pub struct InboundLayer<A = Unlimited> {
    config: Config<A>,
}

#[derive(Clone)]
struct Config<A> {
    name: Arc<str>,
    names: Names,
    maximum: Option<Duration>,
    default_timeout: Option<Duration>,
    reserve: Duration,
    reject_expired: bool,
    enforce: bool,
    dry_run: bool,
    admit: A,
    listeners: Listeners,
    clock: Clock,
}

impl InboundLayer {
    /// A layer with the defaults of the [module table](self).
    pub fn new() -> Self {
        InboundLayer {
            config: Config {
                name: Arc::from("inbound"),
                names: Names::default(),
                maximum: None,
                default_timeout: None,
                reserve: Duration::ZERO,
                reject_expired: false,
                enforce: false,
                dry_run: false,
                admit: Unlimited,
                listeners: Listeners::new(crate::observe::Side::Inbound),
                clock: Clock::system(),
            },
        }
    }
}

impl Default for InboundLayer {
    fn default() -> Self {
        InboundLayer::new()
    }
}

impl<A> InboundLayer<A> {
    /// The name admission components see as the policy (default `"inbound"`).
    pub fn name(mut self, name: &str) -> Self {
        self.config.name = Arc::from(name);
        self
    }

    /// The deadline header, in milliseconds (default `x-deadline-ms`). `grpc-timeout`,
    /// `x-envoy-expected-rq-timeout-ms` and `Connect-Timeout-Ms` are always read too; the
    /// smallest counts.
    pub fn deadline_header(mut self, name: HeaderName) -> Self {
        self.config.names.deadline = name;
        self
    }

    /// The criticality header (default `x-criticality`).
    pub fn criticality_header(mut self, name: HeaderName) -> Self {
        self.config.names.criticality = name;
        self
    }

    /// The retry-mark header (default `x-rampart-retry`).
    pub fn retry_header(mut self, name: HeaderName) -> Self {
        self.config.names.retry = name;
        self
    }

    /// A received deadline above `maximum` is ignored entirely, as if none had been sent
    /// (default: none).
    pub fn maximum(mut self, maximum: Duration) -> Self {
        self.config.maximum = Some(maximum);
        self
    }

    /// The timeout of a request that arrives without a deadline (or with one that was
    /// ignored): its deadline is `timeout` after it arrives, the budget an edge service gives
    /// each request from outside (default: none). It is treated as if received: the reserve
    /// is subtracted from it.
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.config.default_timeout = Some(timeout);
        self
    }

    /// The time this service needs to answer, subtracted from the received deadline
    /// (default 0). A deadline shorter than the reserve leaves the handler an expired one.
    pub fn reserve(mut self, reserve: Duration) -> Self {
        self.config.reserve = reserve;
        self
    }

    /// Answers 504 (`urn:rampart:deadline-expired-on-arrival`) without running the handler
    /// when the received time left does not exceed the reserve (default off).
    pub fn reject_expired(mut self, on: bool) -> Self {
        self.config.reject_expired = on;
        self
    }

    /// Drops the handler's future when the deadline (received minus reserve) passes, and
    /// answers 504 (`urn:rampart:deadline-exceeded`) (default off).
    pub fn enforce(mut self, on: bool) -> Self {
        self.config.enforce = on;
        self
    }

    /// Asks `admit` before running the handler, with the request's criticality and deadline.
    /// A refusal, or a queue wait that outlasts the deadline, is answered 503
    /// (`urn:rampart:overloaded`) with `Retry-After`. The permit is held until the response
    /// is ready, and released with the response's outcome.
    pub fn admit<A2: Admit>(self, admit: A2) -> InboundLayer<A2> {
        let c = self.config;
        InboundLayer {
            config: Config {
                name: c.name,
                names: c.names,
                maximum: c.maximum,
                default_timeout: c.default_timeout,
                reserve: c.reserve,
                reject_expired: c.reject_expired,
                enforce: c.enforce,
                dry_run: c.dry_run,
                admit,
                listeners: c.listeners,
                clock: c.clock,
            },
        }
    }

    /// Observe only (default off): [`reject_expired`](Self::reject_expired) and
    /// [`admit`](Self::admit) decide as configured, and each request they would have
    /// answered 504 or 503 is reported ([`EdgeEvent::WouldExpire`], [`EdgeEvent::WouldShed`];
    /// with the `metrics` feature, `rampart.http.server.dry_run`) and served anyway, without
    /// a permit. Try a reserve or a limit on live traffic, then enforce it.
    /// [`enforce`](Self::enforce) is not affected.
    pub fn dry_run(mut self, on: bool) -> Self {
        self.config.dry_run = on;
        self
    }

    /// The clock the layer reads and waits on (default [`Clock::system`], tokio's, which
    /// honours tokio's paused time): the received deadline is measured from this clock's
    /// now, `enforce` and a queued admission wait on it, and an admission component is told
    /// how long the handler took by it.
    ///
    /// Give it the [`ManualClock`](rampart::ManualClock) the service's policies run on, and a
    /// test drives a whole router on that clock: the deadline the handler's policies see and
    /// the one the layer enforces are on the same time line, and move only when the test
    /// advances it.
    ///
    /// ```
    /// use rampart::{ManualClock, Policy};
    /// use rampart_http::InboundLayer;
    ///
    /// let clock = ManualClock::new();
    /// let policy = Policy::builder().clock(clock.clone()).build().expect("valid");
    /// let layer = InboundLayer::new().enforce(true).clock(policy.clock().clone());
    /// # drop(layer);
    /// ```
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.config.clock = clock.into();
        self
    }

    /// Adds a listener for the layer's [`EdgeEvent`]s.
    pub fn listener(mut self, listener: impl Fn(&EdgeEvent<'_>) + Send + Sync + 'static) -> Self {
        self.config.listeners.push(listener);
        self
    }
}

impl<A> fmt::Debug for InboundLayer<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("InboundLayer")
            .field("names", &c.names)
            .field("maximum", &c.maximum)
            .field("default_timeout", &c.default_timeout)
            .field("reserve", &c.reserve)
            .field("reject_expired", &c.reject_expired)
            .field("enforce", &c.enforce)
            .field("dry_run", &c.dry_run)
            .field("clock", &c.clock)
            .finish_non_exhaustive()
    }
}

impl<S, A: Clone> Layer<S> for InboundLayer<A> {
    type Service = Inbound<S, A>;

    fn layer(&self, inner: S) -> Inbound<S, A> {
        Inbound {
            inner,
            config: Arc::new(self.config.clone()),
        }
    }
}

/// The service [`InboundLayer`] makes.
pub struct Inbound<S, A = Unlimited> {
    inner: S,
    config: Arc<Config<A>>,
}

impl<S: Clone, A> Clone for Inbound<S, A> {
    fn clone(&self) -> Self {
        Inbound {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, A> fmt::Debug for Inbound<S, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbound")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, A, B, ResB> Service<Request<B>> for Inbound<S, A>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    A: Admit,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B, A>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let config = &*self.config;
        let now = config.clock.now();
        let mut received = Received::read(request.headers(), &config.names, config.maximum);
        received.timeout = received.timeout.or(config.default_timeout);
        if config.reject_expired
            && let Some(left) = received.timeout
            && left <= config.reserve
        {
            if config.dry_run {
                config.listeners.emit(EdgeEvent::WouldExpire {
                    left,
                    reserve: config.reserve,
                });
            } else {
                let wire = Wire::of(request.headers());
                return ResponseFuture::answered(expired(config, left), wire, now);
            }
        }
        let budget = received
            .timeout
            .map(|left| left.saturating_sub(config.reserve));
        let deadline = budget.map(|budget| Deadline::after_from(now, budget));
        let mut ambient = Ambient::new();
        if let Some(deadline) = deadline {
            ambient = ambient.with_deadline(deadline);
        }
        if let Some(level) = received.criticality {
            ambient = ambient.with_criticality(level);
        }
        if received.retry {
            ambient = ambient.with_inbound_retry();
        }
        // The form of the 504 is read now, before the handler takes the request.
        let enforce = budget.filter(|_| config.enforce).map(|budget| Enforce {
            budget,
            wire: Wire::of(request.headers()),
        });
        let timer = |on: bool| {
            deadline
                .filter(|_| on)
                .map(|d| config.clock.sleep_until(d.instant()))
        };
        let mut held = None;
        if !A::ALWAYS_ADMITS {
            let level = ambient.criticality();
            let limit = deadline.map(Deadline::instant);
            let first = {
                let mut cx = AdmitContext::new(&config.name, level, now);
                cx.deadline = limit;
                let mut acquire = pin!(config.admit.acquire(&cx));
                acquire
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
            };
            match first {
                Poll::Ready(Ok(permit)) => held = Some(Held::new(&self.config, permit, now)),
                Poll::Ready(Err(refusal)) if config.dry_run => would_shed(config, level, refusal),
                Poll::Ready(Err(refusal)) => {
                    let wire = Wire::of(request.headers());
                    return ResponseFuture::answered(shed(config, level, refusal), wire, now);
                }
                Poll::Pending => {
                    // Queued: wait without holding this service, boxed because the wait
                    // borrows the shared admission component.
                    let shared = Arc::clone(&self.config);
                    let acquire: Acquire<A> = Box::pin(async move {
                        let mut cx = AdmitContext::new(&shared.name, level, now);
                        cx.deadline = limit;
                        shared.admit.acquire(&cx).await
                    });
                    let ready = self.inner.clone();
                    let service = std::mem::replace(&mut self.inner, ready);
                    return ResponseFuture {
                        state: State::Admitting {
                            acquire,
                            pending: Some((service, request)),
                        },
                        timer: timer(true),
                        ambient,
                        enforce,
                        held: None,
                        config: Some(Arc::clone(&self.config)),
                        since: now,
                    };
                }
            }
        }
        config.listeners.admitted();
        let future = ambient.sync_scope(|| self.inner.call(request));
        ResponseFuture {
            state: State::Running { future },
            timer: timer(enforce.is_some()),
            ambient,
            config: enforce.as_ref().map(|_| Arc::clone(&self.config)),
            enforce,
            held,
            since: now,
        }
    }
}

type Acquire<A> =
    Pin<Box<dyn Future<Output = Result<<A as Admit>::Permit, Refusal>> + Send + 'static>>;

/// The protocol a request speaks, and so the form of the layer's own answers: read from the
/// request only when the layer answers it (or may have to, once the handler has it).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wire {
    /// A problem document.
    Http,
    /// A trailers-only gRPC response.
    Grpc,
    /// Connect's JSON error, for a unary call.
    Connect,
    /// Connect's end-of-stream message, for a streaming call of this content type.
    ConnectStream(HeaderValue),
}

impl Wire {
    fn of(headers: &http::HeaderMap) -> Wire {
        if is_grpc(headers) {
            return Wire::Grpc;
        }
        match headers.get(CONTENT_TYPE) {
            Some(stream) if stream.as_bytes().starts_with(b"application/connect+") => {
                Wire::ConnectStream(stream.clone())
            }
            _ if is_connect(headers) => Wire::Connect,
            _ => Wire::Http,
        }
    }

    fn answer(self, problem: Problem) -> Response<http_body_util::Full<bytes::Bytes>> {
        match self {
            Wire::Http => problem.into_http_response(),
            Wire::Grpc => problem.into_grpc_response(),
            Wire::Connect => problem.into_connect_response(),
            Wire::ConnectStream(content_type) => problem.into_connect_stream_response(content_type),
        }
    }
}

/// `enforce` for one request: the handler's time, and the form of the 504 at its end.
struct Enforce {
    budget: Duration,
    wire: Wire,
}

/// The 504 for a request that arrived with no more than the reserve left, and its event.
fn expired<A>(config: &Config<A>, left: Duration) -> Problem {
    config.listeners.emit(EdgeEvent::ExpiredOnArrival {
        left,
        reserve: config.reserve,
    });
    Problem::new(
        StatusCode::GATEWAY_TIMEOUT,
        problem::EXPIRED_ON_ARRIVAL,
        "Deadline expired on arrival",
        format!(
            "the request arrived with {} ms left, not more than the {} ms this service reserves to answer",
            left.as_millis(),
            config.reserve.as_millis()
        ),
    )
}

/// The event for an admission refusal in dry run: the request is served anyway.
fn would_shed<A>(config: &Config<A>, level: Criticality, refusal: Refusal) {
    config.listeners.emit(EdgeEvent::WouldShed {
        level,
        by: refusal.by,
        retry_after: refusal.retry_after,
    });
}

/// The 503 for a refused admission, and its event.
fn shed<A>(config: &Config<A>, level: Criticality, refusal: Refusal) -> Problem {
    config.listeners.emit(EdgeEvent::Shed {
        level,
        by: refusal.by,
        retry_after: refusal.retry_after,
    });
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        problem::OVERLOADED,
        "Overloaded",
        format!("{} refused this {level} request", refusal.by),
    )
    .with_retry_after(refusal.retry_after)
}

mod future;

pub use future::ResponseFuture;
use future::{Held, State};
