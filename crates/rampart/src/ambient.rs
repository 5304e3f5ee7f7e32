//! The ambient context: the deadline and criticality of the request a task is working for,
//! carried across `.await` points and, with the helpers here, into spawned tasks and blocking
//! threads.
//!
//! A service holding 200 ms of its caller's patience should not let the next service work for
//! ten seconds. The inbound edge (an HTTP layer, say) opens a scope with the received deadline
//! and level; every policy inside it that opted in
//! ([`use_ambient_deadline`](crate::PolicyBuilder::use_ambient_deadline),
//! [`use_ambient_criticality`](crate::PolicyBuilder::use_ambient_criticality)) reads them once
//! per call: its deadline becomes `min(policy deadline, time the caller is still waiting)`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::time::Duration;
//! use rampart::{Ambient, Criticality, Deadline};
//!
//! let ambient = Ambient::new()
//!     .with_deadline(Deadline::after(Duration::from_millis(200)))
//!     .with_criticality(Criticality::Sheddable);
//! ambient
//!     .scope(async {
//!         tokio::task::yield_now().await;
//!         assert_eq!(Criticality::current(), Criticality::Sheddable);
//!         assert!(Deadline::current().is_some());
//!         // A spawned task sees the scope only through the helper.
//!         let inherited = Ambient::spawn(async { Deadline::current().is_some() });
//!         assert!(inherited.await.unwrap());
//!         let lost = tokio::spawn(async { Deadline::current().is_some() });
//!         assert!(!lost.await.unwrap());
//!     })
//!     .await;
//! # }
//! ```
//!
//! Nested scopes never extend an inherited deadline: a scope's deadline is the earlier of its
//! own and the enclosing one. Reading the ambient context outside any scope is cheap and gives
//! "no deadline, Critical". A policy that did not opt in never reads it (one branch per call).
//!
//! The context also says whether the request being served arrived as a retry
//! ([`is_inbound_retry`](Ambient::is_inbound_retry)). rampart's executor does not read it: an
//! edge integration does (`rampart-http` makes the outbound calls of such a request attempt
//! once, so that only the layer directly above a failure retries). Like the deadline, a nested
//! scope cannot take it away.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;
use tokio::task::futures::TaskLocalFuture;

use crate::clock::Instant;
use crate::criticality::Criticality;
use crate::deadline::Deadline;

tokio::task_local! {
    static AMBIENT: Ambient;
}

/// The deadline and criticality of the work in progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ambient {
    deadline: Option<Deadline>,
    criticality: Option<Criticality>,
    inbound_retry: bool,
}

impl Ambient {
    /// No deadline, no level (reads as `Critical`).
    pub const fn new() -> Self {
        Ambient {
            deadline: None,
            criticality: None,
            inbound_retry: false,
        }
    }

    /// The context of the current task or blocking scope, or [`Ambient::new`] outside any.
    pub fn current() -> Ambient {
        AMBIENT.try_with(|ambient| *ambient).unwrap_or_default()
    }

    /// This context with `deadline`, or the one it has if that is earlier.
    pub fn with_deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = Deadline::earliest(self.deadline, Some(deadline));
        self
    }

    /// This context with `level`.
    pub fn with_criticality(mut self, level: Criticality) -> Self {
        self.criticality = Some(level);
        self
    }

    /// This context marked as serving a request that arrived as a retry of an earlier one.
    /// Once marked, nested scopes stay marked.
    pub fn with_inbound_retry(mut self) -> Self {
        self.inbound_retry = true;
        self
    }

    /// Whether the request being served arrived as a retry (see the [module docs](self)).
    pub fn is_inbound_retry(&self) -> bool {
        self.inbound_retry
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    /// The level (`Critical` when none was set).
    pub fn criticality(&self) -> Criticality {
        self.criticality.unwrap_or_default()
    }

    /// Whether a level was set explicitly.
    pub fn has_criticality(&self) -> bool {
        self.criticality.is_some()
    }

    /// Runs `future` with this context, merged into the current one (a deadline never later
    /// than the enclosing scope's).
    ///
    /// The merge happens when the returned future is first polled, so a scope built before the
    /// enclosing one is entered still cannot outlive it.
    pub fn scope<F: Future>(self, future: F) -> Scope<F> {
        Scope {
            state: State::Unentered {
                ambient: self,
                future,
            },
        }
    }

    /// Runs `f` on this thread with this context visible to [`Ambient::current`]: for blocking
    /// code.
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        AMBIENT.sync_scope(Ambient::current().merge(self), f)
    }

    /// `future` bound to the current context, to hand to an executor yourself. With the
    /// `tracing` feature, it also runs inside the current `tracing` span, so a call made in it
    /// is a child of the span that spawned it.
    pub fn bind<F: Future>(future: F) -> impl Future<Output = F::Output> {
        crate::observe::current_span().instrument(AMBIENT.scope(Ambient::current(), future))
    }

    /// `tokio::spawn`, carrying the current context (and, with the `tracing` feature, the
    /// current span) into the new task.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as `tokio::spawn` does.
    pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(Ambient::bind(future))
    }

    /// `tokio::task::spawn_blocking`, carrying the current context (and span) onto the
    /// blocking thread.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as `spawn_blocking` does.
    pub fn spawn_blocking<F, R>(f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        tokio::task::spawn_blocking(Ambient::carry(f))
    }

    /// A closure for a plain `std::thread::spawn` that runs `f` in the current context (and
    /// span).
    pub fn carry<F, R>(f: F) -> impl FnOnce() -> R + Send + 'static
    where
        F: FnOnce() -> R + Send + 'static,
    {
        let ambient = Ambient::current();
        let span = crate::observe::current_span();
        move || span.in_scope(|| ambient.sync_scope(f))
    }

    fn merge(self, inner: Ambient) -> Ambient {
        let mut merged = self;
        if let Some(deadline) = inner.deadline {
            merged = merged.with_deadline(deadline);
        }
        if let Some(level) = inner.criticality {
            merged.criticality = Some(level);
        }
        merged.inbound_retry |= inner.inbound_retry;
        merged
    }

    /// Time left before the deadline at `now`; `None` without a deadline.
    pub fn remaining_at(&self, now: Instant) -> Option<std::time::Duration> {
        self.deadline
            .map(|d| d.instant().saturating_duration_since(now))
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Ambient::scope`]: its future, run with the context merged into the one
    /// current when it is first polled. It holds that future once, where an `async fn` would
    /// hold it twice (its argument keeps its place in the state after it is moved into the
    /// scope).
    #[must_use = "futures do nothing unless polled"]
    pub struct Scope<F: Future> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    #[project_replace = StateOwned]
    enum State<F: Future> {
        /// Not polled yet: the context is merged at the first poll.
        Unentered { ambient: Ambient, future: F },
        Entered { #[pin] scoped: TaskLocalFuture<Ambient, F> },
        /// Between the two, for the moment the first is taken apart.
        Entering,
    }
}

impl<F: Future> Future for Scope<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut state = self.project().state;
        if let StateProj::Unentered { .. } = state.as_mut().project()
            && let StateOwned::Unentered { ambient, future } =
                state.as_mut().project_replace(State::Entering)
        {
            let merged = Ambient::current().merge(ambient);
            state.set(State::Entered {
                scoped: AMBIENT.scope(merged, future),
            });
        }
        match state.project() {
            StateProj::Entered { scoped } => scoped.poll(cx),
            StateProj::Unentered { .. } | StateProj::Entering => {
                unreachable!("entered above")
            }
        }
    }
}

impl<F: Future> fmt::Debug for Scope<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope").finish_non_exhaustive()
    }
}

// The ambient reads of the two values, beside the scope that holds them (the value types sit
// below this module and know nothing of it).

impl Criticality {
    /// The ambient level of the current task (`Critical` outside any scope).
    pub fn current() -> Criticality {
        Ambient::current().criticality()
    }

    /// Runs `future` with this level ambient.
    pub fn scope<F: Future>(self, future: F) -> Scope<F> {
        Ambient::new().with_criticality(self).scope(future)
    }
}

impl Deadline {
    /// The ambient deadline of the current task, if any.
    pub fn current() -> Option<Deadline> {
        Ambient::current().deadline()
    }

    /// Runs `future` with this deadline ambient (or the enclosing one, if that is earlier).
    pub fn scope<F: Future>(self, future: F) -> Scope<F> {
        Ambient::new().with_deadline(self).scope(future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_scoped_future_can_be_spawned_and_sees_its_scope_in_the_task() {
        let deadline = Deadline::after(Duration::from_millis(200));
        let scoped = deadline.scope(async {
            tokio::task::yield_now().await;
            Deadline::current()
        });
        let seen = tokio::spawn(scoped).await.expect("the task ran");
        assert_eq!(seen, Some(deadline));
    }

    #[test]
    fn a_scope_holds_its_future_once() {
        let future = async {
            let held = [0u8; 1024];
            tokio::task::yield_now().await;
            held.len()
        };
        let size = std::mem::size_of_val(&future);
        let scoped = std::mem::size_of_val(&Ambient::new().scope(future));
        assert!(
            scoped < size + 128,
            "{scoped} bytes around a {size}-byte future"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn inner_scope_cannot_extend_the_enclosing_deadline() {
        let outer = Deadline::after(Duration::from_millis(100));
        let later = Deadline::after(Duration::from_secs(10));
        let seen = Ambient::new()
            .with_deadline(outer)
            .scope(
                Ambient::new()
                    .with_deadline(later)
                    .scope(async { Deadline::current() }),
            )
            .await;
        assert_eq!(seen, Some(outer));
    }

    #[tokio::test]
    async fn outside_any_scope_there_is_no_total_timeout_and_the_level_is_critical() {
        assert_eq!(Ambient::current(), Ambient::new());
        assert_eq!(Criticality::current(), Criticality::Critical);
    }

    #[tokio::test]
    async fn inbound_retry_mark_reaches_nested_scopes_and_spawned_tasks() {
        assert!(!Ambient::current().is_inbound_retry());
        let (nested, spawned) = Ambient::new()
            .with_inbound_retry()
            .scope(async {
                let nested = Ambient::new()
                    .with_criticality(Criticality::Sheddable)
                    .scope(async { Ambient::current().is_inbound_retry() })
                    .await;
                let spawned = Ambient::spawn(async { Ambient::current().is_inbound_retry() });
                (nested, spawned.await.expect("task"))
            })
            .await;
        assert!(nested && spawned);
        assert!(!Ambient::current().is_inbound_retry());
    }

    #[test]
    fn sync_scope_is_visible_to_blocking_code_and_restored_after() {
        let level = Ambient::new()
            .with_criticality(Criticality::SheddablePlus)
            .sync_scope(Criticality::current);
        assert_eq!(level, Criticality::SheddablePlus);
        assert_eq!(Criticality::current(), Criticality::Critical);
    }
}
