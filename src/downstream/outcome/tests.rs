use super::*;
use LegOutcome::*;

/// One row: a failure with the outcome, `tunnel_failure` source and
/// `transport_error_kind`, caller words and synthesized `resp_code` it must give.
type Row = (
    LegFailure,
    LegOutcome,
    &'static str,
    Option<&'static str>,
    &'static str,
    u16,
);

/// Every variant (and the statuses that split `HttpStatus`).
fn table() -> Vec<Row> {
    vec![
        (LegFailure::Dns, NotSent, "dns", Some("dns"), NOT_SENT_MESSAGE, 502),
        (
            LegFailure::ConnectRefused,
            NotSent,
            "connect",
            Some("connection_refused"),
            NOT_SENT_MESSAGE,
            502,
        ),
        (
            LegFailure::ConnectFailed,
            NotSent,
            "connect",
            Some("dial"),
            NOT_SENT_MESSAGE,
            502,
        ),
        (LegFailure::Tls, NotSent, "tls", Some("tls"), NOT_SENT_MESSAGE, 502),
        (
            LegFailure::ProxyRefused,
            NotSent,
            "connect",
            Some("dial"),
            NOT_SENT_MESSAGE,
            502,
        ),
        (
            LegFailure::ProxyAuthRequired,
            NotSent,
            "connect",
            Some("dial"),
            NOT_SENT_MESSAGE,
            502,
        ),
        (
            LegFailure::ChildNotRunning,
            NotSent,
            "transport_closed",
            Some("closed_pipe"),
            NOT_SENT_MESSAGE,
            502,
        ),
        (
            LegFailure::NotAdmitted,
            NotSent,
            "client_internal",
            None,
            NOT_SENT_MESSAGE,
            502,
        ),
        (
            LegFailure::DeadlineBeforeSend,
            NotSent,
            "timeout",
            Some("timeout"),
            NOT_SENT_MESSAGE,
            504,
        ),
        (
            LegFailure::InternalBeforeSend,
            NotSent,
            "client_internal",
            Some("unknown"),
            NOT_SENT_MESSAGE,
            502,
        ),
        (
            LegFailure::LocalExhaustion,
            NotSent,
            "client_internal",
            Some("unknown"),
            LOCAL_EXHAUSTION_MESSAGE,
            502,
        ),
        (
            LegFailure::SessionNotOpen,
            NotSent,
            "transport_closed",
            Some("closed_pipe"),
            SESSION_NOT_OPEN_MESSAGE,
            502,
        ),
        (
            LegFailure::InitializeAbandoned,
            NotSent,
            "transport_closed",
            Some("closed_pipe"),
            SESSION_NOT_OPEN_MESSAGE,
            502,
        ),
        (
            LegFailure::HttpStatus(400),
            Answered,
            "target_http",
            Some("http_status"),
            REFUSED_MESSAGE,
            400,
        ),
        (
            LegFailure::HttpStatus(404),
            Answered,
            "target_http",
            Some("http_status"),
            REFUSED_MESSAGE,
            404,
        ),
        (
            LegFailure::HttpStatus(406),
            Answered,
            "target_http",
            Some("http_status"),
            REFUSED_MESSAGE,
            406,
        ),
        (
            LegFailure::HttpStatus(408),
            Abandoned,
            "target_http",
            Some("http_status"),
            ABANDONED_MESSAGE,
            408,
        ),
        (
            LegFailure::HttpStatus(500),
            Abandoned,
            "target_http",
            Some("http_status"),
            ABANDONED_MESSAGE,
            500,
        ),
        (
            LegFailure::HttpStatus(503),
            Abandoned,
            "target_http",
            Some("http_status"),
            ABANDONED_MESSAGE,
            503,
        ),
        (
            LegFailure::TimeoutAfterWrite,
            Abandoned,
            "timeout",
            Some("timeout"),
            ABANDONED_MESSAGE,
            504,
        ),
        (
            LegFailure::ConnectionLost,
            Abandoned,
            "transport_closed",
            Some("connection_reset"),
            ABANDONED_MESSAGE,
            502,
        ),
        (
            LegFailure::StreamClosedBeforeResponse,
            Abandoned,
            "protocol",
            Some("unexpected_eof"),
            ABANDONED_MESSAGE,
            502,
        ),
        (
            LegFailure::TruncatedJson,
            Abandoned,
            "protocol",
            Some("malformed_json"),
            ABANDONED_MESSAGE,
            502,
        ),
        (
            LegFailure::NonProtocolResponse,
            Abandoned,
            "protocol",
            Some("non_protocol_response"),
            ABANDONED_MESSAGE,
            502,
        ),
        (
            LegFailure::BodyTooLarge,
            Abandoned,
            "protocol",
            Some("response_body_too_large"),
            ABANDONED_MESSAGE,
            502,
        ),
        (
            LegFailure::ChildExited,
            Abandoned,
            "transport_closed",
            Some("eof"),
            ABANDONED_MESSAGE,
            502,
        ),
        (
            LegFailure::ChildPipeBroken,
            Abandoned,
            "transport_closed",
            Some("closed_pipe"),
            ABANDONED_MESSAGE,
            502,
        ),
        (
            LegFailure::SubscriptionEnded,
            Answered,
            "protocol",
            Some("unexpected_eof"),
            SUBSCRIPTION_ENDED_MESSAGE,
            200,
        ),
        (
            LegFailure::CancelledAfterWrite,
            Abandoned,
            "client_internal",
            Some("connection_aborted"),
            ABANDONED_MESSAGE,
            502,
        ),
        (
            LegFailure::InternalAfterWrite,
            Abandoned,
            "client_internal",
            Some("unknown"),
            ABANDONED_MESSAGE,
            502,
        ),
    ]
}

#[test]
fn every_failure_maps_to_one_outcome_source_and_message() {
    for (failure, outcome, source, kind, message, resp_code) in table() {
        assert_eq!(failure.outcome(), outcome, "{failure:?}");
        let tf = serde_json::to_value(failure.tunnel_failure()).unwrap();
        assert_eq!(tf["source"], source, "{failure:?}");
        assert_eq!(
            tf.get("transport_error_kind").and_then(|k| k.as_str()),
            kind,
            "{failure:?}"
        );
        assert_eq!(tf["version"], 1);
        assert_eq!(failure.caller_message(), message, "{failure:?}");
        assert_eq!(failure.resp_code(), resp_code, "{failure:?}");
    }
}

#[test]
fn provenance_obeys_the_contract_conditionals() {
    for (failure, ..) in table() {
        let tf = failure.tunnel_failure();
        if tf.source == FailureSource::TargetHttp {
            assert!(
                tf.upstream_response_received && tf.upstream_status.is_some(),
                "{failure:?}"
            );
        }
        if tf.upstream_status.is_some() {
            assert_eq!(tf.source, FailureSource::TargetHttp, "{failure:?}");
        }
        if tf.source == FailureSource::TransportClosed {
            assert!(
                !tf.upstream_response_received && tf.upstream_status.is_none(),
                "{failure:?}"
            );
        }
    }
}

#[test]
fn failed_legs_are_shaped_for_what_the_command_expects() {
    let id = RawValue::from_string("42".into()).unwrap();
    let r = LegResult::failed(LegFailure::ConnectRefused, Some(&id), RespType::JsonrpcResponse);
    assert_eq!(r.outcome, NotSent);
    assert_eq!(r.reply.resp_code, 502);
    let v: serde_json::Value = serde_json::from_str(r.reply.resp_json.unwrap().get()).unwrap();
    assert_eq!(v["id"], 42);
    assert_eq!(v["error"]["message"], NOT_SENT_MESSAGE);

    let r = LegResult::failed(LegFailure::TimeoutAfterWrite, None, RespType::NotifyAck);
    assert!(r.reply.resp_json.is_none());
    assert_eq!(r.reply.resp_code, 504);
    assert_eq!(r.reply.resp_type, RespType::NotifyAck);
}
