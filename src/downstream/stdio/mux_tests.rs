//! Many requests in flight to one child (python3 peers, real pipes): pipe ids and the
//! callers' own ids and tokens put back, cancels, the channel's bound, and what a death
//! or a child slow to read does to each request.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::tests::*;
use super::*;
use crate::downstream::{LegOutcome, Notification};
use crate::protocol::WireHeaders;
use crate::strict::Fence;

fn settings_with(max_concurrent: usize) -> StdioSettings {
    StdioSettings {
        max_concurrent: NonZeroUsize::new(max_concurrent).unwrap(),
        ..settings()
    }
}

/// `concurrent.py` logging every line it reads to `received.log` in a fresh folder (kept
/// alive by the returned `TempDir`), behind a transport and a fence 4 wide.
fn logged_concurrent_peer() -> (tempfile::TempDir, std::path::PathBuf, Arc<StdioTransport>, Fence) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("received.log");
    let (t, _) = transport_with(
        peer("concurrent.py", &["--log", log.to_str().unwrap()]),
        settings_with(4),
    );
    (dir, log, Arc::new(t), Fence::new(false, 4))
}

fn session(id: &str) -> WireHeaders {
    vec![("Mcp-Session-Id".to_owned(), vec![id.to_owned()])]
}

/// A `tools/call` with `id` given as raw JSON text.
fn call(id: &str, tool: &str, arguments: Value) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    )
}

/// A `sleep` call carrying a progress token (raw JSON text).
fn sleep_with_token(id: &str, token: &str, ms: u64, text: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":{ms},"text":"{text}"}},"_meta":{{"progressToken":{token}}}}}}}"#
    )
}

/// Starts one call as the dispatcher would: its own admission, its own task.
fn start(
    t: &Arc<StdioTransport>,
    fence: &Fence,
    json: String,
    headers: WireHeaders,
    within: Duration,
) -> JoinHandle<(LegResult, Vec<Notification>)> {
    let (t, fence) = (t.clone(), fence.clone());
    tokio::spawn(async move {
        let adm = admit(&fence).await;
        send_with(&t, &adm, &json, within, headers).await
    })
}

fn text_of(result: &LegResult) -> String {
    response_json(result)["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {:?}", result.reply.resp_json))
        .to_owned()
}

/// The lines the peer logged, parsed.
fn logged(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

impl StdioTransport {
    /// Live and retired entries of the current child's id map.
    fn map_sizes(&self) -> (usize, usize) {
        self.shared.lock().child.as_ref().map_or((0, 0), |c| c.map_sizes())
    }

    /// Whether a line is being written (the writer lock is held).
    fn is_writing(&self) -> bool {
        self.shared.writer.try_lock().is_err()
    }
}

#[tokio::test]
async fn eight_overlapping_calls_are_in_flight_at_once_and_each_answer_reaches_its_caller() {
    bounded(async {
        let (t, _) = transport_with(peer("concurrent.py", &[]), settings_with(8));
        let t = Arc::new(t);
        let fence = Fence::new(false, 8);
        // Colliding ids of every type, from two callers.
        let ids = [
            ("A", "1"),
            ("B", "1"),
            ("A", "\"1\""),
            ("B", r#""q\"\\ \u00e9""#),
            ("A", "2.50"),
            ("B", "-3"),
            ("A", "\"\""),
            ("B", "1"),
        ];
        // The peer answers only once all eight are in flight at once, the last first.
        let calls: Vec<_> = ids
            .iter()
            .map(|(who, id)| {
                let json = call(id, "gather", json!({"n": 8, "timeout_ms": 8000}));
                start(&t, &fence, json, session(who), ANSWER_WITHIN)
            })
            .collect();
        for ((_, id), call) in ids.iter().zip(calls) {
            let (result, _) = call.await.unwrap();
            assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
            assert_eq!(
                result.reply.resp_json.as_ref().unwrap().get(),
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"gathered 8"}}]}}}}"#
                ),
                "the caller's own id, every other byte as the child printed it"
            );
        }
        assert_eq!(t.map_sizes(), (0, 0));
    })
    .await;
}

#[tokio::test]
async fn duplicate_ids_and_progress_tokens_from_two_callers_each_get_their_own_answer_and_progress() {
    bounded(async {
        let (_dir, log, t, fence) = logged_concurrent_peer();
        let a = start(&t, &fence, sleep_with_token("1", "\"tok\"", 400, "for A"), session("A"), ANSWER_WITHIN);
        let b = start(&t, &fence, sleep_with_token("1", "\"tok\"", 400, "for B"), session("B"), ANSWER_WITHIN);
        for (who, call) in [("A", a), ("B", b)] {
            let (result, notes) = call.await.unwrap();
            assert_answered(&result, 1);
            assert_eq!(text_of(&result), format!("for {who}"));
            let notes: Vec<&str> = notes.iter().map(|n| n.resp_json.get()).collect();
            assert_eq!(
                notes,
                [format!(
                    r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"tok","progress":1,"total":2,"message":"for {who}"}}}}"#
                )],
                "{who}'s own progress, with its own token"
            );
        }
        // On the pipe: two ids the child could tell apart, each request's token its id.
        let sent = logged(&log);
        assert_eq!(sent.len(), 2);
        assert_ne!(sent[0]["id"], sent[1]["id"]);
        for line in &sent {
            assert_eq!(line["params"]["_meta"]["progressToken"], line["id"]);
        }
    })
    .await;
}

#[tokio::test]
async fn a_cancel_reaches_only_its_own_callers_request() {
    bounded(async {
        let (_dir, log, t, fence) = logged_concurrent_peer();
        let a = start(
            &t,
            &fence,
            call("1", "sleep", json!({"ms": 8000, "text": "A"})),
            session("A"),
            ANSWER_WITHIN,
        );
        let b = start(
            &t,
            &fence,
            call("1", "sleep", json!({"ms": 1000, "text": "B"})),
            session("B"),
            ANSWER_WITHIN,
        );
        eventually("both requests reached the child", || logged(&log).len() == 2).await;
        let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user"}}"#;

        // A third caller has no request with that id: acknowledged, never written.
        let (other, _) = send_with(&t, &admit(&fence).await, cancel, ANSWER_WITHIN, session("C")).await;
        assert_eq!((other.outcome, other.reply.resp_code), (LegOutcome::Answered, 200));
        // A's cancel goes out with the pipe id of A's request.
        let (ack, _) = send_with(&t, &admit(&fence).await, cancel, ANSWER_WITHIN, session("A")).await;
        assert_eq!((ack.outcome, ack.reply.resp_code), (LegOutcome::Answered, 200));

        let (a, _) = a.await.unwrap();
        assert_answered(&a, 1);
        assert_eq!(text_of(&a), "cancelled");
        let (b, _) = b.await.unwrap();
        assert_answered(&b, 1);
        assert_eq!(text_of(&b), "B", "B's request ran to its end");

        let sent = logged(&log);
        let a_pipe = sent
            .iter()
            .find(|l| l["params"]["arguments"]["text"] == "A")
            .map(|l| l["id"].clone())
            .unwrap();
        let cancels: Vec<&Value> = sent
            .iter()
            .filter(|l| l["method"] == "notifications/cancelled")
            .collect();
        assert_eq!(cancels.len(), 1, "C's cancel was not written: {sent:?}");
        assert_eq!(cancels[0]["params"], json!({"requestId": a_pipe, "reason": "user"}));
    })
    .await;
}

#[tokio::test]
async fn a_child_that_dies_with_five_requests_in_flight_abandons_each_once_and_resends_nothing() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (log, pidfile) = (dir.path().join("received.log"), dir.path().join("pid"));
        let (t, metrics) = transport_with(
            peer(
                "concurrent.py",
                &["--log", log.to_str().unwrap(), "--pidfile", pidfile.to_str().unwrap()],
            ),
            settings_with(8),
        );
        let t = Arc::new(t);
        let fence = Fence::new(false, 8);
        let calls: Vec<_> = (0..5)
            .map(|i| {
                let json = call(&i.to_string(), "sleep", json!({"ms": 20000}));
                start(&t, &fence, json, Vec::new(), ANSWER_WITHIN)
            })
            .collect();
        eventually("five requests reached the child", || logged(&log).len() == 5).await;
        let pid: i32 = read_when_present(&pidfile).await.parse().unwrap();
        let _cleanup = KillOnDrop(Some(pid));
        kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();

        for (i, call) in calls.into_iter().enumerate() {
            let (result, _) = call.await.unwrap();
            assert_child_exited(&result);
            assert_eq!(response_json(&result)["id"], i, "its own caller's id");
        }
        std::fs::remove_file(&pidfile).unwrap();
        let (next, _) = send(
            &t,
            &admit(&fence).await,
            &call("\"next\"", "sleep", json!({"ms": 0, "text": "new child"})),
            ANSWER_WITHIN,
        )
        .await;
        assert_eq!(text_of(&next), "new child");
        assert_eq!(response_json(&next)["id"], "next");
        let _cleanup_new = KillOnDrop(read_when_present(&pidfile).await.parse().ok());
        assert_eq!(t.status().generation, 2);
        let sent = logged(&log);
        assert_eq!(sent.len(), 6, "nothing was re-sent to the new child: {sent:?}");
        assert_eq!(sent[5]["params"]["arguments"]["text"], "new child");
        assert_eq!(metric(&metrics, LATE_RESPONSES), Some(0.0));
    })
    .await;
}

/// A child that never reads its stdin (so a large write stalls once the pipe is full).
const NEVER_READS: &str = "import os, sys, time
with open(sys.argv[1] + '.tmp', 'w') as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + '.tmp', sys.argv[1])
time.sleep(60)
";

#[tokio::test]
async fn a_request_queued_behind_a_write_when_the_child_dies_is_not_sent() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let argv = vec![
            "python3".to_owned(),
            "-c".to_owned(),
            NEVER_READS.to_owned(),
            pidfile.to_str().unwrap().to_owned(),
        ];
        let (t, _) = transport_with(argv, settings_with(4));
        let t = Arc::new(t);
        let fence = Fence::new(false, 4);
        t.open(&admit(&fence).await).await.unwrap();
        let pid: i32 = read_when_present(&pidfile).await.parse().unwrap();
        let _cleanup = KillOnDrop(Some(pid));

        let big = call("1", "echo", json!({"text": "x".repeat(1 << 20)}));
        let stuck = start(&t, &fence, big, Vec::new(), ANSWER_WITHIN);
        eventually("the large line is being written", || t.is_writing()).await;
        let queued = start(&t, &fence, TOOLS_LIST.to_owned(), Vec::new(), ANSWER_WITHIN);
        // Single-threaded runtime: the queued call runs up to its wait for the writer.
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        assert!(!queued.is_finished());
        kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();

        let (stuck, _) = stuck.await.unwrap();
        assert_row(
            &stuck,
            LegFailure::ChildPipeBroken,
            LegOutcome::Abandoned,
            "transport_closed",
            Some("closed_pipe"),
            A,
        );
        let (queued, _) = queued.await.unwrap();
        assert_child_not_running(&queued);
    })
    .await;
}

#[tokio::test]
async fn a_child_slow_to_read_holds_up_writers_but_not_answers_already_read() {
    bounded(async {
        let (_dir, log, t, fence) = logged_concurrent_peer();
        let first = start(
            &t,
            &fence,
            call("\"first\"", "sleep", json!({"ms": 700, "text": "first"})),
            Vec::new(),
            ANSWER_WITHIN,
        );
        eventually("the first request reached the child", || logged(&log).len() == 1).await;
        // The child stops reading its stdin for 4 s ...
        let (stall, _) = send(
            &t,
            &admit(&fence).await,
            &call("2", "stall", json!({"ms": 4000})),
            ANSWER_WITHIN,
        )
        .await;
        assert_eq!(text_of(&stall), "stalling");
        // ... so a line larger than the pipe cannot be written meanwhile.
        let big = start(
            &t,
            &fence,
            call("3", "sleep", json!({"ms": 0, "text": "y".repeat(512 * 1024)})),
            Vec::new(),
            ANSWER_WITHIN,
        );
        eventually("the large line is being written", || t.is_writing()).await;

        let (first, _) = first.await.unwrap();
        assert_eq!(text_of(&first), "first", "answered while a write is held up");
        assert!(
            t.is_writing() && !big.is_finished(),
            "the large line is still being written"
        );
        let (big, _) = big.await.unwrap();
        assert_answered(&big, 3);
    })
    .await;
}

#[tokio::test]
async fn the_channel_bound_caps_the_requests_in_flight_to_the_child() {
    bounded(async {
        let (t, _) = transport_with(peer("concurrent.py", &[]), settings_with(2));
        let t = Arc::new(t);
        let fence = Fence::new(false, 8);
        let calls: Vec<_> = (0..4)
            .map(|i| {
                let json = call(&i.to_string(), "sleep", json!({"ms": 300}));
                start(&t, &fence, json, Vec::new(), ANSWER_WITHIN)
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            assert_answered(&call.await.unwrap().0, i as u64);
        }
        let (stats, _) = send(&t, &admit(&fence).await, &call("9", "stats", json!({})), ANSWER_WITHIN).await;
        assert_eq!(text_of(&stats), "2", "never more than the channel's bound at once");
    })
    .await;
}

#[tokio::test]
async fn a_child_that_never_answers_leaves_a_bounded_id_map() {
    bounded(async {
        let argv = vec![
            "python3".to_owned(),
            "-c".to_owned(),
            "import sys\nfor _ in sys.stdin: pass\n".to_owned(),
        ];
        let (t, metrics) = transport_with(argv, settings_with(4));
        let t = Arc::new(t);
        let fence = Fence::new(false, 4);
        t.open(&admit(&fence).await).await.unwrap();
        for round in 0..10 {
            let calls: Vec<_> = (0..4)
                .map(|i| {
                    let json = call(&format!("{}", round * 4 + i), "echo", json!({}));
                    start(&t, &fence, json, Vec::new(), Duration::from_millis(150))
                })
                .collect();
            for call in calls {
                let (result, _) = call.await.unwrap();
                assert_timed_out_after_write(&result);
            }
        }
        // 40 retired requests: none live, and only the latest 16 remembered.
        assert_eq!(t.map_sizes(), (0, 16));
        assert_eq!(t.status().generation, 1, "the child is kept");
        assert_eq!(metric(&metrics, LATE_RESPONSES), Some(0.0));
    })
    .await;
}

#[tokio::test]
async fn a_request_whose_token_cannot_be_located_exactly_is_not_sent() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, _) = transport(peer("echo.py", &["--log", log.to_str().unwrap()]));
        let adm = admit(&Fence::new(false, 4)).await;
        let repeated = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":1},"_meta":{"progressToken":2}}}"#;
        let (result, _) = send(&t, &adm, repeated, ANSWER_WITHIN).await;
        assert_row(
            &result,
            LegFailure::InternalBeforeSend,
            LegOutcome::NotSent,
            "client_internal",
            Some("unknown"),
            N,
        );
        assert_eq!(response_json(&result)["id"], 4);
        assert_eq!(t.status().generation, 0, "nothing was started or written for it");
        assert!(!log.exists());
    })
    .await;
}

#[tokio::test]
async fn messages_not_tied_to_a_request_go_to_the_oldest_request_in_flight() {
    bounded(async {
        // Prints a log notification, then answers each request after `_delay_ms`.
        let script = r#"
import json, sys, threading, time
def answer(req):
    time.sleep(req["params"]["_delay_ms"] / 1000)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": {}}) + "\n")
    sys.stdout.flush()
for raw in sys.stdin:
    req = json.loads(raw)
    if req["params"].get("note"):
        sys.stdout.write('{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}\n')
        sys.stdout.flush()
    threading.Thread(target=answer, args=(req,)).start()
"#;
        let (t, _) = transport_with(
            vec!["python3".to_owned(), "-c".to_owned(), script.to_owned()],
            settings_with(4),
        );
        let t = Arc::new(t);
        let fence = Fence::new(false, 4);
        let older = start(
            &t,
            &fence,
            r#"{"jsonrpc":"2.0","id":"older","method":"ping","params":{"_delay_ms":3000}}"#.to_owned(),
            Vec::new(),
            ANSWER_WITHIN,
        );
        eventually("the older request is in flight", || t.map_sizes().0 == 1).await;
        let (newer, newer_notes) = send(
            &t,
            &admit(&fence).await,
            r#"{"jsonrpc":"2.0","id":"newer","method":"ping","params":{"_delay_ms":100,"note":true}}"#,
            ANSWER_WITHIN,
        )
        .await;
        assert_eq!(newer.outcome, LegOutcome::Answered);
        assert!(newer_notes.is_empty(), "the message went to the oldest request");
        let (older, older_notes) = older.await.unwrap();
        assert_eq!(older.outcome, LegOutcome::Answered);
        assert_eq!(older_notes.len(), 1);
        assert!(older_notes[0].resp_json.get().contains("notifications/message"));
    })
    .await;
}
