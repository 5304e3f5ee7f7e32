//! The retry budget inside the executor: a refused retry ends the call with the last error and
//! a retry-after; a `Sheddable` call may not spend the last half; self-imposed refusals are free.

use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::drain::Drain;
use rampart::{
    Criticality, Error, Instant, Policy, RejectReason, RetryBudget, StopReason, Verdict,
};

#[derive(Debug, PartialEq, Eq)]
struct Fail(u32);

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "failure on attempt {}", self.0)
    }
}

/// A budget of capacity 20 (floor 2/s), with `spent` tokens already spent.
fn budget_with(spent: u32) -> RetryBudget {
    let budget = RetryBudget::builder()
        .min_per_sec(2.0)
        .build()
        .expect("valid budget");
    let now = Instant::now();
    for _ in 0..spent {
        budget.try_spend(now, 0.0).expect("funded");
    }
    budget
}

fn policy(budget: &RetryBudget) -> Policy {
    Policy::builder()
        .max_attempts(3)
        .backoff(Backoff::none())
        .budget(budget.clone())
        .use_ambient_criticality(true)
        .drain(&Drain::new())
        .build()
        .expect("valid")
}

async fn attempts_at(level: Criticality, spent: u32) -> (u32, StopReason) {
    let budget = budget_with(spent);
    let result = level
        .scope(
            policy(&budget)
                .call()
                .try_run(async |attempt| Err::<(), _>(Fail(attempt.number()))),
        )
        .await
        .expect("not cancelled");
    (result.attempts(), result.stop())
}

#[tokio::test(start_paused = true)]
async fn a_sheddable_call_may_not_spend_the_last_half_of_the_budget() {
    // Half the bucket spent: a Sheddable retry would leave 9 of 20.
    assert_eq!(
        attempts_at(Criticality::Sheddable, 10).await,
        (1, StopReason::BudgetExhausted)
    );
    assert_eq!(
        attempts_at(Criticality::SheddablePlus, 10).await,
        (3, StopReason::AttemptsExhausted)
    );
    assert_eq!(
        attempts_at(Criticality::Critical, 10).await,
        (3, StopReason::AttemptsExhausted)
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_ends_the_call_with_the_last_error_and_a_retry_after() {
    let budget = budget_with(20);
    let outcome = policy(&budget)
        .run(async |attempt| Err::<(), _>(Fail(attempt.number())))
        .await;
    match outcome {
        Err(Error::Rejected {
            reason: RejectReason::BudgetExhausted,
            retry_after,
            attempts,
            refused,
            last,
        }) => {
            assert_eq!(retry_after, Some(Duration::from_millis(500)));
            assert_eq!((attempts, refused), (1, 0), "one attempt, sent");
            assert_eq!(last.and_then(|l| l.into_inner()), Some(Fail(1)));
        }
        other => panic!("expected a budget rejection, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn self_imposed_refusals_are_retried_without_charging_the_budget() {
    let budget = budget_with(20);
    let policy = Policy::builder()
        .max_attempts(4)
        .backoff(Backoff::none())
        .budget(budget.clone())
        .classifier(|r: &Result<(), Fail>| match r {
            Ok(()) => Verdict::Ok,
            Err(_) => Verdict::Refused { retry_after: None },
        })
        .build()
        .expect("valid");
    let result = policy
        .call()
        .try_run(async |attempt| Err::<(), _>(Fail(attempt.number())))
        .await
        .expect("not cancelled");
    assert_eq!(result.attempts(), 4);
    assert_eq!(result.stop(), StopReason::AttemptsExhausted);
}

#[tokio::test(start_paused = true)]
async fn successes_deposit_into_the_budget() {
    let budget = RetryBudget::builder()
        .fraction(0.5)
        .min_per_sec(0.0)
        .build()
        .expect("valid budget");
    budget.try_spend(Instant::now(), 0.0).expect("starts full");
    let policy = policy(&budget);
    for _ in 0..2 {
        policy
            .run(async |_attempt| Ok::<_, Fail>(()))
            .await
            .expect("success");
    }
    assert_eq!(budget.balance(Instant::now()), 1.0);
}

#[test]
fn ambient_criticality_without_a_budget_is_a_configuration_error() {
    let err = Policy::builder()
        .no_budget()
        .use_ambient_criticality(true)
        .build()
        .expect_err("nothing to gate");
    assert!(err.to_string().contains("has no retry budget"), "{err}");
}
