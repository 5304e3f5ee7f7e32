//! The `tracing` feature is off: no spans, no events.

use std::future::Future;
use std::time::Duration;

use crate::event::Event;

/// No span.
pub(crate) struct Span;

impl Span {
    /// `future` itself.
    #[inline(always)]
    pub(crate) fn instrument<F: Future>(self, future: F) -> F {
        future
    }

    /// Runs `f`.
    #[inline(always)]
    pub(crate) fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }
}

#[inline(always)]
pub(super) fn call(_policy: &str) -> Span {
    Span
}

#[inline(always)]
pub(super) fn attempt(_number: u32, _ceiling: Option<Duration>) -> Span {
    Span
}

#[inline(always)]
pub(super) fn call_began(_deadline: Option<Duration>) {}

#[inline(always)]
pub(super) fn event(_event: &Event<'_>) {}
