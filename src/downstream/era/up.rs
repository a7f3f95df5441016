//! The other direction (pure): a handshake-era caller ("legacy": `initialize`, no
//! envelope) served by a 2026-07-28 server ("modern": no handshake, refuses
//! `initialize`). The gateway answers the caller's `initialize` from the server's
//! `server/discover`, answers or drops what 2026-07-28 removed, stamps the envelope on
//! every other request, takes the 2026-07-28 fields off the answers, and turns an
//! `input_required` answer into real requests to the caller (the transport does that:
//! [`input_required`] reads the answer).

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{json_reply, ENVELOPE_PREFIX, KEY_SERVER_INFO};
use crate::downstream::caller::Declared;
use crate::downstream::Reply;
use crate::protocol::{JsonRpcPayload, McpRevision, MCP_SESSION_ID};

/// What the gateway does with a legacy caller's message to a 2026-07-28 server.
#[derive(Debug)]
pub(crate) enum UpPlan {
    /// Not a handshake-era message (it carries the envelope, or is a reply): as it is.
    PassThrough,
    /// A notification 2026-07-28 removed: acknowledged, not forwarded.
    Ack,
    /// Answered here, nothing forwarded.
    Local(Reply),
    /// `initialize`: answered from the server's `server/discover`.
    Initialize,
    /// Forwarded with the envelope stamped on.
    Stamp,
}

/// Decides what to do with a legacy caller's `payload` on a 2026-07-28 server's channel.
/// A message with the envelope, or whose `MCP-Protocol-Version` header names a revision
/// after the handshake era, is a 2026-07-28 caller's: not this direction's.
pub(crate) fn plan(payload: &JsonRpcPayload, headers: &crate::protocol::WireHeaders) -> UpPlan {
    let Some(method) = payload.method() else {
        return UpPlan::PassThrough;
    };
    let modern_header =
        super::header(headers, "MCP-Protocol-Version").is_some_and(|v| !super::is_handshake_revision(v));
    if modern_header || payload.raw().get().contains(super::KEY_VERSION) || method == "server/discover" {
        return UpPlan::PassThrough;
    }
    let Some(id) = payload.id() else {
        return match method {
            "notifications/initialized" | "notifications/roots/list_changed" => UpPlan::Ack,
            _ => UpPlan::PassThrough,
        };
    };
    match method {
        "initialize" => UpPlan::Initialize,
        "ping" | "logging/setLevel" => UpPlan::Local(json_reply(id, "result", json!({}), 200)),
        "resources/subscribe" | "resources/unsubscribe" => UpPlan::Local(json_reply(
            id,
            "error",
            json!({"code": -32601, "message": format!("Method not found: {method} is not carried to this 2026-07-28 server")}),
            200,
        )),
        _ => UpPlan::Stamp,
    }
}

/// The gateway's own `server/discover` (envelope, no client capabilities), as one request.
pub(crate) fn discover_request() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": envelope(&json!({}))}})
        .to_string()
}

/// The envelope stamped on a forwarded request: 2026-07-28, the caller's capabilities,
/// the gateway as the client.
fn envelope(capabilities: &Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": McpRevision::V2026_07_28.as_str(),
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "tunnelgate", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// Whether a `DiscoverResult` names a handshake revision among its `supportedVersions`:
/// a server of both eras, which handshake-era callers reach untouched.
pub(crate) fn speaks_handshake(discover: &Map<String, Value>) -> bool {
    discover
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|versions| {
            versions
                .iter()
                .filter_map(Value::as_str)
                .any(super::is_handshake_revision)
        })
}

/// Whether an answer to a caller's `initialize` is a 2026-07-28-only server's refusal:
/// `-32022` (its `data.supported` names no handshake revision) or `-32601`.
pub(crate) fn refused_as_modern(reply: &Reply) -> bool {
    let Some(message) = reply
        .resp_json
        .as_deref()
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
    else {
        return false;
    };
    match message.pointer("/error/code").and_then(Value::as_i64) {
        Some(-32022) => !message
            .pointer("/error/data/supported")
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().filter_map(Value::as_str).any(super::is_handshake_revision)),
        Some(-32601) => true,
        _ => false,
    }
}

/// The `DiscoverResult` in a server's answer to the gateway's `server/discover`.
pub(crate) fn discover_result(json: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(json).ok()?.get("result")? {
        Value::Object(result) if result.get("capabilities").is_some() => Some(result.clone()),
        _ => None,
    }
}

/// The answer to a legacy caller's `initialize` (its whole text `request`), from the
/// server's `DiscoverResult`: the caller's revision when it is a handshake revision, else
/// `2025-11-25`; the capabilities without `extensions`; the server's identity, else the
/// gateway's; its instructions; and an `Mcp-Session-Id` of the gateway's that records
/// what the caller declared. Without `params.protocolVersion`: `-32602`, as a server
/// answers bad parameters.
pub(crate) fn initialize_answer(id: &RawValue, request: &str, discover: &Map<String, Value>) -> Reply {
    let params = serde_json::from_str::<Value>(request)
        .ok()
        .and_then(|r| r.get("params").cloned());
    let Some(asked) = params
        .as_ref()
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str)
    else {
        let error =
            json!({"code": -32602, "message": "Invalid params: initialize needs params.protocolVersion (a string)"});
        return json_reply(id, "error", error, 200);
    };
    let version = McpRevision::parse(asked)
        .filter(|r| *r <= McpRevision::LATEST_WITH_INITIALIZE)
        .unwrap_or(McpRevision::LATEST_WITH_INITIALIZE);
    let mut capabilities = discover.get("capabilities").cloned().unwrap_or_else(|| json!({}));
    if let Value::Object(caps) = &mut capabilities {
        caps.remove("extensions");
    }
    let server_info = discover
        .get("_meta")
        .and_then(|m| m.get(KEY_SERVER_INFO))
        .cloned()
        .unwrap_or_else(|| json!({"name": "tunnelgate", "version": env!("CARGO_PKG_VERSION")}));
    let mut result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities,
        "serverInfo": server_info,
    });
    if let Some(instructions) = discover.get("instructions").filter(|i| i.is_string()) {
        result["instructions"] = instructions.clone();
    }
    let mut reply = json_reply(id, "result", result, 200);
    let declared = Declared::of_capabilities(params.as_ref().and_then(|p| p.get("capabilities")));
    let session = declared.mint_session_id(&crate::protocol::random_hex(16));
    reply.resp_headers.insert(MCP_SESSION_ID.to_owned(), vec![session]);
    reply
}

/// `payload` with the envelope stamped into `params._meta` (and `inputResponses`,
/// `requestState` when given: a retry of an `input_required` round).
pub(crate) fn stamp(
    payload: &JsonRpcPayload,
    capabilities: &Value,
    retry: Option<(&Value, &Value)>,
) -> Option<JsonRpcPayload> {
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(payload.raw().get()) else {
        return None;
    };
    let params = message.entry("params").or_insert_with(|| json!({}));
    let Value::Object(params) = params else {
        return None;
    };
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    let Value::Object(meta) = meta else {
        return None;
    };
    if let Value::Object(stamped) = envelope(capabilities) {
        meta.extend(stamped);
    }
    if let Some((responses, state)) = retry {
        params.insert("inputResponses".to_owned(), responses.clone());
        params.insert("requestState".to_owned(), state.clone());
    }
    JsonRpcPayload::from_raw(RawValue::from_string(Value::Object(message).to_string()).ok()?)
}

/// A round the server asked for: its input requests (key -> `{method, params}`) and the
/// state to send back byte for byte.
#[derive(Debug)]
pub(crate) struct InputRequired {
    pub(crate) requests: Map<String, Value>,
    pub(crate) request_state: Option<Value>,
}

/// The `input_required` round in a server's answer, if it is one.
pub(crate) fn input_required(json: &str) -> Option<InputRequired> {
    let message = serde_json::from_str::<Value>(json).ok()?;
    let result = message.get("result")?;
    if result.get("resultType")? != "input_required" {
        return None;
    }
    let requests = match result.get("inputRequests") {
        Some(Value::Object(requests)) => requests.clone(),
        _ => Map::new(),
    };
    Some(InputRequired {
        requests,
        request_state: result.get("requestState").cloned(),
    })
}

/// A complete answer as a handshake-era server's: `resultType`, `ttlMs`, `cacheScope`
/// and the envelope's `_meta` keys taken off; everything else as the server sent it.
pub(crate) fn unshape(mut reply: Reply) -> Reply {
    let Some(raw) = reply.resp_json.as_ref() else {
        return reply;
    };
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(raw.get()) else {
        return reply;
    };
    if let Some(Value::Object(result)) = message.get_mut("result") {
        for key in ["resultType", "ttlMs", "cacheScope"] {
            result.remove(key);
        }
        if let Some(Value::Object(meta)) = result.get_mut("_meta") {
            meta.retain(|k, _| !k.starts_with(ENVELOPE_PREFIX));
            if meta.is_empty() {
                result.remove("_meta");
            }
        }
    }
    if let Ok(raw) = RawValue::from_string(Value::Object(message).to_string()) {
        reply.resp_json = Some(raw);
    }
    reply
}

/// The end of a call whose input round could not be completed, in `why`: a tool's error
/// result for `tools/call` (the model sees it), a JSON-RPC error otherwise.
pub(crate) fn round_failed(id: &RawValue, method: &str, why: &str) -> Reply {
    if method == "tools/call" {
        return json_reply(
            id,
            "result",
            json!({"content": [{"type": "text", "text": why}], "isError": true}),
            200,
        );
    }
    json_reply(id, "error", json!({"code": -32603, "message": why}), 200)
}

/// A server's input request as a request to a handshake-era caller, with the gateway's
/// id `id`; a url-mode elicitation gets the `elicitationId` 2025-11-25 requires.
pub(crate) fn caller_request(id: &str, request: &Value) -> Option<Value> {
    let method = request.get("method")?.as_str()?;
    let mut params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    if method == "elicitation/create" && params.get("mode").and_then(Value::as_str) == Some("url") {
        params["elicitationId"] = json!(id);
    }
    Some(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(json: &str) -> JsonRpcPayload {
        JsonRpcPayload::from_raw(RawValue::from_string(json.to_owned()).unwrap()).unwrap()
    }

    #[test]
    fn a_legacy_caller_s_messages_are_planned_by_method() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
                "Initialize",
            ),
            (r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, "Ack"),
            (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, "Local"),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
                "Stamp",
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, "PassThrough"),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
                "PassThrough",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
                "PassThrough",
            ),
        ];
        for (json, want) in cases {
            let got = format!("{:?}", plan(&payload(json), &Vec::new()));
            assert!(got.starts_with(want), "{json}: {got}");
        }
    }

    #[test]
    fn initialize_is_answered_from_discover_in_the_caller_s_revision_when_it_is_a_handshake_one() {
        let discover = json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}, "extensions": {"x": {}}},
            "instructions": "hi", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "2"}}});
        let discover = discover.as_object().unwrap();
        let id = RawValue::from_string("7".into()).unwrap();
        for (asked, answered) in [
            ("2025-06-18", "2025-06-18"),
            ("2099-01-01", "2025-11-25"),
            ("2026-07-28", "2025-11-25"),
        ] {
            let request =
                format!(r#"{{"jsonrpc":"2.0","id":7,"method":"initialize","params":{{"protocolVersion":"{asked}"}}}}"#);
            let reply = initialize_answer(&id, &request, discover);
            assert!(reply.resp_headers[MCP_SESSION_ID][0].starts_with("tg1."));
            let answer: Value = serde_json::from_str(reply.resp_json.unwrap().get()).unwrap();
            assert_eq!(answer["result"]["protocolVersion"], answered);
            assert_eq!(answer["result"]["capabilities"], json!({"tools": {}}));
            assert_eq!(answer["result"]["serverInfo"]["name"], "modern");
            assert_eq!(answer["result"]["instructions"], "hi");
        }
        let bad = initialize_answer(&id, r#"{"id":7,"method":"initialize"}"#, discover);
        let bad: Value = serde_json::from_str(bad.resp_json.unwrap().get()).unwrap();
        assert_eq!(bad["error"]["code"], -32602);
    }

    #[test]
    fn a_request_is_stamped_and_a_retry_carries_the_answers_and_the_state_as_given() {
        let p = payload(
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":5}}}"#,
        );
        let caps = json!({"elicitation": {}});
        let stamped = stamp(&p, &caps, Some((&json!({"k": {"action": "accept"}}), &json!("S")))).unwrap();
        let sent: Value = serde_json::from_str(stamped.raw().get()).unwrap();
        let meta = &sent["params"]["_meta"];
        assert_eq!(meta["progressToken"], 5);
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
        assert_eq!(meta["io.modelcontextprotocol/clientCapabilities"], caps);
        assert_eq!(sent["params"]["requestState"], "S");
        assert_eq!(sent["params"]["inputResponses"]["k"]["action"], "accept");
        assert_eq!(stamped.id().unwrap().get(), "3");
    }

    #[test]
    fn answers_lose_the_2026_fields_and_an_input_required_round_is_read() {
        let reply = json_reply(
            &RawValue::from_string("1".into()).unwrap(),
            "result",
            json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                "_meta": {"io.modelcontextprotocol/serverInfo": {}, "k": 1}}),
            200,
        );
        let plain: Value = serde_json::from_str(unshape(reply).resp_json.unwrap().get()).unwrap();
        assert_eq!(plain["result"], json!({"tools": [], "_meta": {"k": 1}}));
        let round = input_required(
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list"}},"requestState":"S"}}"#,
        )
        .unwrap();
        assert_eq!(round.requests.len(), 1);
        assert_eq!(round.request_state, Some(json!("S")));
        assert!(input_required(r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#).is_none());
    }

    #[test]
    fn a_url_elicitation_gets_the_id_a_2025_11_25_caller_needs() {
        let url = caller_request(
            "tg-ir-1",
            &json!({"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}}),
        )
        .unwrap();
        assert_eq!(url["params"]["elicitationId"], "tg-ir-1");
        assert_eq!(url["id"], "tg-ir-1");
        let roots = caller_request("tg-ir-2", &json!({"method": "roots/list"})).unwrap();
        assert_eq!(
            roots,
            json!({"jsonrpc": "2.0", "id": "tg-ir-2", "method": "roots/list", "params": {}})
        );
    }
}
