//! axum extractors for what [`InboundLayer`](crate::InboundLayer) read from the request: its
//! deadline and its criticality (feature `axum`).
//!
//! The layer runs the handler inside an [`Ambient`] scope; a policy that opted in reads it
//! on its own. A handler that wants the values itself (to log them, to pick a cheaper answer
//! when little time is left, to pass them to a client rampart does not wrap) takes them as
//! arguments instead of calling [`Ambient::current`]:
//!
//! ```
//! use axum::{Router, routing::get};
//! use rampart_http::InboundLayer;
//! use rampart_http::extract::{RequestCriticality, RequestDeadline};
//!
//! async fn prices(RequestDeadline(deadline): RequestDeadline, RequestCriticality(level): RequestCriticality) -> String {
//!     match deadline {
//!         Some(deadline) => format!("{level}, {} ms left", deadline.remaining().as_millis()),
//!         None => format!("{level}, no deadline"),
//!     }
//! }
//!
//! let app: Router = Router::new()
//!     .route("/prices", get(prices))
//!     .layer(InboundLayer::new());
//! # drop(app);
//! ```
//!
//! Both read the ambient scope the handler runs in, so they never fail: behind no inbound
//! layer, a request has no deadline and the default level (`Critical`), as
//! [`Ambient::current`] has outside any scope. The deadline is the one the handler's
//! policies see: the received one, ignored above the layer's maximum, less its reserve, or
//! the one the layer's default timeout gives a request that brought none.

use std::convert::Infallible;
use std::future::{Future, ready};

use axum_core::extract::FromRequestParts;
use http::request::Parts;
use rampart::{Ambient, Criticality, Deadline};

/// The request's deadline as the inbound layer set it; `None` when it has none. An axum
/// extractor that never rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestDeadline(pub Option<Deadline>);

/// The request's criticality as the inbound layer set it (`Critical` when the request sent
/// none). An axum extractor that never rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestCriticality(pub Criticality);

impl<S: Send + Sync> FromRequestParts<S> for RequestDeadline {
    type Rejection = Infallible;

    fn from_request_parts(
        _: &mut Parts,
        _: &S,
    ) -> impl Future<Output = Result<Self, Infallible>> + Send {
        ready(Ok(RequestDeadline(Ambient::current().deadline())))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestCriticality {
    type Rejection = Infallible;

    fn from_request_parts(
        _: &mut Parts,
        _: &S,
    ) -> impl Future<Output = Result<Self, Infallible>> + Send {
        ready(Ok(RequestCriticality(Ambient::current().criticality())))
    }
}
