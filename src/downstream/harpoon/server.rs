//! The Harpoon MCP server's JSON-RPC methods and its three tools' answers, shaped as
//! upstream's (go-sdk) answers are wherever a caller can tell: `initialize`'s result,
//! `-32602` for bad arguments before anything runs, tool errors as `isError` results
//! reading `label <L>: <message>`, every answer posted `200` with
//! `Content-Type: application/json`, a notification acknowledged.
//!
//! One difference on purpose: a `tools/call` is served without a prior `initialize`
//! (upstream answers code 0 "invalid during session initialization" until the service
//! opens a new session, which it must do after every cut-short command).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::answer::{outcome_of, status_class, success, tool_error};
use super::call::{self, CallArgs, CallFailure};
use super::registry::Target;
use super::tools::{self, Limits};
use super::{rewrite, template, HarpoonTransport};
use crate::downstream::watch::Release;
use crate::downstream::{DownstreamRequest, LegFailure, LegOutcome, LegResult, Reply};
use crate::protocol::McpRevision;
use crate::protocol::{json_resp_headers, RespType};
use crate::strict::Admission;
use crate::telemetry::metrics::{HarpoonCallOutcome, HarpoonRefusalReason, HarpoonStatusClass, HARPOON_UNKNOWN_LABEL};

/// Protocol revisions `initialize` echoes (the official client's list, in its order);
/// anything else gets the first.
const REVISIONS: [McpRevision; 4] = [
    McpRevision::V2025_06_18,
    McpRevision::V2025_11_25,
    McpRevision::V2025_03_26,
    McpRevision::V2024_11_05,
];
const INSTRUCTIONS: &str = "Harpoon provides a constrained outbound HTTP client. Use list_targets to see allowlisted targets and call_target to make GET/POST/PUT requests with strict size, timeout, and redirect limits. get_oauth_target_audience is a narrow opt-in lookup for OAuth token-endpoint private_key_jwt audiences. Harpoon cannot reach arbitrary hosts or paths outside the configured allowlist.";
/// With at least one template: upstream's template wording, with the audience sentence
/// kept beside it as upstream's full client keeps it.
const TEMPLATE_INSTRUCTIONS: &str = "Harpoon provides a constrained outbound HTTP client. Use list_targets to see allowlisted targets. For exact targets, use call_target to make GET/POST/PUT requests with strict size, timeout, and redirect limits. For entries with template_version and parameters_schema, use call_target_template with the label and all parameters declared by parameters_schema; each value must satisfy that schema. Templates make GET requests to a fixed destination and do not follow redirects. get_oauth_target_audience is a narrow opt-in lookup for OAuth token-endpoint private_key_jwt audiences. Harpoon cannot reach arbitrary hosts or paths outside the configured allowlist.";

/// What one message produced: the JSON-RPC result or error, and the leg's outcome.
struct Answer {
    body: Result<Value, (i64, String)>,
    outcome: LegOutcome,
    failure: Option<LegFailure>,
}

impl Answer {
    fn local(body: Result<Value, (i64, String)>) -> Self {
        Self {
            body,
            outcome: LegOutcome::Answered,
            failure: None,
        }
    }
}

pub(super) async fn answer(
    harpoon: &HarpoonTransport,
    admission: &Admission,
    req: &DownstreamRequest<'_>,
) -> LegResult {
    let payload = req.payload;
    if admission.recheck().is_err() {
        let resp_type = if payload.expects_response() {
            RespType::JsonrpcResponse
        } else {
            RespType::NotifyAck
        };
        return LegResult::failed(LegFailure::NotAdmitted, payload.id(), resp_type);
    }
    let Some(method) = payload.method() else {
        return notify_ack();
    };
    let params = serde_json::from_str::<Value>(payload.raw().get())
        .ok()
        .and_then(|mut v| v.get_mut("params").map(Value::take));
    if payload.id().is_none() {
        return notify_ack();
    }
    let answer = match method {
        "initialize" => Answer::local(Ok(initialize(harpoon, params.as_ref()))),
        "ping" => Answer::local(Ok(json!({}))),
        "tools/list" => Answer::local(Ok(tools::list(harpoon.limits(), &harpoon.inner.settings.templates))),
        "resources/list" => Answer::local(Ok(json!({"resources": []}))),
        "tools/call" => {
            let raw = raw_arguments(payload.raw().get());
            tools_call(harpoon, admission, params.as_ref(), raw.as_deref(), req.deadline).await
        }
        other => Answer::local(Err((-32601, format!("method {other:?} not found")))),
    };
    let mut result = reply(payload.id(), answer.body);
    result.outcome = answer.outcome;
    result.failure = answer.failure;
    result
}

fn notify_ack() -> LegResult {
    LegResult::answered(Reply {
        resp_json: None,
        resp_headers: BTreeMap::new(),
        resp_code: 200,
        resp_type: RespType::NotifyAck,
    })
}

fn reply(id: Option<&RawValue>, body: Result<Value, (i64, String)>) -> LegResult {
    let id: Value = id
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
        .unwrap_or(Value::Null);
    let message = match body {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    };
    let raw = serde_json::value::to_raw_value(&message).expect("a JSON value serializes");
    LegResult::answered(Reply {
        resp_json: Some(raw),
        resp_headers: json_resp_headers(),
        resp_code: 200,
        resp_type: RespType::JsonrpcResponse,
    })
}

fn initialize(harpoon: &HarpoonTransport, params: Option<&Value>) -> Value {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str)
        .and_then(McpRevision::parse)
        .filter(|r| REVISIONS.contains(r))
        .unwrap_or(REVISIONS[0])
        .as_str();
    json!({
        "capabilities": {"tools": {}},
        "instructions": if harpoon.inner.settings.templates.is_empty() { INSTRUCTIONS } else { TEMPLATE_INSTRUCTIONS },
        "protocolVersion": asked,
        "serverInfo": {"name": "harpoon", "title": "Harpoon (Constrained HTTP Client)", "version": harpoon.inner.settings.version},
    })
}

impl HarpoonTransport {
    fn limits(&self) -> Limits {
        Limits {
            max_response_bytes: self.inner.settings.max_response_bytes,
            max_redirects: self.inner.settings.max_redirects,
        }
    }
}

async fn tools_call(
    harpoon: &HarpoonTransport,
    admission: &Admission,
    params: Option<&Value>,
    raw_arguments: Option<&str>,
    deadline: Option<tokio::time::Instant>,
) -> Answer {
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name == "call_target_template" && !harpoon.inner.settings.templates.is_empty() {
        // Upstream's handler checks its own arguments: refusals are tool errors.
        let answer = template::call_template(harpoon, admission, raw_arguments, deadline).await;
        return Answer {
            body: Ok(answer.result),
            outcome: answer.outcome,
            failure: answer.failure,
        };
    }
    let arguments = params.and_then(|p| p.get("arguments"));
    let schema = match name {
        "call_target" => tools::call_target_schema(harpoon.limits()),
        "list_targets" => tools::list_targets_schema(),
        "get_oauth_target_audience" => tools::audience_schema(),
        other => return Answer::local(Err((-32602, format!("unknown tool {other:?}")))),
    };
    let args = match tools::validate(&schema, arguments) {
        Ok(args) => args,
        Err(message) => return Answer::local(Err((-32602, message))),
    };
    match name {
        "list_targets" => Answer::local(Ok(success(list_targets(harpoon, &args)))),
        "get_oauth_target_audience" => Answer::local(Ok(audience(harpoon, &args))),
        _ => call_target(harpoon, admission, &args, deadline).await,
    }
}

/// `params.arguments` of a `tools/call` as it arrived (its bytes, duplicates and all).
fn raw_arguments(message: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        params: Option<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        arguments: Option<&'a RawValue>,
    }
    let message: Message<'_> = serde_json::from_str(message).ok()?;
    let params: Params<'_> = serde_json::from_str(message.params?.get()).ok()?;
    params.arguments.map(|a| a.get().to_owned())
}

fn strings(args: &Map<String, Value>, key: &str) -> Vec<String> {
    args.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

fn list_targets(harpoon: &HarpoonTransport, args: &Map<String, Value>) -> Value {
    let (categories, sources, tags) = (
        strings(args, "categories"),
        strings(args, "sources"),
        strings(args, "tags"),
    );
    let registry = harpoon.registry();
    let targets: Vec<Value> = registry
        .targets()
        .iter()
        .filter(|t| categories.is_empty() || categories.contains(&t.category))
        .filter(|t| sources.is_empty() || sources.contains(&t.category))
        .filter(|t| tags.iter().all(|tag| t.has_tag(tag)))
        .map(|t| {
            json!({"label": t.label, "description": t.description, "category": t.category,
                   "source": t.category, "tags": t.tags, "allowed_methods": ["GET", "POST", "PUT"]})
        })
        .collect();
    let limit = harpoon.inner.settings.max_response_bytes;
    let templates = harpoon
        .inner
        .settings
        .templates
        .iter()
        .filter(|_| categories.is_empty() || categories.iter().any(|c| c == "config"))
        .filter(|_| sources.is_empty() || sources.iter().any(|c| c == "config"))
        .filter(|_| tags.is_empty())
        .map(|t| template::schema::entry(t, limit));
    let targets: Vec<Value> = targets.into_iter().chain(templates).collect();
    json!({"targets": targets})
}

fn audience(harpoon: &HarpoonTransport, args: &Map<String, Value>) -> Value {
    let label = args.get("label").and_then(Value::as_str).unwrap_or_default();
    let metrics = &harpoon.inner.metrics;
    let registry = harpoon.registry();
    let Some(target) = registry.get(label) else {
        metrics.harpoon_refused(HarpoonRefusalReason::UnknownTarget);
        return tool_error(label, "unknown target");
    };
    if target.category != "oauth" || !target.has_tag("auth-server-metadata") || !target.has_tag("token-endpoint") {
        metrics.harpoon_refused(HarpoonRefusalReason::NotATokenEndpoint);
        return tool_error(label, "target is not an OAuth token endpoint");
    }
    let usable = url::Url::parse(&target.original).is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.host_str().is_some_and(|h| !h.is_empty())
            && u.username().is_empty()
            && u.password().is_none()
            && u.fragment().is_none()
    });
    if !usable {
        metrics.harpoon_refused(HarpoonRefusalReason::AudienceUnusable);
        return tool_error(label, "target URL cannot be used as an OAuth audience");
    }
    success(json!({"audience": target.original}))
}

async fn call_target(
    harpoon: &HarpoonTransport,
    admission: &Admission,
    args: &Map<String, Value>,
    deadline: Option<tokio::time::Instant>,
) -> Answer {
    let label = args.get("label").and_then(Value::as_str).unwrap_or_default().to_owned();
    let Some(target) = harpoon.registry().get(&label).cloned() else {
        if harpoon.inner.settings.templates.iter().any(|t| t.label == label) {
            refused_before_sending(harpoon, &label, HarpoonRefusalReason::TemplateRequiresTemplateTool);
            return Answer::local(Ok(tool_error(&label, "template target requires call_target_template")));
        }
        refused_before_sending(harpoon, HARPOON_UNKNOWN_LABEL, HarpoonRefusalReason::UnknownTarget);
        return Answer::local(Ok(tool_error(&label, "unknown target")));
    };
    let call_args = call_args(args, deadline);
    if call_args.body.len() > call_args.max_bytes {
        refused_before_sending(harpoon, &label, HarpoonRefusalReason::RequestTooLarge);
        return Answer::local(Ok(tool_error(&label, &CallFailure::RequestTooLarge.message())));
    }
    // In strict mode the hand-over is watched: a deadline during the connect sent nothing.
    let Ok(release) = Release::take(&harpoon.inner.connects, admission) else {
        return Answer {
            body: Ok(tool_error(
                &label,
                "not sent: the gateway is stopping or latched; safe to retry",
            )),
            outcome: LegOutcome::NotSent,
            failure: Some(LegFailure::NotAdmitted),
        };
    };
    let started = Instant::now();
    let method = call_args.method.clone();
    let settings = &harpoon.inner.settings;
    let user_agent = format!("tunnelgate/{}", settings.version);
    let result = call::call(
        &harpoon.inner.client,
        &harpoon.inner.registry,
        &target,
        call_args,
        &user_agent,
        settings.allow_plaintext_http,
        release,
    )
    .await;
    let latency = started.elapsed();
    match result {
        Ok(answered) => {
            let class = status_class(answered.status.as_u16());
            harpoon
                .inner
                .metrics
                .harpoon_call(&label, HarpoonCallOutcome::Success, class);
            tracing::info!(
                component = "harpoon",
                label = %label,
                url = %target.origin(),
                final_url = %super::registry::redacted_origin(&answered.served_by),
                method = %method,
                status_code = answered.status.as_u16(),
                response_bytes = answered.body.len(),
                latency_ms = latency.as_millis() as u64,
                "harpoon request completed"
            );
            Answer::local(Ok(success(result_of(harpoon, answered))))
        }
        Err(failure) => failed(harpoon, &label, &target, &method, failure, latency),
    }
}

/// Counts a call refused before anything was sent: `invalid_input` on `label`, and `reason`.
fn refused_before_sending(harpoon: &HarpoonTransport, label: &str, reason: HarpoonRefusalReason) {
    let metrics = &harpoon.inner.metrics;
    metrics.harpoon_call(label, HarpoonCallOutcome::InvalidInput, HarpoonStatusClass::NoStatus);
    metrics.harpoon_refused(reason);
}

fn failed(
    harpoon: &HarpoonTransport,
    label: &str,
    target: &Target,
    method: &Method,
    failure: CallFailure,
    latency: Duration,
) -> Answer {
    let metrics = &harpoon.inner.metrics;
    metrics.harpoon_call(label, failure.metric_outcome(), HarpoonStatusClass::NoStatus);
    if let Some(reason) = failure.refusal() {
        metrics.harpoon_refused(reason);
    }
    tracing::warn!(
        component = "harpoon",
        label = %label,
        url = %target.origin(),
        method = %method,
        error = failure.kind(),
        latency_ms = latency.as_millis() as u64,
        "harpoon request failed: {}",
        failure.message()
    );
    let (outcome, leg_failure) = outcome_of(&failure);
    Answer {
        body: Ok(tool_error(label, &failure.message())),
        outcome,
        failure: leg_failure,
    }
}

fn call_args(args: &Map<String, Value>, deadline: Option<tokio::time::Instant>) -> CallArgs {
    let int = |key: &str| args.get(key).and_then(Value::as_u64).unwrap_or_default();
    let mut timeout = Duration::from_millis(int("timeout_ms"));
    // The command's own deadline bounds the call too.
    if let Some(deadline) = deadline {
        timeout = timeout.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
    }
    let headers = args
        .get("headers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
        .collect();
    let method = match args.get("method").and_then(Value::as_str) {
        Some("POST") => Method::POST,
        Some("PUT") => Method::PUT,
        _ => Method::GET,
    };
    CallArgs {
        method,
        headers,
        body: Bytes::from(args.get("body").and_then(Value::as_str).unwrap_or_default().to_owned()),
        timeout,
        max_bytes: usize::try_from(int("max_response_bytes")).unwrap_or(usize::MAX),
        follow_redirects: args.get("follow_redirects").and_then(Value::as_bool).unwrap_or(true),
        max_redirects: usize::try_from(int("max_redirects")).unwrap_or(0),
    }
}

/// The tool's structured result: status, headers (names as Go writes them, URLs of
/// targets rewritten), the body (rewritten) in base64, the raw body's size.
fn result_of(harpoon: &HarpoonTransport, answered: call::Answered) -> Value {
    let registry = harpoon.registry();
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in &answered.headers {
        let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let text = if rewrite::is_rewritten_header(name.as_str()) {
            rewrite::header(&registry, &text)
        } else {
            text
        };
        headers
            .entry(crate::config::canonical_header(name.as_str()))
            .or_default()
            .push(text);
    }
    let body = rewrite::body(&registry, &answered.body).unwrap_or_else(|| answered.body.clone());
    json!({
        "status_code": answered.status.as_u16(),
        "headers": headers,
        "body_base64": base64::engine::general_purpose::STANDARD.encode(&body),
        "body_size_bytes": answered.body.len(),
        "truncated": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_written_as_go_writes_them() {
        assert_eq!(crate::config::canonical_header("www-authenticate"), "Www-Authenticate");
        assert_eq!(crate::config::canonical_header("content-type"), "Content-Type");
    }

    #[test]
    fn the_text_leaves_out_empty_fields_and_escapes_markup() {
        let v = success(json!({"a": "", "b": "<x>&", "t": false, "n": 0, "h": {}}));
        assert_eq!(v["content"][0]["text"], "{\"b\":\"\\u003cx\\u003e\\u0026\",\"n\":0}");
        assert_eq!(v["structuredContent"]["t"], false);
        let e = tool_error("  ", "unknown target");
        assert_eq!(e["content"][0]["text"], "label unknown: unknown target");
        assert_eq!(e["isError"], true);
    }
}
