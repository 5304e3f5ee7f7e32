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
//!     deadline: Duration::from_millis(300),
//!     source: rampart::DeadlineSource::Inherited,
//!     attempts: 2,
//!     unfit: None,
//!     last: None,
//! });
//! assert!(e.is_timeout());
//! assert_eq!(e.status(), http::StatusCode::GATEWAY_TIMEOUT);
//! assert_eq!(e.to_string(), "inherited deadline of 300ms exceeded after 2 attempts");
//! ```

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

use crate::problem::Problem;

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
}

impl<E> ClientError<E> {
    /// Whether a deadline or attempt timeout ended the call.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Call(e) if e.is_timeout())
    }

    /// Whether a component refused the call (a spent quota included).
    pub fn is_rejected(&self) -> bool {
        match self {
            ClientError::Call(e) => e.is_rejected(),
            ClientError::QuotaSpent { .. } => true,
            ClientError::Body(_) => false,
        }
    }

    /// When to try again, if a refusing component said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::Call(e) => e.retry_after(),
            ClientError::QuotaSpent { retry_after, .. } => Some(*retry_after),
            ClientError::Body(_) => None,
        }
    }

    /// The transport's own error, when that is what ended the call.
    pub fn transport(&self) -> Option<&E> {
        match self {
            ClientError::Call(e) => e.inner(),
            ClientError::Body(_) | ClientError::QuotaSpent { .. } => None,
        }
    }

    /// The policy's error, if this is one.
    pub fn call(&self) -> Option<&rampart::Error<E>> {
        match self {
            ClientError::Call(e) => Some(e),
            ClientError::Body(_) | ClientError::QuotaSpent { .. } => None,
        }
    }

    /// The status a service answers with when this error ends its handler: 504 for timeouts,
    /// 503 for rejections (a spent quota included), 502 for transport errors, 500 otherwise.
    pub fn status(&self) -> StatusCode {
        match self {
            ClientError::Call(rampart::Error::Inner(_)) => StatusCode::BAD_GATEWAY,
            ClientError::Call(e) if e.is_timeout() => StatusCode::GATEWAY_TIMEOUT,
            ClientError::Call(rampart::Error::Rejected { .. } | rampart::Error::Cancelled)
            | ClientError::QuotaSpent { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
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
            ClientError::QuotaSpent { .. } => None,
        }
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
