//! The fence and the fatal latch: whether the fence is held, whether the latch is set,
//! latches by category, and `fatal_info` naming the latch's category.
//!
//! `fatal_latches_total` has every category's series from startup (at zero);
//! `fatal_info` has a series only while a latch is in force, and only one.

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::{all, at_zero, counter_vec, gauge_vec, int_gauge, Metrics};
use crate::telemetry::label::{FatalCategoryLabel, LabelSets};

/// The fence and the fatal latch.
pub(super) struct StrictFamilies {
    fence_held: IntGauge,
    fatal_latched: IntGauge,
    fatal_latches: IntCounterVec,
    fatal_info: IntGaugeVec,
}

impl StrictFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            fence_held: int_gauge(r, "fence_held", "1 while the strict fence is held."),
            fatal_latched: int_gauge(r, "fatal_latched", "1 once the fatal latch is set."),
            fatal_latches: counter_vec(r, "fatal_latches_total", "Fatal latches by category.", &["category"]),
            fatal_info: gauge_vec(
                r,
                "fatal_info",
                "1 for the category of the fatal latch; no series while not latched.",
                &["category"],
            ),
        }
    }

    /// Every latch category of `L`, at zero (`fatal_info` excepted).
    pub(super) fn series_at_zero<L: LabelSets>(&self) {
        at_zero(&self.fatal_latches, all::<L::FatalCategory>(), &[]);
    }
}

impl Metrics {
    pub(crate) fn set_fence_held(&self, held: bool) {
        self.strict.fence_held.set(i64::from(held));
    }
    pub(crate) fn fatal_latched(&self, category: impl FatalCategoryLabel) {
        let category = category.as_label();
        self.strict.fatal_latched.set(1);
        self.strict.fatal_latches.with_label_values(&[category]).inc();
        self.strict.fatal_info.reset();
        self.strict.fatal_info.with_label_values(&[category]).set(1);
    }
    /// Sets `fatal_info{category}` to 1 for the latch's category, the only series of
    /// that metric (none exists until the latch is set).
    pub(crate) fn fatal_info(&self, category: impl FatalCategoryLabel) {
        let category = category.as_label();
        self.strict.fatal_info.reset();
        self.strict.fatal_info.with_label_values(&[category]).set(1);
    }
    /// No latch is in force any more (a cluster-wide latch was cleared).
    pub(crate) fn fatal_info_cleared(&self) {
        self.strict.fatal_info.reset();
    }
}
