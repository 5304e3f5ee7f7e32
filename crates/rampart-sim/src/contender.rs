//! The contenders, configured in the open in one place.
//!
//! Longer than the ~600-line guide: every contender's configuration is kept in one file on
//! purpose, so that a reader compares them side by side.
//!
//! Each contender is a way to call a dependency (the client side of every hop) and a way to
//! admit work (the server side of every service). The two baselines are plain code written
//! here around tower's own retry budget, not rampart with features turned off; every contender
//! reads replies with the same classifier ([`classify`], rampart-http's HTTP rules) and honours
//! a server's `Retry-After` the same way (used as is, capped at 30 s, no jitter).
//!
//! | contender | client side, every hop | server side |
//! |---|---|---|
//! | `naive` | a hand-written loop: [`Hop::attempts`] attempts, a per-attempt timeout with `tokio::time::timeout`, full-jitter exponential backoff; no budget; nothing propagated | one FIFO queue, 503 without `Retry-After` when full |
//! | `budgeted` | the same loop under tower's own [`TpsBudget`] (`TpsBudget::new(10 s, 3/s, 10 %)`, deposited on every success and withdrawn by every retry, as tower's documentation does it); nothing propagated | the same FIFO |
//! | `rampart` | a rampart [`Policy`]: the same attempts, attempt timeout and backoff curve (seeded), rampart's retry budget (10 % of successes, floor 3/s), a failure-ratio breaker (50 % over 10 s, at least 20 calls), the ambient deadline and criticality read and sent on the wire (`min(attempt ceiling, time left)` as whole milliseconds); hedged (its `run` hedges) where a scenario asks | rampart's [`CriticalityLimit`](rampart::limit::CriticalityLimit) with the service's workers and queue, behind an inbound edge that does what rampart-http's `InboundLayer` does (see [`ServerSide`]) |
//!
//! Each of rampart's features can be removed on its own ([`Feature`], [`Contender::without`]):
//! the ablations that attribute every win. The `defaults` scenario also varies how rampart is
//! set up: when its breaker opens ([`Trip`]), a client-side [`Throttle`] as each hop's
//! admission, the budget's `fraction`, and (not a rampart setting today) a call its budget
//! ended answered upstream with its last failure instead of a refusal.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use rampart::admit::Admit;
use rampart::backoff::Backoff;
use rampart::breaker::Breaker;
use rampart::drain::Drain;
use rampart::hedge::Hedge;
use rampart::limit::Throttle;
use rampart::policy::PolicyBuilder;
use rampart::{
    Attempt, Criticality, DeadlineSource, Error, Policy, RejectReason, RetryBudget, Verdict,
};
use tower::retry::budget::{Budget, TpsBudget};

use crate::SimError;
use crate::dist::{ServiceTime, derive_seed};
use crate::service::{Admission, Failure, Reply, Request, ServerSide, Service, Trace};
use crate::spans::{OpenSpan, SpanKind};

/// Which family a contender belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Retries at every hop, a per-attempt timeout, nothing else.
    Naive,
    /// Retries under tower's `TpsBudget`, a per-attempt timeout.
    Budgeted,
    /// rampart policies, deadline and criticality propagation, server-side shedding.
    Rampart,
}

/// How a rampart contender hedges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Hedging {
    /// No hedging.
    Off,
    /// `Hedge::fixed(delay)`.
    Fixed(Duration),
    /// `Hedge::adaptive().quantile(quantile).floor(floor)`.
    Adaptive {
        /// The latency quantile the hedge waits for.
        quantile: f64,
        /// The shortest hedge delay.
        floor: Duration,
    },
}

/// When a rampart contender's breaker opens (used when it has one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trip {
    /// Whatever `Breaker::builder()` does by default: the contender follows rampart's default.
    Default,
    /// `consecutive_failures(n)`.
    Consecutive(u32),
    /// `failure_ratio(ratio, window, min_throughput)`.
    Ratio {
        /// The share of failed calls that opens it.
        ratio: f64,
        /// How far back calls count.
        window: Duration,
        /// The fewest calls in the window before it may open.
        min_throughput: u32,
    },
}

/// The simulator's breaker: 50 % failures over 10 s, at least 20 calls.
pub const RATIO_50: Trip = Trip::Ratio {
    ratio: 0.5,
    window: Duration::from_secs(10),
    min_throughput: 20,
};

/// One of rampart's features, which an ablation removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// The retry budget (`no_budget()`).
    Budget,
    /// Reading the ambient deadline and criticality and sending them on the wire.
    Propagation,
    /// The servers' `CriticalityLimit` (replaced by the baselines' FIFO queue).
    Limiter,
    /// The circuit breaker.
    Breaker,
    /// Hedging (where the scenario hedges).
    Hedging,
    /// The servers' `reject_expired` (a request arriving with no more than the reserve left is
    /// handled anyway).
    RejectExpired,
}

impl Feature {
    /// Every feature, in ablation order.
    pub const ALL: [Feature; 6] = [
        Feature::Budget,
        Feature::Propagation,
        Feature::Limiter,
        Feature::Breaker,
        Feature::Hedging,
        Feature::RejectExpired,
    ];

    /// Its name in tables.
    pub const fn label(self) -> &'static str {
        match self {
            Feature::Budget => "retry budget",
            Feature::Propagation => "deadline and criticality propagation",
            Feature::Limiter => "CriticalityLimit (FIFO instead)",
            Feature::Breaker => "circuit breaker",
            Feature::Hedging => "hedging",
            Feature::RejectExpired => "reject_expired",
        }
    }

    /// The name of the contender without it.
    pub const fn ablation_name(self) -> &'static str {
        match self {
            Feature::Budget => "rampart -budget",
            Feature::Propagation => "rampart -propagation",
            Feature::Limiter => "rampart -limiter",
            Feature::Breaker => "rampart -breaker",
            Feature::Hedging => "rampart -hedging",
            Feature::RejectExpired => "rampart -reject_expired",
        }
    }
}

/// A contender: a name, a family and, for rampart, which features it has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Contender {
    /// Its name in tables and charts.
    pub name: &'static str,
    /// Its family.
    pub kind: Kind,
    /// Hedging (rampart only).
    pub hedging: Hedging,
    /// A circuit breaker on every hop (rampart only), opening as [`trip`](Self::trip) says.
    pub breaker: bool,
    /// When the breaker opens.
    pub trip: Trip,
    /// A client-side adaptive [`Throttle`] with this `k` on every hop, as the policy's
    /// admission (rampart only; none when `None`).
    pub throttle: Option<f64>,
    /// The retry budget's `fraction`: rampart's `RetryBudget` (default 0.2 since rampart 0.2),
    /// or the `retry_percent` of tower's `TpsBudget` for the budgeted baseline (naive: unused).
    pub budget_fraction: f64,
    /// A call its retry budget ended is answered upstream with its last failure (a 500), as
    /// rampart-http 0.2 answers it; `false`: as a refusal (503 with a `Retry-After` of at
    /// least 1 s), as rampart-http 0.1 answered every `Rejected` (rampart only).
    pub budget_refusal_as_failure: bool,
    /// rampart's retry budget on every hop (rampart only).
    pub budget: bool,
    /// Deadline and criticality read from the ambient scope and sent on the wire (rampart only).
    pub propagation: bool,
    /// The servers admit through `CriticalityLimit` (rampart only; FIFO otherwise).
    pub limiter: bool,
    /// The servers answer 504 at once when a request arrives with no more than the reserve
    /// left (rampart only).
    pub reject_expired: bool,
}

/// The per-attempt loop with no budget, no propagation.
pub const NAIVE: Contender = Contender {
    name: "naive",
    kind: Kind::Naive,
    hedging: Hedging::Off,
    breaker: false,
    trip: RATIO_50,
    throttle: None,
    budget_fraction: BUDGET_PERCENT,
    budget_refusal_as_failure: false,
    budget: false,
    propagation: false,
    limiter: false,
    reject_expired: false,
};

/// The naive loop under tower's `TpsBudget`.
pub const BUDGETED: Contender = Contender {
    name: "budgeted",
    kind: Kind::Budgeted,
    ..NAIVE
};

/// rampart with every feature but hedging: budget, breaker, deadline and criticality
/// propagation, `CriticalityLimit` and `reject_expired` on the servers.
pub const RAMPART: Contender = Contender {
    name: "rampart",
    kind: Kind::Rampart,
    hedging: Hedging::Off,
    breaker: true,
    trip: RATIO_50,
    throttle: None,
    budget_fraction: BUDGET_PERCENT,
    budget_refusal_as_failure: true,
    budget: true,
    propagation: true,
    limiter: true,
    reject_expired: true,
};

/// The three contenders every scenario compares.
pub const ALL: [Contender; 3] = [NAIVE, BUDGETED, RAMPART];

/// The rampart contender's servers: how long a refusal of a level keeps the levels below it
/// refused by the service's [`CriticalityLimit`](rampart::limit::CriticalityLimit) (rampart's
/// default). Its capacity is the service's workers and its queue the service's queue, the
/// same numbers the baselines' FIFO servers get.
pub const SHED_HOLD: Duration = Duration::from_secs(1);

/// What each rampart server keeps for itself from the deadline it receives (rampart-http's
/// `InboundLayer::reserve`), the same configured number for every service (the loopback demo's).
pub const RESERVE: Duration = Duration::from_millis(5);

/// tower's budget: how long a deposit counts.
pub const BUDGET_TTL: Duration = Duration::from_secs(10);
/// tower's budget: retries per second always allowed.
pub const BUDGET_MIN_PER_SEC: u32 = 3;
/// The retry budget's share of the traffic in every scenario but `defaults`: the SRE book's
/// 10 %, tower's `TpsBudget` `retry_percent` for the budgeted baseline and `fraction` for the
/// rampart contender alike (rampart 0.1's default; 0.2 defaults to 20 %, which the `defaults`
/// scenario compares with tower's budget at 20 % too).
pub const BUDGET_PERCENT: f64 = 0.1;

/// The most any backoff or `Retry-After` is waited (rampart's default maximum).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The base of the long curve after a throttled reply without `Retry-After` (rampart's
/// default).
pub const THROTTLED_BASE: Duration = Duration::from_secs(1);

/// One hop's settings, the same for every contender: what a scenario decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hop {
    /// Attempts per call, the first included.
    pub attempts: u32,
    /// The per-hop (per-attempt) timeout.
    pub timeout: Duration,
    /// Base of the exponential backoff (factor 2, full jitter, at most 30 s).
    pub backoff: Duration,
}

impl Hop {
    /// 4 attempts, this timeout, a 20 ms backoff base.
    pub const fn new(timeout: Duration) -> Hop {
        Hop {
            attempts: 4,
            timeout,
            backoff: Duration::from_millis(20),
        }
    }
}

impl Contender {
    /// This contender under another name, hedging as given.
    pub const fn hedged(self, name: &'static str, hedging: Hedging) -> Contender {
        Contender {
            name,
            hedging,
            ..self
        }
    }

    /// This rampart contender with `feature` removed, named after what is missing.
    pub const fn without(self, feature: Feature) -> Contender {
        let mut c = self;
        c.name = feature.ablation_name();
        match feature {
            Feature::Budget => c.budget = false,
            Feature::Propagation => c.propagation = false,
            Feature::Limiter => c.limiter = false,
            Feature::Breaker => c.breaker = false,
            Feature::Hedging => c.hedging = Hedging::Off,
            Feature::RejectExpired => c.reject_expired = false,
        }
        c
    }

    /// How this contender's services admit work.
    pub fn server(&self) -> ServerSide {
        let rampart = self.kind == Kind::Rampart;
        ServerSide {
            admission: if rampart && self.limiter {
                Admission::Criticality { hold: SHED_HOLD }
            } else {
                Admission::Fifo
            },
            inbound: rampart,
            reserve: RESERVE,
            reject_expired: rampart && self.reject_expired,
            enforce: false,
        }
    }

    /// The client a caller uses to call `target`, seeded from `seed` and the target's name.
    pub fn client(&self, target: Rc<Service>, hop: Hop, seed: u64) -> Result<Rc<Client>, SimError> {
        let seed = derive_seed(seed, target.config().name);
        let how = match self.kind {
            Kind::Naive => How::Loop {
                hop,
                rng: RefCell::new(fastrand::Rng::with_seed(seed)),
                budget: None,
            },
            Kind::Budgeted => How::Loop {
                hop,
                rng: RefCell::new(fastrand::Rng::with_seed(seed)),
                budget: Some(tower_budget(self.budget_fraction)),
            },
            Kind::Rampart => match self.throttle {
                None => How::Rampart {
                    policy: self.policy(target.config().name, hop, seed)?,
                    propagate: self.propagation,
                    relay: self.budget_refusal_as_failure,
                },
                Some(_) => How::Throttled {
                    policy: self.throttled_policy(target.config().name, hop, seed)?,
                    propagate: self.propagation,
                    relay: self.budget_refusal_as_failure,
                },
            },
        };
        Ok(Rc::new(Client {
            target,
            how,
            wire: None,
        }))
    }

    /// The rampart policy of one hop (also what [`describe`](Self::describe) explains), without
    /// the throttle (see [`throttled_policy`](Self::throttled_policy)).
    pub fn policy(&self, name: &str, hop: Hop, seed: u64) -> Result<Policy<Classifier>, SimError> {
        Ok(self.builder(name, hop, seed)?.build()?)
    }

    /// The rampart policy of one hop with its client-side [`Throttle`] as its admission (`k`
    /// 2 when the contender has none).
    pub fn throttled_policy(
        &self,
        name: &str,
        hop: Hop,
        seed: u64,
    ) -> Result<Policy<Classifier, Throttle>, SimError> {
        let throttle = Throttle::builder()
            .k(self.throttle.unwrap_or(2.0))
            .seed(seed)
            .build()?;
        Ok(self.builder(name, hop, seed)?.admit(throttle).build()?)
    }

    fn builder(
        &self,
        name: &str,
        hop: Hop,
        seed: u64,
    ) -> Result<PolicyBuilder<Classifier>, SimError> {
        let mut builder = Policy::builder()
            .name(name)
            .max_attempts(hop.attempts)
            .total_timeout(Duration::from_secs(30))
            .attempt_timeout(hop.timeout)
            .backoff(Backoff::exponential(hop.backoff).seed(seed))
            .use_ambient_deadline(self.propagation)
            // The policy reads the level only to gate its budget and hedges (the wire carries
            // the caller's level either way); rampart refuses the setting without either.
            .use_ambient_criticality(
                self.propagation && (self.budget || self.hedging != Hedging::Off),
            )
            .drain(&Drain::new())
            .classifier(classify as Classifier);
        builder = if self.budget {
            builder.budget(
                RetryBudget::builder()
                    .fraction(self.budget_fraction)
                    .build()?,
            )
        } else {
            builder.no_budget()
        };
        if self.breaker {
            let breaker = match self.trip {
                Trip::Default => Breaker::builder(),
                Trip::Consecutive(n) => Breaker::builder().consecutive_failures(n),
                Trip::Ratio {
                    ratio,
                    window,
                    min_throughput,
                } => Breaker::builder().failure_ratio(ratio, window, min_throughput),
            };
            builder = builder.breaker(breaker.seed(seed).build()?);
        }
        builder = match self.hedging {
            Hedging::Off => builder,
            Hedging::Fixed(delay) => builder.hedge(Hedge::fixed(delay)),
            Hedging::Adaptive { quantile, floor } => {
                builder.hedge(Hedge::adaptive().quantile(quantile).floor(floor))
            }
        };
        Ok(builder)
    }

    /// This contender's exact configuration for one hop, in one paragraph: rampart's by
    /// `policy.explain()`, the baselines' by their settings; then the server side.
    pub fn describe(&self, hop: Hop) -> Result<String, SimError> {
        let backoff = format!(
            "backoff {} ms x2 full jitter max 30 s (Retry-After used as is; 1 s long curve for a throttled reply without one)",
            hop.backoff.as_millis()
        );
        let client = match self.kind {
            Kind::Naive => format!(
                "hand-written loop: {} attempts, attempt timeout {} ms (tokio::time::timeout), {backoff}, no budget, no deadline or criticality on the wire",
                hop.attempts,
                hop.timeout.as_millis()
            ),
            Kind::Budgeted => format!(
                "the naive loop ({} attempts, attempt timeout {} ms, {backoff}) under tower::retry::budget::TpsBudget::new({} s, {}/s, {}) (deposit per success, withdraw per retry), no deadline or criticality on the wire",
                hop.attempts,
                hop.timeout.as_millis(),
                BUDGET_TTL.as_secs(),
                BUDGET_MIN_PER_SEC,
                self.budget_fraction
            ),
            Kind::Rampart => {
                let policy = self.policy("hop", hop, 0)?;
                let throttle = self.throttle.map_or(String::new(), |k| {
                    format!(
                        "; admission: client-side adaptive Throttle (k {k}, window 120 s: refuses an attempt with probability max(0, (requests - k x accepts) / (requests + 1)))"
                    )
                });
                let relay = if self.budget_refusal_as_failure {
                    "; a call its budget ended is answered with its last failure (500), as rampart-http 0.2 answers it"
                } else {
                    "; a call its budget ended is answered 503 with Retry-After (at least 1 s), as rampart-http 0.1 answered it"
                };
                format!(
                    "policy.explain(): {}{throttle}{relay}; {}",
                    policy.explain(),
                    if self.propagation {
                        "sends min(attempt ceiling, time left) as X-Deadline-Ms and the level as X-Criticality"
                    } else {
                        "sends no deadline or criticality"
                    }
                )
            }
        };
        Ok(format!(
            "client: {client}. server: {}",
            self.server().describe()
        ))
    }
}

fn tower_budget(retry_percent: f64) -> TpsBudget {
    TpsBudget::new(BUDGET_TTL, BUDGET_MIN_PER_SEC, retry_percent as f32)
}

/// The classifier every contender uses.
pub type Classifier = fn(&Reply) -> Verdict;

/// What each reply means, for every contender: rampart-http's HTTP rules. A 503 with
/// `Retry-After` is throttled (retried after it, never breaker evidence); every other failure
/// (a 503 without `Retry-After`, a 500, a 504, a timeout, a refused connection) is transient.
pub fn classify(reply: &Reply) -> Verdict {
    match reply {
        Ok(()) => Verdict::Ok,
        Err(Failure::Overloaded(Some(after))) => Verdict::Throttled {
            retry_after: Some(*after),
        },
        Err(_) => Verdict::Transient,
    }
}

enum How {
    Direct,
    Loop {
        hop: Hop,
        rng: RefCell<fastrand::Rng>,
        budget: Option<TpsBudget>,
    },
    Rampart {
        policy: Policy<Classifier>,
        propagate: bool,
        relay: bool,
    },
    Throttled {
        policy: Policy<Classifier, Throttle>,
        propagate: bool,
        relay: bool,
    },
}

/// A caller's way to one service.
pub struct Client {
    target: Rc<Service>,
    how: How,
    wire: Option<Wire>,
}

/// The time an attempt spends outside its callee (on the wire both ways, in the caller's
/// client stack), drawn for each attempt from a generator of its own.
pub struct Wire {
    time: ServiceTime,
    rng: RefCell<fastrand::Rng>,
}

impl Wire {
    /// `time` for each attempt, drawn from `seed`.
    pub fn new(time: ServiceTime, seed: u64) -> Wire {
        Wire {
            time,
            rng: RefCell::new(fastrand::Rng::with_seed(seed)),
        }
    }
}

impl Client {
    /// One attempt, no timeout, nothing propagated: a load generator's plain call.
    pub fn direct(target: Rc<Service>) -> Rc<Client> {
        Rc::new(Client {
            target,
            how: How::Direct,
            wire: None,
        })
    }

    /// A caller's way to `target` through `policy` (a graph file's policy, built with
    /// [`classify`]), sending `min(attempt ceiling, time left)` and the level on the wire when
    /// `propagate`, each attempt spending `wire` before the target sees it.
    pub fn with_policy(
        target: Rc<Service>,
        policy: Policy<Classifier>,
        propagate: bool,
        wire: Option<Wire>,
    ) -> Rc<Client> {
        Rc::new(Client {
            target,
            how: How::Rampart {
                policy,
                propagate,
                relay: false,
            },
            wire,
        })
    }

    /// Calls the target for root `trace` at `level` (the caller's current level).
    ///
    /// The call's future is boxed (one allocation per call): a rampart call's future is about
    /// 1.5 KB, and inline it would make every future and task that awaits it as large, which
    /// tokio moves whole as it spawns a task, stores its output and hands that over.
    pub fn call(
        &self,
        trace: Trace,
        level: Criticality,
    ) -> Pin<Box<impl Future<Output = Reply> + '_>> {
        Box::pin(self.call_inline(trace, level))
    }

    async fn call_inline(&self, trace: Trace, level: Criticality) -> Reply {
        match &self.how {
            How::Direct => self.send(None, None, level, trace, 0).await,
            How::Loop { hop, rng, budget } => {
                self.retry_loop(*hop, rng, budget.as_ref(), trace, level)
                    .await
            }
            How::Rampart {
                policy,
                propagate,
                relay,
            } => self.run(policy, *propagate, *relay, trace, level).await,
            How::Throttled {
                policy,
                propagate,
                relay,
            } => self.run(policy, *propagate, *relay, trace, level).await,
        }
    }

    /// A call through a rampart `policy` (`run` hedges when the policy was built with a hedge).
    async fn run<A: Admit>(
        &self,
        policy: &Policy<Classifier, A>,
        propagate: bool,
        relay: bool,
        trace: Trace,
        level: Criticality,
    ) -> Reply {
        let outcome = policy
            .run(async |attempt| self.attempt(attempt, propagate, trace, level).await)
            .await;
        outcome.map_err(|e| match e {
            Error::Rejected {
                reason: RejectReason::BudgetExhausted,
                last: Some(last),
                ..
            } if relay => failure_of(&last),
            e => failure_of(&e),
        })
    }

    /// One rampart attempt: the wire carries `min(attempt ceiling, time left)` and the level
    /// when the contender propagates.
    async fn attempt(
        &self,
        attempt: &Attempt,
        propagate: bool,
        trace: Trace,
        level: Criticality,
    ) -> Reply {
        let resend = attempt.resends();
        if !propagate {
            return self.send(None, None, level, trace, resend).await;
        }
        let deadline_ms = attempt
            .remaining()
            .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1));
        self.send(deadline_ms, Some(level.as_str()), level, trace, resend)
            .await
    }

    /// One request on the wire; when the run records spans and a handler sends it, under a
    /// CLIENT span (`resend`: its `http.request.resend_count`, 0 for a first attempt).
    async fn send(
        &self,
        deadline_ms: Option<u64>,
        criticality: Option<&'static str>,
        route: Criticality,
        trace: Trace,
        resend: u32,
    ) -> Reply {
        let span = match (self.target.span_sink(), trace.span) {
            (Some(sink), Some(handler)) => Some(sink.open(
                SpanKind::Client,
                handler.service,
                &trace,
                Some(handler),
                resend,
            )),
            _ => None,
        };
        // The whole time outside the callee is spent before it sees the request: the deadline
        // on the wire was stamped before it, and is read on arrival, as on a real hop.
        if let Some(wire) = &self.wire {
            let delay = wire.time.sample(&mut wire.rng.borrow_mut());
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        let receiver = self.target.submit(Request {
            deadline_ms,
            criticality,
            route,
            trace: Trace {
                span: span.as_ref().map(OpenSpan::parent),
                ..trace
            },
        });
        let reply = receiver.await.unwrap_or(Err(Failure::Error));
        if let Some(span) = span {
            span.end(&reply);
        }
        reply
    }

    /// The baselines' loop: up to `attempts` tries, each under `timeout`, read by
    /// [`classify`]; a transient failure waits the full-jitter exponential backoff, a
    /// throttled one its `Retry-After` (capped, no jitter), and (budgeted) a retry happens
    /// only when tower's budget allows it.
    async fn retry_loop(
        &self,
        hop: Hop,
        rng: &RefCell<fastrand::Rng>,
        budget: Option<&TpsBudget>,
        trace: Trace,
        level: Criticality,
    ) -> Reply {
        let mut last: Reply = Err(Failure::Error);
        for attempt in 1..=hop.attempts {
            if attempt > 1 {
                if let Some(budget) = budget
                    && !budget.withdraw()
                {
                    return last;
                }
                let retry = attempt - 1;
                let delay = match classify(&last) {
                    Verdict::Throttled {
                        retry_after: Some(after),
                    } => after.min(MAX_BACKOFF),
                    Verdict::Throttled { retry_after: None } => {
                        jittered(THROTTLED_BASE, retry, &mut rng.borrow_mut())
                    }
                    _ => jittered(hop.backoff, retry, &mut rng.borrow_mut()),
                };
                tokio::time::sleep(delay).await;
            }
            let send = self.send(None, None, level, trace, attempt - 1);
            last = match tokio::time::timeout(hop.timeout, send).await {
                Ok(reply) => reply,
                Err(_) => Err(Failure::Timeout),
            };
            match classify(&last) {
                Verdict::Ok => {
                    if let Some(budget) = budget {
                        budget.deposit();
                    }
                    return last;
                }
                Verdict::Transient | Verdict::Throttled { .. } => {}
                _ => return last,
            }
        }
        last
    }
}

/// Full jitter on `base × 2^(retry - 1)`, capped at [`MAX_BACKOFF`]: rampart's default curve.
fn jittered(base: Duration, retry: u32, rng: &mut fastrand::Rng) -> Duration {
    let cap = base
        .saturating_mul(1 << (retry.saturating_sub(1)).min(20))
        .min(MAX_BACKOFF);
    cap.mul_f64(rng.f64())
}

/// How a rampart error looks to the simulated caller: what rampart-http answers for it
/// (deadline and attempt timeout 504, a rejection 503 with `Retry-After` in whole seconds, at
/// least 1).
fn failure_of(error: &Error<Failure>) -> Failure {
    match error {
        Error::Inner(failure) => *failure,
        Error::DeadlineExceeded {
            source: DeadlineSource::Inherited,
            ..
        } => Failure::Expired,
        Error::DeadlineExceeded { .. } | Error::AttemptTimeout { .. } => Failure::Timeout,
        Error::Rejected { retry_after, .. } => {
            Failure::Overloaded(Some(whole_seconds(*retry_after)))
        }
        _ => Failure::Error,
    }
}

/// A `Retry-After` as rampart-http writes it: whole seconds, rounded up, at least 1.
pub fn whole_seconds(after: Option<Duration>) -> Duration {
    let secs = after.map_or(1, |d| d.as_nanos().div_ceil(1_000_000_000).max(1));
    Duration::from_secs(u64::try_from(secs).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::LogNormal;
    use crate::service::{Downstream, ServiceConfig};

    #[test]
    fn a_call_is_one_pointer_to_whoever_awaits_it() {
        // What keeps the simulator's tasks small: a rampart call's future is boxed, so no task
        // or future that awaits one carries its kilobyte and a half inline.
        crate::sim::virtual_time(|| async {
            let ms = Duration::from_millis(1);
            let service = Service::new(
                ServiceConfig::new("leaf", 1, 1, LogNormal::from_median_p99(ms, ms)),
                ServerSide {
                    admission: Admission::Fifo,
                    inbound: false,
                    reserve: Duration::ZERO,
                    reject_expired: false,
                    enforce: false,
                },
                Downstream::None,
                1,
            )
            .expect("a service");
            let policy = Policy::builder()
                .classifier(classify as Classifier)
                .build()
                .expect("a policy");
            let client = Client::with_policy(service, policy, true, None);
            let trace = Trace {
                root: 0,
                root_deadline: rampart::Instant::now(),
                measured: false,
                span: None,
            };
            let call = client.call(trace, Criticality::Critical);
            assert_eq!(size_of_val(&call), size_of::<usize>());
        })
        .expect("runtime");
    }

    #[test]
    fn every_contender_reads_replies_as_rampart_http_does() {
        assert_eq!(classify(&Ok(())), Verdict::Ok);
        assert_eq!(
            classify(&Err(Failure::Overloaded(None))),
            Verdict::Transient
        );
        assert_eq!(
            classify(&Err(Failure::Overloaded(Some(Duration::from_secs(2))))),
            Verdict::Throttled {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        for f in [Failure::Error, Failure::Expired, Failure::Timeout] {
            assert_eq!(classify(&Err(f)), Verdict::Transient, "{f:?}");
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_at_least_one() {
        assert_eq!(whole_seconds(None), Duration::from_secs(1));
        assert_eq!(
            whole_seconds(Some(Duration::from_millis(10))),
            Duration::from_secs(1)
        );
        assert_eq!(
            whole_seconds(Some(Duration::from_millis(1_001))),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn an_ablation_removes_one_feature_and_names_it() {
        let c = RAMPART.without(Feature::Limiter);
        assert_eq!(c.name, "rampart -limiter");
        assert_eq!(c.server().admission, Admission::Fifo);
        assert!(c.budget && c.breaker && c.propagation && c.reject_expired);
        assert!(!RAMPART.without(Feature::Budget).budget);
    }

    #[test]
    fn tower_budget_allows_a_tenth_of_successes_plus_its_floor() {
        let retries = crate::sim::virtual_time(|| async {
            let budget = tower_budget(BUDGET_PERCENT);
            // The reserve: 3/s over 10 s.
            let reserve = (0..100).filter(|_| budget.withdraw()).count();
            for _ in 0..100 {
                budget.deposit();
            }
            let funded = (0..100).filter(|_| budget.withdraw()).count();
            (reserve, funded)
        })
        .expect("runtime");
        assert_eq!(retries, (30, 10));
    }
}
