use serde_json::{json, Value};

use super::*;

fn session(version: &str) -> Session {
    match read_init_answer(
        &json!({"jsonrpc":"2.0","id":1,"result":{
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "srv", "version": "1.2"},
            "instructions": "be kind"}})
        .to_string(),
    ) {
        InitAnswer::Opened(s) => s,
        other => panic!("not opened: {other:?}"),
    }
}

fn parsed(raw: &RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap()
}

#[test]
fn the_gateway_initialize_carries_the_configured_parameters_on_one_line() {
    let settings = SessionSettings::default();
    let line = initialize_line(&settings, 7);
    assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
    assert!(line.ends_with(b"\n"));
    let v: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(v["id"], 7);
    assert_eq!(v["method"], "initialize");
    assert_eq!(v["params"]["protocolVersion"], DEFAULT_PROTOCOL_VERSION);
    assert_eq!(v["params"]["clientInfo"]["name"], "tunnelgate");
    assert_eq!(v["params"]["clientInfo"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        v["params"]["capabilities"],
        json!({"sampling": {}, "elicitation": {}, "roots": {}})
    );
    let v: Value = serde_json::from_slice(INITIALIZED_LINE).unwrap();
    assert_eq!(v, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
}

#[test]
fn init_answers_are_read_as_opened_discovered_refused_or_invalid() {
    assert_eq!(session("2025-06-18").protocol_version, "2025-06-18");
    assert_eq!(session("2025-06-18").server_name(), Some("srv"));
    let cases = [
        (
            json!({"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"2026 only","data":{"supported":["2026-07-28"]}}}),
            InitAnswer::Discovered,
        ),
        (
            json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}),
            InitAnswer::Discovered,
        ),
        (
            json!({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}),
            InitAnswer::Refused { code: -32602 },
        ),
        (
            json!({"jsonrpc":"2.0","id":1,"error":{"message":"no code"}}),
            InitAnswer::Invalid("the error has no integer code"),
        ),
        (
            json!({"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}),
            InitAnswer::Invalid("the result has no protocolVersion"),
        ),
        (
            json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":""}}),
            InitAnswer::Invalid("the result has no protocolVersion"),
        ),
        (
            json!({"jsonrpc":"2.0","id":1,"result":[1]}),
            InitAnswer::Invalid("the result is not an object"),
        ),
    ];
    for (answer, expected) in cases {
        assert_eq!(read_init_answer(&answer.to_string()), expected, "{answer}");
    }
    assert_eq!(
        read_init_answer("not json"),
        InitAnswer::Invalid("the answer is not a JSON-RPC response")
    );
}

#[test]
fn a_caller_is_answered_from_the_session_with_its_own_id_and_the_session_revision() {
    let s = session("2025-06-18");
    for asked in ["2025-06-18", "2024-11-05", "2026-07-28", "1999-01-01"] {
        let request = json!({"jsonrpc":"2.0","id":"c-1","method":"initialize","params":{
            "protocolVersion": asked, "capabilities": {}, "clientInfo": {"name":"a","version":"1"}}})
        .to_string();
        let answer = answer_caller(&s, &request, r#""c-1""#, "00ff");
        let v = parsed(&answer.json);
        assert_eq!(v["id"], "c-1");
        assert_eq!(v["result"]["protocolVersion"], "2025-06-18", "asked {asked}");
        assert_eq!(v["result"]["serverInfo"], json!({"name":"srv","version":"1.2"}));
        assert_eq!(v["result"]["instructions"], "be kind");
        assert_eq!(v["result"]["capabilities"], json!({"tools":{"listChanged":true}}));
        assert_eq!(answer.session_id.as_deref(), Some("tg1.00ff."));
    }
}

#[test]
fn a_caller_initialize_without_a_revision_is_refused_as_a_server_would() {
    let s = session("2025-06-18");
    for request in [
        json!({"jsonrpc":"2.0","id":3,"method":"initialize"}),
        json!({"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}),
        json!({"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":7}}),
    ] {
        let answer = answer_caller(&s, &request.to_string(), "3", "ab");
        let v = parsed(&answer.json);
        assert_eq!(v["id"], 3);
        assert_eq!(v["error"]["code"], -32602, "{request}");
        assert!(answer.session_id.is_none());
    }
}

#[test]
fn declared_capabilities_travel_in_the_minted_session_id() {
    let s = session("2025-11-25");
    let cases = [
        (json!({}), Declared::default()),
        (
            json!({"sampling": {}}),
            Declared {
                sampling: true,
                ..Declared::default()
            },
        ),
        (
            json!({"elicitation": {"form": {}}, "roots": {"listChanged": true}, "sampling": null}),
            Declared {
                elicitation: true,
                roots: true,
                ..Declared::default()
            },
        ),
        (
            json!({"sampling": {}, "elicitation": {}, "roots": {}, "experimental": {}}),
            Declared {
                sampling: true,
                elicitation: true,
                roots: true,
            },
        ),
    ];
    for (caps, expected) in cases {
        let request = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities": caps}})
        .to_string();
        let answer = answer_caller(&s, &request, "1", &crate::protocol::random_hex(16));
        let id = answer.session_id.unwrap();
        assert!(id.starts_with(SESSION_ID_PREFIX) && id.len() > 4 + 32, "{id}");
        assert_eq!(Declared::of_session_id(Some(&id)), expected, "{caps}");
    }
    for foreign in [None, Some(""), Some("abc"), Some("tg1.nodot"), Some("tg0.x.ser")] {
        assert_eq!(Declared::of_session_id(foreign), Declared::default(), "{foreign:?}");
    }
}

#[test]
fn server_requests_name_the_capability_they_need() {
    assert_eq!(Need::of_method("sampling/createMessage"), Some(Need::Sampling));
    assert_eq!(Need::of_method("elicitation/create"), Some(Need::Elicitation));
    assert_eq!(Need::of_method("roots/list"), Some(Need::Roots));
    assert_eq!(Need::of_method("ping"), None);
    let line = no_caller_line(r#""srv-1""#, Need::Sampling);
    assert!(line.ends_with(b"\n"));
    let v: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(v["id"], "srv-1");
    assert_eq!(v["error"]["code"], -32603);
    assert!(v["error"]["message"].as_str().unwrap().contains("sampling capability"));
}
