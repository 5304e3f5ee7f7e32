//! The contenders of the side-by-side benchmarks (issue 7), shared by the criterion bench
//! (`benches/peers.rs`), the allocation harness (`examples/allocations.rs`) and its test
//! (`tests/peer_allocations.rs`), which include this directory with `#[path]`.
//!
//! Every contender is configured for the same behaviour, as its documentation recommends, and
//! runs the same operation on a current-thread tokio runtime:
//!
//! | workload | what |
//! |---|---|
//! | W1 | success path: deadline 2 s, attempt timeout 500 ms, 3 attempts, exponential backoff from 100 ms (never slept), plus a circuit breaker and a retry budget where the contender has them; also the operation called directly and `Policy::none()` |
//! | W2 | two transient failures then success: W1's bounds with zero backoff, no breaker, no budget |
//! | W3 | breaker open: W1's stack with the breaker opened by failures (break of 1 h); the call is rejected without running the operation |
//! | W4 | hedging configured (after 100 ms, 2 legs), deadline 2 s, 500 ms per leg; the primary answers at once, so no hedge fires |
//! | W5 | W1's stack shared by 2 threads, each with its own current-thread runtime |
//!
//! A contender lacking what a workload needs is reported as missing, with the reason. Each
//! contender is compared with the hand-written floor doing the nearest work
//! ([`name::floor_of`]): `direct` for `Policy::none()`, `floor` (`rampart_bench::floor`) for
//! retries and timeouts, `floor2` (`rampart_bench::floor2`) for those plus a breaker and a
//! budget.

pub(crate) mod via_backon;
pub(crate) mod via_failsafe;
pub(crate) mod via_floor;
pub(crate) mod via_rampart;
pub(crate) mod via_seatbelt;
pub(crate) mod via_tower;
pub(crate) mod via_tower_resilience;

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::hint::black_box;
use std::time::Duration;

use tokio::runtime::Runtime;

/// The total bound on a call.
pub(crate) const DEADLINE: Duration = Duration::from_secs(2);
/// The bound on each attempt.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);
/// Attempts per call, the first included.
pub(crate) const MAX_ATTEMPTS: u32 = 3;
/// The first backoff delay of W1's exponential backoff.
pub(crate) const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// How long the primary runs alone before a hedge (W4).
pub(crate) const HEDGE_DELAY: Duration = Duration::from_millis(100);
/// The break of W3's breakers: long enough that it never ends during a run.
pub(crate) const BREAK: Duration = Duration::from_secs(3600);

/// The operation's error: `Copy`, allocation-free and `Clone` (tower-resilience's hedge needs a
/// `Clone` error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A transient failure of the operation.
    Transient,
    /// A contender's own timeout, where it asks the caller for the error value.
    TimedOut,
    /// A contender's breaker rejected the call, where it asks the caller for the error value.
    Rejected,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::Transient => "transient failure",
            Fault::TimedOut => "timed out",
            Fault::Rejected => "rejected by the breaker",
        })
    }
}

impl std::error::Error for Fault {}

/// How a call ended, the same for every contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The breaker rejected the call.
    Rejected,
    /// Any other failure.
    Failed,
}

/// What a call returns, the same for every contender.
pub(crate) type Outcome = Result<u32, Failure>;

thread_local! {
    /// Runs of [`Flaky`] and [`Guarded`] on this thread.
    static RUNS: Cell<u64> = const { Cell::new(0) };
    /// Whether [`Guarded`] fails.
    static FAILING: Cell<bool> = const { Cell::new(false) };
}

/// Runs of [`Flaky`] and [`Guarded`] on this thread so far.
pub(crate) fn runs() -> u64 {
    RUNS.with(Cell::get)
}

/// Makes [`Guarded`] fail (to open breakers) or succeed.
pub(crate) fn set_failing(failing: bool) {
    FAILING.with(|f| f.set(failing));
}

/// The operation a call runs, given the attempt number (or the request, for contenders that
/// do not number attempts).
pub(crate) trait Op: Copy + Send + Sync + 'static {
    /// Runs the operation once.
    fn run(self, n: u32) -> impl Future<Output = Result<u32, Fault>> + Send + 'static;
}

/// Answers at once (W1, W4, W5).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer;

impl Op for Answer {
    #[inline]
    async fn run(self, n: u32) -> Result<u32, Fault> {
        Ok(black_box(n))
    }
}

/// Fails twice, then answers, in a cycle of three runs per thread (W2). Every contender makes
/// exactly three attempts per call, so each call sees fail, fail, answer
/// (`tests/peer_allocations.rs` checks it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flaky;

impl Op for Flaky {
    #[inline]
    async fn run(self, n: u32) -> Result<u32, Fault> {
        let run = RUNS.with(|r| {
            let run = r.get();
            r.set(run + 1);
            run
        });
        if run % 3 < 2 {
            Err(Fault::Transient)
        } else {
            Ok(black_box(n))
        }
    }
}

/// Counts its runs and fails while [`set_failing`] says so (W3: opens the breakers, then shows
/// that a rejected call did not run it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Guarded;

impl Op for Guarded {
    #[inline]
    async fn run(self, n: u32) -> Result<u32, Fault> {
        RUNS.with(|r| r.set(r.get() + 1));
        if FAILING.with(Cell::get) {
            Err(Fault::Transient)
        } else {
            Ok(black_box(n))
        }
    }
}

/// One contender configured for one workload: makes one call.
pub(crate) trait Case {
    /// Makes one call.
    async fn call(&mut self) -> Outcome;
}

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workload {
    /// Success path.
    W1,
    /// Two transient failures, then success.
    W2,
    /// Breaker open.
    W3,
    /// Hedging configured, primary first.
    W4,
    /// W1 shared by two threads.
    W5,
}

impl Workload {
    /// Every workload, in order.
    pub(crate) const ALL: [Workload; 5] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
    ];

    /// The workload with criterion group name `id`.
    pub(crate) fn from_id(id: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.id() == id)
    }

    /// The criterion group name.
    pub(crate) fn id(self) -> &'static str {
        match self {
            Workload::W1 => "w1_success",
            Workload::W2 => "w2_two_failures",
            Workload::W3 => "w3_breaker_open",
            Workload::W4 => "w4_hedge_unfired",
            Workload::W5 => "w5_two_threads",
        }
    }

    /// A one-line description.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Workload::W1 => {
                "W1 success path (deadline, attempt timeout, 3 attempts, breaker, budget)"
            }
            Workload::W2 => "W2 two transient failures then success, zero backoff",
            Workload::W3 => "W3 breaker open: rejected without running the operation",
            Workload::W4 => "W4 hedging configured, primary answers first (no hedge fires)",
            Workload::W5 => "W5 W1 shared by two threads (time per call, both threads together)",
        }
    }
}

/// The contenders' names, as criterion and the tables show them.
pub(crate) mod name {
    use super::Workload;

    /// The operation called directly (W1): the floor of `Policy::none()`.
    pub(crate) const DIRECT: &str = "direct";
    /// The hand-written floor (`rampart_bench::floor`): deadline, attempt timeout, retries.
    pub(crate) const FLOOR: &str = "floor";
    /// The second hand-written floor (`rampart_bench::floor2`): the floor plus a breaker and a
    /// budget, a full policy's work.
    pub(crate) const FLOOR2: &str = "floor2";
    /// rampart.
    pub(crate) const RAMPART: &str = "rampart";
    /// `Policy::none()` (W1): one attempt, no bound.
    pub(crate) const RAMPART_NONE: &str = "rampart-none";
    /// rampart without breaker and budget (W1, W5): the work of the floor and of backon.
    pub(crate) const RAMPART_RETRY_ONLY: &str = "rampart-retry-only";
    /// rampart with its default breaker, a ratio window (W1): `rampart` counts failures in a
    /// row, as `floor2` does.
    pub(crate) const RAMPART_DEFAULT_BREAKER: &str = "rampart-default-breaker";
    /// rampart with a breaker alone (W3): the work of failsafe.
    pub(crate) const RAMPART_BREAKER_ONLY: &str = "rampart-breaker-only";
    /// rampart with an adaptive hedge delay (W4), for comparison with tower's hedge.
    pub(crate) const RAMPART_ADAPTIVE: &str = "rampart-adaptive";
    /// tower.
    pub(crate) const TOWER: &str = "tower";
    /// tower-resilience.
    pub(crate) const TOWER_RESILIENCE: &str = "tower-resilience";
    /// seatbelt.
    pub(crate) const SEATBELT: &str = "seatbelt";
    /// backon.
    pub(crate) const BACKON: &str = "backon";
    /// failsafe.
    pub(crate) const FAILSAFE: &str = "failsafe";

    /// Whether a contender is hand-written (a floor), not a library.
    pub(crate) fn is_floor(contender: &str) -> bool {
        matches!(contender, DIRECT | FLOOR | FLOOR2)
    }

    /// The floor a contender is compared with in a workload: the hand-written code
    /// doing the nearest work. rampart's variants and tower-resilience do exactly their floor's
    /// work; tower's W1 has a budget and no breaker (its floor, `floor`, has neither),
    /// seatbelt's a breaker and no budget (`floor2` has both); backon does `floor`'s.
    pub(crate) fn floor_of(workload: Workload, contender: &str) -> Option<&'static str> {
        use Workload::{W1, W2, W5};
        match (workload, contender) {
            (_, RAMPART_NONE) => Some(DIRECT),
            (W1, RAMPART_RETRY_ONLY | TOWER | BACKON) => Some(FLOOR),
            (W1 | W5, RAMPART | RAMPART_DEFAULT_BREAKER | TOWER_RESILIENCE | SEATBELT) => {
                Some(FLOOR2)
            }
            (W2, RAMPART | TOWER | TOWER_RESILIENCE | SEATBELT | BACKON) => Some(FLOOR),
            _ => None,
        }
    }
}

/// Receives every (workload, contender) cell.
pub(crate) trait Visitor {
    /// A contender configured for a single-thread workload (W1 to W4).
    fn case<C: Case>(&mut self, workload: Workload, contender: &'static str, case: C);
    /// A contender configured for W5: each thread gets a clone, sharing the policy's state.
    fn shared<C: Case + Clone + Send + 'static>(
        &mut self,
        workload: Workload,
        contender: &'static str,
        case: C,
    );
    /// A contender that cannot run a workload, and why.
    fn missing(&mut self, workload: Workload, contender: &'static str, why: &'static str);
}

/// Opens `case`'s breaker: calls with a failing operation until a call is rejected without
/// running it.
///
/// # Panics
///
/// If the breaker does not open within 10,000 calls.
pub(crate) fn trip<C: Case>(rt: &Runtime, mut case: C) -> C {
    set_failing(true);
    let opened = rt.block_on(async {
        for _ in 0..10_000 {
            let before = runs();
            let outcome = case.call().await;
            if runs() == before {
                return outcome == Err(Failure::Rejected);
            }
        }
        false
    });
    set_failing(false);
    assert!(opened, "the breaker did not open");
    case
}

/// Visits every cell, workload by workload. Builds the contenders inside `rt`'s context.
pub(crate) fn visit_all(rt: &Runtime, v: &mut impl Visitor) {
    use Workload::{W1, W2, W3, W4, W5};
    use name::*;
    let _context = rt.enter();

    v.case(W1, DIRECT, via_floor::Direct(Answer));
    v.case(W1, RAMPART_NONE, via_rampart::w1_none(Answer));
    v.case(W1, FLOOR, via_floor::W1(Answer));
    v.case(W1, RAMPART_RETRY_ONLY, via_rampart::w1_retry_only(Answer));
    v.case(W1, FLOOR2, via_floor::w1_guarded(Answer));
    v.case(W1, RAMPART, via_rampart::w1(Answer));
    v.case(
        W1,
        RAMPART_DEFAULT_BREAKER,
        via_rampart::w1_default_breaker(Answer),
    );
    v.case(W1, TOWER, via_tower::w1(Answer));
    v.case(W1, TOWER_RESILIENCE, via_tower_resilience::w1(Answer));
    v.case(W1, SEATBELT, via_seatbelt::w1(Answer));
    v.case(W1, BACKON, via_backon::w1(Answer));
    v.missing(W1, FAILSAFE, "a circuit breaker only: no retry, no timeout");

    v.case(W2, FLOOR, via_floor::W2(Flaky));
    v.case(W2, RAMPART, via_rampart::w2(Flaky));
    v.case(W2, TOWER, via_tower::w2(Flaky));
    v.case(W2, TOWER_RESILIENCE, via_tower_resilience::w2(Flaky));
    v.case(W2, SEATBELT, via_seatbelt::w2(Flaky));
    v.case(W2, BACKON, via_backon::w2(Flaky));
    v.missing(W2, FAILSAFE, "a circuit breaker only: no retry");

    v.case(W3, RAMPART, trip(rt, via_rampart::w3(Guarded)));
    v.case(
        W3,
        RAMPART_BREAKER_ONLY,
        trip(rt, via_rampart::w3_breaker_only(Guarded)),
    );
    v.missing(W3, TOWER, "no circuit breaker");
    v.case(
        W3,
        TOWER_RESILIENCE,
        trip(rt, via_tower_resilience::w3(Guarded)),
    );
    v.case(W3, SEATBELT, trip(rt, via_seatbelt::w3(Guarded)));
    v.missing(W3, BACKON, "no circuit breaker");
    v.case(W3, FAILSAFE, trip(rt, via_failsafe::w3(Guarded)));

    v.case(W4, RAMPART, via_rampart::w4(Answer));
    v.case(W4, RAMPART_ADAPTIVE, via_rampart::w4_adaptive(Answer));
    v.case(W4, TOWER, via_tower::w4(Answer));
    v.case(W4, TOWER_RESILIENCE, via_tower_resilience::w4(Answer));
    v.case(W4, SEATBELT, via_seatbelt::w4(Answer));
    v.missing(W4, BACKON, "no hedging");
    v.missing(W4, FAILSAFE, "no hedging");

    v.shared(W5, FLOOR2, via_floor::w1_guarded(Answer));
    v.shared(W5, RAMPART, via_rampart::w1(Answer));
    v.shared(W5, RAMPART_RETRY_ONLY, via_rampart::w1_retry_only(Answer));
    v.shared(W5, TOWER, via_tower::w1(Answer));
    v.shared(W5, TOWER_RESILIENCE, via_tower_resilience::w1(Answer));
    v.shared(W5, SEATBELT, via_seatbelt::w1(Answer));
    v.shared(W5, BACKON, via_backon::w1(Answer));
    v.missing(W5, FAILSAFE, "a circuit breaker only: no retry, no timeout");
}

/// The current-thread runtime every workload runs on (time enabled, as every contender needs).
///
/// # Panics
///
/// If tokio cannot build it.
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}
