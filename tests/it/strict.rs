//! Strict mode acceptance: each row of the table, through the real binary
//! against the simulator, asserting on what the MCP server actually received.

use std::time::Duration;

use tokio::time::Instant;

use serde_json::json;

use crate::harness::{final_json, Gateway, Rig, RigOptions, KEY};

const EXIT: Duration = Duration::from_secs(20);

fn hold_echo_terminal(action: &str) -> String {
    format!("[[rule]]\nmatch = {{ tool = \"echo\", resp_type = \"terminal\" }}\n{action}\n")
}

/// How many write-ahead records `command_duration_seconds{leg="intent"}` has timed.
fn intent_records(metrics: &str) -> u64 {
    let series = "tunnelgate_command_duration_seconds_count{leg=\"intent\"} ";
    let count = metrics.lines().find_map(|l| l.strip_prefix(series));
    count
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series}in {metrics}"))
}

#[tokio::test]
async fn acknowledged_terminal_post_releases_the_fence_for_the_next_command() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    let a = rig.enqueue_call("echo", json!({"message": "one"}));
    let b = rig.enqueue_call("add", json!({"a": 1, "b": 2}));
    let rec = rig
        .wait("both completed", |r| r.is_completed(&a) && r.is_completed(&b))
        .await;
    assert_eq!(
        final_json(&rec, &a)["resp_json"]["result"]["content"][0]["text"],
        "Echo: one"
    );
    assert_eq!(rig.stub.count("tools/call"), 2);
    assert!(!gw.has_exited());
    rig.assert_all_bodies_valid();
    // Each command's write-ahead record is timed as the `intent` leg.
    assert_eq!(intent_records(&rig.metrics().await), 2);
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

async fn ambiguous_then_acked(action: &str) {
    let faults =
        format!("[[rule]]\nmatch = {{ tool = \"echo\", resp_type = \"terminal\" }}\nattempts = [1]\n{action}\n");
    let rig = Rig::start(&faults).await;
    let mut gw = rig
        .spawn_gateway(&rig.config(&RigOptions {
            post_attempts: 3,
            ..Default::default()
        }))
        .await;
    let a = rig.enqueue_call("echo", json!({"message": "retry me"}));
    let rec = rig.wait("completed on a retry", |r| r.is_completed(&a)).await;
    let attempts: Vec<_> = rec.responses_for(&a).collect();
    assert!(attempts.len() >= 2, "the first attempt was ambiguous, a retry followed");
    assert!(
        attempts.windows(2).all(|w| w[0].body == w[1].body),
        "every attempt carries identical bytes"
    );
    let token = |r: &tunnelgate_sim::ResponseRecord| r.header("x-tunnel-shard-token").map(str::to_owned);
    assert!(
        attempts.windows(2).all(|w| token(w[0]) == token(w[1])),
        "identical headers"
    );
    assert_eq!(rig.stub.count("tools/call"), 1, "the MCP request is never sent again");
    let b = rig.enqueue_call("add", json!({"a": 1, "b": 1}));
    rig.wait("the next command runs", |r| r.is_completed(&b)).await;
    assert!(!gw.has_exited(), "{}", gw.stderr());
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn a_held_attempt_then_an_acknowledged_identical_retry_finishes_normally() {
    ambiguous_then_acked("action = \"hold\"").await;
}

#[tokio::test]
async fn a_closed_attempt_then_an_acknowledged_identical_retry_finishes_normally() {
    ambiguous_then_acked("action = \"close\"").await;
}

/// Latches through `action` on the first command's terminal POST; a second command
/// queued behind it must never reach the MCP server.
async fn latches_with(action: &str, category: &str, code: i32) {
    let rig = Rig::start(&hold_echo_terminal(action)).await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    let a = rig.enqueue_call("echo", json!({"message": "fatal"}));
    rig.wait("the first command's POST", |r| r.responses_for(&a).next().is_some())
        .await;
    let b = rig.enqueue_call("add", json!({"a": 2, "b": 2}));
    let exit = gw.wait_exit(EXIT).await;
    assert_eq!(exit, Some(code), "stderr:\n{}", gw.stderr());
    assert_eq!(
        rig.stub.count("tools/call"),
        1,
        "nothing reaches the MCP server after the latch"
    );
    let latch: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rig.latch_path()).expect("latch file written")).unwrap();
    assert_eq!(latch["fatal"]["category"], category);
    assert_eq!(latch["fatal"]["exit_code"], code);
    assert_eq!(latch["fatal"]["request_id"], a.as_str());
    assert!(gw.stderr().contains(&format!("category={category} exit_code={code}")));
    // The second command, if it was handed out, got a "not executed" answer (never executed).
    let rec = rig.sim.record();
    if let Some(r) = rec.responses_for(&b).last() {
        let body = r.json.as_ref().unwrap();
        assert!(body["resp_json"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("safe to retry"));
    }
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn post_timeout_after_dispatch_latches_ack_timeout() {
    latches_with("action = \"hold\"", "ack_timeout", 80).await;
}

#[tokio::test]
async fn connection_lost_after_the_write_latches_ack_connection_lost() {
    latches_with("action = \"close\"", "ack_connection_lost", 81).await;
}

#[tokio::test]
async fn a_404_on_the_terminal_post_latches_ack_not_found() {
    latches_with("status = 404", "ack_not_found", 82).await;
}

#[tokio::test]
async fn a_rejecting_status_latches_ack_rejected() {
    latches_with("status = 400", "ack_rejected", 83).await;
}

#[tokio::test]
async fn retryable_statuses_until_the_budget_runs_out_latch_ack_retries_exhausted() {
    latches_with("status = 503", "ack_retries_exhausted", 84).await;
}

#[tokio::test]
async fn a_command_returned_in_the_same_poll_never_reaches_the_mcp_server_after_the_latch() {
    let rig = Rig::start(&hold_echo_terminal("status = 404")).await;
    // Both are queued before the gateway starts, so one poll returns both.
    let a = rig.enqueue_call("echo", json!({"message": "first"}));
    let b = rig.enqueue_call("add", json!({"a": 1, "b": 1}));
    // Not `rig.gateway`: the latch can end the process before a readiness probe lands.
    let mut gw = Gateway::run(&rig.config(&RigOptions::default()));
    assert_eq!(gw.wait_exit(EXIT).await, Some(82), "{}", gw.stderr());
    let rec = rig.sim.record();
    assert_eq!(
        rec.polls.iter().filter(|p| p.commands > 0).count(),
        1,
        "both came in one poll"
    );
    assert_eq!(rig.stub.count("tools/call"), 1);
    let not_executed = final_json(&rec, &b);
    assert_eq!(
        not_executed["resp_json"]["error"]["message"],
        "not delivered to the MCP server; safe to retry"
    );
    assert!(rec.responses_for(&a).count() == 1, "404 is final: no retry");
}

#[tokio::test]
async fn the_latch_fires_and_the_process_exits_within_cleanup_timeout_plus_one_second() {
    let rig = Rig::start(&hold_echo_terminal("status = 404")).await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    let a = rig.enqueue_call("echo", json!({"message": "x"}));
    let _queued = rig.enqueue_call("add", json!({"a": 1, "b": 1}));
    rig.wait("the 404", |r| r.responses_for(&a).any(|x| x.status == Some(404)))
        .await;
    let seen = Instant::now();
    assert_eq!(gw.wait_exit(EXIT).await, Some(82));
    let elapsed = seen.elapsed();
    eprintln!("latch-to-exit: {elapsed:?} (cleanup_timeout 2s)");
    assert!(elapsed < Duration::from_secs(3), "latch to exit took {elapsed:?}");
}

#[tokio::test]
async fn another_channel_and_command_type_are_blocked_by_the_same_fence() {
    let rig = Rig::start(&hold_echo_terminal("action = \"hold\"")).await;
    let side = tunnelgate_sim::McpStub::start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let extra = format!("[mcp.channels.side]\nurl = \"{}\"\n", side.url());
    let mut gw = rig
        .spawn_gateway(&rig.config(&RigOptions {
            extra: &extra,
            post_timeout: "1500ms",
            ..Default::default()
        }))
        .await;
    let a = rig.enqueue_call("echo", json!({"message": "holds the fence"}));
    rig.wait("the held POST", |r| r.responses_for(&a).next().is_some())
        .await;
    rig.sim
        .enqueue(tunnelgate_sim::NewCommand::session_termination(Some("sess-1")).channel("side"));
    rig.sim.enqueue(
        tunnelgate_sim::NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":7,"method":"tools/list"})).channel("side"),
    );
    assert_eq!(gw.wait_exit(EXIT).await, Some(80), "{}", gw.stderr());
    assert_eq!(
        side.received(),
        0,
        "the other channel never got a byte while the fence was held, nor after the latch"
    );
}

#[tokio::test]
async fn strict_with_more_than_one_concurrent_command_is_a_configuration_error() {
    let rig = Rig::start("").await;
    let config = rig
        .config(&RigOptions::default())
        .replace("max_concurrent = 1", "max_concurrent = 4");
    let run = Gateway::cli(&["check"], Some(&config), &[], EXIT).await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains("mcp.max_concurrent"), "{}", run.stderr);
    let mut gw = Gateway::run(&config);
    assert_eq!(gw.wait_exit(EXIT).await, Some(78));
    assert!(rig.sim.record().polls.is_empty());
}

#[tokio::test]
async fn a_failed_progress_notification_keeps_the_fence_and_the_terminal_ack_decides() {
    let faults = "[[rule]]\nmatch = { resp_type = \"jsonrpc_notify\" }\nstatus = 500\n";
    let rig = Rig::start(faults).await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    let a = rig.sim.enqueue(tunnelgate_sim::NewCommand::jsonrpc(json!({
        "jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"slow","arguments":{"ms":200},"_meta":{"progressToken":"p"}}})));
    let rec = rig.wait("terminal delivered", |r| r.is_completed(&a)).await;
    let notifies = rec
        .responses_for(&a)
        .filter(|r| r.resp_type.as_deref() == Some("jsonrpc_notify"))
        .count();
    assert_eq!(notifies, 1, "after one notification fails, later ones are skipped");
    let b = rig.enqueue_call("echo", json!({"message": "after"}));
    rig.wait("next command", |r| r.is_completed(&b)).await;
    assert!(!gw.has_exited());
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn stop_before_dispatch_or_after_the_acknowledgement_exits_zero() {
    let rig = Rig::start("").await;
    let mut idle = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    idle.sigterm();
    assert_eq!(idle.wait_exit(EXIT).await, Some(0), "{}", idle.stderr());

    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    let a = rig.enqueue_call("echo", json!({"message": "done"}));
    rig.wait("acked", |r| r.is_completed(&a)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
    assert!(!rig.latch_path().exists());
}

#[tokio::test]
async fn stop_after_dispatch_before_the_acknowledgement_past_the_grace_exits_86() {
    let rig = Rig::start(&hold_echo_terminal("action = \"hold\"")).await;
    let mut gw = rig
        .spawn_gateway(&rig.config(&RigOptions {
            post_timeout: "10s",
            ..Default::default()
        }))
        .await;
    let a = rig.enqueue_call("echo", json!({"message": "in flight"}));
    rig.wait("the held POST", |r| r.responses_for(&a).next().is_some())
        .await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(86), "{}", gw.stderr());
    assert!(std::fs::read_to_string(rig.latch_path())
        .unwrap()
        .contains("stopped_before_ack"));
}

#[tokio::test]
async fn response_timeout_passing_after_dispatch_exits_85() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    rig.sim.enqueue(
        tunnelgate_sim::NewCommand::jsonrpc(
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1500}}}),
        )
        .response_timeout("400ms"),
    );
    assert_eq!(gw.wait_exit(EXIT).await, Some(85), "{}", gw.stderr());
    assert!(
        rig.sim.record().responses.is_empty(),
        "no late error is ever synthesized"
    );
}

#[tokio::test]
async fn strict_disabled_keeps_running_and_dispatches_the_next_command() {
    let rig = Rig::start(&hold_echo_terminal("status = 404")).await;
    let opts = RigOptions::default_mode();
    let mut gw = rig.spawn_gateway(&rig.config(&opts)).await;
    let a = rig.enqueue_call("echo", json!({"message": "404 is counted"}));
    rig.wait("the 404", |r| r.responses_for(&a).any(|x| x.status == Some(404)))
        .await;
    let b = rig.enqueue_call("add", json!({"a": 1, "b": 2}));
    rig.wait("second dispatched", |r| r.is_completed(&b)).await;
    assert_eq!(rig.stub.count("tools/call"), 2);
    assert!(!gw.has_exited());
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_deliveries_total{kind=\"terminal\",outcome=\"not_found\"} 1"),
        "{metrics}"
    );
    assert_eq!(intent_records(&metrics), 0, "default mode writes no intent");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn a_persisted_latch_refuses_to_run_until_cleared() {
    let rig = Rig::start(&hold_echo_terminal("status = 404")).await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    rig.enqueue_call("echo", json!({"message": "latch"}));
    assert_eq!(gw.wait_exit(EXIT).await, Some(82));
    let polls = rig.sim.record().polls.len();
    let calls = rig.stub.received();

    let config = rig.config(&RigOptions::default());
    let mut again = Gateway::run(&config);
    assert_eq!(again.wait_exit(EXIT).await, Some(89), "{}", again.stderr());
    assert!(again.stderr().contains("category=ack_not_found"), "{}", again.stderr());
    assert_eq!(rig.sim.record().polls.len(), polls, "a latched gateway never polls");
    assert_eq!(rig.stub.received(), calls, "nor touches the MCP server");

    let latch = rig.latch_path();
    let path = latch.to_str().unwrap();
    let show = Gateway::cli(&["latch", "show", "--latch-file", path], None, &[], EXIT).await;
    assert_eq!(show.code, 0);
    assert!(show.stdout.contains("ack_not_found"));
    let refused = Gateway::cli(&["latch", "clear", "--latch-file", path], None, &[], EXIT).await;
    assert_ne!(refused.code, 0, "no confirmation without a terminal or --yes");
    assert!(latch.exists());
    let cleared = Gateway::cli(&["latch", "clear", "--yes", "--latch-file", path], None, &[], EXIT).await;
    assert_eq!(cleared.code, 0, "{}", cleared.stderr);
    assert!(!latch.exists());

    let rig2 = Rig::start("").await;
    let config = rig2
        .config(&RigOptions::default())
        .replace(&rig2.latch_path().display().to_string(), path);
    let mut gw = rig2.spawn_gateway(&config).await;
    let b = rig2.enqueue_call("echo", json!({"message": "runs again"}));
    rig2.wait("runs normally", |r| r.is_completed(&b)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

/// Configured credentials for the canary test: a control-plane header from the
/// environment, an MCP `Authorization` literal, a proxy-style `Basic` credential in a
/// custom header, one from `MCP_EXTRA_HEADERS`, and the organization id (an identifier,
/// not a secret: `check` shows it, nothing else does).
const CP_HEADER_CANARY: &str = "CP-HEADER-CANARY-5501";
const MCP_HEADER_CANARY: &str = "MCP-HEADER-CANARY-6602";
const PROXY_STYLE_CANARY: &str = "cHJveHktdXNlcjpQUk9YWS1DQU5BUlktNzcwMw==";
const EXTRA_HEADER_CANARY: &str = "EXTRA-HEADER-CANARY-8804";
const ORGANIZATION_CANARY: &str = "org-CANARY-9905";

#[tokio::test]
async fn no_canary_appears_in_logs_spans_metrics_status_check_doctor_or_the_latch_file() {
    let (tap, otlp_port) = crate::otlp::oteltap().await;
    // Every terminal POST is held: the latch fires on the first, and the second
    // command's "not executed" answer keeps the cleanup (and /status) alive a moment.
    let rig = Rig::start("[[rule]]\nmatch = { resp_type = \"terminal\" }\naction = \"hold\"\n").await;
    let config = rig
        .config(&RigOptions {
            post_timeout: "300ms",
            extra: &format!(
                "otlp_endpoint = \"http://127.0.0.1:{otlp_port}\"\n\
                 [control_plane.headers]\nX-Gateway-Key = \"env:CANARY_GATEWAY_KEY\"\n\
                 [mcp.channels.main.headers]\nAuthorization = \"Bearer {MCP_HEADER_CANARY}\"\n\
                 X-Upstream-Proxy-Auth = \"Basic {PROXY_STYLE_CANARY}\"\n"
            ),
            ..Default::default()
        })
        .replace("log_level = \"info\"", "log_level = \"debug\"");
    let envs = [
        ("CANARY_GATEWAY_KEY", CP_HEADER_CANARY),
        ("MCP_EXTRA_HEADERS", &format!("X-Every: {EXTRA_HEADER_CANARY}")),
        ("CONTROL_PLANE_ORGANIZATION_ID", ORGANIZATION_CANARY),
    ];
    let mut gw = Gateway::spawn(&["run"], Some(&config), &envs);
    gw.wait_http_ready(
        &format!("http://127.0.0.1:{}/livez", rig.ops_port),
        Duration::from_secs(20),
    )
    .await;
    let payload_canary = "PAYLOAD-CANARY-7731";
    let header_canary = "HEADER-CANARY-9124";
    let a = rig.sim.enqueue(
        tunnelgate_sim::NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":"rpc-c","method":"tools/call",
            "params":{"name":"echo","arguments":{"message": payload_canary}}}))
        .header("Authorization", format!("Bearer {header_canary}"))
        .header("X-Custom", header_canary),
    );
    rig.wait("the first POST", |r| r.responses_for(&a).next().is_some())
        .await;
    rig.enqueue_call("add", json!({"a": 1, "b": 1}));
    let mut status = String::new();
    let mut metrics = String::new();
    for _ in 0..200 {
        let Ok(resp) = crate::harness::http_client()
            .get(format!("http://127.0.0.1:{}/status", rig.ops_port))
            .send()
            .await
        else {
            break;
        };
        let doc: serde_json::Value = resp.json().await.unwrap();
        if !doc["fatal"].is_null() {
            status = doc.to_string();
            metrics = rig.metrics().await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(status.contains("ack_timeout"), "status while latched: {status}");
    assert!(
        metrics.contains("tunnelgate_fatal_latched 1"),
        "metrics while latched: {metrics}"
    );
    assert_eq!(gw.wait_exit(EXIT).await, Some(80));
    let rec = rig.sim.record();
    let shard = crate::harness::shard_token(&rec, &a);
    let poll_headers = rec.polls[0].headers.clone();
    let sent = |name: &str| poll_headers.iter().any(|(n, v)| n == name && v.contains("CANARY"));
    assert!(
        sent("x-gateway-key") && sent("openai-organization"),
        "the canaries were in use: {poll_headers:?}"
    );
    crate::harness::wait_until(
        "the command's spans at the receiver",
        Duration::from_secs(15),
        || async { tap.stdout().contains("tunnelgate.command") },
    )
    .await;
    let check = Gateway::cli(&["check"], Some(&config), &envs, EXIT).await;
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(
        check
            .stdout
            .contains("X-Gateway-Key = \"env:CANARY_GATEWAY_KEY (set, 21 bytes)\""),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains(ORGANIZATION_CANARY),
        "the organization id is shown: {}",
        check.stdout
    );
    let doctor = Gateway::cli(&["doctor"], Some(&config), &envs, EXIT).await;
    assert!(
        doctor.stdout.contains("control_plane"),
        "{}\n{}",
        doctor.stdout,
        doctor.stderr
    );
    let latch = std::fs::read_to_string(rig.latch_path()).unwrap();
    let outputs = [
        ("stderr", gw.stderr()),
        ("stdout", gw.stdout()),
        ("latch file", latch),
        ("/status", status),
        ("/metrics", metrics),
        ("exported spans", tap.stdout()),
        ("check output", format!("{}{}", check.stdout, check.stderr)),
        ("doctor output", format!("{}{}", doctor.stdout, doctor.stderr)),
    ];
    let canaries = [
        payload_canary,
        header_canary,
        KEY,
        shard.as_str(),
        &rig.stub.url(),
        &rig.sim.base_url(),
        "Echo: ",
        CP_HEADER_CANARY,
        MCP_HEADER_CANARY,
        PROXY_STYLE_CANARY,
        EXTRA_HEADER_CANARY,
        ORGANIZATION_CANARY,
    ];
    for (name, text) in &outputs {
        for canary in canaries {
            // `check` prints the effective configuration: URLs and the organization id
            // are configuration, not secrets.
            let shown_by_check = *name == "check output"
                && (canary == ORGANIZATION_CANARY || canary == rig.stub.url() || canary == rig.sim.base_url());
            if !shown_by_check {
                assert!(!text.contains(canary), "{canary:?} leaked into {name}:\n{text}");
            }
        }
    }
}

/// An MCP server that reads the request, then closes the connection without answering:
/// the leg ends `abandoned` (the server may have acted).
async fn cutting_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = vec![0u8; 65536];
            let _ = tokio::time::timeout(Duration::from_millis(200), sock.read(&mut buf)).await;
            drop(sock);
        }
    });
    (url, seen)
}

#[tokio::test]
async fn an_abandoned_downstream_leg_exits_87_after_telling_the_caller_effect_unknown() {
    let rig = Rig::start("").await;
    let (url, seen) = cutting_server().await;
    let config = rig.config(&RigOptions::default()).replace(&rig.stub.url(), &url);
    let mut gw = rig.spawn_gateway(&config).await;
    let a = rig.enqueue_call("echo", json!({"message": "cut"}));
    let b = rig.enqueue_call("echo", json!({"message": "never"}));
    assert_eq!(gw.wait_exit(EXIT).await, Some(87), "{}", gw.stderr());
    let rec = rig.sim.record();
    let told = final_json(&rec, &a);
    assert_eq!(
        told["resp_json"]["error"]["message"],
        "effect unknown: the MCP server may have acted; check before retrying"
    );
    let provenance = &told["resp_json"]["error"]["data"]["tunnel_failure"];
    assert_eq!(provenance["source"], "transport_closed", "{told}");
    assert_eq!(provenance["transport_error_kind"], "connection_reset", "{told}");
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the second command never reached the MCP server"
    );
    assert_eq!(
        final_json(&rec, &b)["resp_json"]["error"]["message"],
        "not delivered to the MCP server; safe to retry"
    );
    let log = gw.stderr();
    assert!(
        log.contains("\"tunnelgate.leg_outcome\":\"abandoned\"") && log.contains("\"error.type\":\""),
        "the command span carries the outcome and the error type: {log}"
    );
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn with_ambiguity_reported_an_abandoned_leg_is_answered_and_the_gateway_keeps_running() {
    let rig = Rig::start("").await;
    let (url, seen) = cutting_server().await;
    let config = rig
        .config(&RigOptions::default())
        .replace(&rig.stub.url(), &url)
        .replace(
            "[strict]\nenabled = true",
            "[strict]\nenabled = true\non_downstream_ambiguity = \"report\"",
        );
    let mut gw = rig.spawn_gateway(&config).await;
    let a = rig.enqueue_call("echo", json!({"message": "cut"}));
    let b = rig.enqueue_call("echo", json!({"message": "next"}));
    let rec = rig
        .wait("both answered", |r| r.is_completed(&a) && r.is_completed(&b))
        .await;
    assert!(final_json(&rec, &a)["resp_json"]["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("effect unknown"));
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert!(!gw.has_exited());
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"http\"} 2"),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
}

#[tokio::test]
async fn a_second_signal_during_the_grace_makes_the_latch_win() {
    let rig = Rig::start(&hold_echo_terminal("action = \"hold\"")).await;
    let config = rig
        .config(&RigOptions {
            post_timeout: "10s",
            ..Default::default()
        })
        .replace("shutdown_grace = \"1s\"", "shutdown_grace = \"30s\"");
    let mut gw = rig.spawn_gateway(&config).await;
    let a = rig.enqueue_call("echo", json!({"message": "in flight"}));
    rig.wait("the held POST", |r| r.responses_for(&a).next().is_some())
        .await;
    gw.sigterm();
    // The first signal has been acted on once /status says so: the gateway is in its grace.
    crate::harness::wait_until("/status to report draining", EXIT, || async {
        rig.status().await["state"] == "draining"
    })
    .await;
    assert!(!gw.has_exited(), "the first signal waits for the grace");
    gw.sigterm();
    let started = Instant::now();
    assert_eq!(gw.wait_exit(EXIT).await, Some(86), "{}", gw.stderr());
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the second signal does not wait for the 30 s grace"
    );
}
