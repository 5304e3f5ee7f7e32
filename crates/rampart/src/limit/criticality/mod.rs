//! A criticality-aware limit: one capacity shared by the four levels, lower levels shed first.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{InFlight, TimeBase, held_retry_after};
use crate::admit::{Admit, AdmitContext, Feedback, Refusal};
use crate::clock::{Clock, Instant};
use crate::criticality::Criticality;
use crate::error::{ConfigError, ConfigProblem};
use crate::latency::TypicalLatency;

mod builder;
mod queue;
pub use builder::CriticalityLimitBuilder;
use queue::{Waiter, Waiters, can_finish};

const BY: &str = "criticality limit";
const MAX_HOLD: Duration = Duration::from_secs(3600);

/// A criticality-aware limit: one capacity shared by the four levels, lower levels shed first.
///
/// Under overload something must be refused, and it should be the backfill rather than the
/// checkout. [`CriticalityLimit`] holds `capacity` attempts in flight across every
/// [`Criticality`] level. When it is full, arrivals wait in a bounded queue ordered by level;
/// a freed slot goes to the highest waiting level. When the queue is full, a
/// higher-level arrival evicts the lowest-level waiter (refusing it) to take its place; an
/// arrival that nothing below it can make room for is refused. Once a level has been refused,
/// every level below it is refused at once for `hold`, so that lower levels do not slip in while
/// a higher one is being turned away.
///
/// Under sustained overload one level alone can offer more than the capacity (the checkout
/// itself at three times the load). Served in arrival order, its queue then grows until every
/// waiter has spent most of its deadline in it, and the work admitted is work whose caller is
/// about to give up: busy and useless. So, as careful servers do:
///
/// - **Work that cannot finish is not admitted from the queue** (on by default). A waiter whose ceiling
///   ([`AdmitContext::deadline`]) leaves less than `min_time_left` when a slot is handed to it
///   is refused instead, and the slot goes to the next; an arrival that would have to wait
///   with less than that left is refused at once.
/// - **Adaptive LIFO** (Facebook's, with a CoDel-style queue-delay target; off by default, on
///   with [`lifo_after`](CriticalityLimitBuilder::lifo_after)). Within a level, waiters are
///   served oldest first while the level's oldest waiter has waited at most `lifo_after`,
///   newest first once it has waited longer: the capacity goes to requests with their deadline
///   still ahead, and the backlog's old waiters run out of time instead. When the backlog is
///   gone the level is in arrival order again. It trades the top level's oldest waiters for
///   goodput: when the top level alone offers about the whole capacity, newest-first lets
///   more of that level's backlog run out of time than arrival order does, which is why it is
///   not the default (the CHANGELOG gives the simulator runs behind this choice).
/// - **A congested level running out of time is a refused level** (with `lifo_after` set). A
///   waiter that waited longer than `lifo_after` and then ran out of time (refused for it, or its caller gave up
///   at its ceiling) shows that its level's demand was not met: it counts as a refusal of its
///   level, so the waiters below it are shed with it and lower arrivals are refused for `hold`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), rampart::ConfigError> {
/// use rampart::{Criticality, Policy};
/// use rampart::limit::CriticalityLimit;
///
/// let limit = CriticalityLimit::builder(64).queue(32).build()?;
/// let policy = Policy::builder()
///     .admit(limit.clone())
///     .use_ambient_criticality(true) // the limit sheds by the caller's level
///     .build()?;
/// let v = Criticality::Sheddable
///     .scope(policy.run(async |_attempt| Ok::<_, std::io::Error>(7)))
///     .await;
/// assert_eq!(v.ok(), Some(7));
/// assert_eq!(limit.in_flight(), 0);
/// # Ok(()) }
/// ```
///
/// | knob | default | meaning |
/// |---|---|---|
/// | `capacity` | given | attempts in flight, every level together (at least 1); changed live with [`set_capacity`](CriticalityLimit::set_capacity) |
/// | `queue` | `capacity / 2`, at least 1 | waiters; `CriticalPlus` may wait beyond it (below) |
/// | `hold` | 1 s | how long a refusal of a level keeps the levels below it refused (at most 1 h) |
/// | `lifo_after` | `None` (always in arrival order) | with `Some(d)`, a level is served newest first once its oldest waiter has waited longer than `d` (100 ms is a common target) |
/// | `min_time_left` | the measured mean time a permit is held (0 until measured) | the least time before its ceiling a waiter must have left to be admitted from the queue |
/// | `clock` | [`Clock::system`] (tokio's) | read when a released permit hands its slot to a waiter; give it the policy's clock |
///
/// # Guarantees
///
/// - **Lower levels are shed first.** A level is refused only when no waiter below it is left to
///   evict, and after a level is refused, no lower level is admitted for `hold`: at no time is
///   a higher level refused while a lower one is being let in. (Work already admitted is not
///   pre-empted.)
/// - **The highest level waiting gets the next slot**; within a level the earliest, or the
///   newest while the level's earliest has waited longer than `lifo_after`.
/// - **Admitted from the queue only with `min_time_left` to spare**: a waiter granted a slot
///   has at least `min_time_left` before its ceiling. (An arrival admitted at once, with
///   nobody waiting, is admitted whatever its time left: the slot would otherwise be idle.)
/// - **`CriticalPlus` is never refused while its own demand fits**: it evicts any lower waiter,
///   waits beyond the queue bound, and is refused only when `CriticalPlus` attempts alone (in
///   flight and waiting) already fill the capacity.
/// - **Expired waiters go first.** When a request arrives, waiters that can no longer finish
///   (their ceiling ([`AdmitContext::deadline`]) has passed or leaves less than
///   `min_time_left`) are dropped (refused) before anything else is decided, so they neither
///   hold queue places nor cause evictions; one that waited longer than `lifo_after` is a
///   refusal of its level (above). An arrival with too little time left is admitted if there
///   is room at once, and otherwise refused without shedding anything. (Inside a policy the
///   executor stops waiting at the ceiling anyway, and the waiter leaves at once.)
/// - **Work-conserving**: while anyone waits, the capacity is full.
///
/// A refusal's retry-after is the measured mean time a permit is held (10 ms until measured),
/// or, for a level refused because a higher one was, the time until that `hold` ends.
///
/// Time is the caller's: the instant in the [`AdmitContext`] when a request asks, and the
/// limit's `clock` when a released permit hands its slot on (no caller's instant is at hand
/// there). A limit asked by a policy on a [`ManualClock`](crate::clock::ManualClock) must be
/// given that clock.
///
/// The level is the attempt's [`AdmitContext::level`]: the caller's ambient level when the
/// policy reads it ([`use_ambient_criticality`](crate::PolicyBuilder::use_ambient_criticality)),
/// else `Critical` for every call. A server layer asking the limit directly passes the level
/// it parsed.
///
/// # Thread safety and cancellation
///
/// `Send + Sync`, cheap to clone; clones share one capacity. The admitted fast path (a slot
/// free, nobody waiting, no level being shed) takes no lock and allocates nothing: a few
/// atomic reads, one compare-and-swap on the in-flight count, and the permit's reference to
/// the shared state. Waiting takes a mutex around the queue and one small
/// allocation (the waiter's channel); a release takes the mutex only when someone waits. Two
/// arrivals at the same instant race: one may take the last free slot on the fast path just
/// as the other starts to wait, whatever their levels.
///
/// A wait is cancel-safe: a dropped wait leaves the queue at once, and a slot handed to a
/// waiter that has just left is handed on to the next. A permit frees its slot when dropped,
/// on every path. A wait dropped after a congested wait once its time ran out counts as a
/// refusal of its level (see above); any other dropped wait changes nothing.
///
/// # Events
///
/// A refusal is reported by the executor as `Event::AttemptRefused { by: "criticality limit",
/// .. }`; an eviction is the evicted attempt's refusal.
#[derive(Clone)]
pub struct CriticalityLimit {
    inner: Arc<Inner>,
}

struct Inner {
    /// Changed live by [`CriticalityLimit::set_capacity`]; read afresh by each admission.
    capacity: AtomicUsize,
    queue: usize,
    hold: Duration,
    /// Nanoseconds a level's oldest waiter may wait before that level is served newest first.
    lifo_after: Option<u64>,
    /// The least time left a waiter must have to be admitted; `None`: the measured hold.
    min_time_left: Option<Duration>,
    /// Read when a released permit hands its slot on (no caller's instant is at hand there).
    clock: Clock,
    in_flight: InFlight,
    /// `CriticalPlus` permits held.
    critical_plus: AtomicUsize,
    /// Waiters in `waiters`, readable without the lock. Written under it.
    waiting: AtomicUsize,
    /// Per level: until when (nanoseconds since `time`'s base) the levels below it are refused.
    shed_until: [AtomicU64; 4],
    time: TimeBase,
    held: TypicalLatency,
    waiters: Mutex<Waiters>,
}

type Answer = Result<CriticalityPermit, Refusal>;

/// What the slow path decided.
enum Queued {
    /// Admitted or refused at once.
    Answered(Answer),
    /// Waiting, as waiter `id`, for the answer on the receiver.
    Waiting(u64, oneshot::Receiver<Answer>),
}

/// Held while an attempt admitted by a [`CriticalityLimit`] runs; dropping it frees the slot
/// (to the highest-level waiter, if any).
#[must_use = "dropping the permit frees its slot at once"]
pub struct CriticalityPermit {
    inner: Arc<Inner>,
    level: Criticality,
    /// False once its slot has been accounted for elsewhere: dropping it then does nothing.
    armed: bool,
}

impl CriticalityLimit {
    /// `capacity` in flight, with the default queue and hold.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when `capacity` is 0.
    pub fn new(capacity: usize) -> Result<CriticalityLimit, ConfigError> {
        CriticalityLimit::builder(capacity).build()
    }

    /// A builder for `capacity` in flight.
    pub fn builder(capacity: usize) -> CriticalityLimitBuilder {
        CriticalityLimitBuilder {
            capacity,
            queue: None,
            hold: Duration::from_secs(1),
            lifo_after: None,
            min_time_left: None,
            clock: Clock::system(),
        }
    }

    /// Attempts in flight right now, every level together.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.get()
    }

    /// Attempts waiting right now.
    pub fn queued(&self) -> usize {
        self.inner.waiting.load(SeqCst)
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// Changes the capacity while the limit serves, for every clone. A capacity of 0 is
    /// refused, as [`build`](CriticalityLimitBuilder::build) refuses it, and changes nothing.
    ///
    /// A larger capacity hands its new slots to the waiters at once, highest level first (as a
    /// released permit would). A smaller one pre-empts nothing: the attempts in flight finish,
    /// and no attempt is admitted until fewer than the new capacity are in flight. The queue's
    /// bound stays as built. An admission racing the update may still see the old capacity.
    ///
    /// ```
    /// use rampart::limit::CriticalityLimit;
    ///
    /// let limit = CriticalityLimit::new(64)?;
    /// limit.set_capacity(16)?;
    /// assert_eq!(limit.capacity(), 16);
    /// let refused = limit.set_capacity(0).unwrap_err();
    /// assert_eq!(refused.to_string(), "criticality_limit.capacity must be at least 1 (was 0)");
    /// assert_eq!(limit.capacity(), 16);
    /// # Ok::<(), rampart::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when `capacity` is 0; the limit keeps its capacity.
    pub fn set_capacity(&self, capacity: usize) -> Result<(), ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::new(vec![zero_capacity()]));
        }
        let inner = &self.inner;
        let old = inner.capacity.swap(capacity, SeqCst);
        if capacity > old && inner.waiting.load(SeqCst) > 0 {
            let now = inner.time.nanos(inner.clock.now());
            let mut waiters = inner.lock();
            inner.pump(&mut waiters, now);
        }
        Ok(())
    }

    /// The lowest level not refused outright at `now` (`Sheddable` while nothing is being
    /// shed): levels below it are refused at once because a higher level was refused within
    /// `hold`.
    pub fn lowest_admitted(&self, now: Instant) -> Criticality {
        let now = self.inner.time.nanos(now);
        Criticality::ALL
            .into_iter()
            .find(|&level| self.inner.shed(level, now).is_none())
            .unwrap_or(Criticality::CriticalPlus)
    }
}

/// What [`CriticalityLimitBuilder::build`] and [`CriticalityLimit::set_capacity`] say of a
/// capacity of 0.
fn zero_capacity() -> ConfigProblem {
    ConfigProblem::new("criticality_limit.capacity", "must be at least 1 (was 0)")
}

impl Inner {
    fn capacity(&self) -> usize {
        self.capacity.load(SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Until when `level` is refused because a level above it was, if it is at `now`.
    #[inline]
    fn shed(&self, level: Criticality, now: u64) -> Option<u64> {
        self.shed_until[level as usize + 1..]
            .iter()
            .map(|until| until.load(Relaxed))
            .filter(|&until| until > now)
            .max()
    }

    /// Records a refusal of `level` at `now`: the levels below it are refused for `hold`.
    fn refused(&self, level: Criticality, now: u64) {
        if level > Criticality::Sheddable {
            let hold = u64::try_from(self.hold.as_nanos()).unwrap_or(u64::MAX);
            self.shed_until[level as usize].fetch_max(now.saturating_add(hold), Relaxed);
        }
    }

    fn full(&self) -> Refusal {
        Refusal {
            retry_after: Some(held_retry_after(&self.held)),
            by: BY,
        }
    }

    fn permit(self: &Arc<Self>, level: Criticality) -> CriticalityPermit {
        if level == Criticality::CriticalPlus {
            self.critical_plus.fetch_add(1, Relaxed);
        }
        CriticalityPermit {
            inner: Arc::clone(self),
            level,
            armed: true,
        }
    }

    /// Gives back the slot of a permit that is being dropped, or was never handed out.
    fn free(&self, level: Criticality) {
        if level == Criticality::CriticalPlus {
            self.critical_plus.fetch_sub(1, Relaxed);
        }
        self.in_flight.leave();
    }

    /// Whether `waiter`'s level is congested at `now`: it has waited longer than `lifo_after`.
    fn congested(&self, waiter: &Waiter, now: u64) -> bool {
        self.lifo_after
            .is_some_and(|after| now.saturating_sub(waiter.since) > after)
    }

    /// Refuses a waiter that can no longer finish; returns whether it waited longer than
    /// `lifo_after`. Then its level was congested, not merely short of time: the caller must
    /// treat it as a refusal of the level ([`Inner::shed_below`]).
    fn out_of_time(&self, waiter: Waiter, now: u64) -> bool {
        let congested = self.congested(&waiter, now);
        let _ = waiter.answer.send(Err(self.full()));
        congested
    }

    /// Records a refusal of `level` at `now` and sheds every waiter below it, as the hold
    /// would refuse them on arrival.
    fn shed_below(&self, waiters: &mut Waiters, level: Criticality, now: u64) {
        self.refused(level, now);
        for lower in Criticality::ALL.into_iter().filter(|&l| l < level) {
            for waiter in waiters.levels[lower as usize].drain(..) {
                self.refused(lower, now);
                let until = self.shed(lower, now).unwrap_or(now);
                let _ = waiter.answer.send(Err(Refusal {
                    retry_after: Some(
                        Duration::from_nanos(until - now).max(Duration::from_nanos(1)),
                    ),
                    by: BY,
                }));
            }
        }
        self.waiting.store(waiters.len(), SeqCst);
    }

    /// The least time left that a waiter must have to be admitted from the queue.
    fn min_time_left(&self) -> u64 {
        let min = self.min_time_left.unwrap_or_else(|| self.held.get());
        u64::try_from(min.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Hands free slots to the highest waiters at `now` until the capacity or the queue runs
    /// out. Within a level the oldest goes first, or the newest once the oldest has waited
    /// longer than `lifo_after`; a waiter picked that can no longer finish (less than
    /// `min_time_left` left) is refused instead, and the slot goes to the next.
    fn pump(self: &Arc<Self>, waiters: &mut Waiters, now: u64) {
        let min = self.min_time_left();
        while let Some(level) = waiters.highest() {
            let queue = &mut waiters.levels[level as usize];
            let newest = queue
                .front()
                .is_some_and(|oldest| self.congested(oldest, now));
            let picked = if newest {
                queue.pop_back()
            } else {
                queue.pop_front()
            };
            let Some(waiter) = picked else {
                return;
            };
            if !can_finish(waiter.deadline, now, min) {
                self.waiting.store(waiters.len(), SeqCst);
                if self.out_of_time(waiter, now) {
                    self.shed_below(waiters, level, now);
                }
                continue;
            }
            if !self.in_flight.try_enter(self.capacity()) {
                // No slot: it goes back where it was.
                let queue = &mut waiters.levels[level as usize];
                if newest {
                    queue.push_back(waiter);
                } else {
                    queue.push_front(waiter);
                }
                return;
            }
            self.waiting.store(waiters.len(), SeqCst);
            if let Err(Ok(mut permit)) = waiter.answer.send(Ok(self.permit(level))) {
                // The waiter left just now: take the slot back and offer it to the next one.
                permit.armed = false;
                self.free(level);
            }
        }
    }

    /// The slow path, under the lock: drop expired waiters, serve the queue, then admit,
    /// queue or refuse `level`.
    fn enqueue(self: &Arc<Self>, level: Criticality, now: u64, deadline: Option<u64>) -> Queued {
        let mut waiters = self.lock();
        let min = self.min_time_left();
        let mut congested = None;
        waiters.expire(now, min, |level, expired| {
            if self.out_of_time(expired, now) {
                congested = congested.max(Some(level));
            }
        });
        if let Some(congested) = congested {
            self.shed_below(&mut waiters, congested, now);
        }
        self.waiting.store(waiters.len(), SeqCst);
        if let Some(until) = self.shed(level, now) {
            // A level above it has just been refused.
            self.refused(level, now);
            return Queued::Answered(Err(Refusal {
                retry_after: Some(Duration::from_nanos(until - now)),
                by: BY,
            }));
        }
        self.pump(&mut waiters, now);
        if waiters.is_empty() && self.in_flight.try_enter(self.capacity()) {
            return Queued::Answered(Ok(self.permit(level)));
        }
        if !can_finish(deadline, now, min) {
            // Too little time left already: it would only wait to be dropped. Not shed:
            // nothing else is refused for it, and it evicts nobody.
            return Queued::Answered(Err(self.full()));
        }
        if waiters.len() >= self.queue {
            match waiters.lowest() {
                Some(lowest) if lowest < level => {
                    if let Some(evicted) = waiters.levels[lowest as usize].pop_back() {
                        self.refused(lowest, now);
                        let _ = evicted.answer.send(Err(self.full()));
                    }
                }
                _ if level == Criticality::CriticalPlus
                    && self.critical_plus.load(Relaxed) + waiters.levels[3].len()
                        < self.capacity() => {}
                _ => {
                    self.refused(level, now);
                    return Queued::Answered(Err(self.full()));
                }
            }
        }
        let (answer, receiver) = oneshot::channel();
        let id = waiters.next_id;
        waiters.next_id += 1;
        waiters.levels[level as usize].push_back(Waiter {
            id,
            since: now,
            deadline,
            answer,
        });
        self.waiting.store(waiters.len(), SeqCst);
        // A permit given back between the capacity check above and the store just made saw
        // nobody waiting and freed its slot without serving the queue: serve it now.
        self.pump(&mut waiters, now);
        Queued::Waiting(id, receiver)
    }
}

/// Takes a waiter out of the queue if its wait is dropped before it is answered.
struct Leave<'a> {
    inner: &'a Inner,
    level: Criticality,
    id: u64,
    answered: bool,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if !self.answered {
            let inner = self.inner;
            let mut waiters = inner.lock();
            let left = waiters.remove(self.level, self.id);
            inner.waiting.store(waiters.len(), SeqCst);
            // A waiter that gives up at its ceiling after a congested wait was turned away by
            // its level's demand, as if the limit had refused it.
            if let Some(waiter) = left {
                let now = inner.time.nanos(inner.clock.now());
                if inner.congested(&waiter, now)
                    && !can_finish(waiter.deadline, now, inner.min_time_left())
                {
                    inner.shed_below(&mut waiters, self.level, now);
                }
            }
        }
    }
}

impl Drop for CriticalityPermit {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let inner = &self.inner;
        inner.free(self.level);
        if inner.waiting.load(SeqCst) > 0 {
            let now = inner.time.nanos(inner.clock.now());
            inner.pump(&mut inner.lock(), now);
        }
    }
}

impl fmt::Debug for CriticalityPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CriticalityPermit")
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl Admit for CriticalityLimit {
    type Permit = CriticalityPermit;

    fn load(&self) -> crate::admit::Load {
        crate::admit::Load::new(Some(self.in_flight()), Some(self.queued()))
    }

    async fn acquire(&self, cx: &AdmitContext<'_>) -> Result<CriticalityPermit, Refusal> {
        let inner = &self.inner;
        let level = cx.level;
        let now = inner.time.nanos(cx.now);
        if let Some(until) = inner.shed(level, now) {
            inner.refused(level, now);
            return Err(Refusal {
                retry_after: Some(Duration::from_nanos(until - now)),
                by: BY,
            });
        }
        if inner.waiting.load(SeqCst) == 0 && inner.in_flight.try_enter(inner.capacity()) {
            return Ok(inner.permit(level));
        }
        let deadline = cx.deadline.map(|d| inner.time.nanos(d));
        let (id, receiver) = match inner.enqueue(level, now, deadline) {
            Queued::Answered(answer) => return answer,
            Queued::Waiting(id, receiver) => (id, receiver),
        };
        let mut leave = Leave {
            inner,
            level,
            id,
            answered: false,
        };
        let answer = receiver.await;
        leave.answered = true;
        // The sender is dropped unanswered only by a waiter's own removal: not reachable here.
        answer.unwrap_or_else(|_| Err(inner.full()))
    }

    fn release(&self, permit: CriticalityPermit, feedback: Feedback) {
        self.inner.held.record(feedback.elapsed);
        drop(permit);
    }
}

impl fmt::Debug for CriticalityLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CriticalityLimit")
            .field("capacity", &self.capacity())
            .field("queue", &self.inner.queue)
            .field("hold", &self.inner.hold)
            .field(
                "lifo_after",
                &self.inner.lifo_after.map(Duration::from_nanos),
            )
            .field("min_time_left", &self.inner.min_time_left)
            .field("in_flight", &self.in_flight())
            .field("queued", &self.queued())
            .finish()
    }
}
