//! Invariants of the executor over random policies and random fault schedules, on paused time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use rampart::backoff::Backoff;
use rampart::{Event, Instant, Policy, StopReason, TimeoutMode, Verdict};

/// What one attempt does.
#[derive(Debug, Clone, Copy)]
enum Step {
    Ok(u64),
    Transient(u64),
    Permanent(u64),
    /// Waits for its cancellation, then fails.
    Honours,
    /// Never returns on its own.
    Hangs,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..400u64).prop_map(Step::Ok),
        (0..400u64).prop_map(Step::Transient),
        (0..400u64).prop_map(Step::Permanent),
        Just(Step::Honours),
        Just(Step::Hangs),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    max_attempts: u32,
    deadline_ms: Option<u64>,
    attempt_timeout_ms: Option<u64>,
    grace_ms: u64,
    backoff_ms: u64,
    schedule: Vec<Step>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1..=5u32,
        prop::option::of(50..2_000u64),
        prop::option::of(10..1_000u64),
        0..50u64,
        0..300u64,
        prop::collection::vec(step(), 5),
    )
        .prop_map(
            |(max_attempts, deadline_ms, attempt_timeout_ms, grace_ms, backoff_ms, schedule)| {
                Case {
                    max_attempts,
                    // Something must bound a hanging attempt.
                    deadline_ms: deadline_ms.or(Some(5_000)),
                    attempt_timeout_ms,
                    grace_ms,
                    backoff_ms,
                    schedule,
                }
            },
        )
}

#[derive(Debug, PartialEq, Eq)]
enum Fault {
    Transient,
    Permanent,
    Cancelled,
}

struct Observed {
    stop: StopReason,
    attempts: u32,
    calls: u32,
    starts: Vec<Duration>,
    elapsed: Duration,
    terminal_events: usize,
    ok: bool,
}

fn run(case: &Case) -> Observed {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let terminal = Arc::new(AtomicU32::new(0));
        let seen = terminal.clone();
        let mut builder = Policy::builder()
            .max_attempts(case.max_attempts)
            .timeout_mode(TimeoutMode::Abandon {
                grace: Duration::from_millis(case.grace_ms),
            })
            .backoff(Backoff::constant(Duration::from_millis(case.backoff_ms)))
            .listener(move |event: &Event<'_>| {
                if let Event::CallEnded { .. } = event {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            });
        builder = match case.deadline_ms {
            Some(ms) => builder.total_timeout(Duration::from_millis(ms)),
            None => builder.no_total_timeout(),
        };
        builder = match case.attempt_timeout_ms {
            Some(ms) => builder.attempt_timeout(Duration::from_millis(ms)),
            None => builder.no_attempt_timeout(),
        };
        let policy = builder
            .classifier(|r: &Result<(), Fault>| match r {
                Ok(()) => Verdict::Ok,
                Err(Fault::Permanent) => Verdict::Permanent,
                Err(_) => Verdict::Transient,
            })
            .build()
            .expect("valid");
        let start = Instant::now();
        let starts = Mutex::new(Vec::new());
        let calls = AtomicU32::new(0);
        let result = policy
            .call()
            .try_run(async |attempt| {
                let n = calls.fetch_add(1, Ordering::SeqCst) as usize;
                starts.lock().expect("starts").push(start.elapsed());
                let sleep = |ms| tokio::time::sleep(Duration::from_millis(ms));
                match case.schedule[n % case.schedule.len()] {
                    Step::Ok(ms) => {
                        sleep(ms).await;
                        Ok(())
                    }
                    Step::Transient(ms) => {
                        sleep(ms).await;
                        Err(Fault::Transient)
                    }
                    Step::Permanent(ms) => {
                        sleep(ms).await;
                        Err(Fault::Permanent)
                    }
                    Step::Honours => {
                        attempt.cancelled().await;
                        Err(Fault::Cancelled)
                    }
                    Step::Hangs => std::future::pending().await,
                }
            })
            .await
            .expect("no caller token");
        Observed {
            stop: result.stop(),
            attempts: result.attempts(),
            calls: calls.load(Ordering::SeqCst),
            starts: starts.into_inner().expect("starts"),
            elapsed: start.elapsed(),
            terminal_events: terminal.load(Ordering::SeqCst) as usize,
            ok: result.value().is_some(),
        }
    })
}

#[path = "support/cases.rs"]
mod support;
use support::cases;

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn the_executor_keeps_its_bounds_under_any_fault_schedule(case in case()) {
        let seen = run(&case);
        prop_assert!(seen.attempts >= 1 && seen.attempts <= case.max_attempts);
        prop_assert_eq!(seen.attempts, seen.calls, "every attempt ran the callback once");
        prop_assert_eq!(seen.terminal_events, 1, "exactly one terminal event");
        if let Some(deadline) = case.deadline_ms.map(Duration::from_millis) {
            let grace = Duration::from_millis(case.grace_ms);
            prop_assert!(
                seen.elapsed <= deadline + grace,
                "call took {:?}, deadline {:?} + grace {:?}", seen.elapsed, deadline, grace
            );
            prop_assert!(
                seen.starts.iter().all(|s| *s < deadline),
                "an attempt started at or after the deadline: {:?}", seen.starts
            );
        }
        // The schedule's only value is classified Ok: a value means success, and success a value.
        prop_assert_eq!(seen.ok, seen.stop == StopReason::Succeeded);
        if seen.stop == StopReason::AttemptsExhausted {
            prop_assert_eq!(seen.attempts, case.max_attempts);
        }
    }
}
