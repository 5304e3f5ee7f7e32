//! [`OutboundConfig`]: the settings of an [`OutboundBuilder`] that are plain data, checked by
//! building the layer as [`OutboundBuilder::build`] does, every problem under its key path.
//!
//! Longer than the ~600-line guide: the layer's configuration, its checks and the changes a reload
//! applies share one set of key paths, kept together so that a key's reading and its reload are
//! read side by side.

use std::collections::BTreeMap;

use http::HeaderName;
use rampart::admit::Admit;
use rampart::config::{BreakerConfig, BudgetConfig, HedgeConfig, PolicyConfig};
use rampart::{ConfigError, ConfigProblem};
use serde::{Deserialize, Serialize};

use super::{header_name, key_differs};
use crate::outbound::{
    HostKey, HostSettings, OutboundBuilder, OutboundLayer, OutboundSettings, breaker_problems,
};

/// The keys of `policy` and a host's section that [`OutboundLayer::reconfigure`] changes.
const LIVE_KEYS: [&str; 5] = [
    "total_timeout",
    "attempt_timeout",
    "min_attempt_time",
    "timeout_mode",
    "backoff",
];

/// The other keys of a policy section: fixed when a host's policies are built.
const FIXED_KEYS: [&str; 7] = [
    "adaptive_attempt_timeout",
    "max_attempts",
    "use_ambient_deadline",
    "use_ambient_criticality",
    "budget",
    "breaker",
    "hedge",
];

/// The keys of a policy that the layer sets itself, for every host: not for `policy` or
/// `hosts`, with why.
const LAYER_KEYS: [(&str, &str); 6] = [
    (
        "max_attempts",
        "is the layer's, for every host: set it beside `policy`",
    ),
    (
        "breaker",
        "is the layer's, for every host: set it beside `policy`",
    ),
    (
        "budget",
        "is the layer's, for every host: set it beside `policy`",
    ),
    (
        "hedge",
        "is the layer's, for every host: set `hedge` or `hedge_marked` beside `policy`",
    ),
    (
        "use_ambient_deadline",
        "is always on in the outbound layer (its policies read the ambient deadline)",
    ),
    (
        "use_ambient_criticality",
        "is set by the outbound layer (its policies read the ambient criticality)",
    ),
];

/// The settings of an [`OutboundBuilder`] that are plain data, each optional: a setting left
/// out keeps the builder's default. Each key is the builder setter of the same name; see the
/// [module docs](super) for the file form and the settings that stay in code.
///
/// `policy` holds what [`OutboundBuilder::policy`] sets (the timeouts, the timeout mode, the
/// backoff, the adaptive attempt timeout, `min_attempt_time`), as a
/// [`PolicyConfig`]; `hosts` holds what [`OutboundBuilder::host`] sets for one host, each
/// inheriting what it leaves out from `policy` key by key, as a named policy inherits
/// `[defaults]` ([`PolicyConfig::inherit`]). The attempts, breaker, budget and hedge are the
/// layer's, for every host, and so keys of their own here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct OutboundConfig {
    /// The name of the layer's policies ([`OutboundBuilder::name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Attempts per replayable request ([`OutboundBuilder::max_attempts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Hosts that keep a breaker and budget ([`OutboundBuilder::max_hosts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hosts: Option<usize>,
    /// The largest body kept for replay, in bytes ([`OutboundBuilder::replay_limit`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_limit: Option<usize>,
    /// Reads responses' quota headers ([`OutboundBuilder::quota`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<bool>,
    /// Fails a call that ends on a retryable status
    /// ([`OutboundBuilder::fail_on_retryable_status`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_on_retryable_status: Option<bool>,
    /// Splits the metrics by host ([`OutboundBuilder::metrics_by_host`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_by_host: Option<bool>,
    /// The deadline header ([`OutboundBuilder::deadline_header`]).
    #[serde(default, with = "header_name", skip_serializing_if = "Option::is_none")]
    pub deadline_header: Option<HeaderName>,
    /// The criticality header ([`OutboundBuilder::criticality_header`]).
    #[serde(default, with = "header_name", skip_serializing_if = "Option::is_none")]
    pub criticality_header: Option<HeaderName>,
    /// The retry-mark header ([`OutboundBuilder::retry_header`]).
    #[serde(default, with = "header_name", skip_serializing_if = "Option::is_none")]
    pub retry_header: Option<HeaderName>,
    /// Each host's breaker ([`OutboundBuilder::breaker_per_host`]); `Some(None)`, written `"none"`, is
    /// [`no_breaker`](OutboundBuilder::no_breaker).
    #[serde(default, with = "rampart::config::with::section")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<Option<BreakerConfig>>,
    /// Each host's retry budget ([`OutboundBuilder::budget_per_host`]); `Some(None)`, written
    /// `"none"`, is [`no_budget`](OutboundBuilder::no_budget).
    #[serde(default, with = "rampart::config::with::section")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Option<BudgetConfig>>,
    /// Hedges every replayable request ([`OutboundBuilder::hedge`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<HedgeConfig>,
    /// Hedges the requests marked [`Hedged`](crate::Hedged)
    /// ([`OutboundBuilder::hedge_marked`]); not with `hedge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge_marked: Option<HedgeConfig>,
    /// What [`OutboundBuilder::policy`] sets for every host.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub policy: PolicyConfig,
    /// What [`OutboundBuilder::host`] sets for one host, by host key (`host:port`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, PolicyConfig>,
    /// [`OutboundBuilder::host_quota`], by host key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_quota: BTreeMap<String, bool>,
    /// [`OutboundBuilder::host_fail_on_retryable_status`], by host key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_fail_on_retryable_status: BTreeMap<String, bool>,
}

fn is_empty(config: &PolicyConfig) -> bool {
    *config == PolicyConfig::default()
}

/// The key path of host `key`'s section, quoted: `hosts."api.example:443"`.
fn host_path(key: &str) -> String {
    format!("hosts.{key:?}")
}

impl OutboundConfig {
    /// Builds an [`OutboundLayer`] with these settings on [`OutboundLayer::builder`].
    ///
    /// ```
    /// use rampart_http::config::OutboundConfig;
    ///
    /// let config: OutboundConfig = toml::from_str(r#"
    ///     max_attempts = 2
    ///     policy = { total_timeout = "2s", attempt_timeout = "500ms" }
    ///     hosts."reports.internal:80" = { total_timeout = "30s" }
    /// "#)?;
    /// let layer = config.build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`apply`](Self::apply).
    pub fn build(&self) -> Result<OutboundLayer, ConfigError> {
        self.apply(OutboundLayer::builder())?.build()
    }

    /// `builder` with these settings: what it holds that has no configuration form (an
    /// admission component, listeners, and anything its [`policy`](OutboundBuilder::policy)
    /// or [`host`](OutboundBuilder::host) closures set) is kept, each setting given here
    /// replaces the builder's, each one left out keeps it. The settings of `policy` and
    /// `hosts` replace the builder's closures of the same place.
    ///
    /// The settings are checked first as [`OutboundBuilder::build`] checks them (the layer is
    /// built, with each host's settings, and dropped), so that every problem is reported at
    /// once, each under its key path (`hosts."api.example:443".attempt_timeout`,
    /// `policy.backoff.factor`, `breaker.failure_ratio`); a problem of a setting a host
    /// inherits from `policy` is named once, under `policy.`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every problem: a key of the layer's written in `policy` or a
    /// host (`policy.max_attempts`), `hedge` with `hedge_marked`, two keys of one map naming
    /// the same host, settings that do not go together, and every problem the layer's
    /// [`build`](OutboundBuilder::build) finds.
    pub fn apply<A>(&self, builder: OutboundBuilder<A>) -> Result<OutboundBuilder<A>, ConfigError> {
        let problems = self.problems();
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        Ok(self.configure(builder, &self.policy, true, &mut Vec::new()))
    }

    /// Every problem of these settings, each under its key path.
    fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        self.layer_keys("policy", &self.policy, &mut problems);
        for (key, host) in &self.hosts {
            self.layer_keys(&host_path(key), host, &mut problems);
        }
        same_host("hosts", self.hosts.keys(), &mut problems);
        same_host("host_quota", self.host_quota.keys(), &mut problems);
        same_host(
            "host_fail_on_retryable_status",
            self.host_fail_on_retryable_status.keys(),
            &mut problems,
        );
        if self.hedge.is_some() && self.hedge_marked.is_some() {
            problems.push(ConfigProblem::new(
                "hedge_marked",
                "cannot be set with hedge (set one of them)",
            ));
        }
        let mut add = |problem: ConfigProblem| {
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        };
        // The layer's `build` stops at its first host with a problem, so the layer is built
        // once with `policy`, then once per host with the host's settings as its policy
        // (`policy`'s, then the host's on top, as the layer applies them).
        for (problem, _) in self.built_problems(&self.policy) {
            add(problem);
        }
        for (key, host) in &self.hosts {
            let resolved = host.clone().inherit(&self.policy);
            for (problem, layer) in self.built_problems(&resolved) {
                let field = problem.field().strip_prefix("policy.").unwrap_or_default();
                if layer || !host.sets(field) && self.policy.sets(field) {
                    add(problem);
                } else {
                    let path = format!("{}.{field}", host_path(key));
                    add(ConfigProblem::new(path, problem.message()));
                }
            }
        }
        problems
    }

    /// The problems of building the layer with `policy` as every host's, under their key
    /// paths (a policy's under `policy.`), each with whether it is the layer's own.
    fn built_problems(&self, policy: &PolicyConfig) -> Vec<(ConfigProblem, bool)> {
        let mut found = Vec::new();
        let layer = self.configure(OutboundLayer::builder(), policy, false, &mut found);
        if let Err(error) = layer.build() {
            found.extend(error.problems().iter().cloned());
        }
        found.iter().map(|p| self.layer_problem(p)).collect()
    }

    /// A problem of the layer's build under its key path: the layer's keys as they are (and
    /// `true`), the policy's under `policy.`.
    fn layer_problem(&self, problem: &ConfigProblem) -> (ConfigProblem, bool) {
        let field = problem.field();
        let head = field.split_once('.').map_or(field, |(head, _)| head);
        let (path, layer) = match head {
            "max_attempts" | "breaker" | "budget" => (field.to_owned(), true),
            "hedge" if self.hedge_marked.is_some() => {
                (format!("hedge_marked{}", &field["hedge".len()..]), true)
            }
            "hedge" => (field.to_owned(), true),
            _ => (format!("policy.{field}"), false),
        };
        (ConfigProblem::new(path, problem.message()), layer)
    }

    /// The layer's keys written in the section `path` of a policy.
    fn layer_keys(&self, path: &str, section: &PolicyConfig, problems: &mut Vec<ConfigProblem>) {
        for (key, why) in LAYER_KEYS {
            if section.sets(key) {
                problems.push(ConfigProblem::new(format!("{path}.{key}"), why));
            }
        }
    }

    /// `builder` with these settings, `policy` as every host's, and the host sections when
    /// `hosts`; what cannot be applied goes to `problems`, with the field its own check
    /// names (a breaker or budget that does not build is left out, so that the layer's
    /// `build` reports the policy's problems too).
    fn configure<A>(
        &self,
        mut b: OutboundBuilder<A>,
        policy: &PolicyConfig,
        hosts: bool,
        problems: &mut Vec<ConfigProblem>,
    ) -> OutboundBuilder<A> {
        if let Some(name) = &self.name {
            b = b.name(name.clone());
        }
        if let Some(attempts) = self.max_attempts {
            b = b.max_attempts(attempts);
        }
        if let Some(hosts) = self.max_hosts {
            b = b.max_hosts(hosts);
        }
        if let Some(bytes) = self.replay_limit {
            b = b.replay_limit(bytes);
        }
        if let Some(on) = self.quota {
            b = b.quota(on);
        }
        if let Some(on) = self.fail_on_retryable_status {
            b = b.fail_on_retryable_status(on);
        }
        if let Some(on) = self.metrics_by_host {
            b = b.metrics_by_host(on);
        }
        if let Some(name) = &self.deadline_header {
            b = b.deadline_header(name.clone());
        }
        if let Some(name) = &self.criticality_header {
            b = b.criticality_header(name.clone());
        }
        if let Some(name) = &self.retry_header {
            b = b.retry_header(name.clone());
        }
        match &self.breaker {
            Some(Some(breaker)) => match breaker.builder().and_then(|breaker| {
                breaker.clone().build()?;
                Ok(breaker)
            }) {
                Ok(breaker) => b = b.breaker_per_host(breaker),
                Err(error) => problems.extend(error.problems().iter().cloned()),
            },
            Some(None) => b = b.no_breaker(),
            None => {}
        }
        match &self.budget {
            Some(Some(budget)) => match budget.builder().build() {
                Ok(_) => b = b.budget_per_host(budget.builder()),
                Err(error) => problems.extend(error.problems().iter().cloned()),
            },
            Some(None) => b = b.no_budget(),
            None => {}
        }
        if let Some(hedge) = &self.hedge {
            match hedge.hedge() {
                Ok(hedge) => b = b.hedge(hedge),
                Err(error) => problems.extend(error.problems().iter().cloned()),
            }
        }
        if let Some(hedge) = &self.hedge_marked {
            match hedge.hedge() {
                Ok(hedge) => b = b.hedge_marked(hedge),
                Err(error) => problems.extend(error.problems().iter().cloned()),
            }
        }
        for (key, on) in &self.host_quota {
            b = b.host_quota(key, *on);
        }
        for (key, on) in &self.host_fail_on_retryable_status {
            b = b.host_fail_on_retryable_status(key, *on);
        }
        if !is_empty(policy) {
            match policy.apply(rampart::Policy::builder()) {
                Ok(_) => {
                    let policy = policy.clone();
                    b = b.policy(move |p| applied(&policy, p));
                }
                Err(error) => problems.extend(error.problems().iter().cloned()),
            }
        }
        if hosts {
            for (key, host) in &self.hosts {
                let resolved = host.clone().inherit(policy);
                b = b.host(key, move |p| applied(&resolved, p));
            }
        }
        b
    }

    /// Applies `next` to `layer`, built from these settings: the changed keys of `policy`
    /// and the hosts' sections that [`OutboundLayer::reconfigure`] changes, and
    /// `max_attempts` unless it would stop or start retries, go to `applied` (applied live);
    /// every other changed key to `restart`, under `outbound.`: a key
    /// (`outbound.deadline_header`), a section (`outbound.breaker`), a key of `policy` or a
    /// host's section (`outbound.hosts."api.example:443".adaptive_attempt_timeout`), or an
    /// entry of a host map (`outbound.host_quota."api.example:443"`).
    ///
    /// A live setting follows the file where the layer has what the file gave it, or where
    /// `next` names the setting for that host (in its section or in `policy`); a value the
    /// layer got in code (a [`host`](OutboundBuilder::host) closure, say) is kept otherwise.
    pub(super) fn reload<A: Admit + Clone>(
        &self,
        next: &OutboundConfig,
        layer: &OutboundLayer<A>,
        applied: &mut Vec<String>,
        restart: &mut Vec<String>,
    ) -> Result<(), ConfigError> {
        let mut differs = |key: &str, differs: bool| {
            if differs {
                restart.push(format!("outbound.{key}"));
            }
        };
        differs("name", self.name != next.name);
        differs("max_hosts", self.max_hosts != next.max_hosts);
        differs("replay_limit", self.replay_limit != next.replay_limit);
        differs("quota", self.quota != next.quota);
        differs(
            "fail_on_retryable_status",
            self.fail_on_retryable_status != next.fail_on_retryable_status,
        );
        differs(
            "metrics_by_host",
            self.metrics_by_host != next.metrics_by_host,
        );
        differs(
            "deadline_header",
            self.deadline_header != next.deadline_header,
        );
        differs(
            "criticality_header",
            self.criticality_header != next.criticality_header,
        );
        differs("retry_header", self.retry_header != next.retry_header);
        differs("budget", self.budget != next.budget);
        differs("hedge", self.hedge != next.hedge);
        differs("hedge_marked", self.hedge_marked != next.hedge_marked);
        let mut live = Vec::new();
        section_changes("policy", &self.policy, &next.policy, &mut live, restart);
        let keys: std::collections::BTreeSet<&String> =
            self.hosts.keys().chain(next.hosts.keys()).collect();
        let none = PolicyConfig::default();
        for key in keys {
            let was = self.hosts.get(key).unwrap_or(&none);
            let is = next.hosts.get(key).unwrap_or(&none);
            section_changes(&host_path(key), was, is, &mut live, restart);
        }
        map_changes("host_quota", &self.host_quota, &next.host_quota, restart);
        map_changes(
            "host_fail_on_retryable_status",
            &self.host_fail_on_retryable_status,
            &next.host_fail_on_retryable_status,
            restart,
        );
        // What the files give a layer built from them alone: the layer follows the change
        // from one to the other where it has what the first gave it.
        let (was, is) = (self.build()?.settings(), next.build()?.settings());
        // The breaker's thresholds change live; adding or removing it, or changing its mode,
        // window or seed, needs a restart.
        let breaker = if was.breaker == is.breaker {
            None
        } else if breaker_problems(was.breaker.as_ref(), is.breaker.as_ref()).is_empty() {
            live.insert(0, "outbound.breaker".to_owned());
            Some(is.breaker.clone())
        } else {
            restart.push("outbound.breaker".to_owned());
            None
        };
        let attempts = if was.max_attempts == is.max_attempts {
            None
        } else if (layer.settings().max_attempts > 1) == (is.max_attempts > 1) {
            live.insert(0, "outbound.max_attempts".to_owned());
            Some(is.max_attempts)
        } else {
            // The layer's hosts' budgets and hedges are made with it: see `reconfigure`.
            restart.push("outbound.max_attempts".to_owned());
            None
        };
        if live.is_empty() {
            return Ok(());
        }
        layer
            .reconfigure(|s| {
                if let Some(attempts) = attempts
                    && (s.max_attempts == was.max_attempts || next.max_attempts.is_some())
                {
                    s.max_attempts = attempts;
                }
                if let Some(breaker) = breaker {
                    s.breaker = breaker;
                }
                self.follow(next, &was, &is, s);
            })
            .map_err(|error| {
                let problems = error.problems().iter().map(|problem| {
                    ConfigProblem::new(format!("outbound.{}", problem.field()), problem.message())
                });
                ConfigError::new(problems.collect())
            })?;
        applied.extend(live);
        Ok(())
    }

    /// `running`, the layer's live settings, with the change from `was` to `is`, what the
    /// layer would have from this file and from `next`, where it follows the file.
    fn follow(
        &self,
        next: &OutboundConfig,
        was: &OutboundSettings,
        is: &OutboundSettings,
        running: &mut OutboundSettings,
    ) {
        let before = running.policy.clone();
        follow(&mut running.policy, &was.policy, &is.policy, &next.policy);
        let keys: std::collections::BTreeSet<String> = running
            .hosts
            .keys()
            .chain(is.hosts.keys())
            .cloned()
            .collect();
        for key in keys {
            let named = next
                .hosts
                .iter()
                .find(|(k, _)| HostKey::named(k) == key)
                .map_or_else(
                    || next.policy.clone(),
                    |(_, h)| h.clone().inherit(&next.policy),
                );
            let host = running
                .hosts
                .entry(key.clone())
                .or_insert_with(|| before.clone());
            let was = was.hosts.get(&key).unwrap_or(&was.policy);
            let is = is.hosts.get(&key).unwrap_or(&is.policy);
            follow(host, was, is, &named);
        }
    }
}

/// `running` with each setting that differs from `was` to `is` set as `is` has it, where
/// `running` has it as `was` does or `named` (the file's section) sets it.
fn follow(running: &mut HostSettings, was: &HostSettings, is: &HostSettings, named: &PolicyConfig) {
    macro_rules! follow {
        ($field:ident, $same:expr) => {
            let same = $same;
            if !same(&was.$field, &is.$field)
                && (same(&running.$field, &was.$field) || named.sets(stringify!($field)))
            {
                running.$field = is.$field.clone();
            }
        };
    }
    follow!(total_timeout, |a: &Option<_>, b: &Option<_>| a == b);
    follow!(attempt_timeout, |a: &Option<_>, b: &Option<_>| a == b);
    follow!(min_attempt_time, |a: &std::time::Duration, b: &_| a == b);
    follow!(timeout_mode, |a: &rampart::TimeoutMode, b: &_| a == b);
    // A backoff has no equality (it may be a closure); its description names every setting
    // a file can give it.
    follow!(
        backoff,
        |a: &rampart::backoff::Backoff, b: &rampart::backoff::Backoff| {
            a.to_string() == b.to_string()
        }
    );
}

/// The keys of the section `path` (`policy`, `hosts."api:443"`) that differ from `was` to
/// `is`, under `outbound.`: those a running layer changes to `live`, the others to `restart`.
fn section_changes(
    path: &str,
    was: &PolicyConfig,
    is: &PolicyConfig,
    live: &mut Vec<String>,
    restart: &mut Vec<String>,
) {
    for key in LIVE_KEYS {
        if key_differs(was, is, key) {
            live.push(format!("outbound.{path}.{key}"));
        }
    }
    for key in FIXED_KEYS {
        if key_differs(was, is, key) {
            restart.push(format!("outbound.{path}.{key}"));
        }
    }
}

/// `builder` with `config`'s settings, which were checked when the closure was made (their
/// problems depend on the settings alone, not on the builder).
fn applied(config: &PolicyConfig, builder: rampart::PolicyBuilder) -> rampart::PolicyBuilder {
    config
        .apply(builder)
        .unwrap_or_else(|error| unreachable!("checked before the layer was configured: {error}"))
}

/// Two keys of the map `map` that name the same host (`API:443` and `api:443`, `api` and
/// `api:80`): the builder would keep the later one alone.
fn same_host<'a>(
    map: &str,
    keys: impl Iterator<Item = &'a String>,
    problems: &mut Vec<ConfigProblem>,
) {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for key in keys {
        let host = HostKey::named(key);
        if let Some(first) = seen.get(&host) {
            problems.push(ConfigProblem::new(
                format!("{map}.{key:?}"),
                format!("names the same host as {first:?} ({host})"),
            ));
        } else {
            seen.insert(host, key);
        }
    }
}

/// The entries of the map `map` added, removed or changed in `next`.
fn map_changes<T: PartialEq>(
    map: &str,
    was: &BTreeMap<String, T>,
    is: &BTreeMap<String, T>,
    changed: &mut Vec<String>,
) {
    let keys: std::collections::BTreeSet<&String> = was.keys().chain(is.keys()).collect();
    for key in keys {
        if was.get(key) != is.get(key) {
            changed.push(format!("outbound.{map}.{key:?}"));
        }
    }
}
