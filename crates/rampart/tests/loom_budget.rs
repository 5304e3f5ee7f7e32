//! Every interleaving of concurrent spends and deposits, under loom:
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
