//! Admission: whether an attempt may start at all, decided before the callback runs.
//!
//! A service decides what to shed; rampart hands it the means. An [`Admit`] component is
//! consulted once per attempt with the attempt's context (its level, its time left, its
//! number). It admits, handing back a permit that is held for the attempt's life and released
//! on every path (success, error, timeout, drop), or it refuses. A refusal is processed as if
//! the callback had returned [`Verdict::Refused`](crate::Verdict::Refused): self-imposed, so it
//! is never charged to the retry budget and never breaker evidence, and it is retried after
//! its retry-after like any refusal. The callback does not run. When every attempt was
//! refused the call fails with [`Error::Rejected`](crate::Error::Rejected) and reason
//! [`Overloaded`](crate::RejectReason::Overloaded).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use rampart::Policy;
//! use rampart::limit::ConcurrencyLimit;
//!
//! let policy = Policy::builder()
//!     .admit(ConcurrencyLimit::new(64).queue(16))
//!     .build()
//!     .expect("valid policy");
//! let v = policy.run(async |attempt| Ok::<_, std::io::Error>(attempt.number())).await;
//! assert_eq!(v.ok(), Some(1));
//! # }
//! ```
//!
//! An admission may wait (a queue): the executor races the wait against the caller's
//! cancellation and the attempt's ceiling, so a queued attempt whose time runs out leaves the
//! queue at once (as an attempt timeout). A permit is a plain value, not a box: admitted calls
//! allocate nothing for it.
//!
//! Ready-made components live in [`crate::limit`].

use std::future::Future;
use std::time::Duration;

use crate::clock::Instant;
use crate::criticality::Criticality;
use crate::event::AttemptOutcome;

/// What an admission component is told about the attempt asking to start.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AdmitContext<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// The attempt's number, 1-based.
    pub attempt: u32,
    /// The call's criticality (`Critical` unless the policy reads the ambient one).
    pub level: Criticality,
    /// The attempt's ceiling, as an instant; `None` when unbounded.
    pub deadline: Option<Instant>,
    /// The current instant on the policy's clock.
    pub now: Instant,
}

impl<'a> AdmitContext<'a> {
    /// The context of an admission asked for outside a policy's executor (an inbound HTTP
    /// layer admitting a request, say).
    pub fn new(
        policy: &'a str,
        attempt: u32,
        level: Criticality,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Self {
        AdmitContext {
            policy,
            attempt,
            level,
            deadline,
            now,
        }
    }

    /// Time left before the attempt's ceiling; `None` when unbounded.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(self.now))
    }
}

/// A refusal: which component said no, and when it expects room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// When to try again, if the component knows.
    pub retry_after: Option<Duration>,
    /// The refusing component, e.g. `"concurrency limit"`.
    pub by: &'static str,
}

/// How an admitted attempt went, for components that adapt (AIMD, gradient).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Feedback {
    /// How the attempt ended.
    pub outcome: AttemptOutcome,
    /// How long it held its permit.
    pub elapsed: Duration,
}

impl Feedback {
    /// Feedback for a permit taken outside a policy's executor.
    pub fn new(outcome: AttemptOutcome, elapsed: Duration) -> Self {
        Feedback { outcome, elapsed }
    }
}

/// Decides whether an attempt may start.
///
/// Implementations are shared by every call through a policy (and often by several policies):
/// `Send + Sync`, and cheap on the admitted path.
pub trait Admit: Send + Sync + 'static {
    /// Held while the attempt runs; dropping it releases the capacity.
    type Permit: Send;

    /// Whether this component admits every attempt at once without looking at it; the
    /// executor then skips it entirely. Leave it `false`.
    const ALWAYS_ADMITS: bool = false;

    /// Admits the attempt (at once, or after waiting in a queue) or refuses it.
    ///
    /// # Cancellation
    ///
    /// The executor drops the returned future when the caller cancels or the attempt's
    /// ceiling passes while it waits: a queue must not lose capacity when that happens.
    fn acquire(
        &self,
        cx: &AdmitContext<'_>,
    ) -> impl Future<Output = Result<Self::Permit, Refusal>> + Send;

    /// Gives back a permit with the attempt's outcome. The default just drops it.
    fn release(&self, permit: Self::Permit, feedback: Feedback) {
        let _ = feedback;
        drop(permit);
    }
}

/// Admits everything at once; the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unlimited;

impl Admit for Unlimited {
    type Permit = ();
    const ALWAYS_ADMITS: bool = true;

    #[inline]
    fn acquire(&self, _: &AdmitContext<'_>) -> impl Future<Output = Result<(), Refusal>> + Send {
        std::future::ready(Ok(()))
    }
}

impl<T: Admit> Admit for std::sync::Arc<T> {
    type Permit = T::Permit;
    const ALWAYS_ADMITS: bool = T::ALWAYS_ADMITS;

    fn acquire(
        &self,
        cx: &AdmitContext<'_>,
    ) -> impl Future<Output = Result<Self::Permit, Refusal>> + Send {
        T::acquire(self, cx)
    }

    fn release(&self, permit: Self::Permit, feedback: Feedback) {
        T::release(self, permit, feedback);
    }
}
