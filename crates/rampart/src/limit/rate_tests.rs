use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_full_burst_is_admitted_at_once_then_permits_come_one_interval_apart() {
    let limit = RateLimit::builder(10, Duration::from_secs(1))
        .burst(3)
        .build()
        .expect("valid");
    let t0 = Instant::now();
    for _ in 0..3 {
        assert_eq!(limit.try_acquire(t0), Ok(()));
    }
    assert_eq!(limit.try_acquire(t0), Err(100 * MS));
    assert_eq!(limit.try_acquire(t0 + 99 * MS), Err(MS));
    assert_eq!(limit.try_acquire(t0 + 100 * MS), Ok(()));
    assert_eq!(limit.try_acquire(t0 + 100 * MS), Err(100 * MS));
}

#[test]
fn a_quiet_spell_refills_no_more_than_the_burst() {
    let limit = RateLimit::new(2, Duration::from_secs(1)).expect("valid");
    let t0 = Instant::now();
    assert_eq!(limit.try_acquire(t0), Ok(()));
    let later = t0 + Duration::from_secs(3600);
    assert_eq!(limit.try_acquire(later), Ok(()));
    assert_eq!(limit.try_acquire(later), Ok(()));
    assert_eq!(limit.try_acquire(later), Err(500 * MS));
}

#[test]
fn the_sustained_rate_is_never_exceeded_when_the_interval_is_rounded() {
    // 3 a second: 333_333_333.3 ns between permits, rounded up.
    let limit = RateLimit::builder(3, Duration::from_secs(1))
        .burst(1)
        .build()
        .expect("valid");
    let t0 = Instant::now();
    let mut admitted = 0;
    for ms in 0..=10_000u32 {
        if limit.try_acquire(t0 + ms * MS).is_ok() {
            admitted += 1;
        }
    }
    // Over 10 s at 3 a second, the first at t0: at most 31 (on this 1 ms grid, 30).
    assert!((29..=31).contains(&admitted), "{admitted}");
}

#[test]
fn an_instant_before_the_first_is_treated_as_the_first() {
    let limit = RateLimit::new(1, Duration::from_secs(1)).expect("valid");
    let t0 = Instant::now() + Duration::from_secs(10);
    assert_eq!(limit.try_acquire(t0), Ok(()));
    let earlier = t0 - Duration::from_secs(5);
    assert_eq!(limit.try_acquire(earlier), Err(Duration::from_secs(1)));
}

#[test]
fn a_lead_is_rescaled_rounded_up_and_a_tat_behind_now_is_left_alone() {
    assert_eq!(rescale(1_000, 400, 100, 10), 460);
    assert_eq!(rescale(1_000, 400, 100, 300), 2_200);
    // 600 × 7 / 3 = 1400 exactly; 601 × 7 / 3 = 1402.33, rounded up.
    assert_eq!(rescale(1_000, 400, 3, 7), 1_800);
    assert_eq!(rescale(1_001, 400, 3, 7), 1_803);
    assert_eq!(rescale(300, 400, 100, 10), 300);
    assert_eq!(rescale(u64::MAX >> 2, 0, 1, u64::MAX), MAX_TAT);
}

#[test]
fn permits_asked_for_at_one_instant_across_rate_updates_take_exactly_the_burst() {
    // All at one instant, so nothing refills: whatever the updates in between, the burst
    // is taken exactly once (each rescale keeps the permits taken, counted in the new
    // interval; a permit taken in a cell whose TAT was being moved would be one too many).
    const BURST: u32 = 100_000;
    let limit = RateLimit::builder(10, Duration::from_secs(1))
        .burst(BURST)
        .build()
        .expect("valid");
    let t0 = Instant::now();
    let admitted = std::sync::atomic::AtomicU32::new(0);
    let spent = std::sync::atomic::AtomicU32::new(0);
    let mut updates = 0;
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                // Spent for good once refused: time does not pass.
                while limit.try_acquire(t0).is_ok() {
                    admitted.fetch_add(1, Relaxed);
                }
                spent.fetch_add(1, Relaxed);
            });
        }
        for permits in [20, 7, 10, 1_000, 3].into_iter().cycle() {
            if spent.load(Relaxed) == 3 {
                break;
            }
            limit
                .reconfigure(|b| b.rate(permits, Duration::from_secs(1)))
                .expect("valid");
            updates += 1;
        }
    });
    assert_eq!(admitted.into_inner(), BURST, "after {updates} updates");
}

#[test]
fn a_long_run_of_updates_with_no_permit_between_is_walked_and_dropped_without_recursion() {
    let limit = RateLimit::builder(10, Duration::from_secs(1))
        .burst(1)
        .build()
        .expect("valid");
    let t0 = Instant::now();
    assert_eq!(limit.try_acquire(t0), Ok(()));
    for n in 0..100_000u32 {
        let permits = if n % 2 == 0 { 20 } else { 10 };
        limit
            .reconfigure(|b| b.rate(permits, Duration::from_secs(1)))
            .expect("valid");
    }
    // Back at 10 a second: the permit taken is 100 ms ahead, as it was.
    assert_eq!(limit.try_acquire(t0), Err(100 * MS));
    drop(limit);
}

#[test]
fn invalid_settings_are_all_reported_with_their_values() {
    let err = RateLimit::builder(0, Duration::ZERO)
        .burst(0)
        .build()
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "rate_limit.permits must be at least 1 (was 0); rate_limit.per must be positive (was 0ns); rate_limit.burst must be at least 1 (was 0)"
    );
    let err = RateLimit::new(2_000, Duration::from_micros(1)).expect_err("too fast");
    assert_eq!(
        err.to_string(),
        "rate_limit.per must give each permit at least 1ns: at most 1e9 permits a second (was 2000 per 1µs)"
    );
}

#[test]
fn extreme_settings_are_refused_or_work_without_overflow() {
    let err = RateLimit::builder(1, Duration::MAX)
        .burst(u32::MAX)
        .build()
        .expect_err("too long");
    assert_eq!(err.problems().len(), 2, "{err}");
    let slow = RateLimit::builder(1, MAX_PER)
        .burst(100)
        .build()
        .expect("valid");
    let t0 = Instant::now();
    assert_eq!(slow.try_acquire(t0), Ok(()));
    // A quiet spell longer than the burst's 100 years of refill, and the burst taken then:
    // 250 years on, still below `MAX_TAT`.
    let far = t0 + Duration::from_secs(150 * 365 * 24 * 3600);
    for _ in 0..100 {
        assert_eq!(slow.try_acquire(far), Ok(()));
    }
    assert_eq!(slow.try_acquire(far), Err(MAX_PER));
    let fast = RateLimit::builder(u32::MAX, Duration::from_secs(10))
        .burst(u32::MAX)
        .build()
        .expect("valid");
    for _ in 0..1_000 {
        assert_eq!(fast.try_acquire(t0), Ok(()));
    }
}
