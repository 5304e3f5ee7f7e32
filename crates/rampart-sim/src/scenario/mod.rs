//! The scenarios: each asks one question of the contenders, runs its simulations (in parallel
//! on OS threads, each simulation alone on its own paused-time runtime) and reports its metric
//! against the reference it is held to.
//!
//! | scenario | question |
//! |---|---|
//! | [`retry_storm`] | how many attempts reach each layer of a chain per root request, as the leaf fails more |
//! | [`deadline`] | with 5 % of leaf requests never answering, how many roots are answered in time, and how much leaf work serves roots that gave up |
//! | [`tail`] | one root fans out to 100 leaves: the root's p99 and p99.9, with and without hedging |
//! | [`overload`] | 0.5x to 10x capacity with a criticality mix: goodput, who is shed, priority inversions |
//! | [`metastable`] | a 60 s spike to 2x: does goodput come back when the load drops |
//! | [`defaults`] | the retry storm's chain swept over error rate and depth: which breaker, budget or throttle setting rampart should default to |

pub mod deadline;
pub mod defaults;
pub mod metastable;
pub mod overload;
pub mod retry_storm;
pub mod tail;

use std::io::{IsTerminal, Write};
use std::rc::Rc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::SimError;
use crate::contender::Client;
use crate::contender::{Contender, Hop};
use crate::dist::derive_seed;
use crate::report::ScenarioReport;
use crate::service::{Downstream, Service, ServiceConfig};

/// How big a run is and what it is seeded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// CI size: each scenario in about a second in a debug build.
    pub quick: bool,
    /// The run's seed.
    pub seed: u64,
}

impl Size {
    /// The seed of one simulation, derived from the run's seed and a label naming it.
    pub fn seed_for(&self, label: &str) -> u64 {
        derive_seed(self.seed, label)
    }
}

/// One scenario: its name, a line about it, and how to run it.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// The name `--scenario` takes.
    pub name: &'static str,
    /// One line for `--list`.
    pub summary: &'static str,
    /// Runs it.
    pub run: fn(Size, &Runner) -> Result<ScenarioReport, SimError>,
}

/// Every scenario, in report order.
pub const ALL: [Scenario; 6] = [
    Scenario {
        name: "retry-storm",
        summary: "attempts per root at each layer of a depth-3 and depth-5 chain, leaf error rate 0.1% to 100%",
        run: retry_storm::run,
    },
    Scenario {
        name: "deadline",
        summary: "5% of leaf requests never answer; the edge gives 500 ms: answered in time, wasted leaf work",
        run: deadline::run,
    },
    Scenario {
        name: "tail",
        summary: "fan-out to 100 leaves with rare 1 s stragglers: root p99 and p99.9 with and without hedging",
        run: tail::run,
    },
    Scenario {
        name: "overload",
        summary: "0.5x to 10x capacity with a criticality mix: goodput, shed share per level, priority inversions",
        run: overload::run,
    },
    Scenario {
        name: "metastable",
        summary: "70% load, a 60 s spike to 2x, then 90%: time for goodput to come back",
        run: metastable::run,
    },
    Scenario {
        name: "defaults",
        summary: "the retry storm swept over leaf error rate 0-100% and depth 2-4 for candidate breaker, budget and throttle settings: the frontier and issue 25's criteria",
        run: defaults::run,
    },
];

/// The scenario called `name`.
pub fn find(name: &str) -> Option<Scenario> {
    ALL.into_iter().find(|s| s.name == name)
}

/// A simulation to run: a label for the progress line and the work.
pub struct Job<T> {
    /// What the progress line shows.
    pub label: String,
    /// The simulation.
    pub work: Box<dyn FnOnce() -> Result<T, SimError> + Send>,
}

impl<T> Job<T> {
    /// A job.
    pub fn new(
        label: impl Into<String>,
        work: impl FnOnce() -> Result<T, SimError> + Send + 'static,
    ) -> Job<T> {
        Job {
            label: label.into(),
            work: Box::new(work),
        }
    }
}

/// Runs simulations on a few OS threads, results in job order, with a progress line on
/// stderr.
#[derive(Debug)]
pub struct Runner {
    threads: usize,
    progress: bool,
}

impl Runner {
    /// A runner on `threads` threads (at least one); `progress` prints a progress line.
    pub fn new(threads: usize, progress: bool) -> Runner {
        Runner {
            threads: threads.max(1),
            progress,
        }
    }

    /// Runs `jobs` of scenario `scenario`; their results in job order, or the first error.
    pub fn run<T: Send>(&self, scenario: &str, jobs: Vec<Job<T>>) -> Result<Vec<T>, SimError> {
        let total = jobs.len();
        let queue: Mutex<Vec<Option<Job<T>>>> = Mutex::new(jobs.into_iter().map(Some).collect());
        let results: Mutex<Vec<Option<Result<T, SimError>>>> =
            Mutex::new((0..total).map(|_| None).collect());
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let tty = std::io::stderr().is_terminal();
        std::thread::scope(|scope| {
            for _ in 0..self.threads.min(total) {
                scope.spawn(|| {
                    loop {
                        let index = next.fetch_add(1, Ordering::SeqCst);
                        if index >= total {
                            return;
                        }
                        let job = lock(&queue)[index].take();
                        let Some(job) = job else { return };
                        let result = (job.work)();
                        lock(&results)[index] = Some(result);
                        let finished = done.fetch_add(1, Ordering::SeqCst) + 1;
                        if self.progress && (tty || finished == total) {
                            let mut err = std::io::stderr().lock();
                            let end = if tty { "\x1b[K\r" } else { "\n" };
                            let _ =
                                write!(err, "  {scenario}: {finished}/{total} {}{end}", job.label);
                            let _ = err.flush();
                        }
                    }
                });
            }
        });
        if self.progress && tty {
            let _ = write!(std::io::stderr().lock(), "\x1b[K");
        }
        let results = results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(SimError::new("a simulation did not finish"))))
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A chain of services, `configs[0]` first (the one the edge calls), the last one the leaf:
/// every service calls the next through `contender`'s client with `hop`. Returns the edge's
/// client (also `contender`'s) and the services in order. Must run inside the simulation's
/// runtime.
pub fn chain(
    contender: Contender,
    configs: Vec<ServiceConfig>,
    hop: Hop,
    seed: u64,
) -> Result<(Rc<Client>, Vec<Rc<Service>>), SimError> {
    let mut services = Vec::with_capacity(configs.len());
    let mut downstream = Downstream::None;
    for config in configs.into_iter().rev() {
        let service_seed = derive_seed(seed, config.name);
        let service = Service::new(config, contender.server(), downstream, service_seed)?;
        downstream = Downstream::Call(contender.client(Rc::clone(&service), hop, seed)?);
        services.push(service);
    }
    services.reverse();
    match downstream {
        Downstream::Call(client) => Ok((client, services)),
        _ => Err(SimError::new("a chain needs at least one service")),
    }
}

/// Every contender's exact configuration for `hop`, for the report's box.
pub fn configs(contenders: &[Contender], hop: Hop) -> Result<Vec<(String, String)>, SimError> {
    contenders
        .iter()
        .map(|c| Ok((c.name.to_owned(), c.describe(hop)?)))
        .collect()
}

/// A row of an ablation table: which feature a contender lacks (`-` for the full one).
pub fn removed(contender: &Contender) -> String {
    crate::contender::Feature::ALL
        .into_iter()
        .find(|f| f.ablation_name() == contender.name)
        .map_or("nothing (full)".to_owned(), |f| f.label().to_owned())
}

/// Milliseconds, for tables.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A share as a percentage with one decimal, for tables.
pub fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}
