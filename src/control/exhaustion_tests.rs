//! A real `EMFILE` on the control-plane side: in a child process whose descriptor table
//! is full, a response POST and a poll fail before anything is written, and both name
//! the gateway's own exhaustion rather than blaming the control plane.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::{AttemptResult, ControlClient, ControlSettings, Delivery, PollErrorKind, PollWait, PostKind};
use crate::app::GatewayLabels;
use crate::descriptors::exhausted;
use crate::protocol::ShardToken;
use crate::telemetry::Metrics;

#[tokio::test]
async fn a_post_and_a_poll_with_no_descriptor_left_are_local_exhaustion() {
    let path = "control::exhaustion_tests::a_post_and_a_poll_with_no_descriptor_left_are_local_exhaustion";
    if exhausted::rerun_in_child(path, "delivery ambiguous last local_exhaustion poll local_exhaustion") {
        return;
    }
    // Nothing answers: the listener only gives the URL a port that is open.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(false, &[]));
    let settings = ControlSettings {
        base_url: format!("http://{}", listener.local_addr().unwrap()),
        url_path: String::new(),
        tunnel_id: "t".to_owned(),
        api_key: "k".to_owned(),
        poll_timeout: Duration::from_secs(1),
        post_timeout: Duration::from_secs(2),
        post_attempts: 2,
        server_info: None,
        routing_correction: false,
        initial_poll_timeout: None,
        http2: false,
    };
    let client = ControlClient::new(settings, "i", metrics).unwrap();
    let body = Bytes::from_static(br#"{"request_id":"r","channel":"main","resp_code":200,"resp_type":"notify_ack"}"#);
    let table = exhausted::fill_descriptor_table();
    let report = client
        .deliver(
            PostKind::Terminal,
            body,
            &ShardToken::new("s"),
            None,
            &CancellationToken::new(),
        )
        .await;
    let poll = client.poll(1, PollWait::Quick).await.err().expect("the poll fails");
    drop(table);
    assert_eq!(report.attempts, 2, "retried: nothing was written");
    assert_eq!(report.delivery, Delivery::Ambiguous);
    assert_eq!(report.last_attempt, AttemptResult::LocalExhaustion);
    assert_eq!(poll.kind, PollErrorKind::LocalExhaustion);
    assert!(
        poll.to_string().contains("too many open files in the gateway"),
        "{poll}"
    );
    exhausted::report(&format!(
        "delivery {} last {} poll {}",
        report.delivery.as_str(),
        report.last_attempt.as_str(),
        poll.kind()
    ));
}
