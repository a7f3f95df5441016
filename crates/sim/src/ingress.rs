//! MCP ingress: `POST|DELETE|GET /v1/mcp/{tunnel_id}`, so any MCP client can talk
//! through the simulator to the gateway and on to the MCP server.
//!
//! A POSTed JSON-RPC message (request, notification or response) becomes a queued
//! `jsonrpc` command whose `response_timeout` is the ingress timeout; the client's
//! `Mcp-Session-Id`, `Mcp-Protocol-Version`, `Accept`, `Last-Event-ID` and the 2026-07-28
//! mirrors (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`) travel in the
//! command headers (the ingress takes no credentials and forwards none). The client gets
//! the gateway's final response: `202` for `notify_ack`, otherwise `resp_json` byte for
//! byte with `resp_code` (any 2xx becomes 200). When the client accepts
//! `text/event-stream` and a `jsonrpc_notify` arrives before the final, the answer is an
//! SSE stream: each notification as it arrives, then the final. No answer within the
//! ingress timeout: `504` with a JSON-RPC error. The tunnel id is checked before the body
//! is read, and the body is read up to [`MAX_INGRESS_BODY`].

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::command::NewCommand;
use super::state::{GatewayReply, Shared};
use super::validate::ApiError;
use crate::protocol::{RespType, LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};

/// Client headers copied into the command, in their canonical spelling: the session and
/// resumption headers, and the 2026-07-28 revision's mirrors of the body (`Mcp-Method`,
/// `Mcp-Name`; `Mcp-Param-*` are copied too, by prefix).
const FORWARDED: [&str; 6] = [
    MCP_SESSION_ID,
    MCP_PROTOCOL_VERSION,
    "Accept",
    LAST_EVENT_ID,
    "Mcp-Method",
    "Mcp-Name",
];
/// Header-name prefix of the 2026-07-28 parameter mirrors, copied as sent.
const FORWARDED_PREFIX: &str = "mcp-param-";
/// `resp_headers` copied back to the client.
const RETURNED: [&str; 2] = [MCP_SESSION_ID, MCP_PROTOCOL_VERSION];

/// Larger MCP request bodies get `413`.
const MAX_INGRESS_BODY: usize = 2 * 1024 * 1024;

/// JSON-RPC error code the ingress answers with when the gateway never replied.
const GATEWAY_TIMEOUT_CODE: i32 = -32001;

/// An SSE body fed by a task as gateway replies arrive.
pub(crate) struct Events(pub(crate) mpsc::Receiver<Bytes>);

impl futures_util::Stream for Events {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|o| o.map(Ok))
    }
}

/// `POST /v1/mcp/{tunnel_id}`.
pub(crate) async fn post(
    State(sim): State<Arc<Shared>>,
    Path(tunnel): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if tunnel != sim.tunnel_id {
        return ApiError::new(StatusCode::NOT_FOUND, "tunnel_not_found", "no such tunnel").into_response();
    }
    let Ok(body) = axum::body::to_bytes(body, MAX_INGRESS_BODY).await else {
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            -32600,
            "the request body is too large or could not be read",
        );
    };
    let raw = String::from_utf8(body.to_vec())
        .ok()
        .and_then(|s| RawValue::from_string(s).ok())
        .filter(|r| r.get().starts_with('{'));
    let Some(raw) = raw else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            -32700,
            "parse error: the body is not a JSON-RPC message object",
        );
    };
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(default)]
        id: Option<Box<RawValue>>,
    }
    let id = serde_json::from_str::<Probe>(raw.get()).ok().and_then(|p| p.id);
    let mut cmd = NewCommand::jsonrpc_raw(raw).response_timeout(format!("{}ms", sim.ingress_timeout.as_millis()));
    if let Some(channel) = query
        .as_deref()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("channel=")))
    {
        cmd = cmd.channel(channel);
    }
    cmd = forward_headers(cmd, &headers);
    let accepts_sse = headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().starts_with("text/event-stream")));
    let (tx, rx) = mpsc::unbounded_channel();
    sim.enqueue(cmd, Some(tx));
    relay(rx, Instant::now() + sim.ingress_timeout, accepts_sse, id).await
}

/// `DELETE /v1/mcp/{tunnel_id}`: a `session_termination` command.
pub(crate) async fn delete(State(sim): State<Arc<Shared>>, Path(tunnel): Path<String>, headers: HeaderMap) -> Response {
    if tunnel != sim.tunnel_id {
        return ApiError::new(StatusCode::NOT_FOUND, "tunnel_not_found", "no such tunnel").into_response();
    }
    if !headers.contains_key(MCP_SESSION_ID) {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing_mcp_session_id",
            "DELETE needs the Mcp-Session-Id header",
        )
        .into_response();
    }
    let cmd = NewCommand::session_termination(None).response_timeout(format!("{}ms", sim.ingress_timeout.as_millis()));
    let (tx, rx) = mpsc::unbounded_channel();
    sim.enqueue(forward_headers(cmd, &headers), Some(tx));
    relay(rx, Instant::now() + sim.ingress_timeout, false, None).await
}

/// `GET /v1/mcp/{tunnel_id}`: no standalone server-to-client stream (the tunnel carries
/// request-scoped streams only): `405` with `Allow: POST, DELETE`.
pub(crate) async fn get() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, [(http::header::ALLOW, "POST, DELETE")]).into_response()
}

fn forward_headers(mut cmd: NewCommand, headers: &HeaderMap) -> NewCommand {
    for name in FORWARDED {
        for v in headers.get_all(name).iter().filter_map(|v| v.to_str().ok()) {
            cmd = cmd.header(name, v);
        }
    }
    for (name, value) in headers {
        if name.as_str().starts_with(FORWARDED_PREFIX) {
            if let Ok(v) = value.to_str() {
                cmd = cmd.header(name.as_str(), v);
            }
        }
    }
    cmd
}

/// Waits for the gateway's replies and answers the client (JSON, `202`, or SSE).
async fn relay(
    mut rx: mpsc::UnboundedReceiver<GatewayReply>,
    deadline: Instant,
    accepts_sse: bool,
    id: Option<Box<RawValue>>,
) -> Response {
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => {
                return rpc_error(
                    StatusCode::GATEWAY_TIMEOUT,
                    id.as_deref(),
                    GATEWAY_TIMEOUT_CODE,
                    "no response from the tunnel in time",
                )
            }
            Ok(None) => {
                return rpc_error(
                    StatusCode::BAD_GATEWAY,
                    id.as_deref(),
                    -32603,
                    "the tunnel request was dropped",
                )
            }
            Ok(Some(r)) if r.resp_type == RespType::JsonrpcNotify && accepts_sse => return stream(r, rx, deadline, id),
            // A client that takes only JSON cannot receive notifications.
            Ok(Some(r)) if r.resp_type == RespType::JsonrpcNotify => continue,
            Ok(Some(r)) => return final_response(r),
        }
    }
}

fn stream(
    first: GatewayReply,
    mut rx: mpsc::UnboundedReceiver<GatewayReply>,
    deadline: Instant,
    id: Option<Box<RawValue>>,
) -> Response {
    let (tx, body_rx) = mpsc::channel::<Bytes>(16);
    let mut resp = Response::new(Body::from_stream(Events(body_rx)));
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-cache"));
    copy_returned(&first, h);
    tokio::spawn(async move {
        let mut next = Some(first);
        loop {
            let event = match next.take() {
                Some(r) => r,
                None => {
                    let recv = tokio::select! {
                        biased;
                        // cancel-safe: the client is gone; nothing more to relay.
                        () = tx.closed() => return,
                        // cancel-safe: `recv` loses nothing when dropped.
                        r = tokio::time::timeout_at(deadline, rx.recv()) => r,
                    };
                    match recv {
                        Ok(Some(r)) => r,
                        Ok(None) => return,
                        Err(_) => {
                            if let Some(id) = &id {
                                let _ = tx
                                    .send(sse_event(&rpc_error_body(
                                        Some(id),
                                        GATEWAY_TIMEOUT_CODE,
                                        "no response from the tunnel in time",
                                    )))
                                    .await;
                            }
                            return;
                        }
                    }
                }
            };
            let last = event.resp_type.is_terminal();
            if let Some(json) = &event.resp_json {
                if tx.send(sse_event(json)).await.is_err() {
                    return;
                }
            }
            if last {
                return;
            }
        }
    });
    resp
}

/// `event: message`, one `data:` line per line of `json`.
pub(crate) fn sse_event(json: &[u8]) -> Bytes {
    let text = String::from_utf8_lossy(json);
    let mut out = String::from("event: message\n");
    for line in text.split('\n') {
        out.push_str("data: ");
        out.push_str(line.trim_end_matches('\r'));
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

fn final_response(reply: GatewayReply) -> Response {
    let code = u16::try_from(reply.resp_code)
        .ok()
        .and_then(|c| StatusCode::from_u16(c).ok())
        .filter(|s| s.as_u16() >= 200);
    let status = match (reply.resp_type, code) {
        (_, None) => StatusCode::BAD_GATEWAY,
        (RespType::NotifyAck, Some(s)) if s.is_success() => StatusCode::ACCEPTED,
        (RespType::JsonrpcResponse | RespType::JsonrpcNotify, Some(s)) if s.is_success() => StatusCode::OK,
        (_, Some(s)) => s,
    };
    let has_body = reply.resp_type != RespType::NotifyAck && reply.resp_type != RespType::SessionTerminationResponse;
    let mut resp = match reply.resp_json.clone().filter(|_| has_body) {
        Some(json) => (status, [(http::header::CONTENT_TYPE, "application/json")], json).into_response(),
        None => status.into_response(),
    };
    copy_returned(&reply, resp.headers_mut());
    resp
}

fn copy_returned(reply: &GatewayReply, headers: &mut HeaderMap) {
    for (name, values) in &reply.resp_headers {
        if !RETURNED.iter().any(|r| r.eq_ignore_ascii_case(name)) {
            continue;
        }
        let Ok(name) = http::HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        for v in values.iter().filter_map(|v| http::HeaderValue::from_str(v).ok()) {
            headers.append(name.clone(), v);
        }
    }
}

fn rpc_error_body(id: Option<&RawValue>, code: i32, message: &str) -> Vec<u8> {
    let id = id.map_or("null", RawValue::get);
    let message = serde_json::to_string(message).expect("a str serializes");
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#).into_bytes()
}

fn rpc_error(status: StatusCode, id: Option<&RawValue>, code: i32, message: &str) -> Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        rpc_error_body(id, code, message),
    )
        .into_response()
}
