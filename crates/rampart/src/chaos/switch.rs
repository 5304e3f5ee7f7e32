//! [`ChaosSwitch`]: turns a chaos on and off and changes its rates while calls run.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Controls, InjectionKind};
use crate::error::{ConfigError, ConfigProblem};

/// Turns a [`Chaos`](super::Chaos) on and off and changes its rates, from any thread, while
/// calls run.
///
/// Cheap to clone (one `Arc`); every clone, and every clone of the chaos, sees the same
/// position and rates. Changes take effect at the next attempt to start.
#[derive(Clone)]
pub struct ChaosSwitch {
    pub(super) controls: Arc<Controls>,
}

impl ChaosSwitch {
    /// Turns injection on.
    pub fn enable(&self) {
        self.set_enabled(true);
    }

    /// Turns injection off: attempts then run their work untouched.
    pub fn disable(&self) {
        self.set_enabled(false);
    }

    /// Turns injection on or off.
    pub fn set_enabled(&self, enabled: bool) {
        self.controls.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Whether injection is on.
    pub fn is_enabled(&self) -> bool {
        self.controls.enabled.load(Ordering::Relaxed)
    }

    /// The rate of `kind` now.
    pub fn rate(&self, kind: InjectionKind) -> f64 {
        self.controls.rate(kind)
    }

    /// Sets the rate of `kind`, in `[0, 1]`.
    ///
    /// # Errors
    ///
    /// A rate outside `[0, 1]` (or NaN) is refused with a [`ConfigError`] naming the field and
    /// the value, and the rate is left as it was.
    pub fn set_rate(&self, kind: InjectionKind, rate: f64) -> Result<(), ConfigError> {
        if let Some(problem) = check_rate(kind, rate) {
            return Err(ConfigError::new(vec![problem]));
        }
        self.controls.rates[kind.index()].store(rate.to_bits(), Ordering::Relaxed);
        Ok(())
    }
}

impl fmt::Debug for ChaosSwitch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChaosSwitch")
            .field("enabled", &self.is_enabled())
            .field("fault_rate", &self.rate(InjectionKind::Fault))
            .field("latency_rate", &self.rate(InjectionKind::Latency))
            .field("outcome_rate", &self.rate(InjectionKind::Outcome))
            .finish()
    }
}

pub(super) fn check_rate(kind: InjectionKind, rate: f64) -> Option<ConfigProblem> {
    if (0.0..=1.0).contains(&rate) {
        return None;
    }
    Some(ConfigProblem::new(
        kind.rate_field(),
        format!("must be between 0 and 1 (was {rate})"),
    ))
}
