//! The shapes every Harpoon tool answers in: a success's content and structured result,
//! a tool error's `label <L>: <message>`, a status class, and a failed request's leg
//! outcome.
//!
//! Pure.

use serde_json::{json, Value};

use super::call::{CallFailure, Sent};
use crate::downstream::{LegFailure, LegOutcome};
use crate::telemetry::metrics::HarpoonStatusClass;

/// `{"content":[{"type":"text","text":...}],"structuredContent":...}`; the text is the
/// compact JSON with empty fields left out and `< > &` escaped, as upstream writes it.
pub(crate) fn success(structured: Value) -> Value {
    let text = escape_html(&serde_json::to_string(&omit_empty(structured.clone())).unwrap_or_default());
    json!({"content": [{"type": "text", "text": text}], "structuredContent": structured})
}

pub(crate) fn tool_error(label: &str, message: &str) -> Value {
    let label = if label.trim().is_empty() {
        "unknown"
    } else {
        label.trim()
    };
    json!({"content": [{"type": "text", "text": format!("label {label}: {message}")}], "isError": true})
}

fn omit_empty(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !is_empty(v))
                .map(|(k, v)| (k, omit_empty(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(omit_empty).collect()),
        other => other,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(b) => !b,
        Value::Null => true,
        Value::Number(_) => false,
    }
}

fn escape_html(s: &str) -> String {
    s.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The leg's outcome of a failed outbound request: whether anything may have reached
/// the target decides it.
pub(crate) fn outcome_of(failure: &CallFailure) -> (LegOutcome, Option<LegFailure>) {
    match failure.sent() {
        Sent::No if matches!(failure, CallFailure::Timeout { .. }) => {
            (LegOutcome::NotSent, Some(LegFailure::DeadlineBeforeSend))
        }
        Sent::No => (LegOutcome::NotSent, Some(LegFailure::ConnectFailed)),
        Sent::Answered => (LegOutcome::Answered, None),
        Sent::Maybe => (
            LegOutcome::Abandoned,
            Some(if matches!(failure, CallFailure::Timeout { .. }) {
                LegFailure::TimeoutAfterWrite
            } else {
                LegFailure::ConnectionLost
            }),
        ),
    }
}

pub(crate) fn status_class(status: u16) -> HarpoonStatusClass {
    match status / 100 {
        1 => HarpoonStatusClass::Informational,
        2 => HarpoonStatusClass::Successful,
        3 => HarpoonStatusClass::Redirection,
        4 => HarpoonStatusClass::ClientError,
        _ => HarpoonStatusClass::ServerError,
    }
}
