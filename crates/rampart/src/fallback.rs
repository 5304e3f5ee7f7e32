//! Fallback: an answer used when a call ends the way you choose, instead of its error.
//!
//! A fallback turns a failed call into a value: a cached price when the pricing service's
//! breaker is open, an empty recommendation list when the call was shed. It runs once, after
//! the policy has decided the call (retries, timeouts and refusals all happened first), and
//! only for the ends you name: by [`StopReason`] ([`Fallback::on`]) or by a predicate on the
//! error ([`Fallback::when`]). A call the caller cancelled never falls back: nobody is waiting
//! for the answer.
//!
//! ```
//! use rampart::{Policy, StopReason};
//! use rampart::fallback::Fallback;
//!
//! # async fn fetch(_: &rampart::Attempt) -> Result<u32, std::io::Error> { Err(std::io::Error::other("down")) }
//! # async fn demo() -> Result<(), rampart::Error<std::io::Error>> {
//! let policy = Policy::builder().name("prices").build().expect("valid policy");
//! let cached = 99;
//! let price = policy
//!     .call()
//!     .fallback(
//!         Fallback::on([StopReason::AttemptsExhausted, StopReason::DependencyUnavailable])
//!             .value(cached),
//!     )
//!     .run(async |attempt| fetch(attempt).await)
//!     .await?;
//! assert_eq!(price, 99);
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
//! #     .build().expect("runtime").block_on(demo()).expect("fallback answered");
//! ```
//!
//! An async fallback gets the error by value, so it can log it, look in a cache, or give it
//! back: [`FallbackWhen::with`].
//!
//! | setting | default |
//! |---|---|
//! | which ends | none: [`Fallback::on`] or [`Fallback::when`] names them |
//! | cancelled calls | never fall back |
//! | the answer | [`FallbackWhen::value`] or [`FallbackWhen::with`] |
//!
//! When a fallback answers, listeners get [`Event::FallbackUsed`](crate::Event::FallbackUsed)
//! (with the `metrics` feature, `rampart.fallbacks` moves; with `tracing`, an `INFO` event),
//! and [`Call::try_run`](crate::Call::try_run)'s report says so
//! ([`CallResult::fell_back`](crate::CallResult::fell_back)) while keeping the stop reason
//! the policy decided.

use std::future::{Future, Ready, ready};

use crate::error::Error;
use crate::outcome::StopReason;

/// Entry point: which ends of a call the fallback answers. Finish it with
/// [`value`](FallbackWhen::value) or [`with`](FallbackWhen::with).
#[derive(Debug, Clone, Copy)]
pub struct Fallback;

impl Fallback {
    /// Answers calls that stop for any of `stops`. [`StopReason::Cancelled`] in the list is
    /// ignored: a cancelled call never falls back. ([`StopReason::Succeeded`] never fires: a
    /// successful call has nothing to replace.)
    pub fn on(stops: impl IntoIterator<Item = StopReason>) -> FallbackWhen<Stops> {
        let mut set = 0u32;
        for stop in stops {
            set |= 1 << (stop as u32);
        }
        FallbackWhen {
            when: Stops(set & !(1 << (StopReason::Cancelled as u32))),
        }
    }

    /// Answers calls whose error satisfies `predicate` (called with the stop reason and the
    /// error; never for a cancelled call).
    pub fn when<P>(predicate: P) -> FallbackWhen<P> {
        FallbackWhen { when: predicate }
    }
}

/// The set of stop reasons of [`Fallback::on`], one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stops(u32);

// Every stop reason has its bit.
const _: () = assert!((StopReason::Config as u32) < u32::BITS);

/// Decides whether a call that ended with an error falls back.
pub trait Trigger<E> {
    /// Whether the call that stopped for `stop` with `error` falls back.
    fn fires(&self, stop: StopReason, error: &Error<E>) -> bool;
}

impl<E> Trigger<E> for Stops {
    fn fires(&self, stop: StopReason, _: &Error<E>) -> bool {
        self.0 & (1 << (stop as u32)) != 0
    }
}

impl<E, P: Fn(StopReason, &Error<E>) -> bool> Trigger<E> for P {
    fn fires(&self, stop: StopReason, error: &Error<E>) -> bool {
        self(stop, error)
    }
}

/// A fallback that knows when it answers; [`value`](Self::value) or [`with`](Self::with)
/// says what.
#[derive(Debug, Clone, Copy)]
pub struct FallbackWhen<W> {
    when: W,
}

impl<W> FallbackWhen<W> {
    /// Answers with `value`.
    pub fn value<T>(self, value: T) -> FallbackTo<W, Value<T>> {
        FallbackTo {
            when: self.when,
            answer: Value(value),
        }
    }

    /// Answers with what `answer` returns for the call's error: a value, or an error (the
    /// call's own, or another) if the fallback cannot help either.
    pub fn with<T, E, F, Fut>(self, answer: F) -> FallbackTo<W, F>
    where
        F: FnOnce(Error<E>) -> Fut,
        Fut: Future<Output = Result<T, Error<E>>>,
    {
        FallbackTo {
            when: self.when,
            answer,
        }
    }
}

/// What a fallback answers with: a [`Value`], or a function of the call's error.
pub trait Answer<T, E> {
    /// The answer's future.
    type Future: Future<Output = Result<T, Error<E>>>;

    /// The answer for a call that ended with `error`.
    fn answer(self, error: Error<E>) -> Self::Future;
}

/// A fixed answer ([`FallbackWhen::value`]).
#[derive(Debug, Clone, Copy)]
pub struct Value<T>(T);

impl<T, E> Answer<T, E> for Value<T> {
    type Future = Ready<Result<T, Error<E>>>;

    fn answer(self, _: Error<E>) -> Self::Future {
        ready(Ok(self.0))
    }
}

impl<T, E, F, Fut> Answer<T, E> for F
where
    F: FnOnce(Error<E>) -> Fut,
    Fut: Future<Output = Result<T, Error<E>>>,
{
    type Future = Fut;

    fn answer(self, error: Error<E>) -> Fut {
        self(error)
    }
}

/// A complete fallback: when it answers and with what. Give it to a call with
/// [`Call::fallback`](crate::Call::fallback).
#[derive(Debug, Clone, Copy)]
pub struct FallbackTo<W, F> {
    when: W,
    answer: F,
}

/// No fallback: the call's outcome is its answer. A [`Call`](crate::Call) has none until
/// [`Call::fallback`](crate::Call::fallback) sets one.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFallback;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::NoFallback {}
    impl<W, F> Sealed for super::FallbackTo<W, F> {}
}

/// What a call does with its end: keep it ([`NoFallback`]) or let a fallback answer it
/// ([`FallbackTo`]). Sealed: those two are all there is.
pub trait Ending<T, E>: sealed::Sealed {
    /// The future of the fallback's answer.
    type Answer: Future<Output = Result<T, Error<E>>>;

    /// The answer for a call that stopped for `stop` with `error`, if there is one for that
    /// end; otherwise the error back.
    fn answer(self, stop: StopReason, error: Error<E>) -> Result<Self::Answer, Error<E>>;
}

impl<T, E> Ending<T, E> for NoFallback {
    type Answer = Ready<Result<T, Error<E>>>;

    #[inline(always)]
    fn answer(self, _: StopReason, error: Error<E>) -> Result<Self::Answer, Error<E>> {
        Err(error)
    }
}

impl<T, E, W: Trigger<E>, F: Answer<T, E>> Ending<T, E> for FallbackTo<W, F> {
    type Answer = F::Future;

    fn answer(self, stop: StopReason, error: Error<E>) -> Result<F::Future, Error<E>> {
        if stop == StopReason::Cancelled || !self.when.fires(stop, &error) {
            return Err(error);
        }
        Ok(self.answer.answer(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fires(fallback: &FallbackWhen<Stops>, stop: StopReason) -> bool {
        Trigger::<()>::fires(&fallback.when, stop, &Error::Cancelled)
    }

    #[test]
    fn on_answers_exactly_the_named_stop_reasons() {
        let fallback = Fallback::on([StopReason::Overloaded, StopReason::DeadlineExceeded]);
        assert!(fires(&fallback, StopReason::Overloaded));
        assert!(fires(&fallback, StopReason::DeadlineExceeded));
        assert!(!fires(&fallback, StopReason::AttemptsExhausted));
        assert!(!fires(&fallback, StopReason::Permanent));
    }

    #[test]
    fn a_cancelled_stop_in_the_list_is_ignored() {
        let fallback = Fallback::on([StopReason::Cancelled]);
        assert!(!fires(&fallback, StopReason::Cancelled));
    }
}
