//! With both observability features on and a recorder installed, the success path still
//! allocates nothing per call once warm (issues 12 and 24): each series is registered on its
//! first use (the warm-up call), and every label is static per policy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use rampart::{Breaker, Policy};

/// A recorder whose handles are plain atomics: recording allocates nothing, so whatever the
/// counting allocator sees is rampart's.
#[derive(Default)]
struct Atomics {
    counters: Mutex<Vec<(String, Arc<AtomicU64>)>>,
}

/// A histogram that counts its records.
struct Records(AtomicU64);

impl HistogramFn for Records {
    fn record(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl Recorder for Atomics {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let value = Arc::new(AtomicU64::new(0));
        let labels: Vec<_> = key.labels().map(|l| l.value().to_owned()).collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        self.counters
            .lock()
            .expect("counters")
            .push((name, value.clone()));
        Counter::from_arc(value)
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(Records(AtomicU64::new(0))))
    }
}

impl Atomics {
    fn count(&self, name: &str) -> u64 {
        let counters = self.counters.lock().expect("counters");
        let found = counters.iter().find(|(n, _)| n == name);
        found.map_or(0, |(_, v)| v.load(Ordering::Relaxed))
    }
}

#[path = "support/ready.rs"]
mod support;
use support::ready;

fn allocations_per_success(policy: &Policy, calls: u32) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = rt.enter();
    let call = || ready(policy.run(async |attempt| Ok::<_, std::io::Error>(attempt.number())));
    call().expect("warm-up");
    allocation_counter::measure(|| {
        for _ in 0..calls {
            call().expect("success");
        }
    })
    .count_total
}

#[test]
fn the_full_policys_success_path_allocates_nothing_with_a_recorder_installed() {
    let recorder = Atomics::default();
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let policy = Policy::builder()
        .name("full")
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .breaker(Breaker::builder().build().expect("valid breaker"))
        .build()
        .expect("valid policy");
    assert_eq!(allocations_per_success(&policy, 1_000), 0);
    assert_eq!(recorder.count("rampart.calls{full,succeeded}"), 1_001);
    assert_eq!(recorder.count("rampart.attempts{full,ok}"), 1_001);
}

#[test]
fn a_one_attempt_policys_success_path_allocates_nothing_with_a_recorder_installed_and_is_counted() {
    let recorder = Atomics::default();
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let policy = Policy::builder()
        .name("none")
        .max_attempts(1)
        .build()
        .expect("valid policy");
    assert_eq!(allocations_per_success(&policy, 1_000), 0);
    assert_eq!(recorder.count("rampart.calls{none,succeeded}"), 1_001);
}
