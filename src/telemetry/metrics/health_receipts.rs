//! Health receipts: when each channel last carried a command and last succeeded, and when
//! the control plane last acknowledged a delivery (Unix seconds, 0 for never).
//!
//! The `channel` label takes only configured channel names, every transport's; each has
//! its series from startup once [`Metrics::channel_receipts_at_zero`] ran.

use prometheus::{Gauge, GaugeVec, Opts, Registry};

use super::{gauge, registered, Metrics};

/// Health receipts: when each channel last carried a command and last succeeded, and
/// when the control plane last acknowledged a delivery (Unix seconds, 0 for never).
pub(super) struct HealthReceiptFamilies {
    channel_last_command: GaugeVec,
    channel_last_success: GaugeVec,
    last_acked_delivery: Gauge,
}

impl HealthReceiptFamilies {
    pub(super) fn register(r: &Registry) -> Self {
        let channel_gauge = |name: &str, help: &str| {
            let g = GaugeVec::new(Opts::new(format!("tunnelgate_{name}"), help), &["channel"]);
            registered(r, g.expect("metric definitions are valid"))
        };
        Self {
            channel_last_command: channel_gauge(
                "channel_last_command_timestamp_seconds",
                "Unix time the last downstream leg on the channel ended, whatever its outcome (0: none yet).",
            ),
            channel_last_success: channel_gauge(
                "channel_last_success_timestamp_seconds",
                "Unix time of the channel's last leg answered and acknowledged by the control plane (0: none yet).",
            ),
            last_acked_delivery: gauge(
                r,
                "last_acked_delivery_timestamp_seconds",
                "Unix time of the last delivery the control plane acknowledged (0: none yet).",
            ),
        }
    }
}

impl Metrics {
    /// Creates the per-channel receipt series at zero, one per configured channel (every
    /// transport), so that each exists from the first scrape.
    pub(crate) fn channel_receipts_at_zero(&self, channels: &[String]) {
        for ch in channels {
            self.health_receipts.channel_last_command.with_label_values(&[ch]);
            self.health_receipts.channel_last_success.with_label_values(&[ch]);
        }
    }
    /// A downstream leg on `channel` ended at `unix_seconds`.
    pub(crate) fn channel_commanded_at(&self, channel: &str, unix_seconds: f64) {
        self.health_receipts
            .channel_last_command
            .with_label_values(&[channel])
            .set(unix_seconds);
    }
    /// A leg on `channel` was answered and its response acknowledged at `unix_seconds`.
    pub(crate) fn channel_succeeded_at(&self, channel: &str, unix_seconds: f64) {
        self.health_receipts
            .channel_last_success
            .with_label_values(&[channel])
            .set(unix_seconds);
    }
    /// The control plane acknowledged a delivery at `unix_seconds`.
    pub(crate) fn delivery_acked_at(&self, unix_seconds: f64) {
        self.health_receipts.last_acked_delivery.set(unix_seconds);
    }
}
