//! Egress proxies and unix sockets, against a real forward proxy (Debian's `tinyproxy`,
//! started here on loopback with a config and an access log of the test's own), a small
//! fault proxy of this file's own (no real proxy cuts on demand), network namespaces of
//! the test's own (the environment's proxies never apply to loopback targets), and the
//! Python SDK server on a unix domain socket.
//!
//! The proxy's log is the proof that a request went through it: tinyproxy logs each
//! request line it reads (`Request (file descriptor N): POST http://... HTTP/1.1`) and
//! each `CONNECT` it refuses.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{
    final_json, free_port, peer_script, python, wait_for, wait_until, ChildGuard, Gateway, PyMode, Rig, RigOptions,
};

const WAIT: Duration = Duration::from_secs(20);
const EXIT: Duration = Duration::from_secs(20);
const NOT_SENT: &str = "not delivered to the MCP server; safe to retry";
const EFFECT_UNKNOWN: &str = "effect unknown: the MCP server may have acted; check before retrying";
/// A proxy password no sink may ever show.
const PROXY_PASSWORD: &str = "Pr0xyCanary-9f3";
/// `gateway:<PROXY_PASSWORD>` in base64, as a `Proxy-Authorization: Basic` header carries it.
const PROXY_BASIC: &str = "Z2F0ZXdheTpQcjB4eUNhbmFyeS05ZjM=";

// ---------------------------------------------------------------------------------------
// tinyproxy
// ---------------------------------------------------------------------------------------

/// A tinyproxy of the test's own, in the foreground, on a loopback port (also used by
/// `profiles`).
pub(crate) struct Tinyproxy {
    port: u16,
    log: PathBuf,
    _process: ChildGuard,
    _dir: tempfile::TempDir,
}

#[derive(Default)]
pub(crate) struct TinyproxyOptions<'a> {
    /// Ports `CONNECT` may reach (none: every `CONNECT` to a test port is refused, 403).
    pub connect_ports: &'a [u16],
    /// `BasicAuth user password`: requests without them get `407`.
    pub basic_auth: Option<(&'a str, &'a str)>,
    /// `Timeout` (seconds of silence before tinyproxy closes a connection); 30 if unset.
    pub idle_timeout: Option<u32>,
}

impl Tinyproxy {
    pub(crate) async fn start(options: TinyproxyOptions<'_>) -> Tinyproxy {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = dir.path().join("access.log");
        let mut conf = format!(
            "Port {port}\nListen 127.0.0.1\nAllow 127.0.0.1\nLogFile \"{}\"\nLogLevel Info\nPidFile \"{}\"\nMaxClients 64\nTimeout {}\n",
            log.display(),
            dir.path().join("tinyproxy.pid").display(),
            options.idle_timeout.unwrap_or(30),
        );
        // Without any ConnectPort line tinyproxy would allow every port: name one no test uses.
        conf.push_str("ConnectPort 1\n");
        for p in options.connect_ports {
            conf.push_str(&format!("ConnectPort {p}\n"));
        }
        if let Some((user, password)) = options.basic_auth {
            conf.push_str(&format!("BasicAuth {user} {password}\n"));
        }
        let conf_path = dir.path().join("tinyproxy.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut cmd = Command::new("tinyproxy");
        cmd.arg("-d").arg("-c").arg(&conf_path);
        let process = ChildGuard::spawn("tinyproxy", cmd);
        let proxy = Tinyproxy {
            port,
            log,
            _process: process,
            _dir: dir,
        };
        wait_until("tinyproxy accepting connections", WAIT, || async {
            proxy.log_text().contains("Accepting connections") && TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
        proxy
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The request lines tinyproxy read, in order (`POST http://host:port/path HTTP/1.1`).
    pub(crate) fn requests(&self) -> Vec<String> {
        self.log_text()
            .lines()
            .filter_map(|l| l.split_once("): ").filter(|_| l.contains("Request (file descriptor")))
            .map(|(_, request)| request.to_owned())
            .collect()
    }

    async fn wait_request(&self, what: &str, needle: &str) {
        wait_until(what, WAIT, || async {
            self.requests().iter().any(|r| r.contains(needle))
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------
// A network namespace of the test's own
// ---------------------------------------------------------------------------------------

/// A network namespace joined to this one by a veth pair: `host_ip` on this side,
/// `inner_ip` inside. Deleted (with the pair) on drop, also when a test panics.
struct Netns {
    name: String,
    inner_ip: String,
}

static NETNS_SEQ: AtomicUsize = AtomicUsize::new(0);

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    fn create() -> Netns {
        let seq = NETNS_SEQ.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}{seq}", std::process::id() % 100_000);
        let name = format!("tgpx{tag}");
        let (outer, inner) = (format!("tgo{tag}"), format!("tgi{tag}"));
        // A /30 of 10.213.0.0/16 per namespace: unique within this run.
        let block = (std::process::id() as usize % 60) * 1024 + seq * 4;
        let (a, b) = (block / 256 % 256, block % 256);
        let host_ip = format!("10.213.{a}.{}", b + 1);
        let inner_ip = format!("10.213.{a}.{}", b + 2);
        ip(&["netns", "add", &name]);
        let ns = Netns {
            name: name.clone(),
            inner_ip: inner_ip.clone(),
        };
        ip(&["link", "add", &outer, "type", "veth", "peer", "name", &inner]);
        ip(&["link", "set", &inner, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &outer]);
        ip(&["link", "set", &outer, "up"]);
        ip(&["-n", &name, "addr", "add", &format!("{inner_ip}/30"), "dev", &inner]);
        ip(&["-n", &name, "link", "set", &inner, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ns
    }

    /// `program args...` run inside the namespace.
    fn command(&self, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair with it.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// The Python SDK server inside `ns`, on its address; returns its URL once it answers.
async fn py_server_in(ns: &Netns) -> (ChildGuard, String) {
    let port = free_port();
    let mut cmd = ns.command(&python());
    cmd.arg(peer_script("py_server.py"))
        .args([
            "--host",
            &ns.inner_ip,
            "--port",
            &port.to_string(),
            "--mode",
            PyMode::Stateless.as_arg(),
        ])
        .env("PYTHONUNBUFFERED", "1");
    let mut guard = ChildGuard::spawn("py_server(netns)", cmd);
    let url = format!("http://{}:{port}/mcp", ns.inner_ip);
    guard.wait_http_ready(&url, WAIT).await;
    (guard, url)
}

// ---------------------------------------------------------------------------------------
// A fault proxy: forwards one plain-HTTP request, then cuts the caller off
// ---------------------------------------------------------------------------------------

/// Forwards each request (absolute form, as a proxy receives it) to its origin, waits
/// for the origin's first response bytes, and closes the caller's connection without
/// relaying them: the origin saw the request, the caller gets no response.
async fn cutting_proxy() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let forwarded = Arc::new(AtomicUsize::new(0));
    let counter = forwarded.clone();
    tokio::spawn(async move {
        while let Ok((caller, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(WAIT, forward_then_cut(caller, &counter)).await;
            });
        }
    });
    (url, forwarded)
}

async fn forward_then_cut(mut caller: TcpStream, forwarded: &AtomicUsize) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = caller.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = caller.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let (request_line, rest) = head.split_once("\r\n").unwrap();
    let mut parts = request_line.split(' ');
    let (method, target) = (parts.next().unwrap(), parts.next().unwrap());
    let after_scheme = target
        .strip_prefix("http://")
        .expect("a forwarded request is in absolute form");
    let (authority, path) = after_scheme.split_at(after_scheme.find('/').unwrap_or(after_scheme.len()));
    let mut origin = TcpStream::connect(authority).await?;
    origin
        .write_all(format!("{method} {path} HTTP/1.1\r\n{rest}").as_bytes())
        .await?;
    origin.write_all(&buf[head_end..]).await?;
    forwarded.fetch_add(1, Ordering::SeqCst);
    let mut first = [0u8; 1];
    origin.read_exact(&mut first).await?;
    drop(caller); // cut: the origin has answered, the caller never hears it
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// `config` with `lines` added at the top of `[control_plane]` / `[mcp]`.
fn with_proxies(config: &str, control_plane: Option<&str>, mcp: Option<&str>) -> String {
    let mut config = config.to_owned();
    if let Some(value) = control_plane {
        config = config.replacen(
            "[control_plane]\n",
            &format!("[control_plane]\nproxy = \"{value}\"\n"),
            1,
        );
    }
    if let Some(value) = mcp {
        config = config.replacen("[mcp]\n", &format!("[mcp]\nproxy = \"{value}\"\n"), 1);
    }
    config
}

/// `tunnelgate run` with `envs`, returned once its ops listener answers.
async fn run_with_env(rig: &Rig, config: &str, envs: &[(&str, &str)]) -> Gateway {
    let mut gw = Gateway::spawn(&["run"], Some(config), envs);
    gw.wait_http_ready(&format!("http://127.0.0.1:{}/livez", rig.ops_port), WAIT)
        .await;
    gw
}

fn message(rig: &Rig, request_id: &str) -> serde_json::Value {
    final_json(&rig.sim.record(), request_id)["resp_json"]["error"]["message"].clone()
}

async fn answered_echo(rig: &Rig, text: &str) {
    let id = rig.enqueue_call("echo", json!({"message": text}));
    let rec = rig
        .wait(&format!("the answer to {id}"), |r| {
            r.responses_for(&id)
                .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
        })
        .await;
    let body = final_json(&rec, &id);
    assert_eq!(
        body["resp_json"]["result"]["content"][0]["text"],
        format!("Echo: {text}"),
        "{body}"
    );
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_proxy_that_closes_long_polls_teaches_the_gateway_a_wait_it_lets_through() {
    // tinyproxy closes a connection silent for 7 s; the gateway asks for 20 s polls.
    let proxy = Tinyproxy::start(TinyproxyOptions {
        idle_timeout: Some(7),
        ..TinyproxyOptions::default()
    })
    .await;
    let rig = Rig::start_holding("", Duration::from_secs(30)).await;
    let config = with_proxies(&rig.config(&RigOptions::default_mode()), Some(&proxy.url()), None)
        .replace("poll_timeout = \"1s\"", "poll_timeout = \"20s\"");
    let mut gw = rig.spawn_gateway(&config).await;
    wait_until(
        "the gateway learned a shorter wait",
        Duration::from_secs(30),
        || async { gw.stderr().contains("lowering future poll timeout") },
    )
    .await;
    // Cut after about 7 s of a 20 s poll: margin min(10 s, 3.5 s), learned max(3.5 s, 5 s).
    assert!(gw.stderr().contains("\"learned_wait_ms\":5000"), "{}", gw.stderr());
    let rec = rig
        .wait("a 5 s poll that the proxy let through", |r| {
            r.polls
                .iter()
                .any(|p| p.timeout_ms == Some(5000) && p.status == Some(204))
        })
        .await;
    assert!(
        rec.polls.iter().filter(|p| p.timeout_ms == Some(20_000)).count() >= 1,
        "the first long poll asked for 20 s"
    );
    // And the polls work: a command is served through the proxy.
    let id = rig.enqueue_call("echo", json!({"message": "after learning"}));
    rig.wait("the call answered", |r| r.is_completed(&id)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(WAIT).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn the_control_plane_and_an_http_mcp_server_are_reached_through_a_real_proxy() {
    let proxy = Tinyproxy::start(TinyproxyOptions::default()).await;
    let (_server, mcp_url) = crate::harness::spawn_py_server(PyMode::Stateless).await;
    let rig = Rig::start("").await;
    let config = rig.config_to(&mcp_url, &RigOptions::default_mode());
    // The official client's global variable: an explicit proxy for both scopes, loopback included.
    let gw = run_with_env(&rig, &config, &[("TUNNEL_CLIENT_HTTP_PROXY", &proxy.url())]).await;

    // Several calls in a row: none may fall on a connection the proxy is closing.
    for n in 0..8 {
        answered_echo(&rig, &format!("through tinyproxy {n}")).await;
    }
    let poll = format!("GET {}/v1/tunnels/tunnel_test/poll", rig.sim.base_url());
    proxy.wait_request("the poll in tinyproxy's log", &poll).await;
    proxy
        .wait_request("the MCP POST in tinyproxy's log", &format!("POST {mcp_url} HTTP/1.1"))
        .await;
    proxy
        .wait_request(
            "the response POST in tinyproxy's log",
            &format!("POST {}/v1/tunnels/tunnel_test/response", rig.sim.base_url()),
        )
        .await;
    assert!(
        !gw.stderr().contains("poll failed"),
        "no poll fell on a connection the proxy had closed: {}",
        gw.stderr()
    );
    drop(gw);
    rig.assert_all_bodies_valid();

    // "none" in the file overrides the variable: the MCP server is reached directly. (A
    // control plane of its own: the killed gateway's last poll may still be held open by
    // the proxy, and a command handed to it would never arrive.)
    let rig = Rig::start("").await;
    let before = proxy.requests().iter().filter(|r| r.contains(&mcp_url)).count();
    let config = with_proxies(
        &rig.config_to(&mcp_url, &RigOptions::default_mode()),
        None,
        Some("none"),
    );
    let _gw = run_with_env(&rig, &config, &[("TUNNEL_CLIENT_HTTP_PROXY", &proxy.url())]).await;
    answered_echo(&rig, "direct").await;
    let poll = format!("GET {}/v1/tunnels/tunnel_test/poll", rig.sim.base_url());
    proxy
        .wait_request("this gateway's polls through the proxy", &poll)
        .await;
    let after = proxy.requests().iter().filter(|r| r.contains(&mcp_url)).count();
    assert_eq!(
        after, before,
        "mcp.proxy = \"none\": no MCP request went through the proxy"
    );
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn environment_proxies_reach_a_server_in_a_namespace_and_no_proxy_and_none_bypass_them() {
    let proxy = Tinyproxy::start(TinyproxyOptions::default()).await;
    let ns = Netns::create();
    let (_server, mcp_url) = py_server_in(&ns).await;
    let rig = Rig::start("").await;
    let config = rig.config_to(&mcp_url, &RigOptions::default_mode());
    let proxy_url = proxy.url();
    let mcp_requests = || proxy.requests().iter().filter(|r| r.contains(&mcp_url)).count();

    // HTTP_PROXY: the server in the namespace is reached through the proxy ...
    let gw = run_with_env(&rig, &config, &[("HTTP_PROXY", &proxy_url)]).await;
    answered_echo(&rig, "via the environment").await;
    proxy
        .wait_request("the MCP POST in tinyproxy's log", &format!("POST {mcp_url} HTTP/1.1"))
        .await;
    // ... while the control plane, on loopback, never is.
    assert!(
        !proxy.requests().iter().any(|r| r.contains(&rig.sim.base_url())),
        "loopback is never proxied from the environment: {:?}",
        proxy.requests()
    );
    drop(gw);
    let through = mcp_requests();

    // NO_PROXY naming the namespace's block, and "none", bypass it.
    for (extra, edit) in [
        (&[("NO_PROXY", "10.213.0.0/16")][..], None),
        (&[("no_proxy", "localhost,.example.com,10.213.0.0/16")][..], None),
        (&[][..], Some("none")),
    ] {
        let mut refs: Vec<(&str, &str)> = vec![("HTTP_PROXY", &proxy_url)];
        refs.extend_from_slice(extra);
        let rig = Rig::start("").await;
        let config = with_proxies(&rig.config_to(&mcp_url, &RigOptions::default_mode()), None, edit);
        let gw = run_with_env(&rig, &config, &refs).await;
        answered_echo(&rig, "bypassing").await;
        drop(gw);
        assert_eq!(
            mcp_requests(),
            through,
            "{extra:?} {edit:?}: nothing more went through the proxy"
        );
    }
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn a_proxy_that_refuses_connect_leaves_the_call_not_sent_and_strict_mode_unlatched() {
    let proxy = Tinyproxy::start(TinyproxyOptions::default()).await;
    let rig = Rig::start("").await;
    // An https server the proxy may not CONNECT to (tinyproxy's ConnectPort: 403).
    let target_port = free_port();
    let config = rig.config_to(&format!("https://127.0.0.1:{target_port}/mcp"), &RigOptions::default());
    let config = with_proxies(&config, None, Some(&proxy.url()));
    let mut gw = rig.spawn_gateway(&config).await;

    let id = rig.enqueue_call("echo", json!({"message": "refused"}));
    rig.wait("the refused call's answer", |r| r.responses_for(&id).next().is_some())
        .await;
    assert_eq!(message(&rig, &id), NOT_SENT);
    let provenance = &final_json(&rig.sim.record(), &id)["resp_json"]["error"]["data"]["tunnel_failure"];
    assert_eq!(provenance["source"], "connect");
    assert_eq!(provenance["upstream_response_received"], false);
    wait_until("tinyproxy's refusal in its log", WAIT, || async {
        proxy
            .log_text()
            .contains(&format!("Refused CONNECT method on port {target_port}"))
    })
    .await;
    assert!(
        proxy
            .requests()
            .contains(&format!("CONNECT 127.0.0.1:{target_port} HTTP/1.1")),
        "{:?}",
        proxy.requests()
    );
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("tunnelgate_downstream_requests_total{outcome=\"not_sent\",transport=\"http\"} 1"),
        "{metrics}"
    );
    // Strict mode: nothing was sent, so nothing latched; a stop is clean.
    assert!(!rig.latch_path().exists());
    assert!(!gw.has_exited());
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    assert!(gw.stderr().contains("proxy_refused"), "the leg's failure is named");
}

#[tokio::test]
async fn a_proxy_that_wants_credentials_gets_them_from_a_secret_and_they_reach_no_sink() {
    let proxy = Tinyproxy::start(TinyproxyOptions {
        basic_auth: Some(("gateway", PROXY_PASSWORD)),
        ..Default::default()
    })
    .await;
    let rig = Rig::start("").await;
    let stub = rig.stub.url();

    // Without credentials: the proxy answers 407 to the forwarded request; not sent.
    let bare = with_proxies(&rig.config(&RigOptions::default()), None, Some(&proxy.url()));
    let mut gw = rig.spawn_gateway(&bare).await;
    let id = rig.enqueue_call("echo", json!({"message": "no credentials"}));
    rig.wait("the 407 call's answer", |r| r.responses_for(&id).next().is_some())
        .await;
    assert_eq!(message(&rig, &id), NOT_SENT);
    assert_eq!(rig.stub.count("tools/call"), 0, "the proxy forwarded nothing");
    proxy
        .wait_request("the refused POST in tinyproxy's log", &format!("POST {stub}"))
        .await;
    gw.sigterm();
    assert_eq!(
        gw.wait_exit(EXIT).await,
        Some(0),
        "strict: a 407 latches nothing; {}",
        gw.stderr()
    );
    assert!(!rig.latch_path().exists());

    // With credentials in the proxy URL's userinfo, read from a variable: answered.
    let secret_url = format!("http://gateway:{PROXY_PASSWORD}@127.0.0.1:{}", proxy.port);
    // At trace level, so that every line any crate logs is in the scan.
    let traced = rig
        .config(&RigOptions::default())
        .replace("log_level = \"info\"", "log_level = \"trace\"");
    let config = with_proxies(&traced, Some("env:CORP_PROXY"), Some("env:CORP_PROXY"));
    let envs = [("CORP_PROXY", secret_url.as_str())];
    let gw = run_with_env(&rig, &config, &envs).await;
    let id = rig.enqueue_call("echo", json!({"message": "with credentials"}));
    rig.wait("the proxied call's answer", |r| {
        r.responses_for(&id)
            .any(|p| p.resp_type.as_deref() == Some("jsonrpc_response"))
    })
    .await;
    assert_eq!(
        final_json(&rig.sim.record(), &id)["resp_json"]["result"]["content"][0]["text"],
        "Echo: with credentials"
    );
    rig.wait_stub_calls(1).await;

    // The password reaches no sink: logs, /status, /metrics, `check`, `doctor`.
    let status = rig.status().await.to_string();
    let metrics = rig.metrics().await;
    let check = Gateway::cli(&["check"], Some(&config), &envs, EXIT).await;
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(
        check.stdout.contains(&format!(
            "http://127.0.0.1:{} from env:CORP_PROXY (credentials redacted)",
            proxy.port
        )),
        "{}",
        check.stdout
    );
    let doctor = Gateway::cli(&["doctor"], Some(&config), &envs, Duration::from_secs(60)).await;
    let logs = format!("{}{}", gw.stdout(), gw.stderr());
    drop(gw);
    for (sink, text) in [
        ("logs", logs),
        ("status", status),
        ("metrics", metrics),
        ("check", format!("{}{}", check.stdout, check.stderr)),
        ("doctor", format!("{}{}", doctor.stdout, doctor.stderr)),
    ] {
        assert!(
            !text.contains(PROXY_PASSWORD) && !text.contains(PROXY_BASIC),
            "{sink} shows the proxy password:\n{text}"
        );
    }
}

#[tokio::test]
async fn a_proxy_cut_after_forwarding_is_abandoned_and_latches_in_strict_mode() {
    let (proxy, forwarded) = cutting_proxy().await;
    let rig = Rig::start("").await;

    // Default mode: the caller is told "effect unknown"; the gateway goes on.
    let config = with_proxies(&rig.config(&RigOptions::default_mode()), None, Some(&proxy));
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.enqueue_call("echo", json!({"message": "cut"}));
    rig.wait("the cut call's answer", |r| r.responses_for(&id).next().is_some())
        .await;
    assert_eq!(message(&rig, &id), EFFECT_UNKNOWN);
    assert_eq!(rig.stub.count("tools/call"), 1, "the origin saw the request");
    assert_eq!(forwarded.load(Ordering::SeqCst), 1);
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());

    // Strict mode: the same cut latches downstream_ambiguous (87) after telling the caller.
    let config = with_proxies(&rig.config(&RigOptions::default()), None, Some(&proxy));
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.enqueue_call("echo", json!({"message": "cut strict"}));
    assert_eq!(gw.wait_exit(EXIT).await, Some(87), "{}", gw.stderr());
    assert_eq!(message(&rig, &id), EFFECT_UNKNOWN);
    assert_eq!(rig.stub.count("tools/call"), 2);
    let latch: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(rig.latch_path()).unwrap()).unwrap();
    assert_eq!(latch["fatal"]["category"], "downstream_ambiguous", "{latch}");
}

#[tokio::test]
async fn an_mcp_server_on_a_unix_socket_answers_through_the_gateway_under_its_logical_host() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("mcp.sock");
    let mut cmd = Command::new(python());
    cmd.arg(peer_script("py_server.py"))
        .args([
            "--uds",
            &socket.display().to_string(),
            "--allowed-host",
            "mcp.internal",
            "--mode",
            "stateless",
        ])
        .env("PYTHONUNBUFFERED", "1");
    let _server = ChildGuard::spawn("py_server(uds)", cmd);
    wait_for("the server's unix socket", WAIT, || async {
        tokio::net::UnixStream::connect(&socket).await.ok().map(|_| ())
    })
    .await;

    let rig = Rig::start("").await;
    // The server accepts only Host: mcp.internal (421 otherwise): an answer proves the
    // logical URL's host was sent. A dead environment proxy proves the socket is never proxied.
    let config = rig
        .config_to("http://mcp.internal/mcp", &RigOptions::default_mode())
        .replacen(
            "url = \"http://mcp.internal/mcp\"\n",
            &format!("url = \"http://mcp.internal/mcp\"\nsocket = \"{}\"\n", socket.display()),
            1,
        );
    let _gw = run_with_env(&rig, &config, &[("HTTP_PROXY", "http://127.0.0.1:1")]).await;
    answered_echo(&rig, "over a unix socket").await;
    rig.assert_all_bodies_valid();
}

#[tokio::test]
async fn an_https_server_is_reached_through_connect_and_a_failed_handshake_in_the_tunnel_is_not_sent() {
    let rig = Rig::start("").await;
    // The stub speaks plain HTTP: the proxy opens the tunnel, the TLS handshake in it fails.
    let stub_port: u16 = rig
        .stub
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = Tinyproxy::start(TinyproxyOptions {
        connect_ports: &[stub_port],
        ..Default::default()
    })
    .await;
    let config = rig.config_to(&format!("https://127.0.0.1:{stub_port}/mcp"), &RigOptions::default());
    let config = with_proxies(&config, None, Some(&proxy.url()));
    let mut gw = rig.spawn_gateway(&config).await;
    let id = rig.enqueue_call("echo", json!({"message": "tls in the tunnel"}));
    rig.wait("the call's answer", |r| r.responses_for(&id).next().is_some())
        .await;
    assert_eq!(message(&rig, &id), NOT_SENT);
    let provenance = &final_json(&rig.sim.record(), &id)["resp_json"]["error"]["data"]["tunnel_failure"];
    assert_eq!(provenance["source"], "tls", "{provenance}");
    assert!(
        proxy
            .requests()
            .contains(&format!("CONNECT 127.0.0.1:{stub_port} HTTP/1.1")),
        "{:?}",
        proxy.requests()
    );
    assert!(!proxy.log_text().contains("Refused CONNECT"), "{}", proxy.log_text());
    assert_eq!(
        rig.stub.count("tools/call"),
        0,
        "nothing of the request reached the server"
    );
    gw.sigterm();
    assert_eq!(
        gw.wait_exit(EXIT).await,
        Some(0),
        "strict: nothing sent, nothing latched; {}",
        gw.stderr()
    );
}
