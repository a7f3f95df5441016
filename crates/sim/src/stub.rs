//! An embedded minimal Streamable HTTP MCP server for the demo and the tests.
//!
//! `POST /mcp`: `initialize` (echoes the requested `protocolVersion`, default
//! `2025-06-18`; issues an `Mcp-Session-Id`), `ping`, `tools/list`, `tools/call` with
//! `echo` {message}, `add` {a, b} and `slow` {ms}; notifications and client responses get
//! `202`; unknown methods `-32601`. Replies are `application/json`, except `slow` with
//! `_meta.progressToken`, which streams two `notifications/progress` and the result as
//! SSE. `DELETE /mcp` ends a session (`204`); `GET /mcp` is `405`. Every message received
//! is recorded (its method, `DELETE` for a session end) so callers can assert what the
//! MCP server actually saw. Sessions are issued but not enforced.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use rand::distr::{Alphanumeric, SampleString};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ingress::{sse_event, Events};
use super::server;
use crate::protocol::{McpRevision, MCP_SESSION_ID};

/// The revision answered to an `initialize` that names none.
const DEFAULT_PROTOCOL_VERSION: &str = McpRevision::V2025_06_18.as_str();
/// `slow` never sleeps longer than this, whatever it is asked.
const SLOW_CAP: Duration = Duration::from_secs(60);

/// A running stub. Dropping it stops serving; [`McpStub::shutdown`] also waits.
pub struct McpStub {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<String>>>,
    accepted: Arc<AtomicU64>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

type Received = Arc<Mutex<Vec<String>>>;

impl McpStub {
    /// Binds `addr` (port 0 for an ephemeral one) and starts serving.
    pub async fn start(addr: SocketAddr) -> std::io::Result<McpStub> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let received: Received = Arc::default();
        let router = Router::new()
            .route("/mcp", post(handle).delete(end_session).get(no_stream))
            .route("/oauth/token", post(token))
            .with_state(received.clone());
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let accepted = Arc::<AtomicU64>::default();
        tracker.spawn(server::serve(
            listener,
            router,
            (shutdown.clone(), tracker.clone()),
            accepted.clone(),
        ));
        Ok(McpStub {
            addr,
            received,
            accepted,
            shutdown,
            tracker,
        })
    }

    /// `http://IP:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// How many messages (and session ends) the stub has received.
    pub fn received(&self) -> usize {
        self.lock().len()
    }

    /// How many TCP connections the stub has accepted (a client's connection reuse shows
    /// as few connections for many messages).
    pub fn connections_accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// How many messages with this method were received.
    pub fn count(&self, method: &str) -> usize {
        self.lock().iter().filter(|m| *m == method).count()
    }

    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tracker.wait()).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for McpStub {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn remember(received: &Received, method: &str) {
    received
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(method.to_owned());
}

fn json_body(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(value).expect("a Value serializes"),
    )
        .into_response()
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

fn text_result(id: &Value, text: String) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": { "content": [{ "type": "text", "text": text }], "isError": false } })
}

/// A private identity provider's token endpoint, for the demo's token exchange through
/// channel `harpoon`: a form `grant_type=client_credentials` with HTTP Basic credentials
/// `demo-client:demo-secret` gets a fresh opaque bearer token; anything else `400` or
/// `401` with an RFC 6749 error.
async fn token(State(received): State<Received>, headers: http::HeaderMap, body: Bytes) -> Response {
    remember(&received, "oauth/token");
    let form = String::from_utf8_lossy(&body);
    if !form.split('&').any(|kv| kv == "grant_type=client_credentials") {
        return json_body(StatusCode::BAD_REQUEST, &json!({"error": "unsupported_grant_type"}));
    }
    // base64("demo-client:demo-secret")
    let expected = "Basic ZGVtby1jbGllbnQ6ZGVtby1zZWNyZXQ=";
    if headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) != Some(expected) {
        return json_body(StatusCode::UNAUTHORIZED, &json!({"error": "invalid_client"}));
    }
    let token = Alphanumeric.sample_string(&mut rand::rng(), 32);
    json_body(
        StatusCode::OK,
        &json!({"access_token": token, "token_type": "Bearer", "expires_in": 300}),
    )
}

async fn handle(State(received): State<Received>, body: Bytes) -> Response {
    let Ok(Value::Object(msg)) = serde_json::from_slice::<Value>(&body) else {
        remember(&received, "<invalid>");
        return json_body(StatusCode::BAD_REQUEST, &error(&Value::Null, -32700, "parse error"));
    };
    let method = msg.get("method").and_then(Value::as_str);
    remember(&received, method.unwrap_or("<response>"));
    let (Some(method), Some(id)) = (method, msg.get("id")) else {
        return StatusCode::ACCEPTED.into_response();
    };
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    match method {
        "initialize" => {
            let version = params
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or(DEFAULT_PROTOCOL_VERSION);
            let result = json!({
                "jsonrpc": "2.0", "id": id,
                "result": {
                    "protocolVersion": version,
                    "capabilities": { "tools": { "listChanged": false } },
                    "serverInfo": { "name": "tunnelgate-stub", "version": env!("CARGO_PKG_VERSION") }
                }
            });
            let mut resp = json_body(StatusCode::OK, &result);
            let session = format!("stub-{}", Alphanumeric.sample_string(&mut rand::rng(), 16));
            if let Ok(v) = http::HeaderValue::from_str(&session) {
                resp.headers_mut().insert(MCP_SESSION_ID, v);
            }
            resp
        }
        "ping" => json_body(StatusCode::OK, &json!({ "jsonrpc": "2.0", "id": id, "result": {} })),
        "tools/list" => json_body(
            StatusCode::OK,
            &json!({ "jsonrpc": "2.0", "id": id, "result": { "tools": tools() } }),
        ),
        "tools/call" => call(id.clone(), &params).await,
        _ => json_body(StatusCode::OK, &error(id, -32601, "method not found")),
    }
}

fn tools() -> Value {
    let num = json!({ "type": "number" });
    json!([
        { "name": "echo", "description": "Returns the message.",
          "inputSchema": { "type": "object", "properties": { "message": { "type": "string" } }, "required": ["message"] } },
        { "name": "add", "description": "Adds two numbers.",
          "inputSchema": { "type": "object", "properties": { "a": num, "b": num }, "required": ["a", "b"] } },
        { "name": "slow", "description": "Sleeps for ms milliseconds; reports progress when asked.",
          "inputSchema": { "type": "object", "properties": { "ms": { "type": "integer", "minimum": 0 } }, "required": ["ms"] } }
    ])
}

async fn call(id: Value, params: &Value) -> Response {
    let args = params.get("arguments").cloned().unwrap_or(Value::Null);
    let invalid = |id: &Value| json_body(StatusCode::OK, &error(id, -32602, "invalid arguments"));
    match params.get("name").and_then(Value::as_str) {
        Some("echo") => match args.get("message").and_then(Value::as_str) {
            Some(m) => json_body(StatusCode::OK, &text_result(&id, format!("Echo: {m}"))),
            None => invalid(&id),
        },
        Some("add") => match (args.get("a"), args.get("b")) {
            (Some(a), Some(b)) if a.is_i64() && b.is_i64() => {
                let sum = a.as_i64().unwrap_or(0).saturating_add(b.as_i64().unwrap_or(0));
                json_body(StatusCode::OK, &text_result(&id, sum.to_string()))
            }
            (Some(a), Some(b)) if a.is_number() && b.is_number() => {
                let sum = a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0);
                json_body(StatusCode::OK, &text_result(&id, sum.to_string()))
            }
            _ => invalid(&id),
        },
        Some("slow") => {
            let Some(ms) = args.get("ms").and_then(Value::as_u64) else {
                return invalid(&id);
            };
            let total = Duration::from_millis(ms).min(SLOW_CAP);
            match params.pointer("/_meta/progressToken").cloned() {
                Some(token) => slow_with_progress(id, token, total),
                None => {
                    tokio::time::sleep(total).await;
                    json_body(StatusCode::OK, &text_result(&id, "done".to_owned()))
                }
            }
        }
        _ => json_body(StatusCode::OK, &error(&id, -32602, "unknown tool")),
    }
}

/// Streams progress 1/2 at once, 2/2 halfway, then the result, as SSE events.
fn slow_with_progress(id: Value, token: Value, total: Duration) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let progress = |n: u32| json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": { "progressToken": token, "progress": n, "total": 2 } });
        let events = [
            (Duration::ZERO, progress(1)),
            (total / 2, progress(2)),
            (total - total / 2, text_result(&id, "done".to_owned())),
        ];
        for (wait, event) in events {
            tokio::time::sleep(wait).await;
            let bytes = serde_json::to_vec(&event).expect("a Value serializes");
            if tx.send(sse_event(&bytes)).await.is_err() {
                return;
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(Events(rx)));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    resp
}

async fn end_session(State(received): State<Received>) -> Response {
    remember(&received, "DELETE");
    StatusCode::NO_CONTENT.into_response()
}

async fn no_stream() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, [(http::header::ALLOW, "POST, DELETE")]).into_response()
}
