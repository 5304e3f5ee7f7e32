//! The policy: every bound and strategy for calls to one dependency, as one immutable value.
//!
//! A [`Policy`] is built once, validated once, and shared: clones are one `Arc` and share the
//! state that must accumulate across calls (the latency estimate today; the retry budget and the
//! breaker with them). Named knobs replace the positions of a layered stack: `deadline` is the
//! total bound, `attempt_timeout` the bound on each attempt, and the executor keeps the
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
//!     .deadline(Duration::from_secs(2))
//!     .attempt_timeout(Duration::from_millis(500))
//!     .timeout_mode(TimeoutMode::default())
//!     .backoff(Backoff::exponential(Duration::from_millis(100)))
//!     .build()
//!     .expect("valid policy");
//! assert_eq!(
//!     policy.explain(),
//!     "payments: 3 attempts, deadline 2s, attempt 500ms (abandon), exponential 100ms x2 max 30s full jitter, budget 10%"
//! );
//! ```
//!
//! | knob | default | meaning |
//! |---|---|---|
//! | `name` | `"rampart"` | in events, errors and `explain()` |
//! | `max_attempts` | 3 | every attempt counts, the first included |
//! | `deadline` | 30 s | the whole call, backoffs included; [`no_deadline`](PolicyBuilder::no_deadline) |
//! | `attempt_timeout` | 10 s | each attempt; [`no_attempt_timeout`](PolicyBuilder::no_attempt_timeout) |
//! | `timeout_mode` | abandon, zero grace | what happens to an attempt at its ceiling |
//! | `backoff` | exponential 100 ms ×2, max 30 s, full jitter | the wait between attempts |
//! | `classifier` | [`ErrorsAreTransient`] | what an outcome means |
//!
//! Validation happens in [`PolicyBuilder::build`], which reports every problem at once.

use std::fmt;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::admit::{Admit, Unlimited};
use crate::backoff::Backoff;
use crate::breaker::Breaker;
use crate::budget::RetryBudget;
use crate::classify::{Classify, ErrorsAreTransient};
use crate::clock::Clock;
use crate::drain::Drain;
use crate::error::{ConfigError, ConfigProblem, Error};
use crate::event::{CallbackFailure, Event, RetryInfo, Telemetry, TimeoutInfo};
use crate::executor::{Call, Callback, Shared};
use crate::hedge::Hedge;
use crate::latency::{Estimate, Latency};
use crate::result::{CallResult, Cancelled};
use crate::timeout::TimeoutFn;
pub use crate::timeout::{AdaptiveTimeout, TimeoutContext, TimeoutMode};

/// A validated, immutable set of bounds and strategies; cheap to clone, `Send + Sync`.
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
        .no_deadline()
        .no_attempt_timeout()
        .backoff(Backoff::none())
        .build()
        .unwrap_or_else(|e| unreachable!("the pass-through policy is valid: {e}"))
});

impl Policy {
    /// A builder with the defaults in the [module table](self).
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::new()
    }

    /// A pass-through: one attempt, no deadline, no attempt timeout. Costs about as much as
    /// calling the callback directly.
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
    pub fn deadline(&self) -> Option<Duration> {
        self.shared.deadline
    }

    /// The fixed bound on each attempt, if any.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.shared.attempt_timeout
    }

    /// Attempts per call, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.shared.max_attempts
    }

    /// The policy in one line, e.g.
    /// `payments: 3 attempts, deadline 2s, attempt 500ms (abandon), exponential 100ms x2 max 30s full jitter`.
    pub fn explain(&self) -> String {
        self.to_string()
    }

    /// Starts a call that the caller can cancel with `token`. Cancelling it ends the call
    /// with [`Error::Cancelled`] at the next check (at once during a backoff).
    pub fn with_token<'a>(&'a self, token: &'a CancellationToken) -> Call<'a, C, A> {
        Call::new(&self.shared, Some(token))
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
    /// Dropping the returned future drops the attempt in flight. Use
    /// [`with_token`](Self::with_token) to cancel through a token instead.
    pub fn run<T, E, F>(&self, op: F) -> impl Future<Output = Result<T, Error<E>>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
    {
        Call::new(&self.shared, None).run(op)
    }

    /// Like [`run`](Self::run), but returns a [`CallResult`] with the stop reason and the
    /// attempt log. Caller cancellation is still an error.
    pub async fn try_run<T, E, F>(&self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
    {
        Call::new(&self.shared, None).try_run(op).await
    }

    /// The same as [`run`](Self::run), which hedges when the policy hedges.
    #[deprecated(since = "0.2.0", note = "`run` hedges when the policy hedges")]
    pub fn run_hedged<T, E, F>(&self, op: F) -> impl Future<Output = Result<T, Error<E>>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
    {
        self.run(op)
    }
}

impl<C, A> fmt::Display for Policy<C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        write!(f, "{}: ", s.name)?;
        match s.max_attempts {
            1 => f.write_str("1 attempt")?,
            n => write!(f, "{n} attempts")?,
        }
        match s.deadline {
            Some(d) => write!(f, ", deadline {d:?}")?,
            None => f.write_str(", no deadline")?,
        }
        match (&s.timeout_fn, s.attempt_timeout) {
            (Some(_), Some(d)) => write!(f, ", attempt dynamic (default {d:?})")?,
            (Some(_), None) => f.write_str(", attempt dynamic")?,
            (None, Some(d)) => write!(f, ", attempt {d:?}")?,
            (None, None) => f.write_str(", no attempt timeout")?,
        }
        if s.attempt_timeout.is_some() || s.timeout_fn.is_some() || s.deadline.is_some() {
            match s.mode {
                TimeoutMode::Abandon { grace } if grace.is_zero() => f.write_str(" (abandon)")?,
                TimeoutMode::Abandon { grace } => write!(f, " (abandon after {grace:?} grace)")?,
                TimeoutMode::Cooperative => f.write_str(" (cooperative)")?,
            }
        }
        if s.max_attempts > 1 {
            write!(f, ", {}", s.backoff)?;
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

/// Builds a [`Policy`]; every setter has a default, and [`build`](Self::build) validates.
#[must_use = "a builder does nothing until built"]
pub struct PolicyBuilder<C = ErrorsAreTransient, A = Unlimited> {
    settings: Settings,
    classifier: C,
    admit: A,
}

/// Everything a builder holds but the classifier.
struct Settings {
    name: String,
    max_attempts: u32,
    deadline: Option<Duration>,
    attempt_timeout: Option<Duration>,
    timeout_fn: Option<TimeoutFn>,
    mode: TimeoutMode,
    backoff: Backoff,
    telemetry: Telemetry,
    clock: Clock,
    ambient_deadline: bool,
    ambient_criticality: bool,
    drain: Drain,
    budget: Budget,
    breaker: Option<Breaker>,
    hedge: Option<Hedge>,
    adaptive: Option<AdaptiveTimeout>,
}

/// Which retry budget a policy gets.
enum Budget {
    /// One of its own, with the defaults, when it can retry.
    Automatic,
    /// The one given (shared by whoever else holds a clone).
    Given(RetryBudget),
    /// None: retries are limited by `max_attempts` alone.
    None,
}

impl PolicyBuilder {
    fn new() -> Self {
        PolicyBuilder {
            settings: Settings {
                name: "rampart".to_owned(),
                max_attempts: 3,
                deadline: Some(Duration::from_secs(30)),
                attempt_timeout: Some(Duration::from_secs(10)),
                timeout_fn: None,
                mode: TimeoutMode::default(),
                backoff: Backoff::default(),
                telemetry: Telemetry::default(),
                clock: Clock::system(),
                ambient_deadline: false,
                ambient_criticality: false,
                drain: Drain::global().clone(),
                budget: Budget::Automatic,
                breaker: None,
                hedge: None,
                adaptive: None,
            },
            classifier: ErrorsAreTransient,
            admit: Unlimited,
        }
    }
}

impl<C, A> PolicyBuilder<C, A> {
    /// The name used in events, errors and [`Policy::explain`].
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.name = name.into();
        self
    }

    /// Attempts per call, the first included (default 3; at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.settings.max_attempts = attempts;
        self
    }

    /// The bound on the whole call, backoffs included (default 30 s; must be positive).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.settings.deadline = Some(deadline);
        self
    }

    /// No bound on the whole call.
    pub fn no_deadline(mut self) -> Self {
        self.settings.deadline = None;
        self
    }

    /// The bound on each attempt (default 10 s; must be positive). The executor cuts it to the
    /// time left before the deadline.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.settings.attempt_timeout = Some(timeout);
        self
    }

    /// No bound on each attempt beyond the deadline.
    pub fn no_attempt_timeout(mut self) -> Self {
        self.settings.attempt_timeout = None;
        self
    }

    /// Computes each attempt's timeout when it starts, overriding the fixed one. A generator
    /// returning zero fails that call with [`Error::Config`] naming the generator, before the
    /// callback starts.
    pub fn attempt_timeout_fn(
        mut self,
        generator: impl Fn(&TimeoutContext<'_>) -> Duration + Send + Sync + 'static,
    ) -> Self {
        self.settings.timeout_fn = Some(Arc::new(generator));
        self
    }

    /// What happens to an attempt at its ceiling (default: abandon with zero grace).
    pub fn timeout_mode(mut self, mode: TimeoutMode) -> Self {
        self.settings.mode = mode;
        self
    }

    /// The wait between attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.settings.backoff = backoff;
        self
    }

    /// Decides what each outcome means; see [`crate::classify`].
    pub fn classifier<C2>(self, classifier: C2) -> PolicyBuilder<C2, A> {
        PolicyBuilder {
            settings: self.settings,
            classifier,
            admit: self.admit,
        }
    }

    /// Asks `admit` before every attempt; see [`crate::admit`]. Share a component between
    /// policies by cloning it (the ready-made limiters share their state across clones).
    pub fn admit<A2: Admit>(self, admit: A2) -> PolicyBuilder<C, A2> {
        PolicyBuilder {
            settings: self.settings,
            classifier: self.classifier,
            admit,
        }
    }

    /// The clock every timer of this policy uses (default: the system clock).
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.settings.clock = clock.into();
        self
    }

    /// Bounds each call by the ambient deadline too (the time the caller upstream is still
    /// waiting): the effective deadline is `min(policy deadline, ambient)`, resolved once per
    /// call. Off by default. See [`crate::ambient`].
    pub fn use_ambient_deadline(mut self, enabled: bool) -> Self {
        self.settings.ambient_deadline = enabled;
        self
    }

    /// Reads the ambient [`Criticality`](crate::Criticality) once per call: a `Sheddable` call
    /// may not spend the last half of the retry budget and is never hedged, and the admission
    /// component is told the level (a [`CriticalityLimit`](crate::limit::CriticalityLimit)
    /// sheds by it). Off by default (every call is then `Critical`).
    pub fn use_ambient_criticality(mut self, enabled: bool) -> Self {
        self.settings.ambient_criticality = enabled;
        self
    }

    /// The drain this policy obeys (default: [`Drain::global`]).
    pub fn drain(mut self, drain: &Drain) -> Self {
        self.settings.drain = drain.clone();
        self
    }

    /// Charges every retry and hedge to `budget` (clones share it: give several policies the
    /// same budget, or use [`RetryBudget::shared`]). By default a policy that can retry gets a
    /// budget of its own with the defaults of [`crate::budget`].
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.settings.budget = Budget::Given(budget);
        self
    }

    /// No retry budget: retries are limited by `max_attempts` alone. Under a failing
    /// dependency every layer then multiplies the load by `max_attempts`.
    pub fn no_budget(mut self) -> Self {
        self.settings.budget = Budget::None;
        self
    }

    /// Asks `breaker` before every attempt and gives it every attempt's evidence. Clones share
    /// one state: give the same breaker to every policy that calls the same dependency. None by
    /// default.
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.settings.breaker = Some(breaker);
        self
    }

    /// Hedges every call made through [`Policy::run`]: see [`crate::hedge`]. A hedging
    /// policy cannot run blocking calls (they fail with [`Error::Config`] naming `hedge`).
    pub fn hedge(mut self, hedge: Hedge) -> Self {
        self.settings.hedge = Some(hedge);
        self
    }

    /// Lowers each attempt's timeout to a multiple of the measured latency: see
    /// [`AdaptiveTimeout`]. Never above the configured attempt timeout.
    pub fn adaptive_attempt_timeout(mut self, adaptive: AdaptiveTimeout) -> Self {
        self.settings.adaptive = Some(adaptive);
        self
    }

    /// Adds a listener for every [`Event`].
    pub fn listener(mut self, listener: impl Fn(&Event<'_>) + Send + Sync + 'static) -> Self {
        self.settings.telemetry.listeners.push(Arc::new(listener));
        self
    }

    /// Called before each backoff sleep.
    pub fn on_retry(mut self, hook: impl Fn(&RetryInfo<'_>) + Send + Sync + 'static) -> Self {
        self.settings.telemetry.on_retry = Some(Arc::new(hook));
        self
    }

    /// Called when the executor's attempt ceiling decided an attempt's outcome (not when the
    /// attempt finished anyway and its result was kept).
    pub fn on_timeout(mut self, hook: impl Fn(&TimeoutInfo<'_>) + Send + Sync + 'static) -> Self {
        self.settings.telemetry.on_timeout = Some(Arc::new(hook));
        self
    }

    /// Told when a listener or hook panics (the call's outcome is never changed by it).
    pub fn on_callback_error(
        mut self,
        diagnostics: impl Fn(&CallbackFailure<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.settings.telemetry.diagnostics = Some(Arc::new(diagnostics));
        self
    }

    /// Validates every setting and builds the policy, or lists every problem.
    pub fn build(self) -> Result<Policy<C, A>, ConfigError>
    where
        A: Admit,
    {
        let s = self.settings;
        let mut problems = Vec::new();
        if s.max_attempts == 0 {
            problems.push(ConfigProblem::new(
                "max_attempts",
                "must be at least 1 (was 0)",
            ));
        }
        for (field, value) in [
            ("deadline", s.deadline),
            ("attempt_timeout", s.attempt_timeout),
        ] {
            if value == Some(Duration::ZERO) {
                problems.push(ConfigProblem::new(field, "must be positive (was 0ns)"));
            }
        }
        if let TimeoutMode::Abandon { grace } = s.mode
            && grace > Duration::from_secs(3600)
        {
            problems.push(ConfigProblem::new(
                "timeout_mode.grace",
                format!("must be at most 1h (was {grace:?})"),
            ));
        }
        s.backoff.validate(&mut problems);
        if let Some(hedge) = &s.hedge {
            hedge.validate(&mut problems);
            if s.max_attempts as usize > crate::hedge::MAX_LEGS {
                problems.push(ConfigProblem::new(
                    "max_attempts",
                    format!(
                        "must be at most {} for a hedging policy (was {})",
                        crate::hedge::MAX_LEGS,
                        s.max_attempts
                    ),
                ));
            }
        }
        if let Some(adaptive) = &s.adaptive {
            adaptive.validate(&mut problems);
        }
        let budget = match s.budget {
            Budget::Given(budget) => Some(budget),
            Budget::Automatic if s.max_attempts > 1 => match RetryBudget::builder().build() {
                Ok(budget) => Some(budget),
                Err(e) => {
                    problems.extend(e.problems().iter().cloned());
                    None
                }
            },
            Budget::Automatic | Budget::None => None,
        };
        // An admission component reads the level too (a criticality-aware limiter sheds by it).
        if s.ambient_criticality && s.hedge.is_none() && A::ALWAYS_ADMITS {
            if s.max_attempts == 1 {
                problems.push(ConfigProblem::new(
                    "use_ambient_criticality",
                    "has nothing to gate: the policy makes one attempt and does not hedge",
                ));
            } else if budget.is_none() {
                problems.push(ConfigProblem::new(
                    "use_ambient_criticality",
                    "has nothing to gate: the policy has no retry budget and does not hedge",
                ));
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        let reads_clock = s.deadline.is_some()
            || s.attempt_timeout.is_some()
            || s.timeout_fn.is_some()
            || s.ambient_deadline
            || budget.is_some()
            || s.breaker.is_some()
            || s.hedge.is_some()
            || s.adaptive.is_some()
            || s.telemetry.is_listened()
            // Admission is told the time and each attempt's duration (adaptive limiters learn
            // from it).
            || !A::ALWAYS_ADMITS;
        let now = s.clock.now();
        let hedge_estimate = s.hedge.and_then(|hedge| match hedge.delay {
            crate::hedge::Delay::Adaptive {
                quantile,
                window,
                min_samples,
                ..
            } => Some(Estimate::new(window, min_samples, quantile, now)),
            crate::hedge::Delay::Fixed(_) => None,
        });
        let ceiling_estimate = s
            .adaptive
            .map(|a| Estimate::new(a.window, a.min_samples, a.quantile, now));
        Ok(Policy {
            shared: Arc::new(Shared {
                pass_through: !reads_clock && s.max_attempts == 1 && A::ALWAYS_ADMITS,
                name: s.name.into_boxed_str(),
                max_attempts: s.max_attempts,
                deadline: s.deadline,
                attempt_timeout: s.attempt_timeout,
                timeout_fn: s.timeout_fn,
                mode: s.mode,
                backoff: s.backoff,
                classifier: self.classifier,
                admit: self.admit,
                telemetry: s.telemetry,
                clock: s.clock,
                ambient_deadline: s.ambient_deadline,
                ambient_criticality: s.ambient_criticality,
                drain: s.drain,
                budget,
                breaker: s.breaker,
                latency: Latency::new(hedge_estimate, ceiling_estimate),
                hedge: s.hedge,
                adaptive: s.adaptive,
                seeded_calls: AtomicU64::new(0),
                reads_clock,
            }),
        })
    }
}

impl<C, A> fmt::Debug for PolicyBuilder<C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        f.debug_struct("PolicyBuilder")
            .field("name", &s.name)
            .field("max_attempts", &s.max_attempts)
            .field("deadline", &s.deadline)
            .field("attempt_timeout", &s.attempt_timeout)
            .field("mode", &s.mode)
            .field("backoff", &s.backoff)
            .finish_non_exhaustive()
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
            "none: 1 attempt, no deadline, no attempt timeout"
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
            "search: 1 attempt, deadline 30s, attempt dynamic (default 10s) (cooperative)"
        );
    }
}
