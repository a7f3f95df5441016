//! The control-plane endpoints: `GET .../poll`, `POST .../response` and the tunnel
//! metadata `GET /v1/tunnels/{tunnel_id}`.
//!
//! Order of handling. Metadata: bearer key and tunnel id, then `200` with
//! `TunnelClientMetadata`; no faults apply and no command is handed out. Poll: fault first (a fault models what sits in front of the
//! service: it does not care about credentials), then bearer key and tunnel id, then the
//! request itself. Response POST: bearer key, tunnel id and the presence of a shard token
//! before a byte of the body is read (a caller without them cannot make the simulator
//! buffer anything), then the body, then faults (they select on the body), then the
//! request itself; the shard token is matched to the request named in the body last.
//! Every request is recorded, whatever its answer.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use bytes::Bytes;

use super::command::poll_body;
use super::fault::{FaultAction, PostView};
use super::record::{record_headers, LookupRecord, PollRecord, ResponseRecord};
use super::server::{never, ConnHandle};
use super::state::{Refusal, Shared};
use super::validate::{self, ApiError};

const LIMIT_MAX: u64 = 25;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json(self.status, self.body())
    }
}

fn json(status: StatusCode, body: Bytes) -> Response {
    (status, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The response a status fault answers with (body, and `Retry-After` when scripted).
fn fault_status(status: u16, retry_after: Option<&str>) -> Response {
    let mut resp = ApiError::for_fault(status).into_response();
    if let Some(v) = retry_after.and_then(|v| http::HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert(http::header::RETRY_AFTER, v);
    }
    resp
}

/// Carries out a fault: `hold` and `close` never return (the request stays pending),
/// `status` returns the answer to send, `delay` waits and lets normal handling go on.
async fn apply_fault(action: FaultAction, conn: &ConnHandle) -> Option<Response> {
    match action {
        FaultAction::Hold => match never().await {},
        FaultAction::Close => {
            conn.close();
            match never().await {}
        }
        FaultAction::Status { status, retry_after } => Some(fault_status(status, retry_after.as_deref())),
        FaultAction::Delay(d) => {
            tokio::time::sleep(d).await;
            None
        }
        FaultAction::WrongCluster { token, revision } => Some(wrong_cluster(&token, revision)),
    }
}

/// `409 wrong_cluster` naming `token` and `revision`, as the service corrects a poll.
fn wrong_cluster(token: &str, revision: u64) -> Response {
    let body = format!(r#"{{"error":{{"code":"wrong_cluster","policy_revision":{revision}}}}}"#);
    let mut resp = json(StatusCode::CONFLICT, Bytes::from(body));
    if let Ok(value) = http::HeaderValue::from_str(token) {
        resp.headers_mut().insert("x-tunnel-shard-token", value);
    }
    resp
}

fn query_param<'a>(query: &'a str, name: &'a str) -> Option<&'a str> {
    query_params(query, name).next()
}

/// Every value of a repeated query parameter, in order.
fn query_params<'a>(query: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Parses an integer query parameter within `min..=max`; absent is `Ok(None)`.
fn bounded(query: &str, name: &str, min: u64, max: u64) -> Result<Option<u64>, ApiError> {
    let Some(raw) = query_param(query, name) else {
        return Ok(None);
    };
    match raw.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("{name} must be an integer in {min}..={max}"),
        )),
    }
}

/// `GET /v1/tunnels/{tunnel_id}`: the tunnel's metadata (`TunnelClientMetadata`), for
/// clients that check their credentials at startup without taking a command.
pub(crate) async fn tunnel(State(sim): State<Arc<Shared>>, Path(tunnel): Path<String>, headers: HeaderMap) -> Response {
    let resp = match validate::check_caller(&headers, &sim.api_key, &tunnel, &sim.tunnel_id) {
        Ok(()) => {
            let body = serde_json::json!({
                "id": sim.tunnel_id,
                "name": "tunnelgate simulator",
                "description": "a local control plane for tests and drills",
            });
            json(
                StatusCode::OK,
                Bytes::from(serde_json::to_vec(&body).expect("a json! value serializes")),
            )
        }
        Err(e) => e.into_response(),
    };
    sim.record_lookup(LookupRecord {
        headers: record_headers(&headers),
        status: resp.status().as_u16(),
    });
    resp
}

/// `GET /v1/tunnels/{tunnel_id}/poll?limit=N&timeout_ms=T[&channel=NAME...]`: with
/// `channel` parameters (the official client's poll filter) only those channels'
/// commands are handed out, the others wait for another poller.
pub(crate) async fn poll(
    State(sim): State<Arc<Shared>>,
    Path(tunnel): Path<String>,
    Extension(conn): Extension<ConnHandle>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = query.unwrap_or_default();
    let nth = sim.next_poll();
    let channels: Vec<String> = query_params(&query, "channel").map(str::to_owned).collect();
    let idx = sim.record_poll(PollRecord {
        limit: query_param(&query, "limit").and_then(|v| v.parse().ok()),
        timeout_ms: query_param(&query, "timeout_ms").and_then(|v| v.parse().ok()),
        channels: channels.clone(),
        query: query.clone(),
        headers: record_headers(&headers),
        ..PollRecord::default()
    });
    let pending = Unanswered {
        sim: &sim,
        idx,
        answered: false,
    };
    let plan = sim.faults.poll_plan(nth);
    if let Some(action) = plan.action {
        sim.fault_applied();
        sim.update_poll(idx, |p| p.fault = Some(action.clone()));
        if let Some(resp) = apply_fault(action, &conn).await {
            return pending.answer(Vec::new(), resp);
        }
    }
    let checked = validate::check_caller(&headers, &sim.api_key, &tunnel, &sim.tunnel_id).and_then(|()| {
        Ok((
            bounded(&query, "limit", 1, LIMIT_MAX)?,
            bounded(&query, "timeout_ms", 1, u64::MAX)?,
        ))
    });
    let (limit, timeout_ms) = match checked {
        Ok(v) => v,
        Err(e) => return pending.answer(Vec::new(), e.into_response()),
    };
    let wait = timeout_ms.map_or(sim.max_poll_wait, |t| Duration::from_millis(t).min(sim.max_poll_wait));
    let max = limit.map(|l| {
        usize::try_from(l)
            .unwrap_or(usize::MAX)
            .saturating_add(plan.extra_commands)
    });
    let commands = sim.wait_for_commands(max, wait, &channels).await;
    let resp = if commands.is_empty() {
        StatusCode::NO_CONTENT.into_response()
    } else {
        json(StatusCode::OK, Bytes::from(poll_body(&commands)))
    };
    pending.answer(commands, resp)
}

/// A recorded poll not answered yet. Dropped unanswered (the client closed the
/// connection, so hyper dropped the handler), it is marked `abandoned`: nothing was
/// taken from the queue for it.
struct Unanswered<'a> {
    sim: &'a Shared,
    idx: u64,
    answered: bool,
}

impl Unanswered<'_> {
    /// Records the answer (its status, and the commands it hands out) and returns it.
    fn answer(mut self, commands: Vec<super::command::Queued>, resp: Response) -> Response {
        let handed: Vec<String> = commands
            .iter()
            .filter_map(|c| c.request_id().map(str::to_owned))
            .collect();
        self.sim.update_poll(self.idx, |p| {
            p.status = Some(resp.status().as_u16());
            p.commands = commands.len();
            p.request_ids = handed;
        });
        self.answered = true;
        resp
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.sim.update_poll(self.idx, |p| p.abandoned = true);
        }
    }
}

/// `POST /v1/tunnels/{tunnel_id}/response`.
pub(crate) async fn response(
    State(sim): State<Arc<Shared>>,
    Path(tunnel): Path<String>,
    Extension(conn): Extension<ConnHandle>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rec = ResponseRecord {
        headers: record_headers(&headers),
        attempt: 1,
        ..ResponseRecord::default()
    };
    let caller = validate::check_caller(&headers, &sim.api_key, &tunnel, &sim.tunnel_id)
        .and_then(|()| validate::shard_token(&headers));
    let shard = match caller {
        Ok(shard) => shard,
        Err(e) => return refuse_unread(&sim, rec, e),
    };
    // A larger body gets `413 request_body_too_large` (`SimConfig::max_response_body`).
    let body = match axum::body::to_bytes(body, sim.max_response_body).await {
        Ok(b) => b,
        Err(_) => {
            let e = ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_body_too_large",
                "response body too large or unreadable",
            );
            return refuse_unread(&sim, rec, e);
        }
    };
    let (idx, fault) = record_post(&sim, rec, &body);
    if let Some(action) = fault {
        sim.fault_applied();
        sim.update_response(idx, |r| r.fault = Some(action.clone()));
        if let Some(resp) = apply_fault(action, &conn).await {
            return finish(&sim, idx, resp);
        }
    }
    let resp = settle(&sim, idx, &headers, &body, shard);
    finish(&sim, idx, resp)
}

/// Records a POST refused before its body was read.
fn refuse_unread(sim: &Shared, rec: ResponseRecord, error: ApiError) -> Response {
    let idx = sim.record_response(rec);
    finish(sim, idx, error.into_response())
}

/// Records a POST whose body was read, with what the simulator knows of the request it
/// names, and returns its record's index and the fault scripted for it, if any.
fn record_post(sim: &Shared, mut rec: ResponseRecord, body: &Bytes) -> (u64, Option<FaultAction>) {
    rec.json = serde_json::from_slice(body).ok();
    rec.body = body.clone();
    let field = |name: &str| {
        rec.json
            .as_ref()
            .and_then(|j| j.get(name))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    rec.request_id = field("request_id");
    rec.resp_type = field("resp_type");
    let resp_type = rec.resp_type.clone().unwrap_or_else(|| "jsonrpc_response".to_owned());
    let facts = sim.observe_post(rec.request_id.as_deref(), &resp_type);
    rec.order = facts.order;
    rec.attempt = facts.attempt;
    let view = PostView {
        order: facts.order,
        method: facts.method.as_deref(),
        tool: facts.tool.as_deref(),
        resp_type: super::fault::parse_resp_type(&resp_type),
        attempt: facts.attempt,
    };
    let idx = sim.record_response(rec);
    (idx, sim.faults.response_fault(&view).cloned())
}

/// The request itself, once faults are past: content type, payload, then the pending
/// request it answers and its shard token.
fn settle(sim: &Shared, idx: u64, headers: &HeaderMap, body: &Bytes, shard: &str) -> Response {
    if !validate::is_json_content_type(headers) {
        let e = ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_content_type",
            "Content-Type must be application/json",
        );
        return e.into_response();
    }
    let payload = match validate::payload(body, sim.accept_resp_timing) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    match sim.accept(&payload.request_id, shard, payload.reply) {
        Ok(completed) => {
            sim.update_response(idx, |r| r.completed = completed);
            json(StatusCode::OK, Bytes::from_static(br#"{"status":"ok"}"#))
        }
        Err(refusal) => refusal_error(refusal).into_response(),
    }
}

/// The answer to a valid POST the state refuses.
fn refusal_error(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::NotPending => ApiError::new(
            StatusCode::NOT_FOUND,
            "pending_request_not_found",
            "the pending request was already processed, expired, or never existed",
        ),
        Refusal::ShardTokenMismatch => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "tunnel_request_mismatch",
            "X-Tunnel-Shard-Token does not match the request",
        ),
    }
}

/// Records the status answered and returns the answer.
fn finish(sim: &Shared, idx: u64, resp: Response) -> Response {
    sim.update_response(idx, |r| r.status = Some(resp.status().as_u16()));
    resp
}
