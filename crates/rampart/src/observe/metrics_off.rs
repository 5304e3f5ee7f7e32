//! The `metrics` feature is off: nothing to register, nothing to record.

use super::{Gauges, MetricLabels, Parts};
use crate::event::Event;

/// Without `metrics`, events are built only for listeners and `tracing`.
pub(super) const ACTIVE: bool = false;

#[derive(Clone, Default)]
pub(super) struct Handles;

impl Handles {
    #[inline(always)]
    pub(super) fn new(_policy: &str, _labels: &MetricLabels, _parts: Parts) -> Self {
        Handles
    }

    #[inline(always)]
    pub(super) fn sample<A>(&self, _gauges: &Gauges<'_, A>) {}

    #[inline(always)]
    pub(super) fn event(&self, _event: &Event<'_>) {}
}
