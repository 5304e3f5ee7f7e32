//! The `tracing` feature: edge events and outbound attempt spans, target `rampart_http`.

use std::future::Future;

use http::{Method, StatusCode};
use tracing::field::Empty;
use tracing::{debug, info, info_span, warn};

use crate::classify::HttpResponse;
use crate::event::EdgeEvent;

/// An outbound attempt's span.
pub(crate) struct Span(tracing::Span);

impl Span {
    /// `future` polled inside this span, which records the response's status when it comes
    /// and closes with it: the span is moved in, not cloned. Any response the classifier
    /// reads (an `http::Response`, a reqwest one).
    #[inline]
    pub(crate) async fn run<F, R, E>(self, future: F) -> Result<R, E>
    where
        F: Future<Output = Result<R, E>>,
        R: HttpResponse,
    {
        let mut traced = std::pin::pin!(tracing::Instrument::instrument(future, self.0));
        let outcome = traced.as_mut().await;
        if let Ok(response) = &outcome {
            let status: StatusCode = response.status();
            traced
                .span()
                .record("http.response.status_code", status.as_u16());
        }
        outcome
    }
}

#[inline]
pub(super) fn attempt(method: &Method, host: &str, resends: u32) -> Span {
    let resends = (resends > 0).then_some(resends);
    Span(info_span!(
        target: "rampart_http",
        "rampart.http.attempt",
        "http.request.method" = method.as_str(),
        "server.address" = host,
        "http.request.resend_count" = resends,
        "http.response.status_code" = Empty
    ))
}

/// Logs `event`: a dropped handler warns, refusals inform, single-attempt decisions are debug.
pub(super) fn event(event: &EdgeEvent<'_>) {
    match *event {
        EdgeEvent::ExpiredOnArrival { left, reserve } => info!(
            target: "rampart_http",
            left = ?left,
            reserve = ?reserve,
            "request expired on arrival: answered 504 without running the handler"
        ),
        EdgeEvent::Shed {
            level,
            by,
            retry_after,
        } => info!(
            target: "rampart_http",
            criticality = level.as_str(),
            by,
            retry_after = ?retry_after,
            "request shed: answered 503"
        ),
        EdgeEvent::Enforced { budget } => warn!(
            target: "rampart_http",
            budget = ?budget,
            "deadline enforced: the handler was still running and was dropped; answered 504"
        ),
        EdgeEvent::WouldExpire { left, reserve } => info!(
            target: "rampart_http",
            left = ?left,
            reserve = ?reserve,
            "dry run: reject_expired would have answered 504; serving it"
        ),
        EdgeEvent::WouldShed {
            level,
            by,
            retry_after,
        } => info!(
            target: "rampart_http",
            criticality = level.as_str(),
            by,
            retry_after = ?retry_after,
            "dry run: admission would have answered 503; serving it"
        ),
        EdgeEvent::RetriesSuppressed { host, method } => debug!(
            target: "rampart_http",
            host,
            method = method.as_str(),
            "retries suppressed: the request being served arrived as a retry"
        ),
        EdgeEvent::NotReplayable { host, limit } => debug!(
            target: "rampart_http",
            host,
            limit,
            "one attempt: the body is larger than the replay limit"
        ),
        EdgeEvent::QuotaRefused { host, retry_after } => info!(
            target: "rampart_http",
            host,
            retry_after = ?retry_after,
            "request refused: the host's quota is spent until its reset"
        ),
    }
}
