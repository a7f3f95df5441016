use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::build::task_failure_hook;
use super::stop::{StopBounds, StopOrder, StopSignals};
use super::*;
use crate::app::GatewayLabels;
use crate::downstream::Channels;
use crate::health::Health;
use crate::strict::{CommandRef, FatalCategory, Fence};
use crate::supervisor::TaskKind;
use crate::supervisor::{Supervisor, TaskEnd};

/// A configuration with the stop bounds under test (nothing is contacted).
fn config(strict: bool, latch_dir: &std::path::Path) -> Config {
    Config::from_toml_str(&format!(
        r#"
[control_plane]
base_url = "http://127.0.0.1:9"
tunnel_id = "t"
api_key = "k"
[mcp]
max_concurrent = 1
[mcp.channels.main]
url = "http://127.0.0.1:9/mcp"
[strict]
enabled = {strict}
latch_file = "{}"
shutdown_grace = "10s"
cleanup_timeout = "3s"
"#,
        latch_dir.join("latch.json").display()
    ))
    .unwrap()
}

/// A stop of a run with one admitted command: `sent` says whether its request may
/// have left; the command honours the cut (`obeys_cut`) or only the hard stop.
async fn stop_with_one_command(strict: bool, sent: bool, obeys_cut: bool) -> (RunOutcome, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(strict, dir.path());
    let fence = Fence::new(strict, 1);
    let admission = fence
        .admit(CommandRef::new("r", "main", Some("tools/call")))
        .await
        .unwrap();
    if sent {
        admission.begin_send().unwrap();
    }
    let health = Arc::new(Health::default());
    let supervisor = Supervisor::logging_only();
    let signals = StopSignals::new();
    supervisor.spawn(TaskKind::Command, {
        let (cut, hard_stop) = (signals.cut.clone(), signals.hard_stop.clone());
        async move {
            if obeys_cut {
                cut.cancelled().await;
            } else {
                hard_stop.cancelled().await;
            }
            drop(admission);
            TaskEnd::Finished
        }
    });
    let (tx, rx) = mpsc::unbounded_channel();
    // The stop request under test; `tx` stays open, so no second one arrives.
    tx.send(()).unwrap();
    let order = StopOrder {
        cluster: None,
        bounds: StopBounds::of(&config),
        fence: fence.clone(),
        channels: Channels::default(),
        health,
        supervisor,
        signals,
        requests: rx,
    };
    let started = Instant::now();
    let (outcome, _, _) = order.run().await;
    (outcome, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_strict_stop_with_nothing_sent_is_clean_exactly_at_the_end_of_the_grace() {
    let (outcome, elapsed) = stop_with_one_command(true, false, true).await;
    assert_eq!(outcome, RunOutcome::Clean);
    assert_eq!(elapsed, Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn a_strict_stop_with_a_sent_unacknowledged_command_latches_86_at_the_end_of_the_grace() {
    let (outcome, elapsed) = stop_with_one_command(true, true, true).await;
    let RunOutcome::Fatal(fatal) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(fatal.category, FatalCategory::StoppedBeforeAck);
    assert!(fatal.persisted, "the latch file was written");
    // The grace, then the latched cleanup (bounded by cleanup_timeout): the command
    // holds on until it is cut at the end of the cleanup.
    assert_eq!(elapsed, Duration::from_secs(13));
}

#[tokio::test(start_paused = true)]
async fn a_default_stop_cuts_at_the_grace_and_stops_waiting_at_the_cleanup_bound() {
    let (outcome, elapsed) = stop_with_one_command(false, true, true).await;
    assert_eq!(outcome, RunOutcome::Clean);
    assert_eq!(elapsed, Duration::from_secs(10), "the cut command ends at once");

    let (outcome, elapsed) = stop_with_one_command(false, true, false).await;
    assert_eq!(outcome, RunOutcome::Clean);
    assert_eq!(
        elapsed,
        Duration::from_secs(13),
        "a command that ignores the cut is hard-stopped after the cleanup time"
    );
}

#[test]
fn a_task_that_dies_latches_internal_error_in_strict_mode_and_makes_default_mode_not_ready() {
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(true, &[]));
    let strict = Fence::new(true, 1);
    let health = Arc::new(Health::default());
    task_failure_hook(&strict, &health, &metrics)(TaskKind::Admitter, "the admission line closed");
    assert_eq!(strict.fatal().unwrap().category, FatalCategory::InternalError);
    assert_eq!(health.task_failure(), Some(("admitter", "the admission line closed")));

    let default = Fence::new(false, 4);
    let health = Arc::new(Health::default());
    let hook = task_failure_hook(&default, &health, &metrics);
    hook(TaskKind::Notifier, "panicked");
    hook(TaskKind::Poller, "panicked");
    assert!(default.fatal().is_none(), "default mode never latches");
    assert_eq!(
        health.task_failure(),
        Some(("notifier", "panicked")),
        "the first failure is kept"
    );
}

#[test]
fn a_control_client_error_keeps_its_source_its_text_and_its_kind() {
    use std::error::Error as _;
    let e = GatewayError::ControlClient(BuildError::Url);
    assert_eq!(
        e.to_string(),
        "cannot build the control-plane client: the response URL built from control_plane.base_url, url_path and tunnel_id does not parse"
    );
    assert_eq!(e.kind(), "control_client");
    assert!(e.source().unwrap().downcast_ref::<BuildError>().is_some());
}
