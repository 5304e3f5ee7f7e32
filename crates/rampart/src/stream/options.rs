//! [`StreamOptions`] and their builder: what bounds a stream once its first item has arrived.

use std::time::Duration;

use crate::error::{ConfigError, ConfigProblem};

/// How a stream call is bounded once its first item has arrived: see the
/// [module table](super). Cheap to copy; build it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamOptions {
    idle_timeout: Option<Duration>,
    deadline: StreamDeadline,
}

/// What the call's deadline bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StreamDeadline {
    /// The whole stream: it ends with
    /// [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded) when the deadline passes.
    #[default]
    WholeStream,
    /// Only opening the stream and its first item (the retried phase); the items after it are
    /// bounded by the idle timeout and the caller alone.
    FirstItem,
}

impl StreamOptions {
    /// A builder with the defaults in the [module table](super).
    pub fn builder() -> StreamOptionsBuilder {
        StreamOptionsBuilder {
            options: StreamOptions::default(),
        }
    }

    /// The longest wait for an item after the first, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }

    /// What the call's deadline bounds.
    pub fn deadline(&self) -> StreamDeadline {
        self.deadline
    }
}

/// Builds [`StreamOptions`]; [`build`](Self::build) validates them.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until built"]
pub struct StreamOptionsBuilder {
    options: StreamOptions,
}

impl StreamOptionsBuilder {
    /// The longest wait for the next item once the first was delivered (default none; must be
    /// positive). A stall this long ends the stream with
    /// [`Error::IdleTimeout`](crate::Error::IdleTimeout).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.options.idle_timeout = Some(idle);
        self
    }

    /// No idle timeout (the default).
    pub fn no_idle_timeout(mut self) -> Self {
        self.options.idle_timeout = None;
        self
    }

    /// What the call's deadline bounds (default [`StreamDeadline::WholeStream`]).
    pub fn deadline(mut self, bounds: StreamDeadline) -> Self {
        self.options.deadline = bounds;
        self
    }

    /// The options, or every problem with them, each naming the field and the value.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when `idle_timeout` is zero.
    pub fn build(self) -> Result<StreamOptions, ConfigError> {
        match self.options.idle_timeout {
            Some(idle) if idle.is_zero() => Err(ConfigError::new(vec![ConfigProblem::new(
                "idle_timeout",
                "must be positive (was 0ns)",
            )])),
            _ => Ok(self.options),
        }
    }
}
