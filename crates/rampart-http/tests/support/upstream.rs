//! An in-process upstream for the outbound layer's tests: it records every request it gets
//! and answers by script, on paused time. Shared by `outbound.rs`, `outbound_grpc.rs`,
//! `outbound_hosts.rs` and `quota.rs`; each uses part of it.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use rampart::backoff::Backoff;
use rampart::{Instant, PolicyBuilder};
use rampart_http::{OutboundBuilder, OutboundLayer, Repeatable, ReplayBody};
use tower::Service;

pub(crate) type UpstreamRequest = Request<ReplayBody<Full<Bytes>>>;

/// One request the upstream received.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) at: Instant,
    pub(crate) host: String,
    pub(crate) uri: String,
    pub(crate) path: String,
    pub(crate) method: Method,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Call {
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii").to_owned())
    }
}

/// What the upstream answers, after how long.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<&'static str>,
    pub(crate) delay: Duration,
    pub(crate) headers: &'static [(&'static str, &'static str)],
}

pub(crate) fn reply(status: u16) -> Reply {
    Reply {
        status,
        retry_after: None,
        delay: Duration::ZERO,
        headers: &[],
    }
}

/// A trailers-only gRPC answer: HTTP 200 with the status (and more) in the headers.
pub(crate) fn grpc_reply(headers: &'static [(&'static str, &'static str)]) -> Reply {
    Reply {
        headers,
        ..reply(200)
    }
}

pub(crate) type Script = dyn Fn(usize, &Call) -> Reply + Send + Sync;

/// An in-process upstream that records every request and answers by script.
#[derive(Clone)]
pub(crate) struct Upstream {
    pub(crate) calls: Arc<Mutex<Vec<Call>>>,
    pub(crate) script: Arc<Script>,
}

impl Upstream {
    pub(crate) fn new(script: impl Fn(usize, &Call) -> Reply + Send + Sync + 'static) -> Self {
        Upstream {
            calls: Arc::default(),
            script: Arc::new(script),
        }
    }

    pub(crate) fn service(
        &self,
    ) -> impl Service<
        UpstreamRequest,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future: Send,
    > + Clone
    + Send
    + 'static {
        let upstream = self.clone();
        tower::service_fn(move |request: UpstreamRequest| {
            let upstream = upstream.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.expect("infallible").to_bytes();
                let call = Call {
                    at: Instant::now(),
                    host: parts.uri.host().unwrap_or_default().to_owned(),
                    uri: parts.uri.to_string(),
                    path: parts.uri.path().to_owned(),
                    method: parts.method,
                    headers: parts.headers,
                    body,
                };
                let reply = {
                    let mut calls = upstream.calls.lock().expect("calls");
                    let reply = (upstream.script)(calls.len(), &call);
                    calls.push(call);
                    reply
                };
                tokio::time::sleep(reply.delay).await;
                let mut response = Response::builder().status(reply.status);
                if let Some(after) = reply.retry_after {
                    response = response.header("retry-after", after);
                }
                for (name, value) in reply.headers {
                    response = response.header(*name, *value);
                }
                Ok::<_, Infallible>(response.body(Full::default()).expect("valid response"))
            }
        })
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls").clone()
    }

    pub(crate) fn header(&self, name: &str) -> Vec<Option<String>> {
        self.calls().iter().map(|c| c.header(name)).collect()
    }
}

pub(crate) fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri)
        .body(Full::default())
        .expect("valid request")
}

pub(crate) fn quick(p: PolicyBuilder) -> PolicyBuilder {
    p.total_timeout(Duration::from_secs(10))
        .no_attempt_timeout()
        .backoff(Backoff::none())
}

pub(crate) fn layer(builder: OutboundBuilder) -> OutboundLayer {
    builder.build().expect("valid outbound layer")
}

/// A gRPC `POST` (content type `application/grpc`), marked repeatable, with `headers`.
pub(crate) fn grpc_post(headers: &[(&'static str, &'static str)]) -> Request<Full<Bytes>> {
    let mut request = Request::post("http://a.test/pkg.Service/Method")
        .header("content-type", "application/grpc");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Full::default()).expect("valid request");
    request.extensions_mut().insert(Repeatable);
    request
}
