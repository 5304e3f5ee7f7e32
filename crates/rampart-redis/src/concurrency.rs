//! A concurrency limit shared by a fleet: expiring leases of slots in Redis, taken locally.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rampart::Instant;
use rampart::admit::{Admit, AdmitContext, Refusal};
use tokio::runtime::Handle;
use tokio::time::MissedTickBehavior;

use crate::event::LimitEvent;
use crate::lease::{Ask, Batch, Lease, LeaseStats, Refilled};
use crate::options::{LeaseOptions, check_duration, lease_setters};
use crate::store::{Redis, SlotSpec, Store, StoreFuture};
use rampart::ConfigError;

/// The default lease time: how long a crashed instance's slots stay taken.
const LEASE_TTL: Duration = Duration::from_secs(10);
/// The retry-after of a refusal for want of a free slot.
const NO_ROOM: Duration = Duration::from_millis(10);

/// At most `max` calls in flight across every instance that shares the key.
///
/// Each instance leases slots from a table in Redis (one Lua script, on the server's clock)
/// and admits calls against its lease locally, with one compare-and-swap. A lease expires
/// unless renewed: a background task renews it every third of the lease time, and gives it
/// up when the last handle and permit are dropped. An instance that dies without either has
/// its slots back in the fleet once its lease time has passed. See the [crate docs](crate)
/// for the guarantee, the behaviour during a partition and the defaults.
///
/// It never queues: with every slot taken, a call is refused at once with a retry-after of
/// 10 ms. A call that finds its instance's lease full waits for a refill, at most
/// [`timeout`](GlobalConcurrencyBuilder::timeout).
///
/// # Thread safety
///
/// `Send + Sync`, cheap to clone; clones share one lease. The permit holds the limiter's
/// shared state (one `Arc`) and gives its slot back when dropped.
#[derive(Clone)]
pub struct GlobalConcurrency {
    lease: Arc<Lease<Slots>>,
}

/// Held while an admitted call runs; dropping it frees the slot for this instance.
#[must_use = "the slot is freed when the permit is dropped"]
pub struct GlobalPermit {
    lease: Arc<Lease<Slots>>,
}

/// Builds a [`GlobalConcurrency`]; see the crate docs for the defaults.
#[must_use]
#[derive(Clone)]
pub struct GlobalConcurrencyBuilder {
    lease: LeaseOptions,
    max: u32,
    lease_ttl: Duration,
    fallback_max: Option<u32>,
}

impl GlobalConcurrency {
    /// At most `max` calls in flight across the fleet, leased in Redis under `key`.
    pub fn builder(redis: &Redis, key: impl Into<String>, max: u32) -> GlobalConcurrencyBuilder {
        GlobalConcurrencyBuilder::with_store(Arc::new(redis.clone()), key.into(), max)
    }

    /// What this instance has done so far: calls, refusals, round trips, slots granted.
    pub fn stats(&self) -> LeaseStats {
        self.lease.stats()
    }

    /// Whether calls are admitted by the local fallback now (Redis unreachable).
    pub fn is_on_fallback(&self) -> bool {
        self.lease.is_on_fallback()
    }

    /// Calls of this instance in flight now.
    pub fn in_use(&self) -> u64 {
        self.lease.batch.in_use.load(Ordering::Relaxed)
    }

    /// Slots this instance leases now.
    pub fn leased(&self) -> u64 {
        self.lease.batch.leased.load(Ordering::Relaxed)
    }

    /// This instance's name in the slot table.
    pub fn instance(&self) -> &str {
        &self.lease.batch.spec.instance
    }
}

impl GlobalConcurrencyBuilder {
    pub(crate) fn with_store(store: Arc<dyn Store>, key: String, max: u32) -> Self {
        GlobalConcurrencyBuilder {
            lease: LeaseOptions::new("global_concurrency", store, key),
            max,
            lease_ttl: LEASE_TTL,
            fallback_max: None,
        }
    }

    /// How long a lease lives unless renewed (it is renewed every third of it): the time in
    /// which a crashed instance's slots come back. Default 10 s.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Calls this instance may have in flight while Redis cannot be reached. Default
    /// `ceil(max / instances)`.
    pub fn fallback_max(mut self, max: u32) -> Self {
        self.fallback_max = Some(max);
        self
    }

    /// The limit; or every invalid setting at once. Must be called inside a tokio runtime
    /// (its refills and renewals run there). Does not connect: the first call does.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting (`max`, `lease_ttl`, `fallback_max`,
    /// the shared options such as `timeout` or `instances`), each with its value, and
    /// `runtime` when no tokio runtime is running on this thread.
    pub fn build(self) -> Result<GlobalConcurrency, ConfigError> {
        let lease = &self.lease;
        let mut problems = Vec::new();
        let runtime = lease.check(&mut problems);
        if self.max == 0 {
            problems.push(lease.problem("max", "must be at least 1 (was 0)".into()));
        }
        if let Some(message) = check_duration(self.lease_ttl) {
            problems.push(lease.problem("lease_ttl", message));
        } else if self.lease_ttl < lease.timeout.saturating_mul(3)
            || self.lease_ttl < Duration::from_millis(3)
        {
            problems.push(lease.problem(
                "lease_ttl",
                format!(
                    "must be at least 3 × timeout, so that a renewal fits before it lapses (was {:?} with a timeout of {:?})",
                    self.lease_ttl, lease.timeout
                ),
            ));
        }
        if self.fallback_max == Some(0) {
            problems.push(lease.problem("fallback_max", "must be at least 1 (was 0)".into()));
        }
        let (Some(runtime), true) = (runtime, problems.is_empty()) else {
            return Err(ConfigError::new(problems));
        };
        let max = u64::from(self.max);
        let instances = u64::from(lease.instances);
        // By default a quarter of this instance's fair share may be held spare.
        let settings = lease.settings(max.div_ceil(instances * 4));
        let fallback = self.fallback_max.map_or(max.div_ceil(instances), u64::from);
        let slots = Slots {
            spec: SlotSpec {
                key: lease.key.clone(),
                instance: instance_name(),
                max,
                ttl: self.lease_ttl,
            },
            leased: AtomicU64::new(0),
            in_use: AtomicU64::new(0),
            low: AtomicU64::new(0),
            fallback_max: fallback,
        };
        let shared = Arc::new(Lease::new(
            slots,
            Arc::clone(&lease.store),
            settings,
            runtime.clone(),
            lease.listener.clone(),
        ));
        spawn_renewal(Arc::downgrade(&shared), self.lease_ttl / 3, &runtime);
        Ok(GlobalConcurrency { lease: shared })
    }
}

lease_setters!(GlobalConcurrencyBuilder);

/// A name for this instance in the slot table: the process id and a random part, so that
/// two limiters in one process (or two processes on two hosts) never share a lease.
fn instance_name() -> String {
    use std::hash::{BuildHasher, RandomState};
    let random = RandomState::new().hash_one(Instant::now());
    format!("{}-{random:016x}", std::process::id())
}

/// Renews the lease every `every` for as long as the limiter lives.
fn spawn_renewal(lease: Weak<Lease<Slots>>, every: Duration, runtime: &Handle) {
    drop(runtime.spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(lease) = lease.upgrade() else {
                return;
            };
            let clock = lease.clock().clone();
            lease.refill_soon(&clock, lease.nanos(clock.now()), false);
        }
    }));
}

/// This instance's slots: how many it leases and how many are in use.
pub(crate) struct Slots {
    spec: SlotSpec,
    leased: AtomicU64,
    in_use: AtomicU64,
    /// A refill starts when no more than this many leased slots are free.
    low: AtomicU64,
    fallback_max: u64,
}

impl Slots {
    /// Takes a slot if fewer than `limit` are in use.
    #[inline]
    fn enter(&self, limit: u64) -> bool {
        let mut in_use = self.in_use.load(Ordering::Acquire);
        loop {
            if in_use >= limit {
                return false;
            }
            match self.in_use.compare_exchange_weak(
                in_use,
                in_use + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => in_use = actual,
            }
        }
    }
}

impl Batch for Slots {
    const OP: &'static str = "lease";
    const BY: &'static str = "global concurrency";

    #[inline]
    fn try_take(&self, _now: u64) -> bool {
        self.enter(self.leased.load(Ordering::Acquire))
    }

    #[inline]
    fn is_low(&self) -> bool {
        let free = self
            .leased
            .load(Ordering::Relaxed)
            .saturating_sub(self.in_use.load(Ordering::Relaxed));
        free <= self.low.load(Ordering::Relaxed)
    }

    fn refill<'a>(&'a self, store: &'a dyn Store, ask: Ask) -> StoreFuture<'a, Refilled> {
        Box::pin(async move {
            let spare = ask.want;
            let before = self.leased.load(Ordering::Acquire);
            let mut want = self
                .in_use
                .load(Ordering::Acquire)
                .saturating_add(spare)
                .min(self.spec.max);
            if want < before {
                // Shrink here first, so that no call takes a slot the store will not lease
                // to us; then ask for no less than what is in use by now.
                self.leased.store(want, Ordering::Release);
                want = want.max(self.in_use.load(Ordering::Acquire));
            }
            if want == 0 && before == 0 {
                return Ok(Refilled::default());
            }
            let granted = store.lease_slots(&self.spec, want).await?;
            self.leased.store(granted, Ordering::Release);
            self.low.store(spare / 2, Ordering::Relaxed);
            let no_room = spare > 0 && granted <= self.in_use.load(Ordering::Acquire);
            Ok(Refilled {
                asked: true,
                granted: granted.saturating_sub(before),
                wait: if no_room { NO_ROOM } else { Duration::ZERO },
            })
        })
    }

    fn fallback_take(&self, _now: Instant) -> Result<(), Duration> {
        if self.enter(self.fallback_max) {
            Ok(())
        } else {
            Err(NO_ROOM)
        }
    }

    fn lose(&self) {
        // The store will let the lease lapse: from now on only the fallback admits.
        self.leased.store(0, Ordering::Release);
    }

    fn release(&self, store: Arc<dyn Store>) -> Option<StoreFuture<'static, ()>> {
        if self.leased.load(Ordering::Acquire) == 0 {
            return None;
        }
        let spec = self.spec.clone();
        Some(Box::pin(async move {
            store.lease_slots(&spec, 0).await.map(drop)
        }))
    }
}

impl Admit for GlobalConcurrency {
    type Permit = GlobalPermit;

    async fn acquire(&self, cx: &AdmitContext<'_>) -> Result<GlobalPermit, Refusal> {
        self.lease.acquire(cx).await?;
        Ok(GlobalPermit {
            lease: Arc::clone(&self.lease),
        })
    }
}

impl Drop for GlobalPermit {
    fn drop(&mut self) {
        self.lease.batch.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

impl fmt::Debug for GlobalPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalPermit")
            .field("key", &self.lease.settings().key)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for GlobalConcurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalConcurrency")
            .field("key", &self.lease.settings().key)
            .field("in_use", &self.in_use())
            .field("leased", &self.leased())
            .field("on_fallback", &self.is_on_fallback())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for GlobalConcurrencyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalConcurrencyBuilder")
            .field("key", &self.lease.key)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}
