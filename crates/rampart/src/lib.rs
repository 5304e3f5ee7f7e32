//! rampart: one policy for every call to a dependency.
//!
//! Services call services. rampart runs each such call under one [`Policy`]: retries with
//! [backoff], a per-attempt timeout and a total deadline with exact arithmetic between
//! them, and a precise cancellation contract. The whole life of a call is one state
//! machine in [`executor`]; strategies are data it consults.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use rampart::Policy;
//!
//! let policy = Policy::builder()
//!     .name("inventory")
//!     .max_attempts(3)
//!     .total_timeout(Duration::from_secs(2))
//!     .attempt_timeout(Duration::from_millis(500))
//!     .build()?;
//!
//! let stock: u32 = policy
//!     .run(async |attempt| {
//!         tokio::select! {
//!             _ = attempt.cancelled() => Err(std::io::Error::other("cancelled")),
//!             n = async { Ok::<_, std::io::Error>(42) } => n,
//!         }
//!     })
//!     .await?;
//! assert_eq!(stock, 42);
//! # Ok(()) }
//! ```
//!
//! # The contract in brief
//!
//! - Three end reasons, never conflated: the caller cancelled → [`Error::Cancelled`]; the
//!   attempt passed its ceiling → the executor's own timeout outcome, transient; the callback
//!   returned → the [classifier](classify) decides.
//! - Caller cancellation is checked at the start, after every attempt and during every
//!   backoff; it is never retried, counted or converted, and no classifier can override it. A
//!   value returned while the caller cancels is still returned.
//! - `ceiling = min(attempt_timeout, time left)`; a backoff that will not fit is not slept.
//! - The callback's own error is returned unchanged ([`Error::Inner`]); a final value
//!   classified transient is returned as the value.
//!
//! # Modules
//!
//! | module | what |
//! |---|---|
//! | [`admit`] | admission: may this attempt start at all |
//! | [`limit`] | ready-made admission components: limiters |
//! | [`policy`] | `Policy`, its builder and defaults, and the settings that change at run time |
//! | [`executor`] | `Call` (one call's token, deadline and fallback, and how it runs), the call state machine and the drivers that run it |
//! | [`hedge`] | hedging: a second attempt when the first is slower than usual |
//! | [`keyed`] | one policy definition with its own state per tenant, host or route, in a bounded table |
//! | [`blocking`] | the same policy for a synchronous callback |
//! | [`stream`] | a call that answers with a stream: retried until its first item, then bounded |
//! | [`fallback`] | an answer for the ends of a call you name, instead of its error |
//! | [`attempt`] | the handle a callback receives |
//! | [`classify`] | verdicts and classifiers |
//! | [`backoff`] | delay curves and jitter |
//! | [`breaker`] | the circuit breaker: fail fast while a dependency is down |
//! | [`budget`] | the retry budget: retries capped to a fraction of traffic |
//! | [`chaos`] | chaos injection: faults, latency and outcomes injected into a share of attempts |
//! | [`clock`] | the injectable clock (system or manual) |
//! | [`deadline`] | `Deadline`: the instant a caller stops waiting |
//! | [`criticality`] | `Criticality`: how much a request matters, and its strict wire parser |
//! | [`ambient`] | the deadline and criticality of the current request, across tasks |
//! | [`drain`] | graceful shutdown: no retries, deadlines clamped to the grace |
//! | [`event`] | events, listeners and hooks |
//! | [`observe`] | the optional `tracing` and `metrics` features: the metric table |
//! | [`error`] | `Error<E>` and `ConfigError` |
//! | [`latency`] | latency histograms behind hedging and adaptive ceilings |
//! | [`result`] | `CallResult` and the attempt log of `try_run` |
//! | [`outcome`] | `StopReason`, `AttemptOutcome` and `StreamEnd`: the vocabulary events and results share |
//! | [`timeout`] | the per-attempt bound: timeout mode, generated and adaptive timeouts |
//! | [`testing`] | testing under a policy: tokio's paused time first, `advance_until` and `wait_for_pending` for a manual clock |
//! | `tower` | feature `tower`: a tower `Layer` that runs any service's calls under a policy |
//! | `config` | feature `serde`: policies as configuration, a file of named policies with inherited defaults |

pub mod admit;
pub mod ambient;
pub mod attempt;
pub mod backoff;
pub mod blocking;
pub mod breaker;
pub mod budget;
pub mod chaos;
pub mod classify;
pub mod clock;
#[cfg(feature = "serde")]
pub mod config;
pub mod criticality;
pub mod deadline;
pub mod drain;
pub mod error;
pub mod event;
pub mod executor;
pub mod fallback;
pub mod hedge;
pub mod keyed;
pub mod latency;
pub mod limit;
pub mod observe;
pub mod outcome;
pub mod policy;
pub mod result;
pub mod stream;
mod swap;
mod sync;
pub mod testing;
pub mod timeout;
#[cfg(feature = "tower")]
pub mod tower;

pub use ambient::Ambient;
pub use attempt::Attempt;
pub use breaker::Breaker;
pub use budget::RetryBudget;
pub use classify::{Classify, ErrorsAreTransient, IoErrors, Verdict};
pub use clock::{Clock, Instant, ManualClock};
pub use criticality::Criticality;
pub use deadline::Deadline;
pub use error::{ConfigError, ConfigProblem, DeadlineSource, Error, RejectReason, Unfit};
pub use event::Event;
pub use executor::Call;
pub use executor::callback::Callback;
pub use outcome::{AttemptOutcome, StopReason};
pub use policy::{Policy, PolicyBuilder, PolicySettings};
pub use result::{CallResult, Cancelled};
pub use timeout::{AdaptiveTimeout, TimeoutContext, TimeoutMode};
pub use tokio_util::sync::CancellationToken;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
