//! The `metrics` feature: the edge's counters, registered once per layer.

use metrics::{Counter, Unit};

use super::Side;
use crate::event::EdgeEvent;

/// The handles of one layer: those of its side are registered, the others record nothing.
#[derive(Clone)]
pub(super) struct Handles {
    admitted: Counter,
    expired: Counter,
    shed: Counter,
    enforced: Counter,
    would_expire: Counter,
    would_shed: Counter,
    inbound_retry: Counter,
    not_replayable: Counter,
    quota_refused: Counter,
}

impl Handles {
    pub(super) fn new(side: Side) -> Self {
        describe();
        let server = |result: &'static str| match side {
            Side::Inbound => metrics::counter!("rampart.http.server.requests", "result" => result),
            Side::Outbound => Counter::noop(),
        };
        let dry_run = |would: &'static str| match side {
            Side::Inbound => metrics::counter!("rampart.http.server.dry_run", "would" => would),
            Side::Outbound => Counter::noop(),
        };
        let client = |reason: &'static str| match side {
            Side::Outbound => {
                metrics::counter!("rampart.http.client.single_attempt", "reason" => reason)
            }
            Side::Inbound => Counter::noop(),
        };
        Handles {
            admitted: server("admitted"),
            expired: server("expired"),
            shed: server("shed"),
            enforced: match side {
                Side::Inbound => metrics::counter!("rampart.http.server.enforced"),
                Side::Outbound => Counter::noop(),
            },
            would_expire: dry_run("expire"),
            would_shed: dry_run("shed"),
            inbound_retry: client("inbound_retry"),
            not_replayable: client("not_replayable"),
            quota_refused: match side {
                Side::Outbound => metrics::counter!("rampart.http.client.quota_refused"),
                Side::Inbound => Counter::noop(),
            },
        }
    }

    #[inline]
    pub(super) fn event(&self, event: &EdgeEvent<'_>) {
        let counter = match event {
            EdgeEvent::ExpiredOnArrival { .. } => &self.expired,
            EdgeEvent::Shed { .. } => &self.shed,
            EdgeEvent::Enforced { .. } => &self.enforced,
            EdgeEvent::WouldExpire { .. } => &self.would_expire,
            EdgeEvent::WouldShed { .. } => &self.would_shed,
            EdgeEvent::RetriesSuppressed { .. } => &self.inbound_retry,
            EdgeEvent::NotReplayable { .. } => &self.not_replayable,
            EdgeEvent::QuotaRefused { .. } => &self.quota_refused,
        };
        counter.increment(1);
    }

    #[inline]
    pub(super) fn admitted(&self) {
        self.admitted.increment(1);
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
