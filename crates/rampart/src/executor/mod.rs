//! The executor: the whole life of a call, in one loop.
//!
//! Strategies are data the loop consults, not layers nested around it; so every bound is
//! known in one place and the arithmetic between them is exact:
//!
//! 1. At the start: a cancelled caller ends the call before anything runs. The effective
//!    deadline is resolved once: the earliest of the policy's, the ambient one (if the policy
//!    reads it) and the drain grace (if draining). Time already spent means no attempt runs.
//! 2. Before each attempt: `remaining = deadline - now`, `ceiling = min(attempt timeout,
//!    remaining)` (a dynamic or adaptive timeout is resolved here). The breaker is asked (an
//!    open breaker ends the call, rejected), then admission (a refusal stands in for the
//!    attempt's outcome, a queue wait is bounded by the ceiling and the caller).
//! 3. The attempt: the callback's future is polled first; only if it is not ready at once are
//!    the ceiling timer and the caller's cancellation armed. When either fires, the attempt's
//!    cancellation is signalled *before* the work is polled again; in abandon mode the work
//!    is dropped after the grace, in cooperative mode it is awaited.
//! 4. Arbitration, after the attempt: caller cancellation wins (a value classified Ok is still
//!    returned); else a fired ceiling turns the attempt's own cancellation outcome into the
//!    executor's timeout outcome (transient); else the outcome stands, for the classifier. The
//!    outcome goes to the listeners, the latency measurements, admission and the breaker.
//! 5. The decision, in this order: Ok → deposit to the budget, return. Permanent → return it.
//!    Attempts exhausted → return the last outcome. Deadline spent → `DeadlineExceeded`.
//!    Draining → `Rejected(Draining)`. The budget refuses (unless the outcome was a
//!    self-imposed refusal) → `Rejected(BudgetExhausted)`. Backoff plus typical latency will
//!    not fit → `DeadlineExceeded`. Else sleep (a cancel during the sleep returns at once) and
//!    go to 2.
//!
//! Steps 2, 4 and 5 are methods of the call's state (`state.rs`), shared with the blocking and
//! hedged executors, which differ only in how they wait.
//!
//! ```
//! # async fn demo() {
//! use std::time::Duration;
//! use rampart::{Error, Policy};
//! use tokio_util::sync::CancellationToken;
//!
//! let policy = Policy::builder()
//!     .max_attempts(3)
//!     .deadline(Duration::from_secs(2))
//!     .attempt_timeout(Duration::from_millis(500))
//!     .build()
//!     .expect("valid policy");
//! let token = CancellationToken::new();
//! token.cancel();
//! let outcome = policy
//!     .with_token(&token)
//!     .run(async |_attempt| Ok::<_, std::io::Error>("never runs"))
//!     .await;
//! assert!(matches!(outcome, Err(Error::Cancelled)));
//! # }
//! ```

mod hedged;
mod race;
mod state;

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::admit::Admit;
use crate::attempt::Attempt;
use crate::classify::{Classify, Verdict};
use crate::clock::{Clock, Instant};
use crate::error::Error;
use crate::policy::{Policy, Shared};
use crate::result::{AttemptLog, AttemptRecord, CallResult, Cancelled, StopReason};

pub(crate) use race::{Admitted, Race, admission, admission_now};
pub(crate) use state::{CallState, Finish, Outcome, Step};

use hedged::execute_hedged;

/// How far past its ceiling an awaited attempt may return before it is reported as orphaned.
pub(crate) const ORPHAN_THRESHOLD: Duration = Duration::from_secs(1);

/// A call about to run, with its caller's token: made by [`Policy::with_token`].
#[derive(Debug)]
#[must_use = "a call does nothing until run"]
pub struct Call<'a, C, A> {
    policy: &'a Policy<C, A>,
    caller: Option<&'a CancellationToken>,
}

impl<'a, C, A> Call<'a, C, A> {
    pub(crate) fn new(policy: &'a Policy<C, A>, caller: Option<&'a CancellationToken>) -> Self {
        Call { policy, caller }
    }

    pub(crate) fn shared(&self) -> &'a Shared<C, A> {
        &self.policy.shared
    }

    pub(crate) fn caller(&self) -> Option<&'a CancellationToken> {
        self.caller
    }

    /// Runs `op`; see [`Policy::run`].
    pub fn run<T, E, F>(self, op: F) -> impl Future<Output = Result<T, Error<E>>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: AsyncFnMut(&Attempt) -> Result<T, E>,
    {
        execute(&self.policy.shared, self.caller, op, ())
    }

    /// Runs `op` and reports how the call went; see [`Policy::try_run`].
    pub async fn try_run<T, E, F>(self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: AsyncFnMut(&Attempt) -> Result<T, E>,
    {
        let mut report = Report::default();
        let outcome = execute(&self.policy.shared, self.caller, op, &mut report).await;
        report.into_result(outcome)
    }
}

impl<'a, C, A> Call<'a, C, A> {
    /// Runs `op`, hedged when the policy hedges; see [`Policy::run_hedged`].
    pub fn run_hedged<T, E, F>(self, op: F) -> impl Future<Output = Result<T, Error<E>>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: AsyncFn(&Attempt) -> Result<T, E>,
    {
        execute_hedged(&self.policy.shared, self.caller, op, ())
    }

    /// Runs `op` hedged and reports how the call went; see [`Policy::try_run_hedged`].
    pub async fn try_run_hedged<T, E, F>(self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: AsyncFn(&Attempt) -> Result<T, E>,
    {
        let mut report = Report::default();
        let outcome = execute_hedged(&self.policy.shared, self.caller, op, &mut report).await;
        report.into_result(outcome)
    }
}

/// Where the attempts of a call are recorded: nowhere for `run`, a report for `try_run`.
pub(crate) trait Record {
    /// Whether records need attempt durations (and so clock reads).
    const TIMED: bool;
    fn record(&mut self, record: AttemptRecord);
    fn stop(&mut self, stop: StopReason);
}

impl Record for () {
    const TIMED: bool = false;
    #[inline(always)]
    fn record(&mut self, _: AttemptRecord) {}
    #[inline(always)]
    fn stop(&mut self, _: StopReason) {}
}

/// What `try_run` learns besides the outcome.
pub(crate) struct Report {
    log: AttemptLog,
    stop: StopReason,
}

impl Default for Report {
    fn default() -> Self {
        Report {
            log: AttemptLog::default(),
            stop: StopReason::Succeeded,
        }
    }
}

impl Report {
    /// The `try_run` result: caller cancellation stays an error.
    pub(crate) fn into_result<T, E>(
        self,
        outcome: Result<T, Error<E>>,
    ) -> Result<CallResult<T, E>, Cancelled> {
        match self.stop {
            StopReason::Cancelled => Err(Cancelled),
            stop => Ok(CallResult {
                outcome,
                stop,
                log: self.log,
            }),
        }
    }
}

impl Record for &mut Report {
    const TIMED: bool = true;
    fn record(&mut self, record: AttemptRecord) {
        self.log.push(record);
    }
    fn stop(&mut self, stop: StopReason) {
        self.stop = stop;
    }
}

/// The async executor: the loop of the module docs.
///
/// Returns the outcome as `run` gives it and tells `log` the stop reason. It is the only future
/// between the caller and the callback: `run` returns it as is, with no wrapper to move it.
pub(crate) async fn execute<T, E, C, A, F, L>(
    shared: &Shared<C, A>,
    caller: Option<&CancellationToken>,
    mut op: F,
    mut log: L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
    A: Admit,
    F: AsyncFnMut(&Attempt) -> Result<T, E>,
    L: Record,
{
    if shared.pass_through && caller.is_none() && !L::TIMED && !shared.drain.is_draining() {
        let finish = pass_through(shared, op).await;
        log.stop(finish.stop);
        return finish.outcome;
    }
    let mut call = CallState::start(shared, L::TIMED);
    let needs_times = L::TIMED || shared.telemetry.is_listened();
    let mut attempt = Attempt::new(shared.clock.clone(), caller);
    let mut now = call.start;
    let finish = 'call: {
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
            let admitted = if A::ALWAYS_ADMITS {
                Admitted::Permit(None)
            } else {
                let cx = call.admit_context(&attempt, now);
                admission(&shared.admit, &cx, &attempt, caller, &shared.clock).await
            };
            // Unpacked before the attempt runs, so nothing of the admission stays in the
            // call's future while the attempt is awaited.
            let (held, refused) = match admitted {
                Admitted::Permit(held) => (held, None),
                Admitted::Refused(refusal) => (None, Some(Some(refusal))),
                Admitted::TimedOut => (None, Some(None)),
                Admitted::Cancelled => break 'call call.cancelled(call.now()),
            };
            let ended = if let Some(refusal) = refused {
                now = call.now();
                call.not_admitted(&attempt, refusal)
            } else {
                let (returned, suspended) =
                    Race::new(op(&attempt), &attempt, caller, &shared.clock, shared.mode).await;
                // An attempt that succeeded on its first poll took no time the call must
                // account for: the clock is read again only when the reading will be used.
                let fresh = suspended || needs_times || !matches!(returned, Some(Ok(_)));
                now = if fresh { call.now() } else { began };
                let Some((outcome, verdict)) =
                    call.arbitrate(&attempt, returned, caller, began, now)
                else {
                    attempt.end(false);
                    break 'call call.cancelled(now);
                };
                if !fresh && !verdict.is_ok() {
                    now = call.now();
                }
                (outcome, verdict)
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
                if sleep_or_cancel(&shared.clock, wake, caller).await {
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

/// The loop above for a policy with one attempt, no bound, no listener and no caller token
/// (`Policy::none()`): nothing can fire, be retried or be reported, so the attempt simply runs.
/// The outcome and stop reason are the ones the loop would give.
#[inline(always)]
async fn pass_through<T, E, C, A, F>(shared: &Shared<C, A>, mut op: F) -> Finish<T, E>
where
    C: Classify<T, E>,
    A: Admit,
    F: AsyncFnMut(&Attempt) -> Result<T, E>,
{
    let mut attempt = Attempt::new(shared.clock.clone(), None);
    attempt.begin(1, None, None);
    let result = op(&attempt).await;
    let verdict = shared.classifier.classify(&result);
    attempt.end(verdict.is_ok());
    let stop = match verdict {
        Verdict::Ok => StopReason::Succeeded,
        Verdict::Permanent => StopReason::Permanent,
        _ => StopReason::AttemptsExhausted,
    };
    Finish {
        outcome: result.map_err(Error::Inner),
        stop,
    }
}

/// `delay` after `now` (read from `clock` if the call did not read it). Delays are bounded by
/// validation (a day at most), so this saturates only on a clock near the end of time, and
/// then at the latest instant (never at `now`, which would turn a long delay into none).
pub(crate) fn later(clock: &Clock, now: Option<Instant>, delay: Duration) -> Instant {
    let now = now.unwrap_or_else(|| clock.now());
    crate::clock::saturating_add(now, delay)
}

/// Sleeps until `wake`; returns true, at once, if the caller cancels first.
pub(crate) async fn sleep_or_cancel(
    clock: &Clock,
    wake: Instant,
    caller: Option<&CancellationToken>,
) -> bool {
    let sleep = clock.sleep_until(wake);
    let Some(caller) = caller else {
        sleep.await;
        return false;
    };
    let mut sleep = std::pin::pin!(sleep);
    let mut cancelled = std::pin::pin!(caller.cancelled());
    std::future::poll_fn(|cx| {
        if cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(true);
        }
        sleep.as_mut().poll(cx).map(|()| false)
    })
    .await
}
