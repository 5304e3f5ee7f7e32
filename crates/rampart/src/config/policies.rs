//! [`Policies`]: a file of named policies and their `[defaults]`, built into policies with
//! every problem reported at once under its key path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::PolicyConfig;
use crate::admit::Admit;
use crate::error::{ConfigError, ConfigProblem};
use crate::policy::{Policy, PolicyBuilder};

/// A file of named policies: one section per dependency under `policies`, each inheriting
/// every setting it leaves out from `defaults` (see [`PolicyConfig::inherit`] for how sections
/// are inherited). See the [module docs](super) for a full file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Policies {
    /// What every named policy inherits unless it sets its own.
    #[serde(default, skip_serializing_if = "PolicyConfig::is_empty")]
    pub defaults: PolicyConfig,
    /// The policies by name (the name each is built with).
    #[serde(default)]
    pub policies: BTreeMap<String, PolicyConfig>,
}

impl PolicyConfig {
    fn is_empty(&self) -> bool {
        *self == PolicyConfig::default()
    }
}

impl Policies {
    /// The settings of the policy `name` with what it inherits from `defaults`; `None` if the
    /// file has no such policy.
    pub fn resolved(&self, name: &str) -> Option<PolicyConfig> {
        let own = self.policies.get(name)?;
        Some(own.clone().inherit(&self.defaults))
    }

    /// Builds every policy of the file, by name, each on a default [`Policy::builder`] named
    /// after its section.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing the problems of every policy at once, each under its key path
    /// (`policies.prices.attempt_timeout must be positive (was 0ns)`); a problem with a setting
    /// inherited from `[defaults]` is named once, under `defaults.`.
    pub fn build(&self) -> Result<BTreeMap<String, Policy>, ConfigError> {
        let mut built = BTreeMap::new();
        let mut problems = Vec::new();
        // Each policy of the file is built once, here: a policy per name, not per call.
        for name in self.policies.keys() {
            match self.get(name) {
                Ok(policy) => {
                    built.insert(name.clone(), policy);
                }
                Err(error) => {
                    for problem in error.problems() {
                        if !problems.contains(problem) {
                            problems.push(problem.clone());
                        }
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(built)
        } else {
            Err(ConfigError::new(problems))
        }
    }

    /// Builds the policy `name` on a default [`Policy::builder`].
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `policies.<name>` when the file has no such policy, or listing
    /// every problem of its settings under their key paths.
    pub fn get(&self, name: &str) -> Result<Policy, ConfigError> {
        self.get_with(name, Policy::builder())
    }

    /// Builds the policy `name` on `builder`, which brings what has no configuration form (a
    /// classifier, an admission component, a clock, listeners and hooks); the policy is named
    /// `name`, and each setting of the file replaces the builder's (see
    /// [`PolicyConfig::build`]).
    ///
    /// ```
    /// use rampart::{IoErrors, Policy};
    /// use rampart::config::Policies;
    ///
    /// let file: Policies = toml::from_str(r#"
    ///     [policies.disk]
    ///     max_attempts = 2
    /// "#)?;
    /// let policy = file.get_with("disk", Policy::builder().classifier(IoErrors))?;
    /// assert_eq!(policy.max_attempts(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub fn get_with<C, A: Admit>(
        &self,
        name: &str,
        builder: PolicyBuilder<C, A>,
    ) -> Result<Policy<C, A>, ConfigError> {
        let Some(own) = self.policies.get(name) else {
            let names: Vec<&str> = self.policies.keys().map(String::as_str).collect();
            return Err(ConfigError::new(vec![ConfigProblem::new(
                format!("policies.{name}"),
                format!("is not in the file (it has {})", names.join(", ")),
            )]));
        };
        let config = own.clone().inherit(&self.defaults);
        config.build(builder.name(name)).map_err(|error| {
            let problems = error.problems().iter().map(|problem| {
                let field = problem.field();
                let path = if !own.sets(field) && self.defaults.sets(field) {
                    format!("defaults.{field}")
                } else {
                    format!("policies.{name}.{field}")
                };
                ConfigProblem::new(path, problem.message())
            });
            ConfigError::new(problems.collect())
        })
    }
}
