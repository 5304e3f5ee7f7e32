//! The policy: every bound and strategy for calls to one dependency, as one shared value.
//!
//! A [`Policy`] is built once, validated once, and shared: clones are one `Arc` and share the
//! state that must accumulate across calls (the latency estimates, the retry budget, the
//! breaker). Its live settings can later be replaced, each update validated the same way (see
//! [below](#changing-settings-at-run-time)). Named knobs replace the positions of a layered stack: `total_timeout` is
//! the bound on the whole call, `attempt_timeout` the bound on each attempt, and the executor keeps the
//! arithmetic between them exact.
//!
//! ```
//! use std::time::Duration;
//! use rampart::{Policy, TimeoutMode};
//! use rampart::backoff::Backoff;
//!
//! let policy = Policy::builder()
//!     .name("payments")
//!     .max_attempts(3)
//!     .total_timeout(Duration::from_secs(2))
//!     .attempt_timeout(Duration::from_millis(500))
//!     .timeout_mode(TimeoutMode::default())
//!     .backoff(Backoff::exponential(Duration::from_millis(100)))
//!     .build()
//!     .expect("valid policy");
//! assert_eq!(
//!     policy.explain(),
//!     "payments: 3 attempts, total 2s, attempt 500ms (abandon), exponential 100ms x2 max 30s full jitter, budget 20%"
//! );
//! ```
//!
//! | knob | default | meaning | live |
//! |---|---|---|---|
//! | `name` | `"rampart"` | in events, errors and `explain()` | |
//! | `max_attempts` | 3 | every attempt counts, the first included | yes |
//! | `total_timeout` | 30 s | the whole call, backoffs included; [`no_total_timeout`](PolicyBuilder::no_total_timeout) | yes |
//! | `attempt_timeout` | 10 s | each attempt; [`no_attempt_timeout`](PolicyBuilder::no_attempt_timeout) | yes |
//! | `min_attempt_time` | 0 | the least time left for a retry to start ([`min_attempt_time`](PolicyBuilder::min_attempt_time)) | yes |
//! | `attempt_timeout_fn` | none | each attempt's timeout computed when it starts, answered at once or awaited ([`MaybeAsync`](crate::timeout::MaybeAsync)) | |
//! | `timeout_mode` | abandon, zero grace | what happens to an attempt at its ceiling | yes |
//! | `backoff` | exponential 100 ms ×2, max 30 s, full jitter | the wait between attempts | yes |
//! | `classifier` | [`ErrorsAreTransient`] | what an outcome means | |
//! | `breaker` | none | a policy does not know how many dependencies its callback reaches, and a breaker guards one (rampart-http's outbound layer, whose policies each call one host, gives each host one by default) | its thresholds: [`Breaker::reconfigure`] |
//!
//! *live*: can be replaced while the policy serves calls, see [below](#changing-settings-at-run-time).
//!
//! Validation happens in [`PolicyBuilder::build`], which reports every problem at once.
//!
//! # Changing settings at run time
//!
//! A running service can retune a policy without rebuilding it or losing what it learned:
//! [`Policy::reconfigure`] replaces the [`PolicySettings`] (the knobs marked *live* above),
//! checked by the same code as `build()`; a rejected update changes nothing and names every
//! field and value it refused. Every clone sees an accepted update at once; calls already
//! running finish with the settings they started with, calls starting afterwards use the new
//! ones. The breaker's state, the budget's tokens, the latency estimates and the seeded call
//! numbers are kept. The parts a policy is made of change through their own handles:
//! [`Breaker::reconfigure`] for the breaker's thresholds (its state kept),
//! [`ConcurrencyLimit::set_limit`](crate::limit::ConcurrencyLimit::set_limit) for a
//! limiter's size; and the breaker can be forced open or closed by hand with its own
//! methods ([`Breaker::isolate`], [`Breaker::force_closed`], [`Breaker::release`],
//! [`Breaker::reset`]), which report the change to every policy built with it (listeners,
//! metrics and traces).
//!
//! ```
//! use std::time::Duration;
//! use rampart::{Breaker, Policy};
//! use rampart::breaker::StateKind;
//! use rampart::limit::ConcurrencyLimit;
//!
//! let limit = ConcurrencyLimit::new(16);
//! let policy = Policy::builder()
//!     .name("search")
//!     .breaker(Breaker::builder().consecutive_failures(5).build()?)
//!     .admit(limit.clone())
//!     .build()?;
//!
//! // The dependency is slow today: fewer attempts, more time each, a more patient breaker,
//! // less concurrency.
//! policy.reconfigure(|s| {
//!     s.max_attempts = 2;
//!     s.attempt_timeout = Some(Duration::from_secs(3));
//! })?;
//! policy.breaker().expect("a breaker").reconfigure(|b| b.consecutive_failures(10))?;
//! limit.set_limit(4)?;
//! assert_eq!(
//!     policy.explain(),
//!     "search: 2 attempts, total 30s, attempt 3s (abandon), exponential 100ms x2 max 30s full jitter, budget 20%, breaker: open after 10 consecutive failures, break 15s doubling to 2m"
//! );
//!
//! // An operator keeps the traffic flowing whatever the breaker would decide, then hands
//! // control back.
//! assert_eq!(policy.breaker().expect("a breaker").force_closed(policy.clock().now()).map(|t| t.to), Some(StateKind::ForcedClosed));
//! assert_eq!(policy.breaker().expect("a breaker").release(policy.clock().now()).map(|t| t.to), Some(StateKind::Closed));
//! # Ok::<(), rampart::ConfigError>(())
//! ```
//!
//! Calls never wait for an update: each loads its settings once, with one atomic load, no lock
//! and no allocation. An update allocates the new settings and keeps the ones it replaced
//! until the policy is dropped (a call may still be reading them, and a read leaves no trace
//! to prove otherwise): reconfigure at an operator's pace, not per request.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::admit::{Admit, Unlimited};
use crate::backoff::Backoff;
use crate::breaker::{Breaker, BreakerState, Transition};
use crate::budget::RetryBudget;
use crate::classify::{Classify, ErrorsAreTransient};
use crate::clock::Clock;
use crate::error::Error;
use crate::event::Event;
use crate::executor::{Call, Callback, Shared, execute};
use crate::timeout::TimeoutMode;

mod builder;
pub(crate) mod live;

pub use builder::PolicyBuilder;
pub use live::PolicySettings;

/// A validated set of bounds and strategies; cheap to clone, `Send + Sync`. Its
/// [live settings](PolicySettings) can be replaced at run time ([`reconfigure`](Self::reconfigure));
/// every other part is fixed at `build()`.
///
/// `C` is the classifier; see [`crate::classify`].
pub struct Policy<C = ErrorsAreTransient, A = Unlimited> {
    pub(crate) shared: Arc<Shared<C, A>>,
}

impl<C, A> Clone for Policy<C, A> {
    fn clone(&self) -> Self {
        Policy {
            shared: Arc::clone(&self.shared),
        }
    }
}

static NONE: LazyLock<Policy> = LazyLock::new(|| {
    PolicyBuilder::new()
        .name("none")
        .max_attempts(1)
        .no_total_timeout()
        .no_attempt_timeout()
        .backoff(Backoff::none())
        .build()
        .unwrap_or_else(|e| unreachable!("the pass-through policy is valid: {e}"))
});

impl<C, A> Policy<C, A> {
    /// Whether this is the one `Policy::none()` every caller shares.
    fn is_shared_none(&self) -> bool {
        std::ptr::eq(
            Arc::as_ptr(&self.shared).cast::<()>(),
            Arc::as_ptr(&NONE.shared).cast::<()>(),
        )
    }
}

impl Policy {
    /// A builder with the defaults in the [module table](self).
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::new()
    }

    /// A pass-through: one attempt, no total timeout, no attempt timeout, shared by every
    /// caller in the process (it cannot be [`reconfigure`](Self::reconfigure)d).
    ///
    /// Its call allocates nothing and builds no state machine, but it is not free: it is the
    /// same future as every policy's call, and the callback still gets its
    /// [`Attempt`](crate::Attempt) handle. On the benchmark machine that is about 130
    /// instructions and 12 ns more than calling a callback that does nothing directly
    /// (`BENCHMARKS.md`, `rampart-none`): nothing beside a network call, measurable in a
    /// tight loop of in-memory work.
    pub fn none() -> Policy {
        NONE.clone()
    }
}

impl<C, A> Policy<C, A> {
    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The total bound on a call, if any.
    ///
    /// Like every setting of [`PolicySettings`], the one calls starting now use (see
    /// [`reconfigure`](Self::reconfigure)).
    pub fn total_timeout(&self) -> Option<Duration> {
        self.shared.live.load().total_timeout
    }

    /// The fixed bound on each attempt, if any.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.shared.live.load().attempt_timeout
    }

    /// Attempts per call, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.shared.live.load().max_attempts
    }

    /// The circuit breaker every attempt of this policy asks first, if it has one. Clones of
    /// the policy share it (and so does every policy it was given to).
    pub fn breaker(&self) -> Option<&Breaker> {
        self.shared.breaker.as_ref()
    }

    /// The retry budget every retry and hedge of this policy is charged to, if it has one.
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.shared.budget.as_ref()
    }

    /// The clock every timer of this policy uses: read it for the `now` that the
    /// [breaker](Self::breaker) and [budget](Self::budget) take.
    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    /// The state of the policy's breaker now, on the policy's clock; `None` without a breaker.
    /// Reading changes nothing (no probe is taken).
    pub fn breaker_state(&self) -> Option<BreakerState> {
        let breaker = self.shared.breaker.as_ref()?;
        Some(breaker.state(self.shared.clock.now()))
    }

    /// The tokens in the policy's retry budget now, on the policy's clock; `None` without a
    /// budget. Reading changes nothing.
    pub fn budget_balance(&self) -> Option<f64> {
        let budget = self.shared.budget.as_ref()?;
        Some(budget.balance(self.shared.clock.now()))
    }

    /// The policy in one line: its name, attempts, bounds, backoff, then each component it
    /// has (budget, breaker, hedge).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let policy = rampart::Policy::builder()
    ///     .name("payments")
    ///     .total_timeout(Duration::from_secs(2))
    ///     .attempt_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .expect("valid policy");
    /// assert_eq!(
    ///     policy.explain(),
    ///     "payments: 3 attempts, total 2s, attempt 500ms (abandon), exponential 100ms x2 max 30s full jitter, budget 20%"
    /// );
    /// ```
    pub fn explain(&self) -> String {
        self.to_string()
    }

    /// Starts a call that carries more than `op`: the caller's [token](Call::token), a
    /// [deadline](Call::deadline) of its own, a [fallback](Call::fallback), in any order;
    /// then one finisher runs it ([`run`](Call::run), [`try_run`](Call::try_run),
    /// [`run_blocking`](Call::run_blocking), [`try_run_blocking`](Call::try_run_blocking),
    /// [`stream`](Call::stream)). `policy.call().run(op)` does what `policy.run(op)` does.
    ///
    /// ```
    /// # async fn demo() {
    /// use rampart::{CancellationToken, Error, Policy};
    ///
    /// let policy = Policy::builder().build().expect("valid policy");
    /// let token = CancellationToken::new();
    /// token.cancel();
    /// let outcome = policy
    ///     .call()
    ///     .token(&token)
    ///     .run(async |_attempt| Ok::<_, std::io::Error>("never runs"))
    ///     .await;
    /// assert!(matches!(outcome, Err(Error::Cancelled)));
    /// # }
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()
    /// #     .expect("runtime").block_on(demo());
    /// ```
    pub fn call(&self) -> Call<'_, C, A> {
        Call::new(&self.shared)
    }

    /// Runs `op` under this policy and returns its value or why it failed.
    ///
    /// The callback is an async closure taking the [`Attempt`](crate::Attempt); it may borrow
    /// its environment (`&self`, `&str`), and the call's future is then `Send` when what it
    /// borrows is `Sync`, so it can be awaited in an axum handler or a spawned task:
    ///
    /// ```
    /// # struct Backend;
    /// # impl Backend {
    /// #     async fn fetch(&self, _: &str, _: rampart::CancellationToken) -> Result<u32, std::io::Error> { Ok(1) }
    /// # }
    /// struct PriceClient {
    ///     policy: rampart::Policy,
    ///     backend: Backend,
    /// }
    ///
    /// impl PriceClient {
    ///     async fn get_price(&self, sku: &str) -> Result<u32, rampart::Error<std::io::Error>> {
    ///         self.policy
    ///             .run(async |attempt| self.backend.fetch(sku, attempt.token()).await)
    ///             .await
    ///     }
    /// }
    /// ```
    ///
    /// Pass the attempt's token (or the attempt itself) to the work so that the attempt's
    /// ceiling can reach it. When the policy [hedges](crate::hedge), `run` hedges: several
    /// legs of the callback may then run at once.
    ///
    /// A closure whose futures borrow from the closure itself is refused: an `async move`
    /// closure that uses what it owns by reference, or one that mutates a capture ("async
    /// closure does not implement `FnMut` because it captures state from its environment").
    /// Borrow from outside instead; see [`Callback`] for why and for the owning form.
    ///
    /// # Cancellation
    ///
    /// Dropping the returned future drops the attempt in flight. Give the call a token with
    /// [`call`](Self::call)`().`[`token`](Call::token) to cancel through it instead.
    ///
    /// # Errors
    ///
    /// The callback's own last error unchanged ([`Error::Inner`]) when the policy gave up on
    /// it, or what the policy decided: the deadline or an attempt's ceiling passed, the
    /// breaker, the retry budget or an admission component refused, the policy is draining,
    /// or its settings are invalid; each variant of [`Error`] names the values that applied
    /// (the deadline, the attempts made). For the [`StopReason`](crate::StopReason) and the
    /// attempt log of every end, success included, finish the call with
    /// [`call`](Self::call)`().`[`try_run`](Call::try_run) instead.
    ///
    /// # Panics
    ///
    /// A policy that reads time (a deadline, an attempt timeout, a backoff, a listener) on
    /// the system clock needs a tokio runtime with time enabled: polling its call outside
    /// one panics, as any tokio timer does ("there is no reactor running" or "A Tokio 1.x
    /// context was found, but timers are disabled"). A policy on a
    /// [`ManualClock`](crate::ManualClock) needs no runtime.
    pub fn run<T, E, F>(&self, op: F) -> impl Future<Output = Result<T, Error<E>>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
    {
        execute(&self.shared, None, None, op, ())
    }
}

/// Reports the manual changes of a policy's breaker ([`Breaker::reset`],
/// [`Breaker::isolate`], [`Breaker::force_closed`], [`Breaker::release`]) to the policy's
/// listeners as [`Event::BreakerTransition`], and to its metrics and traces, as a call's
/// change would be (with the `rampart.breaker.state` gauge).
pub(crate) struct BreakerReports {
    pub(crate) name: Box<str>,
    pub(crate) telemetry: crate::observe::Telemetry,
    pub(crate) budget: Option<RetryBudget>,
}

impl crate::breaker::Watcher for BreakerReports {
    fn moved(&self, breaker: &Breaker, transition: Transition, now: crate::clock::Instant) {
        let event = Event::BreakerTransition {
            policy: &self.name,
            from: transition.from,
            to: transition.to,
            break_duration: transition.break_duration,
        };
        self.telemetry.emit(&crate::observe::current_span(), event);
        // The breaker's and the budget's gauges; admission's are left to the next call's end
        // (`Unlimited` reports no load).
        self.telemetry.observer.sample(&crate::observe::Gauges {
            breaker: Some(breaker),
            budget: self.budget.as_ref(),
            admit: &Unlimited,
            now: Some(now),
        });
    }
}

impl<C, A> fmt::Display for Policy<C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        let live = s.live.load();
        write!(f, "{}: ", s.name)?;
        match live.max_attempts {
            1 => f.write_str("1 attempt")?,
            n => write!(f, "{n} attempts")?,
        }
        match live.total_timeout {
            Some(d) => write!(f, ", total {d:?}")?,
            None => f.write_str(", no total timeout")?,
        }
        match (&s.timeout_fn, live.attempt_timeout) {
            (Some(_), Some(d)) => write!(f, ", attempt dynamic (default {d:?})")?,
            (Some(_), None) => f.write_str(", attempt dynamic")?,
            (None, Some(d)) => write!(f, ", attempt {d:?}")?,
            (None, None) => f.write_str(", no attempt timeout")?,
        }
        if live.attempt_timeout.is_some() || s.timeout_fn.is_some() || live.total_timeout.is_some()
        {
            match live.mode {
                TimeoutMode::Abandon { grace } if grace.is_zero() => f.write_str(" (abandon)")?,
                TimeoutMode::Abandon { grace } => write!(f, " (abandon after {grace:?} grace)")?,
                TimeoutMode::Cooperative => f.write_str(" (cooperative)")?,
            }
        }
        if live.max_attempts > 1 {
            write!(f, ", {}", live.backoff)?;
        }
        if let Some(budget) = &s.budget {
            write!(f, ", budget {}%", (budget.fraction() * 100.0).round())?;
        }
        if let Some(breaker) = &s.breaker {
            write!(f, ", {breaker}")?;
        }
        if let Some(hedge) = &s.hedge {
            write!(f, ", {hedge}")?;
        }
        Ok(())
    }
}

impl<C, A> fmt::Debug for Policy<C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Policy({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_reports_every_problem_with_field_and_value() {
        let err = Policy::builder()
            .max_attempts(0)
            .attempt_timeout(Duration::ZERO)
            .build()
            .expect_err("invalid");
        let fields: Vec<_> = err.problems().iter().map(|p| p.field()).collect();
        assert_eq!(fields, ["max_attempts", "attempt_timeout"]);
        assert_eq!(
            err.to_string(),
            "max_attempts must be at least 1 (was 0); attempt_timeout must be positive (was 0ns)"
        );
    }

    #[test]
    fn none_explains_itself_as_a_pass_through() {
        assert_eq!(
            Policy::none().explain(),
            "none: 1 attempt, no total timeout, no attempt timeout"
        );
    }

    #[test]
    fn policy_is_send_sync_and_clones_share_state() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Policy>();
        let p = Policy::builder().build().expect("valid");
        let q = p.clone();
        assert!(Arc::ptr_eq(&p.shared, &q.shared));
    }

    #[test]
    fn a_policy_without_breaker_or_budget_reads_and_resets_nothing() {
        let p = Policy::builder().max_attempts(1).build().expect("valid");
        assert!(p.breaker().is_none() && p.budget().is_none());
        assert_eq!(p.breaker_state(), None);
        assert_eq!(p.budget_balance(), None);
    }

    #[test]
    fn a_policys_breaker_and_budget_read_on_its_own_clock() {
        let manual = crate::ManualClock::new();
        let breaker = Breaker::builder()
            .consecutive_failures(1)
            .jitter(0.0)
            .build()
            .expect("valid breaker");
        let p = Policy::builder()
            .clock(manual.clone())
            .breaker(breaker.clone())
            .build()
            .expect("valid");
        let now = p.clock().now();
        let permit = breaker.try_acquire(now).expect("closed");
        permit.record(crate::breaker::Evidence::Failure, Duration::ZERO, now);
        manual.advance(Duration::from_secs(5));
        assert_eq!(
            p.breaker_state(),
            Some(BreakerState::Open {
                remaining: Duration::from_secs(10)
            })
        );
        assert_eq!(p.budget_balance(), p.budget().map(RetryBudget::capacity));
        let closed = p
            .breaker()
            .expect("a breaker")
            .reset(p.clock().now())
            .expect("it was open");
        assert_eq!(closed.to, crate::breaker::StateKind::Closed);
        assert_eq!(p.breaker_state(), Some(BreakerState::Closed));
    }

    #[test]
    fn explain_names_cooperative_mode_and_dynamic_timeouts() {
        let p = Policy::builder()
            .name("search")
            .max_attempts(1)
            .timeout_mode(TimeoutMode::Cooperative)
            .attempt_timeout_fn(|_| Duration::from_millis(200))
            .build()
            .expect("valid");
        assert_eq!(
            p.explain(),
            "search: 1 attempt, total 30s, attempt dynamic (default 10s) (cooperative)"
        );
    }
}
