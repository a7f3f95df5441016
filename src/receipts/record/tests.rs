use std::time::{Duration, SystemTime};

use super::*;
use crate::protocol::decode_poll;

fn command(request_id: &str, method: &str) -> Command {
    let body = serde_json::json!({"commands": [{
        "request_id": request_id, "shard_token": "SHARD-CANARY", "command_type": "jsonrpc",
        "channel": "main", "headers": {"Authorization": ["Bearer HEADER-CANARY"]},
        "jsonrpc": {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"name": "x", "arguments": {"m": "PAYLOAD-CANARY"}}}
    }]});
    decode_poll(body.to_string().as_bytes())
        .unwrap()
        .pop()
        .unwrap()
        .unwrap()
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(secs * 1000 + 250)
}

fn receipt(outcomes: Outcomes) -> Option<Receipt> {
    Receipt::of(&command("req_1", "tools/call"), false, &outcomes, at(1), at(2))
}

#[test]
fn a_command_is_unclean_exactly_when_its_leg_was_abandoned_its_delivery_not_acked_or_it_latched() {
    use Delivery as D;
    use LegOutcome as L;
    type Row = (Option<L>, Option<D>, Option<FatalCategory>, bool);
    let rows: [Row; 12] = [
        (Some(L::Answered), Some(D::Acked), None, true),
        (Some(L::NotSent), Some(D::Acked), None, true),
        (Some(L::Answered), None, None, true),
        (None, None, None, true),
        (None, Some(D::Acked), None, true),
        (Some(L::Abandoned), Some(D::Acked), None, false),
        (Some(L::Abandoned), None, None, false),
        (Some(L::Answered), Some(D::NotFound), None, false),
        (Some(L::Answered), Some(D::Rejected), None, false),
        (Some(L::NotSent), Some(D::Ambiguous), None, false),
        (None, Some(D::Ambiguous), None, false),
        (Some(L::Answered), None, Some(FatalCategory::DeadlineExpired), false),
    ];
    for (leg, delivery, fatal, clean) in rows {
        let o = Outcomes {
            leg,
            delivery,
            fatal,
            ..Outcomes::default()
        };
        assert_eq!(o.is_clean(), clean, "{o:?}");
        assert_eq!(receipt(o).is_none(), clean, "{o:?}");
    }
}

#[test]
fn a_receipt_holds_the_facts_and_the_posted_words_in_one_json_line() {
    let r = receipt(Outcomes {
        leg: Some(LegOutcome::Abandoned),
        words: Some(crate::protocol::ABANDONED_MESSAGE),
        delivery: Some(Delivery::Ambiguous),
        attempts: 3,
        fatal: Some(FatalCategory::DownstreamAmbiguous),
    })
    .unwrap();
    let line = r.to_line();
    assert!(!line.contains('\n'));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "schema_version": 1, "request_id": "req_1", "channel": "main", "command_type": "jsonrpc",
            "method": "tools/call", "leg_outcome": "abandoned", "delivery_outcome": "ambiguous",
            "message": "effect unknown: the MCP server may have acted; check before retrying",
            "attempts": 3, "received_at": "1970-01-01T00:00:01.250Z", "finished_at": "1970-01-01T00:00:02.250Z",
            "strict": false, "fatal_category": "downstream_ambiguous"
        })
    );
    assert_eq!(serde_json::from_str::<Receipt>(&line).unwrap(), r, "a line reads back");
    assert_eq!(r.finished(), Some(at(2)));
}

#[test]
fn words_count_only_once_posted() {
    let r = receipt(Outcomes {
        leg: Some(LegOutcome::Abandoned),
        words: Some(crate::protocol::ABANDONED_MESSAGE),
        ..Outcomes::default()
    })
    .unwrap();
    assert_eq!(r.message, None, "nothing was posted: the caller was told nothing");
    assert_eq!(r.delivery_outcome, None);
    assert_eq!(r.attempts, 0);
}

#[test]
fn identifiers_go_through_the_latch_files_sanitizers_and_nothing_of_the_command_else_is_kept() {
    let cmd = command("req\nINJECTED", "tools/call {\"secret\":1}");
    let outcomes = Outcomes {
        delivery: Some(Delivery::Rejected),
        attempts: 1,
        ..Outcomes::default()
    };
    let r = Receipt::of(&cmd, true, &outcomes, at(1), at(1)).unwrap();
    assert_eq!(r.request_id, "<unprintable>");
    assert_eq!(r.method.as_deref(), Some("<other>"));
    let line = r.to_line();
    for canary in [
        "INJECTED",
        "secret",
        "SHARD-CANARY",
        "HEADER-CANARY",
        "PAYLOAD-CANARY",
        "Authorization",
    ] {
        assert!(!line.contains(canary), "{canary} in {line}");
    }
}

#[test]
fn the_outcome_filter_matches_the_leg_or_the_delivery() {
    let abandoned_then_ambiguous = receipt(Outcomes {
        leg: Some(LegOutcome::Abandoned),
        delivery: Some(Delivery::Ambiguous),
        ..Outcomes::default()
    })
    .unwrap();
    let matched: Vec<_> = Unclean::ALL
        .into_iter()
        .filter(|u| u.matches(&abandoned_then_ambiguous))
        .collect();
    assert_eq!(matched, [Unclean::Abandoned, Unclean::Ambiguous]);
    let not_found = receipt(Outcomes {
        leg: Some(LegOutcome::Answered),
        delivery: Some(Delivery::NotFound),
        ..Outcomes::default()
    })
    .unwrap();
    let matched: Vec<_> = Unclean::ALL.into_iter().filter(|u| u.matches(&not_found)).collect();
    assert_eq!(matched, [Unclean::NotFound]);
    assert_eq!(
        Unclean::ALL.map(Unclean::as_str),
        ["abandoned", "not_found", "rejected", "ambiguous", "unanswered"]
    );
}
