//! stdio servers whose MCP session the gateway owns (issue 18), against real SDK servers
//! over stdio (the Python `mcp` SDK's server, `tests/peers/py_server.py --mode stdio`,
//! and server-everything): the gateway initializes every child life itself, once, and
//! eagerly; callers' `initialize` are answered from that session; server requests go to
//! a caller that declared the capability or are refused; failed handshakes end waiting
//! commands `not_sent` under the restart backoff; strict mode restarts under an
//! admission and latches on a cut `initialize`; two replicas serve one client; a
//! 2026-07-28 server, configured or detected, passes through untouched.
//!
//! The real server runs behind `tests/peers/stdio/record.py`, which logs every line the
//! gateway writes to it (one life marker per start) and names the real server's pid, so
//! a test can count handshakes per child life and kill the server itself.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tunnelgate_sim::NewCommand;

use crate::harness::{
    final_json, free_port, http_client, peer_script, python, run_py_client, server_everything_stdio_argv,
    try_run_py_client, wait_for, wait_until, Gateway, Rig, RigOptions,
};

const EXIT: Duration = Duration::from_secs(20);
/// Bound of every wait on the gateway or a child (a cold Python or Node start is ~1 s).
const WAIT: Duration = Duration::from_secs(20);
const SESSION_WORDS: &str = "not delivered to the MCP server: the stdio server's session could not be opened (it exited, refused or did not answer initialize); safe to retry";
const MODERN: &str = "2026-07-28";

fn default_mode() -> RigOptions<'static> {
    RigOptions::default_mode()
}

/// The rig's configuration with channel `main` running `argv`, `channel` appended to the
/// channel's table (e.g. `session = "pass_through"`), and `o.extra` at the end.
pub(crate) fn stdio_config(rig: &Rig, argv: &[String], channel: &str, o: &RigOptions<'_>) -> String {
    let command = serde_json::to_string(argv).unwrap();
    rig.config(o).replace(
        &format!("url = \"{}\"", rig.stub.url()),
        &format!("command = {command}\n{channel}"),
    )
}

/// A file in the rig's folder.
pub(crate) fn file(rig: &Rig, name: &str) -> PathBuf {
    rig.dir.path().join(name)
}

/// `record.py LOG PIDFILE -- server...`: the files are `<tag>.log` and `<tag>.pid` in
/// the rig's folder.
pub(crate) fn recorded(rig: &Rig, tag: &str, server: Vec<String>) -> Vec<String> {
    let mut argv = vec![
        python().display().to_string(),
        peer_script("stdio/record.py").display().to_string(),
        file(rig, &format!("{tag}.log")).display().to_string(),
        file(rig, &format!("{tag}.pid")).display().to_string(),
        "--".to_owned(),
    ];
    argv.extend(server);
    argv
}

/// The Python SDK server over stdio (`--mode stdio` or `--mode stdio-modern`).
pub(crate) fn py_stdio(mode: &str) -> Vec<String> {
    vec![
        python().display().to_string(),
        peer_script("py_server.py").display().to_string(),
        "--mode".to_owned(),
        mode.to_owned(),
    ]
}

/// `bad_handshake.py MODE`.
fn bad_handshake(mode: &str) -> Vec<String> {
    vec![
        python().display().to_string(),
        peer_script("stdio/bad_handshake.py").display().to_string(),
        mode.to_owned(),
    ]
}

/// What the real server was sent, one list of messages per child life, in order.
pub(crate) fn lives(rig: &Rig, tag: &str) -> Vec<Vec<Value>> {
    let text = std::fs::read_to_string(file(rig, &format!("{tag}.log"))).unwrap_or_default();
    let mut lives: Vec<Vec<Value>> = Vec::new();
    for line in text.lines() {
        let message: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if message["record"] == "life" {
            lives.push(Vec::new());
        } else {
            lives.last_mut().expect("a life marker comes first").push(message);
        }
    }
    lives
}

/// How many messages of `method` one life's list holds.
fn count(life: &[Value], method: &str) -> usize {
    life.iter().filter(|m| m["method"] == method).count()
}

/// Each life of the recorded server began with exactly one `initialize` (the gateway's),
/// then one `notifications/initialized`, and saw no other handshake message.
fn assert_one_handshake_per_life(rig: &Rig, tag: &str, want_lives: usize) {
    let lives = lives(rig, tag);
    assert_eq!(lives.len(), want_lives, "child lives: {lives:?}");
    for (n, life) in lives.iter().enumerate() {
        assert_eq!(count(life, "initialize"), 1, "life {n}: {life:?}");
        assert_eq!(count(life, "notifications/initialized"), 1, "life {n}: {life:?}");
        assert_eq!(life[0]["method"], "initialize", "the handshake comes first: {life:?}");
        assert_eq!(
            life[0]["params"]["clientInfo"]["name"], "tunnelgate",
            "the gateway's own: {life:?}"
        );
        assert_eq!(life[1]["method"], "notifications/initialized", "{life:?}");
    }
}

/// The real server's pid, once its recorder wrote one other than `not`.
async fn server_pid(rig: &Rig, tag: &str, not: Option<&str>) -> String {
    let path = file(rig, &format!("{tag}.pid"));
    wait_for("the recorded server's pid", WAIT, || {
        let pid = std::fs::read_to_string(&path).ok().map(|p| p.trim().to_owned());
        async move { pid.filter(|p| !p.is_empty() && Some(p.as_str()) != not) }
    })
    .await
}

fn kill_pid(pid: &str) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill -KILL {pid}");
}

async fn readyz(ops_port: u16) -> u16 {
    http_client()
        .get(format!("http://127.0.0.1:{ops_port}/readyz"))
        .send()
        .await
        .expect("readyz answers")
        .status()
        .as_u16()
}

pub(crate) async fn wait_readyz(ops_port: u16, want: u16) {
    wait_until(&format!("/readyz {want} on port {ops_port}"), WAIT, || async move {
        readyz(ops_port).await == want
    })
    .await;
}

/// Channel `main`'s `/status` downstream entry.
pub(crate) async fn channel_status(rig: &Rig) -> Value {
    rig.status().await["downstream"][0].clone()
}

fn call(id: u64, tool: &str, arguments: Value) -> NewCommand {
    NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments}}),
    )
}

fn text(body: &Value) -> &str {
    body["resp_json"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {body}"))
}

/// A caller's `initialize` and `notifications/initialized` through the sim's commands;
/// returns the `Mcp-Session-Id` the gateway minted, after checking both answers.
pub(crate) async fn initialize_caller(rig: &Rig, client: &str) -> String {
    let init = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":client,"version":"1"}}}),
    ));
    let rec = rig.wait("the caller's initialize", |r| r.is_completed(&init)).await;
    let body = final_json(&rec, &init);
    assert!(body["resp_json"]["result"]["serverInfo"]["name"].is_string(), "{body}");
    let session = body["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .unwrap_or_else(|| panic!("a minted Mcp-Session-Id: {body}"))
        .to_owned();
    let note = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .header("Mcp-Session-Id", session.as_str()),
    );
    let rec = rig.wait("the caller's initialized", |r| r.is_completed(&note)).await;
    assert_eq!(final_json(&rec, &note)["resp_type"], "notify_ack");
    session
}

/// Kill the real server between two calls: the second call gets the tool's real answer,
/// each child life saw one handshake (the gateway's), and `/readyz` came back by itself.
async fn a_killed_server_is_reinitialized_eagerly(server: Vec<String>) {
    let rig = Rig::start("").await;
    let config = stdio_config(&rig, &recorded(&rig, "srv", server), "", &default_mode());
    let mut gw = rig.spawn_gateway(&config).await;
    wait_readyz(rig.ops_port, 200).await;
    let session = initialize_caller(&rig, "killer").await;
    let first = rig
        .sim
        .enqueue(call(1, "echo", json!({"message": "before"})).header("Mcp-Session-Id", session.as_str()));
    let rec = rig.wait("the first call", |r| r.is_completed(&first)).await;
    assert_eq!(text(&final_json(&rec, &first)), "Echo: before");

    let pid = server_pid(&rig, "srv", None).await;
    kill_pid(&pid);
    wait_readyz(rig.ops_port, 503).await;
    // No command arrives: the keeper restarts and initializes the child on its own.
    wait_readyz(rig.ops_port, 200).await;
    let issued = rig.sim.record().issued();
    assert_eq!(issued, 3, "no command was needed for readiness");
    let status = channel_status(&rig).await;
    assert_eq!(
        (&status["generation"], &status["session"], &status["up"]),
        (&json!(2), &json!("initialized"), &json!(true)),
        "{status}"
    );
    let restarted = server_pid(&rig, "srv", Some(&pid)).await;
    assert_ne!(restarted, pid);

    let second = rig
        .sim
        .enqueue(call(2, "echo", json!({"message": "after"})).header("Mcp-Session-Id", session.as_str()));
    let rec = rig.wait("the second call", |r| r.is_completed(&second)).await;
    let body = final_json(&rec, &second);
    assert_eq!(body["resp_json"]["id"], 2, "{body}");
    assert_eq!(text(&body), "Echo: after", "the tool's real answer: {body}");
    assert_one_handshake_per_life(&rig, "srv", 2);
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains(r#"tunnelgate_stdio_sessions_total{channel="main",result="initialized"} 2"#),
        "{metrics}"
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn python_sdk_server_killed_between_two_calls_is_reinitialized_once_and_the_second_call_gets_the_real_answer() {
    a_killed_server_is_reinitialized_eagerly(py_stdio("stdio")).await;
}

#[tokio::test]
async fn server_everything_killed_between_two_calls_is_reinitialized_once_and_the_second_call_gets_the_real_answer() {
    a_killed_server_is_reinitialized_eagerly(server_everything_stdio_argv()).await;
}

/// A raw JSON-RPC POST to the simulator's ingress; returns the status, the
/// `Mcp-Session-Id` answered (if any) and the body (JSON, or `null` for none).
async fn post(rig: &Rig, body: Value, session: Option<&str>) -> (u16, Option<String>, Value) {
    let mut request = http_client()
        .post(rig.sim.ingress_url())
        .header("Content-Type", "application/json")
        .header("Accept", "application/json");
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let resp = request
        .body(body.to_string())
        .send()
        .await
        .expect("the ingress answers");
    let status = resp.status().as_u16();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap();
    let json = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    (status, session, json)
}

/// One raw caller: `initialize` (with its own client info, revision and capabilities),
/// `notifications/initialized`, then an echo. Returns the `initialize` answer and the
/// caller's session id.
async fn raw_caller(rig: &Rig, name: &str, revision: &str, capabilities: Value) -> (Value, String) {
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":revision,"capabilities":capabilities,"clientInfo":{"name":name,"version":"7.0"}}});
    let (status, session, init_answer) = post(rig, init, None).await;
    assert_eq!(status, 200, "{init_answer}");
    let session = session.unwrap_or_else(|| panic!("{name} got an Mcp-Session-Id: {init_answer}"));
    let (status, _, _) = post(
        rig,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        Some(&session),
    )
    .await;
    assert_eq!(status, 202, "initialized is acknowledged");
    let echo =
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":name}}});
    let (status, _, answer) = post(rig, echo, Some(&session)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"],
        format!("Echo: {name}"),
        "{answer}"
    );
    (init_answer, session)
}

#[tokio::test]
async fn two_callers_with_their_own_initialize_share_the_one_session_the_child_saw() {
    let rig = Rig::start("").await;
    let config = stdio_config(&rig, &recorded(&rig, "srv", py_stdio("stdio")), "", &default_mode());
    let mut gw = rig.spawn_gateway(&config).await;
    let (a, a_session) = raw_caller(&rig, "caller-a", "2025-11-25", json!({})).await;
    // Another client, an older revision, and sampling declared.
    let (b, b_session) = raw_caller(&rig, "caller-b", "2024-11-05", json!({"sampling": {}})).await;
    let a = &a["result"];
    let b = &b["result"];
    assert_eq!(a["serverInfo"]["name"], "tunnelgate-py-peer", "{a}");
    assert_eq!(a["protocolVersion"], "2025-11-25", "the session's revision: {a}");
    // A caller asking for another revision is answered with the session's, as a server
    // answers a revision it does not speak: the caller decides whether it goes on.
    assert_eq!(b["protocolVersion"], a["protocolVersion"], "{b}");
    assert_eq!(b["serverInfo"], a["serverInfo"], "{b}");
    assert_eq!(b["capabilities"], a["capabilities"], "{b}");
    assert_ne!(a_session, b_session);
    assert!(a_session.starts_with("tg1.") && a_session.ends_with('.'), "{a_session}");
    assert!(
        b_session.starts_with("tg1.") && b_session.ends_with(".s"),
        "{b_session}"
    );
    // The real SDK client too.
    let out = run_py_client(
        &rig.sim.ingress_url(),
        &["--call", "add", r#"{"a": 2, "b": 3}"#, "--list-tools"],
    )
    .await;
    assert_eq!(out["protocol_version"], "2025-11-25", "{out}");
    assert_eq!(out["results"][0]["texts"], json!(["5"]), "{out}");
    assert!(
        out["results"][1]["tools"].as_array().unwrap().contains(&json!("echo")),
        "{out}"
    );
    // The child saw one initialize (the gateway's), whatever the three callers sent.
    assert_one_handshake_per_life(&rig, "srv", 1);
    let life = &lives(&rig, "srv")[0];
    assert_eq!(count(life, "tools/call"), 3, "{life:?}");
    assert!(
        !life
            .iter()
            .any(|m| m.to_string().contains("caller-a") && m["method"] != "tools/call"),
        "no caller's client info reached the child: {life:?}"
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// Every text block of result `i` of a `py_client` run, or its error message.
fn said(out: &Value, i: usize) -> String {
    let result = &out["results"][i];
    match result["texts"].as_array() {
        Some(texts) => texts.iter().map(|t| t.as_str().unwrap()).collect::<Vec<_>>().join(" "),
        None => result["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no texts or error in result {i}: {out}"))
            .to_owned(),
    }
}

#[tokio::test]
async fn a_sampling_request_goes_to_a_caller_that_declared_sampling_even_behind_an_older_call_and_is_refused_when_none_did(
) {
    let rig = Rig::start("").await;
    let config = stdio_config(&rig, &recorded(&rig, "srv", py_stdio("stdio")), "", &default_mode());
    let mut gw = rig.spawn_gateway(&config).await;
    let ingress = rig.sim.ingress_url();
    // Nobody declared sampling: the server's request is refused, the call ends, nothing hangs.
    let started = Instant::now();
    let out = run_py_client(
        &ingress,
        &["--timeout", "15", "--call", "sample", r#"{"prompt":"anyone?"}"#],
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(15), "bounded");
    assert!(
        said(&out, 0).contains("no caller with a request in flight declared the sampling capability"),
        "the server was refused with words: {out}"
    );
    // An older call of a caller that declared nothing is in flight; the sampling request of
    // a newer call goes to the newer caller, who declared sampling.
    let pauser = tokio::spawn({
        let ingress = ingress.clone();
        async move { try_run_py_client(&ingress, &["--timeout", "30", "--call", "pause", r#"{"ms": 8000}"#]).await }
    });
    wait_until("the pause call reached the server", WAIT, || async {
        lives(&rig, "srv")[0].iter().any(|m| m["params"]["name"] == "pause")
    })
    .await;
    let out = run_py_client(
        &ingress,
        &[
            "--sampling-reply",
            "from the declaring caller",
            "--call",
            "sample",
            r#"{"prompt":"hi"}"#,
        ],
    )
    .await;
    assert_eq!(said(&out, 0), "sampled: from the declaring caller", "{out}");
    assert!(!pauser.is_finished(), "the older call was still in flight");
    let paused = pauser.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(said(&paused, 0), "paused 8000 ms", "{paused}");
    assert_one_handshake_per_life(&rig, "srv", 1);
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn server_everything_over_stdio_asks_the_caller_that_declared_sampling_and_is_refused_for_one_that_did_not() {
    let rig = Rig::start("").await;
    let config = stdio_config(&rig, &server_everything_stdio_argv(), "", &default_mode());
    let mut gw = rig.spawn_gateway(&config).await;
    let ingress = rig.sim.ingress_url();
    let out = run_py_client(
        &ingress,
        &[
            "--sampling-reply",
            "from the caller",
            "--call",
            "trigger-sampling-request",
            r#"{"prompt":"hello"}"#,
        ],
    )
    .await;
    assert!(said(&out, 0).contains("from the caller"), "{out}");
    let started = Instant::now();
    let out = run_py_client(
        &ingress,
        &[
            "--timeout",
            "15",
            "--call",
            "trigger-sampling-request",
            r#"{"prompt":"hello"}"#,
        ],
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(15), "bounded");
    assert!(
        said(&out, 0).contains("no caller with a request in flight declared the sampling capability"),
        "{out}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// The gateway's JSON log lines.
fn gateway_log(gw: &Gateway) -> Vec<Value> {
    gw.stderr()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// When the gateway logged each "stdio child started".
fn child_starts(gw: &Gateway) -> Vec<std::time::SystemTime> {
    gateway_log(gw)
        .into_iter()
        .filter(|l| l["fields"]["message"] == "stdio child started")
        .map(|l| humantime::parse_rfc3339(l["timestamp"].as_str().unwrap()).unwrap())
        .collect()
}

/// A child that never completes the handshake: a waiting command ends `not_sent` with
/// words, in bounded time, and restarts keep to the backoff (200 ms, doubling). Returns
/// the gateway's metrics text.
async fn a_failed_handshake_ends_waiting_commands_not_sent(mode: &str) -> String {
    let rig = Rig::start("").await;
    let opts = RigOptions {
        extra: "[mcp.channels.main.initialize]\ntimeout = \"500ms\"\n",
        ..default_mode()
    };
    let mut gw = rig
        .spawn_gateway(&stdio_config(&rig, &bad_handshake(mode), "", &opts))
        .await;
    let started = Instant::now();
    let cmd = rig
        .sim
        .enqueue(call(1, "echo", json!({"message": "x"})).response_timeout("15s"));
    let rec = rig.wait("the command", |r| r.is_completed(&cmd)).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "bounded: {:?}",
        started.elapsed()
    );
    let body = final_json(&rec, &cmd);
    assert_eq!(body["resp_json"]["id"], 1, "{body}");
    assert_eq!(body["resp_json"]["error"]["message"], SESSION_WORDS, "{body}");
    assert_eq!(
        body["resp_json"]["error"]["data"]["tunnel_failure"]["source"], "transport_closed",
        "{body}"
    );
    // Five starts take at least the four backoffs between them: 200 + 400 + 800 + 1600 ms.
    wait_until("five child starts", WAIT, || async { child_starts(&gw).len() >= 5 }).await;
    let starts = child_starts(&gw);
    for (n, pair) in starts.windows(2).take(4).enumerate() {
        let gap = pair[1].duration_since(pair[0]).unwrap();
        let backoff = Duration::from_millis(200 << n);
        assert!(
            gap >= backoff.mul_f64(0.9),
            "start {n}: {gap:?} < backoff {backoff:?}: {starts:?}"
        );
    }
    assert_eq!(readyz(rig.ops_port).await, 503, "never ready");
    let status = channel_status(&rig).await;
    assert_eq!(status["up"], false, "{status}");
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains(r#"tunnelgate_downstream_requests_total{outcome="not_sent",transport="stdio"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"tunnelgate_stdio_sessions_total{channel="main",result="initialized"} 0"#),
        "{metrics}"
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    metrics
}

#[tokio::test]
async fn a_child_that_exits_at_once_ends_waiting_commands_not_sent_and_restarts_under_the_backoff() {
    a_failed_handshake_ends_waiting_commands_not_sent("exit").await;
}

#[tokio::test]
async fn a_child_that_never_answers_initialize_ends_waiting_commands_not_sent_and_restarts_under_the_backoff() {
    let metrics = a_failed_handshake_ends_waiting_commands_not_sent("hang").await;
    let abandoned = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"tunnelgate_stdio_sessions_total{channel="main",result="abandoned"} "#))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(
        abandoned.is_some_and(|n| n >= 1),
        "each timed-out initialize is counted: {metrics}"
    );
}

#[tokio::test]
async fn in_strict_mode_a_child_down_at_the_next_command_is_restarted_and_initialized_with_no_latch() {
    let rig = Rig::start("").await;
    let config = stdio_config(
        &rig,
        &recorded(&rig, "srv", py_stdio("stdio")),
        "",
        &RigOptions::default(),
    );
    let mut gw = rig.spawn_gateway(&config).await;
    wait_readyz(rig.ops_port, 200).await;
    let first = rig.sim.enqueue(call(1, "echo", json!({"message": "before"})));
    let rec = rig.wait("the first call", |r| r.is_completed(&first)).await;
    assert_eq!(text(&final_json(&rec, &first)), "Echo: before");
    let pid = server_pid(&rig, "srv", None).await;
    kill_pid(&pid);
    wait_readyz(rig.ops_port, 503).await;
    // The child is down (within its restart backoff) when the command arrives: the child
    // is restarted and initialized under an admission (the command's, or the keeper's it
    // waits behind), and the command is written only to an initialized child.
    let second = rig.sim.enqueue(call(2, "echo", json!({"message": "after"})));
    let rec = rig.wait("the second call", |r| r.is_completed(&second)).await;
    assert_eq!(text(&final_json(&rec, &second)), "Echo: after");
    assert_one_handshake_per_life(&rig, "srv", 2);
    let status = rig.status().await;
    assert_eq!(status["state"], "ready", "no latch: {status}");
    assert_eq!(status["fence"]["held"], false, "{status}");
    assert!(!rig.latch_path().exists(), "no latch file");
    let metrics = rig.metrics().await;
    assert!(metrics.contains("tunnelgate_fatal_latched 0"), "{metrics}");
    // The restart and its handshake ran under one admission: the command's (its span),
    // or the keeper's (no command span) that the command waited behind.
    let under = |message: &str| {
        gateway_log(&gw)
            .into_iter()
            .find(|l| {
                l["fields"]["message"].as_str().is_some_and(|m| m.starts_with(message))
                    && l["fields"]["generation"] == 2
            })
            .unwrap_or_else(|| panic!("no {message:?} for generation 2: {}", gw.stderr()))["span"]
            ["tunnelgate.request_id"]
            .clone()
    };
    let admission = under("stdio child started");
    assert_eq!(under("stdio session opened"), admission, "{}", gw.stderr());
    assert!(admission.is_null() || admission == second.as_str(), "{admission}");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn in_strict_mode_an_initialize_cut_after_it_was_written_latches_downstream_ambiguous() {
    let rig = Rig::start("").await;
    let config = stdio_config(&rig, &bad_handshake("cut"), "", &RigOptions::default());
    // The gateway may latch before its ops listener answers: not `spawn_gateway`.
    let mut gw = Gateway::run(&config);
    assert_eq!(gw.wait_exit(EXIT).await, Some(87), "{}", gw.stderr());
    let latch: Value = serde_json::from_slice(&std::fs::read(rig.latch_path()).expect("latch file written")).unwrap();
    let fatal = &latch["fatal"];
    assert_eq!(fatal["category"], "downstream_ambiguous", "{latch}");
    assert_eq!(fatal["method"], "initialize", "{latch}");
    assert_eq!(fatal["channel"], "main", "{latch}");
    assert_eq!(fatal["request_id"], Value::Null, "the gateway's own step: {latch}");
    assert_eq!(child_starts(&gw).len(), 1, "nothing restarted: {}", gw.stderr());
}

#[tokio::test]
async fn two_replicas_on_one_tunnel_serve_all_twenty_calls_of_a_python_client_each_from_its_own_initialized_child() {
    let rig = Rig::start("").await;
    let config_a = stdio_config(&rig, &recorded(&rig, "a", py_stdio("stdio")), "", &default_mode());
    let ops_b = free_port();
    let config_b = stdio_config(&rig, &recorded(&rig, "b", py_stdio("stdio")), "", &default_mode())
        .replace(&format!("127.0.0.1:{}", rig.ops_port), &format!("127.0.0.1:{ops_b}"))
        .replace("latch.json", "latch-b.json");
    let mut a = rig.spawn_gateway(&config_a).await;
    let mut b = Gateway::run(&config_b);
    b.wait_http_ready(&format!("http://127.0.0.1:{ops_b}/livez"), WAIT)
        .await;
    wait_readyz(rig.ops_port, 200).await;
    wait_readyz(ops_b, 200).await;
    let mut args = vec!["--timeout".to_owned(), "35".to_owned()];
    for i in 0..20 {
        args.extend([
            "--call".to_owned(),
            "echo".to_owned(),
            json!({"message": format!("call-{i}")}).to_string(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_py_client(&rig.sim.ingress_url(), &args).await;
    for i in 0..20 {
        assert_eq!(said(&out, i), format!("Echo: call-{i}"), "call {i}: {out}");
        assert_eq!(out["results"][i]["is_error"], false, "call {i}: {out}");
    }
    // Each replica initialized its own child once; the calls were spread over both.
    assert_one_handshake_per_life(&rig, "a", 1);
    assert_one_handshake_per_life(&rig, "b", 1);
    let served = |tag| count(&lives(&rig, tag)[0], "tools/call");
    let (by_a, by_b) = (served("a"), served("b"));
    assert_eq!(by_a + by_b, 20, "each call reached one child once");
    assert!(by_a > 0 && by_b > 0, "both replicas served calls: {by_a} and {by_b}");
    rig.assert_all_bodies_valid();
    for gw in [&mut a, &mut b] {
        gw.sigterm();
        assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    }
}

/// A 2026-07-28 request through the ingress: the envelope in `params._meta` (and its
/// HTTP mirrors). Returns the params sent and the JSON-RPC answer.
async fn modern(rig: &Rig, id: u64, method: &str, params: Value) -> (Value, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "modern-caller", "version": "1"}
    });
    let resp = http_client()
        .post(rig.sim.ingress_url())
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .header("MCP-Protocol-Version", MODERN)
        .header("Mcp-Method", method)
        .body(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string())
        .send()
        .await
        .expect("the ingress answers");
    assert_eq!(resp.status().as_u16(), 200);
    (params, resp.json().await.expect("a JSON-RPC answer"))
}

/// Modern requests reach the child untouched (their params equal, as JSON, to what the
/// caller sent) and are answered; the channel shows `pass_through`.
async fn modern_requests_pass_untouched(rig: &Rig) {
    let (list_params, listed) = modern(rig, 11, "tools/list", json!({})).await;
    assert!(
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "echo"),
        "{listed}"
    );
    let (call_params, called) = modern(
        rig,
        12,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "modern"}}),
    )
    .await;
    assert_eq!(called["id"], 12, "{called}");
    assert_eq!(called["result"]["content"][0]["text"], "Echo: modern", "{called}");
    let life = &lives(rig, "srv")[0];
    let requests: Vec<&Value> = life.iter().filter(|m| m["method"] != "initialize").collect();
    assert_eq!(requests.len(), 2, "{life:?}");
    assert_eq!(requests[0]["params"], list_params, "untouched");
    assert_eq!(requests[1]["params"], call_params, "untouched");
    assert_eq!(count(life, "notifications/initialized"), 0, "{life:?}");
    let status = channel_status(rig).await;
    assert_eq!(
        (&status["session"], &status["up"]),
        (&json!("pass_through"), &json!(true)),
        "{status}"
    );
}

#[tokio::test]
async fn a_channel_configured_pass_through_carries_2026_07_28_requests_untouched_to_the_python_sdk_server() {
    let rig = Rig::start("").await;
    let config = stdio_config(
        &rig,
        &recorded(&rig, "srv", py_stdio("stdio")),
        r#"session = "pass_through""#,
        &default_mode(),
    );
    let mut gw = rig.spawn_gateway(&config).await;
    wait_readyz(rig.ops_port, 200).await;
    modern_requests_pass_untouched(&rig).await;
    assert_eq!(
        count(&lives(&rig, "srv")[0], "initialize"),
        0,
        "the gateway initialized nothing"
    );
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains(r#"tunnelgate_stdio_sessions_total{channel="main",result="initialized"} 0"#),
        "{metrics}"
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_2026_07_28_python_sdk_server_that_refuses_initialize_is_discovered_and_passed_through_untouched() {
    let rig = Rig::start("").await;
    let config = stdio_config(
        &rig,
        &recorded(&rig, "srv", py_stdio("stdio-modern")),
        "",
        &default_mode(),
    );
    let mut gw = rig.spawn_gateway(&config).await;
    wait_readyz(rig.ops_port, 200).await;
    modern_requests_pass_untouched(&rig).await;
    let life = &lives(&rig, "srv")[0];
    assert_eq!(
        count(life, "initialize"),
        1,
        "the gateway's one initialize, refused: {life:?}"
    );
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains(r#"tunnelgate_stdio_sessions_total{channel="main",result="discovered"} 1"#),
        "{metrics}"
    );
    assert!(
        gw.stderr().contains("it is discovered, not initialized"),
        "{}",
        gw.stderr()
    );
    let status = channel_status(&rig).await;
    assert_eq!(status["generation"], 1, "the discovered child is kept: {status}");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}
