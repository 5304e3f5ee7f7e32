//! The "prices" backend of `two_services.rs`: one seeded fault model behind two faces, the
//! HTTP route (axum, served by the example's router) and the gRPC method (tonic's unary
//! server on HTTP/2, `serve_grpc`), each behind the inbound layer.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use rampart_http::InboundLayer;
use tonic::Status;
use tower_layer::Layer;

use super::grpc::{Utf8, serve_h2};
use super::request_id;

/// The prices service: its faults, and the attempts it has seen per request id.
#[derive(Clone)]
pub(crate) struct Prices {
    seed: u64,
    attempts: Arc<Mutex<HashMap<u64, u64>>>,
    served: Arc<AtomicU64>,
}

/// SplitMix64's finalizer: the seeded generator, stateless, keyed by what it mixes.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What one attempt meets at the backend.
#[derive(Clone, Copy)]
enum Fault {
    Unavailable,
    Hang,
    Answer { after: Duration },
}

impl Prices {
    /// A backend whose faults come from `seed`.
    pub(crate) fn new(seed: u64) -> Prices {
        Prices {
            seed,
            attempts: Arc::default(),
            served: Arc::default(),
        }
    }

    /// Attempts served so far, on both faces.
    pub(crate) fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// What the next attempt of request `id` meets, counting it as served.
    fn next_fault(&self, id: u64) -> Fault {
        self.served.fetch_add(1, Ordering::Relaxed);
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
            let seen = attempts.entry(id).or_insert(0);
            *seen += 1;
            *seen
        };
        self.fault(id, attempt)
    }

    fn fault(&self, id: u64, attempt: u64) -> Fault {
        let draw = mix(mix(self.seed ^ mix(id)) ^ attempt) % 100;
        match draw {
            0..30 => Fault::Unavailable,
            30..40 => Fault::Hang,
            _ => Fault::Answer {
                after: Duration::from_millis(draw % 4),
            },
        }
    }
}

fn quote_of(sku: u32) -> String {
    format!("sku {sku}: {}.{:02} EUR", 10 + sku % 90, sku % 100)
}

pub(crate) async fn price(
    State(prices): State<Prices>,
    Path(sku): Path<u32>,
    headers: HeaderMap,
) -> Response {
    match prices.next_fault(request_id(&headers)) {
        Fault::Unavailable => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Fault::Hang => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            StatusCode::OK.into_response()
        }
        Fault::Answer { after } => {
            tokio::time::sleep(after).await;
            quote_of(sku).into_response()
        }
    }
}

/// `/demo.Prices/Get` over gRPC, its message the sku: the same faults as the HTTP route
/// (`UNAVAILABLE` for a `503`), answered by tonic's unary server with the hand-written codec.
async fn grpc_price(
    prices: Prices,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<tonic::body::Body>, Infallible> {
    let fault = prices.next_fault(request_id(request.headers()));
    let answer = tower::service_fn(move |request: tonic::Request<String>| async move {
        match fault {
            Fault::Unavailable => Err(Status::unavailable("prices are unavailable")),
            Fault::Hang => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(tonic::Response::new(String::new()))
            }
            Fault::Answer { after } => {
                tokio::time::sleep(after).await;
                let sku = request.into_inner().parse().unwrap_or(0);
                Ok(tonic::Response::new(quote_of(sku)))
            }
        }
    });
    Ok(tonic::server::Grpc::new(Utf8).unary(answer, request).await)
}

/// Serves the backend's gRPC method over HTTP/2 behind its own inbound layer (which reads the
/// caller's `grpc-timeout`).
pub(crate) async fn serve_grpc(prices: Prices) -> SocketAddr {
    let service = InboundLayer::new().layer(tower::service_fn(move |request| {
        grpc_price(prices.clone(), request)
    }));
    serve_h2(service).await
}
