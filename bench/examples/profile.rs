//! Runs one cell of the peer benchmarks many times, for a profiler: instruction counts from
//! callgrind are repeatable on a noisy machine where times are not.
//!
//! ```sh
//! cargo build --release -p rampart-bench --example profile
//! valgrind --tool=callgrind target/release/examples/profile w1_success rampart 100000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid>
//! ```
//!
//! Arguments: the workload id (`w1_success`, ...), the contender (`rampart`, `floor`,
//! `tower`, ...), the number of calls (default 100,000). Building the contenders (and opening
//! W3's breakers) happens outside `measured`, so a run of N calls and one of 2N differ by the
//! calls alone; `bench/scripts/instructions.sh` counts every W1 contender that way, beside its
//! floor. (`--toggle-collect='profile::measured*'` collects only the calls, but where the
//! compiler turns `measured`'s call into the runtime into a tail call it collects nothing.)
//!
//! `profile --floor-of WORKLOAD CONTENDER` prints the floor the contender is compared with in
//! that workload (nothing if none), for the script.

#[path = "../benches/contenders/mod.rs"]
#[allow(dead_code)] // the workload titles are for the allocation harness
mod contenders;

use std::hint::black_box;

use contenders::{Case, Visitor, Workload, name, runtime, visit_all};
use tokio::runtime::Runtime;

struct Profile<'a> {
    rt: &'a Runtime,
    workload: String,
    contender: String,
    calls: u64,
    found: bool,
}

impl Profile<'_> {
    fn wanted(&self, workload: Workload, contender: &str) -> bool {
        workload.id() == self.workload && contender == self.contender
    }
}

/// The calls, and only they, for `--toggle-collect`.
#[inline(never)]
fn measured<C: Case>(rt: &Runtime, case: &mut C, calls: u64) {
    rt.block_on(async {
        for _ in 0..calls {
            let _ = black_box(case.call().await);
        }
    });
}

impl Visitor for Profile<'_> {
    fn case<C: Case>(&mut self, workload: Workload, contender: &'static str, mut case: C) {
        if self.wanted(workload, contender) {
            self.found = true;
            measured(self.rt, &mut case, 1_000);
            measured(self.rt, &mut case, self.calls);
        }
    }

    fn shared<C: Case + Clone + Send + 'static>(
        &mut self,
        workload: Workload,
        contender: &'static str,
        case: C,
    ) {
        if self.wanted(workload, contender) {
            self.found = true;
            std::thread::scope(|scope| {
                for _ in 0..2 {
                    let mut case = case.clone();
                    let calls = self.calls;
                    scope.spawn(move || {
                        let rt = runtime();
                        measured(&rt, &mut case, 1_000);
                        measured(&rt, &mut case, calls);
                    });
                }
            });
        }
    }

    fn missing(&mut self, _: Workload, _: &'static str, _: &'static str) {}
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "--floor-of") {
        let (Some(workload), Some(contender)) = (args.nth(1), args.next()) else {
            eprintln!("usage: profile --floor-of WORKLOAD CONTENDER");
            std::process::exit(2);
        };
        let floor = Workload::from_id(&workload).and_then(|w| name::floor_of(w, &contender));
        println!("{}", floor.unwrap_or_default());
        return;
    }
    let (Some(workload), Some(contender)) = (args.next(), args.next()) else {
        eprintln!("usage: profile WORKLOAD CONTENDER [CALLS]");
        std::process::exit(2);
    };
    let calls = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let rt = runtime();
    let mut profile = Profile {
        rt: &rt,
        workload,
        contender,
        calls,
        found: false,
    };
    visit_all(&rt, &mut profile);
    if !profile.found {
        eprintln!("no such cell");
        std::process::exit(2);
    }
}
