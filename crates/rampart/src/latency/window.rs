//! A windowed latency histogram: every successful attempt records its latency into it, and
//! hedging and adaptive attempt ceilings read a recent quantile from it.
//!
//! A hedge fires when an attempt has been outstanding longer than the p95 of the attempts of
//! the last 30 s; an adaptive ceiling is a multiple of the p95 of the last 5 minutes. Both are
//! about the tail, which a mean hides, and both read a histogram that every call through a
//! shared policy writes to from many cores at once. [`LatencyWindow`] is a fixed block of
//! atomic counters: recording is a few relaxed atomic operations, lock-free and without
//! allocation, and a quantile is one pass over the counters.
//!
//! ```
//! use std::time::Duration;
//! use rampart::clock::Instant;
//! use rampart::latency::window::LatencyWindow;
//!
//! let window = LatencyWindow::new(Duration::from_secs(30), 20);
//! let now = Instant::now();
//! for ms in 1..=100 {
//!     window.record(Duration::from_millis(ms), now);
//! }
//! assert_eq!(window.count(now), 100);
//! // The upper edge of the bucket holding the 95th smallest sample: above 95 ms, by 12.5 % at most.
//! let p95 = window.quantile(0.95, now).unwrap();
//! assert!(p95 > Duration::from_millis(95) && p95 <= Duration::from_micros(106_875));
//! // A window later the samples have aged out.
//! assert_eq!(window.quantile(0.95, now + Duration::from_secs(30)), None);
//! ```
//!
//! # Parameters
//!
//! | what | value |
//! | --- | --- |
//! | buckets | 264: 33 powers of two from 512 ns to 2^42 ns (≈ 73 min), each cut into 8 equal sub-buckets |
//! | estimate | the upper edge of the bucket holding the ceil(q·n)-th smallest sample (rank at least 1) |
//! | error | for that sample `x` in range: `x < estimate ≤ 1.125·x`; below 512 ns the estimate is 576 ns, from 2^42 ns on it is 2^42 ns |
//! | slices | 6, each `window / 6` long: a sample counts for at least 5/6 of the window and at most the whole window |
//! | stripes | 4, one per thread round-robin, each with its own 6 slices |
//! | memory | 4 × 6 slices × 2 176 B = 52 224 B (51 KiB) on the heap, plus 64 B inline |
//! | `record` | a thread-local read, an atomic load, two relaxed `fetch_add`s; the first record of a new slice per stripe also claims it (one CAS) and zeroes it (265 swaps) |
//! | `quantile` | reads the 264 counters of every non-empty slice in the window (up to 51 KiB): cheap next to a request, but cache it if it is read per call at high rates |
//!
//! # Thread safety and races
//!
//! `LatencyWindow` is `Send + Sync` and used by shared reference. Threads write different
//! stripes, and each slice starts on its own cache line, so cores recording at once mostly
//! write different lines. Time is cut into slots of `window / 6` from construction; slot `s`
//! lives in slice `s % 6` of each stripe, stamped with its slot number (its epoch). The first
//! record of a later slot claims the slice with a compare-and-swap to a "resetting" mark, so
//! exactly one thread zeroes it, then publishes the new epoch. Readers skip slices whose epoch
//! is outside the window or changed while they read them (a seqlock read), so they never mix a
//! slice's old and new counts. What the races can still do, all harmless:
//!
//! - a record that overlaps the reset of its slice may be wiped by the zeroing, or, if its
//!   instant belonged to the previous use of the slice (a window earlier), be counted in the
//!   new slot: at most the records in flight on that stripe at that moment, each a real sample;
//! - a record whose instant is a whole window older than the samples already in its slice is
//!   dropped;
//! - a reader may miss records still in flight, and [`LatencyWindow::count`] (slice totals) can
//!   differ from the count behind a quantile (bucket counts) by those records.
//!
//! Counters only ever grow or are zeroed, so a reader sees real counts, and every quantile is
//! the edge of a bucket some sample was recorded in. Nothing here panics, whatever the input.

use std::fmt;
use std::time::Duration;

use crate::clock::Instant;
use crate::sync::atomic::{AtomicU64, Ordering, fence};

// Under loom a tiny configuration keeps the model small: 4 buckets, 2 slices, 1 stripe.
/// Sub-buckets per power of two, as a power of two: 8 sub-buckets, at most 12.5 % wide.
const SUB_BITS: u32 = if cfg!(rampart_loom) { 1 } else { 3 };
/// Sub-buckets per power of two.
const SUB: usize = 1 << SUB_BITS;
/// Powers of two covered.
const OCTAVES: u32 = if cfg!(rampart_loom) { 2 } else { 33 };
/// The lowest bucket starts at `2^MIN_SHIFT` ns = 512 ns.
const MIN_SHIFT: u32 = 9;
/// The lower edge of the lowest bucket, in nanoseconds; smaller samples count there.
const MIN_NS: u64 = 1 << MIN_SHIFT;
/// The upper edge of the highest bucket, in nanoseconds; larger samples count below it.
const MAX_NS: u64 = 1 << (MIN_SHIFT + OCTAVES);
/// Buckets per slice.
const BUCKETS: usize = OCTAVES as usize * SUB;
/// Slices per stripe: the window is cut into this many slots.
const SLICES: usize = if cfg!(rampart_loom) { 2 } else { 6 };
/// Stripes: threads spread their records over this many sets of slices.
const STRIPES: usize = if cfg!(rampart_loom) { 1 } else { 4 };
/// The epoch of a slice while the thread that claimed it zeroes it.
const RESETTING: u64 = u64::MAX;

/// The calling thread's stripe: threads take stripes round-robin as they first record.
#[cfg(not(rampart_loom))]
fn stripe() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    // During thread-local teardown (a record from a destructor) fall back to stripe 0.
    STRIPE.try_with(|s| *s).unwrap_or(0)
}

/// The calling thread's stripe: the only one, under loom.
#[cfg(rampart_loom)]
fn stripe() -> usize {
    0
}

/// The bucket a sample counts in: log-linear on its nanoseconds, clamped to the range.
fn bucket_of(sample: Duration) -> usize {
    let ns = u64::try_from(sample.as_nanos())
        .unwrap_or(u64::MAX)
        .clamp(MIN_NS, MAX_NS - 1);
    let msb = u64::BITS - 1 - ns.leading_zeros();
    let sub = (ns >> (msb - SUB_BITS)) as usize & (SUB - 1);
    (msb - MIN_SHIFT) as usize * SUB + sub
}

/// The upper (exclusive) edge of a bucket: what a quantile in it reports.
fn upper_edge(bucket: usize) -> Duration {
    let octave = (bucket / SUB) as u32;
    let sub = (bucket % SUB) as u64;
    Duration::from_nanos((SUB as u64 + sub + 1) << (octave + MIN_SHIFT - SUB_BITS))
}

/// One slot's histogram in one stripe, on its own cache lines.
#[repr(align(64))]
struct Slice {
    /// The slot whose samples the slice holds, or [`RESETTING`].
    epoch: AtomicU64,
    /// Samples recorded in this slot.
    total: AtomicU64,
    /// Samples per bucket.
    buckets: [AtomicU64; BUCKETS],
}

impl Slice {
    fn new() -> Self {
        Slice {
            epoch: AtomicU64::new(0),
            total: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Runs `read` if the slice holds a slot within the window that ends in slot `current`
    /// and was not reused meanwhile: the epoch is checked before and after (a seqlock read,
    /// paired with the fence in [`LatencyWindow::claim`]). Slots after `current` count too:
    /// concurrent callers' clocks differ a little.
    fn read_stable<T>(&self, current: u64, read: impl FnOnce(&Self) -> T) -> Option<T> {
        let epoch = self.epoch.load(Ordering::Acquire);
        if epoch == RESETTING || epoch.saturating_add(SLICES as u64) <= current {
            return None;
        }
        let value = read(self);
        fence(Ordering::Acquire);
        (self.epoch.load(Ordering::Relaxed) == epoch).then_some(value)
    }
}

/// A windowed latency histogram: record samples, read quantiles over the last `window`.
///
/// `Send + Sync`: a policy holds one (in its `Arc`) and every call records into it by shared
/// reference. See the [module documentation](self) for the bucket scheme, its error bound, the memory
/// it takes and the races between threads.
pub struct LatencyWindow {
    /// Slot 0 starts here; earlier instants count as slot 0.
    origin: Instant,
    /// The length of a slot in nanoseconds, at least 1.
    slice_ns: u64,
    /// The window as given, for `Debug`.
    window: Duration,
    /// Samples needed in the window before a quantile is given.
    min_samples: u32,
    /// `STRIPES × SLICES` slices, stripe-major.
    slices: Box<[Slice]>,
    /// Slice resets so far, for the loom model.
    #[cfg(rampart_loom)]
    resets: AtomicU64,
}

impl LatencyWindow {
    /// A window over the last `window` of samples (counted from now, the construction instant),
    /// that gives quantiles once it holds at least `min_samples` (and at least one) samples.
    ///
    /// A window shorter than 6 ns behaves as one of 6 ns. This is the only allocation.
    pub fn new(window: Duration, min_samples: u32) -> Self {
        let slice_ns = u64::try_from(window.as_nanos() / SLICES as u128)
            .unwrap_or(u64::MAX)
            .max(1);
        LatencyWindow {
            origin: Instant::now(),
            slice_ns,
            window,
            min_samples,
            slices: (0..STRIPES * SLICES).map(|_| Slice::new()).collect(),
            #[cfg(rampart_loom)]
            resets: AtomicU64::new(0),
        }
    }

    /// Records one latency observed at `now`. Lock-free and without allocation.
    ///
    /// Samples below 512 ns count as 512 ns, from 2^42 ns (≈ 73 min) on as just below it. A
    /// sample stamped a whole window before the newest sample of its slice is dropped.
    pub fn record(&self, sample: Duration, now: Instant) {
        let slot = self.slot(now);
        let index = stripe() * SLICES + (slot % SLICES as u64) as usize;
        let Some(slice) = self.slices.get(index) else {
            return;
        };
        let epoch = slice.epoch.load(Ordering::Acquire);
        if epoch != slot && epoch != RESETTING {
            if epoch > slot {
                return;
            }
            self.claim(slice, epoch, slot);
        }
        if let Some(bucket) = slice.buckets.get(bucket_of(sample)) {
            bucket.fetch_add(1, Ordering::Relaxed);
            slice.total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The `q`-quantile of the samples in the window ending at `now`: the upper edge of the
    /// bucket holding the ceil(q·n)-th smallest of the n samples (at least the first), so
    /// above that sample by at most 12.5 % when it lies in 512 ns .. 2^42 ns.
    ///
    /// `q` is clamped to `[0, 1]`; NaN gives `None`, and so does a window holding fewer than
    /// `min_samples` samples or none. Allocation-free; it reads every counter in the window.
    pub fn quantile(&self, q: f64, now: Instant) -> Option<Duration> {
        if q.is_nan() {
            return None;
        }
        let current = self.slot(now);
        let mut counts = [0u64; BUCKETS];
        let mut part = [0u64; BUCKETS];
        let mut n = 0u64;
        for slice in &self.slices {
            let read = slice.read_stable(current, |s| {
                if s.total.load(Ordering::Relaxed) == 0 {
                    return false;
                }
                for (p, bucket) in part.iter_mut().zip(&s.buckets) {
                    *p = bucket.load(Ordering::Relaxed);
                }
                true
            });
            if read == Some(true) {
                for (c, &p) in counts.iter_mut().zip(&part) {
                    *c = c.saturating_add(p);
                    n = n.saturating_add(p);
                }
            }
        }
        if n == 0 || n < u64::from(self.min_samples) {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0u64;
        counts
            .iter()
            .position(|&c| {
                seen = seen.saturating_add(c);
                seen >= rank
            })
            .map(upper_edge)
    }

    /// The number of samples in the window ending at `now`.
    pub fn count(&self, now: Instant) -> u64 {
        let current = self.slot(now);
        self.slices
            .iter()
            .filter_map(|s| s.read_stable(current, |s| s.total.load(Ordering::Relaxed)))
            .fold(0, u64::saturating_add)
    }

    /// Slice resets so far (loom builds only): one per claimed slot.
    #[cfg(rampart_loom)]
    #[doc(hidden)]
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::Relaxed)
    }

    /// The slot `now` falls in.
    fn slot(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin).as_nanos();
        (u64::try_from(elapsed).unwrap_or(u64::MAX) / self.slice_ns).min(RESETTING - 1)
    }

    /// Moves `slice` from epoch `seen` to `slot`: the thread whose CAS wins zeroes it, the
    /// others go on and record into it (their samples may be wiped by the zeroing).
    fn claim(&self, slice: &Slice, seen: u64, slot: u64) {
        if slice
            .epoch
            .compare_exchange(seen, RESETTING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // A reader that sees any of the zeroes below also sees the mark above (seqlock write).
        fence(Ordering::Release);
        // Swaps rather than stores: as cheap once per slot, and loom misorders a plain store
        // racing a `fetch_add` (tokio-rs/loom#389), so only swaps keep the model faithful.
        for bucket in &slice.buckets {
            bucket.swap(0, Ordering::Relaxed);
        }
        slice.total.swap(0, Ordering::Relaxed);
        #[cfg(rampart_loom)]
        self.resets.fetch_add(1, Ordering::Relaxed);
        slice.epoch.store(slot, Ordering::Release);
    }
}

impl fmt::Debug for LatencyWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyWindow")
            .field("window", &self.window)
            .field("min_samples", &self.min_samples)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(rampart_loom)))]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn every_bucket_holds_its_own_edges_and_spans_at_most_an_eighth_of_its_lower_edge() {
        let mut lower = MIN_NS;
        for bucket in 0..BUCKETS {
            let upper = upper_edge(bucket).as_nanos() as u64;
            assert_eq!(bucket_of(Duration::from_nanos(lower)), bucket);
            assert_eq!(bucket_of(Duration::from_nanos(upper - 1)), bucket);
            assert!(
                (upper - lower) * 8 <= lower,
                "bucket {bucket}: {lower}..{upper}"
            );
            lower = upper;
        }
        assert_eq!(lower, MAX_NS);
        assert_eq!(MAX_NS, 1 << 42);
    }

    #[test]
    fn samples_outside_the_range_clamp_to_the_edge_buckets() {
        assert_eq!(bucket_of(Duration::ZERO), 0);
        assert_eq!(bucket_of(Duration::from_nanos(MIN_NS - 1)), 0);
        assert_eq!(bucket_of(Duration::from_nanos(MAX_NS)), BUCKETS - 1);
        assert_eq!(bucket_of(Duration::MAX), BUCKETS - 1);
        assert_eq!(upper_edge(0), Duration::from_nanos(576));
        assert_eq!(upper_edge(BUCKETS - 1), Duration::from_nanos(1 << 42));
    }

    #[test]
    fn a_window_takes_51_kib() {
        assert_eq!(BUCKETS, 264);
        assert_eq!(size_of::<Slice>(), 2176);
        assert_eq!(size_of::<Slice>() * STRIPES * SLICES, 52_224);
        assert_eq!(size_of::<LatencyWindow>(), 64);
    }

    #[test]
    fn a_sample_counts_for_at_least_five_sixths_of_the_window_and_never_longer_than_it() {
        let w = LatencyWindow::new(Duration::from_secs(30), 1);
        let t0 = w.origin;
        // Recorded at the last instant of slot 0: counts until slot 6 begins, 25 s + 1 ns later.
        w.record(MS, t0 + Duration::from_secs(5) - Duration::from_nanos(1));
        assert_eq!(
            w.count(t0 + Duration::from_secs(30) - Duration::from_nanos(1)),
            1
        );
        assert_eq!(w.count(t0 + Duration::from_secs(30)), 0);
        // Recorded at the first instant of slot 1: counts for the full 30 s, not a nanosecond more.
        let w = LatencyWindow::new(Duration::from_secs(30), 1);
        let t1 = w.origin + Duration::from_secs(5);
        w.record(MS, t1);
        assert_eq!(
            w.count(t1 + Duration::from_secs(30) - Duration::from_nanos(1)),
            1
        );
        assert_eq!(w.count(t1 + Duration::from_secs(30)), 0);
    }

    #[test]
    fn a_record_a_whole_window_older_than_its_slice_is_dropped() {
        let w = LatencyWindow::new(Duration::from_secs(30), 1);
        let t0 = w.origin;
        w.record(MS, t0 + Duration::from_secs(31)); // slot 6, slice 0
        w.record(MS, t0 + Duration::from_secs(1)); // slot 0, slice 0: stale
        assert_eq!(w.count(t0 + Duration::from_secs(31)), 1);
        assert_eq!(w.count(t0 + Duration::from_secs(1)), 1);
    }

    #[test]
    fn a_reused_slice_is_zeroed_before_it_counts_again() {
        let w = LatencyWindow::new(Duration::from_secs(30), 1);
        let t0 = w.origin;
        for _ in 0..50 {
            w.record(Duration::from_secs(2), t0);
        }
        let later = t0 + Duration::from_secs(60); // slot 12, slice 0 again
        w.record(MS, later);
        assert_eq!(w.count(later), 1);
        assert_eq!(w.quantile(1.0, later), Some(upper_edge(bucket_of(MS))));
    }

    #[test]
    fn instants_before_construction_count_as_its_first_slot() {
        let w = LatencyWindow::new(Duration::from_secs(30), 1);
        let before = w.origin.checked_sub(Duration::from_secs(3600));
        if let Some(before) = before {
            w.record(MS, before);
            assert_eq!(w.count(w.origin), 1);
            assert_eq!(w.count(before), 1);
        }
    }

    #[test]
    fn debug_shows_the_window_and_the_sample_floor() {
        let w = LatencyWindow::new(Duration::from_secs(30), 20);
        assert_eq!(
            format!("{w:?}"),
            "LatencyWindow { window: 30s, min_samples: 20, .. }"
        );
    }
}
