//! The HTTP classifier: what a response means for the rest of the call.
//!
//! A generic error cannot be inspected, but a response can. [`HttpClassifier`] reads the
//! status and `Retry-After` (whole seconds or an HTTP date):
//!
//! | response | verdict |
//! |---|---|
//! | 429 | `Throttled`, with the `Retry-After` if it has one, else the reset of a spent quota its [quota headers](crate::quota) state |
//! | 503 with a valid `Retry-After`, or quota headers stating a spent quota | `Throttled` with it (the server said when) |
//! | 503 without, other 5xx, 408 | `Transient` (retried; circuit-breaker evidence) |
//! | anything else | `Ok` (a 404 is an answer, not a failure) |
//! | a transport error (`Err`) | `Transient` |
//!
//! A gRPC response carries its status in `grpc-status`: in the headers of a trailers-only
//! response, else in the trailers. When either has one, it decides, as gRPC's retry design
//! does (`grpc-retry-pushback-ms` is the retry-after):
//!
//! | `grpc-status` | verdict |
//! |---|---|
//! | 0 `OK` | `Ok` |
//! | 14 `UNAVAILABLE` | `Transient`; `Throttled` with the pushback when the server sent one |
//! | 8 `RESOURCE_EXHAUSTED` | `Throttled`, with the pushback if it has one |
//! | 4 `DEADLINE_EXCEEDED` | `Transient`, as an attempt that ran past its ceiling is |
//! | any other code, or a value that is not a number (tonic's `Unknown`) | `Permanent` (returned at once, not breaker evidence) |
//! | a pushback that is negative or not a number, with any code but 0 | `Permanent`: the server asked not to retry |
//!
//! The trailers are seen only when the response's body was read ahead: the
//! outbound layer's tonic channel (`OutboundLayer::grpc`, feature `tonic`) does that for
//! repeatable unary calls and puts them in the response's extensions as [`Trailers`] when
//! their `grpc-status` is not `0` (an OK there means what no trailers mean, so a successful
//! call copies nothing).
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

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use rampart::{Classify, Verdict};

use crate::header::{GRPC_STATUS, Pushback, last, parse_grpc_status, pushback, retry_after};
use crate::quota;

/// A response the classifier can read: its status, headers and, when its body was read
/// ahead, its trailers.
pub trait HttpResponse {
    /// The status code.
    fn status(&self) -> StatusCode;
    /// The headers.
    fn headers(&self) -> &HeaderMap;
    /// The trailers, when the body was read ahead (default: none).
    fn trailers(&self) -> Option<&HeaderMap> {
        None
    }
}

/// The trailers of a response whose body was read ahead, in the response's extensions (a
/// copy: the body still ends with them), for [`HttpClassifier`] to read `grpc-status` from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trailers(pub HeaderMap);

impl<B> HttpResponse for http::Response<B> {
    fn status(&self) -> StatusCode {
        http::Response::status(self)
    }

    fn headers(&self) -> &HeaderMap {
        http::Response::headers(self)
    }

    fn trailers(&self) -> Option<&HeaderMap> {
        self.extensions().get::<Trailers>().map(|t| &t.0)
    }
}

/// gRPC status codes the classifier treats apart.
/// gRPC's `UNKNOWN`, what a status that does not parse is taken for.
const GRPC_UNKNOWN: u32 = 2;
const GRPC_OK: u32 = 0;
const GRPC_DEADLINE_EXCEEDED: u32 = 4;
const GRPC_RESOURCE_EXHAUSTED: u32 = 8;
const GRPC_UNAVAILABLE: u32 = 14;

/// Classifies HTTP responses by status and `Retry-After`; see the [module table](self).
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpClassifier;

impl HttpClassifier {
    /// The verdict for a status and its headers (a `grpc-status` among them decides).
    pub fn verdict(status: StatusCode, headers: &HeaderMap) -> Verdict {
        HttpClassifier::verdict_with_trailers(status, headers, None)
    }

    /// The verdict for a status, its headers and the trailers, if the body was read: a
    /// `grpc-status` in the headers decides, else one in the trailers, else the HTTP status.
    pub fn verdict_with_trailers(
        status: StatusCode,
        headers: &HeaderMap,
        trailers: Option<&HeaderMap>,
    ) -> Verdict {
        let grpc = |map: &HeaderMap| {
            // A status that is not a number is tonic's `Unknown`: not a success.
            let code =
                parse_grpc_status(last(map, &GRPC_STATUS)?.as_bytes()).unwrap_or(GRPC_UNKNOWN);
            Some(HttpClassifier::grpc_verdict(code, pushback(map)))
        };
        if let Some(verdict) = grpc(headers).or_else(|| trailers.and_then(grpc)) {
            return verdict;
        }
        HttpClassifier::http_verdict(status, headers)
    }

    /// The verdict for a gRPC status code and the pushback that came with it; see the
    /// [module table](self).
    pub fn grpc_verdict(code: u32, pushback: Option<Pushback>) -> Verdict {
        match (code, pushback) {
            (GRPC_OK, _) => Verdict::Ok,
            (_, Some(Pushback::DoNotRetry)) => Verdict::Permanent,
            (GRPC_RESOURCE_EXHAUSTED | GRPC_UNAVAILABLE, Some(Pushback::After(after))) => {
                Verdict::Throttled {
                    retry_after: Some(after),
                }
            }
            (GRPC_RESOURCE_EXHAUSTED, None) => Verdict::Throttled { retry_after: None },
            (GRPC_UNAVAILABLE | GRPC_DEADLINE_EXCEEDED, _) => Verdict::Transient,
            _ => Verdict::Permanent,
        }
    }

    fn http_verdict(status: StatusCode, headers: &HeaderMap) -> Verdict {
        match status.as_u16() {
            429 => Verdict::Throttled {
                retry_after: retry_after(headers).or_else(|| spent_quota_reset(headers)),
            },
            503 => match retry_after(headers).or_else(|| spent_quota_reset(headers)) {
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

/// When a quota the response says is spent resets, if it says (a refusal without `Retry-After`
/// that carries `RateLimit: "default";r=0;t=30`, say). Read for this response alone, whatever
/// the outbound layer's `quota` switch: it is the server's answer to this request.
fn spent_quota_reset(headers: &HeaderMap) -> Option<Duration> {
    let unix_now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    quota::parse(headers, unix_now)
        .filter(quota::Reading::is_spent)
        .and_then(|reading| reading.reset)
}

impl<R: HttpResponse, E> Classify<R, E> for HttpClassifier {
    fn classify(&self, outcome: &Result<R, E>) -> Verdict {
        match outcome {
            Ok(response) => HttpClassifier::verdict_with_trailers(
                response.status(),
                response.headers(),
                response.trailers(),
            ),
            Err(_) => Verdict::Transient,
        }
    }
}

#[cfg(test)]
mod tests {

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
    fn a_refusal_without_retry_after_waits_for_its_spent_quota_to_reset() {
        let refused = |status: u16, quota: &[(&str, &str)], retry_after: Option<&str>| {
            let mut response = http::Response::builder().status(status);
            for (name, value) in quota {
                response = response.header(*name, *value);
            }
            if let Some(after) = retry_after {
                response = response.header("retry-after", after);
            }
            HttpClassifier.classify(&Ok::<_, ()>(response.body(()).expect("valid")))
        };
        let throttled = |secs| Verdict::Throttled {
            retry_after: Some(Duration::from_secs(secs)),
        };
        let spent = [("ratelimit", "\"default\";r=0;t=30")];
        assert_eq!(refused(429, &spent, None), throttled(30));
        assert_eq!(refused(503, &spent, None), throttled(30));
        assert_eq!(
            refused(429, &spent, Some("5")),
            throttled(5),
            "Retry-After wins"
        );
        let left = [("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "30")];
        assert_eq!(
            refused(429, &left, None),
            Verdict::Throttled { retry_after: None }
        );
        assert_eq!(refused(503, &left, None), Verdict::Transient);
        assert_eq!(
            refused(200, &spent, None),
            Verdict::Ok,
            "an answer is an answer"
        );
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

    fn grpc(
        headers: &[(&'static str, &'static str)],
        trailers: Option<&[(&'static str, &'static str)]>,
    ) -> Verdict {
        let map = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, http::HeaderValue::from_static(value));
            }
            map
        };
        let mut response = http::Response::new(());
        *response.headers_mut() = map(headers);
        if let Some(trailers) = trailers {
            response.extensions_mut().insert(Trailers(map(trailers)));
        }
        HttpClassifier.classify(&Ok::<_, ()>(response))
    }

    #[test]
    fn grpc_statuses_map_to_verdicts_as_grpc_retries_them() {
        let ms = |n| Some(Duration::from_millis(n));
        let table: [(&[(&str, &str)], Verdict); 12] = [
            (&[("grpc-status", "0")], Verdict::Ok),
            (&[("grpc-status", "14")], Verdict::Transient),
            (
                &[("grpc-status", "14"), ("grpc-retry-pushback-ms", "40")],
                Verdict::Throttled {
                    retry_after: ms(40),
                },
            ),
            (
                &[("grpc-status", "14"), ("grpc-retry-pushback-ms", "-1")],
                Verdict::Permanent,
            ),
            (
                &[("grpc-status", "8")],
                Verdict::Throttled { retry_after: None },
            ),
            (
                &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "250")],
                Verdict::Throttled {
                    retry_after: ms(250),
                },
            ),
            (
                &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "later")],
                Verdict::Permanent,
            ),
            (&[("grpc-status", "4")], Verdict::Transient),
            (&[("grpc-status", "5")], Verdict::Permanent),
            (&[("grpc-status", "13")], Verdict::Permanent),
            (
                &[("grpc-status", "0"), ("grpc-retry-pushback-ms", "-1")],
                Verdict::Ok,
            ),
            (&[("grpc-status", "junk")], Verdict::Permanent),
        ];
        for (headers, verdict) in table {
            assert_eq!(grpc(headers, None), verdict, "headers {headers:?}");
            assert_eq!(grpc(&[], Some(headers)), verdict, "trailers {headers:?}");
        }
    }

    #[test]
    fn a_grpc_status_in_the_headers_wins_over_the_trailers() {
        assert_eq!(
            grpc(&[("grpc-status", "0")], Some(&[("grpc-status", "14")])),
            Verdict::Ok
        );
        assert_eq!(
            grpc(&[], Some(&[("grpc-status", "14")])),
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
