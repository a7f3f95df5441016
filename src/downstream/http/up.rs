//! The era bridge the other way on an HTTP channel: a handshake-era caller served by a
//! 2026-07-28 Streamable HTTP server (one that answered the gateway's `server/discover`,
//! or is configured `era = "modern"`); [`crate::downstream::era::up`] decides.
//!
//! Invariants:
//! - the caller's `initialize` never reaches the server: it is answered from the
//!   server's `DiscoverResult`, with an `Mcp-Session-Id` of the gateway's that records
//!   what the caller declared (the server, which has no sessions, never sees it);
//! - every forwarded request carries the envelope and the 2026-07-28 headers
//!   (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), no session id and no
//!   `Last-Event-ID`;
//! - an `input_required` answer becomes requests to the caller on the call's reply path
//!   ([`crate::downstream::era::ask`]), then the call is retried with the answers and the
//!   `requestState` byte for byte, at most `max_rounds` rounds, within the command's bound.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::HttpTransport;
use crate::downstream::caller::Declared;
use crate::downstream::era::up::{self, UpPlan};
use crate::downstream::{DownstreamRequest, LegFailure, LegResult, NotifySink, Reply};
use crate::protocol::{McpRevision, RespType, WireHeaders, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::strict::Admission;

/// Input rounds per call (as the stdio channels' default `input_required.max_rounds`).
const MAX_ROUNDS: u32 = 8;

impl HttpTransport {
    /// A handshake-era caller's message (`plan` is not [`UpPlan::PassThrough`]): as it is
    /// to a server that speaks the handshake era (found by the caller's own `initialize`,
    /// which runs no tool: passed through first, and bridged only when the server refuses
    /// it as a 2026-07-28-only server does), bridged to a 2026-07-28-only one.
    pub(super) async fn legacy_caller(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        plan: UpPlan,
    ) -> LegResult {
        if let Some(discover) = self.modern_only(admission, req.deadline).await {
            return self.up_bridged(admission, req, notes, plan, &discover).await;
        }
        let leg = self.call_plain(admission, req, notes).await;
        if !matches!(plan, UpPlan::Initialize) || !up::refused_as_modern(&leg.reply) {
            return leg;
        }
        self.found_modern();
        match self.modern_only(admission, req.deadline).await {
            Some(discover) => self.up_bridged(admission, req, notes, plan, &discover).await,
            None => leg,
        }
    }

    /// A handshake-era caller's message to this 2026-07-28 server, as `plan` says.
    pub(super) async fn up_bridged(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        plan: UpPlan,
        discover: &Arc<Map<String, Value>>,
    ) -> LegResult {
        let id = req.payload.id();
        let result = match plan {
            UpPlan::PassThrough => return self.call_plain(admission, req, notes).await,
            UpPlan::Ack => Ok(Reply::acknowledged()),
            UpPlan::Local(reply) => Ok(reply),
            UpPlan::Initialize => {
                crate::downstream::era::Step::InitializeAnswered.trace();
                Ok(up::initialize_answer(
                    req.payload.id().expect("initialize is a request"),
                    req.payload.raw().get(),
                    discover,
                ))
            }
            UpPlan::Stamp => {
                crate::downstream::era::Step::Stamped.trace();
                self.up_call(admission, req, notes).await
            }
        };
        if admission.recheck().is_err() {
            return LegResult::failed(LegFailure::NotAdmitted, id, RespType::JsonrpcResponse);
        }
        match result {
            Ok(reply) => LegResult::answered(reply),
            Err(failure) => LegResult::failed(failure, id, RespType::JsonrpcResponse),
        }
    }

    /// A request stamped with the envelope and the 2026-07-28 headers; each
    /// `input_required` round asked of the caller and retried
    /// ([`crate::downstream::era::ask::Waiters::rounds`]).
    async fn up_call(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
    ) -> Result<Reply, LegFailure> {
        let method = req.payload.method().unwrap_or_default();
        let declared = Declared::of_session_id(session_id(req.headers).as_deref());
        let headers = modern_headers(req.headers, method, req.payload.raw().get());
        let limit = tokio::time::Instant::now() + self.inner.settings.request_timeout;
        let limit = req.deadline.map_or(limit, |d| d.min(limit));
        let headers = &headers;
        let send = |stamped: crate::protocol::JsonRpcPayload| async move {
            let stamped_req = DownstreamRequest {
                payload: &stamped,
                headers,
                deadline: req.deadline,
            };
            self.call_plain(admission, &stamped_req, notes).await
        };
        self.inner
            .up_waiters
            .rounds(req.payload, declared, (notes, limit), MAX_ROUNDS, send)
            .await
    }
}

/// The caller's `Mcp-Session-Id`, if it sent one.
fn session_id(headers: &WireHeaders) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(MCP_SESSION_ID))
        .and_then(|(_, v)| v.first().cloned())
}

/// The command's headers for a 2026-07-28 server: no session id, no `Last-Event-ID`, the
/// revision and the body's mirrors set (`Mcp-Name` in the base64 form when it is not
/// plain printable ASCII).
fn modern_headers(headers: &WireHeaders, method: &str, body: &str) -> WireHeaders {
    const DROPPED: [&str; 5] = [
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "mcp-method",
        "mcp-name",
    ];
    let mut out: WireHeaders = headers
        .iter()
        .filter(|(n, _)| !DROPPED.contains(&n.to_ascii_lowercase().as_str()))
        .cloned()
        .collect();
    out.push((
        MCP_PROTOCOL_VERSION.to_owned(),
        vec![McpRevision::V2026_07_28.as_str().to_owned()],
    ));
    out.push(("Mcp-Method".to_owned(), vec![method.to_owned()]));
    let field = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    let named = field.and_then(|field| {
        serde_json::from_str::<Value>(body)
            .ok()?
            .get("params")?
            .get(field)?
            .as_str()
            .map(str::to_owned)
    });
    if let Some(name) = named {
        out.push(("Mcp-Name".to_owned(), vec![name_header(&name)]));
    }
    out
}

/// An `Mcp-Name` value: as is when it is printable ASCII without surrounding spaces,
/// else `=?base64?<base64 of its UTF-8>?=`.
fn name_header(name: &str) -> String {
    use base64::Engine as _;
    let plain = name.bytes().all(|b| (0x20..0x7f).contains(&b)) && name.trim() == name && !name.starts_with("=?");
    if plain {
        return name.to_owned();
    }
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(name.as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_is_not_plain_ascii_travels_in_base64() {
        assert_eq!(name_header("echo"), "echo");
        assert_eq!(name_header("héllo wörld"), "=?base64?aMOpbGxvIHfDtnJsZA==?=");
        assert_eq!(name_header(" padded"), "=?base64?IHBhZGRlZA==?=");
    }

    #[test]
    fn the_caller_s_session_is_never_sent_and_the_mirrors_are_set() {
        let headers: WireHeaders = vec![
            ("Mcp-Session-Id".into(), vec!["tg1.x.e".into()]),
            ("Last-Event-ID".into(), vec!["7".into()]),
            ("Authorization".into(), vec!["Bearer t".into()]),
        ];
        let out = modern_headers(&headers, "tools/call", r#"{"params":{"name":"echo"}}"#);
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Authorization", MCP_PROTOCOL_VERSION, "Mcp-Method", "Mcp-Name"]);
        assert_eq!(out[3].1, ["echo"]);
    }
}
