//! One shared timer thread that cancels tokens at instants of the system clock: how a blocking
//! attempt's token fires at its ceiling without a thread per call.
//!
//! The thread starts with the first scheduled cancellation and sleeps until the earliest one.
//! Scheduling and unscheduling take a short lock; the thread holds it only to pop due entries.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use tokio_util::sync::CancellationToken;

use super::Instant;

/// A scheduled cancellation, to unschedule it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    at: Instant,
    id: u64,
}

struct Timer {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    next_id: u64,
    entries: BTreeMap<(Instant, u64), CancellationToken>,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }));
        // If the thread cannot be spawned, scheduled tokens never fire: blocking attempts then
        // run to completion, as a cooperative timeout would, and are reported when they overrun.
        let _ = std::thread::Builder::new()
            .name("rampart-timer".to_owned())
            .spawn(move || timer.run());
        timer
    })
}

impl Timer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            while let Some(entry) = state.entries.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                entry.remove().cancel();
            }
            state = match state.entries.keys().next() {
                Some(&(at, _)) => {
                    self.changed
                        .wait_timeout(state, at.saturating_duration_since(now))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// Cancels `token` at `at` on the system clock.
pub(crate) fn schedule(at: Instant, token: CancellationToken) -> Entry {
    let timer = timer();
    let mut state = timer.lock();
    state.next_id += 1;
    let entry = Entry {
        at,
        id: state.next_id,
    };
    let earliest = state
        .entries
        .keys()
        .next()
        .is_none_or(|&(first, _)| at < first);
    state.entries.insert((at, entry.id), token);
    drop(state);
    if earliest {
        timer.changed.notify_one();
    }
    entry
}

/// Unschedules a cancellation (nothing happens if it already fired).
pub(crate) fn unschedule(entry: Entry) {
    timer().lock().entries.remove(&(entry.at, entry.id));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_scheduled_token_is_cancelled_at_its_instant_and_an_unscheduled_one_never() {
        let fired = CancellationToken::new();
        let kept = CancellationToken::new();
        let entry = schedule(Instant::now() + Duration::from_secs(3600), kept.clone());
        unschedule(entry);
        let _ = schedule(Instant::now(), fired.clone());
        // The timer thread fires a due entry on its next turn; wait for it without sleeping.
        for _ in 0..10_000_000 {
            if fired.is_cancelled() {
                break;
            }
            std::thread::yield_now();
        }
        assert!(fired.is_cancelled());
        assert!(!kept.is_cancelled());
    }
}
