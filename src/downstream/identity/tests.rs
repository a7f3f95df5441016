use std::collections::BTreeMap;

use super::*;
use crate::downstream::{LegFailure, Reply};
use crate::protocol::RespType;

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

fn answered(json: &str) -> LegResult {
    LegResult::answered(Reply {
        resp_json: Some(raw(json)),
        resp_headers: BTreeMap::new(),
        resp_code: 200,
        resp_type: RespType::JsonrpcResponse,
    })
}

fn tools_answer(n: usize) -> String {
    let tools: Vec<String> = (0..n)
        .map(|i| {
            format!(r#"{{"name":"t{i}","inputSchema":{{"type":"object","properties":{{"a":{{"type":"array"}}}}}}}}"#)
        })
        .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":2,"result":{{"tools":[{}],"nextCursor":null}}}}"#,
        tools.join(",")
    )
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"tunnelgate-py-peer","version":"1.0.0"},"instructions":"x"}}"#;

#[test]
fn a_tools_list_answer_with_n_tools_counts_n() {
    for n in [0, 1, 7, 300] {
        let answer = read_answer("tools/list", &raw(&tools_answer(n)));
        assert_eq!(answer, Some(Answer::Tools(n as u64)), "{n} tools");
    }
    let observed = Observed::default();
    observed.answered("tools/list", &answered(&tools_answer(3)));
    assert_eq!(observed.seen().tools, Some(3));
    observed.answered("tools/list", &answered(&tools_answer(5)));
    assert_eq!(observed.seen().tools, Some(5), "the last answer counts");
}

#[test]
fn an_initialize_answer_gives_the_server_identity_and_protocol_version() {
    let observed = Observed::default();
    observed.answered("initialize", &answered(INIT));
    let seen = observed.seen();
    assert_eq!(
        seen.server,
        Some(ServerIdentity {
            name: "tunnelgate-py-peer".to_owned(),
            version: Some("1.0.0".to_owned()),
        })
    );
    assert_eq!(seen.protocol_version.as_deref(), Some("2025-06-18"));
    assert_eq!(seen.tools, None, "initialize says nothing about tools");
    assert_eq!(
        serde_json::to_value(seen.server.unwrap()).unwrap(),
        serde_json::json!({"name":"tunnelgate-py-peer","version":"1.0.0"})
    );
}

#[test]
fn only_results_of_the_two_methods_are_observed() {
    let observed = Observed::default();
    // Another method, even with the same shape.
    observed.answered("tools/call", &answered(INIT));
    observed.answered("resources/list", &answered(&tools_answer(2)));
    // Errors, wrong shapes, non-JSON-RPC answers.
    for json in [
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":"initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"tools":{"a":1}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[1],"tools":[1,2]}}"#,
        r#"[1,2,3]"#,
    ] {
        observed.answered("initialize", &answered(json));
        observed.answered("tools/list", &answered(json));
    }
    assert_eq!(observed.seen(), Seen::default(), "nothing was recorded");
    // A leg that was not answered by the server, even when it carries a JSON body.
    let failed = LegResult::failed(LegFailure::StreamClosedBeforeResponse, None, RespType::JsonrpcResponse);
    observed.answered("initialize", &failed);
    let mut refused = answered(INIT);
    refused.failure = Some(LegFailure::StreamClosedBeforeResponse);
    observed.answered("initialize", &refused);
    assert_eq!(observed.seen(), Seen::default());
}

#[test]
fn an_initialize_without_a_usable_server_info_keeps_what_it_has() {
    let answer = read_answer(
        "initialize",
        &raw(r#"{"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":42}}}"#),
    );
    assert_eq!(
        answer,
        Some(Answer::Initialized {
            server: None,
            protocol_version: Some("2025-11-25".to_owned())
        })
    );
    let answer = read_answer("initialize", &raw(r#"{"result":{"serverInfo":{"name":"s"}}}"#));
    assert_eq!(
        answer,
        Some(Answer::Initialized {
            server: Some(ServerIdentity {
                name: "s".to_owned(),
                version: None
            }),
            protocol_version: None
        })
    );
}

#[test]
fn hostile_server_strings_are_bounded_redacted_and_printable() {
    let huge = "A".repeat(5 * 1024 * 1024);
    let cases = [
        format!("evil\n{{\"level\":\"error\"}}\r\u{1b}[31m{}", "x".repeat(10)),
        format!("name api_key=sk_live_{} tail", "9".repeat(40)),
        "Bearer abcdefghijklmnop".to_owned(),
        "right\u{202E}txt.exe\u{200B}\u{FEFF}".to_owned(),
        huge.clone(),
        format!("{}token=hunter2-very-secret", "n".repeat(60)),
    ];
    for s in &cases {
        let json = serde_json::json!({"result": {"protocolVersion": s, "serverInfo": {"name": s, "version": s}}});
        let Some(Answer::Initialized {
            server: Some(server),
            protocol_version: Some(pv),
        }) = read_answer("initialize", &raw(&json.to_string()))
        else {
            panic!("observed: {s:.80}");
        };
        for kept in [&server.name, server.version.as_ref().unwrap(), &pv] {
            assert!(kept.chars().count() <= MAX_IDENTITY_CHARS, "{kept}");
            assert!(!kept.chars().any(is_invisible), "{kept:?}");
            for secret in ["sk_live_9999", "abcdefghijklmnop", "hunter2"] {
                assert!(!kept.contains(secret), "{kept}");
            }
        }
    }
    assert_eq!(bounded("evil\nline").as_deref(), Some("evil line"));
    assert_eq!(
        bounded("name api_key=sk_live_1 tail").as_deref(),
        Some("name api_key=[redacted] tail")
    );
    assert_eq!(bounded("right\u{202E}txt").as_deref(), Some("righttxt"));
    let cut = bounded(&huge).unwrap();
    assert_eq!(cut.chars().count(), MAX_IDENTITY_CHARS);
    assert!(cut.ends_with(CUT), "{cut}");
    assert_eq!(
        bounded(&"é".repeat(64)).as_deref(),
        Some("é".repeat(64).as_str()),
        "64 characters fit"
    );
    assert_eq!(bounded(" \n\u{200B} "), None, "nothing printable");
}
