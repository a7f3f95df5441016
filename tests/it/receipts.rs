//! Delivery receipts end to end: the real gateway against the simulator, whose fault
//! scripts answer a terminal POST 404, reject it, or hold it until the gateway gives up,
//! and an HTTP MCP server that cuts its SSE stream before the response (an abandoned
//! leg); then `tunnelgate receipts` lists exactly those commands, filtered as asked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::harness::{shard_token, wait_until, Gateway, Rig, RigOptions, KEY};

const EXIT: Duration = Duration::from_secs(20);
const PAYLOAD_CANARY: &str = "PAYLOAD-CANARY-R3C31PT";
const HEADER_CANARY: &str = "HEADER-CANARY-R3C31PT";

/// Commands 1, 2 and 3 (in queue order): their terminal POSTs are answered 404, rejected
/// with 400, and held until the gateway gives up.
const FAULTS: &str = r#"
[[rule]]
match = { order = 1, resp_type = "terminal" }
status = 404

[[rule]]
match = { order = 2, resp_type = "terminal" }
status = 400

[[rule]]
match = { order = 3, resp_type = "terminal" }
action = "hold"
"#;

/// An MCP server that answers every request with an SSE stream carrying one progress
/// notification, then closes it before the response: the leg ends `abandoned`.
async fn stream_cutting_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = vec![0u8; 65536];
            let _ = tokio::time::timeout(Duration::from_millis(500), sock.read(&mut buf)).await;
            let event =
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = sock
                .write_all(format!("{head}event: message\ndata: {event}\n\n").as_bytes())
                .await;
            let _ = sock.flush().await;
            drop(sock);
        }
    });
    url
}

/// The journal's lines (the rotated file first), each as JSON.
fn journal(path: &Path) -> Vec<Value> {
    let rotated = PathBuf::from(format!("{}.1", path.display()));
    [rotated.as_path(), path]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|text| {
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<Value>>()
        })
        .collect()
}

/// `request_id -> receipt` of `tunnelgate receipts --json ARGS` against `path`.
async fn listed(path: &Path, args: &[&str]) -> BTreeMap<String, Value> {
    let mut all = vec!["receipts", "--json", "--path", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = Gateway::cli(&all, None, &[], EXIT).await;
    assert_eq!(run.code, 0, "receipts {args:?}: {}", run.stderr);
    run.stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            (v["request_id"].as_str().unwrap().to_owned(), v)
        })
        .collect()
}

fn ids(map: &BTreeMap<String, Value>) -> Vec<&str> {
    map.keys().map(String::as_str).collect()
}

/// A receipt from long ago, in the rotated file before the gateway starts.
fn old_receipt() -> String {
    json!({
        "schema_version": 1, "request_id": "req_from_2020", "channel": "main", "command_type": "jsonrpc",
        "method": "tools/call", "leg_outcome": "abandoned", "delivery_outcome": "acked",
        "message": "effect unknown: the MCP server may have acted; check before retrying", "attempts": 1,
        "received_at": "2020-01-01T00:00:00.000Z", "finished_at": "2020-01-01T00:00:01.000Z",
        "strict": false, "fatal_category": null
    })
    .to_string()
}

#[tokio::test]
async fn receipts_list_exactly_the_commands_that_did_not_end_cleanly_with_their_outcomes() {
    let rig = Rig::start(FAULTS).await;
    let cut = stream_cutting_server().await;
    let path = rig.dir.path().join("receipts.jsonl");
    std::fs::write(rig.dir.path().join("receipts.jsonl.1"), format!("{}\n", old_receipt())).unwrap();
    let extra = format!("[mcp.channels.cut]\nurl = \"{cut}\"\n");
    let config = rig.config(&RigOptions {
        extra: &extra,
        ..RigOptions::default_mode()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    let call = |tool: &str, channel: &str| {
        rig.sim.enqueue(
            tunnelgate_sim::NewCommand::jsonrpc(json!({
                "jsonrpc": "2.0", "id": format!("rpc-{tool}"), "method": "tools/call",
                "params": {"name": tool, "arguments": {"message": PAYLOAD_CANARY, "a": 1, "b": 2}}
            }))
            .channel(channel)
            .header("x-canary", HEADER_CANARY),
        )
    };
    let not_found = call("echo", "main");
    let rejected = call("add", "main");
    let ambiguous = call("echo", "main");
    let abandoned = call("echo", "cut");
    let clean = call("echo", "main");
    let rec = rig.wait("the clean command", |r| r.is_completed(&clean)).await;
    wait_until("four receipts in the journal", EXIT, || async {
        journal(&path).len() == 5
    })
    .await;

    let all = listed(&path, &[]).await;
    assert_eq!(all.len(), 5, "the old one and the four unclean ones: {all:?}");
    assert!(!all.contains_key(&clean), "a clean command writes no line");
    let r = |id: &str| &all[id];
    let outcome = |id: &str| {
        (
            r(id)["leg_outcome"].as_str().map(str::to_owned),
            r(id)["delivery_outcome"].as_str().map(str::to_owned),
        )
    };
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(outcome(&not_found), (s("answered"), s("not_found")));
    assert_eq!(outcome(&rejected), (s("answered"), s("rejected")));
    assert_eq!(outcome(&ambiguous), (s("answered"), s("ambiguous")));
    assert_eq!(outcome(&abandoned), (s("abandoned"), s("acked")));
    assert_eq!(r(&ambiguous)["attempts"], 2, "post_attempts = 2, both held");
    assert_eq!(r(&not_found)["attempts"], 1, "404 is final");
    assert_eq!(
        r(&abandoned)["message"],
        "effect unknown: the MCP server may have acted; check before retrying"
    );
    assert_eq!(r(&abandoned)["channel"], "cut");
    assert_eq!(
        r(&not_found)["message"],
        Value::Null,
        "the MCP server's own answer was posted"
    );
    for id in [&not_found, &rejected, &ambiguous, &abandoned] {
        assert_eq!(r(id)["method"], "tools/call");
        assert_eq!(r(id)["strict"], false);
        assert_eq!(r(id)["fatal_category"], Value::Null);
        let (received, finished) = (
            r(id)["received_at"].as_str().unwrap(),
            r(id)["finished_at"].as_str().unwrap(),
        );
        assert!(
            received <= finished && received.starts_with("20"),
            "{received} {finished}"
        );
    }

    let recent = listed(&path, &["--since", "1h"]).await;
    assert_eq!(recent.len(), 4, "the line from 2020 is older: {:?}", ids(&recent));
    assert!(!recent.contains_key("req_from_2020"));
    let just_abandoned = listed(&path, &["--outcome", "abandoned"]).await;
    assert_eq!(ids(&just_abandoned), {
        let mut want = vec![abandoned.as_str(), "req_from_2020"];
        want.sort();
        want
    });
    let refused = listed(&path, &["--outcome", "not_found,rejected", "--since", "1h"]).await;
    assert_eq!(ids(&refused), {
        let mut want = vec![not_found.as_str(), rejected.as_str()];
        want.sort();
        want
    });
    let held = listed(
        &path,
        &["--outcome", "ambiguous", "--outcome", "abandoned", "--since", "10m"],
    )
    .await;
    assert_eq!(held.len(), 2);
    assert!(held.contains_key(&ambiguous) && held.contains_key(&abandoned));

    let table = Gateway::cli(&["receipts", "--path", path.to_str().unwrap()], None, &[], EXIT).await;
    assert_eq!(table.code, 0, "{}", table.stderr);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(
        lines[0].starts_with("FINISHED_AT") && lines[0].contains("REQUEST_ID"),
        "{}",
        table.stdout
    );
    assert!(lines[1].contains("req_from_2020"), "oldest first: {}", table.stdout);
    assert!(
        table.stdout.contains(&abandoned) && table.stdout.contains("5 of 5 receipts"),
        "{}",
        table.stdout
    );
    // The configuration names the same file (beside the latch file by default).
    let from_config = Gateway::cli(&["receipts", "--json"], Some(&config), &[], EXIT).await;
    assert_eq!(from_config.code, 0, "{}", from_config.stderr);
    assert_eq!(from_config.stdout.lines().count(), 5);

    let metrics = rig.metrics().await;
    assert!(metrics.contains("tunnelgate_receipts_written_total 4"), "{metrics}");
    assert!(
        metrics.contains("tunnelgate_receipts_dropped_total{reason=\"queue_full\"} 0"),
        "{metrics}"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let shard = shard_token(&rec, &not_found);
    for canary in [
        PAYLOAD_CANARY,
        HEADER_CANARY,
        KEY,
        shard.as_str(),
        "Echo:",
        "x-canary",
        &rig.stub.url(),
        &cut,
    ] {
        assert!(!text.contains(canary), "{canary:?} leaked into the journal:\n{text}");
    }
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_strict_latch_leaves_its_receipt_with_the_category_before_the_process_exits() {
    let rig = Rig::start(FAULTS).await;
    let path = rig.dir.path().join("receipts.jsonl");
    let mut gw = Gateway::run(&rig.config(&RigOptions::default()));
    let latched = rig.enqueue_call("echo", json!({"message": PAYLOAD_CANARY}));
    assert_eq!(gw.wait_exit(EXIT).await, Some(82), "{}", gw.stderr());
    let lines = journal(&path);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let r = &lines[0];
    assert_eq!(r["request_id"], latched.as_str());
    assert_eq!(r["delivery_outcome"], "not_found");
    assert_eq!(r["fatal_category"], "ack_not_found");
    assert_eq!(r["strict"], true);
}

#[tokio::test]
async fn an_unwritable_journal_never_delays_or_fails_a_command_and_counts_its_drops() {
    let rig = Rig::start(FAULTS).await;
    let extra = "[receipts]\npath = \"/dev/full\"\n";
    let mut gw = rig
        .spawn_gateway(&rig.config(&RigOptions {
            extra,
            ..RigOptions::default_mode()
        }))
        .await;
    let started = Instant::now();
    let not_found = rig.enqueue_call("echo", json!({"message": "refused"}));
    let rejected = rig.enqueue_call("add", json!({"a": 1, "b": 1}));
    let _held = rig.enqueue_call("echo", json!({"message": "held"}));
    let clean = rig.enqueue_call("add", json!({"a": 2, "b": 2}));
    rig.wait("every POST but the held one", |r| {
        r.is_completed(&clean)
            && r.responses_for(&not_found).any(|x| x.status == Some(404))
            && r.responses_for(&rejected).any(|x| x.status == Some(400))
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "commands were not held up: {:?}",
        started.elapsed()
    );
    let drops = crate::harness::wait_for("three receipts dropped for a full disk", EXIT, || async {
        let m = rig.metrics().await;
        m.contains("tunnelgate_receipts_dropped_total{reason=\"disk_full\"} 3")
            .then_some(m)
    })
    .await;
    assert!(drops.contains("tunnelgate_receipts_written_total 0"), "{drops}");
    let ready = crate::harness::http_client()
        .get(format!("http://127.0.0.1:{}/readyz", rig.ops_port))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "the journal does not make the gateway unready");
    let again = rig.enqueue_call("add", json!({"a": 3, "b": 3}));
    rig.wait("a later command", |r| r.is_completed(&again)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
    assert!(
        gw.stderr().contains("delivery receipts cannot be written"),
        "said once: {}",
        gw.stderr()
    );
    assert!(Path::new("/dev/full").exists());
}

#[tokio::test]
async fn with_receipts_off_nothing_is_written() {
    let rig = Rig::start("[[rule]]\nmatch = { order = 1, resp_type = \"terminal\" }\nstatus = 404\n").await;
    let extra = "[receipts]\nenabled = false\n";
    let mut gw = rig
        .spawn_gateway(&rig.config(&RigOptions {
            extra,
            ..RigOptions::default_mode()
        }))
        .await;
    let refused = rig.enqueue_call("echo", json!({"message": "refused"}));
    let clean = rig.enqueue_call("add", json!({"a": 1, "b": 2}));
    rig.wait("both answered", |r| {
        r.is_completed(&clean) && r.responses_for(&refused).any(|x| x.status == Some(404))
    })
    .await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0));
    assert!(!rig.dir.path().join("receipts.jsonl").exists());
    let path = rig.dir.path().join("receipts.jsonl");
    let missing = Gateway::cli(&["receipts", "--path", path.to_str().unwrap()], None, &[], EXIT).await;
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stderr.contains("no receipts journal at") && missing.stderr.contains("receipts.enabled"),
        "{}",
        missing.stderr
    );
}

#[tokio::test]
async fn bad_receipts_flags_are_usage_errors_and_an_unreadable_journal_says_why() {
    for args in [
        &["receipts", "--path", "/tmp/x", "--outcome", "lost"][..],
        &["receipts", "--path", "/tmp/x", "--since", "forever"],
        &["receipts", "--path", "/tmp/x", "--outcome", "acked"],
    ] {
        let run = Gateway::cli(args, None, &[], EXIT).await;
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("invalid value"), "{}", run.stderr);
    }
    let dir = tempfile::tempdir().unwrap();
    let unreadable = Gateway::cli(&["receipts", "--path", dir.path().to_str().unwrap()], None, &[], EXIT).await;
    assert_eq!(unreadable.code, 1);
    assert!(
        unreadable.stderr.contains("cannot read the receipts journal"),
        "{}",
        unreadable.stderr
    );
    let help = Gateway::cli(&["receipts", "--help"], None, &[], EXIT).await;
    assert_eq!(help.code, 0);
    assert!(
        help.stdout.contains("--outcome ambiguous") && help.stdout.contains("Examples:"),
        "{}",
        help.stdout
    );
}
