//! The gateway with several commands in flight to one stdio child: overlapping slow calls,
//! colliding ids and progress tokens from two callers, a cancel, and a child that dies with
//! five calls in flight. Against server-everything over stdio and
//! `tests/peers/stdio/concurrent.py` (answers concurrently, out of order).

use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

use crate::harness::{final_json, python, server_everything_stdio_argv, wait_until, Gateway, Rig, RigOptions};

const EXIT: Duration = Duration::from_secs(20);
const DEFAULT_MODE: RigOptions<'static> = RigOptions {
    strict: false,
    extra: "",
    post_timeout: "700ms",
    post_attempts: 2,
};

/// The rig's configuration with channel `main` running `argv` and `max_concurrent`
/// commands admitted at once.
fn stdio_config(rig: &Rig, argv: &[String], max_concurrent: usize) -> String {
    let command = serde_json::to_string(argv).unwrap();
    rig.config(&DEFAULT_MODE)
        .replace(
            &format!("url = \"{}\"", rig.stub.url()),
            &format!("command = {command}"),
        )
        .replace("max_concurrent = 4", &format!("max_concurrent = {max_concurrent}"))
}

/// `concurrent.py` with each `(flag, file)`: the file in the rig's folder.
fn concurrent_peer(rig: &Rig, files: &[(&str, &str)]) -> Vec<String> {
    let mut argv = vec![
        python().display().to_string(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/stdio/concurrent.py").to_owned(),
    ];
    for (flag, file) in files {
        argv.push((*flag).to_owned());
        argv.push(rig.dir.path().join(file).display().to_string());
    }
    argv
}

fn tool_call(id: Value, tool: &str, arguments: Value) -> NewCommand {
    NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments}}),
    )
}

fn text(body: &Value) -> &str {
    body["resp_json"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {body}"))
}

/// The requests the peer logged (one JSON line each).
/// What the callers sent the child, in order: every line it read but the gateway's own
/// handshake (`initialize` and `notifications/initialized`).
fn logged(rig: &Rig) -> Vec<Value> {
    std::fs::read_to_string(rig.dir.path().join("received.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["method"] != "initialize" && v["method"] != "notifications/initialized")
        .collect()
}

#[tokio::test]
async fn eight_slow_calls_from_one_poll_are_in_flight_at_once_and_each_caller_gets_its_own_answer() {
    let rig = Rig::start("").await;
    // The peer answers a `gather` only once all eight are in flight at once, the last
    // first: served one at a time, each would fail after 10 s instead.
    let ids = [
        json!(1),
        json!(1),
        json!("1"),
        json!("r-é"),
        json!(2),
        json!(-3),
        json!("x"),
        json!(1),
    ];
    let commands: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let caller = if i % 2 == 0 { "session-a" } else { "session-b" };
            rig.sim.enqueue(
                tool_call(id.clone(), "gather", json!({"n": 8, "timeout_ms": 10000})).header("Mcp-Session-Id", caller),
            )
        })
        .collect();
    let mut gw: Gateway = rig
        .spawn_gateway(&stdio_config(&rig, &concurrent_peer(&rig, &[]), 8))
        .await;
    let rec = rig
        .wait("all eight answered", |r| commands.iter().all(|c| r.is_completed(c)))
        .await;
    assert!(rec.polls.iter().any(|p| p.commands == 8), "the eight came in one poll");
    for (command, id) in commands.iter().zip(&ids) {
        let body = final_json(&rec, command);
        assert_eq!(body["resp_json"]["id"], *id, "{body}");
        assert_eq!(text(&body), "gathered 8", "{body}");
    }
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn server_everything_serves_overlapping_calls_with_colliding_ids_and_tokens_each_to_its_own_caller() {
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&stdio_config(&rig, &server_everything_stdio_argv(), 8))
        .await;
    // Two callers, four calls each, every one with id 7 and progress token "p"; the
    // callers' calls differ in their steps, so each answer and progress tells whose it is.
    let callers = [("session-a", 3), ("session-b", 4)];
    let mut commands = Vec::new();
    for (session, steps) in callers {
        for _ in 0..4 {
            let call = NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{
                "name":"trigger-long-running-operation","arguments":{"duration":steps,"steps":steps},
                "_meta":{"progressToken":"p"}}}))
            .header("Mcp-Session-Id", session);
            commands.push((rig.sim.enqueue(call), steps));
        }
    }
    let rec = rig
        .wait("all eight answered", |r| {
            commands.iter().all(|(c, _)| r.is_completed(c))
        })
        .await;
    for (command, steps) in &commands {
        let posts: Vec<_> = rec.responses_for(command).collect();
        let notes: Vec<&Value> = posts
            .iter()
            .filter(|r| r.resp_type.as_deref() == Some("jsonrpc_notify"))
            .map(|r| &r.json.as_ref().unwrap()["resp_json"])
            // A session-wide notification (the server's `tools/list_changed` once the
            // gateway's handshake ends) rides on whichever call is oldest in flight.
            .filter(|note| note["method"] != "notifications/tools/list_changed")
            .collect();
        assert_eq!(notes.len(), *steps, "its own progress only: {notes:?}");
        for (i, note) in notes.iter().enumerate() {
            assert_eq!(note["params"]["progressToken"], "p", "the caller's own token: {note}");
            assert_eq!(note["params"]["total"], *steps, "{note}");
            assert_eq!(note["params"]["progress"], i + 1, "{note}");
        }
        let body = final_json(&rec, command);
        assert_eq!(body["resp_json"]["id"], 7, "{body}");
        assert_eq!(
            text(&body),
            format!("Long running operation completed. Duration: {steps} seconds, Steps: {steps}."),
        );
    }
    // Overlap: every call's first progress (after 1 s) came before any call's answer
    // (after 3 s at the earliest); one at a time, the first answer would come first.
    let position = |pred: &dyn Fn(&tunnelgate_sim::ResponseRecord) -> bool| rec.responses.iter().position(pred);
    let last_first_progress = commands
        .iter()
        .map(|(c, _)| {
            position(&|r| r.request_id.as_deref() == Some(c) && r.resp_type.as_deref() == Some("jsonrpc_notify"))
                .unwrap()
        })
        .max()
        .unwrap();
    let first_answer = position(&|r| r.resp_type.as_deref() == Some("jsonrpc_response")).unwrap();
    assert!(last_first_progress < first_answer, "the eight calls overlapped");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_cancel_through_the_gateway_reaches_only_its_own_callers_call() {
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&stdio_config(
            &rig,
            &concurrent_peer(&rig, &[("--log", "received.log")]),
            8,
        ))
        .await;
    let a = rig
        .sim
        .enqueue(tool_call(json!(1), "sleep", json!({"ms": 15000, "text": "A"})).header("Mcp-Session-Id", "session-a"));
    let b = rig
        .sim
        .enqueue(tool_call(json!(1), "sleep", json!({"ms": 1500, "text": "B"})).header("Mcp-Session-Id", "session-b"));
    wait_until("both calls reached the child", Duration::from_secs(20), || async {
        logged(&rig).len() == 2
    })
    .await;
    let cancel = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}))
            .header("Mcp-Session-Id", "session-a"),
    );
    let rec = rig
        .wait("all answered", |r| [&a, &b, &cancel].iter().all(|c| r.is_completed(c)))
        .await;
    assert_eq!(final_json(&rec, &cancel)["resp_type"], "notify_ack");
    assert_eq!(text(&final_json(&rec, &a)), "cancelled");
    assert_eq!(final_json(&rec, &a)["resp_json"]["id"], 1);
    assert_eq!(text(&final_json(&rec, &b)), "B", "B's call ran to its end");
    let sent = logged(&rig);
    let a_pipe = &sent.iter().find(|l| l["params"]["arguments"]["text"] == "A").unwrap()["id"];
    assert_eq!(
        sent[2],
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":a_pipe}})
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_child_that_dies_with_five_calls_in_flight_tells_each_caller_effect_unknown_and_resends_nothing() {
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&stdio_config(
            &rig,
            &concurrent_peer(&rig, &[("--log", "received.log"), ("--pidfile", "pid")]),
            8,
        ))
        .await;
    let calls: Vec<String> = (0..5)
        .map(|i| rig.sim.enqueue(tool_call(json!(i), "sleep", json!({"ms": 30000}))))
        .collect();
    wait_until("five calls reached the child", Duration::from_secs(20), || async {
        logged(&rig).len() == 5
    })
    .await;
    let pid = std::fs::read_to_string(rig.dir.path().join("pid")).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let rec = rig
        .wait("the five answered", |r| calls.iter().all(|c| r.is_completed(c)))
        .await;
    for (i, call) in calls.iter().enumerate() {
        let body = final_json(&rec, call);
        assert_eq!(body["resp_json"]["id"], i, "{body}");
        assert_eq!(
            body["resp_json"]["error"]["message"],
            "effect unknown: the MCP server may have acted; check before retrying"
        );
        assert_eq!(
            body["resp_json"]["error"]["data"]["tunnel_failure"]["transport_error_kind"],
            "eof"
        );
        assert_eq!(rec.responses_for(call).count(), 1, "told once");
    }
    let next = rig
        .sim
        .enqueue(tool_call(json!("next"), "sleep", json!({"ms": 0, "text": "new child"})));
    let rec = rig.wait("the next call answered", |r| r.is_completed(&next)).await;
    assert_eq!(text(&final_json(&rec, &next)), "new child");
    assert_eq!(rig.status().await["downstream"][0]["generation"], 2);
    let sent = logged(&rig);
    assert_eq!(sent.len(), 6, "nothing was re-sent: {sent:?}");
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"stdio\"} 5"),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}
