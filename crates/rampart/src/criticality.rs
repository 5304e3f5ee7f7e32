//! Criticality: how much a request matters, so that overload sheds the backfill before the
//! checkout.
//!
//! Four levels, ordered: `Sheddable < SheddablePlus < Critical < CriticalPlus`. An unlabeled
//! call is [`Critical`](Criticality::Critical), never sheddable. A level crosses process edges
//! as its wire name, and the inbound parser is strict: the four names, case-insensitively, and
//! nothing else; `CriticalPlus` from the wire is clamped to `Critical`, so the top level is
//! reachable only by local code (a caller cannot escalate itself past everyone else).
//!
//! ```
//! use rampart::Criticality;
//!
//! assert_eq!(Criticality::parse_inbound("sheddable"), Some(Criticality::Sheddable));
//! assert_eq!(Criticality::parse_inbound("CriticalPlus"), Some(Criticality::Critical));
//! assert_eq!(Criticality::parse_inbound(" Sheddable"), None);
//! assert_eq!(Criticality::from_inbound(Some("urgent")), Criticality::Critical);
//! assert!(Criticality::Sheddable < Criticality::CriticalPlus);
//! assert_eq!(Criticality::SheddablePlus.to_string(), "SheddablePlus");
//! ```
//!
//! Inside rampart two things read a call's level (when its policy opted in with
//! [`use_ambient_criticality`](crate::PolicyBuilder::use_ambient_criticality)): the retry
//! budget, which will not hand its last half to a `Sheddable` call, and the hedge gate, which
//! never hedges a `Sheddable` call. Shedding itself is a decision about a particular service,
//! and stays with admission control.

use std::fmt;
use std::str::FromStr;

/// How much a request matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
pub enum Criticality {
    /// Work nobody waits for right now (prefetch, backfill): shed first.
    Sheddable = 0,
    /// Work that can be shed, but after `Sheddable`.
    SheddablePlus = 1,
    /// The default: somebody is waiting.
    #[default]
    Critical = 2,
    /// The most important work; settable by local code only.
    CriticalPlus = 3,
}

impl Criticality {
    /// Every level, lowest first.
    pub const ALL: [Criticality; 4] = [
        Criticality::Sheddable,
        Criticality::SheddablePlus,
        Criticality::Critical,
        Criticality::CriticalPlus,
    ];

    /// The wire name: `Sheddable`, `SheddablePlus`, `Critical` or `CriticalPlus`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Criticality::Sheddable => "Sheddable",
            Criticality::SheddablePlus => "SheddablePlus",
            Criticality::Critical => "Critical",
            Criticality::CriticalPlus => "CriticalPlus",
        }
    }

    /// Parses a level received from another process: one of the four names, in any case,
    /// with nothing around it. `CriticalPlus` is clamped to `Critical`. Anything else
    /// (whitespace, numbers, empty, unknown names) is `None`.
    pub fn parse_inbound(value: &str) -> Option<Criticality> {
        let level = Criticality::ALL
            .into_iter()
            .find(|level| level.as_str().eq_ignore_ascii_case(value))?;
        Some(level.min(Criticality::Critical))
    }

    /// The level of a received value, or `Critical` when it is missing or not a level.
    pub fn from_inbound(value: Option<&str>) -> Criticality {
        value
            .and_then(Criticality::parse_inbound)
            .unwrap_or_default()
    }

    /// Whether this is the lowest level, the one the budget and the hedge gate hold back.
    pub const fn is_sheddable(self) -> bool {
        matches!(self, Criticality::Sheddable)
    }
}

impl fmt::Display for Criticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the four level names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCriticality {
    value: String,
}

impl fmt::Display for InvalidCriticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid criticality {:?}: expected Sheddable, SheddablePlus, Critical or CriticalPlus",
            self.value
        )
    }
}

impl std::error::Error for InvalidCriticality {}

impl FromStr for Criticality {
    type Err = InvalidCriticality;

    /// Parses a level written by local code (configuration): the four names in any case,
    /// `CriticalPlus` included. Use [`Criticality::parse_inbound`] for values from the wire.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Criticality::ALL
            .into_iter()
            .find(|level| level.as_str().eq_ignore_ascii_case(value))
            .ok_or_else(|| InvalidCriticality {
                value: value.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbound_critical_plus_is_clamped_to_critical() {
        assert_eq!(
            Criticality::parse_inbound("CriticalPlus"),
            Some(Criticality::Critical)
        );
        assert_eq!(
            Criticality::parse_inbound("criticalplus"),
            Some(Criticality::Critical)
        );
    }

    #[test]
    fn inbound_names_are_case_insensitive() {
        assert_eq!(
            Criticality::parse_inbound("sheddable"),
            Some(Criticality::Sheddable)
        );
        assert_eq!(
            Criticality::parse_inbound("SHEDDABLEPLUS"),
            Some(Criticality::SheddablePlus)
        );
    }

    #[test]
    fn inbound_rejects_numbers_whitespace_empty_and_unknown_names() {
        for value in [
            "0",
            "3",
            "",
            " Sheddable",
            "Sheddable ",
            "urgent",
            "Critical\n",
        ] {
            assert_eq!(Criticality::parse_inbound(value), None, "{value:?}");
            assert_eq!(
                Criticality::from_inbound(Some(value)),
                Criticality::Critical
            );
        }
        assert_eq!(Criticality::from_inbound(None), Criticality::Critical);
    }

    #[test]
    fn local_parsing_reaches_the_top_level_and_says_what_was_wrong() {
        assert_eq!("CriticalPlus".parse(), Ok(Criticality::CriticalPlus));
        let err = "urgent".parse::<Criticality>().expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "invalid criticality \"urgent\": expected Sheddable, SheddablePlus, Critical or CriticalPlus"
        );
    }

    #[test]
    fn levels_are_ordered_and_default_to_critical() {
        assert!(Criticality::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Criticality::default(), Criticality::Critical);
    }
}
