//! Helpers for tests on a [`ManualClock`]: move time until something happens, and fail with a
//! message that says what was awaited and how much virtual time went by.
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

use crate::clock::ManualClock;

/// How many times a helper lets other tasks run before it gives up on a condition for this
/// step of time.
const SETTLE_ROUNDS: u32 = 10_000;

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

/// Lets other tasks and threads run until `condition` holds; false if it never did.
async fn settle(condition: &mut impl FnMut() -> bool) -> bool {
    for _ in 0..SETTLE_ROUNDS {
        if condition() {
            return true;
        }
        yield_now().await;
        std::thread::yield_now();
    }
    condition()
}

/// Advances `clock` by `step` at a time, letting the runtime run in between, until `condition`
/// holds; at most `max_advances` steps.
///
/// Checks the condition before the first advance too. Works on current-thread and
/// multi-threaded runtimes.
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
    if settle(&mut condition).await {
        return Ok(());
    }
    for _ in 0..max_advances {
        clock.advance(step);
        if settle(&mut condition).await {
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
