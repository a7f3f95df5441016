//! Span export over OTLP/HTTP to a real receiver (`oteltap`), and a black-holed collector
//! that must not delay anything.

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use tunnelgate_sim::NewCommand;

use crate::harness::{free_port, python, wait_until, ChildGuard, Rig, RigOptions, KEY};

const EXIT: Duration = Duration::from_secs(20);

/// A real OTLP/HTTP receiver on a fresh port, printing each span it gets as one JSON line.
pub(crate) async fn oteltap() -> (ChildGuard, u16) {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.args(["-u", "-m", "oteltap", "--port", &port.to_string()]);
    let mut tap = ChildGuard::spawn("oteltap", cmd);
    tap.wait_http_ready(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(20))
        .await;
    (tap, port)
}

#[tokio::test]
async fn command_spans_reach_a_real_receiver_without_payloads_or_secrets() {
    let (tap, port) = oteltap().await;
    let rig = Rig::start("").await;
    let extra = format!("otlp_endpoint = \"http://127.0.0.1:{port}\"");
    let config = rig
        .config(&RigOptions::default_mode())
        .replace("log_level = \"info\"", &format!("log_level = \"info\"\n{extra}"));
    let mut gw = rig.spawn_gateway(&config).await;
    let canary = "PAYLOAD-CANARY-3390";
    let id = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"echo","arguments":{"message": canary}}}),
    ));
    let rec = rig.wait("answered", |r| r.is_completed(&id)).await;
    let shard = crate::harness::shard_token(&rec, &id);
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    wait_until(
        "the command's spans at the receiver",
        Duration::from_secs(15),
        || async {
            let out = tap.stdout();
            out.contains("tunnelgate.command")
                && out.contains("tools/call echo")
                && out.contains("tunnelgate.deliver.attempt")
        },
    )
    .await;
    let out = tap.stdout();
    for needle in [
        "tunnelgate.fence_wait",
        "tunnelgate.deliver",
        "\"mcp.method.name\"",
        "leg_outcome",
        "answered",
        "acked",
        r#"{"key":"http.request.resend_count","value":{"intValue":"0"}}"#,
    ] {
        assert!(
            out.contains(needle),
            "{needle:?} missing from the exported spans:\n{out}"
        );
    }
    for secret in [
        canary,
        KEY,
        shard.as_str(),
        "Echo: ",
        &rig.stub.url(),
        &rig.sim.base_url(),
    ] {
        assert!(!out.contains(secret), "{secret:?} leaked into the exported spans");
    }
    assert!(
        !out.contains("hyper") && !out.contains("reqwest"),
        "only tunnelgate's spans are exported"
    );
}

#[tokio::test]
async fn a_black_holed_collector_delays_neither_commands_nor_exit_beyond_the_bounded_flush() {
    // Accepts connections and never answers.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = hole.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = hole.accept().await {
            held.push(sock);
        }
    });
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions::default_mode()).replace(
        "log_level = \"info\"",
        &format!("log_level = \"info\"\notlp_endpoint = \"http://127.0.0.1:{port}\""),
    );
    let mut gw = rig.spawn_gateway(&config).await;
    let started = tokio::time::Instant::now();
    let ids: Vec<String> = (0..5)
        .map(|i| {
            rig.sim.enqueue(NewCommand::jsonrpc(
                json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x"}}}),
            ))
        })
        .collect();
    rig.wait("all answered", |r| ids.iter().all(|id| r.is_completed(id)))
        .await;
    let served = started.elapsed();
    assert!(
        served < Duration::from_secs(5),
        "commands were not held up by the collector: {served:?}"
    );
    gw.sigterm();
    let stopping = tokio::time::Instant::now();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
    let exit = stopping.elapsed();
    eprintln!("served 5 commands in {served:?}; exit took {exit:?} with a black-holed collector");
    assert!(
        exit < Duration::from_secs(4),
        "exit waits at most the bounded flush: {exit:?}"
    );
}
