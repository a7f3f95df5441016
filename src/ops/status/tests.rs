use super::*;
use crate::app::GatewayLabels;
use crate::strict::CommandRef;

fn state(strict: bool) -> OpsState {
    OpsState {
        fence: Fence::new(strict, 1),
        health: Arc::new(Health::default()),
        channels: Channels::default(),
        metrics: Arc::new(Metrics::new::<GatewayLabels>(strict, &[])),
        log_ring: Arc::default(),
        poll_freshness: Duration::from_secs(60),
        polls_failing_bound: None,
        page: crate::ops::ui::PageSettings {
            allow_remote: false,
            latch_file: "/var/lib/tunnelgate/latch.json".into(),
            coordinated: false,
        },
        instance_id: "test-instance".to_owned(),
        started: std::time::SystemTime::now(),
        health_details: false,
    }
}

fn reason(s: &OpsState) -> String {
    s.readiness().unwrap_err().to_string()
}

#[test]
fn each_not_ready_reason_reads_as_the_documented_line() {
    let down = ChannelStatus {
        channel: "main".to_owned(),
        transport: crate::downstream::TransportKind::Stdio,
        up: false,
        generation: 3,
        session: Some(crate::downstream::SessionState::Down),
        server: None,
        protocol_version: None,
        tools: None,
        started_at: None,
        era_setting: None,
        era: None,
    };
    let rows = [
        (
            NotReady::Fatal(FatalCategory::AckNotFound),
            "fatal latch set (ack_not_found)",
        ),
        (NotReady::Draining, "draining: the gateway is stopping"),
        (
            NotReady::TaskFailed {
                task: "poller",
                why: "panicked",
            },
            "internal task poller ended unexpectedly (panicked)",
        ),
        (NotReady::NoPollYet, "no successful poll of the control plane yet"),
        (
            NotReady::PollStale {
                age: Duration::from_millis(91_900),
                last_error: Some("timeout"),
            },
            "last successful poll 91s ago (last error: timeout)",
        ),
        (
            NotReady::PollStale {
                age: Duration::from_secs(61),
                last_error: None,
            },
            "last successful poll 61s ago (last error: none)",
        ),
        (
            NotReady::PollsFailing {
                failing: Duration::from_millis(10_400),
                last_error: Some("transport"),
            },
            "every poll has failed for 10s (last error: transport)",
        ),
        (
            NotReady::ChannelDown(Box::new(down)),
            "downstream channel main (stdio) is down",
        ),
        (
            NotReady::Standby {
                holder: Some("gw-a".to_owned()),
            },
            "standby (the active replica is gw-a)",
        ),
        (
            NotReady::Uncoordinated {
                role: ReplicaRole::Unavailable,
            },
            "coordination unavailable: etcd cannot be reached, so this replica neither polls nor dispatches",
        ),
    ];
    for (reason, line) in rows {
        assert_eq!(reason.to_string(), line, "{reason:?}");
    }
}

/// A view as `coord` writes it: the role is `latched` exactly when a latch is set.
fn coordinated(role: ReplicaRole) -> crate::health::CoordinationView {
    let latch = (role == ReplicaRole::Latched).then(|| crate::health::ClusterLatch {
        category: "ack_timeout",
        request_id: None,
        channel: None,
        latched_by: Some("gw-b".to_owned()),
        latched_at: None,
    });
    crate::health::CoordinationView {
        backend: "etcd",
        role,
        holder: Some("gw-a".to_owned()),
        lease_ttl_seconds: 10.0,
        unsettled: 0,
        step_downs: 0,
        holding_off_seconds: None,
        control_plane_reachable: None,
        last_exchange_age_seconds: None,
        latch,
    }
}

#[test]
fn only_the_active_role_is_ready_and_each_other_names_itself() {
    let rows = [
        (ReplicaRole::Active, None),
        (ReplicaRole::Standby, Some("standby (the active replica is gw-a)")),
        (
            ReplicaRole::Unavailable,
            Some("coordination unavailable: etcd cannot be reached, so this replica neither polls nor dispatches"),
        ),
        (
            ReplicaRole::Latched,
            Some("fatal latch set on the cluster (ack_timeout): this replica holds until `tunnelgate latch clear`"),
        ),
    ];
    for (role, reason) in rows {
        let got = coordination_readiness(coordinated(role)).err().map(|r| r.to_string());
        assert_eq!(got.as_deref(), reason, "{role}");
    }
}

#[test]
fn the_coordination_view_serializes_its_role_as_the_api_word() {
    let text = json(coordinated(ReplicaRole::Standby));
    assert!(
        text.starts_with(r#"{"backend":"etcd","role":"standby","holder":"gw-a","#),
        "{text}"
    );
}

fn json(value: impl Serialize) -> String {
    serde_json::to_string(&value).unwrap()
}

#[test]
fn mode_and_state_serialize_to_their_api_strings() {
    assert_eq!(json(Mode::Default), "\"default\"");
    assert_eq!(json(Mode::Strict), "\"strict\"");
    for (state, text) in [
        (GatewayState::Starting, "starting"),
        (GatewayState::Ready, "ready"),
        (GatewayState::Degraded, "degraded"),
        (GatewayState::Draining, "draining"),
        (GatewayState::Fatal, "fatal"),
        (GatewayState::Standby, "standby"),
    ] {
        assert_eq!(json(state), format!("\"{text}\""));
    }
    assert_eq!(Mode::of(true).as_str(), "strict");
    assert_eq!(Mode::of(false).as_str(), "default");
}

#[test]
fn the_state_is_the_first_that_holds() {
    use GatewayState::*;
    // (fatal, draining, polled, ready) -> state
    let rows = [
        ((true, true, true, true), Fatal),
        ((true, false, false, false), Fatal),
        ((false, true, true, true), Draining),
        ((false, true, false, false), Draining),
        ((false, false, false, false), Starting),
        ((false, false, false, true), Starting),
        ((false, false, true, true), Ready),
        ((false, false, true, false), Degraded),
    ];
    for ((fatal, draining, polled, ready), state) in rows {
        assert_eq!(
            GatewayState::of(fatal, draining, polled, ready),
            state,
            "{fatal} {draining} {polled} {ready}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn with_a_bound_polls_failing_that_long_make_the_gateway_not_ready_until_one_succeeds() {
    let mut s = state(true);
    s.polls_failing_bound = Some(Duration::from_secs(10));
    s.health.poll_succeeded();
    s.health.poll_failed("transport");
    tokio::time::advance(Duration::from_secs(9)).await;
    s.health.poll_failed("transport");
    assert!(s.readiness().is_ok(), "9 s of failures, under the bound");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(reason(&s), "every poll has failed for 10s (last error: transport)");
    s.health.poll_succeeded();
    assert!(s.readiness().is_ok(), "a success ends it");
    s.polls_failing_bound = None;
    s.health.poll_failed("transport");
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(
        s.readiness().is_ok(),
        "without coordination only the freshness bound applies"
    );
}

#[tokio::test(start_paused = true)]
async fn readiness_names_the_first_reason_in_order() {
    let s = state(true);
    assert_eq!(reason(&s), "no successful poll of the control plane yet");
    s.health.poll_succeeded();
    assert!(s.readiness().is_ok());
    tokio::time::advance(Duration::from_secs(61)).await;
    s.health.poll_failed("timeout");
    assert_eq!(reason(&s), "last successful poll 61s ago (last error: timeout)");
    s.health.task_failed("notifier", "panicked");
    assert_eq!(reason(&s), "internal task notifier ended unexpectedly (panicked)");
    s.health.set_draining();
    assert_eq!(reason(&s), "draining: the gateway is stopping");
    s.fence.latch(FatalCategory::InternalError, &CommandRef::default());
    assert_eq!(reason(&s), "fatal latch set (internal_error)");
}

#[tokio::test(start_paused = true)]
async fn the_status_document_keeps_its_keys_order_and_values() {
    let s = state(true);
    let doc = |s: &OpsState| json(s.status());
    let polled = |s: &OpsState| json(s.health.poll_health().last_successful_poll_at);
    let version = env!("CARGO_PKG_VERSION");
    let rest = r#""fence":{"held":false,"leg":null,"request_id":null,"channel":null,"held_seconds":null},"fatal":null,"persisted_cause":null,"control_plane":{"last_successful_poll_age_seconds":AGE,"consecutive_poll_errors":0,"last_poll_error_kind":null,"last_successful_poll_at":POLLED,"last_acked_at":null},"downstream":[],"commands":{"in_flight":0,"queued":0},"outcomes":{"received":0,"legs":{"abandoned":0,"answered":0,"not_sent":0},"deliveries":{"acked":0,"ambiguous":0,"not_found":0,"rejected":0},"notifications":{"acked":0,"ambiguous":0,"not_found":0,"rejected":0},"dropped":{"expired":0,"fatal":0,"invalid":0,"shutdown":0,"unknown_type":0,"unmatched_reply":0,"unroutable":0,"unsupported":0}},"recent_receipts":[]}"#;
    assert_eq!(
        doc(&s),
        format!(
            r#"{{"schema_version":1,"version":"{version}","mode":"strict","state":"starting","ready":false,"not_ready_reason":"no successful poll of the control plane yet",{}"#,
            rest.replace("AGE", "null").replace("POLLED", "null")
        )
    );
    s.health.poll_succeeded();
    assert_eq!(
        doc(&s),
        format!(
            r#"{{"schema_version":1,"version":"{version}","mode":"strict","state":"ready","ready":true,"not_ready_reason":null,{}"#,
            rest.replace("AGE", "0.0").replace("POLLED", &polled(&s))
        )
    );
    let s = state(false);
    s.health.poll_succeeded();
    s.health.task_failed("poller", "panicked");
    assert_eq!(
        doc(&s),
        format!(
            r#"{{"schema_version":1,"version":"{version}","mode":"default","state":"degraded","ready":false,"not_ready_reason":"internal task poller ended unexpectedly (panicked)",{}"#,
            rest.replace("AGE", "0.0").replace("POLLED", &polled(&s))
        )
    );
}

#[tokio::test]
async fn a_channel_entry_keeps_its_keys_and_adds_the_health_receipt() {
    let http = crate::downstream::HttpSettings {
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        max_body_bytes: 1024,
    };
    let transport = crate::downstream::HttpTransport::from_text("main", "http://127.0.0.1:9/mcp", http).unwrap();
    let s = OpsState {
        channels: Channels::new(std::collections::BTreeMap::from([(
            "main".to_owned(),
            crate::downstream::Transport::Http(transport),
        )])),
        health: Arc::new(Health::with_channels(["main".to_owned()])),
        ..state(false)
    };
    let entry = |s: &OpsState| serde_json::to_value(&s.status().downstream[0]).unwrap();
    assert_eq!(
        serde_json::to_string(&entry(&s)).unwrap(),
        r#"{"channel":"main","transport":"http","up":true,"generation":0,"server":null,"protocol_version":null,"tools":null,"started_at":null,"era_setting":"auto","era":null,"last_command_at":null,"last_success_at":null}"#
    );
    let at = 1_764_590_400_000;
    s.health.channel_commanded("main", at);
    s.health.channel_succeeded("main", at + 5);
    let e = entry(&s);
    assert_eq!(e["last_command_at"], "2025-12-01T12:00:00.000Z", "{e}");
    assert_eq!(e["last_success_at"], "2025-12-01T12:00:00.005Z", "{e}");
}
