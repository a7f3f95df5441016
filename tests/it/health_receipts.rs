//! Health receipts on `/status` (issue 20, part 2), through the real gateway and the
//! simulator with the Python SDK server, over HTTP and over stdio: before any command
//! every per-channel time, the tool count and the gauges are null or 0 (and over HTTP
//! the server is unknown); after a caller's `initialize`, `tools/list` and `tools/call`,
//! `/status` names the server and its protocol revision as the answers did, counts the
//! tools of the `tools/list` answer, and carries the last command and success times,
//! the same instants the gauges show. The SIGUSR1 dump shows the same entries.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

use crate::harness::{final_json, spawn_py_server, wait_for, Gateway, PyMode, Rig, RigOptions};
use crate::stdio_sessions::{initialize_caller, py_stdio, stdio_config};

const WAIT: Duration = Duration::from_secs(20);
const EXIT: Duration = Duration::from_secs(20);

const LAST_COMMAND: &str = r#"tunnelgate_channel_last_command_timestamp_seconds{channel="main"}"#;
const LAST_SUCCESS: &str = r#"tunnelgate_channel_last_success_timestamp_seconds{channel="main"}"#;
const LAST_ACKED: &str = "tunnelgate_last_acked_delivery_timestamp_seconds";

/// The value of one series in the gateway's metrics text; panics when it is missing.
async fn gauge(rig: &Rig, series: &str) -> f64 {
    let text = rig.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

/// An RFC 3339 time of `/status` as Unix seconds.
fn unix_seconds(at: &Value) -> f64 {
    let text = at.as_str().unwrap_or_else(|| panic!("not a time: {at}"));
    humantime::parse_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Before any command: the per-channel times and tool count are null, the gauges 0, and
/// no delivery was acknowledged; a poll has succeeded.
async fn assert_nothing_happened_yet(rig: &Rig) -> Value {
    let status = wait_for("a successful poll on /status", WAIT, || async {
        let s = rig.status().await;
        s["control_plane"]["last_successful_poll_at"].is_string().then_some(s)
    })
    .await;
    unix_seconds(&status["control_plane"]["last_successful_poll_at"]);
    assert_eq!(status["control_plane"]["last_acked_at"], Value::Null, "{status}");
    let channel = &status["downstream"][0];
    for key in ["last_command_at", "last_success_at", "tools"] {
        assert_eq!(channel[key], Value::Null, "{key}: {status}");
    }
    for series in [LAST_COMMAND, LAST_SUCCESS, LAST_ACKED] {
        assert_eq!(gauge(rig, series).await, 0.0, "{series}");
    }
    channel.clone()
}

fn with_session(cmd: NewCommand, session: Option<&str>) -> NewCommand {
    match session {
        Some(s) => cmd
            .header("Mcp-Session-Id", s)
            .header("Mcp-Protocol-Version", "2025-06-18"),
        None => cmd,
    }
}

/// `tools/list` then `tools/call echo` on `session`; returns how many tools the answer
/// listed.
async fn list_then_call(rig: &Rig, session: Option<&str>) -> u64 {
    let list = rig.sim.enqueue(with_session(
        NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}})),
        session,
    ));
    let rec = rig.wait("tools/list", |r| r.is_completed(&list)).await;
    let tools = final_json(&rec, &list)["resp_json"]["result"]["tools"]
        .as_array()
        .map(|t| t.len() as u64)
        .unwrap_or_else(|| panic!("a tools list: {}", final_json(&rec, &list)));
    assert!(tools >= 3, "the peer's tools: {tools}");
    let call = rig.sim.enqueue(with_session(
        NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":3,"method":"tools/call",
            "params":{"name":"echo","arguments":{"message":"receipt"}}})),
        session,
    ));
    let rec = rig.wait("tools/call", |r| r.is_completed(&call)).await;
    assert_eq!(
        final_json(&rec, &call)["resp_json"]["result"]["content"][0]["text"],
        "Echo: receipt"
    );
    tools
}

/// After the commands: `/status` (once the last acknowledgement is in the books) counts
/// `tools`, carries the times, and the gauges show the same instants.
async fn assert_receipts_after_commands(rig: &Rig, tools: u64) -> Value {
    let status = wait_for("the tool count and the last success on /status", WAIT, || async {
        let s = rig.status().await;
        let channel = &s["downstream"][0];
        (channel["tools"] == tools
            && channel["last_success_at"].is_string()
            && s["control_plane"]["last_acked_at"].is_string())
        .then_some(s)
    })
    .await;
    let channel = &status["downstream"][0];
    let command_at = unix_seconds(&channel["last_command_at"]);
    let success_at = unix_seconds(&channel["last_success_at"]);
    let acked_at = unix_seconds(&status["control_plane"]["last_acked_at"]);
    // Each leg's time is taken when it ends, the acknowledgement's when it arrives, and
    // the success once the acknowledgement is in.
    assert!(command_at <= acked_at && acked_at <= success_at, "{status}");
    for (series, at) in [
        (LAST_COMMAND, command_at),
        (LAST_SUCCESS, success_at),
        (LAST_ACKED, acked_at),
    ] {
        let gauge = gauge(rig, series).await;
        assert!(
            (gauge - at).abs() < 0.002,
            "{series} = {gauge}, /status says {at}: {status}"
        );
    }
    channel.clone()
}

/// SIGUSR1's dump carries the same `downstream` entries as `/status`.
async fn assert_dump_shows(gw: &Gateway, channel: &Value) {
    gw.signal("USR1");
    let dump = wait_for("the SIGUSR1 status dump", WAIT, || async {
        gw.stderr()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["fields"]["message"] == "status dump (SIGUSR1)")
    })
    .await;
    let downstream: Value = serde_json::from_str(dump["fields"]["downstream"].as_str().unwrap()).unwrap();
    let dumped = &downstream[0];
    for key in ["server", "protocol_version", "tools", "last_success_at", "started_at"] {
        assert_eq!(dumped[key], channel[key], "{key}: {dump}");
    }
    // The control plane's fields are the dump's own nested fields, plain values.
    assert!(dump["fields"]["control_plane.last_acked_at"].is_string(), "{dump}");
}

#[tokio::test]
async fn status_shows_the_python_sdk_servers_identity_tools_and_last_success_over_http() {
    let (_server, url) = spawn_py_server(PyMode::Json).await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let before = assert_nothing_happened_yet(&rig).await;
    for key in ["server", "protocol_version", "started_at"] {
        assert_eq!(before[key], Value::Null, "{key}: nothing seen over HTTP yet: {before}");
    }

    let init = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}),
    ));
    let rec = rig.wait("initialize", |r| r.is_completed(&init)).await;
    let answer = final_json(&rec, &init);
    let result = &answer["resp_json"]["result"];
    assert_eq!(result["serverInfo"]["name"], "tunnelgate-py-peer", "{answer}");
    let session = answer["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .expect("a stateful server's session")
        .to_owned();
    let note = rig.sim.enqueue(with_session(
        NewCommand::jsonrpc(json!({"jsonrpc":"2.0","method":"notifications/initialized"})),
        Some(&session),
    ));
    rig.wait("initialized", |r| r.is_completed(&note)).await;
    let tools = list_then_call(&rig, Some(&session)).await;

    let channel = assert_receipts_after_commands(&rig, tools).await;
    assert_eq!(channel["server"]["name"], "tunnelgate-py-peer", "{channel}");
    assert_eq!(
        channel["server"]["version"], result["serverInfo"]["version"],
        "{channel}"
    );
    assert_eq!(channel["protocol_version"], result["protocolVersion"], "{channel}");
    assert_eq!(channel["started_at"], Value::Null, "no child over HTTP: {channel}");
    assert_dump_shows(&gw, &channel).await;
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn status_shows_the_stdio_servers_session_identity_tools_and_last_success() {
    let rig = Rig::start("").await;
    let config = stdio_config(&rig, &py_stdio("stdio"), "", &RigOptions::default_mode());
    let mut gw = rig.spawn_gateway(&config).await;
    // The gateway's own session names the server before any command.
    let session_seen = wait_for("the stdio session's server on /status", WAIT, || async {
        let s = rig.status().await;
        let channel = s["downstream"][0].clone();
        channel["server"].is_object().then_some(channel)
    })
    .await;
    assert_eq!(session_seen["server"]["name"], "tunnelgate-py-peer", "{session_seen}");
    assert!(session_seen["protocol_version"].is_string(), "{session_seen}");
    assert_eq!(session_seen["generation"], 1, "{session_seen}");
    let started_at = unix_seconds(&session_seen["started_at"]);
    assert_nothing_happened_yet(&rig).await;

    let session = initialize_caller(&rig, "receipts").await;
    let tools = list_then_call(&rig, Some(&session)).await;

    let channel = assert_receipts_after_commands(&rig, tools).await;
    assert_eq!(channel["server"], session_seen["server"], "{channel}");
    assert_eq!(
        channel["protocol_version"], session_seen["protocol_version"],
        "{channel}"
    );
    assert_eq!(
        unix_seconds(&channel["started_at"]),
        started_at,
        "the same child: {channel}"
    );
    assert!(unix_seconds(&channel["last_command_at"]) > started_at, "{channel}");
    assert_dump_shows(&gw, &channel).await;
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}
