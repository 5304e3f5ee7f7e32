//! Testing code that runs under a policy: on tokio's paused time (no rampart code at all), or
//! on a [`ManualClock`] with the helpers of this module, which move time until something
//! happens and fail with a message that says what was awaited and how much virtual time went
//! by.
//!
//! # Which clock
//!
//! **tokio's paused time first.** A policy's default clock, [`Clock::system`](crate::Clock::system), is tokio's, and
//! honours tokio's paused time: in a test started paused (`#[tokio::test(start_paused =
//! true)]`, with tokio's `test-util` feature in the dev-dependencies), time stands still
//! while any task can run and jumps to the next timer when the runtime is idle. A whole
//! service (an axum router behind rampart-http's inbound layer, handlers whose clients run
//! under policies) is tested as it runs in production, with no test code of rampart's and no
//! clock passed anywhere, and a 30 s backoff takes no real time. It needs a current-thread
//! runtime, and every timer in the test to be tokio's.
//!
//! ```
//! use std::time::Duration;
//! use rampart::Policy;
//! use rampart::backoff::Backoff;
//!
//! # fn main() {
//! // `#[tokio::test(start_paused = true)]` in a test; spelt out for the doctest.
//! let runtime = tokio::runtime::Builder::new_current_thread()
//!     .enable_time()
//!     .start_paused(true)
//!     .build()
//!     .expect("runtime");
//! runtime.block_on(async {
//!     let policy = Policy::builder()
//!         .max_attempts(3)
//!         .backoff(Backoff::constant(Duration::from_secs(30)))
//!         .no_total_timeout()
//!         .build()
//!         .expect("valid policy");
//!     let start = tokio::time::Instant::now();
//!     let outcome = policy.run(async |_attempt| Err::<(), _>("unavailable")).await;
//!     assert!(outcome.is_err());
//!     // Two backoffs of 30 s, exactly, in no real time.
//!     assert_eq!(start.elapsed(), Duration::from_secs(60));
//! });
//! # }
//! ```
//!
//! **A [`ManualClock`] when the test must decide when time moves**: to look at a call in the
//! middle of a backoff, to run on a multi-threaded runtime or with blocking execution (which
//! paused time does not reach), or beside timers that must not move. Give the clock to each
//! policy ([`PolicyBuilder::clock`](crate::PolicyBuilder::clock)) and to rampart-http's
//! `InboundLayer::clock`, then move it with [`advance_until`]:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use rampart::{ManualClock, Policy};
//! use rampart::backoff::Backoff;
//! use rampart::testing::{advance_until, wait_for_pending};
//!
//! let clock = ManualClock::new();
//! let policy = Policy::builder()
//!     .clock(clock.clone())
//!     .max_attempts(2)
//!     .backoff(Backoff::constant(Duration::from_secs(1)))
//!     .build()
//!     .expect("valid policy");
//! let attempts = Arc::new(AtomicU32::new(0));
//! let seen = attempts.clone();
//! let mut call = tokio::spawn(async move {
//!     policy
//!         .run(async |_attempt| {
//!             seen.fetch_add(1, Ordering::SeqCst);
//!             Err::<(), _>("unavailable")
//!         })
//!         .await
//! });
//! wait_for_pending(&mut call, || clock.sleepers() == 1, "the backoff").await.unwrap();
//! advance_until(&clock, Duration::from_secs(1), || attempts.load(Ordering::SeqCst) == 2, "the retry", 1)
//!     .await
//!     .unwrap();
//! assert!(call.await.unwrap().is_err());
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use crate::clock::{Instant, ManualClock};

/// How many times a helper lets other tasks run before it gives up on a condition for this
/// step of time, when it cannot tell that the runtime has settled.
const SETTLE_ROUNDS: u32 = 10_000;

/// How many rounds in a row the clock must see no activity, with every sleeper an advance
/// woke polled again, for a helper to take the runtime as settled. Each round lets every other
/// ready task run once (and other threads get the processor), so this covers a chain of
/// wake-ups between tasks and a worker thread that is slow to pick its task up.
const QUIET_ROUNDS: u32 = 1_000;

/// A testing helper's condition was not met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stalled {
    what: String,
    advances: u32,
    step: Duration,
    completed_early: bool,
}

impl fmt::Display for Stalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.completed_early {
            return write!(
                f,
                "waiting for {}: the call completed before the condition held",
                self.what
            );
        }
        let plural = if self.advances == 1 { "" } else { "s" };
        write!(
            f,
            "waiting for {}: condition not met after {} advance{plural} of {:?} ({:?} of virtual time)",
            self.what,
            self.advances,
            self.step,
            self.step.saturating_mul(self.advances)
        )
    }
}

impl std::error::Error for Stalled {}

/// Returns `Pending` once (waking itself), so the runtime can run other tasks.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

/// Lets other tasks and threads run until `condition` holds (true), or until the runtime has
/// settled with it false (false).
///
/// Settled means: every sleeper the last advance woke has been polled again, and then the
/// clock saw nothing for [`QUIET_ROUNDS`] rounds, while someone still sleeps on it (the next
/// advance has something to wake). With nobody asleep on the clock, something may be on its
/// way to it (a task another thread has not run yet): then it waits [`SETTLE_ROUNDS`] rounds,
/// as it does while the clock keeps changing.
async fn settle(clock: &ManualClock, condition: &mut impl FnMut() -> bool) -> bool {
    let mut seen = clock.activity();
    let mut quiet = 0;
    for _ in 0..SETTLE_ROUNDS {
        if condition() {
            return true;
        }
        let now = clock.activity();
        if now == seen && now.unobserved == 0 {
            quiet += 1;
            if quiet >= QUIET_ROUNDS && clock.next_due().is_some() {
                return false;
            }
        } else {
            seen = now;
            quiet = 0;
        }
        yield_now().await;
        std::thread::yield_now();
    }
    condition()
}

/// How many steps of `step` from `now` reach `due`: at least one, at most `left`.
fn steps_to(now: Instant, due: Option<Instant>, step: Duration, left: u32) -> u32 {
    let (Some(due), false) = (due, step.is_zero()) else {
        return 1;
    };
    let gap = due.saturating_duration_since(now).as_nanos();
    let steps = gap.div_ceil(step.as_nanos());
    u32::try_from(steps).unwrap_or(u32::MAX).clamp(1, left)
}

/// Advances `clock` by `step` at a time, letting the runtime run in between, until `condition`
/// holds; at most `max_advances` steps.
///
/// Checks the condition before the first advance too. Steps that would wake nobody cost
/// nothing: the helper jumps over them at once, to the first step that reaches the clock's
/// next due instant (a sleeper's deadline, or a scheduled cancellation), so a scenario of
/// minutes of virtual time in steps of milliseconds runs in as many rounds as it has
/// wake-ups. Time still moves in whole steps, and each skipped step counts against
/// `max_advances`, as if it had been taken. After a step that wakes someone, the helper lets
/// the runtime run until the condition holds or the runtime has settled (every woken task has
/// run, and the clock sees no more activity), which costs no measurable real time.
///
/// Works on current-thread and multi-threaded runtimes. It takes the work it waits for to be
/// driven by this clock: a task waiting on real I/O at the same time is not waited for (as
/// with tokio's paused time, which also jumps to the next timer once the runtime is idle);
/// wait for that first, with [`wait_for_pending`].
///
/// # Errors
///
/// [`Stalled`] saying `what` did not happen within `max_advances` steps of `step`, with the
/// virtual time that passed.
pub async fn advance_until(
    clock: &ManualClock,
    step: Duration,
    mut condition: impl FnMut() -> bool,
    what: &str,
    max_advances: u32,
) -> Result<(), Stalled> {
    if settle(clock, &mut condition).await {
        return Ok(());
    }
    let mut advances = 0;
    while advances < max_advances {
        let steps = steps_to(clock.now(), clock.next_due(), step, max_advances - advances);
        clock.advance(step.saturating_mul(steps));
        advances += steps;
        if settle(clock, &mut condition).await {
            return Ok(());
        }
    }
    Err(Stalled {
        what: what.to_owned(),
        advances: max_advances,
        step,
        completed_early: false,
    })
}

/// Drives `call` (a join handle, or a pinned future) until `condition` holds while the call
/// is still pending, without moving time.
///
/// Fails if the call completes first: the state the test wanted to observe was skipped.
///
/// # Errors
///
/// [`Stalled`] when the call completed before `condition` held, saying `what` was
/// skipped.
pub async fn wait_for_pending<F>(
    call: &mut F,
    mut condition: impl FnMut() -> bool,
    what: &str,
) -> Result<(), Stalled>
where
    F: Future + Unpin,
{
    let mut pinned = std::pin::Pin::new(call);
    for _ in 0..SETTLE_ROUNDS {
        let done = std::future::poll_fn(|cx| Poll::Ready(pinned.as_mut().poll(cx).is_ready()));
        if done.await {
            return Err(Stalled {
                what: what.to_owned(),
                advances: 0,
                step: Duration::ZERO,
                completed_early: true,
            });
        }
        if condition() {
            return Ok(());
        }
        yield_now().await;
        std::thread::yield_now();
    }
    Err(Stalled {
        what: what.to_owned(),
        advances: 0,
        step: Duration::ZERO,
        completed_early: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn advance_until_says_what_it_waited_for_and_how_long() {
        let clock = ManualClock::new();
        let err = advance_until(&clock, Duration::from_secs(1), || false, "the retry", 3)
            .await
            .expect_err("never true");
        assert_eq!(
            err.to_string(),
            "waiting for the retry: condition not met after 3 advances of 1s (3s of virtual time)"
        );
    }

    #[tokio::test]
    async fn wait_for_pending_fails_when_the_call_completes_first() {
        let mut call = std::pin::pin!(async {});
        let err = wait_for_pending(&mut call, || false, "the backoff")
            .await
            .expect_err("completed");
        assert_eq!(
            err.to_string(),
            "waiting for the backoff: the call completed before the condition held"
        );
    }
}
