//! The reconfigured layer's own tests: what an update reaches (each host's policies and
//! breakers, hosts seen later), and what it refuses.

use super::*;
use rampart::breaker::{Breaker, Evidence};
use rampart::hedge::Hedge;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn an_update_reaches_each_policy_of_a_host_and_the_one_attempt_one_stays_at_one() {
    let layer = OutboundLayer::builder()
        .hedge_marked(Hedge::fixed(ms(50)))
        .build()
        .expect("valid layer");
    let host = layer
        .engine
        .host(&HostKey::Borrowed("prices:80"))
        .expect("built");
    layer
        .reconfigure(|s| {
            s.max_attempts = 4;
            s.policy.attempt_timeout = Some(ms(300));
        })
        .expect("valid");
    let hedged = host
        .hedged
        .as_ref()
        .expect("a layer that hedges marked requests");
    let attempts = [&host.full, &host.once, hedged].map(|p| p.settings().max_attempts);
    assert_eq!(attempts, [4, 1, 4]);
    for policy in [&host.full, &host.once, hedged] {
        assert_eq!(policy.settings().attempt_timeout, Some(ms(300)));
    }
}

/// Records `n` failures on `breaker`; whether the last opened it.
fn fail(breaker: &Breaker, n: u32) -> bool {
    let now = rampart::clock::Instant::now();
    let mut opened = false;
    for _ in 0..n {
        let permit = breaker.try_acquire(now).expect("closed");
        opened = permit
            .record(Evidence::Failure, Duration::ZERO, now)
            .is_some();
    }
    opened
}

/// A layer whose hosts' breakers open at 5 failures in a row.
fn five_in_a_row() -> OutboundLayer {
    OutboundLayer::builder()
        .breaker_per_host(Breaker::builder().consecutive_failures(5))
        .build()
        .expect("valid layer")
}

fn breaker_of(layer: &OutboundLayer, key: &str) -> Breaker {
    let host = layer.engine.host(&HostKey::Borrowed(key)).expect("built");
    host.full
        .breaker()
        .cloned()
        .expect("a layer with a breaker")
}

#[test]
fn a_breaker_update_reaches_hosts_in_the_table_keeping_their_counts_and_hosts_seen_later() {
    let layer = five_in_a_row();
    let early = breaker_of(&layer, "early:80");
    assert!(!fail(&early, 2));
    layer
        .reconfigure(|s| s.breaker = s.breaker.take().map(|b| b.consecutive_failures(3)))
        .expect("valid");
    assert_eq!(
        layer.settings().breaker,
        Some(Breaker::builder().consecutive_failures(3))
    );
    // The two failures counted before the update count towards the new threshold.
    assert!(fail(&early, 1));
    let late = breaker_of(&layer, "late:80");
    assert!(!fail(&late, 2));
    assert!(fail(&late, 1));
}

#[test]
fn one_hosts_own_breaker_settings_outlive_updates_that_leave_the_layers_breaker_alone() {
    let layer = five_in_a_row();
    let own = breaker_of(&layer, "own:80");
    own.reconfigure(|b| b.consecutive_failures(2))
        .expect("valid");
    layer
        .reconfigure(|s| s.policy.attempt_timeout = Some(ms(300)))
        .expect("valid");
    assert!(fail(&own, 2));
}

#[test]
fn a_breaker_update_a_running_breaker_or_the_layer_cannot_take_is_refused_naming_it() {
    let layer = five_in_a_row();
    let refused =
        |update: fn(&mut OutboundSettings)| layer.reconfigure(update).unwrap_err().to_string();
    let mode = refused(|s| {
        s.breaker = s
            .breaker
            .take()
            .map(|b| b.failure_ratio(0.5, Duration::from_secs(10), 20));
    });
    assert!(mode.starts_with("breaker"), "{mode}");
    assert!(mode.contains("consecutive"), "{mode}");
    let bad = refused(|s| {
        s.breaker = s.breaker.take().map(|b| b.consecutive_failures(0));
        s.policy.attempt_timeout = Some(Duration::ZERO);
    });
    assert_eq!(
        bad,
        "breaker.consecutive_failures must be at least 1 (was 0); \
         policy.attempt_timeout must be positive (was 0ns)"
    );
    assert!(refused(|s| s.breaker = None).starts_with("breaker cannot be removed live"));
    assert_eq!(
        layer.settings().breaker,
        Some(Breaker::builder().consecutive_failures(5))
    );
    let without = OutboundLayer::builder()
        .no_breaker()
        .build()
        .expect("valid layer");
    let added = without
        .reconfigure(|s| s.breaker = Some(Breaker::builder()))
        .unwrap_err();
    assert!(
        added
            .to_string()
            .starts_with("breaker cannot be added live")
    );
}

#[test]
fn a_host_made_with_the_settings_an_update_replaced_is_brought_up_to_date() {
    let layer = OutboundLayer::builder().build().expect("valid layer");
    let engine = &layer.engine;
    // Made before the update was stored, in the table only after it went through.
    let (generation, before) = engine.live.current();
    let host = engine
        .factory
        .build("late:80", &engine.edge, Some(&before))
        .expect("built");
    layer.reconfigure(|s| s.max_attempts = 5).expect("valid");
    assert_eq!(host.full.settings().max_attempts, 3);
    engine.made(&host, generation);
    assert_eq!(host.full.settings().max_attempts, 5);
}
