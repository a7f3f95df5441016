use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TS: &str = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";

fn payload(raw: &str) -> JsonRpcPayload {
    JsonRpcPayload::from_raw(RawValue::from_string(raw.to_owned()).unwrap()).unwrap()
}

fn injected(raw: &str, tracestate: Option<&str>) -> Option<String> {
    payload(raw)
        .with_meta_trace(TP, tracestate)
        .map(|p| p.raw().get().to_owned())
}

/// `after` is `before` with one run of bytes inserted: every original byte kept, in order.
fn is_one_insertion(before: &str, after: &str) -> bool {
    let (b, a) = (before.as_bytes(), after.as_bytes());
    let prefix = b.iter().zip(a).take_while(|(x, y)| x == y).count();
    let suffix = b.iter().rev().zip(a.iter().rev()).take_while(|(x, y)| x == y).count();
    a.len() >= b.len() && prefix + suffix >= b.len()
}

#[test]
fn meta_gains_the_trace_context_by_insertion_only() {
    let cases = [
        // No params: a params object holding _meta is appended.
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"traceparent":"TP","tracestate":"TS"}}}"#,
        ),
        // Params without _meta, odd spacing and number spelling kept.
        (
            r#"{"params":{"z":[1.50,-0] , "name":"echo"} ,"id":7,"method":"tools/call","jsonrpc":"2.0"}"#,
            r#"{"params":{"z":[1.50,-0] , "name":"echo","_meta":{"traceparent":"TP","tracestate":"TS"}} ,"id":7,"method":"tools/call","jsonrpc":"2.0"}"#,
        ),
        // Empty params and empty _meta take no comma.
        (
            r#"{"id":1,"method":"ping","params":{ }}"#,
            r#"{"id":1,"method":"ping","params":{ "_meta":{"traceparent":"TP","tracestate":"TS"}}}"#,
        ),
        (
            r#"{"id":1,"method":"ping","params":{"_meta":{}}}"#,
            r#"{"id":1,"method":"ping","params":{"_meta":{"traceparent":"TP","tracestate":"TS"}}}"#,
        ),
        // _meta with other keys (a progress token) keeps them first.
        (
            r#"{"id":1,"method":"tools/call","params":{"_meta":{"progressToken":"t-1"},"name":"x"}}"#,
            r#"{"id":1,"method":"tools/call","params":{"_meta":{"progressToken":"t-1","traceparent":"TP","tracestate":"TS"},"name":"x"}}"#,
        ),
        // A tracestate already there is kept, and not written twice.
        (
            r#"{"id":1,"method":"ping","params":{"_meta":{"tracestate":"mine=1"}}}"#,
            r#"{"id":1,"method":"ping","params":{"_meta":{"tracestate":"mine=1","traceparent":"TP"}}}"#,
        ),
        // Notifications get it too.
        (
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{"_meta":{"traceparent":"TP","tracestate":"TS"}}}"#,
        ),
        // Escaped key spellings are the same keys.
        (
            r#"{"id":1,"method":"x","par\u0061ms":{"\u005fmeta":{"a":1}}}"#,
            r#"{"id":1,"method":"x","par\u0061ms":{"\u005fmeta":{"a":1,"traceparent":"TP","tracestate":"TS"}}}"#,
        ),
    ];
    for (before, expected) in cases {
        let expected = expected.replace("TP", TP).replace("TS", TS);
        let after = injected(before, Some(TS)).unwrap_or_else(|| panic!("nothing inserted into {before}"));
        assert_eq!(after, expected, "{before}");
        assert!(is_one_insertion(before, &after), "{before} -> {after}");
    }
}

#[test]
fn without_a_tracestate_only_traceparent_is_added() {
    let after = injected(r#"{"id":1,"method":"ping"}"#, None).unwrap();
    assert_eq!(
        after,
        format!(r#"{{"id":1,"method":"ping","params":{{"_meta":{{"traceparent":"{TP}"}}}}}}"#)
    );
}

#[test]
fn a_message_whose_shape_forbids_it_or_that_has_a_traceparent_is_left_alone() {
    for raw in [
        // The caller's own context is never overwritten.
        r#"{"id":1,"method":"x","params":{"_meta":{"traceparent":"00-theirs"}}}"#,
        // params or _meta that is not an object.
        r#"{"id":1,"method":"x","params":[1,2]}"#,
        r#"{"id":1,"method":"x","params":null}"#,
        r#"{"id":1,"method":"x","params":{"_meta":"text"}}"#,
        // Duplicate keys: which one the server reads is not ours to guess.
        r#"{"id":1,"method":"x","params":{},"params":{}}"#,
        r#"{"id":1,"method":"x","params":{"_meta":{},"_meta":{}}}"#,
        r#"{"id":1,"method":"x","params":{"_meta":{"traceparent":"a","traceparent":"b"}}}"#,
    ] {
        assert_eq!(injected(raw, Some(TS)), None, "{raw}");
    }
}

#[test]
fn meta_fields_are_read_as_text_and_anything_else_is_not_text() {
    let fields = payload(&format!(
        r#"{{"id":1,"method":"x","params":{{"_meta":{{"traceparent":"{TP}","tracestate":"{TS}"}}}}}}"#
    ))
    .meta_trace_fields();
    assert_eq!(fields.traceparent, Some(Ok(TP.to_owned())));
    assert_eq!(fields.tracestate, Some(Ok(TS.to_owned())));
    let fields = payload(r#"{"id":1,"method":"x","params":{"_meta":{"traceparent":42}}}"#).meta_trace_fields();
    assert_eq!(fields.traceparent, Some(Err(NotText)));
    assert_eq!(fields.tracestate, None);
    for raw in [
        r#"{"id":1,"method":"x"}"#,
        r#"{"id":1,"method":"x","params":{"_meta":{"progressToken":1}}}"#,
        r#"{"id":1,"method":"x","params":[1]}"#,
    ] {
        assert_eq!(payload(raw).meta_trace_fields(), TraceFields::default(), "{raw}");
    }
}

#[test]
fn header_fields_match_any_case_and_refuse_two_traceparents() {
    let h = |pairs: &[(&str, &[&str])]| -> WireHeaders {
        pairs
            .iter()
            .map(|(n, vs)| ((*n).to_owned(), vs.iter().map(|v| (*v).to_owned()).collect()))
            .collect()
    };
    let fields = header_trace_fields(&h(&[("TraceParent", &[TP]), ("tracestate", &["a=1", "b=2"])]));
    assert_eq!(fields.traceparent, Some(Ok(TP.to_owned())));
    assert_eq!(fields.tracestate, Some(Ok("a=1,b=2".to_owned())));
    let fields = header_trace_fields(&h(&[("traceparent", &[TP]), ("Traceparent", &[TP])]));
    assert_eq!(fields.traceparent, Some(Err(NotText)));
    assert_eq!(header_trace_fields(&h(&[("x-other", &["1"])])), TraceFields::default());
}

#[test]
fn trace_headers_replace_the_commands_and_keep_every_other_header_in_order() {
    let headers: WireHeaders = vec![
        ("Mcp-Session-Id".to_owned(), vec!["s".to_owned()]),
        ("TRACEPARENT".to_owned(), vec!["00-old".to_owned()]),
        ("tracestate".to_owned(), vec!["old=1".to_owned()]),
        ("x-b".to_owned(), vec!["1".to_owned(), "2".to_owned()]),
    ];
    let out = with_trace_headers(&headers, TP, Some(TS));
    assert_eq!(
        out,
        vec![
            ("Mcp-Session-Id".to_owned(), vec!["s".to_owned()]),
            ("x-b".to_owned(), vec!["1".to_owned(), "2".to_owned()]),
            ("traceparent".to_owned(), vec![TP.to_owned()]),
            ("tracestate".to_owned(), vec![TS.to_owned()]),
        ]
    );
    let out = with_trace_headers(&headers, TP, None);
    assert!(!out.iter().any(|(n, _)| n.eq_ignore_ascii_case("tracestate")));
    assert_eq!(header_value(&out, "MCP-SESSION-ID"), Some("s"));
}

#[test]
fn reply_facts_name_the_error_code_a_tool_error_and_the_revision() {
    let facts = |raw: &str| reply_facts(&RawValue::from_string(raw.to_owned()).unwrap());
    assert_eq!(
        facts(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"secret text"}}"#),
        Some(ReplyFacts {
            error_code: Some(-32601),
            ..Default::default()
        })
    );
    assert!(
        facts(r#"{"id":1,"result":{"content":[],"isError":true}}"#)
            .unwrap()
            .tool_error
    );
    assert!(!facts(r#"{"id":1,"result":{"isError":"true"}}"#).unwrap().tool_error);
    assert_eq!(
        facts(r#"{"id":1,"result":{"protocolVersion":"2025-06-18"}}"#)
            .unwrap()
            .protocol_version
            .as_deref(),
        Some("2025-06-18")
    );
    assert_eq!(
        facts(r#"{"id":1,"result":{"protocolVersion":"x\ny"}}"#)
            .unwrap()
            .protocol_version,
        None
    );
    assert_eq!(facts("[1]"), None);
}

#[test]
fn protocol_revisions_are_dates_and_nothing_else() {
    assert!(is_protocol_revision("2025-06-18"));
    for bad in ["2025-6-18", "2025-06-18x", "abcd-ef-gh", "", "2025/06/18"] {
        assert!(!is_protocol_revision(bad), "{bad}");
    }
}

#[test]
fn prompt_names_are_read_only_from_prompts_get() {
    assert_eq!(
        payload(r#"{"id":1,"method":"prompts/get","params":{"name":"review"}}"#)
            .prompt_name()
            .as_deref(),
        Some("review")
    );
    assert_eq!(
        payload(r#"{"id":1,"method":"tools/call","params":{"name":"x"}}"#).prompt_name(),
        None
    );
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "\\PC{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 20, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["params", "_meta", "traceparent", "tracestate", "name", "x"]),
                inner,
                0..5,
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// `v` with `params._meta` given the trace context where the rules allow it.
fn expected_after(mut v: Value) -> Option<Value> {
    let obj = v.as_object_mut()?;
    let params = obj.entry("params").or_insert_with(|| json!({}));
    let params = params.as_object_mut()?;
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    let meta = meta.as_object_mut()?;
    if meta.contains_key("traceparent") {
        return None;
    }
    meta.insert("traceparent".to_owned(), json!(TP));
    meta.entry("tracestate").or_insert_with(|| json!(TS));
    Some(v)
}

proptest! {
    #[test]
    fn injection_is_one_insertion_that_adds_exactly_the_trace_context(
        fields in prop::collection::btree_map(
            prop::sample::select(vec!["jsonrpc", "id", "method", "params", "x"]),
            arb_json(),
            0..5,
        ),
        pretty in any::<bool>(),
    ) {
        let mut message = serde_json::Map::new();
        message.insert("method".to_owned(), json!("tools/call"));
        for (k, v) in fields {
            message.insert(k.to_owned(), v);
        }
        let message = Value::Object(message);
        let before = if pretty { serde_json::to_string_pretty(&message) } else { serde_json::to_string(&message) }.unwrap();
        let Some(p) = JsonRpcPayload::from_raw(RawValue::from_string(before.clone()).unwrap()) else {
            return Ok(());
        };
        match p.with_meta_trace(TP, Some(TS)) {
            Some(after) => {
                let after = after.raw().get();
                prop_assert!(is_one_insertion(&before, after), "{} -> {}", before, after);
                let parsed: Value = serde_json::from_str(after).unwrap();
                prop_assert_eq!(Some(parsed), expected_after(message));
            }
            None => prop_assert_eq!(expected_after(message), None, "{}", before),
        }
    }
}
