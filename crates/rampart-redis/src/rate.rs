//! A rate limit shared by a fleet: a token bucket in Redis, spent locally from leased batches.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rampart::Instant;
use rampart::admit::{Admit, AdmitContext, Refusal};
use rampart::limit::RateLimit;

use crate::event::LimitEvent;
use crate::lease::{Ask, Batch, Lease, LeaseStats, Refilled, nanos};
use crate::options::{LeaseOptions, check_duration, lease_setters};
use crate::store::{BucketSpec, Redis, Store, StoreFuture};
use rampart::{ConfigError, ConfigProblem};

/// The default time a leased batch stays usable.
const BATCH_TTL: Duration = Duration::from_secs(1);

/// At most `permits` calls per `per` across every instance that shares the key.
///
/// The bucket lives in Redis and is updated by one Lua script on the server's clock; each
/// instance takes tokens from it in batches and admits calls from its batch locally, with one
/// compare-and-swap, never waiting on Redis while tokens are left. See the [crate
/// docs](crate) for the guarantee, the behaviour during a partition and the defaults.
///
/// Like rampart's [`RateLimit`], it never queues: a call over the rate is refused at once with
/// a retry-after. A call that finds its instance's batch empty waits for the refill, at most
/// [`timeout`](GlobalRateLimitBuilder::timeout).
///
/// # Thread safety
///
/// `Send + Sync`, cheap to clone; clones share one batch (give one limiter to every policy of
/// the instance). Nothing is allocated per call; a refill allocates its request.
#[derive(Clone)]
pub struct GlobalRateLimit {
    lease: Arc<Lease<Tokens>>,
}

/// Builds a [`GlobalRateLimit`]; see the crate docs for the defaults.
#[must_use]
#[derive(Clone)]
pub struct GlobalRateLimitBuilder {
    lease: LeaseOptions,
    permits: u32,
    per: Duration,
    burst: Option<u32>,
    batch_ttl: Duration,
    fallback: Option<RateLimit>,
}

impl GlobalRateLimit {
    /// `permits` every `per` across the fleet, kept in Redis under `key`.
    pub fn builder(
        redis: &Redis,
        key: impl Into<String>,
        permits: u32,
        per: Duration,
    ) -> GlobalRateLimitBuilder {
        GlobalRateLimitBuilder::with_store(Arc::new(redis.clone()), key.into(), permits, per)
    }

    /// What this instance has done so far: calls, refusals, round trips, permits granted.
    pub fn stats(&self) -> LeaseStats {
        self.lease.stats()
    }

    /// Whether calls are admitted by the local fallback now (Redis unreachable).
    pub fn is_on_fallback(&self) -> bool {
        self.lease.is_on_fallback()
    }

    /// Tokens this instance holds right now (taken from Redis, not yet spent).
    pub fn held(&self) -> u64 {
        self.lease.batch.held.load(Ordering::Relaxed)
    }

    /// The most tokens one refill takes.
    pub fn max_batch(&self) -> u64 {
        self.lease.settings().max_batch
    }

    /// The local limit used while Redis cannot be reached.
    pub fn fallback(&self) -> &RateLimit {
        &self.lease.batch.fallback
    }
}

impl GlobalRateLimitBuilder {
    pub(crate) fn with_store(
        store: Arc<dyn Store>,
        key: String,
        permits: u32,
        per: Duration,
    ) -> Self {
        GlobalRateLimitBuilder {
            lease: LeaseOptions::new("global_rate_limit", store, key),
            permits,
            per,
            burst: None,
            batch_ttl: BATCH_TTL,
            fallback: None,
        }
    }

    /// Tokens the shared bucket holds when full: calls that may start at once across the
    /// fleet after a quiet spell. Default `permits`.
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// How long a leased batch stays usable; tokens left unspent after it are dropped, so an
    /// instance that went quiet cannot spend old tokens later. Default 1 s.
    pub fn batch_ttl(mut self, ttl: Duration) -> Self {
        self.batch_ttl = ttl;
        self
    }

    /// The local limit used while Redis cannot be reached. Default
    /// `ceil(permits / instances)` per `per`, with that as its burst.
    pub fn fallback(mut self, fallback: RateLimit) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// The limit; or every invalid setting at once. Must be called inside a tokio runtime
    /// (its refills run there). Does not connect: the first call does.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting (`permits`, `per`, `burst`,
    /// `batch_ttl`, the shared options such as `timeout` or `instances`), each with its value,
    /// and `runtime` when no tokio runtime is running on this thread.
    pub fn build(self) -> Result<GlobalRateLimit, ConfigError> {
        let lease = &self.lease;
        let mut problems = Vec::new();
        let runtime = lease.check(&mut problems);
        let burst = self.burst.unwrap_or(self.permits);
        let per_nanos = nanos(self.per);
        if self.permits == 0 {
            problems.push(lease.problem("permits", "must be at least 1 (was 0)".into()));
        }
        if let Some(message) = check_duration(self.per) {
            problems.push(lease.problem("per", message));
        } else if per_nanos / 1_000 < u64::from(self.permits) {
            problems.push(lease.problem(
                "per",
                format!(
                    "must give each permit at least 1µs: at most 1e6 permits a second (was {} per {:?})",
                    self.permits, self.per
                ),
            ));
        }
        if burst == 0 {
            problems.push(lease.problem("burst", "must be at least 1 (was 0)".into()));
        }
        if let Some(message) = check_duration(self.batch_ttl) {
            problems.push(lease.problem("batch_ttl", message));
        }
        let fallback = match self.fallback.clone() {
            Some(fallback) => Some(fallback),
            None => self.default_fallback(&mut problems),
        };
        let (Some(runtime), Some(fallback), true) = (runtime, fallback, problems.is_empty()) else {
            return Err(ConfigError::new(problems));
        };
        let permits = u64::from(self.permits);
        // By default one batch is the whole fleet's rate over the horizon (at most a burst).
        let max_batch = (u128::from(permits) * lease.horizon.as_nanos())
            .div_ceil(self.per.as_nanos())
            .clamp(1, u128::from(burst));
        let settings = lease.settings(u64::try_from(max_batch).unwrap_or(u64::MAX));
        let tokens = Tokens {
            bucket: BucketSpec {
                key: lease.key.clone(),
                interval_us: self.per.as_secs_f64() * 1e6 / f64::from(self.permits),
                burst: u64::from(burst),
            },
            held: AtomicU64::new(0),
            expires: AtomicU64::new(0),
            low: AtomicU64::new(0),
            ttl: nanos(self.batch_ttl),
            max_batch: settings.max_batch,
            fallback,
        };
        let lease = Lease::new(
            tokens,
            Arc::clone(&lease.store),
            settings,
            runtime,
            lease.listener.clone(),
        );
        Ok(GlobalRateLimit {
            lease: Arc::new(lease),
        })
    }

    fn default_fallback(&self, problems: &mut Vec<ConfigProblem>) -> Option<RateLimit> {
        if self.permits == 0 || self.lease.instances == 0 {
            return None;
        }
        let share = self.permits.div_ceil(self.lease.instances);
        match RateLimit::builder(share, self.per).burst(share).build() {
            Ok(limit) => Some(limit),
            Err(e) => {
                problems.push(self.lease.problem(
                    "fallback",
                    format!("cannot be {share} per {:?}: {e}", self.per),
                ));
                None
            }
        }
    }
}

lease_setters!(GlobalRateLimitBuilder);

/// This instance's tokens: a count, and the instant after which they are dropped.
pub(crate) struct Tokens {
    bucket: BucketSpec,
    held: AtomicU64,
    /// Nanoseconds (since the lease began) after which the held tokens are dropped.
    expires: AtomicU64,
    /// A refill starts when no more than this is left: half the previous batch.
    low: AtomicU64,
    ttl: u64,
    max_batch: u64,
    fallback: RateLimit,
}

impl Batch for Tokens {
    const OP: &'static str = "rate refill";
    const BY: &'static str = "global rate limit";

    #[inline]
    fn try_take(&self, now: u64) -> bool {
        if now >= self.expires.load(Ordering::Acquire) {
            // Unspent tokens of an old batch are dropped, never spent late. (A refill landing
            // at this instant may lose its tokens too: fewer admissions, never more.)
            if self.held.load(Ordering::Relaxed) > 0 {
                self.held.store(0, Ordering::Relaxed);
            }
            return false;
        }
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            if held == 0 {
                return false;
            }
            match self.held.compare_exchange_weak(
                held,
                held - 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => held = actual,
            }
        }
    }

    #[inline]
    fn is_low(&self) -> bool {
        self.held.load(Ordering::Relaxed) <= self.low.load(Ordering::Relaxed)
    }

    fn refill<'a>(&'a self, store: &'a dyn Store, ask: Ask) -> StoreFuture<'a, Refilled> {
        Box::pin(async move {
            // Never hold more than one batch: that is what bounds the fleet's overshoot.
            let want = ask.want.min(
                self.max_batch
                    .saturating_sub(self.held.load(Ordering::Relaxed)),
            );
            if want == 0 {
                return Ok(Refilled::default());
            }
            // Ahead of need, take nothing until half the batch is there; a call that waits
            // takes any token there is. Either way, come back only once half a batch is
            // there again: under contention the instances take fewer, larger batches
            // instead of a token per round trip.
            let half = want.div_ceil(2);
            let take = if ask.urgent { 1 } else { half };
            let grant = store.take_tokens(&self.bucket, want, take, half).await?;
            if grant.granted > 0 {
                self.expires
                    .store(ask.now.saturating_add(self.ttl), Ordering::Release);
                self.held.fetch_add(grant.granted, Ordering::AcqRel);
                self.low.store(want / 2, Ordering::Relaxed);
            }
            Ok(Refilled {
                asked: true,
                granted: grant.granted,
                wait: grant.wait,
            })
        })
    }

    fn fallback_take(&self, now: Instant) -> Result<(), Duration> {
        self.fallback.try_acquire(now)
    }

    fn lose(&self) {
        // Tokens already granted stay valid until their batch expires.
    }
}

impl Admit for GlobalRateLimit {
    type Permit = ();

    fn acquire(&self, cx: &AdmitContext<'_>) -> impl Future<Output = Result<(), Refusal>> + Send {
        self.lease.acquire(cx)
    }
}

impl fmt::Debug for GlobalRateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalRateLimit")
            .field("key", &self.lease.settings().key)
            .field("held", &self.held())
            .field("on_fallback", &self.is_on_fallback())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for GlobalRateLimitBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalRateLimitBuilder")
            .field("key", &self.lease.key)
            .field("permits", &self.permits)
            .field("per", &self.per)
            .finish_non_exhaustive()
    }
}
