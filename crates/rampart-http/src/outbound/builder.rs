//! [`OutboundBuilder`]: the layer's settings, checked once when built (each host's policies
//! built as they would be on its first request, every problem reported).

use std::fmt;
use std::sync::Arc;

use http::HeaderName;
use rampart::admit::{Admit, Unlimited};
use rampart::breaker::{Breaker, BreakerBuilder};
use rampart::budget::{RetryBudget, RetryBudgetBuilder};
use rampart::hedge::Hedge;
use rampart::{ConfigError, PolicyBuilder};

use super::hosts::{HostKey, Hosts};
use super::live::{HostSettings, Live, OutboundSettings};
use super::{Configure, Edge, Engine, Factory, Hedging, OutboundLayer, Switch};
use crate::event::{EdgeEvent, Listeners};
use crate::header::Names;

/// What the default budget of a layer that hedges earns per success: rampart's 0.2 for
/// retries, and 0.05 for the hedges a p95 delay fires (see [`OutboundBuilder::hedge`]).
const HEDGING_BUDGET_FRACTION: f64 = 0.25;

/// Builds an [`OutboundLayer`]: start from [`OutboundLayer::builder`].
#[must_use = "a builder does nothing until built"]
pub struct OutboundBuilder<A = Unlimited> {
    name: String,
    max_attempts: u32,
    breaker: Option<BreakerBuilder>,
    /// The budget's settings; `None` until set: the defaults, sized for hedging when the
    /// layer hedges.
    budget: Option<Option<RetryBudgetBuilder>>,
    hedge: Option<(Hedge, Hedging)>,
    admit: A,
    configure: Option<Configure>,
    hosts: Vec<(Box<str>, Configure)>,
    max_hosts: usize,
    replay_limit: usize,
    quota: Switch,
    fail_on_status: Switch,
    metrics_by_host: bool,
    names: Names,
    listeners: Listeners,
}

impl OutboundBuilder {
    /// The defaults of the [module table](super), as [`OutboundLayer::builder`] gives them.
    pub(super) fn new() -> Self {
        OutboundBuilder {
            name: "outbound".to_owned(),
            max_attempts: 3,
            breaker: Some(Breaker::builder()),
            budget: None,
            hedge: None,
            admit: Unlimited,
            configure: None,
            hosts: Vec::new(),
            max_hosts: rampart::keyed::DEFAULT_CAPACITY,
            replay_limit: 64 * 1024,
            quota: Switch::default(),
            fail_on_status: Switch::default(),
            metrics_by_host: true,
            names: Names::default(),
            listeners: Listeners::new(crate::observe::Side::Outbound),
        }
    }
}

impl<A> OutboundBuilder<A> {
    /// The name of the layer's policies, followed by the host in their events, errors and
    /// `explain`: `"outbound 10.0.0.7:8080"` (default `"outbound"`). Their metrics carry the
    /// name alone as `policy`, the host apart (see [`metrics_by_host`](Self::metrics_by_host)).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Attempts per replayable request, the first included (default 3; at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// The settings each host's own breaker is made from (default: rampart's defaults).
    ///
    /// Settings, not a built [`Breaker`], and named for it: the layer makes one breaker per
    /// host from them, so that one failing host opens no circuit for the others, where
    /// [`PolicyBuilder::breaker`](rampart::policy::PolicyBuilder::breaker) takes one built
    /// breaker that a policy may share with others on purpose. Read a host's own with
    /// [`OutboundLayer::breaker`](crate::OutboundLayer::breaker).
    pub fn breaker_per_host(mut self, breaker: BreakerBuilder) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// No circuit breaker.
    pub fn no_breaker(mut self) -> Self {
        self.breaker = None;
        self
    }

    /// The settings each host's own retry budget is made from (default: rampart's defaults,
    /// 20% of the successes and 3 tokens a second, or 25% when the layer hedges: see
    /// [`hedge`](Self::hedge)). Retries and hedges of all the host's requests spend it.
    ///
    /// Settings rather than a built [`RetryBudget`], for the reason
    /// [`breaker_per_host`](Self::breaker_per_host) gives: each host gets its own. Read a
    /// host's with [`OutboundLayer::budget`](crate::OutboundLayer::budget).
    pub fn budget_per_host(mut self, budget: RetryBudgetBuilder) -> Self {
        self.budget = Some(Some(budget));
        self
    }

    /// No retry budget: retries are limited by `max_attempts` alone.
    pub fn no_budget(mut self) -> Self {
        self.budget = Some(None);
        self
    }

    /// Hedges every replayable request: a second attempt when the first is slower than usual
    /// (see [`rampart::hedge`]); each leg carries its own deadline header and the retry mark.
    /// Set the hedge here: one set in [`policy`](Self::policy) is not used. Replaces
    /// [`hedge_marked`](Self::hedge_marked).
    ///
    /// # What a hedge costs the budget
    ///
    /// Each hedge that fires spends one token of its host's retry budget, as a retry does;
    /// a call whose first attempt answers before the hedge delay spends nothing. With the
    /// adaptive delay (the p95 of recent attempts), about one call in 20 fires a hedge once
    /// the estimate is warm: 0.05 of a token per hedged call, a fifth of what the default
    /// budget earns (0.2 per success). So that hedging does not take from what retries may
    /// spend, the default budget of a hedging layer earns 0.25 per success (the floor of 3
    /// tokens a second and the capacity of 30 are unchanged): a failing host then sees at most
    /// about 1.25x its load from the layer, where it saw 1.2x. A budget set with
    /// [`budget_per_host`](Self::budget_per_host) is used as given. A hedge is not armed while the host's
    /// breaker is open or the call is `Sheddable`, and a hedge refused by the empty budget
    /// leaves the first attempt running alone.
    pub fn hedge(mut self, hedge: Hedge) -> Self {
        self.hedge = Some((hedge, Hedging::Every));
        self
    }

    /// Hedges the replayable requests that ask for it, marked [`Hedged`](crate::Hedged) (the
    /// reqwest client's `RequestBuilder::hedged`), and no other: a route whose tail matters
    /// opts in on the host's one entry, under the host's one breaker and one retry budget,
    /// with no second layer. The marked requests run under a policy of their own that hedges
    /// with `hedge` (its adaptive delay learned from their attempts alone, as their latency
    /// may not be the other routes'); the others run as on a layer that does not hedge.
    /// Replaces [`hedge`](Self::hedge); the budget's default is sized for hedging as
    /// [there](Self::hedge) (each hedge that fires is one token).
    ///
    /// ```
    /// use rampart::hedge::Hedge;
    /// use rampart_http::{Hedged, OutboundLayer};
    ///
    /// let layer = OutboundLayer::builder()
    ///     .hedge_marked(Hedge::adaptive())
    ///     .build()
    ///     .expect("valid policy");
    /// // In the handler of the route whose tail matters:
    /// let mut request = http::Request::get("http://prices:3001/quote").body(()).unwrap();
    /// request.extensions_mut().insert(Hedged);
    /// # drop((layer, request));
    /// ```
    pub fn hedge_marked(mut self, hedge: Hedge) -> Self {
        self.hedge = Some((hedge, Hedging::Marked));
        self
    }

    /// Asks `admit` before every attempt, to every host (the ready-made limiters share their
    /// state across clones). Calls that make one attempt (see the [module docs](super)) are
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
            fail_on_status: self.fail_on_status,
            metrics_by_host: self.metrics_by_host,
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
    ///     .policy(|p| p.total_timeout(Duration::from_secs(5)).attempt_timeout(Duration::from_secs(1)))
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
    /// host whose key is `key` (`host:port`, as the [module docs](super#host-keys) make it,
    /// or a key named with [`OutboundLayer::layer_for`]). The same settings can be changed as
    /// in `policy`. A later call for the same key replaces an earlier one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::builder()
    ///     .policy(|p| p.total_timeout(Duration::from_secs(2)))
    ///     .host("reports.internal:80", |p| p.total_timeout(Duration::from_secs(30)))
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
        self.quota.host(key, on);
        self
    }

    /// Whether a call that ends on a response with a status the classifier retries (5xx,
    /// 408, 429, a gRPC `UNAVAILABLE`, ...; the attempts, the deadline or the retry budget ran
    /// out on it, or the request could be sent only once) fails with
    /// [`ClientError::Status`](crate::ClientError::Status), which carries the response and
    /// its [`CallReport`](crate::CallReport), so that `?` stops there (default off: the
    /// response is returned, its report in its extensions). The reqwest client made from the
    /// layer follows it, unless set on the client itself
    /// (`reqwest::Client::fail_on_retryable_status`, feature `reqwest`). [`host_fail_on_retryable_status`](Self::host_fail_on_retryable_status)
    /// overrides it for one host.
    ///
    /// ```
    /// use rampart_http::OutboundLayer;
    ///
    /// let layer = OutboundLayer::builder()
    ///     .fail_on_retryable_status(true)
    ///     .build()
    ///     .expect("valid policy");
    /// # drop(layer);
    /// ```
    pub fn fail_on_retryable_status(mut self, on: bool) -> Self {
        self.fail_on_status.all = on;
        self
    }

    /// [`fail_on_retryable_status`](Self::fail_on_retryable_status) for the host whose key is
    /// `key` alone (`host:port`, read as [`host`](Self::host) reads it), whatever the layer's
    /// setting says for the others. A later call for the same key replaces an earlier one.
    pub fn host_fail_on_retryable_status(mut self, key: &str, on: bool) -> Self {
        self.fail_on_status.host(key, on);
        self
    }

    /// Whether rampart's metrics of the layer's calls are split by host, under the attribute
    /// `server.address` (the host key, `host:port`, as OpenTelemetry's HTTP client
    /// conventions name it) beside `policy`, the layer's [name](Self::name) (default on).
    ///
    /// A host's series appear on its first request, and stay in the recorder after the table
    /// evicts the host (let the exporter drop idle series, for Prometheus
    /// `PrometheusBuilder::idle_timeout`): with on, a layer makes up to
    /// [`max_hosts`](Self::max_hosts) times a host's series over its life. Off, every host's
    /// calls count in the same series, and the gauges of each host's own breaker and budget
    /// (`rampart.breaker.state`, `rampart.budget.tokens`) are not reported (the breakers'
    /// transitions still are). Needs the `metrics` feature to matter.
    ///
    /// ```
    /// use rampart_http::OutboundLayer;
    ///
    /// // URIs from outside: one set of series for the whole layer.
    /// let layer = OutboundLayer::builder()
    ///     .name("webhooks")
    ///     .metrics_by_host(false)
    ///     .build()
    ///     .expect("valid policy");
    /// # drop(layer);
    /// ```
    pub fn metrics_by_host(mut self, on: bool) -> Self {
        self.metrics_by_host = on;
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
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid setting at once (of the policy, the breaker,
    /// the budget, the hedge or the layer's own, such as `max_hosts` or `replay_limit`), each
    /// naming its field and value.
    pub fn build(self) -> Result<OutboundLayer<A>, ConfigError>
    where
        A: Admit + Clone,
    {
        let budget = self.budget.unwrap_or_else(|| {
            let budget = RetryBudget::builder();
            Some(match self.hedge {
                Some(_) => budget.fraction(HEDGING_BUDGET_FRACTION),
                None => budget,
            })
        });
        let factory = Factory {
            name: self.name,
            built_attempts: self.max_attempts,
            breaker: self.breaker,
            budget,
            hedge: self.hedge,
            admit: self.admit,
            configure: self.configure,
            hosts: self.hosts,
            quota: self.quota,
            fail_on_status: self.fail_on_status,
            metrics_by_host: self.metrics_by_host,
        };
        let edge = Arc::new(Edge {
            names: self.names,
            replay_limit: self.replay_limit,
            listeners: self.listeners,
        });
        // Built and dropped: no call runs under them, so they register no metric (a series
        // is registered on its first use), and no phantom host shows in the exporter. Their
        // settings are the layer's live settings.
        let every = factory.build("validation:0", &edge, None)?;
        let mut hosts = std::collections::BTreeMap::new();
        for (key, _) in &factory.hosts {
            let host = factory
                .build(key, &edge, None)
                .map_err(|error| for_host(&error, key))?;
            hosts.insert(key.to_string(), HostSettings::of(&host.full.settings()));
        }
        let settings = OutboundSettings {
            max_attempts: self.max_attempts,
            policy: HostSettings::of(&every.full.settings()),
            hosts,
            breaker: factory.breaker.clone(),
        };
        Ok(OutboundLayer {
            engine: Arc::new(Engine {
                edge,
                max_hosts: self.max_hosts.max(1),
                hosts: Hosts::new(self.max_hosts),
                factory,
                live: Live::new(settings),
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
            .field("metrics_by_host", &self.metrics_by_host)
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
