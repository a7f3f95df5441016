//! The session the gateway owns with each child, against the real test peer: one
//! `initialize` and one `notifications/initialized` per child life, callers answered from
//! the session, restarts initialized again, failed handshakes ending waiting requests
//! `not_sent`, discovered (2026-07-28) children passed through, and server requests
//! routed by what callers declared.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::tests::{
    admit, assert_answered, bounded, eventually, payload, peer, send, send_with, settings, transport_with,
    ANSWER_WITHIN,
};
use super::*;
use crate::downstream::outcome::SESSION_NOT_OPEN_MESSAGE;
use crate::downstream::test_support::response_json;
use crate::downstream::LegOutcome;
use crate::protocol::MCP_SESSION_ID;
use crate::strict::Fence;

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn owned(timeout: Duration) -> StdioSettings {
    StdioSettings {
        session: SessionSettings {
            timeout,
            ..SessionSettings::default()
        },
        ..settings()
    }
}

fn caller_initialize(id: u32, name: &str, version: &str, capabilities: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion": version, "capabilities": capabilities,
        "clientInfo": {"name": name, "version": "1"}}})
    .to_string()
}

fn session_header(id: &str) -> crate::protocol::WireHeaders {
    [(MCP_SESSION_ID.to_owned(), vec![id.to_owned()])].into()
}

/// The methods the child received, in order (the peer logs every line it reads).
fn received(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["method"]
                .as_str()
                .map_or_else(|| "(response)".to_owned(), str::to_owned)
        })
        .collect()
}

fn count(methods: &[String], method: &str) -> usize {
    methods.iter().filter(|m| *m == method).count()
}

async fn admission() -> Admission {
    admit(&Fence::new(false, 4)).await
}

#[tokio::test]
async fn the_gateway_initializes_each_child_once_and_answers_every_caller_from_the_session() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, metrics) = transport_with(peer("echo.py", &["--log", log.to_str().unwrap()]), owned(ANSWER_WITHIN));
        let adm = admission().await;
        t.open(&adm).await.unwrap();
        let status = t.status();
        assert!(status.up);
        assert_eq!(status.session, Some(SessionState::Initialized));
        assert_eq!(t.session().unwrap().protocol_version, "2025-06-18");
        // Written whole before `open` returned; the peer logs it when it reads it.
        eventually("the child read the handshake", || received(&log).len() == 2).await;
        assert_eq!(received(&log), ["initialize", "notifications/initialized"]);
        let sent: Value = serde_json::from_str(std::fs::read_to_string(&log).unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(sent["params"]["clientInfo"]["name"], "tunnelgate");
        assert_eq!(
            sent["params"]["capabilities"],
            json!({"sampling":{}, "elicitation":{}, "roots":{}})
        );

        // Two callers with their own client info and revisions; one asks for the
        // session's revision, one for another: both get the session's.
        let mut ids = Vec::new();
        for (id, name, version) in [(11, "alpha", "2025-06-18"), (12, "beta", "2024-11-05")] {
            let (answer, _) = send(
                &t,
                &adm,
                &caller_initialize(id, name, version, json!({})),
                ANSWER_WITHIN,
            )
            .await;
            assert_answered(&answer, u64::from(id));
            let v = response_json(&answer);
            assert_eq!(v["result"]["protocolVersion"], "2025-06-18", "{name} asked {version}");
            assert_eq!(v["result"]["serverInfo"]["name"], "tunnelgate-stdio-peer");
            let session_id = answer.reply.resp_headers[MCP_SESSION_ID][0].clone();
            assert!(session_id.starts_with("tg1."), "{session_id}");
            ids.push(session_id);
            let (ack, _) = send(&t, &adm, INITIALIZED, ANSWER_WITHIN).await;
            assert_eq!((ack.outcome, ack.reply.resp_code), (LegOutcome::Answered, 200));
        }
        assert_ne!(ids[0], ids[1], "each caller gets a session id of its own");
        let (listed, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&listed, 2);
        assert_eq!(
            received(&log),
            ["initialize", "notifications/initialized", "tools/list"],
            "callers' handshakes never reach the child"
        );
        let text = metrics.render();
        assert!(
            text.contains(r#"tunnelgate_stdio_sessions_total{channel="t",result="initialized"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"tunnelgate_stdio_up{channel="t"} 1"#), "{text}");
    })
    .await;
}

#[tokio::test]
async fn a_killed_child_is_restarted_and_initialized_before_any_request_reaches_it() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, _) = transport_with(peer("echo.py", &["--log", log.to_str().unwrap()]), owned(ANSWER_WITHIN));
        let adm = admission().await;
        let (first, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&first, 2);

        // Killed between two calls: the next call restarts it, and the restarted child
        // sees the gateway's handshake before the call's request.
        kill(Pid::from_raw(t.child_pid().unwrap()), Signal::SIGKILL).unwrap();
        eventually("the child is seen dead", || !t.status().up).await;
        let (second, _) = send(
            &t,
            &adm,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"again"}}}"#,
            ANSWER_WITHIN,
        )
        .await;
        assert_answered(&second, 3);
        assert_eq!(response_json(&second)["result"]["content"][0]["text"], "again");
        assert_eq!(t.status().generation, 2);
        assert_eq!(
            received(&log),
            [
                "initialize",
                "notifications/initialized",
                "tools/list",
                "initialize",
                "notifications/initialized",
                "tools/call"
            ]
        );

        // Killed again, and restarted by the keeper's path (no command): due once the
        // backoff is over, then open.
        kill(Pid::from_raw(t.child_pid().unwrap()), Signal::SIGKILL).unwrap();
        assert!(t.start_due().await, "a start is due after the death");
        t.open(&adm).await.unwrap();
        assert!(t.status().up);
        assert_eq!(t.status().generation, 3);
        eventually("the third child read its handshake", || {
            count(&received(&log), "notifications/initialized") == 3
        })
        .await;
        let methods = received(&log);
        assert_eq!(count(&methods, "initialize"), 3);
        assert_eq!(count(&methods, "notifications/initialized"), 3);
        t.shutdown().await;
        assert!(!t.start_due().await, "nothing is due once stopped");
    })
    .await;
}

/// A child that takes requests and never answers any.
fn silent_child() -> Vec<String> {
    vec![
        "python3".to_owned(),
        "-c".to_owned(),
        "import sys\nfor _ in sys.stdin: pass".to_owned(),
    ]
}

#[tokio::test]
async fn a_child_that_never_answers_initialize_ends_the_waiting_requests_not_sent_and_is_ended() {
    bounded(async {
        let timeout = Duration::from_millis(400);
        let (t, metrics) = transport_with(silent_child(), owned(timeout));
        let t = Arc::new(t);
        let adm = admission().await;
        let started = Instant::now();
        // The first call runs the handshake; the second waits for it.
        let (driver, waiter) = tokio::join!(send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            send(
                &t,
                &adm,
                r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#,
                ANSWER_WITHIN,
            )
            .await
        });
        let took = started.elapsed();
        assert!(
            took < timeout + Duration::from_secs(2),
            "bounded by the handshake's timeout: {took:?}"
        );
        let (driver, waiter) = (driver.0, waiter.0);
        assert_eq!(driver.failure, Some(LegFailure::InitializeAbandoned));
        assert_eq!(waiter.failure, Some(LegFailure::SessionNotOpen));
        for result in [&driver, &waiter] {
            assert_eq!(
                result.outcome,
                LegOutcome::NotSent,
                "nothing of the caller's was written"
            );
            let v = response_json(result);
            assert_eq!(v["error"]["message"], SESSION_NOT_OPEN_MESSAGE);
            assert!(SESSION_NOT_OPEN_MESSAGE.contains("not delivered to the MCP server"));
            assert!(SESSION_NOT_OPEN_MESSAGE.ends_with("safe to retry"));
        }
        assert!(driver.failure.as_ref().unwrap().gateway_step_abandoned());
        assert!(!waiter.failure.as_ref().unwrap().gateway_step_abandoned());
        eventually("the child is ended", || t.child_pid().is_none()).await;
        let text = metrics.render();
        assert!(
            text.contains(r#"tunnelgate_stdio_sessions_total{channel="t",result="abandoned"} 1"#),
            "{text}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_child_that_exits_at_once_is_not_sent_to_and_its_restarts_back_off() {
    bounded(async {
        let settings = StdioSettings {
            restart_backoff_min: Duration::from_millis(100),
            restart_backoff_max: Duration::from_secs(2),
            ..owned(Duration::from_secs(2))
        };
        let (t, _) = transport_with(vec!["python3".to_owned(), "-c".to_owned(), "pass".to_owned()], settings);
        let adm = admission().await;
        let started = Instant::now();
        let mut attempts = 0;
        while started.elapsed() < Duration::from_millis(1500) {
            let (result, _) = send(&t, &adm, TOOLS_LIST, Duration::from_millis(300)).await;
            assert_eq!(result.outcome, LegOutcome::NotSent, "{:?}", result.failure);
            let message = response_json(&result)["error"]["message"].as_str().unwrap().to_owned();
            assert!(message.contains("not delivered to the MCP server"), "{message}");
            attempts += 1;
        }
        let generation = t.status().generation;
        // 100 ms, 200 ms, 400 ms, 800 ms: at most five lives in 1.5 s, however many calls.
        assert!(generation <= 5, "{generation} children in 1.5 s ({attempts} calls)");
        assert!(generation >= 2, "it is restarted: {generation}");
        assert!(attempts > generation, "calls meanwhile are refused, not spawns");
    })
    .await;
}

#[tokio::test]
async fn a_child_that_refuses_initialize_as_a_2026_server_is_discovered_and_passed_through() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, metrics) = transport_with(
            peer("echo.py", &["--modern", "--log", log.to_str().unwrap()]),
            owned(ANSWER_WITHIN),
        );
        let adm = admission().await;
        t.open(&adm).await.unwrap();
        assert_eq!(t.status().session, Some(SessionState::PassThrough));
        assert!(t.session().is_none());
        // From now on a caller's request goes to the server (a handshake caller's stamped
        // with the 2026-07-28 envelope: the era bridge's, tested against real servers).
        let (listed, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&listed, 2);
        // The verdict holds for one child life: a new child is probed again (the
        // gateway's `initialize` runs no tool), and discovered again.
        kill(Pid::from_raw(t.child_pid().unwrap()), Signal::SIGKILL).unwrap();
        eventually("the child is seen dead", || !t.status().up).await;
        let (again, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&again, 2);
        assert_eq!(t.status().session, Some(SessionState::PassThrough));
        assert_eq!(
            received(&log),
            ["initialize", "tools/list", "initialize", "tools/list"],
            "the gateway's one probe per life, then the caller's requests"
        );
        let text = metrics.render();
        assert!(
            text.contains(r#"tunnelgate_stdio_sessions_total{channel="t",result="discovered"} 2"#),
            "{text}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_configured_pass_through_channel_never_initializes_its_child() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, _) = transport_with(peer("echo.py", &["--log", log.to_str().unwrap()]), settings());
        let adm = admission().await;
        t.open(&adm).await.unwrap();
        assert_eq!(t.status().session, Some(SessionState::PassThrough));
        let (answer, _) = send(
            &t,
            &adm,
            &caller_initialize(1, "c", "2025-06-18", json!({})),
            ANSWER_WITHIN,
        )
        .await;
        assert_answered(&answer, 1);
        assert!(
            !answer.reply.resp_headers.contains_key(MCP_SESSION_ID),
            "no session id is invented"
        );
        assert_eq!(received(&log), ["initialize"], "only the caller's own");
    })
    .await;
}

/// Sends `json` as caller `session` and hands back its result and the messages the child
/// sent it meanwhile, one by one, as they come.
fn call_as(
    t: &Arc<StdioTransport>,
    fence: &Fence,
    json: &'static str,
    session: &str,
) -> (
    tokio::task::JoinHandle<LegResult>,
    mpsc::Receiver<crate::downstream::Notification>,
) {
    let (tx, rx) = mpsc::channel(16);
    let (t, fence, headers) = (t.clone(), fence.clone(), session_header(session));
    let call = tokio::spawn(async move {
        let adm = admit(&fence).await;
        let p = payload(json);
        let req = DownstreamRequest {
            payload: &p,
            headers: &headers,
            deadline: Some(Instant::now() + ANSWER_WITHIN),
        };
        t.call(&adm, &req, &tx).await
    });
    (call, rx)
}

#[tokio::test]
async fn a_server_request_goes_to_a_caller_that_declared_its_capability_or_is_refused() {
    bounded(async {
        let (t, _) = transport_with(peer("echo.py", &[]), owned(ANSWER_WITHIN));
        let t = Arc::new(t);
        let fence = Fence::new(false, 4);
        let adm = admit(&fence).await;
        let session_of = |caps: Value| {
            let request = caller_initialize(1, "c", "2025-06-18", caps);
            let t = t.clone();
            async move {
                let adm = admission().await;
                let (answer, _) = send(&t, &adm, &request, ANSWER_WITHIN).await;
                answer.reply.resp_headers[MCP_SESSION_ID][0].clone()
            }
        };
        let sampler = session_of(json!({"sampling": {}})).await;
        let plain = session_of(json!({"roots": {}})).await;

        // Only the plain caller in flight: nobody may be asked for sampling.
        let (refused, _) = send_with(
            &t,
            &adm,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ask","arguments":{"method":"sampling/createMessage"}}}"#,
            ANSWER_WITHIN,
            session_header(&plain),
        )
        .await;
        assert_answered(&refused, 7);
        let text = response_json(&refused)["result"]["content"][0]["text"].as_str().unwrap().to_owned();
        assert!(
            text.starts_with("error:no caller with a request in flight declared the sampling capability"),
            "{text}"
        );

        // The sampler in flight: the question reaches it, and its reply reaches the child.
        let (call, mut notes) = call_as(
            &t,
            &fence,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"ask","arguments":{"method":"sampling/createMessage"}}}"#,
            &sampler,
        );
        let question = notes.recv().await.expect("the server's question reaches the sampler");
        let question: Value = serde_json::from_str(question.resp_json.get()).unwrap();
        assert_eq!(question["method"], "sampling/createMessage");
        let reply = json!({"jsonrpc":"2.0","id": question["id"], "result": {"answer": 42}}).to_string();
        let (sent, _) = send_with(&t, &adm, &reply, ANSWER_WITHIN, session_header(&sampler)).await;
        assert_eq!(sent.reply.resp_code, 200);
        let done = call.await.unwrap();
        assert_answered(&done, 8);
        assert_eq!(
            response_json(&done)["result"]["content"][0]["text"],
            r#"result:{"answer":42}"#
        );

        // A plain caller's request older than the sampler's: the question still goes to
        // the sampler (the oldest that declared it), never to the plain one.
        let (roots_call, mut roots_notes) = call_as(
            &t,
            &fence,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ask","arguments":{"method":"roots/list"}}}"#,
            &plain,
        );
        let asked = roots_notes.recv().await.expect("roots go to the caller that declared roots");
        let asked: Value = serde_json::from_str(asked.resp_json.get()).unwrap();
        assert_eq!(asked["method"], "roots/list");
        let reply = json!({"jsonrpc":"2.0","id": asked["id"], "result": {"roots": []}}).to_string();
        send_with(&t, &adm, &reply, ANSWER_WITHIN, session_header(&plain)).await;
        assert_answered(&roots_call.await.unwrap(), 9);
    })
    .await;
}

#[tokio::test]
async fn a_strict_command_that_finds_the_child_down_starts_and_initializes_it_under_its_admission() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.log");
        let (t, _) = transport_with(peer("echo.py", &["--log", log.to_str().unwrap()]), owned(ANSWER_WITHIN));
        let fence = Fence::new(true, 1);
        let adm = admit(&fence).await;
        assert!(!adm.is_sent());
        let (listed, _) = send(&t, &adm, TOOLS_LIST, ANSWER_WITHIN).await;
        assert_answered(&listed, 2);
        assert!(adm.is_sent());
        assert_eq!(
            received(&log),
            ["initialize", "notifications/initialized", "tools/list"]
        );
        // A latched fence: a caller's initialize is refused, not answered from the session.
        adm.latch(crate::strict::FatalCategory::DownstreamAmbiguous);
        let (refused, _) = send(
            &t,
            &adm,
            &caller_initialize(3, "c", "2025-06-18", json!({})),
            ANSWER_WITHIN,
        )
        .await;
        assert_eq!(refused.failure, Some(LegFailure::NotAdmitted));
    })
    .await;
}
