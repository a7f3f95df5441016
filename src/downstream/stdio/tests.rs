//! Real children (python3 peers under `tests/peers/stdio/`), real pipes, real time with
//! short explicit bounds.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::*;
use crate::app::GatewayLabels;
pub(super) use crate::downstream::test_support::{
    assert_not_admitted, assert_row, assert_timed_out_after_write, response_json, A, N,
};
use crate::downstream::{LegOutcome, Notification};
use crate::protocol::JsonRpcPayload;
use crate::strict::{CommandRef, FatalCategory, Fence};

pub(super) const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/stdio");
pub(super) const CHANNEL: &str = "t";
/// No test may run longer than this, whatever goes wrong.
const TEST_BOUND: Duration = Duration::from_secs(30);
/// Deadline of calls that must be answered: generous, it only matters when a test fails
/// (python startup on a loaded machine can take seconds).
pub(super) const ANSWER_WITHIN: Duration = Duration::from_secs(10);

pub(super) fn peer(script: &str, args: &[&str]) -> Vec<String> {
    let mut argv = vec!["python3".to_owned(), format!("{PEERS}/{script}")];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    argv
}

pub(super) fn settings() -> StdioSettings {
    StdioSettings {
        request_timeout: Duration::from_secs(15),
        restart_backoff_min: Duration::from_millis(100),
        restart_backoff_max: Duration::from_secs(1),
        stop_grace: Duration::from_millis(300),
        max_concurrent: std::num::NonZeroUsize::new(4).unwrap(),
        guard: None,
        // The pipe as the mux sees it; the gateway's own handshake has tests of its own.
        session: SessionSettings {
            mode: SessionMode::PassThrough,
            ..SessionSettings::default()
        },
        input_required: super::InputRequiredSettings::default(),
    }
}

/// The gateway's environment as the transport would see it, with credentials in it.
fn gateway_env() -> Vec<(String, String)> {
    vec![
        (
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned()),
        ),
        ("HOME".to_owned(), "/nonexistent".to_owned()),
        ("TUNNELGATE_X".to_owned(), "must-not-leak".to_owned()),
        ("CONTROL_PLANE_API_KEY".to_owned(), "sk-must-not-leak".to_owned()),
        ("UNRELATED_SECRET".to_owned(), "must-not-leak".to_owned()),
    ]
}

fn configured_env() -> BTreeMap<String, String> {
    BTreeMap::from([("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned())])
}

pub(super) fn transport_with(command: Vec<String>, settings: StdioSettings) -> (StdioTransport, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(false, &[CHANNEL.to_owned()]));
    let t = StdioTransport::with_base_env(
        CHANNEL,
        command,
        &configured_env(),
        gateway_env(),
        settings,
        metrics.clone(),
    );
    (t, metrics)
}

pub(super) fn transport(command: Vec<String>) -> (StdioTransport, Arc<Metrics>) {
    transport_with(command, settings())
}

pub(super) async fn admit(fence: &Fence) -> Admission {
    fence.admit(CommandRef::new("req", CHANNEL, None)).await.unwrap()
}

async fn admission() -> Admission {
    admit(&Fence::new(false, 4)).await
}

pub(super) fn payload(json: &str) -> JsonRpcPayload {
    JsonRpcPayload::from_raw(RawValue::from_string(json.to_owned()).unwrap()).unwrap()
}

/// One call with a deadline `within` from now; returns the result and what reached the sink.
pub(super) async fn send(
    t: &StdioTransport,
    admission: &Admission,
    json: &str,
    within: Duration,
) -> (LegResult, Vec<Notification>) {
    send_with(t, admission, json, within, Vec::new()).await
}

/// As [`send`], with the command's headers (`Mcp-Session-Id` tells callers apart).
pub(super) async fn send_with(
    t: &StdioTransport,
    admission: &Admission,
    json: &str,
    within: Duration,
    headers: crate::protocol::WireHeaders,
) -> (LegResult, Vec<Notification>) {
    let p = payload(json);
    let (tx, mut rx) = mpsc::channel(16);
    let req = DownstreamRequest {
        payload: &p,
        headers: &headers,
        deadline: Some(Instant::now() + within),
    };
    let result = t.call(admission, &req, &tx).await;
    drop(tx);
    let mut notes = Vec::new();
    while let Ok(n) = rx.try_recv() {
        notes.push(n);
    }
    (result, notes)
}

pub(super) fn assert_answered(result: &LegResult, id: u64) {
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    assert_eq!(result.reply.resp_code, 200);
    assert_eq!(result.reply.resp_type, RespType::JsonrpcResponse);
    assert_eq!(
        result.reply.resp_headers.get("Content-Type"),
        Some(&vec!["application/json".to_owned()])
    );
    assert_eq!(response_json(result)["id"], id);
}

pub(super) fn assert_failed(result: &LegResult, failure: LegFailure, outcome: LegOutcome) {
    assert_eq!(result.failure.as_ref(), Some(&failure));
    assert_eq!(result.outcome, outcome);
}

/// The row of a request cut short by its child's exit: abandoned at the pipe's EOF.
#[track_caller]
pub(super) fn assert_child_exited(result: &LegResult) {
    assert_row(
        result,
        LegFailure::ChildExited,
        LegOutcome::Abandoned,
        "transport_closed",
        Some("eof"),
        A,
    );
}

/// The row of a request refused because no child was running: nothing was sent.
#[track_caller]
pub(super) fn assert_child_not_running(result: &LegResult) {
    assert_row(
        result,
        LegFailure::ChildNotRunning,
        LegOutcome::NotSent,
        "transport_closed",
        Some("closed_pipe"),
        N,
    );
}

/// Runs a test body under [`TEST_BOUND`].
pub(super) async fn bounded(body: impl Future<Output = ()>) {
    tokio::time::timeout(TEST_BOUND, body)
        .await
        .expect("the test exceeded its time bound");
}

/// Waits for a condition, at most 10 s.
pub(super) async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(super) async fn read_when_present(path: &Path) -> String {
    eventually("the peer wrote its file", || path.exists()).await;
    std::fs::read_to_string(path).unwrap()
}

/// The series of channel `t` (the [`CHANNEL`] of every test) that the tests read.
pub(super) const UP: &str = "tunnelgate_stdio_up{channel=\"t\"}";
pub(super) const RESTARTS: &str = "tunnelgate_stdio_restarts_total{channel=\"t\"}";
pub(super) const LATE_RESPONSES: &str = "tunnelgate_stdio_late_responses_total{channel=\"t\"}";
pub(super) const INVALID_LINES: &str = "tunnelgate_stdio_stdout_invalid_lines_total";

pub(super) fn metric(metrics: &Metrics, series: &str) -> Option<f64> {
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

fn is_alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

/// Whether `pid` is a live process: a zombie (killed, not yet reaped by whichever
/// ancestor inherited it) counts as gone.
fn is_running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the parenthesised command name.
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next());
        !matches!(state, Some(Some('Z' | 'X')))
    })
}

impl StdioTransport {
    fn is_held(&self) -> bool {
        self.shared.lock().child.as_ref().is_some_and(|c| c.held.is_cancelled())
    }

    fn has_unreaped_child(&self) -> bool {
        self.shared.lock().child.is_some()
    }

    fn discarded_responses(&self) -> u64 {
        self.shared.discarded_responses.load(Ordering::Relaxed)
    }
}

/// Kills a stray process when a test ends, however it ends.
pub(super) struct KillOnDrop(pub(super) Option<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
pub(super) const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

#[tokio::test]
async fn a_well_behaved_child_answers_each_request_with_its_exact_response_line() {
    bounded(async {
        let (t, metrics) = transport(peer("echo.py", &[]));
        let adm = admission().await;
        assert_eq!(t.status().generation, 0);
        assert!(!t.status().up);

        let (init, notes) = send(&t, &adm, INITIALIZE, ANSWER_WITHIN).await;
        assert_answered(&init, 1);
        assert!(notes.is_empty());
        assert_eq!(
            response_json(&init)["result"]["serverInfo"]["name"],
            "tunnelgate-stdio-peer"
        );

        let (list, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&list, 2);

        let call =
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#;
        let (echo, _) = send(&t, &adm, call, ANSWER_WITHIN).await;
        assert_eq!(
            echo.reply.resp_json.as_ref().unwrap().get(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
            "the reply is the child's line, byte for byte"
        );

        let status = t.status();
        assert_eq!(
            (
                status.channel.as_str(),
                status.transport.as_str(),
                status.up,
                status.generation
            ),
            (CHANNEL, "stdio", true, 1)
        );
        assert_eq!(metric(&metrics, UP), Some(1.0));
        assert_eq!(metric(&metrics, RESTARTS), Some(0.0));
        t.shutdown().await;
        assert!(!t.status().up);
        assert_eq!(metric(&metrics, UP), Some(0.0));
    })
    .await;
}

#[tokio::test]
async fn progress_notifications_reach_the_sink_before_the_response() {
    bounded(async {
        let (t, _) = transport(peer("echo.py", &[]));
        let adm = admission().await;
        let call = r#"{"jsonrpc":"2.0","id":"p-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},"_meta":{"progressToken":"tok"}}}"#;
        let (result, notes) = send(&t, &adm, call, ANSWER_WITHIN).await;
        assert_eq!(result.outcome, LegOutcome::Answered);
        assert_eq!(response_json(&result)["id"], "p-1");
        assert_eq!(notes.len(), 1);
        assert_eq!(
            notes[0].resp_json.get(),
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":1,"total":1}}"#
        );
        assert!(notes[0].resp_headers.is_empty());
    })
    .await;
}

#[tokio::test]
async fn notifications_are_acknowledged_with_200_once_written() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, _) = transport(peer("echo.py", &["--log", log.to_str().unwrap()]));
        let adm = admission().await;
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let (result, _) = send(&t, &adm, note, ANSWER_WITHIN).await;
        assert_eq!(result.outcome, LegOutcome::Answered);
        assert_eq!(result.reply.resp_type, RespType::NotifyAck);
        assert_eq!(result.reply.resp_code, 200);
        assert!(result.reply.resp_json.is_none());
        // The child took the line: the next request is answered after it, in order.
        let (list, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&list, 2);
        t.shutdown().await;
        let received = std::fs::read_to_string(&log).unwrap();
        // The request went with the child's first pipe id; every other byte is the caller's.
        assert_eq!(
            received.lines().collect::<Vec<_>>(),
            [note, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#]
        );
    })
    .await;
}

#[tokio::test]
async fn a_notification_reaches_the_child_while_a_request_is_in_flight() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, _) = transport(peer("echo.py", &["--log", log.to_str().unwrap()]));
        let t = Arc::new(t);
        let fence = Fence::new(false, 4);
        let adm = admit(&fence).await;
        t.open(&adm).await.unwrap();
        let slow = r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_delay_ms":1500}}"#;
        let request = tokio::spawn({
            let t = t.clone();
            async move { send(&t, &adm, slow, ANSWER_WITHIN).await.0 }
        });
        eventually("the child read the slow request", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("_delay_ms"))
        })
        .await;

        let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#;
        let started = Instant::now();
        let (ack, _) = send(&t, &admit(&fence).await, cancel, ANSWER_WITHIN).await;
        assert_eq!((ack.outcome, ack.reply.resp_code), (LegOutcome::Answered, 200));
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "not queued behind the request: {:?}",
            started.elapsed()
        );
        assert!(!request.is_finished(), "the request is still in flight");
        assert_answered(&request.await.unwrap(), 5);
        // The cancel named the request by its pipe id, the one the child knows (it logs the
        // cancel once it has answered the request).
        eventually("the child read the cancel", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.lines().count() == 2)
        })
        .await;
        let received = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            received.lines().collect::<Vec<_>>(),
            [
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_delay_ms":1500}}"#,
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn session_termination_is_answered_without_touching_the_child() {
    bounded(async {
        let (t, _) = transport(peer("echo.py", &[]));
        let result = t.terminate_session(&admission().await).await;
        assert_eq!(result.outcome, LegOutcome::Answered);
        assert_eq!(result.reply.resp_code, 204);
        assert_eq!(result.reply.resp_type, RespType::SessionTerminationResponse);
        assert!(result.reply.resp_json.is_none());
        assert_eq!(t.status().generation, 0, "no child was spawned for it");
    })
    .await;
}

#[tokio::test]
async fn garbage_lines_are_counted_and_skipped_and_the_answer_is_delivered() {
    bounded(async {
        let (t, metrics) = transport(peer("echo.py", &["--garbage"]));
        let adm = admission().await;
        let (result, notes) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&result, 2);
        assert!(notes.is_empty(), "garbage is never forwarded");
        // Four non-JSON lines (the blank one is not counted), all before the answer.
        assert_eq!(metric(&metrics, INVALID_LINES), Some(4.0));
        let (again, _) = send(&t, &adm, INITIALIZE, ANSWER_WITHIN).await;
        assert_answered(&again, 1);
        assert_eq!(metric(&metrics, INVALID_LINES), Some(8.0));
        assert_eq!(t.status().generation, 1, "garbage is never fatal");
    })
    .await;
}

/// Collects formatted log output in memory.
#[derive(Clone, Default)]
struct Capture(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Captures this thread's log output (INFO and up) while the returned guards live.
    /// Only for current-thread runtimes: the child's tasks then log on this thread.
    fn this_thread() -> (Self, tracing::subscriber::DefaultGuard, tracing::Dispatch) {
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // With a single registered dispatcher, tracing computes a new callsite's interest
        // from the default of whichever thread hits it first (another test's, with none); a
        // second live dispatcher makes it combine all of them, so this thread's events are
        // kept.
        let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        (capture, guard, second)
    }
}

#[tokio::test]
async fn stderr_is_logged_redacted_and_stdout_garbage_by_length_only() {
    let (capture, _guard, _second) = Capture::this_thread();
    bounded(async {
        let (t, _) = transport(peer("echo.py", &["--garbage"]));
        let adm = admission().await;
        let (result, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&result, 2);
        eventually("the stderr line is logged", || {
            capture.text().contains("tunnelgate::stdio_child")
        })
        .await;
        t.shutdown().await;
    })
    .await;
    let logs = capture.text();
    assert!(logs.contains("echo peer ready token=[redacted]"), "{logs}");
    assert!(!logs.contains("abc123"), "{logs}");
    assert!(
        logs.contains("len=15"),
        "the garbage line is logged by its length: {logs}"
    );
    assert!(
        !logs.contains("hello, not json") && !logs.contains("unterminated"),
        "no stdout content in logs: {logs}"
    );
    assert!(!logs.contains("tools"), "no payload in logs: {logs}");
}

#[tokio::test]
async fn a_child_that_exits_after_reading_the_request_is_abandoned_and_restarts_as_generation_2() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        let (t, metrics) = transport(peer("exit_after_read.py", &[marker.to_str().unwrap()]));
        let adm = admission().await;
        let (first, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_child_exited(&first);
        assert_eq!(first.reply.resp_type, RespType::JsonrpcResponse);
        assert_eq!(
            response_json(&first)["id"],
            2,
            "the synthesized error echoes the request id"
        );

        let (second, _) = send(&t, &adm, INITIALIZE, ANSWER_WITHIN).await;
        assert_answered(&second, 1);
        let status = t.status();
        assert_eq!((status.up, status.generation), (true, 2));
        assert_eq!(metric(&metrics, RESTARTS), Some(1.0));
    })
    .await;
}

#[tokio::test]
async fn a_child_that_exits_mid_response_leaves_the_request_abandoned() {
    bounded(async {
        let (t, metrics) = transport(peer("partial_response.py", &[]));
        let adm = admission().await;
        let (result, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_child_exited(&result);
        eventually("the partial line is counted", || {
            metric(&metrics, INVALID_LINES) == Some(1.0)
        })
        .await;
        eventually("the child is seen down", || !t.status().up).await;
    })
    .await;
}

#[tokio::test]
async fn a_request_past_its_deadline_is_retired_and_its_late_answer_discarded() {
    bounded(async {
        let (t, _) = transport(peer("echo.py", &[]));
        let adm = admission().await;
        let slow = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_delay_ms":800}}"#;
        let started = Instant::now();
        let (late, _) = send(&t, &adm, slow, Duration::from_millis(300)).await;
        let took = started.elapsed();
        assert_timed_out_after_write(&late);
        assert_eq!(late.reply.resp_code, 504);
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(3),
            "{took:?}"
        );

        // The child is kept; its answer to id 7 arrives first and must not be taken for id 2.
        let (next, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&next, 2);
        assert_eq!(t.discarded_responses(), 1);
        let status = t.status();
        assert_eq!((status.up, status.generation), (true, 1));
    })
    .await;
}

/// A child that first answers an id nobody asked about, then (after `_delay_ms`) the request.
const STRAY_THEN_ANSWER: &str = r#"
import json, sys, time
for raw in sys.stdin:
    req = json.loads(raw)
    if "id" not in req or "method" not in req:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": "nobody-asked", "result": {}}), flush=True)
    time.sleep(req.get("params", {}).get("_delay_ms", 0) / 1000)
    print(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": {}}), flush=True)
"#;

#[tokio::test]
async fn a_late_answer_counts_as_a_late_response_of_its_channel_and_an_unknown_id_does_not() {
    bounded(async {
        let (t, metrics) = transport(vec![
            "python3".to_owned(),
            "-c".to_owned(),
            STRAY_THEN_ANSWER.to_owned(),
        ]);
        let adm = admission().await;
        assert_eq!(metric(&metrics, LATE_RESPONSES), Some(0.0));

        // Answered in time, after a response with an id no request had.
        let (answered, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&answered, 2);
        assert_eq!(t.discarded_responses(), 1);
        assert_eq!(metric(&metrics, LATE_RESPONSES), Some(0.0));

        // Retired at its deadline; its answer comes later and is discarded as late.
        let slow = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_delay_ms":800}}"#;
        let (late, _) = send(&t, &adm, slow, Duration::from_millis(300)).await;
        assert_failed(&late, LegFailure::TimeoutAfterWrite, LegOutcome::Abandoned);
        eventually("the late answer is counted", || {
            metric(&metrics, LATE_RESPONSES) == Some(1.0)
        })
        .await;
        assert_eq!(t.discarded_responses(), 3);
    })
    .await;
}

#[tokio::test]
async fn an_initialize_that_times_out_kills_the_child_and_the_next_call_restarts_it() {
    bounded(async {
        let (t, metrics) = transport(peer("echo.py", &[]));
        let adm = admission().await;
        let slow_init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"_delay_ms":5000}}"#;
        let (result, _) = send(&t, &adm, slow_init, Duration::from_millis(300)).await;
        assert_timed_out_after_write(&result);
        eventually("the child is killed", || !t.status().up).await;

        let (next, _) = send(&t, &adm, INITIALIZE, ANSWER_WITHIN).await;
        assert_answered(&next, 1);
        assert_eq!(t.status().generation, 2);
        assert_eq!(metric(&metrics, RESTARTS), Some(1.0));
    })
    .await;
}

#[tokio::test]
async fn the_child_never_sees_gateway_variables_but_gets_the_configured_ones() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env.json");
        let configured = BTreeMap::from([
            ("LOG_LEVEL".to_owned(), "debug".to_owned()),
            ("TUNNELGATE_FROM_CONFIG".to_owned(), "must-not-leak".to_owned()),
            ("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()),
        ]);
        let metrics = Arc::new(Metrics::new::<GatewayLabels>(false, &[]));
        let t = StdioTransport::with_base_env(
            CHANNEL,
            peer("echo.py", &["--env-out", out.to_str().unwrap()]),
            &configured,
            gateway_env(),
            settings(),
            metrics,
        );
        t.open(&admission().await).await.unwrap();
        let env: BTreeMap<String, String> = serde_json::from_str(&read_when_present(&out).await).unwrap();
        assert_eq!(env.get("LOG_LEVEL").map(String::as_str), Some("debug"));
        assert_eq!(env.get("HOME").map(String::as_str), Some("/nonexistent"));
        assert!(env.contains_key("PATH"));
        for leaked in [
            "TUNNELGATE_X",
            "CONTROL_PLANE_API_KEY",
            "UNRELATED_SECRET",
            "TUNNELGATE_FROM_CONFIG",
        ] {
            assert!(!env.contains_key(leaked), "{leaked} reached the child");
        }
        assert!(!env.values().any(|v| v.contains("must-not-leak")));
    })
    .await;
}

#[tokio::test]
async fn a_child_that_ignores_sigterm_is_killed_with_its_process_group_within_bounds_on_shutdown() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (pidfile, termfile, grandfile) = (
            dir.path().join("pid"),
            dir.path().join("term"),
            dir.path().join("grandchild"),
        );
        let grace = Duration::from_millis(200);
        let (t, _) = transport_with(
            peer(
                "ignore_sigterm.py",
                &[
                    pidfile.to_str().unwrap(),
                    termfile.to_str().unwrap(),
                    grandfile.to_str().unwrap(),
                ],
            ),
            StdioSettings {
                stop_grace: grace,
                ..settings()
            },
        );
        t.open(&admission().await).await.unwrap();
        let pid: i32 = read_when_present(&pidfile).await.parse().unwrap();
        let _cleanup = KillOnDrop(Some(pid));
        let grandchild: i32 = read_when_present(&grandfile).await.parse().unwrap();
        let _cleanup_grandchild = KillOnDrop(Some(grandchild));
        assert!(is_running(grandchild));

        let started = Instant::now();
        t.shutdown().await;
        let took = started.elapsed();
        assert!(
            took >= grace * 2,
            "stdin close and SIGTERM each get their grace: {took:?}"
        );
        assert!(took < grace * 4 + Duration::from_secs(3), "{took:?}");
        assert!(!is_alive(pid), "SIGKILL ended it");
        // It ignores SIGTERM and would sleep 30 s: only the group's SIGKILL ends it sooner.
        eventually("the grandchild in the child's group is gone", || {
            !is_running(grandchild)
        })
        .await;
        assert_eq!(
            std::fs::read_to_string(&termfile).unwrap(),
            "term\n",
            "SIGTERM came first"
        );
        assert!(!t.status().up);

        // Stopped means stopped.
        let (after, _) = send(&t, &admission().await, TOOLS_LIST, Duration::from_secs(1)).await;
        assert_failed(&after, LegFailure::ChildNotRunning, LegOutcome::NotSent);
        assert_eq!(t.status().generation, 1);
    })
    .await;
}

#[tokio::test]
async fn a_grandchild_holding_the_pipes_holds_the_channel_until_it_is_reaped_and_is_reported_once() {
    let (capture, _guard, _second) = Capture::this_thread();
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (marker, pidfile) = (dir.path().join("marker"), dir.path().join("grandchild"));
        let (t, _) = transport_with(
            peer("orphan.py", &[marker.to_str().unwrap(), pidfile.to_str().unwrap()]),
            StdioSettings {
                stop_grace: Duration::from_millis(200),
                ..settings()
            },
        );
        let adm = admission().await;
        t.open(&adm).await.unwrap();
        let grandchild: i32 = read_when_present(&pidfile).await.parse().unwrap();
        let mut cleanup = KillOnDrop(Some(grandchild));
        eventually("the old child is held", || t.is_held()).await;
        assert!(!t.status().up);

        let started = Instant::now();
        let (refused, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_child_not_running(&refused);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a held channel refuses at once"
        );
        let (again, _) = send(&t, &adm, INITIALIZE, ANSWER_WITHIN).await;
        assert_failed(&again, LegFailure::ChildNotRunning, LegOutcome::NotSent);
        assert_eq!(t.status().generation, 1, "no new child while the old one is unreaped");
        assert_eq!(t.open(&adm).await, Err(LegFailure::ChildNotRunning));
        assert_eq!(
            capture.text().matches("outlived SIGKILL").count(),
            1,
            "held is reported once, not per refused call: {}",
            capture.text()
        );

        kill(Pid::from_raw(grandchild), Signal::SIGKILL).unwrap();
        cleanup.0 = None;
        eventually("the held child is reaped", || !t.has_unreaped_child()).await;
        let (answered, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&answered, 2);
        assert_eq!(t.status().generation, 2);
    })
    .await;
}

#[tokio::test]
async fn a_latched_admission_is_refused_and_the_child_never_sees_the_request() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, _) = transport(peer("echo.py", &["--log", log.to_str().unwrap()]));
        let fence = Fence::new(true, 1);
        let adm = admit(&fence).await;
        let (first, _) = send(&t, &adm, INITIALIZE, ANSWER_WITHIN).await;
        assert_answered(&first, 1);

        adm.latch(FatalCategory::DownstreamAmbiguous);
        let (refused, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_not_admitted(&refused);
        assert_eq!(t.open(&adm).await, Err(LegFailure::NotAdmitted));
        assert_eq!(t.terminate_session(&adm).await.outcome, LegOutcome::NotSent);

        t.shutdown().await;
        let received = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            received.lines().collect::<Vec<_>>(),
            [INITIALIZE],
            "only the admitted request reached the child"
        );
    })
    .await;
}

#[tokio::test]
async fn a_latched_admission_never_spawns_a_child() {
    bounded(async {
        let (t, _) = transport(peer("echo.py", &[]));
        let fence = Fence::new(true, 1);
        let adm = admit(&fence).await;
        adm.latch(FatalCategory::DownstreamAmbiguous);
        let (refused, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_not_admitted(&refused);
        assert_eq!(t.status().generation, 0);
    })
    .await;
}

#[tokio::test]
async fn a_command_that_does_not_exist_is_not_sent() {
    bounded(async {
        let (t, _) = transport(vec!["tunnelgate-test-no-such-program".to_owned()]);
        let adm = admission().await;
        assert_eq!(t.open(&adm).await, Err(LegFailure::ChildNotRunning));
        let (result, _) = send(&t, &adm, TOOLS_LIST, Duration::from_secs(1)).await;
        assert_child_not_running(&result);
        assert_eq!(result.reply.resp_code, 502);
        let status = t.status();
        assert_eq!((status.up, status.generation), (false, 0));
    })
    .await;
}

#[tokio::test]
async fn a_pretty_printed_request_travels_as_one_line() {
    bounded(async {
        let (t, _) = transport(peer("echo.py", &[]));
        let adm = admission().await;
        let pretty = "{\n  \"jsonrpc\": \"2.0\",\r\n  \"id\": 9,\n  \"method\": \"tools/list\"\n}";
        let (result, _) = send(&t, &adm, pretty, ANSWER_WITHIN).await;
        assert_answered(&result, 9);
    })
    .await;
}

#[tokio::test]
async fn kill_now_stops_the_child_and_nothing_restarts() {
    bounded(async {
        let (t, _) = transport(peer("echo.py", &[]));
        let adm = admission().await;
        t.open(&adm).await.unwrap();
        assert!(t.status().up);
        t.kill_now();
        eventually("the child is dead", || !t.status().up).await;
        let (result, _) = send(&t, &adm, TOOLS_LIST, Duration::from_secs(1)).await;
        assert_failed(&result, LegFailure::ChildNotRunning, LegOutcome::NotSent);
        assert_eq!(t.open(&adm).await, Err(LegFailure::ChildNotRunning));
        assert_eq!(t.status().generation, 1);
    })
    .await;
}

#[tokio::test]
async fn concurrent_calls_each_get_their_own_response() {
    bounded(async {
        let (t, _) = transport(peer("echo.py", &[]));
        let t = Arc::new(t);
        let fence = Fence::new(false, 8);
        let mut calls = Vec::new();
        for id in 10..16u64 {
            let t = t.clone();
            let adm = admit(&fence).await;
            calls.push(tokio::spawn(async move {
                let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{id}"}}}}}}"#);
                let (result, _) = send(&t, &adm, &json, Duration::from_secs(5)).await;
                (id, result)
            }));
        }
        for call in calls {
            let (id, result) = call.await.unwrap();
            assert_answered(&result, id);
            assert_eq!(response_json(&result)["result"]["content"][0]["text"], id.to_string());
        }
        assert_eq!(t.status().generation, 1);
    })
    .await;
}

/// A real `EMFILE`: in a child process whose descriptor table is full, the stdio child
/// cannot be spawned (no descriptor for its pipes), and the leg names the gateway's own
/// exhaustion: `not_sent`, never "the child is not running".
#[tokio::test]
async fn a_spawn_with_no_descriptor_left_is_local_exhaustion_and_not_sent() {
    use crate::descriptors::exhausted;
    let path = "downstream::stdio::tests::a_spawn_with_no_descriptor_left_is_local_exhaustion_and_not_sent";
    if exhausted::rerun_in_child(path, "local_exhaustion not_sent") {
        return;
    }
    let (t, _metrics) = transport(peer("echo.py", &[]));
    let adm = admission().await;
    let table = exhausted::fill_descriptor_table();
    let (result, _) = tokio::time::timeout(TEST_BOUND, send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN))
        .await
        .expect("within the bound");
    drop(table);
    let failure = result.failure.clone().expect("a failed leg");
    exhausted::report(&format!("{} {}", failure.kind(), result.outcome.as_str()));
}
