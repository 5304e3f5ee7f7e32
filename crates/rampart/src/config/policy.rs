//! [`PolicyConfig`]: the plain-data settings of one policy, how a policy inherits a base's, and
//! how they are handed to a [`PolicyBuilder`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{bound, optional};
use super::sections::{
    AdaptiveTimeoutConfig, BackoffConfig, BreakerConfig, BudgetConfig, HedgeConfig, Inherit,
    TimeoutModeConfig,
};
use super::with::section;
use crate::admit::Admit;
use crate::error::{ConfigError, ConfigProblem};
use crate::policy::{Policy, PolicyBuilder};

/// The settings of one policy that are plain data, each optional: a setting left out is
/// inherited (from the `[defaults]` of a [`Policies`](super::Policies) file) or left as the
/// builder has it. Each key is the [`PolicyBuilder`] setter of the same name; see the
/// [module docs](super) for the file form.
///
/// `total_timeout` and `attempt_timeout` take `"none"` for no bound (`Some(None)` here), and the
/// sections `budget`, `breaker`, `hedge` and `adaptive_attempt_timeout` take `"none"` to turn
/// off what the defaults turned on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PolicyConfig {
    /// Attempts per call, the first included ([`PolicyBuilder::max_attempts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The bound on the whole call ([`PolicyBuilder::total_timeout`]); `Some(None)`, written
    /// `"none"`, is [`no_total_timeout`](PolicyBuilder::no_total_timeout).
    #[serde(default, with = "bound", skip_serializing_if = "Option::is_none")]
    pub total_timeout: Option<Option<Duration>>,
    /// The bound on each attempt ([`PolicyBuilder::attempt_timeout`]); `Some(None)`, written
    /// `"none"`, is [`no_attempt_timeout`](PolicyBuilder::no_attempt_timeout).
    #[serde(default, with = "bound", skip_serializing_if = "Option::is_none")]
    pub attempt_timeout: Option<Option<Duration>>,
    /// The least time a retry must have left ([`PolicyBuilder::min_attempt_time`]).
    #[serde(default, with = "optional", skip_serializing_if = "Option::is_none")]
    pub min_attempt_time: Option<Duration>,
    /// Bounds each call by the ambient deadline too ([`PolicyBuilder::use_ambient_deadline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_ambient_deadline: Option<bool>,
    /// Reads the ambient criticality ([`PolicyBuilder::use_ambient_criticality`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_ambient_criticality: Option<bool>,
    /// What happens to an attempt at its ceiling ([`PolicyBuilder::timeout_mode`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_mode: Option<TimeoutModeConfig>,
    /// The wait between attempts ([`PolicyBuilder::backoff`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffConfig>,
    /// The retry budget ([`PolicyBuilder::budget`]): left out, the policy gets its own with the
    /// defaults when it can retry; `Some(None)`, written `"none"`, is
    /// [`no_budget`](PolicyBuilder::no_budget).
    #[serde(default, with = "section", skip_serializing_if = "Option::is_none")]
    pub budget: Option<Option<BudgetConfig>>,
    /// A circuit breaker of the policy's own ([`PolicyBuilder::breaker`]); `Some(None)`,
    /// written `"none"`: none.
    #[serde(default, with = "section", skip_serializing_if = "Option::is_none")]
    pub breaker: Option<Option<BreakerConfig>>,
    /// Hedging ([`PolicyBuilder::hedge`]); `Some(None)`, written `"none"`: none.
    #[serde(default, with = "section", skip_serializing_if = "Option::is_none")]
    pub hedge: Option<Option<HedgeConfig>>,
    /// An attempt timeout that follows the measured latency
    /// ([`PolicyBuilder::adaptive_attempt_timeout`]); `Some(None)`, written `"none"`: none.
    #[serde(default, with = "section", skip_serializing_if = "Option::is_none")]
    pub adaptive_attempt_timeout: Option<Option<AdaptiveTimeoutConfig>>,
}

fn inherit_value<T: Clone>(own: &mut Option<T>, base: &Option<T>) {
    if own.is_none() {
        own.clone_from(base);
    }
}

fn inherit_table<T: Inherit>(own: &mut Option<T>, base: &Option<T>) {
    match (own.as_mut(), base) {
        (None, _) => own.clone_from(base),
        (Some(own), Some(base)) => own.inherit(base),
        (Some(_), None) => {}
    }
}

fn inherit_section<T: Inherit>(own: &mut Option<Option<T>>, base: &Option<Option<T>>) {
    match (own.as_mut(), base) {
        (None, _) => own.clone_from(base),
        (Some(Some(own)), Some(Some(base))) => own.inherit(base),
        (Some(_), _) => {}
    }
}

/// The sections a setting can be in, by the first segment of its field.
fn section_sets<T>(
    section: &Option<Option<T>>,
    key: &str,
    sets: impl Fn(&T, &str) -> bool,
) -> bool {
    match section {
        None => false,
        Some(None) => true,
        Some(Some(section)) => key.is_empty() || sets(section, key),
    }
}

impl PolicyConfig {
    /// These settings, with each one left out taken from `base` (a policy's from the file's
    /// `[defaults]`). Sections are inherited key by key, except that a section naming another
    /// mode than the base's (a backoff or timeout-mode `kind`, `failure_ratio` against
    /// `consecutive_failures`, a fixed hedge `delay` against the adaptive keys) drops the
    /// base's keys of the mode it leaves, and `"none"` drops the base's section.
    #[must_use]
    pub fn inherit(mut self, base: &PolicyConfig) -> PolicyConfig {
        inherit_value(&mut self.max_attempts, &base.max_attempts);
        inherit_value(&mut self.total_timeout, &base.total_timeout);
        inherit_value(&mut self.attempt_timeout, &base.attempt_timeout);
        inherit_value(&mut self.min_attempt_time, &base.min_attempt_time);
        inherit_value(&mut self.use_ambient_deadline, &base.use_ambient_deadline);
        inherit_value(
            &mut self.use_ambient_criticality,
            &base.use_ambient_criticality,
        );
        inherit_table(&mut self.timeout_mode, &base.timeout_mode);
        inherit_table(&mut self.backoff, &base.backoff);
        inherit_section(&mut self.budget, &base.budget);
        inherit_section(&mut self.breaker, &base.breaker);
        inherit_section(&mut self.hedge, &base.hedge);
        inherit_section(
            &mut self.adaptive_attempt_timeout,
            &base.adaptive_attempt_timeout,
        );
        self
    }

    /// Whether the setting `field` (a [`ConfigProblem`]'s field: `"attempt_timeout"`,
    /// `"breaker.jitter"`) is set here rather than left out: what a file of settings that
    /// inherit from a base reads to name a problem under the section that wrote the setting.
    ///
    /// ```
    /// use rampart::config::PolicyConfig;
    ///
    /// let config: PolicyConfig = toml::from_str("breaker = { jitter = 0.5 }")?;
    /// assert!(config.sets("breaker.jitter"));
    /// assert!(!config.sets("breaker.seed"));
    /// assert!(!config.sets("max_attempts"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sets(&self, field: &str) -> bool {
        let (head, key) = field.split_once('.').unwrap_or((field, ""));
        let key = key.split_once('.').map_or(key, |(first, _)| first);
        let table = |set: bool, sets: bool| set && (key.is_empty() || sets);
        match head {
            "max_attempts" => self.max_attempts.is_some(),
            "total_timeout" => self.total_timeout.is_some(),
            "attempt_timeout" => self.attempt_timeout.is_some(),
            "min_attempt_time" => self.min_attempt_time.is_some(),
            "use_ambient_deadline" => self.use_ambient_deadline.is_some(),
            "use_ambient_criticality" => self.use_ambient_criticality.is_some(),
            "timeout_mode" => self
                .timeout_mode
                .as_ref()
                .is_some_and(|t| table(true, t.sets(key))),
            "backoff" => self
                .backoff
                .as_ref()
                .is_some_and(|b| table(true, b.sets(key))),
            "budget" => section_sets(&self.budget, key, BudgetConfig::sets),
            "breaker" => section_sets(&self.breaker, key, BreakerConfig::sets),
            "hedge" => section_sets(&self.hedge, key, HedgeConfig::sets),
            "adaptive_attempt_timeout" => section_sets(
                &self.adaptive_attempt_timeout,
                key,
                AdaptiveTimeoutConfig::sets,
            ),
            _ => false,
        }
    }

    /// Builds a policy from `builder` with these settings: what the builder holds that has no
    /// configuration form (its name, classifier, admission, clock, listeners and hooks) is
    /// kept, each setting given here replaces the builder's, each one left out keeps it.
    /// `"none"` for a breaker, hedge or adaptive timeout adds none (it does not remove one the
    /// builder was given).
    ///
    /// ```
    /// use rampart::Policy;
    /// use rampart::config::PolicyConfig;
    ///
    /// let config: PolicyConfig = serde_json::from_str(r#"{ "max_attempts": 2, "total_timeout": "1s" }"#)?;
    /// let policy = config.build(Policy::builder().name("prices"))?;
    /// assert_eq!(policy.explain(), "prices: 2 attempts, total 1s, attempt 10s (abandon), exponential 100ms x2 max 30s full jitter, budget 20%");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every problem at once: settings that do not go together
    /// (`backoff.factor` on a constant curve, both breaker modes) and every problem
    /// [`PolicyBuilder::build`] finds, each naming its key and value.
    pub fn build<C, A: Admit>(
        &self,
        builder: PolicyBuilder<C, A>,
    ) -> Result<Policy<C, A>, ConfigError> {
        let mut problems = Vec::new();
        let built = self.configure(builder, &mut problems).build();
        match built {
            Ok(policy) if problems.is_empty() => Ok(policy),
            Ok(_) => Err(ConfigError::new(problems)),
            Err(error) => {
                problems.extend(error.problems().iter().cloned());
                Err(ConfigError::new(problems))
            }
        }
    }

    /// `builder` with these settings, not built: for code that sets more on it and builds it
    /// itself (the outbound layer of rampart-http, whose policies get their name, attempts,
    /// breaker, budget and hedge from the layer). As in [`build`](Self::build), each setting
    /// given here replaces the builder's and each one left out keeps it; the values are checked
    /// when the builder is built.
    ///
    /// ```
    /// use rampart::Policy;
    /// use rampart::config::PolicyConfig;
    ///
    /// let config: PolicyConfig = toml::from_str(r#"attempt_timeout = "250ms""#)?;
    /// let policy = config.apply(Policy::builder().name("prices"))?.max_attempts(2).build()?;
    /// assert_eq!(policy.max_attempts(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing the settings that do not go together (`backoff.factor` on a
    /// constant curve, both breaker modes) and a budget or breaker section whose own `build`
    /// fails; the problems of the other values come from the builder's `build`.
    pub fn apply<C, A>(
        &self,
        builder: PolicyBuilder<C, A>,
    ) -> Result<PolicyBuilder<C, A>, ConfigError> {
        let mut problems = Vec::new();
        let builder = self.configure(builder, &mut problems);
        if problems.is_empty() {
            Ok(builder)
        } else {
            Err(ConfigError::new(problems))
        }
    }

    /// `builder` with these settings; the problems found before `build()` go to `problems`.
    fn configure<C, A>(
        &self,
        mut b: PolicyBuilder<C, A>,
        problems: &mut Vec<ConfigProblem>,
    ) -> PolicyBuilder<C, A> {
        if let Some(n) = self.max_attempts {
            b = b.max_attempts(n);
        }
        match self.total_timeout {
            Some(Some(timeout)) => b = b.total_timeout(timeout),
            Some(None) => b = b.no_total_timeout(),
            None => {}
        }
        match self.attempt_timeout {
            Some(Some(timeout)) => b = b.attempt_timeout(timeout),
            Some(None) => b = b.no_attempt_timeout(),
            None => {}
        }
        if let Some(min) = self.min_attempt_time {
            b = b.min_attempt_time(min);
        }
        if let Some(enabled) = self.use_ambient_deadline {
            b = b.use_ambient_deadline(enabled);
        }
        if let Some(enabled) = self.use_ambient_criticality {
            b = b.use_ambient_criticality(enabled);
        }
        if let Some(mode) = &self.timeout_mode {
            b = b.timeout_mode(mode.to_mode(problems));
        }
        if let Some(backoff) = &self.backoff {
            b = b.backoff(backoff.to_backoff(problems));
        }
        match &self.budget {
            Some(Some(budget)) => match budget.builder().build() {
                Ok(budget) => b = b.budget(budget),
                Err(e) => problems.extend(e.problems().iter().cloned()),
            },
            Some(None) => b = b.no_budget(),
            None => {}
        }
        if let Some(Some(breaker)) = &self.breaker
            && let Some(breaker) = breaker.to_breaker(problems)
        {
            b = b.breaker(breaker);
        }
        if let Some(Some(hedge)) = &self.hedge {
            b = b.hedge(hedge.to_hedge(problems));
        }
        if let Some(Some(adaptive)) = &self.adaptive_attempt_timeout {
            b = b.adaptive_attempt_timeout(adaptive.to_adaptive());
        }
        b
    }
}
