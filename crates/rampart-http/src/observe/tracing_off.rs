//! The `tracing` feature is off: no spans, no events.

use std::future::Future;

use http::Method;

use crate::event::EdgeEvent;

/// No span.
pub(crate) struct Span;

impl Span {
    /// `future` itself.
    #[inline(always)]
    pub(crate) fn run<F: Future>(self, future: F) -> F {
        future
    }
}

#[inline(always)]
pub(super) fn attempt(_method: &Method, _host: &str, _resends: u32) -> Span {
    Span
}

#[inline(always)]
pub(super) fn event(_event: &EdgeEvent<'_>) {}
