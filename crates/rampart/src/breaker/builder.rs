//! The breaker's settings: the builder, its validation and the one-line description.

use std::fmt;
use std::time::Duration;

use super::Breaker;
use super::word::MAX_PROBES;
use crate::error::{ConfigError, ConfigProblem};

/// When the breaker opens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Mode {
    /// After this many failures in a row.
    Consecutive { failures: u32 },
    /// When failures are at least `ratio` of the calls in the last `window`, and there were at
    /// least `min_throughput` of them.
    Ratio {
        ratio: f64,
        window: Duration,
        min_throughput: u32,
    },
}

/// Every setting, validated by [`BreakerBuilder::build`].
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Config {
    pub(super) mode: Mode,
    pub(super) slow_call: Option<Duration>,
    pub(super) break_duration: Duration,
    pub(super) max_break: Duration,
    pub(super) jitter: f64,
    pub(super) seed: Option<u64>,
    pub(super) half_open_probes: u32,
    pub(super) probe_successes: u32,
    pub(super) probe_timeout: Duration,
    pub(super) dry_run: bool,
}

/// The longest [`probe_timeout`](BreakerBuilder::probe_timeout).
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Builds a [`Breaker`]; start from [`Breaker::builder`]. Every setting has a default (see the
/// [module table](super#defaults)); [`build`](Self::build) checks them all and reports every
/// problem at once. Two builders are equal when they hold the same settings.
#[must_use]
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerBuilder {
    config: Config,
}

impl BreakerBuilder {
    pub(super) fn new() -> BreakerBuilder {
        BreakerBuilder {
            config: Config {
                mode: Mode::Ratio {
                    ratio: 1.0,
                    window: Duration::from_secs(10),
                    min_throughput: 100,
                },
                slow_call: None,
                break_duration: Duration::from_secs(15),
                max_break: Duration::from_secs(120),
                jitter: 0.1,
                seed: None,
                half_open_probes: 1,
                probe_successes: 2,
                probe_timeout: Duration::from_secs(15),
                dry_run: false,
            },
        }
    }

    /// Opens after `n` failures in a row. A success resets the
    /// count; an ignored outcome leaves it alone. `n` must be at least 1. Replaces
    /// [`failure_ratio`](Self::failure_ratio) if that was set.
    pub fn consecutive_failures(mut self, n: u32) -> Self {
        self.config.mode = Mode::Consecutive { failures: n };
        self
    }

    /// Opens when failures are at least `ratio` of the calls recorded in the last `window`, once
    /// there were at least `min_throughput` calls in it; e.g. `(0.5, 30 s, 10)`. The default
    /// mode is `(1.0, 10 s, 100)`: every call of the last 10 s failed, and there were at least
    /// 100 of them (see [when a hard breaker is the wrong tool](super#when-a-hard-breaker-is-the-wrong-tool)). The window
    /// slides in tenths, so a call stops counting between 0.9 and 1 window after it ended.
    /// `ratio` must be in (0, 1], `window` positive and `min_throughput` at least 1. Replaces
    /// [`consecutive_failures`](Self::consecutive_failures).
    pub fn failure_ratio(mut self, ratio: f64, window: Duration, min_throughput: u32) -> Self {
        self.config.mode = Mode::Ratio {
            ratio,
            window,
            min_throughput,
        };
        self
    }

    /// Counts a success that took at least `threshold` as a failure (off by default). Must be
    /// positive.
    pub fn slow_call(mut self, threshold: Duration) -> Self {
        self.config.slow_call = Some(threshold);
        self
    }

    /// The first break (default 15 s); each consecutive opening doubles it up to
    /// [`max_break`](Self::max_break). Must be positive.
    pub fn break_duration(mut self, base: Duration) -> Self {
        self.config.break_duration = base;
        self
    }

    /// The longest break (default 2 min). Must be at least the break duration.
    pub fn max_break(mut self, max: Duration) -> Self {
        self.config.max_break = max;
        self
    }

    /// Shortens each break by a random fraction of up to `fraction` of it (default 0.1), so
    /// that breakers opened together do not probe together: break × (1 − u × fraction), u
    /// uniform in [0, 1). Jitter never lengthens a break; 0 makes it exact. Must be in [0, 1).
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.config.jitter = fraction;
        self
    }

    /// Seeds the jitter's random numbers, for reproducible tests (random by default).
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = Some(seed);
        self
    }

    /// How many probes half-open admits at once (default 1); one more is rejected. Must be in
    /// 1..=65535.
    pub fn half_open_probes(mut self, n: u32) -> Self {
        self.config.half_open_probes = n;
        self
    }

    /// How many successful probes close the breaker (default 2). Must be in 1..=65535.
    pub fn probe_successes(mut self, n: u32) -> Self {
        self.config.probe_successes = n;
        self
    }

    /// How long half-open waits for its probes (default 15 s). Once every probe slot has been
    /// taken for `timeout` since the last probe was let in, the probes in flight count as
    /// failed: the next [`try_acquire`](Breaker::try_acquire) re-opens the breaker (the break
    /// doubled, as after a failed probe), and after that break a new probe goes through. A probe
    /// that hangs (no attempt timeout, no deadline) therefore cannot hold the breaker half-open
    /// forever; its late outcome changes nothing. Must be positive and at most 24 h.
    ///
    /// The default is longer than a policy's default attempt timeout (10 s), so a probe run by
    /// a default [`Policy`](crate::Policy) ends at its own ceiling first; set it above your
    /// attempt timeout if that is longer.
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.config.probe_timeout = timeout;
        self
    }

    /// Observe only (default `false`): the breaker opens, half-opens and closes as it would,
    /// and each attempt it would have refused is reported ([`Event::WouldReject`] with
    /// `by = "breaker"`, the `rampart.dry_run.rejections` counter with `reason = breaker`)
    /// and runs anyway. A policy does not stop its retries or suppress its hedges for a dry-run
    /// breaker. While it would be open, the attempts it lets through are not recorded (it
    /// would not have seen them), so it opens and closes exactly as an enforcing breaker
    /// would: try a setting on live traffic, then enforce it.
    ///
    /// [`Event::WouldReject`]: crate::Event::WouldReject
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.config.dry_run = dry_run;
        self
    }

    /// A builder holding `config` (the running settings, for an update).
    pub(super) fn from_config(config: Config) -> BreakerBuilder {
        BreakerBuilder { config }
    }

    /// The settings this builder holds.
    pub(super) fn into_config(self) -> Config {
        self.config
    }

    /// The breaker, closed; or every invalid setting at once, each named `breaker.<setter>`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting at once, each naming its field and value.
    pub fn build(self) -> Result<Breaker, ConfigError> {
        let problems = self.config.problems();
        if problems.is_empty() {
            Ok(Breaker::from_config(self.config))
        } else {
            Err(ConfigError::new(problems))
        }
    }
}

impl Config {
    /// The problems of `self` as a replacement for the running `running`: those of
    /// [`build`](BreakerBuilder::build), then what a running breaker cannot change.
    pub(super) fn problems_as_update_of(&self, running: &Config) -> Vec<ConfigProblem> {
        let mut problems = self.problems();
        match (running.mode, self.mode) {
            (Mode::Consecutive { .. }, Mode::Consecutive { .. }) => {}
            (Mode::Ratio { window: was, .. }, Mode::Ratio { window, .. }) => {
                if window != was {
                    problems.push(ConfigProblem::new(
                        "breaker.failure_ratio",
                        format!(
                            "window cannot change on a running breaker (was {window:?}, running {was:?}): its counts are kept in that window"
                        ),
                    ));
                }
            }
            (Mode::Consecutive { .. }, Mode::Ratio { .. }) => problems.push(ConfigProblem::new(
                "breaker.failure_ratio",
                "cannot replace consecutive_failures on a running breaker: the mode is fixed at build",
            )),
            (Mode::Ratio { .. }, Mode::Consecutive { failures }) => {
                problems.push(ConfigProblem::new(
                    "breaker.consecutive_failures",
                    format!(
                        "cannot replace failure_ratio on a running breaker (was {failures}): the mode is fixed at build"
                    ),
                ));
            }
        }
        if self.seed != running.seed {
            let (seed, was) = (self.seed, running.seed);
            problems.push(ConfigProblem::new(
                "breaker.seed",
                format!("cannot change on a running breaker (was {seed:?}, running {was:?})"),
            ));
        }
        problems
    }

    fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let mut problem =
            |field, message: String| problems.push(ConfigProblem::new(field, message));
        match self.mode {
            Mode::Consecutive { failures } => {
                if failures == 0 {
                    problem(
                        "breaker.consecutive_failures",
                        "must be at least 1 (was 0)".into(),
                    );
                }
            }
            Mode::Ratio {
                ratio,
                window,
                min_throughput,
            } => {
                const FIELD: &str = "breaker.failure_ratio";
                if !(ratio > 0.0 && ratio <= 1.0) {
                    problem(FIELD, format!("ratio must be in (0, 1] (was {ratio})"));
                }
                if window.is_zero() {
                    problem(FIELD, "window must be positive (was 0ns)".into());
                }
                if min_throughput == 0 {
                    problem(FIELD, "min_throughput must be at least 1 (was 0)".into());
                }
            }
        }
        if self.slow_call.is_some_and(|t| t.is_zero()) {
            problem("breaker.slow_call", "must be positive (was 0ns)".into());
        }
        if self.break_duration.is_zero() {
            problem(
                "breaker.break_duration",
                "must be positive (was 0ns)".into(),
            );
        }
        if self.max_break < self.break_duration {
            let (base, max) = (self.break_duration, self.max_break);
            let message = format!("must be at least the break duration {base:?} (was {max:?})");
            problem("breaker.max_break", message);
        }
        if !(0.0..1.0).contains(&self.jitter) {
            let jitter = self.jitter;
            problem(
                "breaker.jitter",
                format!("must be in [0, 1) (was {jitter})"),
            );
        }
        let probe_timeout = self.probe_timeout;
        if probe_timeout.is_zero() {
            problem("breaker.probe_timeout", "must be positive (was 0ns)".into());
        } else if probe_timeout > MAX_PROBE_TIMEOUT {
            let message = format!("must be at most 24h (was {probe_timeout:?})");
            problem("breaker.probe_timeout", message);
        }
        for (field, n) in [
            ("breaker.half_open_probes", self.half_open_probes),
            ("breaker.probe_successes", self.probe_successes),
        ] {
            if n == 0 {
                problem(field, "must be at least 1 (was 0)".into());
            } else if n > MAX_PROBES {
                problem(field, format!("must be at most {MAX_PROBES} (was {n})"));
            }
        }
        problems
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("breaker: open ")?;
        match self.mode {
            Mode::Consecutive { failures: 1 } => f.write_str("after 1 failure")?,
            Mode::Consecutive { failures } => write!(f, "after {failures} consecutive failures")?,
            Mode::Ratio {
                ratio,
                window,
                min_throughput,
            } => {
                let percent = (ratio * 10_000.0).round() / 100.0;
                let window = Human(window);
                let calls = if min_throughput == 1 { "call" } else { "calls" };
                write!(
                    f,
                    "at {percent}% failures over {window} (at least {min_throughput} {calls})"
                )?;
            }
        }
        if let Some(slow) = self.slow_call {
            write!(
                f,
                ", successes taking {} or more count as failures",
                Human(slow)
            )?;
        }
        write!(f, ", break {}", Human(self.break_duration))?;
        if self.max_break > self.break_duration {
            write!(f, " doubling to {}", Human(self.max_break))?;
        }
        if self.dry_run {
            f.write_str(" (dry run: reports, never refuses)")?;
        }
        Ok(())
    }
}

/// A duration as a person writes it: `15s`, `2m`, `1h`, else its `Debug` form (`1.5s`, `250ms`).
pub(super) struct Human(pub(super) Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SEC: u128 = 1_000_000_000;
        match self.0.as_nanos() {
            0 => f.write_str("0s"),
            n if n % (3600 * SEC) == 0 => write!(f, "{}h", n / (3600 * SEC)),
            n if n % (60 * SEC) == 0 => write!(f, "{}m", n / (60 * SEC)),
            n if n % SEC == 0 => write!(f, "{}s", n / SEC),
            _ => write!(f, "{:?}", self.0),
        }
    }
}

#[cfg(all(test, not(rampart_loom)))]
mod tests {
    use super::*;

    #[test]
    fn durations_print_the_way_people_write_them() {
        let cases = [(0, "0s"), (15_000, "15s"), (120_000, "2m"), (90_000, "90s")];
        for (ms, text) in cases {
            assert_eq!(Human(Duration::from_millis(ms)).to_string(), text);
        }
        assert_eq!(Human(Duration::from_secs(7200)).to_string(), "2h");
        assert_eq!(Human(Duration::from_millis(1500)).to_string(), "1.5s");
        assert_eq!(Human(Duration::from_millis(250)).to_string(), "250ms");
    }

    #[test]
    fn nan_and_out_of_range_floats_are_problems() {
        let b = BreakerBuilder::new()
            .failure_ratio(f64::NAN, Duration::from_secs(1), 1)
            .jitter(f64::NAN);
        let fields: Vec<_> = b
            .config
            .problems()
            .iter()
            .map(|p| p.message().to_owned())
            .collect();
        assert_eq!(
            fields,
            [
                "ratio must be in (0, 1] (was NaN)",
                "must be in [0, 1) (was NaN)"
            ]
        );
        let b = BreakerBuilder::new().jitter(1.0).half_open_probes(70_000);
        let problems = b.config.problems();
        assert_eq!(
            problems[0].to_string(),
            "breaker.jitter must be in [0, 1) (was 1)"
        );
        assert_eq!(
            problems[1].to_string(),
            "breaker.half_open_probes must be at most 65535 (was 70000)"
        );
    }

    #[test]
    fn a_probe_timeout_must_be_positive_and_at_most_a_day() {
        let message = |timeout| {
            let problems = BreakerBuilder::new()
                .probe_timeout(timeout)
                .config
                .problems();
            problems.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert_eq!(
            message(Duration::ZERO),
            ["breaker.probe_timeout must be positive (was 0ns)"]
        );
        assert_eq!(
            message(Duration::from_secs(24 * 3600 + 1)),
            ["breaker.probe_timeout must be at most 24h (was 86401s)"]
        );
        assert!(message(Duration::from_secs(24 * 3600)).is_empty());
    }
}
