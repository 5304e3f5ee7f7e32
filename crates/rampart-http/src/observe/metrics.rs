//! The `metrics` feature: the edge's counters, each registered on its first use.
//!
//! Each counter has a slot, shared by the layer's clones, that takes the recorder's handle the
//! first time it moves (its key is static: registering allocates nothing of rampart's); after
//! that a count is a load of the slot and an add, with nothing allocated. A counter that never
//! moves (a reason never seen, the other side's) has no series.

use std::sync::{Arc, Once, OnceLock};

use metrics::{Counter, Key, Label, Level, Metadata, Unit};

use super::Side;
use crate::event::EdgeEvent;

/// Every counter of the edge: its key (name and label, both static, so that registering it
/// builds nothing) and the side that moves it.
static COUNTERS: [(&str, &[Label], Side); 9] = [
    (
        "rampart.http.server.requests",
        &[Label::from_static_parts("result", "admitted")],
        Side::Inbound,
    ),
    (
        "rampart.http.server.requests",
        &[Label::from_static_parts("result", "expired")],
        Side::Inbound,
    ),
    (
        "rampart.http.server.requests",
        &[Label::from_static_parts("result", "shed")],
        Side::Inbound,
    ),
    ("rampart.http.server.enforced", &[], Side::Inbound),
    (
        "rampart.http.server.dry_run",
        &[Label::from_static_parts("would", "expire")],
        Side::Inbound,
    ),
    (
        "rampart.http.server.dry_run",
        &[Label::from_static_parts("would", "shed")],
        Side::Inbound,
    ),
    (
        "rampart.http.client.single_attempt",
        &[Label::from_static_parts("reason", "inbound_retry")],
        Side::Outbound,
    ),
    (
        "rampart.http.client.single_attempt",
        &[Label::from_static_parts("reason", "not_replayable")],
        Side::Outbound,
    ),
    ("rampart.http.client.quota_refused", &[], Side::Outbound),
];

/// What the recorder is told about where the counters come from.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

const ADMITTED: usize = 0;
const EXPIRED: usize = 1;
const SHED: usize = 2;
const ENFORCED: usize = 3;
const WOULD_EXPIRE: usize = 4;
const WOULD_SHED: usize = 5;
const INBOUND_RETRY: usize = 6;
const NOT_REPLAYABLE: usize = 7;
const QUOTA_REFUSED: usize = 8;

/// The counters of one layer, shared by its clones: those of its side move, the others never
/// do (and so are never registered).
#[derive(Clone)]
pub(super) struct Handles(Arc<Slots>);

struct Slots {
    side: Side,
    described: Once,
    counters: [OnceLock<Counter>; COUNTERS.len()],
}

impl Handles {
    pub(super) fn new(side: Side) -> Self {
        Handles(Arc::new(Slots {
            side,
            described: Once::new(),
            counters: std::array::from_fn(|_| OnceLock::new()),
        }))
    }

    #[inline]
    pub(super) fn event(&self, event: &EdgeEvent<'_>) {
        let i = match event {
            EdgeEvent::ExpiredOnArrival { .. } => EXPIRED,
            EdgeEvent::Shed { .. } => SHED,
            EdgeEvent::Enforced { .. } => ENFORCED,
            EdgeEvent::WouldExpire { .. } => WOULD_EXPIRE,
            EdgeEvent::WouldShed { .. } => WOULD_SHED,
            EdgeEvent::RetriesSuppressed { .. } => INBOUND_RETRY,
            EdgeEvent::NotReplayable { .. } => NOT_REPLAYABLE,
            EdgeEvent::QuotaRefused { .. } => QUOTA_REFUSED,
        };
        self.count(i);
    }

    #[inline]
    pub(super) fn admitted(&self) {
        self.count(ADMITTED);
    }

    #[inline]
    fn count(&self, i: usize) {
        let slots = &*self.0;
        if COUNTERS[i].2 != slots.side {
            return;
        }
        slots.counters[i]
            .get_or_init(|| slots.register(i))
            .increment(1);
    }
}

impl Slots {
    #[cold]
    #[inline(never)]
    fn register(&self, i: usize) -> Counter {
        self.described.call_once(describe);
        let (name, labels, _) = COUNTERS[i];
        let key = Key::from_static_labels(name, labels);
        metrics::with_recorder(|recorder| recorder.register_counter(&key, &METADATA))
    }
}

fn describe() {
    metrics::describe_counter!(
        "rampart.http.server.requests",
        Unit::Count,
        "Requests the inbound layer received, by what it did: admitted, expired, shed."
    );
    metrics::describe_counter!(
        "rampart.http.server.enforced",
        Unit::Count,
        "Admitted requests whose handler was dropped at the deadline."
    );
    metrics::describe_counter!(
        "rampart.http.server.dry_run",
        Unit::Count,
        "Requests served that reject_expired (expire) or admission (shed) would have refused."
    );
    metrics::describe_counter!(
        "rampart.http.client.single_attempt",
        Unit::Count,
        "Outbound requests given one attempt: an inbound retry, or a body too large to replay."
    );
    metrics::describe_counter!(
        "rampart.http.client.quota_refused",
        Unit::Count,
        "Outbound requests refused before an attempt: the host's quota was spent until its reset."
    );
}
