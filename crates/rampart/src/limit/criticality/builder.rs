//! How a [`CriticalityLimit`] is configured.

use super::*;

/// Builds a [`CriticalityLimit`]; see [`CriticalityLimit`] for the defaults.
#[must_use]
#[derive(Debug, Clone)]
pub struct CriticalityLimitBuilder {
    pub(super) capacity: usize,
    pub(super) queue: Option<usize>,
    pub(super) hold: Duration,
    pub(super) lifo_after: Option<Duration>,
    pub(super) min_time_left: Option<Duration>,
    pub(super) clock: Clock,
}

impl CriticalityLimitBuilder {
    /// Waiters allowed (`CriticalPlus` may exceed it while its own demand fits the capacity).
    /// Default `capacity / 2`, at least 1; 0 refuses at once when full.
    pub fn queue(self, queue: usize) -> Self {
        CriticalityLimitBuilder {
            queue: Some(queue),
            ..self
        }
    }

    /// How long a refusal of a level keeps every level below it refused: at most 1 h.
    /// Default 1 s. Zero turns this off (the queue order alone then decides).
    pub fn hold(self, hold: Duration) -> Self {
        CriticalityLimitBuilder { hold, ..self }
    }

    /// Serve a level newest first once its oldest waiter has waited longer than this
    /// (adaptive LIFO); `None` keeps every level in arrival order. Default `None`; see the type docs.
    pub fn lifo_after(self, lifo_after: Option<Duration>) -> Self {
        CriticalityLimitBuilder { lifo_after, ..self }
    }

    /// The least time before its ceiling that a waiter must have left to be admitted from the
    /// queue; one with less is refused. Default: the measured mean time a permit is held (zero
    /// until measured).
    pub fn min_time_left(self, min_time_left: Duration) -> Self {
        CriticalityLimitBuilder {
            min_time_left: Some(min_time_left),
            ..self
        }
    }

    /// The clock read when a released permit hands its slot to a waiter: give it the policy's
    /// clock (a [`ManualClock`](crate::clock::ManualClock) in tests). Default
    /// [`Clock::system`], tokio's clock.
    pub fn clock(self, clock: impl Into<Clock>) -> Self {
        CriticalityLimitBuilder {
            clock: clock.into(),
            ..self
        }
    }

    /// The limit; or every invalid setting at once.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting at once, each naming its field and value.
    pub fn build(self) -> Result<CriticalityLimit, ConfigError> {
        let mut problems = Vec::new();
        if self.capacity == 0 {
            problems.push(zero_capacity());
        }
        if self.hold > MAX_HOLD {
            problems.push(ConfigProblem::new(
                "criticality_limit.hold",
                format!("must be at most 1h (was {:?})", self.hold),
            ));
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        Ok(CriticalityLimit {
            inner: Arc::new(Inner {
                capacity: AtomicUsize::new(self.capacity),
                queue: self.queue.unwrap_or((self.capacity / 2).max(1)),
                hold: self.hold,
                lifo_after: self
                    .lifo_after
                    .map(|after| u64::try_from(after.as_nanos()).unwrap_or(u64::MAX)),
                min_time_left: self.min_time_left,
                clock: self.clock,
                in_flight: InFlight::default(),
                critical_plus: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
                shed_until: Default::default(),
                time: TimeBase::default(),
                held: TypicalLatency::default(),
                waiters: Mutex::default(),
            }),
        })
    }
}
