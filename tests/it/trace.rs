//! One trace across the tunnel, against real peers: a real OTLP receiver (`oteltap`), the
//! Python SDK MCP server (which reports the trace context it received, and whose own
//! OpenTelemetry middleware extracts it), server-everything over HTTP, and recording
//! servers for the exact bytes. Also holds the exported spans against docs/telemetry.md.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

use crate::harness::{
    self, final_json, python, spawn_py_server, spawn_server_everything_http, wait_until, ChildGuard, PyMode, Rig,
    RigOptions, KEY,
};
use crate::otlp::oteltap;

const EXIT: Duration = Duration::from_secs(20);

/// A caller's trace: the MCP client's span the gateway's spans must join.
struct Caller {
    trace_id: &'static str,
    span_id: &'static str,
}

impl Caller {
    fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

const CALLER: Caller = Caller {
    trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
    span_id: "00f067aa0ba902b7",
};
const CALLER_STATE: &str = "caller=t61rcWkgMzE";

// ---------------------------------------------------------------------------------------
// Reading what the receiver got
// ---------------------------------------------------------------------------------------

/// Every span the receiver printed (one OTLP/JSON span per line).
struct Spans(Vec<Value>);

impl Spans {
    fn of(tap: &ChildGuard) -> Spans {
        Spans(
            tap.stdout()
                .lines()
                .filter(|l| l.starts_with('{'))
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("receiver printed non-JSON ({e}): {l}")))
                .collect(),
        )
    }

    /// Waits until the receiver has the `tunnelgate.command` span of each request id and
    /// each of its children, then returns everything it got.
    async fn wait_for(tap: &ChildGuard, request_ids: &[&str]) -> Spans {
        wait_until(
            "the commands' spans at the receiver",
            Duration::from_secs(15),
            || async {
                let spans = Spans::of(tap);
                request_ids.iter().all(|id| {
                    spans
                        .try_command(id)
                        .is_some_and(|c| spans.children(c).iter().any(|s| s["name"] == "tunnelgate.deliver"))
                })
            },
        )
        .await;
        Spans::of(tap)
    }

    fn try_command(&self, request_id: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|s| s["name"] == "tunnelgate.command" && str_attr(s, "tunnelgate.request_id") == Some(request_id))
    }

    fn command(&self, request_id: &str) -> &Value {
        self.try_command(request_id)
            .unwrap_or_else(|| panic!("no tunnelgate.command span for {request_id}"))
    }

    fn children(&self, parent: &Value) -> Vec<&Value> {
        self.0
            .iter()
            .filter(|s| s["parentSpanId"] == parent["spanId"])
            .collect()
    }

    /// The command's downstream (MCP client) span.
    fn downstream(&self, command: &Value) -> &Value {
        let found: Vec<_> = self
            .children(command)
            .into_iter()
            .filter(|s| is_downstream(s))
            .collect();
        assert_eq!(found.len(), 1, "one downstream span under {command}");
        found[0]
    }
}

fn is_downstream(span: &Value) -> bool {
    span["kind"] == 3 && !span["name"].as_str().unwrap_or("").starts_with("tunnelgate.")
}

/// The OTLP `AnyValue` of attribute `key` of a span or an event.
fn attr<'a>(item: &'a Value, key: &str) -> Option<&'a Value> {
    item["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn str_attr<'a>(item: &'a Value, key: &str) -> Option<&'a str> {
    attr(item, key)?["stringValue"].as_str()
}

/// The traceparent a server sees when `span` is its parent (sampled).
fn traceparent_of(span: &Value) -> String {
    format!(
        "00-{}-{}-01",
        span["traceId"].as_str().unwrap(),
        span["spanId"].as_str().unwrap()
    )
}

/// What `trace_seen` (tests/peers/py_server.py) reported, from the command's final answer.
fn seen_by_server(answer: &Value) -> Value {
    let text = answer["resp_json"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("trace_seen answered: {answer}"));
    serde_json::from_str(text).unwrap()
}

fn trace_seen(id: u64) -> NewCommand {
    NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"trace_seen","arguments":{}}}),
    )
}

/// `trace_seen` with the caller's context in `params._meta` (beside a progress token).
fn trace_seen_with_meta(id: u64, traceparent: &str) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "name":"trace_seen","arguments":{},"_meta":{"progressToken":"tok-7","traceparent":traceparent}}}))
}

fn with_caller_headers(cmd: NewCommand) -> NewCommand {
    cmd.header("traceparent", CALLER.traceparent())
        .header("tracestate", CALLER_STATE)
}

/// Default mode, exporting to the receiver on `port`, with `propagate` and `more` TOML.
fn traced(rig: &Rig, port: u16, propagate: &str, more: &str) -> String {
    rig.config(&RigOptions {
        strict: false,
        extra: &format!("otlp_endpoint = \"http://127.0.0.1:{port}\"\npropagate = \"{propagate}\"\n{more}"),
        ..Default::default()
    })
}

/// The series line of `tunnelgate_trace_context_invalid_total{source}`.
fn invalid_series(source: &str, n: u64) -> String {
    format!("tunnelgate_trace_context_invalid_total{{source=\"{source}\"}} {n}")
}

// ---------------------------------------------------------------------------------------
// Continuing the caller's trace and handing it on
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_callers_trace_runs_through_the_gateway_to_the_python_server_with_propagate_both() {
    let (tap, port) = oteltap().await;
    let (_server, url) = spawn_py_server(PyMode::Stateless).await;
    let rig = Rig::start("").await;
    let config = traced(&rig, port, "both", "").replace(&rig.stub.url(), &url);
    let mut gw = rig.spawn_gateway(&config).await;

    let id = rig.sim.enqueue(with_caller_headers(trace_seen(1)));
    let rec = rig.wait("trace_seen answered", |r| r.is_completed(&id)).await;
    let seen = seen_by_server(&final_json(&rec, &id));
    let metrics = rig.metrics().await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let spans = Spans::wait_for(&tap, &[&id]).await;

    let command = spans.command(&id);
    assert_eq!(
        command["traceId"], CALLER.trace_id,
        "the caller's trace continues: {command}"
    );
    assert_eq!(
        command["parentSpanId"], CALLER.span_id,
        "the caller's span is the parent"
    );
    let downstream = spans.downstream(command);
    assert_eq!(downstream["traceId"], CALLER.trace_id);
    assert_eq!(downstream["name"], "tools/call trace_seen");
    let expected = traceparent_of(downstream);
    assert_eq!(seen["header_traceparent"], expected.as_str(), "{seen}");
    assert_eq!(seen["meta_traceparent"], expected.as_str(), "{seen}");
    assert_eq!(
        seen["header_tracestate"], CALLER_STATE,
        "the caller's tracestate goes along"
    );
    assert_eq!(seen["meta_tracestate"], CALLER_STATE);
    assert_eq!(
        seen["sdk_parent"],
        json!({"trace_id": CALLER.trace_id, "span_id": downstream["spanId"]}),
        "the SDK's own middleware takes the gateway's downstream span as the parent"
    );
    for child in ["tunnelgate.queue", "tunnelgate.fence_wait", "tunnelgate.deliver"] {
        assert!(
            spans
                .children(command)
                .iter()
                .any(|s| s["name"] == child && s["traceId"] == CALLER.trace_id),
            "{child} in the caller's trace"
        );
    }
    for source in ["header", "meta"] {
        assert!(metrics.contains(&invalid_series(source, 0)), "{metrics}");
    }
}

#[tokio::test]
async fn propagate_headers_sets_only_the_header_and_a_meta_context_is_continued_untouched() {
    let (tap, port) = oteltap().await;
    let (_server, url) = spawn_py_server(PyMode::Stateless).await;
    let rig = Rig::start("").await;
    let config = traced(&rig, port, "headers", "").replace(&rig.stub.url(), &url);
    let mut gw = rig.spawn_gateway(&config).await;

    let id = rig.sim.enqueue(trace_seen_with_meta(1, &CALLER.traceparent()));
    let rec = rig.wait("trace_seen answered", |r| r.is_completed(&id)).await;
    let seen = seen_by_server(&final_json(&rec, &id));
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let spans = Spans::wait_for(&tap, &[&id]).await;

    let command = spans.command(&id);
    assert_eq!(command["parentSpanId"], CALLER.span_id, "params._meta is a carrier too");
    let downstream = spans.downstream(command);
    assert_eq!(
        seen["header_traceparent"],
        traceparent_of(downstream).as_str(),
        "{seen}"
    );
    assert_eq!(seen["header_tracestate"], Value::Null);
    assert_eq!(
        seen["meta_traceparent"],
        CALLER.traceparent().as_str(),
        "headers mode leaves the message's own _meta as it came"
    );
    // The SDK hands `_meta` to tools with its own key spelling.
    assert_eq!(seen["meta_keys"], json!(["progress_token", "traceparent"]));
}

#[tokio::test]
async fn propagate_meta_reaches_a_stdio_python_server_and_never_overwrites_the_callers_meta() {
    let (tap, port) = oteltap().await;
    let rig = Rig::start("").await;
    let argv = json!([
        python().display().to_string(),
        harness::peer_script("py_server.py").display().to_string(),
        "--mode",
        "stdio"
    ]);
    let config = traced(&rig, port, "meta", &format!("[mcp.channels.py]\ncommand = {argv}\n"));
    let mut gw = rig.spawn_gateway(&config).await;

    let init = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}))
        .channel("py"),
    );
    rig.wait("initialize answered", |r| r.is_completed(&init)).await;
    let note = rig
        .sim
        .enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).channel("py"));
    rig.wait("initialized", |r| r.is_completed(&note)).await;
    // The caller's context in the connector headers: handed on in _meta as the gateway's.
    let from_header = rig.sim.enqueue(with_caller_headers(trace_seen(2)).channel("py"));
    // The caller's own _meta.traceparent: forwarded as it came, never overwritten.
    let other = "00-11111111111111111111111111111111-2222222222222222-01";
    let own_meta = rig.sim.enqueue(trace_seen_with_meta(3, other).channel("py"));
    let rec = rig
        .wait("both answered", |r| {
            r.is_completed(&from_header) && r.is_completed(&own_meta)
        })
        .await;
    let seen_header = seen_by_server(&final_json(&rec, &from_header));
    let seen_meta = seen_by_server(&final_json(&rec, &own_meta));
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let spans = Spans::wait_for(&tap, &[&from_header, &own_meta]).await;

    let command = spans.command(&from_header);
    assert_eq!(command["traceId"], CALLER.trace_id);
    let downstream = spans.downstream(command);
    assert_eq!(str_attr(downstream, "network.transport"), Some("pipe"));
    assert_eq!(seen_header["header_traceparent"], Value::Null, "stdio has no headers");
    assert_eq!(
        seen_header["meta_traceparent"],
        traceparent_of(downstream).as_str(),
        "{seen_header}"
    );
    assert_eq!(seen_header["meta_tracestate"], CALLER_STATE);
    assert_eq!(
        seen_header["sdk_parent"]["span_id"], downstream["spanId"],
        "the stdio server's SDK sees the downstream span as its parent"
    );
    assert_eq!(
        seen_meta["meta_traceparent"], other,
        "the caller's _meta is never overwritten"
    );
    assert_eq!(seen_meta["meta_keys"], json!(["progress_token", "traceparent"]));
    assert_eq!(
        spans.command(&own_meta)["parentSpanId"],
        "2222222222222222",
        "and its command continues that trace"
    );
}

#[tokio::test]
async fn server_everything_over_http_accepts_the_handed_on_context_and_keeps_the_progress_token() {
    let (tap, port) = oteltap().await;
    let (_server, url) = spawn_server_everything_http().await;
    let rig = Rig::start("").await;
    let config = traced(&rig, port, "both", "").replace(&rig.stub.url(), &url);
    let mut gw = rig.spawn_gateway(&config).await;

    let init = rig.sim.enqueue(with_caller_headers(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}),
    )));
    let rec = rig.wait("initialize answered", |r| r.is_completed(&init)).await;
    let session = final_json(&rec, &init)["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .expect("a session")
        .to_owned();
    let in_session = |c: NewCommand| {
        with_caller_headers(c)
            .header("Mcp-Session-Id", session.clone())
            .header("Mcp-Protocol-Version", "2025-06-18")
    };
    let note = rig.sim.enqueue(in_session(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    )));
    rig.wait("initialized", |r| r.is_completed(&note)).await;
    // No params at all: the gateway adds params._meta.
    let list = rig.sim.enqueue(in_session(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
    )));
    // _meta with a progress token: the context joins it, the token still drives progress.
    let long = rig.sim.enqueue(in_session(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":3,"method":"tools/call",
        "params":{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":2},"_meta":{"progressToken":"tok-9"}}}))));
    let rec = rig
        .wait("all answered", |r| r.is_completed(&list) && r.is_completed(&long))
        .await;
    assert!(
        final_json(&rec, &list)["resp_json"]["result"]["tools"].is_array(),
        "{}",
        final_json(&rec, &list)
    );
    let progress: Vec<Value> = rec
        .responses_for(&long)
        .filter(|r| r.resp_type.as_deref() == Some("jsonrpc_notify"))
        .filter_map(|r| r.json.as_ref().map(|j| j["resp_json"].clone()))
        .collect();
    assert!(progress.len() >= 2, "progress notifications: {progress:?}");
    assert!(
        progress.iter().all(|p| p["params"]["progressToken"] == "tok-9"),
        "{progress:?}"
    );
    assert!(final_json(&rec, &long)["resp_json"]["result"].is_object());
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let spans = Spans::wait_for(&tap, &[&init, &list, &long]).await;

    let long_span = spans.command(&long);
    assert_eq!(long_span["traceId"], CALLER.trace_id);
    let events: Vec<_> = long_span["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "tunnelgate.notification")
        .collect();
    assert_eq!(events.len(), progress.len(), "one event per forwarded notification");
    assert_eq!(str_attr(events[0], "mcp.method.name"), Some("notifications/progress"));
    let init_span = spans.downstream(spans.command(&init));
    let hashed = str_attr(init_span, "mcp.session.id").expect("the session, hashed");
    assert!(hashed.starts_with("sha256:") && !hashed.contains(&session), "{hashed}");
    assert_eq!(
        str_attr(spans.downstream(spans.command(&list)), "mcp.session.id"),
        Some(hashed),
        "the same session hashes the same"
    );
    assert!(!tap.stdout().contains(&session), "the session id never leaves in clear");
}

// ---------------------------------------------------------------------------------------
// Bytes on the wire
// ---------------------------------------------------------------------------------------

/// What a recording MCP server received: each POST's body and headers.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, http::HeaderMap)>>>;

/// An MCP server that records every POST and answers each with an empty result.
async fn recording_server() -> (String, Received) {
    let seen: Received = Default::default();
    let store = seen.clone();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: http::HeaderMap, body: axum::body::Bytes| {
            let store = store.clone();
            async move {
                let text = String::from_utf8(body.to_vec()).unwrap();
                let id = serde_json::from_str::<Value>(&text).unwrap()["id"].clone();
                store.lock().unwrap().push((text, headers));
                (
                    [("content-type", "application/json")],
                    json!({"jsonrpc":"2.0","id":id,"result":{}}).to_string(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// A payload with a caller's context in `_meta`, odd spacing, key order and numbers.
fn odd_payload(traceparent: &str) -> String {
    format!(
        r#"{{"params":{{"z":[1.0,-0] ,"_meta":{{"traceparent":"{traceparent}","k":1}},"name":"x"}},"id":"rpc-o","method":"tools/call","jsonrpc":"2.0"}}"#
    )
}

fn raw(payload: &str) -> NewCommand {
    NewCommand::jsonrpc_raw(serde_json::value::RawValue::from_string(payload.to_owned()).unwrap())
}

#[tokio::test]
async fn with_propagate_off_the_mcp_server_gets_the_commands_bytes_and_headers_exactly() {
    let (tap, port) = oteltap().await;
    let (url, received) = recording_server().await;
    let rig = Rig::start("").await;
    let config = traced(&rig, port, "off", "").replace(&rig.stub.url(), &url);
    let mut gw = rig.spawn_gateway(&config).await;

    let payload = odd_payload(&CALLER.traceparent());
    let header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let id = rig.sim.enqueue(raw(&payload).header("traceparent", header));
    rig.wait("answered", |r| r.is_completed(&id)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());

    let received = received.lock().unwrap().clone();
    let (body, headers) = &received[0];
    assert_eq!(body, &payload, "the MCP server receives the exact bytes");
    assert_eq!(
        headers.get_all("traceparent").iter().collect::<Vec<_>>(),
        vec![header],
        "the caller's header passes through as it came"
    );
    assert!(headers.get("tracestate").is_none());
    // Export is on: the gateway's spans still continue the caller's trace (meta wins).
    let spans = Spans::wait_for(&tap, &[&id]).await;
    assert_eq!(spans.command(&id)["parentSpanId"], CALLER.span_id);
}

#[tokio::test]
async fn with_propagate_meta_the_forwarded_bytes_differ_only_by_the_inserted_context() {
    let (tap, port) = oteltap().await;
    let (url, received) = recording_server().await;
    let rig = Rig::start("").await;
    let config = traced(&rig, port, "meta", "").replace(&rig.stub.url(), &url);
    let mut gw = rig.spawn_gateway(&config).await;

    let payload =
        r#"{"params":{"z":[1.0,-0] ,"_meta":{"k":1},"name":"x"},"id":"rpc-m","method":"tools/call","jsonrpc":"2.0"}"#;
    let id = rig.sim.enqueue(with_caller_headers(raw(payload)));
    rig.wait("answered", |r| r.is_completed(&id)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let spans = Spans::wait_for(&tap, &[&id]).await;
    let downstream = spans.downstream(spans.command(&id));

    let received = received.lock().unwrap().clone();
    let (body, headers) = &received[0];
    let inserted = format!(
        r#","traceparent":"{}","tracestate":"{CALLER_STATE}""#,
        traceparent_of(downstream)
    );
    let at = payload.find(r#""k":1"#).unwrap() + r#""k":1"#.len();
    assert_eq!(
        body,
        &format!("{}{inserted}{}", &payload[..at], &payload[at..]),
        "one insertion at the end of _meta, every other byte as sent"
    );
    assert_eq!(
        headers.get("traceparent").map(|v| v.to_str().unwrap().to_owned()),
        Some(CALLER.traceparent()),
        "meta mode leaves the connector headers as they came"
    );
}

#[tokio::test]
async fn a_malformed_trace_context_is_ignored_counted_and_never_echoed() {
    let (tap, port) = oteltap().await;
    let rig = Rig::start("").await;
    let canary = "TRACE-CANARY-7781";
    let config =
        traced(&rig, port, "both", "").replace("log_level = \"info\"", "log_level = \"tunnelgate=debug,info\"");
    let mut gw = rig.spawn_gateway(&config).await;

    let bad_header = rig.sim.enqueue(
        NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":1,"method":"ping"}))
            .header("traceparent", format!("00-{canary}-b7ad6b7169203331-01")),
    );
    let bad_meta = rig
        .sim
        .enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":2,"method":"ping",
        "params":{"_meta":{"traceparent": format!("00-{}-{canary}-01", CALLER.trace_id)}}})));
    let not_text = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":{"traceparent": 42}}}),
    ));
    let rec = rig
        .wait("all answered", |r| {
            [&bad_header, &bad_meta, &not_text].iter().all(|id| r.is_completed(id))
        })
        .await;
    for id in [&bad_header, &bad_meta, &not_text] {
        assert!(
            final_json(&rec, id)["resp_json"]["result"].is_object(),
            "served as usual: {}",
            final_json(&rec, id)
        );
    }
    let metrics = rig.metrics().await;
    assert!(metrics.contains(&invalid_series("header", 1)), "{metrics}");
    assert!(metrics.contains(&invalid_series("meta", 2)), "{metrics}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let spans = Spans::wait_for(&tap, &[&bad_header, &bad_meta, &not_text]).await;
    for id in [&bad_header, &bad_meta, &not_text] {
        let command = spans.command(id);
        assert_eq!(command["parentSpanId"], "", "a trace of its own: {command}");
        assert_ne!(command["traceId"], CALLER.trace_id);
    }
    assert!(!tap.stdout().contains(canary), "the malformed value is not exported");
    assert!(!gw.stderr().contains(canary), "nor logged, even at debug");
    assert!(
        gw.stderr().contains("malformed trace context ignored"),
        "the debug line says what happened, without the value"
    );
}

#[tokio::test]
async fn a_polled_trace_context_is_the_parent_unless_the_headers_carry_one_and_a_malformed_one_is_counted() {
    let (tap, port) = oteltap().await;
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&traced(&rig, port, "off", "")).await;
    let ping = |id: u64| NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"ping"}));
    let polled = json!({"traceparent": CALLER.traceparent(), "tracestate": CALLER_STATE, "vendor": true});
    let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let adopted = rig.sim.enqueue(ping(1).trace_context(polled.clone()));
    // A `tracestate` header alone (no traceparent) still makes the polled one ignored.
    let header_named = rig
        .sim
        .enqueue(ping(2).trace_context(polled.clone()).header("TraceState", "x=1"));
    let header_wins = rig
        .sim
        .enqueue(ping(3).trace_context(polled).header("traceparent", other));
    let malformed = rig
        .sim
        .enqueue(ping(4).trace_context(json!({"traceparent": "00-zz-not-a-context"})));
    let ids = [&adopted, &header_named, &header_wins, &malformed];
    let rec = rig
        .wait("all answered", |r| ids.iter().all(|id| r.is_completed(id)))
        .await;
    for id in ids {
        assert!(
            final_json(&rec, id)["resp_json"]["result"].is_object(),
            "served as usual"
        );
    }
    let metrics = rig.metrics().await;
    assert!(metrics.contains(&invalid_series("trace_context", 1)), "{metrics}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let spans = Spans::wait_for(&tap, &ids.map(String::as_str)).await;
    let adopted = spans.command(&adopted);
    assert_eq!(adopted["traceId"], CALLER.trace_id, "{adopted}");
    assert_eq!(adopted["parentSpanId"], CALLER.span_id, "{adopted}");
    let named = spans.command(&header_named);
    assert_ne!(
        named["traceId"], CALLER.trace_id,
        "ignored beside a trace header: {named}"
    );
    let wins = spans.command(&header_wins);
    assert_eq!(
        wins["traceId"], "0af7651916cd43dd8448eb211c80319c",
        "the header's: {wins}"
    );
    let own = spans.command(&malformed);
    assert_eq!(own["parentSpanId"], "", "a trace of its own: {own}");
}

// ---------------------------------------------------------------------------------------
// The table in docs/telemetry.md
// ---------------------------------------------------------------------------------------

/// One row of a table in docs/telemetry.md: `(span or event, attribute) -> (type, always)`.
type Rows = BTreeMap<(String, String), (String, bool)>;

struct Documented {
    /// Span name (or `{mcp.method.name} [{target}]`) -> OTLP kind number.
    kinds: BTreeMap<String, u64>,
    span_attributes: Rows,
    event_attributes: Rows,
}

/// Parses the span and event tables of docs/telemetry.md.
fn documented() -> Documented {
    let text = std::fs::read_to_string(harness::repo_root().join("docs/telemetry.md")).unwrap();
    let cell = |c: &str| c.trim().trim_matches('`').to_owned();
    let mut doc = Documented {
        kinds: BTreeMap::new(),
        span_attributes: BTreeMap::new(),
        event_attributes: BTreeMap::new(),
    };
    let mut section = "";
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = match heading {
                "Spans" => "spans",
                "Events" => "events",
                _ => "",
            };
            continue;
        }
        let cells: Vec<&str> = line.split('|').collect();
        if section.is_empty() || cells.len() != 7 || !cells[1].trim().starts_with('`') {
            continue;
        }
        let (name, second, attribute, kind, when) =
            (cell(cells[1]), cell(cells[2]), cell(cells[3]), cell(cells[4]), cells[5]);
        let always = when.trim().starts_with("always");
        match section {
            "spans" => {
                let number = match second.as_str() {
                    "internal" => 1,
                    "client" => 3,
                    other => panic!("unknown span kind {other} in docs/telemetry.md"),
                };
                doc.kinds.insert(name.clone(), number);
                if attribute != "—" {
                    doc.span_attributes.insert((name, attribute), (kind, always));
                }
            }
            _ => {
                doc.event_attributes.insert((name, attribute), (kind, always));
            }
        }
    }
    assert!(
        doc.span_attributes.len() > 20 && doc.event_attributes.len() >= 4,
        "tables parsed"
    );
    doc
}

/// The table's type name of an OTLP `AnyValue`.
fn type_of(value: &Value) -> &'static str {
    let object = value.as_object().expect("an AnyValue is an object");
    match object.keys().next().map(String::as_str) {
        Some("stringValue") => "string",
        Some("intValue") => "int",
        Some("boolValue") => "bool",
        Some("doubleValue") => "double",
        other => panic!("unexpected value kind {other:?}"),
    }
}

/// Checks `item`'s attributes against the rows of `owner` (an event or a span), records
/// which rows were seen, and returns the problems found.
fn check_attributes(item: &Value, owner: &str, rows: &Rows, seen: &mut BTreeSet<(String, String)>) -> Vec<String> {
    let mut problems = Vec::new();
    for a in item["attributes"].as_array().unwrap() {
        let key = a["key"].as_str().unwrap().to_owned();
        match rows.get(&(owner.to_owned(), key.clone())) {
            None => problems.push(format!("{owner}: attribute {key} is not in docs/telemetry.md")),
            Some((kind, _)) if kind != type_of(&a["value"]) => problems.push(format!(
                "{owner}: {key} is {} but documented as {kind}",
                type_of(&a["value"])
            )),
            Some(_) => {
                seen.insert((owner.to_owned(), key));
            }
        }
    }
    for ((name, key), (_, always)) in rows {
        if name == owner && *always && attr(item, key).is_none() {
            problems.push(format!("{owner}: documented as always present, {key} is missing"));
        }
    }
    problems
}

#[tokio::test]
async fn every_exported_span_attribute_and_event_is_in_docs_telemetry_md_and_every_row_is_seen() {
    let doc = documented();
    let (tap, port) = oteltap().await;
    let (_py, py_url) = spawn_py_server(PyMode::Stateless).await;
    let dead = format!("http://127.0.0.1:{}/mcp", harness::free_port());

    // Default mode: every kind of command and ending, across three channels.
    let rig = Rig::start(
        r#"
[[rule]]
match = { tool = "add", resp_type = "terminal" }
attempts = [1]
status = 503
"#,
    )
    .await;
    let channels = format!("[mcp.channels.py]\nurl = \"{py_url}\"\n[mcp.channels.dead]\nurl = \"{dead}\"\n");
    let mut gw = rig.spawn_gateway(&traced(&rig, port, "both", &channels)).await;
    let rpc = |id: u64, method: &str, params: Value| {
        NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
    };
    let init = rig.sim.enqueue(rpc(
        1,
        "initialize",
        json!({"protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"it","version":"1"}}),
    ));
    let rec = rig.wait("initialize answered", |r| r.is_completed(&init)).await;
    let session = final_json(&rec, &init)["resp_headers"]["Mcp-Session-Id"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let ids = vec![
        init,
        rig.sim.enqueue(with_caller_headers(
            rpc(2, "tools/call", json!({"name":"echo","arguments":{"message":KEY}}))
                .header("Mcp-Session-Id", session.clone())
                .header("Mcp-Protocol-Version", "2025-06-18"),
        )),
        rig.sim.enqueue(rpc(
            3,
            "tools/call",
            json!({"name":"slow","arguments":{"ms":10},"_meta":{"progressToken":"p"}}),
        )),
        rig.sim
            .enqueue(rpc(4, "tools/call", json!({"name":"add","arguments":{"a":1,"b":2}}))),
        rig.sim.enqueue(rpc(5, "prompts/get", json!({"name":"review"}))),
        rig.sim
            .enqueue(rpc(6, "tools/call", json!({"name":"fail","arguments":{"message":"x"}})).channel("py")),
        rig.sim.enqueue(rpc(7, "ping", json!({})).channel("dead")),
        rig.sim.enqueue(NewCommand::jsonrpc(
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )),
        rig.sim.enqueue(NewCommand::session_termination(Some(&session))),
        // A 2026-07-28 caller: bridged to the stub (a handshake-era server).
        rig.sim.enqueue(rpc(
            8,
            "tools/list",
            json!({"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{}}}),
        )),
    ];
    rig.sim
        .enqueue_raw(json!({"request_id":"req_malformed","shard_token":"s","created_at":"t","jsonrpc":[1]}));
    rig.wait("all answered", |r| {
        ids.iter().all(|id| r.is_completed(id)) && r.responses_for("req_malformed").next().is_some()
    })
    .await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    Spans::wait_for(&tap, &id_refs).await;

    // Strict mode: a 404 on the terminal POST latches, recorded on the command's span.
    let strict = Rig::start(
        r#"
[[rule]]
match = { tool = "echo", resp_type = "terminal" }
status = 404
"#,
    )
    .await;
    let mut config = strict.config(&RigOptions::default());
    config.push_str(&format!("otlp_endpoint = \"http://127.0.0.1:{port}\"\n"));
    let mut gw = strict.spawn_gateway(&config).await;
    let latched = strict.enqueue_call("echo", json!({"message":"x"}));
    assert_eq!(gw.wait_exit(EXIT).await, Some(82), "{}", gw.stderr());
    wait_until("the latch event at the receiver", Duration::from_secs(15), || async {
        tap.stdout().contains("tunnelgate.latch")
    })
    .await;

    // A server that asks mid-call: the caller's reply runs as tunnelgate.reply.
    let (_asking, asking_url) = spawn_py_server(PyMode::Sse).await;
    let replies = Rig::start("").await;
    let config = traced(&replies, port, "both", "").replace(&replies.stub.url(), &asking_url);
    let mut gw = replies.spawn_gateway(&config).await;
    let out = harness::run_py_client(
        &replies.sim.ingress_url(),
        &["--sampling-reply", "sampled", "--call", "sample", r#"{"prompt":"p"}"#],
    )
    .await;
    assert_eq!(out["results"][0]["texts"], json!(["sampled: sampled"]), "{out}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    wait_until("the reply's span at the receiver", Duration::from_secs(15), || async {
        tap.stdout().contains("\"tunnelgate.reply\"")
    })
    .await;

    let spans = Spans::of(&tap);
    assert!(spans.try_command(&latched).is_some());
    let mut problems = Vec::new();
    let mut seen_spans = BTreeSet::new();
    let mut seen_events = BTreeSet::new();
    for span in &spans.0 {
        let name = if is_downstream(span) {
            "{mcp.method.name} [{target}]".to_owned()
        } else {
            span["name"].as_str().unwrap().to_owned()
        };
        match doc.kinds.get(&name) {
            None => {
                problems.push(format!("span {name} is not in docs/telemetry.md"));
                continue;
            }
            Some(kind) if span["kind"] != *kind => problems.push(format!("span {name} has kind {}", span["kind"])),
            Some(_) => {}
        }
        problems.extend(check_attributes(span, &name, &doc.span_attributes, &mut seen_spans));
        let errored = span["status"]["code"] == 2;
        if errored != attr(span, "error.type").is_some() {
            problems.push(format!("{name}: status ERROR exactly when error.type is set: {span}"));
        }
        for event in span["events"].as_array().unwrap() {
            let event_name = event["name"].as_str().unwrap();
            if !doc.event_attributes.keys().any(|(e, _)| e == event_name) {
                problems.push(format!("event {event_name} is not in docs/telemetry.md"));
                continue;
            }
            problems.extend(check_attributes(
                event,
                event_name,
                &doc.event_attributes,
                &mut seen_events,
            ));
        }
    }
    for row in doc.span_attributes.keys() {
        if !seen_spans.contains(row) {
            problems.push(format!("documented but never seen: span {} attribute {}", row.0, row.1));
        }
    }
    for row in doc.event_attributes.keys() {
        if !seen_events.contains(row) {
            problems.push(format!(
                "documented but never seen: event {} attribute {}",
                row.0, row.1
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let out = tap.stdout();
    for secret in [KEY, session.as_str(), "Echo: "] {
        assert!(!out.contains(secret), "{secret:?} leaked into the exported spans");
    }
}
