//! The `tracing` feature is off: no spans, no events.

use std::future::Future;

use http::{Method, StatusCode};

use crate::event::EdgeEvent;

/// No span.
pub(crate) struct Span;

impl Span {
    /// `future` itself.
    #[inline(always)]
    pub(crate) fn instrument<F: Future>(&self, future: F) -> F {
        future
    }

    /// Nothing to record on.
    #[inline(always)]
    pub(crate) fn record_status(&self, _status: Option<StatusCode>) {}
}

#[inline(always)]
pub(super) fn attempt(_method: &Method, _host: &str, _number: u32) -> Span {
    Span
}

#[inline(always)]
pub(super) fn event(_event: &EdgeEvent<'_>) {}
