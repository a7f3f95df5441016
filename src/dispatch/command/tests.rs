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
        routing_correction: false,
        initial_poll_timeout: None,
        http2: false,
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
        health: Arc::new(Health::with_channels(["main".to_owned()])),
        policy: Policy {
            strict,
            ambiguity_is_fatal: true,
            cleanup_timeout: Duration::from_secs(2),
            open_poll_grace: Duration::from_secs(2),
            max_inflight: 4,
            propagation: Propagation::default(),
            resp_timing: false,
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
    request(channel, "tools/call")
}

/// A JSON-RPC request (id 1) of `method` on `channel`.
fn request(channel: &str, method: &str) -> Command {
    let body = format!(
        r#"{{"commands":[{{"request_id":"r1","shard_token":"s","command_type":"jsonrpc","channel":"{channel}","headers":{{}},"jsonrpc":{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"name":"x"}}}}}}]}}"#
    );
    decode_poll(body.as_bytes()).unwrap().pop().unwrap().unwrap()
}

async fn run_one(d: &Arc<Dispatcher>, cmd: Command) {
    tokio::time::timeout(
        TEST_BOUND,
        run(d, d.gate.receive(cmd, Instant::now()), tracing::Span::none()),
    )
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

/// The value of the series `name` (with its labels, as rendered) in the metrics text.
fn gauge(d: &Dispatcher, series: &str) -> f64 {
    let text = d.books.metrics().render();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

const LAST_COMMAND: &str = r#"tunnelgate_channel_last_command_timestamp_seconds{channel="main"}"#;
const LAST_SUCCESS: &str = r#"tunnelgate_channel_last_success_timestamp_seconds{channel="main"}"#;
const LAST_ACKED: &str = "tunnelgate_last_acked_delivery_timestamp_seconds";

#[tokio::test]
async fn an_answered_and_acknowledged_tools_list_is_a_success_with_its_tool_count() {
    let tools = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"},{"name":"b"},{"name":"c"}]}}"#;
    let mcp = Server::start(vec![json("200 OK", tools)]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, _fence) = dispatcher(&mcp, &control, false);
    d.books.metrics().channel_receipts_at_zero(&["main".to_owned()]);
    assert_eq!(
        d.books.health().channel_receipt("main"),
        crate::health::ChannelReceipt::default()
    );
    assert_eq!(gauge(&d, LAST_SUCCESS), 0.0);
    let before = crate::health::unix_millis_now() as f64 / 1000.0;
    run_one(&d, request("main", "tools/list")).await;
    let receipt = d.books.health().channel_receipt("main");
    assert!(
        receipt.last_command_at.is_some() && receipt.last_success_at.is_some(),
        "{receipt:?}"
    );
    assert_eq!(d.gate.channels.get("main").unwrap().status().tools, Some(3));
    assert!(d.books.health().poll_health().last_acked_at.is_some());
    for series in [LAST_COMMAND, LAST_SUCCESS, LAST_ACKED] {
        let at = gauge(&d, series);
        assert!(
            at >= before.floor() && at < before + 60.0,
            "{series} = {at}, started at {before}"
        );
    }
}

#[tokio::test]
async fn a_command_that_was_not_acknowledged_is_a_command_and_not_a_success() {
    let mcp = Server::start(vec![answer()]).await;
    let control = Server::start(vec![not_found()]).await;
    let (d, _fence) = dispatcher(&mcp, &control, false);
    d.books.metrics().channel_receipts_at_zero(&["main".to_owned()]);
    run_one(&d, command("main")).await;
    let receipt = d.books.health().channel_receipt("main");
    assert!(receipt.last_command_at.is_some(), "{receipt:?}");
    assert_eq!(receipt.last_success_at, None);
    assert!(gauge(&d, LAST_COMMAND) > 0.0);
    assert_eq!(gauge(&d, LAST_SUCCESS), 0.0);
    assert_eq!(gauge(&d, LAST_ACKED), 0.0);
    assert_eq!(d.books.health().poll_health().last_acked_at, None);
}

#[tokio::test]
async fn an_abandoned_leg_whose_answer_was_acknowledged_is_not_a_success() {
    let mcp = Server::start(vec![Act::Close]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, _fence) = dispatcher(&mcp, &control, false);
    run_one(&d, command("main")).await;
    let receipt = d.books.health().channel_receipt("main");
    assert!(receipt.last_command_at.is_some(), "{receipt:?}");
    assert_eq!(receipt.last_success_at, None, "the caller was told effect unknown");
    assert!(
        d.books.health().poll_health().last_acked_at.is_some(),
        "the control plane acknowledged the error response all the same"
    );
}

#[tokio::test]
async fn an_initialize_answer_passing_through_names_the_server_bounded_and_redacted() {
    let long = "n".repeat(500);
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":"2025-06-18","capabilities":{{}},"serverInfo":{{"name":"srv\u001b[2J\napi_key=sk_live_abc {long}","version":"1.2.3"}}}}}}"#
    );
    let mcp = Server::start(vec![json("200 OK", &init)]).await;
    let control = Server::start(vec![ack()]).await;
    let (d, _fence) = dispatcher(&mcp, &control, false);
    run_one(&d, request("main", "initialize")).await;
    let status = d.gate.channels.get("main").unwrap().status();
    let server = status.server.expect("a server identity");
    assert!(
        server.name.starts_with("srv [2J api_key=[redacted] nnn"),
        "{}",
        server.name
    );
    assert_eq!(server.name.chars().count(), crate::downstream::MAX_IDENTITY_CHARS);
    assert!(!server.name.contains("sk_live") && !server.name.chars().any(char::is_control));
    assert_eq!(server.version.as_deref(), Some("1.2.3"));
    assert_eq!(status.protocol_version.as_deref(), Some("2025-06-18"));
    let posted = control.seen();
    assert!(
        posted[0].text().contains("sk_live_abc"),
        "the forwarded answer is the server's own, unchanged"
    );
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

#[test]
fn the_command_steps_are_logged_under_this_modules_own_target() {
    assert_eq!(
        Some(super::super::observe::LOG_COMMAND),
        module_path!().strip_suffix("::tests")
    );
}
