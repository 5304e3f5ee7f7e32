//! Chaos injection: faults, latency and made-up outcomes injected into attempts on purpose.
//!
//! A policy's retries, timeouts and breaker are only as good as the last time they were seen
//! working. Chaos injection makes a dependency misbehave on demand, in a test, a staging
//! environment or a game day, so that you can watch the policy cope: a share of attempts
//! fails ([`fault`](ChaosBuilder::fault)), is slowed down ([`latency`](ChaosBuilder::latency))
//! or answers a value without asking the dependency ([`outcome`](ChaosBuilder::outcome)).
//!
//! Chaos wraps the callback; the policy does not know it is there. The injected error is the
//! callback's own error type, so the classifier, the budget and the breaker treat it as they
//! treat a real one, and the injected latency runs inside the attempt's future, so the
//! attempt's ceiling and the caller's cancellation cut it as they cut real work.
//!
//! ```
//! use std::time::Duration;
//! use rampart::Policy;
//! use rampart::chaos::Chaos;
//!
//! # async fn fetch(_: &rampart::Attempt) -> Result<u32, std::io::Error> { Ok(7) }
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let chaos = Chaos::builder()
//!     .fault(0.5, || std::io::Error::other("injected"))
//!     .latency(0.1, Duration::from_millis(300))
//!     .seed(42)
//!     .build()?;
//! let policy = Policy::builder().max_attempts(5).build()?;
//!
//! let price = policy.run(chaos.wrap(async |attempt| fetch(attempt).await)).await?;
//! assert_eq!(price, 7);
//!
//! // Off at run time, from anywhere (another task, an admin endpoint): one atomic store.
//! let switch = chaos.switch();
//! switch.disable();
//! assert!(!switch.is_enabled());
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
//! #     .build().expect("runtime").block_on(demo()).expect("chaos survived");
//! ```
//!
//! [`Chaos::wrap`] turns a callback into one with chaos; [`Chaos::inject`] does the same for
//! one attempt's future, inside a callback you write (`async |attempt| chaos.inject(attempt,
//! fetch(attempt)).await`).
//!
//! # Configuration
//!
//! | setting | default | meaning |
//! |---|---|---|
//! | [`fault`](ChaosBuilder::fault) | none | `(rate, make)`: the attempt returns `Err(make())`; the work is not run |
//! | [`latency`](ChaosBuilder::latency) | none | `(rate, delay)`: the attempt sleeps `delay` on the policy's clock, then goes on |
//! | [`outcome`](ChaosBuilder::outcome) | none | `(rate, make)`: the attempt returns `Ok(make())`; the work is not run |
//! | [`seed`](ChaosBuilder::seed) | random, drawn once at `build` | the same seed gives the same injections |
//! | [`enabled`](ChaosBuilder::enabled) | `true` | the [switch](ChaosSwitch)'s initial position |
//! | [`on_inject`](ChaosBuilder::on_inject) | none | called at each injection |
//!
//! A rate is the share of attempts that get the injection, in `[0, 1]`; anything else (1.5,
//! a negative rate, NaN) makes [`build`](ChaosBuilder::build) fail with a [`ConfigError`]
//! naming `chaos.fault_rate`, `chaos.latency_rate` or `chaos.outcome_rate` and the value.
//! Chaos is enabled once built, because building it with a rate is the intent; build it with
//! `.enabled(false)` to ship it switched off and turn it on at run time.
//!
//! Each kind is decided on its own draw. Latency comes first; then a fault, if one is
//! injected; else an outcome, if one is; else the work. A fault and an outcome on the same
//! attempt: the fault wins, and the outcome is not counted.
//!
//! # The switch and the rates at run time
//!
//! [`Chaos::switch`] returns a [`ChaosSwitch`]: clones of the chaos and of the switch share
//! one position and one set of rates, across threads. [`ChaosSwitch::enable`] and
//! [`disable`](ChaosSwitch::disable) take effect at the next attempt; an attempt already
//! started keeps what was decided for it. [`ChaosSwitch::set_rate`] changes a rate the same
//! way (a kind that was not configured has nothing to inject, whatever its rate).
//!
//! # Zero cost when disabled
//!
//! Switched off, an attempt costs one relaxed atomic load and a branch when it starts; the
//! work's future then runs untouched inside a wrapper whose poll finds no delay and no answer
//! and forwards: no allocation, no lock, no random draw, no clock read, no count. Switched on, a kind whose rate is 0 costs a load of its rate and
//! no draw. Neither case allocates (`tests/chaos.rs` counts), and neither does an injection: the
//! delay is the policy's clock's sleep, and the injected value or error is made by your
//! function.
//!
//! # Determinism
//!
//! Every decision is a pure function of the seed, the call's index and the attempt's number:
//! the `n`th call wrapped by a chaos (counted from its build, calls that ran while it was
//! switched off not counted) gets the same injections for the same seed on every run, and a
//! retry's decision does not depend on how many draws other calls made. What is not
//! deterministic is which call is the `n`th when calls start concurrently on several threads:
//! on one thread (a current-thread runtime, a simulation), the whole sequence repeats.
//! [`Chaos::inject`] counts each attempt it is given as a call of its own.
//!
//! # Cancellation
//!
//! An attempt cancelled during its injected delay (its ceiling passed, or the caller
//! cancelled) is treated as work that was pending at that moment: the delay ends, and what was
//! decided next (the work, which then sees its attempt cancelled, or the injected answer)
//! comes at the policy's next poll. So in the default abandon mode with no grace the attempt
//! times out (or the call is cancelled) without the work running; with a grace the work runs
//! within it; in cooperative mode it runs at once. When a fault or an outcome is injected the
//! work is never called ([`wrap`](Chaos::wrap)) or its future is dropped without being polled
//! ([`inject`](Chaos::inject)).
//!
//! # Events
//!
//! [`on_inject`](ChaosBuilder::on_inject) is called synchronously with an [`Injection`] when an
//! attempt is given an injection, at its start (before any delay). [`Chaos::injected`] counts
//! injections by kind. With the `tracing` feature each injection is also a `DEBUG` event with
//! target `rampart::chaos` (fields `kind`, `call`, `attempt`). rampart's
//! [`observe`](crate::observe) module does not emit chaos metrics or policy events: chaos
//! lives outside the executor, which sees an injected fault as the callback's error.
//!
//! [`ConfigError`]: crate::ConfigError

mod builder;
mod decide;
mod injected;
mod kind;
mod switch;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::attempt::Attempt;
use crate::executor::Callback;
use crate::executor::callback::AttemptFuture;

pub use builder::ChaosBuilder;
pub use injected::Injected;
pub use kind::{Injection, InjectionKind};
pub use switch::ChaosSwitch;

type Make<V> = Box<dyn Fn() -> V + Send + Sync>;
type Hook = Box<dyn Fn(Injection) + Send + Sync>;

/// Faults, latency and outcomes injected into a share of attempts; see the [module
/// docs](self).
///
/// Cheap to clone (one `Arc`), `Send + Sync`; clones share the switch, the rates, the call
/// count and the injection counts.
pub struct Chaos<T, E> {
    inner: Arc<Inner<T, E>>,
}

struct Inner<T, E> {
    controls: Arc<Controls>,
    seed: u64,
    calls: AtomicU64,
    fault: Option<Make<E>>,
    latency: Option<Duration>,
    outcome: Option<Make<T>>,
    on_inject: Option<Hook>,
    injected: [AtomicU64; 3],
}

/// What the switch moves: the position and the rates, as atomics.
struct Controls {
    enabled: AtomicBool,
    /// `f64` bits, by [`InjectionKind::index`].
    rates: [AtomicU64; 3],
}

impl Controls {
    fn rate(&self, kind: InjectionKind) -> f64 {
        f64::from_bits(self.rates[kind.index()].load(Ordering::Relaxed))
    }
}

impl<T, E> Clone for Chaos<T, E> {
    fn clone(&self) -> Self {
        Chaos {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T, E> Chaos<T, E> {
    /// A builder that injects nothing until told what to inject; see the [defaults](self).
    pub fn builder() -> ChaosBuilder<T, E> {
        ChaosBuilder::new()
    }

    /// The handle that turns this chaos on and off and changes its rates at run time.
    pub fn switch(&self) -> ChaosSwitch {
        ChaosSwitch {
            controls: Arc::clone(&self.inner.controls),
        }
    }

    /// Whether injection is on now.
    pub fn is_enabled(&self) -> bool {
        self.inner.controls.enabled.load(Ordering::Relaxed)
    }

    /// The seed its decisions are drawn from (the one given, or the one drawn at build).
    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// How many injections of `kind` this chaos (and its clones) made so far.
    pub fn injected(&self, kind: InjectionKind) -> u64 {
        self.inner.injected[kind.index()].load(Ordering::Relaxed)
    }

    /// `op` with chaos: each attempt is decided at its start, then delayed, answered with an
    /// injected fault or value (without calling `op`), or handed to `op` unchanged.
    ///
    /// The result is a callback for [`Policy::run`](crate::Policy::run) and its relatives, and
    /// its calls are `Send` when `op`'s are: `policy.run(chaos.wrap(async |attempt| ..))` can
    /// be awaited in a spawned task. One wrapped callback is one call for the
    /// [determinism](self#determinism) rules: wrap again for each call.
    ///
    /// The return type names the callback's `FnMut` form, with its future [`Injected`] over
    /// `op`'s own: that is what lets the compiler see the wrapped call is `Send` (see
    /// [`Callback`]).
    pub fn wrap<F>(
        &self,
        mut op: F,
    ) -> impl for<'a> FnMut(&'a Attempt) -> Injected<'a, <F as AttemptFuture<'a>>::Fut, T, E>
    + AsyncFnMut(&Attempt) -> Result<T, E>
    + use<F, T, E>
    where
        F: Callback<T, E>,
    {
        let chaos = self.clone();
        let mut call = None;
        move |attempt: &Attempt| {
            if !chaos.is_enabled() {
                return Injected::pass(attempt, op(attempt));
            }
            let call = *call.get_or_insert_with(|| chaos.next_call());
            chaos.start(call, attempt, || op(attempt))
        }
    }

    /// `work`, the future of one attempt, with chaos: delayed, replaced by an injected fault or
    /// value (dropped without being polled), or run unchanged. For a callback you write
    /// yourself: `async |attempt| chaos.inject(attempt, fetch(attempt)).await`.
    ///
    /// Each attempt given to `inject` counts as a call of its own for the
    /// [determinism](self#determinism) rules; [`wrap`](Self::wrap) keeps a call's attempts
    /// together.
    pub fn inject<'a, W>(&self, attempt: &'a Attempt, work: W) -> Injected<'a, W, T, E>
    where
        W: Future<Output = Result<T, E>>,
    {
        if !self.is_enabled() {
            return Injected::pass(attempt, work);
        }
        self.start(self.next_call(), attempt, || work)
    }
}

impl<T, E> fmt::Debug for Chaos<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        let rate = |kind| inner.controls.rate(kind);
        f.debug_struct("Chaos")
            .field("enabled", &self.is_enabled())
            .field(
                "fault_rate",
                &inner.fault.as_ref().map(|_| rate(InjectionKind::Fault)),
            )
            .field(
                "latency",
                &inner.latency.map(|d| (rate(InjectionKind::Latency), d)),
            )
            .field(
                "outcome_rate",
                &inner.outcome.as_ref().map(|_| rate(InjectionKind::Outcome)),
            )
            .field("seed", &inner.seed)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaos_and_its_switch_are_send_and_sync_whatever_they_inject() {
        fn shared<S: Send + Sync + Clone>() {}
        shared::<Chaos<std::rc::Rc<u8>, std::cell::Cell<u8>>>();
        shared::<ChaosSwitch>();
    }

    #[test]
    fn a_rate_out_of_range_is_refused_naming_the_field_and_the_value() {
        let error = Chaos::<(), ()>::builder()
            .fault(1.5, || ())
            .latency(f64::NAN, Duration::from_millis(1))
            .outcome(-0.1, || ())
            .build()
            .expect_err("invalid rates");
        assert_eq!(
            error.to_string(),
            "chaos.fault_rate must be between 0 and 1 (was 1.5); \
             chaos.latency_rate must be between 0 and 1 (was NaN); \
             chaos.outcome_rate must be between 0 and 1 (was -0.1)"
        );
    }

    #[test]
    fn set_rate_refuses_an_invalid_rate_and_keeps_the_old_one() {
        let chaos = Chaos::<(), ()>::builder()
            .fault(0.25, || ())
            .build()
            .expect("valid");
        let switch = chaos.switch();
        let error = switch
            .set_rate(InjectionKind::Fault, 2.0)
            .expect_err("out of range");
        assert_eq!(error.problems()[0].field(), "chaos.fault_rate");
        assert_eq!(switch.rate(InjectionKind::Fault), 0.25);
        switch
            .set_rate(InjectionKind::Fault, 1.0)
            .expect("in range");
        assert_eq!(switch.rate(InjectionKind::Fault), 1.0);
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 64,
            rng_seed: proptest::test_runner::RngSeed::Fixed(15),
            ..proptest::test_runner::Config::default()
        })]

        /// Over 4000 calls, the share injected stays within six standard deviations (and one
        /// call) of the rate; deterministic: the seeds and rates are fixed by the test's seed.
        #[test]
        fn the_injected_share_follows_the_rate(rate in 0.0..=1.0f64, seed in proptest::prelude::any::<u64>()) {
            const CALLS: u64 = 4_000;
            let chaos = Chaos::<(), ()>::builder()
                .fault(rate, || ())
                .seed(seed)
                .build()
                .expect("valid");
            let hits = (0..CALLS)
                .filter(|&call| chaos.hits(InjectionKind::Fault, call, 1))
                .count() as f64;
            let expected = CALLS as f64 * rate;
            let sigma = (expected * (1.0 - rate)).sqrt();
            proptest::prop_assert!(
                (hits - expected).abs() <= 6.0 * sigma + 1.0,
                "{hits} hits for {expected} expected (sigma {sigma})"
            );
            proptest::prop_assert_eq!(chaos.injected(InjectionKind::Fault), hits as u64);
        }
    }
}
