//! The contenders, configured in the open in one place.
//!
//! Each contender is a way to call a dependency (the client side of every hop) and a way to
//! admit work (the server side of every service). The two baselines are plain code written
//! here, not rampart with features turned off, so the comparison is honest:
//!
//! | contender | client side, every hop | server side |
//! |---|---|---|
//! | `naive` | a hand-written loop: 4 attempts (3 retries), a fixed per-hop timeout with `tokio::time::timeout`, exponential backoff with full jitter; no budget; nothing propagated | one FIFO queue, rejects when full |
//! | `budgeted` | the same loop, plus a retry budget written here after tower's (`TpsBudget`: each request deposits, a retry withdraws; 20 % of requests over a 10 s window, plus 10 retries/s); nothing propagated | one FIFO queue, rejects when full |
//! | `rampart` | a rampart [`Policy`]: 4 attempts, the same per-hop attempt timeout and backoff curve (seeded), its retry budget (10 % of successes, floor 3/s), a failure-ratio breaker (50 % over 10 s, at least 20 calls), the ambient deadline and criticality read and sent on the wire (`min(attempt ceiling, time left)` as whole milliseconds); hedged with `run_hedged` where a scenario asks | admits every request through rampart's [`CriticalityLimit`](rampart::limit::CriticalityLimit) (capacity the service's workers, queue the service's queue, hold [`SHED_HOLD`]; see [`Admission::Criticality`]) with its propagated level and deadline; answers `Expired` without work when less than its p99 service time is left (a stand-in for rampart-http's `reject_expired`, see [`ServerSide::reject_expired`]) |
//!
//! The per-hop timeout, attempts and backoff base are the scenario's ([`Hop`]) and are the same
//! for every contender.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use rampart::backoff::Backoff;
use rampart::breaker::Breaker;
use rampart::drain::Drain;
use rampart::hedge::Hedge;
use rampart::{Attempt, Criticality, DeadlineSource, Error, Instant, Policy, RetryBudget, Verdict};

use crate::SimError;
use crate::dist::derive_seed;
use crate::service::{Admission, Failure, Reply, Request, ServerSide, Service, Trace};

/// Which family a contender belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Retries at every hop, a fixed timeout, nothing else.
    Naive,
    /// Retries under a hand-written 20 % retry budget, a fixed timeout.
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

/// A contender: a name, a family and, for rampart, how it hedges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Contender {
    /// Its name in tables and charts.
    pub name: &'static str,
    /// Its family.
    pub kind: Kind,
    /// Hedging (rampart only).
    pub hedging: Hedging,
    /// A failure-ratio circuit breaker on every hop (rampart only).
    pub breaker: bool,
}

/// 4 attempts at every hop, a fixed per-hop timeout, no budget, no propagation.
pub const NAIVE: Contender = Contender {
    name: "naive",
    kind: Kind::Naive,
    hedging: Hedging::Off,
    breaker: false,
};

/// The naive loop under a 20 % retry budget (tower's design, written here).
pub const BUDGETED: Contender = Contender {
    name: "budgeted",
    kind: Kind::Budgeted,
    hedging: Hedging::Off,
    breaker: false,
};

/// rampart with budget, breaker, deadline and criticality propagation; no hedging.
pub const RAMPART: Contender = Contender {
    name: "rampart",
    kind: Kind::Rampart,
    hedging: Hedging::Off,
    breaker: false,
};

/// The three contenders every scenario compares.
pub const ALL: [Contender; 3] = [NAIVE, BUDGETED, RAMPART];

/// The rampart contender's servers: how long a refusal of a level keeps the levels below it
/// refused by the service's [`CriticalityLimit`](rampart::limit::CriticalityLimit) (rampart's
/// default). Its capacity is the service's workers and its queue the service's queue, the
/// same numbers the baselines' FIFO servers get.
pub const SHED_HOLD: Duration = Duration::from_secs(1);

/// The hand-written budget's share of requests a retry may add.
pub const BUDGET_PERCENT: f64 = 0.2;
/// The hand-written budget's window.
pub const BUDGET_TTL: Duration = Duration::from_secs(10);
/// The hand-written budget's floor, retries per second.
pub const BUDGET_MIN_PER_SEC: u32 = 10;

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

    /// This contender under another name, with a breaker on every hop.
    pub const fn with_breaker(self, name: &'static str) -> Contender {
        Contender {
            name,
            breaker: true,
            ..self
        }
    }

    /// How this contender's services admit work.
    pub fn server(&self) -> ServerSide {
        match self.kind {
            Kind::Naive | Kind::Budgeted => ServerSide {
                admission: Admission::Fifo,
                reject_expired: false,
            },
            Kind::Rampart => ServerSide {
                admission: Admission::Criticality { hold: SHED_HOLD },
                reject_expired: true,
            },
        }
    }

    /// The client a caller uses to call `target`, seeded from `seed` and the target's name.
    pub fn client(&self, target: Rc<Service>, hop: Hop, seed: u64) -> Result<Rc<Client>, SimError> {
        let seed = derive_seed(seed, target.config().name);
        let how = match self.kind {
            Kind::Naive => How::Naive {
                hop,
                rng: RefCell::new(fastrand::Rng::with_seed(seed)),
            },
            Kind::Budgeted => How::Budgeted {
                hop,
                rng: RefCell::new(fastrand::Rng::with_seed(seed)),
                budget: RefCell::new(TpsBudget::new(
                    BUDGET_TTL,
                    BUDGET_MIN_PER_SEC,
                    BUDGET_PERCENT,
                )),
            },
            Kind::Rampart => How::Rampart {
                policy: self.policy(target.config().name, hop, seed)?,
                hedged: self.hedging != Hedging::Off,
            },
        };
        Ok(Rc::new(Client { target, how }))
    }

    /// The rampart policy of one hop.
    fn policy(&self, name: &str, hop: Hop, seed: u64) -> Result<Policy<Classifier>, SimError> {
        let mut builder = Policy::builder()
            .name(name)
            .max_attempts(hop.attempts)
            .deadline(Duration::from_secs(30))
            .attempt_timeout(hop.timeout)
            .backoff(Backoff::exponential(hop.backoff).seed(seed))
            .budget(RetryBudget::builder().build()?)
            .use_ambient_deadline(true)
            .use_ambient_criticality(true)
            .drain(&Drain::new())
            .classifier(classify as Classifier);
        if self.breaker {
            let breaker = Breaker::builder()
                .failure_ratio(0.5, Duration::from_secs(10), 20)
                .seed(seed)
                .build()?;
            builder = builder.breaker(breaker);
        }
        builder = match self.hedging {
            Hedging::Off => builder,
            Hedging::Fixed(delay) => builder.hedge(Hedge::fixed(delay)),
            Hedging::Adaptive { quantile, floor } => {
                builder.hedge(Hedge::adaptive().quantile(quantile).floor(floor))
            }
        };
        Ok(builder.build()?)
    }
}

/// The classifier of the rampart contender.
pub type Classifier = fn(&Reply) -> Verdict;

/// What each reply means to a rampart policy: a shed request (503) is throttled (retried on the
/// long curve, never breaker evidence), a request whose deadline passed downstream (504) is
/// permanent, every other failure is transient.
pub fn classify(reply: &Reply) -> Verdict {
    match reply {
        Ok(()) => Verdict::Ok,
        Err(Failure::Overloaded) => Verdict::Throttled { retry_after: None },
        Err(Failure::Expired) => Verdict::Permanent,
        Err(_) => Verdict::Transient,
    }
}

enum How {
    Direct,
    Naive {
        hop: Hop,
        rng: RefCell<fastrand::Rng>,
    },
    Budgeted {
        hop: Hop,
        rng: RefCell<fastrand::Rng>,
        budget: RefCell<TpsBudget>,
    },
    Rampart {
        policy: Policy<Classifier>,
        hedged: bool,
    },
}

/// A caller's way to one service.
pub struct Client {
    target: Rc<Service>,
    how: How,
}

impl Client {
    /// One attempt, no timeout, nothing propagated: a load generator's plain call.
    pub fn direct(target: Rc<Service>) -> Rc<Client> {
        Rc::new(Client {
            target,
            how: How::Direct,
        })
    }

    /// Calls the target for root `trace` at `level` (the caller's current level).
    pub async fn call(&self, trace: Trace, level: Criticality) -> Reply {
        match &self.how {
            How::Direct => self.send(None, None, level, trace).await,
            How::Naive { hop, rng } => self.retry_loop(*hop, rng, None, trace, level).await,
            How::Budgeted { hop, rng, budget } => {
                self.retry_loop(*hop, rng, Some(budget), trace, level).await
            }
            How::Rampart { policy, hedged } => {
                let outcome = if *hedged {
                    policy
                        .run(async |attempt| self.attempt(attempt, trace, level).await)
                        .await
                } else {
                    policy
                        .run(async |attempt| self.attempt(attempt, trace, level).await)
                        .await
                };
                outcome.map_err(|e| failure_of(&e))
            }
        }
    }

    /// One rampart attempt: the wire carries `min(attempt ceiling, time left)` and the level.
    async fn attempt(&self, attempt: &Attempt, trace: Trace, level: Criticality) -> Reply {
        let deadline_ms = attempt
            .remaining()
            .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1));
        self.send(deadline_ms, Some(level.as_str()), level, trace)
            .await
    }

    async fn send(
        &self,
        deadline_ms: Option<u64>,
        criticality: Option<&'static str>,
        route: Criticality,
        trace: Trace,
    ) -> Reply {
        let receiver = self.target.submit(Request {
            deadline_ms,
            criticality,
            route,
            trace,
        });
        receiver.await.unwrap_or(Err(Failure::Error))
    }

    /// The baselines' loop: up to `attempts` tries, each under `timeout`, with full-jitter
    /// exponential backoff, and (budgeted) a retry only when the budget allows.
    async fn retry_loop(
        &self,
        hop: Hop,
        rng: &RefCell<fastrand::Rng>,
        budget: Option<&RefCell<TpsBudget>>,
        trace: Trace,
        level: Criticality,
    ) -> Reply {
        if let Some(budget) = budget {
            budget.borrow_mut().deposit(Instant::now());
        }
        let mut last = Err(Failure::Error);
        for attempt in 1..=hop.attempts {
            if attempt > 1 {
                if let Some(budget) = budget
                    && !budget.borrow_mut().withdraw(Instant::now())
                {
                    return last;
                }
                let cap = hop
                    .backoff
                    .saturating_mul(1 << (attempt - 2).min(20))
                    .min(Duration::from_secs(30));
                let delay = cap.mul_f64(rng.borrow_mut().f64());
                tokio::time::sleep(delay).await;
            }
            last = match tokio::time::timeout(hop.timeout, self.send(None, None, level, trace))
                .await
            {
                Ok(reply) => reply,
                Err(_) => Err(Failure::Timeout),
            };
            if last.is_ok() {
                return last;
            }
        }
        last
    }
}

/// How a rampart error looks to the simulated caller.
fn failure_of(error: &Error<Failure>) -> Failure {
    match error {
        Error::Inner(failure) => *failure,
        Error::DeadlineExceeded {
            source: DeadlineSource::Inherited,
            ..
        } => Failure::Expired,
        Error::DeadlineExceeded { .. } | Error::AttemptTimeout { .. } => Failure::Timeout,
        Error::Rejected { .. } => Failure::Refused,
        _ => Failure::Error,
    }
}

/// A retry budget written after tower's `TpsBudget`: each request deposits 1, each retry
/// withdraws `1 / percent`; deposits expire after `ttl` (in ten slots); a reserve of
/// `min_per_sec × ttl` retries is always there.
#[derive(Debug)]
pub struct TpsBudget {
    slots: [i64; 10],
    current: usize,
    slot_start: Option<Instant>,
    slot_len: Duration,
    reserve: i64,
    withdraw_amount: i64,
}

impl TpsBudget {
    /// A budget letting retries add `percent` of requests over `ttl`, plus `min_per_sec`.
    pub fn new(ttl: Duration, min_per_sec: u32, percent: f64) -> TpsBudget {
        let withdraw_amount = (1.0 / percent).round().max(1.0) as i64;
        TpsBudget {
            slots: [0; 10],
            current: 0,
            slot_start: None,
            slot_len: ttl / 10,
            reserve: i64::from(min_per_sec) * ttl.as_secs() as i64 * withdraw_amount,
            withdraw_amount,
        }
    }

    fn rotate(&mut self, now: Instant) {
        let start = *self.slot_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        let steps = (elapsed.as_nanos() / self.slot_len.as_nanos().max(1)) as u64;
        if steps == 0 {
            return;
        }
        for _ in 0..steps.min(10) {
            self.current = (self.current + 1) % 10;
            self.slots[self.current] = 0;
        }
        let moved = self
            .slot_len
            .saturating_mul(u32::try_from(steps).unwrap_or(u32::MAX));
        self.slot_start = Some(start + moved);
    }

    /// Records one request.
    pub fn deposit(&mut self, now: Instant) {
        self.rotate(now);
        self.slots[self.current] += 1;
    }

    /// Takes one retry's worth if there is one.
    pub fn withdraw(&mut self, now: Instant) -> bool {
        self.rotate(now);
        let balance = self.reserve + self.slots.iter().sum::<i64>();
        if balance >= self.withdraw_amount {
            self.slots[self.current] -= self.withdraw_amount;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_written_budget_allows_a_fifth_of_requests_plus_its_floor() {
        let mut budget = TpsBudget::new(Duration::from_secs(10), 0, 0.2);
        let now = Instant::now();
        for _ in 0..100 {
            budget.deposit(now);
        }
        let retries = (0..100).filter(|_| budget.withdraw(now)).count();
        assert_eq!(retries, 20);
        // Deposits expire after the window.
        let later = now + Duration::from_secs(11);
        assert!(!budget.withdraw(later));
        let mut floor = TpsBudget::new(Duration::from_secs(10), 1, 0.2);
        assert_eq!((0..100).filter(|_| floor.withdraw(now)).count(), 10);
    }
}
