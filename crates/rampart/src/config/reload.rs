//! [`Policies::reload`]: a changed file applied to the policies already built from it, as far
//! as a running policy can change, and the rest named for a restart.

use std::collections::{BTreeMap, BTreeSet};

use super::{Policies, PolicyConfig};
use crate::admit::Admit;
use crate::error::{ConfigError, ConfigProblem};
use crate::policy::Policy;

impl PolicyConfig {
    /// Whether the settings [`Policy::reconfigure`] replaces are the same in both.
    fn same_live_settings(&self, other: &PolicyConfig) -> bool {
        self.max_attempts == other.max_attempts
            && self.total_timeout == other.total_timeout
            && self.attempt_timeout == other.attempt_timeout
            && self.min_attempt_time == other.min_attempt_time
            && self.timeout_mode == other.timeout_mode
            && self.backoff == other.backoff
    }
}

impl Policies {
    /// Applies the file `next` to `built`, the policies built from this file (by name), as far
    /// as running policies can change, and returns the key paths of what changed but needs
    /// the policy rebuilt (a restart), in name order.
    ///
    /// What changes live, every clone of the policy seeing it at once (calls already running
    /// finish with the settings they started with): the settings of
    /// [`Policy::reconfigure`] (`max_attempts`, `total_timeout`, `attempt_timeout`,
    /// `min_attempt_time`, `timeout_mode`, `backoff`), and the breaker's thresholds through
    /// [`Breaker::reconfigure`](crate::Breaker::reconfigure), its state kept. What needs a
    /// restart: a policy added or removed (`policies.<name>`), a changed `budget`, `hedge`,
    /// `adaptive_attempt_timeout`, `use_ambient_deadline` or `use_ambient_criticality`, a breaker
    /// added, removed, or changed in its mode, window or seed (`policies.<name>.breaker`), and
    /// retries for a policy built with one attempt and so without a retry budget
    /// (`policies.<name>.max_attempts`, the other live settings still applied).
    ///
    /// `next` is first checked whole, as [`build`](Self::build) checks it: an invalid file
    /// changes nothing. Keep `next` as the file once it is applied.
    ///
    /// ```
    /// use rampart::config::Policies;
    ///
    /// let mut file: Policies = toml::from_str("[policies.prices]\nmax_attempts = 2\n")?;
    /// let policies = file.build()?;
    ///
    /// let next: Policies = toml::from_str(r#"
    ///     [policies.prices]
    ///     max_attempts = 4
    ///     hedge = { delay = "50ms" }
    /// "#)?;
    /// let restart = file.reload(&next, &policies)?;
    /// assert_eq!(policies["prices"].max_attempts(), 4);
    /// assert_eq!(restart, ["policies.prices.hedge"]);
    /// file = next;
    /// # drop(file);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Every problem of `next`, under its key path, as [`build`](Self::build) reports them
    /// (nothing is applied then); or, rarely, an update a running policy refused after the
    /// others were applied (each policy's update is applied whole or not at all).
    pub fn reload<C, A: Admit>(
        &self,
        next: &Policies,
        built: &BTreeMap<String, Policy<C, A>>,
    ) -> Result<Vec<String>, ConfigError> {
        let fresh = next.build()?;
        let mut restart = Vec::new();
        let mut problems = Vec::new();
        let names: BTreeSet<&String> = built.keys().chain(next.policies.keys()).collect();
        for name in names {
            let (Some(policy), Some(wanted)) = (built.get(name), fresh.get(name)) else {
                restart.push(format!("policies.{name}"));
                continue;
            };
            let old = self.resolved(name).unwrap_or_default();
            let new = next.resolved(name).unwrap_or_default();
            let path = |key: &str| format!("policies.{name}.{key}");
            let fixed = [
                (
                    "use_ambient_deadline",
                    old.use_ambient_deadline != new.use_ambient_deadline,
                ),
                (
                    "use_ambient_criticality",
                    old.use_ambient_criticality != new.use_ambient_criticality,
                ),
                ("budget", old.budget != new.budget),
                ("hedge", old.hedge != new.hedge),
                (
                    "adaptive_attempt_timeout",
                    old.adaptive_attempt_timeout != new.adaptive_attempt_timeout,
                ),
            ];
            restart.extend(
                fixed
                    .iter()
                    .filter(|(_, changed)| *changed)
                    .map(|(key, _)| path(key)),
            );
            if !old.same_live_settings(&new) {
                let mut settings = wanted.settings();
                if settings.max_attempts > 1 && policy.budget().is_none() && old.budget.is_none() {
                    // Built with one attempt and the automatic budget: it has none to retry on.
                    settings.max_attempts = policy.max_attempts();
                    restart.push(path("max_attempts"));
                }
                if let Err(error) = policy.reconfigure(|s| *s = settings) {
                    problems.extend(prefixed(name, &error));
                }
            }
            let (was, is) = (old.breaker.flatten(), new.breaker.flatten());
            if was != is {
                let applied = match (&is, policy.breaker()) {
                    (Some(config), Some(breaker)) if was.is_some() => breaker
                        .reconfigure(|_| config.to_builder(&mut Vec::new()))
                        .is_ok(),
                    _ => false,
                };
                if !applied {
                    restart.push(path("breaker"));
                }
            }
        }
        if problems.is_empty() {
            Ok(restart)
        } else {
            Err(ConfigError::new(problems))
        }
    }
}

fn prefixed<'a>(name: &'a str, error: &'a ConfigError) -> impl Iterator<Item = ConfigProblem> + 'a {
    error.problems().iter().map(move |problem| {
        ConfigProblem::new(
            format!("policies.{name}.{}", problem.field()),
            problem.message(),
        )
    })
}
