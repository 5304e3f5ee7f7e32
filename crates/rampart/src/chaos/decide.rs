//! Deciding an attempt: a seeded draw per kind, call and attempt (so the same seed gives the
//! same injections), counted and reported when it hits.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Chaos, Injection, InjectionKind};
use crate::attempt::Attempt;

impl<T, E> Chaos<T, E> {
    pub(super) fn next_call(&self) -> u64 {
        self.inner.calls.fetch_add(1, Ordering::Relaxed)
    }

    /// Decides attempt `attempt` of call `call`: draws each kind, counts and reports what it
    /// injects, and makes the injected answer.
    pub(super) fn plan(&self, call: u64, attempt: &Attempt) -> Plan<T, E> {
        let inner = &*self.inner;
        let number = attempt.number();
        let mut plan = Plan {
            delay: None,
            answer: None,
        };
        if let Some(delay) = inner.latency
            && self.hits(InjectionKind::Latency, call, number)
        {
            plan.delay = Some(delay);
        }
        if let Some(make) = &inner.fault
            && self.hits(InjectionKind::Fault, call, number)
        {
            plan.answer = Some(Err(make()));
        } else if let Some(make) = &inner.outcome
            && self.hits(InjectionKind::Outcome, call, number)
        {
            plan.answer = Some(Ok(make()));
        }
        plan
    }

    /// Whether `kind` is injected into attempt `number` of call `call`; counts and reports
    /// it if so.
    pub(super) fn hits(&self, kind: InjectionKind, call: u64, number: u32) -> bool {
        let inner = &*self.inner;
        let rate = inner.controls.rate(kind);
        let hit = rate >= 1.0 || (rate > 0.0 && draw(inner.seed, call, number, kind) < rate);
        if hit {
            inner.injected[kind.index()].fetch_add(1, Ordering::Relaxed);
            let injection = Injection {
                kind,
                call,
                attempt: number,
            };
            trace(&injection);
            if let Some(hook) = &inner.on_inject {
                // A panicking hook must not take the call down with it.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(injection)));
            }
        }
        hit
    }
}

/// The decision for one attempt.
pub(super) struct Plan<T, E> {
    pub(super) delay: Option<Duration>,
    pub(super) answer: Option<Result<T, E>>,
}

/// A number in `[0, 1)` drawn for `kind` on attempt `number` of call `call`: splitmix64's
/// finaliser over the seed and the three coordinates, so each decision stands alone.
fn draw(seed: u64, call: u64, number: u32, kind: InjectionKind) -> f64 {
    let lane = (u64::from(number) << 2) | kind.index() as u64;
    let bits = mix(mix(seed ^ mix(call)) ^ lane);
    // The top 53 bits, scaled: every value is exact and below 1.
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// splitmix64's step: an increment by the golden gamma and the finaliser.
fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(feature = "tracing")]
fn trace(injection: &Injection) {
    tracing::debug!(
        target: "rampart::chaos",
        kind = injection.kind.as_str(),
        call = injection.call,
        attempt = injection.attempt,
        "chaos injected"
    );
}

#[cfg(not(feature = "tracing"))]
fn trace(_: &Injection) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_lie_in_the_unit_interval_and_differ_by_kind_call_and_attempt() {
        let first = draw(7, 0, 1, InjectionKind::Fault);
        assert!((0.0..1.0).contains(&first));
        assert_ne!(first, draw(7, 0, 1, InjectionKind::Latency));
        assert_ne!(first, draw(7, 1, 1, InjectionKind::Fault));
        assert_ne!(first, draw(7, 0, 2, InjectionKind::Fault));
        assert_ne!(first, draw(8, 0, 1, InjectionKind::Fault));
        assert_eq!(first, draw(7, 0, 1, InjectionKind::Fault));
    }
}
