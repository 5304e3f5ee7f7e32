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

use crate::clock::{Clock, Instant};
use crate::criticality::Criticality;
use crate::outcome::AttemptOutcome;

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
    /// The policy's clock. A component that waits (a queue timeout) waits on it, with
    /// [`Clock::alarm`], so that its wait follows the policy's time (manual or system) and
    /// works in blocking execution, where there may be no tokio runtime.
    pub clock: &'a Clock,
}

/// The clock of a context made by [`AdmitContext::new`].
static SYSTEM: Clock = Clock::system();

impl<'a> AdmitContext<'a> {
    /// A context for asking a component directly, outside a policy (a server layer, a test):
    /// attempt 1, at `level`, at `now`, with no ceiling, on the system clock. The fields are
    /// public: set `deadline`, `attempt` or `clock` on the value when they are known.
    ///
    /// ```
    /// use rampart::admit::AdmitContext;
    /// use rampart::{Criticality, Instant};
    ///
    /// let now = Instant::now();
    /// let mut cx = AdmitContext::new("inbound", Criticality::Sheddable, now);
    /// cx.deadline = Some(now + std::time::Duration::from_millis(300));
    /// assert_eq!(cx.remaining(), Some(std::time::Duration::from_millis(300)));
    /// ```
    pub fn new(policy: &'a str, level: Criticality, now: Instant) -> Self {
        AdmitContext {
            policy,
            attempt: 1,
            level,
            deadline: None,
            now,
            clock: &SYSTEM,
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
    /// Feedback for a permit given back directly, outside a policy.
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

    /// How many attempts the component holds and queues now, for the
    /// `rampart.limiter.in_flight` and `rampart.limiter.queued` gauges of
    /// [`observe`](crate::observe). The default tracks neither.
    fn load(&self) -> Load {
        Load::default()
    }

    /// For a component that only observes ([`DryRun`](crate::limit::DryRun)): the refusal
    /// `permit` stands for, when the component admitted an attempt it would have refused.
    /// The executor reports it ([`Event::WouldReject`](crate::Event::WouldReject)). The
    /// default: none.
    fn dry_refusal(permit: &Self::Permit) -> Option<Refusal> {
        let _ = permit;
        None
    }
}

/// How many attempts an admission component holds and queues at one moment
/// ([`Admit::load`]); `None` for what it does not track.
///
/// ```
/// use rampart::admit::{Admit, Load};
/// use rampart::limit::ConcurrencyLimit;
///
/// let limit = ConcurrencyLimit::new(8).queue(4);
/// assert_eq!(limit.load(), Load::new(Some(0), Some(0)));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Load {
    /// Attempts admitted and not yet released.
    pub in_flight: Option<usize>,
    /// Attempts waiting in the component's queue.
    pub queued: Option<usize>,
}

impl Load {
    /// A load of `in_flight` held and `queued` waiting attempts.
    pub const fn new(in_flight: Option<usize>, queued: Option<usize>) -> Self {
        Load { in_flight, queued }
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

    fn load(&self) -> Load {
        T::load(self)
    }

    fn dry_refusal(permit: &Self::Permit) -> Option<Refusal> {
        T::dry_refusal(permit)
    }
}

/// Two components, both asked: `A` first, then `B` (a refusal by `B` gives `A`'s permit back).
///
/// ```
/// use std::time::Duration;
/// use rampart::Policy;
/// use rampart::limit::{ConcurrencyLimit, RateLimit};
///
/// let rate = RateLimit::new(100, Duration::from_secs(1)).expect("valid rate");
/// let policy = Policy::builder()
///     .admit((rate, ConcurrencyLimit::new(16)))
///     .build()
///     .expect("valid policy");
/// # drop(policy);
/// ```
impl<A: Admit, B: Admit> Admit for (A, B) {
    type Permit = (A::Permit, B::Permit);
    const ALWAYS_ADMITS: bool = A::ALWAYS_ADMITS && B::ALWAYS_ADMITS;

    async fn acquire(&self, cx: &AdmitContext<'_>) -> Result<Self::Permit, Refusal> {
        let first = self.0.acquire(cx).await?;
        let second = self.1.acquire(cx).await?;
        Ok((first, second))
    }

    fn release(&self, (first, second): Self::Permit, feedback: Feedback) {
        self.0.release(first, feedback);
        self.1.release(second, feedback);
    }

    /// `A`'s counts where it tracks them, else `B`'s (a rate limit in front of a
    /// concurrency limit reports the concurrency limit's).
    fn load(&self) -> Load {
        let (a, b) = (self.0.load(), self.1.load());
        Load {
            in_flight: a.in_flight.or(b.in_flight),
            queued: a.queued.or(b.queued),
        }
    }

    fn dry_refusal((first, second): &Self::Permit) -> Option<Refusal> {
        A::dry_refusal(first).or_else(|| B::dry_refusal(second))
    }
}
