//! Readiness follows the control plane within a round trip: a gateway whose credentials
//! are accepted and that has nothing queued is ready at once, not after a long poll.

use std::time::Duration;

use tunnelgate_sim::{McpStub, SimConfig, Simulator};

use crate::harness::{free_port, wait_until, Rig, RigOptions, KEY, TUNNEL};

/// A rig whose simulator holds empty polls for 30 s, as a real control plane does.
async fn idle_rig(api_key: &str) -> Rig {
    let stub = McpStub::start(([127, 0, 0, 1], 0).into()).await.expect("stub starts");
    let mut config = SimConfig::new(TUNNEL, api_key);
    config.max_poll_wait = Duration::from_secs(30);
    Rig {
        sim: Simulator::start(config).await.expect("simulator starts"),
        stub,
        dir: tempfile::tempdir().expect("tempdir"),
        ops_port: free_port(),
    }
}

fn long_poll_config(rig: &Rig) -> String {
    // A real poll timeout: the old first poll made readiness wait this long.
    rig.config(&RigOptions::default_mode())
        .replace("poll_timeout = \"1s\"", "poll_timeout = \"30s\"")
}

#[tokio::test]
async fn an_idle_gateway_is_ready_after_one_quick_poll_then_long_polls() {
    let rig = idle_rig(KEY).await;
    let mut gw = rig.spawn_gateway(&long_poll_config(&rig)).await;
    wait_until("ready with an idle control plane", Duration::from_secs(5), || async {
        rig.readyz().await.0 == 200
    })
    .await;
    let record = rig.sim.record();
    assert_eq!(record.polls[0].timeout_ms, Some(1), "the first poll answers at once");
    assert_eq!(record.polls[0].status, Some(204));
    wait_until("the next poll, a long one", Duration::from_secs(5), || async {
        rig.sim.record().polls.len() >= 2
    })
    .await;
    assert_eq!(rig.sim.record().polls[1].timeout_ms, Some(30_000));
    gw.sigterm();
    assert_eq!(gw.wait_exit(Duration::from_secs(40)).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn refused_credentials_keep_the_gateway_not_ready() {
    let rig = idle_rig("another-key").await;
    let mut gw = rig.spawn_gateway(&long_poll_config(&rig)).await;
    wait_until("the refused poll", Duration::from_secs(5), || async {
        rig.sim.record().polls.iter().any(|p| p.status == Some(401))
    })
    .await;
    let (status, reason) = rig.readyz().await;
    assert_eq!(status, 503);
    assert!(reason.contains("no successful poll"), "{reason}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(Duration::from_secs(20)).await, Some(0), "{}", gw.stderr());
}
