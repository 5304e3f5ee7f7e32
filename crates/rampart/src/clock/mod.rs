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
//! Sleeping on the system clock ([`Clock::sleep_until`]) needs a tokio runtime with its time
//! driver enabled, as `tokio::time::sleep` does. [`Clock::alarm`], [`Clock::block_on`],
//! [`Clock::block_until`] and [`Clock::cancel_at`] need none, and the manual clock needs no
//! runtime at all.

mod manual;
mod timer;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The instant type every rampart API speaks: tokio's, so that paused time works.
pub use tokio::time::Instant;

pub use manual::ManualClock;
use manual::ManualSleep;

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

    /// A future that completes at `deadline` on this clock (at once if it has passed), on any
    /// thread, with or without a tokio runtime: where [`sleep_until`](Self::sleep_until) needs
    /// a runtime's timer, this one falls back to the system clock's shared timer thread when
    /// the current thread has no runtime. For components that wait inside admission (a queue
    /// timeout) and may be driven by blocking execution. Inside a runtime it is
    /// `sleep_until`, so tokio's paused time applies; the manual clock needs neither.
    pub fn alarm(&self, deadline: Instant) -> Alarm {
        let inner = match &self.0 {
            Kind::System if tokio::runtime::Handle::try_current().is_err() => {
                let token = CancellationToken::new();
                let rung = token.clone().cancelled_owned();
                AlarmInner::Thread {
                    rung,
                    _guard: self.cancel_at(deadline, token),
                }
            }
            _ => AlarmInner::Sleep {
                sleep: self.sleep_until(deadline),
            },
        };
        Alarm { inner }
    }

    /// Blocks the current thread until `deadline`, or until `caller` is cancelled, whichever
    /// comes first; returns whether the cancellation ended the wait. A cancellation wakes the
    /// thread at once. Needs no runtime: used by blocking execution.
    pub fn block_until(&self, deadline: Instant, caller: Option<&CancellationToken>) -> bool {
        let never = std::future::pending::<()>();
        matches!(
            self.block_on(never, Some(deadline), caller),
            Blocked::Cancelled
        )
    }

    /// Drives `future` on the current thread until it completes, `deadline` passes on this
    /// clock, or `caller` is cancelled, parking the thread in between (any wake-up of the
    /// future, the clock or the token unparks it at once). Needs no runtime.
    pub fn block_on<F: Future>(
        &self,
        future: F,
        deadline: Option<Instant>,
        caller: Option<&CancellationToken>,
    ) -> Blocked<F::Output> {
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        let mut cancelled = std::pin::pin!(caller.map(CancellationToken::cancelled));
        let mut sleep = match (&self.0, deadline) {
            (Kind::Manual(manual), Some(at)) => Some(manual.sleep_until(at)),
            _ => None,
        };
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return Blocked::Ready(out);
            }
            if cancelled
                .as_mut()
                .as_pin_mut()
                .is_some_and(|c| c.poll(&mut cx).is_ready())
            {
                return Blocked::Cancelled;
            }
            match (&self.0, deadline) {
                (Kind::Manual(_), Some(_)) => {
                    if sleep.as_mut().is_some_and(|s| s.poll(&mut cx).is_ready()) {
                        return Blocked::TimedOut;
                    }
                    std::thread::park();
                }
                (Kind::System, Some(at)) => {
                    let now = Instant::now();
                    if now >= at {
                        return Blocked::TimedOut;
                    }
                    std::thread::park_timeout(at - now);
                }
                (_, None) => std::thread::park(),
            }
        }
    }

    /// Cancels `token` when this clock reaches `at` (at once if it has), until the returned
    /// guard is dropped. The system clock uses one shared timer thread for every such
    /// cancellation; the manual clock fires them when it is advanced. Used by blocking
    /// execution, where nothing polls the attempt.
    pub fn cancel_at(&self, at: Instant, token: CancellationToken) -> CancelGuard {
        match &self.0 {
            Kind::System => CancelGuard(GuardKind::System(timer::schedule(at, token))),
            Kind::Manual(manual) => match manual.schedule_cancel(at, token) {
                Some(id) => CancelGuard(GuardKind::Manual(manual.clone(), id)),
                None => CancelGuard(GuardKind::Fired),
            },
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

pin_project_lite::pin_project! {
    /// The future returned by [`Clock::alarm`].
    #[must_use = "futures do nothing unless polled"]
    pub struct Alarm {
        #[pin]
        inner: AlarmInner,
    }
}

pin_project_lite::pin_project! {
    #[project = AlarmProj]
    enum AlarmInner {
        Sleep { #[pin] sleep: Sleep },
        Thread {
            #[pin]
            rung: tokio_util::sync::WaitForCancellationFutureOwned,
            _guard: CancelGuard,
        },
    }
}

impl Future for Alarm {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project().inner.project() {
            AlarmProj::Sleep { sleep } => sleep.poll(cx),
            AlarmProj::Thread { rung, .. } => rung.poll(cx),
        }
    }
}

impl fmt::Debug for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Alarm").finish_non_exhaustive()
    }
}

/// How [`Clock::block_on`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked<T> {
    /// The future completed.
    Ready(T),
    /// The deadline passed first.
    TimedOut,
    /// The caller's token fired first.
    Cancelled,
}

/// Keeps a cancellation scheduled by [`Clock::cancel_at`]; dropping it unschedules it.
#[must_use = "dropping the guard unschedules the cancellation"]
pub struct CancelGuard(GuardKind);

enum GuardKind {
    System(timer::Entry),
    Manual(ManualClock, u64),
    Fired,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        match &self.0 {
            GuardKind::System(entry) => timer::unschedule(*entry),
            GuardKind::Manual(manual, id) => manual.unschedule_cancel(*id),
            GuardKind::Fired => {}
        }
    }
}

impl fmt::Debug for CancelGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelGuard").finish_non_exhaustive()
    }
}

/// `at + by`, or the latest instant that can be represented when that overflows (found by
/// bisection, about a hundred `checked_add`s, only on overflow).
pub(crate) fn saturating_add(at: Instant, by: Duration) -> Instant {
    if let Some(later) = at.checked_add(by) {
        return later;
    }
    // Invariant: `at + fits` exists and `at + overflows` does not.
    let (mut fits, mut overflows) = (Duration::ZERO, by);
    while overflows - fits > Duration::from_nanos(1) {
        let mid = fits + (overflows - fits) / 2;
        if at.checked_add(mid).is_some() {
            fits = mid;
        } else {
            overflows = mid;
        }
    }
    at + fits
}

/// Wakes a parked thread.
struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Instants as nanoseconds since the first one it was shown, for state that keeps time in an
/// atomic word (a limiter's next free slot, a lease's next refill).
///
/// The base is the first instant [`nanos`](TimeBase::nanos) sees, not the moment the value
/// was made: whatever clock the caller reads (the system clock, tokio's paused time, a
/// [`ManualClock`]) is the clock it counts on. An instant earlier than the base counts as the
/// base; a span too long for 64 bits of nanoseconds (585 years) saturates.
///
/// ```
/// use std::time::Duration;
/// use rampart::clock::{Clock, ManualClock, TimeBase};
///
/// let manual = ManualClock::new();
/// let clock = Clock::from(manual.clone());
/// let base = TimeBase::default();
/// let start = clock.now();
/// assert_eq!(base.nanos(start), 0);
/// manual.advance(Duration::from_millis(3));
/// assert_eq!(base.nanos(clock.now()), 3_000_000);
/// assert_eq!(base.nanos(start), 0);
/// ```
#[derive(Debug, Default)]
pub struct TimeBase(OnceLock<Instant>);

impl TimeBase {
    /// Nanoseconds from the first instant this base was shown to `now`.
    #[inline]
    pub fn nanos(&self, now: Instant) -> u64 {
        let base = *self.0.get_or_init(|| now);
        u64::try_from(now.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests;
