//! The `metrics` feature is off: nothing to register, nothing to record.

use super::Side;
use crate::event::EdgeEvent;

#[derive(Clone)]
pub(super) struct Handles;

impl Handles {
    #[inline(always)]
    pub(super) fn new(_side: Side) -> Self {
        Handles
    }

    #[inline(always)]
    pub(super) fn event(&self, _event: &EdgeEvent<'_>) {}

    #[inline(always)]
    pub(super) fn admitted(&self) {}
}
