//! Events: what the edge layers decided on their own, handed to listeners.
//!
//! The outbound policies report their calls through rampart's own [`rampart::Event`]s (add a
//! listener with [`OutboundBuilder::policy`](crate::OutboundBuilder::policy)); these are the
//! decisions the layers make around them.
//!
//! | event | layer | when |
//! |---|---|---|
//! | `ExpiredOnArrival` | inbound | `reject_expired` answered 504: the time left did not exceed the reserve |
//! | `Shed` | inbound | admission refused the request: 503 |
//! | `Enforced` | inbound | `enforce` dropped the handler at the deadline: 504 |
//! | `WouldExpire`, `WouldShed` | inbound | in `dry_run`: `reject_expired` or admission would have answered 504 or 503; the handler runs |
//! | `RetriesSuppressed` | outbound | the request being served arrived as a retry, so this call makes one attempt |
//! | `NotReplayable` | outbound | a replayable request's body was too large to buffer, so it gets one attempt |
//! | `QuotaRefused` | outbound | the host's quota is spent (see [`crate::quota`]): the request was refused before its first attempt |
//!
//! Listeners are synchronous, `Send + Sync`, and may run concurrently; a panicking listener is
//! caught and ignored.
//!
//! ```
//! use rampart_http::{EdgeEvent, InboundLayer};
//!
//! let layer = InboundLayer::new().listener(|event: &EdgeEvent<'_>| {
//!     if let EdgeEvent::ExpiredOnArrival { left, .. } = event {
//!         eprintln!("rejected a request with {left:?} left");
//!     }
//! });
//! # drop(layer);
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use rampart::Criticality;

use crate::observe::{Observer, Side};

/// Something an edge layer decided.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum EdgeEvent<'a> {
    /// Inbound: answered 504 without running the handler.
    ExpiredOnArrival {
        /// The time the caller said it was still waiting.
        left: Duration,
        /// The configured reserve it did not exceed.
        reserve: Duration,
    },
    /// Inbound: admission refused the request; answered 503.
    Shed {
        /// The request's level.
        level: Criticality,
        /// The refusing component.
        by: &'static str,
        /// The retry-after it gave, if any.
        retry_after: Option<Duration>,
    },
    /// Inbound: the handler was still running at the deadline and was dropped; answered 504.
    Enforced {
        /// The time the handler had (received deadline minus reserve).
        budget: Duration,
    },
    /// Inbound, in [dry run](crate::InboundLayer::dry_run): `reject_expired` would have
    /// answered 504; the handler runs.
    WouldExpire {
        /// The time the caller said it was still waiting.
        left: Duration,
        /// The configured reserve it did not exceed.
        reserve: Duration,
    },
    /// Inbound, in [dry run](crate::InboundLayer::dry_run): admission would have refused the
    /// request (503); the handler runs without a permit.
    WouldShed {
        /// The request's level.
        level: Criticality,
        /// The component that would have refused.
        by: &'static str,
        /// The retry-after it gave.
        retry_after: Option<Duration>,
    },
    /// Outbound: the request being served arrived as a retry, so this call attempts once and
    /// leaves retrying to the layer above.
    RetriesSuppressed {
        /// The called host, `host:port`.
        host: &'a str,
        /// The request's method.
        method: &'a http::Method,
    },
    /// Outbound: the body of a replayable request is larger than the replay limit (or of
    /// unknown size and growing past it), so it is streamed once and not retried.
    NotReplayable {
        /// The called host, `host:port`.
        host: &'a str,
        /// The replay limit in bytes.
        limit: usize,
    },
    /// Outbound: a response said the host's quota is spent and its reset is still ahead, so
    /// the request was refused without an attempt (see [`crate::quota`]).
    QuotaRefused {
        /// The called host, `host:port`.
        host: &'a str,
        /// The time left until the quota resets: the refusal's retry-after.
        retry_after: Duration,
    },
}

type Listener = Arc<dyn Fn(&EdgeEvent<'_>) + Send + Sync>;

/// The listeners of one layer, and its `tracing` and `metrics` view of the events.
#[derive(Clone)]
pub(crate) struct Listeners {
    list: Vec<Listener>,
    observer: Observer,
}

impl Listeners {
    /// The listeners of a layer on `side` (none yet); registers its metric handles.
    pub(crate) fn new(side: Side) -> Self {
        Listeners {
            list: Vec::new(),
            observer: Observer::new(side),
        }
    }

    pub(crate) fn push(&mut self, listener: impl Fn(&EdgeEvent<'_>) + Send + Sync + 'static) {
        self.list.push(Arc::new(listener));
    }

    pub(crate) fn emit(&self, event: EdgeEvent<'_>) {
        self.observer.event(&event);
        for listener in &self.list {
            let _ = catch_unwind(AssertUnwindSafe(|| listener(&event)));
        }
    }

    /// The inbound layer ran a request's handler (counted; not an event).
    #[inline]
    pub(crate) fn admitted(&self) {
        self.observer.admitted();
    }
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} listeners", self.list.len())
    }
}
