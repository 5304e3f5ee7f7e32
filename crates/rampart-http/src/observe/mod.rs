//! The edge's own observability: what the layers decide around rampart's calls, as `tracing`
//! events and spans and `metrics` counters, behind the features of the same names.
//!
//! The outbound policies' calls are observed by rampart itself (with these features on,
//! rampart's `tracing` and `metrics` features are on too: see `rampart::observe`); this
//! module adds what only the edge knows. As in rampart, each feature's functions are written
//! twice (real, and empty when it is off), so no call site has a `cfg`.
//!
//! ```toml
//! rampart-http = { version = "0.2", features = ["tracing", "metrics"] }
//! ```
//!
//! # Metrics
//!
//! Each series is registered on its first use (install the recorder before the first
//! request), so a reason that never happens has none; once it exists, a request allocates
//! nothing for it.
//!
//! rampart's own metrics of the outbound layer's calls (the table in `rampart::observe`)
//! carry `policy`, the layer's [name](crate::outbound::OutboundBuilder::name), and
//! `server.address`, the host key (`host:port`), as series of their own per host, which a host
//! makes on its first request. [`metrics_by_host(false)`](crate::outbound::OutboundBuilder::metrics_by_host)
//! keeps one set of series for the whole layer instead (for a client whose hosts come from
//! outside), without the gauges of each host's own breaker and budget. Building a layer
//! registers nothing. A host evicted from the table (see
//! [`max_hosts`](crate::outbound::OutboundBuilder::max_hosts)) leaves its series in the
//! recorder, at their last values, until the process ends: the `metrics` facade cannot remove
//! a series. Where hosts come and go without bound, `metrics_by_host(false)` keeps the count of
//! series fixed.
//!
//! | name | kind | unit | attributes | when it moves |
//! |---|---|---|---|---|
//! | `rampart.http.server.requests` | counter | `{request}` | `result`: `admitted` \| `expired` \| `shed` | once per request the inbound layer receives: its handler ran, `reject_expired` answered 504, or admission answered 503 |
//! | `rampart.http.server.enforced` | counter | `{request}` | | an admitted request whose handler `enforce` dropped at the deadline (504) |
//! | `rampart.http.server.dry_run` | counter | `{request}` | `would`: `expire` \| `shed` | in [`dry_run`](crate::InboundLayer::dry_run), a request served that `reject_expired` or admission would have refused |
//! | `rampart.http.client.single_attempt` | counter | `{request}` | `reason`: `inbound_retry` \| `not_replayable` | an outbound request given one attempt: the request being served arrived as a retry, or its body was too large to replay |
//! | `rampart.http.client.quota_refused` | counter | `{request}` | | an outbound request refused before its first attempt because its host's quota was spent (see [`crate::quota`]) |
//!
//! # Tracing
//!
//! Target `rampart_http`. Each [`EdgeEvent`] is an event: `Enforced` at `WARN`,
//! `ExpiredOnArrival`, `Shed`, `WouldExpire`, `WouldShed` and `QuotaRefused` at `INFO`, `RetriesSuppressed` and
//! `NotReplayable` at `DEBUG`. Each outbound attempt (through the [outbound layer](crate::outbound),
//! its gRPC channel, or the reqwest client of the `reqwest` feature) runs in an `INFO` span
//! `rampart.http.attempt`, a child of rampart's `rampart.attempt`, with OpenTelemetry's HTTP
//! client attributes: `http.request.method`, `server.address` (the host key),
//! `http.request.resend_count` (on retries and hedges only: how many earlier attempts of the
//! call were sent, [`Attempt::resends`], so that an attempt admission refused locally counts
//! for nothing) and `http.response.status_code` (recorded when the response arrives).

use http::Method;
use rampart::Attempt;

use crate::event::EdgeEvent;

#[cfg_attr(feature = "metrics", path = "metrics.rs")]
#[cfg_attr(not(feature = "metrics"), path = "metrics_off.rs")]
mod metrics;
#[cfg_attr(feature = "tracing", path = "tracing.rs")]
#[cfg_attr(not(feature = "tracing"), path = "tracing_off.rs")]
mod tracing;

pub(crate) use self::tracing::Span;

/// Which layer an observer reports for: only its metrics are registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Inbound,
    Outbound,
}

/// What one layer reports to `tracing` and `metrics`, built with the layer.
#[derive(Clone)]
pub(crate) struct Observer {
    metrics: metrics::Handles,
}

impl Observer {
    /// The observer of a layer on `side`: registers its handles with the current recorder.
    pub(crate) fn new(side: Side) -> Self {
        Observer {
            metrics: metrics::Handles::new(side),
        }
    }

    /// Reports `event`.
    #[inline]
    pub(crate) fn event(&self, event: &EdgeEvent<'_>) {
        self.metrics.event(event);
        tracing::event(event);
    }

    /// The inbound layer ran a request's handler.
    #[inline]
    pub(crate) fn admitted(&self) {
        self.metrics.admitted();
    }
}

/// The span of one outbound attempt of a `method` request to `host`.
#[inline]
pub(crate) fn attempt_span(method: &Method, host: &str, attempt: &Attempt) -> Span {
    tracing::attempt(method, host, attempt.resends())
}
