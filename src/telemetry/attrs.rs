//! The names of every span attribute and span event the gateway exports, and of the
//! tracing bridge's own fields (`otel.*`): one place, so a name is written once.
//!
//! Each exported name has its row in `docs/telemetry.md` (a test below holds each
//! constant to the page; `tests/it/trace.rs` holds the page to what a real receiver
//! gets). Spans declare their fields as `{ attrs::NAME } = value`, which `tracing`'s
//! macros take for a constant name; a `record` takes the constant itself. Renaming one
//! is a breaking change for dashboards and trace queries.

/// The control plane's request id (`tunnelgate.command`).
pub(crate) const REQUEST_ID: &str = "tunnelgate.request_id";
/// The command's channel (`tunnelgate.command`).
pub(crate) const CHANNEL: &str = "tunnelgate.channel";
/// The command's `command_type` (`tunnelgate.command`).
pub(crate) const COMMAND_TYPE: &str = "tunnelgate.command_type";
/// Whether strict mode is on (`tunnelgate.command`).
pub(crate) const STRICT: &str = "tunnelgate.strict";
/// The era bridge: the caller's era (`modern`, `legacy`) of a bridged request.
pub(crate) const ERA_CALLER: &str = "tunnelgate.era.caller";
/// The era bridge: the server's era (`legacy`, `modern`).
pub(crate) const ERA_SERVER: &str = "tunnelgate.era.server";
/// The era bridge: the translation step taken for the request.
pub(crate) const ERA_STEP: &str = "tunnelgate.era.step";
/// How the downstream leg ended (`tunnelgate.command`).
pub(crate) const LEG_OUTCOME: &str = "tunnelgate.leg_outcome";
/// How a delivery ended (`tunnelgate.command`, `tunnelgate.deliver`, the notification event).
pub(crate) const DELIVERY_OUTCOME: &str = "tunnelgate.delivery_outcome";
/// The posted `resp_type` (`tunnelgate.deliver`).
pub(crate) const RESP_TYPE: &str = "tunnelgate.resp_type";
/// POST attempts made (`tunnelgate.deliver`).
pub(crate) const ATTEMPTS: &str = "tunnelgate.attempts";
/// One POST attempt's result (`tunnelgate.deliver.attempt`).
pub(crate) const ATTEMPT_RESULT: &str = "tunnelgate.attempt_result";
/// The latch's category (the latch event).
pub(crate) const FATAL_CATEGORY: &str = "tunnelgate.fatal.category";
/// The latch's exit code (the latch event).
pub(crate) const FATAL_EXIT_CODE: &str = "tunnelgate.fatal.exit_code";

/// What failed: a leg's failure kind, a JSON-RPC error code, `tool_error`, a delivery's
/// last attempt, or why a command was malformed.
pub(crate) const ERROR_TYPE: &str = "error.type";
/// The MCP method (`tunnelgate.command`, the downstream span, the notification event).
pub(crate) const MCP_METHOD_NAME: &str = "mcp.method.name";
/// The MCP protocol revision (downstream span).
pub(crate) const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
/// The MCP session id, hashed (downstream span).
pub(crate) const MCP_SESSION_ID: &str = "mcp.session.id";
/// The server's JSON-RPC error code (downstream span).
pub(crate) const RPC_RESPONSE_STATUS_CODE: &str = "rpc.response.status_code";
/// The JSON-RPC request id (downstream span).
pub(crate) const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
/// `tcp` or `pipe` (downstream span, `tunnelgate.reply`).
pub(crate) const NETWORK_TRANSPORT: &str = "network.transport";
/// `http` for HTTP channels (downstream span).
pub(crate) const NETWORK_PROTOCOL_NAME: &str = "network.protocol.name";
/// The tool of a `tools/call` (downstream span).
pub(crate) const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// The prompt of a `prompts/get` (downstream span).
pub(crate) const GEN_AI_PROMPT_NAME: &str = "gen_ai.prompt.name";
/// `execute_tool` for a `tools/call` (downstream span).
pub(crate) const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `POST` (`tunnelgate.deliver.attempt`).
pub(crate) const HTTP_REQUEST_METHOD: &str = "http.request.method";
/// 0 for the first attempt (`tunnelgate.deliver.attempt`).
pub(crate) const HTTP_REQUEST_RESEND_COUNT: &str = "http.request.resend_count";
/// The status that arrived (`tunnelgate.deliver.attempt`).
pub(crate) const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";

/// A notification from the MCP server was posted (event on `tunnelgate.command`).
pub(crate) const NOTIFICATION_EVENT: &str = "tunnelgate.notification";
/// The fatal latch stopped this command (event on `tunnelgate.command`).
pub(crate) const LATCH_EVENT: &str = "tunnelgate.latch";

/// The tracing bridge's span name field: the exported span's name.
pub(crate) const OTEL_NAME: &str = "otel.name";
/// The tracing bridge's span kind field (`client`; internal when absent).
pub(crate) const OTEL_KIND: &str = "otel.kind";
/// The tracing bridge's span status field (`ERROR`, set with `error.type`).
pub(crate) const OTEL_STATUS_CODE: &str = "otel.status_code";

/// Every exported attribute and event name above (the bridge's `otel.*` fields are not
/// exported as attributes).
#[cfg(test)]
const EXPORTED: &[&str] = &[
    REQUEST_ID,
    CHANNEL,
    COMMAND_TYPE,
    STRICT,
    LEG_OUTCOME,
    ERA_CALLER,
    ERA_SERVER,
    ERA_STEP,
    DELIVERY_OUTCOME,
    RESP_TYPE,
    ATTEMPTS,
    ATTEMPT_RESULT,
    FATAL_CATEGORY,
    FATAL_EXIT_CODE,
    ERROR_TYPE,
    MCP_METHOD_NAME,
    MCP_PROTOCOL_VERSION,
    MCP_SESSION_ID,
    RPC_RESPONSE_STATUS_CODE,
    JSONRPC_REQUEST_ID,
    NETWORK_TRANSPORT,
    NETWORK_PROTOCOL_NAME,
    GEN_AI_TOOL_NAME,
    GEN_AI_PROMPT_NAME,
    GEN_AI_OPERATION_NAME,
    HTTP_REQUEST_METHOD,
    HTTP_REQUEST_RESEND_COUNT,
    HTTP_RESPONSE_STATUS_CODE,
    NOTIFICATION_EVENT,
    LATCH_EVENT,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exported_name_has_a_row_in_docs_telemetry_md_and_none_is_written_twice() {
        let page = include_str!("../../docs/telemetry.md");
        for name in EXPORTED {
            assert!(
                page.contains(&format!("| `{name}` |")),
                "{name} has no row in docs/telemetry.md"
            );
        }
        let distinct: std::collections::BTreeSet<&str> = EXPORTED.iter().copied().collect();
        assert_eq!(distinct.len(), EXPORTED.len(), "a name is declared twice: {EXPORTED:?}");
    }
}
