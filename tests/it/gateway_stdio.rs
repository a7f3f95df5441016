//! The gateway with stdio MCP servers: server-everything as a child process, and a child
//! that dies after reading a request (abandoned, restarted with a new generation; in
//! strict mode latched, never restarted).

use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

use crate::harness::{final_json, python, server_everything_stdio_argv, Gateway, Rig, RigOptions};

const EXIT: Duration = Duration::from_secs(20);

fn with_stdio(rig: &Rig, argv: &[String], o: &RigOptions<'_>) -> String {
    let command = serde_json::to_string(argv).unwrap();
    rig.config(o).replace(
        &format!("url = \"{}\"", rig.stub.url()),
        &format!("command = {command}"),
    )
}

#[tokio::test]
async fn server_everything_over_stdio_initialize_list_echo_and_progress() {
    let rig = Rig::start("").await;
    let config = with_stdio(&rig, &server_everything_stdio_argv(), &RigOptions::default_mode());
    let mut gw = rig.spawn_gateway(&config).await;
    let init = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}),
    ));
    let note = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    ));
    let list = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
    ));
    let echo = rig.sim.enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"over a pipe"}}})));
    let long = rig.sim.enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":4,"method":"tools/call",
        "params":{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":2},"_meta":{"progressToken":"p"}}})));
    let rec = rig
        .wait("all answered", |r| {
            [&init, &note, &list, &echo, &long].iter().all(|id| r.is_completed(id))
        })
        .await;
    assert!(final_json(&rec, &init)["resp_json"]["result"]["serverInfo"]["name"].is_string());
    assert_eq!(final_json(&rec, &note)["resp_type"], "notify_ack");
    assert!(
        final_json(&rec, &list)["resp_json"]["result"]["tools"]
            .as_array()
            .unwrap()
            .len()
            > 3
    );
    assert_eq!(
        final_json(&rec, &echo)["resp_json"]["result"]["content"][0]["text"],
        "Echo: over a pipe"
    );
    let posts: Vec<_> = rec.responses_for(&long).collect();
    assert!(
        posts
            .iter()
            .filter(|r| r.resp_type.as_deref() == Some("jsonrpc_notify"))
            .count()
            >= 2
    );
    assert_eq!(posts.last().unwrap().resp_type.as_deref(), Some("jsonrpc_response"));
    let server_info = rec.polls[0].header("x-tunnel-mcp-server-info").unwrap();
    assert_eq!(
        server_info,
        r#"{"version":1,"channels":[{"name":"main","proc_affinity":true}]}"#
    );
    let status = rig.status().await;
    assert_eq!(status["downstream"][0]["transport"], "stdio");
    assert_eq!(status["downstream"][0]["up"], true);
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// The peer that dies after reading its first request; every child it starts appends a
/// line to [`spawns`].
fn exit_after_read_argv(rig: &Rig) -> Vec<String> {
    vec![
        python().display().to_string(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/stdio/exit_after_read.py").to_owned(),
        rig.dir.path().join("marker").display().to_string(),
        rig.dir.path().join("spawns").display().to_string(),
    ]
}

/// How many children the peer saw start (one line each in its spawn log).
fn spawns(rig: &Rig) -> usize {
    std::fs::read_to_string(rig.dir.path().join("spawns"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// How many children the gateway logged starting, including any killed before the
/// peer could write its spawn line.
fn started(gw: &Gateway) -> usize {
    gw.stderr().matches("stdio child started").count()
}

fn echo_call(id: u64) -> NewCommand {
    NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x"}}}),
    )
}

#[tokio::test]
async fn a_child_that_dies_after_the_write_is_abandoned_then_restarted_with_a_new_generation() {
    let rig = Rig::start("").await;
    let config = with_stdio(&rig, &exit_after_read_argv(&rig), &RigOptions::default_mode());
    let mut gw = rig.spawn_gateway(&config).await;
    let first = rig.sim.enqueue(echo_call(1));
    let rec = rig.wait("first answered", |r| r.is_completed(&first)).await;
    let body = final_json(&rec, &first);
    assert_eq!(
        body["resp_json"]["error"]["message"],
        "effect unknown: the MCP server may have acted; check before retrying"
    );
    let provenance = &body["resp_json"]["error"]["data"]["tunnel_failure"];
    assert_eq!(provenance["source"], "transport_closed", "{body}");
    assert_eq!(provenance["transport_error_kind"], "eof", "{body}");
    let second = rig.sim.enqueue(echo_call(2));
    let rec = rig.wait("second answered", |r| r.is_completed(&second)).await;
    assert!(
        final_json(&rec, &second)["resp_json"]["result"].is_object(),
        "the restarted child answers"
    );
    let status: Value = rig.status().await;
    assert_eq!(status["downstream"][0]["generation"], 2, "{status}");
    assert_eq!((spawns(&rig), started(&gw)), (2, 2), "one restart, no more");
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"stdio\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tunnelgate_stdio_restarts_total{channel=\"main\"} 1"),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn in_strict_mode_a_dying_child_latches_downstream_ambiguous_and_nothing_restarts() {
    let rig = Rig::start("").await;
    let config = with_stdio(&rig, &exit_after_read_argv(&rig), &RigOptions::default());
    let mut gw: Gateway = rig.spawn_gateway(&config).await;
    let first = rig.sim.enqueue(echo_call(1));
    let second = rig.sim.enqueue(echo_call(2));
    assert_eq!(gw.wait_exit(EXIT).await, Some(87), "{}", gw.stderr());
    let latch: Value = serde_json::from_slice(&std::fs::read(rig.latch_path()).expect("latch file written")).unwrap();
    assert_eq!(latch["fatal"]["category"], "downstream_ambiguous", "{latch}");
    assert_eq!(latch["fatal"]["request_id"], first.as_str(), "{latch}");
    let rec = rig.sim.record();
    let told = final_json(&rec, &first);
    assert_eq!(
        told["resp_json"]["error"]["message"],
        "effect unknown: the MCP server may have acted; check before retrying"
    );
    let provenance = &told["resp_json"]["error"]["data"]["tunnel_failure"];
    assert_eq!(provenance["source"], "transport_closed", "{told}");
    assert_eq!(provenance["transport_error_kind"], "eof", "{told}");
    assert_eq!(
        final_json(&rec, &second)["resp_json"]["error"]["message"],
        "not delivered to the MCP server; safe to retry"
    );
    // The gateway has exited: no child generation came after the one that died.
    assert_eq!(
        (spawns(&rig), started(&gw)),
        (1, 1),
        "no child was spawned after the latch: {}",
        gw.stderr()
    );
}
