//! Keyed policies: one policy definition, with its own state per tenant, host or route.
//!
//! A [`Policy`] keeps the state that accumulates across calls (breaker, retry budget,
//! limiter, latency estimate) for one dependency. When "the dependency" is really many (each
//! tenant of a shared backend, each host behind one client, each route of a gateway) one
//! shared state is wrong twice over: one noisy tenant opens the breaker for everyone, and one
//! slow host teaches the hedge delay to all. A [`KeyedPolicy`] builds a policy per key from one
//! factory, on the key's first call, and keeps them in a bounded table, so that a flood of
//! distinct keys cannot grow memory without bound. (resilience4j and Polly call this a
//! registry.)
//!
//! ```
//! use std::time::Duration;
//! use rampart::Policy;
//! use rampart::breaker::{Breaker, BreakerState};
//! use rampart::keyed::KeyedPolicy;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let per_tenant = KeyedPolicy::builder(|tenant: &String| {
//!     Policy::builder()
//!         .name(format!("search/{tenant}"))
//!         .max_attempts(2)
//!         .total_timeout(Duration::from_secs(1))
//!         // Built here, so each tenant has its own breaker (and, by default, its own budget).
//!         .breaker(Breaker::builder().consecutive_failures(3).build()?)
//!         .build()
//! })
//! .capacity(10_000)
//! .build()?;
//!
//! // A lookup by `&str` finds the `String` key without making one.
//! let hits = per_tenant
//!     .run("acme", async |_attempt| Ok::<_, std::io::Error>(7))
//!     .await?;
//! assert_eq!(hits, 7);
//! assert_eq!(per_tenant.breaker_state("acme"), Some(BreakerState::Closed));
//! assert_eq!(per_tenant.get("acme")?.name(), "search/acme");
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
//! #     .build().expect("runtime").block_on(demo()).expect("demo");
//! ```
//!
//! | setting | default | meaning |
//! |---|---|---|
//! | factory | (required) | `Fn(&K) -> Result<Policy, ConfigError>`: the policy of a new key |
//! | [`capacity`](KeyedPolicyBuilder::capacity) | 1024 ([`DEFAULT_CAPACITY`]) | the most keys kept at once; at least 1 |
//! | [`on_evict`](KeyedPolicyBuilder::on_evict) | none | called with each key a full table evicts |
//!
//! # What a key's state is
//!
//! Whatever its policy holds: the factory decides. Build the breaker, the limiter and any
//! budget *inside* the factory; a [`Breaker`](crate::Breaker) built once outside and cloned
//! into every key's policy is one breaker shared by all keys (which is how to share a part on
//! purpose). A policy that can retry gets a budget of its own by default. Do not hand every
//! key a [`RetryBudget::shared`](crate::RetryBudget::shared) budget by a per-key name: that
//! registry is process-wide and is not bounded by this table.
//!
//! A key's state can be read and reset without a call: [`breaker_state`](KeyedPolicy::breaker_state),
//! [`budget_balance`](KeyedPolicy::budget_balance), [`remove`](KeyedPolicy::remove) (forgets
//! it), and [`peek`](KeyedPolicy::peek) for anything else a [`Policy`] exposes (its breaker's
//! manual control among them: `keyed.peek(&key)?.breaker()?.reset(now)`, reported to the
//! key's policy's listeners). None of these creates a key or marks it used.
//!
//! # Eviction
//!
//! When a new key arrives at a full table, one key not used lately is evicted, and its state
//! goes with it: a later call for that key builds a fresh policy, with a closed breaker and a
//! full budget. A call already running under an evicted key's policy finishes under it (it
//! holds a clone), and so does anyone who kept the policy from [`get`](KeyedPolicy::get).
//!
//! The rule is CLOCK (second chance), an approximation of least recently used: keys sit in a
//! ring with a "used" flag; a call marks its key used; to make room, a hand moves round the
//! ring clearing flags, and evicts the first key whose flag was already clear (one not used
//! since the hand last passed it). A new key starts unused, so a burst of keys seen once is
//! evicted before the keys in steady use. Exact LRU would need a write (a list move) on
//! every call, so every call would take the table's write lock; with CLOCK a call for a known
//! key takes the read lock and at most sets one flag, and making room is amortized constant
//! time. The key just inserted is never the one evicted for it, and the table never holds
//! more than its capacity.
//!
//! # Thread safety and cost
//!
//! A `KeyedPolicy` is `Send + Sync`; its clones share one table. The table is a `HashMap`
//! behind one `RwLock`: a known key costs a read lock, a hash lookup, one relaxed load (and a
//! store once per pass of the hand) and an `Arc` clone of its policy; nothing is allocated.
//! A new key takes the write lock once; its factory runs without the lock held, and when
//! several callers miss the same key at once each may run the factory, the first policy
//! inserted being the one every caller gets.
//!
//! Two shared words are written by every call through the table: the lock's reader count and
//! the reference count of the key's policy. A `Policy` held directly writes neither, so on many
//! cores a hot key's calls contend where a held policy's do not (sharding the table would not
//! help one hot key). Where a few keys carry most of the traffic and must scale, keep their
//! policies from [`get`](KeyedPolicy::get) (the state is the same) and use the table for the
//! long tail.
//!
//! # Events and metrics
//!
//! Each key's calls are observed through its own policy: its listeners, hooks, traces and
//! metrics, with its name as the `policy` attribute. Name per key (`format!("search/{key}")`)
//! only when the keys are few and known (configured hosts, routes): a metrics recorder keeps a
//! series for every name it has seen, evicted keys included, so the table's bound does not
//! bound metric cardinality. For unbounded keys (tenants, users) give every key's policy the
//! same name (or one per tier). The table itself reports one thing, an eviction, to
//! [`on_evict`](KeyedPolicyBuilder::on_evict).
//!
//! # Errors
//!
//! A capacity of zero is a [`ConfigError`] from [`build`](KeyedPolicyBuilder::build). A
//! factory's error is returned from [`get`](KeyedPolicy::get) as it is, and from
//! [`run`](KeyedPolicy::run) as [`Error::Config`] before any attempt; nothing is inserted, so
//! the next call for that key runs the factory again.

mod table;

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

pub use table::{DEFAULT_CAPACITY, KeyedTable, KeyedTableBuilder};

use crate::admit::{Admit, Unlimited};
use crate::breaker::BreakerState;
use crate::classify::{Classify, ErrorsAreTransient};
use crate::error::{ConfigError, Error};
use crate::executor::Callback;
use crate::policy::Policy;

/// Makes the policy of a key on its first call.
type Factory<K, C, A> = Box<dyn Fn(&K) -> Result<Policy<C, A>, ConfigError> + Send + Sync>;

/// One policy definition with separate state per key, in a bounded table; see the
/// [module docs](self). Cheap to clone: clones share the table.
pub struct KeyedPolicy<K, C = ErrorsAreTransient, A = Unlimited> {
    inner: Arc<Inner<K, C, A>>,
}

struct Inner<K, C, A> {
    table: KeyedTable<K, Policy<C, A>>,
    factory: Factory<K, C, A>,
}

/// Settings of a [`KeyedPolicy`]: its factory, capacity and eviction hook.
#[must_use]
pub struct KeyedPolicyBuilder<K, C, A> {
    factory: Factory<K, C, A>,
    table: KeyedTableBuilder<K, Policy<C, A>>,
}

impl<K, C, A> Clone for KeyedPolicy<K, C, A> {
    fn clone(&self) -> Self {
        KeyedPolicy {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, C, A> KeyedPolicy<K, C, A> {
    /// A builder whose `factory` makes the policy of each new key (called with the key, on
    /// its first call, and again after it was evicted or removed).
    ///
    /// # Errors
    ///
    /// None here: the builder's [`build`](KeyedPolicyBuilder::build) checks the capacity.
    pub fn builder(
        factory: impl Fn(&K) -> Result<Policy<C, A>, ConfigError> + Send + Sync + 'static,
    ) -> KeyedPolicyBuilder<K, C, A> {
        KeyedPolicyBuilder {
            factory: Box::new(factory),
            table: KeyedTable::builder(),
        }
    }

    /// The most keys kept at once.
    pub fn capacity(&self) -> usize {
        self.inner.table.capacity()
    }

    /// Keys with a policy now.
    pub fn len(&self) -> usize {
        self.inner.table.len()
    }

    /// Whether no key has a policy.
    pub fn is_empty(&self) -> bool {
        self.inner.table.is_empty()
    }

    /// Forgets every key's state (no eviction hook is called).
    pub fn clear(&self) {
        self.inner.table.clear();
    }
}

impl<K: Hash + Eq + Clone, C, A> KeyedPolicy<K, C, A> {
    /// The policy of `key` (a clone sharing the key's state), made by the factory if the key
    /// has none; the factory's error otherwise. A known key costs no allocation.
    ///
    /// # Errors
    ///
    /// The factory's [`ConfigError`] for a new key, as it returned it (nothing is inserted).
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Result<Policy<C, A>, ConfigError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let inner = &*self.inner;
        inner.table.get_or_try_insert_with(key, &inner.factory)
    }

    /// The policy of `key` if it has one, without making one or marking it used.
    pub fn peek<Q>(&self, key: &Q) -> Option<Policy<C, A>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.inner.table.peek(key)
    }

    /// Whether `key` has a policy now.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.inner.table.contains_key(key)
    }

    /// The keys with a policy now, in no particular order.
    pub fn keys(&self) -> Vec<K> {
        self.inner.table.keys()
    }

    /// The state of `key`'s breaker now; `None` if the key has no policy or its policy no
    /// breaker. See [`Policy::breaker_state`].
    pub fn breaker_state<Q>(&self, key: &Q) -> Option<BreakerState>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.peek(key)?.breaker_state()
    }

    /// The tokens in `key`'s retry budget now; `None` if the key has no policy or its policy
    /// no budget. See [`Policy::budget_balance`].
    pub fn budget_balance<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.peek(key)?.budget_balance()
    }

    /// Forgets `key` and its state (no eviction hook is called): its next call builds a fresh
    /// policy. Returns the policy it had, if any; calls running under it finish under it.
    pub fn remove<Q>(&self, key: &Q) -> Option<Policy<C, A>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.inner.table.remove(key)
    }

    /// Runs `op` under `key`'s policy, as [`Policy::run`] does. A factory error fails the call
    /// with [`Error::Config`] before any attempt.
    ///
    /// # Cancellation
    ///
    /// As [`Policy::run`]: dropping the future drops the attempt in flight. For anything else
    /// a call can carry (a caller token, a deadline, a fallback, a report, a blocking call),
    /// [`get`](Self::get) the key's policy and start the call with [`Policy::call`].
    ///
    /// # Errors
    ///
    /// The call's [`Error`], as [`Policy::run`] returns it; a factory error as [`Error::Config`]
    /// before any attempt.
    pub async fn run<Q, T, E, F>(&self, key: &Q, op: F) -> Result<T, Error<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
        C: Classify<T, E>,
        A: Admit,
        F: Callback<T, E>,
    {
        match self.get(key) {
            Ok(policy) => policy.run(op).await,
            Err(e) => Err(Error::Config(e)),
        }
    }
}

impl<K, C, A> KeyedPolicyBuilder<K, C, A> {
    /// At most this many keys keep a policy (default [`DEFAULT_CAPACITY`], 1024; at least 1).
    /// See [eviction](self#eviction) for which key makes room.
    pub fn capacity(mut self, keys: usize) -> Self {
        self.table = self.table.capacity(keys);
        self
    }

    /// Calls `hook` with each key (and its policy) that a full table evicts to make room, not
    /// for [`remove`](KeyedPolicy::remove) or [`clear`](KeyedPolicy::clear). It runs after the
    /// table's lock is released, on the thread of the call that brought the new key; a panic
    /// in it is caught and dropped, and never changes that call's outcome.
    pub fn on_evict(mut self, hook: impl Fn(&K, &Policy<C, A>) + Send + Sync + 'static) -> Self {
        self.table = self.table.on_evict(hook);
        self
    }

    /// The keyed policy, or the problem with its settings (a capacity of zero, named
    /// `capacity`).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for a capacity of zero (`keyed.capacity`).
    pub fn build(self) -> Result<KeyedPolicy<K, C, A>, ConfigError> {
        Ok(KeyedPolicy {
            inner: Arc::new(Inner {
                table: self.table.build()?,
                factory: self.factory,
            }),
        })
    }
}

impl<K, C, A> fmt::Debug for KeyedPolicy<K, C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedPolicy")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl<K, C, A> fmt::Debug for KeyedPolicyBuilder<K, C, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedPolicyBuilder")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}
