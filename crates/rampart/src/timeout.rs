//! The per-attempt bound: what happens at an attempt's ceiling ([`TimeoutMode`]), a ceiling
//! computed per attempt ([`TimeoutContext`], for
//! [`attempt_timeout_fn`](crate::PolicyBuilder::attempt_timeout_fn)), one that follows the
//! dependency's measured latency ([`AdaptiveTimeout`]), and the answer of a generator or an
//! [`on_timeout`](crate::PolicyBuilder::on_timeout) hook that may have to wait
//! ([`MaybeAsync`]).
//!
//! The executor resolves each attempt's ceiling as `min(attempt timeout, time left)`; see
//! [`crate::executor`].
//!
//! ```
//! use std::time::Duration;
//! use rampart::{AdaptiveTimeout, Policy, TimeoutMode};
//!
//! let policy = Policy::builder()
//!     .attempt_timeout(Duration::from_millis(500))
//!     .timeout_mode(TimeoutMode::Abandon { grace: Duration::from_millis(10) })
//!     .adaptive_attempt_timeout(AdaptiveTimeout::default().multiple(4.0))
//!     .build()
//!     .expect("valid policy");
//! # drop(policy);
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ConfigProblem;

/// What happens to an attempt whose ceiling has passed.
///
/// Either way the attempt's cancellation fires at the ceiling first, and an attempt that
/// finishes after that with a value has the value delivered (with a `TimeoutIgnored` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeoutMode {
    /// Keep polling the attempt for `grace` after its ceiling, then drop it. The default, with
    /// zero grace: the attempt gets one more poll in which to see its cancellation.
    Abandon {
        /// How long the attempt may go on after its ceiling.
        grace: Duration,
    },
    /// Await the attempt however long it takes, as a cooperative timeout does. An attempt that
    /// overruns its ceiling by more than 1 s is reported as `OrphanedWork` when it returns.
    Cooperative,
}

impl Default for TimeoutMode {
    fn default() -> Self {
        TimeoutMode::Abandon {
            grace: Duration::ZERO,
        }
    }
}

/// Handed to a dynamic attempt-timeout generator before each attempt.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct TimeoutContext<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// The attempt about to start, 1-based.
    pub attempt: u32,
    /// The policy's fixed attempt timeout, if any.
    pub default: Option<Duration>,
    /// Time left before the call's deadline, if any.
    pub remaining: Option<Duration>,
}

/// An attempt timeout that follows the dependency: a multiple of a measured latency quantile
/// of successful attempts, never below a floor and never above the configured attempt timeout.
/// Until enough samples are in, the configured timeout applies.
///
/// | knob | default |
/// |---|---|
/// | `multiple` | 3 |
/// | `quantile` | 0.95 |
/// | `window` | 5 min |
/// | `min_samples` | 20 |
/// | `floor` | 50 ms |
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveTimeout {
    multiple: f64,
    pub(crate) quantile: f64,
    pub(crate) window: Duration,
    pub(crate) min_samples: u32,
    floor: Duration,
}

impl Default for AdaptiveTimeout {
    fn default() -> Self {
        AdaptiveTimeout {
            multiple: 3.0,
            quantile: 0.95,
            window: Duration::from_secs(300),
            min_samples: 20,
            floor: Duration::from_millis(50),
        }
    }
}

impl AdaptiveTimeout {
    /// The multiple of the quantile (default 3; at least 1).
    pub fn multiple(mut self, multiple: f64) -> Self {
        self.multiple = multiple;
        self
    }

    /// The latency quantile (default 0.95).
    pub fn quantile(mut self, quantile: f64) -> Self {
        self.quantile = quantile;
        self
    }

    /// The window the quantile is measured over (default 5 min).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Samples needed before the measurement is trusted (default 20).
    pub fn min_samples(mut self, samples: u32) -> Self {
        self.min_samples = samples;
        self
    }

    /// The lowest timeout it sets (default 50 ms).
    pub fn floor(mut self, floor: Duration) -> Self {
        self.floor = floor;
        self
    }

    /// The timeout for a measured quantile, capped by the configured one.
    pub(crate) fn ceiling(&self, measured: Duration, configured: Option<Duration>) -> Duration {
        let adaptive = measured.mul_f64(self.multiple).max(self.floor);
        configured.map_or(adaptive, |c| c.min(adaptive))
    }

    pub(crate) fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        if !(self.multiple.is_finite() && (1.0..=1000.0).contains(&self.multiple)) {
            problems.push(ConfigProblem::new(
                "adaptive_attempt_timeout.multiple",
                format!("must be between 1 and 1000 (was {})", self.multiple),
            ));
        }
        if !(self.quantile > 0.0 && self.quantile < 1.0) {
            problems.push(ConfigProblem::new(
                "adaptive_attempt_timeout.quantile",
                format!("must be between 0 and 1, exclusive (was {})", self.quantile),
            ));
        }
        if self.window.is_zero() {
            problems.push(ConfigProblem::new(
                "adaptive_attempt_timeout.window",
                "must be positive (was 0ns)",
            ));
        }
        if self.floor.is_zero() {
            problems.push(ConfigProblem::new(
                "adaptive_attempt_timeout.floor",
                "must be positive (was 0ns)",
            ));
        }
    }
}

/// The largest timeout a generator may return: a day, like the other bounds of a policy.
pub(crate) const MAX_GENERATED: Duration = Duration::from_secs(24 * 3600);

/// The future of an answer that was not ready: boxed, so one allocation each time a generator
/// or hook answers this way (an answer given at once allocates nothing).
pub type PendingAnswer<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What an [`attempt_timeout_fn`](crate::PolicyBuilder::attempt_timeout_fn) generator or an
/// [`on_timeout`](crate::PolicyBuilder::on_timeout) hook answers: a value now, or a future of
/// it. The Rust form of a `ValueTask`.
///
/// A plain value converts into [`Ready`](Self::Ready), so a generator returning a `Duration`
/// and a hook returning `()` need no wrapping; an answer given at once costs nothing and works
/// in every executor. A [`Pending`](Self::Pending) answer is awaited by the async executor
/// ([`Policy::run`](crate::Policy::run)); a blocking call ([`crate::blocking`]) never blocks
/// its thread on it: the call ends with [`Error::Config`](crate::Error::Config) naming the
/// generator or hook.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// use std::time::Duration;
/// use rampart::Policy;
/// use rampart::timeout::MaybeAsync;
///
/// let policy = Policy::builder()
///     // Looked up somewhere that has to be awaited (here, a short sleep).
///     .attempt_timeout_fn(|cx| {
///         let attempt = cx.attempt;
///         MaybeAsync::pending(async move {
///             tokio::time::sleep(Duration::from_millis(1)).await;
///             Duration::from_millis(100) * attempt
///         })
///     })
///     .build()
///     .expect("valid policy");
/// let ceiling = policy
///     .run(async |attempt| Ok::<_, std::io::Error>(attempt.timeout()))
///     .await;
/// assert_eq!(ceiling.unwrap(), Some(Duration::from_millis(100)));
/// # }
/// ```
#[must_use = "an answer does nothing unless returned to the policy"]
pub enum MaybeAsync<T> {
    /// The answer, given at once.
    Ready(T),
    /// A future of the answer, for the async executor to await.
    Pending(PendingAnswer<T>),
}

impl<T> MaybeAsync<T> {
    /// An answer that `future` gives when it completes (boxes it: one allocation).
    pub fn pending(future: impl Future<Output = T> + Send + 'static) -> Self {
        MaybeAsync::Pending(Box::pin(future))
    }
}

impl<T> From<T> for MaybeAsync<T> {
    fn from(value: T) -> Self {
        MaybeAsync::Ready(value)
    }
}

impl<T: fmt::Debug> fmt::Debug for MaybeAsync<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaybeAsync::Ready(value) => f.debug_tuple("Ready").field(value).finish(),
            MaybeAsync::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

pub(crate) type TimeoutFn = Arc<dyn Fn(&TimeoutContext<'_>) -> MaybeAsync<Duration> + Send + Sync>;
