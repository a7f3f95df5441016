//! Polled commands: decoded one by one so that a malformed command is reported and
//! skipped (or answered) without losing the others in the same poll.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ChannelName, RequestId, ResponseTimeout, ShardToken, WireHeaders};

/// A command as the control plane sent it, parsed at the boundary.
#[derive(Debug)]
pub struct Command {
    pub request_id: RequestId,
    pub shard_token: ShardToken,
    pub channel: ChannelName,
    pub response_timeout: ResponseTimeout,
    pub headers: WireHeaders,
    pub kind: CommandKind,
    /// The command's `trace_context` (wire 2026-08-25), when it is an object whose
    /// members have the right types and bounds; anything else is `None` and never makes
    /// the command invalid. Whether it is a valid W3C context is read later.
    pub trace_context: Option<PolledTrace>,
}

/// A polled command's `trace_context` carrier, as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolledTrace {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl PolledTrace {
    /// Longest `traceparent` read (the W3C version-`00` form is 55 characters).
    const MAX_TRACEPARENT: usize = 55;
    /// Longest `tracestate` read.
    const MAX_TRACESTATE: usize = 512;

    /// The carrier of `value`: an object with a string `traceparent` of at most 55
    /// characters and, if present and not `null`, a string `tracestate` of at most 512;
    /// other members are ignored. Anything else carries nothing.
    fn of(value: Option<&serde_json::Value>) -> Option<Self> {
        let object = value?.as_object()?;
        let traceparent = object.get("traceparent")?.as_str()?;
        let tracestate = match object.get("tracestate") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(state)) => Some(state.clone()),
            Some(_) => return None,
        };
        let within = traceparent.len() <= Self::MAX_TRACEPARENT
            && tracestate.as_ref().is_none_or(|s| s.len() <= Self::MAX_TRACESTATE);
        within.then(|| Self {
            traceparent: traceparent.to_owned(),
            tracestate,
        })
    }
}

/// What to do, dispatched on `command_type` (never on field presence).
#[derive(Debug)]
pub enum CommandKind {
    JsonRpc(JsonRpcPayload),
    SessionTermination,
    /// `oauth_discovery`: not in the vendored contract, handled by the official client
    /// (an observed extension, see `contract/README.md`). It carries nothing of its own.
    OAuthDiscovery,
    /// A `command_type` this client does not know: answered with an error when it
    /// carries a JSON-RPC request, otherwise logged, counted and skipped.
    Unknown(UnknownCommand),
}

/// Every `command_type` this client knows: the contract's two and the official client's
/// `oauth_discovery`.
pub const KNOWN_COMMAND_TYPES: [&str; 3] = ["jsonrpc", "session_termination", "oauth_discovery"];

/// A command of a type this client does not know, with what it needs to tell its caller.
#[derive(Debug)]
pub struct UnknownCommand {
    /// The `command_type` as sent (unbounded and untrusted: sanitize before logging).
    pub command_type: String,
    /// Its `jsonrpc` member, when that is a JSON object.
    pub jsonrpc: Option<JsonRpcPayload>,
}

impl UnknownCommand {
    /// The JSON-RPC request it carries (a method and an id), whose caller waits for an
    /// answer.
    pub fn request(&self) -> Option<&JsonRpcPayload> {
        self.jsonrpc.as_ref().filter(|p| p.expects_response())
    }
}

/// A JSON-RPC message kept as the exact bytes received, with the two fields routing needs.
#[derive(Clone, Debug)]
pub struct JsonRpcPayload {
    raw: Box<RawValue>,
    method: Option<String>,
    id: Option<Box<RawValue>>,
}

/// A command that could not be decoded. It is answered with an error when it carries
/// what a response needs (request id and shard token), otherwise counted and skipped.
#[derive(Debug)]
pub struct InvalidCommand {
    pub request_id: Option<RequestId>,
    pub shard_token: Option<ShardToken>,
    pub channel: ChannelName,
    pub reason: InvalidReason,
}

/// Why a command could not be decoded: a closed set whose labels are stable and
/// payload-free (`error.type` in spans, `reason` in logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidReason {
    /// The command is not a JSON object of the expected shape.
    NotAnObject,
    /// `channel` is neither absent, `null` nor a non-empty string.
    InvalidChannel,
    /// `request_id` is absent, empty or not a string.
    MissingRequestId,
    /// `shard_token` is absent or not a string.
    MissingShardToken,
    /// `headers` is not an object of strings or string lists.
    InvalidHeaders,
    /// `command_type` is neither absent, `null` nor a string.
    InvalidCommandType,
    /// A `jsonrpc` command without its `jsonrpc` message.
    MissingJsonrpc,
    /// The `jsonrpc` message is not a JSON object.
    JsonrpcNotObject,
}

impl InvalidReason {
    /// The stable label (API: logs and spans; never rename one).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAnObject => "not_an_object",
            Self::InvalidChannel => "invalid_channel",
            Self::MissingRequestId => "missing_request_id",
            Self::MissingShardToken => "missing_shard_token",
            Self::InvalidHeaders => "invalid_headers",
            Self::InvalidCommandType => "invalid_command_type",
            Self::MissingJsonrpc => "missing_jsonrpc",
            Self::JsonrpcNotObject => "jsonrpc_not_object",
        }
    }
}

/// The poll body itself was unusable: nothing in it can be trusted.
#[derive(Debug, thiserror::Error)]
#[error("poll body is not a command list: {0}")]
pub struct PollDecodeError(#[source] serde_json::Error);

impl PollDecodeError {
    pub fn kind(&self) -> &'static str {
        "decode"
    }
}

#[derive(Deserialize)]
struct PollBody {
    commands: Vec<Box<RawValue>>,
}

/// The fields the gateway uses. Others (`created_at`, future additions) are accepted and
/// ignored: serde skips unknown fields here.
#[derive(Deserialize)]
struct WireCommand {
    request_id: Option<serde_json::Value>,
    shard_token: Option<serde_json::Value>,
    command_type: Option<serde_json::Value>,
    channel: Option<serde_json::Value>,
    response_timeout: Option<serde_json::Value>,
    headers: Option<serde_json::Value>,
    jsonrpc: Option<Box<RawValue>>,
    trace_context: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RpcProbe {
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    id: Option<Box<RawValue>>,
}

/// Decodes a `200` poll body. The outer list must parse; each command is decoded alone.
pub fn decode_poll(body: &[u8]) -> Result<Vec<Result<Command, InvalidCommand>>, PollDecodeError> {
    let poll: PollBody = serde_json::from_slice(body).map_err(PollDecodeError)?;
    Ok(poll.commands.iter().map(|raw| decode_command(raw)).collect())
}

fn as_string(v: Option<serde_json::Value>) -> Option<String> {
    match v {
        Some(serde_json::Value::String(s)) => Some(s),
        _ => None,
    }
}

fn decode_command(raw: &RawValue) -> Result<Command, InvalidCommand> {
    let invalid = |reason, request_id: Option<RequestId>, shard: Option<ShardToken>, channel| InvalidCommand {
        request_id,
        shard_token: shard,
        channel,
        reason,
    };
    let wire: WireCommand = match serde_json::from_str(raw.get()) {
        Ok(w) => w,
        Err(_) => return Err(invalid(InvalidReason::NotAnObject, None, None, ChannelName::main())),
    };
    let request_id = as_string(wire.request_id).filter(|s| !s.is_empty()).map(RequestId::new);
    let shard_token = as_string(wire.shard_token).map(ShardToken::new);
    // Absent, null or empty: `main`, as the official client routes it.
    let channel = match wire.channel {
        None | Some(serde_json::Value::Null) => Some(ChannelName::main()),
        Some(serde_json::Value::String(s)) if s.is_empty() => Some(ChannelName::main()),
        Some(serde_json::Value::String(s)) if !s.is_empty() => Some(ChannelName::new(s)),
        Some(_) => None,
    };
    let Some(channel) = channel else {
        return Err(invalid(
            InvalidReason::InvalidChannel,
            request_id,
            shard_token,
            ChannelName::main(),
        ));
    };
    let Some(request_id) = request_id else {
        return Err(invalid(InvalidReason::MissingRequestId, None, shard_token, channel));
    };
    let Some(shard_token) = shard_token else {
        return Err(invalid(
            InvalidReason::MissingShardToken,
            Some(request_id),
            None,
            channel,
        ));
    };
    let trace_context = PolledTrace::of(wire.trace_context.as_ref());
    let (headers, kind) = match decode_body(wire.headers, wire.command_type, wire.jsonrpc) {
        Ok(body) => body,
        Err(reason) => return Err(invalid(reason, Some(request_id), Some(shard_token), channel)),
    };
    Ok(Command {
        request_id,
        shard_token,
        channel,
        response_timeout: ResponseTimeout::from_json(wire.response_timeout.as_ref()),
        headers,
        kind,
        trace_context,
    })
}

/// The headers and what to do, for a command that carries what a response needs; checked
/// in this order: headers, `command_type`, the `jsonrpc` message.
fn decode_body(
    headers: Option<serde_json::Value>,
    command_type: Option<serde_json::Value>,
    jsonrpc: Option<Box<RawValue>>,
) -> Result<(WireHeaders, CommandKind), InvalidReason> {
    let headers = decode_headers(headers).ok_or(InvalidReason::InvalidHeaders)?;
    let command_type = match command_type {
        None | Some(serde_json::Value::Null) => "jsonrpc".to_owned(),
        Some(serde_json::Value::String(s)) => s,
        Some(_) => return Err(InvalidReason::InvalidCommandType),
    };
    let kind = match command_type.as_str() {
        "jsonrpc" => {
            let raw = jsonrpc.ok_or(InvalidReason::MissingJsonrpc)?;
            CommandKind::JsonRpc(JsonRpcPayload::from_raw(raw).ok_or(InvalidReason::JsonrpcNotObject)?)
        }
        "session_termination" => CommandKind::SessionTermination,
        "oauth_discovery" => CommandKind::OAuthDiscovery,
        _ => CommandKind::Unknown(UnknownCommand {
            command_type,
            jsonrpc: jsonrpc.and_then(JsonRpcPayload::from_raw),
        }),
    };
    Ok((headers, kind))
}

fn decode_headers(value: Option<serde_json::Value>) -> Option<WireHeaders> {
    let map = match value {
        None | Some(serde_json::Value::Null) => return Some(Vec::new()),
        Some(serde_json::Value::Object(m)) => m,
        Some(_) => return None,
    };
    let mut out = Vec::with_capacity(map.len());
    for (name, values) in map {
        let values = match values {
            serde_json::Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => Some(s),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?,
            serde_json::Value::String(s) => vec![s],
            _ => return None,
        };
        out.push((name, values));
    }
    Some(out)
}

impl JsonRpcPayload {
    /// Accepts a JSON object (request, notification or response); rejects anything else.
    pub fn from_raw(raw: Box<RawValue>) -> Option<Self> {
        if !raw.get().trim_start().starts_with('{') {
            return None;
        }
        let probe: RpcProbe = serde_json::from_str(raw.get()).ok()?;
        Some(Self {
            raw,
            method: probe.method,
            id: probe.id,
        })
    }

    /// The exact bytes received from the control plane.
    pub fn raw(&self) -> &RawValue {
        &self.raw
    }

    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// The JSON-RPC id exactly as sent (string or number), if any.
    pub fn id(&self) -> Option<&RawValue> {
        self.id.as_deref()
    }

    /// A request expects a terminal JSON-RPC response; notifications and client
    /// responses are acknowledged with `notify_ack`.
    pub fn expects_response(&self) -> bool {
        self.method.is_some() && self.id.is_some()
    }

    /// A client's response to a request the MCP server sent (sampling, elicitation,
    /// roots): no method, an id. It belongs to the leg that carried the server's request.
    pub fn is_reply(&self) -> bool {
        self.method.is_none() && self.id.is_some()
    }

    /// `params.name` of a `tools/call`, for span names; `None` for anything else.
    pub fn tool_name(&self) -> Option<String> {
        if self.method.as_deref() != Some("tools/call") {
            return None;
        }
        self.params_name()
    }

    /// `params.name`, if it is a string.
    pub(super) fn params_name(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Params {
            name: Option<String>,
        }
        #[derive(Deserialize)]
        struct Call {
            params: Option<Params>,
        }
        serde_json::from_str::<Call>(self.raw.get()).ok()?.params?.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A `jsonrpc` command with `trace_context` = `carrier` (raw JSON; `None`: absent).
    fn with_trace(carrier: Option<&str>) -> Command {
        let field = carrier.map_or(String::new(), |c| format!(r#","trace_context":{c}"#));
        let raw = format!(
            r#"{{"request_id":"r","shard_token":"s","command_type":"jsonrpc","created_at":"t","jsonrpc":{{"jsonrpc":"2.0","id":1,"method":"ping"}}{field}}}"#
        );
        decode_command(&RawValue::from_string(raw).unwrap()).expect("never invalid for its trace_context")
    }

    #[test]
    fn a_polled_trace_context_is_read_only_in_its_documented_shape_and_never_refuses_a_command() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            with_trace(Some(&format!(
                r#"{{"traceparent":"{valid}","tracestate":"vendor=value","x":1}}"#
            )))
            .trace_context,
            Some(PolledTrace {
                traceparent: valid.to_owned(),
                tracestate: Some("vendor=value".to_owned()),
            })
        );
        assert_eq!(
            with_trace(Some(&format!(r#"{{"traceparent":"{valid}","tracestate":null}}"#)))
                .trace_context
                .map(|t| t.tracestate),
            Some(None)
        );
        let long_parent = format!("{valid}0");
        let long_state = "a=".to_owned() + &"b".repeat(511);
        for carrier in [
            None,
            Some("null".to_owned()),
            Some("\"00-abc\"".to_owned()),
            Some("[1]".to_owned()),
            Some("{}".to_owned()),
            Some(r#"{"tracestate":"a=b"}"#.to_owned()),
            Some(r#"{"traceparent":42}"#.to_owned()),
            Some(format!(r#"{{"traceparent":"{valid}","tracestate":7}}"#)),
            Some(format!(r#"{{"traceparent":"{long_parent}"}}"#)),
            Some(format!(r#"{{"traceparent":"{valid}","tracestate":"{long_state}"}}"#)),
        ] {
            assert_eq!(with_trace(carrier.as_deref()).trace_context, None, "{carrier:?}");
        }
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            "\\PC{0,12}".prop_map(serde_json::Value::String),
            prop::sample::select(vec!["jsonrpc", "session_termination", "main", "r1", "30s", "0s"])
                .prop_map(|s| serde_json::Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec![
                        "request_id",
                        "shard_token",
                        "command_type",
                        "channel",
                        "created_at",
                        "response_timeout",
                        "headers",
                        "jsonrpc",
                        "id",
                        "method",
                        "params",
                        "x",
                    ]),
                    inner,
                    0..8,
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_poll(&bytes);
        }

        #[test]
        fn every_element_of_a_command_list_is_decoded_or_named_invalid(items in prop::collection::vec(arb_json(), 0..6)) {
            let body = serde_json::json!({ "commands": items });
            let decoded = decode_poll(body.to_string().as_bytes()).expect("a list always decodes");
            prop_assert_eq!(decoded.len(), items.len(), "nothing is lost");
            for (item, result) in items.iter().zip(decoded) {
                if let Err(invalid) = result {
                    prop_assert!(!invalid.reason.as_str().is_empty());
                    // An answerable invalid command keeps exactly what a response needs.
                    if let Some(id) = &invalid.request_id {
                        prop_assert_eq!(item.get("request_id").and_then(|v| v.as_str()), Some(id.as_str()));
                    }
                }
            }
        }
    }

    fn decode_one(json: &str) -> Result<Command, InvalidCommand> {
        let body = format!(r#"{{"commands":[{json}]}}"#);
        decode_poll(body.as_bytes()).unwrap().pop().unwrap()
    }

    #[test]
    fn the_contract_fixture_decodes() {
        let body = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../contract/fixtures/poll_command_envelope.json"
        ))
        .expect("the vendored contract is in contract/");
        let cmds = decode_poll(&body).unwrap();
        assert_eq!(cmds.len(), 2);
        let first = cmds[0].as_ref().unwrap();
        assert_eq!(first.request_id.as_str(), "cmd_fixture_jsonrpc");
        assert_eq!(first.channel.as_str(), "harpoon");
        assert_eq!(first.headers, vec![("x-test".to_owned(), vec!["alpha".to_owned()])]);
        let CommandKind::JsonRpc(p) = &first.kind else {
            panic!("jsonrpc")
        };
        assert_eq!(p.method(), Some("tools/list"));
        assert_eq!(p.id().unwrap().get(), r#""rpc-1""#);
        assert!(p.expects_response());
        let second = cmds[1].as_ref().unwrap();
        assert!(matches!(second.kind, CommandKind::SessionTermination));
        assert_eq!(second.response_timeout, ResponseTimeout::Unbounded);
    }

    #[test]
    fn payload_bytes_are_kept_exactly() {
        let payload = r#"{"params":{"z":1,"a":[1.50,2]},"id":7,"jsonrpc":"2.0","method":"tools/call","x-vendor":true}"#;
        let cmd = decode_one(&format!(
            r#"{{"request_id":"r","shard_token":"s","created_at":"t","jsonrpc":{payload}}}"#
        ))
        .unwrap();
        let CommandKind::JsonRpc(p) = cmd.kind else { panic!() };
        assert_eq!(p.raw().get(), payload);
        assert_eq!(p.id().unwrap().get(), "7");
    }

    #[test]
    fn unknown_command_types_are_kept_for_reporting() {
        let cmd =
            decode_one(r#"{"request_id":"r","shard_token":"s","created_at":"t","command_type":"teleport"}"#).unwrap();
        assert!(
            matches!(cmd.kind, CommandKind::Unknown(ref u) if u.command_type == "teleport" && u.request().is_none())
        );
        let cmd = decode_one(
            r#"{"request_id":"r","shard_token":"s","command_type":"teleport","jsonrpc":{"jsonrpc":"2.0","id":4,"method":"x"}}"#,
        )
        .unwrap();
        let CommandKind::Unknown(u) = cmd.kind else {
            panic!("unknown")
        };
        assert_eq!(u.request().and_then(|p| p.id()).map(RawValue::get), Some("4"));
        // A notification or a non-object is no request: nobody waits for its answer.
        for jsonrpc in [r#"{"jsonrpc":"2.0","method":"x"}"#, "[1]", "7"] {
            let cmd = decode_one(&format!(
                r#"{{"request_id":"r","shard_token":"s","command_type":"teleport","jsonrpc":{jsonrpc}}}"#
            ))
            .unwrap();
            assert!(
                matches!(cmd.kind, CommandKind::Unknown(ref u) if u.request().is_none()),
                "{jsonrpc}"
            );
        }
    }

    #[test]
    fn oauth_discovery_is_a_known_type_with_no_payload_of_its_own() {
        let cmd = decode_one(
            r#"{"request_id":"req_1","shard_token":"shard_1","command_type":"oauth_discovery","channel":"main","created_at":"2026-11-30T00:00:00Z","headers":{}}"#,
        )
        .unwrap();
        assert!(matches!(cmd.kind, CommandKind::OAuthDiscovery));
        assert!(KNOWN_COMMAND_TYPES.contains(&"oauth_discovery"));
        // An empty channel means `main`.
        let cmd = decode_one(r#"{"request_id":"r","shard_token":"s","command_type":"oauth_discovery","channel":""}"#)
            .unwrap();
        assert_eq!(cmd.channel.as_str(), "main");
    }

    #[test]
    fn dispatch_is_on_command_type_not_field_presence() {
        let cmd = decode_one(
            r#"{"request_id":"r","shard_token":"s","created_at":"t","command_type":"session_termination","jsonrpc":{"id":1,"method":"x"}}"#,
        )
        .unwrap();
        assert!(matches!(cmd.kind, CommandKind::SessionTermination));
    }

    #[test]
    fn malformed_commands_name_their_reason_and_keep_what_can_answer() {
        let cases = [
            (r#"[1,2]"#, "not_an_object"),
            (r#"{"shard_token":"s","jsonrpc":{}}"#, "missing_request_id"),
            (
                r#"{"request_id":"","shard_token":"s","jsonrpc":{}}"#,
                "missing_request_id",
            ),
            (r#"{"request_id":"r","jsonrpc":{}}"#, "missing_shard_token"),
            (r#"{"request_id":"r","shard_token":"s"}"#, "missing_jsonrpc"),
            (
                r#"{"request_id":"r","shard_token":"s","jsonrpc":[1]}"#,
                "jsonrpc_not_object",
            ),
            (
                r#"{"request_id":"r","shard_token":"s","jsonrpc":{},"headers":{"a":1}}"#,
                "invalid_headers",
            ),
            (
                r#"{"request_id":"r","shard_token":"s","jsonrpc":{},"channel":5}"#,
                "invalid_channel",
            ),
            (
                r#"{"request_id":"r","shard_token":"s","jsonrpc":{},"command_type":3}"#,
                "invalid_command_type",
            ),
        ];
        for (json, reason) in cases {
            let err = decode_one(json).expect_err(json);
            assert_eq!(err.reason.as_str(), reason, "{json}");
        }
        let err = decode_one(r#"{"request_id":"r","shard_token":"s","channel":"side"}"#).unwrap_err();
        assert_eq!(err.request_id.unwrap().as_str(), "r");
        assert_eq!(err.shard_token.unwrap().expose(), "s");
        assert_eq!(err.channel.as_str(), "side");
    }

    #[test]
    fn one_bad_command_does_not_lose_the_others() {
        let body = br#"{"commands":[{"request_id":"a","shard_token":"s","jsonrpc":{"jsonrpc":"2.0","method":"ping","id":1}}, 17, {"request_id":"b","shard_token":"s","jsonrpc":{"jsonrpc":"2.0","method":"notifications/initialized"}}]}"#;
        let cmds = decode_poll(body).unwrap();
        assert_eq!(cmds.len(), 3);
        assert!(cmds[0].is_ok() && cmds[1].is_err() && cmds[2].is_ok());
        let CommandKind::JsonRpc(p) = &cmds[2].as_ref().unwrap().kind else {
            panic!()
        };
        assert!(!p.expects_response());
    }

    #[test]
    fn an_unusable_poll_body_is_a_decode_error() {
        for body in [&b""[..], b"{}", b"[]", b"{\"commands\":{}}", b"{\"commands\":[1,"] {
            assert!(decode_poll(body).is_err());
        }
    }

    #[test]
    fn tool_names_are_read_only_from_tools_call() {
        let p = JsonRpcPayload::from_raw(
            RawValue::from_string(r#"{"id":1,"method":"tools/call","params":{"name":"echo"}}"#.into()).unwrap(),
        )
        .unwrap();
        assert_eq!(p.tool_name().as_deref(), Some("echo"));
        let p = JsonRpcPayload::from_raw(
            RawValue::from_string(r#"{"id":1,"method":"prompts/get","params":{"name":"x"}}"#.into()).unwrap(),
        )
        .unwrap();
        assert_eq!(p.tool_name(), None);
    }
}
