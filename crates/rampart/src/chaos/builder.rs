//! [`ChaosBuilder`]: what a chaos injects and how often, checked when built.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use super::switch::check_rate;
use super::{Chaos, Controls, Hook, Injection, InjectionKind, Inner, Make};
use crate::error::ConfigError;

/// Builds a [`Chaos`]; see the [defaults](super).
#[must_use = "a builder does nothing until `build` is called"]
pub struct ChaosBuilder<T, E> {
    fault: Option<(f64, Make<E>)>,
    latency: Option<(f64, Duration)>,
    outcome: Option<(f64, Make<T>)>,
    seed: Option<u64>,
    enabled: bool,
    on_inject: Option<Hook>,
}

impl<T, E> ChaosBuilder<T, E> {
    /// A builder that injects nothing, as [`Chaos::builder`] gives it.
    pub(super) fn new() -> Self {
        ChaosBuilder {
            fault: None,
            latency: None,
            outcome: None,
            seed: None,
            enabled: true,
            on_inject: None,
        }
    }

    /// A share `rate` of attempts, in `[0, 1]`, return `Err(make())` without running the work.
    pub fn fault(mut self, rate: f64, make: impl Fn() -> E + Send + Sync + 'static) -> Self {
        self.fault = Some((rate, Box::new(make)));
        self
    }

    /// A share `rate` of attempts, in `[0, 1]`, sleep `delay` on the policy's clock before
    /// they go on (to the work, or to an injected answer).
    pub fn latency(mut self, rate: f64, delay: Duration) -> Self {
        self.latency = Some((rate, delay));
        self
    }

    /// A share `rate` of attempts, in `[0, 1]`, return `Ok(make())` without running the work.
    pub fn outcome(mut self, rate: f64, make: impl Fn() -> T + Send + Sync + 'static) -> Self {
        self.outcome = Some((rate, Box::new(make)));
        self
    }

    /// The seed of every decision: the same seed, the same injections (see
    /// [determinism](super#determinism)). Default: drawn at random when built.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Whether injection starts on (default `true`); the [`ChaosSwitch`](super::ChaosSwitch)
    /// changes it later.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Called synchronously with each [`Injection`], when the attempt that gets it starts.
    /// Keep it short: it runs on the call's task.
    pub fn on_inject(mut self, hook: impl Fn(Injection) + Send + Sync + 'static) -> Self {
        self.on_inject = Some(Box::new(hook));
        self
    }

    /// The chaos, or every invalid rate at once.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] with one problem per rate outside `[0, 1]` (or NaN), each naming the
    /// kind's field and the value.
    pub fn build(self) -> Result<Chaos<T, E>, ConfigError> {
        let ChaosBuilder {
            fault,
            latency,
            outcome,
            seed,
            enabled,
            on_inject,
        } = self;
        let rates = [
            (InjectionKind::Fault, fault.as_ref().map(|(rate, _)| *rate)),
            (InjectionKind::Latency, latency.map(|(rate, _)| rate)),
            (
                InjectionKind::Outcome,
                outcome.as_ref().map(|(rate, _)| *rate),
            ),
        ];
        let problems: Vec<_> = rates
            .iter()
            .filter_map(|(kind, rate)| rate.and_then(|rate| check_rate(*kind, rate)))
            .collect();
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        let bits = |kind: InjectionKind| {
            let rate = rates[kind.index()].1.unwrap_or(0.0);
            AtomicU64::new(rate.to_bits())
        };
        let controls = Controls {
            enabled: AtomicBool::new(enabled),
            rates: [
                bits(InjectionKind::Fault),
                bits(InjectionKind::Latency),
                bits(InjectionKind::Outcome),
            ],
        };
        Ok(Chaos {
            inner: Arc::new(Inner {
                controls: Arc::new(controls),
                seed: seed.unwrap_or_else(|| fastrand::u64(..)),
                calls: AtomicU64::new(0),
                fault: fault.map(|(_, make)| make),
                latency: latency.map(|(_, delay)| delay),
                outcome: outcome.map(|(_, make)| make),
                on_inject,
                injected: Default::default(),
            }),
        })
    }
}

impl<T, E> fmt::Debug for ChaosBuilder<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChaosBuilder")
            .field("fault_rate", &self.fault.as_ref().map(|(rate, _)| rate))
            .field("latency", &self.latency)
            .field("outcome_rate", &self.outcome.as_ref().map(|(rate, _)| rate))
            .field("seed", &self.seed)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}
