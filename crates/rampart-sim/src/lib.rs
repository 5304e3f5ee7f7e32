//! rampart-sim: the real rampart executor, budgets, breakers and hedging against simulated
//! services, in virtual time.
//!
//! The engine: simulated services, the contenders that call them, and the paused-time runtime
//! they run on (the scenarios and the report come next). Time is tokio's paused clock on a
//! current-thread runtime: timers fire as soon as every task is idle, so minutes of traffic at
//! thousands of requests per second take seconds, and the same seed gives the same numbers.
//!
//! | module | what |
//! |---|---|
//! | [`service`] | a simulated service: workers, a bounded queue, lognormal service time, faults, downstream calls, the wire |
//! | [`contender`] | `naive`, `budgeted` (hand-written baselines) and `rampart`, configured in one place |
//! | [`sim`] | the paused-time runtime and the edge that sends root requests |
//! | [`dist`] | lognormal (Box-Muller) and exponential draws from seeded generators |

pub mod contender;
pub mod dist;
pub mod service;
pub mod sim;

use std::fmt;

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
