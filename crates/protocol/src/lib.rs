//! Control-plane wire types and the pure rules of the tunnel protocol.
//!
//! Owns: decoding polled commands (one bad command never poisons its poll), the
//! `response_timeout` grammar, the response body written back, the MCP revisions the
//! gateway names itself ([`McpRevision`]), the MCP header names and the response-header
//! allowlist, the `X-Tunnel-MCP-Server-Info` declaration, the synthesized
//! `tunnel_failure` error and the caller's words it carries, the error answers of
//! `oauth_discovery`, and the trace-context carriers of a command (read as text, written
//! by insertion only).
//! Payloads stay raw bytes (`Box<RawValue>`): what the control plane sent is what the MCP
//! server receives (bar trace context that `telemetry.propagate` inserts into
//! `params._meta`), and the reverse.
//!
//! Must not touch: sockets, clocks, metrics. Everything here is pure and unit tested, but
//! for `random_hex` (fresh ids, from the thread RNG).

// Every function outside tests is under 80 lines of code (clippy counts a body's lines,
// blanks and comments aside; the threshold is in clippy.toml). Table-driven tests may be
// longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![deny(unreachable_pub)]

mod command;
mod failure;
mod headers;
mod id;
mod oauth;
mod response;
mod revision;
mod surrogate;
mod timeout;
mod trace;

pub use command::{
    decode_poll, Command, CommandKind, InvalidCommand, InvalidReason, JsonRpcPayload, PollDecodeError, UnknownCommand,
    KNOWN_COMMAND_TYPES,
};
pub use failure::{synthesize_error, FailureSource, TooLarge, TunnelFailure, ABANDONED_MESSAGE, NOT_SENT_MESSAGE};
pub use headers::{
    filter_resp_headers, json_resp_headers, server_info_header, ServerInfoChannel, LAST_EVENT_ID, MCP_PROTOCOL_VERSION,
    MCP_SESSION_ID, RESP_HEADER_ALLOWLIST, WIRE_PROTOCOL_VERSION,
};
pub use id::random_hex;
pub use oauth::{discovery_error, DiscoveryFailure};
pub use response::{RespTiming, RespType, ResponseBody};
pub use revision::McpRevision;
pub use surrogate::has_lone_surrogate;
pub use timeout::ResponseTimeout;
pub use trace::{
    header_trace_fields, header_value, is_protocol_revision, message_method, reply_facts, with_trace_headers, NotText,
    ReplyFacts, TraceFields,
};

use std::fmt;

/// Opaque request identifier assigned by the control plane; echoed in every response body.
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct RequestId(String);

impl RequestId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestId({})", self.0)
    }
}

/// Opaque shard token. Echoed only in the `X-Tunnel-Shard-Token` header, never logged:
/// `Debug` and `Display` print a placeholder.
#[derive(Clone, PartialEq, Eq)]
pub struct ShardToken(String);

impl ShardToken {
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }
    /// The clear value, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ShardToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ShardToken(<redacted>)")
    }
}

/// Channel name used to route a command to a configured MCP server (default `main`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ChannelName(String);

impl ChannelName {
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }
    pub fn main() -> Self {
        Self("main".to_owned())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ChannelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ChannelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChannelName({})", self.0)
    }
}

/// Multi-valued headers as the wire carries them (`{"name": ["v1", "v2"]}`), order kept.
pub type WireHeaders = Vec<(String, Vec<String>)>;
