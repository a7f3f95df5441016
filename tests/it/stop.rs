//! Stopping: what a stop does to commands at every stage, and that each command is
//! counted exactly once however it ends.

use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

use crate::harness::{final_json, Rig, RigOptions};

const EXIT: Duration = Duration::from_secs(20);
const SAFE_TO_RETRY: &str = "not delivered to the MCP server; safe to retry";

fn call(id: u64, tool: &str, args: Value) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}}))
}

/// The fields of the gateway's last "final command accounting" log line.
fn final_accounting(stderr: &str) -> Value {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|v| v["fields"]["message"] == "final command accounting")
        .map(|v| v["fields"].clone())
        .unwrap_or_else(|| panic!("no final accounting line in:\n{stderr}"))
}

/// `name=count` pairs as logged.
fn pairs(v: &Value) -> std::collections::BTreeMap<String, u64> {
    v.as_str()
        .expect("pairs are a string")
        .split_whitespace()
        .map(|p| {
            let (k, n) = p.split_once('=').expect("name=count");
            (k.to_owned(), n.parse().expect("a count"))
        })
        .collect()
}

#[tokio::test]
async fn every_command_of_a_mixed_batch_with_a_stop_mid_flight_is_counted_exactly_once() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    // Answered, expired at receipt, unknown type, unroutable: each ends before the stop.
    let answered = rig.sim.enqueue(call(1, "echo", json!({"message": "hi"})));
    rig.sim
        .enqueue(call(2, "echo", json!({"message": "late"})).response_timeout("0s"));
    rig.sim
        .enqueue(NewCommand::session_termination(None).command_type("teleport"));
    let unroutable = rig
        .sim
        .enqueue(call(3, "echo", json!({"message": "x"})).channel("nowhere"));
    rig.wait("the early commands", |r| {
        r.is_completed(&answered) && r.is_completed(&unroutable)
    })
    .await;
    // Four slow calls fill `max_concurrent = 4`; a fifth waits in the queue.
    let slow: Vec<String> = (10..15)
        .map(|i| rig.sim.enqueue(call(i, "slow", json!({"ms": 8000}))))
        .collect();
    rig.wait_stub_calls(4).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());

    let record = rig.sim.record();
    let tally = final_accounting(&gw.stderr());
    let issued = record.issued() as u64;
    assert_eq!(tally["received"], issued, "{tally}");
    assert_eq!(tally["balanced"], true, "{tally}");
    let dropped = pairs(&tally["dropped"]);
    assert_eq!(dropped["expired"], 1, "{tally}");
    assert_eq!(dropped["unknown_type"], 1, "{tally}");
    assert_eq!(dropped["unroutable"], 1, "{tally}");
    assert_eq!(dropped["shutdown"], 1, "the queued call, refused at the stop: {tally}");
    assert_eq!(tally["legs"], 5, "the answered call and four cut calls: {tally}");
    assert_eq!(tally["legs"].as_u64().unwrap() + dropped.values().sum::<u64>(), issued);

    // Every terminal delivery the gateway counts is one the simulator received.
    let terminal = pairs(&tally["terminal_deliveries"]);
    let answered_ids: std::collections::BTreeSet<&str> = record
        .responses
        .iter()
        .filter(|r| r.resp_type.as_deref() != Some("jsonrpc_notify"))
        .filter_map(|r| r.request_id.as_deref())
        .collect();
    assert_eq!(terminal.values().sum::<u64>(), answered_ids.len() as u64, "{tally}");
    assert_eq!(terminal["acked"], answered_ids.len() as u64, "{tally}");
    // The four cut calls reached the server: effect unknown. The queued one never did.
    let words: Vec<String> = slow
        .iter()
        .map(|id| {
            final_json(&record, id)["resp_json"]["error"]["message"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        words.iter().filter(|w| w.starts_with("effect unknown")).count(),
        4,
        "{words:?}"
    );
    assert_eq!(words.iter().filter(|w| *w == SAFE_TO_RETRY).count(), 1, "{words:?}");
    rig.assert_all_bodies_valid();
}

/// A listener whose accept queue is full: a new connection to it hangs in the handshake.
async fn address_whose_connect_hangs() -> (String, Vec<tokio::net::TcpStream>, tokio::net::TcpListener) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_millis(300), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => fillers.push(s),
            Ok(Err(e)) => panic!("filling the accept queue: {e}"),
            Err(_) => return (format!("http://{addr}/mcp"), fillers, listener),
        }
    }
    panic!("the accept queue never filled");
}

#[tokio::test]
async fn a_strict_stop_while_the_mcp_connect_hangs_exits_zero_and_tells_the_caller_safe_to_retry() {
    let rig = Rig::start("").await;
    let (url, _fillers, _listener) = address_whose_connect_hangs().await;
    let config = rig
        .config(&RigOptions::default())
        .replace(&rig.stub.url(), &url)
        .replace("[mcp]\n", "[mcp]\nconnect_timeout = \"30s\"\n");
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.enqueue_call("echo", json!({"message": "never sent"}));
    crate::harness::wait_until(
        "the fence held by the connecting command",
        Duration::from_secs(10),
        || async { rig.status().await["fence"]["held"] == true },
    )
    .await;
    gw.sigterm();
    assert_eq!(
        gw.wait_exit(EXIT).await,
        Some(0),
        "nothing reached a server: the stop is clean\n{}",
        gw.stderr()
    );
    assert!(!rig.latch_path().exists(), "no latch file");
    assert!(!gw.stderr().contains("fatal latch"), "{}", gw.stderr());
    let answer = final_json(&rig.sim.record(), &id);
    assert_eq!(answer["resp_json"]["error"]["message"], SAFE_TO_RETRY, "{answer}");
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn with_latched_start_hold_a_latched_gateway_stays_up_not_ready_and_reports_the_latch_until_stopped() {
    let rig = Rig::start("[[rule]]\nmatch = { tool = \"echo\", resp_type = \"terminal\" }\nstatus = 404\n").await;
    let mut first = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    rig.enqueue_call("echo", json!({"message": "latch"}));
    assert_eq!(first.wait_exit(EXIT).await, Some(82), "{}", first.stderr());
    let polls = rig.sim.record().polls.len();
    let calls = rig.stub.received();

    let config = rig
        .config(&RigOptions::default())
        .replace("[strict]\n", "[strict]\nlatched_start = \"hold\"\n");
    let mut held = rig.spawn_gateway(&config).await;
    let ready = crate::harness::http_client()
        .get(format!("http://127.0.0.1:{}/readyz", rig.ops_port))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let status = rig.status().await;
    assert_eq!(status["state"], "fatal", "{status}");
    assert_eq!(status["fatal"]["category"], "latched_previously", "{status}");
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_fatal_info{category=\"ack_not_found\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("tunnelgate_fatal_latched 1"), "{metrics}");
    assert!(!held.has_exited(), "held, not exited");
    held.sigterm();
    assert_eq!(held.wait_exit(EXIT).await, Some(89), "{}", held.stderr());
    assert_eq!(rig.sim.record().polls.len(), polls, "a held gateway never polls");
    assert_eq!(rig.stub.received(), calls, "nor touches the MCP server");
}

#[tokio::test]
async fn latched_start_accepts_only_exit_or_hold() {
    let run = crate::harness::Gateway::cli(
        &["check"],
        Some("[control_plane]\nbase_url = \"http://127.0.0.1:9\"\ntunnel_id = \"t\"\napi_key = \"k\"\n[mcp.channels.main]\nurl = \"http://127.0.0.1:9/mcp\"\n[strict]\nlatched_start = \"linger\"\n"),
        &[],
        EXIT,
    )
    .await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains("strict.latched_start"), "{}", run.stderr);
}
