//! Children die with the gateway: each stdio child runs under its guard
//! (`tunnelgate __stdio-guard`, the leader of the child's process group), so a gateway
//! SIGKILLed with a tool call in flight leaves neither the MCP server nor what it started
//! behind, in strict and in default mode. Through the guard, a program that cannot be
//! started is still `not_sent`, the child's own exit status is what the gateway logs, and
//! a graceful stop leaves nothing behind. (Restarts through the guard:
//! `gateway_stdio::a_child_that_dies_after_the_write_is_abandoned_then_restarted_with_a_new_generation`;
//! the graceful stop's exit code: `gateway_stdio::server_everything_over_stdio_initialize_list_echo_and_progress`.)
//!
//! The MCP server is a Python SDK server written to the rig's folder: its tool
//! `spawn_and_wait` starts a grandchild (`sleep 1000`, in the server's process group),
//! writes both pids to a file and then never answers; its tool `end` exits with a code or
//! a signal. It outlives the end of its stdin, so only the guard's group kill can end it
//! when the gateway dies.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::time::Instant;
use tunnelgate_sim::NewCommand;

use crate::harness::{final_json, python, wait_for, wait_until, which, Gateway, Rig, RigOptions};

const SERVER: &str = r#"
import os, subprocess, sys, time
import anyio
from mcp.server.mcpserver import MCPServer

pidfile, sleep = sys.argv[1], sys.argv[2]
server = MCPServer(name="guard-probe", version="1.0.0", log_level="WARNING")

@server.tool()
async def spawn_and_wait() -> str:
    grandchild = subprocess.Popen([sleep, "1000"])
    with open(pidfile + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {grandchild.pid}\n")
    os.replace(pidfile + ".tmp", pidfile)
    await anyio.sleep(1000)
    return "never"

@server.tool()
def end(code: int, signal_number: int) -> str:
    if signal_number:
        os.kill(os.getpid(), signal_number)
    os._exit(code)

# Like many servers with work of their own, it outlives the end of its stdin and a broken
# stdout: only a signal ends it (the gateway closing the pipes, or dying, is not enough).
try:
    server.run("stdio")
finally:
    time.sleep(1000)
"#;

const EXIT: Duration = Duration::from_secs(20);
/// The requirement: nothing of the child is left a second after the gateway died.
const GONE_WITHIN: Duration = Duration::from_secs(1);

/// The probe server's pids and its guard's, as `/proc` shows them mid-call.
struct Family {
    guard: i32,
    server: i32,
    grandchild: i32,
}

fn pidfile(rig: &Rig) -> PathBuf {
    rig.dir.path().join("pids")
}

/// The rig's configuration with channel `main` running the probe server over stdio.
fn probe_config(rig: &Rig, o: &RigOptions<'_>) -> String {
    let script = rig.dir.path().join("guard_probe.py");
    std::fs::write(&script, SERVER).unwrap();
    let sleep = which("sleep").expect("`sleep` on PATH");
    with_command(
        rig,
        &[
            python().display().to_string(),
            script.display().to_string(),
            pidfile(rig).display().to_string(),
            sleep.display().to_string(),
        ],
        o,
    )
}

fn with_command(rig: &Rig, argv: &[String], o: &RigOptions<'_>) -> String {
    let command = serde_json::to_string(argv).unwrap();
    rig.config(o).replace(
        &format!("url = \"{}\"", rig.stub.url()),
        &format!("command = {command}"),
    )
}

fn call(id: u64, tool: &str, arguments: Value) -> NewCommand {
    NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments}}),
    )
}

/// `initialize` and `notifications/initialized`, each answered before the next is sent.
async fn initialize(rig: &Rig) {
    let init = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}),
    ));
    let rec = rig.wait("initialize answered", |r| r.is_completed(&init)).await;
    assert!(
        final_json(&rec, &init)["resp_json"]["result"]["serverInfo"]["name"].is_string(),
        "{:?}",
        final_json(&rec, &init)
    );
    let note = rig.sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    ));
    rig.wait("initialized acknowledged", |r| r.is_completed(&note)).await;
}

/// `(state, ppid, pgrp)` from `/proc/PID/stat`; `None` once the process is gone.
fn stat(pid: i32) -> Option<(char, i32, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name in parentheses may hold spaces: the fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Running, as opposed to gone or dead and not yet reaped (a zombie).
fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(state, _, _)| !matches!(state, 'Z' | 'X' | 'x'))
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Calls `spawn_and_wait` and returns the family once the tool has written its pids;
/// checks that the guard leads the group of the server and its grandchild.
async fn call_in_flight(rig: &Rig, gw: &Gateway) -> (String, Family) {
    let id = rig.sim.enqueue(call(2, "spawn_and_wait", json!({})));
    let path = pidfile(rig);
    let (server, grandchild) = wait_for("the tool's pid file", Duration::from_secs(20), || {
        let read = read_pids(&path);
        async move { read }
    })
    .await;
    let (_, guard, server_group) = stat(server).expect("the server runs");
    let (_, _, grandchild_group) = stat(grandchild).expect("the grandchild runs");
    assert_eq!(
        (server_group, grandchild_group),
        (guard, guard),
        "the guard leads the child's group"
    );
    assert!(
        cmdline(guard).contains("__stdio-guard --parent"),
        "the server's parent is its guard: {}",
        cmdline(guard)
    );
    assert_eq!(stat(guard).map(|(_, ppid, _)| ppid), Some(gw.pid() as i32));
    // The guard blocks the signals it waits for (shown unblocked while it waits in
    // sigwait); the server it started blocks none.
    let blocked = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:").map(|m| m.trim().to_owned()))
    };
    assert_eq!(blocked(server).as_deref(), Some("0000000000000000"));
    assert!(!rig.sim.record().is_completed(&id), "the call is still in flight");
    (
        id,
        Family {
            guard,
            server,
            grandchild,
        },
    )
}

fn read_pids(path: &Path) -> Option<(i32, i32)> {
    let text = std::fs::read_to_string(path).ok()?;
    let (a, b) = text.trim().split_once(' ')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

async fn assert_all_gone(family: &Family, within: Duration, after: &str) {
    wait_until(
        &format!("the guard, the server and its grandchild gone {after}"),
        within,
        || {
            let gone = [family.guard, family.server, family.grandchild]
                .iter()
                .all(|pid| !alive(*pid));
            async move { gone }
        },
    )
    .await;
}

async fn a_sigkilled_gateway_takes_its_stdio_child_and_grandchild_with_it(o: &RigOptions<'_>) {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&probe_config(&rig, o)).await;
    initialize(&rig).await;
    let (_, family) = call_in_flight(&rig, &gw).await;
    let killed_at = Instant::now();
    kill(Pid::from_raw(gw.pid() as i32), Signal::SIGKILL).unwrap();
    assert_all_gone(&family, GONE_WITHIN, "within a second of the gateway's SIGKILL").await;
    assert!(killed_at.elapsed() <= GONE_WITHIN + Duration::from_millis(100));
    assert_eq!(gw.wait_exit(EXIT).await, Some(128 + 9));
}

#[tokio::test]
async fn a_sigkilled_strict_gateway_leaves_no_stdio_child_or_grandchild_behind() {
    a_sigkilled_gateway_takes_its_stdio_child_and_grandchild_with_it(&RigOptions::default()).await;
}

#[tokio::test]
async fn a_sigkilled_default_mode_gateway_leaves_no_stdio_child_or_grandchild_behind() {
    a_sigkilled_gateway_takes_its_stdio_child_and_grandchild_with_it(&RigOptions::default_mode()).await;
}

#[tokio::test]
async fn a_graceful_stop_through_the_guard_leaves_nothing_behind() {
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&probe_config(&rig, &RigOptions::default_mode()))
        .await;
    initialize(&rig).await;
    let (_, family) = call_in_flight(&rig, &gw).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    // The gateway waited for its child before exiting: nothing is left now.
    assert_all_gone(&family, Duration::from_millis(100), "when the gateway exited").await;
}

/// The `status` field of the gateway's last "stdio child exited" log line.
fn exit_logged(gw: &Gateway) -> Option<String> {
    gw.stderr()
        .lines()
        .filter(|l| l.contains("stdio child exited"))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["fields"]["status"].as_str().map(str::to_owned))
        .next_back()
}

#[tokio::test]
async fn the_childs_own_exit_code_and_signal_reach_the_gateway_through_the_guard() {
    let rig = Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&probe_config(&rig, &RigOptions::default_mode()))
        .await;
    for (n, (code, signal, logged)) in [(3, 0, "exit status: 3"), (0, 15, "signal: 15 (SIGTERM)")]
        .into_iter()
        .enumerate()
    {
        initialize(&rig).await;
        let id = rig.sim.enqueue(call(
            10 + n as u64,
            "end",
            json!({"code": code, "signal_number": signal}),
        ));
        let rec = rig.wait("the ending call answered", |r| r.is_completed(&id)).await;
        assert_eq!(
            final_json(&rec, &id)["resp_json"]["error"]["data"]["tunnel_failure"]["source"],
            "transport_closed"
        );
        wait_until("the child's exit logged", EXIT, || {
            let seen = exit_logged(&gw).as_deref() == Some(logged);
            async move { seen }
        })
        .await;
    }
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_program_that_cannot_be_started_is_still_not_sent_through_the_guard() {
    let rig = Rig::start("").await;
    let missing = rig.dir.path().join("no-such-program").display().to_string();
    let config = with_command(&rig, &[missing], &RigOptions::default());
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.sim.enqueue(call(1, "echo", json!({})));
    let rec = rig.wait("the call answered", |r| r.is_completed(&id)).await;
    assert_eq!(
        final_json(&rec, &id)["resp_json"]["error"]["message"],
        "not delivered to the MCP server; safe to retry"
    );
    let logs = gw.stderr();
    assert!(
        logs.contains("stdio child could not be started") && logs.contains("No such file or directory"),
        "{logs}"
    );
    assert!(!logs.contains("stdio child started"), "{logs}");
    let status = rig.status().await;
    assert_eq!(status["downstream"][0]["generation"], 0, "{status}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}
