//! A `CommandTask` driven end to end against two scripted loopback peers
//! (`scripted_peer`): one plays the MCP server behind the real HTTP transport, the other
//! the control plane behind the real control client. Each fails the test when it is
//! dropped with a step left unused, or after a request its script did not expect.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::app::GatewayLabels;
use crate::control::{ControlClient, ControlSettings};
use crate::dispatch::{Health, Policy, Propagation, Stops, Wiring, WriteAhead};
use crate::downstream::{Channels, HttpSettings, HttpTransport};
use crate::protocol::decode_poll;
use crate::scripted_peer::{reply, Act, Server};
use crate::strict::{Fence, FileIntents, Unsettled};
use crate::supervisor::Supervisor;
use crate::telemetry::Metrics;

/// Every test's outer bound: a hang fails the test instead of the suite.
const TEST_BOUND: Duration = Duration::from_secs(10);

/// A JSON answer with `status`.
fn json(status: &str, body: &str) -> Act {
    Act::Reply(reply(status, &[("Content-Type", "application/json")], body.as_bytes()))
}

/// The control plane's acknowledgement.
fn ack() -> Act {
    json("200 OK", r#"{"status":"ok"}"#)
}

/// The MCP server's answer to the command's `tools/call` (id 1).
fn answer() -> Act {
    json("200 OK", r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#)
}

/// A 404 on the terminal POST.
fn not_found() -> Act {
    json("404 Not Found", r#"{"error":"gone"}"#)
}

/// A dispatcher whose only channel, `main`, is the MCP peer.
fn dispatcher(mcp: &Server, control: &Server, strict: bool) -> (Arc<Dispatcher>, Fence) {
    with_intents(mcp, control, strict, None)
}

/// As [`dispatcher`], with a write-ahead intent store.
fn with_intents(
    mcp: &Server,
    control: &Server,
    strict: bool,
    intents: Option<FileIntents>,
) -> (Arc<Dispatcher>, Fence) {
    wired(mcp, control, strict, intents, crate::receipts::Journal::off)
}

/// As [`dispatcher`], with the receipts journal `journal` makes.
fn wired(
    mcp: &Server,
    control: &Server,
    strict: bool,
    intents: Option<FileIntents>,
    journal: impl FnOnce(Arc<Metrics>) -> crate::receipts::Journal,
) -> (Arc<Dispatcher>, Fence) {
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(strict, &[]));
    let receipts = journal(metrics.clone());
    let settings = ControlSettings {
        base_url: format!("http://{}", control.addr),
        url_path: String::new(),
        tunnel_id: "t".to_owned(),
        api_key: "k".to_owned(),
        poll_timeout: Duration::from_secs(30),
        post_timeout: Duration::from_secs(2),
        post_attempts: 1,
        server_info: None,
    };
    let client = ControlClient::new(settings, "i", metrics.clone()).unwrap();
    let http = HttpSettings {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        max_body_bytes: 1024 * 1024,
    };
    let transport = HttpTransport::from_text("main", &format!("http://{}/mcp", mcp.addr), http).unwrap();
    let channels = Channels::new(BTreeMap::from([("main".to_owned(), Transport::Http(transport))]));
    let fence = Fence::new(strict, 1);
    let d = Dispatcher::new(Wiring {
        control: client,
        fence: fence.clone(),
        channels,
        metrics,
        health: Arc::new(Health::default()),
        policy: Policy {
            strict,
            ambiguity_is_fatal: true,
            cleanup_timeout: Duration::from_secs(2),
            max_inflight: 4,
            propagation: Propagation::default(),
        },
        supervisor: Supervisor::logging_only(),
        stops: Stops {
            cut: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
        },
        write_ahead: intents.map(|store| WriteAhead {
            store: Arc::new(store),
            instance_id: "instance-1".to_owned(),
        }),
        receipts,
    });
    (d, fence)
}

fn command(channel: &str) -> Command {
    let body = format!(
        r#"{{"commands":[{{"request_id":"r1","shard_token":"s","command_type":"jsonrpc","channel":"{channel}","headers":{{}},"jsonrpc":{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x"}}}}}}]}}"#
    );
    decode_poll(body.as_bytes()).unwrap().pop().unwrap().unwrap()
}

async fn run_one(d: &Arc<Dispatcher>, cmd: Command) {
    tokio::time::timeout(TEST_BOUND, run(d, cmd, Instant::now(), None, tracing::Span::none()))
        .await
        .expect("the command finished within the test bound");
}

#[tokio::test]
async fn an_answered_and_acknowledged_command_releases_the_fence_without_a_latch() {
    let mcp = Server::start(vec![answer()]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, fence) = dispatcher(&mcp, &control, true);
    run_one(&d, command("main")).await;
    assert_eq!(fence.fatal(), None);
    assert!(!fence.snapshot().held, "the acknowledgement released the fence");
    let posted = control.seen();
    assert_eq!(posted.len(), 1);
    assert!(posted[0].path.ends_with("/v1/tunnels/t/response"), "{}", posted[0].path);
    assert!(
        posted[0].text().contains(r#""resp_type":"jsonrpc_response""#),
        "{}",
        posted[0].text()
    );
    assert_eq!(mcp.seen().len(), 1);
}

#[tokio::test]
async fn a_404_on_the_terminal_post_of_a_dispatched_command_latches_ack_not_found_in_strict_mode() {
    let mcp = Server::start(vec![answer()]).await;
    let control = Server::start(vec![not_found()]).await;
    let (d, fence) = dispatcher(&mcp, &control, true);
    run_one(&d, command("main")).await;
    let fatal = fence.fatal().expect("latched");
    assert_eq!(fatal.category, FatalCategory::AckNotFound);
    assert_eq!(fatal.request_id.as_deref(), Some("r1"));
}

#[tokio::test]
async fn the_same_404_in_default_mode_is_reported_and_nothing_latches() {
    let mcp = Server::start(vec![answer()]).await;
    let control = Server::start(vec![not_found()]).await;
    let (d, fence) = dispatcher(&mcp, &control, false);
    run_one(&d, command("main")).await;
    assert_eq!(fence.fatal(), None);
}

#[tokio::test]
async fn an_abandoned_leg_latches_then_tells_the_caller_effect_unknown() {
    let mcp = Server::start(vec![Act::Close]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, fence) = dispatcher(&mcp, &control, true);
    run_one(&d, command("main")).await;
    assert_eq!(
        fence.fatal().map(|f| f.category),
        Some(FatalCategory::DownstreamAmbiguous)
    );
    let posted = control.seen();
    assert_eq!(posted.len(), 1, "the caller is told once");
    assert!(posted[0].text().contains("effect unknown"), "{}", posted[0].text());
}

#[tokio::test]
async fn an_unroutable_command_is_answered_not_executed_and_never_reaches_a_server() {
    // The MCP peer has no step: any request to it fails the test.
    let mcp = Server::start(vec![]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, fence) = dispatcher(&mcp, &control, true);
    run_one(&d, command("elsewhere")).await;
    assert_eq!(fence.fatal(), None);
    let posted = control.seen();
    assert_eq!(posted.len(), 1);
    assert!(posted[0].text().contains("safe to retry"), "{}", posted[0].text());
    assert!(mcp.seen().is_empty());
}

#[tokio::test]
async fn a_stopping_admission_line_answers_not_executed_without_dispatch() {
    let mcp = Server::start(vec![]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, fence) = dispatcher(&mcp, &control, true);
    fence.stop_admitting();
    run_one(&d, command("main")).await;
    assert_eq!(fence.fatal(), None);
    let posted = control.seen();
    assert_eq!(posted.len(), 1);
    assert!(posted[0].text().contains("safe to retry"), "{}", posted[0].text());
}

fn intent_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tunnelgate-command-intent-{}-{}",
        std::process::id(),
        crate::protocol::random_hex(4)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test]
async fn an_acknowledged_command_settles_its_intent() {
    let d = intent_dir();
    let store = FileIntents::beside(&d.join("latch.json"));
    let mcp = Server::start(vec![answer()]).await;
    let control = Server::start(vec![ack()]).await;
    let (dispatcher, fence) = with_intents(&mcp, &control, true, Some(store.clone()));
    run_one(&dispatcher, command("main")).await;
    assert_eq!(fence.fatal(), None);
    assert!(matches!(store.read(), Unsettled::None), "settled after acked");
    std::fs::remove_dir_all(&d).unwrap();
}

#[tokio::test]
async fn a_latched_command_leaves_its_intent_for_the_next_start() {
    let d = intent_dir();
    let store = FileIntents::beside(&d.join("latch.json"));
    let mcp = Server::start(vec![answer()]).await;
    let control = Server::start(vec![not_found()]).await;
    let (dispatcher, fence) = with_intents(&mcp, &control, true, Some(store.clone()));
    run_one(&dispatcher, command("main")).await;
    assert_eq!(fence.fatal().map(|f| f.category), Some(FatalCategory::AckNotFound));
    match store.read() {
        Unsettled::Intent(i) => {
            assert_eq!(i.request_id, "r1");
            assert_eq!(i.channel, "main");
            assert_eq!(i.method.as_deref(), Some("tools/call"));
            assert_eq!(i.instance_id, "instance-1");
        }
        other => panic!("the intent stays until the latch is handled, got {other:?}"),
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[tokio::test]
async fn an_intent_that_cannot_be_written_keeps_the_command_from_the_server() {
    let d = intent_dir();
    let blocker = d.join("not-a-directory");
    std::fs::write(&blocker, b"x").unwrap();
    let store = FileIntents::beside(&blocker.join("latch.json"));
    // The MCP peer has no step: a request reaching it fails the test.
    let mcp = Server::start(vec![]).await;
    let control = Server::start(vec![ack()]).await;
    let (dispatcher, fence) = with_intents(&mcp, &control, true, Some(store));
    run_one(&dispatcher, command("main")).await;
    assert_eq!(fence.fatal(), None, "nothing was dispatched: nothing to latch");
    let posted = control.seen();
    assert_eq!(posted.len(), 1);
    assert!(posted[0].text().contains("safe to retry"), "{}", posted[0].text());
    assert!(mcp.seen().is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

/// As [`dispatcher`], with a receipts journal whose lines the test reads.
fn with_receipts(
    mcp: &Server,
    control: &Server,
    strict: bool,
) -> (
    Arc<Dispatcher>,
    Fence,
    tokio::sync::mpsc::Receiver<crate::receipts::Receipt>,
) {
    let mut rx = None;
    let (d, fence) = wired(mcp, control, strict, None, |metrics| {
        let (journal, receiver) = crate::receipts::Journal::channel(metrics, 8);
        rx = Some(receiver);
        journal
    });
    (d, fence, rx.unwrap())
}

#[tokio::test]
async fn a_command_answered_and_acknowledged_leaves_no_receipt() {
    let mcp = Server::start(vec![answer()]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, _, mut receipts) = with_receipts(&mcp, &control, false);
    run_one(&d, command("main")).await;
    assert!(receipts.try_recv().is_err());
}

#[tokio::test]
async fn a_404_in_default_mode_leaves_a_receipt_with_the_leg_and_the_delivery() {
    let mcp = Server::start(vec![answer()]).await;
    let control = Server::start(vec![not_found()]).await;
    let (d, _, mut receipts) = with_receipts(&mcp, &control, false);
    run_one(&d, command("main")).await;
    let r = receipts.try_recv().expect("a receipt");
    assert_eq!(r.request_id, "r1");
    assert_eq!(r.method.as_deref(), Some("tools/call"));
    assert_eq!(r.leg_outcome.as_deref(), Some("answered"));
    assert_eq!(r.delivery_outcome.as_deref(), Some("not_found"));
    assert_eq!((r.attempts, r.strict), (1, false));
    assert_eq!(r.message, None, "the MCP server's own answer was posted");
    assert_eq!(r.fatal_category, None);
}

#[tokio::test]
async fn an_abandoned_leg_in_strict_mode_leaves_a_receipt_with_the_words_and_the_latch() {
    let mcp = Server::start(vec![Act::Close]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, _, mut receipts) = with_receipts(&mcp, &control, true);
    run_one(&d, command("main")).await;
    let r = receipts.try_recv().expect("a receipt");
    assert_eq!(r.leg_outcome.as_deref(), Some("abandoned"));
    assert_eq!(r.delivery_outcome.as_deref(), Some("acked"));
    assert_eq!(r.message.as_deref(), Some(crate::protocol::ABANDONED_MESSAGE));
    assert_eq!(r.fatal_category.as_deref(), Some("downstream_ambiguous"));
    assert!(r.strict);
}

#[tokio::test]
async fn an_unroutable_command_whose_answer_is_refused_leaves_a_receipt_with_no_leg() {
    let mcp = Server::start(vec![]).await;
    let control = Server::start(vec![json("400 Bad Request", r#"{"error":"no"}"#)]).await;
    let (d, _, mut receipts) = with_receipts(&mcp, &control, false);
    run_one(&d, command("elsewhere")).await;
    let r = receipts.try_recv().expect("a receipt");
    assert_eq!(r.leg_outcome, None);
    assert_eq!(r.delivery_outcome.as_deref(), Some("rejected"));
    assert_eq!(r.message.as_deref(), Some(crate::protocol::NOT_SENT_MESSAGE));
}
