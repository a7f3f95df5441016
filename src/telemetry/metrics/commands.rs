//! What happens to commands: received by type, dropped before any leg by reason, the
//! time spent per leg (`command_duration_seconds`), and how many are in flight and queued.
//!
//! Every command type, drop reason and leg has its series from startup (the histogram's
//! with every bucket at zero).

use prometheus::{HistogramVec, IntCounterVec, IntGauge, Registry};

use super::{all, at_zero, counter_vec, histogram_vec, int_gauge, Metrics};
use crate::telemetry::label::{CommandType, DropReason, DurationLeg, LabelValue};

/// Buckets of `command_duration_seconds`, in seconds.
pub(super) const DURATION_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// What happens to commands: received, dropped, timed per leg, in flight, queued.
pub(super) struct CommandFamilies {
    pub(super) commands_received: IntCounterVec,
    pub(super) commands_dropped: IntCounterVec,
    command_duration: HistogramVec,
    commands_in_flight: IntGauge,
    queue_depth: IntGauge,
}

impl CommandFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            commands_received: counter_vec(
                r,
                "commands_received_total",
                "Commands received by type.",
                &["command_type"],
            ),
            commands_dropped: counter_vec(
                r,
                "commands_dropped_total",
                "Commands that never reached downstream, by reason.",
                &["reason"],
            ),
            command_duration: histogram_vec(
                r,
                "command_duration_seconds",
                "Time spent per command leg.",
                &DURATION_BUCKETS,
                &["leg"],
            ),
            commands_in_flight: int_gauge(r, "commands_in_flight", "Commands admitted and not yet finished."),
            queue_depth: int_gauge(r, "queue_depth", "Commands received and waiting for a worker."),
        }
    }

    /// Every command type, drop reason and leg, at zero.
    pub(super) fn series_at_zero(&self) {
        at_zero(&self.commands_received, all::<CommandType>(), &[]);
        at_zero(&self.commands_dropped, all::<DropReason>(), &[]);
        at_zero(&self.command_duration, all::<DurationLeg>(), &[]);
    }
}

impl Metrics {
    pub(crate) fn command_received(&self, command_type: CommandType) {
        self.commands
            .commands_received
            .with_label_values(&[command_type.as_label()])
            .inc();
    }
    pub(crate) fn command_dropped(&self, reason: DropReason) {
        self.commands
            .commands_dropped
            .with_label_values(&[reason.as_label()])
            .inc();
    }
    pub(crate) fn leg_duration(&self, leg: DurationLeg, seconds: f64) {
        self.commands
            .command_duration
            .with_label_values(&[leg.as_label()])
            .observe(seconds);
    }
    pub(crate) fn set_in_flight(&self, n: usize) {
        self.commands
            .commands_in_flight
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    pub(crate) fn set_queue_depth(&self, n: usize) {
        self.commands.queue_depth.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}
