//! Unit tests that look inside: the state word, the break arithmetic, stale permits.

use std::time::Duration;

use super::*;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// A breaker of five failures in a row (the word's own count) with exact breaks.
fn exact() -> BreakerBuilder {
    Breaker::builder().consecutive_failures(5).jitter(0.0)
}

fn word(b: &Breaker) -> Word {
    b.shared.load()
}

/// Opens a consecutive-mode breaker with `n` failures at `now`.
fn open(b: &Breaker, n: u32, now: Instant) {
    for _ in 0..n {
        if let Ok(p) = b.try_acquire(now) {
            p.record(Evidence::Failure, MS, now);
        }
    }
    assert_eq!(word(b).kind(), StateKind::Open);
}

#[test]
fn acquiring_and_succeeding_while_closed_with_no_failures_leave_the_word_as_it_was() {
    let b = exact().build().expect("valid breaker");
    let t0 = Instant::now();
    let before = word(&b);
    for _ in 0..3 {
        let p = b.try_acquire(t0).unwrap();
        assert_eq!(word(&b), before);
        assert_eq!(p.record(Evidence::Success, MS, t0), None);
        assert_eq!(word(&b), before);
    }
}

#[test]
fn failures_count_in_the_word_and_a_success_clears_them() {
    let b = exact().build().expect("valid breaker");
    let t0 = Instant::now();
    for n in 1..=3 {
        b.try_acquire(t0).unwrap().record(Evidence::Failure, MS, t0);
        assert_eq!(word(&b).failures(), n);
    }
    b.try_acquire(t0).unwrap().record(Evidence::Success, MS, t0);
    assert_eq!(word(&b), Word::closed(0, 0));
}

#[test]
fn the_break_doubles_per_opening_and_stops_at_the_cap() {
    let b = exact().build().expect("valid breaker");
    let mut rng = fastrand::Rng::with_seed(1);
    let secs = |openings| Duration::from_nanos(b.shared.break_nanos(openings, &mut rng));
    let got: Vec<_> = [1, 2, 3, 4, 5, 64, u32::MAX]
        .into_iter()
        .map(secs)
        .collect();
    let want = [15, 30, 60, 120, 120, 120, 120].map(Duration::from_secs);
    assert_eq!(got, want);
}

#[test]
fn the_break_never_overflows_with_huge_settings() {
    let b = exact()
        .break_duration(Duration::MAX)
        .max_break(Duration::MAX)
        .build()
        .unwrap();
    let mut rng = fastrand::Rng::with_seed(1);
    assert_eq!(b.shared.break_nanos(1, &mut rng), u64::MAX);
    assert_eq!(b.shared.break_nanos(u32::MAX, &mut rng), u64::MAX);
}

#[test]
fn jitter_keeps_every_break_within_its_fraction_and_at_least_one_nanosecond() {
    let b = Breaker::builder()
        .jitter(0.25)
        .build()
        .expect("valid breaker");
    let mut rng = fastrand::Rng::with_seed(3);
    let nominal = 15 * SEC;
    for _ in 0..10_000 {
        let d = Duration::from_nanos(b.shared.break_nanos(1, &mut rng));
        assert!(d <= nominal && d > nominal * 3 / 4, "{d:?}");
    }
    let tiny = Breaker::builder()
        .break_duration(Duration::from_nanos(1))
        .jitter(0.999)
        .build()
        .unwrap();
    for _ in 0..100 {
        assert_eq!(tiny.shared.break_nanos(1, &mut rng), 1);
    }
}

#[test]
fn a_probe_from_an_earlier_half_open_period_does_not_touch_the_next_one() {
    let b = exact().half_open_probes(2).build().expect("valid breaker");
    let t0 = Instant::now();
    open(&b, 5, t0);
    let now = t0 + 15 * SEC;
    let failing = b.try_acquire(now).unwrap();
    let stale = b.try_acquire(now).unwrap();
    assert_eq!(word(&b).in_flight(), 2);
    failing.record(Evidence::Failure, MS, now).unwrap();
    let later = now + 30 * SEC;
    let current = b.try_acquire(later).unwrap();
    assert_eq!(word(&b).in_flight(), 1);
    drop(stale);
    assert_eq!(word(&b).in_flight(), 1, "the stale probe freed nothing");
    assert_eq!(current.record(Evidence::Success, MS, later), None);
    assert_eq!((word(&b).in_flight(), word(&b).successes()), (0, 1));
}

#[test]
fn a_permit_from_an_earlier_closed_period_does_not_count_in_the_window() {
    let b = exact()
        .failure_ratio(0.5, 10 * SEC, 2)
        .build()
        .expect("valid breaker");
    let t0 = Instant::now();
    let stale = b.try_acquire(t0).unwrap();
    open(&b, 2, t0);
    let now = t0 + 15 * SEC;
    for _ in 0..2 {
        b.try_acquire(now)
            .unwrap()
            .record(Evidence::Success, MS, now);
    }
    assert_eq!(word(&b).kind(), StateKind::Closed);
    assert_eq!(stale.record(Evidence::Failure, MS, now), None);
    assert_eq!(
        b.shared
            .window
            .as_ref()
            .unwrap()
            .counts(15 * 1_000_000_000)
            .total,
        0
    );
}

#[test]
fn every_transition_gets_a_new_generation() {
    let b = exact()
        .consecutive_failures(1)
        .probe_successes(1)
        .build()
        .unwrap();
    let t0 = Instant::now();
    let mut seen = vec![word(&b).generation()];
    open(&b, 1, t0);
    let probe = b.try_acquire(t0 + 15 * SEC).unwrap();
    seen.push(word(&b).generation());
    probe.record(Evidence::Success, MS, t0 + 15 * SEC).unwrap();
    seen.push(word(&b).generation());
    b.isolate(t0).unwrap();
    seen.push(word(&b).generation());
    b.reset(t0).unwrap();
    seen.push(word(&b).generation());
    assert_eq!(seen, [0, 1, 2, 3, 4]);
}

#[test]
fn debug_shows_the_settings_and_the_state_kind() {
    let b = Breaker::builder().build().expect("valid breaker");
    let text = format!("{b:?}");
    assert!(
        text.starts_with(
            "Breaker { config: Config { mode: Ratio { ratio: 1.0, window: 10s, min_throughput: 100 }"
        ),
        "{text}"
    );
    assert!(text.ends_with("state: Closed }"), "{text}");
    let p = b.try_acquire(Instant::now()).unwrap();
    assert_eq!(
        format!("{p:?}"),
        "BreakerPermit { is_probe: false, transition: None, .. }"
    );
}

#[test]
fn state_kinds_have_stable_label_names_and_display_them() {
    let names = [
        StateKind::Closed,
        StateKind::Open,
        StateKind::HalfOpen,
        StateKind::Isolated,
    ]
    .map(|kind| (kind.as_str(), kind.to_string()));
    assert_eq!(
        names.map(|(label, shown)| {
            assert_eq!(label, shown);
            label
        }),
        ["closed", "open", "half_open", "isolated"]
    );
}

#[test]
fn switching_inside_the_closed_family_keeps_the_generation() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    let mut seen = vec![word(&b).generation()];
    b.force_closed(t0).unwrap();
    seen.push(word(&b).generation());
    b.release(t0).unwrap();
    seen.push(word(&b).generation());
    b.isolate(t0).unwrap();
    seen.push(word(&b).generation());
    b.force_closed(t0).unwrap();
    seen.push(word(&b).generation());
    b.release(t0).unwrap();
    seen.push(word(&b).generation());
    b.force_closed(t0).unwrap();
    b.reset(t0).unwrap();
    seen.push(word(&b).generation());
    assert_eq!(
        seen,
        [0, 0, 0, 1, 2, 2, 2],
        "closed <-> forced closed keep it; to and from isolated take a new one"
    );
}

#[test]
fn force_closed_from_closed_carries_the_count_and_release_carries_it_back() {
    let b = exact().build().unwrap();
    let t0 = Instant::now();
    for _ in 0..3 {
        b.try_acquire(t0).unwrap().record(Evidence::Failure, MS, t0);
    }
    b.force_closed(t0).unwrap();
    assert_eq!(
        (word(&b).kind(), word(&b).failures()),
        (StateKind::ForcedClosed, 3)
    );
    b.try_acquire(t0).unwrap().record(Evidence::Failure, MS, t0);
    b.release(t0).unwrap();
    assert_eq!(word(&b), Word::closed(0, 4));
}

#[test]
fn an_update_that_changes_nothing_keeps_no_settings_allocated() {
    let b = exact().build().unwrap();
    b.reconfigure(|same| same).unwrap();
    b.reconfigure(|_| exact()).unwrap();
    assert_eq!(b.shared.updates(), 0);
    b.reconfigure(|b| b.consecutive_failures(3)).unwrap();
    b.reconfigure(|b| b.consecutive_failures(3)).unwrap();
    assert_eq!(b.shared.updates(), 1);
}
