//! Bad input, measured: control-plane polls that are not commands, a poll of 10,000
//! commands, and MCP servers that send a 1 GiB body, an endless SSE event, invalid UTF-8
//! or an answer for another id. Each gets a clear, counted outcome, nothing else in flight
//! is lost, and the gateway's peak resident memory (VmHWM) stays under a stated bound.
//! The figures these tests measured are in `docs/RELIABILITY.md`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tunnelgate_sim::NewCommand;

use crate::harness::{final_json, free_port, wait_until, Gateway, Rig, RigOptions};

const EXIT: Duration = Duration::from_secs(30);

/// The bound on the gateway's peak resident set in these tests (measured: see
/// docs/RELIABILITY.md).
const PEAK_RSS_BOUND_KIB: u64 = 96 * 1024;

/// Peak resident set of a process, from `/proc/<pid>/status` (`VmHWM`, KiB).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the gateway is running");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc status")
}

fn call(id: u64, tool: &str, args: Value) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}}))
}

// --- a control plane that answers polls with whatever the test queues ---

#[derive(Default)]
struct Plane {
    polls: Mutex<VecDeque<(u16, Vec<u8>)>>,
    responses: Mutex<Vec<Value>>,
}

async fn poll(State(plane): State<Arc<Plane>>) -> impl IntoResponse {
    let next = plane.polls.lock().unwrap().pop_front();
    match next {
        Some((status, body)) => (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/json")],
            body,
        )
            .into_response(),
        None => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            StatusCode::NO_CONTENT.into_response()
        }
    }
}

async fn respond(State(plane): State<Arc<Plane>>, body: Bytes) -> impl IntoResponse {
    if let Ok(v) = serde_json::from_slice(&body) {
        plane.responses.lock().unwrap().push(v);
    }
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        r#"{"status":"ok"}"#,
    )
}

async fn start_plane(plane: Arc<Plane>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/v1/tunnels/t/poll", get(poll))
        .route("/v1/tunnels/t/response", post(respond))
        .with_state(plane);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn plane_config(base: &str, mcp: &str, ops: u16) -> String {
    format!(
        r#"
[control_plane]
base_url = "{base}"
tunnel_id = "t"
api_key = "k"
poll_timeout = "1s"
[mcp.channels.main]
url = "{mcp}"
[ops]
listen = "127.0.0.1:{ops}"
[telemetry]
log_format = "json"
"#
    )
}

async fn metrics(ops: u16) -> String {
    crate::harness::http_client()
        .get(format!("http://127.0.0.1:{ops}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn polls_that_are_not_commands_are_counted_as_decode_errors_and_polling_goes_on() {
    let plane = Arc::new(Plane::default());
    let command = json!({"request_id":"req_ok","shard_token":"s","command_type":"jsonrpc","created_at":"t",
        "jsonrpc":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"after the junk"}}}});
    {
        let mut polls = plane.polls.lock().unwrap();
        polls.push_back((200, b"this is not JSON".to_vec()));
        polls.push_back((200, br#"{"commands": 5}"#.to_vec()));
        polls.push_back((200, br#"{"commands": [1, "two", null]}"#.to_vec()));
        // Over the 32 MiB poll cap: never held whole.
        let mut huge = br#"{"commands":[],"pad":""#.to_vec();
        huge.resize(40 * 1024 * 1024, b'x');
        huge.extend_from_slice(br#""}"#);
        polls.push_back((200, huge));
        polls.push_back((200, serde_json::to_vec(&json!({"commands":[command]})).unwrap()));
    }
    let base = start_plane(plane.clone()).await;
    let stub = tunnelgate_sim::McpStub::start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let ops = free_port();
    let mut gw = Gateway::run(&plane_config(&base, &stub.url(), ops));
    wait_until("the good command after the junk", Duration::from_secs(30), || async {
        plane
            .responses
            .lock()
            .unwrap()
            .iter()
            .any(|r| r["request_id"] == "req_ok")
    })
    .await;
    let m = metrics(ops).await;
    assert!(m.contains("tunnelgate_poll_errors_total{kind=\"decode\"} 3"), "{m}");
    let peak = peak_rss_kib(gw.pid());
    assert!(peak < PEAK_RSS_BOUND_KIB, "peak RSS {peak} KiB");
    eprintln!("measured: junk polls, peak RSS {peak} KiB");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_poll_of_ten_thousand_commands_is_answered_command_by_command_within_the_memory_bound() {
    const N: usize = 10_000;
    let stub = tunnelgate_sim::McpStub::start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let mut config = tunnelgate_sim::SimConfig::new(crate::harness::TUNNEL, crate::harness::KEY);
    config.faults =
        tunnelgate_sim::FaultScript::from_toml_str(&format!("[[poll]]\nnth = 1\nextra_commands = {N}\n")).unwrap();
    config.record_capacity = 2 * N;
    config.completed_capacity = 2 * N;
    let rig = Rig {
        sim: tunnelgate_sim::Simulator::start(config).await.unwrap(),
        stub,
        dir: tempfile::tempdir().unwrap(),
        ops_port: free_port(),
    };
    // Most are already expired (dropped at receipt, counted, never posted); one in a
    // hundred is served end to end. All 10,000 arrive in one poll.
    for i in 0..N {
        let cmd = call(i as u64, "echo", json!({"message": "n"}));
        rig.sim
            .enqueue(if i % 100 == 0 { cmd } else { cmd.response_timeout("0s") });
    }
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    // Waiting on the gateway's own count; the simulator's record is checked once at the end.
    wait_until("every command accounted for", Duration::from_secs(60), || async {
        let m = rig.metrics().await;
        m.contains(&format!(
            "tunnelgate_deliveries_total{{kind=\"terminal\",outcome=\"acked\"}} {}",
            N / 100
        )) && m.contains(&format!(
            "tunnelgate_commands_dropped_total{{reason=\"expired\"}} {}",
            N - N / 100
        ))
    })
    .await;
    let peak = peak_rss_kib(gw.pid());
    let record = rig.sim.record();
    assert_eq!(
        record.polls.iter().map(|p| p.commands).max(),
        Some(N),
        "one poll carried them all"
    );
    let answered: std::collections::BTreeSet<&str> = record
        .responses
        .iter()
        .filter(|r| r.resp_type.as_deref() == Some("jsonrpc_response"))
        .filter_map(|r| r.request_id.as_deref())
        .collect();
    assert_eq!(answered.len(), N / 100, "each live command answered once");
    assert_eq!(record.responses.len(), N / 100, "an expired command is never posted");
    eprintln!("measured: {N} commands in one poll, peak RSS {peak} KiB");
    assert!(peak < PEAK_RSS_BOUND_KIB, "peak RSS {peak} KiB");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

// --- MCP servers that misbehave ---

/// What a misbehaving MCP server does with every request it reads.
#[derive(Clone, Copy)]
enum Misbehaviour {
    /// Announces and streams a 1 GiB JSON body.
    GiantBody,
    /// An SSE stream whose one event never ends.
    EndlessEvent,
    /// A JSON body that is not UTF-8.
    InvalidUtf8,
    /// A whole JSON-RPC answer for another id.
    WrongId,
}

async fn misbehaving_server(how: Misbehaviour) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = conn.read(&mut buf).await;
                let _ = serve(&mut conn, how).await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

async fn serve(conn: &mut tokio::net::TcpStream, how: Misbehaviour) -> std::io::Result<()> {
    match how {
        Misbehaviour::GiantBody => {
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"")
                .await?;
            let chunk = vec![b'x'; 1024 * 1024];
            for _ in 0..1024 {
                conn.write_all(&chunk).await?;
            }
        }
        Misbehaviour::EndlessEvent => {
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"")
                .await?;
            let chunk = vec![b'y'; 256 * 1024];
            loop {
                conn.write_all(&chunk).await?;
            }
        }
        Misbehaviour::InvalidUtf8 => {
            write_json(conn, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xff\xfe\xfd\"}").await?;
        }
        Misbehaviour::WrongId => {
            write_json(conn, br#"{"jsonrpc":"2.0","id":999,"result":{"content":[]}}"#).await?;
        }
    }
    conn.shutdown().await
}

/// A `200 OK` JSON answer with `Content-Length`.
async fn write_json(conn: &mut tokio::net::TcpStream, body: &[u8]) -> std::io::Result<()> {
    conn.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    conn.write_all(body).await
}

#[tokio::test]
async fn misbehaving_mcp_servers_get_a_counted_outcome_each_and_nothing_else_is_lost() {
    let rig = Rig::start("").await;
    let cases = [
        ("giant", Misbehaviour::GiantBody, "response_body_too_large"),
        ("endless", Misbehaviour::EndlessEvent, "response_body_too_large"),
        ("utf8", Misbehaviour::InvalidUtf8, "malformed_json"),
        ("wrongid", Misbehaviour::WrongId, "non_protocol_response"),
    ];
    let mut extra = String::new();
    for (name, how, _) in cases {
        let url = misbehaving_server(how).await;
        extra.push_str(&format!("\n[mcp.channels.{name}]\nurl = \"{url}\"\n"));
    }
    let config = rig
        .config(&RigOptions::default_mode())
        .replace("[strict]", &format!("{extra}\n[strict]"));
    let mut gw = rig.spawn_gateway(&config).await;
    let bad: Vec<(String, &str)> = cases
        .iter()
        .map(|(name, _, kind)| {
            (
                rig.sim.enqueue(call(1, "echo", json!({"message": "x"})).channel(*name)),
                *kind,
            )
        })
        .collect();
    let good: Vec<String> = (0..20)
        .map(|i| rig.sim.enqueue(call(100 + i, "echo", json!({"message": "fine"}))))
        .collect();
    let record = rig
        .wait("every command answered", |r| {
            bad.iter().all(|(id, _)| r.is_completed(id)) && good.iter().all(|id| r.is_completed(id))
        })
        .await;
    for (id, kind) in &bad {
        let answer = final_json(&record, id);
        let error = &answer["resp_json"]["error"];
        assert_eq!(
            error["data"]["tunnel_failure"]["transport_error_kind"], *kind,
            "{answer}"
        );
        assert!(
            error["message"].as_str().unwrap().starts_with("effect unknown"),
            "{answer}"
        );
    }
    for id in &good {
        assert!(
            final_json(&record, id)["resp_json"]["result"].is_object(),
            "good commands are answered"
        );
    }
    let m = rig.metrics().await;
    assert!(
        m.contains("tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"http\"} 4"),
        "{m}"
    );
    let peak = peak_rss_kib(gw.pid());
    eprintln!("measured: misbehaving MCP servers, peak RSS {peak} KiB");
    assert!(peak < PEAK_RSS_BOUND_KIB, "peak RSS {peak} KiB");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    rig.assert_all_bodies_valid();
}
