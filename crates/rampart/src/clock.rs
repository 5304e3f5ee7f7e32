//! Time: the one injectable clock behind every timer in rampart.
//!
//! Every deadline, attempt ceiling and backoff delay in a [`Policy`](crate::Policy) is read from
//! and slept on through a [`Clock`]. In production that is [`Clock::system`], tokio's clock, which
//! costs nothing extra (and which honours tokio's paused time in tests). In tests it can be a
//! [`ManualClock`]: time stands still until the test advances it, on a current-thread or a
//! multi-threaded runtime alike, so a 30 s backoff takes microseconds and every duration a test
//! asserts is exact.
//!
//! ```
//! use std::time::Duration;
//! use rampart::clock::{Clock, ManualClock};
//!
//! let manual = ManualClock::new();
//! let clock = Clock::from(manual.clone());
//! let start = clock.now();
//! manual.advance(Duration::from_secs(30));
//! assert_eq!(clock.now() - start, Duration::from_secs(30));
//! ```
//!
//! # Panics
//!
//! Sleeping on the system clock needs a tokio runtime with its time driver enabled, as
//! `tokio::time::sleep` does. The manual clock needs no runtime.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The instant type every rampart API speaks: tokio's, so that paused time works.
pub use tokio::time::Instant;

/// Where a policy reads the time and how it sleeps.
///
/// Cheap to clone: the system clock is a unit value, a manual clock one `Arc`.
#[derive(Clone, Default)]
pub struct Clock(Kind);

#[derive(Clone, Default)]
enum Kind {
    #[default]
    System,
    Manual(ManualClock),
}

impl Clock {
    /// tokio's clock: real time, or paused time under `tokio::time::pause`.
    pub const fn system() -> Self {
        Clock(Kind::System)
    }

    /// The current instant.
    #[inline]
    pub fn now(&self) -> Instant {
        match &self.0 {
            Kind::System => Instant::now(),
            Kind::Manual(manual) => manual.now(),
        }
    }

    /// A future that completes at `deadline` (at once if it has passed).
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        let inner = match &self.0 {
            Kind::System => SleepInner::System {
                sleep: tokio::time::sleep_until(deadline),
            },
            Kind::Manual(manual) => SleepInner::Manual {
                sleep: manual.sleep_until(deadline),
            },
        };
        Sleep { inner }
    }

    /// Blocks the current thread until `deadline` or until `stop` returns true, whichever is
    /// first; returns whether `stop` ended the wait. `stop` is checked at least every `poll`.
    ///
    /// Used by blocking execution; needs no runtime.
    pub fn block_until(&self, deadline: Instant, poll: Duration, stop: &dyn Fn() -> bool) -> bool {
        match &self.0 {
            Kind::System => loop {
                if stop() {
                    return true;
                }
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                std::thread::sleep((deadline - now).min(poll));
            },
            Kind::Manual(manual) => manual.block_until(deadline, poll, stop),
        }
    }

    /// The manual clock behind this clock, if it is one.
    pub fn as_manual(&self) -> Option<&ManualClock> {
        match &self.0 {
            Kind::System => None,
            Kind::Manual(manual) => Some(manual),
        }
    }
}

impl From<ManualClock> for Clock {
    fn from(manual: ManualClock) -> Self {
        Clock(Kind::Manual(manual))
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::System => f.write_str("Clock::System"),
            Kind::Manual(manual) => f.debug_tuple("Clock::Manual").field(manual).finish(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future returned by [`Clock::sleep_until`].
    #[must_use = "futures do nothing unless polled"]
    pub struct Sleep {
        #[pin]
        inner: SleepInner,
    }
}

pin_project_lite::pin_project! {
    #[project = SleepProj]
    enum SleepInner {
        System { #[pin] sleep: tokio::time::Sleep },
        Manual { sleep: ManualSleep },
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project().inner.project() {
            SleepProj::System { sleep } => sleep.poll(cx),
            SleepProj::Manual { sleep } => sleep.poll(cx),
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep").finish_non_exhaustive()
    }
}

/// A clock that moves only when told to: for tests.
///
/// Clones share one time line. Sleepers on it (async or blocking) wake when
/// [`advance`](ManualClock::advance) moves time to or past their deadline. Safe to share across
/// threads and runtimes.
#[derive(Clone)]
pub struct ManualClock {
    shared: Arc<ManualShared>,
}

struct ManualShared {
    state: Mutex<ManualState>,
    moved: Condvar,
}

struct ManualState {
    now: Instant,
    next_id: u64,
    sleepers: Vec<Sleeper>,
    blocked: usize,
}

struct Sleeper {
    id: u64,
    deadline: Instant,
    waker: Waker,
}

impl ManualClock {
    /// A manual clock standing at the current real instant.
    pub fn new() -> Self {
        ManualClock {
            shared: Arc::new(ManualShared {
                state: Mutex::new(ManualState {
                    now: Instant::now(),
                    next_id: 0,
                    sleepers: Vec::new(),
                    blocked: 0,
                }),
                moved: Condvar::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ManualState> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The current virtual instant.
    pub fn now(&self) -> Instant {
        self.lock().now
    }

    /// Moves time forward by `by` and wakes every sleeper whose deadline has come.
    pub fn advance(&self, by: Duration) {
        let due: Vec<Waker> = {
            let mut state = self.lock();
            state.now += by;
            let now = state.now;
            let mut due = Vec::new();
            state.sleepers.retain(|sleeper| {
                if sleeper.deadline <= now {
                    due.push(sleeper.waker.clone());
                    false
                } else {
                    true
                }
            });
            due
        };
        self.shared.moved.notify_all();
        due.into_iter().for_each(Waker::wake);
    }

    /// How many futures and threads are waiting on this clock right now.
    ///
    /// A test can wait for this to become non-zero to know a call has reached a backoff or an
    /// attempt ceiling before it advances time.
    pub fn sleepers(&self) -> usize {
        let state = self.lock();
        state.sleepers.len() + state.blocked
    }

    /// The earliest deadline anyone is sleeping until, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.lock().sleepers.iter().map(|s| s.deadline).min()
    }

    fn sleep_until(&self, deadline: Instant) -> ManualSleep {
        let id = {
            let mut state = self.lock();
            state.next_id += 1;
            state.next_id
        };
        ManualSleep {
            clock: self.clone(),
            deadline,
            id,
            registered: false,
        }
    }

    fn block_until(&self, deadline: Instant, poll: Duration, stop: &dyn Fn() -> bool) -> bool {
        let mut state = self.lock();
        state.blocked += 1;
        let stopped = loop {
            if stop() {
                break true;
            }
            if state.now >= deadline {
                break false;
            }
            // `poll` is real time here: it bounds how late a cancellation is noticed, while
            // `advance` wakes the thread at once.
            state = self
                .shared
                .moved
                .wait_timeout(state, poll)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        state.blocked -= 1;
        stopped
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("ManualClock")
            .field("now", &state.now)
            .field("sleepers", &(state.sleepers.len() + state.blocked))
            .finish()
    }
}

struct ManualSleep {
    clock: ManualClock,
    deadline: Instant,
    id: u64,
    registered: bool,
}

impl ManualSleep {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.clock.lock();
        if state.now >= self.deadline {
            if self.registered {
                state.sleepers.retain(|s| s.id != self.id);
                self.registered = false;
            }
            return Poll::Ready(());
        }
        match state.sleepers.iter_mut().find(|s| s.id == self.id) {
            Some(sleeper) => sleeper.waker.clone_from(cx.waker()),
            None => state.sleepers.push(Sleeper {
                id: self.id,
                deadline: self.deadline,
                waker: cx.waker().clone(),
            }),
        }
        self.registered = true;
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if self.registered {
            self.clock.lock().sleepers.retain(|s| s.id != self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_sleep_completes_only_when_time_is_advanced_to_its_deadline() {
        let manual = ManualClock::new();
        let clock = Clock::from(manual.clone());
        let deadline = clock.now() + Duration::from_secs(5);
        let task = tokio::spawn({
            let clock = clock.clone();
            async move { clock.sleep_until(deadline).await }
        });
        while manual.sleepers() == 0 {
            tokio::task::yield_now().await;
        }
        manual.advance(Duration::from_millis(4_999));
        tokio::task::yield_now().await;
        assert!(!task.is_finished());
        manual.advance(Duration::from_millis(1));
        task.await.expect("sleep task");
        assert_eq!(manual.sleepers(), 0);
    }

    #[test]
    fn dropped_manual_sleep_leaves_no_sleeper_behind() {
        let manual = ManualClock::new();
        let clock = Clock::from(manual.clone());
        let mut sleep = Box::pin(clock.sleep_until(clock.now() + Duration::from_secs(1)));
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        assert_eq!(manual.sleepers(), 1);
        drop(sleep);
        assert_eq!(manual.sleepers(), 0);
    }

    #[test]
    fn blocking_wait_returns_when_time_is_advanced_from_another_thread() {
        let manual = ManualClock::new();
        let clock = Clock::from(manual.clone());
        let deadline = clock.now() + Duration::from_secs(30);
        let waiter = std::thread::spawn(move || {
            clock.block_until(deadline, Duration::from_millis(10), &|| false)
        });
        while manual.sleepers() == 0 {
            std::thread::yield_now();
        }
        manual.advance(Duration::from_secs(30));
        assert!(!waiter.join().expect("waiter thread"));
    }
}
