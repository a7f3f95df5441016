//! The soak's fault-injecting Streamable HTTP MCP server, and the reader of the stdio
//! peer's log (`tests/peers/stdio/soak.py`).
//!
//! The HTTP server speaks HTTP/1.1 by hand on raw sockets, so it can misbehave at the
//! connection level: it reads every request whole, records it (in arrival order, with
//! the connections it accepted), then does what the request's own `arguments.fault`
//! asks. Keep-alive is honoured for the answers that end cleanly.
//!
//! Faults (`params.arguments.fault` of a `tools/call`):
//! - `json`: a JSON answer carrying the marker; `sse:N`: N log notifications, then the
//!   answer, on an SSE stream;
//! - `slow:MS`: the JSON answer after MS ms (past a short `response_timeout`, a late one);
//! - `reset`: an abortive close (RST) right after reading; `close`: a plain close;
//! - `cut:N`: an SSE stream with N notifications, cut before the answer;
//! - `truncated`: half of a JSON body whose `Content-Length` announces all of it;
//! - `status:CODE` or `status:CODE:ra`: that HTTP status with a text body (no JSON-RPC),
//!   with or without `Retry-After: 1`;
//! - `wrongid`: a whole JSON-RPC answer for another id;
//! - `rpcerror:CODE`: a JSON-RPC error for this id (message `soak error MARKER`), with
//!   HTTP status CODE.
//!
//! A notification (no id) is answered `202`. A `DELETE` (session termination) is recorded
//! under the marker its `Mcp-Session-Id` carries (`sess-MARKER-STATUS`) and answered with
//! that status.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the HTTP server saw, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// A connection was accepted.
    Accept,
    /// A whole request was read; the marker it carried ("-" for none).
    Request(String),
}

/// The running server; dropping it stops accepting.
pub(super) struct McpServer {
    pub url: String,
    events: Arc<Mutex<Vec<Event>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl McpServer {
    pub(super) async fn start() -> McpServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the soak MCP server");
        let url = format!("http://{}/mcp", listener.local_addr().expect("bound address"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let log = events.clone();
        let accept = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let _ = sock.set_nodelay(true);
                log.lock().unwrap().push(Event::Accept);
                tokio::spawn(connection(sock, log.clone()));
            }
        });
        McpServer { url, events, accept }
    }

    /// Everything seen so far, in order.
    pub(super) fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// The markers of the requests read so far, in order.
    pub(super) fn markers(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Request(m) => Some(m),
                Event::Accept => None,
            })
            .collect()
    }
}

/// One request as read off the wire.
struct Request {
    method: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads the next request of a keep-alive connection; `None` at EOF or on any error.
async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let method = lines.next()?.split(' ').next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    assert!(
        !headers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")),
        "the soak MCP server reads Content-Length bodies only"
    );
    while buf.len() < head_end + length {
        let mut chunk = [0u8; 16 * 1024];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[head_end..head_end + length].to_vec();
    buf.drain(..head_end + length);
    Some(Request { method, headers, body })
}

async fn connection(mut sock: TcpStream, log: Arc<Mutex<Vec<Event>>>) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut sock, &mut buf).await {
        // An error writing the answer (the gateway gave up first) ends the connection.
        let keep = serve(&mut sock, &req, &log).await.unwrap_or(false);
        if !keep {
            return;
        }
    }
}

fn text(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer).and_then(Value::as_str).map(str::to_owned)
}

/// Answers one request; `Ok(true)` when the connection stays usable.
async fn serve(sock: &mut TcpStream, req: &Request, log: &Mutex<Vec<Event>>) -> std::io::Result<bool> {
    if req.method == "DELETE" {
        // sess-MARKER-STATUS
        let session = req.header("mcp-session-id").unwrap_or("-").to_owned();
        let (marker, status) = session
            .strip_prefix("sess-")
            .and_then(|s| s.rsplit_once('-'))
            .map(|(m, s)| (m.to_owned(), s.parse().unwrap_or(200)))
            .unwrap_or(("-".to_owned(), 200));
        log.lock().unwrap().push(Event::Request(marker));
        sock.write_all(format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
            .await?;
        return Ok(true);
    }
    let msg: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let marker = text(&msg, "/params/arguments/soak")
        .or_else(|| text(&msg, "/params/soak"))
        .unwrap_or_else(|| "-".to_owned());
    log.lock().unwrap().push(Event::Request(marker.clone()));
    let Some(id) = msg.get("id").cloned() else {
        // A notification.
        sock.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
            .await?;
        return Ok(true);
    };
    let fault = text(&msg, "/params/arguments/fault").unwrap_or_else(|| "json".to_owned());
    let answer = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": marker}]}
    }))
    .expect("json! serializes");
    let mut parts = fault.split(':');
    match (parts.next().unwrap_or(""), parts.next(), parts.next()) {
        ("json", None, None) => {
            write_json(sock, &answer).await?;
            Ok(true)
        }
        ("slow", Some(ms), None) => {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
            write_json(sock, &answer).await?;
            Ok(true)
        }
        ("sse", Some(n), None) => {
            sse_head(sock, n.parse().unwrap_or(0)).await?;
            chunk(sock, &event(&answer)).await?;
            sock.write_all(b"0\r\n\r\n").await?;
            Ok(true)
        }
        ("cut", Some(n), None) => {
            sse_head(sock, n.parse().unwrap_or(0)).await?;
            sock.flush().await?;
            Ok(false)
        }
        ("reset", None, None) => {
            sock.set_zero_linger()?;
            Ok(false)
        }
        ("close", None, None) => {
            sock.shutdown().await?;
            Ok(false)
        }
        ("truncated", None, None) => {
            sock.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    answer.len()
                )
                .as_bytes(),
            )
            .await?;
            sock.write_all(&answer[..answer.len() / 2]).await?;
            sock.flush().await?;
            Ok(false)
        }
        ("wrongid", None, None) => {
            let other = serde_json::to_vec(&json!({
                "jsonrpc": "2.0", "id": "soak-another-id", "result": {"content": []}
            }))
            .expect("json! serializes");
            write_json(sock, &other).await?;
            Ok(true)
        }
        ("rpcerror", Some(code), None) => {
            let error = serde_json::to_vec(&json!({
                "jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": format!("soak error {marker}")}
            }))
            .expect("json! serializes");
            sock.write_all(
                format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    error.len()
                )
                .as_bytes(),
            )
            .await?;
            sock.write_all(&error).await?;
            Ok(true)
        }
        ("status", Some(code), ra) => {
            let retry_after = if ra == Some("ra") { "Retry-After: 1\r\n" } else { "" };
            sock.write_all(
                format!("HTTP/1.1 {code} X\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n{retry_after}\r\nnope")
                    .as_bytes(),
            )
            .await?;
            Ok(true)
        }
        _ => panic!("the soak MCP server got an unknown fault {fault:?}"),
    }
}

async fn write_json(sock: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    sock.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    sock.write_all(body).await
}

/// The head of a chunked SSE answer and `notes` log notifications.
async fn sse_head(sock: &mut TcpStream, notes: u32) -> std::io::Result<()> {
    sock.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await?;
    for i in 0..notes {
        let note = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": format!("soak note {i}")}
        }))
        .expect("json! serializes");
        chunk(sock, &event(&note)).await?;
    }
    Ok(())
}

fn event(data: &[u8]) -> Vec<u8> {
    let mut e = b"event: message\ndata: ".to_vec();
    e.extend_from_slice(data);
    e.extend_from_slice(b"\n\n");
    e
}

async fn chunk(sock: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    sock.write_all(format!("{:x}\r\n", data.len()).as_bytes()).await?;
    sock.write_all(data).await?;
    sock.write_all(b"\r\n").await
}

/// What the stdio peer logged: every child start and every request line read, in order.
#[derive(Clone, Debug, Default)]
pub(super) struct StdioLog {
    pub spawns: usize,
    /// Markers in arrival order ("-" for requests without one).
    pub markers: Vec<String>,
    /// The lines as written.
    pub lines: Vec<String>,
}

impl StdioLog {
    pub(super) fn read(path: &std::path::Path) -> StdioLog {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut log = StdioLog::default();
        for line in text.lines() {
            log.lines.push(line.to_owned());
            if line.starts_with("spawn ") {
                log.spawns += 1;
            } else if let Some(m) = line.strip_prefix("recv ") {
                log.markers.push(m.to_owned());
            }
        }
        log
    }
}
