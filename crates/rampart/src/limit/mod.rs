//! Limiters: ready-made [`Admit`](crate::admit::Admit) components.
//!
//! | limiter | what it bounds |
//! |---|---|
//! | [`ConcurrencyLimit`] | attempts in flight, with a bounded queue |
//!
//! Every limiter is cheap to clone, and clones share one state: give the same limiter to every
//! policy (or server layer) that must share the capacity.

mod concurrency;

pub use concurrency::ConcurrencyLimit;
