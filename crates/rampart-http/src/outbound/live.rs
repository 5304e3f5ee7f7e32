//! Changing the layer's policy settings while it runs: [`OutboundSettings`] and
//! [`OutboundLayer::reconfigure`], checked by the code that checks
//! [`OutboundBuilder::build`], then applied to the settings new hosts get and to every host's
//! policies at once with [`Policy::reconfigure`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rampart::admit::Admit;
use rampart::backoff::Backoff;
use rampart::breaker::BreakerBuilder;
use rampart::{ConfigError, ConfigProblem, Policy, PolicyBuilder, PolicySettings, TimeoutMode};

#[cfg(doc)]
use super::OutboundBuilder;
use super::hosts::HostKey;
use super::{Engine, Host, OutboundLayer};

/// The settings of an [`OutboundLayer`]'s policies that [`OutboundLayer::reconfigure`] can
/// replace while the layer serves requests; read the current ones with
/// [`OutboundLayer::settings`], one host's policies' with [`OutboundLayer::host_settings`].
///
/// `policy` is what every host's policies run with unless the host has settings of its own in
/// `hosts`; the attempts are the layer's, for every host. At build they are what
/// [`max_attempts`](OutboundBuilder::max_attempts), [`policy`](OutboundBuilder::policy) and
/// [`host`](OutboundBuilder::host) set (each `host` a key of `hosts`), the layer's
/// [`DEFAULT_MIN_ATTEMPT_TIME`](super::DEFAULT_MIN_ATTEMPT_TIME) included.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OutboundSettings {
    /// Attempts per replayable request, the first included (a request sent once makes one
    /// whatever this says). It stays above 1 on a layer built with more than one attempt, and
    /// 1 on a layer built with one: see [`OutboundLayer::reconfigure`].
    pub max_attempts: u32,
    /// The settings of every host without its own in `hosts`.
    pub policy: HostSettings,
    /// Hosts with settings of their own, by key (`host:port`, read as
    /// [`host`](OutboundBuilder::host) reads it). A host left out runs with `policy`. Each
    /// entry is the host's whole settings, not changes on top of `policy`'s: a change to
    /// `policy` does not reach the hosts here (change theirs too, or remove them to have
    /// them follow `policy`).
    pub hosts: BTreeMap<String, HostSettings>,
    /// Each host's circuit breaker's settings, the same for every host: what
    /// [`breaker_per_host`](OutboundBuilder::breaker_per_host) set, `None` on a layer built with
    /// [`no_breaker`](OutboundBuilder::no_breaker). A change reaches the breaker of every host
    /// in the table through [`Breaker::reconfigure`](rampart::Breaker::reconfigure), its
    /// state kept, and the breakers of hosts first seen later. A running breaker keeps its
    /// mode (consecutive or ratio), its ratio window and its seed, and a layer keeps having a
    /// breaker or not: an update that changes one of them is refused (build the layer again).
    ///
    /// ```
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::new();
    /// layer.reconfigure(|s| {
    ///     // The default breaker opens when every call of 10 s failed; at 80 % from now on.
    ///     s.breaker = s.breaker.take().map(|b| {
    ///         b.failure_ratio(0.8, std::time::Duration::from_secs(10), 100)
    ///     });
    /// })?;
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    pub breaker: Option<BreakerBuilder>,
}

/// The settings of one host's policies that can change live, besides the layer's attempts:
/// the [`PolicySettings`] fields of the same names.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HostSettings {
    /// The bound on the whole call, backoffs included; `None`: no bound.
    pub total_timeout: Option<Duration>,
    /// The bound on each attempt; `None`: none beyond the deadline.
    pub attempt_timeout: Option<Duration>,
    /// The least time a retry must have left before the deadline to be sent.
    pub min_attempt_time: Duration,
    /// What happens to an attempt at its ceiling.
    pub timeout_mode: TimeoutMode,
    /// The wait between attempts.
    pub backoff: Backoff,
}

impl HostSettings {
    /// The settings of `settings` that are a host's.
    pub(super) fn of(settings: &PolicySettings) -> HostSettings {
        HostSettings {
            total_timeout: settings.total_timeout,
            attempt_timeout: settings.attempt_timeout,
            min_attempt_time: settings.min_attempt_time,
            timeout_mode: settings.timeout_mode,
            backoff: settings.backoff.clone(),
        }
    }

    /// `builder` with these settings.
    pub(super) fn apply<C, A>(&self, builder: PolicyBuilder<C, A>) -> PolicyBuilder<C, A> {
        let builder = match self.total_timeout {
            Some(timeout) => builder.total_timeout(timeout),
            None => builder.no_total_timeout(),
        };
        let builder = match self.attempt_timeout {
            Some(timeout) => builder.attempt_timeout(timeout),
            None => builder.no_attempt_timeout(),
        };
        builder
            .min_attempt_time(self.min_attempt_time)
            .timeout_mode(self.timeout_mode)
            .backoff(self.backoff.clone())
    }

    /// `settings` with these, and `attempts`.
    fn write(&self, settings: &mut PolicySettings, attempts: u32) {
        settings.max_attempts = attempts;
        settings.total_timeout = self.total_timeout;
        settings.attempt_timeout = self.attempt_timeout;
        settings.min_attempt_time = self.min_attempt_time;
        settings.timeout_mode = self.timeout_mode;
        settings.backoff = self.backoff.clone();
    }
}

impl OutboundSettings {
    /// The settings of host `key` (a key as the layer makes it).
    pub(super) fn of(&self, key: &str) -> &HostSettings {
        self.hosts.get(key).unwrap_or(&self.policy)
    }
}

/// The settings new hosts are built with, and what serializes updates.
pub(super) struct Live {
    /// The settings, with the number of updates that made them.
    current: Mutex<(u64, Arc<OutboundSettings>)>,
    /// Held by an update from its check to its last host, and by a host made during one.
    updating: Mutex<()>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Live {
    pub(super) fn new(settings: OutboundSettings) -> Live {
        Live {
            current: Mutex::new((0, Arc::new(settings))),
            updating: Mutex::new(()),
        }
    }

    /// The settings now, and their generation.
    pub(super) fn current(&self) -> (u64, Arc<OutboundSettings>) {
        let current = lock(&self.current);
        (current.0, Arc::clone(&current.1))
    }
}

impl<A: Admit + Clone> Engine<A> {
    /// Brings `host`, made with the settings of `generation`, up to date if an update was
    /// stored while it was made: the update may have gone through the table before the host
    /// was in it.
    pub(super) fn made(&self, host: &Host<A>, generation: u64) {
        let live = &self.live;
        if live.current().0 == generation {
            return;
        }
        let _one_at_a_time = lock(&live.updating);
        let (_, settings) = live.current();
        // Checked when the update was stored; a refusal here is the policy's update limit,
        // which the next update reports.
        let _ = apply(host, &settings, settings.breaker.as_ref());
    }

    fn reconfigure(&self, update: impl FnOnce(&mut OutboundSettings)) -> Result<(), ConfigError> {
        let live = &self.live;
        let _one_at_a_time = lock(&live.updating);
        let (generation, current) = live.current();
        let mut next = (*current).clone();
        update(&mut next);
        let next = self.checked(&current, next)?;
        *lock(&live.current) = (generation + 1, Arc::clone(&next));
        // Only a change of the layer's breaker settings reaches the hosts' breakers: one
        // host's breaker reconfigured on its own keeps its settings through other updates.
        let breaker = match current.breaker != next.breaker {
            true => next.breaker.as_ref(),
            false => None,
        };
        let mut problems = Vec::new();
        for host in self.hosts.all() {
            if let Err(error) = apply(&host, &next, breaker) {
                for problem in error.problems() {
                    if !problems.contains(problem) {
                        problems.push(problem.clone());
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::new(problems))
        }
    }

    /// `next` with its host keys in the layer's form, if the layer's hosts can run with it:
    /// every problem, each under its path in [`OutboundSettings`] (`max_attempts`,
    /// `policy.attempt_timeout`, `hosts."api:443".total_timeout`, `breaker.jitter`), the
    /// breaker's as an update of `current`'s.
    fn checked(
        &self,
        current: &OutboundSettings,
        next: OutboundSettings,
    ) -> Result<Arc<OutboundSettings>, ConfigError> {
        let mut problems = breaker_problems(current.breaker.as_ref(), next.breaker.as_ref());
        let breaker_refused = !problems.is_empty();
        let is = next.max_attempts;
        if self.factory.retries() && is == 1 {
            problems.push(ConfigProblem::new(
                "max_attempts",
                "must stay above 1 (was 1): the layer was built to retry, and each host's retry budget and hedge are made with it; build the layer again to send every request once",
            ));
        } else if !self.factory.retries() && is > 1 {
            problems.push(ConfigProblem::new(
                "max_attempts",
                format!(
                    "must stay 1 (was {is}): the layer was built with one attempt, so its hosts have no retry budget; build the layer again with more attempts to retry"
                ),
            ));
        }
        let mut hosts = BTreeMap::new();
        let mut named: BTreeMap<String, &str> = BTreeMap::new();
        for (key, settings) in &next.hosts {
            let host = HostKey::named(key);
            if let Some(first) = named.get(&host) {
                problems.push(ConfigProblem::new(
                    format!("hosts.{key:?}"),
                    format!("names the same host as {first:?} ({host})"),
                ));
                continue;
            }
            named.insert(host.clone(), key);
            hosts.insert(host, settings.clone());
        }
        let next = OutboundSettings {
            max_attempts: next.max_attempts,
            policy: next.policy,
            hosts,
            breaker: next.breaker,
        };
        // The layer's problems as they are, a policy's under the section it came from: the
        // hosts' policies built as `build` builds them, and dropped.
        let mut add = |problem: ConfigProblem, section: &str| {
            let field = problem.field();
            let problem = if matches!(field.split('.').next(), Some("max_attempts" | "breaker")) {
                problem
            } else {
                ConfigProblem::new(format!("{section}.{field}"), problem.message())
            };
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        };
        // With a breaker they can take when `next`'s is refused, so that the policies' own
        // problems are reported beside the breaker's.
        let tried = match breaker_refused {
            true => std::borrow::Cow::Owned(OutboundSettings {
                breaker: current.breaker.clone(),
                ..next.clone()
            }),
            false => std::borrow::Cow::Borrowed(&next),
        };
        problems_with(self, "validation:0", &tried, &mut |p| add(p, "policy"));
        for (key, named) in &named {
            let section = format!("hosts.{named:?}");
            problems_with(self, key, &tried, &mut |p| add(p, &section));
        }
        drop(tried);
        if problems.is_empty() {
            Ok(Arc::new(next))
        } else {
            Err(ConfigError::new(problems))
        }
    }
}

/// The problems of replacing the layer's breaker settings `was` with `is`: a breaker added or
/// removed, or an update a running breaker refuses (checked on a breaker made for it, as every
/// host's refuses it), each under `breaker`.
pub(crate) fn breaker_problems(
    was: Option<&BreakerBuilder>,
    is: Option<&BreakerBuilder>,
) -> Vec<ConfigProblem> {
    match (was, is) {
        (None, None) => Vec::new(),
        (Some(was), Some(is)) if was == is => Vec::new(),
        (Some(was), Some(is)) => match was.clone().build() {
            Ok(running) => running
                .reconfigure(|_| is.clone())
                .err()
                .map_or_else(Vec::new, |error| error.problems().to_vec()),
            // The layer's own settings build; a layer never holds others.
            Err(error) => error.problems().to_vec(),
        },
        (Some(_), None) => vec![ConfigProblem::new(
            "breaker",
            "cannot be removed live (was none): each host's policies hold their breaker; build the layer again with `no_breaker`",
        )],
        (None, Some(_)) => vec![ConfigProblem::new(
            "breaker",
            "cannot be added live (the layer was built with `no_breaker`): build the layer again with a breaker",
        )],
    }
}

/// Reports the problems of building host `key`'s policies with `settings`.
fn problems_with<A: Admit + Clone>(
    engine: &Engine<A>,
    key: &str,
    settings: &OutboundSettings,
    report: &mut dyn FnMut(ConfigProblem),
) {
    if let Err(error) = engine.factory.build(key, &engine.edge, Some(settings)) {
        error.problems().iter().cloned().for_each(report);
    }
}

/// Gives `host`'s policies its settings in `settings`, and its breaker `breaker`'s.
fn apply<A: Admit>(
    host: &Host<A>,
    settings: &OutboundSettings,
    breaker: Option<&BreakerBuilder>,
) -> Result<(), ConfigError> {
    let own = settings.of(&host.key);
    let attempts = settings.max_attempts;
    let mut problems = Vec::new();
    let mut update = |policy: &Policy<_, A>, attempts: u32| {
        if let Err(error) = policy.reconfigure(|s| own.write(s, attempts)) {
            problems.extend(error.problems().iter().cloned());
        }
    };
    update(&host.full, attempts);
    if host.retries {
        // Otherwise `once` is `full` itself.
        update(&host.once, 1);
    }
    if let Some(hedged) = &host.hedged {
        update(hedged, attempts);
    }
    // The host's one breaker, shared by its policies.
    if let (Some(breaker), Some(wanted)) = (host.full.breaker(), breaker)
        && let Err(error) = breaker.reconfigure(|_| wanted.clone())
    {
        problems.extend(error.problems().iter().cloned());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::new(problems))
    }
}

impl<A: Admit + Clone> OutboundLayer<A> {
    /// Replaces the layer's [live settings](OutboundSettings): `update` edits a copy of the
    /// current ones, which is checked as [`OutboundBuilder::build`] checks the layer (each
    /// host's policies built with them, and dropped) and, if valid, applied at once to the
    /// hosts first seen from now on and to every host in the table, each of its policies
    /// (the one of replayable requests, the one-attempt one, the one of requests marked
    /// [`Hedged`](crate::Hedged)) through [`Policy::reconfigure`], and its breaker, when the
    /// breaker settings changed, through [`Breaker::reconfigure`](rampart::Breaker::reconfigure).
    /// A refused update changes nothing, and its [`ConfigError`] names every problem under its
    /// path in [`OutboundSettings`] (`max_attempts`, `policy.attempt_timeout`,
    /// `hosts."api.example:443".total_timeout`, `breaker.consecutive_failures`).
    ///
    /// As for a policy's update: requests already running keep the settings they started
    /// with, to their end; requests starting after `reconfigure` returns use the new ones;
    /// what the hosts accumulated is kept (breaker states, budget tokens, latency
    /// estimates). Each host's policies report it as
    /// [`Event::Reconfigured`](rampart::Event::Reconfigured). Updates take a lock among
    /// themselves; a request never waits for one, except the first request to a host first
    /// seen while an update runs, which waits for its end and runs with its settings. Meant
    /// for an operator's or a config file's pace: each update keeps the settings it replaced
    /// allocated, in each host's policies, until they are dropped (see
    /// [`Policy::reconfigure`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::builder()
    ///     .policy(|p| p.total_timeout(Duration::from_secs(2)))
    ///     .host("reports.internal", |p| p.total_timeout(Duration::from_secs(30)))
    ///     .build()?;
    /// layer.reconfigure(|s| {
    ///     s.max_attempts = 4;
    ///     s.policy.attempt_timeout = Some(Duration::from_millis(250));
    ///     if let Some(reports) = s.hosts.get_mut("reports.internal:80") {
    ///         reports.total_timeout = Some(Duration::from_secs(60));
    ///     }
    /// })?;
    /// assert_eq!(layer.settings().max_attempts, 4);
    ///
    /// let refused = layer.reconfigure(|s| s.policy.total_timeout = Some(Duration::ZERO));
    /// assert_eq!(
    ///     refused.unwrap_err().to_string(),
    ///     "policy.total_timeout must be positive (was 0ns)"
    /// );
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    ///
    /// # What cannot change live
    ///
    /// Only what [`Policy::reconfigure`] changes is here. The rest is fixed at
    /// [`build`](OutboundBuilder::build), and changes by building the layer again:
    ///
    /// - Whether the layer retries at all: `max_attempts` stays above 1 on a layer built to
    ///   retry, and 1 on one built with one attempt. A host's retry budget and hedging policy
    ///   are made with the host, only when the layer retries, and a host's requests are sent
    ///   once on a layer that does not.
    /// - Whether the hosts have a breaker, and its mode, ratio window and seed (see
    ///   [`OutboundSettings::breaker`]; its thresholds and durations change live, for every
    ///   host). One host's breaker alone changes with [`breaker`](Self::breaker)`(key)` and
    ///   [`Breaker::reconfigure`](rampart::Breaker::reconfigure), and keeps those settings
    ///   until an update changes the layer's breaker settings.
    /// - Each host's retry budget and the hedge: one of each per host, made when the host is
    ///   first seen and shared by its policies, which hold them.
    /// - The policies' other fixed parts: name, classifier, admission, adaptive attempt
    ///   timeout, clock, listeners and hooks (see [`PolicySettings`]).
    /// - What the services read besides the policies, with no lock per request: the header
    ///   names, `replay_limit`, `quota`, `fail_on_retryable_status` and `metrics_by_host`; and
    ///   `max_hosts`, the capacity of the host table.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every problem of the updated settings (nothing is applied);
    /// or, after 2^31 - 1 updates of a host's policy, `reconfigure`, the hosts whose
    /// policies took it updated.
    pub fn reconfigure(
        &self,
        update: impl FnOnce(&mut OutboundSettings),
    ) -> Result<(), ConfigError> {
        self.engine.reconfigure(update)
    }
}

impl<A> OutboundLayer<A> {
    /// The layer's live settings now: those of the hosts first seen from now on, which every
    /// host in the table runs with too (see [`reconfigure`](Self::reconfigure)).
    pub fn settings(&self) -> OutboundSettings {
        (*self.engine.live.current().1).clone()
    }

    /// The settings of the policy that runs host `key`'s replayable requests (`host:port`,
    /// see the [module docs](super#host-keys)), if the table has that host: what its next
    /// request runs with. Looking it up does not mark the host used.
    pub fn host_settings(&self, key: &str) -> Option<PolicySettings> {
        self.engine
            .hosts
            .peek(&HostKey::named(key))
            .map(|host| host.full.settings())
    }
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
