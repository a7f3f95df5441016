//! Signals, as the "Signals" table of docs/operations.md promises: a strict gateway in the middle of a
//! slow tool call (server-everything over stdio) survives SIGHUP, SIGUSR1, SIGUSR2 and
//! SIGPIPE, finishes the call, has it acknowledged and latches nothing; SIGHUP reloads the
//! log level and keeps the running configuration when the new one is invalid; a stdio
//! child starts with default dispositions.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;

use crate::harness::{
    final_json, node, server_everything_entry, server_everything_stdio_argv, wait_until, Gateway, Rig, RigOptions,
};

const EXIT: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(20);

/// `kill -SIGNAL PID`: the gateway alone, never its children.
fn send(gw: &Gateway, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), "--", &gw.pid().to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {}", gw.pid());
}

/// The rig's strict configuration with `main` running `argv` over stdio.
fn with_stdio(rig: &Rig, argv: &[String], o: &RigOptions<'_>) -> String {
    let command = serde_json::to_string(argv).unwrap();
    rig.config(o).replace(
        &format!("url = \"{}\"", rig.stub.url()),
        &format!("command = {command}"),
    )
}

/// The log lines (JSON) whose message is `message`.
fn lines_with(stderr: &str, message: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == message)
        .collect()
}

/// A bit of a `/proc/PID/status` signal mask line (`SigIgn:`, `SigCgt:`, `SigBlk:`).
fn mask(status: &str, line: &str) -> u64 {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .unwrap_or_else(|| panic!("no {line} in {status}"))
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

fn bit(signal: i32) -> u64 {
    1 << (signal - 1)
}

/// Initializes server-everything, then starts a 3 s call with progress; returns its
/// request id once the first progress notification was delivered (the call is running).
async fn slow_call_in_flight(rig: &Rig) -> String {
    let init = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}),
    ));
    let note = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    ));
    rig.wait("initialized", |r| r.is_completed(&init) && r.is_completed(&note))
        .await;
    let slow = rig.sim.enqueue(NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"trigger-long-running-operation","arguments":{"duration":3,"steps":3},"_meta":{"progressToken":"p"}}})));
    rig.wait("the call's first progress notification", |r| {
        r.responses_for(&slow)
            .any(|x| x.resp_type.as_deref() == Some("jsonrpc_notify"))
    })
    .await;
    assert!(!rig.sim.record().is_completed(&slow), "the call is still running");
    slow
}

/// Sends `signal` to a strict gateway in the middle of a slow call; the process survives,
/// the call is answered and acknowledged, the fence takes the next command, nothing
/// latches and a stop is clean. Returns the gateway's stderr.
async fn a_strict_gateway_survives(signal: &str, log_level: &str, check: impl FnOnce(&Gateway)) -> String {
    let rig = Rig::start("").await;
    let config = with_stdio(&rig, &server_everything_stdio_argv(), &RigOptions::default())
        .replace("log_level = \"info\"", &format!("log_level = \"{log_level}\""));
    let mut gw = rig.spawn_gateway(&config).await;
    let slow = slow_call_in_flight(&rig).await;
    send(&gw, signal);
    check(&gw);
    // The call's acknowledgement, failing at once, with the log, if the signal killed it.
    let deadline = tokio::time::Instant::now() + WAIT;
    while !rig.sim.record().is_completed(&slow) {
        assert!(!gw.has_exited(), "SIG{signal} ended the gateway: {}", gw.stderr());
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slow call was not acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rec = rig.sim.record();
    let answer = final_json(&rec, &slow);
    assert!(
        answer["resp_json"]["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Long running operation completed")),
        "{answer}"
    );
    assert!(!gw.has_exited(), "the gateway survived {signal}: {}", gw.stderr());
    let next = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call",
        "params":{"name":"echo","arguments":{"message":"after the signal"}}}),
    ));
    rig.wait("the next command", |r| r.is_completed(&next)).await;
    let status = rig.status().await;
    assert_eq!(status["fatal"], Value::Null, "{status}");
    assert_eq!(status["state"], "ready", "{status}");
    assert!(!rig.latch_path().exists(), "no latch file");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let stderr = gw.stderr();
    assert!(!stderr.contains("fatal latch"), "{stderr}");
    stderr
}

#[tokio::test]
async fn sighup_mid_call_reloads_and_the_strict_gateway_finishes_the_call() {
    let stderr = a_strict_gateway_survives("HUP", "info", |_| {}).await;
    let reloaded = lines_with(&stderr, "SIGHUP: configuration reloaded");
    assert_eq!(reloaded.len(), 1, "{stderr}");
    assert_eq!(reloaded[0]["fields"]["applied"], "", "nothing changed: {stderr}");
}

#[tokio::test]
async fn sigusr1_mid_call_dumps_the_status_with_the_fence_held_and_the_call_finishes() {
    let stderr = a_strict_gateway_survives("USR1", "info", |_| {}).await;
    let dumps = lines_with(&stderr, "status dump (SIGUSR1)");
    assert_eq!(dumps.len(), 1, "{stderr}");
    let dump = &dumps[0]["fields"];
    // Plain values and nested fields, never JSON inside a string.
    assert_eq!(dump["mode"], "strict", "{dump}");
    assert_eq!(dump["state"], "ready", "{dump}");
    assert_eq!(dump["ready"], true, "{dump}");
    assert_eq!(dump["fence.held"], true, "the call holds the fence: {dump}");
    assert_eq!(dump["fence.leg"], "downstream", "{dump}");
    assert_eq!(dump["fence.channel"], "main", "{dump}");
    let holder = dump["fence.request_id"].as_str().unwrap();
    assert!(!holder.is_empty() && !holder.starts_with('"'), "{dump}");
    assert!(dump["fence.held_seconds"].as_f64().unwrap() >= 0.0, "{dump}");
    assert_eq!(dump["control_plane.consecutive_poll_errors"], 0, "{dump}");
    assert!(dump["downstream"].as_str().unwrap().starts_with('['), "{dump}");
    let fields = dump.as_object().unwrap();
    for gone in ["fence", "fatal", "control_plane"] {
        assert!(!fields.contains_key(gone), "{gone} is nested fields now: {dump}");
    }
    assert!(
        !fields.keys().any(|k| k.starts_with("fatal.")),
        "no fatal latch, no fatal fields: {dump}"
    );
    for (name, value) in fields {
        let text = value.as_str().unwrap_or("");
        assert!(
            name == "downstream" || !(text.starts_with('{') || text.starts_with('"')),
            "{name} holds JSON: {dump}"
        );
    }
    assert_eq!(dump["in_flight"], 1, "{dump}");
    assert!(dump["received"].as_u64().unwrap() >= 3, "{dump}");
    assert!(
        !dumps[0].to_string().contains(crate::harness::KEY),
        "no secret in the dump"
    );
}

#[tokio::test]
async fn sigusr2_mid_call_is_logged_at_debug_and_changes_nothing() {
    let stderr = a_strict_gateway_survives("USR2", "info,tunnelgate=debug", |_| {}).await;
    let seen = lines_with(&stderr, "reserved signal received; it has no use yet");
    assert_eq!(seen.len(), 1, "{stderr}");
    assert_eq!(seen[0]["level"], "DEBUG");
    assert_eq!(seen[0]["fields"]["signal"], "SIGUSR2");
}

#[tokio::test]
async fn sigpipe_mid_call_is_ignored_and_stays_ignored() {
    a_strict_gateway_survives("PIPE", "info", |gw| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", gw.pid())).unwrap();
        assert_ne!(
            mask(&status, "SigIgn:") & bit(libc::SIGPIPE),
            0,
            "SIGPIPE ignored: {status}"
        );
        for handled in [
            libc::SIGHUP,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGALRM,
        ] {
            assert_ne!(
                mask(&status, "SigCgt:") & bit(handled),
                0,
                "signal {handled} caught: {status}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_stdio_child_starts_with_default_dispositions_and_no_blocked_signal() {
    let rig = Rig::start("").await;
    let seen = rig.dir.path().join("child-status");
    // The shell records what its child inherits (`cat` reads its own status), then becomes
    // the real server: node ignores SIGPIPE itself, so it cannot be asked.
    let script = format!(
        "/bin/cat /proc/self/status > '{}' && exec '{}' '{}' stdio",
        seen.display(),
        node().display(),
        server_everything_entry().display()
    );
    let argv = ["/bin/sh".to_owned(), "-c".to_owned(), script];
    let mut gw = rig
        .spawn_gateway(&with_stdio(&rig, &argv, &RigOptions::default()))
        .await;
    wait_until("the child's status recorded", WAIT, || async {
        std::fs::read_to_string(&seen).is_ok_and(|s| s.contains("SigBlk:"))
    })
    .await;
    let status = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(mask(&status, "SigBlk:"), 0, "{status}");
    let ignored = mask(&status, "SigIgn:");
    let ours = [
        libc::SIGPIPE,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGALRM,
        libc::SIGXFSZ,
    ];
    for signal in ours {
        assert_eq!(
            ignored & bit(signal),
            0,
            "signal {signal} ignored in the child: {status}"
        );
    }
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// Writes `toml` to `path` whole (a temp file renamed over it, as editors and config
/// management do).
fn rewrite(path: &Path, toml: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, toml).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A gateway run from `config`, written to a file of the rig's folder that the test edits.
async fn gateway_from_file(rig: &Rig, config: &str) -> (Gateway, std::path::PathBuf) {
    let path = rig.dir.path().join("config.toml");
    rewrite(&path, config);
    let mut gw = Gateway::spawn(&["run", "--config", path.to_str().unwrap()], None, &[]);
    gw.wait_http_ready(&format!("http://127.0.0.1:{}/livez", rig.ops_port), WAIT)
        .await;
    (gw, path)
}

#[tokio::test]
async fn sighup_applies_a_changed_log_level_and_names_the_keys_that_need_a_restart() {
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions::default());
    let (mut gw, path) = gateway_from_file(&rig, &config).await;
    // At info, each poll's debug line is filtered out.
    rig.wait("two polls", |r| r.polls.len() >= 2).await;
    let changed = config
        .replace("log_level = \"info\"", "log_level = \"debug\"")
        .replace("post_attempts = 2", "post_attempts = 3");
    rewrite(&path, &changed);
    send(&gw, "HUP");
    let polling = |stderr: &str| !lines_with(stderr, "polling for more commands").is_empty();
    wait_until("a debug line after the reload", WAIT, || async {
        polling(&gw.stderr())
    })
    .await;
    let stderr = gw.stderr();
    let (before, after) = stderr
        .split_once("SIGHUP: applying telemetry.log_level")
        .unwrap_or_else(|| panic!("no reload line: {stderr}"));
    assert!(
        !before.contains("\"level\":\"DEBUG\""),
        "nothing at debug before: {before}"
    );
    assert!(polling(after), "debug lines after: {after}");
    let reloaded = lines_with(&stderr, "SIGHUP: configuration reloaded");
    assert_eq!(reloaded[0]["fields"]["applied"], "telemetry.log_level", "{stderr}");
    assert_eq!(
        reloaded[0]["fields"]["restart_needed"], "control_plane.post_attempts",
        "{stderr}"
    );
    let restart = lines_with(
        &stderr,
        "SIGHUP: these changed keys take effect only after a restart; not applied",
    );
    assert_eq!(restart[0]["level"], "WARN", "{stderr}");
    let a = rig.enqueue_call("echo", json!({"message": "still serving"}));
    rig.wait("a command after the reload", |r| r.is_completed(&a)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn sighup_with_a_broken_configuration_keeps_the_running_one_and_names_the_key() {
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions::default());
    let (mut gw, path) = gateway_from_file(&rig, &config).await;
    rewrite(
        &path,
        &config.replace("log_level = \"info\"", "log_level = \"nonsense\""),
    );
    send(&gw, "HUP");
    let refused = "SIGHUP: the new configuration is invalid; the running one is kept";
    wait_until("the refused reload", WAIT, || async {
        !lines_with(&gw.stderr(), refused).is_empty()
    })
    .await;
    let line = lines_with(&gw.stderr(), refused).remove(0);
    assert_eq!(line["level"], "ERROR", "{line}");
    assert_eq!(line["fields"]["key"], "telemetry.log_level", "{line}");
    assert!(
        line["fields"]["error"].as_str().unwrap().contains("\"nonsense\""),
        "{line}"
    );
    // Not valid TOML at all: the same, naming the file.
    rewrite(&path, "[control_plane\n");
    send(&gw, "HUP");
    wait_until("the second refused reload", WAIT, || async {
        lines_with(&gw.stderr(), refused).len() == 2
    })
    .await;
    let line = lines_with(&gw.stderr(), refused).remove(1);
    assert_eq!(line["fields"]["key"], path.display().to_string(), "{line}");
    let a = rig.enqueue_call("echo", json!({"message": "still serving"}));
    rig.wait("a command after the refused reloads", |r| r.is_completed(&a))
        .await;
    assert!(
        lines_with(&gw.stderr(), "polling for more commands").is_empty(),
        "still at info"
    );
    assert!(!gw.has_exited());
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

/// Kills the process on drop (a test that panics leaves nothing running).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_strict_gateway_whose_stderr_reader_is_gone_keeps_serving_and_stops_cleanly() {
    // The real SIGPIPE: every log line is written to a pipe nobody reads any more (a log
    // collector restarted), and fails with EPIPE instead of ending the process.
    let rig = Rig::start("").await;
    let path = rig.dir.path().join("config.toml");
    rewrite(&path, &rig.config(&RigOptions::default()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tunnelgate"))
        .args(["run", "--config", path.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tunnelgate");
    drop(child.stderr.take());
    let mut gw = Killed(child);
    let livez = format!("http://127.0.0.1:{}/livez", rig.ops_port);
    wait_until("the ops listener", WAIT, || crate::harness::http_answers(&livez)).await;
    for n in 0..3 {
        let a = rig.enqueue_call("echo", json!({"message": format!("unlogged {n}")}));
        rig.wait("a command with every log line failing", |r| r.is_completed(&a))
            .await;
    }
    assert!(gw.0.try_wait().unwrap().is_none(), "still running");
    let pid = gw.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = tokio::time::Instant::now() + EXIT;
    let status = loop {
        if let Some(status) = gw.0.try_wait().unwrap() {
            break status;
        }
        assert!(tokio::time::Instant::now() < deadline, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(!rig.latch_path().exists());
}
