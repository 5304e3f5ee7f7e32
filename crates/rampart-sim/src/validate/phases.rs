//! Where the time of a root went when its middle sent the leaf a second attempt (a retry or
//! a hedge): the slow roots a change rescues, whose times make the p99 the report compares.
//! The same reading of both sides' spans (the real chain's, and a traced simulation of the
//! imported graph under the same file and seed), so that a p99 that is predicted wrong shows
//! which part of the root is.
//!
//! ```
//! use std::time::Duration;
//! use rampart_sim::spans::{RecordedSpan, SpanKind, SpanStatus};
//! use rampart_sim::validate::phases::Phases;
//!
//! let ms = Duration::from_millis;
//! let span = |id, parent, service, kind, start, end| RecordedSpan {
//!     trace: 1, id, parent, service, kind,
//!     start: ms(start), end: ms(end),
//!     status: SpanStatus::Http(200), resend: 0,
//! };
//! let spans = [
//!     span(1, None, "edge", SpanKind::Server, 0, 30),
//!     span(2, Some(1), "edge", SpanKind::Client, 1, 29),
//!     span(3, Some(2), "middle", SpanKind::Server, 1, 29),
//!     // The first attempt hangs; the hedge goes 20 ms after it and answers in 6 ms.
//!     span(4, Some(3), "middle", SpanKind::Client, 2, 28),
//!     span(5, Some(3), "middle", SpanKind::Client, 22, 28),
//! ];
//! let phases = Phases::of(&spans, "middle").expect("one root sent a second attempt");
//! assert_eq!(phases.roots, 1);
//! assert_eq!(phases.means, [2.0, 20.0, 6.0, 2.0, 30.0]);
//! ```

use std::collections::HashMap;

use crate::spans::{RecordedSpan, SpanKind};

/// The parts of a root, in order: [`Phases::means`] holds one mean per name.
pub const PARTS: [&str; 5] = [
    "to the first attempt",
    "first attempt to second",
    "the second attempt",
    "after it, to the root's end",
    "the whole root",
];

/// The mean of each of [`PARTS`], in milliseconds, over the roots whose `caller` sent a
/// second attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phases {
    /// Roots that answered (not an error) whose `caller` sent a second attempt.
    pub roots: usize,
    /// From the root's start to the first attempt's; from it to the second's; the second
    /// attempt's CLIENT span; from its end to the root's end (below 0 when the first attempt
    /// won); the whole root. The first four add up to the last.
    pub means: [f64; 5],
}

impl Phases {
    /// Reads `spans`: for each root (a SERVER span without a parent) that did not fail,
    /// the first request of service `caller` in its trace that made at least two attempts
    /// (CLIENT spans under its SERVER span), its first two in order of start. `None` when no
    /// root did.
    pub fn of(spans: &[RecordedSpan], caller: &str) -> Option<Phases> {
        let mut attempts: HashMap<(u64, u64), Vec<&RecordedSpan>> = HashMap::new();
        let requests: HashMap<(u64, u64), &RecordedSpan> = spans
            .iter()
            .filter(|s| s.kind == SpanKind::Server && s.service == caller)
            .map(|s| ((s.trace, s.id), s))
            .collect();
        for span in spans.iter().filter(|s| s.kind == SpanKind::Client) {
            if let Some(parent) = span.parent
                && requests.contains_key(&(span.trace, parent))
            {
                attempts.entry((span.trace, parent)).or_default().push(span);
            }
        }
        let mut twice: HashMap<u64, [&RecordedSpan; 2]> = HashMap::new();
        let mut keys: Vec<&(u64, u64)> = attempts.keys().collect();
        keys.sort_unstable();
        for key in keys {
            let mut sent = attempts[key].clone();
            if sent.len() < 2 {
                continue;
            }
            sent.sort_by_key(|s| (s.start, s.id));
            twice.entry(key.0).or_insert([sent[0], sent[1]]);
        }
        // Summed in nanoseconds, exactly; a part may be negative.
        let mut sums = [0i128; 5];
        let mut roots = 0;
        for root in spans
            .iter()
            .filter(|s| s.kind == SpanKind::Server && s.parent.is_none() && !s.status.is_error())
        {
            let Some([first, second]) = twice.get(&root.trace) else {
                continue;
            };
            let at = |s: &RecordedSpan| s.start.as_nanos() as i128;
            let end = |s: &RecordedSpan| s.end.as_nanos() as i128;
            let parts = [
                at(first) - at(root),
                at(second) - at(first),
                end(second) - at(second),
                end(root) - end(second),
                end(root) - at(root),
            ];
            for (sum, part) in sums.iter_mut().zip(parts) {
                *sum += part;
            }
            roots += 1;
        }
        (roots > 0).then(|| Phases {
            roots,
            means: sums.map(|sum| sum as f64 / roots as f64 / 1e6),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::spans::SpanStatus;

    fn span(
        trace: u64,
        id: u64,
        parent: Option<u64>,
        service: &'static str,
        kind: SpanKind,
        (start, end): (u64, u64),
    ) -> RecordedSpan {
        RecordedSpan {
            trace,
            id,
            parent,
            service,
            kind,
            start: Duration::from_millis(start),
            end: Duration::from_millis(end),
            status: SpanStatus::Http(200),
            resend: 0,
        }
    }

    /// A root of trace `t` from 0 to `end` whose middle made attempts at these times.
    fn root(t: u64, end: u64, attempts: &[(u64, u64)]) -> Vec<RecordedSpan> {
        let mut spans = vec![
            span(t, 1, None, "edge", SpanKind::Server, (0, end)),
            span(t, 2, Some(1), "middle", SpanKind::Server, (0, end)),
        ];
        for (i, &at) in attempts.iter().enumerate() {
            spans.push(span(
                t,
                3 + i as u64,
                Some(2),
                "middle",
                SpanKind::Client,
                at,
            ));
        }
        spans
    }

    #[test]
    fn only_answered_roots_with_a_second_attempt_count_and_the_parts_add_up() {
        let mut spans = Vec::new();
        // A retry after a 50 ms timeout and a 3 ms backoff.
        spans.extend(root(1, 60, &[(1, 51), (54, 59)]));
        // A hedge that lost: the first attempt answered at 25 ms, before the hedge's 30.
        spans.extend(root(2, 26, &[(1, 25), (21, 30)]));
        // One attempt only.
        spans.extend(root(3, 5, &[(1, 4)]));
        // A second attempt, but the root failed.
        let mut failed = root(4, 90, &[(1, 51), (54, 80)]);
        failed[0].status = SpanStatus::Http(504);
        spans.extend(failed);

        let phases = Phases::of(&spans, "middle").expect("two roots");
        assert_eq!(phases.roots, 2);
        let means = phases.means;
        assert_eq!(means, [1.0, 36.5, 7.0, -1.5, 43.0]);
        assert_eq!(means[..4].iter().sum::<f64>(), means[4]);
        assert_eq!(
            Phases::of(&spans, "leaf"),
            None,
            "no requests of the service"
        );
    }
}
