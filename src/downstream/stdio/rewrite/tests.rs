use proptest::prelude::*;

use super::*;

fn text<'a>(json: &'a str, span: &Span) -> &'a str {
    &json[span.clone()]
}

#[test]
fn a_request_id_of_every_type_is_found_exactly() {
    for (json, id) in [
        (r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#, "7"),
        (r#"{"jsonrpc":"2.0","id":-7,"method":"ping"}"#, "-7"),
        (r#"{"jsonrpc":"2.0","id":1.5e3,"method":"ping"}"#, "1.5e3"),
        (r#"{"id" :  "a\"b\\c\u00e9" , "method":"ping"}"#, r#""a\"b\\c\u00e9""#),
        ("{\n  \"method\": \"ping\",\n  \"id\":\t\"x\"\n}", "\"x\""),
        (r#"{"\u0069d":3,"method":"ping"}"#, "3"),
    ] {
        let spans = request_spans(json).unwrap_or_else(|| panic!("{json}"));
        assert_eq!(text(json, &spans.id), id, "{json}");
        assert_eq!(spans.progress_token, None);
    }
}

#[test]
fn a_message_without_a_usable_id_has_no_request_spans() {
    for json in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"id":1,"id":2,"method":"ping"}"#,
        r#"[1,{"method":"ping"}]"#,
        "not json",
    ] {
        assert_eq!(request_spans(json), None, "{json}");
    }
}

#[test]
fn the_progress_token_is_found_only_in_params_meta() {
    let json = r#"{"id":1,"method":"tools/call","params":{"name":"x","_meta":{"a":[1],"progressToken": "tok" },"arguments":{"progressToken":9}}}"#;
    let spans = request_spans(json).unwrap();
    assert_eq!(text(json, &spans.progress_token.unwrap()), "\"tok\"");

    let escaped = r#"{"id":1,"params":{"_meta":{"progress\u0054oken":42}}}"#;
    assert_eq!(
        text(escaped, &request_spans(escaped).unwrap().progress_token.unwrap()),
        "42"
    );
    for none in [
        r#"{"id":1,"params":{"arguments":{"progressToken":9}}}"#,
        r#"{"id":1,"params":{"_meta":{"progressToken":null}}}"#,
        r#"{"id":1,"params":[{"progressToken":9}]}"#,
        r#"{"id":1,"params":{"_meta":[{"progressToken":9}]}}"#,
    ] {
        assert_eq!(request_spans(none).unwrap().progress_token, None, "{none}");
    }
}

#[test]
fn a_repeated_member_on_the_way_to_the_token_refuses_the_rewrite() {
    // Which of the two the server would use is unknown: rewrite neither.
    assert_eq!(
        request_spans(r#"{"id":1,"params":{"_meta":{"progressToken":1,"progressToken":2}}}"#),
        None
    );
    assert_eq!(
        request_spans(r#"{"id":1,"params":{"_meta":{},"_meta":{"progressToken":2}}}"#),
        None
    );
}

#[test]
fn cancel_and_progress_notifications_have_their_spans() {
    let cancel =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId": "r-1","reason":"user"}}"#;
    assert_eq!(
        text(cancel, &cancelled_request_span(cancel).unwrap().unwrap()),
        "\"r-1\""
    );
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":12,"progress":1}}"#;
    assert_eq!(text(progress, &progress_token_span(progress).unwrap()), "12");
    assert_eq!(plain_u64(progress, &progress_token_span(progress).unwrap()), Some(12));
    assert_eq!(
        cancelled_request_span(r#"{"method":"notifications/cancelled"}"#),
        Ok(None)
    );
    assert_eq!(
        cancelled_request_span(r#"{"params":{"requestId":1,"requestId":2}}"#),
        Err(Unparsable)
    );
    assert_eq!(progress_token_span(r#"{"params":{"progressToken":null}}"#), None);
}

#[test]
fn splicing_replaces_only_the_spans() {
    let json = r#"{"id":"abc","params":{"_meta":{"progressToken":"t"}}}"#;
    let spans = request_spans(json).unwrap();
    let out = splice(
        json,
        &mut [(spans.progress_token.clone().unwrap(), "17"), (spans.id, "17")],
    );
    assert_eq!(out, r#"{"id":17,"params":{"_meta":{"progressToken":17}}}"#);
}

#[test]
fn only_plain_unsigned_integers_are_gateway_ids() {
    let check = |s: &str| plain_u64(s, &(0..s.len()));
    assert_eq!(check("0"), Some(0));
    assert_eq!(check("18446744073709551615"), Some(u64::MAX));
    for not in ["", "-1", "01", "1.0", "1e2", "\"1\"", "18446744073709551616", " 1"] {
        assert_eq!(check(not), None, "{not}");
    }
}

#[test]
fn ids_are_compared_as_json_values() {
    assert!(same_id(r#""a""#, r#""\u0061""#));
    assert!(same_id("1", "1"));
    assert!(!same_id("1", r#""1""#));
    assert!(!same_id(r#""a""#, r#""b""#));
}

/// A JSON-RPC id as a caller may spell it: any integer, a decimal, or any string
/// (serialized with its escapes, or with every character as a `\u` escape).
fn arb_id() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (any::<i32>(), 0u32..1000).prop_map(|(a, b)| format!("{a}.{b}")),
        "\\PC{0,12}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        prop::collection::vec(any::<char>(), 0..6).prop_map(|cs| {
            let s: String = cs.into_iter().collect();
            let escaped: String = s.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
            format!("\"{escaped}\"")
        }),
        Just(r#""quote\" back\\ slash\/ nl\n tab\t""#.to_owned()),
    ]
}

fn arb_space() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", " ", "\n", "\t", " \r\n  "])
}

/// An object written member by member with the given spacing (so byte preservation is
/// tested on texts serde_json would never produce itself).
fn object(members: &[(String, String)], spaces: &[&str]) -> String {
    let sp = |i: usize| spaces[i % spaces.len()];
    let mut out = format!("{{{}", sp(0));
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push_str(&format!("{},{}", sp(i + 1), sp(i + 2)));
        }
        out.push_str(&format!("{key}{}:{}{value}", sp(i + 3), sp(i + 4)));
    }
    out.push_str(&format!("{}}}", sp(members.len() + 5)));
    out
}

fn arb_request() -> impl Strategy<Value = (String, String, Option<String>)> {
    (
        arb_id(),
        prop::option::of(arb_id()),
        prop::collection::vec(arb_space(), 1..8),
        any::<prop::sample::Index>(),
        "\\PC{0,8}",
    )
        .prop_map(|(id, token, spaces, at, text)| {
            let mut params = vec![
                ("\"name\"".to_owned(), "\"echo\"".to_owned()),
                (
                    "\"arguments\"".to_owned(),
                    format!(r#"{{"progressToken":{}}}"#, serde_json::to_string(&text).unwrap()),
                ),
            ];
            if let Some(token) = &token {
                let meta = object(&[("\"progressToken\"".to_owned(), token.clone())], &spaces);
                params.insert(at.index(params.len() + 1), ("\"_meta\"".to_owned(), meta));
            }
            let mut members = vec![
                ("\"jsonrpc\"".to_owned(), "\"2.0\"".to_owned()),
                ("\"method\"".to_owned(), "\"tools/call\"".to_owned()),
                ("\"params\"".to_owned(), object(&params, &spaces)),
                ("\"x-vendor\"".to_owned(), r#"[1.50,{"id":3}]"#.to_owned()),
            ];
            members.insert(at.index(members.len() + 1), ("\"id\"".to_owned(), id.clone()));
            (object(&members, &spaces), id, token)
        })
}

proptest! {
    #[test]
    fn rewrite_then_restore_gives_back_the_original_bytes((json, id, token) in arb_request(), pipe in any::<u64>()) {
        let spans = request_spans(&json).expect("a request");
        prop_assert_eq!(text(&json, &spans.id), id.as_str());
        prop_assert_eq!(spans.progress_token.as_ref().map(|s| text(&json, s)), token.as_deref());

        let pipe_text = pipe.to_string();
        let mut edits = vec![(spans.id.clone(), pipe_text.as_str())];
        if let Some(t) = &spans.progress_token {
            edits.push((t.clone(), pipe_text.as_str()));
        }
        let on_pipe = splice(&json, &mut edits);
        // Valid JSON whose id (and token) is the pipe's, and nothing else changed.
        let parsed: serde_json::Value = serde_json::from_str(&on_pipe).expect("still JSON");
        prop_assert_eq!(&parsed["id"], &serde_json::json!(pipe));
        let back = request_spans(&on_pipe).expect("still a request");
        prop_assert_eq!(plain_u64(&on_pipe, &back.id), Some(pipe));
        prop_assert_eq!(back.progress_token.is_some(), token.is_some());

        let mut restore = vec![(back.id.clone(), id.as_str())];
        if let (Some(t), Some(original)) = (&back.progress_token, &token) {
            restore.push((t.clone(), original.as_str()));
        }
        prop_assert_eq!(splice(&on_pipe, &mut restore), json);
    }

    #[test]
    fn a_response_gets_its_callers_id_back_byte_for_byte(id in arb_id(), pipe in any::<u64>(), spaces in prop::collection::vec(arb_space(), 1..5)) {
        let members = vec![
            ("\"jsonrpc\"".to_owned(), "\"2.0\"".to_owned()),
            ("\"result\"".to_owned(), r#"{"id":"inner","content":[]}"#.to_owned()),
            ("\"id\"".to_owned(), pipe.to_string()),
        ];
        let from_child = object(&members, &spaces);
        let Some(span) = super::super::line::response_id_span(&from_child) else {
            return Err(TestCaseError::fail("no id span"));
        };
        prop_assert_eq!(plain_u64(&from_child, &span), Some(pipe));
        let restored = splice(&from_child, &mut [(span, id.as_str())]);
        let expected = object(
            &[members[0].clone(), members[1].clone(), ("\"id\"".to_owned(), id.clone())],
            &spaces,
        );
        prop_assert_eq!(restored, expected);
    }
}
