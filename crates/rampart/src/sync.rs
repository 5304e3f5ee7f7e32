//! Atomics and `Arc`, swapped for loom's under `--cfg rampart_loom` so the model tests can
//! explore every interleaving.

// `Mutex` is for other modules; the budget registry is a process-wide static and uses std's.
#[cfg(rampart_loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::{Arc, Mutex, atomic};
#[cfg(not(rampart_loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{Arc, Mutex, atomic};
