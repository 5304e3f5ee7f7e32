//! The outbound error: what the policy decided, or a body that could not be read.
//!
//! [`ClientError`] keeps rampart's [`Error`](rampart::Error) whole (the transport's own error
//! is inside it, unchanged, as `Inner`) and adds the one failure the edge has on its own. It
//! knows its HTTP answer: a handler can return it as is.
//!
//! ```
//! use std::time::Duration;
//! use rampart_http::ClientError;
//!
//! let e: ClientError<std::io::Error> = ClientError::Call(rampart::Error::DeadlineExceeded {
//!     timeout: Duration::from_millis(300),
//!     source: rampart::DeadlineSource::Inherited,
//!     attempts: 2,
//!     unfit: None,
//!     last: None,
//! });
//! assert!(e.is_timeout());
//! assert_eq!(e.status(), http::StatusCode::GATEWAY_TIMEOUT);
//! assert_eq!(e.to_string(), "inherited deadline of 300ms exceeded after 2 attempts");
//! ```

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

use rampart::StopReason;

use crate::problem::Problem;
use crate::report::CallReport;

/// A boxed error, as bodies report them.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// Why an outbound request failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError<E> {
    /// The policy's outcome: a timeout, a rejection (breaker, budget, admission, draining),
    /// a configuration error, or the last attempt's transport error in `Inner`.
    Call(rampart::Error<E>),
    /// The request body could not be read to keep it for replay.
    Body(BoxError),
    /// Not sent: the host's quota, as its [quota headers](crate::quota) stated, is spent until
    /// `retry_after` from now (only with [`quota`](crate::OutboundBuilder::quota) on).
    QuotaSpent {
        /// The host, as the outbound layer keys it (`host:port`).
        host: Box<str>,
        /// Time left until the quota resets.
        retry_after: Duration,
    },
    /// The call ended on a response whose status the classifier retries (a 5xx, 408, 429,
    /// ...): the attempts, the deadline or the retry budget ran out on it, or the request
    /// could be sent only once. Only with
    /// [`fail_on_retryable_status`](crate::OutboundBuilder::fail_on_retryable_status) on;
    /// otherwise that response is returned, its [`CallReport`] in its extensions.
    Status(Box<RetryableStatus>),
}

/// The response a call ended on, with a status the classifier retries, and the call's report:
/// what [`ClientError::Status`] carries.
pub struct RetryableStatus {
    status: StatusCode,
    report: CallReport,
    /// The response itself, of the client's type (`reqwest::Response`, `http::Response<B>`);
    /// behind a lock so that the error is `Sync` whatever the body.
    response: Mutex<Box<dyn Any + Send>>,
}

impl RetryableStatus {
    pub(crate) fn new<R: Any + Send>(status: StatusCode, report: CallReport, response: R) -> Self {
        RetryableStatus {
            status,
            report,
            response: Mutex::new(Box::new(response)),
        }
    }

    /// The response's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The report of the call.
    pub fn report(&self) -> &CallReport {
        &self.report
    }

    /// The response, as the client returns it: `reqwest::Response` from the reqwest client,
    /// `http::Response<B>` from the outbound layer.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, when `R` is not the response's type.
    pub fn into_response<R: Any>(mut self: Box<Self>) -> Result<R, Box<Self>> {
        let response = self
            .response
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if !(**response).is::<R>() {
            return Err(self);
        }
        match std::mem::replace(response, Box::new(())).downcast::<R>() {
            Ok(response) => Ok(*response),
            Err(_) => unreachable!("the response was checked to be an `R`"),
        }
    }
}

impl<E> ClientError<E> {
    /// Whether a deadline or attempt timeout ended the call (a retryable status on which the
    /// deadline ran out included).
    pub fn is_timeout(&self) -> bool {
        match self {
            ClientError::Call(e) => e.is_timeout(),
            ClientError::Status(s) => s.report.stop() == StopReason::DeadlineExceeded,
            ClientError::Body(_) | ClientError::QuotaSpent { .. } => false,
        }
    }

    /// Whether a component refused the call (a spent quota included, and a retryable status
    /// whose retry the breaker, the budget or admission refused).
    pub fn is_rejected(&self) -> bool {
        match self {
            ClientError::Call(e) => e.is_rejected(),
            ClientError::QuotaSpent { .. } => true,
            ClientError::Status(s) => is_refusal(s.report.stop()),
            ClientError::Body(_) => false,
        }
    }

    /// When to try again, if a refusing component said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::Call(e) => e.retry_after(),
            ClientError::QuotaSpent { retry_after, .. } => Some(*retry_after),
            ClientError::Body(_) | ClientError::Status(_) => None,
        }
    }

    /// The transport's own error, when that is what ended the call.
    pub fn transport(&self) -> Option<&E> {
        match self {
            ClientError::Call(e) => e.inner(),
            ClientError::Body(_) | ClientError::QuotaSpent { .. } | ClientError::Status(_) => None,
        }
    }

    /// The policy's error, if this is one.
    pub fn call(&self) -> Option<&rampart::Error<E>> {
        match self {
            ClientError::Call(e) => Some(e),
            ClientError::Body(_) | ClientError::QuotaSpent { .. } | ClientError::Status(_) => None,
        }
    }

    /// The report of the call, when it ended on a [retryable status](ClientError::Status).
    pub fn report(&self) -> Option<&CallReport> {
        match self {
            ClientError::Status(s) => Some(&s.report),
            _ => None,
        }
    }

    /// The response the call ended on, when it ended on a
    /// [retryable status](ClientError::Status): `reqwest::Response` from the reqwest client,
    /// `http::Response<B>` from the outbound layer.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, when the call did not end on a retryable status, or when `R` is not
    /// the response's type.
    pub fn into_response<R: Any>(self) -> Result<R, Self> {
        match self {
            ClientError::Status(s) => s.into_response().map_err(ClientError::Status),
            other => Err(other),
        }
    }

    /// The status a service answers with when this error ends its handler, the status of its
    /// [problem document](Self::problem): 504 for timeouts, 503 for refusals (a spent quota
    /// included), 502 for transport errors and for a retryable status that ran out of
    /// attempts, 500 otherwise. A call whose retry the retry budget refused answers as its last
    /// failure did (see [`crate::problem`]).
    pub fn status(&self) -> StatusCode {
        match self {
            ClientError::Call(e) => crate::problem::status_of(e),
            ClientError::QuotaSpent { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ClientError::Status(s) => match s.report.stop() {
                StopReason::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
                // The dependency's status stands; the budget only declined to retry it.
                StopReason::BudgetExhausted => StatusCode::BAD_GATEWAY,
                stop if is_refusal(stop) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_GATEWAY,
            },
            ClientError::Body(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Whether a component refused the next attempt.
fn is_refusal(stop: StopReason) -> bool {
    matches!(
        stop,
        StopReason::BudgetExhausted
            | StopReason::DependencyUnavailable
            | StopReason::Overloaded
            | StopReason::Draining
    )
}

impl<E: fmt::Display> ClientError<E> {
    /// The problem document for this error; see [`crate::problem`].
    pub fn problem(&self) -> Problem {
        match self {
            ClientError::Call(e) => Problem::from_error(e),
            ClientError::Body(e) => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "urn:rampart:request-body",
                "Request body unreadable",
                format!("the request body could not be read for replay: {e}"),
            ),
            ClientError::QuotaSpent { .. } => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "urn:rampart:quota-spent",
                "Quota spent",
                self.to_string(),
            )
            .with_retry_after(self.retry_after()),
            ClientError::Status(_) => Problem::new(
                self.status(),
                "urn:rampart:retryable-status",
                "Upstream answered with a retryable status",
                self.to_string(),
            ),
        }
    }

    /// The response for this error: its [problem document](Self::problem). (Named apart
    /// from axum's `IntoResponse::into_response`, which the `axum` feature implements too
    /// and which an inherent method of the same name would shadow.)
    pub fn into_problem_response(self) -> Response<Full<Bytes>> {
        self.problem().into_http_response()
    }
}

impl<E> From<rampart::Error<E>> for ClientError<E> {
    fn from(e: rampart::Error<E>) -> Self {
        ClientError::Call(e)
    }
}

impl<E: fmt::Display> fmt::Display for ClientError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Call(e) => e.fmt(f),
            ClientError::Body(e) => write!(f, "request body could not be read for replay: {e}"),
            ClientError::QuotaSpent { host, retry_after } => write!(
                f,
                "not sent: the quota of {host} is spent until it resets in {retry_after:?}"
            ),
            ClientError::Status(s) => write!(
                f,
                "upstream answered {}, a retryable status: {}",
                s.status, s.report
            ),
        }
    }
}

/// The chain goes through the transport's own error: `Call(Inner(e))` has `e` as its source
/// (rampart's `Error::Inner` is transparent, so `e` would otherwise be skipped), so that code
/// walking the chain for a transport's type (tonic's `Status::from_error` does) finds it.
impl<E: StdError + 'static> StdError for ClientError<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            ClientError::Call(rampart::Error::Inner(e)) => Some(e),
            ClientError::Call(e) => e.source(),
            ClientError::Body(e) => Some(e.as_ref()),
            ClientError::QuotaSpent { .. } | ClientError::Status(_) => None,
        }
    }
}

impl fmt::Debug for RetryableStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryableStatus")
            .field("status", &self.status)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "axum")]
impl<E: fmt::Display> axum_core::response::IntoResponse for ClientError<E> {
    fn into_response(self) -> axum_core::response::Response {
        self.problem()
            .into_http_response()
            .map(axum_core::body::Body::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_what_the_policy_decided() {
        let timeout: ClientError<&str> = rampart::Error::AttemptTimeout {
            timeout: Duration::from_secs(3),
            attempts: 3,
        }
        .into();
        assert_eq!(timeout.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(timeout.problem().status(), StatusCode::GATEWAY_TIMEOUT);
        let rejected: ClientError<&str> = rampart::Error::Rejected {
            reason: rampart::RejectReason::DependencyUnavailable,
            retry_after: Some(Duration::from_secs(9)),
            attempts: 0,
            refused: 0,
            last: None,
        }
        .into();
        assert_eq!(rejected.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            rejected.into_problem_response().headers()["retry-after"],
            "9"
        );
        let transport: ClientError<&str> = rampart::Error::Inner("reset").into();
        assert_eq!(transport.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(transport.transport(), Some(&"reset"));
    }

    #[test]
    fn a_spent_quota_is_a_503_naming_the_host_and_when_it_resets() {
        let spent: ClientError<&str> = ClientError::QuotaSpent {
            host: "api.example:443".into(),
            retry_after: Duration::from_millis(2_500),
        };
        assert!(spent.is_rejected());
        assert_eq!(spent.retry_after(), Some(Duration::from_millis(2_500)));
        assert_eq!(
            spent.to_string(),
            "not sent: the quota of api.example:443 is spent until it resets in 2.5s"
        );
        assert_eq!(spent.status(), StatusCode::SERVICE_UNAVAILABLE);
        let response = spent.into_problem_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], "3");
    }

    #[test]
    fn the_transport_error_is_in_the_source_chain() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let error: ClientError<std::io::Error> = rampart::Error::Inner(io).into();
        let source = StdError::source(&error).expect("a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("the transport's own error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
    }
}
