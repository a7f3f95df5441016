use super::*;
use LegOutcome::*;

/// Every variant, with the outcome, `tunnel_failure` source and caller words it must give.
fn table() -> Vec<(LegFailure, LegOutcome, &'static str, &'static str)> {
    vec![
        (LegFailure::Dns, NotSent, "dns", NOT_SENT_MESSAGE),
        (LegFailure::ConnectRefused, NotSent, "connect", NOT_SENT_MESSAGE),
        (LegFailure::ConnectFailed, NotSent, "connect", NOT_SENT_MESSAGE),
        (LegFailure::Tls, NotSent, "tls", NOT_SENT_MESSAGE),
        (
            LegFailure::ChildNotRunning,
            NotSent,
            "transport_closed",
            NOT_SENT_MESSAGE,
        ),
        (LegFailure::NotAdmitted, NotSent, "client_internal", NOT_SENT_MESSAGE),
        (LegFailure::DeadlineBeforeSend, NotSent, "timeout", NOT_SENT_MESSAGE),
        (
            LegFailure::InternalBeforeSend,
            NotSent,
            "client_internal",
            NOT_SENT_MESSAGE,
        ),
        (LegFailure::HttpStatus(400), Answered, "target_http", REFUSED_MESSAGE),
        (LegFailure::HttpStatus(404), Answered, "target_http", REFUSED_MESSAGE),
        (LegFailure::HttpStatus(406), Answered, "target_http", REFUSED_MESSAGE),
        (LegFailure::HttpStatus(408), Abandoned, "target_http", ABANDONED_MESSAGE),
        (LegFailure::HttpStatus(500), Abandoned, "target_http", ABANDONED_MESSAGE),
        (LegFailure::HttpStatus(503), Abandoned, "target_http", ABANDONED_MESSAGE),
        (LegFailure::TimeoutAfterWrite, Abandoned, "timeout", ABANDONED_MESSAGE),
        (
            LegFailure::ConnectionLost,
            Abandoned,
            "transport_closed",
            ABANDONED_MESSAGE,
        ),
        (
            LegFailure::StreamClosedBeforeResponse,
            Abandoned,
            "protocol",
            ABANDONED_MESSAGE,
        ),
        (LegFailure::TruncatedJson, Abandoned, "protocol", ABANDONED_MESSAGE),
        (
            LegFailure::NonProtocolResponse,
            Abandoned,
            "protocol",
            ABANDONED_MESSAGE,
        ),
        (LegFailure::BodyTooLarge, Abandoned, "protocol", ABANDONED_MESSAGE),
        (
            LegFailure::ChildExited,
            Abandoned,
            "transport_closed",
            ABANDONED_MESSAGE,
        ),
        (
            LegFailure::ChildPipeBroken,
            Abandoned,
            "transport_closed",
            ABANDONED_MESSAGE,
        ),
        (
            LegFailure::InternalAfterWrite,
            Abandoned,
            "client_internal",
            ABANDONED_MESSAGE,
        ),
    ]
}

#[test]
fn every_failure_maps_to_one_outcome_source_and_message() {
    for (failure, outcome, source, message) in table() {
        assert_eq!(failure.outcome(), outcome, "{failure:?}");
        let tf = serde_json::to_value(failure.tunnel_failure()).unwrap();
        assert_eq!(tf["source"], source, "{failure:?}");
        assert_eq!(tf["version"], 1);
        assert_eq!(failure.caller_message(), message, "{failure:?}");
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
