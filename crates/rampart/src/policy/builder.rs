//! [`PolicyBuilder`]: every setter, and the validation of `build()` that reports every problem
//! at once, with field and value.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use crate::admit::{Admit, Unlimited};
use crate::backoff::Backoff;
use crate::breaker::Breaker;
use crate::budget::RetryBudget;
use crate::classify::ErrorsAreTransient;
use crate::clock::Clock;
use crate::drain::Drain;
use crate::error::ConfigError;
use crate::event::{CallbackFailure, Event, RetryInfo, TimeoutInfo};
use crate::executor::Shared;
use crate::hedge::Hedge;
use crate::latency::{Estimate, Latency};
use crate::observe::Telemetry;
use crate::swap::Swap;
use crate::timeout::{AdaptiveTimeout, MaybeAsync, TimeoutContext, TimeoutFn, TimeoutMode};

use super::Policy;
use super::live::{self, PolicySettings};

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
    /// The settings a running policy can change ([`Policy::reconfigure`]).
    live: PolicySettings,
    timeout_fn: Option<TimeoutFn>,
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
    pub(super) fn new() -> Self {
        PolicyBuilder {
            settings: Settings {
                name: "rampart".to_owned(),
                live: PolicySettings {
                    max_attempts: 3,
                    total_timeout: Some(Duration::from_secs(30)),
                    attempt_timeout: Some(Duration::from_secs(10)),
                    min_attempt_time: Duration::ZERO,
                    timeout_mode: TimeoutMode::default(),
                    backoff: Backoff::default(),
                },
                timeout_fn: None,
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
        self.settings.live.max_attempts = attempts;
        self
    }

    /// The bound on the whole call, backoffs included (default 30 s; must be positive): the
    /// call's own deadline is its start plus this, and a caller's earlier deadline wins.
    pub fn total_timeout(mut self, timeout: Duration) -> Self {
        self.settings.live.total_timeout = Some(timeout);
        self
    }

    /// No bound on the whole call.
    pub fn no_total_timeout(mut self) -> Self {
        self.settings.live.total_timeout = None;
        self
    }

    /// The bound on each attempt (default 10 s; must be positive). The executor cuts it to the
    /// time left before the deadline.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.settings.live.attempt_timeout = Some(timeout);
        self
    }

    /// No bound on each attempt beyond the deadline.
    pub fn no_attempt_timeout(mut self) -> Self {
        self.settings.live.attempt_timeout = None;
        self
    }

    /// The least time a retry must have left before the deadline to be started (default 0:
    /// any time left). A retry whose backoff (or server-given retry-after) would leave less
    /// is not slept: the call ends with [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded)
    /// and its [`Unfit`](crate::Unfit), instead of sending an attempt that cannot finish.
    /// It is a floor under the typical attempt latency the executor already allows for, and
    /// must be shorter than the total timeout. The first attempt is sent while any time is left.
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        self.settings.live.min_attempt_time = min;
        self
    }

    /// Computes each attempt's timeout when it starts (and each hedge's), overriding the fixed
    /// one; the ceiling is still cut to the time left. The generator answers a `Duration` at
    /// once, or a [`MaybeAsync`] whose future the async executor awaits before the attempt
    /// begins. The callback never starts if the caller cancels meanwhile (the call ends
    /// [`Error::Cancelled`](crate::Error::Cancelled)) or the call's deadline passes (it ends
    /// [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded)). A hedge's generator runs
    /// while the legs in flight go on. A blocking call refuses a pending answer
    /// with [`Error::Config`](crate::Error::Config) naming `attempt_timeout_fn`; it never
    /// blocks its thread on it. A generator returning zero or more than 24 h fails that call
    /// with [`Error::Config`](crate::Error::Config) naming the generator and the value, before
    /// the callback starts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart::Policy;
    ///
    /// let policy = Policy::builder()
    ///     .attempt_timeout(Duration::from_secs(1))
    ///     // Later attempts get longer; `default` is the fixed timeout above.
    ///     .attempt_timeout_fn(|cx| cx.default.unwrap_or(Duration::from_secs(1)) * cx.attempt)
    ///     .build()
    ///     .expect("valid policy");
    /// let ceiling = policy.call().run_blocking(|attempt| Ok::<_, std::io::Error>(attempt.timeout()));
    /// assert_eq!(ceiling.unwrap(), Some(Duration::from_secs(1)));
    /// ```
    pub fn attempt_timeout_fn<R>(
        mut self,
        generator: impl Fn(&TimeoutContext<'_>) -> R + Send + Sync + 'static,
    ) -> Self
    where
        R: Into<MaybeAsync<Duration>>,
    {
        self.settings.timeout_fn = Some(Arc::new(
            move |cx: &TimeoutContext<'_>| -> MaybeAsync<Duration> { generator(cx).into() },
        ));
        self
    }

    /// What happens to an attempt at its ceiling (default: abandon with zero grace).
    pub fn timeout_mode(mut self, mode: TimeoutMode) -> Self {
        self.settings.live.timeout_mode = mode;
        self
    }

    /// The wait between attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.settings.live.backoff = backoff;
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
    /// policy cannot run blocking calls (they fail with [`Error::Config`](crate::Error::Config) naming `hedge`).
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
    /// attempt finished anyway and its result was kept), after the attempt's end was reported
    /// and its permits and timer released, before the call decides what follows.
    ///
    /// The hook answers `()` at once, or a [`MaybeAsync`] whose future an async call awaits
    /// before it retries or returns: the call's result waits for it. The wait is bounded like
    /// the call: if the caller cancels or the call's deadline passes first, the future is
    /// dropped unfinished and the call goes on as it would have (its time counts against the
    /// deadline, so a slow hook leaves less time for retries). In a hedged call the other legs
    /// are not polled while the hook's future runs. A panic in the hook or its future is
    /// reported to [`on_callback_error`](Self::on_callback_error) and never changes the
    /// outcome. A blocking call refuses a pending answer: it ends with
    /// [`Error::Config`](crate::Error::Config) naming `on_timeout`, never blocking its thread.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// use std::time::Duration;
    /// use rampart::{Error, Policy};
    /// use rampart::timeout::MaybeAsync;
    ///
    /// let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    /// let policy = Policy::builder()
    ///     .max_attempts(1)
    ///     .attempt_timeout(Duration::from_millis(50))
    ///     .on_timeout(move |info| {
    ///         let (tx, attempt) = (tx.clone(), info.attempt);
    ///         // Awaited before the call returns.
    ///         MaybeAsync::pending(async move { tx.send(attempt).await.ok(); })
    ///     })
    ///     .build()
    ///     .expect("valid policy");
    /// let outcome = policy
    ///     .run(async |_attempt| std::future::pending::<Result<(), std::io::Error>>().await)
    ///     .await;
    /// assert!(matches!(outcome, Err(Error::AttemptTimeout { .. })));
    /// assert_eq!(rx.try_recv(), Ok(1));
    /// # }
    /// ```
    pub fn on_timeout<R>(
        mut self,
        hook: impl Fn(&TimeoutInfo<'_>) -> R + Send + Sync + 'static,
    ) -> Self
    where
        R: Into<MaybeAsync<()>>,
    {
        self.settings.telemetry.on_timeout =
            Some(Arc::new(move |info: &TimeoutInfo<'_>| -> MaybeAsync<()> {
                hook(info).into()
            }));
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

    /// How the policy's metrics are labelled (feature `metrics`; default: `policy` is the
    /// policy's [name](Self::name), nothing else): see [`MetricLabels`](crate::observe::MetricLabels).
    pub fn metric_labels(mut self, labels: crate::observe::MetricLabels) -> Self {
        self.settings.telemetry.labels = labels;
        self
    }

    /// Validates every setting and builds the policy, or lists every problem.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every problem at once, each naming its field and value
    /// ("attempt_timeout must be positive (was 0ns)").
    pub fn build(self) -> Result<Policy<C, A>, ConfigError>
    where
        A: Admit,
    {
        let s = self.settings;
        let mut problems = Vec::new();
        live::check(&s.live, s.hedge.as_ref(), &mut problems);
        if let Some(adaptive) = &s.adaptive {
            adaptive.validate(&mut problems);
        }
        let automatic = matches!(s.budget, Budget::Automatic);
        let budget = match s.budget {
            Budget::Given(budget) => Some(budget),
            Budget::Automatic if s.live.max_attempts > 1 => match RetryBudget::builder().build() {
                Ok(budget) => Some(budget),
                Err(e) => {
                    problems.extend(e.problems().iter().cloned());
                    None
                }
            },
            Budget::Automatic | Budget::None => None,
        };
        let lacks_automatic_budget = automatic && budget.is_none();
        problems.extend(live::criticality_problem(
            s.ambient_criticality,
            s.hedge.is_some(),
            A::ALWAYS_ADMITS,
            s.live.max_attempts,
            budget.is_some(),
        ));
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        let mut telemetry = s.telemetry;
        telemetry.observer = crate::observe::Observer::new(
            &s.name,
            &telemetry.labels,
            crate::observe::Parts {
                breaker: s.breaker.is_some(),
                budget: budget.is_some(),
                load: self.admit.load(),
            },
        );
        let breaker_reports = s.breaker.as_ref().map(|breaker| {
            let reports: std::sync::Arc<dyn crate::breaker::Watcher> =
                std::sync::Arc::new(super::BreakerReports {
                    name: s.name.clone().into_boxed_str(),
                    telemetry: telemetry.clone(),
                    budget: budget.clone(),
                });
            breaker.watch(&reports);
            reports
        });
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
        // The snapshot is made once the parts are in place, which say whether they read the
        // clock (`Shared::parts_read_clock`): made first as if they did, which is never wrong,
        // only slower.
        let settings = s.live;
        let mut shared = Shared {
            live: Swap::new(live::snapshot(settings.clone(), true, A::ALWAYS_ADMITS)),
            reconfiguring: Mutex::new(()),
            lacks_automatic_budget,
            name: s.name.into_boxed_str(),
            timeout_fn: s.timeout_fn,
            classifier: self.classifier,
            admit: self.admit,
            telemetry,
            clock: s.clock,
            ambient_deadline: s.ambient_deadline,
            ambient_criticality: s.ambient_criticality,
            drain: s.drain,
            budget,
            breaker: s.breaker,
            breaker_reports,
            latency: Latency::new(hedge_estimate, ceiling_estimate),
            hedge: s.hedge,
            adaptive: s.adaptive,
            seeded_calls: AtomicU64::new(0),
            streams: std::sync::OnceLock::new(),
        };
        if !shared.parts_read_clock() {
            shared.live = Swap::new(live::snapshot(settings, false, A::ALWAYS_ADMITS));
        }
        Ok(Policy {
            shared: Arc::new(shared),
        })
    }
}

impl<C, A> fmt::Debug for PolicyBuilder<C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        f.debug_struct("PolicyBuilder")
            .field("name", &s.name)
            .field("max_attempts", &s.live.max_attempts)
            .field("total_timeout", &s.live.total_timeout)
            .field("attempt_timeout", &s.live.attempt_timeout)
            .field("min_attempt_time", &s.live.min_attempt_time)
            .field("mode", &s.live.timeout_mode)
            .field("backoff", &s.live.backoff)
            .finish_non_exhaustive()
    }
}
