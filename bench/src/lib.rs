//! Benchmarks and performance budgets for rampart: the hand-written floors rampart is measured
//! against ([`floor`]: deadline, attempt timeout, retries; [`floor2`]: the same plus a circuit
//! breaker and a retry budget, a full policy's work), shared by the criterion benches and the
//! budget tests.
//!
//! Not published. `cargo bench -p rampart-bench` runs the benchmarks; `cargo test -p
//! rampart-bench` checks the allocation and future-size budgets recorded in `BUDGETS.md`, and
//! that the peer benchmarks (`benches/peers.rs`: rampart against tower, tower-resilience,
//! seatbelt, backon and failsafe) compare like with like. `BENCHMARKS.md`, at the repository
//! root, has their table and `scripts/table.sh` regenerates it.

pub mod floor;
pub mod floor2;
pub mod scaling;
