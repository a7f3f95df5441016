//! The gateway's JSON, both ways, without an etcd; against a real one in [`real`].

mod real;

use std::time::Duration;

use serde_json::json;

use super::wire::{self, prefix_end, WatchMessage};
use super::*;

fn b64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn settings(endpoints: &[&str]) -> EtcdSettings {
    EtcdSettings {
        endpoints: endpoints
            .iter()
            .map(|e| HttpUrl::base("coordination.etcd.endpoints", e).unwrap())
            .collect(),
        username: Some("root".to_owned()),
        password: Some("hunter2-secret".to_owned()),
        tls: TlsFiles::default(),
        request_timeout: Duration::from_secs(1),
    }
}

#[test]
fn prefix_end_increments_the_last_byte_below_0xff() {
    assert_eq!(prefix_end("/tg/a"), b"/tg/b".to_vec());
    assert_eq!(prefix_end("/tg/"), b"/tg0".to_vec());
    assert_eq!(prefix_end(""), vec![0]);
    assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
}

#[test]
fn requests_carry_base64_keys_and_int64_as_strings() {
    assert_eq!(
        wire::put_request("/k", b"v", Some(42)),
        json!({"key": b64("/k"), "value": b64("v"), "lease": "42"})
    );
    assert_eq!(
        wire::put_request("/k", b"", None),
        json!({"key": b64("/k"), "value": ""})
    );
    assert_eq!(
        wire::range_request("/p/", true),
        json!({"key": b64("/p/"), "range_end": b64("/p0")})
    );
    assert_eq!(wire::delete_request("/k", false), json!({"key": b64("/k")}));
    assert_eq!(wire::grant_request(Duration::from_millis(2500)), json!({"TTL": "3"}));
    assert_eq!(wire::grant_request(Duration::ZERO), json!({"TTL": "1"}));
    assert_eq!(wire::lease_request(-7), json!({"ID": "-7"}));
    assert_eq!(
        wire::watch_request("/k", false, Some(5)),
        json!({"create_request": {"key": b64("/k"), "start_revision": "5"}})
    );
}

#[test]
fn a_txn_encodes_every_compare_target_and_op() {
    let txn = Txn {
        compare: vec![
            Compare::CreateRevision("/a".into(), CmpOp::Equal, 0),
            Compare::ModRevision("/a".into(), CmpOp::Less, 9),
            Compare::Version("/a".into(), CmpOp::Greater, 1),
            Compare::Value("/a".into(), CmpOp::NotEqual, b"x".to_vec()),
            Compare::Lease("/a".into(), CmpOp::Equal, 77),
        ],
        success: vec![Op::Put {
            key: "/a".into(),
            value: b"v".to_vec(),
            lease: Some(77),
        }],
        failure: vec![
            Op::Range {
                key: "/a".into(),
                prefix: false,
            },
            Op::Delete {
                key: "/p/".into(),
                prefix: true,
            },
        ],
    };
    let a = b64("/a");
    assert_eq!(
        wire::txn_request(&txn),
        json!({
            "compare": [
                {"key": a, "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
                {"key": a, "target": "MOD", "result": "LESS", "mod_revision": "9"},
                {"key": a, "target": "VERSION", "result": "GREATER", "version": "1"},
                {"key": a, "target": "VALUE", "result": "NOT_EQUAL", "value": b64("x")},
                {"key": a, "target": "LEASE", "result": "EQUAL", "lease": "77"},
            ],
            "success": [{"request_put": {"key": a, "value": b64("v"), "lease": "77"}}],
            "failure": [
                {"request_range": {"key": a}},
                {"request_delete_range": {"key": b64("/p/"), "range_end": b64("/p0")}},
            ],
        })
    );
}

#[test]
fn a_failed_txn_has_no_succeeded_field_and_its_ranges_come_in_order() {
    let body = json!({
        "header": {"revision": "4"},
        "responses": [
            {"response_range": {"kvs": [{"key": b64("/a"), "value": b64("1"), "create_revision": "2",
                "mod_revision": "3", "version": "2", "lease": "99"}], "count": "1"}},
            {"response_delete_range": {"header": {"revision": "4"}}},
            {"response_range": {"header": {"revision": "4"}}},
        ]
    });
    let txn = wire::txn_response(body.to_string().as_bytes()).unwrap();
    assert!(!txn.succeeded);
    assert_eq!(txn.revision, 4);
    assert_eq!(txn.ranges.len(), 2);
    let kv = &txn.ranges[0][0];
    assert_eq!((kv.key.as_str(), kv.value.as_slice()), ("/a", b"1".as_slice()));
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version, kv.lease),
        (2, 3, 2, 99)
    );
    assert!(txn.ranges[1].is_empty(), "a range with no key has no kvs field");

    let ok = wire::txn_response(br#"{"header":{"revision":"5"},"succeeded":true}"#).unwrap();
    assert!(ok.succeeded);
    assert!(ok.ranges.is_empty());
}

#[test]
fn numbers_are_read_as_strings_or_numbers_and_uint64_ids_fit() {
    let status: wire::StatusResponse = wire::decode(
        br#"{"header":{"member_id":"13668033151171901709","revision":1},"version":"3.4.23","leader":"13668033151171901709"}"#,
    )
    .unwrap();
    let status = status.into_status("http://127.0.0.1:2379".to_owned());
    assert_eq!(status.leader, 13_668_033_151_171_901_709);
    assert_eq!(status.member, status.leader);
    assert_eq!(status.version, "3.4.23");

    let renewed: wire::KeepAliveResponse = wire::decode(br#"{"result":{"ID":"41","TTL":"5"}}"#).unwrap();
    assert_eq!((renewed.result.id, renewed.result.ttl), (41, 5));
    let gone: wire::KeepAliveResponse = wire::decode(br#"{"result":{"ID":"41"}}"#).unwrap();
    assert_eq!(gone.result.ttl, 0, "a lease that is gone renews to TTL 0, omitted");

    let Err(bad) = wire::decode::<wire::GrantResponse>(br#"{"ID":"not-a-secret-number"}"#) else {
        panic!("an id that is no number is refused");
    };
    assert_eq!(bad.kind(), "decode");
    assert!(!bad.to_string().contains("not-a-secret-number"), "{bad}");
}

#[test]
fn watch_lines_read_put_without_a_type_and_delete_with_one() {
    let created = wire::watch_message(br#"{"result":{"header":{"revision":"4"},"created":true}}"#).unwrap();
    assert!(matches!(created, WatchMessage::Created));
    let line = json!({"result": {"events": [
        {"kv": {"key": b64("/l"), "value": b64("x"), "mod_revision": "5", "create_revision": "5", "version": "1"}},
        {"type": "DELETE", "kv": {"key": b64("/l"), "mod_revision": "6"}},
    ]}});
    let WatchMessage::Events(events) = wire::watch_message(line.to_string().as_bytes()).unwrap() else {
        panic!("events expected");
    };
    assert_eq!(events[0].kind, WatchKind::Put);
    assert_eq!(events[0].kv.value, b"x");
    assert_eq!(events[1].kind, WatchKind::Delete);
    assert_eq!((events[1].kv.key.as_str(), events[1].kv.mod_revision), ("/l", 6));
    assert!(matches!(
        wire::watch_message(br#"{"result":{"header":{}}}"#).unwrap(),
        WatchMessage::Progress
    ));
}

#[test]
fn a_canceled_or_failed_watch_is_a_refusal() {
    let compacted =
        wire::watch_message(br#"{"result":{"canceled":true,"compact_revision":"9","created":true}}"#).unwrap_err();
    assert!(
        matches!(compacted, EtcdError::Refused { code: 11, .. }),
        "{compacted:?}"
    );
    let token = wire::watch_message(
        br#"{"result":{"created":true,"canceled":true,"cancel_reason":"rpc error: code = InvalidArgument desc = etcdserver: user name is empty"}}"#,
    )
    .unwrap_err();
    let EtcdError::Refused { message, .. } = &token else {
        panic!("{token:?}")
    };
    assert!(wire::needs_reauth(message));
    let stream = wire::watch_message(br#"{"error":{"grpc_code":14,"http_code":503,"message":"unavailable"}}"#);
    assert!(matches!(stream, Err(EtcdError::Refused { code: 14, .. })));
    assert_eq!(wire::watch_message(b"{\"result\":").unwrap_err().kind(), "decode");
}

#[test]
fn error_bodies_become_code_and_message_and_token_refusals_are_recognised() {
    let body = br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#;
    assert_eq!(
        wire::refusal(body),
        Some((5, "etcdserver: requested lease not found".to_owned()))
    );
    assert_eq!(wire::refusal(b"<html>bad gateway</html>"), None);
    assert_eq!(wire::refusal(b"{}"), None);
    for message in [
        "etcdserver: invalid auth token",
        "etcdserver: user name is empty",
        "etcdserver: revision of auth store is old",
    ] {
        assert!(wire::needs_reauth(message), "{message}");
    }
    for message in [
        "etcdserver: permission denied",
        "etcdserver: requested lease not found",
        "etcdserver: authentication failed, invalid user ID or password",
    ] {
        assert!(!wire::needs_reauth(message), "{message}");
    }
}

#[test]
fn debug_output_never_shows_a_password_or_a_value() {
    let settings = settings(&["http://127.0.0.1:2379"]);
    let shown = format!("{settings:?}");
    assert!(!shown.contains("hunter2-secret"), "{shown}");
    assert!(shown.contains("<redacted>") && shown.contains("root"), "{shown}");
    let client = Etcd::new(settings).unwrap();
    assert!(!format!("{client:?}").contains("hunter2-secret"));

    let kv = KeyValue {
        key: "/k".into(),
        value: b"payload-secret".to_vec(),
        create_revision: 1,
        mod_revision: 1,
        version: 1,
        lease: 0,
    };
    let op = Op::Put {
        key: "/k".into(),
        value: b"payload-secret".to_vec(),
        lease: None,
    };
    let cmp = Compare::Value("/k".into(), CmpOp::Equal, b"payload-secret".to_vec());
    for shown in [format!("{kv:?}"), format!("{op:?}"), format!("{cmp:?}")] {
        assert!(!shown.contains("payload-secret"), "{shown}");
        assert!(shown.contains("<14 bytes>"), "{shown}");
    }
}

#[test]
fn endpoints_with_credentials_are_refused_by_the_url_grammar() {
    assert!(HttpUrl::base("coordination.etcd.endpoints", "http://user:pw@127.0.0.1:2379").is_err());
}

#[test]
fn a_client_needs_an_endpoint_and_both_or_neither_credential() {
    let none = Etcd::new(settings(&[])).unwrap_err();
    assert_eq!(none.kind(), "setup");
    let mut half = settings(&["http://127.0.0.1:2379"]);
    half.password = None;
    let err = Etcd::new(half).unwrap_err();
    assert_eq!(err.kind(), "setup");
    assert!(!err.to_string().contains("hunter2"));
}

#[test]
fn every_error_has_a_stable_kind() {
    let cases = [
        (
            EtcdError::Unreachable {
                endpoint: "e".into(),
                reason: "r".into(),
            },
            "unreachable",
        ),
        (EtcdError::Timeout { endpoint: "e".into() }, "timeout"),
        (EtcdError::Auth { reason: "r".into() }, "auth"),
        (
            EtcdError::Refused {
                code: 5,
                message: "m".into(),
            },
            "refused",
        ),
        (EtcdError::Decode { reason: "r".into() }, "decode"),
        (EtcdError::Setup { reason: "r".into() }, "setup"),
    ];
    for (error, kind) in cases {
        assert_eq!(error.kind(), kind);
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn only_a_missing_answer_or_an_unavailable_member_moves_on_to_the_next_endpoint() {
    let refused = |code| EtcdError::Refused {
        code,
        message: "m".into(),
    };
    assert!(EtcdError::Timeout { endpoint: "e".into() }.tries_next());
    assert!(EtcdError::Unreachable {
        endpoint: "e".into(),
        reason: "r".into()
    }
    .tries_next());
    assert!(refused(14).tries_next());
    for stays in [
        refused(5),
        refused(3),
        EtcdError::Auth { reason: "r".into() },
        EtcdError::Decode { reason: "r".into() },
    ] {
        assert!(!stays.tries_next(), "{stays:?}");
    }
}
