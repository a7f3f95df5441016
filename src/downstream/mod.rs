//! MCP transports: Streamable HTTP, supervised stdio children, and the built-in
//! `harpoon` channel (an MCP server inside the gateway, for the OAuth shim).
//!
//! Every leg returns a [`LegResult`] whose outcome is `not_sent`, `answered` or
//! `abandoned`; every entry point takes an [`Admission`](crate::strict::Admission), so
//! nothing reaches an MCP server without passing the fence. Must not touch the control
//! plane or the latch: outcomes are reported, the dispatcher decides.

pub(crate) mod caller;
mod channels;
pub(crate) mod era;
pub(crate) mod error_chain;
mod harpoon;
mod http;
mod identity;
mod outcome;
mod redact;
mod sse;
mod stdio;
#[cfg(test)]
mod test_support;
mod watch;

pub(crate) use channels::{Channels, Transport, TransportKind};
pub(crate) use era::{EraSetting, ServerEra};
pub use harpoon::HarpoonTransport;
pub(crate) use harpoon::{HarpoonSettings, HostClassifier, TargetView, HARPOON_CHANNEL};
pub(crate) use http::{EraEvent, EraObserver};
pub use http::{HttpEgress, HttpSettings, HttpTransport};
#[cfg(test)]
pub(crate) use identity::MAX_IDENTITY_CHARS;
pub(crate) use identity::{Seen, ServerIdentity};
pub use outcome::{LegFailure, LegResult, NotifySink};
pub(crate) use outcome::{LegOutcome, Notification, Reply};
pub(crate) use stdio::{guard as stdio_guard, HeldEnded, InputRequiredSettings, SessionMode, SessionState};
pub use stdio::{SessionSettings, StdioSettings, StdioTransport};

// The decoders as the fuzz and property targets drive them (`crate::fuzzing`).
#[cfg(any(test, fuzzing))]
pub(crate) use sse::{SseEvent, SseParser};
#[cfg(any(test, fuzzing))]
pub(crate) use stdio::line_probe;

use crate::protocol::{JsonRpcPayload, WireHeaders};

/// One JSON-RPC message to forward, as received from the control plane.
#[derive(Debug)]
pub struct DownstreamRequest<'a> {
    /// Forwarded byte for byte.
    pub payload: &'a JsonRpcPayload,
    /// Connector headers from the command (multi-valued), forwarded as given.
    pub headers: &'a WireHeaders,
    /// Absolute end of the command's lifecycle budget, if it has one. Every wait inside
    /// the leg ends by it (the transport's own `request_timeout` bounds it otherwise).
    pub deadline: Option<tokio::time::Instant>,
}

/// What a discovery found: the answer to post, and the URL its document came from.
#[derive(Debug)]
pub(crate) struct Discovered {
    pub reply: Reply,
    pub source: String,
}

/// `/status` view of one channel.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChannelStatus {
    pub channel: String,
    pub transport: TransportKind,
    pub up: bool,
    pub generation: u64,
    /// stdio only: where the child's MCP session stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionState>,
    /// The server as the last `initialize` answer seen on the channel named it (for stdio,
    /// the gateway's own session with the child); `null` until one.
    pub server: Option<ServerIdentity>,
    /// The protocol revision of that answer; `null` until one.
    pub protocol_version: Option<String>,
    /// Tools in the last `tools/list` answer seen on the channel; `null` until one.
    pub tools: Option<u64>,
    /// stdio: when the current child was started (RFC 3339); `null` for HTTP and while no
    /// child runs.
    pub started_at: Option<String>,
    /// stdio: the channel's era setting (`auto`, `legacy`, `modern`); absent for HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub era_setting: Option<EraSetting>,
    /// stdio: the server's era as configured or found by the gateway's handshake with
    /// the current child (`legacy`: 2026-07-28 callers are bridged; `modern`: passed
    /// through); `null` until known, and absent for HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub era: Option<Option<ServerEra>>,
}

impl ChannelStatus {
    /// What the channel's server was seen to say about itself, as the status shows it.
    fn with_seen(mut self, seen: Seen) -> Self {
        self.server = seen.server;
        self.protocol_version = seen.protocol_version;
        self.tools = seen.tools;
        self
    }

    /// What is wrong with a channel that is not up, in words for `/readyz`.
    pub fn condition(&self) -> &'static str {
        match self.session {
            _ if self.up => "up",
            Some(SessionState::Starting) => "starting (the gateway's initialize is not answered yet)",
            _ => "down",
        }
    }
}
