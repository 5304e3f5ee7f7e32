//! The failure-ratio window: successes and failures per time bucket, striped so that many
//! cores recording at once do not all write one cache line.
//!
//! The window is cut into (up to) ten buckets. Each of the [`STRIPES`] stripes holds one slot per
//! bucket in its own 128-byte-aligned block; a thread always writes the stripe its thread-local
//! index picks, and a reader sums every stripe. A slot is one `u64`, updated by compare-and-swap:
//!
//! ```text
//! bits 63..44  bucket tag (bucket number, wrapping at 2^20)
//! bits 43..22  failures   (22 bits)
//! bits 21..0   successes  (22 bits)
//! ```
//!
//! A slot whose tag is older than the current bucket is reset by the first write into it, so a
//! call stops counting once it is older than the window (it may stop up to one bucket early). When
//! a count would pass 2^22 − 1 both counts of the slot are halved, which keeps the ratio. A slot
//! left untouched for exactly 2^20 buckets could be read as current again; with the default 3 s
//! buckets that is 36 days without a call from that stripe.

use crate::clock::Instant;
use crate::sync::atomic::{AtomicU64, Ordering, fence};

/// Stripes per window (two under loom, to keep the models small).
pub(super) const STRIPES: usize = if cfg!(rampart_loom) { 2 } else { 8 };
/// Buckets per window (two under loom).
const MAX_BUCKETS: u64 = if cfg!(rampart_loom) { 2 } else { 10 };

const TAG_SHIFT: u32 = 44;
const TAG_MASK: u64 = (1 << 20) - 1;
const FAIL_SHIFT: u32 = 22;
const COUNT_MAX: u64 = (1 << 22) - 1;

/// One stripe: a slot per bucket, alone on its cache lines.
#[repr(align(128))]
struct Stripe {
    slots: [AtomicU64; MAX_BUCKETS as usize],
}

/// Calls in the window, summed over every stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) total: u64,
    pub(super) failures: u64,
}

/// The striped sliding window of one ratio-mode breaker.
pub(super) struct Window {
    bucket_nanos: u64,
    /// Names this window in a thread's [`Recent`] bucket (unique per window made).
    id: u64,
    buckets: u64,
    /// A fixed number of stripes, so that picking one is a mask, not a division.
    stripes: Box<[Stripe; STRIPES]>,
}

impl Window {
    /// A window of `window_nanos` (at least 1) cut into up to ten buckets.
    pub(super) fn new(window_nanos: u64) -> Window {
        let buckets = MAX_BUCKETS.min(window_nanos).max(1);
        let stripes = Box::new(std::array::from_fn(|_| Stripe {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }));
        Window {
            bucket_nanos: (window_nanos / buckets).max(1),
            id: NEXT_WINDOW.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            buckets,
            stripes,
        }
    }

    /// Counts one call at `now` (nanoseconds since the time base) in this thread's stripe.
    pub(super) fn record(&self, now: u64, failure: bool) {
        self.record_in(now / self.bucket_nanos, failure);
    }

    /// The bucket of `now` (nanoseconds since the time base).
    pub(super) fn bucket_of(&self, now: u64) -> u64 {
        now / self.bucket_nanos
    }

    /// The span of bucket `bucket`, in nanoseconds since the time base: `None` past the end
    /// of time.
    pub(super) fn bucket_span(&self, bucket: u64) -> Option<(u64, u64)> {
        let from = bucket.checked_mul(self.bucket_nanos)?;
        Some((from, from.checked_add(self.bucket_nanos)?))
    }

    /// Where this thread counts a call in bucket `bucket`.
    pub(super) fn place(&self, bucket: u64) -> Place {
        Place {
            bucket,
            stripe: stripe_index() % STRIPES,
            // `bucket % buckets` < MAX_BUCKETS, so the cast is lossless.
            index: (bucket % self.buckets) as usize,
        }
    }

    /// Where this thread counts a call at `now`, if `now` falls in the bucket this thread
    /// last counted in, in this window: found by comparing instants, without measuring `now`
    /// from the time base (a subtraction of instants and two divisions).
    #[inline]
    pub(super) fn recent(&self, now: Instant) -> Option<Place> {
        #[cfg(not(rampart_loom))]
        if let Some(recent) = RECENT.get()
            && recent.window == self.id
            && recent.from <= now
            && now < recent.until
        {
            return Some(recent.place);
        }
        let _ = now;
        None
    }

    /// Remembers, for this thread, that the bucket of `place` runs from `from` until `until`.
    pub(super) fn remember(&self, place: Place, from: Instant, until: Instant) {
        #[cfg(not(rampart_loom))]
        RECENT.set(Some(Recent {
            window: self.id,
            from,
            until,
            place,
        }));
        let _ = (place, from, until);
    }

    /// Counts one call in bucket `bucket` in this thread's stripe.
    pub(super) fn record_in(&self, bucket: u64, failure: bool) {
        self.record_at(self.place(bucket), failure);
    }

    /// Counts one call where `place` says.
    pub(super) fn record_at(&self, place: Place, failure: bool) {
        let tag = place.bucket & TAG_MASK;
        let Some(slot) = self
            .stripes
            .get(place.stripe)
            .and_then(|stripe| stripe.slots.get(place.index))
        else {
            return;
        };
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let age = tag.wrapping_sub(current >> TAG_SHIFT) & TAG_MASK;
            let (mut successes, mut failures) = if age == 0 {
                unpack(current)
            } else if age > TAG_MASK / 2 {
                // The slot already holds a newer bucket: this call is older than the window as
                // another thread sees it. Drop it.
                return;
            } else {
                (0, 0)
            };
            if failure {
                failures += 1;
            } else {
                successes += 1;
            }
            if successes > COUNT_MAX || failures > COUNT_MAX {
                successes = successes.div_ceil(2);
                failures = failures.div_ceil(2);
            }
            let next = tag << TAG_SHIFT | failures << FAIL_SHIFT | successes;
            match slot.compare_exchange(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// The calls counted in the window that ends at `now`.
    ///
    /// Starts with a `SeqCst` fence: of two threads that each [`record`](Self::record) a
    /// failure and then count, the one whose fence comes second sees both failures (without
    /// it, each could miss the other's, and a ratio reached together would not open).
    pub(super) fn counts(&self, now: u64) -> Counts {
        fence(Ordering::SeqCst);
        let tag = (now / self.bucket_nanos) & TAG_MASK;
        let mut counts = Counts {
            total: 0,
            failures: 0,
        };
        for stripe in self.stripes.iter() {
            for slot in &stripe.slots {
                let word = slot.load(Ordering::Relaxed);
                let age = tag.wrapping_sub(word >> TAG_SHIFT) & TAG_MASK;
                if age < self.buckets {
                    let (successes, failures) = unpack(word);
                    counts.total += successes + failures;
                    counts.failures += failures;
                }
            }
        }
        counts
    }

    /// Forgets every call (on closing).
    pub(super) fn clear(&self) {
        for stripe in self.stripes.iter() {
            for slot in &stripe.slots {
                slot.store(0, Ordering::Relaxed);
            }
        }
    }
}

fn unpack(word: u64) -> (u64, u64) {
    (word & COUNT_MAX, (word >> FAIL_SHIFT) & COUNT_MAX)
}

/// This thread's stripe: threads are dealt stripes round-robin on first use.
fn stripe_index() -> usize {
    STRIPE.with(|s| *s)
}

/// The ids of windows, from 1.
static NEXT_WINDOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Where a thread counts a call in one bucket: the bucket, its stripe and its slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    bucket: u64,
    stripe: usize,
    index: usize,
}

/// Where a thread last counted a success: which window, and the instants its bucket runs
/// between. (Not kept under loom, whose models count through the time base every time.)
#[derive(Clone, Copy)]
#[cfg_attr(rampart_loom, allow(dead_code))]
struct Recent {
    window: u64,
    from: Instant,
    until: Instant,
    place: Place,
}

#[cfg(not(rampart_loom))]
std::thread_local! {
    static RECENT: std::cell::Cell<Option<Recent>> = const { std::cell::Cell::new(None) };
}

#[cfg(not(rampart_loom))]
static NEXT_STRIPE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(not(rampart_loom))]
std::thread_local! {
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(rampart_loom)]
loom::lazy_static! {
    static ref NEXT_STRIPE: crate::sync::atomic::AtomicUsize =
        crate::sync::atomic::AtomicUsize::new(0);
}

#[cfg(rampart_loom)]
loom::thread_local! {
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(all(test, not(rampart_loom)))]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn a_call_counts_until_it_is_older_than_the_window() {
        let w = Window::new(10 * SEC);
        w.record(0, true);
        w.record(SEC / 2, false);
        assert_eq!(w.counts(9 * SEC + SEC / 2).total, 2);
        let late = w.counts(10 * SEC);
        assert_eq!(
            late,
            Counts {
                total: 0,
                failures: 0
            }
        );
    }

    #[test]
    fn a_reused_slot_starts_from_zero() {
        let w = Window::new(10 * SEC);
        w.record(0, true);
        w.record(10 * SEC, false);
        assert_eq!(
            w.counts(10 * SEC),
            Counts {
                total: 1,
                failures: 0
            }
        );
    }

    #[test]
    fn a_call_older_than_the_slot_is_dropped() {
        let w = Window::new(10 * SEC);
        w.record(10 * SEC, false);
        w.record(0, true);
        assert_eq!(
            w.counts(10 * SEC),
            Counts {
                total: 1,
                failures: 0
            }
        );
    }

    #[test]
    fn a_saturated_slot_halves_and_keeps_the_ratio() {
        let w = Window::new(10 * SEC);
        let slot = &w.stripes[stripe_index() % STRIPES].slots[0];
        slot.store(COUNT_MAX << FAIL_SHIFT | COUNT_MAX, Ordering::Relaxed);
        w.record(0, true);
        let c = w.counts(0);
        assert_eq!(c.failures, 1 << 21, "2^22 failures halved");
        assert_eq!(c.total, c.failures + COUNT_MAX.div_ceil(2));
    }

    #[test]
    fn a_tiny_window_still_has_a_bucket() {
        let w = Window::new(1);
        w.record(5, true);
        assert_eq!(w.counts(5).failures, 1);
        assert_eq!(w.counts(6).total, 0);
    }

    #[test]
    fn a_remembered_bucket_is_found_only_between_its_instants_and_in_its_window() {
        let (w, other) = (Window::new(10 * SEC), Window::new(10 * SEC));
        let base = Instant::now();
        let at = |nanos: u64| base + std::time::Duration::from_nanos(nanos);
        let (from, until) = w.bucket_span(3).expect("in range");
        assert_eq!((from, until), (3 * SEC, 4 * SEC));
        w.remember(w.place(3), at(from), at(until));
        let bucket = |place: Option<Place>| place.map(|p| p.bucket);
        assert_eq!(bucket(w.recent(at(3 * SEC))), Some(3));
        assert_eq!(bucket(w.recent(at(4 * SEC - 1))), Some(3));
        assert_eq!(bucket(w.recent(at(4 * SEC))), None, "the next bucket");
        assert_eq!(bucket(w.recent(at(3 * SEC - 1))), None, "the one before");
        assert_eq!(bucket(other.recent(at(3 * SEC))), None, "another window");
        assert_eq!(w.bucket_of(4 * SEC - 1), 3);
    }

    #[test]
    fn clear_forgets_everything() {
        let w = Window::new(SEC);
        w.record(0, true);
        w.clear();
        assert_eq!(w.counts(0).total, 0);
    }
}
