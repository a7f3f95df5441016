//! One receipt: what the journal keeps of a command that did not end cleanly. Pure: no
//! clock (times are given), no I/O.
//!
//! A line holds the request id, channel, command type and JSON-RPC method (sanitized as
//! the latch file's are), the leg's outcome, the terminal delivery's outcome and attempt
//! count, the words the caller was given when the gateway posted its own error (always
//! one of its fixed sentences), the received and finished times, the strict flag and the
//! fatal category when this command latched. Nothing of a payload, a body or a header.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::control::Delivery;
use crate::downstream::LegOutcome;
use crate::protocol::{Command, CommandKind};
use crate::strict::FatalCategory;
use crate::telemetry::{label_enum, safe_method, safe_token, CommandType};

/// `schema_version` of every line (API: readers key on it).
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// One line of the journal (API: field names are stable; new fields may be added).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub schema_version: u32,
    pub request_id: String,
    pub channel: String,
    /// `jsonrpc`, `session_termination`, `oauth_discovery` or `unknown`.
    pub command_type: String,
    pub method: Option<String>,
    /// `not_sent`, `answered` or `abandoned`; `null` when no downstream leg ran.
    pub leg_outcome: Option<String>,
    /// `acked`, `not_found`, `rejected` or `ambiguous`; `null` when nothing was posted.
    pub delivery_outcome: Option<String>,
    /// The gateway's own words posted to the caller (a synthesized error); `null` when
    /// the MCP server's own answer was posted, or nothing was.
    pub message: Option<String>,
    /// POST attempts of the terminal response (0: none).
    pub attempts: u32,
    /// RFC 3339, UTC, milliseconds: when the poll that carried the command returned.
    pub received_at: String,
    /// RFC 3339, UTC, milliseconds: when the command's task ended.
    pub finished_at: String,
    pub strict: bool,
    /// The fatal latch's category, when this command latched it.
    pub fatal_category: Option<String>,
    /// A call the era bridge held for this command that ended without a caller told:
    /// `expired` (parked, never continued: its result reached no caller) or `lost` (its
    /// server ended while parked: effect unknown). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// What the lifecycle learned about one command, as it learned it. Copy, allocation
/// free: every command carries one; only an unclean one becomes a [`Receipt`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcomes {
    pub leg: Option<LegOutcome>,
    /// The words of the gateway's own error, set before it is posted.
    pub words: Option<&'static str>,
    pub delivery: Option<Delivery>,
    pub attempts: u32,
    pub fatal: Option<FatalCategory>,
}

label_enum! {
    /// What makes a command unclean, as `tunnelgate receipts --outcome` names it.
    pub enum Unclean {
        /// Its downstream leg ended `abandoned`: the MCP server may have acted.
        Abandoned => "abandoned",
        /// Its terminal response was answered 404.
        NotFound => "not_found",
        /// Its terminal response was refused with a final status.
        Rejected => "rejected",
        /// Its terminal response got no definitive answer.
        Ambiguous => "ambiguous",
        /// A call the era bridge held for it ended with no caller told (`held`).
        Unanswered => "unanswered",
    }
}

impl Outcomes {
    /// No abandoned leg, no terminal delivery that ended other than `acked`, no latch.
    pub(crate) fn is_clean(&self) -> bool {
        let delivered_cleanly = match self.delivery {
            None | Some(Delivery::Acked) => true,
            Some(Delivery::NotFound | Delivery::Rejected | Delivery::Ambiguous) => false,
        };
        self.leg != Some(LegOutcome::Abandoned) && delivered_cleanly && self.fatal.is_none()
    }
}

impl Receipt {
    /// The receipt of `cmd`, or `None` when it ended cleanly.
    pub(crate) fn of(
        cmd: &Command,
        strict: bool,
        outcomes: &Outcomes,
        received_at: SystemTime,
        finished_at: SystemTime,
    ) -> Option<Receipt> {
        if outcomes.is_clean() {
            return None;
        }
        let (command_type, method) = match &cmd.kind {
            CommandKind::JsonRpc(p) => (CommandType::JsonRpc, p.method()),
            CommandKind::SessionTermination => (CommandType::SessionTermination, None),
            CommandKind::OAuthDiscovery => (CommandType::OauthDiscovery, None),
            CommandKind::Unknown(u) => (CommandType::Unknown, u.request().and_then(|p| p.method())),
        };
        Some(Receipt {
            schema_version: SCHEMA_VERSION,
            request_id: safe_token(cmd.request_id.as_str()),
            channel: safe_token(cmd.channel.as_str()),
            command_type: command_type.as_str().to_owned(),
            method: method.map(safe_method),
            leg_outcome: outcomes.leg.map(|o| o.as_str().to_owned()),
            delivery_outcome: outcomes.delivery.map(|d| d.as_str().to_owned()),
            // Words count only once posted.
            message: outcomes.delivery.and(outcomes.words).map(str::to_owned),
            attempts: outcomes.attempts,
            received_at: rfc3339(received_at),
            finished_at: rfc3339(finished_at),
            strict,
            fatal_category: outcomes.fatal.map(|c| c.as_str().to_owned()),
            held: None,
        })
    }

    /// The receipt of a call the era bridge held for the command `request_id` and that
    /// ended with no caller told (see [`Receipt::held`]'s field).
    pub(crate) fn of_held(ended: &crate::downstream::HeldEnded) -> Receipt {
        Receipt {
            schema_version: SCHEMA_VERSION,
            request_id: ended.request_id.as_deref().map_or_else(|| "-".to_owned(), safe_token),
            channel: safe_token(&ended.channel),
            command_type: CommandType::JsonRpc.as_str().to_owned(),
            method: Some(safe_method(&ended.method)),
            leg_outcome: Some(LegOutcome::Answered.as_str().to_owned()),
            delivery_outcome: None,
            message: Some(ended.words().to_owned()),
            attempts: 0,
            received_at: rfc3339(ended.parked_at),
            finished_at: rfc3339(ended.ended_at),
            strict: false,
            fatal_category: None,
            held: Some(ended.end.as_str().to_owned()),
        }
    }

    /// The journal line, without its newline.
    pub(crate) fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a receipt is strings, numbers and booleans")
    }

    /// When the command finished, if the field parses.
    pub(crate) fn finished(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339_weak(&self.finished_at).ok()
    }
}

impl Unclean {
    /// Whether `receipt` is unclean this way.
    pub(crate) fn matches(self, receipt: &Receipt) -> bool {
        match self {
            Self::Abandoned => receipt.leg_outcome.as_deref() == Some(self.as_str()),
            Self::NotFound | Self::Rejected | Self::Ambiguous => {
                receipt.delivery_outcome.as_deref() == Some(self.as_str())
            }
            Self::Unanswered => receipt.held.is_some(),
        }
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests;
