//! Properties of streaming calls over random schedules of opening delays, first items, later
//! items, failures and stalls, on tokio's paused time: the op is called again only while no
//! item has been delivered, the whole stream ends within the deadline, an error is always the
//! last item, and the idle timeout is exact.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use futures_core::Stream;
use futures_util::StreamExt;
use proptest::prelude::*;
use rampart::backoff::Backoff;
use rampart::hedge::Hedge;
use rampart::stream::StreamOptions;
use rampart::{Error, Policy};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Fail;

/// How one attempt's stream behaves.
#[derive(Debug, Clone)]
struct Plan {
    open_ms: u64,
    open_fails: bool,
    /// Each step after its delay: an item (`Some(true)` an error), or the end (`None`).
    steps: Vec<(u64, Option<bool>)>,
    /// Whether the source goes silent for ever after its steps (else it ends).
    stall: bool,
}

type Source = Pin<Box<dyn Stream<Item = Result<u32, Fail>> + Send>>;

fn source(plan: &Plan) -> Source {
    let steps = plan.steps.clone().into_iter().enumerate();
    let stall = plan.stall;
    Box::pin(futures_util::stream::unfold(
        steps,
        move |mut steps| async move {
            match steps.next() {
                Some((n, (delay, step))) => {
                    tokio::time::sleep(ms(delay)).await;
                    let item = match step? {
                        true => Err(Fail),
                        false => Ok(n as u32),
                    };
                    Some((item, steps))
                }
                None if stall => std::future::pending().await,
                None => None,
            }
        },
    ))
}

fn plan() -> impl Strategy<Value = Plan> {
    let step = (
        0u64..300,
        prop_oneof![Just(None), any::<bool>().prop_map(Some)],
    );
    (
        0u64..200,
        prop::bool::weighted(0.2),
        prop::collection::vec(step, 0..6),
        any::<bool>(),
    )
        .prop_map(|(open_ms, open_fails, steps, stall)| Plan {
            open_ms,
            open_fails,
            steps,
            stall,
        })
}

#[derive(Debug, Clone)]
struct Config {
    max_attempts: u32,
    attempt_timeout_ms: u64,
    deadline_ms: u64,
    idle_ms: Option<u64>,
    backoff_ms: u64,
    /// A fixed hedge delay: legs of the open phase race, and the first to deliver wins.
    hedge_ms: Option<u64>,
}

fn config() -> impl Strategy<Value = Config> {
    (
        1u32..=4,
        100u64..600,
        300u64..2_000,
        prop::option::of(50u64..400),
        0u64..100,
        prop::option::weighted(0.3, 0u64..200),
    )
        .prop_map(
            |(max_attempts, attempt_timeout_ms, deadline_ms, idle_ms, backoff_ms, hedge_ms)| {
                Config {
                    max_attempts,
                    attempt_timeout_ms,
                    deadline_ms,
                    idle_ms,
                    backoff_ms,
                    hedge_ms,
                }
            },
        )
}

/// What one streaming call did.
struct Run {
    /// Calls of the op made after an item had been delivered.
    late_calls: u32,
    /// Calls of the op in all.
    calls: u32,
    /// When the call ended: its error, or the stream's end.
    elapsed: Duration,
    /// Whether each item was an error, in order, with the time it was delivered.
    items: Vec<(bool, Duration)>,
    /// The idle timeout that ended the stream, if one did.
    idled: Option<Duration>,
}

fn run(config: &Config, plans: &[Plan]) -> Run {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let builder = match config.hedge_ms {
            Some(delay) => Policy::builder().hedge(Hedge::fixed(ms(delay))),
            None => Policy::builder(),
        };
        let policy = builder
            .max_attempts(config.max_attempts)
            .attempt_timeout(ms(config.attempt_timeout_ms))
            .total_timeout(ms(config.deadline_ms))
            .backoff(Backoff::constant(ms(config.backoff_ms)))
            .no_budget()
            .build()
            .expect("valid policy");
        let options = match config.idle_ms {
            Some(idle) => StreamOptions::builder().idle_timeout(ms(idle)),
            None => StreamOptions::builder(),
        }
        .build()
        .expect("valid options");
        let calls = AtomicU32::new(0);
        let late_calls = AtomicU32::new(0);
        let delivered = AtomicBool::new(false);
        let start = Instant::now();
        let opened = policy
            .call()
            .stream(options, async |_| {
                if delivered.load(Ordering::SeqCst) {
                    late_calls.fetch_add(1, Ordering::SeqCst);
                }
                let n = calls.fetch_add(1, Ordering::SeqCst) as usize;
                let plan = &plans[n.min(plans.len() - 1)];
                tokio::time::sleep(ms(plan.open_ms)).await;
                match plan.open_fails {
                    true => Err(Fail),
                    false => Ok(source(plan)),
                }
            })
            .await;
        let mut items = Vec::new();
        let mut idled = None;
        let mut ended = start.elapsed();
        if let Ok(stream) = opened {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                delivered.store(true, Ordering::SeqCst);
                if let Err(Error::IdleTimeout { idle, .. }) = &item {
                    idled = Some(*idle);
                }
                items.push((item.is_err(), start.elapsed()));
            }
            ended = start.elapsed();
        }
        // Anything the op could still be called by has had every chance to run.
        tokio::time::sleep(ms(10 * config.deadline_ms)).await;
        Run {
            late_calls: late_calls.load(Ordering::SeqCst),
            calls: calls.load(Ordering::SeqCst),
            elapsed: ended,
            items,
            idled,
        }
    })
}

#[path = "support/cases.rs"]
mod support;
use support::cases;

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn a_stream_is_never_retried_after_its_first_item_and_ends_within_its_deadline(
        config in config(),
        plans in prop::collection::vec(plan(), 1..5),
    ) {
        let run = run(&config, &plans);
        prop_assert_eq!(run.late_calls, 0, "the op was called after an item was delivered");
        prop_assert!(run.calls <= config.max_attempts);
        prop_assert!(
            run.elapsed <= ms(config.deadline_ms),
            "the stream ended at {:?}, after its {}ms deadline", run.elapsed, config.deadline_ms
        );
        if let Some(position) = run.items.iter().position(|(err, _)| *err) {
            prop_assert_eq!(position, run.items.len() - 1, "an error is the stream's last item");
        }
        if let Some(idle) = config.idle_ms.map(ms) {
            // After the first item, no gap between deliveries outlasts the idle timeout, and
            // the idle error comes exactly that long after the last item.
            for pair in run.items.windows(2) {
                prop_assert!(pair[1].1 - pair[0].1 <= idle, "a gap of {:?}", pair[1].1 - pair[0].1);
            }
            if run.idled.is_some() {
                let [.., before, stalled] = run.items[..] else {
                    panic!("an idle error follows at least the first item");
                };
                prop_assert_eq!(stalled.1 - before.1, idle);
            }
        } else {
            prop_assert!(run.idled.is_none());
        }
    }
}

/// What one attempt's stream does: fail before its first item (opening fails, or the first
/// item is an error), deliver `k` items then fail, or deliver `k` items then stall or end.
#[derive(Debug, Clone, Copy)]
enum Schedule {
    OpenFails,
    FirstItemFails,
    FailAfter(u32),
    StallAfter(u32),
    EndAfter(u32),
}

fn schedule() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        Just(Schedule::OpenFails),
        Just(Schedule::FirstItemFails),
        (1u32..6).prop_map(Schedule::FailAfter),
        (1u32..6).prop_map(Schedule::StallAfter),
        (0u32..6).prop_map(Schedule::EndAfter),
    ]
}

/// Items of attempt `attempt` (from 0) are `attempt * 100 + i`, each after `gap_ms`.
fn scheduled(attempt: u32, schedule: Schedule, gap_ms: u64) -> Source {
    let (items, then_fail, stall) = match schedule {
        Schedule::OpenFails | Schedule::FirstItemFails => (0, true, false),
        Schedule::FailAfter(k) => (k, true, false),
        Schedule::StallAfter(k) => (k, false, true),
        Schedule::EndAfter(k) => (k, false, false),
    };
    Box::pin(futures_util::stream::unfold(0u32, move |i| async move {
        tokio::time::sleep(ms(gap_ms)).await;
        if i < items {
            return Some((Ok(attempt * 100 + i), i + 1));
        }
        if then_fail && i == items {
            return Some((Err(Fail), i + 1));
        }
        if stall {
            std::future::pending::<()>().await;
        }
        None
    }))
}

/// Runs one stream call whose attempt `n` follows `schedules[n]` (the last one repeating);
/// returns the op's calls made after an item was delivered, the op's calls, and the `Ok`
/// items delivered.
fn run_schedules(
    schedules: &[Schedule],
    hedge_ms: Option<u64>,
    gap_ms: u64,
) -> (u32, u32, Vec<u32>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let builder = match hedge_ms {
            Some(delay) => Policy::builder().hedge(Hedge::fixed(ms(delay))),
            None => Policy::builder(),
        };
        let policy = builder
            .max_attempts(4)
            .total_timeout(ms(5_000))
            .backoff(Backoff::constant(ms(5)))
            .no_budget()
            .build()
            .expect("valid policy");
        let options = StreamOptions::builder()
            .idle_timeout(ms(100))
            .build()
            .expect("valid options");
        let calls = AtomicU32::new(0);
        let late_calls = AtomicU32::new(0);
        let delivered = AtomicBool::new(false);
        let opened = policy
            .call()
            .stream(options, async |_| {
                if delivered.load(Ordering::SeqCst) {
                    late_calls.fetch_add(1, Ordering::SeqCst);
                }
                let n = calls.fetch_add(1, Ordering::SeqCst);
                let schedule = schedules[(n as usize).min(schedules.len() - 1)];
                match schedule {
                    Schedule::OpenFails => Err(Fail),
                    schedule => Ok(scheduled(n, schedule, gap_ms)),
                }
            })
            .await;
        let mut items = Vec::new();
        if let Ok(stream) = opened {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                delivered.store(true, Ordering::SeqCst);
                if let Ok(item) = item {
                    items.push(item);
                }
            }
        }
        // Anything that could still call the op has had every chance to.
        tokio::time::sleep(ms(10_000)).await;
        (
            late_calls.load(Ordering::SeqCst),
            calls.load(Ordering::SeqCst),
            items,
        )
    })
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn the_op_is_never_called_after_an_item_and_the_items_are_a_prefix_of_one_attempts_items(
        schedules in prop::collection::vec(schedule(), 1..5),
        hedge_ms in prop::option::weighted(0.3, 0u64..40),
        gap_ms in 1u64..30,
    ) {
        let (late, calls, items) = run_schedules(&schedules, hedge_ms, gap_ms);
        prop_assert_eq!(late, 0, "the op was called after an item was delivered");
        prop_assert!(calls <= 4);
        if let Some(first) = items.first() {
            let attempt = first / 100;
            prop_assert!(attempt < calls, "item {} from an attempt never made", first);
            let expected: Vec<u32> = (0..items.len() as u32).map(|i| attempt * 100 + i).collect();
            prop_assert_eq!(&items, &expected, "not a prefix of attempt {}'s items", attempt);
            let planned = match schedules[(attempt as usize).min(schedules.len() - 1)] {
                Schedule::FailAfter(k) | Schedule::StallAfter(k) | Schedule::EndAfter(k) => k,
                Schedule::OpenFails | Schedule::FirstItemFails => 0,
            };
            prop_assert_eq!(items.len() as u32, planned, "every item of the kept attempt arrives");
        }
    }
}
