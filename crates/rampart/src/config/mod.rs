//! Policies as configuration: a file of named policies, read with serde (feature `serde`).
//!
//! Retry, timeout, breaker and budget settings are operations' business: they change with the
//! dependency's behaviour, per environment, and after incidents, on a different clock from the
//! code. This module gives every setting of a [`PolicyBuilder`](crate::PolicyBuilder) that is
//! plain data a configuration form ([`PolicyConfig`]), and a file of named policies
//! ([`Policies`]) with the conventions users of resilience4j, Polly and Envoy expect: one section
//! per dependency, each inheriting what it leaves out from a `[defaults]` section. Durations are
//! written as people write them (`"250ms"`, `"2s"`, `"1.5s"`, `"1m"`; see [`parse_duration`]).
//! The file is checked by the same code as [`PolicyBuilder::build`](crate::PolicyBuilder::build),
//! every problem at once, each under its key path; an unknown key is refused with its name.
//!
//! Any serde format reads it (TOML, YAML, JSON); rampart depends on serde alone, the service
//! brings the format crate.
//!
//! ```
//! use rampart::config::Policies;
//!
//! let file: Policies = toml::from_str(r#"
//!     ## What every policy below inherits unless it sets its own.
//!     [defaults]
//!     max_attempts = 3
//!     total_timeout = "2s"
//!     attempt_timeout = "500ms"
//!     min_attempt_time = "50ms"
//!
//!     [defaults.backoff]
//!     kind = "exponential"
//!     base = "50ms"
//!     factor = 2.0
//!     max = "1s"
//!     jitter = "full"
//!
//!     [defaults.budget]
//!     fraction = 0.1
//!     min_per_sec = 3.0
//!
//!     [defaults.breaker]
//!     consecutive_failures = 5
//!     break_duration = "15s"
//!     max_break = "2m"
//!
//!     ## One section per dependency, named as the policy is.
//!     [policies.prices]
//!     attempt_timeout = "200ms"
//!     hedge = { delay = "50ms", max_concurrent = 2 }
//!
//!     [policies.search]
//!     max_attempts = 2
//!     timeout_mode = { kind = "cooperative" }
//!     ## A failure-ratio breaker instead of the defaults' consecutive one.
//!     breaker = { failure_ratio = 0.5, window = "30s", min_throughput = 20 }
//!
//!     [policies.payments]
//!     ## Never retried: one attempt, no budget, no breaker, a longer deadline.
//!     max_attempts = 1
//!     total_timeout = "5s"
//!     attempt_timeout = "none"
//!     budget = "none"
//!     breaker = "none"
//!     use_ambient_deadline = true
//! "#)?;
//!
//! let policies = file.build()?;
//! assert_eq!(
//!     policies["prices"].explain(),
//!     "prices: 3 attempts, total 2s, attempt 200ms (abandon), exponential 50ms x2 max 1s full jitter, \
//!      budget 10%, breaker: open after 5 consecutive failures, break 15s doubling to 2m, \
//!      hedge after 50ms, 2 legs"
//! );
//! assert_eq!(
//!     policies["search"].explain(),
//!     "search: 2 attempts, total 2s, attempt 500ms (cooperative), exponential 50ms x2 max 1s full jitter, \
//!      budget 10%, breaker: open at 50% failures over 30s (at least 20 calls), break 15s doubling to 2m"
//! );
//! assert_eq!(
//!     policies["payments"].explain(),
//!     "payments: 1 attempt, total 5s, no attempt timeout (abandon)"
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The keys
//!
//! Each key is the builder setter of the same name; a key left out keeps the builder's default
//! (or the defaults' value). Closures have no configuration form: a classifier, an admission
//! component, an [`attempt_timeout_fn`](crate::PolicyBuilder::attempt_timeout_fn), a custom
//! backoff curve, listeners and hooks are given to the builder in code
//! ([`Policies::get_with`]), as are a clock and a drain.
//!
//! | key | form | default |
//! |---|---|---|
//! | `max_attempts` | integer | 3 |
//! | `total_timeout`, `attempt_timeout` | duration, or `"none"` for no bound | 30 s, 10 s |
//! | `min_attempt_time` | duration | 0 |
//! | `use_ambient_deadline`, `use_ambient_criticality` | boolean | false |
//! | `timeout_mode` | `{ kind = "abandon", grace = "10ms" }` or `{ kind = "cooperative" }` | abandon, zero grace |
//! | `backoff` | `kind` (`exponential`, `constant`, `linear`, `decorrelated`, `none`) and its parameter (`base`, `delay`, `step`); `factor`, `max`, `jitter` (`none`, `full`, `equal`), `throttled_base`, `seed` | exponential 100 ms ×2, max 30 s, full jitter |
//! | `budget` | `{ fraction, min_per_sec }`, or `"none"` | a budget of the policy's own when it retries |
//! | `breaker` | `consecutive_failures` or `failure_ratio` with `window` and `min_throughput`; `slow_call`, `break_duration`, `max_break`, `jitter`, `seed`, `half_open_probes`, `probe_successes`, `probe_timeout`, `dry_run`; or `"none"` | none |
//! | `hedge` | a fixed `delay`, or the adaptive `quantile`, `window`, `min_samples`, `floor`; `max_concurrent`; or `"none"` | none |
//! | `adaptive_attempt_timeout` | `multiple`, `quantile`, `window`, `min_samples`, `floor`; or `"none"` | none |
//!
//! Configuration types of other crates (rampart-http's layers) read the same forms through
//! [`with`], and build what a section describes with [`PolicyConfig::apply`],
//! [`BreakerConfig::builder`], [`BudgetConfig::builder`] and [`HedgeConfig::hedge`].
//!
//! Each named policy gets a breaker, a budget and hedging state of its own (a breaker guards
//! one dependency). Inheritance is key by key, sections included; a section that names
//! another mode than the defaults' (another backoff `kind`, `failure_ratio` instead of
//! `consecutive_failures`) drops the defaults' keys of the mode it leaves, and `"none"` drops
//! the defaults' section whole.
//!
//! # Reloading
//!
//! [`Policies::reload`] applies a changed file to the policies built from the old one, as far as
//! a running policy can change ([`Policy::reconfigure`](crate::Policy::reconfigure) and the
//! breaker's thresholds), and returns the key paths of what needs a restart (a changed budget or
//! hedge, a policy added or removed). How the service notices the change (a signal, a file
//! watcher) is its own business.
//!
//! # Errors
//!
//! Reading the file is the format crate's job: a malformed value (`"250"` with no unit, `"-1s"`)
//! or an unknown key is its error, naming the key and the value. Building reports a
//! [`ConfigError`](crate::ConfigError) with every problem of every policy at once, under its
//! key path, with the builder's own words:
//!
//! ```
//! use rampart::config::Policies;
//!
//! let file: Policies = toml::from_str(r#"
//!     [policies.prices]
//!     attempt_timeout = "0ns"
//!     max_attempts = 0
//! "#)?;
//! assert_eq!(
//!     file.build().unwrap_err().to_string(),
//!     "policies.prices.max_attempts must be at least 1 (was 0); \
//!      policies.prices.attempt_timeout must be positive (was 0ns)"
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod duration;
mod policies;
mod policy;
mod reload;
mod sections;

pub use duration::{DurationError, format_duration, parse_duration};
pub use policies::Policies;
pub use policy::PolicyConfig;
pub use sections::{
    AdaptiveTimeoutConfig, BackoffConfig, BackoffKind, BreakerConfig, BudgetConfig, HedgeConfig,
    JitterKind, TimeoutModeConfig, TimeoutModeKind,
};

/// The text that turns off a bound or a section.
const NONE: &str = "none";

/// The serde forms of this module's values, for `#[serde(with = "...")]` in configuration
/// types of other crates (rampart-http's layers), so that a file reads the same everywhere:
/// durations as text, `"none"` for no bound or for a section turned off.
///
/// ```
/// use std::time::Duration;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Cache {
///     #[serde(default, with = "rampart::config::with::duration", skip_serializing_if = "Option::is_none")]
///     ttl: Option<Duration>,
///     #[serde(default, with = "rampart::config::with::bound", skip_serializing_if = "Option::is_none")]
///     max_age: Option<Option<Duration>>,
/// }
///
/// let cache: Cache = toml::from_str(r#"
///     ttl = "1.5s"
///     max_age = "none"
/// "#)?;
/// assert_eq!(cache.ttl, Some(Duration::from_millis(1500)));
/// assert_eq!(cache.max_age, Some(None));
/// assert_eq!(toml::to_string(&cache)?, "ttl = \"1.5s\"\nmax_age = \"none\"\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub mod with {
    pub use super::duration::bound;
    pub use super::duration::optional as duration;

    /// An `Option<Option<T>>` section: absent when the outer is `None`, the text `"none"` when
    /// the inner is (turned off), else `T`'s table.
    pub mod section {
        use std::fmt;
        use std::marker::PhantomData;

        use serde::de::value::MapAccessDeserializer;
        use serde::de::{self, MapAccess, Unexpected, Visitor};
        use serde::{Deserialize, Deserializer, Serialize, Serializer};

        /// Writes the section's table, or `"none"`.
        ///
        /// # Errors
        ///
        /// The serializer's.
        pub fn serialize<S: Serializer, T: Serialize>(
            value: &Option<Option<T>>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match value {
                Some(Some(section)) => section.serialize(serializer),
                Some(None) => serializer.serialize_str(super::super::NONE),
                None => serializer.serialize_none(),
            }
        }

        /// Reads a table of `T`'s settings, or `"none"` (use with `#[serde(default)]`).
        ///
        /// # Errors
        ///
        /// A value that is neither, or `T`'s own error, in the format's words.
        pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
            deserializer: D,
        ) -> Result<Option<Option<T>>, D::Error> {
            deserializer.deserialize_any(NoneOr(PhantomData)).map(Some)
        }

        struct NoneOr<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for NoneOr<T> {
            type Value = Option<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of settings, or \"none\"")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Option<T>, E> {
                if text == super::super::NONE {
                    Ok(None)
                } else {
                    Err(E::invalid_value(Unexpected::Str(text), &self))
                }
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Option<T>, M::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Some)
            }
        }
    }
}
