//! `oauth_discovery` and every command type, through the real binary against the
//! simulator and real MCP servers: the Python SDK's own OAuth resource server, a server
//! with root metadata only, one without metadata, one that never answers, and a stdio
//! child. Each command is answered exactly once, or (an unknown type without a request)
//! skipped with a counted reason.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tunnelgate_sim::{NewCommand, Record};

use crate::harness::seen_n;
use crate::harness::{
    final_json, http_client, peer_script, python, spawn_py_oauth_server, spawn_py_server, wait_until, PyMode, Rig,
    RigOptions,
};

const EXIT: Duration = Duration::from_secs(20);

/// The POSTs the gateway made for `id`: exactly one, whose body is returned.
fn one_answer(rec: &Record, id: &str) -> Value {
    let posts: Vec<_> = rec.responses_for(id).collect();
    assert_eq!(posts.len(), 1, "exactly one answer for {id}: {posts:?}");
    posts[0].json.clone().expect("the answer is JSON")
}

fn header_names(body: &Value) -> Vec<String> {
    body["resp_headers"]
        .as_object()
        .expect("resp_headers is an object")
        .keys()
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_resource_metadata_url_on_an_untrusted_origin_is_not_read_and_is_counted() {
    // The server's challenge names its metadata on http://localhost:PORT; the channel
    // reaches it as http://127.0.0.1:PORT: another origin, which nothing trusts.
    let (peer, url) = crate::harness::spawn_py_oauth_server_with("sdk", &["--resource-host", "localhost"]).await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let id = rig.sim.enqueue(NewCommand::oauth_discovery().channel("main"));
    let rec = rig.wait("discovery answered", |r| r.is_completed(&id)).await;
    let body = one_answer(&rec, &id);
    // The named URL was skipped; the server's own well-known URL (same path) answered.
    assert_eq!(body["resp_code"], 200, "{body}");
    assert!(body["resp_json"]["resource"]
        .as_str()
        .unwrap()
        .starts_with("http://localhost:"));
    let metrics = rig.metrics().await;
    let line = r#"tunnelgate_oauth_untrusted_origins_total{source="resource_metadata"} 1"#;
    assert!(metrics.contains(line), "{line}\n{metrics}");
    let port = url.trim_start_matches("http://127.0.0.1:").split('/').next().unwrap();
    let log = gw.stderr();
    assert!(
        log.contains("mcp.oauth_trusted_origins does not list") && log.contains(&format!("http://localhost:{port}")),
        "the refusal names the origin and the key: {log}"
    );
    assert!(
        !log.contains("/.well-known/oauth-protected-resource"),
        "never the URL: {log}"
    );
    drop(peer);
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn discovery_answers_with_the_metadata_an_oauth_protected_sdk_server_serves() {
    let (peer, url) = spawn_py_oauth_server("sdk").await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let id = rig.sim.enqueue(NewCommand::oauth_discovery().channel("main"));
    let rec = rig.wait("discovery answered", |r| r.is_completed(&id)).await;
    let body = one_answer(&rec, &id);
    // The probe's 401 named the metadata URL; nothing else was needed.
    assert_eq!(
        seen_n(&peer, 2).await,
        ["POST /mcp", "GET /.well-known/oauth-protected-resource/mcp"]
    );
    assert_eq!(body["resp_type"], "oauth_discovery_response");
    assert_eq!(body["channel"], "main");
    assert_eq!(body["resp_code"], 200);
    let prm_url = url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    let served = http_client().get(&prm_url).send().await.unwrap().text().await.unwrap();
    let posted = rec.responses_for(&id).next().unwrap().body.clone();
    assert!(
        String::from_utf8_lossy(&posted).contains(&served),
        "the document is posted exactly as served: {served} in {posted:?}"
    );
    assert_eq!(body["resp_json"]["resource"], url.as_str());
    assert_eq!(
        body["resp_json"]["authorization_servers"][0],
        "https://auth.example.com/"
    );
    // The server also sent cache-control, vary, date, server and content-length.
    assert_eq!(header_names(&body), ["Content-Type"]);
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn discovery_on_a_named_channel_tries_the_well_known_urls_in_order_and_filters_headers() {
    let (peer, url) = spawn_py_oauth_server("root").await;
    let rig = Rig::start("").await;
    let extra = format!("\n[mcp.channels.side]\nurl = \"{url}\"\n");
    let config = rig.config(&RigOptions {
        extra: &extra,
        ..Default::default()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.sim.enqueue(NewCommand::oauth_discovery().channel("side"));
    let rec = rig.wait("discovery answered", |r| r.is_completed(&id)).await;
    let body = one_answer(&rec, &id);
    assert_eq!(
        seen_n(&peer, 4).await,
        [
            "POST /mcp",
            "GET /mcp",
            "GET /.well-known/oauth-protected-resource/mcp",
            "GET /.well-known/oauth-protected-resource",
        ]
    );
    assert_eq!(body["channel"], "side");
    assert_eq!(body["resp_code"], 200);
    assert_eq!(body["resp_json"]["resource"], url.as_str());
    // Set-Cookie and X-Powered-By are not passed on, as for any MCP response.
    assert_eq!(header_names(&body), ["Content-Type"]);
    rig.assert_all_bodies_valid();
    let status = rig.status().await;
    assert!(status["fatal"].is_null(), "{status}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_server_without_metadata_gets_an_error_answer_the_caller_can_act_on() {
    let (_peer, url) = spawn_py_server(PyMode::Json).await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    // An empty channel means `main`.
    let id = rig.sim.enqueue(NewCommand::oauth_discovery().channel(""));
    let rec = rig.wait("discovery answered", |r| r.is_completed(&id)).await;
    let body = one_answer(&rec, &id);
    assert_eq!(body["resp_type"], "oauth_discovery_response");
    assert_eq!(body["channel"], "main");
    assert_eq!(body["resp_code"], 404);
    assert_eq!(body["resp_json"]["error"]["code"], "metadata_not_found");
    let message = body["resp_json"]["error"]["message"].as_str().unwrap();
    assert!(message.contains("may not use OAuth"), "{message}");
    assert!(!message.contains("127.0.0.1"), "no URL in the answer: {message}");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_silent_server_is_bounded_by_the_response_timeout_and_by_the_gateways_own_bound() {
    let (peer, url) = spawn_py_oauth_server("slow").await;
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let started = Instant::now();
    let short = rig.sim.enqueue(NewCommand::oauth_discovery().response_timeout("3s"));
    let unbounded = rig.sim.enqueue(NewCommand::oauth_discovery());
    rig.wait("the short one answered", |r| r.is_completed(&short)).await;
    let short_took = started.elapsed();
    let rec = rig.wait("both answered", |r| r.is_completed(&unbounded)).await;
    let unbounded_took = started.elapsed();
    for id in [&short, &unbounded] {
        let body = one_answer(&rec, id);
        assert_eq!(body["resp_code"], 504, "{body}");
        assert_eq!(body["resp_json"]["error"]["code"], "discovery_timeout", "{body}");
    }
    // Ended a quarter of its budget before the deadline (3 s from receipt), posted in time.
    assert!(
        short_took >= Duration::from_secs(2) && short_took < Duration::from_secs(3),
        "{short_took:?}"
    );
    // The gateway's own 5 s bound; the server would have answered after 60 s.
    assert!(
        unbounded_took >= Duration::from_secs(5) && unbounded_took < Duration::from_secs(9),
        "{unbounded_took:?}"
    );
    assert!(seen_n(&peer, 1).await.iter().any(|s| s == "POST /mcp"));
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// A discovery that fails, or whose answer is refused, never latches: its requests are
/// metadata reads and the empty-body probe, none of which can carry a JSON-RPC request.
#[tokio::test]
async fn strict_discovery_holds_the_fence_and_a_failed_one_does_not_latch() {
    let (_peer, slow) = spawn_py_oauth_server("slow").await;
    let faults = "[[rule]]\nmatch = { order = 3, resp_type = \"oauth_discovery_response\" }\nstatus = 404\n";
    let rig = Rig::start(faults).await;
    let extra = format!("\n[mcp.channels.slow]\nurl = \"{slow}\"\n");
    let config = rig.config(&RigOptions {
        extra: &extra,
        ..Default::default()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    let discovery = rig
        .sim
        .enqueue(NewCommand::oauth_discovery().channel("slow").response_timeout("4s"));
    // It goes through the fence: held by the discovery, one interaction at a time.
    wait_until("the fence held by the discovery", Duration::from_secs(10), || async {
        let status = rig.status().await;
        status["fence"]["held"] == true && status["fence"]["request_id"] == discovery.as_str()
    })
    .await;
    let call = rig.enqueue_call("echo", json!({"message": "after"}));
    let rec = rig
        .wait("both answered", |r| r.is_completed(&discovery) && r.is_completed(&call))
        .await;
    assert_eq!(
        one_answer(&rec, &discovery)["resp_json"]["error"]["code"],
        "discovery_timeout"
    );
    assert_eq!(
        final_json(&rec, &call)["resp_json"]["result"]["content"][0]["text"],
        "Echo: after"
    );
    // Command 3's answer is refused with 404: for a tool call strict mode would latch.
    let refused = rig.sim.enqueue(NewCommand::oauth_discovery().channel("main"));
    let rec = rig
        .wait("the refused answer", |r| {
            r.responses_for(&refused).any(|p| p.status == Some(404))
        })
        .await;
    assert!(!rec.is_completed(&refused));
    let after = rig.enqueue_call("echo", json!({"message": "still running"}));
    rig.wait("a later call answered", |r| r.is_completed(&after)).await;
    let status = rig.status().await;
    assert!(status["fatal"].is_null(), "no latch: {status}");
    assert!(!gw.has_exited());
    assert!(!rig.latch_path().exists());
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// Every command type the contract or the official client knows is answered exactly
/// once; an unknown type carrying a JSON-RPC request is answered with an error; any other
/// unknown type is skipped, counted, and named (sanitized) in a warning.
#[tokio::test]
async fn every_command_type_is_answered_exactly_once_or_skipped_with_a_counted_reason() {
    let rig = Rig::start("").await;
    let stdio = serde_json::to_string(&[
        python().display().to_string(),
        peer_script("py_server.py").display().to_string(),
        "--mode".to_owned(),
        "stdio".to_owned(),
    ])
    .unwrap();
    let extra = format!("\n[mcp.channels.local]\ncommand = {stdio}\n");
    let config = rig.config(&RigOptions {
        extra: &extra,
        ..RigOptions::default_mode()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    let request = json!({"jsonrpc": "2.0", "id": "rpc-u", "method": "tools/call", "params": {"name": "echo"}});
    let hostile = format!("evil\n{}", "x".repeat(100));
    let answered = [
        (
            "jsonrpc",
            rig.enqueue_call("echo", json!({"message": "walk"})),
            "jsonrpc_response",
        ),
        (
            "jsonrpc (notification)",
            rig.sim.enqueue(NewCommand::jsonrpc(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "none"}}),
            )),
            "notify_ack",
        ),
        (
            "session_termination",
            rig.sim
                .enqueue(NewCommand::session_termination(Some("no-such-session"))),
            "session_termination_response",
        ),
        (
            "oauth_discovery",
            rig.sim.enqueue(NewCommand::oauth_discovery()),
            "oauth_discovery_response",
        ),
        (
            "oauth_discovery (stdio)",
            rig.sim.enqueue(NewCommand::oauth_discovery().channel("local")),
            "oauth_discovery_response",
        ),
        (
            "oauth_discovery (unknown channel)",
            rig.sim.enqueue(NewCommand::oauth_discovery().channel("nowhere")),
            "oauth_discovery_response",
        ),
        (
            "unknown type with a request",
            rig.sim.enqueue(NewCommand::jsonrpc(request).command_type("teleport")),
            "jsonrpc_response",
        ),
    ];
    let skipped = rig
        .sim
        .enqueue(NewCommand::oauth_discovery().command_type("future_thing"));
    let skipped_hostile = rig
        .sim
        .enqueue(NewCommand::oauth_discovery().command_type(hostile.clone()));
    let rec = rig
        .wait("every answerable command answered", |r| {
            answered.iter().all(|(_, id, _)| r.is_completed(id))
        })
        .await;
    for (what, id, resp_type) in &answered {
        assert_eq!(one_answer(&rec, id)["resp_type"], *resp_type, "{what}");
    }
    let stdio_answer = one_answer(&rec, &answered[4].1);
    assert_eq!(stdio_answer["resp_code"], 400);
    assert_eq!(stdio_answer["resp_json"]["error"]["code"], "unsupported_channel");
    assert!(stdio_answer["resp_json"]["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("unsupported channel \"local\""));
    assert_eq!(
        one_answer(&rec, &answered[5].1)["resp_json"]["error"]["code"],
        "unsupported_channel"
    );
    assert_eq!(
        one_answer(&rec, &answered[3].1)["resp_json"]["error"]["code"],
        "metadata_not_found",
        "the MCP stub serves no metadata"
    );
    let unknown = one_answer(&rec, &answered[6].1);
    assert_eq!(unknown["resp_json"]["id"], "rpc-u");
    assert_eq!(unknown["resp_json"]["error"]["code"], -32603);
    assert_eq!(unknown["resp_code"], 501);
    wait_until("both skips counted", Duration::from_secs(10), || async {
        rig.metrics()
            .await
            .contains("tunnelgate_commands_dropped_total{reason=\"unknown_type\"} 3")
    })
    .await;
    let rec = rig.sim.record();
    assert_eq!(rec.responses_for(&skipped).count(), 0, "skipped: never answered");
    assert_eq!(rec.responses_for(&skipped_hostile).count(), 0);
    let logs = gw.stderr();
    assert!(logs.contains("\"command_type\":\"future_thing\""), "named in a warning");
    assert!(logs.contains("\"command_type\":\"teleport\""));
    assert!(
        logs.contains("\"command_type\":\"<other>\""),
        "a hostile name is not echoed"
    );
    assert!(!logs.contains("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"));
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}
