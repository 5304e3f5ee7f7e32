//! Keyed policies: per-key state (breaker, budget) from one factory, in a bounded table, read
//! and reset per key; on paused time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rampart::breaker::{Breaker, BreakerState, StateKind};
use rampart::keyed::KeyedPolicy;
use rampart::{ConfigError, Error, Event, Policy, RejectReason};

type Transitions = Arc<Mutex<Vec<(String, StateKind, StateKind)>>>;

fn down() -> std::io::Error {
    std::io::Error::other("down")
}

/// One attempt per call, a breaker per key that opens after two failures, and every breaker
/// transition recorded with the key's policy name.
fn per_key_breakers(capacity: usize, transitions: &Transitions) -> KeyedPolicy<String> {
    let seen = transitions.clone();
    KeyedPolicy::builder(move |key: &String| {
        let seen = seen.clone();
        Policy::builder()
            .name(format!("inventory/{key}"))
            .max_attempts(1)
            .no_budget()
            .breaker(
                Breaker::builder()
                    .consecutive_failures(2)
                    .jitter(0.0)
                    .build()?,
            )
            .listener(move |event: &Event<'_>| {
                if let Event::BreakerTransition {
                    policy, from, to, ..
                } = event
                {
                    let mut seen = seen.lock().expect("transitions");
                    seen.push(((*policy).to_owned(), *from, *to));
                }
            })
            .build()
    })
    .capacity(capacity)
    .build()
    .expect("valid keyed policy")
}

async fn fail(keyed: &KeyedPolicy<String>, key: &str) -> Error<std::io::Error> {
    keyed
        .run(key, async |_attempt| Err::<(), _>(down()))
        .await
        .expect_err("the call fails")
}

async fn succeed(keyed: &KeyedPolicy<String>, key: &str) -> Result<u32, Error<std::io::Error>> {
    keyed
        .run(key, async |attempt| {
            Ok::<_, std::io::Error>(attempt.number())
        })
        .await
}

fn is_breaker_rejection(error: &Error<std::io::Error>) -> bool {
    matches!(
        error,
        Error::Rejected {
            reason: RejectReason::DependencyUnavailable,
            ..
        }
    )
}

#[tokio::test(start_paused = true)]
async fn two_keys_have_independent_breakers_one_opens_and_the_other_still_admits() {
    let keyed = per_key_breakers(8, &Transitions::default());
    fail(&keyed, "eu").await;
    fail(&keyed, "eu").await;
    assert!(matches!(
        keyed.breaker_state("eu"),
        Some(BreakerState::Open { .. })
    ));
    assert!(is_breaker_rejection(&fail(&keyed, "eu").await));

    assert_eq!(succeed(&keyed, "us").await.ok(), Some(1));
    assert_eq!(keyed.breaker_state("us"), Some(BreakerState::Closed));
}

#[tokio::test(start_paused = true)]
async fn the_same_key_shares_its_state_across_calls_and_clones() {
    let keyed = per_key_breakers(8, &Transitions::default());
    let clone = keyed.clone();
    let kept = keyed.get("eu").expect("made");
    fail(&keyed, "eu").await; // one failure through the table...
    fail(&clone, "eu").await; // ...and one through a clone of it: the breaker opens
    assert!(matches!(
        kept.breaker_state(),
        Some(BreakerState::Open { .. })
    ));
    assert_eq!(keyed.len(), 1);
    assert_eq!(kept.name(), "inventory/eu");
}

#[tokio::test(start_paused = true)]
async fn the_factory_runs_once_per_key_while_the_key_is_kept() {
    let made = Arc::new(AtomicU32::new(0));
    let counted = made.clone();
    let keyed = KeyedPolicy::builder(move |_: &u64| {
        counted.fetch_add(1, Ordering::Relaxed);
        Policy::builder().max_attempts(1).build()
    })
    .build()
    .expect("valid keyed policy");
    for key in [1, 2, 1, 1, 2, 3] {
        let n = keyed
            .run(&key, async |_attempt| Ok::<_, std::io::Error>(key))
            .await
            .expect("success");
        assert_eq!(n, key);
    }
    assert_eq!(made.load(Ordering::Relaxed), 3);
    let mut keys = keyed.keys();
    keys.sort_unstable();
    assert_eq!(keys, [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_full_table_evicts_the_least_recently_used_key_and_it_comes_back_afresh() {
    let evicted = Arc::new(Mutex::new(Vec::new()));
    let seen = evicted.clone();
    let keyed = KeyedPolicy::builder(|key: &String| {
        Policy::builder()
            .name(format!("route/{key}"))
            .max_attempts(1)
            .no_budget()
            .breaker(Breaker::builder().consecutive_failures(1).build()?)
            .build()
    })
    .capacity(3)
    .on_evict(move |key: &String, policy: &Policy| {
        let mut seen = seen.lock().expect("evicted");
        seen.push((key.clone(), policy.name().to_owned()));
    })
    .build()
    .expect("valid keyed policy");
    let fail = async |key: &str| {
        keyed
            .run(key, async |_attempt| Err::<(), _>(down()))
            .await
            .expect_err("fails")
    };
    fail("a").await;
    fail("b").await; // b's breaker is open
    fail("c").await;
    keyed.get("a").expect("kept"); // a and c used again; b not
    keyed.get("c").expect("kept");
    keyed.get("d").expect("made"); // full: b goes

    assert_eq!(keyed.len(), 3);
    assert!(!keyed.contains_key("b"));
    assert_eq!(
        *evicted.lock().expect("evicted"),
        [("b".to_owned(), "route/b".to_owned())]
    );
    assert_eq!(keyed.breaker_state("b"), None, "reading does not make it");
    keyed.get("b").expect("made again");
    assert_eq!(
        keyed.breaker_state("b"),
        Some(BreakerState::Closed),
        "an evicted key's state went with it"
    );
    assert_eq!(keyed.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn reset_closes_one_keys_breaker_reports_it_and_leaves_the_other_open() {
    let transitions = Transitions::default();
    let keyed = per_key_breakers(8, &transitions);
    for key in ["eu", "us"] {
        fail(&keyed, key).await;
        fail(&keyed, key).await;
    }
    let reset = |key: &str| {
        let policy = keyed.peek(key)?;
        policy.breaker()?.reset(policy.clock().now())
    };
    let closed = reset("eu").expect("it was open");
    assert_eq!(
        (closed.from, closed.to),
        (StateKind::Open, StateKind::Closed)
    );
    assert_eq!(reset("eu"), None, "already closed");
    assert_eq!(reset("nowhere"), None, "no such key");
    assert!(!keyed.contains_key("nowhere"), "reset makes no key");

    assert_eq!(succeed(&keyed, "eu").await.ok(), Some(1));
    assert!(is_breaker_rejection(&fail(&keyed, "us").await));
    let last = transitions.lock().expect("transitions").last().cloned();
    assert_eq!(
        last,
        Some((
            "inventory/eu".to_owned(),
            StateKind::Open,
            StateKind::Closed
        ))
    );
}

#[tokio::test(start_paused = true)]
async fn each_key_has_its_own_retry_budget() {
    let keyed = KeyedPolicy::builder(|_: &String| {
        Policy::builder()
            .max_attempts(3)
            .no_total_timeout()
            .backoff(rampart::backoff::Backoff::none())
            .build()
    })
    .build()
    .expect("valid keyed policy");
    keyed
        .run("eu", async |_attempt| Err::<(), _>(down()))
        .await
        .expect_err("fails after retries");
    keyed.get("us").expect("made");
    let eu = keyed.budget_balance("eu").expect("eu has a budget");
    let us = keyed.budget_balance("us").expect("us has a budget");
    assert_eq!(us - eu, 2.0, "eu's two retries were charged to eu alone");
    assert_eq!(keyed.budget_balance("asia"), None);
}

#[tokio::test(start_paused = true)]
async fn remove_forgets_a_keys_state() {
    let keyed = per_key_breakers(8, &Transitions::default());
    fail(&keyed, "eu").await;
    fail(&keyed, "eu").await;
    let removed = keyed.remove("eu").expect("it had a policy");
    assert!(matches!(
        removed.breaker_state(),
        Some(BreakerState::Open { .. })
    ));
    assert!(keyed.is_empty());
    assert_eq!(succeed(&keyed, "eu").await.ok(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_factory_error_surfaces_with_its_message_and_nothing_is_kept() {
    let keyed = KeyedPolicy::builder(|key: &String| {
        Policy::builder()
            .name(format!("tenant/{key}"))
            .max_attempts(if key == "broken" { 0 } else { 1 })
            .build()
    })
    .build()
    .expect("valid keyed policy");
    let message = "max_attempts must be at least 1 (was 0)";

    let error = keyed.get("broken").expect_err("the factory fails");
    assert_eq!(error.to_string(), message);

    let error = keyed
        .run("broken", async |_attempt| Ok::<_, std::io::Error>(()))
        .await
        .expect_err("the factory fails");
    assert!(matches!(&error, Error::Config(e) if e.to_string() == message));

    assert!(keyed.is_empty());
    assert!(keyed.get("fine").is_ok());
}

#[test]
fn when_two_lookups_of_a_new_key_race_the_first_policy_inserted_is_the_one_both_get() {
    // The factory runs without the table's lock held: here it looks the same key up again
    // from inside, so that a second lookup finishes first.
    let table: Arc<OnceLock<KeyedPolicy<String>>> = Arc::default();
    let same_table = table.clone();
    let made = AtomicU32::new(0);
    let keyed = KeyedPolicy::builder(move |key: &String| {
        let n = made.fetch_add(1, Ordering::Relaxed) + 1;
        if let (1, Some(keyed)) = (n, same_table.get()) {
            assert_eq!(keyed.get(key)?.name(), format!("{key}#2"));
        }
        Policy::builder().name(format!("{key}#{n}")).build()
    })
    .build()
    .expect("valid keyed policy");
    table.set(keyed.clone()).expect("set once");

    assert_eq!(keyed.get("a").expect("made").name(), "a#2");
    assert_eq!(keyed.get("a").expect("kept").name(), "a#2");
    assert_eq!(keyed.len(), 1);
}

#[test]
fn a_capacity_of_zero_is_a_config_error_naming_the_field_and_value() {
    let error: ConfigError = KeyedPolicy::builder(|_: &String| Policy::builder().build())
        .capacity(0)
        .build()
        .expect_err("zero keys");
    assert_eq!(error.problems()[0].field(), "capacity");
    assert_eq!(error.to_string(), "capacity must be at least 1 (was 0)");
}

#[test]
fn the_default_capacity_is_1024() {
    let keyed = KeyedPolicy::builder(|_: &String| Policy::builder().build())
        .build()
        .expect("valid keyed policy");
    assert_eq!(keyed.capacity(), 1024);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_eviction_hook_does_not_change_the_call() {
    let keyed = KeyedPolicy::builder(|_: &String| Policy::builder().max_attempts(1).build())
        .capacity(1)
        .on_evict(|_, _| panic!("a broken hook"))
        .build()
        .expect("valid keyed policy");
    let call = async |key: &str| {
        keyed
            .run(key, async |_attempt| Ok::<_, std::io::Error>(7))
            .await
    };
    assert_eq!(call("a").await.ok(), Some(7));
    assert_eq!(call("b").await.ok(), Some(7), "a was evicted");
    assert_eq!(keyed.keys(), ["b"]);
}

#[tokio::test(start_paused = true)]
async fn a_keyed_call_borrowing_its_key_runs_in_a_spawned_task() {
    let keyed = per_key_breakers(8, &Transitions::default());
    let task = tokio::spawn(async move {
        let tenant = String::from("eu");
        let key: &str = &tenant;
        keyed
            .run(key, async |_attempt| Ok::<_, std::io::Error>(key.len()))
            .await
    });
    assert_eq!(task.await.expect("joined").ok(), Some(2));
}

#[path = "support/ready.rs"]
mod support;
use support::ready;

#[test]
fn the_success_path_of_a_key_already_in_the_table_allocates_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let keyed = KeyedPolicy::builder(|tenant: &String| {
        Policy::builder()
            .name(format!("search/{tenant}"))
            .max_attempts(3)
            .total_timeout(Duration::from_secs(2))
            .attempt_timeout(Duration::from_millis(500))
            .breaker(Breaker::builder().build()?)
            .build()
    })
    .capacity(4)
    .build()
    .expect("valid keyed policy");
    let call = |tenant: &str| {
        ready(keyed.run(tenant, async |attempt| {
            Ok::<_, std::io::Error>(attempt.number())
        }))
    };
    for tenant in ["acme", "globex"] {
        call(tenant).expect("warm-up");
    }
    let allocations = allocation_counter::measure(|| {
        for _ in 0..500 {
            assert_eq!(call("acme").ok(), Some(1));
            assert_eq!(call("globex").ok(), Some(1));
        }
    });
    assert_eq!(allocations.count_total, 0);
    let new_key = allocation_counter::measure(|| {
        assert_eq!(call("initech").ok(), Some(1));
    });
    assert!(
        new_key.count_total > 0,
        "the counter sees a new key's policy"
    );
}
