//! The allocation harness: heap allocations and bytes per call for every contender and
//! workload of the peer benchmarks, counted by a counting global allocator (outside criterion,
//! so the timed runs use the system allocator).
//!
//! `cargo run --release -p rampart-bench --example allocations > target/peer-allocations.tsv`
//!
//! Prints one tab-separated line per workload (`#workload`, its id, its title) and per cell:
//! workload, contender, allocations per call and bytes per call, or `-` and the reason the
//! contender cannot run the workload. `examples/table.rs` joins it with criterion's times. A
//! readable table goes to stderr.

#[path = "../benches/contenders/mod.rs"]
#[allow(dead_code)] // which floor a contender is compared with is for the table
mod contenders;
#[path = "../benches/contenders/counting.rs"]
mod counting;

use contenders::{Case, Visitor, Workload, runtime, visit_all};
use counting::{PerCall, per_call, per_call_two_threads};
use tokio::runtime::Runtime;

struct Harness<'a> {
    rt: &'a Runtime,
    last: Option<Workload>,
}

impl Harness<'_> {
    fn print(&mut self, workload: Workload, contender: &str, cell: Result<PerCall, &str>) {
        if self.last != Some(workload) {
            println!("#workload\t{}\t{}", workload.id(), workload.title());
            eprintln!("\n{}", workload.title());
            self.last = Some(workload);
        }
        match cell {
            Ok(PerCall { allocations, bytes }) => {
                println!("{}\t{contender}\t{allocations}\t{bytes}", workload.id());
                eprintln!(
                    "  {contender:<18} {allocations:>6.2} allocations {bytes:>8.1} bytes per call"
                );
            }
            Err(why) => {
                println!("{}\t{contender}\t-\t{why}", workload.id());
                eprintln!("  {contender:<18} n/a: {why}");
            }
        }
    }
}

impl Visitor for Harness<'_> {
    fn case<C: Case>(&mut self, workload: Workload, contender: &'static str, mut case: C) {
        let cell = per_call(self.rt, &mut case);
        self.print(workload, contender, Ok(cell));
    }

    fn shared<C: Case + Clone + Send + 'static>(
        &mut self,
        workload: Workload,
        contender: &'static str,
        case: C,
    ) {
        let cell = per_call_two_threads(&case);
        self.print(workload, contender, Ok(cell));
    }

    fn missing(&mut self, workload: Workload, contender: &'static str, why: &'static str) {
        self.print(workload, contender, Err(why));
    }
}

fn main() {
    let rt = runtime();
    visit_all(
        &rt,
        &mut Harness {
            rt: &rt,
            last: None,
        },
    );
}
