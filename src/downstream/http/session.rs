//! The MCP session the era bridge opens and owns with a handshake-era HTTP server, and
//! the headers each of its requests carries.

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::protocol::{WireHeaders, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};

/// The session the gateway opened with a handshake-era server.
#[derive(Debug)]
pub(super) struct OwnedSession {
    /// `Mcp-Session-Id` (a stateless server gives none).
    pub(super) id: Option<String>,
    /// The revision the server answered.
    pub(super) protocol_version: String,
    /// Its whole `InitializeResult`.
    pub(super) result: Map<String, Value>,
    /// Cancelled once the server no longer knows it.
    pub(super) lost: CancellationToken,
}

impl OwnedSession {
    /// Whether the server no longer knows the session.
    pub(super) fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
}

/// Command headers a bridged request does not carry: the caller's 2026-07-28 mirrors and
/// session (the owned session's own are set instead).
const REPLACED: [&str; 5] = [
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "last-event-id",
];

/// The command's headers for a bridged request: the caller's 2026-07-28 mirrors and
/// session replaced by the owned session's id and revision.
pub(super) fn session_headers(headers: &WireHeaders, session: &OwnedSession) -> WireHeaders {
    let mut out: WireHeaders = headers
        .iter()
        .filter(|(name, _)| {
            let lower = name.to_ascii_lowercase();
            !REPLACED.contains(&lower.as_str()) && !lower.starts_with("mcp-param-")
        })
        .cloned()
        .collect();
    if let Some(id) = &session.id {
        out.push((MCP_SESSION_ID.to_owned(), vec![id.clone()]));
    }
    out.push((MCP_PROTOCOL_VERSION.to_owned(), vec![session.protocol_version.clone()]));
    out
}
