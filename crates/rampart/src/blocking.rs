//! Blocking execution: the same policy, for a synchronous callback on the calling thread.
//!
//! Same retries, deadline arithmetic, budget, classification and events as the async executor:
//! both run the decisions of [`executor`](crate::executor)'s `CallState` and differ only in how
//! they wait. Here a backoff blocks the thread (and a caller cancellation wakes it at once),
//! and the attempt's token is cancelled at its ceiling by one shared timer thread (or by the
//! manual clock when a test advances it), not by a thread per call. No tokio runtime is needed.
//!
//! ```
//! use std::time::Duration;
//! use rampart::Policy;
//!
//! let policy = Policy::builder()
//!     .max_attempts(3)
//!     .attempt_timeout(Duration::from_millis(200))
//!     .build()
//!     .expect("valid policy");
//! let size = policy.run_blocking(|attempt| {
//!     // Long work checks its attempt between steps.
//!     if attempt.is_cancelled() {
//!         return Err(std::io::Error::other("stopped at the ceiling"));
//!     }
//!     std::fs::metadata(".").map(|m| m.len())
//! });
//! assert!(size.is_ok());
//! ```
//!
//! # Cancellation
//!
//! A blocking attempt cannot be abandoned: it is always awaited. Its token
//! ([`Attempt::token`], [`Attempt::is_cancelled`]) fires at the ceiling; a callback that ignores
//! it and overruns its ceiling by more than 1 s is reported as `OrphanedWork` when it returns.
//! Anything that needs async execution (hedging) fails the call before the callback runs, with
//! a configuration error that names the option.

use tokio_util::sync::CancellationToken;

use crate::admit::{Admit, AdmitContext};
use crate::attempt::{Attempt, Fired};
use crate::classify::Classify;
use crate::clock::Blocked;
use crate::error::Error;
use crate::executor::{Admitted, Call, CallState, Record, Report, Step, later};
use crate::policy::{Policy, Shared};
use crate::result::{CallResult, Cancelled};

impl<C, A> Policy<C, A> {
    /// Runs the synchronous `op` under this policy on the calling thread; see
    /// [`crate::blocking`].
    pub fn run_blocking<T, E, F>(&self, op: F) -> Result<T, Error<E>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: FnMut(&Attempt) -> Result<T, E>,
    {
        execute_blocking(&self.shared, None, op, ())
    }

    /// Like [`run_blocking`](Self::run_blocking), with the stop reason and attempt log.
    pub fn try_run_blocking<T, E, F>(&self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: FnMut(&Attempt) -> Result<T, E>,
    {
        let mut report = Report::default();
        let outcome = execute_blocking(&self.shared, None, op, &mut report);
        report.into_result(outcome)
    }
}

impl<C, A> Call<'_, C, A> {
    /// Runs the synchronous `op`; see [`Policy::run_blocking`].
    pub fn run_blocking<T, E, F>(self, op: F) -> Result<T, Error<E>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: FnMut(&Attempt) -> Result<T, E>,
    {
        execute_blocking(self.shared(), self.caller(), op, ())
    }

    /// Runs the synchronous `op` and reports how the call went; see
    /// [`Policy::try_run_blocking`].
    pub fn try_run_blocking<T, E, F>(self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: FnMut(&Attempt) -> Result<T, E>,
    {
        let mut report = Report::default();
        let outcome = execute_blocking(self.shared(), self.caller(), op, &mut report);
        report.into_result(outcome)
    }
}

/// The blocking executor: the async loop's steps, waiting by blocking the thread.
fn execute_blocking<T, E, C, A, F, L>(
    shared: &Shared<C, A>,
    caller: Option<&CancellationToken>,
    mut op: F,
    mut log: L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    A: Admit,
    F: FnMut(&Attempt) -> Result<T, E>,
    L: Record,
{
    let mut call = CallState::start(shared, true);
    let mut attempt = Attempt::new(shared.clock.clone(), caller);
    let mut now = call.now();
    let finish = 'call: {
        if let Some(problem) = shared.needs_async() {
            break 'call call.config_error(problem, now);
        }
        if caller.is_some_and(CancellationToken::is_cancelled) {
            break 'call call.cancelled(now);
        }
        let mut last = None;
        loop {
            let (ceiling, permit) = match call.prepare(now, &mut last) {
                Ok(prepared) => prepared,
                Err(finish) => break 'call finish,
            };
            let began = now;
            attempt.begin(call.attempts, ceiling, began);
            let cx = call.admit_context(&attempt, now);
            let (ended, held) = match admit_blocking(shared, &cx, &attempt, caller) {
                Admitted::Permit(held) => {
                    let timer = attempt
                        .deadline()
                        .map(|at| shared.clock.cancel_at(at, attempt.arm_token()));
                    let result = op(&attempt);
                    drop(timer);
                    now = call.now();
                    if attempt.fired().is_none() {
                        if caller.is_some_and(CancellationToken::is_cancelled) {
                            attempt.fire(Fired::Caller);
                        } else if attempt
                            .deadline()
                            .is_some_and(|at| now.is_some_and(|n| n >= at))
                        {
                            attempt.fire(Fired::Ceiling);
                        }
                    }
                    let Some(ended) = call.arbitrate(&attempt, Some(result), caller, began, now)
                    else {
                        attempt.end(false);
                        break 'call call.cancelled(now);
                    };
                    (ended, held)
                }
                Admitted::Refused(refusal) => {
                    now = call.now();
                    (call.not_admitted(&attempt, Some(refusal)), None)
                }
                Admitted::TimedOut => {
                    now = call.now();
                    (call.not_admitted(&attempt, None), None)
                }
                Admitted::Cancelled => break 'call call.cancelled(call.now()),
            };
            let (step, _) = call.conclude(&attempt, ended, began, now, held, permit, &mut log);
            let delay = match step {
                Step::Finish(finish) => break 'call finish,
                Step::Retry(delay, outcome) => {
                    last = Some(outcome);
                    delay
                }
            };
            if !delay.is_zero() {
                let wake = later(&shared.clock, now, delay);
                if shared.clock.block_until(wake, caller) {
                    break 'call call.cancelled(call.now());
                }
                now = call.now();
            } else if caller.is_some_and(CancellationToken::is_cancelled) {
                break 'call call.cancelled(now);
            }
        }
    };
    log.stop(finish.stop);
    finish.outcome
}

/// Admission for a blocking attempt: the component's wait is driven on this thread, bounded by
/// the attempt's ceiling and the caller's token.
fn admit_blocking<C, A: Admit>(
    shared: &Shared<C, A>,
    cx: &AdmitContext<'_>,
    attempt: &Attempt,
    caller: Option<&CancellationToken>,
) -> Admitted<A::Permit> {
    if A::ALWAYS_ADMITS {
        return Admitted::Permit(None);
    }
    match shared
        .clock
        .block_on(shared.admit.acquire(cx), attempt.deadline(), caller)
    {
        Blocked::Ready(Ok(permit)) => Admitted::Permit(Some(permit)),
        Blocked::Ready(Err(refusal)) => Admitted::Refused(refusal),
        Blocked::TimedOut => Admitted::TimedOut,
        Blocked::Cancelled => Admitted::Cancelled,
    }
}
