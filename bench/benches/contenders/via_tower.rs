//! tower: `retry` with a `TpsBudget` inside two `timeout`s (the outer one is the deadline),
//! and `hedge` (W4). tower has no circuit breaker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::retry::budget::{Budget, TpsBudget};
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use super::{ATTEMPT_TIMEOUT, BACKOFF_BASE, Case, DEADLINE, Failure, MAX_ATTEMPTS, Op, Outcome};

/// A call through a tower service stack (also used for tower-resilience). Clones share the
/// stack's state, as tower services do.
pub(crate) struct Stack<S: Service<u32>> {
    service: S,
    failure: fn(&S::Error) -> Failure,
}

impl<S: Service<u32> + Clone> Clone for Stack<S> {
    fn clone(&self) -> Self {
        Stack {
            service: self.service.clone(),
            failure: self.failure,
        }
    }
}

impl<S: Service<u32>> Stack<S> {
    /// Calls `service`; `failure` says how its error ended the call.
    pub(crate) fn new(service: S, failure: fn(&S::Error) -> Failure) -> Self {
        Stack { service, failure }
    }
}

impl<S: Service<u32, Response = u32>> Case for Stack<S> {
    #[inline]
    async fn call(&mut self) -> Outcome {
        match self.service.ready().await {
            Ok(service) => service
                .call(1)
                .await
                .map_err(|error| (self.failure)(&error)),
            Err(error) => Err((self.failure)(&error)),
        }
    }
}

fn failed(_: &BoxError) -> Failure {
    Failure::Failed
}

/// The retry policy, as tower's `budget` module documents it: deposit on success, withdraw
/// before a retry, plus an attempt limit and a backoff.
#[derive(Clone)]
pub(crate) struct Attempts {
    budget: Option<Arc<TpsBudget>>,
    left: u32,
    backoff: Option<Duration>,
}

/// The wait before a retry: none, or a tokio sleep.
pub(crate) struct Delay(Option<Pin<Box<tokio::time::Sleep>>>);

impl Future for Delay {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            None => Poll::Ready(()),
            Some(sleep) => sleep.as_mut().poll(cx),
        }
    }
}

impl<E> tower::retry::Policy<u32, u32, E> for Attempts {
    type Future = Delay;

    fn retry(&mut self, n: &mut u32, result: &mut Result<u32, E>) -> Option<Delay> {
        match result {
            Ok(_) => {
                if let Some(budget) = &self.budget {
                    budget.deposit();
                }
                None
            }
            Err(_) => {
                if self.left <= 1 {
                    return None;
                }
                if let Some(budget) = &self.budget
                    && !budget.withdraw()
                {
                    return None;
                }
                self.left -= 1;
                *n += 1;
                Some(Delay(self.backoff.map(|base| {
                    // Full jitter on an exponential curve, like the others.
                    let exp = base.saturating_mul(1 << (*n - 2).min(16));
                    Box::pin(tokio::time::sleep(exp.mul_f64(fastrand::f64())))
                })))
            }
        }
    }

    fn clone_request(&mut self, n: &u32) -> Option<u32> {
        Some(*n)
    }
}

fn stack<O: Op>(
    op: O,
    policy: Attempts,
) -> Stack<impl Service<u32, Response = u32, Error = BoxError> + Clone> {
    let service = ServiceBuilder::new()
        .timeout(DEADLINE)
        .retry(policy)
        .timeout(ATTEMPT_TIMEOUT)
        .service_fn(move |n: u32| op.run(n));
    Stack::new(service, failed)
}

/// W1: deadline, attempt timeout, 3 attempts, exponential backoff from 100 ms, `TpsBudget`'s
/// defaults (10 s window, 10 retries a second, 20 %).
pub(crate) fn w1<O: Op>(
    op: O,
) -> Stack<impl Service<u32, Response = u32, Error = BoxError> + Clone> {
    stack(
        op,
        Attempts {
            budget: Some(Arc::new(TpsBudget::default())),
            left: MAX_ATTEMPTS,
            backoff: Some(BACKOFF_BASE),
        },
    )
}

/// W2: deadline, attempt timeout, 3 attempts, no backoff, no budget.
pub(crate) fn w2<O: Op>(
    op: O,
) -> Stack<impl Service<u32, Response = u32, Error = BoxError> + Clone> {
    stack(
        op,
        Attempts {
            budget: None,
            left: MAX_ATTEMPTS,
            backoff: None,
        },
    )
}

/// Every request may be hedged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HedgeAll;

impl tower::hedge::Policy<u32> for HedgeAll {
    fn clone_request(&self, n: &u32) -> Option<u32> {
        Some(*n)
    }
    fn can_retry(&self, _: &u32) -> bool {
        true
    }
}

/// W4: tower's hedge has only a percentile delay: the p95 of a 30 s histogram once 20 samples
/// are in (like rampart's `Hedge::adaptive()`); deadline, 500 ms per leg.
pub(crate) fn w4<O: Op>(op: O) -> Stack<impl Service<u32, Response = u32, Error = BoxError>> {
    let leg = ServiceBuilder::new()
        .timeout(ATTEMPT_TIMEOUT)
        .service_fn(move |n: u32| op.run(n));
    let hedged = tower::hedge::Hedge::new(leg, HedgeAll, 20, 0.95, Duration::from_secs(30));
    Stack::new(
        ServiceBuilder::new().timeout(DEADLINE).service(hedged),
        failed,
    )
}
