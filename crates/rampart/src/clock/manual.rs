//! [`ManualClock`]: a clock that moves only when a test tells it to, and its sleepers.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Instant, saturating_add};

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
}

struct ManualState {
    now: Instant,
    next_id: u64,
    sleepers: Vec<Sleeper>,
    cancels: Vec<(u64, Instant, CancellationToken)>,
    /// Bumped by everything that touches the clock's sleepers and cancellations, so that
    /// `testing` can tell a runtime that has settled from one still at work.
    activity: u64,
    /// Sleepers an advance woke whose future has not been polled (or dropped) since.
    unobserved: usize,
}

/// What [`ManualClock::activity`] reports: how a test helper tells a settled runtime from one
/// still reacting to an advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Activity {
    /// Changes whenever a sleeper or a scheduled cancellation is added, polled or removed.
    pub(crate) generation: u64,
    /// Sleepers woken by an advance whose task has not looked at them yet.
    pub(crate) unobserved: usize,
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
                    cancels: Vec::new(),
                    activity: 0,
                    unobserved: 0,
                }),
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
    ///
    /// Saturates: a step past the latest instant the platform can represent (such as
    /// `Duration::MAX`) moves the clock to that instant, which wakes every sleeper, and never
    /// panics. Time then stands still there.
    pub fn advance(&self, by: Duration) {
        let (due, cancels) = {
            let mut state = self.lock();
            state.now = saturating_add(state.now, by);
            state.activity += 1;
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
            let mut cancels = Vec::new();
            state.cancels.retain(|(_, at, token)| {
                if *at <= now {
                    cancels.push(token.clone());
                    false
                } else {
                    true
                }
            });
            state.unobserved += due.len();
            (due, cancels)
        };
        cancels.iter().for_each(CancellationToken::cancel);
        due.into_iter().for_each(Waker::wake);
    }

    /// How many futures and threads are waiting on this clock right now.
    ///
    /// A test can wait for this to become non-zero to know a call has reached a backoff or an
    /// attempt ceiling before it advances time.
    pub fn sleepers(&self) -> usize {
        self.lock().sleepers.len()
    }

    /// The earliest deadline anyone is sleeping until, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.lock().sleepers.iter().map(|s| s.deadline).min()
    }

    /// The earliest instant at which an advance wakes a sleeper or fires a scheduled
    /// cancellation, if any: where `testing::advance_until` can jump to.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let state = self.lock();
        let sleeping = state.sleepers.iter().map(|s| s.deadline);
        sleeping.chain(state.cancels.iter().map(|c| c.1)).min()
    }

    /// A reading of the clock's activity, for `testing`'s helpers.
    pub(crate) fn activity(&self) -> Activity {
        let state = self.lock();
        Activity {
            generation: state.activity,
            unobserved: state.unobserved,
        }
    }

    pub(super) fn sleep_until(&self, deadline: Instant) -> ManualSleep {
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

    /// Schedules `token` to be cancelled at `at`; `None` when `at` has already come (the
    /// token is then cancelled at once).
    pub(super) fn schedule_cancel(&self, at: Instant, token: CancellationToken) -> Option<u64> {
        let mut state = self.lock();
        if state.now >= at {
            drop(state);
            token.cancel();
            return None;
        }
        state.next_id += 1;
        state.activity += 1;
        let id = state.next_id;
        state.cancels.push((id, at, token));
        Some(id)
    }

    pub(super) fn unschedule_cancel(&self, id: u64) {
        let mut state = self.lock();
        state.activity += 1;
        state.cancels.retain(|(entry, _, _)| *entry != id);
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
            .field("sleepers", &state.sleepers.len())
            .finish()
    }
}

pub(super) struct ManualSleep {
    clock: ManualClock,
    deadline: Instant,
    id: u64,
    registered: bool,
}

impl ManualSleep {
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.clock.lock();
        state.activity += 1;
        if state.now >= self.deadline {
            if self.registered {
                state.forget(self.id);
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
            let mut state = self.clock.lock();
            state.activity += 1;
            state.forget(self.id);
        }
    }
}

impl ManualState {
    /// Removes a registered sleeper, or notes that its task has seen the advance that woke it.
    fn forget(&mut self, id: u64) {
        let before = self.sleepers.len();
        self.sleepers.retain(|s| s.id != id);
        if self.sleepers.len() == before {
            self.unobserved = self.unobserved.saturating_sub(1);
        }
    }
}
