//! Problem documents: what the edge answers when rampart, not the handler, decided.
//!
//! A deadline or attempt timeout becomes `504 Gateway Timeout`; a refusal (breaker open,
//! admission shed, draining) becomes `503 Service Unavailable` with a `Retry-After`. A call
//! whose retry the retry budget refused answers as its last failure did (`502` or `504`, no
//! `Retry-After`): the dependency failed, and nothing here is overloaded, so the caller may
//! retry under its own budget at once (its retry carries the retry mark, so the hops below do
//! not retry it again). Answered as a refusal with a `Retry-After` of at least 1 s, a caller
//! whose deadline is shorter could not wait, and on a chain of services rampart answered up
//! to 13 points fewer roots than tower's retry budget at the same numbers (the simulator's
//! `defaults` scenario). The body is an RFC 9457 `application/problem+json` document whose `type` is
//! a stable URN, so a client can tell the cases apart without parsing prose:
//!
//! | type | status | when |
//! |---|---|---|
//! | `urn:rampart:deadline-expired-on-arrival` | 504 | inbound: the time left did not exceed the reserve |
//! | `urn:rampart:deadline-exceeded` | 504 | the deadline ran out (inbound `enforce`, or an outbound call) |
//! | `urn:rampart:attempt-timeout` | 504 | the last outbound attempt ran past its ceiling |
//! | `urn:rampart:idle-timeout` | 504 | a stream waited longer than its idle timeout for its next item |
//! | `urn:rampart:overloaded` | 503 | admission refused (inbound shedding or an outbound limiter) |
//! | `urn:rampart:circuit-open` | 503 | the dependency's circuit breaker is open |
//! | `urn:rampart:budget-exhausted` | 503 | the retry budget had nothing left before any attempt failed (a call whose retry it refused answers as its last failure) |
//! | `urn:rampart:draining` | 503 | the process is shutting down |
//! | `urn:rampart:cancelled` | 503 | the caller cancelled the call |
//! | `urn:rampart:upstream-error` | 502 | the dependency could not be reached (the transport's error) |
//! | `urn:rampart:request-body` | 500 | the request body could not be read for replay |
//! | `urn:rampart:configuration` | 500 | a policy setting was invalid for the call |
//!
//! A gRPC request gets the same decision as a trailers-only gRPC response instead
//! (HTTP 200, `grpc-status` 4 `DEADLINE_EXCEEDED` for 504, 14 `UNAVAILABLE` for 502 and 503,
//! 13 `INTERNAL` for 500); a 503 also carries `grpc-retry-pushback-ms` and `Retry-After`
//! (the same time, in milliseconds and seconds). A Connect request gets Connect's JSON error
//! (`{"code":"deadline_exceeded","message":"..."}`, `application/json`, with the HTTP status
//! Connect gives the code: 504 `deadline_exceeded`, 503 `unavailable`, 500 `internal`, 502
//! `unavailable`). A Connect streaming request (content type `application/connect+...`) gets
//! the same error as its stream's end-of-stream message, in HTTP 200: see
//! [`Problem::into_connect_stream_response`].
//!
//! ```
//! use std::time::Duration;
//! use rampart_http::Problem;
//!
//! let error: rampart::Error<std::io::Error> = rampart::Error::Rejected {
//!     reason: rampart::RejectReason::DependencyUnavailable,
//!     retry_after: Some(Duration::from_millis(14_200)),
//!     attempts: 0,
//!     refused: 0,
//!     last: None,
//! };
//! let problem = Problem::from_error(&error);
//! assert_eq!(problem.status(), http::StatusCode::SERVICE_UNAVAILABLE);
//! assert_eq!(problem.kind(), "urn:rampart:circuit-open");
//! let response = problem.into_http_response();
//! assert_eq!(response.headers()["retry-after"], "15");
//! assert_eq!(response.headers()["content-type"], "application/problem+json");
//! ```

use std::fmt::{self, Write as _};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;
use rampart::RejectReason;

use crate::header::{
    GRPC_MESSAGE, GRPC_RETRY_PUSHBACK_MS, GRPC_STATUS, format_pushback, format_retry_after,
};

/// `urn:rampart:deadline-expired-on-arrival`.
pub const EXPIRED_ON_ARRIVAL: &str = "urn:rampart:deadline-expired-on-arrival";
/// `urn:rampart:deadline-exceeded`.
pub const DEADLINE_EXCEEDED: &str = "urn:rampart:deadline-exceeded";
/// `urn:rampart:attempt-timeout`.
pub const ATTEMPT_TIMEOUT: &str = "urn:rampart:attempt-timeout";
/// `urn:rampart:overloaded`.
pub const OVERLOADED: &str = "urn:rampart:overloaded";

/// The flags of a Connect streaming response's end-of-stream message.
const CONNECT_END_STREAM: u8 = 0x02;

/// An RFC 9457 problem document, with the status and `Retry-After` that go with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    status: StatusCode,
    kind: &'static str,
    title: &'static str,
    detail: String,
    retry_after: Option<Duration>,
}

/// The status of [`Problem::from_error`]'s answer to `error`, for an error whose callback
/// error has no `Display` (what [`ClientError::status`](crate::ClientError::status) answers).
pub(crate) fn status_of<E>(error: &rampart::Error<E>) -> StatusCode {
    use rampart::Error;
    match error {
        e if e.is_timeout() => StatusCode::GATEWAY_TIMEOUT,
        Error::Rejected {
            reason: RejectReason::BudgetExhausted,
            last: Some(last),
            ..
        } => status_of(last),
        Error::Rejected { .. } | Error::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        Error::Inner(_) => StatusCode::BAD_GATEWAY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl Problem {
    /// A problem document; `kind` is its `type` URI.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Problem {
            status,
            kind,
            title,
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// With a `Retry-After` (written rounded up to whole seconds, at least 1). A 503 always
    /// carries one: 1 s when no component said.
    pub fn with_retry_after(mut self, after: Option<Duration>) -> Self {
        self.retry_after = after;
        self
    }

    /// The problem for an error that rampart decided (see the [module table](self)).
    pub fn from_error<E: fmt::Display>(error: &rampart::Error<E>) -> Problem {
        use rampart::Error;
        match error {
            Error::DeadlineExceeded { .. } => Problem::new(
                StatusCode::GATEWAY_TIMEOUT,
                DEADLINE_EXCEEDED,
                "Deadline exceeded",
                error.to_string(),
            ),
            Error::AttemptTimeout { .. } => Problem::new(
                StatusCode::GATEWAY_TIMEOUT,
                ATTEMPT_TIMEOUT,
                "Attempt timed out",
                error.to_string(),
            ),
            Error::IdleTimeout { .. } => Problem::new(
                StatusCode::GATEWAY_TIMEOUT,
                "urn:rampart:idle-timeout",
                "Stream idle",
                error.to_string(),
            ),
            Error::Rejected {
                reason: RejectReason::BudgetExhausted,
                attempts,
                last: Some(last),
                ..
            } => {
                // The dependency's failure stands; the budget only declined to retry it.
                let answer = Problem::from_error(last);
                let attempts = match attempts {
                    1 => "1 attempt".to_owned(),
                    n => format!("{n} attempts"),
                };
                Problem {
                    detail: format!(
                        "{}; not retried: the retry budget had nothing left after {attempts}",
                        answer.detail
                    ),
                    ..answer
                }
            }
            Error::Rejected {
                reason,
                retry_after,
                ..
            } => {
                let (kind, title) = match reason {
                    RejectReason::DependencyUnavailable => {
                        ("urn:rampart:circuit-open", "Circuit open")
                    }
                    RejectReason::BudgetExhausted => {
                        ("urn:rampart:budget-exhausted", "Retry budget exhausted")
                    }
                    RejectReason::Draining => ("urn:rampart:draining", "Draining"),
                    _ => (OVERLOADED, "Overloaded"),
                };
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    kind,
                    title,
                    error.to_string(),
                )
                .with_retry_after(*retry_after)
            }
            Error::Cancelled => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "urn:rampart:cancelled",
                "Cancelled",
                error.to_string(),
            ),
            Error::Inner(_) => Problem::new(
                StatusCode::BAD_GATEWAY,
                "urn:rampart:upstream-error",
                "Upstream error",
                error.to_string(),
            ),
            _ => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "urn:rampart:configuration",
                "Invalid configuration",
                error.to_string(),
            ),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The `type` URI, e.g. `urn:rampart:deadline-exceeded`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The `title`: the same for every problem of a kind.
    pub fn title(&self) -> &'static str {
        self.title
    }

    /// The `detail`: this occurrence, with its numbers.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The `Retry-After` it carries, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The JSON document.
    pub fn to_json(&self) -> String {
        let mut json = String::with_capacity(96 + self.detail.len());
        json.push_str("{\"type\":");
        push_json_string(&mut json, self.kind);
        json.push_str(",\"title\":");
        push_json_string(&mut json, self.title);
        let _ = write!(json, ",\"status\":{},\"detail\":", self.status.as_u16());
        push_json_string(&mut json, &self.detail);
        json.push('}');
        json
    }

    /// The HTTP response: the status, `application/problem+json`, and `Retry-After` on a 503.
    /// (Named apart from axum's `IntoResponse::into_response`, which the `axum` feature
    /// implements too and which an inherent method of the same name would shadow.)
    pub fn into_http_response(self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::from(self.to_json())));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        self.write_retry_after(&mut response);
        response
    }

    /// The same decision as a trailers-only gRPC response: HTTP 200 with `grpc-status` and
    /// `grpc-message` in the headers and an empty body; on a 503, `grpc-retry-pushback-ms`
    /// and `Retry-After` too.
    pub fn into_grpc_response(self) -> Response<Full<Bytes>> {
        let code = match self.status {
            StatusCode::GATEWAY_TIMEOUT => "4",
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => "14",
            _ => "13",
        };
        let mut response = Response::new(Full::new(Bytes::new()));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(GRPC_STATUS, HeaderValue::from_static(code));
        if let Ok(message) = HeaderValue::from_str(&grpc_message(&self.detail)) {
            headers.insert(GRPC_MESSAGE, message);
        }
        if self.wants_retry_after() {
            headers.insert(GRPC_RETRY_PUSHBACK_MS, format_pushback(self.retry_after));
        }
        self.write_retry_after(&mut response);
        response
    }

    /// The same decision as Connect's error for a unary call: `application/json` with
    /// `{"code":...,"message":...}` and the HTTP status Connect gives the code, `Retry-After`
    /// on a 503.
    pub fn into_connect_response(self) -> Response<Full<Bytes>> {
        let (code, status) = self.connect_code();
        let mut json = String::with_capacity(32 + self.detail.len());
        self.push_connect_error(&mut json, code);
        let mut response = Response::new(Full::new(Bytes::from(json)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        self.write_retry_after(&mut response);
        response
    }

    /// The same decision as Connect's error for a streaming call, whose errors travel in the
    /// stream, not in the HTTP status: HTTP 200 with `content_type` (the request's own,
    /// `application/connect+proto` or `application/connect+json`), and a body that is one
    /// end-of-stream message (flags `0x02`, a 4-byte big-endian length, then
    /// `{"error":{"code":...,"message":...}}`, JSON whatever the codec); `Retry-After` on a
    /// 503.
    ///
    /// ```
    /// use http::{HeaderValue, StatusCode};
    /// use rampart_http::Problem;
    ///
    /// let problem = Problem::new(StatusCode::GATEWAY_TIMEOUT, rampart_http::problem::DEADLINE_EXCEEDED, "Deadline exceeded", "late");
    /// let response = problem.into_connect_stream_response(HeaderValue::from_static("application/connect+proto"));
    /// assert_eq!(response.status(), StatusCode::OK);
    /// assert_eq!(response.headers()["content-type"], "application/connect+proto");
    /// ```
    pub fn into_connect_stream_response(self, content_type: HeaderValue) -> Response<Full<Bytes>> {
        let (code, _) = self.connect_code();
        let mut json = String::with_capacity(48 + self.detail.len());
        json.push_str("{\"error\":");
        self.push_connect_error(&mut json, code);
        json.push('}');
        let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
        let mut message = Vec::with_capacity(5 + json.len());
        message.push(CONNECT_END_STREAM);
        message.extend_from_slice(&len.to_be_bytes());
        message.extend_from_slice(json.as_bytes());
        let mut response = Response::new(Full::new(Bytes::from(message)));
        response.headers_mut().insert(CONTENT_TYPE, content_type);
        self.write_retry_after(&mut response);
        response
    }

    /// Connect's code for the status, and the HTTP status Connect gives that code.
    fn connect_code(&self) -> (&'static str, StatusCode) {
        match self.status {
            StatusCode::GATEWAY_TIMEOUT => ("deadline_exceeded", StatusCode::GATEWAY_TIMEOUT),
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => {
                ("unavailable", StatusCode::SERVICE_UNAVAILABLE)
            }
            _ => ("internal", StatusCode::INTERNAL_SERVER_ERROR),
        }
    }

    /// Connect's error object, `{"code":...,"message":...}`.
    fn push_connect_error(&self, json: &mut String, code: &str) {
        json.push_str("{\"code\":");
        push_json_string(json, code);
        json.push_str(",\"message\":");
        push_json_string(json, &self.detail);
        json.push('}');
    }

    /// Whether the answer says when to try again: a 503 always does, 1 s when no component
    /// said.
    fn wants_retry_after(&self) -> bool {
        self.status == StatusCode::SERVICE_UNAVAILABLE || self.retry_after.is_some()
    }

    fn write_retry_after<B>(&self, response: &mut Response<B>) {
        if self.wants_retry_after() {
            response
                .headers_mut()
                .insert(RETRY_AFTER, format_retry_after(self.retry_after));
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.title,
            self.detail
        )
    }
}

#[cfg(feature = "axum")]
impl axum_core::response::IntoResponse for Problem {
    fn into_response(self) -> axum_core::response::Response {
        Problem::into_http_response(self).map(axum_core::body::Body::new)
    }
}

/// Appends `value` as a JSON string literal.
fn push_json_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `grpc-message` is percent-encoded: printable ASCII but `%` passes, the rest is escaped.
fn grpc_message(detail: &str) -> String {
    let mut out = String::with_capacity(detail.len());
    for b in detail.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
#[path = "problem_tests.rs"]
mod tests;
