//! Input required, never replayed, over Streamable HTTP (issue 34, part 3), through the
//! binary: a handshake-era server on the Python SDK 1.x asks a 2026-07-28 caller for input
//! mid-call, on the call's own stream (an elicitation, a sampling) and on the session's
//! standalone stream (`roots/list` sent with no request named). The caller is answered
//! `input_required`, its retry answers the held call, and the tool runs once; a retry whose
//! call is gone is refused and sends nothing; strict mode never parks. A `subscriptions/listen`
//! stream gets what the server sends on its standalone stream.
//!
//! The server's side effects land in a file, one line per step of its tool, so each test
//! asserts how many times a tool started and ended.

use std::time::Duration;

use serde_json::{json, Value};

use crate::eras::{
    accept, ask, assert_listen_carries_an_update, assert_refused, effect_lines, enqueue_listen, legacy_py_http,
    legacy_py_http_with, modern, modern_client, parked_ask, post, stop,
};
use crate::harness::{wait_for, wait_until, Gateway, Rig, RigOptions};
use crate::stdio_sessions::file;

const EXIT: Duration = Duration::from_secs(20);
const MODERN: &str = "2026-07-28";

/// The `X-Tunnel-MCP-Server-Info` of the gateway's poll number `at`.
fn server_info(rig: &Rig, at: usize) -> String {
    let record = rig.sim.record();
    record.polls[at]
        .header("x-tunnel-mcp-server-info")
        .expect("the poll declares its channels")
        .to_owned()
}

/// A rig, the Python SDK 1.x HTTP server (its side effects in `effects.log`) and a
/// gateway before it with `o`; returns them with the effects file.
async fn legacy_http_rig(o: &RigOptions<'_>) -> (Rig, crate::harness::ChildGuard, Gateway, std::path::PathBuf) {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let (server, url) = legacy_py_http(&effects).await;
    let gw = rig.spawn_gateway(&rig.config_to(&url, o)).await;
    (rig, server, gw, effects)
}

/// Asserts each of `lines` is on the gateway's `/metrics`.
async fn assert_metrics(rig: &Rig, lines: &[&str]) {
    let metrics = rig.metrics().await;
    for line in lines {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
}

#[tokio::test]
async fn an_elicitation_mid_call_over_http_completes_for_a_pinned_caller_and_the_tool_runs_once() {
    let (rig, _server, gw, effects) = legacy_http_rig(&RigOptions::default_mode()).await;
    let out = modern_client(
        &rig,
        MODERN,
        &[
            "--elicit-accept",
            r#"{"name": "Ada"}"#,
            "--call",
            "ask",
            r#"{"question": "who are you?"}"#,
        ],
    )
    .await;
    assert_eq!(out["results"][0]["texts"][0], "hello Ada", "{out}");
    assert_eq!(
        effect_lines(&effects),
        ["ask-start", "ask-end"],
        "the tool ran once: {out}"
    );
    // The bridge's session and held calls live in this process: the channel is declared
    // process-affine from the moment it opened them, so a retry is routed back here.
    assert_eq!(server_info(&rig, 0), r#"{"version":1,"channels":[{"name":"main"}]}"#);
    let affine = r#"{"version":1,"channels":[{"name":"main","proc_affinity":true}]}"#;
    rig.wait("a poll that declares the affinity", |r| {
        r.polls.last().and_then(|p| p.header("x-tunnel-mcp-server-info")) == Some(affine)
    })
    .await;
    assert_metrics(
        &rig,
        &[
            r#"tunnelgate_era_input_rounds_total{channel="main"} 1"#,
            r#"tunnelgate_era_held_calls_total{channel="main",end="answered"} 1"#,
            r#"tunnelgate_era_parked_calls{channel="main"} 0"#,
            // The client's `tools/list` (it lists before it calls), the call, and its retry.
            r#"tunnelgate_era_requests_total{channel="main",handling="forwarded"} 3"#,
        ],
    )
    .await;
    rig.assert_all_bodies_valid();
    stop(gw).await;
}

#[tokio::test]
async fn sampling_on_the_call_s_stream_and_roots_on_the_standalone_stream_reach_a_pinned_caller_over_http() {
    let (rig, _server, gw, _effects) = legacy_http_rig(&RigOptions::default_mode()).await;
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
            // `list_roots()` names no request: the server sends it on the standalone stream.
            "--call",
            "roots",
            "{}",
            "--call",
            "roots_related",
            "{}",
        ],
    )
    .await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(results[0]["texts"][0], "sampled words", "{out}");
    for at in [1, 2] {
        let roots = results[at]["texts"][0].as_str().unwrap_or_default();
        assert!(
            roots.contains("file:///srv/a") && roots.contains("file:///srv/b"),
            "{at}: {out}"
        );
    }
    assert_metrics(
        &rig,
        &[r#"tunnelgate_era_held_calls_total{channel="main",end="answered"} 3"#],
    )
    .await;
    stop(gw).await;
}

#[tokio::test]
async fn over_http_a_replayed_tampered_or_foreign_request_state_is_refused_and_the_tool_runs_once() {
    let (rig, _server, gw, effects) = legacy_http_rig(&RigOptions::default_mode()).await;
    let parked = parked_ask(&rig, 1).await;
    let state = parked["requestState"].as_str().unwrap().to_owned();
    let responses = accept(&parked, "Ada");

    let (status, _, other) = post(&rig, &ask(2, "someone else?", Some((&responses, &state))), &[]).await;
    assert_refused(status, &other, "mismatch");
    let (status, _, garbage) = post(&rig, &ask(3, "who?", Some((&responses, "not-a-token"))), &[]).await;
    assert_refused(status, &garbage, "tampered");
    assert_eq!(effect_lines(&effects), ["ask-start"], "refusals run nothing");

    let (status, _, done) = post(&rig, &ask(4, "who?", Some((&responses, &state))), &[]).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["id"], 4, "the retry's own id: {done}");
    assert_eq!(done["result"]["content"][0]["text"], "hello Ada", "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let (status, _, replayed) = post(&rig, &ask(5, "who?", Some((&responses, &state))), &[]).await;
    assert_refused(status, &replayed, "consumed");

    assert_eq!(effect_lines(&effects), ["ask-start", "ask-end"], "the tool ran once");
    assert_metrics(
        &rig,
        &[
            r#"tunnelgate_era_continuations_refused_total{channel="main",reason="mismatch"} 1"#,
            r#"tunnelgate_era_continuations_refused_total{channel="main",reason="tampered"} 1"#,
            r#"tunnelgate_era_continuations_refused_total{channel="main",reason="consumed"} 1"#,
        ],
    )
    .await;
    stop(gw).await;
}

#[tokio::test]
async fn over_http_a_parked_call_never_continued_is_cancelled_at_its_park_timeout_and_leaves_a_receipt() {
    let options = RigOptions {
        extra: "[mcp.channels.main.input_required]
park_timeout = \"1s\"
",
        ..RigOptions::default_mode()
    };
    let (rig, _server, gw, effects) = legacy_http_rig(&options).await;
    let parked = parked_ask(&rig, 1).await;
    let state = parked["requestState"].as_str().unwrap().to_owned();
    wait_until("the parked call expired and ended", EXIT, || async {
        rig.metrics()
            .await
            .contains(r#"tunnelgate_era_held_calls_total{channel="main",end="expired"} 1"#)
    })
    .await;
    // The elicitation was cancelled as a person cancels a form: the tool ended by itself.
    assert_eq!(effect_lines(&effects), ["ask-start", "ask-end"]);
    let path = rig.dir.path().join("receipts.jsonl").display().to_string();
    let args = ["receipts", "--json", "--outcome", "unanswered", "--path", path.as_str()];
    let listed = wait_for("the held call's receipt", EXIT, || async {
        let run = Gateway::cli(&args, None, &[], EXIT).await;
        (run.code == 0 && !run.stdout.trim().is_empty()).then_some(run.stdout)
    })
    .await;
    let receipt: Value = serde_json::from_str(listed.lines().next().unwrap()).unwrap();
    assert_eq!(
        (&receipt["held"], &receipt["method"]),
        (&json!("expired"), &json!("tools/call")),
        "{receipt}"
    );
    let (status, _, late) = post(&rig, &ask(2, "who?", Some((&accept(&parked, "Ada"), &state))), &[]).await;
    assert_refused(status, &late, "expired");
    assert_eq!(
        effect_lines(&effects),
        ["ask-start", "ask-end"],
        "the late retry ran nothing"
    );
    assert_metrics(&rig, &[r#"tunnelgate_era_parked_calls{channel="main"} 0"#]).await;
    stop(gw).await;
}

#[tokio::test]
async fn over_http_strict_mode_never_parks_the_tool_runs_once_and_nothing_latches() {
    let (rig, _server, gw, effects) = legacy_http_rig(&RigOptions::default()).await;
    let (status, _, answer) = post(&rig, &ask(1, "who?", None), &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["resultType"], "complete",
        "no input_required: {answer}"
    );
    assert_eq!(
        answer["result"]["isError"], true,
        "the tool saw its request refused: {answer}"
    );
    assert_eq!(effect_lines(&effects), ["ask-start"], "it ran once");
    let retry = ask(2, "who?", Some((&json!({"ir-0": {"action": "accept"}}), "x.y")));
    let (status, _, refused) = post(&rig, &retry, &[]).await;
    assert_refused(status, &refused, "tampered");
    assert_eq!(effect_lines(&effects), ["ask-start"], "the retry ran nothing");
    let status = rig.status().await;
    assert_eq!(status["fatal"], Value::Null, "no latch: {status}");
    let last = rig.sim.record().polls.len() - 1;
    assert_eq!(
        server_info(&rig, last),
        r#"{"version":1,"channels":[{"name":"main"}]}"#,
        "nothing is held in this process: no affinity"
    );
    stop(gw).await;
}

#[tokio::test]
async fn a_json_response_server_cannot_ask_and_its_held_call_ends_at_the_command_s_bound() {
    let rig = Rig::start("").await;
    let effects = file(&rig, "effects.log");
    let (_server, url) = legacy_py_http_with(&effects, &["--json-response"]).await;
    let config = rig
        .config_to(&url, &RigOptions::default_mode())
        .replace("[mcp]\n", "[mcp]\nrequest_timeout = \"3s\"\n");
    let gw = rig.spawn_gateway(&config).await;
    let (status, _, answer) = post(&rig, &ask(1, "who?", None), &[]).await;
    let words = answer.to_string();
    assert!(
        answer["error"].is_object() && words.contains("effect"),
        "{status} {answer}"
    );
    assert_eq!(effect_lines(&effects), ["ask-start"], "it ran once");
    assert_metrics(
        &rig,
        &[r#"tunnelgate_era_held_calls_total{channel="main",end="lost"} 1"#],
    )
    .await;
    stop(gw).await;
}

#[tokio::test]
async fn a_modern_listen_stream_gets_an_http_server_s_resource_updates_from_its_standalone_stream() {
    let rig = Rig::start("").await;
    let (_server, url) = crate::harness::spawn_server_everything_http().await;
    let gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let (_, _, discover) = post(&rig, &modern(1, "server/discover", json!({})), &[]).await;
    assert_eq!(
        discover["result"]["capabilities"]["resources"]["subscribe"], true,
        "advertised in default mode: {discover}"
    );
    // The server sends its updates on the session's standalone stream, which names no
    // request.
    let stream = enqueue_listen(&rig);
    assert_listen_carries_an_update(&rig, &stream).await;
    wait_until("the listen to end", Duration::from_secs(15), || async {
        gw.stderr().contains("subscription stream ended")
    })
    .await;
    assert!(!rig.sim.record().is_completed(&stream), "never a late final response");
    stop(gw).await;
}
