//! The two-service example (`examples/two_services.rs`) with a small request count: a flaky
//! backend behind the inbound layer, serving HTTP and gRPC, a frontend calling it on four
//! routes (the reqwest `Client`, hyper-util's client with every request marked `Hedged` and
//! tonic's channel, through one outbound layer; reqwest's own client under a plain policy that
//! stamps each attempt), and a load loop, on loopback with random ports, rampart's metrics in
//! a debugging recorder.
//!
//! Real sockets mean real time: the run takes a fraction of a second, and what is asserted
//! is the agreement between what the callers saw and what rampart decided, request by
//! request (its events and call reports) and in all (its `rampart.calls` counter), never a
//! duration, nor how many hedges fired (both are printed).

#[path = "../examples/two_services.rs"]
mod two_services;

use two_services::{Load, Route, run};

#[tokio::test]
async fn every_failure_a_caller_sees_is_one_non_success_stop_reason_of_rampart() {
    let summary = run(Load {
        requests: 44,
        concurrency: 4,
        seed: 7,
    })
    .await;
    summary.print();

    assert_eq!(summary.rows.len(), 44, "every request answered");
    for route in Route::ALL {
        let taken = summary.rows.iter().filter(|row| row.route() == route);
        assert_eq!(
            taken.count(),
            11,
            "{route:?} takes a quarter of the requests"
        );
    }
    // Per request, on every route: one `CallEnded` (a hedged call's included), a failure
    // for the caller exactly when its stop reason is not `succeeded`, and the call report
    // saying the same.
    assert!(
        summary.disagreements().is_empty(),
        "the callers and rampart disagree on: {:#?}",
        summary.disagreements()
    );
    assert_eq!(summary.client_failures(), summary.rampart_failures());
    // rampart's metrics say the same: every call of every route counted once (under the
    // outbound layer's policy or the plain one), by the stop reason its `CallEnded` carried.
    assert_eq!(
        summary.metric_calls(),
        44,
        "rampart.calls counts every request's call: {:#?}",
        summary.calls
    );
    assert_eq!(
        summary.metric_failures(),
        summary.client_failures() as u64,
        "the rampart.calls that did not succeed are the callers' failures: {:#?}",
        summary.calls
    );
    // The faults are keyed by request id and attempt: this seed gives the run both outcomes,
    // calls that succeed (some after retries) and calls whose every attempt met a fault.
    assert!(summary.client_failures() > 0, "some calls fail");
    assert!(
        summary.client_failures() < summary.rows.len(),
        "some succeed"
    );
    assert!(summary.backend_attempts > 44, "some calls were retried");
}
