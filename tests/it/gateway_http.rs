//! The gateway core end to end: the real binary, the simulator, and real MCP servers
//! over Streamable HTTP (server-everything, the Python SDK server), plus a real MCP
//! client library talking through the simulator's ingress.

use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::{NewCommand, Record};

use crate::harness::{
    final_json, run_py_client, spawn_py_server, spawn_server_everything_http, PyMode, Rig, RigOptions, KEY,
};

const EXIT: Duration = Duration::from_secs(20);

fn call(id: u64, tool: &str, args: Value) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}}))
}

fn initialize(id: u64) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}))
}

#[tokio::test]
async fn server_everything_over_http_initialize_list_echo_progress_and_session_delete() {
    let (_server, url) = spawn_server_everything_http().await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;

    let init = rig.sim.enqueue(initialize(1));
    let rec = rig.wait("initialize answered", |r| r.is_completed(&init)).await;
    let body = final_json(&rec, &init);
    assert_eq!(body["resp_type"], "jsonrpc_response");
    assert_eq!(body["resp_json"]["id"], 1);
    assert!(body["resp_json"]["result"]["serverInfo"]["name"].is_string(), "{body}");
    let session = body["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .expect("session id in resp_headers")
        .to_owned();
    assert!(body["resp_headers"].get("Content-Type").is_some());

    let with_session = |c: NewCommand| {
        c.header("Mcp-Session-Id", session.clone())
            .header("Mcp-Protocol-Version", "2025-06-18")
    };
    let note = rig.sim.enqueue(with_session(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    )));
    let list = rig.sim.enqueue(with_session(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
    )));
    let echo = rig
        .sim
        .enqueue(with_session(call(3, "echo", json!({"message":"through the tunnel"}))));
    let long = rig.sim.enqueue(with_session(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":4,"method":"tools/call",
        "params":{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":3},"_meta":{"progressToken":"tok-1"}}}))));
    let rec = rig
        .wait("all answered", |r| {
            [&note, &list, &echo, &long].iter().all(|id| r.is_completed(id))
        })
        .await;

    assert_eq!(final_json(&rec, &note)["resp_type"], "notify_ack");
    let tools: Vec<String> = final_json(&rec, &list)["resp_json"]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        tools.contains(&"echo".to_owned()) && tools.contains(&"trigger-long-running-operation".to_owned()),
        "{tools:?}"
    );
    assert_eq!(
        final_json(&rec, &echo)["resp_json"]["result"]["content"][0]["text"],
        "Echo: through the tunnel"
    );

    let posts: Vec<_> = rec.responses_for(&long).collect();
    let notifies: Vec<_> = posts
        .iter()
        .filter(|r| r.resp_type.as_deref() == Some("jsonrpc_notify"))
        .collect();
    assert!(
        notifies.len() >= 2,
        "progress notifications are posted: {}",
        notifies.len()
    );
    assert_eq!(
        notifies[0].json.as_ref().unwrap()["resp_json"]["method"],
        "notifications/progress"
    );
    assert_eq!(
        posts.last().unwrap().resp_type.as_deref(),
        Some("jsonrpc_response"),
        "the terminal response comes last"
    );

    let end = rig.sim.enqueue(NewCommand::session_termination(Some(&session)));
    let rec = rig.wait("session ended", |r| r.is_completed(&end)).await;
    let body = final_json(&rec, &end);
    assert_eq!(body["resp_type"], "session_termination_response");
    assert!(body["resp_code"].as_u64().unwrap() < 300, "{body}");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

async fn python_server_answers_echo(mode: PyMode) {
    let (_server, url) = spawn_py_server(mode).await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let init = rig.sim.enqueue(initialize(1));
    let rec = rig.wait("initialize", |r| r.is_completed(&init)).await;
    let body = final_json(&rec, &init);
    let mut echo_cmd = call(2, "echo", json!({"message":"py"})).header("Mcp-Protocol-Version", "2025-06-18");
    if let Some(session) = body["resp_headers"]["Mcp-Session-Id"][0].as_str() {
        assert_ne!(mode, PyMode::Stateless, "a stateless server issues no session");
        echo_cmd = echo_cmd.header("Mcp-Session-Id", session);
        let note = rig.sim.enqueue(
            NewCommand::jsonrpc(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
                .header("Mcp-Session-Id", session),
        );
        rig.wait("initialized", |r| r.is_completed(&note)).await;
    }
    let echo = rig.sim.enqueue(echo_cmd);
    let rec = rig.wait("echo", |r| r.is_completed(&echo)).await;
    let body = final_json(&rec, &echo);
    assert_eq!(body["resp_json"]["result"]["content"][0]["text"], "Echo: py", "{body}");
    assert_eq!(
        body["resp_headers"]["Content-Type"][0]
            .as_str()
            .map(|c| c.starts_with("application/json")),
        Some(true)
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn the_python_sdk_server_in_json_mode_answers_through_the_gateway() {
    python_server_answers_echo(PyMode::Json).await;
}

#[tokio::test]
async fn the_python_sdk_server_in_stateless_mode_answers_through_the_gateway() {
    python_server_answers_echo(PyMode::Stateless).await;
}

#[tokio::test]
async fn a_real_mcp_client_gets_echo_through_the_simulator_ingress_and_the_gateway() {
    let (_server, url) = spawn_server_everything_http().await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let out = run_py_client(
        &rig.sim.ingress_url(),
        &["--list-tools", "--call", "echo", r#"{"message":"hi"}"#],
    )
    .await;
    assert_eq!(out["ok"], true, "{out}");
    let results = out["results"].as_array().unwrap();
    assert!(results[0]["tools"].as_array().unwrap().iter().any(|t| t == "echo"));
    assert_eq!(results[1]["texts"][0], "Echo: hi", "{out}");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

/// A server that answers with keys out of order, a vendor field and odd number spelling.
async fn vendor_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use axum::routing::post;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let store = seen.clone();
    let app = axum::Router::new().route(
        "/mcp",
        post(move |body: axum::body::Bytes| {
            let store = store.clone();
            async move {
                *store.lock().unwrap() = body.to_vec();
                (
                    [
                        ("content-type", "application/json"),
                        ("x-internal", "dropped"),
                        ("mcp-session-id", "s-1"),
                    ],
                    r#"{"result":{"b":1,"a":[1.50,2e3]},"x-vendor":{"z":true,"a":null},"id":"rpc-v","jsonrpc":"2.0"}"#,
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test]
async fn payloads_and_replies_pass_through_byte_for_byte() {
    let (url, seen) = vendor_server().await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let payload =
        r#"{"params":{"z":[1.0,-0],"a":"\u00e9"},"id":"rpc-v","method":"tools/call","jsonrpc":"2.0","x-extra":{}}"#;
    let id = rig.sim.enqueue(NewCommand::jsonrpc_raw(
        serde_json::value::RawValue::from_string(payload.to_owned()).unwrap(),
    ));
    let rec = rig.wait("answered", |r| r.is_completed(&id)).await;
    assert_eq!(
        String::from_utf8(seen.lock().unwrap().clone()).unwrap(),
        payload,
        "the MCP server receives the exact bytes"
    );
    let body = std::str::from_utf8(&rec.responses_for(&id).last().unwrap().body)
        .unwrap()
        .to_owned();
    assert!(
        body.contains(r#""resp_json":{"result":{"b":1,"a":[1.50,2e3]},"x-vendor":{"z":true,"a":null},"id":"rpc-v","jsonrpc":"2.0"}"#),
        "the reply is embedded exactly as the server sent it: {body}"
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["resp_headers"].get("x-internal").is_none() && v["resp_headers"]["Mcp-Session-Id"][0] == "s-1");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn polls_carry_every_contract_header_and_a_limit_within_bounds() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    rig.wait("two polls", |r| r.polls.len() >= 2).await;
    let rec = rig.sim.record();
    let first = &rec.polls[0];
    assert_eq!(first.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(first.header("accept"), Some("application/json"));
    assert_eq!(first.header("x-tunnel-client-name"), Some("tunnelgate"));
    assert_eq!(first.header("x-tunnel-client-version"), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(
        first.header("x-tunnel-mcp-server-info"),
        Some(r#"{"version":1,"channels":[{"name":"main"}]}"#)
    );
    let instance = first.header("x-tunnel-client-instance-id").unwrap();
    assert!(instance.len() >= 16);
    assert!(
        rec.polls
            .iter()
            .all(|p| p.header("x-tunnel-client-wire-protocol-version") == Some("2026-08-25")),
        "the wire contract's version on every poll"
    );
    assert_eq!(
        first.header("x-tunnel-client-capabilities"),
        None,
        "no capability is advertised unless routing_correction is on"
    );
    assert!(
        rec.polls
            .iter()
            .all(|p| p.header("x-tunnel-client-instance-id") == Some(instance)),
        "one instance id per process"
    );
    assert!(
        rec.polls.iter().all(|p| p.limit.is_some_and(|l| (1..=20).contains(&l))),
        "limit = min(free slots, 25)"
    );
    // The first poll answers at once (readiness); later ones wait the poll timeout.
    assert_eq!(first.timeout_ms, Some(1));
    assert_eq!(rec.polls[1].timeout_ms, Some(1000));
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn odd_commands_are_skipped_answered_or_dropped_as_the_contract_says() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    rig.sim
        .enqueue_raw(json!({"request_id":"req_unknown","shard_token":"s1","command_type":"teleport","created_at":"t"}));
    rig.sim.enqueue_raw(
        json!({"request_id":"req_bad","shard_token":"s2","command_type":"jsonrpc","created_at":"t","jsonrpc":[1,2]}),
    );
    rig.sim.enqueue_raw(json!(17));
    let expired = rig
        .sim
        .enqueue(call(1, "echo", json!({"message":"late"})).response_timeout("0s"));
    let elsewhere = rig
        .sim
        .enqueue(call(2, "echo", json!({"message":"where"})).channel("nowhere"));
    let fine = rig
        .sim
        .enqueue(call(3, "echo", json!({"message":"fine"})).response_timeout("30s"));
    let rec = rig
        .wait("the good and unroutable commands answered", |r| {
            r.is_completed(&fine) && r.responses_for(&elsewhere).next().is_some()
        })
        .await;
    assert_eq!(
        rig.stub.count("tools/call"),
        1,
        "only the valid, routable, live command reached the MCP server"
    );
    assert_eq!(
        rec.responses_for("req_unknown").count(),
        0,
        "unknown command types are skipped"
    );
    assert_eq!(
        rec.responses_for(&expired).count(),
        0,
        "expired commands are dropped without posting"
    );
    let bad = final_json(&rec, "req_bad");
    assert_eq!(bad["resp_json"]["error"]["code"], -32603);
    let routed = final_json(&rec, &elsewhere);
    assert_eq!(routed["channel"], "nowhere");
    assert_eq!(
        routed["resp_json"]["error"]["message"],
        "not delivered to the MCP server; safe to retry"
    );
    // Polling went on after all of it.
    let polls = rec.polls.len();
    rig.wait("polling continues", |r| r.polls.len() > polls).await;
    let metrics = rig.metrics().await;
    for needle in [
        "tunnelgate_commands_dropped_total{reason=\"unknown_type\"} 1",
        "tunnelgate_commands_dropped_total{reason=\"expired\"} 1",
        "tunnelgate_commands_dropped_total{reason=\"unroutable\"} 1",
        "tunnelgate_commands_dropped_total{reason=\"invalid\"} 2",
    ] {
        assert!(metrics.contains(needle), "{needle}\n{metrics}");
    }
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn a_json_rpc_error_from_the_server_is_forwarded_with_its_status() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    let id = rig
        .sim
        .enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":9,"method":"no/such"})));
    let rec = rig.wait("answered", |r| r.is_completed(&id)).await;
    let body = final_json(&rec, &id);
    assert_eq!(body["resp_json"]["error"]["code"], -32601, "{body}");
    assert_eq!(body["resp_code"], 200, "the stub answers its error with HTTP 200");
    assert!(
        body["resp_json"]["error"]["data"].get("tunnel_failure").is_none(),
        "the server's own error is not rewritten"
    );
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_downstream_requests_total{outcome=\"answered\",transport=\"http\"} 1"),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

/// The JSON-RPC error body a server sends for request `id`: keys out of order and an
/// odd number spelling, so only a byte-for-byte copy matches.
fn jsonrpc_error_body(id: u64) -> String {
    format!(
        r#"{{"error":{{"message":"bad params","code":-32602,"data":{{"k":[1.50],"z":null}}}},"id":{id},"jsonrpc":"2.0"}}"#
    )
}

/// A server answering every request with [`jsonrpc_error_body`] for its id, with that id
/// as the HTTP status (id 400 gets HTTP 400, id 500 gets HTTP 500).
async fn erroring_server() -> String {
    use axum::http::StatusCode;
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(|body: axum::body::Bytes| async move {
            let request: Value = serde_json::from_slice(&body).unwrap();
            let id = request["id"].as_u64().unwrap();
            let status = StatusCode::from_u16(u16::try_from(id).unwrap()).unwrap();
            (status, [("content-type", "application/json")], jsonrpc_error_body(id))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_json_rpc_error_with_http_400_or_500_is_forwarded_byte_for_byte_with_that_status() {
    let url = erroring_server().await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let ids: Vec<(u64, String)> = [400, 500]
        .into_iter()
        .map(|code| (code, rig.sim.enqueue(call(code, "echo", json!({"message": "refused"})))))
        .collect();
    let rec = rig
        .wait("both answered", |r| ids.iter().all(|(_, id)| r.is_completed(id)))
        .await;
    for (code, id) in &ids {
        let post = rec
            .responses_for(id)
            .last()
            .unwrap_or_else(|| panic!("no POST for {id}"));
        let raw = std::str::from_utf8(&post.body).unwrap();
        assert!(
            raw.contains(&format!(r#""resp_json":{}"#, jsonrpc_error_body(*code))),
            "the server's error is embedded exactly as sent: {raw}"
        );
        let body: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(body["resp_code"], *code, "{body}");
        assert_eq!(body["resp_type"], "jsonrpc_response");
        assert!(body["resp_json"]["error"]["data"].get("tunnel_failure").is_none());
    }
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_downstream_requests_total{outcome=\"answered\",transport=\"http\"} 2"),
        "{metrics}"
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_command_finish_then_exits_zero() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    let slow = rig.sim.enqueue(call(1, "slow", json!({"ms": 400})));
    rig.wait_stub_calls(1).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    assert!(
        rig.sim.record().is_completed(&slow),
        "the in-flight command finished within the grace"
    );
}

#[tokio::test]
async fn every_command_returned_is_processed_even_beyond_the_limit() {
    let rig = Rig::start("[[poll]]\nextra_commands = 3\n").await;
    let ids: Vec<String> = (0..5)
        .map(|i| rig.sim.enqueue(call(i, "echo", json!({"message": format!("m{i}")}))))
        .collect();
    let config = rig
        .config(&RigOptions::default_mode())
        .replace("post_attempts = 2", "post_attempts = 2\nmax_inflight = 2");
    let mut gw = rig.spawn_gateway(&config).await;
    let rec = rig
        .wait("all five answered", |r| ids.iter().all(|id| r.is_completed(id)))
        .await;
    let first = rec.polls.iter().find(|p| p.commands > 0).unwrap();
    assert_eq!(first.limit, Some(2), "limit = free prefetch slots");
    assert_eq!(first.commands, 5, "the simulator returned more than the limit");
    assert_eq!(rig.stub.count("tools/call"), 5);
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn polling_pauses_while_the_prefetch_queue_is_full() {
    let rig = Rig::start("").await;
    let config = rig
        .config(&RigOptions::default_mode())
        .replace("post_attempts = 2", "post_attempts = 2\nmax_inflight = 1");
    let mut gw = rig.spawn_gateway(&config).await;
    // The stub reports progress 2/2 halfway through the call, a second after it began
    // and while the one slot is still taken: the gateway's own post of that notification
    // is the signal to look, in place of a pause.
    let slow = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"slow","arguments":{"ms":2000},"_meta":{"progressToken":"held"}}}),
    ));
    rig.wait_stub_calls(1).await;
    let before = rig.sim.record().polls.len();
    let halfway = |r: &Record| {
        r.responses_for(&slow).any(|p| {
            p.json
                .as_ref()
                .is_some_and(|j| j["resp_json"]["params"]["progress"] == 2)
        })
    };
    let polls = rig.wait("the progress posted halfway", halfway).await.polls;
    assert_eq!(
        polls.len(),
        before,
        "no poll while the one slot is taken: {}",
        gw.stderr()
    );
    rig.wait("finished", |r| r.is_completed(&slow)).await;
    rig.wait("polling resumed", |r| r.polls.len() > before).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn a_rate_limited_poll_is_retried_no_sooner_than_retry_after() {
    let rig = Rig::start("[[poll]]\nnth = 1\nstatus = 429\nretry_after = \"2\"\n").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    rig.wait("the rate-limited poll", |r| {
        r.polls.iter().any(|p| p.status == Some(429))
    })
    .await;
    let refused_seen = tokio::time::Instant::now();
    rig.wait("the next poll", |r| r.polls.len() >= 2).await;
    let gap = refused_seen.elapsed();
    assert!(
        gap >= Duration::from_millis(1800),
        "Retry-After: 2 honoured as a floor, got {gap:?}"
    );
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_poll_errors_total{kind=\"rate_limited\"} 1"),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn a_command_still_running_when_the_grace_ends_is_cut_and_told_effect_unknown() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    let slow = rig.sim.enqueue(call(1, "slow", json!({"ms": 8000})));
    rig.wait_stub_calls(1).await;
    gw.sigterm();
    let started = tokio::time::Instant::now();
    assert_eq!(
        gw.wait_exit(EXIT).await,
        Some(0),
        "default mode stops cleanly: {}",
        gw.stderr()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the grace and the cleanup timeout"
    );
    assert!(
        gw.stderr().contains("stop: cutting commands that did not finish"),
        "{}",
        gw.stderr()
    );
    // The request reached the MCP server: its caller is told so, within the cleanup time.
    let record = rig.sim.record();
    assert!(record.is_completed(&slow), "the cut command is answered");
    let answer = final_json(&record, &slow);
    assert_eq!(
        answer["resp_json"]["error"]["message"], "effect unknown: the MCP server may have acted; check before retrying",
        "{answer}"
    );
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn even_at_trace_level_the_log_holds_no_payload_key_token_session_or_url() {
    let rig = Rig::start("").await;
    let config = rig
        .config(&RigOptions::default_mode())
        .replace("log_level = \"info\"", "log_level = \"trace\"");
    let mut gw = rig.spawn_gateway(&config).await;
    let canary = "PAYLOAD-CANARY-5521";
    let init = rig.sim.enqueue(initialize(1));
    let rec = rig.wait("initialize", |r| r.is_completed(&init)).await;
    let session = final_json(&rec, &init)["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let echo = rig.sim.enqueue(
        call(2, "echo", json!({"message": canary}))
            .header("Mcp-Session-Id", session.clone())
            .header("Authorization", "Bearer HEADER-CANARY-8812"),
    );
    let rec = rig.wait("echo", |r| r.is_completed(&echo)).await;
    let shard = crate::harness::shard_token(&rec, &echo);
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
    let log = gw.stderr();
    assert!(log.contains("polling for more commands"), "debug logging is on");
    let stub_addr = rig
        .stub
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let sim_addr = rig.sim.base_url().trim_start_matches("http://").to_owned();
    for secret in [
        canary,
        "HEADER-CANARY-8812",
        KEY,
        &shard,
        &session,
        &stub_addr,
        &sim_addr,
        "Echo: ",
    ] {
        assert!(!log.contains(secret), "{secret:?} leaked into the trace-level log");
    }
}

/// `runtime.worker_threads = 2`: the gateway runs a multi-thread runtime (the main thread
/// and two workers) and serves a batch of overlapping calls exactly as with one.
#[tokio::test]
async fn with_two_worker_threads_the_gateway_runs_multi_threaded_and_answers_every_call() {
    let rig = Rig::start("").await;
    let options = RigOptions {
        strict: false,
        extra: "[runtime]\nworker_threads = 2\n",
        ..Default::default()
    };
    let mut gw = rig.spawn_gateway(&rig.config(&options)).await;
    let ids: Vec<String> = (0..12)
        .map(|i| rig.sim.enqueue(call(i, "echo", json!({"message": format!("m{i}")}))))
        .collect();
    rig.wait("every call answered", |r| ids.iter().all(|id| r.is_completed(id)))
        .await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.pid())).unwrap();
    let threads: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(threads >= 3, "the main thread and two workers: {threads} thread(s)");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// The default (`runtime.worker_threads = 1`) runs every task on the main thread.
#[tokio::test]
async fn by_default_the_gateway_runs_on_one_thread() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    let id = rig.sim.enqueue(call(1, "echo", json!({"message": "one"})));
    rig.wait("the call answered", |r| r.is_completed(&id)).await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.pid())).unwrap();
    assert!(
        status.lines().any(|l| l == "Threads:\t1"),
        "one thread: {}",
        status.lines().find(|l| l.starts_with("Threads:")).unwrap_or("")
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// Three waves of 24 `slow` calls (10-20 ms each), each wave answered before the next;
/// returns how many calls were answered.
async fn three_waves_of_slow_calls(rig: &Rig) -> usize {
    let mut answered = 0;
    for wave in 0..3 {
        let ids: Vec<String> = (0..24)
            .map(|i| rig.enqueue_call("slow", json!({"ms": 10 + (i % 3) * 5})))
            .collect();
        rig.wait(&format!("wave {wave}'s answers"), |r| {
            ids.iter().all(|id| r.responses_for(id).any(|p| p.completed))
        })
        .await;
        answered += ids.len();
    }
    answered
}

/// The control plane's connections are reused too: three waves of 24 calls (72 commands,
/// so 72 response POSTs and the polls that fetched them) open at most one connection for the
/// poll plus one per command that may be in flight (`control_plane.max_inflight`, 20 by
/// default) to the control plane, however many requests pass.
#[tokio::test]
async fn three_waves_of_calls_reuse_at_most_max_inflight_plus_one_connections_to_the_control_plane() {
    const MAX_INFLIGHT: u64 = 20;
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    let answered = three_waves_of_slow_calls(&rig).await;
    let record = rig.sim.record();
    let requests = record.polls.len() + record.responses.len();
    let connections = rig.sim.connections_accepted();
    assert!(
        (1..=MAX_INFLIGHT + 1).contains(&connections),
        "{answered} calls ({requests} polls and response POSTs) opened {connections} connections to the control plane (at most 1 + max_inflight = {})",
        MAX_INFLIGHT + 1
    );
    assert!(
        requests > 3 * connections as usize,
        "{requests} requests over {connections} connections"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(Duration::from_secs(20)).await, Some(0), "{}", gw.stderr());
}

/// The MCP server's connections are reused: three waves of calls, each more than the
/// channel may run at once, open at most `mcp.max_concurrent` (4) connections to the
/// server in all, however many commands pass. (The pool holds at most what the
/// concurrency bound lets it open; idle connections close after the idle timeout.)
#[tokio::test]
async fn three_waves_of_calls_reuse_at_most_max_concurrent_connections_to_the_mcp_server() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    let answered = three_waves_of_slow_calls(&rig).await;
    let connections = rig.stub.connections_accepted();
    assert!(
        (1..=4).contains(&connections),
        "{answered} calls opened {connections} connections to the MCP server (at most mcp.max_concurrent = 4)"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(Duration::from_secs(20)).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn with_routing_correction_a_wrong_cluster_answer_teaches_the_placement_token_to_later_polls_only() {
    let faults = "[[poll]]\nnth = 2\nwrong_cluster = { token = \"tok-A7\", revision = 7 }\n";
    let rig = Rig::start(faults).await;
    let config = rig.config(&RigOptions::default_mode()).replacen(
        "[control_plane]\n",
        "[control_plane]\nrouting_correction = true\n",
        1,
    );
    let mut gw = rig.spawn_gateway(&config).await;
    let rec = rig
        .wait("a poll after the correction", |r| {
            r.polls.len() >= 4 && r.polls.iter().any(|p| p.status == Some(409))
        })
        .await;
    let first = &rec.polls[0];
    assert_eq!(first.header("x-tunnel-client-capabilities"), Some("wrong-cluster-v1"));
    assert_eq!(
        first.header("x-tunnel-shard-token"),
        None,
        "the first poll is tokenless"
    );
    assert_eq!(rec.polls[1].status, Some(409));
    assert!(
        rec.polls[2..]
            .iter()
            .all(|p| p.header("x-tunnel-shard-token") == Some("tok-A7")),
        "later polls carry the token"
    );
    let id = rig.enqueue_call("echo", json!({"message": "placed"}));
    let rec = rig.wait("the call answered", |r| r.is_completed(&id)).await;
    let shard = crate::harness::shard_token(&rec, &id);
    assert_ne!(shard, "tok-A7", "a response echoes the command's own shard token");
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains(r#"tunnelgate_poll_errors_total{kind="wrong_cluster"} 1"#),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn the_official_initial_poll_timeout_bounds_the_first_poll_attempt_only() {
    let rig = Rig::start_holding("", Duration::from_secs(30)).await;
    let config = rig
        .config(&RigOptions::default_mode())
        .replace("poll_timeout = \"1s\"", "poll_timeout = \"3s\"");
    // The official client's variable, read as `control_plane.initial_poll_timeout`.
    let mut gw =
        crate::harness::Gateway::spawn(&["run"], Some(&config), &[("CONTROL_PLANE_INITIAL_POLL_TIMEOUT", "2s")]);
    gw.wait_http_ready(&format!("http://127.0.0.1:{}/livez", rig.ops_port), EXIT)
        .await;
    let rec = rig.wait("three polls", |r| r.polls.len() >= 3).await;
    assert_eq!(
        rec.polls[0].timeout_ms,
        Some(2000),
        "the first attempt waits min(3 s, 2 s)"
    );
    assert!(
        rec.polls[1..].iter().all(|p| p.timeout_ms == Some(3000)),
        "every later one the poll timeout: {:?}",
        rec.polls.iter().map(|p| p.timeout_ms).collect::<Vec<_>>()
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}
