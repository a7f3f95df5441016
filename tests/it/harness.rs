//! Black-box test harness: real processes on loopback, bounded waits, nothing left behind.
//!
//! Owns: locating the installed peers (`scripts/install-peers` puts them in `.peers/`),
//! spawning them (server-everything over HTTP or stdio, the Python SDK server and client)
//! and the real `tunnelgate` binary, capturing their output, and killing every process
//! group it started when its guard drops (also when a test panics; the captured stderr
//! is printed then, to explain the failure). A [`Rig`] pairs the in-process simulator
//! and MCP stub with the gateway configured against them: [`Rig::spawn_gateway`] is how
//! a test starts the gateway.
//!
//! The process guard ([`ChildGuard`]), free ports, the loopback HTTP client and the
//! bounded waits are the workspace's test-peers crate's (`crates/test-peers`, which also
//! starts etcd and makes the openssl PKI), shared with the gateway's unit tests; they are
//! re-exported here under the names the tests import.
//!
//! Waits poll a condition against a deadline on the tokio clock: real sockets use real
//! time, so no test that spawns processes may run with `start_paused`.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tunnelgate_sim::{FaultScript, McpStub, NewCommand, Record, SimConfig, Simulator};
use tunnelgate_test_peers::POLL_INTERVAL;
pub(crate) use tunnelgate_test_peers::{
    free_port, http_answers, http_client, tail, wait_for, wait_for_every, wait_until, ChildGuard,
};

use crate::contract::validate_response_body;

/// How long a peer may take to start answering HTTP (a cold Python start is ~1.5 s).
const PEER_READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on one `py_client.py` run, on top of its own `--timeout`.
const PY_CLIENT_TIMEOUT: Duration = Duration::from_secs(40);

// ---------------------------------------------------------------------------------------
// Locations
// ---------------------------------------------------------------------------------------

/// The repository root (this package's manifest directory).
pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where `scripts/install-peers` installed the peers: `$PEERS_DIR_FOR_TUNNELGATE_TESTS`, else
/// `<repo>/.peers`. Panics with the fix when they are missing.
pub(crate) fn peers_dir() -> PathBuf {
    let dir = std::env::var_os("PEERS_DIR_FOR_TUNNELGATE_TESTS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".peers"));
    assert!(
        dir.join("stamp").is_file(),
        "test peers are not installed in {}: run scripts/install-peers (or scripts/test)",
        dir.display()
    );
    dir
}

/// `dist/index.js` of `@modelcontextprotocol/server-everything`.
pub(crate) fn server_everything_entry() -> PathBuf {
    let entry = peers_dir().join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run scripts/install-peers",
        entry.display()
    );
    entry
}

/// The Python interpreter of the peers' venv (has the `mcp` SDK).
pub(crate) fn python() -> PathBuf {
    let python = peers_dir().join("venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/install-peers",
        python.display()
    );
    python
}

/// A script in `tests/peers/`.
pub(crate) fn peer_script(name: &str) -> PathBuf {
    repo_root().join("tests/peers").join(name)
}

/// Absolute path of `node` found on `PATH` (a spawned gateway may run children with a
/// minimal environment, so argv carries no bare program names).
pub(crate) fn node() -> PathBuf {
    which("node").expect("`node` (Node.js 20+) must be on PATH for the MCP peers")
}

/// First executable named `program` on `PATH`.
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

// ---------------------------------------------------------------------------------------
// Sockets
// ---------------------------------------------------------------------------------------

/// Whether `pid` or one of its descendants holds the socket listening on TCP `port`
/// (read from `/proc/net/tcp{,6}` and the processes' descriptors), so that a peer that
/// answers on a port is known to be the one a test spawned.
pub(crate) fn listens_on(pid: u32, port: u16) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    process_tree(pid).into_iter().any(|p| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{p}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|link| {
                    link.to_str()
                        .and_then(|l| l.strip_prefix("socket:["))
                        .map(str::to_owned)
                })
                .and_then(|rest| rest.strip_suffix(']').and_then(|n| n.parse::<u64>().ok()))
                .is_some_and(|inode| inodes.contains(&inode))
        })
    })
}

/// The inodes of the sockets in state LISTEN on local TCP `port`, IPv4 and IPv6.
fn listening_inodes(port: u16) -> Vec<u64> {
    let wanted = format!("{port:04X}");
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9)) else {
                continue;
            };
            if *state == "0A" && local.rsplit(':').next() == Some(wanted.as_str()) {
                inodes.extend(inode.parse::<u64>().ok());
            }
        }
    }
    inodes
}

/// `pid` and every process descended from it (a peer may be a wrapper around its server).
fn process_tree(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let child: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The command name may hold spaces and parentheses: the fields start after the last ')'.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((child, ppid))
        })
        .collect();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (as `tunnelgate run`
/// raises its own), for a test that holds many connections itself.
pub(crate) fn raise_nofile() -> nix::Result<()> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Secrets in what the gateway shows
// ---------------------------------------------------------------------------------------

/// Every kind of secret `text` shows, each once (empty when it is clean): each of
/// `canaries` as given or as JSON escapes it (as `a canary`), and the shapes that are
/// secrets whatever the configuration says, as docs/operations.md ("The scan") lists
/// them: a PEM `-----BEGIN ... PRIVATE KEY-----` block and a `Bearer`/`Basic` credential
/// (a token of at least 12 characters of a credential's alphabet, with a digit, so that
/// prose such as "basic authentication" is none). The support bundle's scan looks for
/// the same; this is the tests' own reading of the rule, so that a scan that misses a
/// secret does not miss it here too.
pub(crate) fn secrets_in(text: &str, canaries: &[impl AsRef<str>]) -> Vec<&'static str> {
    let mut found = Vec::new();
    let canary = canaries.iter().map(AsRef::as_ref).any(|c| {
        let escaped = serde_json::to_string(c).unwrap();
        text.contains(c) || text.contains(&escaped[1..escaped.len() - 1])
    });
    if canary {
        found.push("a canary");
    }
    let private_key = text.match_indices("-----BEGIN ").any(|(at, begin)| {
        let label = text[at + begin.len()..].split("-----").next().unwrap_or_default();
        label.len() <= 40 && !label.contains('\n') && label.ends_with("PRIVATE KEY")
    });
    if private_key {
        found.push("a PEM private key");
    }
    let lower = text.to_ascii_lowercase();
    let credential = ["bearer ", "basic "].iter().any(|scheme| {
        lower.match_indices(scheme).any(|(at, _)| {
            let word_start = at == 0 || !lower.as_bytes()[at - 1].is_ascii_alphanumeric();
            let token: String = text[at + scheme.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "-._~+/=".contains(*c))
                .collect();
            word_start && token.len() >= 12 && token.chars().any(|c| c.is_ascii_digit())
        })
    });
    if credential {
        found.push("an Authorization credential (Bearer or Basic)");
    }
    found
}

// ---------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------

/// Spawns a process that must serve HTTP on a fresh loopback port: `make(port)` builds
/// the command, `path` is appended to `http://127.0.0.1:PORT`. Retries with another port
/// when the child exits early (it lost the race for the port).
pub(crate) async fn spawn_http_peer(name: &str, path: &str, make: impl Fn(u16) -> Command) -> (ChildGuard, String) {
    const ATTEMPTS: usize = 3;
    for attempt in 1..=ATTEMPTS {
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}{path}");
        let mut guard = ChildGuard::spawn(name, make(port));
        let deadline = Instant::now() + PEER_READY_TIMEOUT;
        loop {
            if guard.try_wait().is_some() {
                break;
            }
            if http_answers(&url).await {
                if listens_on(guard.pid(), port) {
                    return (guard, url);
                }
                // Another process took the port between the pick and our child's bind: it
                // answered, and it is not ours. Never talk to it; try another port.
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not answer on {url} within {PEER_READY_TIMEOUT:?}; stderr:\n{}",
                tail(&guard.stderr(), 4000)
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        assert!(
            attempt < ATTEMPTS,
            "{name} did not serve on a port of its own (tried {ATTEMPTS} ports: it exited, or another process held the port); stderr:\n{}",
            tail(&guard.stderr(), 4000)
        );
    }
    unreachable!("the loop returns or panics")
}

// ---------------------------------------------------------------------------------------
// Peers
// ---------------------------------------------------------------------------------------

/// `@modelcontextprotocol/server-everything` over Streamable HTTP (`PORT=N node dist/index.js
/// streamableHttp`). Returns the guard and `http://127.0.0.1:PORT/mcp` once it answers.
/// Note: it listens on all interfaces; tests reach it through 127.0.0.1 only.
pub(crate) async fn spawn_server_everything_http() -> (ChildGuard, String) {
    let node = node();
    let entry = server_everything_entry();
    spawn_http_peer("server-everything", "/mcp", |port| {
        let mut cmd = Command::new(&node);
        cmd.arg(&entry).arg("streamableHttp").env("PORT", port.to_string());
        cmd
    })
    .await
}

/// argv for server-everything over stdio: `[<abs node>, <abs dist/index.js>, "stdio"]`.
pub(crate) fn server_everything_stdio_argv() -> Vec<String> {
    vec![
        node().display().to_string(),
        server_everything_entry().display().to_string(),
        "stdio".to_owned(),
    ]
}

/// How `tests/peers/py_server.py` answers requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PyMode {
    /// `application/json` answers, with a session id.
    Json,
    /// `text/event-stream` answers (the SDK default), with a session id.
    Sse,
    /// JSON answers, no session id.
    Stateless,
}

impl PyMode {
    pub(crate) fn as_arg(self) -> &'static str {
        match self {
            PyMode::Json => "json",
            PyMode::Sse => "sse",
            PyMode::Stateless => "stateless",
        }
    }
}

/// The Python SDK MCP server (`tests/peers/py_server.py`, tools `echo`, `add`, `progress`)
/// on 127.0.0.1. Returns the guard and `http://127.0.0.1:PORT/mcp` once it answers.
pub(crate) async fn spawn_py_server(mode: PyMode) -> (ChildGuard, String) {
    let python = python();
    let script = peer_script("py_server.py");
    spawn_http_peer(&format!("py_server({})", mode.as_arg()), "/mcp", |port| {
        let mut cmd = Command::new(&python);
        cmd.arg(&script)
            .args(["--port", &port.to_string(), "--mode", mode.as_arg()]);
        cmd.env("PYTHONUNBUFFERED", "1");
        cmd
    })
    .await
}

/// `tests/peers/py_oauth_server.py` in `mode` (`sdk`, `root` or `slow`) on 127.0.0.1.
/// Returns the guard and its MCP URL (`http://127.0.0.1:PORT/mcp`) once it answers; it
/// logs every request it receives to stderr as `seen METHOD PATH`.
pub(crate) async fn spawn_py_oauth_server(mode: &str) -> (ChildGuard, String) {
    spawn_py_oauth_server_with(mode, &[]).await
}

/// [`spawn_py_oauth_server`] with more arguments (`--resource-host`).
pub(crate) async fn spawn_py_oauth_server_with(mode: &str, extra: &[&str]) -> (ChildGuard, String) {
    let python = python();
    let script = peer_script("py_oauth_server.py");
    let (guard, ready) = spawn_http_peer(&format!("py_oauth_server({mode})"), "/ready", |port| {
        let mut cmd = Command::new(&python);
        cmd.arg(&script)
            .args(["--port", &port.to_string(), "--mode", mode])
            .args(extra);
        cmd.env("PYTHONUNBUFFERED", "1");
        cmd
    })
    .await;
    let url = ready.replace("/ready", "/mcp");
    (guard, url)
}

/// Runs `tests/peers/py_client.py --url URL ARGS...` (e.g. `["--list-tools", "--call",
/// "echo", r#"{"message":"hi"}"#]`) and returns its JSON line, or its stderr on failure.
pub(crate) async fn try_run_py_client(url: &str, args: &[&str]) -> Result<serde_json::Value, String> {
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(peer_script("py_client.py"))
        .args(["--url", url])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(PY_CLIENT_TIMEOUT, cmd.output())
        .await
        .map_err(|_| format!("py_client did not finish within {PY_CLIENT_TIMEOUT:?}"))?
        .map_err(|e| format!("spawn py_client: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("py_client exited with {}: {}", output.status, stderr.trim()));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .last()
        .ok_or_else(|| format!("py_client printed nothing; stderr: {}", stderr.trim()))?;
    serde_json::from_str(line).map_err(|e| format!("py_client printed non-JSON ({e}): {line}"))
}

/// [`try_run_py_client`] that panics with the client's stderr on failure.
pub(crate) async fn run_py_client(url: &str, args: &[&str]) -> serde_json::Value {
    try_run_py_client(url, args).await.unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------------------
// The gateway binary
// ---------------------------------------------------------------------------------------

/// Environment variables that would leak the developer's setup into a test gateway.
fn is_ambient_config_var(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "CONTROL_PLANE_API_KEY",
        "CONTROL_PLANE_TUNNEL_ID",
        "CONTROL_PLANE_BASE_URL",
        "MCP_SERVER_URL",
        "MCP_COMMAND",
        "CONTROL_PLANE_ORGANIZATION_ID",
        "CONTROL_PLANE_EXTRA_HEADERS",
        "MCP_EXTRA_HEADERS",
        "HEALTH_LISTEN_ADDR",
        "HEALTH_URL_FILE",
        "PID_FILE",
        "RUST_LOG",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ];
    // `TUNNEL_CLIENT_*`: the official client's profile selectors, read without --config.
    EXACT.contains(&name)
        || name.starts_with("TUNNELGATE_")
        || name.starts_with("OTEL_")
        || name.starts_with("TUNNEL_CLIENT_")
}

/// The real `tunnelgate` binary, spawned with a config written to a temp file.
/// Output is captured; the process group is killed on drop.
pub(crate) struct Gateway {
    process: ChildGuard,
    /// The temp config file: held so it exists while the gateway runs, deleted on drop.
    _config: Option<tempfile::TempPath>,
}

/// What a one-shot `tunnelgate` command printed and how it ended.
#[derive(Debug)]
pub(crate) struct CliRun {
    /// Exit code; `128 + N` when killed by signal N.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Gateway {
    /// The gateway's process id (to read its `/proc` figures).
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// `tunnelgate run --config <tempfile holding config_toml>`, not waited on: for a
    /// gateway against a rig, [`Rig::spawn_gateway`].
    pub(crate) fn run(config_toml: &str) -> Gateway {
        Gateway::spawn(&["run"], Some(config_toml), &[])
    }

    /// `tunnelgate ARGS... [--config <tempfile>]` with `envs` set on top of the test's
    /// environment, minus ambient `TUNNELGATE_*`, `CONTROL_PLANE_*`, `OTEL_*`,
    /// `TUNNEL_CLIENT_*`, `RUST_LOG` and proxy variables.
    pub(crate) fn spawn(args: &[&str], config_toml: Option<&str>, envs: &[(&str, &str)]) -> Gateway {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tunnelgate"));
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(is_ambient_config_var) {
                cmd.env_remove(&name);
            }
        }
        cmd.envs(envs.iter().copied());
        Gateway::spawn_command(cmd, args, config_toml)
    }

    /// `cmd` (the binary, its environment set) with `args` and `--config <tempfile>`.
    fn spawn_command(mut cmd: Command, args: &[&str], config_toml: Option<&str>) -> Gateway {
        cmd.args(args);
        let config = config_toml.map(|toml| {
            let mut file = tempfile::Builder::new()
                .prefix("tunnelgate-test-")
                .suffix(".toml")
                .tempfile()
                .expect("create temp config");
            std::io::Write::write_all(&mut file, toml.as_bytes()).expect("write temp config");
            let path = file.into_temp_path();
            cmd.arg("--config").arg(&path);
            path
        });
        Gateway {
            process: ChildGuard::spawn("tunnelgate", cmd),
            _config: config,
        }
    }

    /// Runs a one-shot command (`check`, `latch show`, ...) to completion within `timeout`.
    pub(crate) async fn cli(
        args: &[&str],
        config_toml: Option<&str>,
        envs: &[(&str, &str)],
        timeout: Duration,
    ) -> CliRun {
        Gateway::spawn(args, config_toml, envs).finished(args, timeout).await
    }

    /// Like [`Gateway::cli`] in an empty environment (`env_clear`, not even `PATH`): an
    /// operator's shell that has none of the configuration's variables.
    pub(crate) async fn cli_in_empty_env(args: &[&str], config_toml: &str, timeout: Duration) -> CliRun {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tunnelgate"));
        cmd.env_clear();
        Gateway::spawn_command(cmd, args, Some(config_toml))
            .finished(args, timeout)
            .await
    }

    /// Waits for a one-shot command to end within `timeout`, and what it printed.
    async fn finished(mut self, args: &[&str], timeout: Duration) -> CliRun {
        let Some(code) = self.wait_exit(timeout).await else {
            panic!(
                "tunnelgate {args:?} still running after {timeout:?}; stderr:\n{}",
                self.stderr()
            );
        };
        CliRun {
            code,
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }

    pub(crate) fn stdout(&self) -> String {
        self.process.stdout()
    }

    pub(crate) fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// Waits up to `timeout` for exit. `Some(code)`, `128 + N` if killed by signal N;
    /// `None` if still running.
    pub(crate) async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let status = self.process.wait_exit(timeout).await?;
        Some(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
    }

    /// Whether the process has exited (never blocks).
    pub(crate) fn has_exited(&mut self) -> bool {
        self.process.try_wait().is_some()
    }

    /// `kill -TERM PID` (the gateway only, not its children).
    pub(crate) fn sigterm(&self) {
        self.process.signal("TERM");
    }

    /// `kill -<signal> PID` (the gateway only), e.g. `KILL`, `STOP`.
    pub(crate) fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// Waits until `url` (e.g. the ops listener's `/livez`) answers HTTP; panics early,
    /// with the stderr, if the gateway exits first.
    pub(crate) async fn wait_http_ready(&mut self, url: &str, timeout: Duration) {
        self.process.wait_http_ready(url, timeout).await
    }
}

// ---------------------------------------------------------------------------------------
// The rig: the in-process simulator and MCP stub, and the gateway configured against them
// ---------------------------------------------------------------------------------------

pub(crate) const KEY: &str = "test-key-canary-K3Y";
pub(crate) const TUNNEL: &str = "tunnel_test";

/// The simulator and MCP stub in this process, a temporary folder (the latch file lives
/// there) and the port the gateway's ops listener is given.
pub(crate) struct Rig {
    pub sim: Simulator,
    pub stub: McpStub,
    pub dir: tempfile::TempDir,
    pub ops_port: u16,
}

/// Options beyond the defaults every rig uses.
pub(crate) struct RigOptions<'a> {
    pub strict: bool,
    /// Extra TOML appended to the gateway's configuration.
    pub extra: &'a str,
    pub post_timeout: &'a str,
    pub post_attempts: u32,
}

impl RigOptions<'_> {
    /// The defaults with strict mode off: the gateway's default mode.
    pub(crate) fn default_mode() -> Self {
        Self {
            strict: false,
            ..Default::default()
        }
    }
}

impl Default for RigOptions<'_> {
    fn default() -> Self {
        Self {
            strict: true,
            extra: "",
            post_timeout: "700ms",
            post_attempts: 2,
        }
    }
}

impl Rig {
    pub(crate) async fn start(faults: &str) -> Rig {
        Self::start_holding(faults, Duration::from_millis(500)).await
    }

    /// [`Rig::start`] with the simulator holding an empty poll up to `max_poll_wait`.
    pub(crate) async fn start_holding(faults: &str, max_poll_wait: Duration) -> Rig {
        Self::start_tuned(faults, |config| config.max_poll_wait = max_poll_wait).await
    }

    /// [`Rig::start`] with `tune` applied to the simulator's configuration.
    pub(crate) async fn start_tuned(faults: &str, tune: impl FnOnce(&mut SimConfig)) -> Rig {
        let stub = McpStub::start(([127, 0, 0, 1], 0).into()).await.expect("stub starts");
        let mut config = SimConfig::new(TUNNEL, KEY);
        config.faults = FaultScript::from_toml_str(faults).expect("fault script parses");
        config.max_poll_wait = Duration::from_millis(500);
        tune(&mut config);
        config.ingress_timeout = Duration::from_secs(15);
        let sim = Simulator::start(config).await.expect("simulator starts");
        Rig {
            sim,
            stub,
            dir: tempfile::tempdir().expect("tempdir"),
            ops_port: free_port(),
        }
    }

    pub(crate) fn latch_path(&self) -> PathBuf {
        self.dir.path().join("latch.json")
    }

    /// The gateway configuration for this rig.
    pub(crate) fn config(&self, o: &RigOptions<'_>) -> String {
        format!(
            r#"
[control_plane]
base_url = "{base}"
tunnel_id = "{TUNNEL}"
api_key = "{KEY}"
poll_timeout = "1s"
post_timeout = "{post_timeout}"
post_attempts = {post_attempts}

[mcp]
max_concurrent = {max}

[mcp.channels.main]
url = "{stub}"

[strict]
enabled = {strict}
latch_file = "{latch}"
cleanup_timeout = "2s"
shutdown_grace = "1s"

[ops]
listen = "127.0.0.1:{ops}"

[telemetry]
log_format = "json"
log_level = "info"
{extra}
"#,
            base = self.sim.base_url(),
            stub = self.stub.url(),
            post_timeout = o.post_timeout,
            post_attempts = o.post_attempts,
            max = if o.strict { 1 } else { 4 },
            strict = o.strict,
            latch = self.latch_path().display(),
            ops = self.ops_port,
            extra = o.extra,
        )
    }

    /// [`Rig::config`] with `main` pointing at `url` instead of the stub.
    pub(crate) fn config_to(&self, url: &str, o: &RigOptions<'_>) -> String {
        self.config(o).replace(&self.stub.url(), url)
    }

    /// The one way a test starts the gateway against this rig: `tunnelgate run` with
    /// `config` (usually [`Rig::config`], edited), returned once its ops listener answers.
    pub(crate) async fn spawn_gateway(&self, config: &str) -> Gateway {
        let mut gw = Gateway::run(config);
        gw.wait_http_ready(
            &format!("http://127.0.0.1:{}/livez", self.ops_port),
            Duration::from_secs(20),
        )
        .await;
        gw
    }

    pub(crate) fn enqueue_call(&self, tool: &str, args: Value) -> String {
        self.sim.enqueue(NewCommand::jsonrpc(json!({
            "jsonrpc": "2.0", "id": format!("rpc-{tool}"), "method": "tools/call",
            "params": {"name": tool, "arguments": args}
        })))
    }

    pub(crate) async fn wait(&self, what: &str, pred: impl Fn(&Record) -> bool) -> Record {
        self.sim
            .wait_for(what, Duration::from_secs(20), pred)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until the MCP stub has received `n` `tools/call` requests.
    pub(crate) async fn wait_stub_calls(&self, n: usize) {
        wait_until("the MCP stub's tools/call count", Duration::from_secs(20), || async {
            self.stub.count("tools/call") >= n
        })
        .await;
    }

    /// The gateway's Prometheus text.
    pub(crate) async fn metrics(&self) -> String {
        http_client()
            .get(format!("http://127.0.0.1:{}/metrics", self.ops_port))
            .send()
            .await
            .expect("metrics answer")
            .text()
            .await
            .expect("metrics text")
    }

    /// `/readyz`'s status and body.
    pub(crate) async fn readyz(&self) -> (u16, String) {
        let r = http_client()
            .get(format!("http://127.0.0.1:{}/readyz", self.ops_port))
            .send()
            .await
            .expect("readyz answers");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    pub(crate) async fn status(&self) -> Value {
        http_client()
            .get(format!("http://127.0.0.1:{}/status", self.ops_port))
            .send()
            .await
            .expect("status answers")
            .json()
            .await
            .expect("status is JSON")
    }

    /// Every response POST the simulator received satisfies both vendored contracts and
    /// names the wire contract's version.
    pub(crate) fn assert_all_bodies_valid(&self) {
        for r in self.sim.record().responses {
            validate_response_body(&r.body)
                .unwrap_or_else(|e| panic!("posted body violates the contract: {e}\n{:?}", r.body));
            assert_eq!(
                r.header("x-tunnel-client-wire-protocol-version"),
                Some(tunnelgate_protocol::WIRE_PROTOCOL_VERSION),
                "every response POST names the wire contract's version"
            );
        }
    }
}

/// The shard token the gateway sent with its first response POST for `request_id`.
pub(crate) fn shard_token(record: &Record, request_id: &str) -> String {
    record
        .responses_for(request_id)
        .find_map(|r| r.header("x-tunnel-shard-token"))
        .unwrap_or_else(|| panic!("no response POST with a shard token for {request_id}"))
        .to_owned()
}

/// The final response the simulator recorded for `request_id` (last POST with a final type).
pub(crate) fn final_json(record: &Record, request_id: &str) -> Value {
    record
        .responses_for(request_id)
        .filter(|r| r.resp_type.as_deref() != Some("jsonrpc_notify"))
        .last()
        .and_then(|r| r.json.clone())
        .unwrap_or_else(|| panic!("no final response for {request_id}"))
}

// ---------------------------------------------------------------------------------------
// An OAuth authorization server and a resource server that introspects its tokens
// ---------------------------------------------------------------------------------------

/// `node_modules` of the peers (oidc-provider, server-everything).
pub(crate) fn node_modules() -> PathBuf {
    let dir = peers_dir().join("node/node_modules");
    assert!(
        dir.join("oidc-provider/package.json").is_file(),
        "oidc-provider is missing from {}: run scripts/install-peers",
        dir.display()
    );
    dir
}

/// `tests/peers/oidc_provider.mjs`: the real `oidc-provider` on 127.0.0.1 over plain http,
/// with open dynamic client registration, client_credentials, introspection, revocation
/// and the static confidential client `rs_client_id`/`rs_client_secret`. Returns the guard
/// and its issuer (`http://127.0.0.1:PORT`, no trailing slash) once it logged that it
/// listens; nothing is requested of it first, so its `seen METHOD PATH` log holds only
/// what the test caused. Retries with another port when it loses the race for one.
pub(crate) async fn spawn_oidc_provider(rs_client_id: &str, rs_client_secret: &str) -> (ChildGuard, String) {
    const ATTEMPTS: usize = 3;
    let node = node();
    let script = peer_script("oidc_provider.mjs");
    let modules = node_modules();
    for attempt in 1..=ATTEMPTS {
        let port = free_port();
        let mut cmd = Command::new(&node);
        cmd.arg(&script)
            .arg("--port")
            .arg(port.to_string())
            .arg("--node-modules")
            .arg(&modules)
            .args(["--rs-client-id", rs_client_id, "--rs-client-secret", rs_client_secret]);
        let mut guard = ChildGuard::spawn("oidc-provider", cmd);
        let ready = format!("listening on 127.0.0.1:{port}");
        let deadline = Instant::now() + PEER_READY_TIMEOUT;
        loop {
            if guard.stderr().lines().any(|l| l == ready) {
                return (guard, format!("http://127.0.0.1:{port}"));
            }
            if guard.try_wait().is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "oidc-provider did not listen on port {port} within {PEER_READY_TIMEOUT:?}; stderr:\n{}",
                tail(&guard.stderr(), 4000)
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        assert!(
            attempt < ATTEMPTS,
            "oidc-provider exited before listening (tried {ATTEMPTS} ports); stderr:\n{}",
            tail(&guard.stderr(), 4000)
        );
    }
    unreachable!("the loop returns or panics")
}

/// `tests/peers/py_oauth_server.py --mode introspect`: an OAuth-protected MCP server (tool
/// `echo`, stateless, JSON answers) whose metadata names `issuer` and which accepts a
/// bearer token when `issuer`'s introspection endpoint calls it active (asked as
/// `rs_client_id`/`rs_client_secret`). Returns the guard and its MCP URL once it answers.
pub(crate) async fn spawn_py_introspecting_server(
    issuer: &str,
    rs_client_id: &str,
    rs_client_secret: &str,
) -> (ChildGuard, String) {
    let python = python();
    let script = peer_script("py_oauth_server.py");
    let (guard, ready) = spawn_http_peer("py_oauth_server(introspect)", "/ready", |port| {
        let mut cmd = Command::new(&python);
        cmd.arg(&script)
            .args(["--port", &port.to_string(), "--mode", "introspect"])
            .args(["--issuer", issuer, "--rs-client-id", rs_client_id])
            .args(["--rs-client-secret", rs_client_secret]);
        cmd.env("PYTHONUNBUFFERED", "1");
        cmd
    })
    .await;
    let url = ready.replace("/ready", "/mcp");
    (guard, url)
}

/// The requests a peer logged on its stderr as `seen METHOD PATH`, as `METHOD PATH`.
pub(crate) fn seen(peer: &ChildGuard) -> Vec<String> {
    peer.stderr()
        .lines()
        .filter_map(|l| l.strip_prefix("seen "))
        .map(str::to_owned)
        .collect()
}

/// [`seen`], once the peer has logged `n` requests (its stderr is read by a thread).
pub(crate) async fn seen_n(peer: &ChildGuard, n: usize) -> Vec<String> {
    wait_until("the peer's request log", Duration::from_secs(10), || async {
        seen(peer).len() >= n
    })
    .await;
    seen(peer)
}
