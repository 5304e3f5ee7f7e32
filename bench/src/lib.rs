//! Benchmarks and performance budgets for rampart: the hand-written floors rampart is measured
//! against, shared by the criterion benches and the budget tests.
//!
//! Not published. `cargo bench -p rampart-bench` runs the benchmarks; `cargo test -p
//! rampart-bench` checks the allocation and future-size budgets recorded in `BUDGETS.md`.

pub mod floor;
pub mod scaling;
