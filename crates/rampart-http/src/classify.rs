//! The HTTP classifier: what a response means for the rest of the call.
//!
//! A generic error cannot be inspected, but a response can. [`HttpClassifier`] reads the
//! status and `Retry-After` (whole seconds or an HTTP date):
//!
//! | response | verdict |
//! |---|---|
//! | 429 | `Throttled`, with the `Retry-After` if it has one |
//! | 503 with a valid `Retry-After` | `Throttled` with it (the server said when) |
//! | 503 without, other 5xx, 408 | `Transient` (retried; circuit-breaker evidence) |
//! | anything else | `Ok` (a 404 is an answer, not a failure) |
//! | a transport error (`Err`) | `Transient` |
//!
//! A throttled response is never breaker evidence, and its `Retry-After` wins over the
//! backoff curve (capped by the curve's maximum). A last response that is still a 503 is
//! returned as the response, not turned into an error.
//!
//! ```
//! use rampart::{Classify, Verdict};
//! use rampart_http::HttpClassifier;
//!
//! let busy = http::Response::builder().status(503).header("retry-after", "2").body(()).unwrap();
//! let verdict = HttpClassifier.classify(&Ok::<_, std::io::Error>(busy));
//! assert_eq!(verdict, Verdict::Throttled { retry_after: Some(std::time::Duration::from_secs(2)) });
//! ```

use http::{HeaderMap, StatusCode};
use rampart::{Classify, Verdict};

use crate::header::retry_after;

/// A response the classifier can read: its status and headers.
pub trait HttpResponse {
    /// The status code.
    fn status(&self) -> StatusCode;
    /// The headers.
    fn headers(&self) -> &HeaderMap;
}

impl<B> HttpResponse for http::Response<B> {
    fn status(&self) -> StatusCode {
        http::Response::status(self)
    }

    fn headers(&self) -> &HeaderMap {
        http::Response::headers(self)
    }
}

/// Classifies HTTP responses by status and `Retry-After`; see the [module table](self).
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpClassifier;

impl HttpClassifier {
    /// The verdict for a status and its headers.
    pub fn verdict(status: StatusCode, headers: &HeaderMap) -> Verdict {
        match status.as_u16() {
            429 => Verdict::Throttled {
                retry_after: retry_after(headers),
            },
            503 => match retry_after(headers) {
                Some(after) => Verdict::Throttled {
                    retry_after: Some(after),
                },
                None => Verdict::Transient,
            },
            408 | 500..=599 => Verdict::Transient,
            _ => Verdict::Ok,
        }
    }
}

impl<R: HttpResponse, E> Classify<R, E> for HttpClassifier {
    fn classify(&self, outcome: &Result<R, E>) -> Verdict {
        match outcome {
            Ok(response) => HttpClassifier::verdict(response.status(), response.headers()),
            Err(_) => Verdict::Transient,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn verdict(status: u16, retry_after: Option<&str>) -> Verdict {
        let mut response = http::Response::builder().status(status);
        if let Some(after) = retry_after {
            response = response.header("retry-after", after);
        }
        let response = response.body(()).expect("valid response");
        HttpClassifier.classify(&Ok::<_, ()>(response))
    }

    #[test]
    fn statuses_map_to_verdicts_as_the_design_says() {
        let secs = |n| Some(Duration::from_secs(n));
        assert_eq!(verdict(200, None), Verdict::Ok);
        assert_eq!(verdict(404, Some("5")), Verdict::Ok);
        assert_eq!(verdict(408, None), Verdict::Transient);
        assert_eq!(verdict(429, None), Verdict::Throttled { retry_after: None });
        assert_eq!(
            verdict(429, Some("3")),
            Verdict::Throttled {
                retry_after: secs(3)
            }
        );
        assert_eq!(verdict(500, None), Verdict::Transient);
        assert_eq!(verdict(503, None), Verdict::Transient);
        assert_eq!(verdict(503, Some("junk")), Verdict::Transient);
        assert_eq!(
            verdict(503, Some("1")),
            Verdict::Throttled {
                retry_after: secs(1)
            }
        );
        assert_eq!(verdict(504, Some("1")), Verdict::Transient);
        assert_eq!(
            HttpClassifier.classify(&Err::<http::Response<()>, _>("refused")),
            Verdict::Transient
        );
    }

    #[test]
    fn retry_after_as_an_http_date_is_read_relative_to_now() {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(60));
        let Verdict::Throttled {
            retry_after: Some(after),
        } = verdict(429, Some(&date))
        else {
            panic!("throttled with a retry-after")
        };
        assert!(after > Duration::from_secs(55) && after <= Duration::from_secs(60));
    }
}
