use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::layer::SubscriberExt;

use super::*;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn tp(version: &str, trace: &str, parent: &str, flags: &str) -> String {
    format!("{version}-{trace}-{parent}-{flags}")
}

fn parsed(traceparent: &str, tracestate: Option<&str>) -> Extracted {
    TraceContext::extract(Some(Some(traceparent)), tracestate.map(Some))
}

#[test]
fn a_valid_traceparent_is_continued_and_written_back_the_same() {
    let value = tp("00", TRACE, PARENT, "01");
    let got = parsed(&value, Some("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"));
    assert!(!got.malformed);
    let cx = got.context.unwrap();
    assert_eq!(cx.traceparent(), value);
    assert_eq!(cx.tracestate(), Some("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"));
    // Surrounding whitespace (optional in HTTP) is not part of the value.
    assert_eq!(
        parsed(&format!(" {value}\t"), None).context.unwrap().traceparent(),
        value
    );
}

#[test]
fn malformed_traceparents_are_ignored_and_flagged() {
    let zeros32 = "0".repeat(32);
    let zeros16 = "0".repeat(16);
    let cases = [
        tp("00", &TRACE.to_uppercase(), PARENT, "01"),
        tp("00", &zeros32, PARENT, "01"),
        tp("00", TRACE, &zeros16, "01"),
        tp("ff", TRACE, PARENT, "01"),
        tp("0g", TRACE, PARENT, "01"),
        tp("00", TRACE, PARENT, "1"),
        format!("{}-extra", tp("00", TRACE, PARENT, "01")),
        tp("00", &TRACE[1..], PARENT, "01"),
        format!("00_{TRACE}-{PARENT}-01"),
        "PAYLOAD-CANARY".to_owned(),
        String::new(),
    ];
    for value in &cases {
        let got = parsed(value, Some("a=1"));
        assert_eq!(
            got,
            Extracted {
                context: None,
                malformed: true
            },
            "{value:?}"
        );
    }
    // Present but not text (a number in _meta, two headers).
    assert_eq!(
        TraceContext::extract(Some(None), None),
        Extracted {
            context: None,
            malformed: true
        }
    );
}

#[test]
fn a_later_version_may_carry_more_fields_after_a_dash() {
    let value = format!("{}-whatever", tp("01", TRACE, PARENT, "03"));
    let cx = parsed(&value, None).context.unwrap();
    assert_eq!(cx.traceparent(), tp("00", TRACE, PARENT, "03"));
    assert!(parsed(&format!("{}x", tp("01", TRACE, PARENT, "03")), None).malformed);
}

#[test]
fn a_bad_tracestate_is_dropped_alone_and_a_lone_one_is_not_read() {
    let value = tp("00", TRACE, PARENT, "01");
    for bad in ["no-equals", "UPPER=1", "a=1\nb=2", &format!("a={}", "x".repeat(600))] {
        let got = parsed(&value, Some(bad));
        assert!(got.malformed, "{bad:?}");
        let cx = got.context.expect("the traceparent still counts");
        assert_eq!(cx.tracestate(), None);
    }
    let got = TraceContext::extract(Some(Some(&value)), Some(None));
    assert!(got.malformed && got.context.is_some());
    assert_eq!(parsed(&value, Some("")).context.unwrap().tracestate(), None);
    assert_eq!(TraceContext::extract(None, Some(Some("a=1"))), Extracted::default());
}

#[test]
fn a_span_continues_the_callers_trace_and_hands_on_its_own_id_and_the_callers_state() {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    tracing::subscriber::with_default(subscriber, || {
        for (flags, sampled) in [("01", true), ("00", false)] {
            let caller = parsed(&tp("00", TRACE, PARENT, flags), Some("rojo=1")).context.unwrap();
            let command = tracing::info_span!("command");
            continue_trace(&command, &caller);
            let downstream = tracing::info_span!(parent: &command, "downstream");
            let handed = span_trace_context(&downstream).expect("a span under export has a context");
            let value = handed.traceparent();
            assert!(value.starts_with(&format!("00-{TRACE}-")), "{value}");
            assert!(
                !value.contains(PARENT),
                "the gateway's own span id is handed on: {value}"
            );
            assert_eq!(value.ends_with("-01"), sampled, "{value}");
            assert_eq!(handed.tracestate(), Some("rojo=1"));
        }
    });
}

#[test]
fn without_span_export_there_is_nothing_to_hand_on() {
    let subscriber = tracing_subscriber::registry();
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("command");
        let caller = parsed(&tp("00", TRACE, PARENT, "01"), None).context.unwrap();
        continue_trace(&span, &caller);
        assert_eq!(span_trace_context(&span), None);
    });
}
