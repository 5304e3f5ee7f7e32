//! The `metrics` feature: every handle registered once per policy, recorded per event.
//!
//! A label set is static per policy (its name and an enum's stable name), so each
//! combination gets its own handle at build time, indexed by the enum; recording is an index
//! and a call into the recorder's handle, with no key built and nothing allocated.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Unit};

use super::{Gauges, Parts};

use crate::breaker::StateKind;
use crate::event::Event;
use crate::outcome::StreamEnd;
use crate::outcome::{AttemptOutcome, StopReason};

const STOPS: [StopReason; 10] = [
    StopReason::Succeeded,
    StopReason::Permanent,
    StopReason::AttemptsExhausted,
    StopReason::DeadlineExceeded,
    StopReason::BudgetExhausted,
    StopReason::DependencyUnavailable,
    StopReason::Overloaded,
    StopReason::Draining,
    StopReason::Cancelled,
    StopReason::Config,
];

const OUTCOMES: [AttemptOutcome; 7] = [
    AttemptOutcome::Ok,
    AttemptOutcome::Transient,
    AttemptOutcome::Throttled,
    AttemptOutcome::Permanent,
    AttemptOutcome::Refused,
    AttemptOutcome::TimedOut,
    AttemptOutcome::Cancelled,
];

const STATES: [StateKind; 5] = [
    StateKind::Closed,
    StateKind::Open,
    StateKind::HalfOpen,
    StateKind::Isolated,
    StateKind::ForcedClosed,
];

const ENDS: [StreamEnd; 7] = [
    StreamEnd::Completed,
    StreamEnd::Failed,
    StreamEnd::IdleTimeout,
    StreamEnd::DeadlineExceeded,
    StreamEnd::Draining,
    StreamEnd::Cancelled,
    StreamEnd::Dropped,
];

// The tables above are indexed by `variant as usize` (in order, pinned by the test below).
// These matches list every variant with no wildcard, so adding one fails to compile here until
// its table gains it; the assertions check the tables' lengths against them.
const fn every_stop(s: StopReason) -> usize {
    match s {
        StopReason::Succeeded
        | StopReason::Permanent
        | StopReason::AttemptsExhausted
        | StopReason::DeadlineExceeded
        | StopReason::BudgetExhausted
        | StopReason::DependencyUnavailable
        | StopReason::Overloaded
        | StopReason::Draining
        | StopReason::Cancelled
        | StopReason::Config => 10,
    }
}

const fn every_outcome(o: AttemptOutcome) -> usize {
    match o {
        AttemptOutcome::Ok
        | AttemptOutcome::Transient
        | AttemptOutcome::Throttled
        | AttemptOutcome::Permanent
        | AttemptOutcome::Refused
        | AttemptOutcome::TimedOut
        | AttemptOutcome::Cancelled => 7,
    }
}

const fn every_state(k: StateKind) -> usize {
    match k {
        StateKind::Closed
        | StateKind::Open
        | StateKind::HalfOpen
        | StateKind::Isolated
        | StateKind::ForcedClosed => 5,
    }
}

const fn every_end(e: StreamEnd) -> usize {
    match e {
        StreamEnd::Completed
        | StreamEnd::Failed
        | StreamEnd::IdleTimeout
        | StreamEnd::DeadlineExceeded
        | StreamEnd::Draining
        | StreamEnd::Cancelled
        | StreamEnd::Dropped => 7,
    }
}

const _: () = assert!(ENDS.len() == every_end(StreamEnd::Completed));
const _: () = assert!(STOPS.len() == every_stop(StopReason::Succeeded));
const _: () = assert!(OUTCOMES.len() == every_outcome(AttemptOutcome::Ok));
const _: () = assert!(STATES.len() == every_state(StateKind::Closed));

const TIMEOUTS: [&str; 3] = ["timed_out", "ignored", "orphaned"];
const REJECTIONS: [&str; 5] = ["breaker", "budget", "overloaded", "rate", "draining"];
const HEDGES: [&str; 4] = ["started", "won", "discarded", "suppressed"];
const DRY_RUN: [&str; 3] = ["breaker", "overloaded", "rate"];
const DRY_BREAKER: usize = 0;
const DRY_OVERLOADED: usize = 1;
const DRY_RATE: usize = 2;

const TIMED_OUT: usize = 0;
const IGNORED: usize = 1;
const ORPHANED: usize = 2;
const BREAKER: usize = 0;
const BUDGET: usize = 1;
const OVERLOADED: usize = 2;
const RATE: usize = 3;
const DRAINING: usize = 4;
const STARTED: usize = 0;
const WON: usize = 1;
const DISCARDED: usize = 2;
const SUPPRESSED: usize = 3;

/// With `metrics` compiled in, every call builds its events: the facade cannot tell whether a
/// recorder is installed.
pub(super) const ACTIVE: bool = true;

/// No state recorded in the breaker gauge yet.
const UNSET: u8 = u8::MAX;

/// The gauges of one policy: only those of the parts it has.
#[derive(Clone, Default)]
struct Levels {
    /// `rampart.breaker.state`, one per state, and the state last set (`UNSET` at first).
    breaker: Option<([Gauge; STATES.len()], Arc<AtomicU8>)>,
    budget: Option<Gauge>,
    in_flight: Option<Gauge>,
    queued: Option<Gauge>,
}

/// The handles of one policy.
#[derive(Clone)]
pub(super) struct Handles {
    levels: Levels,
    calls: [Counter; STOPS.len()],
    call_duration: [Histogram; STOPS.len()],
    attempts: [Counter; OUTCOMES.len()],
    attempt_duration: [Histogram; OUTCOMES.len()],
    timeouts: [Counter; TIMEOUTS.len()],
    retries: Counter,
    rejections: [Counter; REJECTIONS.len()],
    transitions: [[Counter; STATES.len()]; STATES.len()],
    hedges: [Counter; HEDGES.len()],
    fallbacks: [Counter; STOPS.len()],
    /// `rampart.dry_run.rejections`, indexed like `DRY_RUN`.
    would_reject: [Counter; DRY_RUN.len()],
    /// `rampart.stream.ended`, indexed like `ENDS`.
    stream_ended: [Counter; ENDS.len()],
    stream_items: Counter,
}

/// A policy built before (or without) a name: handles that record nothing.
impl Default for Handles {
    fn default() -> Self {
        Handles {
            levels: Levels::default(),
            calls: std::array::from_fn(|_| Counter::noop()),
            call_duration: std::array::from_fn(|_| Histogram::noop()),
            attempts: std::array::from_fn(|_| Counter::noop()),
            attempt_duration: std::array::from_fn(|_| Histogram::noop()),
            timeouts: std::array::from_fn(|_| Counter::noop()),
            retries: Counter::noop(),
            rejections: std::array::from_fn(|_| Counter::noop()),
            transitions: std::array::from_fn(|_| std::array::from_fn(|_| Counter::noop())),
            hedges: std::array::from_fn(|_| Counter::noop()),
            fallbacks: std::array::from_fn(|_| Counter::noop()),
            would_reject: std::array::from_fn(|_| Counter::noop()),
            stream_ended: std::array::from_fn(|_| Counter::noop()),
            stream_items: Counter::noop(),
        }
    }
}

impl Handles {
    /// Registers every handle of policy `policy`, which has `parts`, with the current
    /// recorder.
    pub(super) fn new(policy: &str, parts: Parts) -> Self {
        describe();
        let policy = policy.to_owned();
        let p = || policy.clone();
        let levels = Levels {
            breaker: parts.breaker.then(|| {
                let gauges = STATES.map(
                    |k| metrics::gauge!("rampart.breaker.state", "policy" => p(), "state" => k.as_str()),
                );
                (gauges, Arc::new(AtomicU8::new(UNSET)))
            }),
            budget: parts
                .budget
                .then(|| metrics::gauge!("rampart.budget.tokens", "policy" => p())),
            in_flight: parts
                .load
                .in_flight
                .map(|_| metrics::gauge!("rampart.limiter.in_flight", "policy" => p())),
            queued: parts
                .load
                .queued
                .map(|_| metrics::gauge!("rampart.limiter.queued", "policy" => p())),
        };
        Handles {
            levels,
            calls: STOPS.map(|s| metrics::counter!("rampart.calls", "policy" => p(), "stop_reason" => s.as_str())),
            call_duration: STOPS.map(|s| {
                metrics::histogram!("rampart.call.duration", "policy" => p(), "stop_reason" => s.as_str())
            }),
            attempts: OUTCOMES
                .map(|o| metrics::counter!("rampart.attempts", "policy" => p(), "outcome" => o.as_str())),
            attempt_duration: OUTCOMES.map(|o| {
                metrics::histogram!("rampart.attempt.duration", "policy" => p(), "outcome" => o.as_str())
            }),
            timeouts: TIMEOUTS
                .map(|o| metrics::counter!("rampart.timeouts", "policy" => p(), "outcome" => o)),
            retries: metrics::counter!("rampart.retries", "policy" => p()),
            rejections: REJECTIONS
                .map(|r| metrics::counter!("rampart.rejections", "policy" => p(), "reason" => r)),
            transitions: STATES.map(|from| {
                STATES.map(|to| {
                    metrics::counter!(
                        "rampart.breaker.transitions",
                        "policy" => p(),
                        "from" => from.as_str(),
                        "to" => to.as_str()
                    )
                })
            }),
            hedges: HEDGES.map(|e| metrics::counter!("rampart.hedges", "policy" => p(), "event" => e)),
            would_reject: DRY_RUN.map(|r| {
                metrics::counter!("rampart.dry_run.rejections", "policy" => p(), "reason" => r)
            }),
            fallbacks: STOPS.map(|s| {
                metrics::counter!("rampart.fallbacks", "policy" => p(), "stop_reason" => s.as_str())
            }),
            stream_ended: ENDS.map(|e| {
                metrics::counter!("rampart.stream.ended", "policy" => p(), "reason" => e.as_str())
            }),
            stream_items: metrics::counter!("rampart.stream.items", "policy" => p()),
        }
    }

    /// Moves the metrics `event` moves.
    #[inline]
    pub(super) fn event(&self, event: &Event<'_>) {
        match *event {
            Event::AttemptEnded {
                outcome, elapsed, ..
            } => {
                let i = outcome as usize;
                self.attempts[i].increment(1);
                self.attempt_duration[i].record(seconds(elapsed));
                if outcome == AttemptOutcome::TimedOut {
                    self.timeouts[TIMED_OUT].increment(1);
                }
            }
            Event::Retrying { .. } => self.retries.increment(1),
            Event::TimeoutIgnored { .. } => self.timeouts[IGNORED].increment(1),
            Event::OrphanedWork { .. } => self.timeouts[ORPHANED].increment(1),
            Event::AttemptAbandoned { .. } | Event::Reconfigured { .. } => {}
            Event::AttemptRefused { by, .. } => {
                let reason = match by {
                    crate::limit::rate::BY => RATE,
                    _ => OVERLOADED,
                };
                self.rejections[reason].increment(1);
            }
            Event::WouldReject { by, .. } => {
                let reason = match by {
                    crate::breaker::BY => DRY_BREAKER,
                    crate::limit::rate::BY => DRY_RATE,
                    _ => DRY_OVERLOADED,
                };
                self.would_reject[reason].increment(1);
            }
            Event::BreakerTransition { from, to, .. } => {
                self.transitions[from as usize][to as usize].increment(1);
            }
            Event::HedgeStarted { .. } => self.hedges[STARTED].increment(1),
            Event::HedgeWon { .. } => self.hedges[WON].increment(1),
            Event::HedgeDiscarded { .. } => self.hedges[DISCARDED].increment(1),
            Event::HedgeSuppressed { .. } => self.hedges[SUPPRESSED].increment(1),
            Event::FallbackUsed { stop, .. } => self.fallbacks[stop as usize].increment(1),
            Event::StreamEnded { end, items, .. } => {
                self.stream_ended[end as usize].increment(1);
                self.stream_items.increment(items);
            }
            Event::CallEnded { stop, elapsed, .. } => {
                let i = stop as usize;
                self.calls[i].increment(1);
                self.call_duration[i].record(seconds(elapsed));
                let rejected = match stop {
                    StopReason::DependencyUnavailable => Some(BREAKER),
                    StopReason::BudgetExhausted => Some(BUDGET),
                    StopReason::Draining => Some(DRAINING),
                    _ => None,
                };
                if let Some(reason) = rejected {
                    self.rejections[reason].increment(1);
                }
            }
        }
    }
}

impl Handles {
    /// Sets the gauges of the parts this policy has from `gauges`.
    #[inline]
    pub(super) fn sample<A: crate::admit::Admit>(&self, gauges: &Gauges<'_, A>) {
        let levels = &self.levels;
        if let (Some((states, last)), Some(breaker), Some(now)) =
            (&levels.breaker, gauges.breaker, gauges.now)
        {
            let kind = breaker.state(now).kind() as u8;
            let was = last.swap(kind, Relaxed);
            if was != kind {
                if let Some(old) = states.get(usize::from(was)) {
                    old.set(0.0);
                }
                states[usize::from(kind)].set(1.0);
            }
        }
        if let (Some(gauge), Some(budget), Some(now)) = (&levels.budget, gauges.budget, gauges.now)
        {
            gauge.set(budget.balance(now));
        }
        if levels.in_flight.is_some() || levels.queued.is_some() {
            let load = gauges.admit.load();
            if let (Some(gauge), Some(n)) = (&levels.in_flight, load.in_flight) {
                gauge.set(n as f64);
            }
            if let (Some(gauge), Some(n)) = (&levels.queued, load.queued) {
                gauge.set(n as f64);
            }
        }
    }
}

fn seconds(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64()
}

/// Tells the recorder each metric's unit and meaning (recorders keep the first description).
fn describe() {
    metrics::describe_counter!("rampart.calls", Unit::Count, "Calls ended, by stop reason.");
    metrics::describe_histogram!(
        "rampart.call.duration",
        Unit::Seconds,
        "Time from the start of a call to its end."
    );
    metrics::describe_counter!(
        "rampart.attempts",
        Unit::Count,
        "Attempts ended, by outcome."
    );
    metrics::describe_histogram!(
        "rampart.attempt.duration",
        Unit::Seconds,
        "How long each attempt ran."
    );
    metrics::describe_counter!(
        "rampart.timeouts",
        Unit::Count,
        "Attempt ceilings: decided (timed_out), ignored by a late result, or overrun (orphaned)."
    );
    metrics::describe_counter!("rampart.retries", Unit::Count, "Retries about to be slept.");
    metrics::describe_counter!(
        "rampart.rejections",
        Unit::Count,
        "Refusals: by the breaker, the retry budget, admission (overloaded, rate) or a drain."
    );
    metrics::describe_counter!(
        "rampart.breaker.transitions",
        Unit::Count,
        "Circuit breaker state changes."
    );
    metrics::describe_gauge!(
        "rampart.breaker.state",
        Unit::Count,
        "1 for the breaker's current state, 0 for the others (set when a call ends)."
    );
    metrics::describe_gauge!(
        "rampart.budget.tokens",
        Unit::Count,
        "Retry budget tokens left (set when a call ends)."
    );
    metrics::describe_gauge!(
        "rampart.limiter.in_flight",
        Unit::Count,
        "Attempts holding an admission permit (set when a call ends)."
    );
    metrics::describe_gauge!(
        "rampart.limiter.queued",
        Unit::Count,
        "Attempts waiting in the admission queue (set when a call ends)."
    );
    metrics::describe_counter!(
        "rampart.dry_run.rejections",
        Unit::Count,
        "Attempts a dry-run breaker or limiter would have refused, and let run."
    );
    metrics::describe_counter!(
        "rampart.fallbacks",
        Unit::Count,
        "Calls a fallback answered, by the stop reason it replaced."
    );
    metrics::describe_counter!(
        "rampart.stream.ended",
        Unit::Count,
        "Streams opened by Call::stream that ended, by why they ended."
    );
    metrics::describe_counter!(
        "rampart.stream.items",
        Unit::Count,
        "Items the streams delivered (counted when each stream ends)."
    );
    metrics::describe_counter!(
        "rampart.hedges",
        Unit::Count,
        "Hedged legs started, won, discarded, and hedges suppressed."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_tables_are_in_the_enums_order() {
        for (i, s) in STOPS.iter().enumerate() {
            assert_eq!(*s as usize, i);
        }
        for (i, o) in OUTCOMES.iter().enumerate() {
            assert_eq!(*o as usize, i);
        }
        for (i, k) in STATES.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
        for (i, e) in ENDS.iter().enumerate() {
            assert_eq!(*e as usize, i);
        }
    }
}
