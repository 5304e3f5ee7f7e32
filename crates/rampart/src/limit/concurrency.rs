//! A concurrency limit: at most `max` attempts in flight, the rest queued (up to a bound) or
//! refused.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::admit::{Admit, AdmitContext, Feedback, Refusal};
use crate::clock::saturating_add;
use crate::error::{ConfigError, ConfigProblem};
use crate::latency::TypicalLatency;

/// At most `max` attempts in flight; up to `queue` more wait for a slot in arrival order
/// (without polling: a released permit wakes the next waiter); beyond that, refused at once.
///
/// A queued attempt leaves the queue when its ceiling passes or its caller cancels (the
/// executor drops the wait), and after `queue_timeout` if one is set. A refusal's retry-after
/// is the measured mean time a permit is held (10 ms until measured).
///
/// | knob | default |
/// |---|---|
/// | `max` | given |
/// | `queue` | 0 (refuse at once when full) |
/// | `queue_timeout` | none (the attempt's ceiling bounds the wait) |
///
/// ```
/// use rampart::limit::ConcurrencyLimit;
///
/// let limit = ConcurrencyLimit::new(2).queue(8);
/// assert_eq!(limit.available(), 2);
/// ```
///
/// The limit can change while it serves ([`set_limit`](Self::set_limit)): growing it lets
/// waiters in at once, shrinking it lets the attempts in flight finish and admits new ones
/// only once fewer than the new limit are in flight.
#[derive(Clone)]
pub struct ConcurrencyLimit {
    inner: Arc<Inner>,
}

struct Inner {
    /// The limit; changed by [`ConcurrencyLimit::set_limit`].
    max: AtomicUsize,
    /// Permits to take out of circulation as they come back: what a shrink could not take
    /// from the free ones. The semaphore holds `max + debt` permits in all.
    debt: AtomicUsize,
    /// Serialises changes of the limit (calls never take it).
    resizing: Mutex<()>,
    queue: usize,
    queue_timeout: Option<Duration>,
    semaphore: Arc<Semaphore>,
    queued: AtomicUsize,
    held: TypicalLatency,
}

impl ConcurrencyLimit {
    /// At most `max` in flight (a `max` of zero is raised to one: a limit that admits nothing
    /// is an outage, not a limit).
    pub fn new(max: usize) -> Self {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        ConcurrencyLimit {
            inner: Arc::new(Inner {
                max: AtomicUsize::new(max),
                debt: AtomicUsize::new(0),
                resizing: Mutex::new(()),
                queue: 0,
                queue_timeout: None,
                semaphore: Arc::new(Semaphore::new(max)),
                queued: AtomicUsize::new(0),
                held: TypicalLatency::default(),
            }),
        }
    }

    fn with(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| {
            let max = shared.limit();
            Inner {
                max: AtomicUsize::new(max),
                debt: AtomicUsize::new(0),
                resizing: Mutex::new(()),
                queue: shared.queue,
                queue_timeout: shared.queue_timeout,
                semaphore: Arc::new(Semaphore::new(max)),
                queued: AtomicUsize::new(0),
                held: TypicalLatency::default(),
            }
        });
        f(&mut inner);
        ConcurrencyLimit {
            inner: Arc::new(inner),
        }
    }

    /// Up to `queue` attempts wait for a slot (default 0).
    pub fn queue(self, queue: usize) -> Self {
        self.with(|inner| inner.queue = queue)
    }

    /// A queued attempt gives up after `timeout`, measured on the policy's clock
    /// ([`AdmitContext::clock`]) from the attempt's [`now`](AdmitContext::now). Works in
    /// blocking execution without a tokio runtime.
    pub fn queue_timeout(self, timeout: Duration) -> Self {
        self.with(|inner| inner.queue_timeout = Some(timeout))
    }

    /// The limit now.
    pub fn limit(&self) -> usize {
        self.inner.limit()
    }

    /// Changes the limit while the limiter serves, for every clone. Growing it hands the new
    /// slots to waiting attempts at once, in arrival order. Shrinking it takes the free slots
    /// away at once and the rest as attempts in flight end: none is cut short, and new
    /// attempts are admitted only once fewer than the new limit are in flight. The queue and
    /// the measured hold time are kept.
    ///
    /// # Errors
    ///
    /// A `max` of zero (a limit that admits nothing is an outage, not a limit; [`new`](Self::new)
    /// raises it to one instead) or above tokio's [`Semaphore::MAX_PERMITS`] (`usize::MAX >> 3`)
    /// is refused with a [`ConfigError`] naming `concurrency_limit.max` and the value; a
    /// refused update changes nothing.
    ///
    /// ```
    /// use rampart::limit::ConcurrencyLimit;
    ///
    /// let limit = ConcurrencyLimit::new(4);
    /// limit.set_limit(8)?;
    /// assert_eq!((limit.limit(), limit.available()), (8, 8));
    /// let refused = limit.set_limit(0).unwrap_err();
    /// assert_eq!(refused.to_string(), "concurrency_limit.max must be at least 1 (was 0)");
    /// assert_eq!(limit.limit(), 8);
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    pub fn set_limit(&self, max: usize) -> Result<(), ConfigError> {
        let max = checked_max(max)?;
        let inner = &*self.inner;
        let _one_at_a_time = inner
            .resizing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = inner.max.swap(max, Ordering::SeqCst);
        if max > old {
            // Cancel what a shrink still owes first, then add what is left.
            let mut grow = max - old;
            let _ = inner
                .debt
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |debt| {
                    let paid = debt.min(max - old);
                    grow = max - old - paid;
                    Some(debt - paid)
                });
            inner.semaphore.add_permits(grow);
        } else if max < old {
            let shrink = old - max;
            let taken = inner.semaphore.forget_permits(shrink);
            inner.debt.fetch_add(shrink - taken, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Slots free right now.
    pub fn available(&self) -> usize {
        self.inner.semaphore.available_permits()
    }

    /// Attempts in flight right now.
    pub fn in_flight(&self) -> usize {
        let inner = &*self.inner;
        let total = inner.limit() + inner.debt.load(Ordering::SeqCst);
        total.saturating_sub(self.available())
    }

    /// Attempts waiting right now.
    pub fn queued(&self) -> usize {
        self.inner.queued.load(Ordering::Relaxed)
    }

    fn refusal(&self) -> Refusal {
        Refusal {
            retry_after: Some(super::held_retry_after(&self.inner.held)),
            by: "concurrency limit",
        }
    }
}

/// The limit `set_limit` accepts: `max`, or the problem with it.
fn checked_max(max: usize) -> Result<usize, ConfigError> {
    let message = if max == 0 {
        "must be at least 1 (was 0)".to_owned()
    } else if max > Semaphore::MAX_PERMITS {
        format!("must be at most {} (was {max})", Semaphore::MAX_PERMITS)
    } else {
        return Ok(max);
    };
    Err(ConfigError::new(vec![ConfigProblem::new(
        "concurrency_limit.max",
        message,
    )]))
}

/// Counts a waiter for as long as it waits.
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Inner {
    fn limit(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Takes `permit` out of circulation if a shrink still owes one; whether it did.
    #[inline]
    fn pay_debt(&self, permit: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        if self.debt.load(Ordering::Relaxed) == 0 {
            return Some(permit);
        }
        let paid = self
            .debt
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |debt| {
                debt.checked_sub(1)
            })
            .is_ok();
        if paid {
            permit.forget();
            None
        } else {
            Some(permit)
        }
    }
}

impl Admit for ConcurrencyLimit {
    type Permit = OwnedSemaphorePermit;

    fn load(&self) -> crate::admit::Load {
        crate::admit::Load::new(Some(self.in_flight()), Some(self.queued()))
    }

    async fn acquire(&self, cx: &AdmitContext<'_>) -> Result<Self::Permit, Refusal> {
        let inner = &self.inner;
        loop {
            // A permit that came back without `release` (a dropped one) may be owed to a
            // shrink: take it out of circulation and look again.
            while let Ok(permit) = Arc::clone(&inner.semaphore).try_acquire_owned() {
                if let Some(permit) = inner.pay_debt(permit) {
                    return Ok(permit);
                }
            }
            let waiting = inner.queued.fetch_add(1, Ordering::Relaxed);
            let _queued = Queued(&inner.queued);
            if waiting >= inner.queue {
                return Err(self.refusal());
            }
            let wait = Arc::clone(&inner.semaphore).acquire_owned();
            let permit = match inner.queue_timeout {
                None => wait.await,
                Some(limit) => {
                    // On the policy's clock, and without needing a runtime: blocking execution
                    // drives this wait on a plain thread.
                    let alarm = cx.clock.alarm(saturating_add(cx.now, limit));
                    let (mut wait, mut alarm) = (pin!(wait), pin!(alarm));
                    let waited = poll_fn(|task| match wait.as_mut().poll(task) {
                        Poll::Ready(permit) => Poll::Ready(Some(permit)),
                        Poll::Pending => alarm.as_mut().poll(task).map(|()| None),
                    });
                    match waited.await {
                        Some(permit) => permit,
                        None => return Err(self.refusal()),
                    }
                }
            };
            // The semaphore is never closed, so a failed acquire cannot happen; refuse if it
            // does.
            let permit = permit.map_err(|_| self.refusal())?;
            if let Some(permit) = inner.pay_debt(permit) {
                return Ok(permit);
            }
            // That permit was owed to a shrink: wait again.
        }
    }

    fn release(&self, permit: Self::Permit, feedback: Feedback) {
        self.inner.held.record(feedback.elapsed);
        if let Some(permit) = self.inner.pay_debt(permit) {
            drop(permit);
        }
    }
}

impl fmt::Debug for ConcurrencyLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("max", &self.limit())
            .field("queue", &self.inner.queue)
            .field("in_flight", &self.in_flight())
            .field("queued", &self.queued())
            .finish()
    }
}
