//! Limits changed while they serve. A concurrency limit: growing wakes waiters, shrinking lets
//! the attempts in flight finish, and its counts and its queue's order hold throughout (on
//! paused time). A rate limit: what was taken is counted at the new rate (on a manual clock).

use std::time::Duration;

use rampart::admit::{Admit, AdmitContext, Feedback};
use rampart::clock::Instant;
use rampart::limit::{ConcurrencyLimit, RateLimit};
use rampart::{AttemptOutcome, Criticality, ManualClock};

fn cx() -> AdmitContext<'static> {
    AdmitContext::new("test", Criticality::Critical, Instant::now())
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn ok() -> Feedback {
    Feedback::new(AttemptOutcome::Ok, Duration::from_millis(1))
}

/// Lets spawned tasks run until they wait.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn growing_a_concurrency_limit_lets_waiters_in_at_once() {
    let limit = ConcurrencyLimit::new(1).queue(4);
    let first = limit.acquire(&cx()).await.expect("a slot");
    let waiter = tokio::spawn({
        let limit = limit.clone();
        async move { limit.acquire(&cx()).await.map(drop) }
    });
    settle().await;
    assert!(!waiter.is_finished());
    assert_eq!(limit.queued(), 1);
    limit.set_limit(2).expect("valid");
    settle().await;
    assert!(waiter.is_finished(), "the new slot went to the waiter");
    waiter.await.expect("task").expect("admitted");
    assert_eq!(limit.limit(), 2);
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn shrinking_a_concurrency_limit_lets_attempts_in_flight_finish() {
    let limit = ConcurrencyLimit::new(3);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(limit.acquire(&cx()).await.expect("a slot"));
    }
    limit.set_limit(1).expect("valid");
    assert_eq!(
        (limit.limit(), limit.in_flight(), limit.available()),
        (1, 3, 0)
    );
    // Released through the executor's path, and one simply dropped: both count.
    limit.release(held.pop().expect("held"), ok());
    assert_eq!(limit.in_flight(), 2);
    assert!(limit.acquire(&cx()).await.is_err(), "2 in flight, limit 1");
    drop(held.pop().expect("held"));
    assert!(limit.acquire(&cx()).await.is_err(), "1 in flight, limit 1");
    assert_eq!(limit.in_flight(), 1);
    limit.release(held.pop().expect("held"), ok());
    let again = limit.acquire(&cx()).await.expect("below the new limit");
    assert_eq!(limit.in_flight(), 1);
    assert!(limit.acquire(&cx()).await.is_err());
    drop(again);
    assert_eq!((limit.in_flight(), limit.available()), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_queued_before_a_shrink_is_admitted_only_below_the_new_limit() {
    let limit = ConcurrencyLimit::new(2).queue(4);
    let a = limit.acquire(&cx()).await.expect("a slot");
    let b = limit.acquire(&cx()).await.expect("a slot");
    let waiter = tokio::spawn({
        let limit = limit.clone();
        async move { limit.acquire(&cx()).await.map(drop) }
    });
    settle().await;
    limit.set_limit(1).expect("valid");
    limit.release(a, ok());
    settle().await;
    assert!(!waiter.is_finished(), "one still in flight, limit 1");
    limit.release(b, ok());
    settle().await;
    assert!(waiter.is_finished());
    waiter.await.expect("task").expect("admitted");
}

#[tokio::test(start_paused = true)]
async fn growing_after_a_shrink_first_cancels_what_the_shrink_still_owes() {
    let limit = ConcurrencyLimit::new(3);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(limit.acquire(&cx()).await.expect("a slot"));
    }
    limit.set_limit(1).expect("valid");
    limit.set_limit(4).expect("valid");
    assert_eq!(
        (limit.limit(), limit.in_flight(), limit.available()),
        (4, 3, 1)
    );
    for permit in held {
        limit.release(permit, ok());
    }
    assert_eq!((limit.in_flight(), limit.available()), (0, 4));
}

#[tokio::test(start_paused = true)]
async fn set_limit_zero_is_refused_naming_the_field_and_changes_nothing() {
    let limit = ConcurrencyLimit::new(3);
    let clone = limit.clone();
    let held = limit.acquire(&cx()).await.expect("a slot");
    let error = limit.set_limit(0).expect_err("zero");
    assert_eq!(
        error.to_string(),
        "concurrency_limit.max must be at least 1 (was 0)"
    );
    let error = limit.set_limit(usize::MAX).expect_err("too many");
    assert_eq!(
        error.to_string(),
        format!(
            "concurrency_limit.max must be at most {} (was {})",
            tokio::sync::Semaphore::MAX_PERMITS,
            usize::MAX
        )
    );
    assert_eq!(
        (clone.limit(), clone.in_flight(), clone.available()),
        (3, 1, 2)
    );
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_permit_owed_to_a_shrink_is_not_counted_as_free() {
    let limit = ConcurrencyLimit::new(3);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(limit.acquire(&cx()).await.expect("a slot"));
    }
    limit.set_limit(1).expect("valid");
    // Dropped, not released (as a refusal further down a tuple of limiters drops it): the
    // shrink takes the slot back, so none is free while two are in flight under a limit of 1.
    drop(held.pop());
    assert_eq!(
        (limit.limit(), limit.in_flight(), limit.available()),
        (1, 2, 0)
    );
    assert!(limit.acquire(&cx()).await.is_err(), "2 in flight, limit 1");
    drop(held.pop());
    assert_eq!((limit.in_flight(), limit.available()), (1, 0));
    drop(held.pop());
    assert_eq!((limit.in_flight(), limit.available()), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_keeps_its_place_when_a_dropped_permit_pays_a_shrink() {
    let limit = ConcurrencyLimit::new(2).queue(4);
    let a = limit.acquire(&cx()).await.expect("a slot");
    let b = limit.acquire(&cx()).await.expect("a slot");
    // Each waiter's task ends holding its permit, until the test takes it.
    let spawn_waiter = || {
        tokio::spawn({
            let limit = limit.clone();
            async move { limit.acquire(&cx()).await }
        })
    };
    let first = spawn_waiter();
    settle().await;
    let second = spawn_waiter();
    settle().await;
    assert_eq!(limit.queued(), 2);
    limit.set_limit(1).expect("valid");
    // The shrink takes back the slot `a` held: no waiter is woken for it.
    drop(a);
    settle().await;
    assert!(!first.is_finished() && !second.is_finished());
    assert_eq!((limit.in_flight(), limit.queued()), (1, 2));
    // The next slot goes to the first to arrive.
    limit.release(b, ok());
    settle().await;
    assert!(first.is_finished(), "the first waiter is admitted first");
    assert!(!second.is_finished());
    drop(first.await.expect("task").expect("admitted"));
    settle().await;
    assert!(second.is_finished());
    drop(second.await.expect("task").expect("admitted"));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_cancelled_after_it_was_handed_a_slot_gives_the_slot_to_a_shrink_first() {
    let limit = ConcurrencyLimit::new(2).queue(4);
    let a = limit.acquire(&cx()).await.expect("a slot");
    let b = limit.acquire(&cx()).await.expect("a slot");
    let spawn_waiter = || {
        tokio::spawn({
            let limit = limit.clone();
            async move { limit.acquire(&cx()).await }
        })
    };
    let (cancelled, second, third) = (spawn_waiter(), spawn_waiter(), spawn_waiter());
    settle().await;
    assert_eq!(limit.queued(), 3);
    // `a`'s slot is handed to the first waiter, which has not run since; the limit shrinks;
    // then the first waiter's caller gives up.
    limit.release(a, ok());
    limit.set_limit(1).expect("valid");
    cancelled.abort();
    settle().await;
    assert!(cancelled.await.expect_err("cancelled").is_cancelled());
    // That slot went to the shrink: one in flight under a limit of one, two waiting.
    assert_eq!(
        (limit.in_flight(), limit.available(), limit.queued()),
        (1, 0, 2)
    );
    assert!(!second.is_finished() && !third.is_finished());
    // The next slot goes to the earliest waiter left.
    limit.release(b, ok());
    settle().await;
    assert!(second.is_finished(), "the second waiter is admitted first");
    assert!(!third.is_finished());
    drop(second.await.expect("task").expect("admitted"));
    settle().await;
    drop(third.await.expect("task").expect("admitted"));
}

#[test]
fn a_lower_rate_spaces_the_next_permits_by_the_new_interval_from_where_the_old_ones_left_off() {
    let limit = RateLimit::builder(10, Duration::from_secs(1))
        .burst(1)
        .build()
        .expect("valid");
    let t0 = Instant::now();
    assert_eq!(limit.try_acquire(t0), Ok(()));
    limit
        .reconfigure(|b| b.rate(2, Duration::from_secs(1)))
        .expect("valid update");
    assert_eq!((limit.permits(), limit.burst()), (2, 1));
    assert_eq!(limit.try_acquire(t0 + ms(100)), Ok(()));
    // At 10 a second this one would go through; at 2 a second the next is 400 ms away.
    assert_eq!(limit.try_acquire(t0 + ms(200)), Err(ms(400)));
}

/// A rate limit of `permits` a second with a burst of 10, its burst spent at the clock's now.
fn spent_burst_of_ten(permits: u32, clock: &ManualClock) -> RateLimit {
    let limit = RateLimit::builder(permits, Duration::from_secs(1))
        .burst(10)
        .build()
        .expect("valid");
    for _ in 0..10 {
        assert_eq!(limit.try_acquire(clock.now()), Ok(()));
    }
    limit
}

/// Refused for `interval` from now, then one permit, then refused for `interval` again: a
/// spent limit admitting one every `interval`.
fn admits_one_every(limit: &RateLimit, clock: &ManualClock, interval: Duration) {
    assert_eq!(limit.try_acquire(clock.now()), Err(interval));
    clock.advance(interval);
    assert_eq!(limit.try_acquire(clock.now()), Ok(()));
    assert_eq!(limit.try_acquire(clock.now()), Err(interval));
}

#[test]
fn raising_the_rate_of_a_spent_limit_admits_again_after_one_new_interval() {
    let clock = ManualClock::new();
    let limit = spent_burst_of_ten(10, &clock);
    assert_eq!(limit.try_acquire(clock.now()), Err(ms(100)));
    limit
        .reconfigure(|b| b.rate(100, Duration::from_secs(1)))
        .expect("valid update");
    // The 10 permits taken are 10 intervals of the new rate (100 ms), not of the old (1 s).
    admits_one_every(&limit, &clock, ms(10));
}

#[test]
fn lowering_the_rate_of_a_spent_limit_admits_again_after_one_new_interval() {
    let clock = ManualClock::new();
    let limit = spent_burst_of_ten(10, &clock);
    limit
        .reconfigure(|b| b.rate(5, Duration::from_secs(1)))
        .expect("valid update");
    // The 10 permits taken are 10 intervals of the new rate (2 s): the burst stays spent.
    admits_one_every(&limit, &clock, ms(200));
}

#[test]
fn a_much_lower_rate_and_burst_refuse_for_at_most_one_new_burst_window() {
    let clock = ManualClock::new();
    let limit = spent_burst_of_ten(10, &clock);
    limit
        .reconfigure(|b| b.rate(1, Duration::from_secs(3600)).burst(1))
        .expect("valid update");
    // The 10 permits taken would be 10 hours at the new rate; the new burst is 1 hour's worth:
    // the limit starts spent, not 10 hours behind.
    admits_one_every(&limit, &clock, Duration::from_secs(3600));
}

#[test]
fn a_lower_burst_alone_refuses_for_at_most_its_own_window() {
    let clock = ManualClock::new();
    let limit = spent_burst_of_ten(10, &clock);
    limit.reconfigure(|b| b.burst(1)).expect("valid update");
    // 1 s ahead under the old burst; the new one allows 100 ms: the limit starts spent.
    admits_one_every(&limit, &clock, ms(100));
}

#[test]
fn a_rate_update_rescales_what_is_left_of_the_old_lead_at_the_next_permit_asked_for() {
    let clock = ManualClock::new();
    let limit = spent_burst_of_ten(10, &clock);
    limit
        .reconfigure(|b| b.rate(100, Duration::from_secs(1)))
        .expect("valid update");
    // Until a permit is asked for, the old rate refills: 500 ms later, 5 of the 10 are back
    // (500 ms of lead left), and the 5 still taken count 50 ms at the new rate.
    clock.advance(ms(500));
    for _ in 0..5 {
        assert_eq!(limit.try_acquire(clock.now()), Ok(()));
    }
    assert_eq!(limit.try_acquire(clock.now()), Err(ms(10)));
}

#[test]
fn updates_between_two_permits_rescale_by_the_last_rate_over_the_first() {
    let clock = ManualClock::new();
    let limit = spent_burst_of_ten(10, &clock);
    limit
        .reconfigure(|b| b.rate(100, Duration::from_secs(1)))
        .expect("valid update");
    limit
        .reconfigure(|b| b.rate(20, Duration::from_secs(1)))
        .expect("valid update");
    // 10 taken at 10/s, counted at 20/s: 500 ms of lead, the whole burst.
    admits_one_every(&limit, &clock, ms(50));
}

#[test]
fn the_permit_that_rescales_after_a_rate_update_allocates_nothing() {
    let clock = ManualClock::new();
    let limit = spent_burst_of_ten(10, &clock);
    let update = allocation_counter::measure(|| {
        limit
            .reconfigure(|b| b.rate(100, Duration::from_secs(1)))
            .expect("valid update");
    });
    assert!(
        update.count_total > 0,
        "the counter sees the update's new cell"
    );
    let allocations = allocation_counter::measure(|| {
        assert_eq!(limit.try_acquire(clock.now()), Err(ms(10)));
        assert_eq!(limit.try_acquire(clock.now() + ms(10)), Ok(()));
    });
    assert_eq!(allocations.count_total, 0);
}

#[test]
fn a_rejected_rate_update_changes_nothing_and_says_why() {
    let limit = RateLimit::new(10, Duration::from_secs(1)).expect("valid");
    let clone = limit.clone();
    let error = limit
        .reconfigure(|b| b.rate(0, Duration::from_secs(1)).burst(5))
        .expect_err("invalid");
    assert_eq!(
        error.to_string(),
        "rate_limit.permits must be at least 1 (was 0)"
    );
    assert_eq!(
        (clone.permits(), clone.per(), clone.burst()),
        (10, Duration::from_secs(1), 10)
    );
}
