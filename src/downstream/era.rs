//! The era bridge (pure): how a request of a 2026-07-28 caller ("modern": no handshake,
//! an envelope in every request's `_meta`) is served by a handshake-era server
//! ("legacy": one session opened by `initialize`) whose session the gateway owns.
//!
//! Each caller request is classified alone ([`plan`]): a legacy request (no envelope, or
//! `initialize`) takes the channel's usual path untouched; a modern one is validated in
//! the order the spec's reference SDK uses (the envelope's shape, then the mirrored
//! headers where the command carries them, then the revision), and is then either
//! answered here (`server/discover` from the owned session, the methods 2026-07-28
//! removed) or forwarded with the envelope stripped, its answer shaped as a modern
//! server's ([`shape_reply`]) and its log notifications filtered by the level the request
//! asked for ([`LogFilter`]).
//!
//! Invariants:
//! - nothing here decides to write anything downstream twice: a plan is one forward or
//!   none;
//! - a request that is refused or answered here is never forwarded;
//! - `server/discover` is never forwarded to a legacy server, and the removed methods
//!   (`ping`, `logging/setLevel`, `resources/subscribe`, `resources/unsubscribe`) of a
//!   modern caller never reach it either;
//! - the capabilities advertised to a modern caller are only those the bridge carries:
//!   `tasks` is dropped (a different protocol in each era), and so are the `listChanged`
//!   and `subscribe` flags, since `subscriptions/listen` is not carried yet.
//!
//! Nothing here does I/O, logs or counts: the transports call it.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{Notification, Reply};
pub(crate) use crate::config::EraSetting;
use crate::protocol::{json_resp_headers, JsonRpcPayload, McpRevision, RespType, WireHeaders};

/// The `_meta` keys of the 2026-07-28 envelope all start with this.
const ENVELOPE_PREFIX: &str = "io.modelcontextprotocol/";
const KEY_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const KEY_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const KEY_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const KEY_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The modern revisions the bridge serves to callers.
pub(crate) const SERVED_MODERN: [McpRevision; 1] = [McpRevision::V2026_07_28];

/// JSON-RPC codes the bridge answers with or maps.
mod code {
    pub(super) const INVALID_PARAMS: i64 = -32602;
    pub(super) const METHOD_NOT_FOUND: i64 = -32601;
    pub(super) const INTERNAL: i64 = -32603;
    pub(super) const HEADER_MISMATCH: i64 = -32020;
    pub(super) const UNSUPPORTED_VERSION: i64 = -32022;
    /// 2025-11-25 "resource not found": 2026-07-28 says `-32602`.
    pub(super) const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
}

/// The era a channel's server was found (or configured) to speak (`/status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerEra {
    /// It answered the gateway's `initialize`: modern callers are bridged.
    Legacy,
    /// It refused `initialize` as a 2026-07-28 server does, or is configured modern.
    Modern,
}

/// What the bridge does with one caller message.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Not a modern request: the channel's usual path, untouched.
    PassThrough,
    /// Answered here; nothing reaches the server.
    Local(Local),
    /// `server/discover`: answered here from the owned session ([`discover_reply`]).
    Discover,
    /// Forwarded with the envelope stripped; its answer shaped by [`shape_reply`].
    Forward(Box<Forward>),
    /// `subscriptions/listen`: carried onto the server's notifications (default mode).
    Listen(listen::Wants),
}

/// A local answer, and why (the `handling` a metric counts).
#[derive(Debug)]
pub(crate) struct Local {
    pub(crate) reply: Reply,
    pub(crate) refused: bool,
}

impl Local {
    /// What the bridge did, as `era_requests_total{handling}` counts it.
    pub(crate) fn handling(&self) -> crate::telemetry::EraHandling {
        if self.refused {
            crate::telemetry::EraHandling::Refused
        } else {
            crate::telemetry::EraHandling::AnsweredLocally
        }
    }
}

/// A modern request to forward to the legacy server.
#[derive(Debug)]
pub(crate) struct Forward {
    /// The request without the envelope (and without `inputResponses`/`requestState`).
    pub(crate) payload: JsonRpcPayload,
    pub(crate) shape: Shape,
    /// For `tools/call`, `prompts/get` and `resources/read` (the methods whose server may
    /// ask for input mid-call): what the bridge needs to hold the call across rounds.
    pub(crate) mrtr: Option<Mrtr>,
}

/// What binds a call that may be held across input rounds.
#[derive(Debug)]
pub(crate) struct Mrtr {
    /// The caller's `clientCapabilities` (what it may be asked for).
    pub(crate) capabilities: Value,
    /// [`state::params_digest`] of the call's parameters.
    pub(crate) digest: String,
    /// Present on a retry: the caller's `requestState` and `inputResponses`.
    pub(crate) continuation: Option<Continuation>,
}

/// A caller's retry of a call that answered `input_required`.
#[derive(Debug)]
pub(crate) struct Continuation {
    pub(crate) request_state: Value,
    pub(crate) input_responses: Option<Value>,
}

/// How to shape the answer of a forwarded modern request.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    /// The request's method (decides the cache hints).
    pub(crate) method: String,
    /// The level the request asked for; `None`: no `notifications/message` for it.
    pub(crate) log_level: Option<LogLevel>,
}

/// The request's `_meta` and the fields validation reads.
struct Parsed {
    method: String,
    params: Option<Map<String, Value>>,
}

/// Decides what the bridge does with `payload` (a caller message for a channel whose
/// server is legacy), given the command's headers.
pub(crate) fn plan(payload: &JsonRpcPayload, headers: &WireHeaders) -> Plan {
    let (Some(method), Some(id)) = (payload.method(), payload.id()) else {
        // Notifications and client responses: the channel's own rules (a caller's
        // `notifications/initialized` is already acknowledged and kept from the child).
        return Plan::PassThrough;
    };
    if method == "initialize" {
        // Legacy even when enveloped (py2 and the spec's dual-era rule).
        return Plan::PassThrough;
    }
    let modern_header = header(headers, "MCP-Protocol-Version").is_some_and(|v| !is_handshake_revision(v));
    // The common legacy request is told apart without parsing it.
    if !modern_header && method != "server/discover" && !payload.raw().get().contains(KEY_VERSION) {
        return Plan::PassThrough;
    }
    let Ok(Some(parsed)) = parse(payload.raw().get(), method) else {
        return Plan::PassThrough;
    };
    let meta = parsed.params.as_ref().and_then(|p| p.get("_meta"));
    let enveloped = meta.and_then(|m| m.get(KEY_VERSION)).is_some();
    if !enveloped && !modern_header && method != "server/discover" {
        return Plan::PassThrough;
    }
    match validate(&parsed, meta, headers) {
        Err(local) => Plan::Local(local.answer(id)),
        Ok(log_level) => route(payload, parsed, id, log_level),
    }
}

/// After validation: answered here, or forwarded stripped.
fn route(payload: &JsonRpcPayload, parsed: Parsed, id: &RawValue, log_level: Option<LogLevel>) -> Plan {
    match parsed.method.as_str() {
        "server/discover" => Plan::Discover,
        "ping" | "logging/setLevel" | "resources/subscribe" | "resources/unsubscribe" => Plan::Local(
            Refusal::new(
                code::METHOD_NOT_FOUND,
                format!("Method not found: {} was removed in MCP 2026-07-28", parsed.method),
            )
            .answer(id),
        ),
        "subscriptions/listen" => Plan::Listen(listen::Wants::of_request(parsed.params.as_ref())),
        m if m.starts_with("tasks/") => Plan::Local(
            Refusal::new(
                code::METHOD_NOT_FOUND,
                format!(
                    "Method not found: {m} is not carried to this handshake-era server (not advertised in server/discover)"
                ),
            )
            .answer(id),
        ),
        _ => match (mrtr(&parsed), strip(payload, parsed.params)) {
            (mrtr, Some(payload)) => Plan::Forward(Box::new(Forward {
                payload,
                shape: Shape {
                    method: parsed.method,
                    log_level,
                },
                mrtr,
            })),
            (_, None) => Plan::Local(Refusal::new(code::INTERNAL, "the request could not be re-encoded".to_owned()).answer(id)),
        },
    }
}

/// The methods whose server may ask for input mid-call (`mrtr.mdx` §Supported Requests).
pub(crate) fn may_ask(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// What a call that may be held needs: the caller's capabilities, the digest of its
/// parameters, and its continuation fields if it is a retry.
fn mrtr(parsed: &Parsed) -> Option<Mrtr> {
    if !may_ask(&parsed.method) {
        return None;
    }
    let params = parsed.params.as_ref();
    let capabilities = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(KEY_CAPABILITIES))
        .cloned()
        .unwrap_or(Value::Null);
    let continuation = params.and_then(|p| p.get("requestState")).map(|state| Continuation {
        request_state: state.clone(),
        input_responses: params.and_then(|p| p.get("inputResponses")).cloned(),
    });
    Some(Mrtr {
        capabilities,
        digest: state::params_digest(params),
        continuation,
    })
}

/// The request's method and params (an object, or none). `Err` for a `params` that is
/// not an object (left to the usual path: the server answers it as it would).
fn parse(json: &str, method: &str) -> Result<Option<Parsed>, ()> {
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(json) else {
        return Err(());
    };
    let params = match message.remove("params") {
        None | Some(Value::Null) => None,
        Some(Value::Object(p)) => Some(p),
        Some(_) => return Err(()),
    };
    Ok(Some(Parsed {
        method: method.to_owned(),
        params,
    }))
}

/// A refusal to answer with the caller's id.
struct Refusal {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl Refusal {
    fn new(code: i64, message: String) -> Self {
        Self {
            code,
            message,
            data: None,
        }
    }

    fn answer(self, id: &RawValue) -> Local {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = self.data {
            error["data"] = data;
        }
        Local {
            reply: json_reply(id, "error", error, http_status(self.code)),
            refused: true,
        }
    }
}

/// Checks a modern request in the reference order: the envelope's shape (`-32602`), the
/// mirrored headers where the command carries them (`-32020`), then the revision
/// (`-32022`). Returns the log level the request asked for.
fn validate(parsed: &Parsed, meta: Option<&Value>, headers: &WireHeaders) -> Result<Option<LogLevel>, Refusal> {
    let invalid = |what: &str| {
        Refusal::new(
            code::INVALID_PARAMS,
            format!("Invalid params: a 2026-07-28 request needs params._meta with {what}"),
        )
    };
    let Some(Value::Object(meta)) = meta else {
        return Err(invalid(
            "\"io.modelcontextprotocol/protocolVersion\" and \"io.modelcontextprotocol/clientCapabilities\"",
        ));
    };
    let Some(Value::String(version)) = meta.get(KEY_VERSION) else {
        return Err(invalid("\"io.modelcontextprotocol/protocolVersion\" (a string)"));
    };
    if !matches!(meta.get(KEY_CAPABILITIES), Some(Value::Object(_))) {
        return Err(invalid("\"io.modelcontextprotocol/clientCapabilities\" (an object)"));
    }
    let log_level = match meta.get(KEY_LOG_LEVEL) {
        None => None,
        Some(Value::String(level)) => Some(LogLevel::parse(level).ok_or_else(|| {
            Refusal::new(
                code::INVALID_PARAMS,
                format!("Invalid params: {level:?} is not a log level (debug, info, notice, warning, error, critical, alert, emergency)"),
            )
        })?),
        Some(_) => return Err(invalid("\"io.modelcontextprotocol/logLevel\" as a string, if at all")),
    };
    check_headers(parsed, version, headers)?;
    if !SERVED_MODERN.iter().any(|r| r.as_str() == version) {
        let mut refusal = Refusal::new(
            code::UNSUPPORTED_VERSION,
            format!("Unsupported protocol version: {version}"),
        );
        refusal.data = Some(json!({
            "supported": SERVED_MODERN.map(McpRevision::as_str),
            "requested": version,
        }));
        return Err(refusal);
    }
    Ok(log_level)
}

/// The 2026-07-28 header mirrors, where the command carries them, must equal the body.
fn check_headers(parsed: &Parsed, version: &str, headers: &WireHeaders) -> Result<(), Refusal> {
    let mismatch = |name: &str, body: &str| {
        Refusal::new(
            code::HEADER_MISMATCH,
            format!("Header mismatch: the {name} header does not match the request body ({body})"),
        )
    };
    if header(headers, "MCP-Protocol-Version").is_some_and(|h| h != version) {
        return Err(mismatch("MCP-Protocol-Version", "_meta protocolVersion"));
    }
    if header(headers, "Mcp-Method").is_some_and(|h| h != parsed.method) {
        return Err(mismatch("Mcp-Method", "method"));
    }
    if let Some(named) = header(headers, "Mcp-Name") {
        let field = if parsed.method == "resources/read" {
            "uri"
        } else {
            "name"
        };
        let body = parsed
            .params
            .as_ref()
            .and_then(|p| p.get(field))
            .and_then(Value::as_str);
        if body.is_some_and(|b| decode_name_header(named) != b) {
            return Err(mismatch("Mcp-Name", field));
        }
    }
    Ok(())
}

/// An `Mcp-Name` value: plain ASCII, or `=?base64?...?=` for anything else.
fn decode_name_header(value: &str) -> String {
    use base64::Engine as _;
    value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| value.to_owned())
}

/// The request with the envelope's keys (and `inputResponses`, `requestState`) removed;
/// `_meta` is dropped when nothing else is in it. Everything else is kept.
fn strip(payload: &JsonRpcPayload, params: Option<Map<String, Value>>) -> Option<JsonRpcPayload> {
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(payload.raw().get()) else {
        return None;
    };
    if let Some(mut params) = params {
        params.remove("inputResponses");
        params.remove("requestState");
        if let Some(Value::Object(meta)) = params.get_mut("_meta") {
            meta.retain(|k, _| !k.starts_with(ENVELOPE_PREFIX));
            if meta.is_empty() {
                params.remove("_meta");
            }
        }
        message.insert("params".to_owned(), Value::Object(params));
    }
    let raw = RawValue::from_string(Value::Object(message).to_string()).ok()?;
    JsonRpcPayload::from_raw(raw)
}

/// What the owned session's `InitializeResult` says, as `server/discover` needs it.
pub(crate) struct SessionView<'a> {
    pub(crate) result: &'a Map<String, Value>,
    /// Whether the channel carries `subscriptions/listen` (stdio, default mode): the
    /// server's `listChanged` and `subscribe` flags are advertised only then.
    pub(crate) carries_listen: bool,
}

impl SessionView<'_> {
    fn server_info(&self) -> Option<&Value> {
        self.result.get("serverInfo")
    }
}

/// The answer to a modern caller's `server/discover`, from the owned legacy session
/// (plain JSON, no notifications).
pub(crate) fn discover_reply(id: &RawValue, session: &SessionView<'_>) -> Reply {
    let mut result = Map::new();
    result.insert("resultType".to_owned(), json!("complete"));
    result.insert(
        "supportedVersions".to_owned(),
        json!(SERVED_MODERN.map(McpRevision::as_str)),
    );
    result.insert(
        "capabilities".to_owned(),
        Value::Object(advertised(session.result, session.carries_listen)),
    );
    if let Some(Value::String(instructions)) = session.result.get("instructions") {
        result.insert("instructions".to_owned(), json!(instructions));
    }
    result.insert("ttlMs".to_owned(), json!(0));
    result.insert("cacheScope".to_owned(), json!("private"));
    if let Some(info) = session.server_info() {
        result.insert("_meta".to_owned(), json!({ KEY_SERVER_INFO: info }));
    }
    json_reply(id, "result", Value::Object(result), 200)
}

/// [`discover_reply`], its step recorded on the current span.
pub(crate) fn discover_reply_traced(id: &RawValue, session: &SessionView<'_>) -> Reply {
    Step::DiscoverAnswered.trace();
    discover_reply(id, session)
}

/// The legacy capabilities a modern caller may rely on through the bridge.
fn advertised(result: &Map<String, Value>, carries_listen: bool) -> Map<String, Value> {
    let Some(Value::Object(caps)) = result.get("capabilities") else {
        return Map::new();
    };
    let mut caps = caps.clone();
    caps.remove("tasks");
    if carries_listen {
        return caps;
    }
    for (name, cap) in &mut caps {
        if let Value::Object(cap) = cap {
            cap.remove("listChanged");
            if name == "resources" {
                cap.remove("subscribe");
            }
        }
    }
    caps
}

/// Methods whose complete results carry cache hints in 2026-07-28.
fn cacheable(method: &str) -> bool {
    matches!(
        method,
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" | "resources/read"
    )
}

/// The legacy server's answer as a modern server's: `resultType`, the cache hints on
/// cacheable methods, `serverInfo` in `_meta`; error codes mapped to 2026-07-28's and the
/// HTTP status set from the code. An answer that is not a JSON-RPC response object is
/// returned as it came.
pub(crate) fn shape_reply(mut reply: Reply, shape: &Shape, server_info: Option<&Value>) -> Reply {
    let Some(raw) = reply.resp_json.as_ref() else {
        return reply;
    };
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(raw.get()) else {
        return reply;
    };
    if let Some(Value::Object(result)) = message.get_mut("result") {
        result.entry("resultType").or_insert_with(|| json!("complete"));
        if cacheable(&shape.method) && result.get("resultType") == Some(&json!("complete")) {
            result.entry("ttlMs").or_insert_with(|| json!(0));
            result.entry("cacheScope").or_insert_with(|| json!("private"));
        }
        if let Some(info) = server_info {
            let meta = result.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.entry(KEY_SERVER_INFO).or_insert_with(|| info.clone());
            }
        }
    } else if let Some(Value::Object(error)) = message.get_mut("error") {
        let status = map_error(error);
        if reply.resp_code < 300 {
            reply.resp_code = status;
        }
    }
    if let Ok(raw) = RawValue::from_string(Value::Object(message).to_string()) {
        reply.resp_json = Some(raw);
    }
    reply
}

/// Maps a legacy error object to 2026-07-28 (ERA §2.7) in place; returns its HTTP status.
fn map_error(error: &mut Map<String, Value>) -> u16 {
    let Some(original) = error.get("code").and_then(Value::as_i64) else {
        return 200;
    };
    let mapped = match original {
        code::LEGACY_RESOURCE_NOT_FOUND => code::INVALID_PARAMS,
        // Spec-only codes: none but the three defined may be emitted (-32042 included).
        -32099..=-32023 => code::INTERNAL,
        other => other,
    };
    if mapped != original {
        let data = error.remove("data");
        let mut carried = json!({"legacy_code": original});
        if let Some(data) = data {
            carried["legacy_data"] = data;
        }
        error.insert("code".to_owned(), json!(mapped));
        error.insert("data".to_owned(), carried);
    }
    http_status(mapped)
}

/// The HTTP status a modern server answers a JSON-RPC error with (py2's table).
fn http_status(code: i64) -> u16 {
    match code {
        -32700 | -32600 | -32602 | -32020 | -32021 | -32022 => 400,
        -32601 => 404,
        _ => 200,
    }
}

/// `{"jsonrpc":"2.0","id":ID,"<member>":value}` as a JSON reply.
fn json_reply(id: &RawValue, member: &str, value: Value, resp_code: u16) -> Reply {
    let text = format!(
        r#"{{"jsonrpc":"2.0","id":{},{}:{}}}"#,
        id.get(),
        Value::String(member.to_owned()),
        value
    );
    Reply {
        resp_json: Some(RawValue::from_string(text).expect("a JSON id and a JSON value make a JSON response")),
        resp_headers: json_resp_headers(),
        resp_code,
        resp_type: RespType::JsonrpcResponse,
    }
}

/// The first value of header `name` (case-insensitive) in a command's headers.
fn header<'a>(headers: &'a WireHeaders, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, values)| values.first())
        .map(String::as_str)
}

/// A revision of the handshake era (anything before 2026-07-28 that the gateway knows).
fn is_handshake_revision(version: &str) -> bool {
    McpRevision::parse(version).is_some_and(|r| r < McpRevision::V2026_07_28)
}

/// The answer to a `subscriptions/listen` on a channel that does not carry it.
pub(crate) fn listen_not_carried(id: &RawValue) -> Reply {
    Refusal::new(
        code::METHOD_NOT_FOUND,
        "Method not found: subscriptions/listen is not carried to this handshake-era server (not advertised in server/discover)".to_owned(),
    )
    .answer(id)
    .reply
}

/// Whether an answer to `server/discover` (or a refusal of it) names a 2026-07-28
/// revision: a `DiscoverResult` whose `supportedVersions` has one, or a `-32022` whose
/// `data.supported` has one. A discover answer without one is a handshake-era server's.
pub(crate) fn names_modern_revision(json: &str) -> bool {
    let Ok(message) = serde_json::from_str::<Value>(json) else {
        return false;
    };
    let listed = message
        .pointer("/result/supportedVersions")
        .or_else(|| message.pointer("/error/data/supported"));
    listed.and_then(Value::as_array).is_some_and(|versions| {
        versions
            .iter()
            .filter_map(Value::as_str)
            .any(|v| !is_handshake_revision(v) && McpRevision::parse(v).is_some())
    })
}

/// The `InitializeResult` of an answer to the gateway's `initialize`, if it is one.
pub(crate) fn initialize_result(json: &str) -> Option<Map<String, Value>> {
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(json) else {
        return None;
    };
    match message.remove("result") {
        Some(Value::Object(result)) if result.get("protocolVersion").is_some_and(Value::is_string) => Some(result),
        _ => None,
    }
}

/// The answer to a bridged request the server refused (HTTP `status`) because it no
/// longer knows the gateway's session: it ran nothing, and the next request opens a new
/// session. Its `tunnel_failure` is the server's HTTP refusal, as the contract names it.
pub(crate) fn session_lost_reply(id: &RawValue, status: u16) -> Reply {
    let failure = super::LegFailure::HttpStatus(status).tunnel_failure();
    let json = crate::protocol::synthesize_error(Some(id), SESSION_LOST_MESSAGE, &failure);
    Reply {
        resp_json: Some(json),
        resp_headers: json_resp_headers(),
        resp_code: 200,
        resp_type: RespType::JsonrpcResponse,
    }
}

/// What a caller of a bridged request reads when the server lost the gateway's session.
const SESSION_LOST_MESSAGE: &str = "not delivered to the MCP server: it no longer knows the gateway's session (it restarted or expired it) and did not run the request; a new session is opened for the next one; safe to retry";

pub(crate) mod ask;
mod continuation;
mod log;
pub(crate) mod params;
pub(crate) use log::{relay, LogFilter, LogLevel, RELAY_BOUND};
pub(crate) mod listen;
pub(crate) mod park;
mod trace;

pub(crate) use continuation::{continuation_refused, input_required_reply, Gone};
pub(crate) use trace::Step;

pub(crate) mod state;
pub(crate) mod up;

#[cfg(test)]
mod tests;
