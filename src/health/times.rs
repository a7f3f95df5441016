//! Wall-clock times of the last events an operator reconciles from (health receipts on
//! `/status`): per channel, the last command and the last success; for the control
//! plane, the last successful poll and the last acknowledged delivery.
//!
//! A command is a channel's when its downstream leg ended there, whatever its outcome;
//! a success is a leg `answered` whose terminal response was then `acked`. Each time is
//! one atomic (Unix milliseconds, 0 for never), written on the command path without a
//! lock; the table of channels is fixed at startup, so a name it does not hold is never
//! recorded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Health;

/// Milliseconds since the Unix epoch, by the wall clock (0 before it).
pub(crate) type UnixMillis = u64;

/// The times of one channel.
#[derive(Debug, Default)]
struct ChannelTimes {
    last_command: AtomicU64,
    last_success: AtomicU64,
}

/// Every configured channel's times, and the control plane's.
#[derive(Debug, Default)]
pub(super) struct Times {
    channels: BTreeMap<String, ChannelTimes>,
    pub(super) last_successful_poll: AtomicU64,
    last_acked: AtomicU64,
}

/// `/status` times of one channel (flattened into its `downstream[]` entry).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChannelReceipt {
    /// RFC 3339; `null` until a leg ended on the channel.
    pub last_command_at: Option<String>,
    /// RFC 3339; `null` until a leg was answered and its response acknowledged.
    pub last_success_at: Option<String>,
}

/// Now, in [`UnixMillis`].
pub(crate) fn unix_millis_now() -> UnixMillis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `at` in RFC 3339 with milliseconds, or `None` for 0 (never).
pub(crate) fn rfc3339(at: UnixMillis) -> Option<String> {
    (at != 0).then(|| humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(at)).to_string())
}

impl Times {
    pub(super) fn of(channels: impl IntoIterator<Item = String>) -> Self {
        Self {
            channels: channels.into_iter().map(|c| (c, ChannelTimes::default())).collect(),
            ..Self::default()
        }
    }
}

impl Health {
    /// Health with a table of times for each of `channels` (the configured ones).
    pub(crate) fn with_channels(channels: impl IntoIterator<Item = String>) -> Self {
        Self {
            times: Times::of(channels),
            ..Self::default()
        }
    }

    /// A leg ended on `channel` at `at`; false (nothing recorded) for a channel the
    /// table does not hold.
    pub(crate) fn channel_commanded(&self, channel: &str, at: UnixMillis) -> bool {
        self.times
            .channels
            .get(channel)
            .inspect(|t| t.last_command.store(at, Ordering::Relaxed))
            .is_some()
    }

    /// A leg on `channel` was answered and its response acknowledged at `at`; false for
    /// a channel the table does not hold.
    pub(crate) fn channel_succeeded(&self, channel: &str, at: UnixMillis) -> bool {
        self.times
            .channels
            .get(channel)
            .inspect(|t| t.last_success.store(at, Ordering::Relaxed))
            .is_some()
    }

    /// The control plane acknowledged a delivery (`acked`) at `at`.
    pub(crate) fn delivery_acked(&self, at: UnixMillis) {
        self.times.last_acked.store(at, Ordering::Relaxed);
        self.reach_succeeded();
    }

    /// `channel`'s times (all `null` for a channel the table does not hold).
    pub(crate) fn channel_receipt(&self, channel: &str) -> ChannelReceipt {
        let Some(t) = self.times.channels.get(channel) else {
            return ChannelReceipt::default();
        };
        ChannelReceipt {
            last_command_at: rfc3339(t.last_command.load(Ordering::Relaxed)),
            last_success_at: rfc3339(t.last_success.load(Ordering::Relaxed)),
        }
    }

    /// The last successful poll, RFC 3339.
    pub(super) fn last_successful_poll_at(&self) -> Option<String> {
        rfc3339(self.times.last_successful_poll.load(Ordering::Relaxed))
    }

    /// The last acknowledged delivery, RFC 3339.
    pub(super) fn last_acked_at(&self) -> Option<String> {
        rfc3339(self.times.last_acked.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_null_until_recorded_and_only_for_configured_channels() {
        let h = Health::with_channels(["main".to_owned(), "db".to_owned()]);
        assert_eq!(h.channel_receipt("main"), ChannelReceipt::default());
        assert_eq!(h.poll_health().last_successful_poll_at, None);
        assert_eq!(h.poll_health().last_acked_at, None);
        let at = 1_764_590_400_123; // 2025-12-01T12:00:00.123Z
        assert!(h.channel_commanded("main", at));
        assert!(!h.channel_commanded("elsewhere", at), "not a configured channel");
        assert_eq!(
            h.channel_receipt("main"),
            ChannelReceipt {
                last_command_at: Some("2025-12-01T12:00:00.123Z".to_owned()),
                last_success_at: None,
            }
        );
        assert!(h.channel_succeeded("main", at + 1000));
        assert_eq!(
            h.channel_receipt("main").last_success_at.as_deref(),
            Some("2025-12-01T12:00:01.123Z")
        );
        assert_eq!(h.channel_receipt("db"), ChannelReceipt::default(), "per channel");
        h.delivery_acked(at);
        assert_eq!(
            h.poll_health().last_acked_at.as_deref(),
            Some("2025-12-01T12:00:00.123Z")
        );
        h.poll_succeeded();
        let polled = h.poll_health().last_successful_poll_at.expect("a poll time");
        assert!(humantime::parse_rfc3339(&polled).is_ok(), "{polled}");
    }

    #[test]
    fn the_wall_clock_reads_as_rfc3339() {
        assert_eq!(rfc3339(0), None);
        let now = rfc3339(unix_millis_now()).unwrap();
        assert!(humantime::parse_rfc3339(&now).is_ok(), "{now}");
    }
}
