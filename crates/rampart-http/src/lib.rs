//! rampart-http: the HTTP edge of rampart.
//!
//! rampart makes one bound true for one call. Across a call graph of real services, two more
//! things must hold: the deadline the first caller set must shrink as the request travels (so
//! that nobody works on an answer nobody is waiting for), and how much a request matters must
//! travel with it (so that overload sheds the backfill before the checkout). This crate
//! carries both across HTTP, and makes a rampart policy the only timeout system of an HTTP
//! client.
//!
//! ```text
//!   edge ──X-Deadline-Ms: 300──▶ middle ──X-Deadline-Ms: 287──▶ leaf
//!          X-Criticality: …             (inbound layer: the handler's ambient deadline;
//!                                         outbound layer: min(attempt ceiling, time left))
//! ```
//!
//! - [`InboundLayer`] (server side, a `tower` layer for axum, hyper or tonic): reads the
//!   received deadline, criticality and retry mark into the handler's ambient scope; options
//!   for a maximum, a reserve, rejecting expired requests, enforcing the deadline and
//!   admission control.
//! - [`OutboundLayer`] (client side, any `tower` service over `http::Request`): runs every
//!   request under a per-host policy (breaker and budget per `host:port`), writes the deadline,
//!   criticality and retry mark on every attempt, retries only what can be replayed.
//! - `reqwest::Client` (feature `reqwest`): the same for reqwest, built without a timeout of
//!   its own.
//! - [`HttpClassifier`]: status codes and `Retry-After` to verdicts.
//! - [`ClientError`] and [`Problem`]: timeouts answer 504, refusals 503 with `Retry-After`, as
//!   `application/problem+json`.
//! - [`CallReport`]: in the extensions of the responses an outbound call returns (all of the
//!   reqwest client's; all of the layer's but a first attempt's success, whose report would
//!   say only that), why the call stopped, its attempts and the deadline that applied; with
//!   [`fail_on_retryable_status`](OutboundBuilder::fail_on_retryable_status), a final
//!   retryable status is an error instead.
//! - Features `tracing` and `metrics`: the edge's own events, counters and outbound attempt
//!   spans (with rampart's); the table is in [`observe`].
//!
//! ```
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use axum::body::Body;
//! use axum::extract::State;
//! use axum::response::Response;
//! use axum::{Router, routing::get};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::{Client, connect::HttpConnector};
//! use hyper_util::rt::TokioExecutor;
//! use rampart_http::{InboundLayer, Outbound, OutboundLayer, ReplayBody};
//! use tower::ServiceExt;
//! use tower_layer::Layer;
//!
//! type HttpClient = Outbound<Client<HttpConnector, ReplayBody<Full<Bytes>>>>;
//!
//! // A handler whose call obeys the request it serves: `X-Deadline-Ms` is what is left.
//! async fn stock(State(client): State<HttpClient>) -> Response {
//!     let request = http::Request::get("http://inventory:3001/stock")
//!         .body(Full::default())
//!         .expect("valid request");
//!     match client.oneshot(request).await {
//!         Ok(response) => response.map(Body::new),
//!         Err(error) => error.into_problem_response().map(Body::new), // 504 or 503, as problem+json
//!     }
//! }
//!
//! let client = OutboundLayer::builder()
//!     .policy(|p| p.attempt_timeout(Duration::from_millis(500)))
//!     .build()?
//!     .layer(Client::builder(TokioExecutor::new()).build_http());
//! let app: Router = Router::new()
//!     .route("/stock", get(stock))
//!     .with_state(client)
//!     .layer(InboundLayer::new().maximum(Duration::from_secs(30)));
//! # drop(app); Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | default | what |
//! |---|---|---|
//! | `axum` | off | `IntoResponse` for [`Problem`] and [`ClientError`], and the `extract` module's extractors for the request's deadline and criticality (through `axum-core` only) |
//! | `reqwest` | off | `reqwest::Client`: reqwest under a per-host policy, plain HTTP (no TLS backend is enabled; enable one on reqwest yourself) |
//! | `serde` | off | `config`: the layers' settings and the service's named policies read from a file (TOML, YAML, JSON), checked with every problem under its key path, and reloaded |
//! | `tonic` | off | `OutboundLayer::grpc`: a tonic channel under the outbound layer in one line, rampart's decisions as `tonic::Status` (tonic without default features: no transport, no TLS) |
//!
//! # Modules
//!
//! | module | what |
//! |---|---|
//! | [`header`] | the wire formats: `X-Deadline-Ms`, `grpc-timeout`, `X-Criticality`, the retry mark, `Retry-After` |
//! | [`inbound`] | the server layer |
//! | [`outbound`] | the client layer and its per-host table |
//! | [`body`] | the layers' body types |
//! | [`classify`] | the HTTP classifier |
//! | `config` | the layers' settings and the named policies as a file (feature `serde`) |
//! | [`problem`] | problem documents for what rampart decided |
//! | [`quota`] | quota headers (`RateLimit`, `X-RateLimit-*`) and refusing a host whose quota is spent |
//! | [`error`] | the client error |
//! | [`report`] | the report of a call, in the extensions of its response |
//! | [`event`] | what the layers decided on their own |
//! | `extract` | axum extractors for the request's deadline and criticality (feature `axum`) |
//! | `reqwest` | the reqwest client (feature `reqwest`) |
//! | `grpc` | the tonic channel and `tonic::Status` (feature `tonic`) |

pub mod body;
pub mod classify;
#[cfg(feature = "serde")]
pub mod config;
pub mod error;
pub mod event;
#[cfg(feature = "axum")]
pub mod extract;
#[cfg(feature = "tonic")]
pub mod grpc;
pub mod header;
pub mod inbound;
pub mod observe;
pub mod outbound;
pub mod problem;
pub mod quota;
pub mod report;
#[cfg(feature = "reqwest")]
pub mod reqwest;

pub use body::{ReplayBody, ResponseBody};
pub use classify::{HttpClassifier, HttpResponse};
pub use error::{ClientError, RetryableStatus};
pub use event::EdgeEvent;
#[cfg(feature = "tonic")]
pub use grpc::GrpcChannel;
pub use inbound::{Inbound, InboundLayer};
pub use outbound::{
    Hedged, HostSettings, Outbound, OutboundBuilder, OutboundLayer, OutboundSettings, Repeatable,
    is_replayable,
};
pub use problem::Problem;
pub use report::CallReport;

/// The README's examples, compiled as doctests (they use the reqwest client).
#[cfg(all(doctest, feature = "reqwest"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
