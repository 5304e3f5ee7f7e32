//! The criticality-aware limiter: its edge cases, a seeded load generator at 2x and 10x the
//! capacity on virtual time, and a proptest of its guarantees over random arrival, release and
//! cancellation sequences.
//!
//! Longer than the ~600-line guide: the load generator and the proptest share their fixtures
//! with the edge cases, and splitting them would copy those.
//!
//! Everything here asks the limiter directly (as a server layer would), polling each admission
//! future by hand: time is a number the test moves, nothing sleeps and nothing runs in the
//! background.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use proptest::prelude::*;
use rampart::admit::{Admit, AdmitContext, Feedback, Refusal};
use rampart::clock::ManualClock;
use rampart::limit::{CriticalityLimit, CriticalityPermit};
use rampart::{AttemptOutcome, Criticality, Instant};

use Criticality::{Critical, CriticalPlus, Sheddable, SheddablePlus};

const MS: Duration = Duration::from_millis(1);

type Answer = Result<CriticalityPermit, Refusal>;

/// Set when the admission future it belongs to is woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One request asking the limit: its admission future, polled by hand.
struct Ask {
    level: Criticality,
    future: Pin<Box<dyn Future<Output = Answer> + Send>>,
    flag: Arc<Flag>,
    waker: Waker,
}

impl Ask {
    fn new(
        limit: &CriticalityLimit,
        level: Criticality,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Ask {
        let limit = limit.clone();
        let flag = Arc::new(Flag::default());
        Ask {
            level,
            future: Box::pin(async move {
                let mut cx = AdmitContext::new("test", level, now);
                cx.deadline = deadline;
                limit.acquire(&cx).await
            }),
            waker: Waker::from(Arc::clone(&flag)),
            flag,
        }
    }

    /// Polls the future if it is new or was woken; `None` while it waits.
    fn poll(&mut self) -> Option<Answer> {
        self.flag.0.store(false, Ordering::SeqCst);
        match self
            .future
            .as_mut()
            .poll(&mut Context::from_waker(&self.waker))
        {
            Poll::Ready(answer) => Some(answer),
            Poll::Pending => None,
        }
    }

    fn woken(&self) -> bool {
        self.flag.0.load(Ordering::SeqCst)
    }
}

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

fn admitted(answer: Option<Answer>) -> CriticalityPermit {
    match answer {
        Some(Ok(permit)) => permit,
        Some(Err(refusal)) => panic!("refused: {refusal:?}"),
        None => panic!("still waiting"),
    }
}

fn refused(answer: Option<Answer>) -> Refusal {
    match answer {
        Some(Err(refusal)) => refusal,
        other => panic!("expected a refusal, got {:?}", other.map(|a| a.is_ok())),
    }
}

// ---- Edge cases -------------------------------------------------------------------------

#[test]
fn a_freed_slot_goes_to_the_highest_level_waiting_then_the_earliest() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .clock(clock.clone())
        .queue(4)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let holder = admitted(Ask::new(&limit, Sheddable, t0, None).poll());
    let mut waiters: Vec<Ask> = [Sheddable, Critical, SheddablePlus, Critical]
        .into_iter()
        .map(|level| Ask::new(&limit, level, t0, None))
        .collect();
    assert!(waiters.iter_mut().all(|w| w.poll().is_none()));
    assert_eq!(limit.queued(), 4);
    drop(holder);
    // Waiter 1: the first of the two Critical ones.
    assert!(waiters[1].woken());
    let first = admitted(waiters[1].poll());
    assert!(
        waiters
            .iter()
            .enumerate()
            .all(|(i, w)| i == 1 || !w.woken())
    );
    drop(first);
    let second = admitted(waiters[3].poll());
    drop(second);
    let third = admitted(waiters[2].poll());
    drop(third);
    let last = admitted(waiters[0].poll());
    drop(last);
    assert_eq!((limit.in_flight(), limit.queued()), (0, 0));
}

#[test]
fn a_larger_capacity_hands_its_new_slots_to_the_waiters_at_once_highest_level_first() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .clock(clock.clone())
        .queue(4)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let _holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut low = Ask::new(&limit, Sheddable, t0, None);
    let mut high = Ask::new(&limit, Critical, t0, None);
    assert!(low.poll().is_none() && high.poll().is_none());
    limit.set_capacity(2).expect("a valid capacity");
    assert!(
        high.woken() && !low.woken(),
        "the new slot goes to the higher level"
    );
    let _second = admitted(high.poll());
    assert_eq!((limit.in_flight(), limit.queued()), (2, 1));
    limit.set_capacity(3).expect("a valid capacity");
    let _third = admitted(low.poll());
    assert_eq!(
        (limit.capacity(), limit.in_flight(), limit.queued()),
        (3, 3, 0)
    );
}

#[test]
fn a_smaller_capacity_preempts_nothing_and_admits_again_only_below_it() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(3)
        .clock(clock.clone())
        .queue(4)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let mut held: Vec<CriticalityPermit> = (0..3)
        .map(|_| admitted(Ask::new(&limit, Critical, t0, None).poll()))
        .collect();
    limit.set_capacity(1).expect("a valid capacity");
    assert_eq!(limit.in_flight(), 3, "nothing admitted is pre-empted");
    let mut next = Ask::new(&limit, Critical, t0, None);
    assert!(
        next.poll().is_none(),
        "waits while the limit is over its capacity"
    );
    held.pop();
    held.pop();
    assert!(!next.woken(), "one in flight fills a capacity of 1");
    assert_eq!(limit.in_flight(), 1);
    held.pop();
    let _admitted = admitted(next.poll());
    assert_eq!((limit.in_flight(), limit.queued()), (1, 0));
}

#[test]
fn a_capacity_of_zero_is_refused_naming_the_field_and_changes_nothing() {
    let limit = CriticalityLimit::new(8).expect("valid");
    let refused = limit.set_capacity(0).expect_err("0 is not a capacity");
    assert_eq!(
        refused.to_string(),
        "criticality_limit.capacity must be at least 1 (was 0)"
    );
    assert_eq!(limit.capacity(), 8);
}

#[test]
fn a_higher_arrival_at_a_full_queue_evicts_the_newest_of_the_lowest_level() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .clock(clock.clone())
        .queue(3)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let _holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut old = Ask::new(&limit, Sheddable, t0, None);
    let mut new = Ask::new(&limit, Sheddable, t0, None);
    let mut plus = Ask::new(&limit, SheddablePlus, t0, None);
    assert!(old.poll().is_none() && new.poll().is_none() && plus.poll().is_none());
    let mut critical = Ask::new(&limit, Critical, at(t0, 1), None);
    assert!(
        critical.poll().is_none(),
        "queued in place of an evicted waiter"
    );
    assert!(new.woken() && !old.woken());
    let refusal = refused(new.poll());
    assert_eq!(refusal.by, "criticality limit");
    assert_eq!(
        refusal.retry_after,
        Some(10 * MS),
        "the held time, unmeasured"
    );
    assert_eq!(limit.queued(), 3);
    // A Sheddable arriving now finds only itself or higher to evict: refused.
    let arrival = refused(Ask::new(&limit, Sheddable, at(t0, 2), None).poll());
    assert_eq!(arrival.retry_after, Some(10 * MS));
}

#[test]
fn after_a_refusal_lower_levels_are_refused_at_once_for_the_hold() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .clock(clock.clone())
        .queue(1)
        .hold(500 * MS)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut waiter = Ask::new(&limit, Critical, t0, None);
    assert!(waiter.poll().is_none());
    // The queue is full of Critical: a Critical arrival is refused...
    refused(Ask::new(&limit, Critical, at(t0, 100), None).poll());
    assert_eq!(limit.lowest_admitted(at(t0, 100)), Critical);
    // ...so for 500 ms every lower level is refused at once, with the time left as retry-after.
    let shed = refused(Ask::new(&limit, SheddablePlus, at(t0, 300), None).poll());
    assert_eq!(shed.retry_after, Some(300 * MS));
    // Even with room: the holder and the waiter finish.
    drop(holder);
    drop(admitted(waiter.poll()));
    assert_eq!(limit.in_flight(), 0);
    // SheddablePlus was refused at 300 ms: Sheddable stays out until 800 ms.
    let shed = refused(Ask::new(&limit, Sheddable, at(t0, 650), None).poll());
    assert_eq!(shed.retry_after, Some(150 * MS));
    assert_eq!(limit.lowest_admitted(at(t0, 650)), SheddablePlus);
    drop(admitted(
        Ask::new(&limit, SheddablePlus, at(t0, 650), None).poll(),
    ));
    drop(admitted(
        Ask::new(&limit, Sheddable, at(t0, 800), None).poll(),
    ));
    assert_eq!(limit.lowest_admitted(at(t0, 800)), Sheddable);
}

#[test]
fn critical_plus_waits_beyond_the_queue_while_its_own_demand_fits() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(3)
        .clock(clock.clone())
        .queue(0)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let _low: Vec<_> = (0..3)
        .map(|_| admitted(Ask::new(&limit, Sheddable, t0, None).poll()))
        .collect();
    // No queue at all, but three CriticalPlus fit the capacity: they wait.
    let mut top: Vec<Ask> = (0..3)
        .map(|_| Ask::new(&limit, CriticalPlus, t0, None))
        .collect();
    assert!(top.iter_mut().all(|a| a.poll().is_none()));
    assert_eq!(limit.queued(), 3);
    // A fourth would not fit even with the capacity to itself: refused.
    refused(Ask::new(&limit, CriticalPlus, t0, None).poll());
    // A Critical is refused (no queue), and nothing below CriticalPlus is let in for the hold.
    refused(Ask::new(&limit, Critical, t0, None).poll());
}

#[test]
fn expired_waiters_are_dropped_before_anything_else_is_decided() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .clock(clock.clone())
        .queue(2)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let _holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut short = Ask::new(&limit, Critical, t0, Some(at(t0, 50)));
    let mut long = Ask::new(&limit, Critical, t0, Some(at(t0, 500)));
    assert!(short.poll().is_none() && long.poll().is_none());
    // At 60 ms the queue is full, but one waiter's time is up: a Sheddable takes its place,
    // without evicting or being refused, and no shedding starts.
    let mut sheddable = Ask::new(&limit, Sheddable, at(t0, 60), None);
    assert!(sheddable.poll().is_none());
    assert!(short.woken());
    refused(short.poll());
    assert!(!long.woken());
    assert_eq!(limit.queued(), 2);
    assert_eq!(limit.lowest_admitted(at(t0, 60)), Sheddable);
}

#[test]
fn a_dropped_wait_leaves_the_queue_and_a_slot_is_never_lost() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .clock(clock.clone())
        .queue(4)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut first = Ask::new(&limit, Critical, t0, None);
    let mut second = Ask::new(&limit, Critical, t0, None);
    assert!(first.poll().is_none() && second.poll().is_none());
    drop(second);
    assert_eq!(limit.queued(), 1);
    // The slot is handed to `first`, which is dropped before it sees it: the slot comes back.
    drop(holder);
    assert!(first.woken());
    drop(first);
    assert_eq!((limit.in_flight(), limit.queued()), (0, 0));
    drop(admitted(Ask::new(&limit, Sheddable, t0, None).poll()));
}

#[test]
fn release_with_feedback_frees_the_slot_and_measures_the_retry_after() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .clock(clock.clone())
        .queue(0)
        .build()
        .expect("valid");
    let t0 = clock.now();
    let permit = admitted(Ask::new(&limit, Critical, t0, None).poll());
    limit.release(permit, Feedback::new(AttemptOutcome::Ok, 40 * MS));
    let _held = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let refusal = refused(Ask::new(&limit, Critical, t0, None).poll());
    assert_eq!(refusal.retry_after, Some(40 * MS));
}

#[test]
fn a_congested_level_serves_its_newest_waiter_first() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .lifo_after(Some(100 * MS))
        .queue(4)
        .clock(clock.clone())
        .build()
        .expect("valid");
    let t0 = clock.now();
    let holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut oldest = Ask::new(&limit, Critical, t0, None);
    assert!(oldest.poll().is_none());
    // 150 ms later the oldest has waited longer than lifo_after (100 ms): newest first.
    clock.advance(150 * MS);
    let mut older = Ask::new(&limit, Critical, clock.now(), None);
    let mut newest = Ask::new(&limit, Critical, clock.now(), None);
    assert!(older.poll().is_none() && newest.poll().is_none());
    drop(holder);
    assert!(newest.woken() && !older.woken() && !oldest.woken());
    let second = admitted(newest.poll());
    drop(second);
    drop(admitted(older.poll()));
    // Once the backlog's oldest is the only one left, it is served too: nobody starves.
    drop(admitted(oldest.poll()));
    assert_eq!((limit.in_flight(), limit.queued()), (0, 0));
}

#[test]
fn an_uncongested_level_is_still_served_in_arrival_order() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .queue(4)
        .lifo_after(Some(200 * MS))
        .clock(clock.clone())
        .build()
        .expect("valid");
    let t0 = clock.now();
    let holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut first = Ask::new(&limit, Critical, t0, None);
    let mut second = Ask::new(&limit, Critical, t0, None);
    assert!(first.poll().is_none() && second.poll().is_none());
    clock.advance(150 * MS);
    drop(holder);
    assert!(first.woken() && !second.woken());
    drop(admitted(first.poll()));
    drop(admitted(second.poll()));
}

#[test]
fn a_waiter_left_with_less_than_the_minimum_time_is_refused_and_its_slot_goes_to_the_next() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .queue(4)
        .min_time_left(20 * MS)
        .clock(clock.clone())
        .build()
        .expect("valid");
    let t0 = clock.now();
    let holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut short = Ask::new(&limit, Critical, t0, Some(at(t0, 30)));
    let mut long = Ask::new(&limit, Critical, t0, Some(at(t0, 500)));
    assert!(short.poll().is_none() && long.poll().is_none());
    // At 15 ms the first waiter has 15 ms left, under the 20 ms it needs: refused, and the
    // slot goes to the one that can still finish.
    clock.advance(15 * MS);
    limit.release(holder, Feedback::new(AttemptOutcome::Ok, 15 * MS));
    let refusal = refused(short.poll());
    assert_eq!(refusal.by, "criticality limit");
    drop(admitted(long.poll()));
    // An arrival that would have to wait with too little time left is refused at once.
    let _busy = admitted(Ask::new(&limit, Critical, clock.now(), None).poll());
    refused(Ask::new(&limit, Critical, clock.now(), Some(at(t0, 30))).poll());
    assert_eq!(limit.queued(), 0);
    // Nothing was shed for it: it was short of time, not turned away by a higher level.
    assert_eq!(limit.lowest_admitted(clock.now()), Sheddable);
}

#[test]
fn the_minimum_time_left_defaults_to_the_measured_hold() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .queue(4)
        .clock(clock.clone())
        .build()
        .expect("valid");
    let t0 = clock.now();
    let first = admitted(Ask::new(&limit, Critical, t0, None).poll());
    limit.release(first, Feedback::new(AttemptOutcome::Ok, 40 * MS));
    let holder = admitted(Ask::new(&limit, Critical, t0, None).poll());
    let mut short = Ask::new(&limit, Critical, t0, Some(at(t0, 60)));
    let mut long = Ask::new(&limit, Critical, t0, Some(at(t0, 500)));
    assert!(short.poll().is_none() && long.poll().is_none());
    // 30 ms left at 30 ms, under the 40 ms a permit is held: refused.
    clock.advance(30 * MS);
    drop(holder);
    refused(short.poll());
    drop(admitted(long.poll()));
}

#[test]
fn a_congested_level_running_out_of_time_sheds_the_levels_below_it() {
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(1)
        .lifo_after(Some(100 * MS))
        .queue(4)
        .hold(500 * MS)
        .clock(clock.clone())
        .build()
        .expect("valid");
    let t0 = clock.now();
    let _holder = admitted(Ask::new(&limit, CriticalPlus, t0, None).poll());
    let mut critical = Ask::new(&limit, Critical, t0, Some(at(t0, 150)));
    let mut sheddable = Ask::new(&limit, Sheddable, t0, None);
    assert!(critical.poll().is_none() && sheddable.poll().is_none());
    // At 160 ms the Critical waiter has waited past lifo_after and its time is up: Critical
    // demand went unmet, so the Sheddable waiter is shed with it and lower arrivals are
    // refused for the hold.
    clock.advance(160 * MS);
    let shed = refused(Ask::new(&limit, SheddablePlus, clock.now(), None).poll());
    assert_eq!(shed.retry_after, Some(500 * MS));
    assert!(critical.woken() && sheddable.woken());
    refused(critical.poll());
    refused(sheddable.poll());
    assert_eq!(limit.queued(), 0);
    assert_eq!(limit.lowest_admitted(clock.now()), Critical);
}

#[test]
fn invalid_settings_are_all_reported_with_their_values() {
    let err = CriticalityLimit::builder(0)
        .hold(Duration::from_secs(7200))
        .build()
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "criticality_limit.capacity must be at least 1 (was 0); criticality_limit.hold must be at most 1h (was 7200s)"
    );
    assert!(CriticalityLimit::new(0).is_err());
}

// ---- The load generator ------------------------------------------------------------------

/// What happens at an instant of the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival,
    Done(usize),
    Deadline(usize),
}

/// One decision of the limiter, as the generator saw it.
#[derive(Debug, Clone, Copy)]
struct Decision {
    at: u64,
    level: Criticality,
    admitted: bool,
}

#[derive(Debug)]
struct Report {
    decisions: Vec<Decision>,
    /// CriticalPlus refusals, with CriticalPlus demand (in flight and waiting) at that moment.
    critical_plus_refused: Vec<usize>,
    /// Slot-nanoseconds of admitted work within the run.
    busy: u128,
    timed_out: usize,
}

/// A seeded open-loop load generator: Poisson arrivals at `load` × the capacity's throughput,
/// levels drawn from a fixed mix, served by a fake dependency that takes 5 to 15 ms per
/// request (10 ms on average) and holds exactly `capacity` at once. Each request gives up
/// waiting after 50 ms, as an executor would at its attempt ceiling.
fn simulate(seed: u64, load: f64, capacity: usize, run: Duration) -> Report {
    const MIX: [(Criticality, f64); 4] = [
        (CriticalPlus, 0.05),
        (Critical, 0.25),
        (SheddablePlus, 0.30),
        (Sheddable, 0.40),
    ];
    let clock = ManualClock::new();
    let limit = CriticalityLimit::builder(capacity)
        .queue(capacity / 2)
        .clock(clock.clone())
        .build()
        .expect("valid");
    let mut rng = fastrand::Rng::with_seed(seed);
    let t0 = clock.now();
    let end = u64::try_from(run.as_nanos()).expect("short run");
    let mean_gap = 10e6 / (capacity as f64 * load); // nanoseconds between arrivals
    let mut events = BinaryHeap::new();
    let mut seq = 0u64;
    let mut schedule = |events: &mut BinaryHeap<_>, at: u64, event: Event| {
        seq += 1;
        events.push(Reverse((at, seq, event)));
    };
    schedule(&mut events, 0, Event::Arrival);
    let mut waiting: BTreeMap<usize, Ask> = BTreeMap::new();
    let mut held: BTreeMap<usize, (CriticalityPermit, u64, Criticality)> = BTreeMap::new();
    let mut next_id = 0;
    let mut report = Report {
        decisions: Vec::new(),
        critical_plus_refused: Vec::new(),
        busy: 0,
        timed_out: 0,
    };
    while let Some(Reverse((now, _, event))) = events.pop() {
        if now >= end {
            break;
        }
        let instant = t0 + Duration::from_nanos(now);
        clock.advance(instant - clock.now());
        let mut answered = Vec::new();
        match event {
            Event::Arrival => {
                let gap = -mean_gap * (1.0 - rng.f64()).ln();
                schedule(&mut events, now + gap as u64, Event::Arrival);
                let pick = rng.f64();
                let mut sum = 0.0;
                let level = MIX
                    .iter()
                    .find(|(_, share)| {
                        sum += share;
                        pick < sum
                    })
                    .map_or(Sheddable, |(level, _)| *level);
                let id = next_id;
                next_id += 1;
                let deadline = instant + 50 * MS;
                let mut ask = Ask::new(&limit, level, instant, Some(deadline));
                match ask.poll() {
                    Some(answer) => answered.push((id, level, answer)),
                    None => {
                        schedule(&mut events, now + 50_000_000, Event::Deadline(id));
                        waiting.insert(id, ask);
                    }
                }
            }
            Event::Done(id) => {
                if let Some((permit, started, _)) = held.remove(&id) {
                    let took = Duration::from_nanos(now - started);
                    limit.release(permit, Feedback::new(AttemptOutcome::Ok, took));
                }
            }
            Event::Deadline(id) => {
                if waiting.remove(&id).is_some() {
                    report.timed_out += 1;
                }
            }
        }
        let woken: Vec<usize> = waiting
            .iter()
            .filter(|(_, ask)| ask.woken())
            .map(|(id, _)| *id)
            .collect();
        for id in woken {
            if let Some(mut ask) = waiting.remove(&id) {
                match ask.poll() {
                    Some(answer) => answered.push((id, ask.level, answer)),
                    None => {
                        waiting.insert(id, ask);
                    }
                }
            }
        }
        for (id, level, answer) in answered {
            report.decisions.push(Decision {
                at: now,
                level,
                admitted: answer.is_ok(),
            });
            match answer {
                Ok(permit) => {
                    let service = rng.u64(5_000_000..15_000_000);
                    report.busy += u128::from(service.min(end - now));
                    held.insert(id, (permit, now, level));
                    schedule(&mut events, now + service, Event::Done(id));
                }
                Err(_) if level == CriticalPlus => {
                    let in_flight = held.values().filter(|h| h.2 == CriticalPlus).count();
                    let queued = waiting.values().filter(|a| a.level == CriticalPlus).count();
                    report.critical_plus_refused.push(in_flight + queued);
                }
                Err(_) => {}
            }
        }
        assert!(limit.in_flight() <= capacity);
    }
    report
}

/// Windows of `window` in which a level was refused and, at or after that refusal in the same
/// window, a lower level was admitted: the limiter let a lower level in while it was turning a
/// higher one away. Also returns the windows where both merely happened, in either order.
fn inversions(decisions: &[Decision], window: u64) -> (Vec<u64>, Vec<u64>) {
    let mut by_window: BTreeMap<u64, Vec<Decision>> = BTreeMap::new();
    for d in decisions {
        by_window.entry(d.at / window).or_default().push(*d);
    }
    let mut ordered = Vec::new();
    let mut either = Vec::new();
    for (w, decisions) in &by_window {
        let first_refusal = |level: Criticality| {
            decisions
                .iter()
                .filter(|d| !d.admitted && d.level == level)
                .map(|d| d.at)
                .min()
        };
        let mut ordered_here = false;
        let mut either_here = false;
        for level in Criticality::ALL {
            let Some(refused_at) = first_refusal(level) else {
                continue;
            };
            for d in decisions.iter().filter(|d| d.admitted && d.level < level) {
                either_here = true;
                ordered_here |= d.at >= refused_at;
            }
        }
        if ordered_here {
            ordered.push(*w);
        }
        if either_here {
            either.push(*w);
        }
    }
    (ordered, either)
}

fn check_load(load: f64, seed: u64) {
    let capacity = 50;
    let run = Duration::from_secs(3);
    let report = simulate(seed, load, capacity, run);
    let window = 100_000_000; // 100 ms
    let (ordered, either) = inversions(&report.decisions, window);
    let refused = report.decisions.iter().filter(|d| !d.admitted).count();
    let goodput = report.busy as f64 / (capacity as f64 * run.as_nanos() as f64);
    let by_level = |admitted: bool| {
        Criticality::ALL.map(|level| {
            report
                .decisions
                .iter()
                .filter(|d| d.level == level && d.admitted == admitted)
                .count()
        })
    };
    println!(
        "load {load}x seed {seed}: {} decisions, {refused} refused, {} timed out waiting; \
         admitted by level {:?}, refused by level {:?}; goodput {:.1}% of capacity; \
         windows with a lower admission after a higher refusal: {}; with both in any order: {:?}",
        report.decisions.len(),
        report.timed_out,
        by_level(true),
        by_level(false),
        goodput * 100.0,
        ordered.len(),
        either,
    );
    assert!(
        ordered.is_empty(),
        "priority inversions in windows {ordered:?}"
    );
    assert!(
        report
            .critical_plus_refused
            .iter()
            .all(|&demand| demand >= capacity),
        "CriticalPlus refused while its demand fit: {:?}",
        report.critical_plus_refused
    );
    assert!(goodput >= 0.9, "goodput {goodput}");
    // The mix at these loads leaves CriticalPlus well inside the capacity: never refused.
    assert!(report.critical_plus_refused.is_empty());
}

#[test]
fn at_twice_the_capacity_no_level_is_refused_while_a_lower_one_is_admitted() {
    check_load(2.0, 0x5eed_0002);
}

#[test]
fn at_ten_times_the_capacity_no_level_is_refused_while_a_lower_one_is_admitted() {
    check_load(10.0, 0x5eed_0010);
}

// ---- The property ------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// A request at a level, with a ceiling in milliseconds from now (or none).
    Arrive { level: u8, patience: Option<u8> },
    /// The `pick`-th request in flight finishes.
    Finish { pick: usize },
    /// The `pick`-th waiting request gives up (its caller cancels).
    Leave { pick: usize },
    /// Time passes.
    Advance { ms: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..4, prop::option::of(0u8..60)).prop_map(|(level, patience)| Op::Arrive { level, patience }),
        3 => any::<usize>().prop_map(|pick| Op::Finish { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Leave { pick }),
        2 => (0u8..120).prop_map(|ms| Op::Advance { ms }),
    ]
}

struct Waiter {
    ask: Ask,
    arrival: usize,
    /// When it arrived, in nanoseconds since the start.
    since: u64,
    deadline: Option<u64>,
}

#[path = "support/cases.rs"]
mod support;
use support::cases;

/// Whether work with `deadline` has at least `min` left at `now` (the limiter's rule).
fn can_finish(deadline: Option<u64>, now: u64, min: u64) -> bool {
    deadline.is_none_or(|d| d > now && d - now >= min)
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn no_priority_inversion_over_random_arrivals_releases_and_cancellations(
        capacity in 1usize..5,
        queue in 0usize..5,
        hold_ms in prop_oneof![Just(0u64), 1u64..200],
        lifo_ms in prop_oneof![Just(None), (0u64..100).prop_map(Some)],
        min_ms in prop_oneof![Just(0u64), 1u64..20],
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let hold = hold_ms * 1_000_000;
        let lifo = lifo_ms.map(|ms| ms * 1_000_000);
        let min = min_ms * 1_000_000;
        let clock = ManualClock::new();
        let limit = CriticalityLimit::builder(capacity)
            .queue(queue)
            .hold(Duration::from_nanos(hold))
            .lifo_after(lifo.map(Duration::from_nanos))
            .min_time_left(Duration::from_nanos(min))
            .clock(clock.clone())
            .build()
            .expect("valid");
        // A level is congested when a waiter of it has waited longer than `lifo`.
        let congested = |since: u64, now: u64| lifo.is_some_and(|after| now - since > after);
        let t0 = clock.now();
        let mut now = 0u64; // nanoseconds since t0
        let mut held: Vec<(CriticalityPermit, Criticality)> = Vec::new();
        let mut waiting: Vec<Waiter> = Vec::new();
        let mut last_refusal: [Option<u64>; 4] = [None; 4];
        let mut arrivals = 0;
        for op in ops {
            // The waiters an arrival now finds, once the expired ones are dropped.
            let before: Vec<(Criticality, usize)> = waiting
                .iter()
                .filter(|w| can_finish(w.deadline, now, min))
                .map(|w| (w.ask.level, w.arrival))
                .collect();
            let held_before = held.len();
            let shed = |level: Criticality, last: &[Option<u64>; 4], now: u64| {
                last[level as usize + 1..]
                    .iter()
                    .flatten()
                    .any(|&t| t + hold > now)
            };
            let mut arrived = None;
            // The highest level refused this step for a congested wait that ran out of time:
            // every level below it is shed with it.
            let mut timed_out: Option<Criticality> = None;
            match op {
                Op::Arrive { level, patience } => {
                    let level = Criticality::ALL[usize::from(level)];
                    let deadline = patience.map(|ms| now + u64::from(ms) * 1_000_000);
                    let instant = t0 + Duration::from_nanos(now);
                    let ask = Ask::new(&limit, level, instant, deadline.map(|d| t0 + Duration::from_nanos(d)));
                    waiting.push(Waiter { ask, arrival: arrivals, since: now, deadline });
                    arrived = Some((level, arrivals, shed(level, &last_refusal, now)));
                    arrivals += 1;
                }
                Op::Finish { pick } => {
                    if !held.is_empty() {
                        let (permit, _) = held.remove(pick % held.len());
                        limit.release(permit, Feedback::new(AttemptOutcome::Ok, MS));
                    }
                }
                Op::Leave { pick } => {
                    if !waiting.is_empty() {
                        let w = waiting.remove(pick % waiting.len());
                        // Giving up at its ceiling after a congested wait: its level was refused.
                        if congested(w.since, now) && !can_finish(w.deadline, now, min) {
                            last_refusal[w.ask.level as usize] = Some(now);
                            timed_out = timed_out.max(Some(w.ask.level));
                        }
                    }
                }
                Op::Advance { ms } => {
                    now += u64::from(ms) * 1_000_000;
                    clock.advance(u32::from(ms) * MS);
                }
            }
            // Collect every answer this step produced: the arrival's first (asking is what
            // evicts a waiter or expires one), then those it woke.
            let mut answers = Vec::new();
            let mut still = Vec::new();
            if arrived.is_some() {
                let mut w = waiting.pop().expect("just pushed");
                match w.ask.poll() {
                    Some(answer) => answers.push((w, answer)),
                    None => still.push(w),
                }
            }
            for mut w in waiting.drain(..) {
                if w.ask.woken()
                    && let Some(answer) = w.ask.poll()
                {
                    answers.push((w, answer));
                    continue;
                }
                still.push(w);
            }
            still.sort_by_key(|w| w.arrival);
            waiting = still;
            for (w, answer) in &answers {
                if answer.is_err()
                    && arrived.is_none_or(|(_, id, _)| id != w.arrival)
                    && congested(w.since, now)
                    && !can_finish(w.deadline, now, min)
                {
                    timed_out = timed_out.max(Some(w.ask.level));
                }
            }
            for (w, answer) in answers {
                let level = w.ask.level;
                match answer {
                    Ok(permit) => {
                        // Never a lower level while a higher one is being refused.
                        for higher in Criticality::ALL.into_iter().filter(|&l| l > level) {
                            if let Some(t) = last_refusal[higher as usize] {
                                prop_assert!(now >= t + hold,
                                    "{level} admitted at {now} within the hold of a {higher} refusal at {t}");
                            }
                        }
                        // The highest waiting level gets a freed slot; within it the earliest, or
                        // the newest once the earliest has waited longer than `lifo`.
                        let same = || waiting.iter().filter(|p| p.ask.level == level);
                        let oldest = same().map(|p| p.since).fold(w.since, u64::min);
                        let newest_first = congested(oldest, now);
                        for p in &waiting {
                            prop_assert!(
                                p.ask.level < level
                                    || (p.ask.level == level && (p.arrival > w.arrival) != newest_first),
                                "{level} #{} admitted ahead of waiting {} #{} (newest first: {newest_first})",
                                w.arrival, p.ask.level, p.arrival
                            );
                        }
                        // Admitted from the queue only with at least `min` left.
                        let waited = arrived.is_none_or(|(_, id, _)| id != w.arrival);
                        prop_assert!(!waited || can_finish(w.deadline, now, min),
                            "{level} #{} admitted from the queue with too little time left", w.arrival);
                        held.push((permit, level));
                    }
                    Err(refusal) => {
                        prop_assert_eq!(refusal.by, "criticality limit");
                        prop_assert!(refusal.retry_after.is_some_and(|d| !d.is_zero()));
                        let arrival = arrived.filter(|(_, id, _)| *id == w.arrival);
                        let below_timed_out = timed_out.is_some_and(|t| t > level);
                        let shed = arrival.is_some_and(|(_, _, floor)| floor) || below_timed_out;
                        if !shed && !can_finish(w.deadline, now, min) {
                            // Out of time: dropped for its ceiling; shed only after a congested
                            // wait (an arrival never waited).
                            if arrival.is_none() && congested(w.since, now) {
                                last_refusal[level as usize] = Some(now);
                            }
                            continue;
                        }
                        if below_timed_out {
                            // Shed with the levels below a congested level that timed out.
                            last_refusal[level as usize] = Some(now);
                            continue;
                        }
                        // A refusal never leaves a lower level waiting.
                        for p in &waiting {
                            prop_assert!(p.ask.level >= level,
                                "{level} refused while {} waits", p.ask.level);
                        }
                        if let Some((_, _, floor)) = arrival {
                            // Refused on arrival: shed because a higher level was refused
                            // within the hold, or there was no room and nobody lower to evict.
                            let full = held_before == capacity
                                && before.len() >= queue
                                && before.iter().all(|(l, _)| *l >= level);
                            prop_assert!(floor || full,
                                "{level} refused on arrival with room: {held_before} held, {} waiting", before.len());
                            if level == CriticalPlus && !floor {
                                let demand = held.iter().filter(|(_, l)| *l == CriticalPlus).count()
                                    + before.iter().filter(|(l, _)| *l == CriticalPlus).count();
                                prop_assert!(demand >= capacity,
                                    "CriticalPlus refused with its demand {demand} inside capacity {capacity}");
                            }
                        } else {
                            // Evicted: the newest waiter of the lowest level, for a higher arrival.
                            let (arrival_level, _, _) = arrived.expect("evictions happen on arrival");
                            prop_assert!(arrival_level > level);
                            let lowest = before.iter().map(|(l, _)| *l).min();
                            prop_assert_eq!(lowest, Some(level));
                            let newest = before.iter().filter(|(l, _)| *l == level).map(|(_, a)| *a).max();
                            prop_assert_eq!(newest, Some(w.arrival));
                        }
                        last_refusal[level as usize] = Some(now);
                    }
                }
            }
            prop_assert!(held.len() <= capacity);
            prop_assert_eq!(limit.in_flight(), held.len());
            prop_assert_eq!(limit.queued(), waiting.len());
            // Work-conserving: nobody waits while a slot is free.
            prop_assert!(waiting.is_empty() || held.len() == capacity);
        }
        drop(waiting);
        drop(held);
        prop_assert_eq!((limit.in_flight(), limit.queued()), (0, 0));
    }
}
