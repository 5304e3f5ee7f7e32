//! Changing a policy's settings while it serves calls: [`PolicySettings`] and
//! [`Policy::reconfigure`], validated by the checks [`PolicyBuilder::build`] runs.

use std::time::Duration;

use super::Policy;
#[cfg(doc)]
use super::PolicyBuilder;
use crate::admit::Admit;
use crate::backoff::Backoff;
use crate::error::{ConfigError, ConfigProblem};
use crate::event::Event;
use crate::executor::shared::Live;
use crate::hedge::Hedge;
use crate::timeout::TimeoutMode;

/// The settings of a [`Policy`] that [`Policy::reconfigure`] can replace while the policy
/// serves calls; read the current ones with [`Policy::settings`].
///
/// Each field is the builder setting of the same name ([`PolicyBuilder`]): `None` for
/// `total_timeout` is [`no_total_timeout`](PolicyBuilder::no_total_timeout), for `attempt_timeout`
/// [`no_attempt_timeout`](PolicyBuilder::no_attempt_timeout). What the policy is made of
/// (its name, classifier, admission component, clock, listeners and hooks, retry budget,
/// breaker, hedging and adaptive ceiling, ambient reads, drain) is fixed at `build()`;
/// the breaker's own thresholds change with [`Breaker::reconfigure`](crate::Breaker::reconfigure),
/// a limiter's size with its own setter (e.g.
/// [`ConcurrencyLimit::set_limit`](crate::limit::ConcurrencyLimit::set_limit)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PolicySettings {
    /// Attempts per call, the first included (at least 1).
    pub max_attempts: u32,
    /// The bound on the whole call, backoffs included; `None`: no bound.
    pub total_timeout: Option<Duration>,
    /// The bound on each attempt; `None`: none beyond the deadline.
    pub attempt_timeout: Option<Duration>,
    /// The least time a retry must have left before the deadline to be started.
    pub min_attempt_time: Duration,
    /// What happens to an attempt at its ceiling.
    pub timeout_mode: TimeoutMode,
    /// The wait between attempts.
    pub backoff: Backoff,
}

/// The checks on the settings a running policy can change, in the order `build()` reports
/// them; `hedge` is the policy's hedging, which bounds `max_attempts`.
pub(super) fn check(s: &PolicySettings, hedge: Option<&Hedge>, problems: &mut Vec<ConfigProblem>) {
    if s.max_attempts == 0 {
        problems.push(ConfigProblem::new(
            "max_attempts",
            "must be at least 1 (was 0)",
        ));
    }
    for (field, value) in [
        ("total_timeout", s.total_timeout),
        ("attempt_timeout", s.attempt_timeout),
    ] {
        if value == Some(Duration::ZERO) {
            problems.push(ConfigProblem::new(field, "must be positive (was 0ns)"));
        }
    }
    if let Some(total) = s.total_timeout
        && !total.is_zero()
        && s.min_attempt_time >= total
    {
        problems.push(ConfigProblem::new(
            "min_attempt_time",
            format!(
                "must be shorter than the total_timeout (was {:?}, total_timeout {total:?})",
                s.min_attempt_time
            ),
        ));
    }
    if let TimeoutMode::Abandon { grace } = s.timeout_mode
        && grace > Duration::from_secs(3600)
    {
        problems.push(ConfigProblem::new(
            "timeout_mode.grace",
            format!("must be at most 1h (was {grace:?})"),
        ));
    }
    s.backoff.validate(problems);
    if let Some(hedge) = hedge {
        hedge.validate(problems);
        if s.max_attempts as usize > crate::hedge::MAX_LEGS {
            problems.push(ConfigProblem::new(
                "max_attempts",
                format!(
                    "must be at most {} for a hedging policy (was {})",
                    crate::hedge::MAX_LEGS,
                    s.max_attempts
                ),
            ));
        }
    }
}

/// What the policy's fixed parts say about the live settings: whether reading the ambient
/// criticality still gates something with `max_attempts` attempts.
pub(super) fn criticality_problem(
    ambient_criticality: bool,
    hedges: bool,
    always_admits: bool,
    max_attempts: u32,
    has_budget: bool,
) -> Option<ConfigProblem> {
    // An admission component reads the level too (a criticality-aware limiter sheds by it).
    if !ambient_criticality || hedges || !always_admits {
        return None;
    }
    if max_attempts == 1 {
        Some(ConfigProblem::new(
            "use_ambient_criticality",
            "has nothing to gate: the policy makes one attempt and does not hedge",
        ))
    } else if !has_budget {
        Some(ConfigProblem::new(
            "use_ambient_criticality",
            "has nothing to gate: the policy has no retry budget and does not hedge",
        ))
    } else {
        None
    }
}

/// The snapshot calls run with of `settings`, for a policy whose parts read the clock when
/// `parts_read_clock`
/// ([`Shared::parts_read_clock`](crate::executor::Shared::parts_read_clock)), and whose
/// admission always admits when `always_admits`.
///
/// Whether the settings let a call pass through with no machine is decided here, every
/// setting named: a setting added to [`PolicySettings`] is decided here or the crate does not
/// compile.
pub(super) fn snapshot(
    settings: PolicySettings,
    parts_read_clock: bool,
    always_admits: bool,
) -> Live {
    let PolicySettings {
        max_attempts,
        total_timeout,
        attempt_timeout,
        // Each bears only on a timeout or a retry, which the rest rules out.
        min_attempt_time,
        timeout_mode,
        backoff,
    } = settings;
    let reads_clock = parts_read_clock || total_timeout.is_some() || attempt_timeout.is_some();
    Live {
        pass_through: !reads_clock && max_attempts == 1 && always_admits,
        max_attempts,
        total_timeout,
        attempt_timeout,
        min_attempt_time,
        mode: timeout_mode,
        backoff,
    }
}

/// The settings the snapshot `live` was made of.
fn settings_of(live: &Live) -> PolicySettings {
    PolicySettings {
        max_attempts: live.max_attempts,
        total_timeout: live.total_timeout,
        attempt_timeout: live.attempt_timeout,
        min_attempt_time: live.min_attempt_time,
        timeout_mode: live.mode,
        backoff: live.backoff.clone(),
    }
}

impl<C, A> Policy<C, A> {
    /// The settings calls starting now run with (see [`reconfigure`](Self::reconfigure)).
    pub fn settings(&self) -> PolicySettings {
        settings_of(self.shared.live.load())
    }

    /// Replaces the policy's [live settings](PolicySettings): `update` edits a copy of the
    /// current ones, which is checked exactly as [`PolicyBuilder::build`] checks them and, if
    /// valid, swapped in at once for every clone of the policy. A rejected update changes
    /// nothing and its [`ConfigError`] names every field and value it refused.
    ///
    /// Calls already running keep the settings they started with, to their end (their
    /// attempts, total timeout, attempt timeout and backoff); calls starting after the update
    /// returns use the new ones. What accumulated across calls is kept: the breaker's state,
    /// the budget's tokens, the latency estimates, the seeded call numbers. An accepted update
    /// is reported to listeners as [`Event::Reconfigured`].
    ///
    /// Besides the checks of `build()`: a policy built with the automatic budget and one
    /// attempt has no retry budget, so it may not be reconfigured to retry (build it with
    /// [`budget`](PolicyBuilder::budget) or [`no_budget`](PolicyBuilder::no_budget) to choose).
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart::Policy;
    ///
    /// let policy = Policy::builder().max_attempts(3).build()?;
    /// policy.reconfigure(|s| {
    ///     s.max_attempts = 5;
    ///     s.attempt_timeout = Some(Duration::from_millis(250));
    /// })?;
    /// assert_eq!(policy.max_attempts(), 5);
    ///
    /// let refused = policy.reconfigure(|s| s.total_timeout = Some(Duration::ZERO)).unwrap_err();
    /// assert_eq!(refused.to_string(), "total_timeout must be positive (was 0ns)");
    /// assert_eq!(policy.total_timeout(), Some(Duration::from_secs(30)));
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    ///
    /// Calls never wait for an update: each loads the settings once, with one atomic load, no
    /// lock and no allocation. Updates take a short lock among themselves, so that two at once
    /// apply one after the other. Each accepted update keeps the settings it replaced allocated
    /// (under 200 bytes, about twice that with the blocks they are kept in) until the last clone of the policy is dropped, since a running call
    /// may still read them: meant for an operator's or a config file's pace, not for every
    /// request. After 2^31 - 1 updates a policy refuses more (field `reconfigure`).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every problem of the updated settings, checked as `build()`
    /// checks them (the policy keeps its settings), or `reconfigure` after 2^31 - 1 updates.
    pub fn reconfigure(&self, update: impl FnOnce(&mut PolicySettings)) -> Result<(), ConfigError>
    where
        A: Admit,
    {
        if self.is_shared_none() {
            return Err(ConfigError::new(vec![ConfigProblem::new(
                "reconfigure",
                "cannot change `Policy::none()`: it is one policy shared by every caller in the process; build a pass-through of your own (`max_attempts(1)`, `no_total_timeout()`, `no_attempt_timeout()`) to reconfigure it",
            )]));
        }
        let s = &*self.shared;
        let _one_at_a_time = s
            .reconfiguring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut settings = settings_of(s.live.load());
        update(&mut settings);
        let mut problems = Vec::new();
        check(&settings, s.hedge.as_ref(), &mut problems);
        if s.lacks_automatic_budget && settings.max_attempts > 1 {
            problems.push(ConfigProblem::new(
                "max_attempts",
                format!(
                    "must stay 1 (was {}): the policy was built with one attempt and so has no retry budget; build it with `budget(..)` or `no_budget()` to retry",
                    settings.max_attempts
                ),
            ));
        }
        // Of what the rule reads, an update changes only the attempts: name them.
        if criticality_problem(
            s.ambient_criticality,
            s.hedge.is_some(),
            A::ALWAYS_ADMITS,
            settings.max_attempts,
            s.budget.is_some(),
        )
        .is_some()
        {
            problems.push(ConfigProblem::new(
                "max_attempts",
                format!(
                    "must stay above 1 (was {}): the policy reads the ambient criticality (`use_ambient_criticality`), which gates only retries and hedges",
                    settings.max_attempts
                ),
            ));
        }
        if !problems.is_empty() {
            return Err(ConfigError::new(problems));
        }
        let live = snapshot(settings, s.parts_read_clock(), A::ALWAYS_ADMITS);
        if s.live.store(live).is_err() {
            return Err(ConfigError::new(vec![crate::swap::too_many_updates()]));
        }
        drop(_one_at_a_time);
        if s.telemetry.is_listened() {
            let event = Event::Reconfigured { policy: &s.name };
            s.telemetry.emit(&crate::observe::current_span(), event);
        }
        Ok(())
    }
}
