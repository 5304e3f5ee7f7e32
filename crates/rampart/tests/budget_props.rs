//! The retry budget against a plain f64 token-bucket model, on random operation sequences.

use std::time::Duration;

use proptest::prelude::*;
use rampart::budget::RetryBudget;
use rampart::clock::Instant;

#[derive(Debug, Clone)]
enum Op {
    Deposit,
    Spend { sheddable: bool },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Deposit),
        3 => any::<bool>().prop_map(|sheddable| Op::Spend { sheddable }),
        1 => (0u64..2_000).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn min_per_sec() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(2.0), 0.0..0.2f64, 0.0..50.0f64]
}

const TOLERANCE: f64 = 0.01;

proptest! {
    #[test]
    fn the_budget_follows_the_token_bucket_model(
        fraction in 0.0..=1.0f64,
        rate in min_per_sec(),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let budget = RetryBudget::builder().fraction(fraction).min_per_sec(rate).build().expect("valid");
        let cap = (rate * 10.0).max(1.0);
        prop_assert!((budget.capacity() - cap).abs() < 1e-6);
        let base = Instant::now();
        let (mut model, mut elapsed_ms, mut last_ms) = (cap, 0u64, 0u64);
        for op in ops {
            let now = base + Duration::from_millis(elapsed_ms);
            model = (model + rate * (elapsed_ms - last_ms) as f64 / 1_000.0).min(cap);
            last_ms = elapsed_ms;
            match op {
                Op::Advance { ms } => elapsed_ms += ms,
                Op::Deposit => {
                    budget.deposit(now);
                    model = (model + fraction).min(cap);
                }
                Op::Spend { sheddable } => {
                    let reserve = if sheddable { 0.5 } else { 0.0 };
                    let threshold = 1.0 + reserve * cap;
                    let result = budget.try_spend(now, reserve);
                    if (model - threshold).abs() >= TOLERANCE {
                        prop_assert_eq!(result.is_ok(), model >= threshold, "model {} threshold {}", model, threshold);
                    }
                    match result {
                        Ok(()) => model = (model - 1.0).max(0.0),
                        Err(None) => prop_assert!(rate == 0.0 || threshold > cap + 1e-6),
                        Err(Some(after)) => {
                            prop_assert!(rate > 0.0 && threshold <= cap + 1e-6);
                            let funded = after.as_secs_f64() * rate;
                            prop_assert!((funded - (threshold - model)).abs() < TOLERANCE, "hint {:?}", after);
                        }
                    }
                }
            }
            let balance = budget.balance(now);
            prop_assert!((0.0..=budget.capacity()).contains(&balance), "balance {}", balance);
            prop_assert!((balance - model).abs() < TOLERANCE, "balance {} model {}", balance, model);
        }
    }
}
