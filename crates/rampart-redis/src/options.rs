//! The settings both limiters share, their defaults and their validation.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::event::Listener;
use crate::lease::Settings;
use crate::store::Store;
use rampart::ConfigProblem;

/// The default bound on every Redis operation.
pub(crate) const TIMEOUT: Duration = Duration::from_millis(100);
/// The default span of this instance's own demand that one batch covers.
pub(crate) const HORIZON: Duration = Duration::from_millis(100);
/// The default interval between attempts to reach Redis while on the fallback.
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(1);
/// The longest any duration setting may be.
const LONGEST: Duration = Duration::from_secs(24 * 3600);

/// The settings shared by both builders.
#[derive(Clone)]
pub(crate) struct LeaseOptions {
    pub(crate) prefix: &'static str,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) key: String,
    pub(crate) timeout: Duration,
    pub(crate) instances: u32,
    pub(crate) horizon: Duration,
    pub(crate) max_batch: Option<u64>,
    pub(crate) probe_every: Duration,
    pub(crate) listener: Option<Listener>,
}

impl LeaseOptions {
    pub(crate) fn new(prefix: &'static str, store: Arc<dyn Store>, key: String) -> Self {
        LeaseOptions {
            prefix,
            store,
            key,
            timeout: TIMEOUT,
            instances: 1,
            horizon: HORIZON,
            max_batch: None,
            probe_every: PROBE_EVERY,
            listener: None,
        }
    }

    /// A problem with one of this limiter's fields, e.g. `global_rate_limit.timeout`.
    pub(crate) fn problem(&self, field: &str, message: String) -> ConfigProblem {
        ConfigProblem::new(format!("{}.{field}", self.prefix), message)
    }

    /// Every problem with the shared settings, and the runtime refills will run on.
    pub(crate) fn check(&self, problems: &mut Vec<ConfigProblem>) -> Option<Handle> {
        if self.key.is_empty() {
            problems.push(self.problem("key", "must not be empty (was \"\")".into()));
        }
        for (field, value) in [
            ("timeout", self.timeout),
            ("horizon", self.horizon),
            ("probe_every", self.probe_every),
        ] {
            if let Some(message) = check_duration(value) {
                problems.push(self.problem(field, message));
            }
        }
        if self.instances == 0 {
            problems.push(self.problem("instances", "must be at least 1 (was 0)".into()));
        }
        if self.max_batch == Some(0) {
            problems.push(self.problem("max_batch", "must be at least 1 (was 0)".into()));
        }
        match Handle::try_current() {
            Ok(handle) => Some(handle),
            Err(_) => {
                problems.push(self.problem(
                    "runtime",
                    "must be built inside a tokio runtime, which runs its refills (none is running on this thread)".into(),
                ));
                None
            }
        }
    }

    /// The machinery's settings, once checked; `max_batch` when none was set.
    pub(crate) fn settings(&self, max_batch: u64) -> Settings {
        Settings {
            key: self.key.clone(),
            timeout: self.timeout,
            probe_every: self.probe_every,
            horizon: self.horizon,
            max_batch: self.max_batch.unwrap_or(max_batch).max(1),
        }
    }
}

/// Why a duration setting cannot work, if it cannot.
pub(crate) fn check_duration(value: Duration) -> Option<String> {
    if value.is_zero() {
        Some("must be positive (was 0ns)".into())
    } else if value > LONGEST {
        Some(format!("must be at most 24h (was {value:?})"))
    } else {
        None
    }
}

/// The setters both builders share, written once.
macro_rules! lease_setters {
    ($builder:ident) => {
        impl $builder {
            /// The bound on every Redis operation, connecting included: no call waits on
            /// Redis longer than this. Default 100 ms.
            pub fn timeout(mut self, timeout: Duration) -> Self {
                self.lease.timeout = timeout;
                self
            }

            /// How many instances are expected to share the limit; the default fallback is
            /// the limit divided by it. Default 1.
            pub fn instances(mut self, instances: u32) -> Self {
                self.lease.instances = instances;
                self
            }

            /// The span of this instance's own recent demand that one batch covers: a refill
            /// asks for (calls per second since the previous refill) × `horizon`, at most
            /// `max_batch`. Default 100 ms.
            pub fn horizon(mut self, horizon: Duration) -> Self {
                self.lease.horizon = horizon;
                self
            }

            /// The most permits one refill takes (see the crate docs for what it bounds).
            pub fn max_batch(mut self, max_batch: u64) -> Self {
                self.lease.max_batch = Some(max_batch);
                self
            }

            /// How often Redis is tried again while the limiter is on its fallback. Default 1 s.
            pub fn probe_every(mut self, every: Duration) -> Self {
                self.lease.probe_every = every;
                self
            }

            /// Called when the limiter leaves the shared quota for its fallback, and when it
            /// comes back ([`LimitEvent`]).
            pub fn on_event(
                mut self,
                listener: impl Fn(&LimitEvent<'_>) + Send + Sync + 'static,
            ) -> Self {
                self.lease.listener = Some(std::sync::Arc::new(listener));
                self
            }
        }
    };
}

pub(crate) use lease_setters;
