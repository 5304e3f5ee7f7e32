//! Properties of the breaker under random sequences of acquires, outcomes, dropped permits,
//! time steps, isolation, forcing closed, releases, resets and live threshold changes, checked
//! against a reference model.
// Test helpers and property bodies unwrap: a failure is the test's report.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;
use rampart::breaker::*;
use rampart::clock::Instant;

const SLOW: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Record {
        pick: usize,
        evidence: Evidence,
        elapsed: Duration,
    },
    Drop {
        pick: usize,
    },
    Advance(Duration),
    Isolate,
    ForceClosed,
    Release,
    Reset,
    /// `Breaker::reconfigure` with these thresholds.
    Reconfigure {
        failures: u32,
        probe_successes: u32,
    },
}

fn evidence() -> impl Strategy<Value = Evidence> {
    prop_oneof![
        Just(Evidence::Success),
        Just(Evidence::Failure),
        Just(Evidence::Ignored)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => Just(Op::Acquire),
        8 => (any::<usize>(), evidence(), 0..2_000u64).prop_map(|(pick, evidence, ms)| {
            Op::Record { pick, evidence, elapsed: Duration::from_millis(ms) }
        }),
        2 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
        4 => (0..40_000u64).prop_map(|ms| Op::Advance(Duration::from_millis(ms))),
        1 => Just(Op::Isolate),
        1 => Just(Op::ForceClosed),
        1 => Just(Op::Release),
        1 => Just(Op::Reset),
        1 => (1..=5u32, 1..=3u32).prop_map(|(failures, probe_successes)| {
            Op::Reconfigure { failures, probe_successes }
        }),
    ]
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    failures: u32,
    probes: u32,
    probe_successes: u32,
    base: Duration,
    max: Duration,
    probe_timeout: Duration,
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        1..=5u32,
        1..=3u32,
        1..=3u32,
        1..=20u64,
        1..=10u32,
        1..=60u64,
    )
        .prop_map(|(f, p, s, base, k, probe_timeout)| Settings {
            failures: f,
            probes: p,
            probe_successes: s,
            base: Duration::from_secs(base),
            max: Duration::from_secs(base) * k,
            probe_timeout: Duration::from_secs(probe_timeout),
        })
}

/// What the breaker should do, one period (epoch) at a time: a permit counts only in the
/// epoch it was admitted in. Closed and forced closed are one epoch across a switch between
/// them (`force_closed` from closed and `release` from forced closed keep the count, `reset`
/// from forced closed clears it), and an outcome counts by the state it is recorded in.
struct Model {
    s: Settings,
    kind: StateKind,
    epoch: u64,
    failures: u32,
    open_until: Instant,
    in_flight: u32,
    successes: u32,
    openings: u32,
    /// When the last probe of this half-open period was let in.
    probe_since: Instant,
}

impl Model {
    fn enter(&mut self, to: StateKind) -> Transition {
        let from = self.kind;
        self.kind = to;
        self.epoch += 1;
        (self.in_flight, self.successes) = (0, 0);
        (from, to, None).into_transition()
    }

    /// A switch inside the closed family: the same epoch, the failures kept.
    fn switch(&mut self, to: StateKind) -> Transition {
        let from = self.kind;
        self.kind = to;
        (from, to, None).into_transition()
    }

    fn open(&mut self, now: Instant) -> Transition {
        self.openings += 1;
        let nominal = self.s.base * 2u32.saturating_pow(self.openings - 1).min(1 << 20);
        let pause = nominal.min(self.s.max);
        self.open_until = now + pause;
        let mut t = self.enter(StateKind::Open);
        t.break_duration = Some(pause);
        t
    }

    /// What an acquire at `now` gives: whether the permit is a probe, the transition taking
    /// it caused, and the re-opening by expired probes that came just before.
    #[allow(clippy::type_complexity)]
    fn acquire(
        &mut self,
        now: Instant,
    ) -> Result<(bool, Option<Transition>, Option<Transition>), Rejected> {
        let refused = |retry_after| Rejected {
            retry_after,
            transition: None,
        };
        match self.kind {
            StateKind::Closed | StateKind::ForcedClosed => Ok((false, None, None)),
            StateKind::Isolated => Err(refused(None)),
            StateKind::HalfOpen if self.in_flight < self.s.probes => {
                self.in_flight += 1;
                self.probe_since = now;
                Ok((true, None, None))
            }
            StateKind::HalfOpen if now < self.probe_since + self.s.probe_timeout => {
                Err(refused(None))
            }
            StateKind::HalfOpen => {
                // Every probe in flight outlived the probe timeout: they count as failed, and
                // the break runs from that timeout. A caller after the break is a trial.
                let expired = self.open(self.probe_since + self.s.probe_timeout);
                if now < self.open_until {
                    return Err(Rejected {
                        retry_after: Some(self.open_until - now),
                        transition: Some(expired),
                    });
                }
                let t = self.enter(StateKind::HalfOpen);
                self.in_flight = 1;
                self.probe_since = now;
                Ok((true, Some(t), Some(expired)))
            }
            StateKind::Open if now < self.open_until => Err(refused(Some(self.open_until - now))),
            StateKind::Open => {
                let t = self.enter(StateKind::HalfOpen);
                self.in_flight = 1;
                self.probe_since = now;
                Ok((true, Some(t), None))
            }
        }
    }

    fn record(
        &mut self,
        epoch: u64,
        probe: bool,
        e: Evidence,
        took: Duration,
        now: Instant,
    ) -> Option<Transition> {
        let e = match e {
            Evidence::Success if took >= SLOW => Evidence::Failure,
            e => e,
        };
        if epoch != self.epoch {
            return None;
        }
        match (probe, e) {
            (_, Evidence::Ignored) => {
                self.in_flight -= u32::from(probe);
                None
            }
            (true, Evidence::Failure) => Some(self.open(now)),
            (true, Evidence::Success) => {
                self.in_flight -= 1;
                self.successes += 1;
                (self.successes >= self.s.probe_successes).then(|| self.close())
            }
            (false, Evidence::Success) => {
                self.failures = 0;
                None
            }
            (false, Evidence::Failure) => {
                self.failures += 1;
                let forced = self.kind == StateKind::ForcedClosed;
                (!forced && self.failures >= self.s.failures).then(|| self.open(now))
            }
        }
    }

    fn close(&mut self) -> Transition {
        (self.failures, self.openings) = (0, 0);
        self.enter(StateKind::Closed)
    }

    fn state(&self, now: Instant) -> BreakerState {
        match self.kind {
            StateKind::Closed => BreakerState::Closed,
            StateKind::HalfOpen => BreakerState::HalfOpen,
            StateKind::Isolated => BreakerState::Isolated,
            StateKind::ForcedClosed => BreakerState::ForcedClosed,
            StateKind::Open => BreakerState::Open {
                remaining: self.open_until.saturating_duration_since(now),
            },
        }
    }
}

trait IntoTransition {
    fn into_transition(self) -> Transition;
}

/// `Transition` is `#[non_exhaustive]`: start from a real one and set its fields.
impl IntoTransition for (StateKind, StateKind, Option<Duration>) {
    fn into_transition(self) -> Transition {
        let b = Breaker::builder().consecutive_failures(1).build().unwrap();
        let now = Instant::now();
        let mut t = b
            .try_acquire(now)
            .unwrap()
            .record(Evidence::Failure, SLOW, now)
            .unwrap();
        (t.from, t.to, t.break_duration) = self;
        t
    }
}

#[path = "support/cases.rs"]
mod support;
use support::cases;

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn the_breaker_follows_the_model(s in settings(), ops in prop::collection::vec(op(), 1..120)) {
        let b = Breaker::builder()
            .consecutive_failures(s.failures)
            .half_open_probes(s.probes)
            .probe_successes(s.probe_successes)
            .break_duration(s.base)
            .max_break(s.max)
            .probe_timeout(s.probe_timeout)
            .slow_call(SLOW)
            .jitter(0.0)
            .build()
            .unwrap();
        let mut now = Instant::now();
        let mut m = Model {
            s, kind: StateKind::Closed, epoch: 0, failures: 0, open_until: now,
            in_flight: 0, successes: 0, openings: 0, probe_since: now,
        };
        let mut held: Vec<(BreakerPermit<'_>, u64)> = Vec::new();
        let mut last_to = StateKind::Closed;
        for op in ops {
            let failures_before = m.failures;
            let got = match op {
                Op::Acquire => {
                    let want = m.acquire(now);
                    match (b.try_acquire(now), want) {
                        (Ok(p), Ok((probe, t, expired))) => {
                            prop_assert_eq!(p.is_probe(), probe);
                            prop_assert_eq!(p.transition(), t);
                            prop_assert_eq!(p.expired(), expired);
                            if let Some(e) = expired {
                                prop_assert_eq!(e.from, last_to, "transitions form one chain");
                                last_to = e.to;
                            }
                            let t = p.transition();
                            held.push((p, m.epoch));
                            t
                        }
                        (Err(r), Err(want)) => { prop_assert_eq!(r, want); r.transition }
                        (got, want) => {
                            return Err(TestCaseError::fail(format!("acquire: {got:?}, model {want:?}")));
                        }
                    }
                }
                Op::Record { pick, evidence, elapsed } if !held.is_empty() => {
                    let (p, epoch) = held.swap_remove(pick % held.len());
                    let probe = p.is_probe();
                    let want = m.record(epoch, probe, evidence, elapsed, now);
                    let got = p.record(evidence, elapsed, now);
                    prop_assert_eq!(got, want);
                    if let Some(t) = got.filter(|t| t.from == StateKind::Closed && t.to == StateKind::Open) {
                        prop_assert!(failures_before + 1 >= m.s.failures, "{:?} after {} failures", t, failures_before);
                    }
                    got
                }
                Op::Drop { pick } if !held.is_empty() => {
                    let (p, epoch) = held.swap_remove(pick % held.len());
                    m.record(epoch, p.is_probe(), Evidence::Ignored, Duration::ZERO, now);
                    drop(p);
                    None
                }
                Op::Record { .. } | Op::Drop { .. } => None,
                Op::Advance(d) => { now += d; None }
                Op::Isolate => {
                    let want = (m.kind != StateKind::Isolated).then(|| m.enter(StateKind::Isolated));
                    let got = b.isolate(now);
                    prop_assert_eq!(got, want);
                    got
                }
                Op::ForceClosed => {
                    let want = match m.kind {
                        StateKind::ForcedClosed => None,
                        StateKind::Closed => Some(m.switch(StateKind::ForcedClosed)),
                        _ => {
                            m.failures = 0;
                            Some(m.enter(StateKind::ForcedClosed))
                        }
                    };
                    let got = b.force_closed(now);
                    prop_assert_eq!(got, want);
                    got
                }
                Op::Release => {
                    let want = match m.kind {
                        StateKind::Isolated => {
                            (m.failures, m.openings) = (0, 0);
                            Some(m.enter(StateKind::Closed))
                        }
                        StateKind::ForcedClosed => {
                            m.openings = 0;
                            Some(m.switch(StateKind::Closed))
                        }
                        _ => None,
                    };
                    let got = b.release(now);
                    prop_assert_eq!(got, want);
                    got
                }
                Op::Reconfigure { failures, probe_successes } => {
                    b.reconfigure(|b| b.consecutive_failures(failures).probe_successes(probe_successes))
                        .unwrap();
                    (m.s.failures, m.s.probe_successes) = (failures, probe_successes);
                    None
                }
                Op::Reset => {
                    let want = match m.kind {
                        StateKind::Closed => { m.failures = 0; None }
                        // Inside the closed family: the same epoch, the count cleared.
                        StateKind::ForcedClosed => { m.failures = 0; Some(m.switch(StateKind::Closed)) }
                        _ => Some(m.close()),
                    };
                    m.openings = 0;
                    let got = b.reset(now);
                    prop_assert_eq!(got, want);
                    got
                }
            };
            if let Some(t) = got {
                prop_assert_eq!(t.from, last_to, "transitions form one chain");
                prop_assert_eq!(t.break_duration.is_some(), t.to == StateKind::Open);
                last_to = t.to;
            }
            let state = b.state(now);
            prop_assert_eq!(state, m.state(now));
            prop_assert_eq!(state.kind(), last_to, "the state is the last transition's target");
            let probes = held.iter().filter(|(p, e)| p.is_probe() && *e == m.epoch).count();
            let probes = if m.kind == StateKind::HalfOpen { probes } else { 0 };
            prop_assert_eq!(probes, m.in_flight as usize);
            prop_assert!(probes <= s.probes as usize, "{} probes in flight", probes);
        }
    }

    #[test]
    fn ratio_mode_opens_only_with_enough_failures_in_the_window(
        ratio_pct in prop::sample::select(vec![25u32, 50, 75, 100]),
        min in 1..=10u32,
        steps in prop::collection::vec((any::<bool>(), 0..3_000u64), 1..200),
    ) {
        let window = Duration::from_secs(10);
        let ratio = f64::from(ratio_pct) / 100.0;
        let b = Breaker::builder().failure_ratio(ratio, window, min).jitter(0.0).build().unwrap();
        let mut now = Instant::now();
        let mut log: Vec<(Instant, bool)> = Vec::new();
        for (failure, ms) in steps {
            now += Duration::from_millis(ms);
            let evidence = if failure { Evidence::Failure } else { Evidence::Success };
            let got = b.try_acquire(now).unwrap().record(evidence, SLOW / 10, now);
            log.push((now, failure));
            if let Some(t) = got {
                prop_assert!(failure, "only a failure opens it");
                let recent: Vec<_> = log.iter().filter(|(at, _)| now - *at < window).collect();
                let failures = recent.iter().filter(|(_, f)| *f).count() as f64;
                prop_assert!(recent.len() >= min as usize, "{} calls in the window", recent.len());
                prop_assert!(failures >= (ratio * f64::from(min)).ceil(), "{} failures", failures);
                prop_assert_eq!(t.to, StateKind::Open);
                b.reset(now).unwrap();
                log.clear();
            }
        }
    }
}
