//! What a response means for the leg (pure): how its body announced itself, whether a
//! JSON-RPC message on it is the request's answer, what a send error says about whether
//! anything was written, and what a failure says about the channel's reachability.
//!
//! Invariants:
//! - only a JSON-RPC response (a `result` or an `error`, no `method`) whose id equals the
//!   request's is its answer; a whole JSON body may also answer with an error for no id
//!   (the server could not read the request);
//! - a send error is `not_sent` only when its cause chain places it while connecting
//!   (DNS, TCP, TLS, a proxy's refused `CONNECT`), or in a handshake the server refused;
//!   everything else may have followed the write (`abandoned`);
//! - every mapping from a failure is one exhaustive `match` (no `_` arm).
//!
//! Nothing here does I/O, logs or holds state.

use http::header::{HeaderMap, CONTENT_TYPE};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::downstream::error_chain::SendFacts;
use crate::downstream::{DownstreamRequest, LegFailure};
use crate::egress::client::SendErrorKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyKind {
    EventStream,
    Json,
    Other,
}

/// What a JSON-RPC message on a response means for this request.
pub(super) enum Message {
    /// The response for the request's id: the leg's answer.
    Terminal(Box<RawValue>),
    /// Any other JSON-RPC message: forwarded as a notification.
    Other(Box<RawValue>),
    /// Not a JSON object: skipped.
    Noise,
}

/// Whether a field is present at all (even as `null`).
#[derive(Default)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(Self(true))
    }
}

#[derive(Deserialize)]
struct MessageProbe<'a> {
    #[serde(default)]
    method: Present,
    #[serde(default)]
    result: Present,
    #[serde(default)]
    error: Present,
    #[serde(default)]
    jsonrpc: Present,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
}

/// What the leg is waiting for: the request's id, parsed once for comparison.
pub(super) struct Expected {
    id: Option<serde_json::Value>,
}

impl Expected {
    pub(super) fn of(req: &DownstreamRequest<'_>) -> Self {
        Self {
            id: req.payload.id().and_then(|raw| serde_json::from_str(raw.get()).ok()),
        }
    }

    fn matches(&self, id: Option<&RawValue>) -> bool {
        match (
            &self.id,
            id.and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok()),
        ) {
            (Some(want), Some(got)) => *want == got,
            _ => false,
        }
    }

    /// An SSE event: the response for our id ends the leg; any other message is forwarded.
    pub(super) fn classify_event(&self, raw: Box<RawValue>) -> Message {
        match probe(&raw) {
            None => Message::Noise,
            Some(p) if is_response(&p) && self.matches(p.id) => Message::Terminal(raw),
            Some(_) => Message::Other(raw),
        }
    }

    /// A whole JSON body: it answers this request, so an error without an id (the server
    /// could not read it) is also the answer.
    pub(super) fn classify_body(&self, raw: Box<RawValue>) -> Message {
        match probe(&raw) {
            None => Message::Noise,
            Some(p) if is_response(&p) && (self.matches(p.id) || (p.error.0 && p.id.is_none())) => {
                Message::Terminal(raw)
            }
            Some(_) => Message::Other(raw),
        }
    }

    /// A non-2xx body: the server's own answer only when it is a JSON-RPC error for this
    /// request's id, or for no id (the same rule as a 2xx body's).
    pub(super) fn is_refusal_answer(&self, raw: &RawValue) -> bool {
        probe(raw).is_some_and(|p| p.error.0 && p.jsonrpc.0 && !p.method.0 && (p.id.is_none() || self.matches(p.id)))
    }
}

/// Which failures say something about reachability: connect failures mark the channel
/// down, anything that reached the server marks it up, refusals before sending say nothing.
pub(super) fn reached_server(failure: &LegFailure) -> Option<bool> {
    match failure {
        LegFailure::Dns
        | LegFailure::ConnectRefused
        | LegFailure::ConnectFailed
        | LegFailure::Tls
        | LegFailure::ProxyRefused
        | LegFailure::ProxyAuthRequired => Some(false),
        LegFailure::NotAdmitted
        | LegFailure::DeadlineBeforeSend
        | LegFailure::InternalBeforeSend
        | LegFailure::LocalExhaustion
        | LegFailure::ChildNotRunning
        | LegFailure::SessionNotOpen
        | LegFailure::InitializeAbandoned
        | LegFailure::TimeoutAfterWrite
        | LegFailure::CancelledAfterWrite
        | LegFailure::InternalAfterWrite => None,
        LegFailure::SubscriptionEnded => Some(true),
        LegFailure::HttpStatus(_)
        | LegFailure::ConnectionLost
        | LegFailure::StreamClosedBeforeResponse
        | LegFailure::TruncatedJson
        | LegFailure::NonProtocolResponse
        | LegFailure::BodyTooLarge
        | LegFailure::ChildExited
        | LegFailure::ChildPipeBroken => Some(true),
    }
}

/// Maps a send error (before response headers) to a failure: every connect-phase kind
/// (DNS, TCP, TLS, a proxy's refused `CONNECT`) wrote nothing, `not_sent`; so did a
/// handshake the server refused with an alert after the client's side of it finished
/// (`tls`). `timeout` and `lost` may follow the write: `abandoned`. Exhaustion of the
/// gateway's own descriptors or socket memory while resolving or connecting is named
/// first, never as the server's failure.
pub(super) fn classify_send_error(facts: SendFacts) -> LegFailure {
    if facts.exhausted {
        return LegFailure::LocalExhaustion;
    }
    match facts.kind {
        SendErrorKind::Dns => LegFailure::Dns,
        SendErrorKind::Refused => LegFailure::ConnectRefused,
        SendErrorKind::ConnectTimeout | SendErrorKind::Connect => LegFailure::ConnectFailed,
        SendErrorKind::Tls => LegFailure::Tls,
        SendErrorKind::ProxyRefused => LegFailure::ProxyRefused,
        SendErrorKind::ProxyAuth => LegFailure::ProxyAuthRequired,
        SendErrorKind::Timeout => LegFailure::TimeoutAfterWrite,
        SendErrorKind::Lost => LegFailure::ConnectionLost,
    }
}

pub(super) fn body_kind(headers: &HeaderMap) -> BodyKind {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return BodyKind::Other;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("text/event-stream") {
        BodyKind::EventStream
    } else if essence.eq_ignore_ascii_case("application/json") {
        BodyKind::Json
    } else {
        BodyKind::Other
    }
}

/// The text as one JSON value, surrounding JSON whitespace trimmed, otherwise unchanged.
pub(super) fn json_value(text: String) -> Option<Box<RawValue>> {
    let trimmed = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    if trimmed.len() == text.len() {
        RawValue::from_string(text).ok()
    } else {
        RawValue::from_string(trimmed.to_owned()).ok()
    }
}

fn probe(raw: &RawValue) -> Option<MessageProbe<'_>> {
    if !raw.get().starts_with('{') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

fn is_response(p: &MessageProbe<'_>) -> bool {
    (p.result.0 || p.error.0) && !p.method.0
}
