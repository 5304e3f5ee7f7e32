//! The wait queue of a [`CriticalityLimit`]: one queue per level, oldest first, from which
//! a freed slot goes to the highest level and a full queue sheds the lowest.

use std::collections::VecDeque;

use tokio::sync::oneshot;

use super::Answer;
#[cfg(doc)]
use super::CriticalityLimit;
use crate::criticality::Criticality;

#[derive(Default)]
pub(super) struct Waiters {
    /// One queue per level, oldest first.
    pub(super) levels: [VecDeque<Waiter>; 4],
    pub(super) next_id: u64,
}

pub(super) struct Waiter {
    pub(super) id: u64,
    /// When it began to wait, in nanoseconds since the base.
    pub(super) since: u64,
    /// Nanoseconds since the base; `None` when unbounded.
    pub(super) deadline: Option<u64>,
    pub(super) answer: oneshot::Sender<Answer>,
}

impl Waiters {
    pub(super) fn len(&self) -> usize {
        self.levels.iter().map(VecDeque::len).sum()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.levels.iter().all(VecDeque::is_empty)
    }

    pub(super) fn highest(&self) -> Option<Criticality> {
        Criticality::ALL
            .into_iter()
            .rev()
            .find(|&level| !self.levels[level as usize].is_empty())
    }

    pub(super) fn lowest(&self) -> Option<Criticality> {
        Criticality::ALL
            .into_iter()
            .find(|&level| !self.levels[level as usize].is_empty())
    }

    /// Takes out every waiter that can no longer finish at `now` (less than `min` left),
    /// handing each to `gone`.
    pub(super) fn expire(&mut self, now: u64, min: u64, mut gone: impl FnMut(Criticality, Waiter)) {
        for (level, queue) in Criticality::ALL.into_iter().zip(&mut self.levels) {
            let mut at = 0;
            while at < queue.len() {
                if !can_finish(queue[at].deadline, now, min) {
                    if let Some(waiter) = queue.remove(at) {
                        gone(level, waiter);
                    }
                } else {
                    at += 1;
                }
            }
        }
    }

    /// Removes waiter `id` of `level`, if it is still waiting.
    pub(super) fn remove(&mut self, level: Criticality, id: u64) -> Option<Waiter> {
        let queue = &mut self.levels[level as usize];
        let at = queue.iter().position(|w| w.id == id)?;
        queue.remove(at)
    }
}

/// Whether work with `deadline` still has at least `min` left at `now` (and any time at all).
pub(super) fn can_finish(deadline: Option<u64>, now: u64, min: u64) -> bool {
    deadline.is_none_or(|d| d > now && d - now >= min)
}
