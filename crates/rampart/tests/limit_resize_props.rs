//! A concurrency limit resized while it serves, over random sequences of resizes, arrivals,
//! releases, drops and cancellations: its counts stay exact and its waiters are admitted in
//! the order they arrived.
//!
//! The limiter is asked directly and each admission future is polled by hand, so nothing runs
//! in the background. A waiter handed a slot is woken but takes it only when polled (a step
//! of its own), so a resize or a cancellation can fall in between, as it can on a runtime.
//! After every step the test compares the limiter's counts with its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use proptest::prelude::*;
use rampart::admit::{Admit, AdmitContext, Feedback, Refusal};
use rampart::limit::ConcurrencyLimit;
use rampart::{AttemptOutcome, Criticality, Instant};

#[path = "support/cases.rs"]
mod support;
use support::cases;

type Permit = <ConcurrencyLimit as Admit>::Permit;

/// Set when the admission future it belongs to is woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One attempt asking the limit: its admission future, polled by hand.
struct Ask {
    arrival: usize,
    future: Pin<Box<dyn Future<Output = Result<Permit, Refusal>> + Send>>,
    flag: Arc<Flag>,
    waker: Waker,
}

impl Ask {
    fn new(limit: &ConcurrencyLimit, arrival: usize) -> Ask {
        let limit = limit.clone();
        let flag = Arc::new(Flag::default());
        Ask {
            arrival,
            future: Box::pin(async move {
                let cx = AdmitContext::new("test", Criticality::Critical, Instant::now());
                limit.acquire(&cx).await
            }),
            waker: Waker::from(Arc::clone(&flag)),
            flag,
        }
    }

    /// Whether it was woken since it was last polled: handed a slot.
    fn woken(&self) -> bool {
        self.flag.0.load(Ordering::SeqCst)
    }

    /// Polls the future; `None` while it waits.
    fn poll(&mut self) -> Option<Result<Permit, Refusal>> {
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
}

#[derive(Debug, Clone)]
enum Op {
    /// The limit changes to `max`.
    Resize { max: usize },
    /// An attempt asks for a slot.
    Arrive,
    /// The `pick`-th attempt in flight ends through the executor's path.
    Release { pick: usize },
    /// The `pick`-th attempt in flight drops its permit (a refusal further down a tuple of
    /// limiters, a cancelled caller).
    Drop { pick: usize },
    /// The `pick`-th waiter gives up (whether or not it was handed a slot).
    Leave { pick: usize },
    /// The waiters that were woken are polled.
    Poll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (1usize..7).prop_map(|max| Op::Resize { max }),
        3 => Just(Op::Arrive),
        2 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        2 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Leave { pick }),
        3 => Just(Op::Poll),
    ]
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn counts_stay_exact_and_waiters_keep_their_order_over_random_resizes(
        initial in 1usize..7,
        queue in 0usize..5,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let limit = ConcurrencyLimit::new(initial).queue(queue);
        let mut max = initial;
        let mut held: Vec<Permit> = Vec::new();
        let mut waiting: Vec<Ask> = Vec::new();
        let mut arrivals = 0;
        // The arrival number of the last waiter admitted from the queue.
        let mut last_from_queue: Option<usize> = None;
        for op in ops {
            let handed_before: Vec<usize> =
                waiting.iter().filter(|ask| ask.woken()).map(|ask| ask.arrival).collect();
            match op {
                Op::Resize { max: to } => {
                    limit.set_limit(to).expect("valid");
                    max = to;
                }
                Op::Arrive => {
                    let mut ask = Ask::new(&limit, arrivals);
                    arrivals += 1;
                    let in_flight = held.len() + waiting.iter().filter(|ask| ask.woken()).count();
                    match ask.poll() {
                        Some(Ok(permit)) => {
                            prop_assert!(waiting.iter().all(Ask::woken), "admitted ahead of a waiter");
                            prop_assert!(in_flight < max, "admitted at {in_flight} in flight, limit {max}");
                            held.push(permit);
                        }
                        Some(Err(_)) => {
                            prop_assert!(in_flight >= max, "refused at {in_flight} in flight, limit {max}");
                            prop_assert_eq!(waiting.len(), queue, "refused with room in the queue");
                        }
                        None => waiting.push(ask),
                    }
                }
                Op::Release { pick } => {
                    if !held.is_empty() {
                        let permit = held.remove(pick % held.len());
                        limit.release(permit, Feedback::new(AttemptOutcome::Ok, Duration::from_millis(1)));
                    }
                }
                Op::Drop { pick } => {
                    if !held.is_empty() {
                        drop(held.remove(pick % held.len()));
                    }
                }
                Op::Leave { pick } => {
                    if !waiting.is_empty() {
                        drop(waiting.remove(pick % waiting.len()));
                    }
                }
                Op::Poll => {
                    let mut still = Vec::new();
                    for mut ask in waiting.drain(..) {
                        if !ask.woken() {
                            still.push(ask);
                            continue;
                        }
                        match ask.poll() {
                            Some(Ok(permit)) => {
                                prop_assert!(
                                    last_from_queue < Some(ask.arrival),
                                    "waiter {} admitted after waiter {:?}", ask.arrival, last_from_queue
                                );
                                last_from_queue = Some(ask.arrival);
                                held.push(permit);
                            }
                            Some(Err(refusal)) => prop_assert!(false, "a waiter refused: {refusal:?}"),
                            None => still.push(ask),
                        }
                    }
                    waiting = still;
                }
            }
            // Slots go to the earliest waiters: those handed one come first in arrival order.
            let handed = waiting.iter().take_while(|ask| ask.woken()).count();
            prop_assert!(
                waiting[handed..].iter().all(|ask| !ask.woken()),
                "a later waiter was handed a slot before an earlier one"
            );
            let taken = held.len() + handed;
            // A slot is handed to a waiter only below the limit (one owed to a shrink never is).
            if waiting[..handed].iter().any(|ask| !handed_before.contains(&ask.arrival)) {
                prop_assert!(taken <= max, "a waiter handed a slot with {taken} taken under a limit of {max}");
            }
            let (in_flight, available) = (limit.in_flight(), limit.available());
            let owed = taken.saturating_sub(max);
            prop_assert_eq!(limit.limit(), max);
            prop_assert_eq!(in_flight, taken, "in flight: held, or handed to a waiter");
            prop_assert_eq!(limit.queued(), waiting.len(), "queued");
            prop_assert!(
                available <= max.saturating_sub(in_flight),
                "{available} available with {in_flight} in flight under a limit of {max}"
            );
            if owed == 0 {
                prop_assert_eq!(available + in_flight, max, "nothing owed to a shrink");
            }
            if waiting.len() > handed {
                prop_assert_eq!(available, 0, "a free slot while attempts wait");
                prop_assert!(in_flight >= max, "a waiter left waiting below the limit");
            }
        }
    }
}
