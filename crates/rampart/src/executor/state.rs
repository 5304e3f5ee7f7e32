//! The decisions of a call, shared by the async, hedged and blocking executors: the deadline
//! resolved at the start, the ceiling before each attempt, the arbitration after it, and what
//! to do next, in the contract's order.

use std::cell::Cell;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::admit::{Admit, AdmitContext, Feedback, Refusal};
use crate::ambient::Ambient;
use crate::attempt::{Attempt, Fired};
use crate::backoff::{BackoffInput, Curve};
use crate::breaker::{BreakerPermit, Evidence, StateKind, Transition};
use crate::classify::{Classify, Verdict};
use crate::clock::Instant;
use crate::criticality::Criticality;
use crate::error::{ConfigError, ConfigProblem, DeadlineSource, Error, RejectReason};
use crate::event::{AttemptOutcome, Event, RetryInfo, TimeoutInfo};
use crate::hedge::{Delay, Hedge, Suppressed};
use crate::policy::{Shared, TimeoutContext, TimeoutMode};
use crate::result::{AttemptRecord, StopReason};

use super::{ORPHAN_THRESHOLD, Record};

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
    TimedOut {
        /// The ceiling the attempt ran into.
        ceiling: Duration,
    },
    /// Admission refused the attempt; the callback did not run.
    Refused(Refusal),
    /// The attempt's ceiling passed while it waited for admission; the callback did not run.
    /// Reported as an attempt timeout, but, being self-imposed, neither breaker evidence nor
    /// charged to the budget.
    Unadmitted {
        /// The ceiling that passed.
        ceiling: Duration,
    },
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
pub(crate) struct CallState<'p, C, A> {
    pub(crate) shared: &'p Shared<C, A>,
    pub(crate) timed: bool,
    pub(crate) start: Option<Instant>,
    deadline: Option<Bound>,
    /// The call's criticality (`Critical` unless the policy reads the ambient one).
    pub(crate) level: Criticality,
    pub(crate) attempts: u32,
    previous_delay: Duration,
    rng: Option<fastrand::Rng>,
    /// Whether the terminal event went out; if not when the state is dropped (the call's
    /// future was dropped, or a callback panicked), the drop sends it.
    ended: Cell<bool>,
}

impl<C, A> Drop for CallState<'_, C, A> {
    fn drop(&mut self) {
        if !self.ended.get() && self.shared.telemetry.is_listened() {
            self.shared.telemetry.emit(Event::CallEnded {
                policy: &self.shared.name,
                stop: StopReason::Cancelled,
                attempts: self.attempts,
                elapsed: self.elapsed(self.now()),
            });
        }
    }
}

impl<'p, C, A> CallState<'p, C, A> {
    /// Step 1: resolve the clock, the deadline and the level once.
    #[inline(always)]
    pub(crate) fn start(shared: &'p Shared<C, A>, timed: bool) -> Self {
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
            // The policy's own deadline needs no subtraction; the others are clamped to it.
            deadline = shared.deadline.and_then(|span| {
                start.checked_add(span).map(|at| Bound {
                    at,
                    span,
                    source: Source::Policy,
                })
            });
            let mut clamp = |at: Instant, source| {
                if deadline.is_none_or(|b: Bound| at < b.at) {
                    deadline = Some(Bound {
                        at,
                        span: at.saturating_duration_since(start),
                        source,
                    });
                }
            };
            if shared.ambient_deadline
                && let Some(inherited) = ambient.deadline()
            {
                clamp(inherited.instant(), Source::Inherited);
            }
            if draining && let Some(grace) = shared.drain.grace_until() {
                clamp(grace, Source::Drain);
            }
        }
        CallState {
            shared,
            timed,
            start,
            deadline,
            level,
            attempts: 0,
            previous_delay: Duration::ZERO,
            rng: None,
            ended: Cell::new(false),
        }
    }

    /// Hands the call to another loop (which starts its own state): this one reports nothing.
    pub(crate) fn hand_over(self) {
        self.ended.set(true);
    }

    /// The current instant, when this call reads the clock.
    #[inline]
    pub(crate) fn now(&self) -> Option<Instant> {
        self.timed.then(|| self.shared.clock.now())
    }

    #[inline]
    fn remaining(&self, now: Option<Instant>) -> Option<Duration> {
        match (self.deadline, now) {
            // At the start of the call (the first attempt) no time has been spent yet.
            (Some(bound), Some(now)) if Some(now) == self.start => Some(bound.span),
            (Some(bound), Some(now)) => Some(bound.at.saturating_duration_since(now)),
            _ => None,
        }
    }

    /// Time from `began` to `now`, when both were read.
    #[inline]
    pub(crate) fn elapsed_since(&self, began: Option<Instant>, now: Option<Instant>) -> Duration {
        match (began, now) {
            (Some(began), Some(now)) if now != began => now.saturating_duration_since(began),
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
        let timeout = match (&self.shared.adaptive, &self.shared.latency.ceiling, now) {
            (Some(adaptive), Some(estimate), Some(now)) => match estimate.get(now) {
                Some(measured) => Some(adaptive.ceiling(measured, timeout)),
                None => timeout,
            },
            _ => timeout,
        };
        Ok(match (timeout, remaining) {
            (Some(t), Some(r)) => Some(t.min(r)),
            (t, r) => t.or(r),
        })
    }

    /// Steps 2 and the breaker together: the next attempt's ceiling and breaker permit (the
    /// attempt is then counted), or why the call ends here.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    pub(crate) fn prepare<T, E>(
        &mut self,
        now: Option<Instant>,
        last: &mut Option<Outcome<T, E>>,
    ) -> Result<(Option<Duration>, Option<BreakerPermit<'p>>), Finish<T, E>> {
        let ceiling = self.begin_attempt(now, last)?;
        let permit = self.admit(now, last)?;
        Ok((ceiling, permit))
    }

    /// After an attempt (or an attempt admission did not let run): ends it, reports it, gives
    /// back its admission and breaker permits, and decides what comes next.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn conclude<T, E>(
        &mut self,
        attempt: &Attempt,
        (outcome, verdict): (Outcome<T, E>, Verdict),
        began: Option<Instant>,
        now: Option<Instant>,
        held: Option<A::Permit>,
        permit: Option<BreakerPermit<'_>>,
        log: &mut impl Record,
    ) -> (Step<T, E>, AttemptOutcome)
    where
        A: Admit,
    {
        attempt.end(verdict.is_ok());
        let elapsed = self.elapsed_since(began, now);
        let kind = self.attempt_ended(attempt, &outcome, verdict, elapsed, now, log);
        self.release(held, kind, elapsed);
        self.settle(permit, kind, elapsed, now);
        (self.decide(outcome, verdict, kind, now), kind)
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
        A: Admit,
    {
        let caller_cancelled = caller.is_some_and(CancellationToken::is_cancelled)
            || attempt.fired() == Some(Fired::Caller);
        let ceiling = attempt.timeout().unwrap_or(Duration::ZERO);
        let outcome = match returned {
            None => {
                self.shared.telemetry.emit(Event::AttemptAbandoned {
                    policy: &self.shared.name,
                    attempt: attempt.number(),
                    ceiling,
                    grace: match self.shared.mode {
                        TimeoutMode::Abandon { grace } => grace,
                        TimeoutMode::Cooperative => Duration::ZERO,
                    },
                });
                Outcome::TimedOut { ceiling }
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
            Outcome::TimedOut { .. } => Verdict::Transient,
            Outcome::Refused(refusal) => Verdict::Refused {
                retry_after: refusal.retry_after,
            },
            Outcome::Unadmitted { .. } => Verdict::Refused { retry_after: None },
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
        let ceiling = attempt.timeout().unwrap_or(Duration::ZERO);
        let elapsed = self.elapsed_since(began, now);
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
            return Outcome::TimedOut { ceiling };
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

    /// Reports the attempt to listeners, the log, the on-timeout hook and the latency
    /// measurements (a success's duration).
    #[inline(always)]
    pub(crate) fn attempt_ended<T, E>(
        &self,
        attempt: &Attempt,
        outcome: &Outcome<T, E>,
        verdict: Verdict,
        elapsed: Duration,
        now: Option<Instant>,
        log: &mut impl Record,
    ) -> AttemptOutcome {
        let kind = attempt_outcome(outcome, verdict);
        let policy = &*self.shared.name;
        let telemetry = &self.shared.telemetry;
        if telemetry.is_listened() {
            telemetry.emit(Event::AttemptEnded {
                policy,
                attempt: attempt.number(),
                outcome: kind,
                elapsed,
            });
        }
        log.record(AttemptRecord {
            number: attempt.number(),
            outcome: kind,
            elapsed,
        });
        if let Outcome::TimedOut { ceiling } = outcome {
            telemetry.timed_out(TimeoutInfo {
                policy,
                attempt: attempt.number(),
                timeout: *ceiling,
            });
        }
        if kind == AttemptOutcome::Ok
            && !elapsed.is_zero()
            && let Some(now) = now
        {
            self.shared.latency.record(elapsed, now);
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
            && delay.saturating_add(self.shared.latency.typical.get()) >= remaining
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

    /// What an admission component is told about `attempt`.
    pub(crate) fn admit_context(
        &self,
        attempt: &Attempt,
        now: Option<Instant>,
    ) -> AdmitContext<'p> {
        self.admit_context_for(attempt.number(), attempt.deadline(), now)
    }

    /// What an admission component is told about attempt `number` with ceiling `deadline`.
    pub(crate) fn admit_context_for(
        &self,
        number: u32,
        deadline: Option<Instant>,
        now: Option<Instant>,
    ) -> AdmitContext<'p> {
        AdmitContext {
            policy: &self.shared.name,
            attempt: number,
            level: self.level,
            deadline,
            now: now.unwrap_or_else(|| self.shared.clock.now()),
            clock: &self.shared.clock,
        }
    }

    /// The outcome of an attempt admission did not let run.
    #[cold]
    pub(crate) fn not_admitted<T, E>(
        &self,
        attempt: &Attempt,
        refusal: Option<Refusal>,
    ) -> (Outcome<T, E>, Verdict) {
        match refusal {
            Some(refusal) => {
                self.shared.telemetry.emit(Event::AttemptRefused {
                    policy: &self.shared.name,
                    attempt: attempt.number(),
                    by: refusal.by,
                    retry_after: refusal.retry_after,
                });
                (
                    Outcome::Refused(refusal),
                    Verdict::Refused {
                        retry_after: refusal.retry_after,
                    },
                )
            }
            None => (
                Outcome::Unadmitted {
                    ceiling: attempt.timeout().unwrap_or(Duration::ZERO),
                },
                Verdict::Refused { retry_after: None },
            ),
        }
    }

    /// Gives an admission permit back with the attempt's outcome.
    #[inline(always)]
    pub(crate) fn release(&self, permit: Option<A::Permit>, kind: AttemptOutcome, elapsed: Duration)
    where
        A: Admit,
    {
        if let Some(permit) = permit {
            self.shared.admit.release(
                permit,
                Feedback {
                    outcome: kind,
                    elapsed,
                },
            );
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
        self.try_admit(now).map_err(|retry_after| {
            self.reject(
                RejectReason::DependencyUnavailable,
                retry_after,
                last.take(),
                now,
            )
        })
    }

    /// The breaker's answer for the next attempt, counting it when admitted; `Err` carries the
    /// breaker's retry-after.
    #[inline(always)]
    pub(crate) fn try_admit(
        &mut self,
        now: Option<Instant>,
    ) -> Result<Option<BreakerPermit<'p>>, Option<Duration>> {
        let permit = self.breaker_permit(now)?;
        self.attempts += 1;
        Ok(permit)
    }

    /// The breaker's answer for the next attempt, without counting it.
    #[inline(always)]
    pub(crate) fn breaker_permit(
        &self,
        now: Option<Instant>,
    ) -> Result<Option<BreakerPermit<'p>>, Option<Duration>> {
        let (Some(breaker), Some(now)) = (&self.shared.breaker, now) else {
            return Ok(None);
        };
        let permit = breaker.try_acquire(now).map_err(|rejected| {
            if let Some(transition) = rejected.transition {
                self.breaker_moved(transition);
            }
            rejected.retry_after
        })?;
        if let Some(transition) = permit.transition() {
            self.breaker_moved(transition);
        }
        Ok(Some(permit))
    }

    /// Counts an attempt that starts without [`try_admit`](Self::try_admit) (a hedge).
    pub(crate) fn count_attempt(&mut self) {
        self.attempts += 1;
    }

    /// Whether a hedge may be armed for this call, and after how long: the breaker is closed,
    /// the estimate is warm, the delay fits in the time left, the call is not `Sheddable` and
    /// the process is not draining.
    pub(crate) fn hedge_delay(
        &self,
        hedge: &Hedge,
        now: Option<Instant>,
    ) -> Result<Duration, Suppressed> {
        if self.level.is_sheddable() {
            return Err(Suppressed::Sheddable);
        }
        if self.shared.drain.is_draining() {
            return Err(Suppressed::Draining);
        }
        if let (Some(breaker), Some(now)) = (&self.shared.breaker, now)
            && breaker.state(now).kind() != StateKind::Closed
        {
            return Err(Suppressed::BreakerNotClosed);
        }
        let delay = match hedge.delay {
            Delay::Fixed(delay) => delay,
            Delay::Adaptive { floor, .. } => {
                let estimate = self.shared.latency.hedge.as_ref();
                match (estimate, now) {
                    (Some(estimate), Some(now)) => match estimate.get(now) {
                        Some(quantile) => quantile.max(floor),
                        None => return Err(Suppressed::Cold),
                    },
                    _ => return Err(Suppressed::Cold),
                }
            }
        };
        if self.remaining(now).is_some_and(|left| delay >= left) {
            return Err(Suppressed::NoTime);
        }
        Ok(delay)
    }

    /// Reports why a hedge did not happen.
    #[cold]
    pub(crate) fn hedge_suppressed(&self, reason: Suppressed) {
        self.shared.telemetry.emit(Event::HedgeSuppressed {
            policy: &self.shared.name,
            reason,
        });
    }

    /// Time left before the deadline, `None` when unbounded.
    pub(crate) fn time_left(&self, now: Option<Instant>) -> Option<Duration> {
        self.remaining(now)
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
        let input = BackoffInput {
            retry: self.attempts,
            curve,
            previous: self.previous_delay,
        };
        if !backoff.is_random() {
            // No randomness to draw: no generator to seed.
            let delay = backoff.delay(input, retry_after, &mut fastrand::Rng::with_seed(0));
            self.previous_delay = delay;
            return delay;
        }
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
        let delay = backoff.delay(input, retry_after, rng);
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
            Outcome::TimedOut { ceiling } | Outcome::Unadmitted { ceiling } => {
                Err(Error::AttemptTimeout {
                    timeout: ceiling,
                    attempts: self.attempts,
                })
            }
            Outcome::Refused(refusal) => Err(Error::Rejected {
                reason: RejectReason::Overloaded,
                retry_after: refusal.retry_after,
                attempts: self.attempts,
                last: None,
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
        self.ended.set(true);
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
        (Outcome::TimedOut { .. }, _) => AttemptOutcome::TimedOut,
        (Outcome::Refused(_) | Outcome::Unadmitted { .. }, _) => AttemptOutcome::Refused,
        (_, Verdict::Ok) => AttemptOutcome::Ok,
        (_, Verdict::Transient) => AttemptOutcome::Transient,
        (_, Verdict::Throttled { .. }) => AttemptOutcome::Throttled,
        (_, Verdict::Permanent) => AttemptOutcome::Permanent,
        (_, Verdict::Refused { .. }) => AttemptOutcome::Refused,
    }
}
