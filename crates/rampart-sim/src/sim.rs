//! The engine: a current-thread tokio runtime on paused time (timers fire in virtual time,
//! which jumps ahead whenever every task is idle), and the edge that sends root requests.
//!
//! Minutes of traffic take seconds, and a run depends only on its seed: there is one thread,
//! tokio schedules its tasks in a fixed order, and every random draw comes from a seeded
//! generator.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use rampart::{Ambient, Criticality, Deadline, Instant};

use crate::SimError;
use crate::contender::Client;
use crate::dist::exponential;
use crate::service::Trace;

/// Runs `make()`'s future to completion on a fresh current-thread runtime with paused time,
/// inside a `LocalSet` (so simulated services can share state through `Rc`).
pub fn virtual_time<F, Fut>(make: F) -> Result<Fut::Output, SimError>
where
    F: FnOnce() -> Fut,
    Fut: Future,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| SimError::new(format!("cannot start the runtime: {e}")))?;
    let local = tokio::task::LocalSet::new();
    Ok(local.block_on(&runtime, async move { make().await }))
}

/// The shares of root requests at each level, by [`Criticality`] order (`Sheddable` first).
pub type Mix = [f64; 4];

/// Every root request `Critical`.
pub const ALL_CRITICAL: Mix = [0.0, 0.0, 1.0, 0.0];

/// The offered load: a rate in requests per second for each span of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    /// `(until, rate)`: the rate holds until that offset from the start; the last one holds to
    /// the end.
    pub phases: Vec<(Duration, f64)>,
    /// How long root requests are sent.
    pub duration: Duration,
    /// Roots sent before this offset are not measured.
    pub warmup: Duration,
    /// How long the edge waits for each root (its deadline).
    pub patience: Duration,
    /// `(from, patience)`: roots sent from that offset on get this patience instead (the
    /// edge's budget changing at run time).
    pub patience_change: Option<(Duration, Duration)>,
    /// The level mix.
    pub mix: Mix,
}

impl Load {
    /// A constant rate.
    pub fn constant(rate: f64, duration: Duration, warmup: Duration, patience: Duration) -> Load {
        Load {
            phases: vec![(duration, rate)],
            duration,
            warmup,
            patience,
            patience_change: None,
            mix: ALL_CRITICAL,
        }
    }

    /// The patience of a root sent at `offset`.
    pub fn patience_at(&self, offset: Duration) -> Duration {
        match self.patience_change {
            Some((from, patience)) if offset >= from => patience,
            _ => self.patience,
        }
    }

    fn rate_at(&self, at: Duration) -> f64 {
        self.phases
            .iter()
            .find(|(until, _)| at < *until)
            .or(self.phases.last())
            .map_or(0.0, |&(_, rate)| rate)
    }
}

/// What became of one root request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Root {
    /// When it was sent, from the start of the run.
    pub sent: Duration,
    /// Its level.
    pub level: Criticality,
    /// Whether it falls in the measured window.
    pub measured: bool,
    /// Its latency, when it was answered `Ok` within the edge's patience.
    pub answered: Option<Duration>,
}

/// The edge: sends root requests through `client` at the load's rates (Poisson arrivals), each
/// inside an ambient scope with the edge's deadline (`patience`) and the root's level, and
/// stops waiting for each at its deadline. Returns every root once the load has ended and
/// `linger` more has passed (so measured work downstream can finish).
pub async fn drive(client: Rc<Client>, load: &Load, seed: u64, linger: Duration) -> Vec<Root> {
    let start = Instant::now();
    let roots: Rc<RefCell<Vec<Root>>> = Rc::new(RefCell::new(Vec::new()));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut next = 0.0f64;
    loop {
        let rate = load.rate_at(Duration::from_secs_f64(next));
        next += exponential(&mut rng, 1.0 / rate.max(1e-9));
        let at = Duration::from_secs_f64(next);
        if at >= load.duration {
            break;
        }
        tokio::time::sleep_until(start + at).await;
        let level = pick(&mut rng, &load.mix);
        let sent = Instant::now();
        let id = {
            let mut roots = roots.borrow_mut();
            roots.push(Root {
                sent: sent - start,
                level,
                measured: at >= load.warmup,
                answered: None,
            });
            roots.len() - 1
        };
        let patience = load.patience_at(at);
        let trace = Trace {
            root: id as u64,
            root_deadline: sent + patience,
            measured: at >= load.warmup,
            span: None,
        };
        let ambient = Ambient::new()
            .with_deadline(Deadline::at(sent + patience))
            .with_criticality(level);
        let client = Rc::clone(&client);
        let roots = Rc::clone(&roots);
        tokio::task::spawn_local(async move {
            let call = ambient.scope(client.call(trace, level));
            if let Ok(Ok(())) = tokio::time::timeout(patience, call).await
                && let Some(root) = roots.borrow_mut().get_mut(id)
            {
                root.answered = Some(Instant::now() - sent);
            }
        });
    }
    tokio::time::sleep_until(start + load.duration + linger).await;
    roots.borrow().clone()
}

fn pick(rng: &mut fastrand::Rng, mix: &Mix) -> Criticality {
    let mut draw = rng.f64() * mix.iter().sum::<f64>();
    for (level, share) in Criticality::ALL.into_iter().zip(mix) {
        if draw < *share {
            return level;
        }
        draw -= share;
    }
    Criticality::Critical
}

/// The `q` quantile of sorted durations (nearest rank), zero when empty.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
