//! A strict gateway killed with SIGKILL at each point of a command's life, then started
//! again: the write-ahead intent makes the restart latch `interrupted_before_ack` (exit 90)
//! on the command in doubt, and stay clean when nothing was in doubt.
//!
//! Points: before the downstream write (the connect to the MCP server cannot complete:
//! the server's accept queue is full), during the MCP exchange (the server read the
//! request and says nothing), after the answer and before the POST (the gateway is
//! stopped, the answer written to it, then killed), during the POST (the simulator holds
//! the terminal POST), after `acked`; and while idle.
//!
//! Before the downstream write the restart latches too: the intent is written before the
//! first downstream step (the connect), and the gateway cannot know, from the record
//! alone, whether the request left. That is the conservative side: a command that never
//! reached the server is reported as in doubt, never the reverse.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{wait_until, Gateway, Rig, RigOptions};

const BOUND: Duration = Duration::from_secs(20);

fn intent_path(rig: &Rig) -> PathBuf {
    rig.dir.path().join("latch.intent.json")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Whether the record holds a command in doubt (it stays, settled, once written).
fn in_doubt(rig: &Rig) -> bool {
    let path = intent_path(rig);
    path.exists() && !read_json(&path)["intent"].is_null()
}

async fn wait_for_intent(rig: &Rig) -> Value {
    wait_until("the write-ahead intent record", BOUND, || async { in_doubt(rig) }).await;
    read_json(&intent_path(rig))
}

/// SIGKILL, and wait until the process is gone.
async fn kill9(gw: &mut Gateway) {
    gw.signal("KILL");
    assert_eq!(gw.wait_exit(BOUND).await, Some(128 + 9), "the gateway died of SIGKILL");
}

/// Starts the gateway again on the same latch file with a command queued, and expects it
/// to refuse with `interrupted_before_ack` naming `request_id`, dispatching nothing.
async fn restart_latches_on(rig: &Rig, config: &str, request_id: &str) {
    let calls_before = rig.stub.count("tools/call");
    let polls_before = rig.sim.record().polls.len();
    let sentinel = rig.enqueue_call("echo", json!({"message": "after the crash"}));
    let mut again = Gateway::run(config);
    let code = again.wait_exit(BOUND).await;
    let stderr = again.stderr();
    assert_eq!(code, Some(90), "the restart latches interrupted_before_ack: {stderr}");
    assert!(stderr.contains("category=interrupted_before_ack"), "{stderr}");
    assert!(
        stderr.contains(request_id),
        "the cause names the command in doubt: {stderr}"
    );
    let latch = read_json(&rig.latch_path());
    assert_eq!(latch["fatal"]["category"], "interrupted_before_ack", "{latch}");
    assert_eq!(latch["fatal"]["exit_code"], 90, "{latch}");
    assert_eq!(latch["fatal"]["request_id"], request_id, "{latch}");
    assert_eq!(latch["fatal"]["channel"], "main", "{latch}");
    assert_eq!(latch["fatal"]["method"], "tools/call", "{latch}");
    assert!(
        !intent_path(rig).exists(),
        "the intent is removed once the latch is persisted"
    );
    // Nothing after the latch: no poll, no MCP request, the queued command untouched.
    assert_eq!(
        rig.sim.record().polls.len(),
        polls_before,
        "the latched restart never polls"
    );
    assert_eq!(rig.stub.count("tools/call"), calls_before);
    assert_eq!(rig.sim.record().responses_for(&sentinel).count(), 0);
    // And the next start honours the persisted latch (89), as after any latch.
    let mut third = Gateway::run(config);
    assert_eq!(third.wait_exit(BOUND).await, Some(89), "{}", third.stderr());
}

/// Starts the gateway again and expects a clean, serving run: a command is answered and
/// acknowledged, and a stop exits 0.
async fn restart_is_clean(rig: &Rig, config: &str) {
    assert!(!in_doubt(rig), "nothing was left in doubt");
    let mut again = rig.spawn_gateway(config).await;
    let id = rig.enqueue_call("echo", json!({"message": "after the restart"}));
    rig.wait("the next command's terminal response", |r| {
        r.responses_for(&id)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
    wait_until("the intent settled", BOUND, || async { !in_doubt(rig) }).await;
    again.sigterm();
    assert_eq!(again.wait_exit(BOUND).await, Some(0), "{}", again.stderr());
    assert!(!rig.latch_path().exists());
}

#[tokio::test]
async fn killed_before_the_downstream_write_the_restart_latches_on_the_command() {
    let rig = Rig::start("").await;
    // A listener whose accept queue is full: the gateway's connect stays in SYN_SENT, so
    // no byte of the request can be written.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let full = socket.listen(0).unwrap();
    let addr = full.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(300), tokio::net::TcpStream::connect(addr)).await
        {
            fillers.push(s);
        }
    }
    assert!(!fillers.is_empty(), "the accept queue took at least one connection");
    let config = rig.config_to(&format!("http://{addr}/mcp"), &RigOptions::default());
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.enqueue_call("echo", json!({"message": "never sent"}));
    let intent = wait_for_intent(&rig).await;
    assert_eq!(intent["intent"]["request_id"], id.as_str(), "{intent}");
    kill9(&mut gw).await;
    drop(full);
    restart_latches_on(&rig, &config, &id).await;
}

/// An MCP server on loopback that reads one request, then lets `then` act on the
/// gateway (by pid) and on the connection.
async fn one_request_server<F, Fut>(then: F) -> (String, tokio::task::JoinHandle<()>)
where
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        // Head and body: the body's JSON closes with `}` once whole (a tools/call here).
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            if let Some(head_end) = text.find("\r\n\r\n") {
                let length = text[..head_end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if buf.len() >= head_end + 4 + length {
                    break;
                }
            }
        }
        then(stream).await;
    });
    (url, task)
}

#[tokio::test]
async fn killed_during_the_mcp_exchange_the_restart_latches_on_the_command() {
    let rig = Rig::start("").await;
    let (read_tx, read_rx) = tokio::sync::oneshot::channel();
    let (url, _server) = one_request_server(move |stream| async move {
        let _ = read_tx.send(());
        // Hold the connection open, answering nothing.
        tokio::time::sleep(BOUND).await;
        drop(stream);
    })
    .await;
    let config = rig.config_to(&url, &RigOptions::default());
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.enqueue_call("echo", json!({"message": "in the exchange"}));
    tokio::time::timeout(BOUND, read_rx).await.unwrap().unwrap();
    kill9(&mut gw).await;
    restart_latches_on(&rig, &config, &id).await;
}

#[tokio::test]
async fn killed_after_the_answer_and_before_the_post_the_restart_latches_on_the_command() {
    let rig = Rig::start("").await;
    let (pid_tx, pid_rx) = tokio::sync::oneshot::channel::<u32>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let (url, _server) = one_request_server(move |mut stream| async move {
        let pid = pid_rx.await.unwrap();
        // Stopped first, so the answer lands in its socket and nothing more runs.
        let _ = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status();
        let body = r#"{"jsonrpc":"2.0","id":"rpc-echo","result":{"content":[{"type":"text","text":"done"}]}}"#;
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = done_tx.send(());
        tokio::time::sleep(BOUND).await;
    })
    .await;
    let config = rig.config_to(&url, &RigOptions::default());
    let mut gw = rig.spawn_gateway(&config).await;
    pid_tx.send(gw.pid()).unwrap();
    let id = rig.enqueue_call("echo", json!({"message": "answered"}));
    tokio::time::timeout(BOUND, done_rx).await.unwrap().unwrap();
    kill9(&mut gw).await;
    assert_eq!(
        rig.sim.record().responses_for(&id).count(),
        0,
        "killed before any response POST"
    );
    restart_latches_on(&rig, &config, &id).await;
}

#[tokio::test]
async fn killed_during_the_post_the_restart_latches_on_the_command() {
    let rig = Rig::start("[[rule]]\nmatch = { resp_type = \"terminal\" }\naction = \"hold\"\n").await;
    let config = rig.config(&RigOptions {
        post_timeout: "10s",
        ..RigOptions::default()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.enqueue_call("echo", json!({"message": "posted"}));
    rig.wait("the held terminal POST", |r| r.responses_for(&id).count() > 0)
        .await;
    kill9(&mut gw).await;
    restart_latches_on(&rig, &config, &id).await;
}

#[tokio::test]
async fn killed_after_the_acknowledgement_the_restart_is_clean() {
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions::default());
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.enqueue_call("echo", json!({"message": "acked"}));
    rig.wait("the terminal response", |r| {
        r.responses_for(&id)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
    wait_until("the intent settled after acked", BOUND, || async { !in_doubt(&rig) }).await;
    kill9(&mut gw).await;
    restart_is_clean(&rig, &config).await;
}

#[tokio::test]
async fn killed_while_idle_the_restart_is_clean_with_no_intent_left() {
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions::default());
    let mut gw = rig.spawn_gateway(&config).await;
    wait_until("a first poll", BOUND, || async { !rig.sim.record().polls.is_empty() }).await;
    kill9(&mut gw).await;
    restart_is_clean(&rig, &config).await;
}

/// An intent record as an earlier run leaves it.
fn leave_intent(rig: &Rig, text: &str) {
    std::fs::write(intent_path(rig), text).unwrap();
}

const LEFT_INTENT: &str = r#"{
  "schema_version": 1,
  "tunnelgate_version": "0.1.0",
  "intent": {
    "request_id": "req-left-behind",
    "channel": "main",
    "method": "tools/call",
    "instance_id": "0123456789abcdef",
    "written_at": "2026-12-01T09:00:00Z"
  }
}
"#;

#[tokio::test]
async fn a_held_start_on_an_unsettled_intent_serves_only_the_fatal_state() {
    let rig = Rig::start("").await;
    leave_intent(&rig, LEFT_INTENT);
    let config = rig
        .config(&RigOptions::default())
        .replace("[strict]\n", "[strict]\nlatched_start = \"hold\"\n");
    let mut gw = rig.spawn_gateway(&config).await;
    let status = rig.status().await;
    assert_eq!(status["state"], "fatal", "{status}");
    assert_eq!(status["fatal"]["request_id"], "req-left-behind", "{status}");
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_fatal_info{category=\"interrupted_before_ack\"} 1"),
        "the alert names the cause"
    );
    let latch = read_json(&rig.latch_path());
    assert_eq!(latch["fatal"]["category"], "interrupted_before_ack", "{latch}");
    assert!(!intent_path(&rig).exists());
    assert!(rig.sim.record().polls.is_empty(), "a held start never polls");
    gw.sigterm();
    assert_eq!(gw.wait_exit(BOUND).await, Some(89), "{}", gw.stderr());
}

#[tokio::test]
async fn an_unreadable_intent_fails_closed() {
    let rig = Rig::start("").await;
    leave_intent(&rig, "{ half a record");
    let mut gw = Gateway::run(&rig.config(&RigOptions::default()));
    assert_eq!(gw.wait_exit(BOUND).await, Some(90), "{}", gw.stderr());
    let stderr = gw.stderr();
    assert!(stderr.contains("is not a tunnelgate intent"), "{stderr}");
    let latch = read_json(&rig.latch_path());
    assert_eq!(latch["fatal"]["category"], "interrupted_before_ack", "{latch}");
    assert!(rig.sim.record().polls.is_empty());
}

#[tokio::test]
async fn latch_show_lists_an_unsettled_intent_and_latch_clear_removes_it() {
    let rig = Rig::start("").await;
    leave_intent(&rig, LEFT_INTENT);
    let latch = rig.latch_path();
    let latch = latch.to_str().unwrap();
    let shown = Gateway::cli(&["latch", "show", "--latch-file", latch], None, &[], BOUND).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains("unsettled write-ahead intent"), "{shown:?}");
    assert!(shown.stdout.contains("request_id=req-left-behind"), "{shown:?}");
    let cleared = Gateway::cli(&["latch", "clear", "--latch-file", latch, "--yes"], None, &[], BOUND).await;
    assert_eq!(cleared.code, 0, "{cleared:?}");
    assert!(!intent_path(&rig).exists());
    restart_is_clean(&rig, &rig.config(&RigOptions::default())).await;
}
