//! The peer benchmarks' harness is honest, and rampart allocates nothing in any of them.
//!
//! Every contender of `benches/contenders` is checked to do the work its workload says (W2:
//! three runs per call ending in success; W3: rejected without running the operation), so
//! that the criterion bench compares like with like. Then rampart's cells and the hand-written
//! floors' are counted by the allocation harness: zero allocations per call in every workload.
//! The peers' counts are printed by `cargo run --release -p rampart-bench --example
//! allocations`.

#[path = "../benches/contenders/mod.rs"]
#[allow(dead_code)] // the workload titles are for the allocation example
mod contenders;
#[path = "../benches/contenders/counting.rs"]
mod counting;

use contenders::{Case, Failure, Visitor, Workload, name, runs, runtime, visit_all};
use counting::{per_call, per_call_two_threads};
use tokio::runtime::Runtime;

/// Calls checked per cell.
const CALLS: u64 = 6;

struct Check<'a> {
    rt: &'a Runtime,
    checked: Vec<(Workload, &'static str)>,
    missing: Vec<(Workload, &'static str)>,
    /// rampart's and the floors' allocations per call.
    counted: Vec<(Workload, &'static str, f64)>,
}

/// Whether a contender's allocations are checked: rampart's and the floors'.
fn counted(contender: &str) -> bool {
    contender.starts_with(name::RAMPART) || name::is_floor(contender)
}

impl Check<'_> {
    fn behaves<C: Case>(&mut self, workload: Workload, contender: &'static str, case: &mut C) {
        for _ in 0..CALLS {
            let before = runs();
            let outcome = self.rt.block_on(case.call());
            let ran = runs() - before;
            match workload {
                Workload::W2 => {
                    assert!(outcome.is_ok(), "{contender} {workload:?}: {outcome:?}");
                    assert_eq!(
                        ran, 3,
                        "{contender} {workload:?} ran the operation {ran} times"
                    );
                }
                Workload::W3 => {
                    assert_eq!(outcome, Err(Failure::Rejected), "{contender} {workload:?}");
                    assert_eq!(ran, 0, "{contender} {workload:?} ran the operation");
                }
                _ => assert_eq!(outcome, Ok(1), "{contender} {workload:?}"),
            }
        }
        self.checked.push((workload, contender));
    }
}

impl Visitor for Check<'_> {
    fn case<C: Case>(&mut self, workload: Workload, contender: &'static str, mut case: C) {
        self.behaves(workload, contender, &mut case);
        if counted(contender) {
            let cell = per_call(self.rt, &mut case);
            self.counted.push((workload, contender, cell.allocations));
        }
    }

    fn shared<C: Case + Clone + Send + 'static>(
        &mut self,
        workload: Workload,
        contender: &'static str,
        case: C,
    ) {
        self.behaves(workload, contender, &mut case.clone());
        if counted(contender) {
            let cell = per_call_two_threads(&case);
            self.counted.push((workload, contender, cell.allocations));
        }
    }

    fn missing(&mut self, workload: Workload, contender: &'static str, _: &'static str) {
        self.missing.push((workload, contender));
    }
}

#[test]
fn every_contender_does_the_same_work_and_rampart_and_the_floors_allocate_nothing() {
    let rt = runtime();
    let mut check = Check {
        rt: &rt,
        checked: Vec::new(),
        missing: Vec::new(),
        counted: Vec::new(),
    };
    visit_all(&rt, &mut check);
    // 5 workloads: the floors run W1 (direct, floor, floor2), W2 (floor) and W5 (floor2),
    // rampart all five (and 6 variant cells, its default breaker's in W1 among them), every
    // peer either runs a workload or says why not.
    assert_eq!(check.checked.len(), 5 + 11 + 18, "{:?}", check.checked);
    assert_eq!(check.missing.len(), 7, "{:?}", check.missing);
    assert_eq!(check.counted.len(), 5 + 11);
    for (workload, contender, allocations) in check.counted {
        // W4 runs a hedging policy, whose call keeps its legs' state in one box.
        let expected = if workload == Workload::W4 { 1.0 } else { 0.0 };
        assert_eq!(
            allocations, expected,
            "{contender} allocates in {workload:?}: {allocations} per call"
        );
    }
}
