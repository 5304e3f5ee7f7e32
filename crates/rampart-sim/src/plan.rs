//! The downstream calls of a service described by a graph file: steps one after another, the
//! calls of a step at once.
//!
//! A step is one or more entries of the file's `calls` (an entry with `with_previous = true`
//! joins the step before it); each entry makes `count` calls to one callee through one
//! client, at once or one after another, on every request or on a [`Share`] of them (drawn
//! for each request as the step starts, from the entry's own seeded generator, so that a run
//! stays a function of its seed). A handler's answer fails when any call failed: a step
//! waits for all its calls, and a failed step ends the handler (the steps after it are not
//! made), as a handler that returns its first error does.
//!
//! The calls of a step run in the handler's own task, polled together, rather than as a task
//! each: they see the handler's deadline and level as its own code would, and a simulated
//! request costs one task fewer per call (a tokio task is a 128-byte-aligned allocation,
//! which glibc serves from its slow path).

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;

use rampart::Criticality;

use crate::contender::Client;
use crate::service::{Reply, Trace};

/// One entry of a service's calls: `count` calls to one callee through `client`.
#[derive(Clone)]
pub struct Calls {
    /// The client of the callee (its policy, its propagation).
    pub client: Rc<Client>,
    /// How many calls.
    pub count: u32,
    /// At once (true) or one after another.
    pub parallel: bool,
    /// Made on a share of the requests only (`None`: on every request).
    pub share: Option<Rc<Share>>,
}

/// The share of a handler's requests that make an entry's calls, each request drawn from a
/// generator of the entry's own.
pub struct Share {
    /// The share, in (0, 1].
    of: f64,
    rng: RefCell<fastrand::Rng>,
}

impl Share {
    /// A share `of` the requests (in (0, 1]), drawn from a generator seeded with `seed`.
    pub fn new(of: f64, seed: u64) -> Rc<Share> {
        Rc::new(Share {
            of,
            rng: RefCell::new(fastrand::Rng::with_seed(seed)),
        })
    }

    /// Whether this request makes the calls (one draw).
    fn draw(&self) -> bool {
        self.rng.borrow_mut().f64() < self.of
    }
}

/// A service's calls: steps in order, each step's entries at once.
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Vec<Calls>>,
}

impl Plan {
    /// Makes every step in order for root `trace`, at the caller's current level; the first
    /// failure, after its step has finished.
    pub async fn call(&self, trace: Trace) -> Reply {
        let level = Criticality::current();
        for step in &self.steps {
            match step.as_slice() {
                [one] => {
                    if one.made() {
                        one.call(trace, level).await?;
                    }
                }
                entries => {
                    let legs: Vec<_> = entries
                        .iter()
                        .filter(|entry| entry.made())
                        .map(|entry| Box::pin(entry.call(trace, level)))
                        .collect();
                    join(legs).await?;
                }
            }
        }
        Ok(())
    }
}

impl Calls {
    /// Whether the request being handled makes this entry's calls (a draw when it has a
    /// share).
    fn made(&self) -> bool {
        self.share.as_ref().is_none_or(|share| share.draw())
    }

    async fn call(&self, trace: Trace, level: Criticality) -> Reply {
        if self.count == 1 {
            return self.client.call(trace, level).await;
        }
        if !self.parallel {
            for _ in 0..self.count {
                self.client.call(trace, level).await?;
            }
            return Ok(());
        }
        let legs: Vec<_> = (0..self.count)
            .map(|_| self.client.call(trace, level))
            .collect();
        join(legs).await
    }
}

/// Runs every leg at once in the caller's task (and its ambient scope), polling each that
/// has not answered whenever the task wakes; the first failure among them, in order.
async fn join<F: Future<Output = Reply> + Unpin>(legs: Vec<F>) -> Reply {
    let mut legs: Vec<(F, Option<Reply>)> = legs.into_iter().map(|leg| (leg, None)).collect();
    std::future::poll_fn(|task| {
        let mut waiting = false;
        for (leg, reply) in &mut legs {
            if reply.is_none() {
                match Pin::new(leg).poll(task) {
                    Poll::Ready(answer) => *reply = Some(answer),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            return Poll::Pending;
        }
        Poll::Ready(
            legs.iter()
                .try_for_each(|(_, reply)| reply.unwrap_or(Ok(()))),
        )
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rampart::Instant;

    use super::*;
    use crate::dist::LogNormal;
    use crate::service::{Admission, Downstream, Failure, ServerSide, Service, ServiceConfig};
    use crate::sim::virtual_time;

    const MS: Duration = Duration::from_millis(1);
    const PLAIN: ServerSide = ServerSide {
        admission: Admission::Fifo,
        inbound: false,
        reserve: Duration::ZERO,
        reject_expired: false,
        enforce: false,
    };

    fn leaf(name: &'static str, error_rate: f64) -> Rc<Service> {
        let mut c =
            ServiceConfig::new(name, 100, 100, LogNormal::from_median_p99(10 * MS, 10 * MS));
        c.faults.error_rate = error_rate;
        Service::new(c, PLAIN, Downstream::None, 1).expect("a service")
    }

    fn calls(service: &Rc<Service>, count: u32, parallel: bool) -> Calls {
        Calls {
            client: Client::direct(Rc::clone(service)),
            count,
            parallel,
            share: None,
        }
    }

    fn trace() -> Trace {
        Trace {
            root: 0,
            root_deadline: Instant::now() + Duration::from_secs(60),
            measured: true,
            span: None,
        }
    }

    /// Runs `plan(a, b)` on two 10 ms leaves (b failing `b_errors`); its reply, how long it
    /// took, and the requests each leaf saw.
    fn run(
        b_errors: f64,
        plan: fn(&Rc<Service>, &Rc<Service>) -> Plan,
    ) -> (Reply, Duration, u64, u64) {
        virtual_time(|| async move {
            let (a, b) = (leaf("a", 0.0), leaf("b", b_errors));
            let start = Instant::now();
            let reply = plan(&a, &b).call(trace()).await;
            (
                reply,
                Instant::now() - start,
                a.stats().arrivals,
                b.stats().arrivals,
            )
        })
        .expect("runtime")
    }

    #[test]
    fn steps_go_in_turn_and_the_calls_of_a_step_at_once() {
        let parallel = run(0.0, |a, b| Plan {
            steps: vec![vec![calls(a, 3, true), calls(b, 2, false)]],
        });
        assert_eq!(
            parallel,
            (Ok(()), 20 * MS, 3, 2),
            "b's two in turn bound the step"
        );
        let in_turn = run(0.0, |a, b| Plan {
            steps: vec![vec![calls(a, 3, false)], vec![calls(b, 1, true)]],
        });
        assert_eq!(in_turn, (Ok(()), 40 * MS, 3, 1));
    }

    #[test]
    fn a_failed_step_fails_the_handler_and_ends_it() {
        let failed = run(1.0, |a, b| Plan {
            steps: vec![vec![calls(b, 2, true)], vec![calls(a, 1, true)]],
        });
        assert_eq!(failed, (Err(Failure::Error), 10 * MS, 0, 2));
    }
}
