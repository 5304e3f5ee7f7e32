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
//! | `call.rs` | [`Call`]: one call's options (token, deadline, fallback) and how it runs |
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
//!     .total_timeout(Duration::from_secs(2))
//!     .attempt_timeout(Duration::from_millis(500))
//!     .build()
//!     .expect("valid policy");
//! let token = CancellationToken::new();
//! token.cancel();
//! let outcome = policy
//!     .call()
//!     .token(&token)
//!     .run(async |_attempt| Ok::<_, std::io::Error>("never runs"))
//!     .await;
//! assert!(matches!(outcome, Err(Error::Cancelled)));
//! # }
//! ```

mod call;
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
use crate::outcome::StopReason;
use crate::result::{AttemptLog, AttemptRecord, CallResult, Cancelled};

pub use call::Call;
pub(crate) use callback::{AttemptFuture, Callback};
pub(crate) use machine::{Hedging, Machine, Next, Sequential, Shape};
pub(crate) use race::Admitted;
pub(crate) use shared::Shared;

/// How far past its ceiling an awaited attempt may return before it is reported as orphaned.
pub(crate) const ORPHAN_THRESHOLD: Duration = Duration::from_secs(1);

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
            call: hedged(shared, caller, deadline, op, log),
        }
    } else {
        Execute::Plain {
            call: run::drive(shared, caller, deadline, op, log),
        }
    }
}

/// The hedged driver's future, in its box. Out of line: building that future (the legs'
/// state) is a large copy, and inlined it would weigh on the code of every call that does not
/// hedge.
#[inline(never)]
fn hedged<'a, T, E, C, A, F, L>(
    shared: &'a Shared<C, A>,
    caller: Option<&'a CancellationToken>,
    deadline: Option<Deadline>,
    op: F,
    log: L,
) -> Pin<Box<impl Future<Output = Result<T, Error<E>>> + use<'a, T, E, C, A, F, L>>>
where
    C: Classify<T, E>,
    A: Admit,
    F: Callback<T, E>,
    L: Record,
{
    Box::pin(hedged::drive(shared, caller, deadline, op, log))
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
            ExecuteProj::Hedged { call } => poll_hedged(call, cx),
        }
    }
}

/// Polls the hedged driver, out of line: inlined, its code would weigh on the poll of every
/// call that does not hedge (and measurably did, through the inlining of the caller's future).
#[inline(never)]
fn poll_hedged<H: Future>(call: &mut Pin<Box<H>>, cx: &mut Context<'_>) -> Poll<H::Output> {
    call.as_mut().poll(cx)
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

/// What a call with a fallback learns besides the outcome: why the call stopped.
pub(crate) struct StopOnly(pub(crate) StopReason);

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
    pub(crate) stop: StopReason,
    /// The deadline that applied, as the call resolved it when it started.
    deadline: Option<crate::deadline::Effective>,
}

impl Default for Report {
    fn default() -> Self {
        Report {
            log: AttemptLog::default(),
            stop: StopReason::Succeeded,
            deadline: None,
        }
    }
}

impl Report {
    /// The `try_run` result, saying whether a fallback answered: caller cancellation stays
    /// an error.
    #[inline(always)]
    pub(crate) fn into_result<T, E>(
        self,
        (outcome, fell_back): (Result<T, Error<E>>, bool),
    ) -> Result<CallResult<T, E>, Cancelled> {
        match self.stop {
            StopReason::Cancelled => Err(Cancelled),
            stop => Ok(CallResult {
                outcome,
                stop,
                log: self.log,
                deadline: self
                    .deadline
                    .map(|bound| (bound.span, bound.source.reported())),
                fell_back,
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
    fn settled(&mut self, call: Settled<'_>) {
        self.log.made(call.attempts);
        self.deadline = call.deadline;
    }
}

/// Whether a call of `shared` with the settings `live` needs no machine: one attempt that
/// nothing can bound, cancel, retry or report (no caller token, no deadline given, a log that
/// keeps no durations, nobody listening, not draining; `live.pass_through` says the policy
/// itself reads no clock). The one place that decides it: every other call builds a machine,
/// which has a clock reading for every rule; this one runs the attempt and lets
/// [`machine::untimed`] say what its outcome means, with no breaker, budget or deadline to reach.
#[inline(always)]
pub(crate) fn passes_through<C, A, L: Record>(
    shared: &Shared<C, A>,
    live: &shared::Live,
    caller: Option<&CancellationToken>,
    deadline: Option<Deadline>,
) -> bool {
    // Of what makes the telemetry listened to (`Telemetry::is_listened`), only the observer
    // can change while the policy serves: a listener makes the policy read the clock
    // (`Shared::parts_read_clock`), so `pass_through` already says there is none.
    debug_assert!(!live.pass_through || shared.telemetry.listeners.is_empty());
    live.pass_through
        && caller.is_none()
        && deadline.is_none()
        && !L::TIMED
        && !shared.drain.is_draining()
        && !shared.telemetry.observer.is_active()
}

/// A call's machine with the settings `live`, begun at a reading of `shared`'s clock: the
/// setup every driver shares.
#[inline(always)]
pub(crate) fn begin<'p, T, E, C, A, L, W>(
    shared: &'p Shared<C, A>,
    live: &'p shared::Live,
    log: L,
    deadline: Option<Deadline>,
) -> Machine<'p, T, E, C, A, L, W>
where
    C: Classify<T, E>,
    A: Admit,
    L: Record,
    W: Shape,
{
    Machine::new(shared, live, log, shared.clock.now(), deadline)
}

/// What follows admission's answer: the ticket to run the callback with and how long
/// admission took, or what the machine does instead.
pub(crate) type Admission<'p, T, E, P, W> =
    Result<(machine::Ticket<'p, P>, Option<Duration>), Next<'p, T, E, P, W>>;

/// Hands the machine admission's `answer` for `ticket`, with a fresh reading of `clock`: the
/// ticket to run the callback with and how long admission took, or what comes instead. The
/// step after admission every driver shares (each waits for the answer its own way).
pub(crate) fn settle_admission<'p, T, E, C, A, L, W>(
    machine: &mut Machine<'p, T, E, C, A, L, W>,
    ticket: machine::Ticket<'p, A::Permit>,
    answer: Admitted<A::Permit>,
    clock: &Clock,
) -> Admission<'p, T, E, A::Permit, W>
where
    C: Classify<T, E>,
    A: Admit,
    L: Record,
    W: Shape,
{
    let began = ticket.began;
    let now = clock.now();
    let ticket = machine.admitted(ticket, answer, now)?;
    Ok((ticket, Some(now.saturating_duration_since(began))))
}

/// `delay` after `from`. Delays are bounded by validation (a day at most), so this saturates
/// only on a clock near the end of time, and then at the latest instant (never at `from`,
/// which would turn a long delay into none).
pub(crate) fn later(from: Instant, delay: Duration) -> Instant {
    crate::clock::saturating_add(from, delay)
}

/// Whether the caller has cancelled.
#[inline(always)]
pub(crate) fn is_cancelled(caller: Option<&CancellationToken>) -> bool {
    caller.is_some_and(CancellationToken::is_cancelled)
}
