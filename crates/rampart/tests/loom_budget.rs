//! Every interleaving of concurrent spends and deposits under loom (of three threads, up to a
//! preemption bound: see `bounded`):
//! `RUSTFLAGS="--cfg rampart_loom" cargo test --release --test loom_budget`.
#![cfg(rampart_loom)]

use std::time::Duration;

use rampart::budget::RetryBudget;
use rampart::clock::Instant;

fn budget(fraction: f64, min_per_sec: f64) -> RetryBudget {
    RetryBudget::builder()
        .fraction(fraction)
        .min_per_sec(min_per_sec)
        .build()
        .expect("valid budget")
}

#[test]
fn two_concurrent_spends_of_the_last_token_succeed_exactly_once() {
    let now = Instant::now();
    loom::model(move || {
        let b = budget(0.1, 0.0); // capacity 1, full
        let other = b.clone();
        let t = loom::thread::spawn(move || other.try_spend(now, 0.0).is_ok());
        let here = b.try_spend(now, 0.0).is_ok();
        let there = t.join().expect("thread");
        assert!(here ^ there, "exactly one spend succeeds ({here}, {there})");
        assert_eq!(b.balance(now), 0.0);
    });
}

#[test]
fn two_concurrent_deposits_into_a_bucket_with_room_both_land() {
    let now = Instant::now();
    loom::model(move || {
        let b = budget(0.25, 2.0); // capacity 20
        for _ in 0..5 {
            b.try_spend(now, 0.0).expect("funded");
        }
        let other = b.clone();
        let t = loom::thread::spawn(move || other.deposit(now));
        b.deposit(now);
        t.join().expect("thread");
        assert_eq!(b.balance(now), 15.5);
    });
}

#[test]
fn a_deposit_racing_a_spend_leaves_the_exact_balance() {
    let base = Instant::now();
    let later = base + Duration::from_millis(250);
    loom::model(move || {
        let b = budget(0.1, 2.0);
        for _ in 0..5 {
            b.try_spend(base, 0.0).expect("funded");
        }
        // Different instants per thread: the refill is a function of time, not of who wrote last.
        let other = b.clone();
        let t = loom::thread::spawn(move || other.deposit(later));
        assert_eq!(b.try_spend(base, 0.0), Ok(()));
        t.join().expect("thread");
        assert!(
            (b.balance(later) - 14.6).abs() < 1e-9,
            "{}",
            b.balance(later)
        );
    });
}

#[test]
fn a_deposit_racing_a_spend_into_a_full_bucket_is_capped_either_way() {
    let now = Instant::now();
    loom::model(move || {
        let b = budget(0.5, 0.0); // capacity 1, full
        let other = b.clone();
        let t = loom::thread::spawn(move || other.deposit(now));
        let spent = b.try_spend(now, 0.0).is_ok();
        t.join().expect("thread");
        assert!(spent);
        // Deposit first: capped at 1, then spent to 0. Spend first: 0, then deposited to 0.5.
        let balance = b.balance(now);
        assert!(balance == 0.0 || balance == 0.5, "{balance}");
    });
}

/// Runs `f` on three threads (this one and two spawned), each on its own clone of `b`, and
/// returns their results in thread order.
fn three<T: Send + 'static>(b: &RetryBudget, f: [fn(&RetryBudget) -> T; 3]) -> [T; 3] {
    let [mine, first, second] = f;
    let spawn = |f: fn(&RetryBudget) -> T| {
        let b = b.clone();
        loom::thread::spawn(move || f(&b))
    };
    let (one, two) = (spawn(first), spawn(second));
    let here = mine(b);
    [
        here,
        one.join().expect("thread"),
        two.join().expect("thread"),
    ]
}

fn t0() -> Instant {
    // One instant for every execution: with a fixed `now` nothing refills, so every balance
    // below is exact.
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// Three threads make the full interleaving space too large for a quick run (about 7 minutes
/// for the first model below): a preemption bound of 5 (every schedule with at most five
/// preemptions; a lost or doubled update of the one compare-and-swap word needs two) keeps
/// each model to seconds in release mode. `LOOM_MAX_PREEMPTIONS` overrides it.
fn bounded(f: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = model.preemption_bound.or(Some(5));
    model.check(f);
}

/// The balance, asserted to lie within the bucket.
fn checked_balance(b: &RetryBudget) -> f64 {
    let balance = b.balance(t0());
    assert!(
        (0.0..=b.capacity()).contains(&balance),
        "{balance} outside [0, {}]",
        b.capacity()
    );
    balance
}

#[test]
fn three_threads_spending_and_depositing_account_for_every_token() {
    bounded(|| {
        let b = budget(0.25, 2.0); // capacity 20
        for _ in 0..18 {
            b.try_spend(t0(), 0.0).expect("funded");
        }
        // 2 tokens, one deposit of 0.25 and three spends of 1, in any order: exactly two
        // spends are funded (2.25 tokens in all), and 0.25 is left whatever the order.
        let spends = three(
            &b,
            [
                |b| {
                    let ok = b.try_spend(t0(), 0.0).is_ok();
                    checked_balance(b);
                    u32::from(ok)
                },
                |b| {
                    let ok = b.try_spend(t0(), 0.0).is_ok();
                    checked_balance(b);
                    u32::from(ok)
                },
                |b| {
                    b.deposit(t0());
                    checked_balance(b);
                    let ok = b.try_spend(t0(), 0.0).is_ok();
                    checked_balance(b);
                    u32::from(ok)
                },
            ],
        );
        assert_eq!(
            spends.iter().sum::<u32>(),
            2,
            "{spends:?}: a spend lost or doubled"
        );
        let balance = checked_balance(&b);
        assert!((balance - 0.25).abs() < 1e-9, "{balance}");
    });
}

#[test]
fn two_deposits_racing_a_spend_never_overfill_the_bucket_nor_lose_the_spend() {
    bounded(|| {
        let b = budget(0.5, 0.0); // capacity 1
        b.try_spend(t0(), 0.0).expect("full");
        b.deposit(t0()); // 0.5
        // Deposits first: 1.0, then capped (never 1.5), then the spend: 0. A spend between
        // them: 0.5. The spend before both: refused, then 1.0.
        let [spent, _, _] = three(
            &b,
            [
                |b| b.try_spend(t0(), 0.0).is_ok(),
                |b| {
                    b.deposit(t0());
                    checked_balance(b);
                    true
                },
                |b| {
                    b.deposit(t0());
                    checked_balance(b);
                    true
                },
            ],
        );
        let balance = checked_balance(&b);
        if spent {
            assert!(balance == 0.0 || balance == 0.5, "spent, then {balance}");
        } else {
            assert_eq!(balance, 1.0, "refused, so both deposits landed, capped");
        }
    });
}
