//! The arithmetic of the importer: a histogram of latencies by quantile, the most intervals
//! open at once, the length of a union of intervals. Every input is a span's nanoseconds,
//! which a file may set to anything: nothing here can overflow or divide by zero.

use std::time::Duration;

/// Where the buckets of a [`Histogram`] end, as quantiles: tenths, then the tail.
pub const BUCKET_ENDS: [f64; 12] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0];

/// Latencies in a few buckets, for a graph file's `histogram`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// `(latency, count)`: each bucket's mean latency (rounded to the microsecond) and how many
    /// latencies fell in it, fastest first. Buckets end at the quantiles of [`BUCKET_ENDS`];
    /// empty buckets and buckets of the same latency are merged, so there are at most 12.
    pub buckets: Vec<(Duration, u64)>,
    /// How many latencies.
    pub samples: u64,
    /// The median, p99 and the largest (nearest rank).
    pub p50_p99_max: [Duration; 3],
}

impl Histogram {
    /// The histogram of `nanos` (sorted here).
    pub(super) fn of(nanos: &mut [u64]) -> Histogram {
        nanos.sort_unstable();
        let n = nanos.len();
        if n == 0 {
            return Histogram::default();
        }
        let rank = |q: f64| {
            let r = (q * n as f64).ceil() as usize;
            r.clamp(1, n)
        };
        let mut buckets: Vec<(Duration, u64)> = Vec::new();
        let mut from = 0;
        for q in BUCKET_ENDS {
            let to = rank(q);
            if to <= from {
                continue;
            }
            let slice = &nanos[from..to];
            let sum: u128 = slice.iter().map(|&x| u128::from(x)).sum();
            let mean = sum / slice.len() as u128;
            let micros = u64::try_from((mean + 500) / 1000).unwrap_or(u64::MAX / 1000);
            let latency = Duration::from_micros(micros);
            let count = slice.len() as u64;
            match buckets.last_mut() {
                Some(last) if last.0 == latency => last.1 += count,
                _ => buckets.push((latency, count)),
            }
            from = to;
        }
        let at = |q: f64| Duration::from_nanos(nanos[rank(q) - 1]);
        Histogram {
            buckets,
            samples: n as u64,
            p50_p99_max: [at(0.5), at(0.99), at(1.0)],
        }
    }
}

/// The most of `intervals` (start, end) open at once; an interval that ends when another
/// starts does not overlap it.
pub(super) fn most_at_once(intervals: impl Iterator<Item = (u64, u64)>) -> u64 {
    let mut edges: Vec<(u64, i8)> = Vec::new();
    for (start, end) in intervals {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    // At the same instant, ends before starts.
    edges.sort_unstable();
    let (mut open, mut most) = (0i64, 0i64);
    for (_, step) in edges {
        open += i64::from(step);
        most = most.max(open);
    }
    most.max(0) as u64
}

/// The length of the union of `intervals`, each clipped to `within`.
pub(super) fn union_length(intervals: &mut [(u64, u64)], within: (u64, u64)) -> u64 {
    intervals.sort_unstable();
    let (mut total, mut reached) = (0u64, within.0);
    for &(start, end) in intervals.iter() {
        let (start, end) = (start.max(reached), end.min(within.1));
        if end > start {
            total = total.saturating_add(end - start);
            reached = end;
        }
    }
    total
}

/// `a - b` in nanoseconds as a float (negative when `b` is later).
pub(super) fn offset(a: u64, b: u64) -> f64 {
    (i128::from(a) - i128::from(b)) as f64
}

/// The median of `values` (0 when there is none).
pub(super) fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_unstable_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_keeps_the_mean_of_each_bucket_and_the_tail_apart() {
        // 100 latencies of 1..=100 ms.
        let mut nanos: Vec<u64> = (1..=100).map(|ms| ms * 1_000_000).collect();
        let h = Histogram::of(&mut nanos);
        assert_eq!(h.samples, 100);
        assert_eq!(h.buckets.len(), 12);
        assert_eq!(h.buckets[0], (Duration::from_micros(5_500), 10));
        assert_eq!(h.buckets[11], (Duration::from_millis(100), 1));
        assert_eq!(h.buckets.iter().map(|b| b.1).sum::<u64>(), 100);
        assert_eq!(
            h.p50_p99_max,
            [
                Duration::from_millis(50),
                Duration::from_millis(99),
                Duration::from_millis(100)
            ]
        );
    }

    #[test]
    fn a_histogram_of_one_latency_is_one_bucket() {
        let mut nanos = vec![3_000_000; 7];
        let h = Histogram::of(&mut nanos);
        assert_eq!(h.buckets, [(Duration::from_millis(3), 7)]);
        assert_eq!(Histogram::of(&mut []).buckets, []);
    }

    #[test]
    fn intervals_that_touch_do_not_overlap() {
        assert_eq!(most_at_once([(0, 10), (10, 20)].into_iter()), 1);
        assert_eq!(most_at_once([(0, 10), (5, 20), (6, 7)].into_iter()), 3);
        assert_eq!(most_at_once(std::iter::empty()), 0);
    }

    #[test]
    fn a_union_counts_overlaps_once_and_stays_within_its_bounds() {
        let mut calls = [(5, 15), (0, 10), (30, 50)];
        assert_eq!(union_length(&mut calls, (2, 40)), 13 + 10);
        assert_eq!(union_length(&mut [], (0, 10)), 0);
        assert_eq!(
            union_length(&mut [(u64::MAX - 1, u64::MAX)], (0, u64::MAX)),
            1
        );
    }
}
