//! tower's own answer to what the outbound layer does, for the comparisons in
//! `examples/profile_outbound.rs` and `benches/http_edge.rs`, stacked as a careful engineer
//! following tower's docs would stack it:
//!
//! | setting | value |
//! |---|---|
//! | deadline | `timeout(30 s)` around the call (the layer's default deadline) |
//! | retries | `retry`: 3 attempts, a 5xx or an error retried after 100 ms, a `TpsBudget` with tower's defaults (deposit on success, withdraw per retry, as its `budget` module documents) |
//! | request copy | before each attempt, a copy for the next one (`clone_request`): method, URI, version, header map and extensions cloned, the body cloned |
//! | attempt timeout | `timeout(10 s)` below the retry (the layer's default) |
//!
//! It does less than the layer: no breaker, no host table, the caller's deadline header not
//! read. [`retry_timeout_stamped`] adds what the layer writes on each attempt: the call's
//! deadline is put in the request's extensions above the retry, and a `map_request` below it
//! writes the time left (at most the attempt's 10 s) in `X-Deadline-Ms` and the criticality in
//! `X-Criticality`, the way tower's users write headers (`HeaderValue::from(u64)`).
//! [`retry_timeout_stamped_fixed`] writes the same headers without the call's deadline (the
//! attempt's 10 s every time): what carrying the deadline in the extensions costs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response};
use http_body_util::Full;
use tower::retry::budget::{Budget, TpsBudget};
use tower::{Service, ServiceBuilder};

/// The configuration, printed beside the results.
#[allow(dead_code)] // read by the profile, not by the bench
pub(crate) const CONFIGURATION: &str = "tower: timeout(30 s) > retry(3 attempts, 5xx and errors, \
     TpsBudget::default(), 100 ms backoff, request copied per attempt) > timeout(10 s); \
     tower-stamped: the same, the deadline in the extensions above the retry, X-Deadline-Ms \
     (time left, at most 10 s) and X-Criticality written below it; tower-stamped-fixed: \
     the same headers, X-Deadline-Ms always 10 s (no deadline carried)";

/// The layer's default deadline.
const DEADLINE: Duration = Duration::from_secs(30);
/// The layer's default attempt timeout.
const ATTEMPT: Duration = Duration::from_secs(10);

/// tower's retry policy as its `budget` module documents it: a success deposits, a retry
/// withdraws; a server error (5xx) or a transport error is retried, at most `left - 1` times,
/// after a 100 ms backoff.
#[derive(Clone)]
struct Retries {
    left: u32,
    budget: Arc<TpsBudget>,
}

impl<B: Clone, ResB, E> tower::retry::Policy<Request<B>, Response<ResB>, E> for Retries {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _: &mut Request<B>,
        result: &mut Result<Response<ResB>, E>,
    ) -> Option<Self::Future> {
        if matches!(result, Ok(response) if !response.status().is_server_error()) {
            self.budget.deposit();
            return None;
        }
        if self.left <= 1 || !self.budget.withdraw() {
            return None;
        }
        self.left -= 1;
        Some(tokio::time::sleep(Duration::from_millis(100)))
    }

    /// `http::Request` is not `Clone`: its parts are copied one by one.
    fn clone_request(&mut self, request: &Request<B>) -> Option<Request<B>> {
        let mut copy = Request::new(request.body().clone());
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

/// The call's deadline, put in the request's extensions above tower's retry so that each
/// attempt below it can write the time left.
#[derive(Clone, Copy)]
struct CallDeadline(Instant);

/// What rampart's stamp writes, written the way tower's users write headers: the time left
/// (at most the attempt's 10 s; the attempt's 10 s when the request carries no
/// [`CallDeadline`]) in `X-Deadline-Ms`, and the criticality.
fn stamp(mut request: Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let left = request
        .extensions()
        .get::<CallDeadline>()
        .map_or(ATTEMPT, |d| d.0.saturating_duration_since(Instant::now()))
        .min(ATTEMPT);
    let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
    const DEADLINE_MS: HeaderName = HeaderName::from_static("x-deadline-ms");
    const CRITICALITY: HeaderName = HeaderName::from_static("x-criticality");
    const CRITICAL: HeaderValue = HeaderValue::from_static("Critical");
    let headers = request.headers_mut();
    headers.insert(DEADLINE_MS, HeaderValue::from(ms));
    headers.insert(CRITICALITY, CRITICAL);
    request
}

/// tower's retry between its two timeouts, around `inner`.
pub(crate) fn retry_timeout<S, ResB>(
    inner: S,
) -> impl Service<Request<Full<Bytes>>, Response = Response<ResB>, Error = tower::BoxError> + Clone
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResB>> + Clone,
    S::Error: Into<tower::BoxError>,
{
    ServiceBuilder::new()
        .timeout(DEADLINE)
        .retry(Retries {
            left: 3,
            budget: Arc::new(TpsBudget::default()),
        })
        .timeout(ATTEMPT)
        .service(inner)
}

/// [`retry_timeout`] writing the headers the layer writes on each attempt, the call's
/// deadline carried to each attempt in the request's extensions.
pub(crate) fn retry_timeout_stamped<S, ResB>(
    inner: S,
) -> impl Service<Request<Full<Bytes>>, Response = Response<ResB>, Error = tower::BoxError> + Clone
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResB>> + Clone,
    S::Error: Into<tower::BoxError>,
{
    ServiceBuilder::new()
        .map_request(|mut request: Request<Full<Bytes>>| {
            request
                .extensions_mut()
                .insert(CallDeadline(Instant::now() + DEADLINE));
            request
        })
        .service(retry_timeout_stamped_fixed(inner))
}

/// The same headers without the call's deadline: every attempt writes the attempt timeout
/// (10 s), however little of the call is left. The knob that shows what carrying the
/// deadline in the extensions costs; it writes a weaker header than the layer does.
pub(crate) fn retry_timeout_stamped_fixed<S, ResB>(
    inner: S,
) -> impl Service<Request<Full<Bytes>>, Response = Response<ResB>, Error = tower::BoxError> + Clone
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResB>> + Clone,
    S::Error: Into<tower::BoxError>,
{
    retry_timeout(tower::util::MapRequest::new(inner, stamp))
}
