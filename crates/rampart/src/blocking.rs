//! Blocking execution: the same policy, for a synchronous callback on the calling thread.
//!
//! Same retries, deadline arithmetic, budget, classification and events as the async executor:
//! both are drivers of the one call state machine of [`executor`](crate::executor) and differ
//! only in how they wait. Here a backoff blocks the thread (and a caller cancellation wakes it at once),
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
//! let size = policy.call().run_blocking(|attempt| {
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
//! a configuration error that names the option; so does a timeout generator or on-timeout
//! hook that answers with a future ([`MaybeAsync::Pending`](crate::timeout::MaybeAsync)), at
//! the call that meets it: the thread is never blocked on one. An answer given at once works
//! as in an async call.

use tokio_util::sync::CancellationToken;

use crate::admit::Admit;
use crate::attempt::{Attempt, Fired};
use crate::classify::Classify;
use crate::clock::Blocked;
use crate::deadline::Deadline;
use crate::error::Error;
use crate::error::{ConfigError, ConfigProblem};
use crate::executor::{
    Admitted, Call, Machine, Next, Record, Report, Sequential, Shared, StopOnly, begin,
    is_cancelled, later, settle_admission,
};
use crate::fallback::Ending;
use crate::outcome::StopReason;
use crate::result::{CallResult, Cancelled};
impl<C, A, B> Call<'_, C, A, B> {
    /// Runs the synchronous `op` on the calling thread and returns its value or why it
    /// failed; see [`crate::blocking`].
    ///
    /// # Errors
    ///
    /// The callback's own error unchanged ([`Error::Inner`]), or what the policy decided: see
    /// [`Error`] (and [`Call::run`] for the finishers' common contract).
    pub fn run_blocking<T, E, F>(self, op: F) -> Result<T, Error<E>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: FnMut(&Attempt) -> Result<T, E>,
        B: Ending<T, E>,
    {
        let mut stop = StopOnly(StopReason::Succeeded);
        let (shared, caller, deadline) = (self.shared(), self.caller(), self.given_deadline());
        let outcome = execute_blocking(shared, caller, deadline, op, &mut stop);
        end_blocking(self, stop.0, outcome).0
    }

    /// Runs the synchronous `op` on the calling thread and reports how the call went (see
    /// [`Call::try_run`]).
    ///
    /// # Errors
    ///
    /// [`Cancelled`] when the caller cancelled; every other end is in the [`CallResult`].
    pub fn try_run_blocking<T, E, F>(self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: FnMut(&Attempt) -> Result<T, E>,
        B: Ending<T, E>,
    {
        let mut report = Report::default();
        let (shared, caller, deadline) = (self.shared(), self.caller(), self.given_deadline());
        let outcome = execute_blocking(shared, caller, deadline, op, &mut report);
        let stop = report.stop;
        report.into_result(end_blocking(self, stop, outcome))
    }
}

/// The outcome of `call`, stopped for `stop`, or its fallback's answer polled once (a blocking
/// call cannot wait for one that is not ready: that ends it with a configuration error); and
/// whether the fallback answered.
fn end_blocking<C, A, B, T, E>(
    call: Call<'_, C, A, B>,
    stop: StopReason,
    outcome: Result<T, Error<E>>,
) -> (Result<T, Error<E>>, bool)
where
    B: Ending<T, E>,
{
    let shared = call.shared();
    let answer = match call.ending(stop, outcome) {
        Ok(answer) => answer,
        Err(outcome) => return (outcome, false),
    };
    let mut answer = std::pin::pin!(answer);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match answer.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(answer) => {
            shared.fell_back(stop);
            (answer, true)
        }
        std::task::Poll::Pending => (Err(pending_fallback(&shared.name)), false),
    }
}

#[cold]
fn pending_fallback<E>(policy: &str) -> Error<E> {
    let problem = ConfigProblem::new(
        "fallback",
        format!(
            "of policy `{policy}` answered with a future that is not ready; a blocking call cannot await it: answer with `value`, or run the call with `run`"
        ),
    );
    Error::Config(ConfigError::new(vec![problem]))
}

/// The blocking driver: waits for what the machine asks by blocking the thread.
fn execute_blocking<T, E, C, A, F, L>(
    shared: &Shared<C, A>,
    caller: Option<&CancellationToken>,
    deadline: Option<Deadline>,
    mut op: F,
    log: L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    A: Admit,
    F: FnMut(&Attempt) -> Result<T, E>,
    L: Record,
{
    let clock = &shared.clock;
    let live = shared.snapshot();
    let mut machine: Machine<'_, T, E, C, A, L, Sequential> = begin(shared, live, log, deadline);
    if let Some(problem) = shared.needs_async() {
        return machine.config_error(problem, clock.now()).outcome;
    }
    let mut attempt = Attempt::new(clock.clone(), caller);
    let mut next = machine.start(is_cancelled(caller));
    loop {
        next = match next {
            Next::Attempt(ticket) => 'attempt: {
                attempt.begin(ticket.number, ticket.ceiling, ticket.began, ticket.resends);
                let (mut ticket, waited) = if ticket.admitted {
                    (ticket, None)
                } else {
                    let cx = machine.ticket_context(&ticket, &attempt);
                    let deadline = attempt.ceiling();
                    let answer = match clock.block_on(shared.admit.acquire(&cx), deadline, caller) {
                        Blocked::Ready(Ok(permit)) => Admitted::Permit(Some(permit)),
                        Blocked::Ready(Err(refusal)) => Admitted::Refused(refusal),
                        Blocked::TimedOut => Admitted::TimedOut,
                        Blocked::Cancelled => Admitted::Cancelled,
                    };
                    match settle_admission(&mut machine, ticket, answer, clock) {
                        Ok(admitted) => admitted,
                        Err(next) => break 'attempt next,
                    }
                };
                // The attempt is always awaited; its token fires at the ceiling from the shared
                // timer thread (or the manual clock).
                let timer = attempt
                    .ceiling()
                    .map(|at| clock.cancel_at(at, attempt.arm_token()));
                let span = machine.attempt_span(&ticket, waited);
                let result = span.in_scope(|| op(&attempt));
                drop(timer);
                let now = clock.now();
                if attempt.fired().is_none() {
                    if is_cancelled(caller) {
                        attempt.fire(Fired::Caller);
                    } else if attempt.ceiling().is_some_and(|at| now >= at) {
                        attempt.fire(Fired::Ceiling);
                    }
                }
                let next = machine.returned(
                    &attempt,
                    &mut ticket,
                    Some(result),
                    is_cancelled(caller),
                    now,
                );
                span.record_outcome(machine.attempt_outcome());
                match next {
                    Ok(value) => return Ok(value),
                    Err(next) => next,
                }
            }
            // A zero backoff waits for nothing: the caller's token is checked at once.
            Next::Sleep { from, delay } if delay.is_zero() => {
                machine.woke(from, is_cancelled(caller))
            }
            Next::Sleep { from, delay } => {
                let cancelled = clock.block_until(later(from, delay), caller);
                machine.woke(clock.now(), cancelled)
            }
            // Never blocks the thread on a generator's or hook's future: refused at this call.
            Next::Generate { .. } | Next::Hook { .. } => {
                return machine.cannot_block(clock.now()).outcome;
            }
            Next::Wait(never) => match never {},
            Next::Done(finish) => return finish.outcome,
        };
    }
}
