//! The sections of a [`PolicyConfig`](super::PolicyConfig) (timeout mode, backoff, budget,
//! breaker, hedge, adaptive timeout): their data, how each inherits a base's, and the
//! strategy each builds.
//!
//! Longer than the ~600-line guide: the six sections of the file format, each with its data, how it
//! inherits a base's and the strategy it builds, kept side by side so that the format is read in
//! one place.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{format_duration, optional};
use crate::backoff::{Backoff, Jitter};
use crate::breaker::{Breaker, BreakerBuilder};
use crate::budget::{RetryBudget, RetryBudgetBuilder};
use crate::error::{ConfigError, ConfigProblem};
use crate::hedge::Hedge;
use crate::timeout::{AdaptiveTimeout, TimeoutMode};

/// [`TimeoutMode`] as data: `{ kind = "abandon", grace = "10ms" }` or `{ kind = "cooperative" }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TimeoutModeConfig {
    /// Abandon (the default) or cooperative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<TimeoutModeKind>,
    /// How long an abandoned attempt may go on after its ceiling (default 0; abandon only).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub grace: Option<Duration>,
}

/// The kinds of [`TimeoutMode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TimeoutModeKind {
    /// [`TimeoutMode::Abandon`].
    Abandon,
    /// [`TimeoutMode::Cooperative`].
    Cooperative,
}

/// [`Backoff`] as data: the curve's `kind` and its parameter (`base`, `delay` or `step`), then
/// the knobs of [`Backoff`]. A custom curve is a closure and has no configuration form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BackoffConfig {
    /// The curve (default exponential).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<BackoffKind>,
    /// The first delay of the exponential curve (default 100 ms) or the base of the decorrelated
    /// one (required there).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub base: Option<Duration>,
    /// The delay of the constant curve (required there).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub delay: Option<Duration>,
    /// The step of the linear curve (required there).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub step: Option<Duration>,
    /// Growth per retry of the exponential curve ([`Backoff::factor`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// The longest delay ever slept ([`Backoff::max`]).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub max: Option<Duration>,
    /// How the delay is randomized ([`Backoff::jitter`]); not for the decorrelated curve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<JitterKind>,
    /// The base of the long curve after a throttled outcome ([`Backoff::throttled_base`]);
    /// exponential and linear curves only.
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub throttled_base: Option<Duration>,
    /// Makes the randomness repeatable ([`Backoff::seed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// The curves of [`Backoff`] that are data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BackoffKind {
    /// [`Backoff::exponential`].
    Exponential,
    /// [`Backoff::constant`].
    Constant,
    /// [`Backoff::linear`].
    Linear,
    /// [`Backoff::decorrelated`].
    Decorrelated,
    /// [`Backoff::none`].
    None,
}

/// [`Jitter`] as data: `"none"`, `"full"` or `"equal"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JitterKind {
    /// [`Jitter::None`].
    None,
    /// [`Jitter::Full`].
    Full,
    /// [`Jitter::Equal`].
    Equal,
}

/// A [`RetryBudget`](crate::RetryBudget) of the policy's own, as data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BudgetConfig {
    /// Tokens deposited per successful call ([`RetryBudgetBuilder::fraction`](crate::budget::RetryBudgetBuilder::fraction)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// Tokens refilled per second ([`RetryBudgetBuilder::min_per_sec`](crate::budget::RetryBudgetBuilder::min_per_sec)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_per_sec: Option<f64>,
}

/// A [`Breaker`] of the policy's own, as data: each key is the
/// [`BreakerBuilder`](crate::breaker::BreakerBuilder) setter of the same name, and
/// `failure_ratio` comes with its `window` and `min_throughput`. Set either
/// `consecutive_failures` or `failure_ratio`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Opens after this many failures in a row (the default mode, 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<u32>,
    /// Opens when failures are at least this share of the calls in `window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_ratio: Option<f64>,
    /// The window of `failure_ratio` (required with it).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
    /// The calls `window` must hold before `failure_ratio` applies (required with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_throughput: Option<u32>,
    /// Counts a success that took at least this long as a failure.
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub slow_call: Option<Duration>,
    /// The first break.
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub break_duration: Option<Duration>,
    /// The longest break.
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub max_break: Option<Duration>,
    /// The largest share by which a break is shortened at random.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<f64>,
    /// Seeds the jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Probes half-open admits at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_open_probes: Option<u32>,
    /// Successful probes that close the breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_successes: Option<u32>,
    /// How long half-open waits for its probes.
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub probe_timeout: Option<Duration>,
    /// Observe only: report what it would refuse, refuse nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
}

/// [`Hedge`] as data: a fixed `delay`, or the adaptive delay's `quantile`, `window`,
/// `min_samples` and `floor` (the adaptive delay when `delay` is left out).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HedgeConfig {
    /// A fixed delay ([`Hedge::fixed`]).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub delay: Option<Duration>,
    /// The latency quantile the adaptive delay waits for ([`Hedge::quantile`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantile: Option<f64>,
    /// The window of the adaptive estimate ([`Hedge::window`]).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
    /// Samples needed before the adaptive estimate is trusted ([`Hedge::min_samples`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_samples: Option<u32>,
    /// The shortest adaptive delay ([`Hedge::floor`]).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub floor: Option<Duration>,
    /// Legs in flight at once ([`Hedge::max_concurrent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
}

/// [`AdaptiveTimeout`] as data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AdaptiveTimeoutConfig {
    /// The multiple of the quantile ([`AdaptiveTimeout::multiple`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiple: Option<f64>,
    /// The latency quantile ([`AdaptiveTimeout::quantile`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantile: Option<f64>,
    /// The window the quantile is measured over ([`AdaptiveTimeout::window`]).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub window: Option<Duration>,
    /// Samples needed before the measurement is trusted ([`AdaptiveTimeout::min_samples`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_samples: Option<u32>,
    /// The lowest timeout it sets ([`AdaptiveTimeout::floor`]).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub floor: Option<Duration>,
}

/// `inherit_from` (each field left out takes the base's) and `sets` (whether a key is set
/// here) for a section whose fields are all `Option`s.
macro_rules! fields {
    ($ty:ty { $($field:ident),* $(,)? }) => {
        impl $ty {
            fn inherit_from(&mut self, base: &Self) {
                $(if self.$field.is_none() {
                    self.$field = base.$field.clone();
                })*
            }

            /// Whether `key` is set here.
            pub(super) fn sets(&self, key: &str) -> bool {
                match key {
                    $(stringify!($field) => self.$field.is_some(),)*
                    _ => false,
                }
            }
        }
    };
}

fields!(TimeoutModeConfig { kind, grace });
fields!(BackoffConfig {
    kind,
    base,
    delay,
    step,
    factor,
    max,
    jitter,
    throttled_base,
    seed
});
fields!(BudgetConfig {
    fraction,
    min_per_sec
});
fields!(BreakerConfig {
    consecutive_failures,
    failure_ratio,
    window,
    min_throughput,
    slow_call,
    break_duration,
    max_break,
    jitter,
    seed,
    half_open_probes,
    probe_successes,
    probe_timeout,
    dry_run,
});
fields!(HedgeConfig {
    delay,
    quantile,
    window,
    min_samples,
    floor,
    max_concurrent
});
fields!(AdaptiveTimeoutConfig {
    multiple,
    quantile,
    window,
    min_samples,
    floor
});

/// How a section takes what its base sets: key by key, except that naming another mode (a
/// different `kind`, the other breaker mode, a fixed hedge delay instead of an adaptive one)
/// drops the base's keys of the mode it leaves.
pub(super) trait Inherit: Clone {
    /// Takes what `base` sets and `self` leaves out.
    fn inherit(&mut self, base: &Self);
}

impl Inherit for TimeoutModeConfig {
    fn inherit(&mut self, base: &Self) {
        if self.kind.is_none() || self.kind == base.kind {
            self.inherit_from(base);
        }
    }
}

impl Inherit for BackoffConfig {
    fn inherit(&mut self, base: &Self) {
        let kind = |k: Option<BackoffKind>| k.unwrap_or(BackoffKind::Exponential);
        if self.kind.is_none() || kind(self.kind) == kind(base.kind) {
            self.inherit_from(base);
        }
    }
}

impl Inherit for BudgetConfig {
    fn inherit(&mut self, base: &Self) {
        self.inherit_from(base);
    }
}

impl Inherit for BreakerConfig {
    fn inherit(&mut self, base: &Self) {
        let mut base = base.clone();
        if self.consecutive_failures.is_some() {
            (base.failure_ratio, base.window, base.min_throughput) = (None, None, None);
        }
        if self.failure_ratio.is_some() || self.window.is_some() || self.min_throughput.is_some() {
            base.consecutive_failures = None;
        }
        self.inherit_from(&base);
    }
}

impl Inherit for HedgeConfig {
    fn inherit(&mut self, base: &Self) {
        let mut base = base.clone();
        if self.delay.is_some() {
            (base.quantile, base.window, base.min_samples, base.floor) = (None, None, None, None);
        }
        if self.is_adaptive() {
            base.delay = None;
        }
        self.inherit_from(&base);
    }
}

impl Inherit for AdaptiveTimeoutConfig {
    fn inherit(&mut self, base: &Self) {
        self.inherit_from(base);
    }
}

impl HedgeConfig {
    fn is_adaptive(&self) -> bool {
        self.quantile.is_some()
            || self.window.is_some()
            || self.min_samples.is_some()
            || self.floor.is_some()
    }
}
#[cold]
fn does_not_apply(field: &'static str, value: impl std::fmt::Display, to: &str) -> ConfigProblem {
    ConfigProblem::new(field, format!("does not apply to {to} (was {value})"))
}

impl TimeoutModeConfig {
    pub(super) fn to_mode(&self, problems: &mut Vec<ConfigProblem>) -> TimeoutMode {
        match self.kind.unwrap_or(TimeoutModeKind::Abandon) {
            TimeoutModeKind::Abandon => TimeoutMode::Abandon {
                grace: self.grace.unwrap_or(Duration::ZERO),
            },
            TimeoutModeKind::Cooperative => {
                if let Some(grace) = self.grace {
                    problems.push(does_not_apply(
                        "timeout_mode.grace",
                        format_duration(grace),
                        "the cooperative mode",
                    ));
                }
                TimeoutMode::Cooperative
            }
        }
    }
}

impl BackoffConfig {
    pub(super) fn to_backoff(&self, problems: &mut Vec<ConfigProblem>) -> Backoff {
        let kind = self.kind.unwrap_or(BackoffKind::Exponential);
        let name = match kind {
            BackoffKind::Exponential => "an exponential backoff",
            BackoffKind::Constant => "a constant backoff",
            BackoffKind::Linear => "a linear backoff",
            BackoffKind::Decorrelated => "a decorrelated backoff",
            BackoffKind::None => "no backoff",
        };
        let mut required = |field: &'static str, value: Option<Duration>| {
            value.unwrap_or_else(|| {
                problems.push(ConfigProblem::new(field, format!("is required for {name}")));
                Duration::ZERO
            })
        };
        let mut backoff = match kind {
            BackoffKind::Exponential => {
                Backoff::exponential(self.base.unwrap_or(Duration::from_millis(100)))
            }
            BackoffKind::Constant => Backoff::constant(required("backoff.delay", self.delay)),
            BackoffKind::Linear => Backoff::linear(required("backoff.step", self.step)),
            BackoffKind::Decorrelated => Backoff::decorrelated(required("backoff.base", self.base)),
            BackoffKind::None => Backoff::none(),
        };
        let takes = |field: &str| match field {
            "base" => matches!(kind, BackoffKind::Exponential | BackoffKind::Decorrelated),
            "delay" => kind == BackoffKind::Constant,
            "step" => kind == BackoffKind::Linear,
            "factor" => kind == BackoffKind::Exponential,
            "jitter" => matches!(
                kind,
                BackoffKind::Exponential | BackoffKind::Constant | BackoffKind::Linear
            ),
            "seed" => kind != BackoffKind::None,
            "throttled_base" => matches!(kind, BackoffKind::Exponential | BackoffKind::Linear),
            _ => true,
        };
        let durations = [
            ("backoff.base", self.base),
            ("backoff.delay", self.delay),
            ("backoff.step", self.step),
            ("backoff.throttled_base", self.throttled_base),
        ];
        for (field, value) in durations {
            if let Some(value) = value
                && !takes(&field["backoff.".len()..])
            {
                problems.push(does_not_apply(field, format_duration(value), name));
            }
        }
        if let Some(factor) = self.factor {
            if takes("factor") {
                backoff = backoff.factor(factor);
            } else {
                problems.push(does_not_apply("backoff.factor", factor, name));
            }
        }
        if let Some(jitter) = self.jitter {
            if takes("jitter") {
                backoff = backoff.jitter(match jitter {
                    JitterKind::None => Jitter::None,
                    JitterKind::Full => Jitter::Full,
                    JitterKind::Equal => Jitter::Equal,
                });
            } else {
                let value = format!("{jitter:?}").to_lowercase();
                problems.push(does_not_apply("backoff.jitter", value, name));
            }
        }
        if let Some(seed) = self.seed {
            if takes("seed") {
                backoff = backoff.seed(seed);
            } else {
                problems.push(does_not_apply("backoff.seed", seed, name));
            }
        }
        if let Some(base) = self.throttled_base
            && takes("throttled_base")
        {
            backoff = backoff.throttled_base(base);
        }
        if let Some(max) = self.max {
            backoff = backoff.max(max);
        }
        backoff
    }
}

/// `Ok(value)` when `problems` is empty, else the problems as one error.
fn checked<T>(value: T, problems: Vec<ConfigProblem>) -> Result<T, ConfigError> {
    if problems.is_empty() {
        Ok(value)
    } else {
        Err(ConfigError::new(problems))
    }
}

impl BudgetConfig {
    /// A [`RetryBudgetBuilder`] with these settings, for code that builds budgets itself (the
    /// outbound layer of rampart-http builds one per host); its
    /// [`build`](RetryBudgetBuilder::build) checks the values.
    ///
    /// ```
    /// use rampart::config::BudgetConfig;
    ///
    /// let config: BudgetConfig = toml::from_str("fraction = 0.2")?;
    /// let budget = config.builder().build()?;
    /// # drop(budget);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(&self) -> RetryBudgetBuilder {
        let mut built = RetryBudget::builder();
        if let Some(fraction) = self.fraction {
            built = built.fraction(fraction);
        }
        if let Some(rate) = self.min_per_sec {
            built = built.min_per_sec(rate);
        }
        built
    }
}

impl BreakerConfig {
    /// A [`BreakerBuilder`] with these settings, for code that builds breakers itself (the
    /// outbound layer of rampart-http builds one per host); its
    /// [`build`](BreakerBuilder::build) checks the values.
    ///
    /// ```
    /// use rampart::config::BreakerConfig;
    ///
    /// let config: BreakerConfig = toml::from_str("consecutive_failures = 3")?;
    /// let breaker = config.builder()?.build()?;
    /// # drop(breaker);
    /// let both: BreakerConfig = toml::from_str(r#"
    ///     consecutive_failures = 3
    ///     failure_ratio = 0.5
    ///     window = "10s"
    ///     min_throughput = 10
    /// "#)?;
    /// assert_eq!(
    ///     both.builder().unwrap_err().to_string(),
    ///     "breaker.consecutive_failures cannot be set with failure_ratio (was 3, failure_ratio 0.5)"
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing the settings that do not go together (both modes, a `window`
    /// without `failure_ratio`, `failure_ratio` without its `window` and `min_throughput`).
    pub fn builder(&self) -> Result<BreakerBuilder, ConfigError> {
        let mut problems = Vec::new();
        let builder = self.to_builder(&mut problems);
        checked(builder, problems)
    }

    pub(super) fn to_breaker(&self, problems: &mut Vec<ConfigProblem>) -> Option<Breaker> {
        let before = problems.len();
        let builder = self.to_builder(problems);
        let fine = problems.len() == before;
        match builder.build() {
            Ok(breaker) => fine.then_some(breaker),
            Err(e) => {
                problems.extend(e.problems().iter().cloned());
                None
            }
        }
    }

    /// A fresh builder with these settings; what does not go together goes to `problems`.
    pub(super) fn to_builder(&self, problems: &mut Vec<ConfigProblem>) -> BreakerBuilder {
        let mut b = Breaker::builder();
        match (self.consecutive_failures, self.failure_ratio) {
            (Some(n), Some(ratio)) => {
                problems.push(ConfigProblem::new(
                    "breaker.consecutive_failures",
                    format!("cannot be set with failure_ratio (was {n}, failure_ratio {ratio})"),
                ));
            }
            (Some(n), None) => b = b.consecutive_failures(n),
            (None, Some(ratio)) => {
                for (field, set) in [
                    ("breaker.window", self.window.is_some()),
                    ("breaker.min_throughput", self.min_throughput.is_some()),
                ] {
                    if !set {
                        problems.push(ConfigProblem::new(field, "is required with failure_ratio"));
                    }
                }
                if let (Some(window), Some(min)) = (self.window, self.min_throughput) {
                    b = b.failure_ratio(ratio, window, min);
                }
            }
            (None, None) => {}
        }
        if self.failure_ratio.is_none() {
            if let Some(window) = self.window {
                problems.push(does_not_apply(
                    "breaker.window",
                    format_duration(window),
                    "a breaker without failure_ratio",
                ));
            }
            if let Some(min) = self.min_throughput {
                problems.push(does_not_apply(
                    "breaker.min_throughput",
                    min,
                    "a breaker without failure_ratio",
                ));
            }
        }
        if let Some(slow) = self.slow_call {
            b = b.slow_call(slow);
        }
        if let Some(d) = self.break_duration {
            b = b.break_duration(d);
        }
        if let Some(d) = self.max_break {
            b = b.max_break(d);
        }
        if let Some(jitter) = self.jitter {
            b = b.jitter(jitter);
        }
        if let Some(seed) = self.seed {
            b = b.seed(seed);
        }
        if let Some(n) = self.half_open_probes {
            b = b.half_open_probes(n);
        }
        if let Some(n) = self.probe_successes {
            b = b.probe_successes(n);
        }
        if let Some(d) = self.probe_timeout {
            b = b.probe_timeout(d);
        }
        if let Some(dry_run) = self.dry_run {
            b = b.dry_run(dry_run);
        }
        b
    }
}

impl HedgeConfig {
    /// The [`Hedge`] these settings describe, for code that gives it to a builder itself (the
    /// outbound layer of rampart-http).
    ///
    /// ```
    /// use rampart::config::HedgeConfig;
    ///
    /// let config: HedgeConfig = toml::from_str(r#"delay = "50ms""#)?;
    /// let hedge = config.hedge()?;
    /// # drop(hedge);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `hedge.delay` when a fixed delay is set with the adaptive
    /// delay's settings.
    pub fn hedge(&self) -> Result<Hedge, ConfigError> {
        let mut problems = Vec::new();
        let hedge = self.to_hedge(&mut problems);
        checked(hedge, problems)
    }

    pub(super) fn to_hedge(&self, problems: &mut Vec<ConfigProblem>) -> Hedge {
        let mut hedge = match self.delay {
            Some(delay) => {
                if self.is_adaptive() {
                    problems.push(ConfigProblem::new(
                        "hedge.delay",
                        format!(
                            "cannot be set with quantile, window, min_samples or floor, the adaptive delay's settings (was {})",
                            format_duration(delay)
                        ),
                    ));
                }
                Hedge::fixed(delay)
            }
            None => {
                let mut hedge = Hedge::adaptive();
                if let Some(q) = self.quantile {
                    hedge = hedge.quantile(q);
                }
                if let Some(window) = self.window {
                    hedge = hedge.window(window);
                }
                if let Some(n) = self.min_samples {
                    hedge = hedge.min_samples(n);
                }
                if let Some(floor) = self.floor {
                    hedge = hedge.floor(floor);
                }
                hedge
            }
        };
        if let Some(legs) = self.max_concurrent {
            hedge = hedge.max_concurrent(legs);
        }
        hedge
    }
}

impl AdaptiveTimeoutConfig {
    pub(super) fn to_adaptive(&self) -> AdaptiveTimeout {
        let mut adaptive = AdaptiveTimeout::default();
        if let Some(multiple) = self.multiple {
            adaptive = adaptive.multiple(multiple);
        }
        if let Some(quantile) = self.quantile {
            adaptive = adaptive.quantile(quantile);
        }
        if let Some(window) = self.window {
            adaptive = adaptive.window(window);
        }
        if let Some(n) = self.min_samples {
            adaptive = adaptive.min_samples(n);
        }
        if let Some(floor) = self.floor {
            adaptive = adaptive.floor(floor);
        }
        adaptive
    }
}
