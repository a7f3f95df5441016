//! The dispatcher's books: how many commands it holds, what they are doing, and the
//! room left in the prefetch queue. Every count goes to the health shown on `/status`
//! and to the metrics together, so the two never disagree (the health receipts' times
//! included: `/status` and the timestamp gauges show the same instant).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Health;
use crate::health::{unix_millis_now, UnixMillis};
use crate::telemetry::{DropReason, DurationLeg, Metrics};

pub(crate) struct Books {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// Woken when a command finishes: the poller may ask for more.
    room: Notify,
    /// Prefetch capacity: commands held at once (queued + in flight).
    max_inflight: usize,
}

impl Books {
    pub(crate) fn new(metrics: Arc<Metrics>, health: Arc<Health>, max_inflight: usize) -> Self {
        Self {
            metrics,
            health,
            room: Notify::new(),
            max_inflight,
        }
    }

    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    #[cfg(test)]
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }

    /// Commands the prefetch queue can take now.
    pub(crate) fn free_slots(&self) -> usize {
        self.max_inflight.saturating_sub(self.health.alive())
    }

    /// Resolves when a command has finished since the last wakeup.
    pub(crate) async fn room(&self) {
        self.room.notified().await
    }

    pub(crate) fn poll_succeeded(&self) {
        self.health.poll_succeeded();
    }

    pub(crate) fn poll_failed(&self, kind: &'static str) {
        self.health.poll_failed(kind);
    }

    /// A command was received and queued.
    pub(crate) fn command_started(&self) {
        self.health.command_started();
        self.metrics.set_queue_depth(self.health.queued());
    }

    /// A command's task ended, however it ended.
    pub(crate) fn command_finished(&self) {
        self.health.command_finished();
        self.metrics.set_queue_depth(self.health.queued());
        self.room.notify_one();
    }

    /// A command passed the fence; `fence_held` is whether that holds the fence (strict).
    pub(crate) fn admitted(&self, fence_held: bool) {
        self.health.admitted();
        self.metrics.set_in_flight(self.health.in_flight());
        self.metrics.set_fence_held(fence_held);
        self.metrics.set_queue_depth(self.health.queued());
    }

    /// An admitted command let go of its admission; `fence_held` is the fence's state now.
    pub(crate) fn released(&self, fence_held: bool) {
        self.health.released();
        self.metrics.set_in_flight(self.health.in_flight());
        self.metrics.set_fence_held(fence_held);
    }

    pub(crate) fn dropped(&self, reason: DropReason) {
        self.metrics.command_dropped(reason);
    }

    /// `leg` took from `since` until now.
    pub(crate) fn leg_took(&self, leg: DurationLeg, since: Instant) {
        self.metrics.leg_duration(leg, since.elapsed().as_secs_f64());
    }

    /// A downstream leg on `channel` ended, whatever its outcome (`last_command_at`).
    pub(crate) fn leg_ended(&self, channel: &str) {
        let at = unix_millis_now();
        if self.health.channel_commanded(channel, at) {
            self.metrics.channel_commanded_at(channel, seconds(at));
        }
    }

    /// A leg on `channel` was answered and its terminal response acknowledged
    /// (`last_success_at`).
    pub(crate) fn succeeded(&self, channel: &str) {
        let at = unix_millis_now();
        if self.health.channel_succeeded(channel, at) {
            self.metrics.channel_succeeded_at(channel, seconds(at));
        }
    }

    /// The control plane refused a terminal response as larger than it accepts.
    pub(crate) fn response_too_large(&self) {
        self.metrics.response_too_large();
    }

    /// An MCP server's message of `kind` was not posted: it carries an unpaired surrogate
    /// escape the control plane refuses.
    pub(crate) fn invalid_json_payload(&self, kind: crate::telemetry::DeliveryKind) {
        self.metrics.invalid_json_payload(kind);
    }

    /// The control plane acknowledged a delivery (`last_acked_at`).
    pub(crate) fn delivery_acked(&self) {
        let at = unix_millis_now();
        self.health.delivery_acked(at);
        self.metrics.delivery_acked_at(seconds(at));
    }
}

/// Unix milliseconds as the seconds a gauge carries.
fn seconds(at: UnixMillis) -> f64 {
    Duration::from_millis(at).as_secs_f64()
}
