//! The store: the two operations the limiters need from Redis, each one atomic server-side
//! Lua script, behind a small trait so that the lease logic is tested with fake stores.
//!
//! Both scripts read the server's clock (`TIME`), so the instances' clocks never matter, and
//! every key they write expires by itself: an abandoned limiter leaves nothing behind.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use crate::error::StoreError;
use rampart::{ConfigError, ConfigProblem};

/// A store operation in flight. Boxed: there is one per refill, never one per call.
pub(crate) type StoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The shared token bucket of a rate limit.
#[derive(Debug, Clone)]
pub(crate) struct BucketSpec {
    pub(crate) key: String,
    /// Microseconds between tokens (fractional: 3 a second is 333 333.3 µs).
    pub(crate) interval_us: f64,
    pub(crate) burst: u64,
}

/// What the bucket granted to one refill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TokenGrant {
    pub(crate) granted: u64,
    /// How long until the tokens worth coming back for are there (zero if they are).
    pub(crate) wait: Duration,
}

/// The shared slot table of a concurrency limit, and this instance's name in it.
#[derive(Debug, Clone)]
pub(crate) struct SlotSpec {
    pub(crate) key: String,
    pub(crate) instance: String,
    pub(crate) max: u64,
    pub(crate) ttl: Duration,
}

/// The operations behind the limiters. A store does not bound its own time: the caller wraps
/// every operation in the limiter's timeout.
pub(crate) trait Store: Send + Sync + 'static {
    /// Takes up to `want` tokens from the bucket, but none unless at least `take` are there;
    /// says how long until `refill` are there again.
    fn take_tokens<'a>(
        &'a self,
        bucket: &'a BucketSpec,
        want: u64,
        take: u64,
        refill: u64,
    ) -> StoreFuture<'a, TokenGrant>;

    /// Sets this instance's lease to `want` slots (fewer if the others hold the rest) for the
    /// table's lease time; returns the slots now leased. Zero gives the lease up.
    fn lease_slots<'a>(&'a self, slots: &'a SlotSpec, want: u64) -> StoreFuture<'a, u64>;

    /// The server, for error messages.
    fn server(&self) -> &str;

    /// An operation ran out of time: start afresh next time (a connection that hangs may
    /// never answer again).
    fn reset(&self) {}
}

/// A connection to one Redis server (standalone, or a primary), shared by the limiters built
/// from it.
///
/// Cheap to clone; clones share one multiplexed connection. Opening checks the URL and does
/// not connect: the first refill does, within the limiter's timeout, and a connection that
/// failed is replaced by the next refill. Plain TCP (`redis://`) or a Unix socket
/// (`redis+unix://`); no TLS.
///
/// ```
/// let redis = rampart_redis::Redis::open("redis://127.0.0.1:6379/")?;
/// assert_eq!(redis.server(), "127.0.0.1:6379");
/// # Ok::<(), rampart::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Redis {
    inner: Arc<RedisInner>,
}

struct RedisInner {
    client: redis::Client,
    server: String,
    connection: Mutex<Option<MultiplexedConnection>>,
}

impl Redis {
    /// A connection to the server at `url`, e.g. `redis://127.0.0.1:6379/0` or
    /// `redis://:password@host:6379/`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `redis.url` when it is not a Redis URL. Nothing connects here: a
    /// server that cannot be reached shows at the first call, which then uses the limit's
    /// local fallback.
    pub fn open(url: &str) -> Result<Redis, ConfigError> {
        let client = redis::Client::open(url).map_err(|e| {
            ConfigError::new(vec![ConfigProblem::new(
                "redis.url",
                // The URL may carry a password: name only what the client said.
                format!("must be a redis:// or redis+unix:// URL ({e})"),
            )])
        })?;
        let server = client.get_connection_info().addr().to_string();
        Ok(Redis {
            inner: Arc::new(RedisInner {
                client,
                server,
                connection: Mutex::new(None),
            }),
        })
    }

    /// The server, as `host:port` (or a socket path).
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    async fn connection(&self) -> redis::RedisResult<MultiplexedConnection> {
        let cached = self.slot().clone();
        if let Some(connection) = cached {
            return Ok(connection);
        }
        // The limiter's timeout is the one bound on an operation (connecting included): the
        // client's own defaults (1 s to connect, 500 ms to answer) are turned off.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let connection = self
            .inner
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *self.slot() = Some(connection.clone());
        Ok(connection)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<MultiplexedConnection>> {
        self.inner
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `script` with `keys` and `args`; a connection that failed is dropped, so that the
    /// next operation connects again (a restarted server is found again).
    async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[&str],
        args: &[String],
    ) -> redis::RedisResult<T> {
        let mut connection = self.connection().await?;
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(arg.as_str());
        }
        let result = invocation.invoke_async(&mut connection).await;
        if result
            .as_ref()
            .is_err_and(|e| e.is_io_error() || e.is_connection_dropped() || e.is_timeout())
        {
            *self.slot() = None;
        }
        result
    }
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("server", &self.inner.server)
            .finish_non_exhaustive()
    }
}

/// The token bucket. The state is a hash of `tokens` (fractional) and `at` (µs, server time);
/// an absent key is a full bucket, and the key expires once it would have refilled.
///
/// KEYS[1] the bucket; ARGV interval (µs per token), burst, want, take (the fewest worth
/// taking), refill (the fewest worth coming back for).
/// Returns {granted, wait}: the µs until `refill` tokens are there again (0 if they are).
static TAKE_TOKENS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local take = tonumber(ARGV[4])
local refill = tonumber(ARGV[5])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = math.min(burst, tokens + (now - at) / interval)
  at = now
end
local granted = 0
if tokens >= take then
  granted = math.min(want, math.floor(tokens))
  tokens = tokens - granted
end
local wait = 0
if tokens < refill then
  -- At most a day: the reply is an integer.
  wait = math.min(math.ceil((refill - tokens) * interval), 86400000000)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', string.format('%.0f', at))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * interval / 1000) + 1000)
return {granted, wait}
",
    )
});

/// The slot table: a sorted set of instances by lease expiry (ms, server time) and a hash of
/// the slots each holds, under one hash tag so that they live in one cluster slot. Expired
/// leases are removed before anything is counted, so a crashed instance's slots come back
/// after its lease time without anyone's help.
///
/// KEYS[1] the expiries, KEYS[2] the holdings; ARGV instance, want, max, lease time (ms).
/// Returns the slots now leased to the instance.
static LEASE_SLOTS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local instance = ARGV[1]
local want = tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('HDEL', KEYS[2], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local others = 0
local held = redis.call('HGETALL', KEYS[2])
for i = 1, #held, 2 do
  if held[i] ~= instance then
    others = others + tonumber(held[i + 1])
  end
end
local granted = math.max(0, math.min(want, max - others))
if granted > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, instance)
  redis.call('HSET', KEYS[2], instance, granted)
  -- The table lives as long as its longest lease: instances may lease for different times.
  for _, key in ipairs(KEYS) do
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl)
    end
  end
else
  redis.call('ZREM', KEYS[1], instance)
  redis.call('HDEL', KEYS[2], instance)
end
return granted
",
    )
});

/// The two keys of a slot table.
pub(crate) fn slot_keys(key: &str) -> [String; 2] {
    [format!("{{{key}}}:leases"), format!("{{{key}}}:slots")]
}

impl Store for Redis {
    fn take_tokens<'a>(
        &'a self,
        bucket: &'a BucketSpec,
        want: u64,
        take: u64,
        refill: u64,
    ) -> StoreFuture<'a, TokenGrant> {
        Box::pin(async move {
            let args = [
                bucket.interval_us.to_string(),
                bucket.burst.to_string(),
                want.to_string(),
                take.to_string(),
                refill.to_string(),
            ];
            let reply: Vec<i64> = self
                .eval(&TAKE_TOKENS, &[&bucket.key], &args)
                .await
                .map_err(|e| StoreError::redis(self.server(), &bucket.key, "rate refill", e))?;
            match reply[..] {
                [granted, wait] if granted >= 0 && wait >= 0 => Ok(TokenGrant {
                    granted: granted.unsigned_abs(),
                    wait: Duration::from_micros(wait.unsigned_abs()),
                }),
                _ => Err(StoreError::reply(
                    self.server(),
                    &bucket.key,
                    "rate refill",
                    format!("{reply:?}"),
                )),
            }
        })
    }

    fn lease_slots<'a>(&'a self, slots: &'a SlotSpec, want: u64) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            let [leases, held] = slot_keys(&slots.key);
            let ttl_ms = slots.ttl.as_millis().max(1);
            let args = [
                slots.instance.clone(),
                want.to_string(),
                slots.max.to_string(),
                ttl_ms.to_string(),
            ];
            let granted: i64 = self
                .eval(&LEASE_SLOTS, &[&leases, &held], &args)
                .await
                .map_err(|e| StoreError::redis(self.server(), &slots.key, "lease", e))?;
            u64::try_from(granted).map_err(|_| {
                StoreError::reply(self.server(), &slots.key, "lease", granted.to_string())
            })
        })
    }

    fn server(&self) -> &str {
        Redis::server(self)
    }

    fn reset(&self) {
        *self.slot() = None;
    }
}
