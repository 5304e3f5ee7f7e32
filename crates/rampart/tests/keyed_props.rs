//! Properties of the keyed table: whatever the keys and the capacity, it never holds more
//! keys than its capacity, the key just used is always in it, only a full table evicts (one
//! key for one new key), and every key kept maps to its own value.

use std::collections::HashSet;

use proptest::prelude::*;
use rampart::keyed::KeyedTable;

#[derive(Debug, Clone)]
enum Op {
    Get(u8),
    Remove(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => any::<u8>().prop_map(|k| Op::Get(k % 40)),
        1 => any::<u8>().prop_map(|k| Op::Remove(k % 40)),
    ]
}

#[path = "support/cases.rs"]
mod support;
use support::cases;

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn a_keyed_table_never_exceeds_its_capacity_and_keeps_the_key_just_used(
        capacity in 1usize..16,
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let table = KeyedTable::builder().capacity(capacity).build().expect("valid capacity");
        let mut model: HashSet<u8> = HashSet::new();
        for op in ops {
            match op {
                Op::Get(key) => {
                    let (was_in, before) = (table.contains_key(&key), table.len());
                    let value = table
                        .get_or_try_insert_with(&key, |k| Ok::<_, ()>(u32::from(*k) * 10))
                        .expect("infallible");
                    prop_assert_eq!(value, u32::from(key) * 10, "a key's own value");
                    prop_assert!(table.contains_key(&key), "the key just used is present");
                    let expected = if was_in { before } else { (before + 1).min(capacity) };
                    prop_assert_eq!(table.len(), expected, "only a full table evicts, one key");
                    model.insert(key);
                }
                Op::Remove(key) => {
                    let removed = table.remove(&key);
                    prop_assert!(removed.is_none() || model.contains(&key));
                    prop_assert!(!table.contains_key(&key));
                    model.remove(&key);
                }
            }
            prop_assert!(table.len() <= capacity, "{} keys in a table of {}", table.len(), capacity);
            let keys: HashSet<u8> = table.keys().into_iter().collect();
            prop_assert_eq!(keys.len(), table.len(), "every key once");
            prop_assert!(keys.is_subset(&model), "only keys that were used and not removed");
            for key in &keys {
                prop_assert_eq!(table.peek(key), Some(u32::from(*key) * 10));
            }
        }
    }
}

#[test]
fn concurrent_callers_never_push_a_table_past_its_capacity() {
    let table: KeyedTable<u64, u64> = KeyedTable::builder()
        .capacity(8)
        .build()
        .expect("valid capacity");
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let table = &table;
            scope.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(thread);
                for _ in 0..2_000 {
                    let key = rng.u64(0..32);
                    let value = table
                        .get_or_try_insert_with(&key, |k| Ok::<_, ()>(k * 10))
                        .expect("infallible");
                    assert_eq!(value, key * 10);
                    if rng.u8(0..16) == 0 {
                        table.remove(&key);
                    }
                    assert!(table.len() <= 8);
                }
            });
        }
    });
    assert!(table.len() <= 8);
    for key in table.keys() {
        assert_eq!(table.peek(&key), Some(key * 10));
    }
}
