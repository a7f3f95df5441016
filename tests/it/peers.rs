//! The real peers run here and behave as the other tests assume: server-everything over
//! Streamable HTTP (SSE with event ids, session ids, 406 on a narrow Accept) and over
//! stdio, the Python SDK server in JSON mode, and the Python SDK client.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::harness::{self, PyMode};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"tunnelgate-it","version":"0"}}}"#;

/// One Server-Sent Event: its `id:` (if any) and its `data:` lines joined.
#[derive(Debug)]
struct SseEvent {
    id: Option<String>,
    data: String,
}

/// Splits complete events (terminated by a blank line) off the front of `buf`.
fn drain_sse_events(buf: &mut String) -> Vec<SseEvent> {
    let mut events = Vec::new();
    let normalized = buf.replace("\r\n", "\n");
    let mut rest = normalized.as_str();
    while let Some(end) = rest.find("\n\n") {
        let block = &rest[..end];
        rest = &rest[end + 2..];
        let mut event = SseEvent {
            id: None,
            data: String::new(),
        };
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                event.id = Some(v.trim_start().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                if !event.data.is_empty() {
                    event.data.push('\n');
                }
                event.data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        events.push(event);
    }
    *buf = rest.to_owned();
    events
}

/// POSTs `body` to an MCP endpoint with `Accept: application/json, text/event-stream`.
async fn post_mcp(url: &str, body: &str, accept: &str) -> reqwest::Response {
    harness::http_client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", accept)
        .body(body.to_owned())
        .send()
        .await
        .expect("POST to the MCP peer")
}

#[tokio::test]
async fn server_everything_over_http_answers_initialize_with_sse_event_ids_and_a_session() {
    let (_server, url) = harness::spawn_server_everything_http().await;

    let mut resp = post_mcp(&url, INITIALIZE, "application/json, text/event-stream").await;

    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "content-type {content_type}"
    );
    let session = resp.headers().get("mcp-session-id").expect("an Mcp-Session-Id header");
    assert!(!session.is_empty());

    let mut buf = String::new();
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let chunk = resp
                .chunk()
                .await
                .expect("read SSE body")
                .expect("stream ended before the answer");
            buf.push_str(std::str::from_utf8(&chunk).expect("UTF-8 SSE"));
            for event in drain_sse_events(&mut buf) {
                let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
                    continue;
                };
                if message["id"] == json!(1) {
                    return (event, message);
                }
            }
        }
    })
    .await
    .expect("initialize answer within 10 s");

    let (event, message) = answer;
    assert!(
        event.id.as_deref().is_some_and(|id| !id.is_empty()),
        "the answer event carries an id: {event:?}"
    );
    assert_eq!(message["result"]["serverInfo"]["name"], "mcp-servers/everything");
    assert!(message["result"]["protocolVersion"].is_string());
}

#[tokio::test]
async fn server_everything_refuses_an_accept_without_event_stream_with_406() {
    let (_server, url) = harness::spawn_server_everything_http().await;

    let resp = post_mcp(&url, INITIALIZE, "application/json").await;

    assert_eq!(resp.status(), 406);
}

#[tokio::test]
async fn server_everything_over_stdio_answers_initialize_on_stdout() {
    let argv = harness::server_everything_stdio_argv();
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn server-everything stdio");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

    stdin.write_all(format!("{INITIALIZE}\n").as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let message = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("stdout closed before the answer");
            if let Ok(message) = serde_json::from_str::<Value>(&line) {
                if message["id"] == json!(1) {
                    return message;
                }
            }
        }
    })
    .await
    .expect("initialize answer within 15 s");

    assert_eq!(message["result"]["serverInfo"]["name"], "mcp-servers/everything");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn python_server_in_json_mode_answers_initialize_with_application_json() {
    let (_server, url) = harness::spawn_py_server(PyMode::Json).await;

    let resp = post_mcp(&url, INITIALIZE, "application/json, text/event-stream").await;

    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(
        content_type.starts_with("application/json"),
        "content-type {content_type}"
    );
    assert!(resp.headers().contains_key("mcp-session-id"));
    let message: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(message["id"], 1);
    assert_eq!(message["result"]["serverInfo"]["name"], "tunnelgate-py-peer");
}

#[tokio::test]
async fn python_client_lists_tools_and_sees_progress_from_the_python_server() {
    let (_server, url) = harness::spawn_py_server(PyMode::Sse).await;

    let out = harness::run_py_client(
        &url,
        &[
            "--list-tools",
            "--call",
            "echo",
            r#"{"message":"hi"}"#,
            "--call",
            "progress",
            r#"{"steps":3}"#,
        ],
    )
    .await;

    assert_eq!(out["ok"], true);
    assert_eq!(
        out["results"][0]["tools"],
        json!([
            "echo",
            "add",
            "progress",
            "sample",
            "greet",
            "announce",
            "confirm",
            "fail",
            "headers_seen",
            "trace_seen"
        ])
    );
    assert_eq!(out["results"][1]["texts"], json!(["Echo: hi"]));
    assert_eq!(out["results"][1]["is_error"], false);
    assert_eq!(out["results"][2]["progress"].as_array().map(Vec::len), Some(3), "{out}");
}

#[tokio::test]
async fn python_client_calls_echo_on_server_everything() {
    let (_server, url) = harness::spawn_server_everything_http().await;

    let out = harness::run_py_client(&url, &["--list-tools", "--call", "echo", r#"{"message":"hi"}"#]).await;

    let tools: Vec<&str> = out["results"][0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        tools.contains(&"echo") && tools.contains(&"get-sum"),
        "tools: {tools:?}"
    );
    assert_eq!(out["results"][1]["texts"], json!(["Echo: hi"]));
}

#[tokio::test]
async fn python_client_fails_clearly_when_nothing_listens() {
    let url = format!("http://127.0.0.1:{}/mcp", harness::free_port());

    let err = harness::try_run_py_client(&url, &["--timeout", "5", "--list-tools"])
        .await
        .unwrap_err();

    assert!(err.contains("py_client: failed against"), "{err}");
}

/// The spawners' ownership check: a port is a peer's only when the peer's own process tree
/// holds the listening socket, so a port another process took between the pick and the
/// peer's bind is never mistaken for the peer. A Python child under a shell wrapper
/// listens; the check finds it through the wrapper, and not for a sibling process.
#[tokio::test]
async fn a_listening_port_is_attributed_to_the_process_tree_that_holds_it() {
    let port = harness::free_port();
    let script = format!(
        "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',{port}))\ns.listen()\nprint('bound',flush=True)\ntime.sleep(60)\n"
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("'{}' -c \"$0\"; :", harness::python().display()))
        .arg(script);
    let mut child = harness::ChildGuard::spawn("listener", cmd);
    harness::wait_until("the listener binds", Duration::from_secs(20), || {
        let bound = child.stdout().contains("bound");
        async move { bound }
    })
    .await;
    assert!(child.try_wait().is_none(), "the listener exited: {}", child.stderr());
    assert!(
        harness::listens_on(child.pid(), port),
        "the wrapper's child holds port {port}"
    );
    let mut other = std::process::Command::new("sleep");
    other.arg("60");
    let other = harness::ChildGuard::spawn("another process", other);
    assert!(
        !harness::listens_on(other.pid(), port),
        "another process holds no listener on {port}"
    );
    assert!(
        !harness::listens_on(child.pid(), harness::free_port()),
        "a port nobody listens on is nobody's"
    );
}
