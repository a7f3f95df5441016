use super::*;

const ENVELOPE: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}"#;

fn payload(json: &str) -> JsonRpcPayload {
    JsonRpcPayload::from_raw(RawValue::from_string(json.to_owned()).unwrap()).unwrap()
}

fn modern(method: &str, extra: &str) -> JsonRpcPayload {
    let sep = if extra.is_empty() { "" } else { "," };
    payload(&format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{{{ENVELOPE}{sep}{extra}}}}}"#
    ))
}

fn headers(pairs: &[(&str, &str)]) -> WireHeaders {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), vec![(*v).to_owned()]))
        .collect()
}

fn local(plan: Plan) -> (Value, u16) {
    match plan {
        Plan::Local(local) => (
            serde_json::from_str(local.reply.resp_json.unwrap().get()).unwrap(),
            local.reply.resp_code,
        ),
        other => panic!("not a local answer: {other:?}"),
    }
}

#[test]
fn a_request_without_the_envelope_or_a_modern_header_passes_through() {
    for json in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":1}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
    ] {
        assert!(matches!(plan(&payload(json), &Vec::new()), Plan::PassThrough), "{json}");
    }
    let legacy_header = headers(&[("MCP-Protocol-Version", "2025-06-18")]);
    assert!(matches!(
        plan(&payload(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), &legacy_header),
        Plan::PassThrough
    ));
}

#[test]
fn initialize_is_legacy_even_with_an_envelope() {
    assert!(matches!(
        plan(&modern("initialize", ""), &Vec::new()),
        Plan::PassThrough
    ));
}

#[test]
fn discover_is_answered_here_and_the_removed_methods_are_not_found() {
    assert!(matches!(
        plan(&modern("server/discover", ""), &Vec::new()),
        Plan::Discover
    ));
    for method in [
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/get",
    ] {
        let (answer, status) = local(plan(&modern(method, ""), &Vec::new()));
        assert_eq!(answer["error"]["code"], -32601, "{method}");
        assert_eq!(answer["id"], 7);
        assert_eq!(status, 404, "{method}");
    }
}

#[test]
fn a_missing_or_malformed_envelope_is_invalid_params_with_400() {
    let cases = [
        r#"{"jsonrpc":"2.0","id":7,"method":"server/discover"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":7,"io.modelcontextprotocol/clientCapabilities":{}}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}}}"#.to_owned(),
    ];
    for json in &cases {
        let (answer, status) = local(plan(&payload(json), &Vec::new()));
        assert_eq!(answer["error"]["code"], -32602, "{json}");
        assert_eq!(status, 400, "{json}");
    }
    // A modern header without the envelope in the body.
    let (answer, _) = local(plan(
        &payload(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#),
        &headers(&[("MCP-Protocol-Version", "2026-07-28")]),
    ));
    assert_eq!(answer["error"]["code"], -32602);
}

#[test]
fn an_unknown_log_level_is_invalid_params() {
    let json = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"loud"}}}"#;
    let (answer, status) = local(plan(&payload(json), &Vec::new()));
    assert_eq!(answer["error"]["code"], -32602);
    assert!(answer["error"]["message"].as_str().unwrap().contains("\"loud\""));
    assert_eq!(status, 400);
}

#[test]
fn an_unserved_revision_is_refused_with_the_supported_list() {
    let json = r#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let (answer, status) = local(plan(&payload(json), &Vec::new()));
    assert_eq!(answer["id"], "a");
    assert_eq!(answer["error"]["code"], -32022);
    assert_eq!(
        answer["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2099-01-01"})
    );
    assert_eq!(status, 400);
}

#[test]
fn headers_that_contradict_the_body_are_a_header_mismatch_before_the_revision_is_judged() {
    let call = modern("tools/call", r#""name":"effect","arguments":{}"#);
    for pairs in [
        vec![("MCP-Protocol-Version", "2026-08-01")],
        vec![("Mcp-Method", "tools/list")],
        vec![("Mcp-Name", "other")],
    ] {
        let (answer, status) = local(plan(&call, &headers(&pairs)));
        assert_eq!(answer["error"]["code"], -32020, "{pairs:?}");
        assert_eq!(status, 400);
    }
    let agreeing = headers(&[
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "=?base64?ZWZmZWN0?="),
    ]);
    assert!(matches!(plan(&call, &agreeing), Plan::Forward(_)));
}

#[test]
fn a_forwarded_request_loses_the_envelope_and_the_continuation_fields_only() {
    let call = modern(
        "tools/call",
        r#""name":"effect","arguments":{"a":1},"requestState":"x","inputResponses":{}"#,
    );
    let Plan::Forward(forward) = plan(&call, &Vec::new()) else {
        panic!("not forwarded")
    };
    let sent: Value = serde_json::from_str(forward.payload.raw().get()).unwrap();
    assert_eq!(
        sent,
        json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"effect","arguments":{"a":1}}})
    );
    assert_eq!(forward.payload.id().unwrap().get(), "7");
    assert_eq!(forward.shape.method, "tools/call");
    assert_eq!(forward.shape.log_level, None);

    // Other `_meta` keys (a progress token, trace context) stay.
    let with_token = payload(
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"p","traceparent":"t","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"warning"}}}"#,
    );
    let Plan::Forward(forward) = plan(&with_token, &Vec::new()) else {
        panic!("not forwarded")
    };
    let sent: Value = serde_json::from_str(forward.payload.raw().get()).unwrap();
    assert_eq!(sent["params"]["_meta"], json!({"progressToken":"p","traceparent":"t"}));
    assert_eq!(forward.shape.log_level, Some(LogLevel::Warning));
}

fn session() -> Map<String, Value> {
    match json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "logging": {},
            "tasks": {"list": {}},
        },
        "serverInfo": {"name": "legacy", "version": "1.0"},
        "instructions": "be kind",
    }) {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

#[test]
fn discover_is_built_from_the_session_with_only_what_the_bridge_carries() {
    let result = session();
    let reply = discover_reply(
        &RawValue::from_string("\"d\"".into()).unwrap(),
        &SessionView {
            result: &result,
            carries_listen: false,
        },
    );
    assert_eq!(reply.resp_code, 200);
    assert_eq!(reply.resp_headers["Content-Type"], ["application/json"]);
    let answer: Value = serde_json::from_str(reply.resp_json.unwrap().get()).unwrap();
    assert_eq!(
        answer,
        json!({"jsonrpc":"2.0","id":"d","result":{
            "resultType":"complete",
            "supportedVersions":["2026-07-28"],
            "capabilities":{"tools":{},"resources":{},"logging":{}},
            "instructions":"be kind",
            "ttlMs":0,"cacheScope":"private",
            "_meta":{"io.modelcontextprotocol/serverInfo":{"name":"legacy","version":"1.0"}}}})
    );
}

fn reply(json: &str) -> Reply {
    Reply {
        resp_json: Some(RawValue::from_string(json.to_owned()).unwrap()),
        resp_headers: json_resp_headers(),
        resp_code: 200,
        resp_type: RespType::JsonrpcResponse,
    }
}

fn shaped(json: &str, method: &str) -> (Value, u16) {
    let shape = Shape {
        method: method.to_owned(),
        log_level: None,
    };
    let info = json!({"name": "legacy", "version": "1.0"});
    let out = shape_reply(reply(json), &shape, Some(&info));
    (
        serde_json::from_str(out.resp_json.unwrap().get()).unwrap(),
        out.resp_code,
    )
}

#[test]
fn results_gain_the_result_type_server_info_and_cache_hints_where_cacheable() {
    let (list, status) = shaped(
        r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"b"},{"name":"a"}]}}"#,
        "tools/list",
    );
    assert_eq!(status, 200);
    assert_eq!(list["result"]["resultType"], "complete");
    assert_eq!(list["result"]["ttlMs"], 0);
    assert_eq!(list["result"]["cacheScope"], "private");
    assert_eq!(
        list["result"]["tools"],
        json!([{"name":"b"},{"name":"a"}]),
        "the server's order is kept"
    );
    assert_eq!(
        list["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "legacy"
    );

    let (call, _) = shaped(
        r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"_meta":{"k":1}}}"#,
        "tools/call",
    );
    assert_eq!(call["result"]["resultType"], "complete");
    assert!(call["result"].get("ttlMs").is_none(), "tools/call is not cacheable");
    assert_eq!(call["result"]["_meta"]["k"], 1, "the server's own _meta stays");

    let (own, _) = shaped(
        r#"{"jsonrpc":"2.0","id":7,"result":{"contents":[],"ttlMs":5000,"cacheScope":"public"}}"#,
        "resources/read",
    );
    assert_eq!(own["result"]["ttlMs"], 5000);
    assert_eq!(own["result"]["cacheScope"], "public");
}

#[test]
fn legacy_error_codes_are_mapped_with_the_original_in_data() {
    let (nf, status) = shaped(
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32002,"message":"Resource not found","data":{"uri":"x"}}}"#,
        "resources/read",
    );
    assert_eq!(nf["error"]["code"], -32602);
    assert_eq!(
        nf["error"]["data"],
        json!({"legacy_code": -32002, "legacy_data": {"uri": "x"}})
    );
    assert_eq!(status, 400);

    for legacy in [-32042, -32050, -32099] {
        let (e, status) = shaped(
            &format!(r#"{{"jsonrpc":"2.0","id":7,"error":{{"code":{legacy},"message":"m"}}}}"#),
            "tools/call",
        );
        assert_eq!(e["error"]["code"], -32603, "{legacy}");
        assert_eq!(e["error"]["data"]["legacy_code"], legacy);
        assert_eq!(status, 200);
    }
    for kept in [-32000, -32019, -32601, -32603] {
        let (e, _) = shaped(
            &format!(r#"{{"jsonrpc":"2.0","id":7,"error":{{"code":{kept},"message":"m"}}}}"#),
            "tools/call",
        );
        assert_eq!(e["error"]["code"], kept);
        assert!(e["error"].get("data").is_none());
    }
}

fn note(json: &str) -> Notification {
    Notification {
        resp_json: RawValue::from_string(json.to_owned()).unwrap(),
        resp_headers: json_resp_headers(),
    }
}

#[test]
fn log_messages_reach_only_a_request_that_asked_at_or_above_its_level() {
    let info = note(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#);
    let error = note(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","data":"x"}}"#);
    let progress =
        note(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#);
    assert!(!LogFilter(None).admits(&info));
    assert!(!LogFilter(None).admits(&error));
    assert!(LogFilter(None).admits(&progress));
    assert!(!LogFilter(Some(LogLevel::Warning)).admits(&info));
    assert!(LogFilter(Some(LogLevel::Warning)).admits(&error));
    assert!(LogFilter(Some(LogLevel::Debug)).admits(&info));
    let changed = note(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#);
    let updated = note(r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a"}}"#);
    assert!(
        !LogFilter(Some(LogLevel::Debug)).admits(&changed),
        "on listen streams only"
    );
    assert!(!LogFilter(None).admits(&updated), "on listen streams only");
}

#[test]
fn the_era_setting_reads_its_three_words() {
    for era in EraSetting::ALL {
        assert_eq!(EraSetting::parse(era.as_str()), Some(era));
    }
    assert_eq!(EraSetting::parse("Legacy"), None);
}
