//! rampart-sim: the real rampart executor, budgets, breakers and hedging against simulated
//! services, in virtual time.
//!
//! `cargo run --release -p rampart-sim` runs every scenario, prints one table per scenario and
//! writes `target/rampart-report/index.html` (charts) and `report.json` (every number). Time is
//! tokio's paused clock on a current-thread runtime: timers fire as soon as every task is idle,
//! so minutes of traffic at thousands of requests per second take seconds, and the same seed
//! prints the same numbers.
//!
//! `cargo run --release -p rampart-sim -- what-if --graph G --policies A --policies B` runs a
//! service's own call graph, described in a file ([`graph`]), under two policy files and shows
//! which changed setting moved which number ([`whatif`]).
//!
//! | module | what |
//! |---|---|
//! | [`service`] | a simulated service: workers, a bounded FIFO queue or rampart's `CriticalityLimit` behind an inbound edge written after rampart-http's, lognormal or empirical service time, faults (some over a window of the run), downstream calls, the wire |
//! | [`contender`] | `naive` (a hand-written retry loop), `budgeted` (the loop under tower's `TpsBudget`) and `rampart`, one classifier for all, and rampart's ablations, configured in one place |
//! | [`scenario`] | one module per scenario: retry storm, deadline, tail, overload, metastable |
//! | [`calibration`] | arithmetic the simulator must reproduce first (4³ = 64; 1 - 0.99¹⁰⁰) |
//! | [`report`] | text tables, `report.json`, `index.html` with SVG charts |
//! | [`sim`] | the paused-time runtime and the edge that sends root requests |
//! | [`dist`] | lognormal (Box-Muller), empirical (a histogram) and exponential draws from seeded generators |
//! | [`plan`] | the downstream calls of a graph file's service: steps in sequence, calls at once |
//! | [`graph`] | a call graph described in a TOML file (services, calls, policies by name, traffic and faults over time), checked with every problem at once, and run |
//! | [`import`] | `import`: a graph file learned from recorded spans, OTLP JSON or Jaeger's JSON |
//! | [`spans`] | the spans a graph run records (a SERVER span per request, a CLIENT span per attempt), written as the OpenTelemetry collector's file exporter writes them |
//! | [`loopback`] | `--loopback`: the deadline scenario on three real axum services on 127.0.0.1, through rampart-http |
//! | [`validate`] | `validate`: the loopback chain traced under a baseline policy file, its spans imported, the what-if of two changes on that graph, and each change run for real: predicted against measured |
//! | [`whatif`] | `what-if`: a graph file under two policy files side by side, and which changed setting moved which number |
//! | [`cli`] | the command line |

pub mod calibration;
pub mod cli;
pub mod contender;
pub mod dist;
pub mod graph;
pub mod import;
pub mod loopback;
pub mod plan;
pub mod report;
pub mod scenario;
pub mod service;
pub mod sim;
pub mod spans;
pub mod validate;
pub mod whatif;

use std::fmt;

use report::Report;
use scenario::{Runner, Size};

/// Why a run could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError(String);

impl SimError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> SimError {
        SimError(message.into())
    }
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

impl From<rampart::ConfigError> for SimError {
    fn from(e: rampart::ConfigError) -> Self {
        SimError(format!("invalid rampart configuration: {e}"))
    }
}

/// Runs the calibration checks, then every chosen scenario; returns the report.
pub fn run(options: &cli::Options, runner: &Runner) -> Result<Report, SimError> {
    let size = Size {
        quick: options.quick,
        seed: options.seed,
    };
    let calibration = calibration::run(size, runner)?;
    let scenarios = options
        .scenarios
        .iter()
        .map(|s| (s.run)(size, runner))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Report {
        seed: options.seed,
        quick: options.quick,
        calibration,
        scenarios,
    })
}
