//! `tunnelgate status --require-ready` through the real binary, one test per exit: `0`
//! ready, `3` not ready (no successful poll; a stdio channel down) with `/readyz`'s
//! reason as one line on stderr, the latch's own code when latched, `1` when nothing
//! listens. Stdout always carries the `/status` document, as without the flag.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{free_port, wait_until, CliRun, Gateway, Rig, RigOptions, KEY};

const T: Duration = Duration::from_secs(30);

async fn require_ready(rig: &Rig) -> CliRun {
    let url = format!("http://127.0.0.1:{}", rig.ops_port);
    Gateway::cli(&["status", "--url", &url, "--require-ready"], None, &[], T).await
}

fn document(run: &CliRun) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("stdout is not the /status JSON ({e}): {run:?}"))
}

/// Asserts that `run` exited 3 with one line on stderr, `/readyz`'s reason, which starts
/// with `says`.
fn assert_not_ready(run: &CliRun, says: &str) {
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stderr.starts_with(&format!("tunnelgate: {says}")),
        "{says:?} not said: {run:?}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "one line: {run:?}");
    assert!(run.stderr.ends_with('\n'), "{run:?}");
    assert_eq!(document(run)["ready"], false, "{run:?}");
}

#[tokio::test]
async fn require_ready_exits_zero_for_a_ready_gateway_and_says_nothing_on_stderr() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    wait_until("ready", T, || async { rig.readyz().await.0 == 200 }).await;
    let run = require_ready(&rig).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stderr, "", "{run:?}");
    let doc = document(&run);
    assert_eq!(doc["ready"], true, "{doc}");
    assert_eq!(doc["state"], "ready", "{doc}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn require_ready_exits_3_with_the_reason_before_any_successful_poll() {
    let rig = Rig::start("").await;
    // The simulator refuses this key: the gateway never polls successfully.
    let config = rig.config(&RigOptions::default_mode()).replace(KEY, "refused-key");
    let mut gw = rig.spawn_gateway(&config).await;
    rig.wait("a refused poll", |r| r.polls.iter().any(|p| p.status == Some(401)))
        .await;
    let run = require_ready(&rig).await;
    assert_not_ready(&run, "not ready: no successful poll of the control plane yet");
    let (status, reason) = rig.readyz().await;
    assert_eq!((status, run.stderr.clone()), (503, format!("tunnelgate: {reason}")));
    assert_eq!(document(&run)["state"], "starting", "{run:?}");
    // Without the flag the same gateway exits 0, as before.
    let url = format!("http://127.0.0.1:{}", rig.ops_port);
    let plain = Gateway::cli(&["status", "--url", &url], None, &[], T).await;
    assert_eq!(plain.code, 0, "{plain:?}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn require_ready_exits_3_naming_a_stdio_channel_that_is_down() {
    let rig = Rig::start("").await;
    // A stdio server that exits at once: the channel stays down between restarts.
    let extra = "[mcp.channels.broken]\ncommand = [\"/bin/sh\", \"-c\", \"exit 3\"]\n";
    let config = rig.config(&RigOptions {
        strict: false,
        extra,
        ..Default::default()
    });
    let mut gw = rig.spawn_gateway(&config).await;
    wait_until("polling works and only the channel keeps it not ready", T, || async {
        let (status, reason) = rig.readyz().await;
        status == 503 && reason.contains("channel broken")
    })
    .await;
    let run = require_ready(&rig).await;
    // `down`, or `starting` while a restarted child is being initialized.
    assert_not_ready(&run, "not ready: downstream channel broken (stdio) is ");
    assert_eq!(document(&run)["state"], "degraded", "{run:?}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn require_ready_exits_with_the_latchs_code_for_a_latched_gateway() {
    let rig = Rig::start("[[rule]]\nmatch = { tool = \"echo\", resp_type = \"terminal\" }\nstatus = 404\n").await;
    let mut first = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    rig.enqueue_call("echo", serde_json::json!({"message": "latch"}));
    assert_eq!(first.wait_exit(T).await, Some(82), "{}", first.stderr());
    // Held on the persisted latch: it serves the ops listener, latched (89).
    let hold = rig
        .config(&RigOptions::default())
        .replace("[strict]\n", "[strict]\nlatched_start = \"hold\"\n");
    let mut held = rig.spawn_gateway(&hold).await;
    let run = require_ready(&rig).await;
    assert_eq!(run.code, 89, "{run:?}");
    let (status, reason) = rig.readyz().await;
    assert_eq!(status, 503, "{reason}");
    assert_eq!(run.stderr, format!("tunnelgate: {}\n", reason.trim()), "{run:?}");
    assert!(
        run.stderr.contains("fatal latch set (latched_previously)"),
        "{}",
        run.stderr
    );
    let doc = document(&run);
    assert_eq!(doc["fatal"]["exit_code"], 89, "{doc}");
    assert_eq!(doc["state"], "fatal", "{doc}");
    held.sigterm();
    assert_eq!(held.wait_exit(T).await, Some(89), "{}", held.stderr());
}

#[tokio::test]
async fn require_ready_exits_1_when_no_gateway_answers() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let run = Gateway::cli(&["status", "--url", &url, "--require-ready"], None, &[], T).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        run.stderr.trim(),
        format!("tunnelgate: no gateway is listening at {url}/status")
    );
    assert_eq!(run.stdout, "", "{run:?}");
}
