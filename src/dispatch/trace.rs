//! What a command's spans say, and the trace context handed on to the MCP server.
//!
//! Every span, attribute and event named here is listed in `docs/telemetry.md`, and an
//! integration test holds the spans a real receiver gets against that table: rename
//! nothing without it. This product's own attributes are under `tunnelgate.`; the
//! downstream span follows the OpenTelemetry MCP conventions. Nothing of a payload, a
//! body or a header value enters a span, except what is checked to be harmless here: ids
//! and names through `safe_token`/`safe_method`, a protocol revision of date shape, a
//! JSON-RPC error code, and session ids hashed.
//!
//! Propagation (`telemetry.propagate`): the forwarded message carries the downstream
//! span's own context, so that the MCP server's span is its child. With span export off
//! there is no such span, and nothing is added.

use tracing::field::Empty;

use crate::downstream::{LegResult, Transport, TransportKind};
use crate::protocol::{
    header_trace_fields, header_value, is_protocol_revision, reply_facts, with_trace_headers, Command, CommandKind,
    DiscoveryFailure, InvalidCommand, JsonRpcPayload, NotText, RespType, TraceFields, WireHeaders,
    MCP_PROTOCOL_VERSION, MCP_SESSION_ID,
};
use crate::telemetry::{
    attrs, hashed_session_id, safe_method, safe_token, span_trace_context, CommandType, TraceContext,
    TraceContextSource,
};

/// Which carriers get the gateway's trace context on the way to an MCP server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Propagation {
    /// `traceparent`/`tracestate` request headers (HTTP channels).
    pub headers: bool,
    /// `params._meta.traceparent`/`tracestate` of requests and notifications.
    pub meta: bool,
}

/// What the transport is given instead of the command's own bytes and headers, when
/// propagation adds trace context; `None` fields mean "as received".
#[derive(Debug, Default)]
pub(super) struct Forwarded {
    pub(super) payload: Option<JsonRpcPayload>,
    pub(super) headers: Option<WireHeaders>,
}

/// The root span of one command, `tunnelgate.command`.
pub(super) fn command_span(
    command: &Result<Command, InvalidCommand>,
    command_type: CommandType,
    strict: bool,
) -> tracing::Span {
    match command {
        Ok(c) => tracing::info_span!(
            "tunnelgate.command",
            { attrs::REQUEST_ID } = %safe_token(c.request_id.as_str()),
            { attrs::CHANNEL } = %safe_token(c.channel.as_str()),
            { attrs::COMMAND_TYPE } = command_type.as_str(),
            { attrs::MCP_METHOD_NAME } = match &c.kind { CommandKind::JsonRpc(p) => p.method().map(safe_method), _ => None },
            { attrs::STRICT } = strict,
            { attrs::LEG_OUTCOME } = Empty,
            { attrs::DELIVERY_OUTCOME } = Empty,
            { attrs::ERROR_TYPE } = Empty,
            { attrs::OTEL_STATUS_CODE } = Empty,
        ),
        Err(invalid) => tracing::info_span!(
            "tunnelgate.command",
            { attrs::REQUEST_ID } = invalid.request_id.as_ref().map(|r| safe_token(r.as_str())),
            { attrs::CHANNEL } = %safe_token(invalid.channel.as_str()),
            { attrs::COMMAND_TYPE } = command_type.as_str(),
            { attrs::STRICT } = strict,
            { attrs::ERROR_TYPE } = invalid.reason.as_str(),
            { attrs::OTEL_STATUS_CODE } = "ERROR",
        ),
    }
}

/// The caller's trace context, if the command carries a valid one: `params._meta` first
/// (the MCP convention: it belongs to this message), else the connector headers, else the
/// polled command's own `trace_context`, which is not read at all when the headers name
/// `traceparent` or `tracestate` (in any case), as the official client ignores it then.
/// Each carrier holding a malformed value is handed to `malformed` once (to be counted);
/// the value itself goes nowhere.
pub(super) fn caller_context(cmd: &Command, malformed: impl Fn(TraceContextSource)) -> Option<TraceContext> {
    let read = |source: TraceContextSource, fields: TraceFields| {
        let extracted = TraceContext::extract(as_text(&fields.traceparent), as_text(&fields.tracestate));
        if extracted.malformed {
            malformed(source);
        }
        extracted.context
    };
    let meta = match &cmd.kind {
        // Most messages carry no trace context: skip the parse unless the key appears.
        CommandKind::JsonRpc(p) if p.raw().get().contains("traceparent") => {
            read(TraceContextSource::Meta, p.meta_trace_fields())
        }
        _ => None,
    };
    let header = read(TraceContextSource::Header, header_trace_fields(&cmd.headers));
    let headers_name_a_context = cmd
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("traceparent") || name.eq_ignore_ascii_case("tracestate"));
    let polled = match &cmd.trace_context {
        Some(polled) if !headers_name_a_context => read(
            TraceContextSource::Polled,
            TraceFields {
                traceparent: Some(Ok(polled.traceparent.clone())),
                tracestate: polled.tracestate.clone().map(Ok),
            },
        ),
        _ => None,
    };
    meta.or(header).or(polled)
}

/// A carrier field as [`TraceContext::extract`] reads it.
fn as_text(field: &Option<Result<String, NotText>>) -> Option<Option<&str>> {
    field.as_ref().map(|r| r.as_deref().ok())
}

/// The downstream CLIENT span, named `{mcp.method.name}` or `{mcp.method.name} {target}`
/// (the tool or prompt), with the MCP conventions' attributes known before the call.
///
/// A `debug` span, as every span inside the command's: created only when spans are
/// exported (the exporter's filter takes `tunnelgate` spans at `debug`) or the log level
/// is `debug`. The log shows only the command's span, so at `info` without export these
/// were built for nobody, and its attributes are not computed then either.
pub(super) fn downstream_span(cmd: &Command, transport: &Transport) -> tracing::Span {
    if !tracing::span_enabled!(tracing::Level::DEBUG) {
        return tracing::Span::none();
    }
    let (method, target, tool, prompt, request_id) = match &cmd.kind {
        CommandKind::JsonRpc(p) => {
            let method = p.method().map(safe_method).unwrap_or_else(|| "response".to_owned());
            let tool = p.tool_name().map(|t| safe_method(&t));
            let prompt = p.prompt_name().map(|t| safe_method(&t));
            let request_id = p.expects_response().then(|| p.id().map(json_rpc_id)).flatten();
            (
                method,
                tool.clone().or_else(|| prompt.clone()),
                tool,
                prompt,
                request_id,
            )
        }
        CommandKind::SessionTermination => ("session/terminate".to_owned(), None, None, None, None),
        CommandKind::OAuthDiscovery => ("oauth_discovery".to_owned(), None, None, None, None),
        CommandKind::Unknown(_) => ("unknown".to_owned(), None, None, None, None),
    };
    let name = match &target {
        Some(t) => format!("{method} {t}"),
        None => method.clone(),
    };
    let version = header_value(&cmd.headers, MCP_PROTOCOL_VERSION).filter(|v| is_protocol_revision(v));
    let session = header_value(&cmd.headers, MCP_SESSION_ID).map(hashed_session_id);
    let http = transport.kind() == TransportKind::Http;
    tracing::debug_span!(
        "tunnelgate.downstream",
        { attrs::OTEL_NAME } = %name,
        { attrs::OTEL_KIND } = "client",
        { attrs::MCP_METHOD_NAME } = %method,
        { attrs::GEN_AI_TOOL_NAME } = tool,
        { attrs::GEN_AI_PROMPT_NAME } = prompt,
        { attrs::GEN_AI_OPERATION_NAME } = (method == "tools/call").then_some("execute_tool"),
        { attrs::JSONRPC_REQUEST_ID } = request_id,
        { attrs::MCP_PROTOCOL_VERSION } = version,
        { attrs::MCP_SESSION_ID } = session,
        { attrs::NETWORK_TRANSPORT } = transport.network_transport(),
        { attrs::NETWORK_PROTOCOL_NAME } = http.then_some("http"),
        { attrs::ERROR_TYPE } = Empty,
        { attrs::RPC_RESPONSE_STATUS_CODE } = Empty,
        { attrs::ERA_CALLER } = Empty,
        { attrs::ERA_SERVER } = Empty,
        { attrs::ERA_STEP } = Empty,
        { attrs::OTEL_STATUS_CODE } = Empty,
    )
}

/// What the leg's end tells the downstream span: the failure, the server's JSON-RPC
/// error code, a failed tool (`tool_error`: the leg is still `answered`), and what an
/// `initialize` answer establishes (session, revision) when the command did not say.
pub(super) fn record_downstream(span: &tracing::Span, cmd: &Command, leg: &LegResult) {
    if let Some(f) = &leg.failure {
        failed(span, f.kind());
        return;
    }
    let reply = &leg.reply;
    if header_value(&cmd.headers, MCP_SESSION_ID).is_none() {
        if let Some(session) = reply.resp_headers.get(MCP_SESSION_ID).and_then(|v| v.first()) {
            span.record(attrs::MCP_SESSION_ID, hashed_session_id(session));
        }
    }
    let Some(facts) = reply
        .resp_json
        .as_deref()
        .filter(|_| reply.resp_type == RespType::JsonrpcResponse)
        .and_then(reply_facts)
    else {
        return;
    };
    if let Some(code) = facts.error_code {
        let code = code.to_string();
        span.record(attrs::ERROR_TYPE, code.as_str());
        span.record(attrs::RPC_RESPONSE_STATUS_CODE, code.as_str());
        span.record(attrs::OTEL_STATUS_CODE, "ERROR");
    } else if facts.tool_error && matches!(&cmd.kind, CommandKind::JsonRpc(p) if p.method() == Some("tools/call")) {
        failed(span, "tool_error");
    }
    let has_version = header_value(&cmd.headers, MCP_PROTOCOL_VERSION).is_some_and(is_protocol_revision);
    if let Some(version) = facts.protocol_version.filter(|_| !has_version) {
        span.record(attrs::MCP_PROTOCOL_VERSION, version.as_str());
    }
}

/// What a discovery that found no metadata tells the downstream span.
pub(super) fn record_discovery_failed(span: &tracing::Span, failure: DiscoveryFailure) {
    failed(span, failure.code());
}

/// `span` failed with `error_type`: its `error.type`, and the status `ERROR` with it.
fn failed(span: &tracing::Span, error_type: &str) {
    span.record(attrs::ERROR_TYPE, error_type);
    span.record(attrs::OTEL_STATUS_CODE, "ERROR");
}

/// A message and its headers with `span`'s trace context added, as `propagation` asks;
/// nothing at all when it asks nothing (bytes and headers as received). Meta goes into
/// requests and notifications, never into a client's response.
pub(super) fn forwarded(
    payload: Option<&JsonRpcPayload>,
    headers: &WireHeaders,
    transport: &Transport,
    propagation: Propagation,
    span: &tracing::Span,
) -> Forwarded {
    let set_headers = propagation.headers && transport.kind() == TransportKind::Http;
    let meta = payload.filter(|p| propagation.meta && p.method().is_some());
    if !set_headers && meta.is_none() {
        return Forwarded::default();
    }
    let Some(cx) = span_trace_context(span) else {
        return Forwarded::default();
    };
    let traceparent = cx.traceparent();
    Forwarded {
        payload: meta.and_then(|p| p.with_meta_trace(&traceparent, cx.tracestate())),
        headers: set_headers.then(|| with_trace_headers(headers, &traceparent, cx.tracestate())),
    }
}

/// A JSON-RPC id as spans show it: a string's text, a number's digits.
fn json_rpc_id(raw: &serde_json::value::RawValue) -> String {
    match serde_json::from_str::<serde_json::Value>(raw.get()) {
        Ok(serde_json::Value::String(s)) => safe_token(&s),
        Ok(serde_json::Value::Number(n)) => n.to_string(),
        _ => "<unprintable>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_malformed_trace_context_is_logged_under_this_modules_own_target() {
        assert_eq!(
            Some(super::super::observe::LOG_TRACE),
            module_path!().strip_suffix("::tests")
        );
    }
}
