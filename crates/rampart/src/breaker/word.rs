//! The breaker's whole state in one `u64`, so that reading it is one atomic load and every
//! change is one compare-and-swap.
//!
//! ```text
//! bits 63..62  kind      0 closed, 1 open, 2 half-open, 3 forced (isolated or forced closed)
//! closed       61..32 generation, 31..0 consecutive failures (consecutive mode; 0 in ratio mode)
//! half-open    61..32 generation, 31..16 probes in flight, 15..0 successful probes
//! isolated     61..32 generation, 31 clear
//! forced closed 61..32 generation, 31 set, 30..0 consecutive failures recorded while forced
//! open         61..0  open-until, nanoseconds since the breaker's time base
//! ```
//!
//! A permit remembers the word it was admitted under, and its outcome counts only while the
//! breaker is still in the same *period*: the same half-open period, or the same closed-family
//! period (closed and forced closed, the two states that admit everything). A period is named
//! by its generation, which is handed out under the transition lock by every transition into
//! or out of open, half-open or isolated: those change what is admitted.
//!
//! A switch inside the closed family ([`force_closed`](super::Breaker::force_closed) from
//! closed, [`release`](super::Breaker::release) from forced closed, and
//! [`reset`](super::Breaker::reset) from either, which clears the counts) keeps the
//! generation, and `force_closed` and `release` keep the counts. An attempt in flight across
//! such a switch was admitted by a closed-family state either way, so its outcome is kept, and
//! counts by the rule of the state the breaker is in when it is recorded: forced closed counts
//! it and never opens, closed counts it and opens at the threshold. This is sound in both
//! modes because the counts go with the generation: the consecutive failures live in the word
//! itself, and the ratio window is kept across the switch. A closed-family period entered from
//! outside the family starts with a new generation and counts from zero (no failures, the
//! window cleared before the word changes), so an outcome from an earlier period is dropped,
//! never counted against the new one. An open word needs no generation: nothing is admitted
//! while open, and leaving open happens only under the transition lock.

use super::StateKind;

const KIND_SHIFT: u32 = 62;
const KIND_MASK: u64 = 3 << KIND_SHIFT;
const GEN_SHIFT: u32 = 32;
/// Generations wrap at 2^30.
pub(super) const GEN_MASK: u32 = (1 << 30) - 1;
/// The largest open-until instant: about 146 years after the time base.
pub(super) const MAX_NANOS: u64 = (1 << KIND_SHIFT) - 1;
/// Probes in flight and successful probes each have 16 bits.
pub(super) const MAX_PROBES: u32 = u16::MAX as u32;

const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const FORCED: u64 = 3;
/// Set in a forced word that is forced closed (clear: isolated).
const FORCED_CLOSED: u64 = 1 << 31;
/// The consecutive failures a forced-closed word can count.
const FORCED_FAILURES: u32 = (1 << 31) - 1;

/// One value of the state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Word(pub(super) u64);

impl Word {
    pub(super) fn closed(generation: u32, failures: u32) -> Word {
        Word(CLOSED << KIND_SHIFT | gen_bits(generation) | u64::from(failures))
    }

    pub(super) fn open(until: u64) -> Word {
        Word(OPEN << KIND_SHIFT | until.min(MAX_NANOS))
    }

    pub(super) fn half_open(generation: u32, in_flight: u32, successes: u32) -> Word {
        let in_flight = u64::from(in_flight.min(MAX_PROBES));
        let successes = u64::from(successes.min(MAX_PROBES));
        Word(HALF_OPEN << KIND_SHIFT | gen_bits(generation) | in_flight << 16 | successes)
    }

    pub(super) fn isolated(generation: u32) -> Word {
        Word(FORCED << KIND_SHIFT | gen_bits(generation))
    }

    /// Forced closed: admits everything and counts failures (saturating at 2^31 - 1), never
    /// opens.
    pub(super) fn forced_closed(generation: u32, failures: u32) -> Word {
        let failures = u64::from(failures.min(FORCED_FAILURES));
        Word(FORCED << KIND_SHIFT | gen_bits(generation) | FORCED_CLOSED | failures)
    }

    /// The same kind of word (closed or forced closed) and generation with `failures`.
    pub(super) fn with_failures(self, failures: u32) -> Word {
        match self.kind() {
            StateKind::ForcedClosed => Word::forced_closed(self.generation(), failures),
            _ => Word::closed(self.generation(), failures),
        }
    }

    #[inline]
    pub(super) fn kind(self) -> StateKind {
        match self.0 >> KIND_SHIFT {
            CLOSED => StateKind::Closed,
            OPEN => StateKind::Open,
            HALF_OPEN => StateKind::HalfOpen,
            _ if self.0 & FORCED_CLOSED != 0 => StateKind::ForcedClosed,
            _ => StateKind::Isolated,
        }
    }

    /// The generation (meaningless for an open word).
    pub(super) fn generation(self) -> u32 {
        // Masked to 30 bits, so the cast keeps every bit.
        ((self.0 >> GEN_SHIFT) as u32) & GEN_MASK
    }

    /// Whether `self` is the same period as `other`: both half-open, or both of the closed
    /// family (closed or forced closed), with the same generation (the counts may differ). Never
    /// for an open or isolated word.
    #[inline]
    pub(super) fn same_period(self, other: Word) -> bool {
        // On the bits, without decoding the kinds: this is on every outcome's path.
        let kind = self.0 >> KIND_SHIFT;
        let periodic = kind == CLOSED || kind == HALF_OPEN || self.is_forced_closed();
        periodic && self.period_bits() == other.period_bits()
    }

    /// The kind and generation bits, a forced-closed word's kind read as closed: the closed
    /// family is one period across a switch between its two states.
    #[inline]
    fn period_bits(self) -> u64 {
        let bits = self.0 & (KIND_MASK | u64::from(GEN_MASK) << GEN_SHIFT);
        if self.is_forced_closed() {
            bits & !KIND_MASK
        } else {
            bits
        }
    }

    #[inline]
    fn is_forced_closed(self) -> bool {
        self.0 & (KIND_MASK | FORCED_CLOSED) == KIND_MASK | FORCED_CLOSED
    }

    /// Whether this is a half-open word.
    #[inline]
    pub(super) fn is_half_open(self) -> bool {
        self.0 >> KIND_SHIFT == HALF_OPEN
    }

    /// Consecutive failures of a closed or forced-closed word.
    #[inline]
    pub(super) fn failures(self) -> u32 {
        let mask = if self.0 >> KIND_SHIFT == FORCED {
            FORCED_FAILURES
        } else {
            u32::MAX
        };
        (self.0 as u32) & mask
    }

    /// Probes in flight of a half-open word.
    pub(super) fn in_flight(self) -> u32 {
        ((self.0 >> 16) & 0xFFFF) as u32
    }

    /// Successful probes of a half-open word.
    pub(super) fn successes(self) -> u32 {
        (self.0 & 0xFFFF) as u32
    }

    /// Open-until of an open word, in nanoseconds since the time base.
    pub(super) fn open_until(self) -> u64 {
        self.0 & MAX_NANOS
    }
}

fn gen_bits(generation: u32) -> u64 {
    u64::from(generation & GEN_MASK) << GEN_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_round_trips_at_its_extremes() {
        let w = Word::closed(GEN_MASK, u32::MAX);
        assert_eq!(
            (w.kind(), w.generation(), w.failures()),
            (StateKind::Closed, GEN_MASK, u32::MAX)
        );
        let w = Word::half_open(7, MAX_PROBES, MAX_PROBES);
        assert_eq!(w.kind(), StateKind::HalfOpen);
        assert_eq!(
            (w.generation(), w.in_flight(), w.successes()),
            (7, MAX_PROBES, MAX_PROBES)
        );
        let w = Word::open(u64::MAX);
        assert_eq!((w.kind(), w.open_until()), (StateKind::Open, MAX_NANOS));
        let w = Word::isolated(GEN_MASK + 5);
        assert_eq!((w.kind(), w.generation()), (StateKind::Isolated, 4));
        let w = Word::forced_closed(GEN_MASK, u32::MAX);
        assert_eq!(
            (w.kind(), w.generation(), w.failures()),
            (StateKind::ForcedClosed, GEN_MASK, FORCED_FAILURES)
        );
        let w = Word::forced_closed(3, 2).with_failures(5);
        assert_eq!((w.kind(), w.failures()), (StateKind::ForcedClosed, 5));
        assert_eq!(Word::closed(3, 2).with_failures(0), Word::closed(3, 0));
    }

    #[test]
    fn periods_match_on_family_and_generation_only() {
        assert!(Word::closed(3, 0).same_period(Word::closed(3, 4)));
        assert!(!Word::closed(3, 0).same_period(Word::closed(4, 0)));
        assert!(!Word::closed(3, 0).same_period(Word::half_open(3, 0, 0)));
        assert!(Word::half_open(3, 1, 0).same_period(Word::half_open(3, 0, 1)));
        assert!(!Word::half_open(3, 0, 0).same_period(Word::closed(3, 0)));
        assert!(!Word::half_open(3, 0, 0).same_period(Word::forced_closed(3, 0)));
        assert!(!Word::isolated(3).same_period(Word::isolated(3)));
        assert!(!Word::isolated(3).same_period(Word::closed(3, 0)));
        assert!(!Word::isolated(3).same_period(Word::forced_closed(3, 0)));
        assert!(!Word::closed(3, 0).same_period(Word::isolated(3)));
        assert!(Word::forced_closed(3, 0).same_period(Word::forced_closed(3, 1)));
        assert!(!Word::open(5).same_period(Word::open(5)));
    }

    #[test]
    fn closed_and_forced_closed_of_one_generation_are_one_period() {
        assert!(Word::forced_closed(3, 0).same_period(Word::closed(3, 2)));
        assert!(Word::closed(3, 2).same_period(Word::forced_closed(3, 0)));
        assert!(Word::closed(GEN_MASK, 0).same_period(Word::forced_closed(GEN_MASK, 7)));
        assert!(!Word::forced_closed(3, 0).same_period(Word::closed(4, 0)));
        assert!(!Word::closed(4, 0).same_period(Word::forced_closed(3, 0)));
    }
}
