//! The `metrics` feature: each series registered on its first use, recorded per event.
//!
//! A label set is static per policy (its labels and an enum's stable name), so each
//! combination has a slot of its own, indexed by the enum, filled with the recorder's handle
//! the first time the combination happens. After that, recording is an index, a load of the
//! slot and a call into the recorder's handle, with no key built and nothing allocated; a
//! combination that never happens is never registered, so no exporter lists it.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label, Unit};

use super::{Gauges, MetricLabels, Parts};

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

/// One series' handle, registered with the recorder current at its first use.
type Slot<T> = OnceLock<T>;

fn slots<T, const N: usize>() -> [Slot<T>; N] {
    std::array::from_fn(|_| OnceLock::new())
}

/// The gauges of one policy: only those of the parts it has (and reports).
struct Levels {
    /// `rampart.breaker.state`, one per state, and the state last set (`UNSET` at first).
    breaker: Option<([Slot<Gauge>; STATES.len()], AtomicU8)>,
    budget: Option<Slot<Gauge>>,
    in_flight: Option<Slot<Gauge>>,
    queued: Option<Slot<Gauge>>,
}

/// The series of one policy, each registered when it first moves: a combination that never
/// happens (a transition from a state to itself, a hedge of a policy that does not hedge, a
/// stop reason never seen) has no series at all.
struct Series {
    /// `policy` and the policy's attributes: the labels every series starts with.
    labels: Box<[Label]>,
    /// Whether the descriptions were given to a recorder (on the first registration).
    described: Once,
    levels: Levels,
    calls: [Slot<Counter>; STOPS.len()],
    call_duration: [Slot<Histogram>; STOPS.len()],
    attempts: [Slot<Counter>; OUTCOMES.len()],
    attempt_duration: [Slot<Histogram>; OUTCOMES.len()],
    timeouts: [Slot<Counter>; TIMEOUTS.len()],
    retries: Slot<Counter>,
    rejections: [Slot<Counter>; REJECTIONS.len()],
    transitions: [[Slot<Counter>; STATES.len()]; STATES.len()],
    hedges: [Slot<Counter>; HEDGES.len()],
    fallbacks: [Slot<Counter>; STOPS.len()],
    /// `rampart.dry_run.rejections`, indexed like `DRY_RUN`.
    would_reject: [Slot<Counter>; DRY_RUN.len()],
    /// `rampart.stream.ended`, indexed like `ENDS`.
    stream_ended: [Slot<Counter>; ENDS.len()],
    stream_items: Slot<Counter>,
}

/// The handles of one policy, shared by its clones; none for a policy built before (or
/// without) a name, which records nothing.
#[derive(Clone, Default)]
pub(super) struct Handles(Option<Arc<Series>>);

impl Handles {
    /// The handles of policy `policy`, labelled by `labels`, which has `parts`. Nothing is
    /// registered yet.
    pub(super) fn new(policy: &str, labels: &MetricLabels, parts: Parts) -> Self {
        let policy = labels.policy.as_deref().unwrap_or(policy);
        let attributes = labels
            .attributes
            .iter()
            .map(|(key, value)| Label::new(*key, String::from(&**value)));
        let labels_of = std::iter::once(Label::new("policy", policy.to_owned()))
            .chain(attributes)
            .collect();
        let state_gauges = labels.state_gauges;
        let levels = Levels {
            breaker: (parts.breaker && state_gauges).then(|| (slots(), AtomicU8::new(UNSET))),
            budget: (parts.budget && state_gauges).then(OnceLock::new),
            in_flight: parts.load.in_flight.map(|_| OnceLock::new()),
            queued: parts.load.queued.map(|_| OnceLock::new()),
        };
        Handles(Some(Arc::new(Series {
            labels: labels_of,
            described: Once::new(),
            levels,
            calls: slots(),
            call_duration: slots(),
            attempts: slots(),
            attempt_duration: slots(),
            timeouts: slots(),
            retries: OnceLock::new(),
            rejections: slots(),
            transitions: std::array::from_fn(|_| slots()),
            hedges: slots(),
            fallbacks: slots(),
            would_reject: slots(),
            stream_ended: slots(),
            stream_items: OnceLock::new(),
        })))
    }

    /// Moves the metrics `event` moves.
    #[inline]
    pub(super) fn event(&self, event: &Event<'_>) {
        if let Some(series) = &self.0 {
            series.event(event);
        }
    }

    /// Sets the gauges of the parts this policy has from `gauges`.
    #[inline]
    pub(super) fn sample<A: crate::admit::Admit>(&self, gauges: &Gauges<'_, A>) {
        if let Some(series) = &self.0 {
            series.sample(gauges);
        }
    }
}

impl Series {
    /// The labels of a series: the policy's, then `own`.
    fn key_labels(&self, own: &[(&'static str, &'static str)]) -> Vec<Label> {
        self.described.call_once(describe);
        let mut labels = Vec::with_capacity(self.labels.len() + own.len());
        labels.extend(self.labels.iter().cloned());
        labels.extend(own.iter().map(|&(key, value)| Label::new(key, value)));
        labels
    }

    #[cold]
    #[inline(never)]
    fn register_counter(
        &self,
        name: &'static str,
        own: &[(&'static str, &'static str)],
    ) -> Counter {
        metrics::counter!(name, self.key_labels(own))
    }

    #[cold]
    #[inline(never)]
    fn register_histogram(
        &self,
        name: &'static str,
        own: &[(&'static str, &'static str)],
    ) -> Histogram {
        metrics::histogram!(name, self.key_labels(own))
    }

    #[cold]
    #[inline(never)]
    fn register_gauge(&self, name: &'static str, own: &[(&'static str, &'static str)]) -> Gauge {
        metrics::gauge!(name, self.key_labels(own))
    }

    /// Adds 1 to the counter `name` with labels `own` (registered now if this is its first
    /// use), kept in `slot`.
    #[inline]
    fn count(
        &self,
        slot: &Slot<Counter>,
        name: &'static str,
        own: &[(&'static str, &'static str)],
    ) {
        slot.get_or_init(|| self.register_counter(name, own))
            .increment(1);
    }

    #[inline]
    fn record(
        &self,
        slot: &Slot<Histogram>,
        name: &'static str,
        own: &[(&'static str, &'static str)],
        elapsed: Duration,
    ) {
        slot.get_or_init(|| self.register_histogram(name, own))
            .record(seconds(elapsed));
    }

    #[inline]
    fn set(
        &self,
        slot: &Slot<Gauge>,
        name: &'static str,
        own: &[(&'static str, &'static str)],
        value: f64,
    ) {
        slot.get_or_init(|| self.register_gauge(name, own))
            .set(value);
    }

    #[inline]
    fn event(&self, event: &Event<'_>) {
        match *event {
            Event::AttemptEnded {
                outcome, elapsed, ..
            } => {
                let i = outcome as usize;
                let own = [("outcome", outcome.as_str())];
                self.count(&self.attempts[i], "rampart.attempts", &own);
                self.record(
                    &self.attempt_duration[i],
                    "rampart.attempt.duration",
                    &own,
                    elapsed,
                );
                if outcome == AttemptOutcome::TimedOut {
                    self.timeout(TIMED_OUT);
                }
            }
            Event::Retrying { .. } => self.count(&self.retries, "rampart.retries", &[]),
            Event::TimeoutIgnored { .. } => self.timeout(IGNORED),
            Event::OrphanedWork { .. } => self.timeout(ORPHANED),
            Event::AttemptAbandoned { .. } | Event::Reconfigured { .. } => {}
            Event::AttemptRefused { by, .. } => {
                let reason = match by {
                    crate::limit::rate::BY => RATE,
                    _ => OVERLOADED,
                };
                self.rejection(reason);
            }
            Event::WouldReject { by, .. } => {
                let reason = match by {
                    crate::breaker::BY => DRY_BREAKER,
                    crate::limit::rate::BY => DRY_RATE,
                    _ => DRY_OVERLOADED,
                };
                self.count(
                    &self.would_reject[reason],
                    "rampart.dry_run.rejections",
                    &[("reason", DRY_RUN[reason])],
                );
            }
            Event::BreakerTransition { from, to, .. } => self.count(
                &self.transitions[from as usize][to as usize],
                "rampart.breaker.transitions",
                &[("from", from.as_str()), ("to", to.as_str())],
            ),
            Event::HedgeStarted { .. } => self.hedge(STARTED),
            Event::HedgeWon { .. } => self.hedge(WON),
            Event::HedgeDiscarded { .. } => self.hedge(DISCARDED),
            Event::HedgeSuppressed { .. } => self.hedge(SUPPRESSED),
            Event::FallbackUsed { stop, .. } => self.count(
                &self.fallbacks[stop as usize],
                "rampart.fallbacks",
                &[("stop_reason", stop.as_str())],
            ),
            Event::StreamEnded { end, items, .. } => {
                self.count(
                    &self.stream_ended[end as usize],
                    "rampart.stream.ended",
                    &[("reason", end.as_str())],
                );
                self.stream_items
                    .get_or_init(|| self.register_counter("rampart.stream.items", &[]))
                    .increment(items);
            }
            Event::CallEnded { stop, elapsed, .. } => {
                let i = stop as usize;
                let own = [("stop_reason", stop.as_str())];
                self.count(&self.calls[i], "rampart.calls", &own);
                self.record(
                    &self.call_duration[i],
                    "rampart.call.duration",
                    &own,
                    elapsed,
                );
                let rejected = match stop {
                    StopReason::DependencyUnavailable => Some(BREAKER),
                    StopReason::BudgetExhausted => Some(BUDGET),
                    StopReason::Draining => Some(DRAINING),
                    _ => None,
                };
                if let Some(reason) = rejected {
                    self.rejection(reason);
                }
            }
        }
    }

    fn timeout(&self, i: usize) {
        self.count(
            &self.timeouts[i],
            "rampart.timeouts",
            &[("outcome", TIMEOUTS[i])],
        );
    }

    fn rejection(&self, i: usize) {
        self.count(
            &self.rejections[i],
            "rampart.rejections",
            &[("reason", REJECTIONS[i])],
        );
    }

    fn hedge(&self, i: usize) {
        self.count(&self.hedges[i], "rampart.hedges", &[("event", HEDGES[i])]);
    }

    #[inline]
    fn sample<A: crate::admit::Admit>(&self, gauges: &Gauges<'_, A>) {
        let levels = &self.levels;
        if let (Some((states, last)), Some(breaker), Some(now)) =
            (&levels.breaker, gauges.breaker, gauges.now)
        {
            let kind = breaker.state(now).kind();
            let was = last.swap(kind as u8, Relaxed);
            if was != kind as u8 {
                // The state left was set to 1 when entered, so its series exists.
                if let Some(old) = states.get(usize::from(was)).and_then(OnceLock::get) {
                    old.set(0.0);
                }
                let own = [("state", kind.as_str())];
                self.set(&states[kind as usize], "rampart.breaker.state", &own, 1.0);
            }
        }
        if let (Some(slot), Some(budget), Some(now)) = (&levels.budget, gauges.budget, gauges.now) {
            self.set(slot, "rampart.budget.tokens", &[], budget.balance(now));
        }
        if levels.in_flight.is_some() || levels.queued.is_some() {
            let load = gauges.admit.load();
            if let (Some(slot), Some(n)) = (&levels.in_flight, load.in_flight) {
                self.set(slot, "rampart.limiter.in_flight", &[], n as f64);
            }
            if let (Some(slot), Some(n)) = (&levels.queued, load.queued) {
                self.set(slot, "rampart.limiter.queued", &[], n as f64);
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
