//! One channel's entry in `/status` `downstream[]`: what its transport reports (up,
//! generation, session, the server's identity and tools as they were seen) and, beside
//! it, the health receipt's times (last command, last success). Both are read, never
//! changed.

use serde::Serialize;

use super::OpsState;
use crate::downstream::ChannelStatus;
use crate::health::ChannelReceipt;

/// `/status` `downstream[]` entry: the transport's view, then the times (keys are API).
#[derive(Clone, Debug, Serialize)]
pub struct ChannelReport {
    #[serde(flatten)]
    pub status: ChannelStatus,
    #[serde(flatten)]
    pub receipt: ChannelReceipt,
}

impl OpsState {
    /// Every channel's entry, in name order.
    pub(super) fn channel_reports(&self) -> Vec<ChannelReport> {
        self.channels
            .status()
            .into_iter()
            .map(|status| ChannelReport {
                receipt: self.health.channel_receipt(&status.channel),
                status,
            })
            .collect()
    }
}
