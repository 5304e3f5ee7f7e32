//! The outbound layer: every request a client sends runs under a rampart policy, and carries
//! the deadline and criticality to the next service.
//!
//! [`OutboundLayer`] wraps any `tower` service over `http::Request` (hyper-util's client, a
//! tonic channel, ...). For each request it picks the policy of the request's host
//! (`host:port`: one circuit breaker and one retry budget per host, in a bounded table, see
//! [`max_hosts`](OutboundBuilder::max_hosts)) and
//! runs the request under it. The policy's deadline and attempt timeout are the transport's
//! timeouts: an attempt that reaches its ceiling is dropped, connection and all, so the client
//! needs no timeout of its own.
//!
//! Every attempt (and every hedged leg) writes:
//!
//! | header | value |
//! |---|---|
//! | `X-Deadline-Ms` (or `grpc-timeout` for `application/grpc`) | `min(attempt ceiling, time left)` when the attempt is sent |
//! | `X-Criticality` | the ambient level (`Critical` for an unlabeled call) |
//! | `X-Rampart-Retry` | `1` on a retry or hedge, absent on a first attempt |
//!
//! replacing whatever the caller wrote in those headers. A deadline the caller wrote itself
//! (`grpc-timeout` on a gRPC request, as tonic's `set_timeout` writes it, else
//! `X-Deadline-Ms`) is never extended: the call runs within it, so its attempts write the
//! smaller of the caller's value and the time rampart has left, and rampart's own timer ends
//! the call there. The policies read the ambient deadline and criticality, so inside a
//! handler served by the [inbound layer](crate::inbound) a call never outlives the request it
//! serves, and an expired request makes no call at all.
//!
//! # gRPC
//!
//! Responses are classified by their `grpc-status` (see [`crate::classify`]): `UNAVAILABLE`
//! is retried, `RESOURCE_EXHAUSTED` is retried after its `grpc-retry-pushback-ms`. gRPC calls
//! are `POST`s, so they get one attempt unless marked [`Repeatable`] (in tonic:
//! `request.extensions_mut().insert(Repeatable)`). A transport error in the last millisecond
//! of a gRPC attempt's ceiling is the transport's own timer (tonic arms one from the
//! `grpc-timeout` the attempt carried), so the attempt waits that moment for rampart's timer,
//! and the call ends with rampart's timeout, not the transport's error.
//!
//! A tonic channel goes under the layer one way: `OutboundLayer::grpc(origin, channel)`
//! (feature `tonic`), which keys the channel's host entry by its origin and answers rampart's
//! decisions as `tonic::Status` (`DEADLINE_EXCEEDED` for its timeouts, ...). Through
//! [`layer`](Layer::layer) or [`layer_for`](OutboundLayer::layer_for) a tonic client would
//! get `UNKNOWN` for every one of them (tonic cannot read a [`ClientError`](crate::ClientError)),
//! and through `layer` every channel would share the host entry `""`. So these services
//! refuse a gRPC request with no origin in its URI (`/pkg.Service/Method`, what a tonic client
//! sends into a channel, which adds the origin below any layer): it is not sent, and fails at
//! once with [`Error::Config`](rampart::Error::Config) naming `grpc`, which a tonic client
//! shows as `UNKNOWN` with a message saying to use `OutboundLayer::grpc`. A gRPC request with
//! an absolute URI (a hand-written gRPC call over hyper's HTTP/2 client) still goes through
//! `layer`: it is keyed by its URI, and its errors are [`ClientError`](crate::ClientError)s
//! for the caller to map (`tonic::Status::from` does, with the `tonic` feature).
//!
//! # Host keys
//!
//! A request's host entry is keyed by `host:port` from its URI's authority (the host in
//! lowercase, the port explicit: 80 for `http`, 443 for `https`), else from its `Host`
//! header. A request with neither (a relative URI) falls in the entry `""`, shared by every
//! such request: name the key instead with [`OutboundLayer::layer_for`]
//! (`OutboundLayer::grpc` does, with the channel's origin).
//!
//! Only replayable requests are retried or hedged: `GET`, `HEAD`, `PUT`, `DELETE`, `OPTIONS`
//! and `TRACE`, or any request carrying the [`Repeatable`] extension. A replayable request's
//! body is read into memory first, up to [`replay_limit`](OutboundBuilder::replay_limit); a
//! larger one is streamed once, with one attempt. Inside a request that arrived marked as a
//! retry, every call makes one attempt (the layer above the failure retries, not every layer
//! in between).
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use rampart::breaker::Breaker;
//! use rampart_http::{OutboundLayer, ReplayBody};
//! use tower_layer::Layer;
//! use tower_service::Service;
//!
//! let client = Client::builder(TokioExecutor::new()).build_http::<ReplayBody<Full<Bytes>>>();
//! let layer = OutboundLayer::builder()
//!     .max_attempts(3)
//!     .breaker_per_host(Breaker::builder().consecutive_failures(5))
//!     .policy(|p| p.total_timeout(Duration::from_secs(2)).attempt_timeout(Duration::from_millis(500)))
//!     .build()?;
//! let mut client = layer.layer(client);
//! let request = http::Request::get("http://127.0.0.1:9/").body(Full::new(Bytes::new()))?;
//! let outcome = client.call(request).await; // refused connections: retried, then an error
//! assert!(outcome.is_err());
//! # Ok(()) }
//! ```
//!
//! | setting | default |
//! |---|---|
//! | [`max_attempts`](OutboundBuilder::max_attempts) | 3 |
//! | [`policy`](OutboundBuilder::policy) | rampart's defaults: total timeout 30 s, attempt timeout 10 s, exponential backoff |
//! | [`host`](OutboundBuilder::host) | none: one host's settings on top of `policy`'s |
//! | [`breaker_per_host`](OutboundBuilder::breaker_per_host) | one per host, rampart's defaults (open when every call of the last 10 s failed, at least 100 of them): a breaker guards one dependency, and each host's policies call exactly one (a plain `Policy`, which may call anything, has none by default) |
//! | [`budget_per_host`](OutboundBuilder::budget_per_host) | one per host, rampart's defaults (20% of successes, 3/s floor), or 25% of successes when the layer hedges (see what a hedge costs it, in [`hedge`](OutboundBuilder::hedge)) |
//! | [`hedge`](OutboundBuilder::hedge), [`hedge_marked`](OutboundBuilder::hedge_marked) | none; `hedge` hedges every replayable request, `hedge_marked` only those marked [`Hedged`], on the same host entry, breaker and budget as the others |
//! | [`admit`](OutboundBuilder::admit) | none |
//! | [`max_hosts`](OutboundBuilder::max_hosts) | 1024 ([`rampart::keyed::DEFAULT_CAPACITY`]); a full table evicts a host not seen lately (CLOCK), its breaker and budget with it |
//! | [`replay_limit`](OutboundBuilder::replay_limit) | 64 KiB |
//! | [`metrics_by_host`](OutboundBuilder::metrics_by_host) | on: rampart's metrics carry `policy` (the layer's name) and `server.address` (the host, `host:port`) |
//! | [`quota`](OutboundBuilder::quota), [`host_quota`](OutboundBuilder::host_quota) | off: quota headers are not read (see [`crate::quota`] for why) |
//! | [`fail_on_retryable_status`](OutboundBuilder::fail_on_retryable_status), [`host_fail_on_retryable_status`](OutboundBuilder::host_fail_on_retryable_status) | off: a call that ends on a retryable status returns that response, its [`CallReport`](crate::CallReport) in its extensions |
//! | minimum time per attempt | [`DEFAULT_MIN_ATTEMPT_TIME`], 10 ms (rampart's own is 0): a retry is not sent with less time left than that, or than the host's measured typical latency; set `min_attempt_time` in [`policy`](OutboundBuilder::policy) to change it |
//! | classifier | [`HttpClassifier`] (429 and 503 with `Retry-After` throttled; 5xx, 408 transient) |
//!
//! # Changing settings live
//!
//! [`OutboundLayer::reconfigure`] changes the attempts, timeouts, timeout mode and backoff of
//! every host's policies, and the thresholds and durations of every host's breaker, while the
//! layer serves requests (those of the hosts in the table and
//! of the hosts first seen later), checked as `build` checks them; [`OutboundLayer::settings`]
//! and [`OutboundLayer::host_settings`] read them. The rest is fixed at `build` (see
//! `reconfigure` for what and why). [`crate::config`]'s reload applies a changed file with it.
//!
//! # Errors
//!
//! The service's error is [`ClientError`](crate::ClientError): what the policy decided (timeouts, rejections, the
//! last transport error) or a body that could not be read. It maps to a response: see
//! [`crate::problem`].
//!
//! # Events
//!
//! `RetriesSuppressed`, `NotReplayable` and `QuotaRefused` (see [`crate::event`]); the
//! policies' own events through listeners added in [`policy`](OutboundBuilder::policy).

// Longer than the ~600-line guide by its documentation: about 290 of its lines are the layer's
// docs (the module template, its defaults, the rules of the wire); the code is about 410, the
// builder in `builder.rs` and the host table in `hosts.rs`.

mod builder;
mod hosts;
mod live;
mod service;
mod stamp;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use rampart::admit::{Admit, Unlimited};
use rampart::breaker::{Breaker, BreakerBuilder};
use rampart::budget::{RetryBudget, RetryBudgetBuilder};
use rampart::hedge::Hedge;
use rampart::observe::MetricLabels;
use rampart::{Ambient, ConfigError, Policy, PolicyBuilder};
use tower_layer::Layer;

use crate::classify::HttpClassifier;
use crate::event::{EdgeEvent, Listeners};
use crate::header::Names;
use crate::quota::QuotaState;

pub use builder::OutboundBuilder;
pub(crate) use hosts::HostKey;
use hosts::Hosts;
use live::Live;
#[cfg(feature = "serde")]
pub(crate) use live::breaker_problems;
pub use live::{HostSettings, OutboundSettings};
pub(crate) use service::Way;
pub use service::{Outbound, ResponseFuture};
pub use stamp::stamp;
pub(crate) use stamp::{Read, Stamp, within};

/// The least time a retry of the outbound layer must have left before its deadline to be
/// sent, unless set otherwise with `min_attempt_time` in [`policy`](OutboundBuilder::policy)
/// or [`host`](OutboundBuilder::host): 10 ms (rampart's own default, for a policy that may
/// call anything, is 0).
///
/// Without it, a host whose latency has not been measured yet (rampart allows for the typical
/// latency of a host's successful attempts once it has one) gets retries with whatever is
/// left: after a long `Retry-After` or a slow failure, a retry goes out carrying
/// `X-Deadline-Ms: 3`. Such an attempt cannot succeed: it needs a round trip (up to a few
/// milliseconds between zones), often a new connection (the attempt before it was dropped at
/// its ceiling, its connection with it: one to three more round trips with TLS), and the
/// server's own work, which a rampart server starts only after its `reserve`. It spends a
/// retry token and the dependency's capacity on an answer nobody will wait for, at the moment
/// the dependency is failing. 10 ms is above what those cost inside a region and below what
/// any deadline worth retrying within is; where an attempt is known to need more (a slow
/// dependency, a cold cache), the measured latency takes over once the host has answered.
///
/// The retry that does not fit is not sent: the call ends
/// [`DeadlineExceeded`](rampart::StopReason::DeadlineExceeded) with the backoff that did not
/// fit, the floor it was added to and the time left ([`Unfit`](rampart::Unfit): "the next
/// backoff of 0ns and the 10ms min_attempt_time would not fit in the 5ms left"). The first
/// attempt is sent while any time is left. A policy whose deadline is not longer than the
/// floor gets no floor (as rampart requires the minimum to be shorter than the total
/// timeout).
///
/// ```
/// use std::time::Duration;
/// use rampart_http::OutboundLayer;
///
/// // A dependency that answers in 40 ms at best: do not retry with less than that left.
/// let layer = OutboundLayer::builder()
///     .policy(|p| p.min_attempt_time(Duration::from_millis(40)))
///     .build()
///     .expect("valid policy");
/// # drop(layer);
/// ```
pub const DEFAULT_MIN_ATTEMPT_TIME: Duration = Duration::from_millis(10);

/// Marks a request as safe to send more than once although its method is not replayable
/// (a `POST` with an idempotency key, say): insert it into the request's extensions.
///
/// ```
/// let mut request = http::Request::post("http://orders/charge").body(()).unwrap();
/// request.extensions_mut().insert(rampart_http::Repeatable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repeatable;

/// Asks for the request to be hedged, on a layer that hedges the requests that ask
/// ([`hedge_marked`](OutboundBuilder::hedge_marked)): insert it into the request's extensions
/// (with the reqwest client, `RequestBuilder::hedged`, feature `reqwest`). The request runs
/// on its host's entry like any other, under the host's one breaker and one retry budget;
/// only the marked requests' own policy hedges, and learns its delay from their attempts.
///
/// Only a request that may be sent more than once is hedged (a replayable method, or one
/// marked [`Repeatable`]); any other is sent once, marked or not. On a layer that hedges
/// every replayable request ([`hedge`](OutboundBuilder::hedge)) the mark changes nothing; on
/// a layer that hedges none it is ignored.
///
/// ```
/// let mut request = http::Request::get("http://prices/quote").body(()).unwrap();
/// request.extensions_mut().insert(rampart_http::Hedged);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hedged;

/// Whether a method may be sent again without changing the outcome (RFC 9110 idempotent
/// methods).
pub fn is_replayable(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS | Method::TRACE
    )
}

/// Runs every request under its host's policy; see the [module docs](self). Services made
/// from one layer share its host table.
#[must_use]
pub struct OutboundLayer<A = Unlimited> {
    engine: Arc<Engine<A>>,
}

impl<A> Clone for OutboundLayer<A> {
    fn clone(&self) -> Self {
        OutboundLayer {
            engine: Arc::clone(&self.engine),
        }
    }
}

impl OutboundLayer {
    /// A layer with the defaults of the [module table](self).
    pub fn new() -> Self {
        OutboundLayer::builder()
            .build()
            .unwrap_or_else(|e| unreachable!("the default outbound policy is valid: {e}"))
    }

    /// A builder with the defaults of the [module table](self).
    pub fn builder() -> OutboundBuilder {
        OutboundBuilder::new()
    }
}

impl Default for OutboundLayer {
    fn default() -> Self {
        OutboundLayer::new()
    }
}

impl<A> OutboundLayer<A> {
    /// Wraps `inner` as [`layer`](Layer::layer) does, but every request through it uses the
    /// host entry `key` (one breaker and one budget), whatever its URI says: for a client
    /// whose requests carry relative URIs (a transport that adds its origin below any layer,
    /// so that without a key all its requests would share the entry `""`). A tonic channel
    /// is such a transport, but goes under the layer with `OutboundLayer::grpc` (feature
    /// `tonic`), not here: a gRPC request with no origin is refused by this service, as by
    /// `layer`'s (see the [module docs](self#grpc)). The key is read as the
    /// keys the layer makes from URIs are, `host:port` lowercased with port 80 when none is
    /// given (`Inventory:50051` is `inventory:50051`; the same holds for
    /// [`host`](OutboundBuilder::host) and [`breaker`](Self::breaker)); it also names the
    /// host's policies (`"outbound inventory:50051"`).
    ///
    /// ```
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::new();
    /// let service = layer.layer_for("inventory:50051", tower::service_fn(|_: http::Request<rampart_http::ReplayBody<http_body_util::Empty<bytes::Bytes>>>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(()))
    /// }));
    /// # drop(service);
    /// ```
    pub fn layer_for<S>(&self, key: &str, inner: S) -> Outbound<S, A> {
        self.keyed(key, inner, Way::Http)
    }

    /// `inner` under the layer, every request through it keyed by `key`, made `way`.
    pub(crate) fn keyed<S>(&self, key: &str, inner: S, way: Way) -> Outbound<S, A> {
        let key = HostKey::named(key);
        Outbound::new(inner, Arc::clone(&self.engine), Some(Arc::from(key)), way)
    }

    /// Hosts in the table now (at most [`max_hosts`](OutboundBuilder::max_hosts)).
    pub fn hosts(&self) -> usize {
        self.engine.hosts.len()
    }

    /// The circuit breaker of the host `key` (`host:port`, see the
    /// [module docs](self#host-keys)), if the table has that host and the layer gives hosts
    /// breakers. It is the host's own, shared with its policies: reading its state consumes
    /// nothing, [`reset`](Breaker::reset) closes it, [`isolate`](Breaker::isolate) holds it
    /// open. Looking it up does not mark the host used (it does not keep it in the table).
    ///
    /// ```
    /// # async fn demo() {
    /// use rampart::Instant;
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::new();
    /// // ... requests to http://inventory:3001 ...
    /// if let Some(breaker) = layer.breaker("inventory:3001") {
    ///     println!("inventory: {:?}", breaker.state(Instant::now()));
    ///     breaker.reset(Instant::now());
    /// }
    /// # }
    /// ```
    pub fn breaker(&self, key: &str) -> Option<Breaker> {
        self.engine
            .hosts
            .peek(&HostKey::named(key))
            .and_then(|host| host.full.breaker().cloned())
    }

    /// The retry budget of the host `key` (`host:port`), if the table has that host and the
    /// layer gives hosts budgets (a layer whose requests are sent once has none). It is the
    /// host's own, shared by all its requests, hedged or not: reading its
    /// [`balance`](RetryBudget::balance) consumes nothing. Looking it up does not mark the
    /// host used.
    pub fn budget(&self, key: &str) -> Option<RetryBudget> {
        self.engine
            .hosts
            .peek(&HostKey::named(key))
            .and_then(|host| host.full.budget().cloned())
    }

    #[cfg_attr(not(any(feature = "reqwest", feature = "tonic")), allow(dead_code))]
    pub(crate) fn engine(&self) -> &Arc<Engine<A>> {
        &self.engine
    }
}

impl<A> fmt::Debug for OutboundLayer<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundLayer")
            .field("name", &self.engine.factory.name)
            .field("max_attempts", &self.engine.live.current().1.max_attempts)
            .field("max_hosts", &self.engine.max_hosts)
            .field("replay_limit", &self.engine.edge.replay_limit)
            .finish_non_exhaustive()
    }
}

/// The outbound service over any `tower` service of `http::Request`s. Not for a tonic
/// channel: see the [module docs](self#grpc) for `OutboundLayer::grpc`.
impl<S, A> Layer<S> for OutboundLayer<A> {
    type Service = Outbound<S, A>;

    fn layer(&self, inner: S) -> Outbound<S, A> {
        Outbound::new(inner, Arc::clone(&self.engine), None, Way::Http)
    }
}

type Configure = Arc<dyn Fn(PolicyBuilder) -> PolicyBuilder + Send + Sync>;

/// Builds a host's policies.
struct Factory<A> {
    name: String,
    /// The attempts the layer was built with: whether its hosts get a retry budget and a
    /// hedge (the attempts a host's policies make now are in the engine's `live`).
    built_attempts: u32,
    /// The breaker the layer was built with (a host built with live settings takes theirs).
    breaker: Option<BreakerBuilder>,
    budget: Option<RetryBudgetBuilder>,
    hedge: Option<(Hedge, Hedging)>,
    admit: A,
    configure: Option<Configure>,
    /// Per-host settings, applied after `configure`.
    hosts: Vec<(Box<str>, Configure)>,
    /// Which hosts read quota headers.
    quota: Switch,
    /// Which hosts answer a final retryable status as an error.
    fail_on_status: Switch,
    /// Whether the policies' metrics carry the host as `server.address`.
    metrics_by_host: bool,
}

/// Which requests a layer's hedge applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hedging {
    /// Every replayable request: the host's full policy hedges.
    Every,
    /// The replayable requests marked [`Hedged`]: a third policy of the host hedges.
    Marked,
}

/// A setting on or off for every host, then per-host exceptions.
#[derive(Debug, Clone, Default)]
struct Switch {
    all: bool,
    hosts: Vec<(Box<str>, bool)>,
}

impl Switch {
    /// Sets the switch for the host `key` alone, replacing an earlier exception for it.
    fn host(&mut self, key: &str, on: bool) {
        let key = HostKey::named(key);
        self.hosts.retain(|(k, _)| **k != *key);
        self.hosts.push((key.into_boxed_str(), on));
    }

    fn on(&self, key: &str) -> bool {
        self.hosts
            .iter()
            .find(|(k, _)| &**k == key)
            .map_or(self.all, |(_, on)| *on)
    }
}

impl<A> Factory<A> {
    /// Whether the layer was built to retry.
    fn retries(&self) -> bool {
        self.built_attempts > 1
    }

    /// The labels of host `key`'s metrics: the layer's name as `policy`, and the host as
    /// `server.address` (no host: the entry `""`, and the layer that does not split by host,
    /// whose hosts then share their series and so report no gauge of a host's own state).
    fn metric_labels(&self, key: &str) -> MetricLabels {
        let labels = MetricLabels::new().policy(self.name.as_str());
        if !self.metrics_by_host {
            labels.state_gauges(false)
        } else if key.is_empty() {
            labels
        } else {
            labels.attribute("server.address", key)
        }
    }
}

impl<A: Admit + Clone> Factory<A> {
    /// The policies of host `key`: with the layer's live `settings`, or without (`None`, at
    /// build) with what the builder's closures set, the layer's floor under them.
    fn build(
        &self,
        key: &str,
        edge: &Arc<Edge>,
        settings: Option<&OutboundSettings>,
    ) -> Result<Host<A>, ConfigError> {
        // The live settings' breaker once the layer is built: `reconfigure` may change it.
        let breaker = settings
            .map_or(&self.breaker, |settings| &settings.breaker)
            .clone()
            .map(BreakerBuilder::build)
            .transpose()?;
        let budget = match &self.budget {
            Some(budget) if self.retries() => Some(budget.clone().build()?),
            _ => None,
        };
        let policy = |attempts: u32, criticality: bool, hedge: Option<Hedge>, floor: Duration| {
            // The edge's floor first, so that `policy` and `host` may set their own.
            let mut builder = Policy::builder().min_attempt_time(floor);
            if let Some(configure) = &self.configure {
                builder = configure(builder);
            }
            if let Some((_, configure)) = self.hosts.iter().find(|(k, _)| &**k == key) {
                builder = configure(builder);
            }
            if let Some(settings) = settings {
                builder = settings.of(key).apply(builder);
            }
            let mut builder = builder
                .name(format!("{} {key}", self.name))
                .metric_labels(self.metric_labels(key))
                .classifier(HttpClassifier)
                .admit(self.admit.clone())
                .max_attempts(attempts)
                .use_ambient_deadline(true)
                .use_ambient_criticality(criticality);
            if let Some(breaker) = &breaker {
                builder = builder.breaker(breaker.clone());
            }
            if let Some(hedge) = hedge.filter(|_| attempts > 1) {
                builder = builder.hedge(hedge);
            }
            builder = match &budget {
                Some(budget) => builder.budget(budget.clone()),
                None => builder.no_budget(),
            };
            builder.build()
        };
        // The floor is dropped where it is not shorter than the policy's deadline (which
        // `build` refuses); a `min_attempt_time` of the caller's own is still checked. Live
        // settings carry their floor.
        let policy = |attempts: u32, criticality: bool, hedge: Option<Hedge>| {
            let floored = policy(attempts, criticality, hedge, DEFAULT_MIN_ATTEMPT_TIME);
            match floored {
                Err(error) if settings.is_none() && names_min_attempt_time(&error) => {
                    policy(attempts, criticality, hedge, Duration::ZERO)
                }
                built => built,
            }
        };
        let attempts = settings.map_or(self.built_attempts, |s| s.max_attempts);
        let (every, marked) = match self.hedge {
            Some((hedge, Hedging::Every)) => (Some(hedge), None),
            Some((hedge, Hedging::Marked)) if self.retries() => (None, Some(hedge)),
            _ => (None, None),
        };
        // The ambient level gates retries and hedges; a policy with neither cannot read it.
        let full = policy(attempts, true, every).or_else(|_| policy(attempts, false, every))?;
        let once = if self.retries() {
            policy(1, false, None)?
        } else {
            full.clone()
        };
        let hedged = marked
            .map(|hedge| policy(attempts, true, Some(hedge)))
            .transpose()?;
        let quota = self
            .quota
            .on(key)
            .then(|| QuotaState::new(full.clock().clone()));
        Ok(Host {
            key: Box::from(key),
            fail_on_status: self.fail_on_status.on(key),
            quota,
            full,
            once,
            hedged,
            edge: Arc::clone(edge),
            retries: self.retries(),
        })
    }
}

/// Whether building a policy failed on its `min_attempt_time`.
fn names_min_attempt_time(error: &ConfigError) -> bool {
    let problems = error.problems();
    problems.iter().any(|p| p.field() == "min_attempt_time")
}

/// A host's policies: the full one, a one-attempt one and, when the layer hedges marked
/// requests, a hedging one, all sharing its breaker (the host's breaker is `full.breaker()`)
/// and budget; and what a request to it reads from the layer.
pub(crate) struct Host<A> {
    pub(crate) key: Box<str>,
    pub(crate) full: Policy<HttpClassifier, A>,
    pub(crate) once: Policy<HttpClassifier, A>,
    /// The full policy with the layer's hedge, for requests marked [`Hedged`] (only with
    /// [`hedge_marked`](OutboundBuilder::hedge_marked)).
    pub(crate) hedged: Option<Policy<HttpClassifier, A>>,
    /// When the host's spent quota resets, if the layer reads quota headers for it.
    pub(crate) quota: Option<QuotaState>,
    /// Whether a final retryable status is answered as [`ClientError::Status`](crate::ClientError::Status).
    pub(crate) fail_on_status: bool,
    /// The layer's settings, so that a request holds one `Arc` (its host's) and not two.
    pub(crate) edge: Arc<Edge>,
    /// Whether the layer retries: `once` is a policy of its own (else it is `full`).
    pub(crate) retries: bool,
}

/// How a request is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// One attempt, the request moved into it.
    Once,
    /// Under the full policy, the body kept for replay.
    Replay,
}

/// The layer's settings that a request reads besides its host's policies.
pub(crate) struct Edge {
    pub(crate) names: Names,
    pub(crate) replay_limit: usize,
    pub(crate) listeners: Listeners,
}

/// What every service made from one layer shares.
pub(crate) struct Engine<A> {
    pub(crate) edge: Arc<Edge>,
    max_hosts: usize,
    pub(crate) hosts: Hosts<Host<A>>,
    factory: Factory<A>,
    /// The settings the hosts' policies run with (see [`OutboundLayer::reconfigure`]).
    live: Live,
}

impl<A> Engine<A> {
    /// Whether the layer hedges any request: it has a hedge, and more than one attempt.
    #[cfg_attr(not(feature = "tonic"), allow(dead_code))]
    pub(crate) fn hedges(&self) -> bool {
        self.factory.hedge.is_some() && self.factory.retries()
    }
}

impl<A: Admit + Clone> Engine<A> {
    /// The policies of the host `key`, made on its first request.
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) fn host(&self, key: &HostKey<'_>) -> Result<Arc<Host<A>>, ConfigError> {
        let mut made = None;
        let host = self
            .hosts
            .get(key.as_str(), |key| self.make(key, &mut made))?;
        if let Some(generation) = made {
            self.made(&host, generation);
        }
        Ok(host)
    }

    /// The policies of the new host `key`, with the live settings, whose generation goes to
    /// `made`.
    #[cold]
    fn make(&self, key: &str, made: &mut Option<u64>) -> Result<Host<A>, ConfigError> {
        let (generation, settings) = self.live.current();
        *made = Some(generation);
        self.factory.build(key, &self.edge, Some(&settings))
    }

    /// The host a service kept, when the request's URI plainly names it (see
    /// [`hosts::is_key_of`]) and no host was evicted since: spares the request making its
    /// key.
    pub(crate) fn kept_for(
        &self,
        last: &Option<hosts::Kept<Host<A>>>,
        uri: &http::Uri,
    ) -> Option<Arc<Host<A>>> {
        self.hosts
            .kept(last, |host| hosts::is_key_of(&host.key, uri))
    }

    /// The host `key` for a service that kept the host of its last request in `last`: that
    /// one, without the table, while it is `key`'s and the table has evicted nothing since.
    pub(crate) fn kept_host(
        &self,
        last: &mut Option<hosts::Kept<Host<A>>>,
        key: &HostKey<'_>,
    ) -> Result<Arc<Host<A>>, ConfigError> {
        let key = key.as_str();
        let mut made = None;
        let host = self.hosts.get_kept(
            last,
            key,
            |host| *host.key == *key,
            |key| self.make(key, &mut made),
        )?;
        if let Some(generation) = made {
            self.made(&host, generation);
        }
        Ok(host)
    }
}

impl<A> Host<A> {
    /// Whether the request may be sent more than once.
    pub(crate) fn plan(&self, method: &Method, marked: bool) -> Plan {
        if !self.retries || !(marked || is_replayable(method)) {
            return Plan::Once;
        }
        if Ambient::current().is_inbound_retry() {
            self.edge.listeners.emit(EdgeEvent::RetriesSuppressed {
                host: &self.key,
                method,
            });
            return Plan::Once;
        }
        Plan::Replay
    }

    /// The policy of a request sent under [`Plan::Replay`]: the hedging one when the request
    /// asked to be hedged and the layer hedges marked requests.
    pub(crate) fn replay(&self, hedged: bool) -> &Policy<HttpClassifier, A> {
        match &self.hedged {
            Some(policy) if hedged => policy,
            _ => &self.full,
        }
    }

    pub(crate) fn not_replayable(&self) {
        self.edge.listeners.emit(EdgeEvent::NotReplayable {
            host: &self.key,
            limit: self.edge.replay_limit,
        });
    }
}
