//! A concurrency limit: at most `max` attempts in flight, the rest queued (up to a bound) or
//! refused.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::{AcquireError, Semaphore, SemaphorePermit};

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
/// only once fewer than the new limit are in flight. Waiters are admitted in the order they
/// arrived, whatever the changes: a slot that a shrink takes back is taken as it comes back
/// (its [`ConcurrencyPermit`] given back with [`release`](Admit::release) or dropped, or it
/// was handed to a waiter whose caller gave up before it ran), before any waiter sees it.
#[derive(Clone)]
pub struct ConcurrencyLimit {
    inner: Arc<Inner>,
}

struct Inner {
    /// The limit; changed by [`ConcurrencyLimit::set_limit`].
    max: AtomicUsize,
    /// Permits to take out of circulation as they come back: what a shrink could not take
    /// from the free ones. `max + debt` permits exist in all: free in the semaphore, or held
    /// by a [`ConcurrencyPermit`] (which took its own out of the semaphore with `forget`).
    debt: AtomicUsize,
    /// Serialises changes of the limit (calls never take it).
    resizing: Mutex<()>,
    queue: usize,
    queue_timeout: Option<Duration>,
    semaphore: Semaphore,
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
                semaphore: Semaphore::new(max),
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
                semaphore: Semaphore::new(max),
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

    /// Slots free right now: at most the limit less the attempts in flight (a slot that a
    /// shrink still has to take back is not free).
    pub fn available(&self) -> usize {
        let (free, debt) = self.inner.counts();
        free.saturating_sub(debt)
    }

    /// Attempts in flight right now: permits handed out and not yet given back.
    pub fn in_flight(&self) -> usize {
        let inner = &*self.inner;
        let (free, debt) = inner.counts();
        (inner.limit() + debt).saturating_sub(free)
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

/// Held while an attempt admitted by a [`ConcurrencyLimit`] runs; giving it back
/// ([`release`](Admit::release)) or dropping it frees the slot, or, after a shrink, takes the
/// slot out of circulation (so no waiter is woken for a slot that is gone).
#[must_use = "dropping the permit frees its slot at once"]
pub struct ConcurrencyPermit {
    inner: Arc<Inner>,
}

impl Drop for ConcurrencyPermit {
    fn drop(&mut self) {
        self.inner.give_back();
    }
}

impl fmt::Debug for ConcurrencyPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyPermit").finish_non_exhaustive()
    }
}

/// A queued attempt's wait for a slot, which takes the slot out of the semaphore once handed
/// one. tokio hands a slot to a waiter before the waiter is polled; a wait dropped in between
/// (its caller cancelled, or its queue timeout passed) would give that slot straight to the
/// next waiter, past a shrink that is owed one. Dropped unfinished, this wait takes a slot it
/// was handed and gives it back as a permit does: to the shrink first.
struct Wait<'w, 's, F: Future<Output = Result<SemaphorePermit<'s>, AcquireError>>> {
    acquire: Pin<&'w mut F>,
    inner: &'w Arc<Inner>,
    done: bool,
}

impl<'s, F: Future<Output = Result<SemaphorePermit<'s>, AcquireError>>> Future for Wait<'_, 's, F> {
    type Output = Result<(), AcquireError>;

    fn poll(mut self: Pin<&mut Self>, task: &mut Context<'_>) -> Poll<Self::Output> {
        let acquired = std::task::ready!(self.acquire.as_mut().poll(task));
        self.done = true;
        Poll::Ready(acquired.map(SemaphorePermit::forget))
    }
}

impl<'s, F: Future<Output = Result<SemaphorePermit<'s>, AcquireError>>> Drop for Wait<'_, 's, F> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Unconstrained: in a task out of tokio's cooperative budget, a wait that was handed
        // its slot would answer pending. (Every tokio the crate accepts, 1.40 up, has this
        // name; newer ones deprecate it for `tokio::task::coop::unconstrained`.)
        #[allow(deprecated)]
        let mut acquire = tokio::task::unconstrained(self.acquire.as_mut());
        let mut task = Context::from_waker(Waker::noop());
        if let Poll::Ready(Ok(permit)) = Pin::new(&mut acquire).poll(&mut task) {
            permit.forget();
            self.inner.give_back();
        }
    }
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

    /// The semaphore's free permits and the debt, read once each.
    fn counts(&self) -> (usize, usize) {
        let free = self.semaphore.available_permits();
        (free, self.debt.load(Ordering::SeqCst))
    }

    /// A slot that was taken out of the semaphore comes back: it pays a shrink's debt if one
    /// is owed, else it goes back to the semaphore (to the first waiter, if any).
    fn give_back(&self) {
        if !self.pay_debt() {
            self.semaphore.add_permits(1);
        }
    }

    /// Pays one permit of a shrink's debt, if there is one; whether it did. The permit paid
    /// with is the caller's, already out of the semaphore: it is simply not put back.
    #[inline]
    fn pay_debt(&self) -> bool {
        if self.debt.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.debt
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |debt| {
                debt.checked_sub(1)
            })
            .is_ok()
    }

    fn permit(self: &Arc<Self>) -> ConcurrencyPermit {
        ConcurrencyPermit {
            inner: Arc::clone(self),
        }
    }
}

impl Admit for ConcurrencyLimit {
    type Permit = ConcurrencyPermit;

    fn load(&self) -> crate::admit::Load {
        crate::admit::Load::new(Some(self.in_flight()), Some(self.queued()))
    }

    async fn acquire(&self, cx: &AdmitContext<'_>) -> Result<Self::Permit, Refusal> {
        let inner = &self.inner;
        // A free permit while a shrink is owed one is possible only when the two raced (a
        // permit given back just as the shrink counted the free ones): pay with it and look
        // again. Free permits mean nobody waits, so this overtakes no waiter.
        while let Ok(permit) = inner.semaphore.try_acquire() {
            permit.forget();
            if !inner.pay_debt() {
                return Ok(inner.permit());
            }
        }
        let waiting = inner.queued.fetch_add(1, Ordering::Relaxed);
        let _queued = Queued(&inner.queued);
        if waiting >= inner.queue {
            return Err(self.refusal());
        }
        let acquire = pin!(inner.semaphore.acquire());
        let mut wait = Wait {
            acquire,
            inner,
            done: false,
        };
        let waited = match inner.queue_timeout {
            None => (&mut wait).await,
            Some(limit) => {
                // On the policy's clock, and without needing a runtime: blocking execution
                // drives this wait on a plain thread.
                let mut alarm = pin!(cx.clock.alarm(saturating_add(cx.now, limit)));
                let waited = poll_fn(|task| match Pin::new(&mut wait).poll(task) {
                    Poll::Ready(waited) => Poll::Ready(Some(waited)),
                    Poll::Pending => alarm.as_mut().poll(task).map(|()| None),
                });
                match waited.await {
                    Some(waited) => waited,
                    None => return Err(self.refusal()),
                }
            }
        };
        // The semaphore is never closed, so a failed acquire cannot happen; refuse if it
        // does. A slot handed over is kept even if a shrink is owed one now: it was handed
        // over before that shrink counted (a slot coming back pays a debt before it reaches
        // a waiter), so the waiter was admitted first and the shrink takes a later slot.
        waited.map_err(|_| self.refusal())?;
        Ok(inner.permit())
    }

    fn release(&self, permit: Self::Permit, feedback: Feedback) {
        self.inner.held.record(feedback.elapsed);
        drop(permit);
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
