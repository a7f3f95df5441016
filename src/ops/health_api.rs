//! `/health`, `/health?details=true|false` and `/health/{component}`: the official
//! client's health document (its `docs/health.md`), so that a monitor written for it
//! works unchanged, filled from tunnelgate's own truth (the `/status` document: the
//! fence, the latch, the coordination role, the polls, the deliveries, the channels).
//!
//! Invariants:
//! - loopback peers only, even with `ops.allow_remote` (the guard in [`super::ui`] says
//!   403 before anything else); `GET` only (405 with `Allow: GET`);
//! - the aggregate takes no query or exactly one `details=true|false`; anything else is
//!   400; a component route takes no query (400); an unknown component is 404; a
//!   degraded component is still 200 (readiness is `ready`);
//! - `Content-Type: application/json`, `Cache-Control: no-store`; keys in the official
//!   order; nothing of a payload, a URL or a credential is in it.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::{OpsState, StatusDocument};

/// The component names, sorted (the official order).
const COMPONENTS: [&str; 6] = [
    "control-plane",
    "coordination",
    "dispatcher",
    "harpoon",
    "mcp",
    "response-delivery",
];

/// `GET /health` (and its `details` override).
pub(super) async fn aggregate(State(s): State<Arc<OpsState>>, method: Method, RawQuery(query): RawQuery) -> Response {
    if method != Method::GET {
        return not_get();
    }
    let details = match query.as_deref() {
        None => s.health_details,
        Some("details=true") => true,
        Some("details=false") => false,
        Some(_) => return bad("the only query /health takes is details=true or details=false"),
    };
    let status = s.status();
    let mut doc = Map::new();
    doc.insert("schema_version".into(), json!(1));
    doc.insert("live".into(), json!(true));
    doc.insert("ready".into(), json!(status.ready));
    doc.insert("snapshot_at".into(), json!(now()));
    doc.insert("runtime".into(), runtime(&s, &status));
    if details {
        let components: Map<String, Value> = COMPONENTS
            .iter()
            .map(|name| ((*name).to_owned(), component(&status, name)))
            .collect();
        doc.insert("components".into(), Value::Object(components));
    }
    json_response(StatusCode::OK, &Value::Object(doc))
}

/// `GET /health/{component}`: always detailed.
pub(super) async fn one(
    State(s): State<Arc<OpsState>>,
    method: Method,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    if method != Method::GET {
        return not_get();
    }
    if query.is_some() {
        return bad("a component route takes no query");
    }
    let Some(name) = COMPONENTS.iter().find(|c| **c == name) else {
        return (StatusCode::NOT_FOUND, no_store(), "unknown health component\n").into_response();
    };
    let status = s.status();
    let mut doc = Map::new();
    doc.insert("schema_version".into(), json!(1));
    doc.insert("snapshot_at".into(), json!(now()));
    doc.insert("component".into(), json!(name));
    if let Value::Object(fields) = component(&status, name) {
        doc.extend(fields);
    }
    json_response(StatusCode::OK, &Value::Object(doc))
}

/// `runtime`: who answers and where it stands.
fn runtime(s: &OpsState, status: &StatusDocument) -> Value {
    let lifecycle = match status.state {
        super::GatewayState::Starting => "starting",
        super::GatewayState::Draining => "draining",
        _ => "running",
    };
    let uptime = s.started.elapsed().map_or(0, |d| d.as_secs());
    json!({
        "instance_id": s.instance_id,
        "version": env!("CARGO_PKG_VERSION"),
        "flavor": "tunnelgate",
        "started_at": humantime::format_rfc3339_seconds(s.started).to_string(),
        "uptime_seconds": uptime,
        "lifecycle": lifecycle,
    })
}

/// One component: `{status, state, reason_code?, limited, details}`.
fn component(status: &StatusDocument, name: &str) -> Value {
    let (state, reason, details) = match name {
        "control-plane" => control_plane(status),
        "coordination" => coordination(status),
        "dispatcher" => dispatcher(status),
        "harpoon" => harpoon(status),
        "mcp" => mcp(status),
        _ => delivery(status),
    };
    let health = match (state, reason) {
        ("disabled", _) => "disabled",
        ("starting", _) => "unknown",
        (_, Some(_)) => "degraded",
        (_, None) => "ok",
    };
    let mut out = Map::new();
    out.insert("status".into(), json!(health));
    out.insert("state".into(), json!(state));
    if let Some(reason) = reason {
        out.insert("reason_code".into(), json!(reason));
    }
    out.insert("limited".into(), json!(false));
    out.insert("details".into(), details);
    Value::Object(out)
}

type Part = (&'static str, Option<&'static str>, Value);

fn control_plane(status: &StatusDocument) -> Part {
    let poll = &status.control_plane;
    let state = match (poll.last_successful_poll_at.is_some(), poll.consecutive_poll_errors) {
        (false, 0) => "starting",
        (_, 0) => "polling",
        _ => "backoff",
    };
    let reason = (poll.consecutive_poll_errors > 0).then_some(poll.last_poll_error_kind.unwrap_or("poll_failed"));
    let details = json!({
        "last_success": poll.last_successful_poll_at,
        "last_error": poll.last_poll_error_kind,
        "consecutive_failures": poll.consecutive_poll_errors,
        "current_poll_age_seconds": poll.last_successful_poll_age_seconds,
    });
    (state, reason, details)
}

fn coordination(status: &StatusDocument) -> Part {
    let Some(view) = &status.coordination else {
        return ("disabled", None, json!({}));
    };
    let details = serde_json::to_value(view).unwrap_or(Value::Null);
    let role = view.role.as_str();
    let reason = match role {
        "active" | "standby" => None,
        _ => Some("coordination_unavailable"),
    };
    (role, reason, details)
}

fn dispatcher(status: &StatusDocument) -> Part {
    let details = json!({
        "mode": status.mode.as_str(),
        "in_flight": status.commands.in_flight,
        "queued": status.commands.queued,
        "fence": status.fence,
        "fatal_category": status.fatal.as_ref().map(|f| f.category.as_str()),
    });
    match (&status.fatal, status.state) {
        (Some(_), _) => ("latched", Some("fatal_latch"), details),
        (None, super::GatewayState::Draining) => ("draining", Some("draining"), details),
        _ => ("running", None, details),
    }
}

fn harpoon(status: &StatusDocument) -> Part {
    let Some(h) = &status.harpoon else {
        return ("disabled", None, json!({}));
    };
    let details = json!({"routable": h.routable, "target_count": h.targets.len()});
    (if h.routable { "routable" } else { "no_targets" }, None, details)
}

fn mcp(status: &StatusDocument) -> Part {
    let channels: Vec<Value> = status
        .downstream
        .iter()
        .map(|c| {
            json!({
                "channel": c.status.channel,
                "up": c.status.up,
                "protocol_version": c.status.protocol_version,
                "tools": c.status.tools,
                "era": c.status.era.flatten(),
            })
        })
        .collect();
    let down = status.downstream.iter().any(|c| !c.status.up);
    let seen = status.downstream.iter().any(|c| c.status.protocol_version.is_some());
    let state = match (down, seen) {
        (true, _) => "down",
        (false, true) => "initialized",
        (false, false) => "not_observed",
    };
    (state, down.then_some("channel_down"), json!({ "channels": channels }))
}

fn delivery(status: &StatusDocument) -> Part {
    let terminal = &status.outcomes.deliveries;
    let count = |outcome: &str| terminal.get(outcome).copied().unwrap_or(0);
    let details = json!({
        "terminal": terminal,
        "notifications": status.outcomes.notifications,
        "last_acked_at": status.control_plane.last_acked_at,
    });
    let reason = (count("ambiguous") > 0).then_some("ambiguous_deliveries");
    let state = if count("acked") > 0 { "accepted" } else { "not_observed" };
    (state, reason, details)
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn no_store() -> [(header::HeaderName, HeaderValue); 1] {
    [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))]
}

fn json_response(code: StatusCode, doc: &Value) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        doc.to_string(),
    )
        .into_response()
}

fn bad(why: &'static str) -> Response {
    (StatusCode::BAD_REQUEST, no_store(), format!("{why}\n")).into_response()
}

fn not_get() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [
            (header::ALLOW, HeaderValue::from_static("GET")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        "GET only\n",
    )
        .into_response()
}
