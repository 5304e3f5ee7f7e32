//! Performance budgets that are deterministic, and so can be tests: heap allocations per
//! successful call, and the size of a call's future. `BUDGETS.md` explains every byte.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rampart::admit::{Admit, Unlimited};
use rampart::hedge::Hedge;
use rampart::limit::{Aimd, CriticalityLimit, Gradient, RateLimit, Throttle};
use rampart::{Breaker, ErrorsAreTransient, Policy};
use rampart_bench::floor::{Limits, retry_loop};
use rampart_bench::floor2::{Guards, guarded_loop};

const LIMITS: Limits = Limits {
    max_attempts: 3,
    deadline: Duration::from_secs(2),
    attempt_timeout: Duration::from_millis(500),
    base: Duration::from_millis(100),
};

/// Deadline, attempt timeout, 3 attempts, a retry budget (automatic) and a circuit breaker.
fn full_policy() -> Policy {
    full_policy_admitting(Unlimited)
}

/// The full policy, asking `admit` before each attempt.
fn full_policy_admitting<A: Admit>(admit: A) -> Policy<ErrorsAreTransient, A> {
    Policy::builder()
        .max_attempts(LIMITS.max_attempts)
        .total_timeout(LIMITS.deadline)
        .attempt_timeout(LIMITS.attempt_timeout)
        .breaker(Breaker::builder().build().expect("valid breaker"))
        .admit(admit)
        .build()
        .expect("valid policy")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// Polls a future that must be ready at once.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the success path must complete on its first poll"),
    }
}

/// Allocations made by `calls` successful calls through `policy`, after one warm-up call.
fn allocations_per_success<A: Admit>(policy: &Policy<ErrorsAreTransient, A>, calls: u32) -> u64 {
    let rt = runtime();
    let _context = rt.enter();
    let call = || ready(policy.run(async |attempt| Ok::<_, std::io::Error>(attempt.number())));
    call().expect("warm-up");
    allocation_counter::measure(|| {
        for _ in 0..calls {
            call().expect("success");
        }
    })
    .count_total
}

/// Allocations made by `calls` runs of `call`, after one warm-up run, inside a runtime's
/// context.
fn allocations_of(calls: u32, mut call: impl FnMut()) -> u64 {
    let rt = runtime();
    let _context = rt.enter();
    call();
    allocation_counter::measure(|| {
        for _ in 0..calls {
            call();
        }
    })
    .count_total
}

#[test]
fn the_hand_written_floors_success_paths_allocate_nothing() {
    let floor = || {
        ready(retry_loop(LIMITS, async |n| Ok::<_, std::io::Error>(n))).expect("success");
    };
    assert_eq!(allocations_of(1_000, floor), 0);
    let guards = Guards::new();
    let floor2 = || {
        ready(guarded_loop(LIMITS, &guards, async |n| {
            Ok::<_, std::io::Error>(n)
        }))
        .expect("success");
    };
    assert_eq!(allocations_of(1_000, floor2), 0);
}

#[test]
fn full_policy_success_path_allocates_nothing() {
    assert_eq!(allocations_per_success(&full_policy(), 1_000), 0);
}

/// A call whose every attempt fails allocates nothing, except when it ends for another reason
/// after a failed attempt (here the retry budget refusing a retry): the error keeps that
/// attempt's failure in a box (`Error::Rejected::last`), one allocation per such call.
#[test]
fn failing_calls_allocate_only_the_box_that_keeps_a_last_failure() {
    use rampart::{Error, backoff::Backoff};
    let retrying = |budget: bool| {
        let builder = Policy::builder()
            .max_attempts(LIMITS.max_attempts)
            .total_timeout(LIMITS.deadline)
            .attempt_timeout(LIMITS.attempt_timeout)
            .backoff(Backoff::none());
        let builder = if budget { builder } else { builder.no_budget() };
        builder.build().expect("valid policy")
    };
    let rt = runtime();
    let _context = rt.enter();
    for budget in [false, true] {
        let policy = retrying(budget);
        let boxed = std::cell::Cell::new(0);
        let call = || match ready(policy.run(async |attempt| Err::<u32, _>(attempt.number()))) {
            Err(Error::Inner(_)) => {}
            Err(Error::Rejected { last: Some(_), .. }) => boxed.set(boxed.get() + 1),
            other => panic!("{other:?}"),
        };
        call();
        let before = boxed.get();
        let allocations = allocation_counter::measure(|| {
            for _ in 0..1_000 {
                call();
            }
        })
        .count_total;
        let boxed = boxed.get() - before;
        println!("budget {budget}: {allocations} allocations in 1,000 failing calls");
        if budget {
            assert!(
                boxed > 0,
                "the budget refused no retry in 1,000 failing calls"
            );
        }
        assert_eq!(allocations, boxed, "budget: {budget}");
    }
}

/// A hedging policy's call keeps its legs' state in one box, so that the future of every policy
/// that does not hedge stays small: one allocation per call, and none more while no hedge fires.
#[test]
fn hedging_policy_allocates_one_box_per_call_while_no_hedge_fires() {
    let policy = Policy::builder()
        .max_attempts(LIMITS.max_attempts)
        .total_timeout(LIMITS.deadline)
        .attempt_timeout(LIMITS.attempt_timeout)
        .hedge(Hedge::fixed(Duration::from_millis(100)))
        .build()
        .expect("valid policy");
    let rt = runtime();
    let _context = rt.enter();
    let call = || ready(policy.run(async |attempt| Ok::<_, std::io::Error>(attempt.number())));
    call().expect("warm-up");
    let info = allocation_counter::measure(|| {
        for _ in 0..1_000 {
            call().expect("success");
        }
    });
    assert_eq!(info.count_total, 1_000);
}

#[test]
fn admitted_calls_through_a_limiter_allocate_nothing() {
    // Room for every call: each is admitted on the limiter's fast path.
    let rate = RateLimit::builder(1_000_000, Duration::from_secs(1))
        .burst(1_000_000)
        .build()
        .expect("valid rate limit");
    let criticality = CriticalityLimit::new(64).expect("valid criticality limit");
    assert_eq!(
        allocations_per_success(&full_policy_admitting(rate), 1_000),
        0
    );
    assert_eq!(
        allocations_per_success(&full_policy_admitting(criticality.clone()), 1_000),
        0
    );
    assert_eq!(criticality.in_flight(), 0, "every permit was given back");
    // The other limiters' admitted paths, likewise.
    assert_eq!(
        allocations_per_success(&full_policy_admitting(Aimd::new()), 1_000),
        0
    );
    assert_eq!(
        allocations_per_success(&full_policy_admitting(Gradient::new()), 1_000),
        0
    );
    let throttle = Throttle::builder().seed(1).build().expect("valid throttle");
    assert_eq!(
        allocations_per_success(&full_policy_admitting(throttle), 1_000),
        0
    );
}

/// Every finisher of `Call` ends through the fallback step, with or without a fallback: on
/// success it allocates nothing (it once cloned the policy's name at the end of every
/// blocking call).
#[test]
fn call_finishers_with_a_fallback_allocate_nothing_on_success() {
    use rampart::StopReason;
    use rampart::fallback::Fallback;
    let policy = Policy::builder()
        .no_total_timeout()
        .no_attempt_timeout()
        .build()
        .expect("valid policy");
    let fallback = || Fallback::on([StopReason::AttemptsExhausted]).value(0);
    let blocking = || {
        policy
            .call()
            .fallback(fallback())
            .run_blocking(|attempt| Ok::<_, std::io::Error>(attempt.number()))
            .expect("success");
    };
    assert_eq!(allocations_of(1_000, blocking), 0, "run_blocking");
    let run = || {
        ready(
            policy
                .call()
                .fallback(fallback())
                .run(async |attempt| Ok::<_, std::io::Error>(attempt.number())),
        )
        .expect("success");
    };
    assert_eq!(allocations_of(1_000, run), 0, "run");
}

#[test]
fn policy_none_success_path_allocates_nothing() {
    assert_eq!(allocations_per_success(&Policy::none(), 1_000), 0);
}

#[test]
fn success_after_a_suspension_adds_no_allocation_to_the_work_itself() {
    // The callback yields once, so the attempt ceiling's timer is armed and polled. tokio's
    // own yield allocates, so the baseline is the same work without rampart.
    let policy = full_policy();
    let rt = runtime();
    let through_policy = || {
        rt.block_on(async {
            for _ in 0..100 {
                policy
                    .run(async |attempt| {
                        tokio::task::yield_now().await;
                        Ok::<_, std::io::Error>(attempt.number())
                    })
                    .await
                    .expect("success");
            }
        })
    };
    let direct = || {
        rt.block_on(async {
            for n in 0..100 {
                tokio::task::yield_now().await;
                std::hint::black_box(n);
            }
        })
    };
    through_policy();
    direct();
    let with_policy = allocation_counter::measure(through_policy).count_total;
    let baseline = allocation_counter::measure(direct).count_total;
    assert_eq!(
        with_policy, baseline,
        "rampart added allocations to 100 suspended calls"
    );
}

/// Bytes a call's future may carry above the hand-written floor; `BUDGETS.md` gives the
/// reason for each of them. Measured as a difference, so that tokio's own sizes (which change
/// with its features, e.g. `test-util` in a workspace test run) cancel out. 392 at 0.2's
/// release (the goal is 256); the budget leaves 8 bytes for a compiler's layout.
const FULL_ABOVE_FLOOR: usize = 400;

#[test]
fn call_future_sizes_stay_within_their_budgets() {
    let policy = full_policy();
    let none = Policy::none();
    let floor = size_of_val(&retry_loop(LIMITS, async |n| Ok::<_, std::io::Error>(n)));
    let guards = Guards::new();
    let floor2 = size_of_val(&guarded_loop(LIMITS, &guards, async |n| {
        Ok::<_, std::io::Error>(n)
    }));
    let full = size_of_val(&policy.run(async |a| Ok::<_, std::io::Error>(a.number())));
    let pass = size_of_val(&none.run(async |a| Ok::<_, std::io::Error>(a.number())));
    println!(
        "future sizes: hand-written floor {floor} B, second floor (breaker, budget) {floor2} B, full policy {full} B (+{} over the floor), Policy::none() {pass} B",
        full - floor
    );
    assert!(
        full <= floor + FULL_ABOVE_FLOOR,
        "a full policy's future is {full} B, {} B above the floor of {floor} B; the budget is {FULL_ABOVE_FLOOR} B",
        full - floor
    );
    // One future type serves every policy: Policy::none() costs no more than a full one.
    assert_eq!(pass, full);
}
