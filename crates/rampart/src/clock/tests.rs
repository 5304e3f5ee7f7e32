use super::*;

#[tokio::test]
async fn manual_sleep_completes_only_when_time_is_advanced_to_its_deadline() {
    let manual = ManualClock::new();
    let clock = Clock::from(manual.clone());
    let deadline = clock.now() + Duration::from_secs(5);
    let task = tokio::spawn({
        let clock = clock.clone();
        async move { clock.sleep_until(deadline).await }
    });
    while manual.sleepers() == 0 {
        tokio::task::yield_now().await;
    }
    manual.advance(Duration::from_millis(4_999));
    tokio::task::yield_now().await;
    assert!(!task.is_finished());
    manual.advance(Duration::from_millis(1));
    task.await.expect("sleep task");
    assert_eq!(manual.sleepers(), 0);
}

#[test]
fn dropped_manual_sleep_leaves_no_sleeper_behind() {
    let manual = ManualClock::new();
    let clock = Clock::from(manual.clone());
    let mut sleep = Box::pin(clock.sleep_until(clock.now() + Duration::from_secs(1)));
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    assert_eq!(manual.sleepers(), 1);
    drop(sleep);
    assert_eq!(manual.sleepers(), 0);
}

#[test]
fn advancing_by_the_longest_duration_saturates_and_wakes_every_sleeper() {
    let manual = ManualClock::new();
    let clock = Clock::from(manual.clone());
    let start = clock.now();
    let far = saturating_add(start, Duration::from_secs(100 * 365 * 24 * 3600));
    let mut sleep = Box::pin(clock.sleep_until(far));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    manual.advance(Duration::MAX);
    let end = manual.now();
    assert!(end >= far, "saturated at the latest instant, not wrapped");
    assert!(sleep.as_mut().poll(&mut cx).is_ready());
    assert_eq!(manual.sleepers(), 0);
    manual.advance(Duration::MAX);
    manual.advance(Duration::from_secs(1));
    assert_eq!(manual.now(), end, "time stands still at the end");
}

#[test]
fn saturating_add_is_exact_when_it_fits_and_the_latest_instant_when_not() {
    let now = Instant::now();
    assert_eq!(
        saturating_add(now, Duration::from_secs(5)),
        now + Duration::from_secs(5)
    );
    let end = saturating_add(now, Duration::MAX);
    assert!(end.checked_add(Duration::from_nanos(1)).is_none());
    assert_eq!(saturating_add(end, Duration::from_secs(1)), end);
}

#[test]
fn blocking_wait_returns_when_time_is_advanced_from_another_thread() {
    let manual = ManualClock::new();
    let clock = Clock::from(manual.clone());
    let deadline = clock.now() + Duration::from_secs(30);
    let waiter = std::thread::spawn(move || clock.block_until(deadline, None));
    while manual.sleepers() == 0 {
        std::thread::yield_now();
    }
    manual.advance(Duration::from_secs(30));
    assert!(!waiter.join().expect("waiter thread"));
}

#[test]
fn next_due_is_the_earliest_sleeper_or_scheduled_cancellation() {
    let manual = ManualClock::new();
    let clock = Clock::from(manual.clone());
    assert_eq!(manual.next_due(), None);
    let start = clock.now();
    let mut sleep = Box::pin(clock.sleep_until(start + Duration::from_secs(5)));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    assert_eq!(manual.next_due(), Some(start + Duration::from_secs(5)));
    let guard = clock.cancel_at(start + Duration::from_secs(2), CancellationToken::new());
    assert_eq!(manual.next_due(), Some(start + Duration::from_secs(2)));
    assert_eq!(manual.next_deadline(), Some(start + Duration::from_secs(5)));
    drop(guard);
    assert_eq!(manual.next_due(), Some(start + Duration::from_secs(5)));
}

#[test]
fn a_woken_sleeper_counts_as_unobserved_until_its_future_is_polled_or_dropped() {
    let manual = ManualClock::new();
    let clock = Clock::from(manual.clone());
    let mut cx = Context::from_waker(Waker::noop());
    let mut polled = Box::pin(clock.sleep_until(clock.now() + Duration::from_secs(1)));
    let dropped = {
        let mut sleep = Box::pin(clock.sleep_until(clock.now() + Duration::from_secs(1)));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        sleep
    };
    assert!(polled.as_mut().poll(&mut cx).is_pending());
    let before = manual.activity();
    assert_eq!(before.unobserved, 0);
    manual.advance(Duration::from_secs(1));
    assert_eq!(manual.activity().unobserved, 2);
    assert!(polled.as_mut().poll(&mut cx).is_ready());
    assert_eq!(manual.activity().unobserved, 1);
    drop(dropped);
    let after = manual.activity();
    assert_eq!(after.unobserved, 0);
    assert_ne!(after.generation, before.generation);
}
