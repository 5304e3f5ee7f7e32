//! Retry budget behaviour, through the public API only.

use std::time::Duration;

use rampart::budget::RetryBudget;
use rampart::clock::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn budget(fraction: f64, min_per_sec: f64) -> RetryBudget {
    RetryBudget::builder()
        .fraction(fraction)
        .min_per_sec(min_per_sec)
        .build()
        .expect("valid budget")
}

#[test]
fn a_full_bucket_of_twenty_funds_twenty_retries_then_refills_two_a_second() {
    let b = budget(0.1, 2.0);
    assert_eq!(b.capacity(), 20.0);
    let base = Instant::now();
    for i in 0..20 {
        assert_eq!(b.try_spend(base, 0.0), Ok(()), "spend {i}");
    }
    assert_eq!(b.try_spend(base, 0.0), Err(Some(ms(500))));
    let later = base + ms(1_000);
    assert_eq!(b.try_spend(later, 0.0), Ok(()));
    assert_eq!(b.try_spend(later, 0.0), Ok(()));
    assert_eq!(b.try_spend(later, 0.0), Err(Some(ms(500))));
}

#[test]
fn without_a_floor_four_quarter_deposits_fund_one_retry() {
    let b = budget(0.25, 0.0);
    assert_eq!(b.capacity(), 1.0);
    let base = Instant::now();
    assert_eq!(b.balance(base), 1.0);
    assert_eq!(b.try_spend(base, 0.0), Ok(()));
    for i in 1..=3 {
        b.deposit(base + ms(i));
        assert_eq!(
            b.try_spend(base + ms(i), 0.0),
            Err(None),
            "after {i} deposits"
        );
    }
    b.deposit(base + ms(4));
    assert_eq!(b.try_spend(base + ms(4), 0.0), Ok(()));
    assert_eq!(b.balance(base + ms(5_000)), 0.0);
}

#[test]
fn a_sheddable_spend_must_leave_half_the_capacity() {
    let b = budget(0.1, 2.0);
    let now = Instant::now();
    for _ in 0..9 {
        b.try_spend(now, 0.0).expect("funded");
    }
    // 11 left: 11 - 1 = 10 >= 0.5 × 20, the exact boundary, is allowed.
    assert_eq!(b.try_spend(now, 0.5), Ok(()));
    // 10 left: 10 - 1 = 9 < 10 is refused for a sheddable call, one token (500 ms) short.
    assert_eq!(b.try_spend(now, 0.5), Err(Some(ms(500))));
    assert_eq!(b.balance(now), 10.0);
    // The same spend with no reserve succeeds.
    assert_eq!(b.try_spend(now, 0.0), Ok(()));
    assert_eq!(b.balance(now), 9.0);
}

#[test]
fn deposits_never_fill_the_bucket_beyond_capacity() {
    let b = budget(1.0, 2.0);
    let base = Instant::now();
    for i in 0..1_000 {
        b.deposit(base + ms(i));
        assert_eq!(b.balance(base + ms(i)), 20.0);
    }
    b.try_spend(base + ms(1_000), 0.0).expect("funded");
    for _ in 0..5 {
        b.deposit(base + ms(1_000));
    }
    assert_eq!(b.balance(base + ms(1_000)), 20.0);
    assert_eq!(b.balance(base + ms(100_000)), 20.0);
}

#[test]
fn reading_the_balance_changes_nothing() {
    let b = budget(0.1, 2.0);
    let base = Instant::now();
    for _ in 0..20 {
        b.try_spend(base, 0.0).expect("funded");
    }
    assert_eq!(b.balance(base + ms(2_000)), 4.0);
    assert_eq!(b.balance(base + ms(1_000)), 2.0);
    assert_eq!(b.balance(base + ms(250)), 0.5);
}

#[test]
fn a_shared_budget_asked_for_again_with_other_parameters_is_refused_naming_both() {
    let name = "tests/budget: other parameters";
    RetryBudget::shared(name, RetryBudget::builder().min_per_sec(1.0)).expect("valid");
    let error = RetryBudget::shared(name, RetryBudget::builder().fraction(0.5).min_per_sec(9.0))
        .expect_err("other parameters");
    assert_eq!(
        error.to_string(),
        "budget.shared `tests/budget: other parameters` is registered with fraction 0.2 and min_per_sec 1; it cannot also have fraction 0.5 and min_per_sec 9"
    );
}

#[test]
fn a_shared_budget_is_one_bucket_for_every_caller_of_its_name() {
    let name = "tests/budget: one bucket";
    let first = RetryBudget::shared(name, RetryBudget::builder().min_per_sec(1.0)).expect("valid");
    let second =
        RetryBudget::shared(name, RetryBudget::builder().min_per_sec(1.0)).expect("the same");
    assert_eq!(
        (second.fraction(), second.min_per_sec(), second.capacity()),
        (0.2, 1.0, 10.0)
    );
    let now = Instant::now();
    first.try_spend(now, 0.0).expect("funded");
    assert_eq!(second.balance(now), 9.0);
    let clone = second.clone();
    clone.try_spend(now, 0.0).expect("funded");
    assert_eq!(first.balance(now), 8.0);
    assert_eq!(second.balance(now), 8.0);
    let other =
        RetryBudget::shared("tests/budget: another name", RetryBudget::builder()).expect("valid");
    assert_eq!(other.balance(now), 30.0);
}

#[test]
fn build_reports_every_problem_at_once() {
    let err = RetryBudget::builder()
        .fraction(1.5)
        .min_per_sec(-1.0)
        .build()
        .expect_err("invalid");
    let problems: Vec<_> = err
        .problems()
        .iter()
        .map(|p| (p.field(), p.message()))
        .collect();
    assert_eq!(
        problems,
        [
            ("budget.fraction", "must be between 0 and 1 (was 1.5)"),
            ("budget.min_per_sec", "must be between 0 and 1000 (was -1)"),
        ]
    );
    for (fraction, rate) in [
        (f64::NAN, 3.0),
        (0.1, f64::INFINITY),
        (0.1, 1e6),
        (-0.1, 3.0),
    ] {
        let built = RetryBudget::builder()
            .fraction(fraction)
            .min_per_sec(rate)
            .build();
        assert_eq!(built.map(|_| ()).expect_err("invalid").problems().len(), 1);
    }
    assert!(
        RetryBudget::shared(
            "tests/budget: invalid",
            RetryBudget::builder().fraction(2.0)
        )
        .is_err()
    );
}

#[test]
fn extreme_valid_parameters_work() {
    let now = Instant::now();
    let tiny = budget(0.0, 1e-300);
    assert_eq!(tiny.capacity(), 1.0);
    tiny.try_spend(now, 0.0).expect("funded");
    tiny.deposit(now);
    // Centuries away: the hint saturates instead of overflowing.
    assert!(matches!(tiny.try_spend(now, 0.0), Err(Some(d)) if d > Duration::from_secs(1 << 33)));
    let big = budget(1.0, 1_000.0);
    assert_eq!(big.capacity(), 10_000.0);
    for _ in 0..10_000 {
        big.try_spend(now, 0.0).expect("funded");
    }
    assert_eq!(big.try_spend(now, 0.0), Err(Some(ms(1))));
    let far = now + Duration::from_secs(100 * 365 * 86_400);
    assert_eq!(big.balance(far), 10_000.0);
    assert_eq!(big.try_spend(far, 0.0), Ok(()));
}
