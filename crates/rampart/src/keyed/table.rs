//! The bounded table behind [`KeyedPolicy`](super::KeyedPolicy): at most `capacity` keys, a
//! key not used lately evicted for a new one (CLOCK, a second-chance approximation of least
//! recently used).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{ConfigError, ConfigProblem};

/// The capacity of a table when none is given.
pub const DEFAULT_CAPACITY: usize = 1024;

/// Called with a key and its value when a full table evicts them for a new key.
type EvictHook<K, V> = Arc<dyn Fn(&K, &V) + Send + Sync>;

/// At most [`capacity`](Self::capacity) keys, each with a value; a full table evicts a key
/// not used lately to make room for a new one. Values are handed out as clones, so keep them
/// cheap to clone (a [`Policy`](crate::Policy), an `Arc`). A key is cloned once, when it is
/// inserted (the index and the ring each keep one); lookups take its borrowed form (`&str`
/// for a `String` or `Box<str>` key) and clone nothing.
///
/// ```
/// use rampart::keyed::KeyedTable;
///
/// let table = KeyedTable::builder().capacity(2).build()?;
/// let made = |key: &String| Ok::<_, std::convert::Infallible>(key.len());
/// assert_eq!(table.get_or_try_insert_with("alpha", made), Ok(5));
/// assert_eq!(table.get("alpha"), Some(5)); // borrowed lookup: no `String` is made
/// table.get_or_try_insert_with("beta", made).ok();
/// table.get_or_try_insert_with("gamma", made).ok(); // full: "beta" was not used again
/// assert_eq!(table.len(), 2);
/// assert!(table.contains_key("alpha") && !table.contains_key("beta"));
/// # Ok::<(), rampart::ConfigError>(())
/// ```
///
/// See the [module docs](super) for the eviction rule and the locking.
pub struct KeyedTable<K, V> {
    capacity: usize,
    slots: RwLock<Slots<K, V>>,
    on_evict: Option<EvictHook<K, V>>,
}

/// Settings of a [`KeyedTable`].
pub struct KeyedTableBuilder<K, V> {
    capacity: usize,
    on_evict: Option<EvictHook<K, V>>,
}

/// The keys in a ring that the CLOCK hand sweeps, and where each key sits in it.
struct Slots<K, V> {
    index: HashMap<K, usize>,
    ring: Vec<Slot<K, V>>,
    /// The next slot the hand looks at when a new key needs room.
    hand: usize,
}

struct Slot<K, V> {
    key: K,
    value: V,
    /// Used since the hand last passed: the slot gets a second chance.
    used: AtomicBool,
}

impl<K, V> Slot<K, V> {
    /// Marks the slot used. A key used again and again writes its flag once per pass of the
    /// hand, not once per use.
    #[inline]
    fn touch(&self) {
        if !self.used.load(Ordering::Relaxed) {
            self.used.store(true, Ordering::Relaxed);
        }
    }
}

impl<K, V> KeyedTableBuilder<K, V> {
    /// At most this many keys (default [`DEFAULT_CAPACITY`], 1024; at least 1).
    pub fn capacity(mut self, keys: usize) -> Self {
        self.capacity = keys;
        self
    }

    /// Calls `hook` with each key and value that a full table evicts to make room (not for
    /// [`remove`](KeyedTable::remove) or [`clear`](KeyedTable::clear)), after the table's
    /// lock is released. A panic in the hook is caught and dropped.
    pub fn on_evict(mut self, hook: impl Fn(&K, &V) + Send + Sync + 'static) -> Self {
        self.on_evict = Some(Arc::new(hook));
        self
    }

    /// The table, or the problem with its settings.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `capacity` when it is zero.
    pub fn build(self) -> Result<KeyedTable<K, V>, ConfigError> {
        if self.capacity == 0 {
            return Err(ConfigError::new(vec![ConfigProblem::new(
                "capacity",
                "must be at least 1 (was 0)",
            )]));
        }
        Ok(KeyedTable {
            capacity: self.capacity,
            slots: RwLock::new(Slots {
                index: HashMap::new(),
                ring: Vec::new(),
                hand: 0,
            }),
            on_evict: self.on_evict,
        })
    }
}

impl<K, V> KeyedTable<K, V> {
    /// A builder with the default capacity.
    pub fn builder() -> KeyedTableBuilder<K, V> {
        KeyedTableBuilder {
            capacity: DEFAULT_CAPACITY,
            on_evict: None,
        }
    }

    /// The most keys the table holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keys in the table now.
    pub fn len(&self) -> usize {
        self.read().ring.len()
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every key (no eviction hook is called).
    pub fn clear(&self) {
        let dropped = {
            let mut slots = self.write();
            slots.index.clear();
            slots.hand = 0;
            std::mem::take(&mut slots.ring)
        };
        drop(dropped); // the values' own drops run outside the lock
    }

    fn read(&self) -> RwLockReadGuard<'_, Slots<K, V>> {
        self.slots.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Slots<K, V>> {
        self.slots.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Hash + Eq + Clone, V: Clone> KeyedTable<K, V> {
    /// The value of `key`, marking it used; `None` if the table has none. Takes the read lock
    /// only, and allocates nothing.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let slots = self.read();
        let slot = slots.find(key)?;
        slot.touch();
        Some(slot.value.clone())
    }

    /// The value of `key` without marking it used (an administrative read does not keep a key
    /// in the table).
    pub fn peek<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.read().find(key).map(|slot| slot.value.clone())
    }

    /// Whether the table holds `key` (it is not marked used).
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.read().index.contains_key(key)
    }

    /// The value of `key`; when the table has none, `make` makes it, and it is inserted
    /// (evicting a key not used lately if the table is full). An error from `make` is
    /// returned and nothing is inserted.
    ///
    /// `make` runs without the table's lock held, so other keys are served meanwhile; when
    /// several callers miss the same key at once, each may run `make` and the first to insert
    /// wins: every caller gets that value, the others are dropped.
    ///
    /// # Errors
    ///
    /// `make`'s error, unchanged, when the table had no value for `key`; nothing is inserted.
    #[inline]
    pub fn get_or_try_insert_with<Q, E>(
        &self,
        key: &Q,
        make: impl FnOnce(&K) -> Result<V, E>,
    ) -> Result<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        match self.get(key) {
            Some(value) => Ok(value),
            None => self.insert_new(key.to_owned().into(), make),
        }
    }

    #[cold]
    fn insert_new<E>(&self, key: K, make: impl FnOnce(&K) -> Result<V, E>) -> Result<V, E> {
        let value = make(&key)?;
        let (kept, evicted) = {
            let mut slots = self.write();
            match slots.find(&key) {
                Some(slot) => {
                    slot.touch();
                    (slot.value.clone(), None)
                }
                None => {
                    let evicted = slots.insert(key, value.clone(), self.capacity);
                    (value, evicted)
                }
            }
        };
        if let Some(slot) = evicted {
            self.evicted(&slot);
        }
        Ok(kept)
    }

    #[cold]
    fn evicted(&self, slot: &Slot<K, V>) {
        if let Some(hook) = &self.on_evict {
            let _ = catch_unwind(AssertUnwindSafe(|| hook(&slot.key, &slot.value)));
        }
    }

    /// Removes `key` and returns its value (no eviction hook is called).
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.write().remove(key);
        removed.map(|slot| slot.value)
    }

    /// The keys in the table now, in no particular order.
    pub fn keys(&self) -> Vec<K> {
        self.read()
            .ring
            .iter()
            .map(|slot| slot.key.clone())
            .collect()
    }
}

impl<K: Hash + Eq + Clone, V> Slots<K, V> {
    #[inline]
    fn find<Q>(&self, key: &Q) -> Option<&Slot<K, V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The index only holds places in the ring.
        self.index.get(key).map(|&at| &self.ring[at])
    }

    /// Inserts a key the table does not hold; returns the slot it evicted, if it was full.
    fn insert(&mut self, key: K, value: V, capacity: usize) -> Option<Slot<K, V>> {
        let slot = Slot {
            key: key.clone(),
            value,
            // A new key earns its second chance by being used again: a burst of keys seen
            // once goes before the keys in steady use.
            used: AtomicBool::new(false),
        };
        if self.ring.len() < capacity {
            self.index.insert(key, self.ring.len());
            self.ring.push(slot);
            return None;
        }
        let at = self.victim();
        let old = std::mem::replace(&mut self.ring[at], slot);
        self.index.remove(&old.key);
        self.index.insert(key, at);
        Some(old)
    }

    /// The slot to evict: the first the hand finds unused since it last passed, clearing the
    /// flags of used ones on its way. Within one turn of the ring every flag is clear, so it
    /// looks at most `len + 1` slots. Called on a full ring only, which holds at least one
    /// slot (a capacity is at least 1).
    fn victim(&mut self) -> usize {
        let len = self.ring.len();
        loop {
            let at = self.hand;
            self.hand = (at + 1) % len;
            if !std::mem::take(self.ring[at].used.get_mut()) {
                return at;
            }
        }
    }

    fn remove<Q>(&mut self, key: &Q) -> Option<Slot<K, V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let at = self.index.remove(key)?;
        let slot = self.ring.swap_remove(at);
        // The last slot moved into the gap (unless the gap was the last slot).
        if let Some(moved) = self.ring.get(at)
            && let Some(place) = self.index.get_mut::<K>(&moved.key)
        {
            *place = at;
        }
        if self.hand >= self.ring.len() {
            self.hand = 0;
        }
        Some(slot)
    }
}

impl<K, V> fmt::Debug for KeyedTable<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedTable")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl<K, V> fmt::Debug for KeyedTableBuilder<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedTableBuilder")
            .field("capacity", &self.capacity)
            .field("on_evict", &self.on_evict.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(capacity: usize) -> KeyedTable<String, usize> {
        KeyedTable::builder()
            .capacity(capacity)
            .build()
            .expect("valid capacity")
    }

    fn insert(table: &KeyedTable<String, usize>, key: &str) -> usize {
        let made = |k: &String| Ok::<_, ()>(k.len());
        table.get_or_try_insert_with(key, made).expect("infallible")
    }

    #[test]
    fn removing_a_key_keeps_every_other_key_findable() {
        let t = table(4);
        for key in ["a", "bb", "ccc", "dddd"] {
            insert(&t, key);
        }
        assert_eq!(t.remove("a"), Some(1));
        assert_eq!(t.remove("a"), None);
        for key in ["bb", "ccc", "dddd"] {
            assert_eq!(t.peek(key), Some(key.len()), "{key}");
        }
        insert(&t, "e");
        insert(&t, "ff"); // full again: evicts one
        assert_eq!(t.len(), 4);
        assert!(t.contains_key("ff"));
    }

    #[test]
    fn a_hand_that_finds_every_key_used_evicts_within_one_turn() {
        let t = table(3);
        for key in ["a", "b", "c"] {
            insert(&t, key);
            t.get(key);
        }
        insert(&t, "d");
        assert_eq!(t.len(), 3);
        assert!(!t.contains_key("a"), "the hand starts at the oldest slot");
    }

    #[test]
    fn a_boxed_str_key_is_found_by_a_str_and_made_from_it() {
        // The shape of rampart-http's host table: `host:port` keys, a shared value per host.
        let hosts: KeyedTable<Box<str>, Arc<String>> = KeyedTable::builder()
            .capacity(2)
            .build()
            .expect("valid capacity");
        let host = "svc.internal:7000";
        let made = hosts
            .get_or_try_insert_with(host, |key| Ok::<_, ()>(Arc::new(key.to_string())))
            .expect("made");
        let found = hosts.get(host).expect("kept");
        assert!(Arc::ptr_eq(&made, &found));
        assert_eq!(hosts.keys(), [Box::from(host)]);
    }

    #[test]
    fn peek_leaves_a_key_unmarked_so_the_hand_evicts_it() {
        // The hand starts at "a": a used "a" gets a second chance and "b" goes; an "a" only
        // peeked at goes itself.
        for (read, kept, evicted) in [("get", "a", "b"), ("peek", "b", "a")] {
            let t = table(2);
            insert(&t, "a");
            insert(&t, "b");
            let found = if read == "get" {
                t.get("a")
            } else {
                t.peek("a")
            };
            assert_eq!(found, Some(1));
            insert(&t, "c");
            assert!(t.contains_key(kept), "after {read}: {kept} kept");
            assert!(!t.contains_key(evicted), "after {read}: {evicted} evicted");
        }
    }

    #[test]
    fn clear_empties_the_table_and_it_fills_again() {
        let t = table(2);
        insert(&t, "a");
        insert(&t, "b");
        t.clear();
        assert!(t.is_empty());
        insert(&t, "c");
        assert_eq!(t.keys(), ["c"]);
    }
}
