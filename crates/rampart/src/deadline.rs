//! Deadlines: the instant by which the caller stops waiting.
//!
//! A [`Deadline`] is a point in time, not a span: it does not decay as it is passed along, and
//! "time left" is computed when it is read. The ambient deadline of the current task is
//! [`Deadline::current`]; [`Deadline::scope`] sets one for a future.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use rampart::Deadline;
//!
//! let deadline = Deadline::after(Duration::from_millis(300));
//! deadline
//!     .scope(async {
//!         tokio::time::sleep(Duration::from_millis(100)).await;
//!         assert_eq!(Deadline::current().unwrap().remaining(), Duration::from_millis(200));
//!     })
//!     .await;
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

use crate::ambient::Ambient;
use crate::clock::Instant;

/// The instant by which a caller stops waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

impl Deadline {
    /// The deadline at `instant`.
    pub const fn at(instant: Instant) -> Self {
        Deadline(instant)
    }

    /// `span` from now on tokio's clock (paused time included). A span too large to represent
    /// is clamped to about thirty years.
    pub fn after(span: Duration) -> Self {
        Deadline::after_from(Instant::now(), span)
    }

    /// `span` after `now` (for a manual clock).
    pub fn after_from(now: Instant, span: Duration) -> Self {
        let far = Duration::from_secs(86_400 * 365 * 30);
        Deadline(now.checked_add(span).unwrap_or_else(|| now + far.min(span)))
    }

    /// The instant.
    pub const fn instant(self) -> Instant {
        self.0
    }

    /// Time left now (tokio's clock); zero once passed.
    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// Time left at `now`; zero once passed.
    pub fn remaining_at(self, now: Instant) -> Duration {
        self.0.saturating_duration_since(now)
    }

    /// Whether it has passed at `now`.
    pub fn is_expired_at(self, now: Instant) -> bool {
        now >= self.0
    }

    /// The ambient deadline of the current task, if any.
    pub fn current() -> Option<Deadline> {
        Ambient::current().deadline()
    }

    /// Runs `future` with this deadline ambient (or the enclosing one, if that is earlier).
    pub fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        Ambient::new().with_deadline(self).scope(future)
    }
}
