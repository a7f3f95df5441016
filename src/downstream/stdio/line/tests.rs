use super::*;

fn id_of(line: &Line) -> Option<&str> {
    match line {
        Line::Response { id: Some(span), raw } => raw.get().get(span.clone()),
        _ => None,
    }
}

#[test]
fn responses_carry_their_trimmed_raw_id_and_exact_bytes() {
    let line = classify(b"  {\"jsonrpc\":\"2.0\",\"id\": \"a-1\" ,\"result\":{\"x\":[1.50]}}\r ".to_vec());
    assert_eq!(id_of(&line), Some("\"a-1\""));
    let Line::Response { raw, .. } = line else {
        panic!("not a response")
    };
    assert_eq!(
        raw.get(),
        "{\"jsonrpc\":\"2.0\",\"id\": \"a-1\" ,\"result\":{\"x\":[1.50]}}"
    );
}

#[test]
fn errors_and_null_results_are_responses_but_anything_with_a_method_is_not() {
    assert_eq!(
        id_of(&classify(br#"{"id":7,"error":{"code":-1,"message":"x"}}"#.to_vec())),
        Some("7")
    );
    assert_eq!(id_of(&classify(br#"{"id":7,"result":null}"#.to_vec())), Some("7"));
    assert!(matches!(
        classify(br#"{"id":7,"method":"sampling/createMessage","params":{}}"#.to_vec()),
        Line::Message { progress: false, .. }
    ));
    assert!(matches!(
        classify(br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#.to_vec()),
        Line::Message { progress: true, .. }
    ));
    assert!(matches!(
        classify(br#"{"method":"notifications\/progress","params":{}}"#.to_vec()),
        Line::Message { progress: true, .. }
    ));
    assert!(
        matches!(
            classify(br#"{"id":7,"method":null,"result":{}}"#.to_vec()),
            Line::Message { progress: false, .. }
        ),
        "a method member, even null, makes it no response"
    );
    assert!(matches!(
        classify(br#"{"id":null,"error":{"code":-32700}}"#.to_vec()),
        Line::Response { id: None, .. }
    ));
}

#[test]
fn garbage_is_invalid_and_blank_lines_are_blank() {
    for bad in [
        &b"hello"[..],
        b"[1,2,3]",
        b"\"str\"",
        b"42",
        b"{\"unterminated\": ",
        b"\xff\xfe{}",
        b"{} {}",
        b"{\"id\":1,\"id\":2}",
    ] {
        assert!(
            matches!(classify(bad.to_vec()), Line::Invalid),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    for blank in [&b""[..], b"   ", b"\r", b"\t \r"] {
        assert!(matches!(classify(blank.to_vec()), Line::Blank));
    }
}

#[test]
fn framing_makes_exactly_one_line_of_a_pretty_printed_payload() {
    let framed = frame("{\r\n  \"id\": 1,\n  \"method\": \"ping\"\n}");
    assert_eq!(framed, b"{    \"id\": 1,   \"method\": \"ping\" }\n");
    assert_eq!(frame(r#"{"a":"x\ny"}"#), b"{\"a\":\"x\\ny\"}\n".to_vec());
}

#[tokio::test]
async fn the_reader_splits_lines_drops_oversized_ones_and_returns_a_last_partial_line() {
    let input: &[u8] = b"one\n0123456789ABC\n\ntwo\r\npartial";
    let mut r = LineReader::new(input, 8, false);
    let mut got = Vec::new();
    while let Some(line) = r.next_line().await.unwrap() {
        got.push(line);
    }
    assert_eq!(
        got,
        [
            RawLine {
                bytes: b"one".to_vec(),
                len: 3,
                overflow: false
            },
            RawLine {
                bytes: Vec::new(),
                len: 13,
                overflow: true
            },
            RawLine {
                bytes: Vec::new(),
                len: 0,
                overflow: false
            },
            RawLine {
                bytes: b"two\r".to_vec(),
                len: 4,
                overflow: false
            },
            RawLine {
                bytes: b"partial".to_vec(),
                len: 7,
                overflow: false
            },
        ]
    );
}

#[tokio::test]
async fn the_reader_keeps_a_bounded_prefix_when_asked() {
    let input: &[u8] = b"0123456789ABC\nok\n";
    let mut r = LineReader::new(input, 4, true);
    assert_eq!(
        r.next_line().await.unwrap(),
        Some(RawLine {
            bytes: b"0123".to_vec(),
            len: 13,
            overflow: true
        })
    );
    assert_eq!(
        r.next_line().await.unwrap(),
        Some(RawLine {
            bytes: b"ok".to_vec(),
            len: 2,
            overflow: false
        })
    );
    assert_eq!(r.next_line().await.unwrap(), None);
}

#[tokio::test]
async fn writing_counts_the_bytes_the_pipe_accepted() {
    let (mut a, b) = tokio::io::duplex(4);
    drop(b);
    assert_eq!(
        write_line(&mut a, b"{}\n").await,
        WriteResult::Failed {
            written: 0,
            kind: std::io::ErrorKind::BrokenPipe
        }
    );
    let (mut a, mut b) = tokio::io::duplex(64);
    assert_eq!(write_line(&mut a, b"{\"id\":1}\n").await, WriteResult::Done);
    let mut buf = [0u8; 9];
    tokio::io::AsyncReadExt::read_exact(&mut b, &mut buf).await.unwrap();
    assert_eq!(&buf, b"{\"id\":1}\n");
}

#[test]
fn a_server_request_names_its_id_and_the_capability_it_needs() {
    let ask = |json: &str| match classify(json.as_bytes().to_vec()) {
        Line::Message { ask, raw, .. } => ask.map(|a| (raw.get()[a.id].to_owned(), a.need)),
        other => panic!("not a message: {other:?}"),
    };
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#),
        Some(("\"s1\"".to_owned(), Some(Need::Sampling)))
    );
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","id":4,"method":"roots/list"}"#),
        Some(("4".to_owned(), Some(Need::Roots)))
    );
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#),
        Some(("5".to_owned(), None))
    );
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#),
        None
    );
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","id":null,"method":"elicitation/create"}"#),
        None
    );
}
