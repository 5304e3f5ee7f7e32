//! The `tracing` feature is off: no spans, no events.

use std::future::Future;
use std::time::Duration;

use crate::event::Event;
use crate::outcome::AttemptOutcome;

/// No span.
#[derive(Clone)]
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

    /// Nothing to record on.
    #[inline(always)]
    pub(crate) fn record_outcome(&self, _outcome: Option<AttemptOutcome>) {}
}

/// Nothing kept: no span records it (zero-sized, so a call's future does not grow).
pub(crate) struct LastOutcome;

impl LastOutcome {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        LastOutcome
    }

    #[inline(always)]
    pub(crate) fn set(&mut self, _outcome: AttemptOutcome) {}

    #[inline(always)]
    pub(crate) fn get(&self) -> Option<AttemptOutcome> {
        None
    }
}

#[inline(always)]
pub(super) fn is_active() -> bool {
    false
}

#[inline(always)]
pub(super) fn current() -> Span {
    Span
}

#[inline(always)]
pub(super) fn call(_policy: &str) -> Span {
    Span
}

#[inline(always)]
pub(super) fn attempt(
    _call: &Span,
    _number: u32,
    _ceiling: Option<Duration>,
    _admission_wait: Option<Duration>,
) -> Span {
    Span
}

#[inline(always)]
pub(super) fn stream(_call: &Span, _policy: &str) -> Span {
    Span
}

#[inline(always)]
pub(super) fn call_began(_span: &Span, _deadline: Option<Duration>) {}

#[inline(always)]
pub(super) fn event(_span: &Span, _event: &Event<'_>) {}
