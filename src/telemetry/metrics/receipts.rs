//! The delivery-receipt journal (`receipts.path`): lines written, and lines dropped by
//! reason.
//!
//! Every drop reason has its series from startup (at zero).

use prometheus::{IntCounter, IntCounterVec, Registry};

use super::{all, at_zero, counter_vec, int_counter, Metrics};
use crate::telemetry::label::{LabelValue, ReceiptDropReason};

/// The delivery-receipt journal: lines written, and lines dropped by reason.
pub(super) struct ReceiptFamilies {
    written: IntCounter,
    dropped: IntCounterVec,
}

impl ReceiptFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            written: int_counter(
                r,
                "receipts_written_total",
                "Delivery receipts written to the journal (receipts.path).",
            ),
            dropped: counter_vec(
                r,
                "receipts_dropped_total",
                "Delivery receipts not written, by reason (the commands were not affected).",
                &["reason"],
            ),
        }
    }

    /// Every drop reason, at zero.
    pub(super) fn series_at_zero(&self) {
        at_zero(&self.dropped, all::<ReceiptDropReason>(), &[]);
    }
}

impl Metrics {
    /// `n` delivery receipts reached the journal file.
    pub(crate) fn receipts_written(&self, n: u64) {
        self.receipts.written.inc_by(n);
    }

    /// `n` delivery receipts were dropped for `reason`.
    pub(crate) fn receipts_dropped(&self, reason: ReceiptDropReason, n: u64) {
        self.receipts.dropped.with_label_values(&[reason.as_label()]).inc_by(n);
    }
}
