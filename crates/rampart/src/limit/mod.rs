//! Limiters: ready-made [`Admit`](crate::admit::Admit) components.
//!
//! | limiter | what it bounds | waits? |
//! |---|---|---|
//! | [`ConcurrencyLimit`] | attempts in flight, under a limit set by hand ([`set_limit`](ConcurrencyLimit::set_limit) changes it at run time) | in a bounded FIFO queue |
//! | [`RateLimit`] | attempts started per window, with a burst (GCRA; [`reconfigure`](RateLimit::reconfigure) changes both at run time) | never |
//! | [`Aimd`] | attempts in flight, under a limit that grows while the dependency keeps up and shrinks by 10 % on timeouts and throttling ([`set_bounds`](Aimd::set_bounds) changes its range at run time) | never |
//! | [`Gradient`] | attempts in flight, under a limit that follows the ratio of long-term to recent latency ([`set_bounds`](Gradient::set_bounds) changes its range at run time) | never |
//! | [`CriticalityLimit`] | attempts in flight, shared by the four [`Criticality`](crate::Criticality) levels, lower levels shed first ([`set_capacity`](CriticalityLimit::set_capacity) changes it at run time) | in a bounded queue ordered by level |
//! | [`Throttle`] | attempts sent, refused locally in proportion to the dependency's recent rejections (per level; [`set_k`](Throttle::set_k) changes its multiplier at run time) | never |
//!
//! Every limiter is cheap to clone, and clones share one state: give the same limiter to every
//! policy (or server layer) that must share the capacity. Every refusal names its limiter in
//! [`Refusal::by`](crate::admit::Refusal::by) and carries a retry-after; the executor reports
//! it as [`Event::AttemptRefused`](crate::Event::AttemptRefused). Time comes from the attempt's
//! [`AdmitContext::now`](crate::admit::AdmitContext::now), so a limiter runs on the policy's
//! clock: tokio's paused time and the manual clock both work.
//!
//! A limiter can also be asked directly, outside a policy (a server layer shedding inbound
//! requests): build an [`AdmitContext`](crate::admit::AdmitContext::new), call
//! [`acquire`](crate::admit::Admit::acquire), and give the permit back with
//! [`release`](crate::admit::Admit::release) (or drop it).

mod aimd;
mod concurrency;
mod criticality;
mod dry_run;
mod gradient;
pub(crate) mod rate;
mod throttle;

pub use aimd::{Aimd, AimdBuilder, AimdPermit};
pub use concurrency::{ConcurrencyLimit, ConcurrencyPermit};
pub use criticality::{CriticalityLimit, CriticalityLimitBuilder, CriticalityPermit};
pub use dry_run::{DryRun, DryRunPermit};
pub use gradient::{Gradient, GradientBuilder, GradientPermit};
pub use rate::{RateLimit, RateLimitBuilder};
pub use throttle::{Throttle, ThrottleBuilder, ThrottlePermit};

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::time::Duration;

use crate::clock::TimeBase;
use crate::error::{ConfigError, ConfigProblem};
use crate::latency::TypicalLatency;

/// The largest `max` of an adaptive limit ([`Aimd`], [`Gradient`]).
const MAX_LIMIT: usize = 1_000_000;

/// An adaptive limit's range, `min` and `max`, in one word (`min << 32 | max`) so that an
/// update ([`Aimd::set_bounds`], [`Gradient::set_bounds`]) is seen whole.
#[derive(Debug)]
struct Bounds(AtomicU64);

impl Bounds {
    /// `min..=max`, already checked (both at most [`MAX_LIMIT`]).
    fn new(min: usize, max: usize) -> Bounds {
        Bounds(AtomicU64::new(Bounds::word(min, max)))
    }

    fn word(min: usize, max: usize) -> u64 {
        (min as u64) << 32 | max as u64
    }

    #[inline]
    fn get(&self) -> (usize, usize) {
        let word = self.0.load(Relaxed);
        ((word >> 32) as usize, (word & u64::from(u32::MAX)) as usize)
    }

    /// Checks `min..=max` as the builders do (`fields` names them) and stores it.
    fn set(
        &self,
        [min_field, max_field]: [&'static str; 2],
        min: usize,
        max: usize,
    ) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        range_problems([min_field, max_field], min, max, &mut problems);
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        self.0.store(Bounds::word(min, max), Relaxed);
        Ok(())
    }
}

/// The checks on an adaptive limit's `min` and `max`: at least 1, at most [`MAX_LIMIT`],
/// `max` at least `min`.
fn range_problems(
    [min_field, max_field]: [&'static str; 2],
    min: usize,
    max: usize,
    problems: &mut Vec<ConfigProblem>,
) {
    if min == 0 {
        problems.push(ConfigProblem::new(min_field, "must be at least 1 (was 0)"));
    }
    if max > MAX_LIMIT {
        let message = format!("must be at most {MAX_LIMIT} (was {max})");
        problems.push(ConfigProblem::new(max_field, message));
    } else if max < min {
        let message = format!("must be at least min {min} (was {max})");
        problems.push(ConfigProblem::new(max_field, message));
    }
}

/// The retry-after of a limiter whose room comes back as attempts end: the measured mean
/// time a permit is held, 10 ms until measured.
fn held_retry_after(held: &TypicalLatency) -> Duration {
    match held.get() {
        held if held.is_zero() => Duration::from_millis(10),
        held => held,
    }
}

/// Permits held, taken only below a limit. Sequentially consistent, so that a waiter queue
/// can pair it with its own count without losing a wake-up (see `criticality`); on x86 that
/// costs nothing over relaxed read-modify-writes.
#[derive(Debug, Default)]
struct InFlight(AtomicUsize);

impl InFlight {
    /// Takes one if fewer than `limit` are held.
    #[inline]
    fn try_enter(&self, limit: usize) -> bool {
        let mut held = self.0.load(SeqCst);
        loop {
            if held >= limit {
                return false;
            }
            match self.0.compare_exchange_weak(held, held + 1, SeqCst, SeqCst) {
                Ok(_) => return true,
                Err(actual) => held = actual,
            }
        }
    }

    #[inline]
    fn leave(&self) {
        self.0.fetch_sub(1, SeqCst);
    }

    #[inline]
    fn get(&self) -> usize {
        self.0.load(SeqCst)
    }
}
