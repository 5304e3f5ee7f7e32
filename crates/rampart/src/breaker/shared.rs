//! The shared state behind every clone of a [`Breaker`](super::Breaker), and the rules that
//! move it: what an outcome does in each state, and how long a break lasts.

use std::sync::{OnceLock, PoisonError};
use std::time::Duration;

use super::builder::{Config, Mode};
use super::window::{Place, Window};
use super::word::{self, MAX_NANOS, Word};
use super::{Evidence, StateKind, Transition};
use crate::clock::Instant;
use crate::swap::Swap;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What only transitions touch, behind the mutex.
pub(super) struct Transitions {
    generation: u32,
    /// Consecutive openings since the last full close.
    pub(super) openings: u32,
    rng: fastrand::Rng,
    /// The half-open generation whose first probe followed a re-opening by expired probes,
    /// and that re-opening's break in nanoseconds (see `BreakerPermit::expired`): kept here,
    /// not in the permit a call holds across its attempt, so that the permit stays small.
    pub(super) expired: (u32, u64),
}

impl Transitions {
    pub(super) fn next_generation(&mut self) -> u32 {
        self.generation = self.generation.wrapping_add(1) & word::GEN_MASK;
        self.generation
    }
}

pub(super) struct Shared {
    /// The settings, replaced whole by [`Breaker::reconfigure`](super::Breaker::reconfigure)
    /// (under the transition lock); read where a threshold is needed, never on the success
    /// path of a closed breaker.
    config: Swap<Tuned>,
    /// `config.slow_call` in nanoseconds, 0 when off: what a success reads.
    slow_call: AtomicU64,
    /// `config.dry_run`.
    dry_run: AtomicBool,
    word: AtomicU64,
    base: OnceLock<Instant>,
    pub(super) window: Option<Window>,
    /// When the last probe of the current half-open period was let in (nanoseconds since the
    /// time base). Written under the transition lock; read without it only to decide whether
    /// to take the lock.
    probe_since: AtomicU64,
    transitions: Mutex<Transitions>,
    /// Who is told of manual changes (the policies built with this breaker, while they live).
    watchers: std::sync::Mutex<Vec<std::sync::Weak<dyn super::Watcher>>>,
}

/// One version of the settings, with what is derived from them.
#[derive(Debug)]
pub(super) struct Tuned {
    pub(super) config: Config,
    /// Ratio mode's threshold as an exact fraction.
    threshold: Fraction,
    /// `config.probe_timeout` in nanoseconds.
    probe_timeout: u64,
}

impl Tuned {
    fn new(config: Config) -> Tuned {
        let threshold = match config.mode {
            Mode::Ratio { ratio, .. } => Fraction::of_decimal(ratio),
            Mode::Consecutive { .. } => Fraction { num: 1, den: 1 },
        };
        Tuned {
            probe_timeout: nanos_of(config.probe_timeout).max(1),
            threshold,
            config,
        }
    }
}

/// A ratio as `num / den`, compared in integers so that a rate exactly at the threshold is at
/// the threshold (7 failures of 25 are 28 %; `0.28 * 25.0` is `7.000000000000001`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fraction {
    num: u64,
    den: u64,
}

impl Fraction {
    /// `ratio` (in `[0, 1]`) as the decimal fraction with the fewest digits (up to 18) that
    /// reads back as exactly `ratio`: the number as it was written, `0.28` as 28/100 and not the
    /// binary `0.28000000000000002665`. A ratio needing more digits is rounded to 18.
    pub(super) fn of_decimal(ratio: f64) -> Fraction {
        let mut den = 1u64;
        loop {
            // `ratio <= 1` and `den <= 10^18`, so the product fits a `u64`.
            let num = (ratio * den as f64).round();
            if num / den as f64 == ratio || den == 10u64.pow(18) {
                return Fraction {
                    num: num as u64,
                    den,
                };
            }
            den *= 10;
        }
    }

    /// Whether `part / whole` is at least this fraction.
    pub(super) fn reached_by(self, part: u64, whole: u64) -> bool {
        u128::from(part) * u128::from(self.den) >= u128::from(self.num) * u128::from(whole)
    }
}

impl Shared {
    pub(super) fn new(config: Config) -> Shared {
        let window = match config.mode {
            Mode::Ratio { window, .. } => Some(Window::new(nanos_of(window).max(1))),
            Mode::Consecutive { .. } => None,
        };
        let rng = config
            .seed
            .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let transitions = Transitions {
            generation: 0,
            openings: 0,
            rng,
            expired: (0, 0),
        };
        Shared {
            slow_call: AtomicU64::new(config.slow_call.map_or(0, nanos_of)),
            dry_run: AtomicBool::new(config.dry_run),
            config: Swap::new(Tuned::new(config)),
            word: AtomicU64::new(Word::closed(0, 0).0),
            base: OnceLock::new(),
            window,
            probe_since: AtomicU64::new(0),
            transitions: Mutex::new(transitions),
            watchers: std::sync::Mutex::default(),
        }
    }

    /// The settings now.
    pub(super) fn config(&self) -> &Tuned {
        self.config.load()
    }

    /// Whether the breaker only observes.
    pub(super) fn is_dry_run(&self) -> bool {
        self.dry_run.load(Ordering::Relaxed)
    }

    /// How many updates replaced the breaker's first settings.
    #[cfg(test)]
    pub(super) fn updates(&self) -> usize {
        self.config.stores()
    }

    /// Replaces the settings with `config` (valid, and of the same mode kind and ratio window
    /// as the running ones); call under the transition lock. `false` when the breaker has
    /// taken as many updates as it can keep.
    pub(super) fn replace_config(&self, _transitions: &mut Transitions, config: Config) -> bool {
        let (slow_call, dry_run) = (config.slow_call.map_or(0, nanos_of), config.dry_run);
        if self.config.store(Tuned::new(config)).is_err() {
            return false;
        }
        self.slow_call.store(slow_call, Ordering::Relaxed);
        self.dry_run.store(dry_run, Ordering::Relaxed);
        true
    }

    /// The watchers of manual changes, locked.
    pub(super) fn watchers(
        &self,
    ) -> std::sync::MutexGuard<'_, Vec<std::sync::Weak<dyn super::Watcher>>> {
        self.watchers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    pub(super) fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// Compare-and-swap of the state word; whether it took.
    pub(super) fn swap(&self, current: Word, next: Word) -> bool {
        self.word
            .compare_exchange(current.0, next.0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(super) fn lock(&self) -> impl std::ops::DerefMut<Target = Transitions> + '_ {
        self.transitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn transition(&self, from: Word, to: Word, break_nanos: Option<u64>) -> Transition {
        Transition {
            from: from.kind(),
            to: to.kind(),
            break_duration: break_nanos.map(Duration::from_nanos),
        }
    }

    /// `now` in nanoseconds since the time base (fixed by the first call that needs it).
    pub(super) fn nanos(&self, now: Instant) -> u64 {
        let base = *self.base.get_or_init(|| now);
        nanos_of(now.saturating_duration_since(base)).min(MAX_NANOS)
    }

    /// Notes that a probe was let in at `t`; call under the transition lock, after the word
    /// records the probe.
    pub(super) fn probe_admitted(&self, _transitions: &mut Transitions, t: u64) {
        self.probe_since.store(t, Ordering::Release);
    }

    /// Whether, at `t`, the probes in flight have waited out the probe timeout since the last
    /// one was let in. Without the transition lock this is only a hint.
    pub(super) fn probes_expired(&self, t: u64) -> bool {
        let since = self.probe_since.load(Ordering::Acquire);
        t >= since.saturating_add(self.config().probe_timeout)
    }

    /// Counts the probes in flight as failed and re-opens, if the word is still `seen` (every
    /// slot taken) and they have outlived the probe timeout at `t`. The break runs from the
    /// instant the probe timeout passed, not from `t` (the first acquire to notice it), so a
    /// caller arriving after that break is a trial. Probe admissions take the transition lock
    /// too, so no probe can be let in between this check and the re-opening. `None` when
    /// something changed: the caller looks at the word again.
    pub(super) fn expire_probes(&self, seen: Word, t: u64) -> Option<Transition> {
        let mut transitions = self.lock();
        if self.load() != seen || !self.probes_expired(t) {
            return None;
        }
        let since = self.probe_since.load(Ordering::Acquire);
        let expired_at = since.saturating_add(self.config().probe_timeout).min(t);
        self.open(&mut transitions, seen, expired_at)
    }

    /// Opens from `from` at `t` if the word is still `from`, under the transition lock.
    fn open(&self, transitions: &mut Transitions, from: Word, t: u64) -> Option<Transition> {
        let openings = transitions.openings.saturating_add(1);
        let nanos = self.break_nanos(openings, &mut transitions.rng);
        let next = Word::open(t.saturating_add(nanos));
        if !self.swap(from, next) {
            return None;
        }
        transitions.openings = openings;
        Some(self.transition(from, next, Some(nanos)))
    }

    /// The break for the `openings`-th consecutive opening: doubled per opening, capped, then
    /// shortened by jitter. At least 1 ns.
    pub(super) fn break_nanos(&self, openings: u32, rng: &mut fastrand::Rng) -> u64 {
        let tuned = self.config();
        let config = &tuned.config;
        let base = nanos_of(config.break_duration).max(1);
        let doubling = 1u64 << openings.saturating_sub(1).min(63);
        let nominal = base
            .saturating_mul(doubling)
            .min(nanos_of(config.max_break))
            .max(1);
        if config.jitter <= 0.0 {
            return nominal;
        }
        // `nominal * u * jitter` < `nominal`; the float-to-int cast saturates.
        let cut = (nominal as f64 * rng.f64() * config.jitter) as u64;
        nominal - cut.min(nominal - 1)
    }

    /// Records an attempt admitted at `admitted`. Always inlined, as is the permit's
    /// [`record`](super::BreakerPermit::record) that calls it: the common success is a few
    /// loads, and everything else is out of line.
    #[inline(always)]
    pub(super) fn record(
        &self,
        admitted: Word,
        evidence: Evidence,
        elapsed: Duration,
        now: Instant,
    ) -> Option<Transition> {
        // The common success, inlined into the caller: no slow-call threshold, a closed
        // breaker and nothing moved since admission (so the same period). In consecutive
        // mode with no failures counted there is nothing to write; in ratio mode the success
        // is counted in the window, and a success never opens.
        if evidence == Evidence::Success
            && self.slow_call.load(Ordering::Relaxed) == 0
            && self.load() == admitted
            && !admitted.is_half_open()
        {
            match &self.window {
                None if admitted.failures() == 0 => return None,
                None => {}
                Some(window) => {
                    let place = match window.recent(now) {
                        Some(place) => place,
                        None => self.place(window, now),
                    };
                    window.record_at(place, false);
                    return None;
                }
            }
        }
        self.record_slow(admitted, evidence, elapsed, now)
    }

    /// Where this thread counts a call at `now` in `window`, measured from the time base;
    /// remembered with the instants its bucket runs between, so that the next success in it
    /// finds it by comparing instants ([`Window::recent`]).
    #[inline(never)]
    fn place(&self, window: &Window, now: Instant) -> Place {
        let bucket = window.bucket_of(self.nanos(now));
        let place = window.place(bucket);
        if let (Some(base), Some((from, until))) = (self.base.get(), window.bucket_span(bucket))
            && let (Some(from), Some(until)) = (
                base.checked_add(Duration::from_nanos(from)),
                base.checked_add(Duration::from_nanos(until)),
            )
            && from <= now
            && now < until
        {
            window.remember(place, from, until);
        }
        place
    }

    /// [`record`](Self::record) for everything but the common success.
    #[inline(never)]
    fn record_slow(
        &self,
        admitted: Word,
        evidence: Evidence,
        elapsed: Duration,
        now: Instant,
    ) -> Option<Transition> {
        let failure = match evidence {
            Evidence::Ignored => {
                if admitted.is_half_open() {
                    self.release_probe(admitted);
                }
                return None;
            }
            Evidence::Failure => true,
            Evidence::Success => match self.slow_call.load(Ordering::Relaxed) {
                0 => false,
                slow => nanos_of(elapsed) >= slow,
            },
        };
        if admitted.is_half_open() {
            self.probe_outcome(admitted, failure, now)
        } else {
            self.closed_outcome(admitted, failure, now)
        }
    }

    /// A probe ended without a verdict: free its slot (if its half-open period still runs).
    pub(super) fn release_probe(&self, admitted: Word) {
        loop {
            let word = self.load();
            if !word.same_period(admitted) {
                return;
            }
            let in_flight = word.in_flight().saturating_sub(1);
            if self.swap(
                word,
                Word::half_open(word.generation(), in_flight, word.successes()),
            ) {
                return;
            }
        }
    }

    fn probe_outcome(&self, admitted: Word, failure: bool, now: Instant) -> Option<Transition> {
        let t = self.nanos(now);
        let mut transitions = self.lock();
        loop {
            let word = self.load();
            if !word.same_period(admitted) {
                return None;
            }
            if failure {
                match self.open(&mut transitions, word, t) {
                    Some(transition) => return Some(transition),
                    None => continue,
                }
            }
            let successes = word.successes() + 1;
            if successes < self.config().config.probe_successes {
                let in_flight = word.in_flight().saturating_sub(1);
                if self.swap(
                    word,
                    Word::half_open(word.generation(), in_flight, successes),
                ) {
                    return None;
                }
                continue;
            }
            if let Some(window) = &self.window {
                window.clear();
            }
            let next = Word::closed(transitions.next_generation(), 0);
            if self.swap(word, next) {
                transitions.openings = 0;
                return Some(self.transition(word, next, None));
            }
        }
    }

    /// An outcome admitted in a closed-family period, counted if that period still runs, by
    /// the rule of the state it is in now (admitted closed and recorded after `force_closed`,
    /// or the other way round after `release`): forced closed counts and never opens.
    fn closed_outcome(&self, admitted: Word, failure: bool, now: Instant) -> Option<Transition> {
        if self.window.is_some() {
            return self.ratio_outcome(admitted, failure, now);
        }
        let mut threshold = None;
        loop {
            let word = self.load();
            if !failure && word == admitted && word.failures() == 0 {
                // The common success: nothing moved since admission, nothing to reset.
                return None;
            }
            if !word.same_period(admitted) || (!failure && word.failures() == 0) {
                return None;
            }
            let failures = if failure {
                word.failures().saturating_add(1)
            } else {
                0
            };
            if failure && word.kind() != StateKind::ForcedClosed {
                let threshold = *threshold.get_or_insert_with(|| self.consecutive_threshold());
                if failures >= threshold {
                    break;
                }
            }
            // A compare-and-swap on `word` itself: a switch between closed and forced closed
            // meanwhile fails it, and the next turn reads the new kind.
            if self.swap(word, word.with_failures(failures)) {
                return None;
            }
        }
        // This failure reaches the threshold: open, unless the word moved on meanwhile.
        let t = self.nanos(now);
        let mut transitions = self.lock();
        loop {
            let word = self.load();
            if !word.same_period(admitted) {
                return None;
            }
            let failures = word.failures().saturating_add(1);
            // Read again under the lock: forced closed meanwhile, or an update raised the
            // threshold, or a success reset the count while this thread waited for the lock.
            // (Under the lock the kind stays: switching it takes the lock too.)
            if word.kind() == StateKind::ForcedClosed || failures < self.consecutive_threshold() {
                if self.swap(word, word.with_failures(failures)) {
                    return None;
                }
            } else if let Some(transition) = self.open(&mut transitions, word, t) {
                return Some(transition);
            }
        }
    }

    /// Consecutive mode's threshold now.
    fn consecutive_threshold(&self) -> u32 {
        match self.config().config.mode {
            Mode::Consecutive { failures } => failures,
            Mode::Ratio { .. } => u32::MAX,
        }
    }

    fn ratio_outcome(&self, admitted: Word, failure: bool, now: Instant) -> Option<Transition> {
        let window = self.window.as_ref()?;
        if !self.load().same_period(admitted) {
            return None;
        }
        let t = self.nanos(now);
        window.record(t, failure);
        // Whether it opens depends on the state now, not at admission (a switch between closed
        // and forced closed keeps the period): read again, and once more under the lock.
        if !failure || self.load().kind() == StateKind::ForcedClosed {
            return None;
        }
        let counts = window.counts(t);
        let tuned = self.config();
        let min_throughput = match tuned.config.mode {
            Mode::Ratio { min_throughput, .. } => min_throughput,
            Mode::Consecutive { .. } => return None,
        };
        if counts.total < u64::from(min_throughput)
            || !tuned.threshold.reached_by(counts.failures, counts.total)
        {
            return None;
        }

        let mut transitions = self.lock();
        loop {
            let word = self.load();
            if !word.same_period(admitted) || word.kind() == StateKind::ForcedClosed {
                return None;
            }
            if let Some(transition) = self.open(&mut transitions, word, t) {
                return Some(transition);
            }
        }
    }
}

/// `d` in nanoseconds, saturating at `u64::MAX` (in 64-bit arithmetic: this is on every
/// success a ratio-mode breaker counts).
#[inline]
pub(super) fn nanos_of(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}
