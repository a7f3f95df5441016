//! Commands the simulator hands out: how callers describe them, how they are queued and
//! how they are written on the wire (schema `PolledCommandList`).
//!
//! JSON-RPC payloads stay raw bytes, so what an MCP client posted to the ingress is what
//! the gateway receives.

use std::time::SystemTime;

use rand::distr::{Alphanumeric, SampleString};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use crate::protocol::{JsonRpcPayload, MCP_SESSION_ID};

/// A command to queue. Build it with [`NewCommand::jsonrpc`],
/// [`NewCommand::session_termination`] or [`NewCommand::oauth_discovery`], then the
/// chained setters.
#[derive(Clone, Debug)]
pub struct NewCommand {
    /// The JSON-RPC message, sent byte for byte; `None` for session termination.
    pub(crate) jsonrpc: Option<Box<RawValue>>,
    /// Channel; `None` writes the default `main`.
    pub(crate) channel: Option<String>,
    /// `response_timeout`, written verbatim (it need not follow the grammar).
    pub(crate) response_timeout: Option<String>,
    /// Multi-valued headers, in order.
    pub(crate) headers: Vec<(String, Vec<String>)>,
    /// `command_type`, written verbatim (`jsonrpc`, `session_termination`, or anything).
    pub(crate) command_type: String,
    /// `trace_context` (wire 2026-08-25), written verbatim when set: any JSON, so that
    /// malformed carriers can be sent too.
    pub(crate) trace_context: Option<serde_json::Value>,
}

/// One element of a future poll's `commands`.
#[derive(Debug)]
pub(crate) enum Queued {
    Command(Box<Issued>),
    Raw(serde_json::Value),
}

/// A command with the identity the control plane assigned to it.
#[derive(Debug)]
pub(crate) struct Issued {
    pub(crate) request_id: String,
    pub(crate) shard_token: String,
    pub(crate) created_at: String,
    pub(crate) command: NewCommand,
}

/// What fault selectors and the record need to know about a command.
#[derive(Clone, Debug, Default)]
pub(crate) struct CommandFacts {
    pub(crate) request_id: Option<String>,
    pub(crate) shard_token: Option<String>,
    pub(crate) method: Option<String>,
    pub(crate) tool: Option<String>,
}

struct WireHeaders<'a>(&'a [(String, Vec<String>)]);

#[derive(serde::Serialize)]
struct WireCommand<'a> {
    request_id: &'a str,
    shard_token: &'a str,
    command_type: &'a str,
    channel: &'a str,
    created_at: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_timeout: Option<&'a str>,
    headers: WireHeaders<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_context: Option<&'a serde_json::Value>,
}

impl NewCommand {
    /// A `jsonrpc` command carrying `message` (a request, notification or response).
    pub fn jsonrpc(message: serde_json::Value) -> Self {
        let raw = serde_json::value::to_raw_value(&message).expect("a serde_json::Value always serializes");
        Self::jsonrpc_raw(raw)
    }

    /// A `jsonrpc` command carrying these exact bytes.
    pub fn jsonrpc_raw(raw: Box<RawValue>) -> Self {
        Self {
            jsonrpc: Some(raw),
            channel: None,
            response_timeout: None,
            headers: Vec::new(),
            command_type: "jsonrpc".to_owned(),
            trace_context: None,
        }
    }

    /// A `session_termination` command, with `Mcp-Session-Id` when given.
    pub fn session_termination(session_id: Option<&str>) -> Self {
        let cmd = Self {
            jsonrpc: None,
            channel: None,
            response_timeout: None,
            headers: Vec::new(),
            command_type: "session_termination".to_owned(),
            trace_context: None,
        };
        match session_id {
            Some(id) => cmd.header(MCP_SESSION_ID, id),
            None => cmd,
        }
    }

    /// An `oauth_discovery` command (the official client's extension; no payload of its
    /// own). Its answer is recorded like any other response POST.
    pub fn oauth_discovery() -> Self {
        Self {
            jsonrpc: None,
            channel: None,
            response_timeout: None,
            headers: Vec::new(),
            command_type: "oauth_discovery".to_owned(),
            trace_context: None,
        }
    }

    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = Some(channel.into());
        self
    }

    pub fn response_timeout(mut self, timeout: impl Into<String>) -> Self {
        self.response_timeout = Some(timeout.into());
        self
    }

    /// Adds a value under `name` (appended to an existing entry of the same name).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        match self.headers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) => values.push(value.into()),
            None => self.headers.push((name, vec![value.into()])),
        }
        self
    }

    /// Sets the command's `trace_context` to `value`, as written (valid or not).
    pub fn trace_context(mut self, value: serde_json::Value) -> Self {
        self.trace_context = Some(value);
        self
    }

    pub fn command_type(mut self, command_type: impl Into<String>) -> Self {
        self.command_type = command_type.into();
        self
    }

    fn method_and_tool(&self) -> (Option<String>, Option<String>) {
        let Some(payload) = self.jsonrpc.clone().and_then(JsonRpcPayload::from_raw) else {
            return (None, None);
        };
        (payload.method().map(str::to_owned), payload.tool_name())
    }
}

impl Issued {
    /// Gives `command` a fresh request id and shard token, stamped now.
    pub(crate) fn new(command: NewCommand) -> Self {
        let mut rng = rand::rng();
        Self {
            request_id: format!("req_{}", Alphanumeric.sample_string(&mut rng, 24)),
            shard_token: format!("shard_{}", Alphanumeric.sample_string(&mut rng, 32)),
            created_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            command,
        }
    }
}

impl Queued {
    /// The channel a poll filter selects it by: its `channel`, `main` when absent or empty.
    pub(crate) fn channel(&self) -> &str {
        let named = match self {
            Self::Command(c) => c.command.channel.as_deref(),
            Self::Raw(v) => v.get("channel").and_then(serde_json::Value::as_str),
        };
        named.filter(|name| !name.is_empty()).unwrap_or("main")
    }

    /// The request id, when it is a string.
    pub(crate) fn request_id(&self) -> Option<&str> {
        match self {
            Self::Command(c) => Some(&c.request_id),
            Self::Raw(v) => v.get("request_id").and_then(serde_json::Value::as_str),
        }
    }

    /// Ids, method and tool, as far as the queued JSON carries them.
    pub(crate) fn facts(&self) -> CommandFacts {
        match self {
            Self::Command(c) => {
                let (method, tool) = c.command.method_and_tool();
                CommandFacts {
                    request_id: Some(c.request_id.clone()),
                    shard_token: Some(c.shard_token.clone()),
                    method,
                    tool,
                }
            }
            Self::Raw(v) => {
                let text = |x: Option<&serde_json::Value>| x.and_then(serde_json::Value::as_str).map(str::to_owned);
                let rpc = v.get("jsonrpc");
                let tool = match text(rpc.and_then(|r| r.get("method"))).as_deref() {
                    Some("tools/call") => text(rpc.and_then(|r| r.pointer("/params/name"))),
                    _ => None,
                };
                CommandFacts {
                    request_id: text(v.get("request_id")),
                    shard_token: text(v.get("shard_token")),
                    method: text(rpc.and_then(|r| r.get("method"))),
                    tool,
                }
            }
        }
    }

    /// Appends this command's wire JSON to `out`.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        let written = match self {
            Self::Raw(v) => serde_json::to_writer(&mut *out, v),
            Self::Command(c) => serde_json::to_writer(
                &mut *out,
                &WireCommand {
                    request_id: &c.request_id,
                    shard_token: &c.shard_token,
                    command_type: &c.command.command_type,
                    channel: c.command.channel.as_deref().unwrap_or("main"),
                    created_at: &c.created_at,
                    response_timeout: c.command.response_timeout.as_deref(),
                    headers: WireHeaders(&c.command.headers),
                    jsonrpc: c.command.jsonrpc.as_deref(),
                    trace_context: c.command.trace_context.as_ref(),
                },
            ),
        };
        written.expect("writing JSON to a Vec cannot fail");
    }
}

/// Writes `{"commands":[...]}`.
pub(crate) fn poll_body(commands: &[Queued]) -> Vec<u8> {
    let mut out = b"{\"commands\":[".to_vec();
    for (i, c) in commands.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        c.write_json(&mut out);
    }
    out.extend_from_slice(b"]}");
    out
}

impl Serialize for WireHeaders<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, values) in self.0 {
            map.serialize_entry(name, values)?;
        }
        map.end()
    }
}
