//! Server-to-client requests mid-call (sampling, elicitation) through the tunnel: the
//! caller's reply runs on the leg that asked, so a strict gateway completes such a call
//! with one fence; a reply that matches nothing is refused and counted; a caller that
//! never replies ends as docs/strict-mode.md says.

use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

use crate::harness::{
    run_py_client, spawn_py_server, spawn_server_everything_http, wait_until, PyMode, Rig, RigOptions,
};

const EXIT: Duration = Duration::from_secs(30);

fn strict() -> RigOptions<'static> {
    RigOptions::default()
}

fn texts(out: &Value, i: usize) -> Vec<String> {
    out["results"][i]["texts"]
        .as_array()
        .unwrap_or_else(|| panic!("no texts in result {i}: {out}"))
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_strict_gateway_completes_calls_that_ask_for_sampling_and_elicitation_mid_call() {
    let rig = Rig::start("").await;
    let (_server, url) = spawn_py_server(PyMode::Sse).await;
    let mut gw = rig.spawn_gateway(&rig.config_to(&url, &strict())).await;
    let out = run_py_client(
        &rig.sim.ingress_url(),
        &[
            "--sampling-reply",
            "sampled by the caller",
            "--elicit-accept",
            r#"{"ok": true}"#,
            "--call",
            "sample",
            r#"{"prompt":"say something"}"#,
            "--call",
            "confirm",
            r#"{"question":"go ahead?"}"#,
        ],
    )
    .await;
    assert_eq!(texts(&out, 0), vec!["sampled: sampled by the caller"], "{out}");
    assert_eq!(texts(&out, 1), vec!["elicited: accept ok=True"], "{out}");
    let status = rig.status().await;
    assert_eq!(status["state"], "ready", "no latch: {status}");
    assert_eq!(status["fence"]["held"], false, "{status}");
    let metrics = rig.metrics().await;
    assert!(metrics.contains("tunnelgate_fatal_latched 0"), "{metrics}");
    assert!(
        metrics.contains("tunnelgate_commands_dropped_total{reason=\"unmatched_reply\"} 0"),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn server_everything_sampling_and_elicitation_tools_complete_through_a_strict_gateway() {
    let rig = Rig::start("").await;
    let (_server, url) = spawn_server_everything_http().await;
    let mut gw = rig.spawn_gateway(&rig.config_to(&url, &strict())).await;
    let out = run_py_client(
        &rig.sim.ingress_url(),
        &[
            "--sampling-reply",
            "from the caller",
            "--elicit-accept",
            r#"{"name": "Ada"}"#,
            "--call",
            "trigger-sampling-request",
            r#"{"prompt":"hello"}"#,
        ],
    )
    .await;
    let text = texts(&out, 0).join(" ");
    assert!(
        text.contains("from the caller"),
        "the sampled text comes back in the result: {out}"
    );
    assert_eq!(rig.status().await["fence"]["held"], false);
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn a_reply_that_matches_no_server_request_is_refused_counted_and_never_latches() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&strict())).await;
    let reply = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":"nobody-asked","result":{}}),
    ));
    let record = rig.wait("the refusal", |r| r.is_completed(&reply)).await;
    let answer = record.responses_for(&reply).last().unwrap();
    assert_eq!(answer.resp_type.as_deref(), Some("notify_ack"));
    let body: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(body["resp_code"], 409, "{body}");
    assert_eq!(rig.stub.received(), 0, "nothing reached the MCP server");
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_commands_dropped_total{reason=\"unmatched_reply\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("tunnelgate_fatal_latched 0"), "{metrics}");
    // The gateway goes on: the next command is served.
    let next = rig.enqueue_call("echo", json!({"message": "still here"}));
    rig.wait("the next command", |r| r.is_completed(&next)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    assert!(
        gw.stderr()
            .contains("this reply matches no request the MCP server is waiting for; it was not delivered"),
        "{}",
        gw.stderr()
    );
}

#[tokio::test]
async fn a_caller_that_never_replies_is_warned_about_then_latches_deadline_expired_in_strict_mode() {
    // The simulator gives each ingress command a 15 s response_timeout.
    let rig = Rig::start("").await;
    let (_server, url) = spawn_py_server(PyMode::Sse).await;
    let mut gw = rig.spawn_gateway(&rig.config_to(&url, &strict())).await;
    let client = tokio::spawn({
        let ingress = rig.sim.ingress_url();
        async move {
            crate::harness::try_run_py_client(
                &ingress,
                &["--never-reply", "--call", "sample", r#"{"prompt":"anyone?"}"#],
            )
            .await
        }
    });
    wait_until(
        "the warning about the unanswered server request",
        Duration::from_secs(20),
        || async { gw.stderr().contains("the MCP server is waiting for the caller's reply") },
    )
    .await;
    assert!(
        gw.stderr().contains("sampling/createMessage"),
        "the warning names the method"
    );
    assert_eq!(gw.wait_exit(EXIT).await, Some(85), "{}", gw.stderr());
    assert!(std::fs::read_to_string(rig.latch_path())
        .unwrap()
        .contains("deadline_expired"));
    client.abort();
}

/// A 2026-07-28 `subscriptions/listen` request with its envelope and mirrored headers.
fn listen(id: &str, timeout: &str) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"subscriptions/listen","params":{
        "notifications":{"toolsListChanged":true},
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}))
    .header("MCP-Protocol-Version", "2026-07-28")
    .header("Mcp-Method", "subscriptions/listen")
    .header("Accept", "application/json, text/event-stream")
    .response_timeout(timeout)
}

#[tokio::test]
async fn a_listen_stream_forwards_each_event_as_it_comes_and_its_deadline_is_a_normal_end() {
    let rig = Rig::start("").await;
    let (_server, url) = spawn_py_server(PyMode::Sse).await;
    let mut gw = rig
        .spawn_gateway(&rig.config_to(&url, &RigOptions::default_mode()))
        .await;
    let stream = rig.sim.enqueue(listen("listen-1", "4s"));
    let notes = |r: &tunnelgate_sim::Record| {
        r.responses_for(&stream)
            .filter(|p| p.resp_type.as_deref() == Some("jsonrpc_notify"))
            .count()
    };
    rig.wait("the subscription's acknowledgement", |r| notes(r) >= 1).await;
    // Another caller changes the tool list: the event reaches the listener while its
    // stream is still open.
    run_py_client(&rig.sim.ingress_url(), &["--call", "announce", "{}"]).await;
    let record = rig.wait("the list-changed event", |r| notes(r) >= 2).await;
    assert!(!record.is_completed(&stream), "the stream is still open");
    let event = record
        .responses_for(&stream)
        .filter_map(|p| p.json.clone())
        .nth(1)
        .unwrap();
    assert_eq!(
        event["resp_json"]["method"], "notifications/tools/list_changed",
        "{event}"
    );
    // At the deadline the stream ends: a normal end, nothing posted late, nothing ambiguous.
    wait_until(
        "the listen leg to end at its deadline",
        Duration::from_secs(15),
        || async { gw.stderr().contains("subscription stream ended") },
    )
    .await;
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"http\"} 0"),
        "{metrics}"
    );
    assert!(!rig.sim.record().is_completed(&stream), "never a late final response");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn strict_mode_refuses_a_listen_stream_without_touching_the_server_or_the_fence() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&strict())).await;
    let stream = rig.sim.enqueue(listen("listen-1", "10s"));
    let record = rig.wait("the refusal", |r| r.is_completed(&stream)).await;
    let answer = crate::harness::final_json(&record, &stream);
    assert_eq!(answer["resp_code"], 501, "{answer}");
    assert!(
        answer["resp_json"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("strict mode carries no long-lived subscription streams"),
        "{answer}"
    );
    assert_eq!(rig.stub.received(), 0);
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_commands_dropped_total{reason=\"unsupported\"} 1"),
        "{metrics}"
    );
    let next = rig.enqueue_call("echo", json!({"message": "the fence is free"}));
    rig.wait("the next command", |r| r.is_completed(&next)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// POSTs one 2026-07-28 request to the simulator's ingress with its mirrored headers.
async fn modern(
    ingress: &str,
    id: u64,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}
    });
    let mut request = crate::harness::http_client()
        .post(ingress)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = name {
        request = request.header("Mcp-Name", name);
    }
    let resp = request
        .body(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string())
        .send()
        .await
        .expect("the ingress answers");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body: Value = resp.json().await.expect("a JSON-RPC answer");
    (status, body, headers)
}

#[tokio::test]
async fn requests_of_the_2026_07_28_revision_pass_through_untouched_in_both_modes() {
    for strict_mode in [false, true] {
        let rig = Rig::start("").await;
        let (_server, url) = spawn_py_server(PyMode::Stateless).await;
        let mut gw = rig
            .spawn_gateway(&rig.config_to(
                &url,
                &RigOptions {
                    strict: strict_mode,
                    ..Default::default()
                },
            ))
            .await;
        let ingress = rig.sim.ingress_url();
        // Discovery.
        let (status, found, headers) = modern(&ingress, 1, "server/discover", None, json!({})).await;
        assert_eq!(status, 200, "{found}");
        assert_eq!(found["result"]["supportedVersions"], json!(["2026-07-28"]), "{found}");
        assert!(headers.get("mcp-session-id").is_none(), "no session is invented");
        // A tool call whose input is required: the caller completes it with a second
        // request (in strict mode: a second admission, after the first).
        let (_, first, _) = modern(
            &ingress,
            2,
            "tools/call",
            Some("greet"),
            json!({"name":"greet","arguments":{}}),
        )
        .await;
        assert_eq!(first["result"]["resultType"], "input_required", "{first}");
        let key = first["result"]["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .next()
            .unwrap()
            .clone();
        let state = first["result"]["requestState"].clone();
        let (status, done, _) = modern(
            &ingress,
            3,
            "tools/call",
            Some("greet"),
            json!({"name":"greet","arguments":{},
                   "inputResponses":{key: {"action":"accept","content":{"name":"Ada"}}},
                   "requestState": state}),
        )
        .await;
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["result"]["content"][0]["text"], "hello Ada", "{done}");
        // A header that disagrees with the body is the server's to reject; its answer
        // reaches the caller unchanged.
        let (status, refused, _) = modern(
            &ingress,
            4,
            "tools/call",
            Some("echo"),
            json!({"name":"greet","arguments":{}}),
        )
        .await;
        assert_eq!(refused["error"]["code"], -32020, "mode strict={strict_mode}: {refused}");
        assert_eq!(
            refused["error"]["message"],
            "mcp-name header does not match the request body's 'name' parameter"
        );
        assert!(status >= 400, "the server's status is passed on: {status}");
        // Every command carried the mirrored headers to the gateway.
        let record = rig.sim.record();
        assert!(record.commands.iter().all(|c| c.issued));
        let order: Vec<Option<String>> = record.commands.iter().map(|c| c.method.clone()).collect();
        assert_eq!(
            order,
            vec![
                Some("server/discover".to_owned()),
                Some("tools/call".to_owned()),
                Some("tools/call".to_owned()),
                Some("tools/call".to_owned())
            ]
        );
        let status = rig.status().await;
        assert_eq!(status["fatal"], Value::Null, "strict={strict_mode}: {status}");
        gw.sigterm();
        assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
        rig.assert_all_bodies_valid();
    }
}
