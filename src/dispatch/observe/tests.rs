//! The fan-out of each step to the books, read back from the metrics text and the health
//! the dispatcher would show.

use std::sync::Arc;

use super::*;
use crate::app::GatewayLabels;
use crate::control::AttemptResult;
use crate::dispatch::Health;
use crate::downstream::Reply;
use crate::protocol::{decode_poll, RespType};
use crate::receipts::Journal;
use crate::telemetry::Metrics;

/// The books, a journal that keeps nothing, and a command on channel `main`.
struct Fixture {
    books: Books,
    journal: Journal,
    cmd: Command,
}

fn fixture() -> Fixture {
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(false, &[]));
    metrics.channel_receipts_at_zero(&["main".to_owned()]);
    let health = Arc::new(Health::with_channels(["main".to_owned()]));
    let body = r#"{"commands":[{"request_id":"r1","shard_token":"s","command_type":"jsonrpc","channel":"main","headers":{},"jsonrpc":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}}]}"#;
    Fixture {
        books: Books::new(metrics.clone(), health, 4),
        journal: Journal::off(metrics),
        cmd: decode_poll(body.as_bytes()).unwrap().pop().unwrap().unwrap(),
    }
}

/// Observes each of `steps` for the fixture's command; returns the metrics text.
fn observed(f: &Fixture, steps: impl FnOnce(&Observer<'_>)) -> String {
    let receipt = f.journal.pending(&f.cmd, Instant::now(), false);
    let obs = Observer::new(&f.books, tracing::Span::none(), &receipt, &f.cmd);
    steps(&obs);
    f.books.metrics().render()
}

/// The value of `series` (with its labels, as rendered).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

fn answered() -> LegResult {
    LegResult::answered(Reply {
        resp_json: None,
        resp_headers: Default::default(),
        resp_code: 200,
        resp_type: RespType::JsonrpcResponse,
    })
}

fn report(delivery: Delivery, last_attempt: AttemptResult) -> DeliveryReport {
    DeliveryReport {
        delivery,
        last_attempt,
        attempts: 1,
        refused: None,
    }
}

const LAST_COMMAND: &str = r#"tunnelgate_channel_last_command_timestamp_seconds{channel="main"}"#;
const LAST_SUCCESS: &str = r#"tunnelgate_channel_last_success_timestamp_seconds{channel="main"}"#;
const ANSWERED_HTTP: &str = r#"tunnelgate_downstream_requests_total{outcome="answered",transport="http"}"#;

#[test]
fn each_drop_is_counted_once_under_its_row_of_commands_dropped_total() {
    let rows = [
        (Dropped::UnknownType("x"), DropReason::UnknownType),
        (Dropped::UnknownRequest("x"), DropReason::UnknownType),
        (Dropped::DiscoveryUnsupported, DropReason::Unsupported),
        (Dropped::DiscoveryUnroutable, DropReason::Unroutable),
        (Dropped::Unroutable, DropReason::Unroutable),
        (Dropped::ExpiredAtReceipt, DropReason::Expired),
        (Dropped::ExpiredAtFence, DropReason::Expired),
        (Dropped::ExpiredBeforeDispatch, DropReason::Expired),
        (Dropped::ExpiredBeforeDiscovery, DropReason::Expired),
        (Dropped::Refused(Refusal::Latched), DropReason::Fatal),
        (Dropped::Refused(Refusal::Stopping), DropReason::Shutdown),
        (Dropped::AdmitterGone, DropReason::Shutdown),
        (Dropped::LongLivedRefused, DropReason::Unsupported),
        (Dropped::UnmatchedReply, DropReason::UnmatchedReply),
    ];
    for (dropped, reason) in rows {
        assert_eq!(dropped.reason(), reason, "{dropped:?}");
        let f = fixture();
        let series = format!(r#"tunnelgate_commands_dropped_total{{reason="{}"}}"#, reason.as_str());
        let text = observed(&f, |obs| obs.observe(Step::Dropped(dropped)));
        assert_eq!(value(&text, &series), 1.0, "{dropped:?}");
        let total: f64 = text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("tunnelgate_commands_dropped_total{")?
                    .rsplit(' ')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .sum();
        assert_eq!(total, 1.0, "{dropped:?} counted once: {text}");
    }
}

#[test]
fn a_commands_own_leg_stamps_its_channel_and_a_carried_reply_is_counted_without_it() {
    let f = fixture();
    let leg = answered();
    let text = observed(&f, |obs| {
        obs.observe(Step::LegEnded {
            leg: &leg,
            transport: TransportKind::Http,
            since: None,
            of: LegOf::Reply,
        })
    });
    assert_eq!(value(&text, ANSWERED_HTTP), 1.0);
    assert_eq!(value(&text, LAST_COMMAND), 0.0, "a reply's leg is the asking leg's");
    let text = observed(&f, |obs| {
        obs.observe(Step::LegEnded {
            leg: &leg,
            transport: TransportKind::Http,
            since: Some(Instant::now()),
            of: LegOf::Command,
        })
    });
    assert_eq!(value(&text, ANSWERED_HTTP), 2.0);
    assert!(value(&text, LAST_COMMAND) > 0.0, "the channel's last command moved");
}

#[test]
fn admission_and_release_move_the_in_flight_gauge_and_the_fence_gauge() {
    let f = fixture();
    f.books.command_started();
    let text = observed(&f, |obs| obs.observe(Step::Admitted { fence_held: true }));
    assert_eq!(value(&text, "tunnelgate_commands_in_flight"), 1.0);
    assert_eq!(value(&text, "tunnelgate_fence_held"), 1.0);
    assert_eq!(f.books.health().in_flight(), 1);
    let text = observed(&f, |obs| {
        obs.observe(Step::Released {
            fence_held: false,
            received_at: Instant::now(),
        })
    });
    assert_eq!(value(&text, "tunnelgate_commands_in_flight"), 0.0);
    assert_eq!(value(&text, "tunnelgate_fence_held"), 0.0);
    assert_eq!(f.books.health().in_flight(), 0);
}

#[test]
fn only_an_answered_leg_whose_answer_was_acknowledged_is_the_channels_success() {
    let abandoned = LegResult::failed(LegFailure::TimeoutAfterWrite, None, RespType::JsonrpcResponse);
    let not_found = report(Delivery::NotFound, AttemptResult::NotFound);
    let acked = report(Delivery::Acked, AttemptResult::Ok);
    let f = fixture();
    for (leg, report) in [(&answered(), &not_found), (&abandoned, &acked)] {
        let text = observed(&f, |obs| {
            obs.observe(Step::Delivered {
                report,
                answer: Answer::Leg {
                    leg,
                    since: Instant::now(),
                },
            })
        });
        assert_eq!(
            value(&text, LAST_SUCCESS),
            0.0,
            "{:?} {:?}",
            leg.outcome,
            report.delivery
        );
    }
    let leg = answered();
    let text = observed(&f, |obs| {
        obs.observe(Step::Delivered {
            report: &acked,
            answer: Answer::Leg {
                leg: &leg,
                since: Instant::now(),
            },
        })
    });
    assert!(value(&text, LAST_SUCCESS) > 0.0);
}

#[test]
fn each_not_executed_reason_is_logged_and_counted_as_its_row_says() {
    let rows = [
        (NotExecuted::Unroutable, "unroutable", DropReason::Unroutable),
        (NotExecuted::Refused(Refusal::Latched), "latched", DropReason::Fatal),
        (
            NotExecuted::Refused(Refusal::Stopping),
            "stopping",
            DropReason::Shutdown,
        ),
    ];
    for (reason, word, dropped) in rows {
        assert_eq!(reason.as_str(), word, "{reason:?}");
        assert_eq!(reason.dropped(), dropped, "{reason:?}");
    }
}
