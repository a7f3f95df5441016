//! The mechanics of the metric set, with label enums of the tests' own (the real label
//! sets are wired and pinned in `app::labels`, whose tests also hold that a wrong enum
//! does not compile: see [`Metrics`]).

use super::commands::DURATION_BUCKETS;
use super::*;
use crate::telemetry::label::{
    AttemptResultLabel, CommandType, DeliveryKind, DeliveryLabel, DurationLeg, FatalCategoryLabel, LegOutcomeLabel,
    PollErrorLabel, PollResult, ReceiptDropReason, TaskKind, TraceContextSource, TransportLabel,
};
use crate::telemetry::label_enum;

macro_rules! fake_label {
    ($name:ident: $marker:ident { $($variant:ident => $label:literal),+ $(,)? }) => {
        label_enum! {
            enum $name {
                $($variant => $label),+
            }
        }
        impl $marker for $name {}
    };
}

fake_label!(Kind: PollErrorLabel { Timeout => "timeout", Decode => "decode" });
fake_label!(Transport: TransportLabel { Http => "http", Pipe => "pipe" });
fake_label!(Outcome: LegOutcomeLabel { Answered => "answered", Abandoned => "abandoned" });
fake_label!(Delivery: DeliveryLabel { Acked => "acked", Ambiguous => "ambiguous" });
fake_label!(Attempt: AttemptResultLabel { Ok => "ok", Cancelled => "cancelled" });
fake_label!(Category: FatalCategoryLabel { AckTimeout => "ack_timeout", AckNotFound => "ack_not_found" });

struct Fakes;

impl LabelSets for Fakes {
    type PollErrorKind = Kind;
    type Transport = Transport;
    type LegOutcome = Outcome;
    type Delivery = Delivery;
    type AttemptResult = Attempt;
    type FatalCategory = Category;
}

fn metrics() -> Metrics {
    Metrics::new::<Fakes>(false, &["main".to_owned(), "other".to_owned()])
}

fn has(text: &str, series: &str) -> bool {
    text.lines().any(|l| l == series)
}

#[test]
fn every_value_of_every_label_set_is_a_series_at_zero_from_startup() {
    let text = metrics().render();
    for series in [
        "tunnelgate_polls_total{result=\"error\"} 0",
        "tunnelgate_poll_errors_total{kind=\"decode\"} 0",
        "tunnelgate_commands_received_total{command_type=\"session_termination\"} 0",
        "tunnelgate_commands_dropped_total{reason=\"shutdown\"} 0",
        "tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"pipe\"} 0",
        "tunnelgate_deliveries_total{kind=\"notify\",outcome=\"ambiguous\"} 0",
        "tunnelgate_delivery_attempts_total{kind=\"terminal\",result=\"cancelled\"} 0",
        "tunnelgate_fatal_latches_total{category=\"ack_not_found\"} 0",
        "tunnelgate_stdio_up{channel=\"other\"} 0",
        "tunnelgate_stdio_restarts_total{channel=\"other\"} 0",
        "tunnelgate_stdio_late_responses_total{channel=\"main\"} 0",
        "tunnelgate_stdio_late_responses_total{channel=\"other\"} 0",
        "tunnelgate_stdio_sessions_total{channel=\"main\",result=\"initialized\"} 0",
        "tunnelgate_stdio_sessions_total{channel=\"other\",result=\"abandoned\"} 0",
        "tunnelgate_task_failures_total{task=\"admitter\"} 0",
        "tunnelgate_task_failures_total{task=\"warmup\"} 0",
        "tunnelgate_trace_context_invalid_total{source=\"header\"} 0",
        "tunnelgate_trace_context_invalid_total{source=\"meta\"} 0",
        "tunnelgate_fatal_latched 0",
        "tunnelgate_strict_mode 0",
    ] {
        assert!(has(&text, series), "{series} missing:\n{text}");
    }
    for task in TaskKind::ALL {
        let series = format!("tunnelgate_task_failures_total{{task=\"{}\"}} 0", task.as_label());
        assert!(has(&text, &series), "{series} missing");
    }
}

#[test]
fn fatal_info_has_no_series_until_the_latch_then_exactly_one() {
    let m = metrics();
    assert!(!m.render().contains("tunnelgate_fatal_info"));
    m.fatal_info(Category::AckNotFound);
    let text = m.render();
    assert!(
        has(&text, "tunnelgate_fatal_info{category=\"ack_not_found\"} 1"),
        "{text}"
    );
    assert_eq!(text.matches("tunnelgate_fatal_info{").count(), 1, "{text}");
    // Set again (it never is: the latch is monotonic), it still names one category.
    m.fatal_info(Category::AckTimeout);
    let text = m.render();
    assert!(
        has(&text, "tunnelgate_fatal_info{category=\"ack_timeout\"} 1"),
        "{text}"
    );
    assert_eq!(text.matches("tunnelgate_fatal_info{").count(), 1, "{text}");
}

#[test]
fn intent_methods_move_their_own_series() {
    let m = metrics();
    m.poll_failed(Kind::Timeout);
    m.poll_finished(PollResult::Empty);
    m.command_received(CommandType::JsonRpc);
    m.downstream_finished(Transport::Http, Outcome::Abandoned);
    m.delivery_attempted(DeliveryKind::Notify, Attempt::Ok);
    m.delivery_finished(DeliveryKind::Notify, Delivery::Acked);
    m.fatal_latched(Category::AckTimeout);
    m.stdio_late_response("other");
    m.task_failed(TaskKind::StdioReader);
    m.trace_context_invalid(TraceContextSource::Meta);
    let text = m.render();
    for series in [
        "tunnelgate_polls_total{result=\"error\"} 1",
        "tunnelgate_poll_errors_total{kind=\"timeout\"} 1",
        "tunnelgate_polls_total{result=\"empty\"} 1",
        "tunnelgate_commands_received_total{command_type=\"jsonrpc\"} 1",
        "tunnelgate_downstream_requests_total{outcome=\"abandoned\",transport=\"http\"} 1",
        "tunnelgate_delivery_attempts_total{kind=\"notify\",result=\"ok\"} 1",
        "tunnelgate_deliveries_total{kind=\"notify\",outcome=\"acked\"} 1",
        "tunnelgate_fatal_latches_total{category=\"ack_timeout\"} 1",
        "tunnelgate_fatal_latched 1",
        "tunnelgate_stdio_late_responses_total{channel=\"other\"} 1",
        "tunnelgate_stdio_late_responses_total{channel=\"main\"} 0",
        "tunnelgate_task_failures_total{task=\"stdio_reader\"} 1",
        "tunnelgate_task_failures_total{task=\"stdio_monitor\"} 0",
        "tunnelgate_trace_context_invalid_total{source=\"meta\"} 1",
        "tunnelgate_trace_context_invalid_total{source=\"header\"} 0",
    ] {
        assert!(has(&text, series), "{series} missing:\n{text}");
    }
}

#[test]
fn the_latency_histogram_exports_every_leg_with_its_buckets_at_zero_before_any_command() {
    let text = metrics().render();
    for leg in DurationLeg::ALL {
        let leg = leg.as_label();
        for bucket in DURATION_BUCKETS.iter().map(f64::to_string).chain(["+Inf".to_owned()]) {
            let series = format!("tunnelgate_command_duration_seconds_bucket{{leg=\"{leg}\",le=\"{bucket}\"}} 0");
            assert!(has(&text, &series), "{series} missing:\n{text}");
        }
        for series in [
            format!("tunnelgate_command_duration_seconds_sum{{leg=\"{leg}\"}} 0"),
            format!("tunnelgate_command_duration_seconds_count{{leg=\"{leg}\"}} 0"),
        ] {
            assert!(has(&text, &series), "{series} missing:\n{text}");
        }
    }
    let m = metrics();
    m.leg_duration(DurationLeg::Queue, 0.002);
    let text = m.render();
    assert!(
        has(&text, "tunnelgate_command_duration_seconds_count{leg=\"queue\"} 1"),
        "{text}"
    );
    assert!(
        has(&text, "tunnelgate_command_duration_seconds_count{leg=\"total\"} 0"),
        "an observation of one leg leaves the others at zero:\n{text}"
    );
}

#[test]
fn receipts_series_exist_at_zero_and_count_by_reason() {
    let m = Metrics::new::<Fakes>(false, &[]);
    let text = m.render();
    assert!(text.contains("tunnelgate_receipts_written_total 0"), "{text}");
    for reason in ReceiptDropReason::ALL {
        let series = format!(
            "tunnelgate_receipts_dropped_total{{reason=\"{}\"}} 0",
            reason.as_label()
        );
        assert!(text.contains(&series), "{series} at zero");
    }
    m.receipts_written(2);
    m.receipts_dropped(ReceiptDropReason::DiskFull, 3);
    let text = m.render();
    assert!(text.contains("tunnelgate_receipts_written_total 2"), "{text}");
    assert!(
        text.contains("tunnelgate_receipts_dropped_total{reason=\"disk_full\"} 3"),
        "{text}"
    );
}
