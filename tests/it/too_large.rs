//! A terminal response the control plane refuses as too large (`413
//! request_body_too_large`): the MCP server answered, and the tunnel cannot carry the
//! answer. In default mode the caller is told so at once, in a small `-32603` error that
//! names the answer's size and says the tool ran; in strict mode the gateway still
//! latches `ack_rejected`, and the caller is told first. An error refused in turn is
//! never followed by another.
//!
//! Through the real binary, the simulator with a 64 KiB bound on response bodies (its
//! default is 8 MiB) and the Python SDK server in stateless JSON mode, whose `echo`
//! answers with what it was sent: a 100 KiB message makes a result over the bound. The
//! caller is a raw MCP request on the simulator's ingress, which waits for the gateway.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tunnelgate_sim::{FaultScript, McpStub, Record, SimConfig, Simulator};

use crate::contract::validate_response_body;
use crate::harness::{free_port, http_client, spawn_py_server, PyMode, Rig, RigOptions, KEY, TUNNEL};

const EXIT: Duration = Duration::from_secs(20);
/// The simulator's bound on a response POST body.
const LIMIT: usize = 64 * 1024;
/// The echoed message: its result is over [`LIMIT`].
const MESSAGE_BYTES: usize = 100 * 1024;

/// A rig as [`Rig::start`] makes one, with the simulator's response bodies bounded by
/// [`LIMIT`].
async fn small_limit_rig() -> Rig {
    rig_with_limit(LIMIT).await
}

/// A rig as [`Rig::start`] makes one, with the simulator's response bodies bounded by
/// `limit` bytes.
async fn rig_with_limit(limit: usize) -> Rig {
    let stub = McpStub::start(([127, 0, 0, 1], 0).into()).await.expect("stub starts");
    let mut config = SimConfig::new(TUNNEL, KEY);
    config.faults = FaultScript::default();
    config.max_poll_wait = Duration::from_millis(500);
    config.ingress_timeout = Duration::from_secs(15);
    config.max_response_body = limit;
    let sim = Simulator::start(config).await.expect("simulator starts");
    Rig {
        sim,
        stub,
        dir: tempfile::tempdir().expect("tempdir"),
        ops_port: free_port(),
    }
}

/// `tools/call echo` with a [`MESSAGE_BYTES`] message, posted to the simulator's ingress
/// as an MCP caller would; answers the HTTP status and the JSON-RPC body.
async fn call_big_echo(ingress: String) -> (u16, Value) {
    let call = json!({"jsonrpc":"2.0","id":"big-1","method":"tools/call",
        "params":{"name":"echo","arguments":{"message":"x".repeat(MESSAGE_BYTES)}}});
    let resp = http_client()
        .post(ingress)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .header("Mcp-Protocol-Version", "2025-06-18")
        .timeout(Duration::from_secs(30))
        .body(call.to_string())
        .send()
        .await
        .expect("the ingress answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

/// Starts the call, waits until the simulator has refused the big answer with `413`, and
/// returns the caller's answer with the time it took after that refusal.
async fn call_refused_as_too_large(rig: &Rig) -> ((u16, Value), Duration) {
    let call = tokio::spawn(call_big_echo(rig.sim.ingress_url()));
    rig.wait("the big answer refused with 413", |r| {
        r.responses.iter().any(|p| p.status == Some(413))
    })
    .await;
    let refused_at = Instant::now();
    let answer = call.await.unwrap();
    (answer, refused_at.elapsed())
}

/// The small error posted after the refusal: the only POST the simulator could read
/// for the command, checked against the contract.
fn follow_up(rec: &Record) -> Value {
    let request_id = rec.commands[0].request_id.clone().expect("the command has an id");
    let posts: Vec<_> = rec.responses_for(&request_id).collect();
    assert_eq!(posts.len(), 1, "one small error, posted once: {posts:?}");
    validate_response_body(&posts[0].body).unwrap_or_else(|e| panic!("{e}"));
    assert!(posts[0].completed, "the small error completed the request");
    posts[0].json.clone().unwrap()
}

/// What the caller must read: the synthesized error for its own id, with the size of
/// the refused answer and the words that say the tool ran.
fn assert_told_too_large(status: u16, answer: &Value) {
    assert_eq!(status, 502, "{answer}");
    assert_eq!(answer["id"], "big-1", "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    let bytes: usize = message
        .split("its result of ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the message names the byte count: {message}"));
    // The SDK's result carries the message twice (`content` text and `structuredContent`).
    assert!(bytes > MESSAGE_BYTES && bytes < 3 * MESSAGE_BYTES, "{message}");
    assert!(message.contains("larger than the tunnel accepts"), "{message}");
    assert!(
        message.contains("the tool ran, so a retry would run it again"),
        "{message}"
    );
    assert_eq!(
        answer["error"]["data"]["tunnel_failure"],
        json!({"version":1,"source":"protocol","transport_error_kind":"response_body_too_large","upstream_response_received":true}),
        "{answer}"
    );
}

/// The count of `tunnelgate_responses_too_large_total` in a scrape.
fn too_large_count(metrics: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("tunnelgate_responses_too_large_total "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn a_result_too_large_for_the_control_plane_is_answered_with_an_error_naming_its_size_within_a_second() {
    let (_server, url) = spawn_py_server(PyMode::Stateless).await;
    let rig = small_limit_rig().await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    assert_eq!(
        too_large_count(&rig.metrics().await),
        Some(0),
        "present at zero from start"
    );

    let ((status, answer), waited) = call_refused_as_too_large(&rig).await;
    assert_told_too_large(status, &answer);
    assert!(waited < Duration::from_secs(1), "told {waited:?} after the refusal");

    let rec = rig.sim.record();
    let refused: Vec<_> = rec.responses.iter().filter(|p| p.status == Some(413)).collect();
    assert_eq!(refused.len(), 1, "the big answer is posted once, never again");
    let posted = follow_up(&rec);
    assert_eq!(posted["resp_type"], "jsonrpc_response");
    assert_eq!(posted["resp_code"], 502);
    assert_eq!(posted["resp_json"], answer, "the caller got what the gateway posted");

    let metrics = rig.metrics().await;
    assert_eq!(too_large_count(&metrics), Some(1), "{metrics}");
    for (outcome, n) in [("rejected", 1), ("acked", 1)] {
        let series = format!("tunnelgate_deliveries_total{{kind=\"terminal\",outcome=\"{outcome}\"}} {n}");
        assert!(metrics.contains(&series), "{series}\n{metrics}");
    }
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());

    // The receipt keeps the refused delivery, with the words the caller was given.
    let journal = std::fs::read_to_string(rig.dir.path().join("receipts.jsonl")).expect("a receipt was written");
    let receipt: Value = serde_json::from_str(journal.lines().next().unwrap()).unwrap();
    assert_eq!(receipt["leg_outcome"], "answered", "{receipt}");
    assert_eq!(receipt["delivery_outcome"], "rejected", "{receipt}");
    assert_eq!(receipt["attempts"], 1, "{receipt}");
    let words = receipt["message"].as_str().unwrap();
    assert!(
        words.contains("larger than the tunnel accepts") && words.contains("the tool ran"),
        "{receipt}"
    );
}

#[tokio::test]
async fn in_strict_mode_a_result_too_large_for_the_control_plane_still_latches_ack_rejected_after_telling_the_caller() {
    let (_server, url) = spawn_py_server(PyMode::Stateless).await;
    let rig = small_limit_rig().await;
    let mut gw = rig.spawn_gateway(&rig.config_to(&url, &RigOptions::default())).await;

    let ((status, answer), waited) = call_refused_as_too_large(&rig).await;
    assert_told_too_large(status, &answer);
    assert!(waited < Duration::from_secs(1), "told {waited:?} after the refusal");
    // The simulator accepted the small error from the gateway: it was posted before the
    // latch ended the process.
    follow_up(&rig.sim.record());

    assert_eq!(gw.wait_exit(EXIT).await, Some(83), "{}", gw.stderr());
    let latch: Value = serde_json::from_str(&std::fs::read_to_string(rig.latch_path()).unwrap()).unwrap();
    assert_eq!(latch["fatal"]["category"], "ack_rejected", "{latch}");
    assert_eq!(latch["fatal"]["method"], "tools/call", "{latch}");
}

#[tokio::test]
async fn an_error_refused_as_too_large_too_is_not_followed_by_another() {
    let (_server, url) = spawn_py_server(PyMode::Stateless).await;
    // Smaller than the small error itself: it is refused as well.
    let rig = rig_with_limit(256).await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let call = tokio::spawn(call_big_echo(rig.sim.ingress_url()));
    let refusals = |r: &Record| r.responses.iter().filter(|p| p.status == Some(413)).count();
    rig.wait("the answer and its error both refused", |r| refusals(r) == 2)
        .await;
    let more = rig
        .sim
        .wait_for("a third POST", Duration::from_secs(2), |r| r.responses.len() > 2)
        .await;
    assert!(
        more.is_err(),
        "nothing is posted after the error's own refusal: {:?}",
        more.map(|r| r.responses)
    );
    let metrics = rig.metrics().await;
    assert_eq!(
        too_large_count(&metrics),
        Some(1),
        "the answer's refusal is counted once"
    );
    let rejected = "tunnelgate_deliveries_total{kind=\"terminal\",outcome=\"rejected\"} 2";
    assert!(metrics.contains(rejected), "both deliveries are rejected\n{metrics}");
    call.abort();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}
