//! The tower layer (feature `tower`) on paused time: retries, the attempt ceiling and the
//! deadline over any service, readiness inside the attempt, and the one allocation per call.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::tower::PolicyLayer;
use rampart::{Error, Policy, Verdict};
use tower::{Layer, Service, ServiceExt};

/// A service that fails its first `failures` calls, counting them all.
fn flaky(
    failures: u32,
    calls: &Arc<AtomicU32>,
) -> impl Service<u32, Response = u32, Error = &'static str, Future: Send> + Clone + Send + 'static
{
    let calls = Arc::clone(calls);
    tower::service_fn(move |n: u32| {
        let call = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if call < failures {
                Err("refused")
            } else {
                Ok(n * 2)
            }
        }
    })
}

fn policy() -> Policy {
    Policy::builder()
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .backoff(Backoff::none())
        .build()
        .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn a_failing_call_is_retried_with_a_clone_of_the_request() {
    let calls = Arc::new(AtomicU32::new(0));
    let service = PolicyLayer::new(policy()).layer(flaky(2, &calls));
    assert_eq!(service.oneshot(21).await.expect("answered"), 42);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn the_inner_error_comes_back_unchanged_when_attempts_run_out() {
    let calls = Arc::new(AtomicU32::new(0));
    let service = PolicyLayer::new(policy()).layer(flaky(9, &calls));
    let error = service.oneshot(1).await.expect_err("every attempt failed");
    assert!(matches!(error, Error::Inner("refused")), "{error}");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_verdict_is_not_retried() {
    let calls = Arc::new(AtomicU32::new(0));
    let policy = Policy::builder()
        .classifier(|outcome: &Result<u32, &'static str>| match outcome {
            Ok(_) => Verdict::Ok,
            Err(_) => Verdict::Permanent,
        })
        .build()
        .expect("valid policy");
    let service = PolicyLayer::new(policy).layer(flaky(9, &calls));
    assert!(service.oneshot(1).await.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_attempt_is_cut_at_its_ceiling_and_the_call_at_its_deadline() {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let hangs = tower::service_fn(move |_: ()| {
        counted.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<Result<(), &'static str>>()
    });
    let policy = Policy::builder()
        .max_attempts(5)
        .total_timeout(Duration::from_millis(1200))
        .attempt_timeout(Duration::from_millis(500))
        .backoff(Backoff::none())
        .build()
        .expect("valid policy");
    let started = tokio::time::Instant::now();
    let error = PolicyLayer::new(policy)
        .layer(hangs)
        .oneshot(())
        .await
        .expect_err("never answers");
    assert!(matches!(error, Error::DeadlineExceeded { .. }), "{error}");
    assert_eq!(started.elapsed(), Duration::from_millis(1200));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "500 ms, 500 ms, then the last 200 ms"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_for_readiness_counts_against_the_attempt() {
    /// Never ready.
    #[derive(Clone)]
    struct Stuck;

    impl Service<()> for Stuck {
        type Response = ();
        type Error = &'static str;
        type Future = std::future::Ready<Result<(), &'static str>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
            Poll::Pending
        }

        fn call(&mut self, _: ()) -> Self::Future {
            std::future::ready(Ok(()))
        }
    }

    let policy = Policy::builder()
        .max_attempts(1)
        .attempt_timeout(Duration::from_millis(300))
        .build()
        .expect("valid policy");
    let error = PolicyLayer::new(policy)
        .layer(Stuck)
        .oneshot(())
        .await
        .expect_err("never ready");
    assert!(error.is_timeout(), "{error}");
}

/// Polls a future that is ready at once.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the call should complete at once"),
    }
}

#[test]
fn the_layer_adds_one_allocation_per_call() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let answer = |n: u32| std::future::ready(Ok::<_, &'static str>(n));
    let mut direct = tower::service_fn(answer);
    let mut layered = PolicyLayer::new(policy()).layer(tower::service_fn(answer));
    ready(layered.call(1)).expect("warm");
    let n = 1_000u64;
    let base = allocation_counter::measure(|| {
        for i in 0..n {
            let _ = ready(direct.call(i as u32));
        }
    });
    let with = allocation_counter::measure(|| {
        for i in 0..n {
            let _ = ready(layered.call(i as u32));
        }
    });
    let added = (with.count_total - base.count_total) as f64 / n as f64;
    println!("tower layer: +{added} allocations per call");
    assert_eq!(added, 1.0, "the boxed call, and nothing else");
}

/// A request that counts its clones.
#[derive(Debug)]
struct Counted(Arc<AtomicU32>);

impl Clone for Counted {
    fn clone(&self) -> Self {
        self.0.fetch_add(1, Ordering::SeqCst);
        Counted(Arc::clone(&self.0))
    }
}

#[tokio::test(start_paused = true)]
async fn every_attempt_sends_its_own_clone_of_the_request() {
    // The last attempt cannot take the request itself: `Policy::reconfigure` may raise the
    // attempts between the call and its first poll, and an attempt would find none.
    for (attempts, failures, clones) in [(1, 0, 1), (3, 0, 1), (3, 2, 3)] {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&calls);
        let service = tower::service_fn(move |_: Counted| {
            let call = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if call < failures {
                    Err("refused")
                } else {
                    Ok(())
                }
            }
        });
        let policy = Policy::builder()
            .max_attempts(attempts)
            .backoff(Backoff::none())
            .build()
            .expect("valid policy");
        let made = Arc::new(AtomicU32::new(0));
        PolicyLayer::new(policy)
            .layer(service)
            .oneshot(Counted(Arc::clone(&made)))
            .await
            .expect("answered");
        assert_eq!(
            made.load(Ordering::SeqCst),
            clones,
            "{attempts} attempts allowed, {failures} failed"
        );
    }
}
