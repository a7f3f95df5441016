//! A strict stop while a call waits for its child's restart: nothing was sent, so the
//! stop is clean, the call ends `not_sent` and nothing is spawned again.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::time::Instant;

use super::{SessionMode, SessionSettings, StdioSettings, StdioTransport};
use crate::app::GatewayLabels;
use crate::downstream::{DownstreamRequest, LegFailure, LegOutcome};
use crate::protocol::JsonRpcPayload;
use crate::strict::{CommandRef, Fence};
use crate::telemetry::Metrics;

#[tokio::test]
async fn a_strict_stop_during_a_pending_restart_sends_nothing_and_spawns_nothing() {
    let settings = StdioSettings {
        request_timeout: Duration::from_secs(20),
        restart_backoff_min: Duration::from_secs(2),
        restart_backoff_max: Duration::from_secs(2),
        stop_grace: Duration::from_millis(300),
        max_concurrent: std::num::NonZeroUsize::new(1).unwrap(),
        guard: None,
        // The pipe as the mux sees it; the gateway's own handshake has tests of its own.
        session: SessionSettings {
            mode: SessionMode::PassThrough,
            ..SessionSettings::default()
        },
        input_required: super::InputRequiredSettings::default(),
    };
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(true, &["t".to_owned()]));
    // A child that exits at once: its restart waits for the backoff.
    let t = Arc::new(StdioTransport::new(
        "t",
        vec!["sh".to_owned(), "-c".to_owned(), "exit 0".to_owned()],
        Default::default(),
        settings,
        metrics,
    ));
    let fence = Fence::new(true, 1);
    {
        let warm = fence.admit(CommandRef::default()).await.unwrap();
        t.open(&warm).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.status().up {
        assert!(Instant::now() < deadline, "the child exits");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(t.status().generation, 1);

    let admission = fence
        .admit(CommandRef::new("r", "t", Some("tools/call")))
        .await
        .unwrap();
    let mut call = tokio::spawn({
        let t = t.clone();
        async move {
            let payload = JsonRpcPayload::from_raw(
                RawValue::from_string(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#.to_owned()).unwrap(),
            )
            .unwrap();
            let (tx, _rx) = tokio::sync::mpsc::channel(4);
            let req = DownstreamRequest {
                payload: &payload,
                headers: &Vec::new(),
                deadline: None,
            };
            let result = t.call(&admission, &req, &tx).await;
            (result, admission.is_sent())
        }
    });
    // The call is waiting for the restart backoff (about 2 s), not finished.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut call)
            .await
            .is_err(),
        "the call waits for the pending restart"
    );
    fence.stop_admitting();
    assert_eq!(fence.latch_if_sent_on_stop(), None, "nothing sent: a clean stop");
    let (result, sent) = tokio::time::timeout(Duration::from_secs(15), call)
        .await
        .unwrap()
        .unwrap();
    assert!(!sent);
    assert_eq!(result.outcome, LegOutcome::NotSent);
    assert_eq!(result.failure, Some(LegFailure::NotAdmitted));
    assert_eq!(t.status().generation, 1, "no child was spawned after the stop");
    assert!(fence.fatal().is_none());
}
