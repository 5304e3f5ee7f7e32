//! Calibration: arithmetic the simulator must reproduce before its comparisons are believed.
//! Run first, by the binary and by the tests.
//!
//! 1. Naive retries on a depth-3 chain whose leaf always fails: 4 attempts at each of 3 hops
//!    send exactly 4³ = 64 requests to the leaf per root request.
//! 2. Fan-out to 100 leaves whose p99 is 10 ms: a root is slower than 10 ms exactly when one
//!    of its leaves is, which happens to 1 - 0.99^100 = 63.4 % of roots. The measured share is
//!    a binomial sample of the measured roots, so the tolerance is [`SIGMAS`] standard errors of
//!    that sample (`sqrt(p (1 - p) / n)` with `n` the roots measured in this run): a correct
//!    simulator fails it on about 6 seeds in 100,000.

use std::time::Duration;

use crate::SimError;
use crate::contender::NAIVE;
use crate::report::Check;
use crate::scenario::{Job, Runner, Size, retry_storm, tail};
use crate::sim::Load;

/// Standard errors of the fan-out share accepted (4: a two-sided chance of 6.3e-5 that a
/// correct simulator fails).
pub const SIGMAS: f64 = 4.0;

/// Runs both checks.
pub fn run(size: Size, runner: &Runner) -> Result<Vec<Check>, SimError> {
    let storm_load = Load::constant(
        50.0,
        Duration::from_secs(2),
        Duration::from_millis(500),
        Duration::from_secs(30),
    );
    let storm_seed = size.seed_for("calibration/storm");
    let roots = if size.quick { 1_000.0 } else { 2_000.0 };
    let fan_load = Load::constant(
        100.0,
        Duration::from_secs_f64(roots / 100.0 + 1.0),
        Duration::from_secs(1),
        Duration::from_secs(10),
    );
    let fan_seed = size.seed_for("calibration/fan-out");
    let jobs = vec![
        Job::new("naive depth 3 at 100% leaf errors", move || {
            let p = retry_storm::simulate(NAIVE, 3, 1.0, storm_load, storm_seed)?;
            Ok(Check {
                name: "naive requests at the leaf per root, depth 3, leaf failing 100% (4^3)"
                    .into(),
                expected: 64.0,
                measured: p.leaf(),
                tolerance: 0.0,
            })
        }),
        Job::new("fan-out to 100 leaves", move || {
            let p = tail::simulate(NAIVE, 0.0, fan_load, fan_seed)?;
            let expected = tail::expected_slower_than_p99();
            let tolerance = SIGMAS * (expected * (1.0 - expected) / p.roots.max(1) as f64).sqrt();
            Ok(Check {
                name: "share of fan-out roots slower than the leaf p99 (1 - 0.99^100)".into(),
                expected,
                measured: p.slower_than(tail::LEAF_P99),
                tolerance,
            })
        }),
    ];
    runner.run("calibration", jobs)
}
