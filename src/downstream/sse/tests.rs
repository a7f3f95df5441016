use proptest::prelude::*;

use super::*;

fn parse(bytes: &[u8]) -> (Vec<SseEvent>, SseParser) {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    parser.feed(bytes, &mut out);
    (out, parser)
}

fn ev(event: &str, data: &str, id: &str) -> SseEvent {
    SseEvent {
        event: event.to_owned(),
        data: data.to_owned(),
        id: id.to_owned(),
    }
}

#[test]
fn a_blank_line_dispatches_one_message_event() {
    let (events, _) = parse(b"data: {\"a\":1}\n\n");
    assert_eq!(events, vec![ev("message", "{\"a\":1}", "")]);
}

#[test]
fn crlf_lf_and_cr_line_endings_are_equivalent() {
    for stream in [
        &b"event: x\r\ndata: 1\r\n\r\n"[..],
        b"event: x\ndata: 1\n\n",
        b"event: x\rdata: 1\r\r",
    ] {
        let (events, _) = parse(stream);
        assert_eq!(events, vec![ev("x", "1", "")], "{stream:?}");
    }
}

#[test]
fn a_crlf_split_across_chunks_is_one_line_ending() {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    parser.feed(b"data: a\r", &mut out);
    parser.feed(b"\ndata: b\r", &mut out);
    parser.feed(b"\n\r", &mut out);
    parser.feed(b"\n", &mut out);
    assert_eq!(out, vec![ev("message", "a\nb", "")]);
}

#[test]
fn multi_line_data_is_joined_with_lf() {
    let (events, _) = parse(b"data: {\"a\":\ndata:  1}\ndata\n\n");
    // `data` with no colon appends an empty line; only one leading space is stripped.
    assert_eq!(events, vec![ev("message", "{\"a\":\n 1}\n", "")]);
}

#[test]
fn a_leading_bom_is_dropped_once() {
    let (events, _) = parse(b"\xEF\xBB\xBFdata: 1\n\n\xEF\xBB\xBFdata: 2\n\n");
    // Only the stream's first BOM is special; the second makes an unknown field name.
    assert_eq!(events, vec![ev("message", "1", "")]);
}

#[test]
fn a_bom_split_across_chunks_is_still_dropped() {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    parser.feed(b"\xEF", &mut out);
    parser.feed(b"\xBB", &mut out);
    parser.feed(b"\xBFdata: 1\n\n", &mut out);
    assert_eq!(out, vec![ev("message", "1", "")]);
}

#[test]
fn a_partial_bom_prefix_is_content() {
    let (events, _) = parse(b"\xEFdata: 1\n\ndata: 2\n\n");
    assert_eq!(events, vec![ev("message", "2", "")]);
}

#[test]
fn comments_and_unknown_fields_are_ignored() {
    let (events, _) = parse(b": keep-alive\n\n:ping\nfoo: bar\ndata: 1\n\n");
    assert_eq!(events, vec![ev("message", "1", "")]);
}

#[test]
fn an_event_without_data_is_not_dispatched_but_its_id_counts() {
    let (events, parser) = parse(b"id: 7\n\nevent: ping\n\n");
    assert!(events.is_empty());
    assert_eq!(parser.last_event_id(), "7");
}

#[test]
fn ids_persist_across_events_until_changed() {
    let (events, parser) = parse(b"id: a\ndata: 1\n\ndata: 2\n\nid\ndata: 3\n\n");
    assert_eq!(
        events,
        vec![ev("message", "1", "a"), ev("message", "2", "a"), ev("message", "3", "")]
    );
    assert_eq!(parser.last_event_id(), "");
}

#[test]
fn an_id_containing_nul_is_ignored() {
    let (events, _) = parse(b"id: 1\ndata: x\n\nid: 2\x003\ndata: y\n\n");
    assert_eq!(events[1].id, "1");
}

#[test]
fn retry_accepts_only_digits() {
    let (_, parser) = parse(b"retry: 250\n\nretry: 3s\n\nretry:\n\n");
    assert_eq!(parser.retry_ms(), Some(250));
}

#[test]
fn an_event_cut_off_by_the_end_of_the_stream_is_never_dispatched() {
    let (events, parser) = parse(b"id: 1\ndata: {\"done\":1}\n\nid: 2\ndata: {\"half\":");
    assert_eq!(events.len(), 1);
    assert_eq!(
        parser.last_event_id(),
        "1",
        "an undispatched id does not move the resume point"
    );
    let (events, _) = parse(b"data: {\"whole_line\":1}\n");
    assert!(events.is_empty(), "a data line without the blank line is not an event");
}

#[test]
fn a_resumed_parser_keeps_the_id_and_retry_but_drops_partial_state() {
    let (_, parser) = parse(b"retry: 100\nid: 4\ndata: 1\n\ndata: partial");
    let mut resumed = parser.resumed();
    assert_eq!(resumed.last_event_id(), "4");
    assert_eq!(resumed.retry_ms(), Some(100));
    assert_eq!(resumed.buffered(), 0);
    let mut out = Vec::new();
    resumed.feed(b"\xEF\xBB\xBFdata: 2\n\n", &mut out);
    assert_eq!(out, vec![ev("message", "2", "4")]);
}

#[test]
fn buffered_bytes_grow_with_an_undispatched_event() {
    let (_, parser) = parse(b"data: 12345\ndata: 678");
    assert_eq!(parser.buffered(), "12345\n".len() + "data: 678".len());
}

fn chunked(bytes: &[u8], cuts: &[usize]) -> (Vec<SseEvent>, String, Option<u64>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    let mut from = 0;
    for cut in cuts {
        parser.feed(&bytes[from..cut], &mut out);
        from = cut;
    }
    parser.feed(&bytes[from..], &mut out);
    (out, parser.last_event_id().to_owned(), parser.retry_ms())
}

fn stream_strategy() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(&b"data: "[..]),
        Just(&b"data:"[..]),
        Just(&b"id: "[..]),
        Just(&b"event: "[..]),
        Just(&b"retry: "[..]),
        Just(&b":"[..]),
        Just(&b"\r"[..]),
        Just(&b"\n"[..]),
        Just(&b"\r\n"[..]),
        Just(&b"\xEF\xBB\xBF"[..]),
        Just(&b"{\"id\":1}"[..]),
        Just(&b"42"[..]),
        Just(&b" x"[..]),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn chunking_the_same_stream_anywhere_yields_the_same_events(
        bytes in stream_strategy(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let whole = chunked(&bytes, &[]);
        prop_assert_eq!(chunked(&bytes, &cuts), whole);
    }

    #[test]
    fn byte_at_a_time_feeding_matches_one_feed(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let cuts: Vec<usize> = (0..=bytes.len()).collect();
        prop_assert_eq!(chunked(&bytes, &cuts), chunked(&bytes, &[]));
    }
}
