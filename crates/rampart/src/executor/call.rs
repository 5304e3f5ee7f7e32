//! [`Call`]: one call of a policy, with what this call alone carries, and how it runs.
//!
//! See [`Call`] for its setters and finishers.

use std::fmt;

use tokio_util::sync::CancellationToken;

use crate::admit::Admit;
use crate::classify::Classify;
use crate::deadline::Deadline;
use crate::error::Error;
use crate::fallback::{Ending, FallbackTo, NoFallback};
use crate::outcome::StopReason;
use crate::result::{CallResult, Cancelled};

use super::{Callback, Report, Shared, StopOnly, execute};

/// One call of a policy, before it runs: made by [`Policy::call`](crate::Policy::call),
/// given its options in any order, run by one of its finishers. `B` is its fallback
/// ([`NoFallback`] until [`fallback`](Self::fallback) sets one).
///
/// `policy.run(op)` is the one-liner. Anything else a call can carry goes through
/// [`Policy::call`](crate::Policy::call): setters in any order, then one finisher that says
/// how the call runs and what it returns.
///
/// | setter | what | default |
/// |---|---|---|
/// | [`token`](Self::token) | the caller's cancellation token | none: only dropping the future cancels |
/// | [`deadline`](Self::deadline) | a deadline for this call as well as the policy's | none |
/// | [`fallback`](Self::fallback) | an answer for the ends it names | none |
///
/// | finisher | runs | returns |
/// |---|---|---|
/// | [`run`](Self::run) | async | the value, or [`Error`] |
/// | [`try_run`](Self::try_run) | async | a [`CallResult`]: the outcome, stop reason and attempt log |
/// | [`run_blocking`](Self::run_blocking) | on the calling thread | the value, or [`Error`] |
/// | [`try_run_blocking`](Self::try_run_blocking) | on the calling thread | a [`CallResult`] |
/// | [`stream`](Self::stream) | async, until the first item | a [`RampartStream`](crate::stream::RampartStream) |
///
/// ```
/// # async fn demo() {
/// use std::time::Duration;
/// use rampart::backoff::Backoff;
/// use rampart::fallback::Fallback;
/// use rampart::{CancellationToken, Deadline, Policy, StopReason};
///
/// let policy = Policy::builder()
///     .max_attempts(3)
///     .backoff(Backoff::none())
///     .build()
///     .expect("valid policy");
/// let token = CancellationToken::new();
/// let report = policy
///     .call()
///     .fallback(Fallback::on([StopReason::AttemptsExhausted]).value(0))
///     .deadline(Deadline::after(Duration::from_millis(250)))
///     .token(&token)
///     .try_run(async |_attempt| Err::<u32, _>(std::io::Error::other("down")))
///     .await
///     .expect("not cancelled");
/// assert_eq!(report.value(), Some(&0));
/// assert_eq!(report.stop(), StopReason::AttemptsExhausted);
/// assert!(report.fell_back());
/// # }
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
/// #     .build().expect("runtime").block_on(demo());
/// ```
#[must_use = "a call does nothing until run"]
pub struct Call<'a, C, A, B = NoFallback> {
    shared: &'a Shared<C, A>,
    caller: Option<&'a CancellationToken>,
    deadline: Option<Deadline>,
    fallback: B,
}

impl<C, A, B> fmt::Debug for Call<'_, C, A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("policy", &self.shared.name)
            .field("caller", &self.caller)
            .field("deadline", &self.deadline)
            .field("fallback", &std::any::type_name::<B>())
            .finish()
    }
}

impl<'a, C, A> Call<'a, C, A> {
    pub(crate) fn new(shared: &'a Shared<C, A>) -> Self {
        Call {
            shared,
            caller: None,
            deadline: None,
            fallback: NoFallback,
        }
    }
}

impl<'a, C, A, B> Call<'a, C, A, B> {
    /// Lets the caller cancel the call with `token`: cancelling it ends the call with
    /// [`Error::Cancelled`] at the next check (at once during a backoff; before the next
    /// attempt after a zero one), and never retries, falls back or counts against the breaker
    /// or the budget. A value the attempt returns while the caller cancels is still returned.
    pub fn token(mut self, token: &'a CancellationToken) -> Self {
        self.caller = Some(token);
        self
    }

    /// Runs the call within `deadline` as well: its effective deadline is the earliest of
    /// the policy's own, the ambient one (when the policy reads it), and every deadline given
    /// here. A deadline that ends the call is reported as
    /// [`DeadlineSource::Inherited`](crate::DeadlineSource::Inherited), like the ambient one.
    ///
    /// This is [`Deadline::scope`] for one call, without a task-local scope around it: the
    /// callback does not see `deadline` as ambient (its attempt's
    /// [`remaining`](crate::Attempt::remaining) counts it). It applies whether or not the
    /// policy [reads the ambient deadline](crate::PolicyBuilder::use_ambient_deadline).
    ///
    /// ```
    /// # async fn demo() {
    /// use std::time::Duration;
    /// use rampart::{Deadline, Policy};
    ///
    /// let policy = Policy::builder().max_attempts(3).build().expect("valid policy");
    /// let caller = Deadline::after(Duration::from_millis(250));
    /// let left = policy
    ///     .call()
    ///     .deadline(caller)
    ///     .run(async |attempt| Ok::<_, std::io::Error>(attempt.remaining()))
    ///     .await;
    /// assert_eq!(left.ok().flatten(), Some(Duration::from_millis(250)));
    /// # }
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
    /// #     .build().expect("runtime").block_on(demo());
    /// ```
    pub fn deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = Deadline::earliest(self.deadline, Some(deadline));
        self
    }

    /// Answers the ends of the call that `fallback` names (by stop reason or by a predicate
    /// on the error) with its answer instead of the error (replacing any fallback set
    /// before). The policy decides the call first: retries, timeouts and refusals all happen
    /// before the fallback runs, once. A call the caller cancelled never falls back. See
    /// [`fallback`](crate::fallback).
    ///
    /// A blocking call polls the answer once: a [`value`](crate::fallback::FallbackWhen::value)
    /// is ready; an async answer that is not ends the call with a configuration error naming
    /// `fallback`.
    pub fn fallback<W, G>(self, fallback: FallbackTo<W, G>) -> Call<'a, C, A, FallbackTo<W, G>> {
        Call {
            shared: self.shared,
            caller: self.caller,
            deadline: self.deadline,
            fallback,
        }
    }

    pub(crate) fn shared(&self) -> &'a Shared<C, A> {
        self.shared
    }

    pub(crate) fn caller(&self) -> Option<&'a CancellationToken> {
        self.caller
    }

    pub(crate) fn given_deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    /// Runs `op` and returns its value or why it failed; see
    /// [`Policy::run`](crate::Policy::run) for the callback and the cancellation contract.
    ///
    /// # Errors
    ///
    /// The callback's own error unchanged ([`Error::Inner`]), or what the policy decided (cancelled,
    /// attempt timeout, deadline, a rejection, a configuration error): see [`Error`]. A fallback
    /// answers the ends it names instead.
    pub async fn run<T, E, F>(self, op: F) -> Result<T, Error<E>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
        B: Ending<T, E>,
    {
        let mut stop = StopOnly(StopReason::Succeeded);
        match execute(self.shared, self.caller, self.deadline, op, &mut stop).await {
            // Not through `end`'s future and back: see `try_run`.
            Ok(value) => Ok(value),
            Err(error) => self.end(stop.0, Err(error)).await.0,
        }
    }

    /// Runs `op` and reports how the call went: a [`CallResult`] with the outcome, the stop
    /// reason the policy decided, the attempt log and whether a fallback answered. Caller
    /// cancellation is still an error ([`Cancelled`]).
    ///
    /// # Errors
    ///
    /// [`Cancelled`] when the caller cancelled; every other end is in the [`CallResult`].
    pub async fn try_run<T, E, F>(self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
        B: Ending<T, E>,
    {
        let mut report = Report::default();
        let outcome = execute(self.shared, self.caller, self.deadline, op, &mut report).await;
        // A value is never a fallback's to answer: it goes to the report as it is, not
        // through `end`'s future and back (a response moved twice more), nor taken out of
        // its `Ok` and wrapped again (once more).
        if outcome.is_ok() {
            return report.into_result((outcome, false));
        }
        let stop = report.stop;
        let answered = self.end(stop, outcome).await;
        report.into_result(answered)
    }

    /// The outcome of the call that stopped for `stop`, or the fallback's answer when it
    /// answers that end (never a cancelled call's); and whether it answered.
    async fn end<T, E>(
        self,
        stop: StopReason,
        outcome: Result<T, Error<E>>,
    ) -> (Result<T, Error<E>>, bool)
    where
        B: Ending<T, E>,
    {
        let shared = self.shared;
        match self.ending(stop, outcome) {
            Ok(answer) => {
                shared.fell_back(stop);
                (answer.await, true)
            }
            Err(outcome) => (outcome, false),
        }
    }

    /// The fallback's answer to the call that stopped for `stop` with `outcome`, or `outcome`
    /// back when there is none for it. The caller reports it used
    /// ([`Shared::fell_back`]) once it answers.
    pub(crate) fn ending<T, E>(
        self,
        stop: StopReason,
        outcome: Result<T, Error<E>>,
    ) -> Result<B::Answer, Result<T, Error<E>>>
    where
        B: Ending<T, E>,
    {
        let error = match outcome {
            Ok(value) => return Err(Ok(value)),
            Err(error) => error,
        };
        self.fallback.answer(stop, error).map_err(Err)
    }
}
