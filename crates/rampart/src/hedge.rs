//! Hedging: when an attempt is slower than it usually is, start another and take whichever
//! answers first.
//!
//! Tail latency at scale is mostly bad luck: one slow disk, one GC pause. A hedge bets a little
//! extra load on the chance that a second attempt avoids the bad luck the first one hit. Sent
//! after the p95 of recent latencies, hedges add about 5% load and cut the tail sharply (in
//! "The Tail at Scale", hedging after 10 ms cut a p99.9 from 1,800 ms to 74 ms for 2% more
//! requests).
//!
//! ```
//! use std::time::Duration;
//! use rampart::Policy;
//! use rampart::hedge::Hedge;
//!
//! let policy = Policy::builder()
//!     .max_attempts(3)
//!     .hedge(Hedge::adaptive().quantile(0.95).max_concurrent(2))
//!     .build()
//!     .expect("valid policy");
//! # async fn demo(policy: rampart::Policy) {
//! // `run` hedges because the policy does: several legs of the callback may run at once.
//! let v = policy.run(async |attempt| Ok::<_, std::io::Error>(attempt.number())).await;
//! # let _ = v; }
//! ```
//!
//! | knob | default | meaning |
//! |---|---|---|
//! | delay | adaptive: the p95 of successful attempts over 30 s, once 20 samples are in; at least 10 ms | how long the first attempt runs alone |
//! | [`fixed`](Hedge::fixed) | | a fixed delay instead (at most 1 h); zero launches every leg at once |
//! | `max_concurrent` | 2 | legs in flight at once (at most 8) |
//! | total legs | `max_attempts` | hedges and retries count alike |
//!
//! A hedge is armed only when the breaker is closed, the estimate is warm, the delay fits in
//! the time left, the call is not `Sheddable` and the process is not draining; otherwise the
//! call runs one attempt at a time and a `HedgeSuppressed` event says why. Each hedge is charged
//! to the retry budget like a retry. The first `Ok` wins; the other legs are cancelled and
//! dropped, neither classified nor counted by the breaker. A failed leg launches the next one at
//! once. A call of a hedging policy allocates its hedged state once (one box, so that calls of
//! policies that do not hedge stay small); each hedge that fires is one more boxed future.
//!
//! Events: `HedgeStarted`, `HedgeWon`, `HedgeDiscarded`, `HedgeSuppressed`.

use std::fmt;
use std::time::Duration;

use crate::error::ConfigProblem;

/// The most legs a hedged call runs at once.
pub const MAX_LEGS: usize = 8;

/// The longest hedge delay, fixed or the adaptive floor: a first attempt left alone for longer
/// is not being hedged.
const MAX_DELAY: Duration = Duration::from_secs(3600);
/// The longest window of the adaptive estimate.
const MAX_WINDOW: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Delay {
    Adaptive {
        quantile: f64,
        window: Duration,
        min_samples: u32,
        floor: Duration,
    },
    Fixed(Duration),
}

/// How a policy hedges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hedge {
    pub(crate) delay: Delay,
    pub(crate) max_concurrent: u32,
}

impl Hedge {
    /// Hedge after the p95 of recent successful attempts (30 s window, 20 samples needed,
    /// at least 10 ms), two legs at most.
    pub fn adaptive() -> Self {
        Hedge {
            delay: Delay::Adaptive {
                quantile: 0.95,
                window: Duration::from_secs(30),
                min_samples: 20,
                floor: Duration::from_millis(10),
            },
            max_concurrent: 2,
        }
    }

    /// Hedge after a fixed delay (at most 1 h); zero launches `max_concurrent` legs at once.
    pub fn fixed(delay: Duration) -> Self {
        Hedge {
            delay: Delay::Fixed(delay),
            max_concurrent: 2,
        }
    }

    /// The latency quantile the adaptive delay waits for (default 0.95).
    pub fn quantile(mut self, q: f64) -> Self {
        if let Delay::Adaptive { quantile, .. } = &mut self.delay {
            *quantile = q;
        }
        self
    }

    /// The window of the adaptive estimate (default 30 s; positive, at most 24 h).
    pub fn window(mut self, span: Duration) -> Self {
        if let Delay::Adaptive { window, .. } = &mut self.delay {
            *window = span;
        }
        self
    }

    /// Samples needed before the adaptive estimate is trusted (default 20).
    pub fn min_samples(mut self, n: u32) -> Self {
        if let Delay::Adaptive { min_samples, .. } = &mut self.delay {
            *min_samples = n;
        }
        self
    }

    /// The shortest adaptive delay (default 10 ms; at most 1 h, like a fixed delay).
    pub fn floor(mut self, shortest: Duration) -> Self {
        if let Delay::Adaptive { floor, .. } = &mut self.delay {
            *floor = shortest;
        }
        self
    }

    /// Legs in flight at once, the first included (default 2, at most [`MAX_LEGS`]).
    pub fn max_concurrent(mut self, legs: u32) -> Self {
        self.max_concurrent = legs;
        self
    }

    pub(crate) fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        if let Delay::Fixed(delay) = self.delay
            && delay > MAX_DELAY
        {
            problems.push(ConfigProblem::new(
                "hedge.delay",
                format!("must be at most 1h (was {delay:?})"),
            ));
        }
        if !(2..=MAX_LEGS as u32).contains(&self.max_concurrent) {
            problems.push(ConfigProblem::new(
                "hedge.max_concurrent",
                format!(
                    "must be between 2 and {MAX_LEGS} (was {})",
                    self.max_concurrent
                ),
            ));
        }
        if let Delay::Adaptive {
            quantile,
            window,
            min_samples,
            floor,
        } = self.delay
        {
            if floor > MAX_DELAY {
                problems.push(ConfigProblem::new(
                    "hedge.floor",
                    format!("must be at most 1h (was {floor:?})"),
                ));
            }
            if window > MAX_WINDOW {
                problems.push(ConfigProblem::new(
                    "hedge.window",
                    format!("must be at most 24h (was {window:?})"),
                ));
            }
            if !(quantile > 0.0 && quantile < 1.0) {
                problems.push(ConfigProblem::new(
                    "hedge.quantile",
                    format!("must be between 0 and 1, exclusive (was {quantile})"),
                ));
            }
            if window.is_zero() {
                problems.push(ConfigProblem::new(
                    "hedge.window",
                    "must be positive (was 0ns)",
                ));
            }
            if min_samples == 0 {
                problems.push(ConfigProblem::new(
                    "hedge.min_samples",
                    "must be at least 1 (was 0)",
                ));
            }
        }
    }
}

impl fmt::Display for Hedge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.delay {
            Delay::Adaptive {
                quantile, window, ..
            } => write!(
                f,
                "hedge at p{} over {window:?}",
                (quantile * 100.0).round()
            )?,
            Delay::Fixed(delay) => write!(f, "hedge after {delay:?}")?,
        }
        write!(f, ", {} legs", self.max_concurrent)
    }
}

/// Why a call was not hedged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Suppressed {
    /// The breaker is not closed.
    BreakerNotClosed,
    /// The latency estimate has too few samples.
    Cold,
    /// The hedge delay does not fit in the time left.
    NoTime,
    /// The call is `Sheddable`.
    Sheddable,
    /// The process is draining.
    Draining,
    /// The retry budget refused the hedge.
    Budget,
    /// Admission would not let the hedge start now.
    Admission,
}

impl fmt::Display for Suppressed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Suppressed::BreakerNotClosed => "breaker not closed",
            Suppressed::Cold => "latency estimate cold",
            Suppressed::NoTime => "delay does not fit the deadline",
            Suppressed::Sheddable => "sheddable call",
            Suppressed::Draining => "process draining",
            Suppressed::Budget => "retry budget exhausted",
            Suppressed::Admission => "admission refused",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(hedge: Hedge) -> Vec<String> {
        let mut problems = Vec::new();
        hedge.validate(&mut problems);
        problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn an_adaptive_floor_or_window_beyond_its_bound_is_a_config_problem() {
        let hedge = Hedge::adaptive()
            .floor(Duration::MAX)
            .window(Duration::from_secs(24 * 3600 + 1));
        assert_eq!(
            problems(hedge),
            [
                "hedge.floor must be at most 1h (was 18446744073709551615.999999999s)",
                "hedge.window must be at most 24h (was 86401s)",
            ]
        );
        let at_the_bounds = Hedge::adaptive()
            .floor(Duration::from_secs(3600))
            .window(Duration::from_secs(24 * 3600));
        assert_eq!(problems(at_the_bounds), Vec::<String>::new());
    }
}
