//! A flood of half-open connections against the ops port cannot take descriptors from
//! the command path: the gateway runs with its soft and hard `RLIMIT_NOFILE` both at
//! 1024 (so raising the soft limit cannot help), the test holds 1,100 connections to the
//! ops port open (half of them with a partial request head, half silent), and a strict
//! gateway keeps answering commands, each acknowledged, with nothing latched; `/livez`
//! answers. The descriptors the flood took are read from `/proc` and bounded by the
//! listener's connection limit.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::harness::{http_answers, raise_nofile, repo_root, wait_until, which, ChildGuard, Gateway, Rig, RigOptions};

/// The gateway's soft and hard descriptor limit.
const LIMIT: u32 = 1024;
/// Connections the test holds open against the ops port: more than the limit.
const FLOOD: usize = 1_100;
/// Strict commands sent while the flood is held.
const CALLS: usize = 20;
/// The ops listener's connection limit, as docs/deploying.md ("Descriptor budget") states
/// it: "at most N connections at a time" (a unit test of `ops::listener` holds the guide
/// to the code's `MAX_CONNECTIONS`).
fn max_connections() -> usize {
    let guide = std::fs::read_to_string(repo_root().join("docs/deploying.md")).unwrap();
    let words: Vec<&str> = guide.split_whitespace().collect();
    words
        .windows(5)
        .find(|w| w[0] == "most" && w[2..] == ["connections", "at", "a"])
        .and_then(|w| w[1].parse().ok())
        .expect("docs/deploying.md says \"at most N connections at a time\"")
}

/// Slack over the listener's own bound (`1 + max_connections() + 1`) for the command
/// path's own descriptors coming and going between two readings (a pooled connection
/// replaced, a poll in flight).
const SLACK: usize = 8;

/// Starts `tunnelgate run --config CONFIG` with both descriptor limits at [`LIMIT`]:
/// through `prlimit` when installed, else through `sh -c 'ulimit -n ...; exec ...'`.
fn spawn_limited(config: &Path) -> ChildGuard {
    let bin = env!("CARGO_BIN_EXE_tunnelgate");
    let mut cmd = if let Some(prlimit) = which("prlimit") {
        let mut cmd = Command::new(prlimit);
        cmd.arg(format!("--nofile={LIMIT}:{LIMIT}")).arg("--").arg(bin);
        cmd
    } else {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "ulimit -Hn {LIMIT} && ulimit -Sn {LIMIT} && exec \"$0\" \"$@\""
            ))
            .arg(bin);
        cmd
    };
    cmd.arg("run").arg("--config").arg(config);
    for var in [
        "RUST_LOG",
        "TUNNELGATE_LOG_LEVEL",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    ChildGuard::spawn("tunnelgate", cmd)
}

/// The process's open descriptors, counted in `/proc/PID/fd`.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// `Max open files` of `/proc/PID/limits`: (soft, hard).
fn nofile_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("read /proc limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut fields = line["Max open files".len()..].split_whitespace();
    (fields.next().unwrap().to_owned(), fields.next().unwrap().to_owned())
}

/// Opens [`FLOOD`] connections to `addr`, each bounded in time; every second one sends
/// a request head that never ends. Returns the ones that connected (held by the caller).
async fn flood(addr: &str) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(FLOOD);
    for i in 0..FLOOD {
        let Ok(Ok(mut conn)) = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await else {
            continue;
        };
        if i % 2 == 0 {
            // A write to a connection the gateway already closed may fail: it is still held.
            let _ = conn.write_all(b"GET /livez HTTP/1.1\r\nHost: flood\r\n").await;
        }
        held.push(conn);
    }
    held
}

#[tokio::test]
async fn a_half_open_flood_of_the_ops_port_at_a_1024_descriptor_limit_leaves_strict_commands_flowing() {
    // This process holds the flood: its own soft limit goes to its hard one.
    raise_nofile().expect("raise the test's limit");
    let rig = Rig::start("").await;
    let config = rig.dir.path().join("gateway.toml");
    std::fs::write(&config, rig.config(&RigOptions::default())).unwrap();
    let mut gw = spawn_limited(&config);
    let ops = format!("127.0.0.1:{}", rig.ops_port);
    let livez = format!("http://{ops}/livez");
    gw.wait_http_ready(&livez, Duration::from_secs(20)).await;
    let pid = gw.pid();
    assert_eq!(
        nofile_limits(pid),
        (LIMIT.to_string(), LIMIT.to_string()),
        "both limits at {LIMIT}"
    );
    let warm = rig.enqueue_call("echo", json!({"message": "before the flood"}));
    rig.wait("the first call completed", |r| r.is_completed(&warm)).await;
    let before = open_descriptors(pid);

    let held = flood(&ops).await;
    assert!(
        held.len() >= FLOOD,
        "only {} of {FLOOD} connections were made",
        held.len()
    );
    let during = open_descriptors(pid);
    let bound = before + 1 + max_connections() + SLACK;
    eprintln!(
        "ops flood: {} connections held; gateway descriptors {before} before, {during} during (bound {bound}, limit {LIMIT})",
        held.len()
    );
    assert!(during <= bound, "the flood took {during} descriptors, bound {bound}");

    let ids: Vec<String> = (0..CALLS)
        .map(|i| rig.enqueue_call("echo", json!({"message": format!("during the flood {i}")})))
        .collect();
    let rec = rig
        .wait("every call during the flood completed", |r| {
            ids.iter().all(|id| r.is_completed(id))
        })
        .await;
    for id in &ids {
        let finals = rec.responses_for(id).filter(|r| r.completed).count();
        assert_eq!(finals, 1, "{id} acknowledged once");
    }
    wait_until("/livez answers during the flood", Duration::from_secs(10), || {
        http_answers(&livez)
    })
    .await;
    let peak = open_descriptors(pid);
    assert!(peak <= bound, "after the calls, {peak} descriptors, bound {bound}");

    let metrics = rig.metrics().await;
    assert!(metrics.contains("tunnelgate_fatal_latched 0"), "{metrics}");
    assert!(
        metrics.contains(&format!(
            "tunnelgate_deliveries_total{{kind=\"terminal\",outcome=\"acked\"}} {}",
            CALLS + 1
        )),
        "{metrics}"
    );
    assert!(!rig.latch_path().exists(), "no latch file");
    let stderr = gw.stderr();
    assert!(!stderr.contains("fatal latch"), "{stderr}");
    assert!(
        stderr.contains("descriptor limit (RLIMIT_NOFILE)"),
        "the limits are logged: {stderr}"
    );
    drop(held);
    gw.signal("TERM");
    let status = gw.wait_exit(Duration::from_secs(20)).await.expect("the gateway exits");
    assert_eq!(status.code(), Some(0), "{}", gw.stderr());
}

/// One past the gateway's descriptor reserve (`/dev/null` held above stdin, opened at the
/// start of `run`, so every number below it is in use): with the limit there, nothing
/// new can be opened, not even on the number of a socket closed later, until the reserve
/// is released.
fn past_the_reserve(pid: u32) -> u32 {
    let reserve: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc fd")
        .filter_map(|e| {
            let e = e.ok()?;
            let n: u32 = e.file_name().to_str()?.parse().ok()?;
            (n > 2 && std::fs::read_link(e.path()).ok()? == Path::new("/dev/null")).then_some(n)
        })
        .collect();
    assert!(reserve.len() >= 4, "the reserve is held: {reserve:?}");
    reserve.iter().max().unwrap() + 1
}

/// A strict gateway whose descriptors run out after dispatch: the first terminal POST is
/// held by the simulator, and meanwhile the gateway's limits are lowered to just past its
/// descriptor reserve (`prlimit --pid`: no new descriptor can be opened), so every
/// retry fails before a byte is written. It latches `local_exhaustion` (91) naming the
/// exhaustion, never the control plane's retryable statuses; the descriptors it holds in
/// reserve let it persist the latch, and a restart refuses to run.
#[tokio::test]
async fn a_terminal_post_that_finds_no_descriptor_after_dispatch_latches_naming_the_exhaustion() {
    let prlimit = which("prlimit").expect("prlimit (util-linux, a Debian essential package) is installed");
    let faults = "[[rule]]\nmatch = { tool = \"echo\", resp_type = \"terminal\" }\nattempts = [1]\naction = \"hold\"\n";
    let rig = Rig::start(faults).await;
    let mut gw = rig
        .spawn_gateway(&rig.config(&RigOptions {
            post_timeout: "1500ms",
            post_attempts: 3,
            ..Default::default()
        }))
        .await;
    let a = rig.enqueue_call("echo", json!({"message": "dispatched"}));
    rig.wait("the first attempt of the terminal POST", |r| {
        r.responses_for(&a).next().is_some()
    })
    .await;
    let limit = past_the_reserve(gw.pid());
    let lowered = Command::new(prlimit)
        .args(["--pid", &gw.pid().to_string(), &format!("--nofile={limit}:{limit}")])
        .status()
        .expect("prlimit runs");
    assert!(lowered.success(), "prlimit --pid failed");
    let code = gw.wait_exit(Duration::from_secs(20)).await;
    let stderr = gw.stderr();
    assert_eq!(code, Some(91), "stderr:\n{stderr}");
    assert!(stderr.contains("category=local_exhaustion exit_code=91"), "{stderr}");
    assert!(
        stderr.contains("response POST not sent: too many open files in the gateway"),
        "{stderr}"
    );
    assert!(stderr.contains("local_exhaustion"), "{stderr}");
    assert!(!stderr.contains("kept answering retryable statuses"), "{stderr}");
    assert_eq!(rig.stub.count("tools/call"), 1, "nothing reached the MCP server after");
    assert_eq!(
        rig.sim.record().responses_for(&a).count(),
        1,
        "no retry was written: each failed before sending"
    );
    let latch: serde_json::Value =
        serde_json::from_slice(&std::fs::read(rig.latch_path()).expect("the latch file was written")).unwrap();
    assert_eq!(latch["fatal"]["category"], "local_exhaustion");
    assert_eq!(latch["fatal"]["request_id"], a.as_str());
    assert!(!stderr.contains("cannot write latch file"), "{stderr}");
    let mut again = Gateway::run(&rig.config(&RigOptions::default()));
    let code = again.wait_exit(Duration::from_secs(20)).await;
    assert_eq!(code, Some(89), "a restart refuses to run: {}", again.stderr());
    assert_eq!(rig.stub.count("tools/call"), 1);
}
