//! The era bridge (issue 34) through the binary: 2026-07-28 callers (raw requests through
//! the simulator's ingress, and the Python SDK 2.x client pinned to 2026-07-28) reach
//! handshake-era stdio servers (server-everything on the TypeScript SDK 1.x, and a
//! server on the Python SDK 1.x) whose session the gateway owns.
//!
//! The real server runs behind `tests/peers/stdio/record.py`, so each test can assert
//! what reached it: never `server/discover`, never a removed method, never the envelope,
//! and each tool call exactly once.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{
    http_client, peer_script, peers_dir, python, server_everything_stdio_argv, wait_for, wait_until, Gateway, Rig,
    RigOptions,
};
use crate::stdio_sessions::{channel_status, file, lives, recorded, stdio_config, wait_readyz};

const EXIT: Duration = Duration::from_secs(20);
const MODERN: &str = "2026-07-28";

/// The 2026-07-28 envelope, with a log level when given.
pub(crate) fn envelope(log_level: Option<&str>) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-modern", "version": "1.0"},
    });
    if let Some(level) = log_level {
        meta["io.modelcontextprotocol/logLevel"] = json!(level);
    }
    meta
}

/// A modern request: `params` plus the envelope in `_meta`.
pub(crate) fn modern(id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = envelope(None);
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A raw POST to the simulator's ingress with `headers`; the status, the content type
/// and the JSON body.
pub(crate) async fn post(rig: &Rig, body: &Value, headers: &[(&str, &str)]) -> (u16, String, Value) {
    let mut request = http_client()
        .post(rig.sim.ingress_url())
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let resp = request
        .body(body.to_string())
        .send()
        .await
        .expect("the ingress answers");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = resp.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, content_type, json)
}

/// Every message the recorded server was sent, over all of its lives.
fn received(rig: &Rig, tag: &str) -> Vec<Value> {
    lives(rig, tag).into_iter().flatten().collect()
}

fn methods(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m["method"].as_str().map(str::to_owned))
        .collect()
}

/// A gateway with channel `main` running `server` behind the recorder `tag`, ready.
async fn bridged_gateway(rig: &Rig, tag: &str, server: Vec<String>, channel: &str, o: &RigOptions<'_>) -> Gateway {
    let config = stdio_config(rig, &recorded(rig, tag, server), channel, o);
    let gw = rig.spawn_gateway(&config).await;
    wait_readyz(rig.ops_port, 200).await;
    gw
}

pub(crate) async fn stop(mut gw: Gateway) {
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// The raw wire of a modern caller against server-everything over stdio: discover is
/// answered from the owned session, results are shaped, removed methods and bad
/// envelopes are refused, and none of it but the one call reaches the server.
async fn a_modern_caller_is_bridged_to_server_everything(o: RigOptions<'_>) {
    let rig = Rig::start("").await;
    let gw = bridged_gateway(&rig, "srv", server_everything_stdio_argv(), "", &o).await;

    let (status, content_type, discover) = post(&rig, &modern(1, "server/discover", json!({})), &[]).await;
    assert_eq!(status, 200, "{discover}");
    assert!(content_type.starts_with("application/json"), "{content_type}");
    let result = &discover["result"];
    assert_eq!(discover["id"], 1);
    assert_eq!(result["resultType"], "complete", "{discover}");
    assert_eq!(result["supportedVersions"], json!([MODERN]), "{discover}");
    assert_eq!(result["ttlMs"], 0);
    assert_eq!(result["cacheScope"], "private");
    assert!(result["capabilities"]["tools"].is_object(), "{discover}");
    assert!(result["capabilities"].get("tasks").is_none(), "{discover}");
    assert!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"]
            .as_str()
            .is_some_and(|n| !n.is_empty()),
        "{discover}"
    );

    let (status, _, list) = post(&rig, &modern(2, "tools/list", json!({})), &[]).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["result"]["resultType"], "complete", "{list}");
    assert_eq!(list["result"]["ttlMs"], 0, "{list}");
    assert_eq!(list["result"]["cacheScope"], "private", "{list}");
    assert!(
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "echo"),
        "{list}"
    );

    let headers = [
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "echo"),
    ];
    let echo = modern(
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "bridged"}}),
    );
    let (status, _, called) = post(&rig, &echo, &headers).await;
    assert_eq!(status, 200, "{called}");
    assert_eq!(called["id"], 3);
    assert_eq!(called["result"]["resultType"], "complete", "{called}");
    assert_eq!(called["result"]["content"][0]["text"], "Echo: bridged", "{called}");
    assert!(
        called["result"].get("ttlMs").is_none(),
        "a call is not cacheable: {called}"
    );

    // Removed in 2026-07-28: answered as a modern server would, never forwarded.
    let (status, _, ping) = post(&rig, &modern(4, "ping", json!({})), &[]).await;
    assert_eq!((status, &ping["error"]["code"]), (404, &json!(-32601)), "{ping}");
    // A caller that contradicts itself, then one without an envelope, then an unserved revision.
    let (status, _, mismatch) = post(&rig, &echo, &[("Mcp-Method", "tools/list")]).await;
    assert_eq!(
        (status, &mismatch["error"]["code"]),
        (400, &json!(-32020)),
        "{mismatch}"
    );
    let bare = json!({"jsonrpc": "2.0", "id": 5, "method": "server/discover"});
    let (status, _, bare) = post(&rig, &bare, &[]).await;
    assert_eq!((status, &bare["error"]["code"]), (400, &json!(-32602)), "{bare}");
    let mut future = modern(6, "tools/list", json!({}));
    future["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let (status, _, future) = post(&rig, &future, &[]).await;
    assert_eq!((status, &future["error"]["code"]), (400, &json!(-32022)), "{future}");
    assert_eq!(
        future["error"]["data"],
        json!({"supported": [MODERN], "requested": "2099-01-01"})
    );

    let seen = received(&rig, "srv");
    let seen_methods = methods(&seen);
    assert_eq!(
        seen_methods.iter().filter(|m| *m == "tools/call").count(),
        1,
        "the one call, once: {seen_methods:?}"
    );
    for never in ["server/discover", "ping"] {
        assert!(
            !seen_methods.iter().any(|m| m == never),
            "{never} reached the server: {seen_methods:?}"
        );
    }
    let written: String = seen.iter().map(Value::to_string).collect();
    assert!(
        !written.contains("io.modelcontextprotocol/"),
        "the envelope is stripped: {written}"
    );

    let status = channel_status(&rig).await;
    assert_eq!(
        (&status["era"], &status["era_setting"]),
        (&json!("legacy"), &json!("auto")),
        "{status}"
    );
    let metrics = rig.metrics().await;
    for (handling, n) in [("forwarded", 2), ("answered_locally", 1), ("refused", 4)] {
        let line = format!(r#"tunnelgate_era_requests_total{{channel="main",handling="{handling}"}} {n}"#);
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    rig.assert_all_bodies_valid();
    stop(gw).await;
}

#[tokio::test]
async fn a_modern_caller_reaches_server_everything_over_stdio_through_the_bridge_in_default_mode() {
    a_modern_caller_is_bridged_to_server_everything(RigOptions::default_mode()).await;
}

#[tokio::test]
async fn a_modern_caller_reaches_server_everything_over_stdio_through_the_bridge_in_strict_mode() {
    a_modern_caller_is_bridged_to_server_everything(RigOptions::default()).await;
}

#[tokio::test]
async fn log_messages_reach_a_modern_request_only_at_the_level_it_asked_for() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let gw = bridged_gateway(&rig, "srv", legacy_py_server(&effects), "", &RigOptions::default_mode()).await;
    let collect = |level: Option<&str>| {
        let mut params = json!({"name": "chatty", "arguments": {}});
        params["_meta"] = envelope(level);
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params})
    };
    let levels = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["method"] == "notifications/message")
            .map(|e| e["params"]["level"].as_str().unwrap().to_owned())
            .collect()
    };
    let (final_, events) = sse_post(&rig, &collect(None)).await;
    assert_eq!(final_["result"]["content"][0]["text"], "logged", "{final_}");
    assert_eq!(
        levels(&events),
        Vec::<String>::new(),
        "no level asked, no log: {events:?}"
    );
    let (_, events) = sse_post(&rig, &collect(Some("warning"))).await;
    assert_eq!(levels(&events), ["warning"], "{events:?}");
    let (_, events) = sse_post(&rig, &collect(Some("debug"))).await;
    assert_eq!(levels(&events), ["debug", "info", "warning"], "{events:?}");
    stop(gw).await;
}

/// A POST that accepts SSE: the final message and the notifications before it.
async fn sse_post(rig: &Rig, body: &Value) -> (Value, Vec<Value>) {
    let resp = http_client()
        .post(rig.sim.ingress_url())
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .expect("the ingress answers");
    let text = resp.text().await.unwrap();
    let mut messages: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    if messages.is_empty() {
        messages.push(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")));
    }
    let last = messages.pop().unwrap();
    (last, messages)
}

/// The Python SDK 1.x legacy server over stdio, its side effects in `effects`.
fn legacy_py_server(effects: &std::path::Path) -> Vec<String> {
    vec![
        py1().display().to_string(),
        peer_script("era/legacy_server.py").display().to_string(),
        "--transport".to_owned(),
        "stdio".to_owned(),
        "--effects".to_owned(),
        effects.display().to_string(),
    ]
}

/// The Python of the SDK 1.x venv (`scripts/install-peers`).
pub(crate) fn py1() -> PathBuf {
    let path = peers_dir().join("venv-py1/bin/python");
    assert!(path.exists(), "{} missing: run scripts/install-peers", path.display());
    path
}

/// The lines of the effects file: one per run of a side-effecting tool.
pub(crate) fn effect_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The Python SDK 2.x client (`tests/peers/era/modern_client.py`) against the ingress.
pub(crate) async fn modern_client(rig: &Rig, mode: &str, args: &[&str]) -> Value {
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(peer_script("era/modern_client.py"))
        .args(["--url", &rig.sim.ingress_url(), "--mode", mode, "--timeout", "30"])
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the modern client ends within 60 s")
        .expect("the modern client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "modern_client {mode} {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The SDK 2.x client in each mode against the SDK 1.x server: it works, and the tool
/// with a side effect ran exactly once per call.
async fn the_python_sdk_client_works_in_mode(mode: &str, o: RigOptions<'_>) {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let gw = bridged_gateway(&rig, "srv", legacy_py_server(&effects), "", &o).await;
    let out = modern_client(
        &rig,
        mode,
        &[
            "--discover",
            "--list-tools",
            "--call",
            "effect",
            r#"{"label": "once"}"#,
            "--read-resource",
            "data://greeting",
            "--get-prompt",
            "greet",
            r#"{"name": "ada"}"#,
        ],
    )
    .await;
    let want_version = if mode == "legacy" { "2025-11-25" } else { MODERN };
    assert_eq!(out["protocol_version"], want_version, "{out}");
    let results = out["results"].as_array().unwrap();
    let call = results.iter().find(|r| r["action"] == "call").unwrap();
    assert_eq!(call["texts"][0], "effect once #1", "{out}");
    let read = results.iter().find(|r| r["action"] == "read_resource").unwrap();
    assert!(read.to_string().contains("hello from legacy"), "{out}");
    assert_eq!(effect_lines(&effects), ["once"], "the tool ran once");
    let seen = methods(&received(&rig, "srv"));
    assert_eq!(seen.iter().filter(|m| *m == "tools/call").count(), 1, "{seen:?}");
    assert!(!seen.iter().any(|m| m == "server/discover"), "{seen:?}");
    stop(gw).await;
}

#[tokio::test]
async fn the_python_sdk_client_pinned_to_2026_07_28_works_through_a_legacy_python_stdio_server() {
    the_python_sdk_client_works_in_mode(MODERN, RigOptions::default_mode()).await;
}

#[tokio::test]
async fn the_python_sdk_client_pinned_to_2026_07_28_works_through_a_legacy_python_stdio_server_in_strict_mode() {
    the_python_sdk_client_works_in_mode(MODERN, RigOptions::default()).await;
}

#[tokio::test]
async fn the_python_sdk_client_in_auto_mode_is_answered_by_the_bridge_and_speaks_2026_07_28() {
    the_python_sdk_client_works_in_mode("auto", RigOptions::default_mode()).await;
}

#[tokio::test]
async fn the_python_sdk_client_in_legacy_mode_still_passes_through_the_handshake() {
    the_python_sdk_client_works_in_mode("legacy", RigOptions::default_mode()).await;
}

#[tokio::test]
async fn a_channel_configured_legacy_refuses_a_child_that_has_no_handshake() {
    let rig = Rig::start("").await;
    let modern = crate::stdio_sessions::py_stdio("stdio-modern");
    let config = stdio_config(
        &rig,
        &recorded(&rig, "srv", modern),
        "era = \"legacy\"",
        &RigOptions::default_mode(),
    );
    let gw = rig.spawn_gateway(&config).await;
    wait_until("the refusal is logged", EXIT, || {
        let logged = gw.stderr().contains("configured era = \\\"legacy\\\"");
        async move { logged }
    })
    .await;
    let status = channel_status(&rig).await;
    assert_eq!(status["up"], false, "{status}");
    assert_eq!(status["era_setting"], "legacy", "{status}");
    let metrics = rig.metrics().await;
    assert!(
        !metrics.contains(r#"tunnelgate_stdio_sessions_total{channel="main",result="discovered"} 1"#),
        "{metrics}"
    );
    stop(gw).await;
}

#[tokio::test]
async fn a_channel_configured_modern_is_never_initialized_by_the_gateway() {
    let rig = Rig::start("").await;
    let gw = bridged_gateway(
        &rig,
        "srv",
        crate::stdio_sessions::py_stdio("stdio-modern"),
        "era = \"modern\"",
        &RigOptions::default_mode(),
    )
    .await;
    let status = channel_status(&rig).await;
    assert_eq!(
        (&status["era"], &status["session"]),
        (&json!("modern"), &json!("pass_through")),
        "{status}"
    );
    // A modern caller's discover goes to the server itself.
    let (status, _, discover) = post(&rig, &modern(1, "server/discover", json!({})), &[]).await;
    assert_eq!(status, 200, "{discover}");
    let seen = methods(&received(&rig, "srv"));
    assert_eq!(seen, ["server/discover"], "nothing but the caller's own: {seen:?}");
    stop(gw).await;
}

#[tokio::test]
async fn a_bad_era_setting_exits_78_naming_the_key() {
    let rig = Rig::start("").await;
    let argv = server_everything_stdio_argv();
    for (channel, words) in [
        ("era = \"newest\"", "\"newest\" is not an era"),
        (
            "era = \"legacy\"\nsession = \"pass_through\"",
            "session = \"pass_through\" never does",
        ),
    ] {
        let config = stdio_config(&rig, &argv, channel, &RigOptions::default_mode());
        let run = Gateway::cli(&["check"], Some(&config), &[], EXIT).await;
        assert_eq!(run.code, 78, "{channel}: {}", run.stderr);
        assert!(run.stderr.contains("mcp.channels.main.era"), "{}", run.stderr);
        assert!(run.stderr.contains(words), "{channel}: {}", run.stderr);
    }
    // An HTTP channel holds calls too: its bounds are checked as a stdio channel's are.
    let http = |rounds: u32| {
        rig.config(&RigOptions::default_mode()).replace(
            &format!("url = \"{}\"", rig.stub.url()),
            &format!(
                "url = \"{}\"\n[mcp.channels.main.input_required]\nmax_rounds = {rounds}",
                rig.stub.url()
            ),
        )
    };
    let run = Gateway::cli(&["check"], Some(&http(2)), &[], EXIT).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = Gateway::cli(&["check"], Some(&http(0)), &[], EXIT).await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains("mcp.channels.main.input_required.max_rounds"),
        "{}",
        run.stderr
    );
    for (table, words) in [
        (
            "park_timeout = \"11m\"",
            "must not be longer than mcp.channels.main.input_required.call_timeout",
        ),
        ("max_rounds = 0", "must be 1 to 100 (found 0)"),
        (
            "park_timeout = \"soon\"",
            "mcp.channels.main.input_required.park_timeout",
        ),
    ] {
        let channel = format!("[mcp.channels.main.input_required]\n{table}");
        let config = stdio_config(&rig, &argv, &channel, &RigOptions::default_mode());
        let run = Gateway::cli(&["check"], Some(&config), &[], EXIT).await;
        assert_eq!(run.code, 78, "{table}: {}", run.stderr);
        assert!(run.stderr.contains(words), "{table}: {}", run.stderr);
    }
}

/// The Python SDK 1.x legacy server over Streamable HTTP, its side effects in `effects`.
pub(crate) async fn legacy_py_http(effects: &std::path::Path) -> (crate::harness::ChildGuard, String) {
    legacy_py_http_with(effects, &[]).await
}

/// [`legacy_py_http`] with more arguments for the server (`--json-response`).
pub(crate) async fn legacy_py_http_with(
    effects: &std::path::Path,
    extra: &[&str],
) -> (crate::harness::ChildGuard, String) {
    let python = py1();
    let script = peer_script("era/legacy_server.py");
    let effects = effects.display().to_string();
    crate::harness::spawn_http_peer("legacy_server(http)", "/mcp", |port| {
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(&script)
            .args([
                "--transport",
                "http",
                "--port",
                &port.to_string(),
                "--effects",
                &effects,
            ])
            .args(extra)
            .env("PYTHONUNBUFFERED", "1");
        cmd
    })
    .await
}

/// The SDK 2.x client pinned to 2026-07-28 against a handshake-era Python HTTP server
/// through the bridge: discovery, lists, a resource, a prompt, a side effect run once.
async fn a_pinned_caller_reaches_a_legacy_http_server(o: RigOptions<'_>) {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let (_server, url) = legacy_py_http(&effects).await;
    let gw = rig.spawn_gateway(&rig.config_to(&url, &o)).await;
    let out = modern_client(
        &rig,
        MODERN,
        &[
            "--discover",
            "--list-tools",
            "--call",
            "effect",
            r#"{"label": "over-http"}"#,
            "--read-resource",
            "data://greeting",
            "--get-prompt",
            "greet",
            r#"{"name": "ada"}"#,
        ],
    )
    .await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results[0]["server_name"], "tunnelgate-legacy-peer", "{out}");
    assert_eq!(results[0]["discover"]["supportedVersions"], json!([MODERN]), "{out}");
    let call = results.iter().find(|r| r["action"] == "call").unwrap();
    assert_eq!(call["texts"][0], "effect over-http #1", "{out}");
    assert!(results
        .iter()
        .find(|r| r["action"] == "read_resource")
        .unwrap()
        .to_string()
        .contains("hello from legacy"));
    assert_eq!(effect_lines(&effects), ["over-http"], "the tool ran once");
    let status = channel_status(&rig).await;
    assert_eq!(
        (&status["era"], &status["era_setting"]),
        (&json!("legacy"), &json!("auto")),
        "{status}"
    );
    rig.assert_all_bodies_valid();
    stop(gw).await;
}

#[tokio::test]
async fn a_caller_pinned_to_2026_07_28_reaches_a_legacy_python_http_server_through_the_bridge() {
    a_pinned_caller_reaches_a_legacy_http_server(RigOptions::default_mode()).await;
}

#[tokio::test]
async fn a_caller_pinned_to_2026_07_28_reaches_a_legacy_python_http_server_through_the_bridge_in_strict_mode() {
    a_pinned_caller_reaches_a_legacy_http_server(RigOptions::default()).await;
}

#[tokio::test]
async fn without_the_gateway_the_pinned_caller_fails_against_the_legacy_http_server_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.log");
    let (_server, url) = legacy_py_http(&effects).await;
    let out = tokio::process::Command::new(python())
        .arg(peer_script("era/modern_client.py"))
        .args([
            "--url",
            &url,
            "--mode",
            MODERN,
            "--timeout",
            "20",
            "--call",
            "effect",
            r#"{"label": "direct"}"#,
        ])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The direct pair fails as the spec's matrix says: the server wants a session.
    assert!(
        stdout.contains("-32600") || !out.status.success(),
        "the direct pair is expected to fail: {stdout}"
    );
    assert!(
        stdout.contains("Missing session ID") || !out.status.success(),
        "{stdout}"
    );
    assert_eq!(effect_lines(&effects), Vec::<String>::new(), "nothing ran");
}

#[tokio::test]
async fn a_modern_caller_reaches_server_everything_over_http_and_a_lost_session_is_reopened_for_the_next_request() {
    let rig = Rig::start("").await;
    let (mut server, url) = crate::harness::spawn_server_everything_http().await;
    let gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let (status, _, discover) = post(&rig, &modern(1, "server/discover", json!({})), &[]).await;
    assert_eq!(status, 200, "{discover}");
    assert_eq!(discover["result"]["supportedVersions"], json!([MODERN]), "{discover}");
    let echo = |id: u64| {
        modern(
            id,
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "over http"}}),
        )
    };
    let (status, _, called) = post(
        &rig,
        &echo(2),
        &[("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/call")],
    )
    .await;
    assert_eq!(status, 200, "{called}");
    assert_eq!(called["result"]["content"][0]["text"], "Echo: over http", "{called}");
    assert_eq!(called["result"]["resultType"], "complete", "{called}");
    let (_, _, list) = post(&rig, &modern(3, "tools/list", json!({})), &[]).await;
    assert_eq!(list["result"]["cacheScope"], "private", "{list}");

    // The server restarts on the same port: it no longer knows the gateway's session.
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .to_owned();
    server.kill();
    let mut restarted = std::process::Command::new(crate::harness::node());
    restarted
        .arg(crate::harness::server_everything_entry())
        .arg("streamableHttp")
        .env("PORT", &port);
    let _restarted = crate::harness::ChildGuard::spawn("server-everything (restarted)", restarted);
    wait_until("the restarted server answers", EXIT, || {
        crate::harness::http_answers(&url)
    })
    .await;
    let (status, _, lost) = post(&rig, &echo(4), &[]).await;
    assert_eq!(status, 200, "{lost}");
    assert_eq!(lost["error"]["code"], -32603, "{lost}");
    let words = lost["error"]["message"].as_str().unwrap();
    assert!(
        words.contains("no longer knows the gateway's session") && words.contains("safe to retry"),
        "{words}"
    );
    let (status, _, again) = post(&rig, &echo(5), &[]).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        again["result"]["content"][0]["text"], "Echo: over http",
        "a new session: {again}"
    );
    stop(gw).await;
}

/// The TypeScript SDK v2 server that refuses handshake callers (`tests/peers/era/modern_server.mjs`).
async fn modern_ts_http(effects: &std::path::Path) -> (crate::harness::ChildGuard, String) {
    let node = crate::harness::node();
    let script = peer_script("era/modern_server.mjs");
    let effects = effects.display().to_string();
    let modules = crate::harness::node_modules().display().to_string();
    crate::harness::spawn_http_peer("modern_server(http)", "/mcp", |port| {
        let mut cmd = std::process::Command::new(&node);
        cmd.arg(&script).args([
            "--transport",
            "http",
            "--port",
            &port.to_string(),
            "--effects",
            &effects,
            "--node-modules",
            &modules,
        ]);
        cmd
    })
    .await
}

#[tokio::test]
async fn an_http_server_of_2026_07_28_is_found_by_its_discover_answer_and_passed_through() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let (_server, url) = modern_ts_http(&effects).await;
    let gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let out = modern_client(
        &rig,
        MODERN,
        &["--discover", "--call", "effect", r#"{"label": "modern"}"#],
    )
    .await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results[1]["texts"][0], "effect modern #1", "{out}");
    assert_eq!(effect_lines(&effects), ["modern"]);
    let status = channel_status(&rig).await;
    assert_eq!(status["era"], "modern", "{status}");
    stop(gw).await;
}

/// The pinned SDK 2.x client calls a legacy tool that asks for input mid-call: the caller
/// is answered `input_required`, its retry answers the held call, and the tool ran once.
async fn an_elicitation_mid_call_completes_for_a_pinned_caller(mode: &str) {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let gw = bridged_gateway(&rig, "srv", legacy_py_server(&effects), "", &RigOptions::default_mode()).await;
    let out = modern_client(
        &rig,
        mode,
        &[
            "--elicit-accept",
            r#"{"name": "Ada"}"#,
            "--call",
            "ask",
            r#"{"question": "who are you?"}"#,
        ],
    )
    .await;
    let call = &out["results"][0];
    assert_eq!(call["texts"][0], "hello Ada", "{out}");
    assert_eq!(
        effect_lines(&effects),
        ["ask-start", "ask-end"],
        "the tool ran once: {out}"
    );
    let seen = methods(&received(&rig, "srv"));
    assert_eq!(
        seen.iter().filter(|m| *m == "tools/call").count(),
        1,
        "written once: {seen:?}"
    );
    let metrics = rig.metrics().await;
    for line in [
        r#"tunnelgate_era_input_rounds_total{channel="main"} 1"#,
        r#"tunnelgate_era_held_calls_total{channel="main",end="answered"} 1"#,
        r#"tunnelgate_era_parked_calls{channel="main"} 0"#,
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    stop(gw).await;
}

#[tokio::test]
async fn an_elicitation_mid_call_completes_for_a_caller_pinned_to_2026_07_28_and_the_tool_runs_once() {
    an_elicitation_mid_call_completes_for_a_pinned_caller(MODERN).await;
}

/// `ask` as a modern caller that declared elicitation; `question` picks the parameters.
pub(crate) fn ask(id: u64, question: &str, continuation: Option<(&Value, &str)>) -> Value {
    let mut params = json!({"name": "ask", "arguments": {"question": question}});
    params["_meta"] = envelope(None);
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
    if let Some((responses, state)) = continuation {
        params["inputResponses"] = responses.clone();
        params["requestState"] = json!(state);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// Starts `ask` and returns its `input_required` result.
pub(crate) async fn parked_ask(rig: &Rig, id: u64) -> Value {
    let (status, _, answer) = post(rig, &ask(id, "who?", None), &[]).await;
    assert_eq!(status, 200, "{answer}");
    let result = answer["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{answer}");
    assert!(result.get("ttlMs").is_none(), "never cached: {answer}");
    result
}

/// The only input request's key, and the answer accepting it with `name`.
pub(crate) fn accept(result: &Value, name: &str) -> Value {
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{result}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{result}");
    json!({ key.as_str(): {"action": "accept", "content": {"name": name}} })
}

/// The refusal of a retry: status 400, `-32602`, the reason, and the words that say the
/// call was not run again.
pub(crate) fn assert_refused(status: u16, answer: &Value, reason: &str) {
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], reason, "{answer}");
    let words = answer["error"]["message"].as_str().unwrap();
    assert!(
        words.contains("The original call's effect is unknown and it was not run again"),
        "{words}"
    );
}

/// What the recorded server was sent: its `tools/call`s and the answers to its requests.
fn writes(rig: &Rig) -> (usize, usize) {
    let seen = received(rig, "srv");
    let calls = seen.iter().filter(|m| m["method"] == "tools/call").count();
    let answers = seen
        .iter()
        .filter(|m| m.get("method").is_none() && m.get("id").is_some())
        .count();
    (calls, answers)
}

#[tokio::test]
async fn a_replayed_tampered_or_foreign_request_state_is_refused_and_nothing_is_written() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let gw = bridged_gateway(&rig, "srv", legacy_py_server(&effects), "", &RigOptions::default_mode()).await;
    let parked = parked_ask(&rig, 1).await;
    let state = parked["requestState"].as_str().unwrap().to_owned();
    let responses = accept(&parked, "Ada");

    // Other parameters than the held call's.
    let (status, _, other) = post(&rig, &ask(2, "someone else?", Some((&responses, &state))), &[]).await;
    assert_refused(status, &other, "mismatch");
    // One byte of the signature changed, and a token that was never one.
    let mut forged = state.clone().into_bytes();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let (status, _, tampered) = post(&rig, &ask(3, "who?", Some((&responses, &forged))), &[]).await;
    assert_refused(status, &tampered, "tampered");
    let (status, _, garbage) = post(&rig, &ask(4, "who?", Some((&responses, "not-a-token"))), &[]).await;
    assert_refused(status, &garbage, "tampered");
    assert_eq!(writes(&rig), (1, 0), "refusals write nothing");

    // The real retry completes the held call, under the retry's own id.
    let (status, _, done) = post(&rig, &ask(5, "who?", Some((&responses, &state))), &[]).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["id"], 5, "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "hello Ada", "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    // The same retry again (a duplicate delivery, a double submit).
    let (status, _, replayed) = post(&rig, &ask(6, "who?", Some((&responses, &state))), &[]).await;
    assert_refused(status, &replayed, "consumed");

    assert_eq!(writes(&rig), (1, 1), "one call, one answer to its one request");
    assert_eq!(effect_lines(&effects), ["ask-start", "ask-end"]);
    let metrics = rig.metrics().await;
    for (reason, n) in [("mismatch", 1), ("tampered", 2), ("consumed", 1)] {
        let line = format!(r#"tunnelgate_era_continuations_refused_total{{channel="main",reason="{reason}"}} {n}"#);
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    stop(gw).await;
}

#[tokio::test]
async fn a_parked_call_never_continued_expires_its_request_is_cancelled_and_a_late_retry_is_refused() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let table = "[mcp.channels.main.input_required]\npark_timeout = \"1s\"";
    let gw = bridged_gateway(
        &rig,
        "srv",
        legacy_py_server(&effects),
        table,
        &RigOptions::default_mode(),
    )
    .await;
    let parked = parked_ask(&rig, 1).await;
    let state = parked["requestState"].as_str().unwrap().to_owned();
    wait_until("the parked call expired and ended", EXIT, || async {
        rig.metrics()
            .await
            .contains(r#"tunnelgate_era_held_calls_total{channel="main",end="expired"} 1"#)
    })
    .await;
    // The server's request was dismissed as a person dismisses a form: the tool ended by itself.
    assert_eq!(effect_lines(&effects), ["ask-start", "ask-end"]);
    let answers: Vec<Value> = received(&rig, "srv")
        .into_iter()
        .filter(|m| m.get("method").is_none() && m.get("result").is_some())
        .collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["result"], json!({"action": "cancel"}));
    // Its receipt: the command that started it, and that no caller was told.
    let path = rig.dir.path().join("receipts.jsonl");
    let path_text = path.display().to_string();
    let args = [
        "receipts",
        "--json",
        "--outcome",
        "unanswered",
        "--path",
        path_text.as_str(),
    ];
    let listed = wait_for("the held call's receipt", EXIT, || async {
        let run = Gateway::cli(&args, None, &[], EXIT).await;
        (run.code == 0 && !run.stdout.trim().is_empty()).then_some(run.stdout)
    })
    .await;
    let receipt: Value = serde_json::from_str(listed.lines().next().unwrap()).unwrap();
    assert_eq!(receipt["held"], "expired", "{receipt}");
    assert_eq!(receipt["method"], "tools/call", "{receipt}");
    assert!(receipt["request_id"].as_str().unwrap().starts_with("req_"), "{receipt}");
    assert!(
        receipt["message"].as_str().unwrap().contains("reached no caller"),
        "{receipt}"
    );
    let (status, _, late) = post(&rig, &ask(2, "who?", Some((&accept(&parked, "Ada"), &state))), &[]).await;
    assert_refused(status, &late, "expired");
    assert_eq!(writes(&rig), (1, 1), "the late retry wrote nothing");
    assert!(rig
        .metrics()
        .await
        .contains(r#"tunnelgate_era_parked_calls{channel="main"} 0"#));
    stop(gw).await;
}

#[tokio::test]
async fn a_retry_after_a_gateway_restart_is_refused_and_the_tool_does_not_run_again() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let config = stdio_config(
        &rig,
        &recorded(&rig, "srv", legacy_py_server(&effects)),
        "",
        &RigOptions::default_mode(),
    );
    let gw = rig.spawn_gateway(&config).await;
    wait_readyz(rig.ops_port, 200).await;
    let parked = parked_ask(&rig, 1).await;
    let state = parked["requestState"].as_str().unwrap().to_owned();
    stop(gw).await;
    let gw = rig.spawn_gateway(&config).await;
    wait_readyz(rig.ops_port, 200).await;
    let (status, _, after) = post(&rig, &ask(2, "who?", Some((&accept(&parked, "Ada"), &state))), &[]).await;
    assert_refused(status, &after, "restarted");
    let lives = lives(&rig, "srv");
    assert_eq!(lives.len(), 2, "{lives:?}");
    assert!(
        !methods(&lives[1]).iter().any(|m| m == "tools/call"),
        "the new child never saw the call: {:?}",
        lives[1]
    );
    assert_eq!(
        effect_lines(&effects),
        ["ask-start"],
        "the tool started once, and never again"
    );
    stop(gw).await;
}

#[tokio::test]
async fn strict_mode_never_parks_the_tool_runs_once_and_a_request_state_is_refused() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let gw = bridged_gateway(&rig, "srv", legacy_py_server(&effects), "", &RigOptions::default()).await;
    let (status, _, answer) = post(&rig, &ask(1, "who?", None), &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["resultType"], "complete",
        "no input_required in strict mode: {answer}"
    );
    assert_eq!(
        answer["result"]["isError"], true,
        "the tool saw its request refused: {answer}"
    );
    assert_eq!(effect_lines(&effects), ["ask-start"], "it ran once");
    let (status, _, refused) = post(
        &rig,
        &ask(2, "who?", Some((&json!({"ir-0": {"action": "accept"}}), "x.y"))),
        &[],
    )
    .await;
    assert_refused(status, &refused, "tampered");
    assert_eq!(writes(&rig).0, 1, "the retry wrote nothing");
    let status = rig.status().await;
    assert_eq!(status["fatal"], Value::Null, "no latch: {status}");
    stop(gw).await;
}

#[tokio::test]
async fn sampling_and_roots_mid_call_reach_a_caller_pinned_to_2026_07_28() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let gw = bridged_gateway(&rig, "srv", legacy_py_server(&effects), "", &RigOptions::default_mode()).await;
    let out = modern_client(
        &rig,
        MODERN,
        &[
            "--sampling-reply",
            "sampled words",
            "--roots",
            "file:///srv/a,file:///srv/b",
            "--call",
            "sample",
            r#"{"prompt": "say something"}"#,
            "--call",
            "roots_related",
            "{}",
        ],
    )
    .await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results[0]["texts"][0], "sampled words", "{out}");
    let roots = results[1]["texts"][0].as_str().unwrap();
    assert!(
        roots.contains("file:///srv/a") && roots.contains("file:///srv/b"),
        "{out}"
    );
    let seen = methods(&received(&rig, "srv"));
    assert_eq!(seen.iter().filter(|m| *m == "tools/call").count(), 2, "{seen:?}");
    stop(gw).await;
}

/// The TypeScript SDK v2 server that refuses handshake callers, over stdio.
fn modern_ts_stdio(effects: &std::path::Path) -> Vec<String> {
    vec![
        crate::harness::node().display().to_string(),
        peer_script("era/modern_server.mjs").display().to_string(),
        "--transport".to_owned(),
        "stdio".to_owned(),
        "--effects".to_owned(),
        effects.display().to_string(),
        "--node-modules".to_owned(),
        crate::harness::node_modules().display().to_string(),
    ]
}

#[tokio::test]
async fn a_handshake_caller_reaches_a_2026_07_28_only_stdio_server_and_answers_its_input_request() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let gw = bridged_gateway(&rig, "srv", modern_ts_stdio(&effects), "", &RigOptions::default_mode()).await;
    let status = channel_status(&rig).await;
    assert_eq!(status["era"], "modern", "{status}");
    let out = modern_client(
        &rig,
        "legacy",
        &[
            "--elicit-accept",
            r#"{"name": "Ada"}"#,
            "--list-tools",
            "--call",
            "effect",
            r#"{"label": "once"}"#,
            "--call",
            "ask",
            r#"{"question": "who?"}"#,
        ],
    )
    .await;
    assert_eq!(
        out["protocol_version"], "2025-11-25",
        "initialize answered by the gateway: {out}"
    );
    let results = out["results"].as_array().unwrap();
    assert_eq!(results[1]["texts"][0], "effect once #1", "{out}");
    assert_eq!(results[2]["texts"][0], "hello Ada", "{out}");
    assert_eq!(
        results[2]["asked"].as_array().map(Vec::len),
        Some(1),
        "the caller was asked once: {out}"
    );
    // MRTR re-enters the server's handler by design: the first round and the retry.
    assert_eq!(effect_lines(&effects), ["once", "ask-start", "ask-start", "ask-end"]);
    let seen = received(&rig, "srv");
    let inits: Vec<&Value> = seen.iter().filter(|m| m["method"] == "initialize").collect();
    assert_eq!(inits.len(), 1, "only the gateway's own probe: {seen:?}");
    assert_eq!(
        inits[0]["params"]["clientInfo"]["name"], "tunnelgate",
        "never the caller's: {seen:?}"
    );
    let asks: Vec<&Value> = seen
        .iter()
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "ask")
        .collect();
    assert_eq!(asks.len(), 2, "{asks:?}");
    assert!(asks[0]["params"].get("requestState").is_none());
    assert!(asks[1]["params"]["requestState"].is_string(), "{:?}", asks[1]);
    assert_eq!(
        asks[1]["params"]["inputResponses"].as_object().map(|m| m.len()),
        Some(1)
    );
    assert_eq!(
        asks[1]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], MODERN,
        "every request is stamped: {:?}",
        asks[1]
    );
    stop(gw).await;
}

#[tokio::test]
async fn without_the_gateway_a_handshake_caller_is_refused_by_the_2026_07_28_only_server_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.log");
    let argv = modern_ts_stdio(&effects);
    let out = tokio::process::Command::new(python())
        .arg(peer_script("era/modern_client.py"))
        .args([
            "--stdio",
            &argv.join(" "),
            "--mode",
            "legacy",
            "--timeout",
            "20",
            "--list-tools",
        ])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success(), "the direct pair fails");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("32022") || said.contains("Unsupported protocol version"),
        "{said}"
    );
}

#[tokio::test]
async fn a_handshake_caller_reaches_a_2026_07_28_only_http_server_and_answers_its_input_request() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let (_server, url) = modern_ts_http(&effects).await;
    let gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let out = modern_client(
        &rig,
        "legacy",
        &[
            "--elicit-accept",
            r#"{"name": "Ada"}"#,
            "--list-tools",
            "--call",
            "effect",
            r#"{"label": "over-http"}"#,
            "--call",
            "ask",
            r#"{"question": "who?"}"#,
        ],
    )
    .await;
    assert_eq!(out["protocol_version"], "2025-11-25", "{out}");
    let results = out["results"].as_array().unwrap();
    assert!(
        results[0]["tools"].as_array().unwrap().iter().any(|t| t == "ask"),
        "{out}"
    );
    assert_eq!(results[1]["texts"][0], "effect over-http #1", "{out}");
    assert_eq!(results[2]["texts"][0], "hello Ada", "{out}");
    assert_eq!(
        effect_lines(&effects),
        ["over-http", "ask-start", "ask-start", "ask-end"]
    );
    let status = channel_status(&rig).await;
    assert_eq!(status["era"], "modern", "{status}");
    stop(gw).await;
}

#[tokio::test]
async fn without_the_gateway_a_handshake_caller_is_refused_by_the_2026_07_28_only_http_server_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = modern_ts_http(&dir.path().join("effects.log")).await;
    let out = tokio::process::Command::new(python())
        .arg(peer_script("era/modern_client.py"))
        .args(["--url", &url, "--mode", "legacy", "--timeout", "20", "--list-tools"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success(), "the direct pair fails");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("32022") || said.contains("Unsupported protocol version"),
        "{said}"
    );
}

/// The Python SDK 1.9.3 server, which dies of a request it cannot validate.
fn old_py_server(effects: &std::path::Path) -> Vec<String> {
    let python = peers_dir().join("venv-py193/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/install-peers",
        python.display()
    );
    vec![
        python.display().to_string(),
        peer_script("era/old_server.py").display().to_string(),
        "--effects".to_owned(),
        effects.display().to_string(),
    ]
}

#[tokio::test]
async fn era_auto_never_probes_a_stdio_child_with_a_request_that_kills_an_old_python_sdk_server() {
    // The hazard itself: a `server/discover` probe, written first, kills SDK 1.9.3.
    let dir = tempfile::tempdir().unwrap();
    let argv = old_py_server(&dir.path().join("probe.log"));
    let mut probe = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let discover = modern(1, "server/discover", json!({}));
    tokio::io::AsyncWriteExt::write_all(probe.stdin.as_mut().unwrap(), format!("{discover}\n").as_bytes())
        .await
        .unwrap();
    let died = tokio::time::timeout(EXIT, probe.wait())
        .await
        .expect("it exits")
        .unwrap();
    assert!(!died.success(), "SDK 1.9.3 dies of the probe: {died}");

    // Through the gateway (era auto): its own `initialize` is the probe; the child lives.
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let gw = bridged_gateway(&rig, "srv", old_py_server(&effects), "", &RigOptions::default_mode()).await;
    let (status, _, found) = post(&rig, &modern(1, "server/discover", json!({})), &[]).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(
        found["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "tunnelgate-old-peer"
    );
    let call = modern(
        2,
        "tools/call",
        json!({"name": "effect", "arguments": {"label": "old"}}),
    );
    let (status, _, called) = post(&rig, &call, &[]).await;
    assert_eq!(status, 200, "{called}");
    assert_eq!(called["result"]["content"][0]["text"], "effect old #1", "{called}");
    let status = channel_status(&rig).await;
    assert_eq!(
        (&status["generation"], &status["era"]),
        (&json!(1), &json!("legacy")),
        "never restarted: {status}"
    );
    assert_eq!(effect_lines(&effects), ["old"]);
    stop(gw).await;
}

/// A `subscriptions/listen` for the tools' list changes and `demo://watched`, bounded
/// at 5 s; its request id.
pub(crate) fn enqueue_listen(rig: &Rig) -> String {
    let mut params = json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": ["demo://watched"]}});
    params["_meta"] = envelope(None);
    rig.sim.enqueue(
        tunnelgate_sim::NewCommand::jsonrpc(
            json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": params}),
        )
        .header("Accept", "application/json, text/event-stream")
        .response_timeout("5s"),
    )
}

/// The events of listen stream `stream` (its `jsonrpc_notify` messages), in order.
fn listen_events(r: &tunnelgate_sim::Record, stream: &str) -> Vec<Value> {
    r.responses_for(stream)
        .filter(|p| p.resp_type.as_deref() == Some("jsonrpc_notify"))
        .filter_map(|p| p.json.clone())
        .map(|j| j["resp_json"].clone())
        .collect()
}

/// server-everything's listen stream: acknowledged with `demo://watched` subscribed, then
/// (once another caller turns the server's updates on) that resource's update, each
/// stamped with the listen request's id.
pub(crate) async fn assert_listen_carries_an_update(rig: &Rig, stream: &str) {
    let record = rig
        .wait("the acknowledgement", |r| !listen_events(r, stream).is_empty())
        .await;
    let ack = &listen_events(&record, stream)[0];
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["demo://watched"]),
        "the server accepted the gateway's resources/subscribe: {ack}"
    );
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true, "{ack}");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-1"
    );
    // Another caller turns on the server's updates for subscribed resources.
    let toggle = modern(
        2,
        "tools/call",
        json!({"name": "toggle-subscriber-updates", "arguments": {}}),
    );
    let (status, _, _) = post(rig, &toggle, &[]).await;
    assert_eq!(status, 200);
    let record = rig
        .wait("an update on the listen stream", |r| {
            listen_events(r, stream).len() >= 2
        })
        .await;
    let update = &listen_events(&record, stream)[1];
    assert_eq!(update["method"], "notifications/resources/updated", "{update}");
    assert_eq!(update["params"]["uri"], "demo://watched", "{update}");
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen-1"
    );
}

#[tokio::test]
async fn a_modern_listen_stream_gets_the_legacy_server_s_resource_updates_and_its_subscription_is_ended() {
    let rig = Rig::start("").await;
    let gw = bridged_gateway(
        &rig,
        "srv",
        server_everything_stdio_argv(),
        "",
        &RigOptions::default_mode(),
    )
    .await;
    let (_, _, discover) = post(&rig, &modern(1, "server/discover", json!({})), &[]).await;
    assert_eq!(
        discover["result"]["capabilities"]["resources"]["subscribe"], true,
        "advertised in default mode: {discover}"
    );
    let stream = enqueue_listen(&rig);
    assert_listen_carries_an_update(&rig, &stream).await;
    // At the bound the stream ends, and the gateway unsubscribes the URI it subscribed.
    wait_until("the listen to end", Duration::from_secs(15), || async {
        gw.stderr().contains("subscription stream ended")
    })
    .await;
    wait_until("the unsubscribe", EXIT, || async {
        methods(&received(&rig, "srv"))
            .iter()
            .any(|m| m == "resources/unsubscribe")
    })
    .await;
    let seen = methods(&received(&rig, "srv"));
    assert_eq!(
        seen.iter().filter(|m| *m == "resources/subscribe").count(),
        1,
        "{seen:?}"
    );
    assert!(!rig.sim.record().is_completed(&stream), "never a late final response");
    stop(gw).await;
}

#[tokio::test]
async fn a_retry_that_reaches_another_replica_is_refused_and_nothing_is_written_there() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let config = stdio_config(
        &rig,
        &recorded(&rig, "a", legacy_py_server(&effects)),
        "",
        &RigOptions::default_mode(),
    );
    let a = rig.spawn_gateway(&config).await;
    wait_readyz(rig.ops_port, 200).await;
    let parked = parked_ask(&rig, 1).await;
    let state = parked["requestState"].as_str().unwrap().to_owned();
    // Replica B on the same tunnel, with a server of its own.
    let b_port = crate::harness::free_port();
    let b_config = stdio_config(
        &rig,
        &recorded(&rig, "b", legacy_py_server(&effects)),
        "",
        &RigOptions::default_mode(),
    )
    .replace(&format!("127.0.0.1:{}", rig.ops_port), &format!("127.0.0.1:{b_port}"));
    let mut b = Gateway::run(&b_config);
    b.wait_http_ready(&format!("http://127.0.0.1:{b_port}/readyz"), EXIT)
        .await;
    // A stops: only B polls now, and the retry reaches it.
    stop(a).await;
    let (status, _, refused) = post(&rig, &ask(2, "who?", Some((&accept(&parked, "Ada"), &state))), &[]).await;
    assert_refused(status, &refused, "restarted");
    let words = refused["error"]["message"].as_str().unwrap();
    assert!(words.contains("another replica"), "{words}");
    assert!(
        !methods(&received(&rig, "b")).iter().any(|m| m == "tools/call"),
        "B's server never saw the call"
    );
    assert_eq!(
        effect_lines(&effects),
        ["ask-start"],
        "the tool started once, on A, and never again"
    );
    stop(b).await;
}

/// `route`'s arguments as a handshake-era caller sends them: `region` and `priority` are
/// `x-mcp-header` arguments (`Mcp-Param-Region` in the base64 form, it is not ASCII).
const ROUTE_ARGS: &str = r#"{"region": "Zürich", "priority": 3, "label": "listed"}"#;

#[tokio::test]
async fn a_handshake_caller_s_tools_call_carries_the_mcp_param_headers_its_tool_declares_and_runs_once() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let (_server, url) = modern_ts_http(&effects).await;
    let gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let out = modern_client(&rig, "legacy", &["--list-tools", "--call", "route", ROUTE_ARGS]).await;
    let results = out["results"].as_array().unwrap();
    assert!(
        results[0]["tools"].as_array().unwrap().iter().any(|t| t == "route"),
        "{out}"
    );
    assert_eq!(results[1]["error"], Value::Null, "{out}");
    assert_eq!(results[1]["texts"][0], "route Zürich 3 #1", "{out}");
    assert_eq!(effect_lines(&effects), ["route listed"], "the tool ran once");
    assert!(
        !gw.stderr().contains("(-32020)"),
        "the headers were right the first time: {}",
        gw.stderr()
    );
    stop(gw).await;
}

#[tokio::test]
async fn a_tools_call_before_any_listing_is_refused_with_32020_then_the_gateway_lists_and_sends_it_once_more() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let (_server, url) = modern_ts_http(&effects).await;
    let gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-legacy", "version": "1"}}});
    let (status, _, answer) = post(&rig, &init, &[]).await;
    assert_eq!(
        (status, &answer["result"]["protocolVersion"]),
        (200, &json!("2025-06-18")),
        "{answer}"
    );
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "route", "arguments": {"region": "eu west", "priority": 7, "label": "unlisted"}}});
    let (status, _, answer) = post(&rig, &call, &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "route eu west 7 #1", "{answer}");
    assert_eq!(
        effect_lines(&effects),
        ["route unlisted"],
        "the refused send ran nothing"
    );
    wait_until("the gateway logs the refusal it recovered from", EXIT, || async {
        gw.stderr().contains("(-32020)")
    })
    .await;
    assert_eq!(gw.stderr().matches("(-32020)").count(), 1, "{}", gw.stderr());
    let (_, _, again) = post(
        &rig,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "route", "arguments": {"region": "ap", "label": "known"}}}),
        &[],
    )
    .await;
    assert_eq!(
        again["result"]["content"][0]["text"], "route ap undefined #2",
        "{again}"
    );
    assert_eq!(effect_lines(&effects), ["route unlisted", "route known"]);
    assert_eq!(
        gw.stderr().matches("(-32020)").count(),
        1,
        "known now: no second refusal"
    );
    stop(gw).await;
}
