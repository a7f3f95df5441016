//! `resp_timing` (wire 2026-08-25, opt-in with `control_plane.resp_timing`), through the
//! binary against a simulator that accepts it (`--accept-resp-timing`): only a terminal
//! `jsonrpc_response` the MCP server itself gave carries it (a result or the server's own
//! JSON-RPC error), never a notification, an answer the gateway made (the owned session's
//! `initialize`) or a synthesized failure; it is the same on every retry of the POST.
//! Off by default, and then every body satisfies the published contracts.

use serde_json::{json, Value};
use tunnelgate_sim::{NewCommand, Record};

use crate::harness::{final_json, peer_script, python, Rig, RigOptions};
use crate::stdio_sessions::stdio_config;

/// The `resp_timing` of every POST made for `request_id`, by `resp_type`.
fn timings(record: &Record, request_id: &str) -> Vec<(String, Value)> {
    record
        .responses_for(request_id)
        .map(|p| {
            let json = p.json.clone().unwrap_or(Value::Null);
            (p.resp_type.clone().unwrap_or_default(), json["resp_timing"].clone())
        })
        .collect()
}

fn echo(id: u64, text: &str) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"echo","arguments":{"text":text},"_meta":{"progressToken":"p"}}}))
}

#[tokio::test]
async fn only_the_mcp_server_s_own_terminal_answers_carry_resp_timing_identical_on_every_retry() {
    // The first POST of the first command's answer is refused with 503: it is retried.
    let faults = "[[rule]]\nmatch = { order = 1, resp_type = \"jsonrpc_response\" }\nattempts = [1]\nstatus = 503";
    let rig = Rig::start_tuned(faults, |c| c.accept_resp_timing = true).await;
    let argv = vec![
        python().display().to_string(),
        peer_script("stdio/echo.py").display().to_string(),
    ];
    let config = stdio_config(&rig, &argv, "", &RigOptions::default_mode()).replacen(
        "[control_plane]\n",
        "[control_plane]\nresp_timing = true\n",
        1,
    );
    let mut gw = rig.spawn_gateway(&config).await;
    let answered = rig.sim.enqueue(echo(1, "timed"));
    let server_error = rig
        .sim
        .enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":2,"method":"no/such"})));
    let local = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":3,"method":"initialize",
        "params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}),
    ));
    let ids = [&answered, &server_error, &local];
    let rec = rig
        .wait("all answered", |r| ids.iter().all(|id| r.is_completed(id)))
        .await;

    let posts = timings(&rec, &answered);
    let terminal: Vec<&Value> = posts
        .iter()
        .filter(|(t, _)| t == "jsonrpc_response")
        .map(|(_, timing)| timing)
        .collect();
    assert_eq!(terminal.len(), 2, "refused once, then acked: {posts:?}");
    assert_eq!(terminal[0], terminal[1], "the same timing on every retry");
    assert_eq!(terminal[0]["version"], 1, "{posts:?}");
    assert_eq!(terminal[0]["transport"], "stdio", "{posts:?}");
    assert!(terminal[0]["target_elapsed_us"]
        .as_u64()
        .is_some_and(|us| us > 0 && us < 20_000_000));
    assert!(
        posts
            .iter()
            .any(|(t, timing)| t == "jsonrpc_notify" && timing.is_null()),
        "a notification carries none: {posts:?}"
    );
    let error = timings(&rec, &server_error);
    assert_eq!(final_json(&rec, &server_error)["resp_json"]["error"]["code"], -32601);
    assert_eq!(
        error[0].1["transport"], "stdio",
        "the server's own error is timed: {error:?}"
    );
    let made = timings(&rec, &local);
    assert!(
        made.iter().all(|(_, timing)| timing.is_null()),
        "the gateway's own answer: {made:?}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(std::time::Duration::from_secs(20)).await, Some(0));
}

#[tokio::test]
async fn an_http_server_s_answer_is_timed_as_streamable_http_and_a_failure_is_not() {
    let rig = Rig::start_tuned("", |c| c.accept_resp_timing = true).await;
    let config = rig.config(&RigOptions::default_mode()).replacen(
        "[control_plane]\n",
        "[control_plane]\nresp_timing = true\n",
        1,
    );
    let mut gw = rig.spawn_gateway(&config).await;
    let answered = rig.enqueue_call("echo", json!({"message": "timed"}));
    let unreachable = rig
        .sim
        .enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":9,"method":"tools/list"})).channel("nowhere"));
    let rec = rig
        .wait("both answered", |r| {
            r.is_completed(&answered) && r.is_completed(&unreachable)
        })
        .await;
    let timing = &final_json(&rec, &answered)["resp_timing"];
    assert_eq!(timing["transport"], "streamable_http", "{timing}");
    assert_eq!(timing["version"], 1);
    assert!(
        final_json(&rec, &unreachable).get("resp_timing").is_none(),
        "a synthesized failure is never timed"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(std::time::Duration::from_secs(20)).await, Some(0));
}
