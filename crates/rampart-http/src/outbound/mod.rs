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
//! and the call ends with rampart's timeout, not the transport's error. With the `tonic`
//! feature, `OutboundLayer::grpc` puts a tonic `Channel` under the layer in one line.
//!
//! # Host keys
//!
//! A request's host entry is keyed by `host:port` from its URI's authority (the host in
//! lowercase, the port explicit: 80 for `http`, 443 for `https`), else from its `Host`
//! header. A request with neither (a relative URI, as a tonic channel sends) falls in the
//! entry `""`, shared by every such request: name the key instead with
//! [`OutboundLayer::layer_for`] (`OutboundLayer::grpc` does, with the channel's origin).
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
//!     .breaker(Breaker::builder().consecutive_failures(5))
//!     .policy(|p| p.deadline(Duration::from_secs(2)).attempt_timeout(Duration::from_millis(500)))
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
//! | [`policy`](OutboundBuilder::policy) | rampart's defaults: deadline 30 s, attempt timeout 10 s, exponential backoff |
//! | [`host`](OutboundBuilder::host) | none: one host's settings on top of `policy`'s |
//! | [`breaker`](OutboundBuilder::breaker) | one per host, rampart's defaults (5 consecutive failures): a breaker guards one dependency, and each host's policies call exactly one (a plain `Policy`, which may call anything, has none by default) |
//! | [`budget`](OutboundBuilder::budget) | one per host, rampart's defaults (10%, 3/s floor) |
//! | [`hedge`](OutboundBuilder::hedge) | none |
//! | [`admit`](OutboundBuilder::admit) | none |
//! | [`max_hosts`](OutboundBuilder::max_hosts) | 1024 ([`rampart::keyed::DEFAULT_CAPACITY`]); a full table evicts a host not seen lately (CLOCK), its breaker and budget with it |
//! | [`replay_limit`](OutboundBuilder::replay_limit) | 64 KiB |
//! | [`quota`](OutboundBuilder::quota), [`host_quota`](OutboundBuilder::host_quota) | off: quota headers are not read (see [`crate::quota`] for why) |
//! | minimum time per attempt | rampart's (0); set `min_attempt_time` in [`policy`](OutboundBuilder::policy) so that a retry after a long `Retry-After` is not sent with a few milliseconds left |
//! | classifier | [`HttpClassifier`] (429 and 503 with `Retry-After` throttled; 5xx, 408 transient) |
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

mod hosts;
mod service;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use rampart::admit::{Admit, Unlimited};
use rampart::breaker::{Breaker, BreakerBuilder};
use rampart::budget::{RetryBudget, RetryBudgetBuilder};
use rampart::hedge::Hedge;
use rampart::{Ambient, Attempt, Call, ConfigError, Criticality, Deadline, Policy, PolicyBuilder};
use tower_layer::Layer;

use crate::classify::HttpClassifier;
use crate::event::{EdgeEvent, Listeners};
use crate::header::{
    GRPC_TIMEOUT, Names, format_deadline_ms, format_grpc_timeout, is_grpc_content_type,
    parse_deadline_ms, parse_grpc_timeout,
};
use crate::quota::QuotaState;

pub(crate) use hosts::HostKey;
use hosts::Hosts;
pub use service::{Outbound, ResponseFuture};

/// Marks a request as safe to send more than once although its method is not replayable
/// (a `POST` with an idempotency key, say): insert it into the request's extensions.
///
/// ```
/// let mut request = http::Request::post("http://orders/charge").body(()).unwrap();
/// request.extensions_mut().insert(rampart_http::Repeatable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repeatable;

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
        OutboundBuilder {
            name: "outbound".to_owned(),
            max_attempts: 3,
            breaker: Some(Breaker::builder()),
            budget: Some(RetryBudget::builder()),
            hedge: None,
            admit: Unlimited,
            configure: None,
            hosts: Vec::new(),
            max_hosts: rampart::keyed::DEFAULT_CAPACITY,
            replay_limit: 64 * 1024,
            quota: Quotas::default(),
            names: Names::default(),
            listeners: Listeners::new(crate::observe::Side::Outbound),
        }
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
    /// whose requests carry relative URIs (a tonic channel adds its origin below any layer,
    /// so without a key all its requests would share the entry `""`). The key is read as the
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
        let key = HostKey::named(key);
        Outbound::new(inner, Arc::clone(&self.engine), Some(Arc::from(key)))
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

    #[cfg_attr(not(any(feature = "reqwest", feature = "tonic")), allow(dead_code))]
    pub(crate) fn engine(&self) -> &Arc<Engine<A>> {
        &self.engine
    }
}

impl<A> fmt::Debug for OutboundLayer<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundLayer")
            .field("name", &self.engine.factory.name)
            .field("max_attempts", &self.engine.factory.max_attempts)
            .field("max_hosts", &self.engine.max_hosts)
            .field("replay_limit", &self.engine.edge.replay_limit)
            .finish_non_exhaustive()
    }
}

impl<S, A> Layer<S> for OutboundLayer<A> {
    type Service = Outbound<S, A>;

    fn layer(&self, inner: S) -> Outbound<S, A> {
        Outbound::new(inner, Arc::clone(&self.engine), None)
    }
}

type Configure = Arc<dyn Fn(PolicyBuilder) -> PolicyBuilder + Send + Sync>;

/// Builds an [`OutboundLayer`]: start from [`OutboundLayer::builder`].
#[must_use = "a builder does nothing until built"]
pub struct OutboundBuilder<A = Unlimited> {
    name: String,
    max_attempts: u32,
    breaker: Option<BreakerBuilder>,
    budget: Option<RetryBudgetBuilder>,
    hedge: Option<Hedge>,
    admit: A,
    configure: Option<Configure>,
    hosts: Vec<(Box<str>, Configure)>,
    max_hosts: usize,
    replay_limit: usize,
    quota: Quotas,
    names: Names,
    listeners: Listeners,
}

impl<A> OutboundBuilder<A> {
    /// The name of the layer's policies, followed by the host: `"outbound 10.0.0.7:8080"`
    /// (default `"outbound"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Attempts per replayable request, the first included (default 3; at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// The settings of each host's own breaker (default: rampart's defaults).
    pub fn breaker(mut self, breaker: BreakerBuilder) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// No circuit breaker.
    pub fn no_breaker(mut self) -> Self {
        self.breaker = None;
        self
    }

    /// The settings of each host's own retry budget (default: rampart's defaults).
    pub fn budget(mut self, budget: RetryBudgetBuilder) -> Self {
        self.budget = Some(budget);
        self
    }

    /// No retry budget: retries are limited by `max_attempts` alone.
    pub fn no_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Hedges replayable requests: a second attempt when the first is slower than usual (see
    /// [`rampart::hedge`]); each leg carries its own deadline header and the retry mark.
    /// Set the hedge here: one set in [`policy`](Self::policy) is not used.
    pub fn hedge(mut self, hedge: Hedge) -> Self {
        self.hedge = Some(hedge);
        self
    }

    /// Asks `admit` before every attempt, to every host (the ready-made limiters share their
    /// state across clones). Calls that make one attempt (see the [module docs](self)) are
    /// admitted at `Critical`, since their policy does not read the ambient level.
    pub fn admit<A2: Admit + Clone>(self, admit: A2) -> OutboundBuilder<A2> {
        OutboundBuilder {
            name: self.name,
            max_attempts: self.max_attempts,
            breaker: self.breaker,
            budget: self.budget,
            hedge: self.hedge,
            admit,
            configure: self.configure,
            hosts: self.hosts,
            max_hosts: self.max_hosts,
            replay_limit: self.replay_limit,
            quota: self.quota,
            names: self.names,
            listeners: self.listeners,
        }
    }

    /// Everything else about the policies: deadline, attempt timeout, timeout mode, backoff,
    /// adaptive ceiling, clock, drain, rampart listeners and hooks. The layer then sets the
    /// name, classifier, attempts, breaker, budget, hedge and admission itself, and turns on
    /// the ambient deadline and criticality.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::builder()
    ///     .policy(|p| p.deadline(Duration::from_secs(5)).attempt_timeout(Duration::from_secs(1)))
    ///     .build()
    ///     .expect("valid policy");
    /// # drop(layer);
    /// ```
    pub fn policy(
        mut self,
        configure: impl Fn(PolicyBuilder) -> PolicyBuilder + Send + Sync + 'static,
    ) -> Self {
        self.configure = Some(Arc::new(configure));
        self
    }

    /// Settings for one host's policies, applied after [`policy`](Self::policy)'s for the
    /// host whose key is `key` (`host:port`, as the [module docs](self#host-keys) make it,
    /// or a key named with [`OutboundLayer::layer_for`]). The same settings can be changed as
    /// in `policy`. A later call for the same key replaces an earlier one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::builder()
    ///     .policy(|p| p.deadline(Duration::from_secs(2)))
    ///     .host("reports.internal:80", |p| p.deadline(Duration::from_secs(30)))
    ///     .build()
    ///     .expect("valid policies");
    /// # drop(layer);
    /// ```
    pub fn host(
        mut self,
        key: &str,
        configure: impl Fn(PolicyBuilder) -> PolicyBuilder + Send + Sync + 'static,
    ) -> Self {
        let key = HostKey::named(key);
        self.hosts.retain(|(k, _)| **k != *key);
        self.hosts.push((key.into_boxed_str(), Arc::new(configure)));
        self
    }

    /// At most this many hosts keep a breaker and budget (default 1024,
    /// [`rampart::keyed::DEFAULT_CAPACITY`]; at least 1). A new host at a full table evicts
    /// one not seen lately, by CLOCK as a [`KeyedTable`](rampart::keyed::KeyedTable) does
    /// (a host seen once goes before the hosts in steady use), and its breaker and budget go
    /// with it: its next request starts it afresh, breaker closed. Set it above the number
    /// of hosts the client really calls; the bound is there for a client whose URIs come
    /// from outside.
    pub fn max_hosts(mut self, hosts: usize) -> Self {
        self.max_hosts = hosts;
        self
    }

    /// The largest body kept in memory for replay (default 64 KiB). A replayable request with
    /// a larger body is streamed once and gets one attempt.
    pub fn replay_limit(mut self, bytes: usize) -> Self {
        self.replay_limit = bytes;
        self
    }

    /// Whether responses' quota headers are read, and a host whose quota is spent refused
    /// locally until its reset (default off; see [`crate::quota`] for the headers, the rules
    /// and why it is off). [`host_quota`](Self::host_quota) overrides it for one host.
    ///
    /// ```
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::builder().quota(true).build().expect("valid policy");
    /// # drop(layer);
    /// ```
    pub fn quota(mut self, on: bool) -> Self {
        self.quota.all = on;
        self
    }

    /// [`quota`](Self::quota) for the host whose key is `key` alone (`host:port`, read as
    /// [`host`](Self::host) reads it), whatever `quota` says for the others. A later call for
    /// the same key replaces an earlier one.
    ///
    /// ```
    /// use rampart_http::OutboundLayer;
    ///
    /// // One credential per process for this API: its quota is the client's own.
    /// let layer = OutboundLayer::builder()
    ///     .host_quota("api.example.com:443", true)
    ///     .build()
    ///     .expect("valid policy");
    /// # drop(layer);
    /// ```
    pub fn host_quota(mut self, key: &str, on: bool) -> Self {
        let key = HostKey::named(key);
        self.quota.hosts.retain(|(k, _)| **k != *key);
        self.quota.hosts.push((key.into_boxed_str(), on));
        self
    }

    /// The deadline header written on non-gRPC requests (default `x-deadline-ms`).
    pub fn deadline_header(mut self, name: HeaderName) -> Self {
        self.names.deadline = name;
        self
    }

    /// The criticality header (default `x-criticality`).
    pub fn criticality_header(mut self, name: HeaderName) -> Self {
        self.names.criticality = name;
        self
    }

    /// The retry-mark header (default `x-rampart-retry`).
    pub fn retry_header(mut self, name: HeaderName) -> Self {
        self.names.retry = name;
        self
    }

    /// Adds a listener for the layer's [`EdgeEvent`]s.
    pub fn listener(mut self, listener: impl Fn(&EdgeEvent<'_>) + Send + Sync + 'static) -> Self {
        self.listeners.push(listener);
        self
    }

    /// Builds the layer, checking the policy settings once (as a host's policies would be
    /// built) and reporting every problem.
    pub fn build(self) -> Result<OutboundLayer<A>, ConfigError>
    where
        A: Admit + Clone,
    {
        let factory = Factory {
            name: self.name,
            max_attempts: self.max_attempts,
            breaker: self.breaker,
            budget: self.budget,
            hedge: self.hedge,
            admit: self.admit,
            configure: self.configure,
            hosts: self.hosts,
            quota: self.quota,
        };
        let edge = Arc::new(Edge {
            names: self.names,
            replay_limit: self.replay_limit,
            listeners: self.listeners,
        });
        factory.build("validation:0", &edge)?;
        for (key, _) in &factory.hosts {
            factory
                .build(key, &edge)
                .map_err(|error| for_host(&error, key))?;
        }
        Ok(OutboundLayer {
            engine: Arc::new(Engine {
                edge,
                max_hosts: self.max_hosts.max(1),
                hosts: Hosts::new(self.max_hosts),
                factory,
            }),
        })
    }
}

impl<A> fmt::Debug for OutboundBuilder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundBuilder")
            .field("name", &self.name)
            .field("max_attempts", &self.max_attempts)
            .field("max_hosts", &self.max_hosts)
            .field("replay_limit", &self.replay_limit)
            .finish_non_exhaustive()
    }
}

/// `error` of the settings of host `key`, each field named `host(key).field`.
fn for_host(error: &ConfigError, key: &str) -> ConfigError {
    let problems = error.problems().iter().map(|problem| {
        let field = format!("host({key}).{}", problem.field());
        rampart::ConfigProblem::new(field, problem.message().to_owned())
    });
    ConfigError::new(problems.collect())
}

/// Builds a host's policies.
struct Factory<A> {
    name: String,
    max_attempts: u32,
    breaker: Option<BreakerBuilder>,
    budget: Option<RetryBudgetBuilder>,
    hedge: Option<Hedge>,
    admit: A,
    configure: Option<Configure>,
    /// Per-host settings, applied after `configure`.
    hosts: Vec<(Box<str>, Configure)>,
    quota: Quotas,
}

/// Which hosts read quota headers: all or none, then per-host exceptions.
#[derive(Debug, Clone, Default)]
struct Quotas {
    all: bool,
    hosts: Vec<(Box<str>, bool)>,
}

impl Quotas {
    fn on(&self, key: &str) -> bool {
        self.hosts
            .iter()
            .find(|(k, _)| &**k == key)
            .map_or(self.all, |(_, on)| *on)
    }
}

impl<A: Admit + Clone> Factory<A> {
    fn build(&self, key: &str, edge: &Arc<Edge>) -> Result<Host<A>, ConfigError> {
        let breaker = self
            .breaker
            .clone()
            .map(BreakerBuilder::build)
            .transpose()?;
        let budget = match &self.budget {
            Some(budget) if self.max_attempts > 1 => Some(budget.clone().build()?),
            _ => None,
        };
        let policy = |attempts: u32, criticality: bool| {
            let mut builder = Policy::builder();
            if let Some(configure) = &self.configure {
                builder = configure(builder);
            }
            if let Some((_, configure)) = self.hosts.iter().find(|(k, _)| &**k == key) {
                builder = configure(builder);
            }
            let mut builder = builder
                .name(format!("{} {key}", self.name))
                .classifier(HttpClassifier)
                .admit(self.admit.clone())
                .max_attempts(attempts)
                .use_ambient_deadline(true)
                .use_ambient_criticality(criticality);
            if let Some(breaker) = &breaker {
                builder = builder.breaker(breaker.clone());
            }
            if let Some(hedge) = self.hedge.filter(|_| attempts > 1) {
                builder = builder.hedge(hedge);
            }
            builder = match &budget {
                Some(budget) => builder.budget(budget.clone()),
                None => builder.no_budget(),
            };
            builder.build()
        };
        let attempts = self.max_attempts;
        // The ambient level gates retries and hedges; a policy with neither cannot read it.
        let full = policy(attempts, true).or_else(|_| policy(attempts, false))?;
        let once = if attempts > 1 {
            policy(1, false)?
        } else {
            full.clone()
        };
        let quota = self
            .quota
            .on(key)
            .then(|| QuotaState::new(full.clock().clone()));
        Ok(Host {
            key: Box::from(key),
            quota,
            full,
            once,
            edge: Arc::clone(edge),
            retries: attempts > 1,
        })
    }
}

/// A host's policies: the full one, and a one-attempt one sharing its breaker (the host's
/// breaker is `full.breaker()`) and budget; and what a request to it reads from the layer.
pub(crate) struct Host<A> {
    pub(crate) key: Box<str>,
    pub(crate) full: Policy<HttpClassifier, A>,
    pub(crate) once: Policy<HttpClassifier, A>,
    /// When the host's spent quota resets, if the layer reads quota headers for it.
    pub(crate) quota: Option<QuotaState>,
    /// The layer's settings, so that a request holds one `Arc` (its host's) and not two.
    pub(crate) edge: Arc<Edge>,
    retries: bool,
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
}

impl<A: Admit + Clone> Engine<A> {
    /// The policies of the host `key`, made on its first request.
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) fn host(&self, key: &HostKey<'_>) -> Result<Arc<Host<A>>, ConfigError> {
        self.hosts
            .get(key.as_str(), |key| self.factory.build(key, &self.edge))
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
        self.hosts.get_kept(
            last,
            key,
            |host| *host.key == *key,
            |key| self.factory.build(key, &self.edge),
        )
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

    pub(crate) fn not_replayable(&self) {
        self.edge.listeners.emit(EdgeEvent::NotReplayable {
            host: &self.key,
            limit: self.edge.replay_limit,
        });
    }
}

/// How a request's attempts are stamped: read once per request, written once per attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    pub(crate) grpc: bool,
}

/// What a request's headers hold, found in one pass by [`Stamp::prepare`].
#[derive(Default)]
struct Held<'a> {
    content_type: Option<&'a HeaderValue>,
    retry: bool,
    /// The last value of each encoding of the deadline.
    deadline: Option<&'a HeaderValue>,
    grpc_timeout: Option<&'a HeaderValue>,
}

/// Within this much of its ceiling, a gRPC attempt's transport error is taken for the
/// transport's own timer, armed from the `grpc-timeout` the attempt carried (written floored,
/// in units down to a millisecond): the attempt waits for rampart's timer, a moment away.
pub(crate) const TRANSPORT_TIMER_SLACK: Duration = Duration::from_millis(1);

impl Stamp {
    /// Reads whether the request is gRPC and the deadline its caller wrote (`grpc-timeout`
    /// on a gRPC request, else the deadline header; a malformed one is ignored), and takes
    /// out what the caller wrote that a first attempt must not carry (a retry mark, a
    /// deadline in the other encoding).
    ///
    /// The caller's deadline and criticality are left in place: every attempt's
    /// [`write`](Self::write) replaces them.
    pub(crate) fn prepare(names: &Names, headers: &mut HeaderMap) -> (Stamp, Option<Deadline>) {
        // One pass over the headers finds the content type, the caller's deadline and which
        // of the headers the stamp owns the caller wrote (most requests carry few or none of
        // them): a lookup or a removal hashes its name even when the map does not hold it,
        // and a pass over a small map costs less than the lookups it saves.
        let mut held = Held::default();
        for (name, value) in headers.iter() {
            if *name == CONTENT_TYPE {
                held.content_type = held.content_type.or(Some(value));
                continue;
            }
            if *name == GRPC_TIMEOUT {
                held.grpc_timeout = Some(value);
            }
            if *name == names.deadline {
                held.deadline = Some(value);
            }
            held.retry |= *name == names.retry;
        }
        let grpc = held.content_type.is_some_and(is_grpc_content_type);
        let caller = if grpc {
            held.grpc_timeout
                .and_then(|value| parse_grpc_timeout(value.as_bytes()))
        } else {
            held.deadline
                .and_then(|value| parse_deadline_ms(value.as_bytes()))
        };
        // A gRPC request's deadline is `grpc-timeout`: the other encoding is not carried.
        let other = grpc && held.deadline.is_some();
        if held.retry {
            headers.remove(&names.retry);
        }
        if other {
            headers.remove(&names.deadline);
        }
        (Stamp { grpc }, caller.map(Deadline::after))
    }

    /// Writes an attempt's deadline, the ambient criticality and, on a retry or hedge, the
    /// retry mark, replacing what the caller wrote. `headers` are a prepared request's.
    ///
    /// The deadline written is never later than the caller's own: the call runs within it
    /// (see [`within`]), so the attempt's time left already counts it.
    pub(crate) fn write(self, names: &Names, headers: &mut HeaderMap, attempt: &Attempt) {
        // A bounded attempt always says so, even in its last nanosecond.
        let left = attempt
            .remaining()
            .map(|d| d.max(std::time::Duration::from_nanos(1)));
        // `insert` replaces every value the caller wrote; `remove` only where nothing is
        // written.
        let (name, value) = if self.grpc {
            (&GRPC_TIMEOUT, format_grpc_timeout(left))
        } else {
            (&names.deadline, format_deadline_ms(left))
        };
        match value {
            Some(value) => headers.insert(name, value),
            None => headers.remove(name),
        };
        headers.insert(
            &names.criticality,
            criticality_value(Criticality::current()),
        );
        if attempt.is_retry() {
            const RETRY: HeaderValue = HeaderValue::from_static("1");
            headers.insert(&names.retry, RETRY);
        }
    }

    /// Whether every attempt's [`write`](Self::write) replaces the header `name`: the
    /// deadline in the encoding this request carries, and the criticality.
    pub(crate) fn replaces(self, names: &Names, name: &HeaderName) -> bool {
        let deadline = match self.grpc {
            true => &GRPC_TIMEOUT,
            false => &names.deadline,
        };
        name == deadline || *name == names.criticality
    }

    /// Whether an attempt's transport error came when its ceiling was (all but) reached, on
    /// a gRPC request: then it is the transport's timer, armed from the header this attempt
    /// wrote, and rampart's own timer decides the outcome instead.
    pub(crate) fn is_transport_timer(self, attempt: &Attempt) -> bool {
        self.grpc
            && attempt
                .remaining()
                .is_some_and(|left| left <= TRANSPORT_TIMER_SLACK)
    }
}

/// `level`'s wire name as a header value, made when the crate is compiled: `from_static`
/// called at run time checks every byte of its string again.
fn criticality_value(level: Criticality) -> HeaderValue {
    const SHEDDABLE: HeaderValue = HeaderValue::from_static(Criticality::Sheddable.as_str());
    const SHEDDABLE_PLUS: HeaderValue =
        HeaderValue::from_static(Criticality::SheddablePlus.as_str());
    const CRITICAL: HeaderValue = HeaderValue::from_static(Criticality::Critical.as_str());
    const CRITICAL_PLUS: HeaderValue = HeaderValue::from_static(Criticality::CriticalPlus.as_str());
    match level {
        Criticality::Sheddable => SHEDDABLE,
        Criticality::SheddablePlus => SHEDDABLE_PLUS,
        Criticality::Critical => CRITICAL,
        Criticality::CriticalPlus => CRITICAL_PLUS,
    }
}

/// A call of `policy` within the deadline its caller wrote, if any, so that the call's
/// deadline is never later than the caller's. Given to the call, not made ambient: a
/// task-local scope around the call would be one more future, moved with it.
pub(crate) fn within<C, A>(policy: &Policy<C, A>, caller: Option<Deadline>) -> Call<'_, C, A> {
    match caller {
        Some(deadline) => policy.call().deadline(deadline),
        None => policy.call(),
    }
}
