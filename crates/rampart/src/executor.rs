//! The executor: the whole life of a call, in one loop.
//!
//! Strategies are data the loop consults, not layers nested around it; so every bound is
//! known in one place and the arithmetic between them is exact:
//!
//! 1. At the start: a cancelled caller ends the call before anything runs. The deadline is
//!    resolved once, `start + deadline`; time already spent means no attempt runs.
//! 2. Before each attempt: `remaining = deadline - now`, `ceiling = min(attempt timeout,
//!    remaining)` (a dynamic timeout is generated here and validated).
//! 3. The attempt: the callback's future is polled first; only if it is not ready at once are
//!    the ceiling timer and the caller's cancellation armed. When either fires, the attempt's
//!    cancellation is signalled *before* the work is polled again; in abandon mode the work
//!    is dropped after the grace, in cooperative mode it is awaited.
//! 4. Arbitration, after the attempt: caller cancellation wins (a value classified Ok is still
//!    returned); else a fired ceiling turns the attempt's own cancellation outcome into the
//!    executor's timeout outcome (transient); else the outcome stands, for the classifier.
//! 5. The decision, in this order: Ok → return. Permanent → return it. Attempts exhausted →
//!    return the last outcome. Deadline spent → `DeadlineExceeded`. Backoff plus typical
//!    latency will not fit → `DeadlineExceeded`. Else sleep (a cancel during the sleep returns
//!    at once) and go to 2.
//!
//! Steps 2, 4 and 5 are [`CallState`] methods, shared with the blocking executor, which differs
//! only in how it waits.
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

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::ambient::Ambient;
use crate::attempt::{Attempt, Fired};
use crate::backoff::{BackoffInput, Curve};
use crate::breaker::{BreakerPermit, Evidence, Transition};
use crate::classify::{Classify, Verdict};
use crate::clock::{Clock, Instant, Sleep};
use crate::criticality::Criticality;
use crate::error::{ConfigError, ConfigProblem, DeadlineSource, Error, RejectReason};
use crate::event::{AttemptOutcome, Event, RetryInfo, TimeoutInfo};
use crate::policy::{Policy, Shared, TimeoutContext, TimeoutMode};
use crate::result::{AttemptLog, AttemptRecord, CallResult, Cancelled, StopReason};

/// How far past its ceiling an awaited attempt may return before it is reported as orphaned.
pub(crate) const ORPHAN_THRESHOLD: Duration = Duration::from_secs(1);

/// A call about to run, with its caller's token: made by [`Policy::with_token`].
#[derive(Debug)]
#[must_use = "a call does nothing until run"]
pub struct Call<'a, C> {
    policy: &'a Policy<C>,
    caller: Option<&'a CancellationToken>,
}

impl<'a, C> Call<'a, C> {
    pub(crate) fn new(policy: &'a Policy<C>, caller: Option<&'a CancellationToken>) -> Self {
        Call { policy, caller }
    }

    pub(crate) fn shared(&self) -> &'a Shared<C> {
        &self.policy.shared
    }

    pub(crate) fn caller(&self) -> Option<&'a CancellationToken> {
        self.caller
    }

    /// Runs `op`; see [`Policy::run`].
    pub fn run<T, E, F>(self, op: F) -> impl Future<Output = Result<T, Error<E>>>
    where
        C: Classify<T, E>,
        F: AsyncFnMut(&Attempt) -> Result<T, E>,
    {
        execute(&self.policy.shared, self.caller, op, ())
    }

    /// Runs `op` and reports how the call went; see [`Policy::try_run`].
    pub async fn try_run<T, E, F>(self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        F: AsyncFnMut(&Attempt) -> Result<T, E>,
    {
        let mut report = Report::default();
        let outcome = execute(&self.policy.shared, self.caller, op, &mut report).await;
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

/// How a call ended.
pub(crate) struct Finish<T, E> {
    pub(crate) outcome: Result<T, Error<E>>,
    pub(crate) stop: StopReason,
}

/// An attempt's outcome after arbitration (caller cancellation is decided before this).
pub(crate) enum Outcome<T, E> {
    /// The callback returned this.
    Returned(Result<T, E>),
    /// The executor's own timeout outcome: the ceiling decided the attempt.
    TimedOut,
}

/// What to do after an attempt.
pub(crate) enum Step<T, E> {
    /// The call is over.
    Finish(Finish<T, E>),
    /// Sleep this long, then try again; the failed attempt's outcome is kept as the call's
    /// last failure.
    Retry(Duration, Outcome<T, E>),
}

/// Where a call's effective deadline came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Policy,
    Inherited,
    Drain,
}

/// The call's effective deadline: the earliest of the policy's, the ambient one and the drain
/// grace.
#[derive(Debug, Clone, Copy)]
struct Bound {
    at: Instant,
    /// From the start of the call: what `DeadlineExceeded` reports.
    span: Duration,
    source: Source,
}

/// The running state of one call: everything the loop decides with, shared by the async and
/// the blocking executors.
pub(crate) struct CallState<'p, C> {
    pub(crate) shared: &'p Shared<C>,
    pub(crate) timed: bool,
    start: Option<Instant>,
    deadline: Option<Bound>,
    /// The call's criticality (`Critical` unless the policy reads the ambient one).
    pub(crate) level: Criticality,
    pub(crate) attempts: u32,
    ceiling: Option<Duration>,
    previous_delay: Duration,
    rng: Option<fastrand::Rng>,
}

impl<'p, C> CallState<'p, C> {
    /// Step 1: resolve the clock, the deadline and the level once.
    #[inline(always)]
    pub(crate) fn start(shared: &'p Shared<C>, timed: bool) -> Self {
        let draining = shared.drain.is_draining();
        let timed = timed || shared.reads_clock || draining;
        let start = timed.then(|| shared.clock.now());
        let ambient = if shared.ambient_deadline || shared.ambient_criticality {
            Ambient::current()
        } else {
            Ambient::new()
        };
        let level = match shared.ambient_criticality {
            true => ambient.criticality(),
            false => Criticality::Critical,
        };
        let mut deadline = None;
        if let Some(start) = start {
            let bound = |at: Instant, source| Bound {
                at,
                span: at.saturating_duration_since(start),
                source,
            };
            let policy = shared.deadline.and_then(|span| start.checked_add(span));
            let inherited = ambient
                .deadline()
                .filter(|_| shared.ambient_deadline)
                .map(|d| d.instant());
            let grace = shared.drain.grace_until().filter(|_| draining);
            deadline = [
                policy.map(|at| bound(at, Source::Policy)),
                inherited.map(|at| bound(at, Source::Inherited)),
                grace.map(|at| bound(at, Source::Drain)),
            ]
            .into_iter()
            .flatten()
            .min_by_key(|b| b.at);
        }
        CallState {
            shared,
            timed,
            start,
            deadline,
            level,
            attempts: 0,
            ceiling: None,
            previous_delay: Duration::ZERO,
            rng: None,
        }
    }

    /// The current instant, when this call reads the clock.
    #[inline]
    pub(crate) fn now(&self) -> Option<Instant> {
        self.timed.then(|| self.shared.clock.now())
    }

    fn remaining(&self, now: Option<Instant>) -> Option<Duration> {
        match (self.deadline, now) {
            (Some(bound), Some(now)) => Some(bound.at.saturating_duration_since(now)),
            _ => None,
        }
    }

    /// Time from `began` to `now`, when both were read.
    pub(crate) fn elapsed_since(&self, began: Option<Instant>, now: Option<Instant>) -> Duration {
        match (began, now) {
            (Some(began), Some(now)) => now.saturating_duration_since(began),
            _ => Duration::ZERO,
        }
    }

    /// Ends the call before any attempt: the policy cannot run this way.
    #[cold]
    pub(crate) fn config_error<T, E>(
        &self,
        problem: ConfigProblem,
        now: Option<Instant>,
    ) -> Finish<T, E> {
        let error = Error::Config(ConfigError::new(vec![problem]));
        self.finish(Err(error), StopReason::Config, now)
    }

    pub(crate) fn elapsed(&self, now: Option<Instant>) -> Duration {
        match (self.start, now) {
            (Some(start), Some(now)) => now.saturating_duration_since(start),
            _ => Duration::ZERO,
        }
    }

    /// Step 2: the next attempt's ceiling, or why no attempt may start. [`admit`](Self::admit)
    /// then asks the breaker and counts the attempt.
    #[inline(always)]
    pub(crate) fn begin_attempt<T, E>(
        &mut self,
        now: Option<Instant>,
        last: &mut Option<Outcome<T, E>>,
    ) -> Result<Option<Duration>, Finish<T, E>> {
        let remaining = self.remaining(now);
        if remaining == Some(Duration::ZERO) {
            return Err(self.deadline_exceeded(last.take()));
        }
        let timeout = match &self.shared.timeout_fn {
            None => self.shared.attempt_timeout,
            Some(generator) => {
                let timeout = generator(&TimeoutContext {
                    policy: &self.shared.name,
                    attempt: self.attempts + 1,
                    default: self.shared.attempt_timeout,
                    remaining,
                });
                if timeout.is_zero() {
                    return Err(self.finish(
                        Err(Error::Config(ConfigError::new(vec![ConfigProblem::new(
                            "attempt_timeout_fn",
                            format!(
                                "of policy `{}` returned {timeout:?} for attempt {}; it must return a positive duration",
                                self.shared.name,
                                self.attempts + 1
                            ),
                        )]))),
                        StopReason::Config,
                        now,
                    ));
                }
                Some(timeout)
            }
        };
        self.ceiling = match (timeout, remaining) {
            (Some(t), Some(r)) => Some(t.min(r)),
            (t, r) => t.or(r),
        };
        Ok(self.ceiling)
    }

    /// Step 4: caller cancellation wins; a fired ceiling turns the attempt's own cancellation
    /// outcome into the timeout outcome; anything else stands. `None` is caller cancellation.
    #[inline(always)]
    pub(crate) fn arbitrate<T, E>(
        &self,
        attempt: &Attempt,
        returned: Option<Result<T, E>>,
        caller: Option<&CancellationToken>,
        began: Option<Instant>,
        now: Option<Instant>,
    ) -> Option<(Outcome<T, E>, Verdict)>
    where
        C: Classify<T, E>,
    {
        let caller_cancelled = caller.is_some_and(CancellationToken::is_cancelled)
            || attempt.fired() == Some(Fired::Caller);
        let outcome = match returned {
            None => {
                self.shared.telemetry.emit(Event::AttemptAbandoned {
                    policy: &self.shared.name,
                    attempt: attempt.number(),
                    ceiling: self.ceiling.unwrap_or(Duration::ZERO),
                    grace: match self.shared.mode {
                        TimeoutMode::Abandon { grace } => grace,
                        TimeoutMode::Cooperative => Duration::ZERO,
                    },
                });
                Outcome::TimedOut
            }
            Some(result) => match attempt.fired() {
                Some(Fired::Ceiling) | Some(Fired::Caller) => {
                    self.late_return(attempt, result, began, now)
                }
                None => Outcome::Returned(result),
            },
        };
        let verdict = match &outcome {
            Outcome::Returned(result) => self.shared.classifier.classify(result),
            Outcome::TimedOut => Verdict::Transient,
        };
        if caller_cancelled && !(verdict.is_ok() && matches!(outcome, Outcome::Returned(Ok(_)))) {
            return None;
        }
        Some((outcome, verdict))
    }

    /// An attempt that returned after its cancellation fired.
    fn late_return<T, E>(
        &self,
        attempt: &Attempt,
        result: Result<T, E>,
        began: Option<Instant>,
        now: Option<Instant>,
    ) -> Outcome<T, E> {
        let telemetry = &self.shared.telemetry;
        let policy = &*self.shared.name;
        let ceiling = self.ceiling.unwrap_or(Duration::ZERO);
        let elapsed = match (began, now) {
            (Some(began), Some(now)) => now.saturating_duration_since(began),
            _ => Duration::ZERO,
        };
        let overrun = elapsed.saturating_sub(ceiling);
        if attempt.fired() == Some(Fired::Ceiling) && overrun > ORPHAN_THRESHOLD {
            telemetry.emit(Event::OrphanedWork {
                policy,
                attempt: attempt.number(),
                ceiling,
                overrun,
            });
        }
        if result.is_err() && attempt.was_observed() {
            // The attempt answered its cancellation: that is the timeout's outcome.
            return Outcome::TimedOut;
        }
        if attempt.fired() == Some(Fired::Ceiling) {
            telemetry.emit(Event::TimeoutIgnored {
                policy,
                attempt: attempt.number(),
                ceiling,
                elapsed,
            });
        }
        Outcome::Returned(result)
    }

    /// Reports the attempt to listeners, the log, the on-timeout hook and the latency estimate.
    #[inline(always)]
    pub(crate) fn attempt_ended<T, E>(
        &self,
        outcome: &Outcome<T, E>,
        verdict: Verdict,
        elapsed: Duration,
        log: &mut impl Record,
    ) -> AttemptOutcome {
        let kind = attempt_outcome(outcome, verdict);
        let policy = &*self.shared.name;
        let telemetry = &self.shared.telemetry;
        if telemetry.is_listened() {
            telemetry.emit(Event::AttemptEnded {
                policy,
                attempt: self.attempts,
                outcome: kind,
                elapsed,
            });
        }
        log.record(AttemptRecord {
            number: self.attempts,
            outcome: kind,
            elapsed,
        });
        if kind == AttemptOutcome::TimedOut {
            telemetry.timed_out(TimeoutInfo {
                policy,
                attempt: self.attempts,
                timeout: self.ceiling.unwrap_or(Duration::ZERO),
            });
        }
        if kind == AttemptOutcome::Ok && self.timed && !elapsed.is_zero() {
            self.shared.typical.record(elapsed);
        }
        kind
    }

    /// Step 5: what to do after an attempt, in the contract's order.
    #[inline(always)]
    pub(crate) fn decide<T, E>(
        &mut self,
        outcome: Outcome<T, E>,
        verdict: Verdict,
        kind: AttemptOutcome,
        now: Option<Instant>,
    ) -> Step<T, E> {
        match verdict {
            Verdict::Ok => {
                if let (Some(budget), Some(now)) = (&self.shared.budget, now) {
                    budget.deposit(now);
                }
                return Step::Finish(self.finish(self.result(outcome), StopReason::Succeeded, now));
            }
            Verdict::Permanent => {
                return Step::Finish(self.finish(self.result(outcome), StopReason::Permanent, now));
            }
            _ => {}
        }
        if self.attempts >= self.shared.max_attempts {
            let result = self.result(outcome);
            return Step::Finish(self.finish(result, StopReason::AttemptsExhausted, now));
        }
        let remaining = self.remaining(now);
        if remaining == Some(Duration::ZERO) {
            return Step::Finish(self.deadline_exceeded(Some(outcome)));
        }
        if self.shared.drain.is_draining() {
            return Step::Finish(self.reject(RejectReason::Draining, None, Some(outcome), now));
        }
        if !matches!(verdict, Verdict::Refused { .. })
            && let Err(retry_after) = self.spend_budget(now)
        {
            return Step::Finish(self.reject(
                RejectReason::BudgetExhausted,
                retry_after,
                Some(outcome),
                now,
            ));
        }
        let curve = match verdict {
            Verdict::Throttled { .. } => Curve::Throttled,
            _ => Curve::Transient,
        };
        let delay = self.backoff(curve, verdict.retry_after());
        if let Some(remaining) = remaining
            && delay.saturating_add(self.shared.typical.get()) >= remaining
        {
            return Step::Finish(self.deadline_exceeded(Some(outcome)));
        }
        self.shared.telemetry.retrying(RetryInfo {
            policy: &self.shared.name,
            attempt: self.attempts,
            outcome: kind,
            delay,
        });
        Step::Retry(delay, outcome)
    }

    /// Charges one retry (or hedge) to the budget. A `Sheddable` call must leave half of it.
    pub(crate) fn spend_budget(&self, now: Option<Instant>) -> Result<(), Option<Duration>> {
        match (&self.shared.budget, now) {
            (Some(budget), Some(now)) => {
                let reserve = if self.level.is_sheddable() { 0.5 } else { 0.0 };
                budget.try_spend(now, reserve)
            }
            _ => Ok(()),
        }
    }

    /// Asks the breaker for the attempt `begin_attempt` prepared: a permit to record the
    /// outcome with (the attempt then counts as made), or the call ends rejected, carrying the
    /// last failure if there was one.
    #[inline(always)]
    pub(crate) fn admit<T, E>(
        &mut self,
        now: Option<Instant>,
        last: &mut Option<Outcome<T, E>>,
    ) -> Result<Option<BreakerPermit<'p>>, Finish<T, E>> {
        let (Some(breaker), Some(now)) = (&self.shared.breaker, now) else {
            self.attempts += 1;
            return Ok(None);
        };
        match breaker.try_acquire(now) {
            Ok(permit) => {
                if let Some(transition) = permit.transition() {
                    self.breaker_moved(transition);
                }
                self.attempts += 1;
                Ok(Some(permit))
            }
            Err(rejected) => Err(self.reject(
                RejectReason::DependencyUnavailable,
                rejected.retry_after,
                last.take(),
                Some(now),
            )),
        }
    }

    /// Gives the breaker the attempt's evidence: only transient failures and timeouts count
    /// against the dependency; throttling, permanent errors and refusals are not its health.
    #[inline(always)]
    pub(crate) fn settle(
        &self,
        permit: Option<BreakerPermit<'_>>,
        kind: AttemptOutcome,
        elapsed: Duration,
        now: Option<Instant>,
    ) {
        let (Some(permit), Some(now)) = (permit, now) else {
            return;
        };
        let evidence = match kind {
            AttemptOutcome::Ok => Evidence::Success,
            AttemptOutcome::Transient | AttemptOutcome::TimedOut => Evidence::Failure,
            _ => Evidence::Ignored,
        };
        if let Some(transition) = permit.record(evidence, elapsed, now) {
            self.breaker_moved(transition);
        }
    }

    #[cold]
    fn breaker_moved(&self, transition: Transition) {
        self.shared.telemetry.emit(Event::BreakerTransition {
            policy: &self.shared.name,
            from: transition.from,
            to: transition.to,
            break_duration: transition.break_duration,
        });
    }

    /// A component refused the call: `Rejected` with the last failure (a last value, even one
    /// classified transient, is returned as the value).
    #[cold]
    fn reject<T, E>(
        &self,
        reason: RejectReason,
        retry_after: Option<Duration>,
        last: Option<Outcome<T, E>>,
        now: Option<Instant>,
    ) -> Finish<T, E> {
        let stop = match reason {
            RejectReason::BudgetExhausted => StopReason::BudgetExhausted,
            RejectReason::DependencyUnavailable => StopReason::DependencyUnavailable,
            RejectReason::Overloaded => StopReason::Overloaded,
            RejectReason::Draining => StopReason::Draining,
        };
        let result = match last.map(|outcome| self.result(outcome)) {
            Some(Ok(value)) => Ok(value),
            last => Err(Error::Rejected {
                reason,
                retry_after,
                attempts: self.attempts,
                last: last.and_then(Result::err).map(Box::new),
            }),
        };
        self.finish(result, stop, now)
    }

    fn backoff(&mut self, curve: Curve, retry_after: Option<Duration>) -> Duration {
        let backoff = &self.shared.backoff;
        let shared = self.shared;
        let rng = self.rng.get_or_insert_with(|| {
            let call = if backoff.is_seeded() {
                shared
                    .seeded_calls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            } else {
                0
            };
            backoff.rng(call)
        });
        let delay = backoff.delay(
            BackoffInput {
                retry: self.attempts,
                curve,
                previous: self.previous_delay,
            },
            retry_after,
            rng,
        );
        self.previous_delay = delay;
        delay
    }

    /// The outcome as the caller sees it: a value (even one classified transient) is returned
    /// as a value; the callback's error unchanged; the executor's timeout as `AttemptTimeout`.
    #[inline(always)]
    fn result<T, E>(&self, outcome: Outcome<T, E>) -> Result<T, Error<E>> {
        match outcome {
            Outcome::Returned(Ok(value)) => Ok(value),
            Outcome::Returned(Err(e)) => Err(Error::Inner(e)),
            Outcome::TimedOut => Err(Error::AttemptTimeout {
                timeout: self.ceiling.unwrap_or(Duration::ZERO),
                attempts: self.attempts,
            }),
        }
    }

    #[cold]
    fn deadline_exceeded<T, E>(&self, last: Option<Outcome<T, E>>) -> Finish<T, E> {
        let Some(bound) = self.deadline else {
            unreachable!("a deadline is exceeded only when there is one")
        };
        let source = match bound.source {
            Source::Drain => return self.reject(RejectReason::Draining, None, last, self.now()),
            Source::Inherited => DeadlineSource::Inherited,
            Source::Policy => DeadlineSource::Policy,
        };
        let result = match last.map(|outcome| self.result(outcome)) {
            Some(Ok(value)) => Ok(value),
            last => Err(Error::DeadlineExceeded {
                deadline: bound.span,
                source,
                attempts: self.attempts,
                last: last.and_then(Result::err).map(Box::new),
            }),
        };
        self.finish(result, StopReason::DeadlineExceeded, self.now())
    }

    #[cold]
    pub(crate) fn cancelled<T, E>(&self, now: Option<Instant>) -> Finish<T, E> {
        self.finish(Err(Error::Cancelled), StopReason::Cancelled, now)
    }

    /// Ends the call: exactly one terminal event.
    #[inline(always)]
    pub(crate) fn finish<T, E>(
        &self,
        outcome: Result<T, Error<E>>,
        stop: StopReason,
        now: Option<Instant>,
    ) -> Finish<T, E> {
        if self.shared.telemetry.is_listened() {
            self.shared.telemetry.emit(Event::CallEnded {
                policy: &self.shared.name,
                stop,
                attempts: self.attempts,
                elapsed: self.elapsed(now),
            });
        }
        Finish { outcome, stop }
    }
}

fn attempt_outcome<T, E>(outcome: &Outcome<T, E>, verdict: Verdict) -> AttemptOutcome {
    match (outcome, verdict) {
        (Outcome::TimedOut, _) => AttemptOutcome::TimedOut,
        (_, Verdict::Ok) => AttemptOutcome::Ok,
        (_, Verdict::Transient) => AttemptOutcome::Transient,
        (_, Verdict::Throttled { .. }) => AttemptOutcome::Throttled,
        (_, Verdict::Permanent) => AttemptOutcome::Permanent,
        (_, Verdict::Refused { .. }) => AttemptOutcome::Refused,
    }
}

/// The async executor: the loop of the module docs.
///
/// Returns the outcome as `run` gives it and tells `log` the stop reason. It is the only future
/// between the caller and the callback: `run` returns it as is, with no wrapper to move it.
pub(crate) async fn execute<T, E, C, F, L>(
    shared: &Shared<C>,
    caller: Option<&CancellationToken>,
    mut op: F,
    mut log: L,
) -> Result<T, Error<E>>
where
    C: Classify<T, E>,
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
            let ceiling = match call.begin_attempt(now, &mut last) {
                Ok(ceiling) => ceiling,
                Err(finish) => break 'call finish,
            };
            let permit = match call.admit(now, &mut last) {
                Ok(permit) => permit,
                Err(finish) => break 'call finish,
            };
            let began = now;
            attempt.begin(call.attempts, ceiling, began);
            let (returned, suspended) = Race {
                work: op(&attempt),
                timer: None,
                cancel: None,
                attempt: &attempt,
                caller,
                clock: &shared.clock,
                mode: shared.mode,
                armed: false,
            }
            .await;
            // An attempt that succeeded on its first poll took no time the call must account
            // for: the clock is read again only when something will use the reading.
            let fresh = suspended || needs_times || !matches!(returned, Some(Ok(_)));
            now = if fresh { call.now() } else { began };
            let Some((outcome, verdict)) = call.arbitrate(&attempt, returned, caller, began, now)
            else {
                attempt.end(false);
                break 'call call.cancelled(now);
            };
            attempt.end(verdict.is_ok());
            if !fresh && !verdict.is_ok() {
                now = call.now();
            }
            let elapsed = call.elapsed_since(began, now);
            let kind = call.attempt_ended(&outcome, verdict, elapsed, &mut log);
            call.settle(permit, kind, elapsed, now);
            let delay = match call.decide(outcome, verdict, kind, now) {
                Step::Finish(finish) => break 'call finish,
                Step::Retry(delay, outcome) => {
                    last = Some(outcome);
                    delay
                }
            };
            if !delay.is_zero() {
                let wake = now.unwrap_or_else(|| shared.clock.now()) + delay;
                if sleep_or_cancel(&shared.clock, wake, caller).await {
                    break 'call call.cancelled(call.now());
                }
            } else if caller.is_some_and(CancellationToken::is_cancelled) {
                break 'call call.cancelled(now);
            }
            now = call.now();
        }
    };
    log.stop(finish.stop);
    finish.outcome
}

/// The loop above for a policy with one attempt, no bound, no listener and no caller token
/// (`Policy::none()`): nothing can fire, be retried or be reported, so the attempt simply runs.
/// The outcome and stop reason are the ones the loop would give.
#[inline(always)]
async fn pass_through<T, E, C, F>(shared: &Shared<C>, mut op: F) -> Finish<T, E>
where
    C: Classify<T, E>,
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

/// Sleeps until `wake`; returns true, at once, if the caller cancels first.
async fn sleep_or_cancel(clock: &Clock, wake: Instant, caller: Option<&CancellationToken>) -> bool {
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

pin_project_lite::pin_project! {
    /// One attempt raced against its ceiling and its caller's cancellation.
    ///
    /// The work is polled first; the timer and the cancellation are armed only if it is not
    /// ready at once, so an attempt that completes on its first poll costs no timer. Once armed,
    /// a wake-up checks the ceiling and the caller *before* polling the work again: a scope
    /// whose ceiling has passed fires its attempt's cancellation first, which is what makes an
    /// outer scope win over an inner one whose ceiling falls on the same instant.
    #[project = RaceProj]
    struct Race<'a, W> {
        #[pin]
        work: W,
        #[pin]
        timer: Option<Sleep>,
        #[pin]
        cancel: Option<WaitForCancellationFuture<'a>>,
        attempt: &'a Attempt,
        caller: Option<&'a CancellationToken>,
        clock: &'a Clock,
        mode: TimeoutMode,
        armed: bool,
    }
}

impl<W: Future> Future for Race<'_, W> {
    /// The work's output (`None` when it was abandoned), and whether the work suspended.
    type Output = (Option<W::Output>, bool);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if *this.armed {
            signal(&mut this, cx);
        }
        loop {
            if let Poll::Ready(out) = this.work.as_mut().poll(cx) {
                return Poll::Ready((Some(out), *this.armed));
            }
            if !*this.armed {
                *this.armed = true;
                if let Some(at) = this.attempt.deadline() {
                    this.timer.set(Some(this.clock.sleep_until(at)));
                }
                if let Some(caller) = *this.caller {
                    this.cancel.set(Some(caller.cancelled()));
                }
                if signal(&mut this, cx) {
                    continue;
                }
                return Poll::Pending;
            }
            if this.attempt.fired().is_some()
                && matches!(this.mode, TimeoutMode::Abandon { .. })
                && let Some(grace) = this.timer.as_mut().as_pin_mut()
                && grace.poll(cx).is_ready()
            {
                return Poll::Ready((None, true));
            }
            return Poll::Pending;
        }
    }
}

/// Checks the ceiling, then the caller; fires the attempt's cancellation if either has come.
/// Returns whether it fired now. In abandon mode the timer is re-armed for the grace.
fn signal<W>(this: &mut RaceProj<'_, '_, W>, cx: &mut Context<'_>) -> bool {
    if this.attempt.fired().is_some() {
        return false;
    }
    let ceiling = this
        .timer
        .as_mut()
        .as_pin_mut()
        .is_some_and(|timer| timer.poll(cx).is_ready());
    let why = if ceiling {
        Fired::Ceiling
    } else if this
        .cancel
        .as_mut()
        .as_pin_mut()
        .is_some_and(|cancel| cancel.poll(cx).is_ready())
    {
        Fired::Caller
    } else {
        return false;
    };
    this.attempt.fire(why);
    this.cancel.set(None);
    match *this.mode {
        TimeoutMode::Cooperative => this.timer.set(None),
        TimeoutMode::Abandon { grace } => {
            let from = match why {
                Fired::Ceiling => this.attempt.deadline(),
                Fired::Caller => None,
            }
            .unwrap_or_else(|| this.clock.now());
            let until = from.checked_add(grace).unwrap_or(from);
            this.timer.set(Some(this.clock.sleep_until(until)));
        }
    }
    true
}
