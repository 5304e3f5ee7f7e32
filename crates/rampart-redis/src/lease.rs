//! The lease machinery both limiters share: admit from what this instance holds, refill it in
//! the background from the store, size refills by this instance's own demand, and fall back
//! to a local limit while the store cannot be reached.
//!
//! What differs between a rate and a concurrency limit (what is held, how it is taken, what a
//! refill asks for) is a [`Batch`]; everything here is written once for both.
//!
//! The hot path is a [`Batch::try_take`] (one compare-and-swap) and one relaxed counter of
//! demand; only a refill talks to the store, from a spawned task, one at a time, bounded by
//! the timeout. A call that finds the batch empty waits for that refill, never longer than the
//! timeout; past it, or once the store has failed, calls are served by the local fallback and
//! the store is probed every `probe_every` until it answers again.

use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use rampart::admit::{AdmitContext, Refusal};
use rampart::clock::TimeBase;
use rampart::{Clock, Instant};
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::error::StoreError;
use crate::event::{LimitEvent, Listener};
use crate::store::{Store, StoreFuture};

/// What one instance holds of a shared limit, and how it asks the store for more.
pub(crate) trait Batch: Send + Sync + 'static {
    /// The store operation a refill performs, for errors (`"rate refill"`).
    const OP: &'static str;
    /// What a refusal is reported as ([`Refusal::by`]).
    const BY: &'static str;

    /// Admits one call from what this instance holds, at `now` (nanoseconds since the lease
    /// began); lock-free.
    fn try_take(&self, now: u64) -> bool;

    /// Whether what is left is low enough that a refill should start now, before it runs out.
    fn is_low(&self) -> bool;

    /// Asks the store for more.
    fn refill<'a>(&'a self, store: &'a dyn Store, ask: Ask) -> StoreFuture<'a, Refilled>;

    /// Admits one call from the local fallback, or says when to try again.
    fn fallback_take(&self, now: Instant) -> Result<(), Duration>;

    /// The store cannot be reached: forget whatever it may no longer honour.
    fn lose(&self);

    /// What to tell the store when the last handle is dropped (a lease to give up).
    fn release(&self, store: Arc<dyn Store>) -> Option<StoreFuture<'static, ()>> {
        let _ = store;
        None
    }
}

/// What a refill asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    /// The batch, sized by this instance's demand.
    pub(crate) want: u64,
    /// A call is waiting for it: the batch is empty.
    pub(crate) urgent: bool,
    /// When, in nanoseconds since the lease began.
    pub(crate) now: u64,
}

/// What a refill got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Refilled {
    /// Whether the store was asked at all (a full batch needs nothing).
    pub(crate) asked: bool,
    /// Permits added to this instance's batch.
    pub(crate) granted: u64,
    /// The store has no more room: ask again no sooner than this (zero: any time).
    pub(crate) wait: Duration,
}

/// The settings of the machinery, validated by the builders.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) key: String,
    pub(crate) timeout: Duration,
    pub(crate) probe_every: Duration,
    pub(crate) horizon: Duration,
    pub(crate) max_batch: u64,
}

/// What a limiter has done so far; see [`GlobalRateLimit::stats`](crate::GlobalRateLimit::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Calls that asked to be admitted (admitted and refused).
    pub calls: u64,
    /// Calls refused.
    pub refused: u64,
    /// Calls admitted by the local fallback (while Redis could not be reached, or did not
    /// answer a refill within the timeout).
    pub fallback_admitted: u64,
    /// Operations sent to Redis (refills, probes, lease renewals), finished or not.
    pub round_trips: u64,
    /// Of them, those that failed or ran out of time.
    pub failures: u64,
    /// Permits Redis added to this instance's batches, in all.
    pub granted: u64,
    /// Whether the limiter is on its local fallback now.
    pub on_fallback: bool,
}

/// The shared state of one limiter on one instance.
pub(crate) struct Lease<B: Batch> {
    pub(crate) batch: B,
    store: Arc<dyn Store>,
    settings: Settings,
    runtime: Handle,
    /// Instants are kept as nanoseconds since the first one a call showed.
    base: TimeBase,
    /// The clock of the first call, which renewals read too (a policy on a manual clock
    /// keeps one time base for the lease).
    clock: OnceLock<Clock>,
    on_fallback: AtomicBool,
    /// When the fallback began (nanoseconds), for the event that ends it.
    fallback_since: AtomicU64,
    refilling: AtomicBool,
    refilled: Notify,
    /// No refill before this instant (nanoseconds): the store said it has no room, or it
    /// failed and is probed only every `probe_every`.
    not_before: AtomicU64,
    calls: AtomicU64,
    /// How contended the store has been lately (see `backoff`; touched by refills only,
    /// one at a time).
    empty_streak: AtomicU32,
    /// The demand seen at the previous refill: the call count and when (nanoseconds).
    /// Written by refills only, one at a time, so relaxed.
    sized_calls: AtomicU64,
    sized_at: AtomicU64,
    counters: Counters,
    listener: Option<Listener>,
}

#[derive(Debug, Default)]
struct Counters {
    refused: AtomicU64,
    fallback_admitted: AtomicU64,
    round_trips: AtomicU64,
    failures: AtomicU64,
    granted: AtomicU64,
}

/// Nanoseconds in a duration, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<B: Batch> Lease<B> {
    pub(crate) fn new(
        batch: B,
        store: Arc<dyn Store>,
        settings: Settings,
        runtime: Handle,
        listener: Option<Listener>,
    ) -> Self {
        Lease {
            batch,
            store,
            settings,
            runtime,
            base: TimeBase::default(),
            clock: OnceLock::new(),
            on_fallback: AtomicBool::new(false),
            fallback_since: AtomicU64::new(0),
            refilling: AtomicBool::new(false),
            refilled: Notify::new(),
            not_before: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            empty_streak: AtomicU32::new(0),
            sized_calls: AtomicU64::new(0),
            sized_at: AtomicU64::new(0),
            counters: Counters::default(),
            listener,
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// `now` as nanoseconds since the first instant a call showed; an earlier instant counts
    /// as that one.
    pub(crate) fn nanos(&self, now: Instant) -> u64 {
        self.base.nanos(now)
    }

    /// The clock the calls read (the system clock until a call has come).
    pub(crate) fn clock(&self) -> &Clock {
        static SYSTEM: Clock = Clock::system();
        self.clock.get().unwrap_or(&SYSTEM)
    }

    /// Admits a call: from the batch at once, else after the refill it waits for (never
    /// longer than the timeout), else from the fallback.
    pub(crate) async fn acquire(self: &Arc<Self>, cx: &AdmitContext<'_>) -> Result<(), Refusal> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.clock.get().is_none() {
            let _ = self.clock.set(cx.clock.clone());
        }
        let now = self.nanos(cx.now);
        if self.batch.try_take(now) {
            if self.batch.is_low() {
                self.refill_soon(cx.clock, now, false);
            }
            return Ok(());
        }
        self.acquire_slow(cx, now).await
    }

    async fn acquire_slow(
        self: &Arc<Self>,
        cx: &AdmitContext<'_>,
        mut now: u64,
    ) -> Result<(), Refusal> {
        let give_up = cx.now + self.settings.timeout;
        loop {
            if self.on_fallback.load(Ordering::Acquire) {
                // A probe when one is due; never waited for.
                self.refill_soon(cx.clock, now, true);
                return self.by_fallback(cx.clock.now());
            }
            let not_before = self.not_before.load(Ordering::Acquire);
            if now < not_before {
                return Err(self.refuse(Duration::from_nanos(not_before - now)));
            }
            let mut refilled = pin!(self.refilled.notified());
            refilled.as_mut().enable();
            if self.batch.try_take(now) {
                return Ok(());
            }
            if !self.refill_soon(cx.clock, now, true) && !self.refilling.load(Ordering::Acquire) {
                // A refill ended between the checks: look again.
                now = self.nanos(cx.clock.now());
                continue;
            }
            if before(cx.clock, give_up, refilled).await.is_none() {
                // Redis has not answered within the bound, and this call waits no longer (the
                // refill itself times out now too, and switches to the fallback).
                return self.by_fallback(cx.clock.now());
            }
            now = self.nanos(cx.clock.now());
            if self.batch.try_take(now) {
                return Ok(());
            }
        }
    }

    fn by_fallback(&self, now: Instant) -> Result<(), Refusal> {
        match self.batch.fallback_take(now) {
            Ok(()) => {
                self.counters
                    .fallback_admitted
                    .fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(after) => Err(self.refuse(after)),
        }
    }

    fn refuse(&self, after: Duration) -> Refusal {
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        Refusal {
            retry_after: Some(after),
            by: B::BY,
        }
    }

    /// Starts a refill in the background unless one is running or none is due; returns
    /// whether it started one. `urgent`: a call is waiting, so ask for at least one permit.
    pub(crate) fn refill_soon(self: &Arc<Self>, clock: &Clock, now: u64, urgent: bool) -> bool {
        // A load first: while a refill runs, the calls that find the batch low only read the
        // shared line.
        if now < self.not_before.load(Ordering::Acquire)
            || self.refilling.load(Ordering::Relaxed)
            || self.refilling.swap(true, Ordering::AcqRel)
        {
            return false;
        }
        let lease = Arc::clone(self);
        let clock = clock.clone();
        drop(
            self.runtime
                .spawn(async move { lease.refill(&clock, urgent).await }),
        );
        true
    }

    /// One refill: sized, sent, bounded by the timeout, its result recorded; then every
    /// waiting call is woken.
    async fn refill(&self, clock: &Clock, urgent: bool) {
        let now = self.nanos(clock.now());
        let want = self.size(now, urgent);
        let timeout = self.settings.timeout;
        let give_up = clock.now() + timeout;
        let refill = self.batch.refill(&*self.store, Ask { want, urgent, now });
        let result = match before(clock, give_up, refill).await {
            Some(result) => result,
            None => Err({
                self.store.reset();
                StoreError::timeout(self.store.server(), &self.settings.key, B::OP, timeout)
            }),
        };
        let done = self.nanos(clock.now());
        match result {
            Ok(refilled) => {
                if refilled.asked {
                    self.counters.round_trips.fetch_add(1, Ordering::Relaxed);
                }
                self.counters
                    .granted
                    .fetch_add(refilled.granted, Ordering::Relaxed);
                let wait = match self.backoff(refilled) {
                    wait if wait.is_zero() => 0,
                    wait => done.saturating_add(nanos(wait)),
                };
                self.not_before.store(wait, Ordering::Release);
                if refilled.asked && self.on_fallback.swap(false, Ordering::AcqRel) {
                    let since = self.fallback_since.load(Ordering::Relaxed);
                    self.emit(&LimitEvent::Rejoined {
                        key: &self.settings.key,
                        after: Duration::from_nanos(done.saturating_sub(since)),
                    });
                }
            }
            Err(error) => {
                self.counters.round_trips.fetch_add(1, Ordering::Relaxed);
                self.counters.failures.fetch_add(1, Ordering::Relaxed);
                self.batch.lose();
                let probe = done.saturating_add(nanos(self.settings.probe_every));
                self.not_before.store(probe, Ordering::Release);
                if !self.on_fallback.swap(true, Ordering::AcqRel) {
                    self.fallback_since.store(done, Ordering::Relaxed);
                    self.emit(&LimitEvent::Fallback {
                        key: &self.settings.key,
                        error: &error,
                    });
                }
            }
        }
        self.refilling.store(false, Ordering::Release);
        self.refilled.notify_waiters();
    }

    /// How long to leave the store alone after `refilled`: its wait, times 2^k where k
    /// counts up for each refill that got nothing and down for each that got something (at
    /// most 4 times the wait), with up to half of it again at random while k is above zero.
    ///
    /// Instances that contend for an empty quota then poll it less often, each taking a
    /// larger batch when it does. The count goes down by one, not to zero, on a grant, so a
    /// winner keeps the same slower pace as the instances it contends with and the quota is
    /// shared about evenly; the jitter keeps them from asking in lockstep. A lone instance
    /// asks again exactly when the store said its tokens are there, never gets nothing, and
    /// so waits exactly the store's wait.
    fn backoff(&self, refilled: Refilled) -> Duration {
        let streak = if !refilled.asked {
            0
        } else if refilled.granted > 0 {
            self.empty_streak.load(Ordering::Relaxed).saturating_sub(1)
        } else {
            (self.empty_streak.load(Ordering::Relaxed) + 1).min(2)
        };
        self.empty_streak.store(streak, Ordering::Relaxed);
        let jitter = if streak > 0 {
            1.0 + fastrand::f64() / 2.0
        } else {
            1.0
        };
        let factor = f64::from(1u32 << streak) * jitter;
        Duration::try_from_secs_f64(refilled.wait.as_secs_f64() * factor).unwrap_or(Duration::MAX)
    }

    /// The batch to ask for: this instance's calls per second since the previous refill,
    /// times the horizon, at most `max_batch`, at least one when a call is waiting.
    fn size(&self, now: u64, urgent: bool) -> u64 {
        let calls = self.calls.load(Ordering::Relaxed);
        let last_calls = self.sized_calls.swap(calls, Ordering::Relaxed);
        let last_at = self.sized_at.swap(now, Ordering::Relaxed);
        if last_calls == 0 {
            // The first refill knows no demand yet: one permit for the call that asked.
            return u64::from(urgent);
        }
        // A floor on the span, so that two refills close together do not read as a surge
        // (a busy instance's batches grow at most tenfold a refill).
        let seen = calls.saturating_sub(last_calls);
        let horizon = nanos(self.settings.horizon);
        let span = now.saturating_sub(last_at).max(horizon / 10).max(1);
        let demand = seen as f64 / span as f64;
        let batch = (demand * horizon as f64).ceil();
        // `as` saturates a float that does not fit.
        (batch as u64).clamp(u64::from(urgent), self.settings.max_batch)
    }

    fn emit(&self, event: &LimitEvent<'_>) {
        if let Some(listener) = &self.listener {
            // A listener that panics is ignored: it never takes the limiter down with it.
            let _ = catch_unwind(AssertUnwindSafe(|| listener(event)));
        }
    }

    pub(crate) fn stats(&self) -> LeaseStats {
        let c = &self.counters;
        LeaseStats {
            calls: self.calls.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            fallback_admitted: c.fallback_admitted.load(Ordering::Relaxed),
            round_trips: c.round_trips.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            granted: c.granted.load(Ordering::Relaxed),
            on_fallback: self.on_fallback.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn is_on_fallback(&self) -> bool {
        self.on_fallback.load(Ordering::Acquire)
    }
}

/// `work`'s output if it finishes before `deadline` on `clock`, else `None`.
async fn before<F: Future>(clock: &Clock, deadline: Instant, work: F) -> Option<F::Output> {
    let mut work = pin!(work);
    let mut alarm = pin!(clock.alarm(deadline));
    poll_fn(|task| match work.as_mut().poll(task) {
        Poll::Ready(out) => Poll::Ready(Some(out)),
        Poll::Pending => alarm.as_mut().poll(task).map(|()| None),
    })
    .await
}

impl<B: Batch> Drop for Lease<B> {
    fn drop(&mut self) {
        if let Some(release) = self.batch.release(Arc::clone(&self.store)) {
            let timeout = self.settings.timeout;
            // Best effort, bounded; on a runtime that is shutting down it is simply dropped,
            // and the lease expires by itself.
            drop(self.runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, release).await;
            }));
        }
    }
}
