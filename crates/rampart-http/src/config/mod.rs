//! The layers' settings as configuration: the outbound and inbound layers and the service's
//! named policies in one file, read with serde (feature `serde`).
//!
//! The timeouts, retries, breakers and header names of a service's edge are operations'
//! business, as a policy's are (see [`rampart::config`]): they change per environment and
//! after incidents, without a release. [`HttpConfig`] is a file of them: `[inbound]`
//! ([`InboundConfig`], the settings of an [`InboundLayer`](crate::InboundLayer)),
//! `[outbound]` ([`OutboundConfig`], those of an [`OutboundBuilder`](crate::OutboundBuilder),
//! with a `policy` for every host and a section per host), and the `[defaults]` and
//! `[policies.*]` of a [`rampart::config::Policies`] file for the calls the service makes
//! through policies of its own. A `Policies` file is an `HttpConfig` file as it is. The
//! conventions are rampart's: durations as text (`"250ms"`, `"2s"`), `"none"` to turn a
//! section off, an unknown key refused with its path, every problem reported at once under
//! its key path, the same checks as the builders', and the file written back as it was read.
//!
//! ```
//! use rampart_http::config::HttpConfig;
//!
//! let file: HttpConfig = toml::from_str(r#"
//!     [inbound]
//!     default_timeout = "2s"
//!     reserve = "20ms"
//!     reject_expired = true
//!
//!     [outbound]
//!     max_attempts = 3
//!     deadline_header = "x-request-deadline-ms"
//!     breaker = { consecutive_failures = 5, break_duration = "10s" }
//!     hedge_marked = { quantile = 0.95 }
//!
//!     ## What every host's policies get.
//!     [outbound.policy]
//!     total_timeout = "2s"
//!     attempt_timeout = "500ms"
//!     backoff = { kind = "exponential", base = "50ms", max = "1s" }
//!
//!     ## One host's own, inheriting the rest from `outbound.policy`.
//!     [outbound.hosts."reports.internal:80"]
//!     total_timeout = "30s"
//!     attempt_timeout = "10s"
//!
//!     ## Named policies, as in a `rampart::config::Policies` file.
//!     [policies.ledger]
//!     max_attempts = 2
//! "#)?;
//! file.check()?;
//! let inbound = file.inbound.apply(rampart_http::InboundLayer::new());
//! let outbound = file.outbound.build()?;
//! let policies = file.policies().build()?;
//! assert_eq!(policies["ledger"].max_attempts(), 2);
//! # drop((inbound, outbound));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The keys
//!
//! Each key is the setter of the same name; a key left out keeps the layer's default (the
//! tables in [`crate::inbound`] and [`crate::outbound`]).
//!
//! | section | key | form |
//! |---|---|---|
//! | `inbound` | `name` | text |
//! | | `maximum`, `default_timeout`, `reserve` | duration |
//! | | `reject_expired`, `enforce`, `dry_run` | boolean |
//! | | `deadline_header`, `criticality_header`, `retry_header` | a header name |
//! | `outbound` | `name` | text |
//! | | `max_attempts` | integer, at least 1 |
//! | | `max_hosts`, `replay_limit` (bytes) | integer |
//! | | `quota`, `fail_on_retryable_status`, `metrics_by_host` | boolean |
//! | | `deadline_header`, `criticality_header`, `retry_header` | a header name |
//! | | `breaker`, `budget` | a section as in a policy ([`BreakerConfig`](rampart::config::BreakerConfig), [`BudgetConfig`](rampart::config::BudgetConfig)), or `"none"` |
//! | | `hedge` or `hedge_marked` | a hedge section ([`HedgeConfig`](rampart::config::HedgeConfig)) |
//! | | `policy` | the policy keys `total_timeout`, `attempt_timeout`, `min_attempt_time`, `timeout_mode`, `backoff`, `adaptive_attempt_timeout` |
//! | | `hosts."host:port"` | the same keys as `policy`, for one host |
//! | | `host_quota."host:port"`, `host_fail_on_retryable_status."host:port"` | boolean |
//! | (top) | `defaults`, `policies.<name>` | as in [`rampart::config`] |
//!
//! In `outbound.policy` and a host's section, the keys a policy of the layer takes from the
//! layer (`max_attempts`, `breaker`, `budget`, `hedge`, `use_ambient_deadline`,
//! `use_ambient_criticality`) are refused with where to write them: the layer gives every
//! host the same attempts, and each host its own breaker and budget of the same settings.
//!
//! What stays in code, given to the builder or layer that [`OutboundConfig::apply`] and
//! [`InboundConfig::apply`] take: closures and components, which are not data (an admission
//! component, `admit`; the layers' event listeners; the [`policy`](crate::OutboundBuilder::policy)
//! and [`host`](crate::OutboundBuilder::host) settings with no configuration form, a policy's
//! clock, drain, rampart listeners and hooks, an
//! [`attempt_timeout_fn`](rampart::PolicyBuilder::attempt_timeout_fn) or a custom backoff
//! curve), and the inbound layer's [`clock`](crate::InboundLayer::clock). The classifier is
//! the layer's own ([`HttpClassifier`](crate::HttpClassifier)).
//!
//! # Errors
//!
//! Reading the file is the format crate's job: a malformed duration or header name, or an
//! unknown key, is its error, naming the key. [`HttpConfig::check`] reports every other
//! problem of the whole file at once, each under its key path, in the builders' own words, by
//! building what the builders build:
//!
//! ```
//! use rampart_http::config::HttpConfig;
//!
//! let file: HttpConfig = toml::from_str(r#"
//!     [outbound]
//!     max_attempts = 0
//!
//!     [outbound.hosts."api.example:443"]
//!     attempt_timeout = "0ns"
//! "#)?;
//! assert_eq!(
//!     file.check().unwrap_err().to_string(),
//!     "outbound.max_attempts must be at least 1 (was 0); \
//!      outbound.hosts.\"api.example:443\".attempt_timeout must be positive (was 0ns)"
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The inbound layer accepts every value of its settings, so `[inbound]` has no problem to
//! report. `max_hosts = 0` is taken as 1, as the builder takes it.
//!
//! # Reloading
//!
//! [`HttpConfig::reload`] applies a changed file to what was built from it, as far as it can
//! change while it runs, and returns the key paths it applied and those that need a restart
//! ([`Reloaded`]). Live: the named policies, as
//! [`Policies::reload`](rampart::config::Policies::reload) changes them, and the outbound
//! layer's `max_attempts`, its breaker's thresholds and durations, and the timeouts, timeout
//! mode and backoff of `[outbound.policy]` and each `[outbound.hosts."host:port"]`, through
//! [`OutboundLayer::reconfigure`](crate::OutboundLayer::reconfigure) (for every host in the
//! layer's table and every host first seen later). Needing a restart: every `[inbound]` key,
//! and the rest of `[outbound]` (header names, a breaker added or removed or given a new
//! mode, budget, hedge, `max_hosts`, ...; see `reconfigure` for why each is fixed). `examples/reload.rs` watches a file and logs both.

mod inbound;
mod outbound;

use std::collections::BTreeMap;

use rampart::admit::Admit;
use rampart::config::{Policies, PolicyConfig};
use rampart::{ConfigError, ConfigProblem, Policy};
use serde::{Deserialize, Serialize};

use crate::OutboundLayer;

pub use inbound::InboundConfig;
pub use outbound::OutboundConfig;

/// A service's edge as configuration: the inbound and outbound layers' settings and the
/// named policies of a [`Policies`] file, with every problem of the whole file reported at
/// once. See the [module docs](self).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HttpConfig {
    /// The inbound layer's settings.
    #[serde(default, skip_serializing_if = "is_default")]
    pub inbound: InboundConfig,
    /// The outbound layer's settings.
    #[serde(default, skip_serializing_if = "is_default")]
    pub outbound: OutboundConfig,
    /// What every named policy inherits ([`Policies::defaults`]).
    #[serde(default, skip_serializing_if = "is_default")]
    pub defaults: PolicyConfig,
    /// The named policies ([`Policies::policies`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub policies: BTreeMap<String, PolicyConfig>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// What [`HttpConfig::reload`] did with a changed file: the key paths of what it applied
/// live, and of what changed but needs the layers or policies built again (a restart), each
/// in the order of the file's sections (`inbound`, `outbound`, the policies by name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reloaded {
    /// Applied to the running layer and policies (`outbound.policy.attempt_timeout`,
    /// `policies.ledger.max_attempts`).
    pub applied: Vec<String>,
    /// Changed in the file, not applied: a restart applies them (`outbound.deadline_header`,
    /// `policies.ledger.budget`).
    pub restart: Vec<String>,
}

/// The keys of a policy that [`Policies::reload`] changes on a running policy.
const POLICY_LIVE_KEYS: [&str; 7] = [
    "max_attempts",
    "total_timeout",
    "attempt_timeout",
    "min_attempt_time",
    "timeout_mode",
    "backoff",
    "breaker",
];

/// Whether the key `key` of a policy section differs from `was` to `is`.
fn key_differs(was: &PolicyConfig, is: &PolicyConfig, key: &str) -> bool {
    match key {
        "max_attempts" => was.max_attempts != is.max_attempts,
        "total_timeout" => was.total_timeout != is.total_timeout,
        "attempt_timeout" => was.attempt_timeout != is.attempt_timeout,
        "min_attempt_time" => was.min_attempt_time != is.min_attempt_time,
        "use_ambient_deadline" => was.use_ambient_deadline != is.use_ambient_deadline,
        "use_ambient_criticality" => was.use_ambient_criticality != is.use_ambient_criticality,
        "timeout_mode" => was.timeout_mode != is.timeout_mode,
        "backoff" => was.backoff != is.backoff,
        "budget" => was.budget != is.budget,
        "breaker" => was.breaker != is.breaker,
        "hedge" => was.hedge != is.hedge,
        "adaptive_attempt_timeout" => was.adaptive_attempt_timeout != is.adaptive_attempt_timeout,
        _ => unreachable!("a key of a policy section: {key}"),
    }
}

impl HttpConfig {
    /// The named policies and their defaults, as a [`Policies`] file (to
    /// [`build`](Policies::build) them, or build one on a builder of the service's own with
    /// [`get_with`](Policies::get_with)).
    pub fn policies(&self) -> Policies {
        let mut policies = Policies::default();
        policies.defaults = self.defaults.clone();
        policies.policies = self.policies.clone();
        policies
    }

    /// Checks the whole file as the builders would: the outbound layer built with `policy`
    /// and with each host, and each named policy built.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every problem of the file, each under its key path
    /// (`outbound.hosts."api.example:443".attempt_timeout must be positive (was 0ns)`,
    /// `policies.ledger.max_attempts must be at least 1 (was 0)`).
    pub fn check(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        if let Err(error) = self.outbound.apply(crate::OutboundLayer::builder()) {
            problems.extend(error.problems().iter().map(|problem| {
                ConfigProblem::new(format!("outbound.{}", problem.field()), problem.message())
            }));
        }
        if let Err(error) = self.policies().build() {
            problems.extend(error.problems().iter().cloned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::new(problems))
        }
    }

    /// Applies the file `next` to what was built from this one, `outbound` (the layer built
    /// from [`outbound`](Self::outbound)) and `policies` (the named policies, by name), as far
    /// as they can change while they run, and returns the key paths of what it applied and
    /// of what needs a restart (see [`Reloaded`] and the [module docs](self#reloading)).
    ///
    /// Applied live: the outbound layer's `max_attempts` (unless it would start or stop
    /// retries: `outbound.max_attempts` then needs a restart), its `breaker`'s thresholds and
    /// durations (`outbound.breaker`, for every host's breaker, its state kept; a breaker
    /// added or removed, or a new mode, ratio window or seed, needs a restart) and each changed
    /// `total_timeout`, `attempt_timeout`, `min_attempt_time`, `timeout_mode` and `backoff`
    /// of `outbound.policy` and `outbound.hosts."host:port"`, named each by its key
    /// (`outbound.policy.attempt_timeout`), with
    /// [`OutboundLayer::reconfigure`]; and the named policies' settings that
    /// [`Policies::reload`] changes. A setting the layer was given in code and the file does
    /// not name (in a [`host`](crate::OutboundBuilder::host) closure, say) is kept. Needing a
    /// restart: `inbound.<key>`, every other `outbound.<key>` (an
    /// `adaptive_attempt_timeout` of a policy or host section too), and what
    /// `Policies::reload` names.
    ///
    /// `next` is first checked whole, as [`check`](Self::check) does: an invalid file
    /// changes nothing. Keep `next` as the file once it is applied.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart_http::config::HttpConfig;
    ///
    /// let mut file: HttpConfig = toml::from_str(r#"
    ///     [outbound.policy]
    ///     attempt_timeout = "500ms"
    ///
    ///     [policies.prices]
    ///     max_attempts = 2
    /// "#)?;
    /// let outbound = file.outbound.build()?;
    /// let policies = file.policies().build()?;
    ///
    /// let next: HttpConfig = toml::from_str(r#"
    ///     [outbound]
    ///     deadline_header = "x-request-deadline-ms"
    ///
    ///     [outbound.policy]
    ///     attempt_timeout = "250ms"
    ///
    ///     [policies.prices]
    ///     max_attempts = 4
    /// "#)?;
    /// let reloaded = file.reload(&next, &outbound, &policies)?;
    /// assert_eq!(policies["prices"].max_attempts(), 4);
    /// assert_eq!(outbound.settings().policy.attempt_timeout, Some(Duration::from_millis(250)));
    /// assert_eq!(reloaded.applied, ["outbound.policy.attempt_timeout", "policies.prices.max_attempts"]);
    /// assert_eq!(reloaded.restart, ["outbound.deadline_header"]);
    /// file = next;
    /// # drop(file);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Every problem of `next`, as [`check`](Self::check) reports them (nothing is applied
    /// then); an update the outbound layer refused, under its key path (settings the file
    /// does not name, given in code, that do not go with the file's: nothing is applied
    /// then either); or, rarely, an update a running policy refused (see
    /// [`Policies::reload`]).
    pub fn reload<C, A: Admit, B: Admit + Clone>(
        &self,
        next: &HttpConfig,
        outbound: &OutboundLayer<B>,
        policies: &BTreeMap<String, Policy<C, A>>,
    ) -> Result<Reloaded, ConfigError> {
        next.check()?;
        let mut reloaded = Reloaded::default();
        self.inbound.changes(&next.inbound, &mut reloaded.restart);
        self.outbound.reload(
            &next.outbound,
            outbound,
            &mut reloaded.applied,
            &mut reloaded.restart,
        )?;
        let (was, is) = (self.policies(), next.policies());
        let restart = was.reload(&is, policies)?;
        for name in policies.keys() {
            let (Some(old), Some(new)) = (was.resolved(name), is.resolved(name)) else {
                continue;
            };
            for key in POLICY_LIVE_KEYS {
                let path = format!("policies.{name}.{key}");
                if key_differs(&old, &new, key) && !restart.contains(&path) {
                    reloaded.applied.push(path);
                }
            }
        }
        reloaded.restart.extend(restart);
        Ok(reloaded)
    }
}

/// `#[serde(with)]` for an `Option<HeaderName>`: the name's text, absent when `None`.
mod header_name {
    use std::fmt;

    use http::HeaderName;
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Option<HeaderName>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(name) => serializer.serialize_str(name.as_str()),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<HeaderName>, D::Error> {
        deserializer.deserialize_str(Name).map(Some)
    }

    struct Name;

    impl Visitor<'_> for Name {
        type Value = HeaderName;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a header name such as \"x-deadline-ms\"")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<HeaderName, E> {
            HeaderName::from_bytes(text.as_bytes()).map_err(|_| {
                E::custom(format!(
                    "invalid header name {text:?}: letters, digits and !#$%&'*+-.^_`|~ only"
                ))
            })
        }
    }
}
