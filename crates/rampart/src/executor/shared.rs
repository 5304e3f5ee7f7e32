//! The per-policy runtime state every call of a policy reads: its configuration, resolved
//! at `build()`, and the state that accumulates across calls (budget, breaker, latency
//! estimates, seeded call numbers). The settings that [`Policy::reconfigure`] can change are
//! in [`Live`], behind one atomically swapped pointer ([`Swap`]): a call loads it once, when it starts,
//! and keeps that snapshot to its end.
//!
//! [`Policy::reconfigure`]: crate::Policy::reconfigure

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::admit::Admit;
use crate::backoff::Backoff;
use crate::breaker::Breaker;
use crate::budget::RetryBudget;
use crate::clock::Clock;
use crate::drain::Drain;
use crate::error::ConfigProblem;
use crate::event::Event;
use crate::hedge::Hedge;
use crate::latency::Latency;
use crate::observe::Telemetry;
use crate::outcome::StopReason;
use crate::swap::Swap;
use crate::timeout::{AdaptiveTimeout, TimeoutFn, TimeoutMode};

/// The state every clone of a policy shares.
pub(crate) struct Shared<C, A> {
    /// Whether each attempt may start.
    pub(crate) admit: A,
    pub(crate) name: Box<str>,
    /// The settings a running policy can change: each call loads them once.
    pub(crate) live: Swap<Live>,
    /// Held by [`Policy::reconfigure`](crate::Policy::reconfigure) from its read of the
    /// settings to its store, so that two updates at once do not lose one (calls never take it).
    pub(crate) reconfiguring: Mutex<()>,
    /// The policy was built with the automatic budget and one attempt, so it has none: it may
    /// not be reconfigured to retry.
    pub(crate) lacks_automatic_budget: bool,
    pub(crate) timeout_fn: Option<TimeoutFn>,
    pub(crate) classifier: C,
    pub(crate) telemetry: Telemetry,
    pub(crate) clock: Clock,
    pub(crate) latency: Latency,
    /// How calls hedge, if they do.
    pub(crate) hedge: Option<Hedge>,
    /// The adaptive attempt ceiling, if any.
    pub(crate) adaptive: Option<AdaptiveTimeout>,
    /// Call sequence numbers, used only to vary a seeded backoff's randomness per call.
    pub(crate) seeded_calls: AtomicU64,
    /// Whether a call reads the ambient deadline.
    pub(crate) ambient_deadline: bool,
    /// Whether a call reads the ambient criticality.
    pub(crate) ambient_criticality: bool,
    /// The drain this policy obeys.
    pub(crate) drain: Drain,
    /// The retry budget every retry of this policy is charged to.
    pub(crate) budget: Option<RetryBudget>,
    /// The circuit breaker every attempt of this policy asks first.
    pub(crate) breaker: Option<Breaker>,
    /// What reports the breaker's manual changes to this policy's listeners, metrics and
    /// traces: the breaker holds it weakly, this field keeps it alive as long as the policy.
    #[allow(
        dead_code,
        reason = "held, never read: the breaker reads it through a Weak"
    )]
    pub(crate) breaker_reports: Option<std::sync::Arc<dyn crate::breaker::Watcher>>,
    /// Where this policy's streams report their ends, made by the first stream opened while
    /// something listens.
    pub(crate) streams: std::sync::OnceLock<std::sync::Arc<crate::observe::StreamReporter>>,
}

/// The settings of a policy that [`Policy::reconfigure`](crate::Policy::reconfigure) can
/// replace, with what follows from them; one immutable snapshot per update.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) max_attempts: u32,
    pub(crate) total_timeout: Option<Duration>,
    pub(crate) attempt_timeout: Option<Duration>,
    /// The least time left for a retry to start (a floor under the typical latency).
    pub(crate) min_attempt_time: Duration,
    pub(crate) mode: TimeoutMode,
    pub(crate) backoff: Backoff,
    /// One attempt and nothing in the policy that reads the clock (no bound, breaker, budget,
    /// hedge, listener, dynamic timeout or admission component): a call may need no machine
    /// ([`passes_through`](super::passes_through) decides, adding what the call brings).
    pub(crate) pass_through: bool,
}

impl<C, A: Admit> Shared<C, A> {
    /// Whether a call of this policy reads the clock whatever its live settings are: whether
    /// any part it was built with has a rule that needs a reading (a budget, a breaker, a
    /// listener, hedging, a dynamic or adaptive timeout, the ambient deadline, an admission
    /// component, which is told the time and each attempt's duration).
    ///
    /// The one list of what reads the clock: every field is named, so that a part added to a
    /// policy is decided here or the crate does not compile. What the live settings add (a
    /// deadline, an attempt timeout) is decided with them, in `policy::live::snapshot`, and
    /// what a call brings (a caller's token or deadline, a drain) in
    /// [`passes_through`](super::passes_through).
    pub(crate) fn parts_read_clock(&self) -> bool {
        let Shared {
            // Asked below through `A::ALWAYS_ADMITS`, a property of its type.
            admit: _,
            timeout_fn,
            telemetry,
            hedge,
            adaptive,
            ambient_deadline,
            budget,
            breaker,
            // Neither a rule nor a part: names, locks, what the parts above derive (the
            // latency estimates of `hedge` and `adaptive`, the breaker's reports), and what
            // a call reads at its start (the live settings, the drain, the criticality,
            // which only gates retries and hedges and so needs more than one attempt).
            name: _,
            live: _,
            reconfiguring: _,
            lacks_automatic_budget: _,
            classifier: _,
            clock: _,
            latency: _,
            seeded_calls: _,
            ambient_criticality: _,
            drain: _,
            breaker_reports: _,
            streams: _,
        } = self;
        timeout_fn.is_some()
            || *ambient_deadline
            || budget.is_some()
            || breaker.is_some()
            || hedge.is_some()
            || adaptive.is_some()
            || !telemetry.listeners.is_empty()
            || !A::ALWAYS_ADMITS
    }
}

impl<C, A> Shared<C, A> {
    /// The live settings for a call starting now, kept by the call to its end (one atomic
    /// load: see [`Swap`]).
    #[inline(always)]
    pub(crate) fn snapshot(&self) -> &Live {
        self.live.load()
    }

    /// A fallback answered a call of this policy that stopped for `stop`.
    pub(crate) fn fell_back(&self, stop: StopReason) {
        if self.telemetry.is_listened() {
            let event = Event::FallbackUsed {
                policy: &self.name,
                stop,
            };
            self.telemetry.emit(&crate::observe::current_span(), event);
        }
    }

    /// The option that makes this policy unable to run a blocking callback, if any.
    pub(crate) fn needs_async(&self) -> Option<ConfigProblem> {
        self.hedge.map(|_| {
            ConfigProblem::new(
                "hedge",
                format!(
                    "of policy `{}` runs legs concurrently and needs async execution (`run`); a blocking call cannot hedge",
                    self.name
                ),
            )
        })
    }
}
