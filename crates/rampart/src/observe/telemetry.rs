//! A policy's listeners, hooks and diagnostics, and what reports a stream's end: where every
//! [`Event`] goes, each callback guarded so that a panicking one never changes a call's
//! outcome (it is reported to the diagnostics callback instead).

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::Poll;

use crate::event::{CallbackFailure, Event, RetryInfo, TimeoutInfo};
use crate::timeout::{MaybeAsync, PendingAnswer};

use super::{MetricLabels, Observer, Span};

pub(crate) type Listener = Arc<dyn Fn(&Event<'_>) + Send + Sync>;
pub(crate) type RetryHook = Arc<dyn Fn(&RetryInfo<'_>) + Send + Sync>;
pub(crate) type TimeoutHook = Arc<dyn Fn(&TimeoutInfo<'_>) -> MaybeAsync<()> + Send + Sync>;
pub(crate) type Diagnostics = Arc<dyn Fn(&CallbackFailure<'_>) + Send + Sync>;

/// The listeners, hooks and diagnostics of one policy.
#[derive(Clone, Default)]
pub(crate) struct Telemetry {
    pub(crate) listeners: Vec<Listener>,
    pub(crate) on_retry: Option<RetryHook>,
    pub(crate) on_timeout: Option<TimeoutHook>,
    pub(crate) diagnostics: Option<Diagnostics>,
    /// The `tracing` and `metrics` features' view of the events (nothing without them).
    pub(crate) observer: Observer,
    /// How the observer labels the policy's metrics, set before it is built.
    pub(crate) labels: MetricLabels,
}

impl Telemetry {
    /// Whether anyone listens to events (and so wants their durations measured): a listener,
    /// or an observability feature that is listened to (see [`Observer::is_active`]).
    #[inline]
    pub(crate) fn is_listened(&self) -> bool {
        !self.listeners.is_empty() || self.observer.is_active()
    }

    /// Reports `event` of the call whose span is `span`.
    #[inline]
    pub(crate) fn emit(&self, span: &Span, event: Event<'_>) {
        self.observer.event(span, &event);
        for listener in &self.listeners {
            self.guard(policy_of(&event), "listener", || listener(&event));
        }
    }

    pub(crate) fn retrying(&self, span: &Span, info: RetryInfo<'_>) {
        if !self.is_listened() && self.on_retry.is_none() {
            return;
        }
        self.emit(
            span,
            Event::Retrying {
                policy: info.policy,
                attempt: info.attempt,
                outcome: info.outcome,
                delay: info.delay,
            },
        );
        if let Some(hook) = &self.on_retry {
            self.guard(info.policy, "on_retry", || hook(&info));
        }
    }

    /// Calls the on-timeout hook, if any; a hook that answered with a future hands it back,
    /// to be awaited with [`awaited`](Self::awaited).
    #[inline]
    pub(crate) fn timed_out(&self, info: TimeoutInfo<'_>) -> Option<PendingAnswer<()>> {
        let hook = self.on_timeout.as_ref()?;
        let mut answer = None;
        self.guard(info.policy, "on_timeout", || answer = Some(hook(&info)));
        match answer {
            Some(MaybeAsync::Pending(future)) => Some(future),
            Some(MaybeAsync::Ready(())) | None => None,
        }
    }

    /// Awaits the on-timeout hook's `future`: a future whose panics, while it is polled, are
    /// reported (as the policy `policy`'s), not propagated.
    pub(crate) fn awaited<'a>(
        &'a self,
        policy: &'a str,
        future: PendingAnswer<()>,
    ) -> Reported<'a> {
        Reported {
            future,
            telemetry: self,
            policy,
        }
    }

    fn guard(&self, policy: &str, callback: &'static str, f: impl FnOnce()) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
            self.report(policy, callback, payload.as_ref());
        }
    }

    #[cold]
    fn report(&self, policy: &str, callback: &'static str, payload: &(dyn Any + Send)) {
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic with a non-string payload");
        if let Some(diagnostics) = &self.diagnostics {
            let failure = CallbackFailure {
                policy,
                callback,
                message,
            };
            // A failing diagnostics callback has nobody left to report to.
            let _ = catch_unwind(AssertUnwindSafe(|| diagnostics(&failure)));
        }
    }
}

/// The on-timeout hook's future, its panics reported to the diagnostics callback: see
/// [`Telemetry::awaited`].
pub(crate) struct Reported<'a> {
    future: PendingAnswer<()>,
    telemetry: &'a Telemetry,
    policy: &'a str,
}

impl Future for Reported<'_> {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let this = &mut *self;
        match catch_unwind(AssertUnwindSafe(|| this.future.as_mut().poll(cx))) {
            Ok(polled) => polled,
            Err(payload) => {
                this.telemetry
                    .report(this.policy, "on_timeout", payload.as_ref());
                Poll::Ready(())
            }
        }
    }
}

fn policy_of<'a>(event: &Event<'a>) -> &'a str {
    match *event {
        Event::AttemptEnded { policy, .. }
        | Event::Retrying { policy, .. }
        | Event::TimeoutIgnored { policy, .. }
        | Event::OrphanedWork { policy, .. }
        | Event::AttemptAbandoned { policy, .. }
        | Event::BreakerTransition { policy, .. }
        | Event::AttemptRefused { policy, .. }
        | Event::HedgeStarted { policy, .. }
        | Event::HedgeWon { policy, .. }
        | Event::HedgeDiscarded { policy, .. }
        | Event::HedgeSuppressed { policy, .. }
        | Event::CallEnded { policy, .. }
        | Event::WouldReject { policy, .. }
        | Event::FallbackUsed { policy, .. }
        | Event::StreamEnded { policy, .. }
        | Event::Reconfigured { policy } => policy,
    }
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("listeners", &self.listeners.len())
            .field("on_retry", &self.on_retry.is_some())
            .field("on_timeout", &self.on_timeout.is_some())
            .field("diagnostics", &self.diagnostics.is_some())
            .finish()
    }
}

/// What a stream's end is reported to: its policy's listeners and observer, under its name.
/// One per policy, made when a stream of it is first opened while something listens.
pub(crate) struct StreamReporter {
    pub(crate) name: Box<str>,
    pub(crate) telemetry: Telemetry,
}
