//! What chaos injects: the [`InjectionKind`]s (fault, latency, outcome) and the
//! [`Injection`] each one reports.

use std::fmt;

/// What an injection did to an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InjectionKind {
    /// The attempt returned the injected error.
    Fault,
    /// The attempt was delayed before it went on.
    Latency,
    /// The attempt returned the injected value.
    Outcome,
}

impl InjectionKind {
    /// A stable lowercase name for logs and labels: `fault`, `latency`, `outcome`.
    pub const fn as_str(self) -> &'static str {
        match self {
            InjectionKind::Fault => "fault",
            InjectionKind::Latency => "latency",
            InjectionKind::Outcome => "outcome",
        }
    }

    pub(super) const fn index(self) -> usize {
        self as usize
    }

    pub(super) const fn rate_field(self) -> &'static str {
        match self {
            InjectionKind::Fault => "chaos.fault_rate",
            InjectionKind::Latency => "chaos.latency_rate",
            InjectionKind::Outcome => "chaos.outcome_rate",
        }
    }
}

impl fmt::Display for InjectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One injection, as [`on_inject`](super::ChaosBuilder::on_inject) sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Injection {
    /// What was injected.
    pub kind: InjectionKind,
    /// The call's index: the `n`th call this chaos decided for, from 0.
    pub call: u64,
    /// The attempt's number within its call (1 for the first).
    pub attempt: u32,
}
