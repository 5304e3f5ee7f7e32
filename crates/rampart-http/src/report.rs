//! The report of an outbound call, carried by its response: why the call stopped, its
//! attempts, and the deadline that applied.
//!
//! A response that went through a policy may not be the answer a handler wanted: a `503`
//! comes back as a response when the attempts, the deadline or the retry budget ran out on
//! it, and its status alone does not say which. The reqwest `Client` (`rampart_http::reqwest`,
//! feature `reqwest`) puts a [`CallReport`] in the extensions of every response it returns, and the
//! [outbound layer](crate::outbound) in every response but one that its first attempt
//! answered with success (whose report would say only that: the layer spares its hot path the
//! three allocations of an extension), so that a handler can tell a `503` that was retried
//! until the deadline from one the breaker cut short, and answer accordingly.
//!
//! | response | `CallReport` in its extensions |
//! |---|---|
//! | from the reqwest client | always |
//! | from the outbound layer, answered with success by the first attempt, no hedge sent | none (it would be `Succeeded` after 1 attempt) |
//! | from the outbound layer, any other (a hedged one included: it counts every leg sent) | always |
//! | from the reqwest client's `try_execute` | none: the [`CallResult`] returned is the report |
//!
//! To have a final retryable status come back as an error instead (so that `?` works), turn
//! on [`fail_on_retryable_status`](crate::OutboundBuilder::fail_on_retryable_status): the
//! error, [`ClientError::Status`], carries the response and its
//! report.
//!
//! ```
//! use http::{Response, StatusCode};
//! use rampart::StopReason;
//! use rampart_http::CallReport;
//!
//! fn why(response: &Response<()>) -> &'static str {
//!     match response.extensions().get::<CallReport>().map(CallReport::stop) {
//!         Some(StopReason::DeadlineExceeded) => "out of time",
//!         Some(StopReason::DependencyUnavailable) => "breaker open",
//!         Some(_) => "decided by the policy",
//!         // The outbound layer's first-attempt success, or a response from elsewhere.
//!         None => "answered at once, or not sent through a policy",
//!     }
//! }
//! assert_eq!(why(&Response::new(())), "answered at once, or not sent through a policy");
//! ```

use std::fmt;
use std::time::Duration;

use rampart::result::AttemptLog;
use rampart::{CallResult, DeadlineSource, StopReason};

use crate::error::{ClientError, RetryableStatus};

/// How an outbound call ended; in the extensions of the responses the reqwest client and the
/// outbound layer return (see the [module docs](self) for which).
#[derive(Clone, Copy)]
pub struct CallReport {
    stop: StopReason,
    log: AttemptLog,
    timeout: Option<Duration>,
    source: Option<DeadlineSource>,
}

impl CallReport {
    /// The report of `result`.
    pub(crate) fn of<T, E>(result: &CallResult<T, E>) -> Self {
        CallReport {
            stop: result.stop(),
            log: *result.log(),
            timeout: result.timeout(),
            source: result.deadline_source(),
        }
    }

    /// Why the call stopped: [`Succeeded`](StopReason::Succeeded) for a response the
    /// classifier accepted, else what ended the retries on this response
    /// ([`AttemptsExhausted`](StopReason::AttemptsExhausted),
    /// [`DeadlineExceeded`](StopReason::DeadlineExceeded),
    /// [`BudgetExhausted`](StopReason::BudgetExhausted), ...).
    pub fn stop(&self) -> StopReason {
        self.stop
    }

    /// Attempts made, this response's included.
    pub fn attempts(&self) -> u32 {
        self.log.total()
    }

    /// The last attempts of the call, each with how it ended and how long it ran.
    pub fn log(&self) -> &AttemptLog {
        &self.log
    }

    /// The deadline that applied to the call, as a timeout (the time from the call's start to
    /// it), as the call resolved it ([`CallResult::timeout`]): the policy's own, a shorter
    /// one inherited from the caller (the ambient deadline of the request being served, or a
    /// deadline header written on the request), or a drain's grace. `None` when the call had
    /// none.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Where the deadline of [`timeout`](Self::timeout) came from; `None` when there was none,
    /// or when a drain's grace was the earliest bound.
    pub fn deadline_source(&self) -> Option<DeadlineSource> {
        self.source
    }
}

impl fmt::Debug for CallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallReport")
            .field("stop", &self.stop)
            .field("attempts", &self.attempts())
            .field("timeout", &self.timeout())
            .field("deadline_source", &self.deadline_source())
            .field("log", &self.log)
            .finish()
    }
}

impl fmt::Display for CallReport {
    /// `attempts exhausted after 3 attempts, within the policy's deadline of 2s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attempts = self.attempts();
        let plural = if attempts == 1 { "" } else { "s" };
        write!(f, "{} after {attempts} attempt{plural}", self.stop)?;
        match (self.timeout, self.source) {
            (Some(deadline), Some(DeadlineSource::Policy)) => {
                write!(f, ", within the policy's deadline of {deadline:?}")
            }
            (Some(deadline), Some(_)) => {
                write!(f, ", within the inherited deadline of {deadline:?}")
            }
            (Some(grace), None) => write!(f, ", within the drain's grace of {grace:?}"),
            (None, _) => Ok(()),
        }
    }
}

/// A response a report can be put in.
pub(crate) trait Carries: crate::classify::HttpResponse + Send + 'static {
    fn extensions_mut(&mut self) -> &mut http::Extensions;
}

impl<B: Send + 'static> Carries for http::Response<B> {
    fn extensions_mut(&mut self) -> &mut http::Extensions {
        http::Response::extensions_mut(self)
    }
}

#[cfg(feature = "reqwest")]
impl Carries for ::reqwest::Response {
    fn extensions_mut(&mut self) -> &mut http::Extensions {
        ::reqwest::Response::extensions_mut(self)
    }
}

/// A finished call as a client returns it: its response with the call's report in its
/// extensions, or, with `fail_on_status`, a response that ended the retries as
/// [`ClientError::Status`]; its error as [`ClientError::Call`].
///
/// With `first_success_bare`, a response its first attempt answered with success gets no
/// report: its report says only that, and putting it in costs a request three allocations
/// (the extensions' map and the boxed value), which the outbound layer's hot path does not
/// spend.
pub(crate) fn finish<R: Carries, E>(
    result: CallResult<R, E>,
    fail_on_status: bool,
    first_success_bare: bool,
) -> Result<R, ClientError<E>> {
    // A first attempt's success, bare: read from the result before any report is made (a
    // report copies the attempt log), and never an error (`fail_on_status` spares a success).
    if first_success_bare && result.stop() == StopReason::Succeeded && result.log().total() == 1 {
        return result.into_result().map_err(ClientError::Call);
    }
    let report = CallReport::of(&result);
    let mut response = result.into_result().map_err(ClientError::Call)?;
    if fail_on_status && !matches!(report.stop, StopReason::Succeeded | StopReason::Permanent) {
        let status = response.status();
        let status = RetryableStatus::new(status, report, response);
        return Err(ClientError::Status(Box::new(status)));
    }
    let first_success = report.stop == StopReason::Succeeded && report.attempts() == 1;
    if !(first_success_bare && first_success) {
        response.extensions_mut().insert(report);
    }
    Ok(response)
}
