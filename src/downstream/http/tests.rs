//! Transport tests against in-process servers on loopback: axum where ordinary HTTP
//! framing matters, a scripted raw TCP server where byte-level faults do.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use serde_json::value::RawValue;

use super::classify::classify_send_error;
use super::*;
use crate::downstream::error_chain::SendFacts;
use crate::downstream::test_support::{assert_not_admitted, assert_row, assert_timed_out_after_write, A, N, R};
use crate::downstream::{LegOutcome, Notification};
use crate::egress::client::SendErrorKind;
use crate::protocol::JsonRpcPayload;
use crate::scripted_peer::{head, reply, sse_head, Act, Server};
use crate::strict::{CommandRef, FatalCategory, Fence};

/// Every test's outer bound: a hang fails the test instead of the suite.
const TEST_BOUND: Duration = Duration::from_secs(10);

// --- leg helpers ---

fn settings() -> HttpSettings {
    HttpSettings {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        max_body_bytes: 1 << 20,
    }
}

/// `text` as the configuration would hand it over.
fn endpoint(text: &str) -> HttpUrl {
    HttpUrl::endpoint("mcp.channels.main.url", text).unwrap()
}

fn transport(url: &str) -> HttpTransport {
    HttpTransport::new("main", &endpoint(url), settings()).unwrap()
}

/// A transport whose bodies are bounded at `max_body_bytes`.
fn bounded_transport(url: &str, max_body_bytes: usize) -> HttpTransport {
    let settings = HttpSettings {
        max_body_bytes,
        ..settings()
    };
    HttpTransport::new("main", &endpoint(url), settings).unwrap()
}

async fn admission() -> Admission {
    Fence::new(false, 1).admit(CommandRef::default()).await.unwrap()
}

fn payload(json: &str) -> JsonRpcPayload {
    JsonRpcPayload::from_raw(RawValue::from_string(json.to_owned()).unwrap()).unwrap()
}

const CALL: &str =
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"z":1,"a":[1.50]}}}"#;

fn headers(pairs: &[(&str, &[&str])]) -> WireHeaders {
    pairs
        .iter()
        .map(|(n, vs)| ((*n).to_owned(), vs.iter().map(|v| (*v).to_owned()).collect()))
        .collect()
}

/// Runs one leg and returns its result with every notification it produced, in order.
async fn run(
    t: &HttpTransport,
    payload: &JsonRpcPayload,
    headers: &WireHeaders,
    deadline: Option<Instant>,
) -> (LegResult, Vec<Notification>) {
    let admission = admission().await;
    let (tx, mut rx) = mpsc::channel(64);
    let req = DownstreamRequest {
        payload,
        headers,
        deadline,
    };
    let result = timeout(TEST_BOUND, t.call(&admission, &req, &tx))
        .await
        .expect("the leg is bounded");
    drop(tx);
    let mut notes = Vec::new();
    while let Ok(n) = rx.try_recv() {
        notes.push(n);
    }
    (result, notes)
}

/// One leg of [`CALL`], without headers or a deadline, under `admission` into `notes`.
async fn call_admitted(t: &HttpTransport, admission: &Admission, notes: &NotifySink) -> LegResult {
    let p = payload(CALL);
    let req = DownstreamRequest {
        payload: &p,
        headers: &Vec::new(),
        deadline: None,
    };
    t.call(admission, &req, notes).await
}

async fn call(url: &str, json: &str) -> (LegResult, Vec<Notification>) {
    run(&transport(url), &payload(json), &Vec::new(), None).await
}

fn resp_json(result: &LegResult) -> &str {
    result.reply.resp_json.as_deref().expect("a payload").get()
}

fn tunnel_failure(result: &LegResult) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(resp_json(result)).unwrap();
    assert_eq!(v["error"]["code"], -32603);
    v["error"]["data"]["tunnel_failure"].clone()
}

/// The row every stream cut before its response shares: abandoned at an unexpected EOF.
#[track_caller]
fn assert_cut_before_response(result: &LegResult) {
    assert_row(
        result,
        LegFailure::StreamClosedBeforeResponse,
        LegOutcome::Abandoned,
        "protocol",
        Some("unexpected_eof"),
        A,
    );
}

/// The row of a reply that is no JSON-RPC answer to this request.
#[track_caller]
fn assert_non_protocol(result: &LegResult) {
    assert_row(
        result,
        LegFailure::NonProtocolResponse,
        LegOutcome::Abandoned,
        "protocol",
        Some("non_protocol_response"),
        A,
    );
}

/// The row of a body over `max_body_bytes`.
#[track_caller]
fn assert_body_too_large(result: &LegResult) {
    assert_row(
        result,
        LegFailure::BodyTooLarge,
        LegOutcome::Abandoned,
        "protocol",
        Some("response_body_too_large"),
        A,
    );
}

/// The row of an HTTP error status without this request's JSON-RPC answer.
#[track_caller]
fn assert_http_status(result: &LegResult, code: u16, outcome: LegOutcome, words: &str) {
    assert_row(
        result,
        LegFailure::HttpStatus(code),
        outcome,
        "target_http",
        Some("http_status"),
        words,
    );
}

/// A loopback port nothing listens on.
async fn dead_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

// --- regime (B): JSON bodies ---

#[tokio::test]
async fn a_json_reply_is_forwarded_byte_for_byte_and_the_payload_reaches_the_server_unchanged() {
    let body = r#"{"result":{"b":1,"a":2},"x-vendor":{"z":true},"id":1,"jsonrpc":"2.0"}"#;
    let server = Server::answering(
        "200 OK",
        &[
            ("Content-Type", "application/json; charset=utf-8"),
            ("Mcp-Session-Id", "s-1"),
            ("Set-Cookie", "no"),
        ],
        format!("{body}\n").as_bytes(),
    )
    .await;
    let (result, notes) = call(&server.url(), CALL).await;
    assert_eq!(result.outcome, LegOutcome::Answered);
    assert_eq!(result.failure, None);
    assert_eq!(resp_json(&result), body);
    assert_eq!(result.reply.resp_code, 200);
    assert_eq!(result.reply.resp_type, RespType::JsonrpcResponse);
    assert_eq!(
        result.reply.resp_headers.keys().collect::<Vec<_>>(),
        vec!["Content-Type", "Mcp-Session-Id"]
    );
    assert!(notes.is_empty());
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].method.as_str(), seen[0].path.as_str()), ("POST", "/mcp"));
    assert_eq!(seen[0].body, CALL.as_bytes());
    assert_eq!(seen[0].header("content-type"), vec!["application/json"]);
    assert_eq!(seen[0].header("accept"), vec!["application/json, text/event-stream"]);
}

#[tokio::test]
async fn a_json_body_for_another_id_is_not_an_answer() {
    let server = Server::answering(
        "200 OK",
        &[("Content-Type", "application/json")],
        br#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
    )
    .await;
    let (result, _) = call(&server.url(), CALL).await;
    assert_non_protocol(&result);
}

#[tokio::test]
async fn a_truncated_json_body_is_abandoned() {
    // Content-Length promises more than arrives, and a close-delimited body that ends early.
    let short =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"res".to_vec();
    let mut cut = head("200 OK", &[("Content-Type", "application/json")]);
    cut.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"result":{"#);
    for act in [Act::Reply(short), Act::Reply(cut)] {
        let server = Server::start(vec![act]).await;
        let (result, _) = call(&server.url(), CALL).await;
        assert_row(
            &result,
            LegFailure::TruncatedJson,
            LegOutcome::Abandoned,
            "protocol",
            Some("malformed_json"),
            A,
        );
    }
}

#[tokio::test]
async fn a_json_body_over_the_bound_is_abandoned_whether_or_not_its_length_is_declared() {
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"result":"{}"}}"#, "x".repeat(2048));
    // Refused on its Content-Length before any of it is read, or read up to the bound
    // when it runs until the connection closes.
    let declared = reply("200 OK", &[("Content-Type", "application/json")], big.as_bytes());
    let mut undeclared = head("200 OK", &[("Content-Type", "application/json")]);
    undeclared.extend_from_slice(big.as_bytes());
    for act in [Act::Reply(declared), Act::Reply(undeclared)] {
        let server = Server::start(vec![act]).await;
        let t = bounded_transport(&server.url(), 1024);
        let (result, _) = run(&t, &payload(CALL), &Vec::new(), None).await;
        assert_body_too_large(&result);
        assert_eq!(tunnel_failure(&result)["upstream_response_received"], true);
        assert!(!resp_json(&result).contains("xxxx"), "none of the body is forwarded");
    }
}

#[tokio::test]
async fn an_sse_event_still_undispatched_past_the_bound_is_abandoned() {
    // The bound is on bytes held for an event not yet complete: here the first part
    // alone is over it.
    let server = Server::sse(vec![
        format!(r#"data: {{"jsonrpc":"2.0","id":1,"result":"{}"#, "x".repeat(2048)).into_bytes(),
        b"\"}\n\n".to_vec(),
    ])
    .await;
    let t = bounded_transport(&server.url(), 1024);
    let (result, notes) = run(&t, &payload(CALL), &Vec::new(), None).await;
    assert_body_too_large(&result);
    assert!(notes.is_empty());
}

#[tokio::test]
async fn an_sse_event_over_the_bound_that_arrives_whole_in_one_chunk_is_abandoned() {
    let server = Server::sse(vec![format!(
        "data: {{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"{}\"}}\n\n",
        "x".repeat(2048)
    )
    .into_bytes()])
    .await;
    let t = bounded_transport(&server.url(), 1024);
    let (result, notes) = run(&t, &payload(CALL), &Vec::new(), None).await;
    assert_body_too_large(&result);
    assert!(notes.is_empty());
}

const LISTEN: &str = r#"{"jsonrpc":"2.0","id":"listen-1","method":"subscriptions/listen","params":{}}"#;

#[tokio::test]
async fn a_listen_stream_the_server_closes_is_a_normal_end_never_resumed() {
    let ack = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}"#;
    // Event ids and a session would make any other request resumable.
    let server = Server::start(vec![Act::Parts(vec![
        sse_head(&[("Mcp-Session-Id", "s-1")]),
        format!("id: 1\ndata: {ack}\n\n").into_bytes(),
    ])])
    .await;
    let (result, notes) = run(
        &transport(&server.url()),
        &payload(LISTEN),
        &headers(&[("Mcp-Session-Id", &["s-1"])]),
        None,
    )
    .await;
    assert_eq!(notes.len(), 1, "the acknowledgement went on as it came");
    assert_eq!(result.failure, Some(LegFailure::SubscriptionEnded));
    assert_eq!(result.outcome, LegOutcome::Answered, "no effect is in doubt");
    let v: serde_json::Value = serde_json::from_str(resp_json(&result)).unwrap();
    assert_eq!(v["id"], "listen-1");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("the subscription stream ended"));
}

#[tokio::test]
async fn a_listen_stream_at_its_bound_is_a_normal_end() {
    // Headers and the acknowledgement arrive, then the stream stays open (as listen does).
    let mut ack = sse_head(&[]);
    ack.extend_from_slice(b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\"}\n\n");
    let server = Server::start(vec![Act::Stall(ack)]).await;
    let (result, _) = run(
        &transport(&server.url()),
        &payload(LISTEN),
        &Vec::new(),
        Some(Instant::now() + Duration::from_millis(300)),
    )
    .await;
    assert_eq!(result.failure, Some(LegFailure::SubscriptionEnded));
    assert_eq!(result.outcome, LegOutcome::Answered);
}

// --- regime (C) and statuses ---

#[tokio::test]
async fn a_2xx_plain_text_reply_is_abandoned_as_non_protocol() {
    let server = Server::answering("200 OK", &[("Content-Type", "text/plain")], b"all good").await;
    let (result, _) = call(&server.url(), CALL).await;
    assert_non_protocol(&result);
    assert!(!resp_json(&result).contains("all good"));
}

#[tokio::test]
async fn a_request_answered_202_is_abandoned_as_non_protocol() {
    let server = Server::answering("202 Accepted", &[], b"").await;
    let (result, _) = call(&server.url(), CALL).await;
    assert_non_protocol(&result);
}

#[tokio::test]
async fn a_jsonrpc_error_with_http_400_or_500_is_answered_and_forwarded_exactly_with_that_status() {
    let body = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad params","data":{"k":[1.50]}}}"#;
    for (status, code) in [("400 Bad Request", 400), ("500 Internal Server Error", 500)] {
        let server = Server::answering(status, &[("Content-Type", "application/json")], body.as_bytes()).await;
        let (result, _) = call(&server.url(), CALL).await;
        assert_eq!(result.outcome, LegOutcome::Answered, "{status}");
        assert_eq!(result.failure, None, "{status}");
        assert_eq!(resp_json(&result), body, "{status}: byte for byte");
        assert_eq!(result.reply.resp_code, code);
        assert_eq!(result.reply.resp_type, RespType::JsonrpcResponse);
    }
}

#[tokio::test]
async fn a_jsonrpc_error_with_http_400_or_500_for_another_id_is_not_this_requests_answer() {
    let body = r#"{"jsonrpc":"2.0","id":99,"error":{"code":-32602,"message":"CANARY-other-request"}}"#;
    for (status, code, outcome, words) in [
        ("400 Bad Request", 400, LegOutcome::Answered, R),
        ("500 Internal Server Error", 500, LegOutcome::Abandoned, A),
    ] {
        let server = Server::answering(status, &[("Content-Type", "application/json")], body.as_bytes()).await;
        let (result, _) = call(&server.url(), CALL).await;
        assert_http_status(&result, code, outcome, words);
        assert!(
            !resp_json(&result).contains("CANARY"),
            "{status}: another request's error is never forwarded"
        );
    }
}

#[tokio::test]
async fn an_http_5xx_or_408_without_a_jsonrpc_body_is_abandoned_and_the_body_never_forwarded() {
    let canary = "CANARY-7f3a secret stack trace";
    let cases = [
        ("500 Internal Server Error", 500, "text/plain", canary.to_owned()),
        (
            "503 Service Unavailable",
            503,
            "application/json",
            format!(r#"{{"detail":"{canary}"}}"#),
        ),
        ("408 Request Timeout", 408, "text/plain", canary.to_owned()),
    ];
    for (status, code, content_type, body) in cases {
        let server = Server::answering(status, &[("Content-Type", content_type)], body.as_bytes()).await;
        let (result, _) = call(&server.url(), CALL).await;
        assert_http_status(&result, code, LegOutcome::Abandoned, A);
        assert_eq!(result.reply.resp_code, code);
        let text = resp_json(&result);
        assert!(
            !text.contains("CANARY"),
            "the server's body must never reach the caller"
        );
        let tf = tunnel_failure(&result);
        assert_eq!(tf["upstream_status"], code);
        assert_eq!(tf["upstream_response_received"], true);
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["id"], 1);
    }
}

#[tokio::test]
async fn an_http_4xx_other_than_408_without_a_jsonrpc_body_is_answered_as_a_refusal() {
    let canary = "CANARY-4c1d not for the caller";
    let cases = [
        ("400 Bad Request", 400, "text/plain", canary.to_owned()),
        ("404 Not Found", 404, "text/html", format!("<p>{canary}</p>")),
        (
            "406 Not Acceptable",
            406,
            "application/json",
            format!(r#"{{"error":"{canary}"}}"#),
        ),
    ];
    for (status, code, content_type, body) in cases {
        let server = Server::answering(status, &[("Content-Type", content_type)], body.as_bytes()).await;
        let (result, _) = call(&server.url(), CALL).await;
        assert_http_status(&result, code, LegOutcome::Answered, R);
        assert_eq!(result.reply.resp_code, code);
        assert_eq!(result.reply.resp_type, RespType::JsonrpcResponse);
        assert!(!resp_json(&result).contains("CANARY"));
        let tf = tunnel_failure(&result);
        assert_eq!(tf["upstream_status"], code);
        assert_eq!(tf["upstream_response_received"], true);
    }
}

// --- regime (A): event streams ---

/// An axum server streaming the given SSE chunks (chunked transfer encoding), recording
/// the request body it received.
async fn axum_sse(chunks: Vec<&'static str>) -> (String, Arc<Mutex<Vec<Bytes>>>) {
    use axum::response::IntoResponse;
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post({
            let bodies = bodies.clone();
            move |body: Bytes| {
                bodies.lock().unwrap().push(body);
                let chunks = chunks.clone();
                async move {
                    let stream = futures_util::stream::unfold(chunks.into_iter(), |mut it| async move {
                        let next = it.next()?;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Some((
                            Ok::<_, std::convert::Infallible>(Bytes::from_static(next.as_bytes())),
                            it,
                        ))
                    });
                    (
                        [(CONTENT_TYPE, "text/event-stream")],
                        axum::body::Body::from_stream(stream),
                    )
                        .into_response()
                }
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bodies)
}

#[tokio::test]
async fn progress_notifications_are_delivered_in_order_before_the_result() {
    let (url, bodies) = axum_sse(vec![
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n",
        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",",
        "\"params\":{\"progress\":2}}\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":3}}\n\n",
        "data: {\"result\":{\"b\":1,\"a\":2},\"id\":1,\n",
        "data:  \"jsonrpc\":\"2.0\"}\n\n",
    ])
    .await;
    let (result, notes) = call(&url, CALL).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    assert_eq!(result.failure, None);
    assert_eq!(
        resp_json(&result),
        "{\"result\":{\"b\":1,\"a\":2},\"id\":1,\n \"jsonrpc\":\"2.0\"}"
    );
    assert_eq!(result.reply.resp_headers["Content-Type"], vec!["text/event-stream"]);
    let progress: Vec<String> = notes.iter().map(|n| n.resp_json.get().to_owned()).collect();
    assert_eq!(
        progress,
        (1..=3)
            .map(|i| format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progress":{i}}}}}"#))
            .collect::<Vec<_>>()
    );
    assert!(notes.iter().all(|n| n.resp_headers.contains_key("Content-Type")));
    assert_eq!(
        bodies.lock().unwrap().as_slice(),
        &[Bytes::from_static(CALL.as_bytes())]
    );
}

#[tokio::test]
async fn a_stream_closed_at_an_event_boundary_before_the_response_is_abandoned() {
    let server = Server::sse(vec![
        b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n".to_vec(),
    ])
    .await;
    let (result, notes) = call(&server.url(), CALL).await;
    assert_cut_before_response(&result);
    assert_eq!(notes.len(), 1, "what arrived before the close is still forwarded");
}

#[tokio::test]
async fn a_stream_closed_mid_event_is_abandoned_even_when_the_cut_event_holds_the_response() {
    let server = Server::sse(vec![b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n".to_vec()]).await;
    let (result, notes) = call(&server.url(), CALL).await;
    assert_cut_before_response(&result);
    assert!(notes.is_empty());
}

#[tokio::test]
async fn priming_events_and_keep_alive_comments_are_skipped() {
    let server = Server::sse(vec![
        b"\xEF\xBB\xBFid: prime-0\ndata:\n\n".to_vec(),
        b": keep-alive\n\n:\n\nretry: 5\n\nevent: ping\n\n".to_vec(),
        b"data: not json at all\n\ndata: [1,2]\n\n".to_vec(),
        b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n\n".to_vec(),
    ])
    .await;
    let (result, notes) = call(&server.url(), CALL).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    assert_eq!(resp_json(&result), r#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#);
    assert!(notes.is_empty(), "priming, keep-alive and noise are not messages");
}

#[tokio::test]
async fn messages_for_other_ids_and_server_requests_are_forwarded_as_notifications() {
    let other = r#"{"jsonrpc":"2.0","id":2,"result":{}}"#;
    let string_one = r#"{"jsonrpc":"2.0","id":"1","result":{}}"#;
    let server_request = r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{}}"#;
    let mine = r#"{"jsonrpc":"2.0","id": 1 ,"result":{"done":true}}"#;
    let stream =
        format!("data: {other}\n\ndata: {string_one}\n\ndata: {server_request}\n\ndata: {mine}\n\ndata: {other}\n\n");
    let mut bytes = sse_head(&[]);
    bytes.extend_from_slice(stream.as_bytes());
    let server = Server::start(vec![Act::Reply(bytes)]).await;
    let (result, notes) = call(&server.url(), CALL).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    assert_eq!(resp_json(&result), mine);
    let forwarded: Vec<&str> = notes.iter().map(|n| n.resp_json.get()).collect();
    assert_eq!(
        forwarded,
        vec![other, string_one, server_request],
        "nothing after the terminal response is forwarded"
    );
}

#[tokio::test]
async fn a_string_id_matches_however_the_server_escapes_it() {
    let mut bytes = sse_head(&[]);
    bytes.extend_from_slice(b"data: {\"jsonrpc\":\"2.0\",\"id\":\"r\\u002d1\",\"result\":{}}\n\n");
    let server = Server::start(vec![Act::Reply(bytes)]).await;
    let (result, _) = call(&server.url(), r#"{"jsonrpc":"2.0","id":"r-1","method":"ping"}"#).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
}

#[tokio::test]
async fn a_closed_notification_receiver_does_not_stop_the_stream() {
    let mut bytes = sse_head(&[]);
    bytes.extend_from_slice(
        b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
    );
    let server = Server::start(vec![Act::Reply(bytes)]).await;
    let t = transport(&server.url());
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let admission = admission().await;
    let result = timeout(TEST_BOUND, call_admitted(&t, &admission, &tx)).await.unwrap();
    assert_eq!(result.outcome, LegOutcome::Answered);
}

// --- failures before and after the write ---

#[tokio::test]
async fn a_server_that_never_sends_headers_is_abandoned_at_the_deadline() {
    let server = Server::start(vec![Act::Hang]).await;
    let started = Instant::now();
    let deadline = Some(started + Duration::from_millis(300));
    let (result, _) = run(&transport(&server.url()), &payload(CALL), &Vec::new(), deadline).await;
    assert_timed_out_after_write(&result);
    assert_eq!(result.reply.resp_code, 504);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the deadline bounds the wait for headers"
    );
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_stream_that_stalls_is_abandoned_at_the_deadline() {
    // Headers and a keep-alive arrive, then nothing: the stream neither ends nor answers.
    let mut keep_alive = sse_head(&[]);
    keep_alive.extend_from_slice(b": keep-alive\n\n");
    let server = Server::start(vec![Act::Stall(keep_alive)]).await;
    let started = Instant::now();
    let t = transport(&server.url());
    let (result, _) = run(
        &t,
        &payload(CALL),
        &Vec::new(),
        Some(started + Duration::from_millis(300)),
    )
    .await;
    assert_timed_out_after_write(&result);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_server_that_closes_or_resets_after_reading_the_request_is_abandoned() {
    for act in [Act::Close, Act::Reset] {
        let server = Server::start(vec![act]).await;
        let (result, _) = call(&server.url(), CALL).await;
        assert_row(
            &result,
            LegFailure::ConnectionLost,
            LegOutcome::Abandoned,
            "transport_closed",
            Some("connection_reset"),
            A,
        );
        assert_eq!(server.seen().len(), 1, "the server did read the request");
    }
}

#[tokio::test]
async fn connect_refused_is_not_sent_and_marks_the_channel_down() {
    let addr = dead_port().await;
    let t = transport(&format!("http://{addr}/mcp"));
    assert!(t.status().up);
    let (result, _) = run(&t, &payload(CALL), &Vec::new(), None).await;
    assert_row(
        &result,
        LegFailure::ConnectRefused,
        LegOutcome::NotSent,
        "connect",
        Some("connection_refused"),
        N,
    );
    let status = t.status();
    assert!(!status.up);
    assert_eq!(
        (status.transport.as_str(), status.generation, status.channel.as_str()),
        ("http", 0, "main")
    );
}

#[tokio::test]
async fn the_channel_is_up_again_once_a_leg_reaches_the_server() {
    let addr = dead_port().await;
    let t = transport(&format!("http://{addr}/mcp"));
    run(&t, &payload(CALL), &Vec::new(), None).await;
    assert!(!t.status().up);
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let _server = Server::start_on(
        addr,
        vec![Act::Reply(reply(
            "200 OK",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        ))],
    )
    .await;
    assert_eq!(
        run(&t, &payload(CALL), &Vec::new(), None).await.0.outcome,
        LegOutcome::Answered
    );
    assert!(t.status().up);
}

#[tokio::test]
async fn a_connect_timeout_is_not_sent() {
    // A listener that never accepts, with its backlog filled: further SYNs go unanswered.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        if let Ok(Ok(stream)) = timeout(Duration::from_millis(100), TcpStream::connect(addr)).await {
            fillers.push(stream);
        }
    }
    let settings = HttpSettings {
        connect_timeout: Duration::from_millis(200),
        ..settings()
    };
    let t = HttpTransport::new("main", &endpoint(&format!("http://{addr}/mcp")), settings).unwrap();
    let started = Instant::now();
    let (result, _) = run(&t, &payload(CALL), &Vec::new(), None).await;
    assert_row(
        &result,
        LegFailure::ConnectFailed,
        LegOutcome::NotSent,
        "connect",
        Some("dial"),
        N,
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(listener);
}

#[tokio::test]
async fn a_dns_failure_is_not_sent() {
    let (result, _) = call("http://nonexistent.invalid/", CALL).await;
    assert_row(&result, LegFailure::Dns, LegOutcome::NotSent, "dns", Some("dns"), N);
}

#[tokio::test]
async fn a_tls_handshake_failure_is_not_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 512];
            let _ = stream.read(&mut buf).await;
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let (result, _) = call(&format!("https://{addr}/mcp"), CALL).await;
    assert_row(&result, LegFailure::Tls, LegOutcome::NotSent, "tls", Some("tls"), N);
}

#[tokio::test]
async fn a_passed_deadline_sends_nothing() {
    let server = Server::start(vec![]).await;
    let deadline = Some(Instant::now() - Duration::from_millis(1));
    let (result, _) = run(&transport(&server.url()), &payload(CALL), &Vec::new(), deadline).await;
    // The leg's own result; the dispatcher never posts it (the response_timeout passed).
    assert_row(
        &result,
        LegFailure::DeadlineBeforeSend,
        LegOutcome::NotSent,
        "timeout",
        Some("timeout"),
        N,
    );
    server.settled().await;
    assert_eq!(
        server.accepted.load(Ordering::SeqCst),
        0,
        "no connection was even opened"
    );
}

#[tokio::test]
async fn a_latched_admission_sends_nothing() {
    let server = Server::start(vec![]).await;
    let fence = Fence::new(true, 1);
    let admission = fence.admit(CommandRef::default()).await.unwrap();
    admission.latch(FatalCategory::DownstreamAmbiguous);
    let t = transport(&server.url());
    let (tx, _rx) = mpsc::channel(1);
    let result = timeout(TEST_BOUND, call_admitted(&t, &admission, &tx)).await.unwrap();
    assert_not_admitted(&result);
    let result = timeout(TEST_BOUND, t.terminate_session(&admission, &Vec::new(), None))
        .await
        .unwrap();
    assert_eq!(result.failure, Some(LegFailure::NotAdmitted));
    assert_eq!(result.outcome, LegOutcome::NotSent);
    assert_eq!(result.reply.resp_type, RespType::SessionTerminationResponse);
    assert!(result.reply.resp_json.is_none());
    server.settled().await;
    assert_eq!(server.accepted.load(Ordering::SeqCst), 0);
}

#[test]
fn each_send_error_kind_maps_to_one_failure() {
    use SendErrorKind as K;
    let facts = SendFacts::given;
    let cases = [
        (facts(K::Dns), LegFailure::Dns),
        (facts(K::Refused), LegFailure::ConnectRefused),
        (facts(K::ConnectTimeout), LegFailure::ConnectFailed),
        (facts(K::Connect), LegFailure::ConnectFailed),
        (facts(K::Tls), LegFailure::Tls),
        (facts(K::ProxyRefused), LegFailure::ProxyRefused),
        (facts(K::ProxyAuth), LegFailure::ProxyAuthRequired),
        (facts(K::Timeout), LegFailure::TimeoutAfterWrite),
        (facts(K::Lost), LegFailure::ConnectionLost),
        // The gateway's own exhaustion while resolving or connecting is named as such
        // (`SendFacts::of` sets it only then, never after the write).
        (facts(K::Connect).exhausted(), LegFailure::LocalExhaustion),
        (facts(K::Dns).exhausted(), LegFailure::LocalExhaustion),
        (facts(K::Refused).exhausted(), LegFailure::LocalExhaustion),
    ];
    for (facts, want) in cases {
        assert_eq!(classify_send_error(facts), want, "{facts:?}");
        assert_eq!(
            facts.kind.wrote_nothing(),
            want.outcome() == LegOutcome::NotSent,
            "{facts:?}"
        );
    }
}

/// A real `EMFILE`: in a child process whose descriptor table is full, a strict leg's
/// connect fails before anything is written, and the leg says so in its own words.
#[tokio::test]
async fn a_connect_with_no_descriptor_left_is_local_exhaustion_and_not_sent() {
    use crate::descriptors::exhausted;
    let path = "downstream::http::tests::a_connect_with_no_descriptor_left_is_local_exhaustion_and_not_sent";
    if exhausted::rerun_in_child(path, "local_exhaustion not_sent unsent") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let t = transport(&format!("http://{}/mcp", listener.local_addr().unwrap()));
    let fence = Fence::new(true, 1);
    let admission = fence.admit(CommandRef::default()).await.unwrap();
    let (tx, _rx) = mpsc::channel(1);
    let table = exhausted::fill_descriptor_table();
    let result = timeout(TEST_BOUND, call_admitted(&t, &admission, &tx)).await.unwrap();
    drop(table);
    let failure = result.failure.clone().expect("a failed leg");
    assert_eq!(
        failure.caller_message(),
        crate::downstream::outcome::LOCAL_EXHAUSTION_MESSAGE
    );
    assert!(resp_json(&result).contains("too many open files in the gateway"));
    let sent = if admission.is_sent() { "sent" } else { "unsent" };
    exhausted::report(&format!("{} {} {sent}", failure.kind(), result.outcome.as_str()));
}

// --- notifications, sessions, headers ---

#[tokio::test]
async fn a_notification_answered_202_is_acknowledged() {
    let server = Server::answering("202 Accepted", &[("Mcp-Session-Id", "s-1")], b"").await;
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (result, _) = call(&server.url(), note).await;
    assert_eq!(result.outcome, LegOutcome::Answered);
    assert_eq!(result.failure, None);
    assert_eq!(result.reply.resp_type, RespType::NotifyAck);
    assert_eq!(result.reply.resp_code, 202);
    assert!(result.reply.resp_json.is_none());
    assert_eq!(result.reply.resp_headers["Mcp-Session-Id"], vec!["s-1"]);
    assert_eq!(server.seen()[0].body, note.as_bytes());
}

#[tokio::test]
async fn a_notification_refused_with_500_is_a_failed_ack() {
    let server = Server::answering("500 Internal Server Error", &[], b"boom").await;
    let (result, _) = call(&server.url(), r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#).await;
    assert_eq!(result.failure, Some(LegFailure::HttpStatus(500)));
    assert_eq!(result.outcome, LegOutcome::Abandoned);
    assert_eq!(result.reply.resp_type, RespType::NotifyAck);
    assert_eq!(result.reply.resp_code, 500);
    assert!(result.reply.resp_json.is_none());
}

#[tokio::test]
async fn session_termination_sends_delete_with_the_session_header() {
    let server = Server::answering("204 No Content", &[], b"").await;
    let t = transport(&server.url());
    let admission = admission().await;
    let h = headers(&[("Mcp-Session-Id", &["s-42"]), ("Mcp-Protocol-Version", &["2025-06-18"])]);
    let result = timeout(TEST_BOUND, t.terminate_session(&admission, &h, None))
        .await
        .unwrap();
    assert_eq!(result.outcome, LegOutcome::Answered);
    assert_eq!(result.failure, None);
    assert_eq!(result.reply.resp_type, RespType::SessionTerminationResponse);
    assert_eq!(result.reply.resp_code, 204);
    assert!(result.reply.resp_json.is_none());
    let seen = server.seen();
    assert_eq!(seen[0].method, "DELETE");
    assert_eq!(seen[0].header("mcp-session-id"), vec!["s-42"]);
    assert_eq!(seen[0].header("mcp-protocol-version"), vec!["2025-06-18"]);
}

#[tokio::test]
async fn session_termination_reports_the_servers_status_and_connect_failures() {
    let server = Server::answering("405 Method Not Allowed", &[], b"").await;
    let admission = admission().await;
    let result = t_terminate(&server.url(), &admission).await;
    assert_eq!((result.outcome, result.reply.resp_code), (LegOutcome::Answered, 405));
    let dead = dead_port().await;
    let result = t_terminate(&format!("http://{dead}/mcp"), &admission).await;
    assert_eq!(result.failure, Some(LegFailure::ConnectRefused));
    assert_eq!(result.reply.resp_type, RespType::SessionTerminationResponse);
    assert!(result.reply.resp_json.is_none());
}

async fn t_terminate(url: &str, admission: &Admission) -> LegResult {
    let h = headers(&[("Mcp-Session-Id", &["s"])]);
    timeout(TEST_BOUND, transport(url).terminate_session(admission, &h, None))
        .await
        .unwrap()
}

#[tokio::test]
async fn multi_valued_headers_are_forwarded_and_hop_by_hop_ones_are_not() {
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let server = Server::answering("200 OK", &[("Content-Type", "application/json")], body.as_bytes()).await;
    let h = headers(&[
        ("X-Trace", &["a", "b"]),
        ("Authorization", &["Bearer connector-token"]),
        ("Mcp-Session-Id", &["s-1"]),
        ("Accept", &["application/json"]),
        ("Connection", &["close, X-Hop"]),
        ("X-Hop", &["per-hop"]),
        ("Keep-Alive", &["timeout=5"]),
        ("Transfer-Encoding", &["chunked"]),
        ("Proxy-Authorization", &["Basic x"]),
        ("Host", &["evil.example"]),
        ("Content-Length", &["1"]),
        ("Content-Type", &["text/plain"]),
        ("Upgrade", &["h2c"]),
        ("TE", &["trailers"]),
    ]);
    let (result, _) = run(&transport(&server.url()), &payload(CALL), &h, None).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    let seen = &server.seen()[0];
    assert_eq!(seen.header("x-trace"), vec!["a", "b"]);
    assert_eq!(seen.header("authorization"), vec!["Bearer connector-token"]);
    assert_eq!(seen.header("mcp-session-id"), vec!["s-1"]);
    assert_eq!(
        seen.header("accept"),
        vec!["application/json"],
        "the command's Accept replaces the default"
    );
    assert_eq!(seen.header("content-type"), vec!["application/json"]);
    assert_eq!(seen.header("content-length"), vec![CALL.len().to_string().as_str()]);
    assert_eq!(seen.header("host"), vec![server.addr.to_string().as_str()]);
    for absent in [
        "keep-alive",
        "transfer-encoding",
        "proxy-authorization",
        "upgrade",
        "te",
    ] {
        assert!(seen.header(absent).is_empty(), "{absent} must not be forwarded");
    }
    assert!(
        seen.header("x-hop").is_empty(),
        "a header named by Connection is hop-by-hop"
    );
    assert!(!seen
        .header("connection")
        .iter()
        .any(|v| v.to_ascii_lowercase().contains("x-hop")));
}

#[tokio::test]
async fn closed_connections_are_rebuilt_on_the_next_leg() {
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let ok = || {
        Act::Reply(reply(
            "200 OK",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        ))
    };
    let server = Server::start(vec![ok(), ok()]).await;
    let t = transport(&server.url());
    assert_eq!(
        run(&t, &payload(CALL), &Vec::new(), None).await.0.outcome,
        LegOutcome::Answered
    );
    t.close_connections();
    assert_eq!(
        run(&t, &payload(CALL), &Vec::new(), None).await.0.outcome,
        LegOutcome::Answered
    );
}

#[test]
fn setup_rejects_bad_urls_without_echoing_them() {
    let err = HttpTransport::from_text("main", "not a url ://secret", settings()).unwrap_err();
    assert_eq!(err.kind(), "invalid_url");
    assert!(!err.to_string().contains("secret"));
    let err = HttpTransport::from_text("main", "ftp://host/secret", settings()).unwrap_err();
    assert_eq!(err.kind(), "unsupported_scheme");
    assert!(!err.to_string().contains("secret"));
    let t = HttpTransport::from_text("main", "http://user:secret@127.0.0.1/", settings()).unwrap();
    assert!(!format!("{t:?}").contains("secret"));
}

// --- resume ---

const SESSION: [(&str, &str); 1] = [("Mcp-Session-Id", "s-9")];
const PROGRESS: &[u8] =
    b"id: ev-1\nretry: 20\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n";

fn cut_stream() -> Act {
    Act::Parts(vec![
        sse_head(&SESSION),
        PROGRESS.to_vec(),
        b"id: ev-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,".to_vec(),
    ])
}

#[tokio::test]
async fn a_cut_stream_is_resumed_with_last_event_id_and_recovers_the_response() {
    let mut resumed = sse_head(&SESSION);
    resumed.extend_from_slice(b"id: ev-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resumed\":true}}\n\n");
    let server = Server::start(vec![cut_stream(), Act::Reply(resumed)]).await;
    let h = headers(&[
        ("Mcp-Protocol-Version", &["2025-06-18"]),
        ("Authorization", &["Bearer t"]),
        ("X-Other", &["o"]),
    ]);
    let (result, notes) = run(&transport(&server.url()), &payload(CALL), &h, None).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    assert_eq!(result.failure, None);
    assert_eq!(
        resp_json(&result),
        r#"{"jsonrpc":"2.0","id":1,"result":{"resumed":true}}"#
    );
    assert_eq!(notes.len(), 1);
    let seen = server.seen();
    assert_eq!(
        seen.iter().map(|s| s.method.as_str()).collect::<Vec<_>>(),
        vec!["POST", "GET"],
        "never a second POST"
    );
    let get = &seen[1];
    assert_eq!(get.header("last-event-id"), vec!["ev-1"]);
    assert_eq!(get.header("accept"), vec!["text/event-stream"]);
    assert_eq!(get.header("mcp-session-id"), vec!["s-9"]);
    assert_eq!(get.header("mcp-protocol-version"), vec!["2025-06-18"]);
    assert_eq!(get.header("authorization"), vec!["Bearer t"]);
    assert!(get.header("x-other").is_empty());
    assert!(get.body.is_empty());
}

#[tokio::test]
async fn the_2026_07_28_revision_is_never_resumed() {
    let server = Server::start(vec![cut_stream()]).await;
    let h = headers(&[("Mcp-Protocol-Version", &["2026-07-28"]), ("Mcp-Session-Id", &["s-9"])]);
    // A 2026-07-28 server's channel: its callers' requests pass untouched.
    let modern = transport(&server.url()).with_era(crate::downstream::EraSetting::Modern);
    let (result, _) = run(&modern, &payload(CALL), &h, None).await;
    assert_cut_before_response(&result);
    server.settled().await;
    assert_eq!(server.seen().len(), 1);
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_stream_without_event_ids_or_session_is_not_resumed() {
    let no_ids = Act::Parts(vec![
        sse_head(&SESSION),
        b"data: {\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n\n".to_vec(),
    ]);
    let no_session = Act::Parts(vec![sse_head(&[]), PROGRESS.to_vec()]);
    for act in [no_ids, no_session] {
        let server = Server::start(vec![act]).await;
        let (result, _) = call(&server.url(), CALL).await;
        assert_cut_before_response(&result);
        server.settled().await;
        assert_eq!(server.seen().len(), 1);
    }
}

#[tokio::test]
async fn a_resume_refused_with_405_stays_abandoned() {
    let server = Server::start(vec![
        cut_stream(),
        Act::Reply(reply("405 Method Not Allowed", &[], b"")),
    ])
    .await;
    let (result, _) = call(&server.url(), CALL).await;
    assert_cut_before_response(&result);
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn resume_stops_after_five_attempts() {
    let mut recut = sse_head(&SESSION);
    recut.extend_from_slice(b": still working\n\n");
    let mut script = vec![cut_stream()];
    script.extend((0..5).map(|_| Act::Reply(recut.clone())));
    let server = Server::start(script).await;
    let (result, _) = call(&server.url(), CALL).await;
    assert_cut_before_response(&result);
    let seen = server.seen();
    assert_eq!(
        seen.iter().map(|s| s.method.as_str()).collect::<Vec<_>>(),
        vec!["POST", "GET", "GET", "GET", "GET", "GET"]
    );
    assert_eq!(seen[5].header("last-event-id"), vec!["ev-1"]);
}

#[tokio::test]
async fn a_latch_between_the_cut_and_the_resume_sends_nothing_more() {
    let server = Server::start(vec![cut_stream()]).await;
    let fence = Fence::new(true, 1);
    let admission = fence.admit(CommandRef::default()).await.unwrap();
    let (tx, mut rx) = mpsc::channel(1);
    let t = transport(&server.url());
    let leg = call_admitted(&t, &admission, &tx);
    // Latch as soon as the first notification arrives: the stream is then cut, and the
    // resume must be refused by the recheck.
    let latch = async {
        let note = rx.recv().await;
        fence.latch(FatalCategory::DownstreamAmbiguous, &CommandRef::default());
        note
    };
    let (result, note) = timeout(TEST_BOUND, async { tokio::join!(leg, latch) }).await.unwrap();
    assert!(note.is_some());
    // The POST was delivered before the latch: the leg is abandoned, not "not sent".
    assert_cut_before_response(&result);
    server.settled().await;
    assert_eq!(server.seen().len(), 1, "no resume GET after the latch");
}
