//! The MCP session the gateway holds with each stdio child (pure): the `initialize` it
//! sends, what it keeps of the child's answer, how a caller's `initialize` is answered
//! from it, and what each caller declared it can be asked for.
//!
//! A stdio server has one session: the one its stdin's first `initialize` opened. So the
//! gateway opens it itself, on every spawn, and answers every caller's `initialize` from
//! the kept result; callers never reach the child's handshake. The session's revision is
//! the one the child answered; a caller asking for another one is answered with the
//! session's (as a server answers a version it does not speak: the caller decides whether
//! it can go on).
//!
//! Each caller gets an `Mcp-Session-Id` of the gateway's own that carries which client
//! capabilities (`sampling`, `elicitation`, `roots`) the caller declared, so that every
//! replica, and this one after a restart, can tell who may be asked what without any
//! shared state.
//!
//! Nothing here does I/O, logs or counts: [`handshake`] writes what is decided here to
//! the child and reads its answers.

mod handshake;

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

#[cfg(test)]
use crate::downstream::caller::SESSION_ID_PREFIX;
pub(super) use crate::downstream::caller::{Declared, Need};
use crate::downstream::era::EraSetting;
use crate::protocol::McpRevision;

/// The revision the gateway asks for by default: the latest revision with the
/// `initialize` handshake (2026-07-28 servers are discovered, not initialized).
pub(crate) const DEFAULT_PROTOCOL_VERSION: &str = McpRevision::LATEST_WITH_INITIALIZE.as_str();

/// JSON-RPC code of a server that speaks none of the client's revisions (2026-07-28):
/// the answer of a server that has no `initialize` handshake.
const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// JSON-RPC "method not found": a server without `initialize` at all.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params".
const INVALID_PARAMS: i64 = -32602;
/// The code of the gateway's refusal of a server request no caller can answer.
const NO_CALLER: i64 = -32603;

/// Who opens a stdio child's MCP session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// The gateway initializes every child itself and answers callers from the session;
    /// a child that refuses `initialize` as a 2026-07-28 server does is taken as
    /// discovered and passed through.
    Owned,
    /// Nothing is initialized by the gateway: every message passes through untouched (a
    /// 2026-07-28 server that is discovered rather than initialized).
    PassThrough,
}

/// The gateway's own `initialize` (`mcp.channels.NAME.initialize`).
#[derive(Clone, Debug)]
pub struct SessionSettings {
    pub mode: SessionMode,
    /// The server's era as configured (`mcp.channels.NAME.era`): `auto` detects it by
    /// this handshake, `legacy` requires an `InitializeResult`, `modern` never sends it.
    pub era: EraSetting,
    pub protocol_version: String,
    pub client_name: String,
    pub client_version: String,
    /// The client capabilities the session declares (a JSON object).
    pub capabilities: Map<String, Value>,
    /// Bound of one `initialize` exchange (the write, the answer, `initialized`).
    pub timeout: Duration,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            mode: SessionMode::Owned,
            era: EraSetting::Auto,
            protocol_version: DEFAULT_PROTOCOL_VERSION.to_owned(),
            client_name: "tunnelgate".to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities: default_capabilities(),
            timeout: Duration::from_secs(10),
        }
    }
}

/// What the session declares by default: every client capability a caller can be asked for.
fn default_capabilities() -> Map<String, Value> {
    Need::ALL
        .iter()
        .map(|need| (need.capability().to_owned(), Value::Object(Map::new())))
        .collect()
}

/// The gateway's `initialize` with pipe id `pipe`, as one line.
pub(super) fn initialize_line(settings: &SessionSettings, pipe: u64) -> Vec<u8> {
    let request = serde_json::json!({
        "jsonrpc": "2.0",
        "id": pipe,
        "method": "initialize",
        "params": {
            "protocolVersion": settings.protocol_version,
            "capabilities": settings.capabilities,
            "clientInfo": {"name": settings.client_name, "version": settings.client_version},
        },
    });
    let mut line = request.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// The notification that ends the handshake, as one line.
pub(super) const INITIALIZED_LINE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

/// What the gateway keeps of a child's `InitializeResult`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Session {
    /// The revision the child answered: the session's.
    pub protocol_version: String,
    /// The whole result, as the child sent it.
    result: Map<String, Value>,
}

impl Session {
    /// The child's `serverInfo.name`, if it gave one (logs only: a name, never a payload).
    pub(super) fn server_name(&self) -> Option<&str> {
        self.result.get("serverInfo")?.get("name")?.as_str()
    }

    /// The child's `serverInfo`, if it gave one (read by `/status`, bounded and redacted).
    pub(super) fn server_info(&self) -> Option<&Value> {
        self.result.get("serverInfo")
    }

    /// The whole `InitializeResult` (what the era bridge builds `server/discover` from).
    pub(super) fn result(&self) -> &Map<String, Value> {
        &self.result
    }
}

impl SessionSettings {
    /// Whether the configuration alone says the server has no handshake (`session =
    /// "pass_through"`, or `era = "modern"`): its children are never initialized.
    pub(super) fn configured_pass_through(&self) -> bool {
        self.mode == SessionMode::PassThrough || self.era == EraSetting::Modern
    }
}

/// How a child answered the gateway's `initialize`.
#[derive(Debug, PartialEq)]
pub(super) enum InitAnswer {
    /// A result: the session is open (once `initialized` is written).
    Opened(Session),
    /// The 2026-07-28 answer: no handshake here; the child is discovered, not initialized.
    Discovered,
    /// Another JSON-RPC error: the child cannot serve callers.
    Refused { code: i64 },
    /// Not an `InitializeResult` (no `protocolVersion`, not an object).
    Invalid(&'static str),
}

#[derive(Deserialize)]
struct AnswerProbe {
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<ErrorProbe>,
}

#[derive(Deserialize)]
struct ErrorProbe {
    #[serde(default)]
    code: Option<i64>,
}

/// Reads the child's answer to the gateway's `initialize`.
pub(super) fn read_init_answer(json: &str) -> InitAnswer {
    let Ok(probe) = serde_json::from_str::<AnswerProbe>(json) else {
        return InitAnswer::Invalid("the answer is not a JSON-RPC response");
    };
    match (probe.result, probe.error) {
        (_, Some(error)) => match error.code {
            Some(UNSUPPORTED_PROTOCOL_VERSION | METHOD_NOT_FOUND) => InitAnswer::Discovered,
            Some(code) => InitAnswer::Refused { code },
            None => InitAnswer::Invalid("the error has no integer code"),
        },
        (Some(Value::Object(result)), None) => match result.get("protocolVersion") {
            Some(Value::String(version)) if !version.is_empty() => InitAnswer::Opened(Session {
                protocol_version: version.clone(),
                result,
            }),
            _ => InitAnswer::Invalid("the result has no protocolVersion"),
        },
        (_, None) => InitAnswer::Invalid("the result is not an object"),
    }
}

#[derive(Deserialize)]
struct CallerInit {
    #[serde(default)]
    params: Option<CallerParams>,
}

#[derive(Deserialize)]
struct CallerParams {
    #[serde(default, rename = "protocolVersion")]
    protocol_version: Option<Value>,
    #[serde(default)]
    capabilities: Option<Value>,
}

/// The gateway's answer to a caller's `initialize`.
#[derive(Debug)]
pub(super) struct CallerAnswer {
    /// The JSON-RPC response, with the caller's own id.
    pub(super) json: Box<RawValue>,
    /// The caller's new `Mcp-Session-Id`, when the answer is a result.
    pub(super) session_id: Option<String>,
}

/// Answers a caller's `initialize` (its whole text, its id as raw JSON) from `session`.
/// `random_hex` is the random part of the session id minted for it.
pub(super) fn answer_caller(session: &Session, request: &str, id: &str, random_hex: &str) -> CallerAnswer {
    let params = serde_json::from_str::<CallerInit>(request).ok().and_then(|r| r.params);
    let Some(params) = params else {
        return refusal(id, INVALID_PARAMS, "Invalid params: initialize needs params");
    };
    if !matches!(params.protocol_version, Some(Value::String(_))) {
        return refusal(
            id,
            INVALID_PARAMS,
            "Invalid params: initialize needs params.protocolVersion (a string)",
        );
    }
    // Negotiation (MCP lifecycle): a server answers the requested revision when it
    // speaks it, else the one it speaks. The session speaks exactly one.
    let mut result = session.result.clone();
    result.insert(
        "protocolVersion".to_owned(),
        Value::String(session.protocol_version.clone()),
    );
    let declared = Declared::of_capabilities(params.capabilities.as_ref());
    let result = Value::Object(result).to_string();
    let json = RawValue::from_string(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#))
        .expect("a JSON id and a JSON object make a JSON response");
    CallerAnswer {
        json,
        session_id: Some(declared.mint_session_id(random_hex)),
    }
}

fn refusal(id: &str, code: i64, message: &str) -> CallerAnswer {
    CallerAnswer {
        json: error_response(id, code, message),
        session_id: None,
    }
}

fn error_response(id: &str, code: i64, message: &str) -> Box<RawValue> {
    let error = serde_json::json!({"code": code, "message": message}).to_string();
    RawValue::from_string(format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#))
        .expect("a JSON id and a JSON object make a JSON response")
}

/// The gateway's answer to a server request that no caller in flight declared the
/// capability for (`id` as raw JSON, as the child sent it), as one line.
pub(super) fn no_caller_line(id: &str, need: Need) -> Vec<u8> {
    let message = format!(
        "no caller with a request in flight declared the {} capability; the request cannot be answered",
        need.capability()
    );
    let mut line = error_response(id, NO_CALLER, &message).get().as_bytes().to_vec();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests;
