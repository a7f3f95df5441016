//! The era bridge the other way on an HTTP channel: a handshake-era caller served by a
//! 2026-07-28 Streamable HTTP server (one that answered the gateway's `server/discover`,
//! or is configured `era = "modern"`); [`crate::downstream::era::up`] decides.
//!
//! Invariants:
//! - the caller's `initialize` never reaches the server: it is answered from the
//!   server's `DiscoverResult`, with an `Mcp-Session-Id` of the gateway's that records
//!   what the caller declared (the server, which has no sessions, never sees it);
//! - every forwarded request carries the envelope and the 2026-07-28 headers
//!   (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and on a `tools/call` the
//!   `Mcp-Param-*` of its tool's `x-mcp-header` arguments as the channel's last
//!   `tools/list` answer declared them), no session id and no `Last-Event-ID`;
//! - a `tools/call` the server refuses with `-32020` (headers and body disagree) is sent
//!   once more after the gateway lists the tools again, and never a third time;
//! - an `input_required` answer becomes requests to the caller on the call's reply path
//!   ([`crate::downstream::era::ask`]), then the call is retried with the answers and the
//!   `requestState` byte for byte, at most `max_rounds` rounds, within the command's bound.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::HttpTransport;
use crate::downstream::caller::Declared;
use crate::downstream::era::params;
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
        let started = tokio::time::Instant::now();
        let leg = self
            .call_plain(admission, req, notes)
            .await
            .timed_from(Some(started), req.payload);
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
    /// ([`crate::downstream::era::ask::Waiters::rounds`]). A `tools/call` also carries the
    /// `Mcp-Param-*` headers of its tool's listed `x-mcp-header` arguments; a `tools/list`
    /// answer is learnt from for later calls.
    async fn up_call(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
    ) -> Result<Reply, LegFailure> {
        let method = req.payload.method().unwrap_or_default();
        let body = req.payload.raw().get();
        let declared = Declared::of_session_id(session_id(req.headers).as_deref());
        let headers = modern_headers(req.headers, method, body);
        let limit = self.leg_deadline(req.deadline);
        let relisted = AtomicBool::new(false);
        let (headers, relisted) = (&headers, &relisted);
        let send = |stamped: crate::protocol::JsonRpcPayload| async move {
            let leg = self.send_stamped(admission, req, notes, &stamped, headers).await;
            let mismatch = leg
                .reply
                .resp_json
                .as_deref()
                .is_some_and(|r| params::is_header_mismatch(r.get()));
            if method != "tools/call" || !mismatch || relisted.swap(true, Ordering::Relaxed) {
                return leg;
            }
            // The server checks the `Mcp-Param-*` headers before it runs anything: the
            // refused call ran nothing, so the one resend runs the tool at most once.
            tracing::info!(channel = %self.inner.channel, "the MCP server refused a tools/call's Mcp-Param headers (-32020): the gateway lists the tools again and sends the call once more");
            if !self.relist(admission, req, declared, &stamped, limit).await {
                return leg;
            }
            self.send_stamped(admission, req, notes, &stamped, headers).await
        };
        let reply = self
            .inner
            .up_waiters
            .rounds(req.payload, declared, (notes, limit), MAX_ROUNDS, send)
            .await?;
        if method == "tools/list" {
            if let Some(raw) = reply.resp_json.as_deref() {
                self.inner.param_headers.learn(raw.get(), params::first_page(body));
            }
        }
        Ok(reply)
    }

    /// One stamped request with `headers` and, for a `tools/call`, the `Mcp-Param-*`
    /// headers the channel knows for its tool (values are never logged).
    async fn send_stamped(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        stamped: &crate::protocol::JsonRpcPayload,
        headers: &WireHeaders,
    ) -> LegResult {
        let mut headers = headers.clone();
        if req.payload.method() == Some("tools/call") {
            let mirrored = self.inner.param_headers.headers(stamped.raw().get());
            headers.extend(mirrored.into_iter().map(|(name, value)| (name, vec![value])));
        }
        let stamped_req = DownstreamRequest {
            payload: stamped,
            headers: &headers,
            deadline: req.deadline,
        };
        self.call_plain(admission, &stamped_req, notes).await
    }

    /// The gateway's own `tools/list`, stamped as the caller's requests are and sent the
    /// same way, page by page (at most [`params::RELIST_PAGES`], each by `limit`) until
    /// a page lists the tool `call` names or the listing ends; learnt from as a caller's
    /// listing is ([`params::ParamHeaders::learn`]). Whether the server answered with a
    /// listing.
    async fn relist(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        declared: Declared,
        call: &crate::protocol::JsonRpcPayload,
        limit: tokio::time::Instant,
    ) -> bool {
        let tool = serde_json::from_str::<Value>(call.raw().get())
            .ok()
            .and_then(|c| c.pointer("/params/name").and_then(Value::as_str).map(str::to_owned));
        let capabilities = declared.capabilities();
        // The server's messages on this request are not the caller's: nobody reads them.
        let (notes, _) = tokio::sync::mpsc::channel(1);
        let mut cursor: Option<String> = None;
        for _ in 0..params::RELIST_PAGES {
            let request = params::relist_request(cursor.as_deref());
            let Some(stamped) = crate::protocol::JsonRpcPayload::from_raw(
                RawValue::from_string(request).expect("a JSON value is JSON"),
            )
            .and_then(|p| up::stamp(&p, &capabilities, None)) else {
                return false;
            };
            let headers = modern_headers(req.headers, "tools/list", stamped.raw().get());
            let list_req = DownstreamRequest {
                payload: &stamped,
                headers: &headers,
                deadline: Some(limit),
            };
            let leg = self.call_plain(admission, &list_req, &notes).await;
            let Some(page) = leg
                .reply
                .resp_json
                .as_deref()
                .and_then(|raw| self.inner.param_headers.learn(raw.get(), cursor.is_none()))
            else {
                return false;
            };
            if page.next_cursor.is_none() || tool.as_ref().is_some_and(|t| page.names.contains(t)) {
                return true;
            }
            cursor = page.next_cursor;
        }
        true
    }
}

/// The caller's `Mcp-Session-Id`, if it sent one.
fn session_id(headers: &WireHeaders) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(MCP_SESSION_ID))
        .and_then(|(_, v)| v.first().cloned())
}

/// The command's headers for a 2026-07-28 server: no session id, no `Last-Event-ID`, no
/// `Mcp-Param-*` of the caller's, the revision and the body's mirrors set (`Mcp-Name` in
/// the base64 form when it is not plain printable ASCII). The `Mcp-Param-*` headers are
/// added per send ([`HttpTransport::send_stamped`]).
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
        .filter(|(n, _)| {
            let n = n.to_ascii_lowercase();
            !DROPPED.contains(&n.as_str()) && !n.starts_with("mcp-param-")
        })
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
        out.push(("Mcp-Name".to_owned(), vec![params::encode_header_value(&name)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_s_session_is_never_sent_and_the_mirrors_are_set() {
        let headers: WireHeaders = vec![
            ("Mcp-Session-Id".into(), vec!["tg1.x.e".into()]),
            ("Last-Event-ID".into(), vec!["7".into()]),
            ("Authorization".into(), vec!["Bearer t".into()]),
            ("mcp-param-region".into(), vec!["eu".into()]),
        ];
        let out = modern_headers(&headers, "tools/call", r#"{"params":{"name":"echo"}}"#);
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Authorization", MCP_PROTOCOL_VERSION, "Mcp-Method", "Mcp-Name"]);
        assert_eq!(out[3].1, ["echo"]);
    }
}
