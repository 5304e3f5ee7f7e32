//! Fleet-wide limits for rampart: a rate limit and a concurrency limit shared by every
//! instance of a service through Redis.
//!
//! rampart's own limiters are per process. A service of 20 instances calling a vendor API
//! that allows 100 requests a second per account would have to give each instance a static
//! 5 a second: capacity is wasted while some instances idle, and the quota is overrun when
//! instances are added. [`GlobalRateLimit`] and [`GlobalConcurrency`] keep the limit in Redis
//! instead, and are [`Admit`](rampart::admit::Admit) components like any other: give one to
//! a policy with `Policy::builder().admit(..)`.
//!
//! ```no_run
//! use std::time::Duration;
//! use rampart::Policy;
//! use rampart_redis::{GlobalRateLimit, Redis};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = Redis::open("redis://127.0.0.1:6379/")?;
//! let vendor = GlobalRateLimit::builder(&redis, "vendor-api", 100, Duration::from_secs(1))
//!     .instances(20)
//!     .on_event(|event| eprintln!("vendor-api limit: {event:?}"))
//!     .build()?;
//! let policy = Policy::builder().admit(vendor).build()?;
//! let answer = policy.run(async |_attempt| Ok::<_, std::io::Error>(42)).await;
//! # drop(answer);
//! # Ok(())
//! # }
//! ```
//!
//! # How it works: leases, not a round trip per call
//!
//! Each instance takes a *batch* of permits from Redis (tokens of a token bucket, or slots of
//! a slot table) and admits calls from it locally, lock-free: one compare-and-swap and one
//! relaxed counter, no allocation, no I/O. When what is left falls to half the last batch it
//! refills in the background, before the batch runs out; only a refill talks to Redis, one at
//! a time per limiter and instance, each an atomic server-side Lua script on the server's
//! clock. A batch is sized by the instance's own recent demand (its calls per second since the
//! previous refill × `horizon`, at most `max_batch`), so an idle instance takes nothing, and
//! an instance that wakes up takes one small batch (its first is a single permit), not a share
//! of the fleet. A longer `horizon` means fewer round trips (about `calls per second ×
//! horizon` admissions each) and larger batches held.
//!
//! A call that finds its batch empty waits for the refill it triggers (or joins), at most
//! `timeout`; the refill then takes whatever tokens there are (a refill ahead of need takes
//! none until half a batch is there). Redis also answers how long until half a batch will be
//! there again: when it had no token for a waiting call, the call is refused at once with a
//! retry-after of that wait, lengthened under contention, and the instance does not ask
//! again before then. The wait is doubled for each refill that got nothing and halved back for each that
//! got something (at most 4 times), plus up to half again at random, so that a saturated
//! fleet polls Redis less often and takes larger batches when it does; a lone instance
//! never gets nothing, so it waits exactly the time Redis said. A concurrency limit that finds no free slot refuses with a
//! retry-after of 10 ms, lengthened the same way.
//!
//! A concurrency limit also renews its lease every `lease_ttl / 3` from a background task,
//! shrinking it to what is in use (plus a spare slot sized by demand): an idle instance gives
//! its slots back within two renewals.
//!
//! # The guarantee
//!
//! **Rate.** Redis grants tokens from a bucket of `burst` tokens refilled at `permits / per`,
//! so in any interval of length `T` it grants at most `burst + rate × T`. Every call admitted
//! from the shared quota spends a granted token, and an instance never holds more than
//! `max_batch` tokens (a refill asks only for what tops it up to one batch); tokens unspent
//! `batch_ttl` after their batch was granted are dropped. So, for a fleet of `N` instances,
//! the calls admitted in any interval of length `T` are at most
//!
//! ```text
//! burst + rate × T + N × max_batch
//! ```
//!
//! (the last term: tokens granted before the interval and spent in it). Counted from the
//! moment the fleet starts, the last term is zero. With the defaults (`burst = permits`,
//! `max_batch` = the whole rate over 100 ms), 20 instances sharing 100/s may admit at most
//! `100 + 100 × T + 20 × 10` in any window of `T` seconds. A smaller `max_batch` tightens the
//! bound at the cost of more round trips.
//!
//! **Concurrency.** The slot table never leases more than `max` slots in all, and an instance
//! admits only against its lease, so at most `max` calls are in flight across the fleet while
//! every instance reaches Redis. A lease lives `lease_ttl` unless renewed (every
//! `lease_ttl / 3`); a crashed instance's slots are free again at most `lease_ttl` after its
//! last renewal. Dropping the last handle and permit gives the lease up at once.
//!
//! **Partitions and slowness.** Every Redis operation, connecting included, is bounded by
//! `timeout`; no call waits on Redis longer than that. When an operation fails or runs out of
//! time, the limiter emits [`LimitEvent::Fallback`] and admits from a local fallback: a rate
//! limit of `ceil(permits / instances)` per `per` (after the tokens it still holds), or
//! `ceil(max / instances)` calls in flight (its lease is considered lost). It tries Redis again
//! every `probe_every`, and on the first answer emits [`LimitEvent::Rejoined`] and returns to
//! the shared quota. While `P` of the instances are cut off, the fleet may admit up to their
//! fallback on top of the shared limit: `rate + P × ceil(rate / instances)` (at most the limit
//! once more when all of them are cut off and `instances` is right), and likewise for
//! concurrency; calls admitted under the fallback keep their slots after the return, and the
//! excess drains as they finish. Nothing panics, and a limiter that is dropped or whose
//! process dies leaks no permit: tokens are spent or expire, leases are given up or expire.
//!
//! # Defaults
//!
//! | knob | default | meaning |
//! |---|---|---|
//! | `timeout` | 100 ms | bound on every Redis operation, connecting included |
//! | `instances` | 1 | instances expected to share the limit (sizes the fallback) |
//! | `horizon` | 100 ms | span of the instance's own demand one batch covers |
//! | `max_batch` | rate: `permits × 100 ms / per` (at least 1, at most `burst`); concurrency: `ceil(max / (4 × instances))` | most permits one refill takes |
//! | `probe_every` | 1 s | how often Redis is tried while on the fallback |
//! | `burst` (rate) | `permits` | tokens the shared bucket holds when full |
//! | `batch_ttl` (rate) | 1 s | unspent tokens of a batch are dropped after it |
//! | `fallback` (rate) | `ceil(permits / instances)` per `per` | local limit while Redis is unreachable |
//! | `lease_ttl` (concurrency) | 10 s | a lease lapses unless renewed; renewed every third of it |
//! | `fallback_max` (concurrency) | `ceil(max / instances)` | local limit while Redis is unreachable |
//!
//! # Redis
//!
//! A standalone server or a primary, Redis 5 or later (the scripts read `TIME` and write,
//! which needs effects replication); `redis://` or `redis+unix://`, no TLS. A rate limit keeps
//! one hash under its key; a concurrency limit a sorted set and a hash under `{key}:leases`
//! and `{key}:slots` (one hash tag). Every key expires by itself once unused.
//!
//! # Events
//!
//! [`LimitEvent::Fallback`] and [`LimitEvent::Rejoined`], once per transition, to the listener
//! given with `on_event`. A refusal is reported by the policy as any admission refusal
//! (`Event::AttemptRefused { by: "global rate limit" | "global concurrency", .. }`).
//! [`GlobalRateLimit::stats`] counts calls, refusals, fallback admissions and round trips.
//!
//! # Runtime
//!
//! The limiters are built inside a tokio runtime, with its time driver, and run their refills
//! and renewals there; calls may come from anywhere, blocking execution included (a call
//! waits on the policy's clock).

mod concurrency;
mod error;
mod event;
mod lease;
mod options;
mod rate;
mod store;
#[cfg(test)]
mod tests;

pub use concurrency::{GlobalConcurrency, GlobalConcurrencyBuilder, GlobalPermit};
pub use error::StoreError;
pub use event::LimitEvent;
pub use lease::LeaseStats;
pub use rate::{GlobalRateLimit, GlobalRateLimitBuilder};
pub use store::Redis;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
