//! [`Swap`]: a value replaced whole while readers keep reading it, for the settings that
//! [`Policy::reconfigure`](crate::Policy::reconfigure) and
//! [`Breaker::reconfigure`](crate::Breaker::reconfigure) change at run time.
//!
//! A read is one atomic load (acquire), plus, once the value has been replaced, a look-up in
//! an append-only table of write-once cells; it hands out a plain reference that lives as long
//! as the borrow of the `Swap`. So a call that borrows its policy keeps reading the settings it
//! loaded, whatever is stored meanwhile, with no reference count, guard or lock, and without
//! `unsafe`. The price is paid in memory: a replaced value is not freed until the `Swap` is
//! dropped (no reader announces when it is done with one, so none can be proven unread).
//! Updates are meant to come at an operator's pace; each keeps the value it replaced (for a
//! policy's settings, under 200 bytes; the cells come in blocks that double in size and are
//! allocated whole, so up to about twice that is held).
//!
//! The loom model of the breaker (`tests/loom_breaker.rs`) races a reconfiguration against
//! outcomes through this type.

use std::sync::{OnceLock, PoisonError};

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicUsize, Ordering};

/// Segment `s` of the table holds values `2^s ..= 2^(s+1) - 1`: 2^31 - 1 replacements in all,
/// each segment allocated when the first of its values is stored.
const SEGMENTS: usize = 31;

/// How many times a [`Swap`] can be replaced.
pub(crate) const MAX_STORES: usize = (1 << SEGMENTS) - 1;

/// A value replaced whole by [`store`](Self::store) while readers [`load`](Self::load) it.
pub(crate) struct Swap<T> {
    /// The value it was made with (number 0).
    first: T,
    /// The number of the current value; values `1..` are in `later`.
    current: AtomicUsize,
    later: [OnceLock<Box<[OnceLock<T>]>>; SEGMENTS],
    /// Serialises stores (readers never take it).
    writer: Mutex<()>,
}

/// Where value `n` (at least 1) lives: its segment and its place in it.
fn locate(n: usize) -> (usize, usize) {
    let segment = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (segment, n - (1 << segment))
}

impl<T> Swap<T> {
    pub(crate) fn new(value: T) -> Swap<T> {
        Swap {
            first: value,
            current: AtomicUsize::new(0),
            later: std::array::from_fn(|_| OnceLock::new()),
            writer: Mutex::new(()),
        }
    }

    /// The value now, for as long as `self` is borrowed.
    #[inline(always)]
    pub(crate) fn load(&self) -> &T {
        match self.current.load(Ordering::Acquire) {
            0 => &self.first,
            n => self.replaced(n),
        }
    }

    /// Value `n`, a replacement. It is always there (set before `current` named it, and the
    /// acquire load of `current` pairs with the release store in `store`); were it not, the
    /// first value is the answer rather than a panic. Out of line, so that a load stays one
    /// load and one branch where it is inlined.
    #[cold]
    #[inline(never)]
    fn replaced(&self, n: usize) -> &T {
        let (segment, at) = locate(n);
        self.later
            .get(segment)
            .and_then(OnceLock::get)
            .and_then(|cells| cells.get(at))
            .and_then(OnceLock::get)
            .unwrap_or(&self.first)
    }

    /// How many values replaced the first: each is kept allocated.
    #[cfg(test)]
    pub(crate) fn stores(&self) -> usize {
        self.current.load(Ordering::Acquire)
    }

    /// Makes `value` the value every later [`load`](Self::load) returns; the one it replaces
    /// stays readable (and allocated) until `self` is dropped. `Err` gives `value` back once
    /// [`MAX_STORES`] replacements were made.
    pub(crate) fn store(&self, value: T) -> Result<(), T> {
        let _one_at_a_time = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let n = self.current.load(Ordering::Relaxed) + 1;
        if n > MAX_STORES {
            return Err(value);
        }
        let (segment, at) = locate(n);
        let Some(cells) = self.later.get(segment) else {
            return Err(value);
        };
        let cells = cells.get_or_init(|| (0..1usize << segment).map(|_| OnceLock::new()).collect());
        let Some(cell) = cells.get(at) else {
            return Err(value);
        };
        cell.set(value)?;
        self.current.store(n, Ordering::Release);
        Ok(())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Swap<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.load().fmt(f)
    }
}

#[cfg(all(test, not(rampart_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_loaded_value_stays_readable_after_a_store_and_later_loads_see_the_new_one() {
        let swap = Swap::new(String::from("first"));
        let before = swap.load();
        swap.store(String::from("second")).expect("room");
        assert_eq!(before, "first");
        assert_eq!(swap.load(), "second");
    }

    #[test]
    fn values_are_found_across_segments() {
        let swap = Swap::new(0usize);
        for n in 1..=1_000 {
            swap.store(n).expect("room");
            assert_eq!(*swap.load(), n);
        }
        assert_eq!(locate(1), (0, 0));
        assert_eq!(locate(2), (1, 0));
        assert_eq!(locate(3), (1, 1));
        assert_eq!(locate(MAX_STORES), (30, (1 << 30) - 1));
    }

    #[test]
    fn every_stored_value_is_dropped_with_the_swap() {
        let value = Arc::new(());
        let swap = Swap::new(Arc::clone(&value));
        swap.store(Arc::clone(&value)).expect("room");
        swap.store(Arc::clone(&value)).expect("room");
        assert_eq!(Arc::strong_count(&value), 4);
        drop(swap);
        assert_eq!(Arc::strong_count(&value), 1);
    }
}
/// The problem of an update past the last one a policy or breaker can take.
pub(crate) fn too_many_updates() -> crate::error::ConfigProblem {
    crate::error::ConfigProblem::new(
        "reconfigure",
        format!(
            "cannot be applied: {} updates were already made, the most one policy or breaker keeps",
            MAX_STORES
        ),
    )
}
