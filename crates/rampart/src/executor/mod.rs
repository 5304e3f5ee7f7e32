//! The executor: the whole life of a call.
//!
//! Strategies are data a call consults, not layers nested around it; so every bound is known
//! in one place and the arithmetic between them is exact. The decisions of a call are one
//! state machine with no I/O, `machine.rs`: read it to see the whole life of a call, rule by
//! rule. The drivers only wait for what it asks:
//!
//! | file | what |
//! |---|---|
//! | `machine.rs` | every decision: deadline, ceiling, breaker, arbitration, budget, backoff, hedges |
//! | `run.rs` | the async driver: admission, the attempt, the backoff sleep |
//! | `hedged.rs` | the async driver with several legs in flight (a policy that hedges) |
//! | `race.rs` | an attempt raced against its ceiling and its caller's cancellation |
//! | [`crate::blocking`] | the driver that blocks the calling thread |
//! | `shared.rs` | the per-policy state every call reads |
//! | [`callback`] | the [`Callback`] bound, and why it has the shape it has |
//!
//! [`Policy::run`](crate::Policy::run) hedges when the policy was built with
//! [`hedge`](crate::PolicyBuilder::hedge); otherwise it runs one attempt at a time.
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

pub mod callback;
mod hedged;
mod machine;
mod race;
mod run;
pub(crate) mod shared;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::admit::Admit;
use crate::classify::Classify;
use crate::clock::{Clock, Instant};
use crate::deadline::Deadline;
use crate::error::Error;
use crate::fallback::{Answer, FallbackTo, Trigger};
use crate::outcome::StopReason;
use crate::result::{AttemptLog, AttemptRecord, CallResult, Cancelled};

pub use callback::{AttemptFuture, Callback};
pub(crate) use machine::{Machine, Next};
pub(crate) use race::Admitted;
pub(crate) use shared::Shared;

/// How far past its ceiling an awaited attempt may return before it is reported as orphaned.
pub(crate) const ORPHAN_THRESHOLD: Duration = Duration::from_secs(1);

/// A call about to run, with its caller's token: made by
/// [`Policy::with_token`](crate::Policy::with_token).
#[must_use = "a call does nothing until run"]
pub struct Call<'a, C, A> {
    shared: &'a Shared<C, A>,
    caller: Option<&'a CancellationToken>,
    deadline: Option<Deadline>,
}

impl<C, A> std::fmt::Debug for Call<'_, C, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("policy", &self.shared.name)
            .field("caller", &self.caller)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl<'a, C, A> Call<'a, C, A> {
    pub(crate) fn new(shared: &'a Shared<C, A>, caller: Option<&'a CancellationToken>) -> Self {
        Call {
            shared,
            caller,
            deadline: None,
        }
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
    ///     .within(caller)
    ///     .run(async |attempt| Ok::<_, std::io::Error>(attempt.remaining()))
    ///     .await;
    /// assert_eq!(left.ok().flatten(), Some(Duration::from_millis(250)));
    /// # }
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
    /// #     .build().expect("runtime").block_on(demo());
    /// ```
    pub fn within(mut self, deadline: Deadline) -> Self {
        self.deadline = Deadline::earliest(self.deadline, Some(deadline));
        self
    }

    pub(crate) fn shared(&self) -> &'a Shared<C, A> {
        self.shared
    }

    pub(crate) fn caller(&self) -> Option<&'a CancellationToken> {
        self.caller
    }

    pub(crate) fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    /// Runs `op`; see [`Policy::run`](crate::Policy::run).
    pub fn run<T, E, F>(self, op: F) -> impl Future<Output = Result<T, Error<E>>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
    {
        execute(self.shared, self.caller, self.deadline, op, ())
    }

    /// Runs `op` and reports how the call went; see [`Policy::try_run`](crate::Policy::try_run).
    pub async fn try_run<T, E, F>(self, op: F) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
    {
        let mut report = Report::default();
        let outcome = execute(self.shared, self.caller, self.deadline, op, &mut report).await;
        report.into_result(outcome)
    }

    /// Runs `op`, and `fallback` if the call ends as it names; see
    /// [`Policy::run_with_fallback`](crate::Policy::run_with_fallback).
    pub async fn run_with_fallback<T, E, F, W, G>(
        self,
        op: F,
        fallback: FallbackTo<W, G>,
    ) -> Result<T, Error<E>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
        W: Trigger<E>,
        G: Answer<T, E>,
    {
        let mut stop = StopOnly(StopReason::Succeeded);
        let outcome = execute(self.shared, self.caller, self.deadline, op, &mut stop).await;
        fall_back(self.shared, stop.0, outcome, fallback).await.0
    }

    /// Like [`run_with_fallback`](Self::run_with_fallback), with the report of
    /// [`try_run`](Self::try_run); see
    /// [`Policy::try_run_with_fallback`](crate::Policy::try_run_with_fallback).
    pub async fn try_run_with_fallback<T, E, F, W, G>(
        self,
        op: F,
        fallback: FallbackTo<W, G>,
    ) -> Result<CallResult<T, E>, Cancelled>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
        W: Trigger<E>,
        G: Answer<T, E>,
    {
        let mut report = Report::default();
        let outcome = execute(self.shared, self.caller, self.deadline, op, &mut report).await;
        let (outcome, fell_back) = fall_back(self.shared, report.stop, outcome, fallback).await;
        let mut result = report.into_result(outcome)?;
        result.fell_back = fell_back;
        Ok(result)
    }

    /// The same as [`run`](Self::run), which hedges when the policy hedges.
    #[deprecated(since = "0.2.0", note = "`run` hedges when the policy hedges")]
    pub fn run_hedged<T, E, F>(self, op: F) -> impl Future<Output = Result<T, Error<E>>>
    where
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
    {
        self.run(op)
    }
}

/// The outcome of a call of `shared` that stopped for `stop`, or `fallback`'s answer when it
/// answers that end (never a cancelled call's); and whether it answered.
async fn fall_back<C, A, T, E, W, G>(
    shared: &Shared<C, A>,
    stop: StopReason,
    outcome: Result<T, Error<E>>,
    fallback: FallbackTo<W, G>,
) -> (Result<T, Error<E>>, bool)
where
    W: Trigger<E>,
    G: Answer<T, E>,
{
    match outcome {
        Err(error) => match fallback.answer(stop, error) {
            Ok(answer) => {
                shared.fell_back(stop);
                (answer.await, true)
            }
            Err(error) => (Err(error), false),
        },
        ok => (ok, false),
    }
}

/// Runs `op` under `shared`: hedged when the policy hedges (its state boxed, so that the
/// future of a policy that does not hedge stays small), one attempt at a time otherwise.
pub(crate) fn execute<'a, T, E, C, A, F, L>(
    shared: &'a Shared<C, A>,
    caller: Option<&'a CancellationToken>,
    deadline: Option<Deadline>,
    op: F,
    log: L,
) -> Execute<
    impl Future<Output = Result<T, Error<E>>> + use<'a, T, E, C, A, F, L>,
    impl Future<Output = Result<T, Error<E>>> + use<'a, T, E, C, A, F, L>,
>
where
    C: Classify<T, E>,
    A: Admit,
    F: Callback<T, E>,
    L: Record,
{
    // The call's span is made by its state machine when the call starts (a wrapper future
    // here would be moved with it, and cost a copy of the whole future per call).
    if shared.hedge.is_some() {
        Execute::Hedged {
            call: Box::pin(hedged::drive(shared, caller, deadline, op, log)),
        }
    } else {
        Execute::Plain {
            call: run::drive(shared, caller, deadline, op, log),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a call: the sequential driver inline, or the hedged one in its box.
    #[project = ExecuteProj]
    pub(crate) enum Execute<P, H> {
        Plain { #[pin] call: P },
        Hedged { call: Pin<Box<H>> },
    }
}

impl<O, P: Future<Output = O>, H: Future<Output = O>> Future for Execute<P, H> {
    type Output = O;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<O> {
        match self.project() {
            ExecuteProj::Plain { call } => call.poll(cx),
            ExecuteProj::Hedged { call } => call.as_mut().poll(cx),
        }
    }
}

/// Where the attempts of a call are recorded: nowhere for `run`, a report for `try_run`,
/// what bounds the stream for [`Call::stream`](crate::stream).
pub(crate) trait Record {
    /// Whether records need attempt durations (and so clock reads).
    const TIMED: bool;
    fn record(&mut self, record: AttemptRecord);
    fn stop(&mut self, stop: StopReason);
    /// The call is over, as [`Settled`] says (once, just before its outcome is returned).
    #[inline(always)]
    fn settled(&mut self, _call: Settled<'_>) {}
}

/// What a call that ended leaves for what follows it (a stream's delivery phase): the
/// attempts it counted, its effective deadline and start as the state machine resolved and
/// read them, and its span.
pub(crate) struct Settled<'a> {
    pub(crate) attempts: u32,
    /// The start of the call, when the call read the clock.
    pub(crate) start: Option<Instant>,
    pub(crate) deadline: Option<crate::deadline::Effective>,
    /// The call's `rampart.call` span (none on the pass-through path, which nothing observes).
    pub(crate) span: Option<&'a crate::observe::Span>,
}

impl Record for () {
    const TIMED: bool = false;
    #[inline(always)]
    fn record(&mut self, _: AttemptRecord) {}
    #[inline(always)]
    fn stop(&mut self, _: StopReason) {}
}

/// What `run_with_fallback` learns besides the outcome: why the call stopped.
pub(crate) struct StopOnly(StopReason);

impl Record for &mut StopOnly {
    const TIMED: bool = false;
    #[inline(always)]
    fn record(&mut self, _: AttemptRecord) {}
    #[inline(always)]
    fn stop(&mut self, stop: StopReason) {
        self.0 = stop;
    }
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
                fell_back: false,
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

/// A clock reading, when the call takes them.
#[inline(always)]
pub(crate) fn read(clock: &Clock, timed: bool) -> Option<Instant> {
    timed.then(|| clock.now())
}

/// How long an attempt that began at `began` waited for admission, answered at `now`
/// (`None` when the call takes no readings).
#[inline(always)]
pub(crate) fn waited(began: Option<Instant>, now: Option<Instant>) -> Option<Duration> {
    Some(now?.saturating_duration_since(began?))
}

/// `delay` after `from` (read from `clock` if the call took no reading). Delays are bounded by
/// validation (a day at most), so this saturates only on a clock near the end of time, and
/// then at the latest instant (never at `from`, which would turn a long delay into none).
pub(crate) fn later(clock: &Clock, from: Option<Instant>, delay: Duration) -> Instant {
    let from = from.unwrap_or_else(|| clock.now());
    crate::clock::saturating_add(from, delay)
}

/// Whether the caller has cancelled.
#[inline(always)]
pub(crate) fn is_cancelled(caller: Option<&CancellationToken>) -> bool {
    caller.is_some_and(CancellationToken::is_cancelled)
}
