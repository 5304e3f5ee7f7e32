//! The limiters through a policy, on virtual time: the rate limit's window.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rampart::admit::Admit;
use rampart::limit::RateLimit;
use rampart::{Error, ErrorsAreTransient, Event, Instant, ManualClock, Policy, RejectReason};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, PartialEq, Eq)]
struct Fail;

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fail")
    }
}

fn one_attempt<A: Admit>(admit: A) -> Policy<ErrorsAreTransient, A> {
    Policy::builder()
        .max_attempts(1)
        .admit(admit)
        .build()
        .expect("valid")
}

fn overloaded<T: std::fmt::Debug>(result: Result<T, Error<Fail>>) -> Option<Duration> {
    match result {
        Err(Error::Rejected {
            reason: RejectReason::Overloaded,
            retry_after,
            ..
        }) => retry_after,
        other => panic!("expected an overload rejection, got {other:?}"),
    }
}

// ---- Rate limit -----------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_rate_limit_of_two_per_second_refuses_a_third_immediate_call_and_admits_it_after_the_window()
 {
    let policy = one_attempt(RateLimit::new(2, Duration::from_secs(1)).expect("valid"));
    let start = Instant::now();
    for n in 0..2 {
        assert_eq!(policy.run(async |_| Ok::<_, Fail>(n)).await.ok(), Some(n));
    }
    let retry_after = overloaded(policy.run(async |_| Ok::<_, Fail>(3)).await);
    assert_eq!(start.elapsed(), Duration::ZERO, "refused at once");
    let retry_after = retry_after.expect("a retry-after");
    assert!(retry_after > Duration::ZERO);
    assert_eq!(retry_after, 500 * MS, "when the next permit is due");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(policy.run(async |_| Ok::<_, Fail>(3)).await.ok(), Some(3));
}

#[tokio::test]
async fn a_rate_limit_runs_on_the_policys_manual_clock() {
    let manual = ManualClock::new();
    let refused = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&refused);
    let policy = Policy::builder()
        .max_attempts(1)
        .clock(manual.clone())
        .listener(move |event: &Event<'_>| {
            if let Event::AttemptRefused {
                by, retry_after, ..
            } = event
            {
                seen.lock().expect("events").push((*by, *retry_after));
            }
        })
        .admit(
            RateLimit::builder(10, Duration::from_secs(1))
                .burst(1)
                .build()
                .expect("valid"),
        )
        .build()
        .expect("valid");
    assert!(policy.run(async |_| Ok::<_, Fail>(())).await.is_ok());
    assert!(policy.run(async |_| Ok::<_, Fail>(())).await.is_err());
    manual.advance(99 * MS);
    assert_eq!(
        overloaded(policy.run(async |_| Ok::<_, Fail>(())).await),
        Some(MS)
    );
    manual.advance(MS);
    assert!(policy.run(async |_| Ok::<_, Fail>(())).await.is_ok());
    assert_eq!(
        *refused.lock().expect("events"),
        [("rate limit", Some(100 * MS)), ("rate limit", Some(MS))]
    );
}
