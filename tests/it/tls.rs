//! TLS against real peers: a private PKI made with the `openssl` CLI, the Python SDK MCP
//! server behind uvicorn's TLS requiring client certificates (it logs the subject each
//! connection presented), and `stunnel` requiring client certificates in front of the
//! simulator. Each problem fails with its named error, `doctor` reports it, and a
//! certificate rewritten in place is presented by the next connection.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;
use tunnelgate_test_peers::{Pair, Pki};

use crate::harness::{final_json, free_port, peer_script, python, wait_until, ChildGuard, Gateway, Rig, RigOptions};

const T: Duration = Duration::from_secs(30);
/// What stunnel logs (at debug level) when a client starts a TLS handshake.
const HELLO: &str = "read client hello";

fn initialize(id: u64) -> NewCommand {
    NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}))
}

/// Waits until `child` has written `announced` (its own word that it bound the port) to
/// `log` (its stderr when `None`). False when it exited first: the port was taken by another
/// process between [`free_port`] and its bind, and a connect alone would have reached that
/// stranger.
async fn wait_announced(child: &mut ChildGuard, log: Option<&Path>, announced: &str) -> bool {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let text = match log {
            Some(path) => std::fs::read_to_string(path).unwrap_or_default(),
            None => child.stderr(),
        };
        if text.contains(announced) {
            return true;
        }
        if child.try_wait().is_some() {
            return false;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no `{announced}` within {T:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Spawns `make(port)` on fresh ports until one announces it is bound (three tries).
async fn spawn_announced(
    make: impl Fn(u16) -> (ChildGuard, Option<std::path::PathBuf>),
    announced: impl Fn(u16) -> String,
) -> (ChildGuard, u16) {
    for _ in 0..3 {
        let port = free_port();
        let (mut child, log) = make(port);
        if wait_announced(&mut child, log.as_deref(), &announced(port)).await {
            return (child, port);
        }
    }
    panic!("the TLS peer could not bind a port in three tries")
}

/// The Python SDK server on HTTPS, requiring a client certificate issued by `ca`.
async fn tls_py_server(server: &Pair, ca: &Pair) -> (ChildGuard, String) {
    let (child, port) = spawn_announced(
        |port| (py_tls_child(port, server, ca), None),
        |port| format!("listening on 127.0.0.1:{port}"),
    )
    .await;
    (child, format!("https://127.0.0.1:{port}/mcp"))
}

/// [`tls_py_server`] on a given `port` (a restart on the port a gateway already targets).
async fn tls_py_server_on(port: u16, server: &Pair, ca: &Pair) -> (ChildGuard, String) {
    let mut child = py_tls_child(port, server, ca);
    let announced = format!("listening on 127.0.0.1:{port}");
    assert!(
        wait_announced(&mut child, None, &announced).await,
        "the TLS server exited:\n{}",
        child.stderr()
    );
    (child, format!("https://127.0.0.1:{port}/mcp"))
}

fn py_tls_child(port: u16, server: &Pair, ca: &Pair) -> ChildGuard {
    let mut cmd = std::process::Command::new(python());
    cmd.arg(peer_script("py_server.py"))
        .args(["--port", &port.to_string(), "--mode", "stateless"])
        .arg("--certfile")
        .arg(&server.cert)
        .arg("--keyfile")
        .arg(&server.key)
        .arg("--ca-certs")
        .arg(&ca.cert)
        .env("PYTHONUNBUFFERED", "1");
    ChildGuard::spawn("py_server(tls)", cmd)
}

/// `stunnel` on 127.0.0.1 in front of `target`, requiring a client certificate issued by
/// `ca`; its log (at debug level, it names each accepted certificate) is `log`.
async fn stunnel(pki: &Pki, server: &Pair, ca: &Pair, target: u16) -> (ChildGuard, String, std::path::PathBuf) {
    stunnel_named(pki, "stunnel", server, ca, target).await
}

async fn stunnel_named(
    pki: &Pki,
    name: &str,
    server: &Pair,
    ca: &Pair,
    target: u16,
) -> (ChildGuard, String, std::path::PathBuf) {
    let log = pki.path(&format!("{name}.log"));
    let conf = pki.path(&format!("{name}.conf"));
    let make = |port: u16| {
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\ndebug = 7\noutput = {log}\n[cp]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{target}\ncert = {cert}\nkey = {key}\nCAfile = {ca}\nverifyChain = yes\nrequireCert = yes\n",
                log = log.display(),
                cert = server.cert.display(),
                key = server.key.display(),
                ca = ca.cert.display(),
            ),
        )
        .unwrap();
        let mut cmd = std::process::Command::new("stunnel4");
        cmd.arg(&conf);
        (ChildGuard::spawn("stunnel", cmd), Some(log.clone()))
    };
    // stunnel logs this line once its accept socket is bound.
    let (child, port) = spawn_announced(make, |port| format!("bound to 127.0.0.1:{port}")).await;
    (child, format!("https://127.0.0.1:{port}"), log)
}

fn tls_table(table: &str, ca: Option<&Pair>, client: Option<&Pair>) -> String {
    let mut out = format!("\n[{table}]\n");
    if let Some(ca) = ca {
        out.push_str(&format!("ca_file = \"{}\"\n", ca.cert.display()));
    }
    if let Some(client) = client {
        out.push_str(&format!(
            "client_cert = \"{}\"\nclient_key = \"{}\"\n",
            client.cert.display(),
            client.key.display()
        ));
    }
    out
}

async fn gateway(rig: &Rig, config: &str, envs: &[(&str, &str)]) -> Gateway {
    let mut gw = Gateway::spawn(&["run"], Some(config), envs);
    gw.wait_http_ready(&format!("http://127.0.0.1:{}/livez", rig.ops_port), T)
        .await;
    gw
}

/// The base64 lines of a PEM key: what must never reach a sink.
fn key_lines(key: &Path) -> Vec<String> {
    std::fs::read_to_string(key)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 16)
        .map(str::to_owned)
        .collect()
}

/// The verdict word a `doctor` line starts with, lower-cased.
fn verdict(line: &str) -> String {
    line.split_whitespace().next().unwrap_or_default().to_ascii_lowercase()
}

async fn get_text(url: &str) -> String {
    crate::harness::http_client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_mtls_mcp_server_and_an_mtls_control_plane_are_reached_with_the_configured_files() {
    let pki = Pki::new();
    let ca = pki.ca("ca-a");
    let server = pki.leaf(&ca, "server", true, 30);
    let cp_client = pki.leaf(&ca, "gateway-cp", false, 30);
    let mcp_client = pki.leaf(&ca, "gateway-mcp", false, 30);
    let (py, url) = tls_py_server(&server, &ca).await;
    let rig = Rig::start("").await;
    let (_front, front_url, front_log) = stunnel(&pki, &server, &ca, rig.sim.addr().port()).await;
    // The official client's variables for the control plane and the CA (both scopes);
    // the channel's own table adds its client certificate over the inherited CA.
    let config = rig
        .config_to(&url, &RigOptions::default_mode())
        .replace(&rig.sim.base_url(), &front_url)
        + &tls_table("mcp.channels.main.tls", None, Some(&mcp_client));
    let (ca_path, cp_cert, cp_key) = (
        ca.cert.display().to_string(),
        cp_client.cert.display().to_string(),
        cp_client.key.display().to_string(),
    );
    let envs = [
        ("CA_BUNDLE", ca_path.as_str()),
        ("CONTROL_PLANE_CLIENT_CERT", cp_cert.as_str()),
        ("CONTROL_PLANE_CLIENT_KEY", cp_key.as_str()),
    ];
    let mut gw = gateway(&rig, &config, &envs).await;
    let init = rig.sim.enqueue(initialize(1));
    let rec = rig
        .wait("initialize answered over mTLS", |r| r.is_completed(&init))
        .await;
    let body = final_json(&rec, &init);
    assert_eq!(body["resp_type"], "jsonrpc_response", "{body}");
    assert_eq!(
        body["resp_json"]["result"]["serverInfo"]["name"], "tunnelgate-py-peer",
        "{body}"
    );
    wait_until("the MCP server saw the channel's certificate", T, || async {
        py.stderr().contains("peer certificate: CN=gateway-mcp")
    })
    .await;
    wait_until("the control plane's terminator saw its certificate", T, || async {
        std::fs::read_to_string(&front_log).is_ok_and(|log| log.contains("CN=gateway-cp") && log.contains(HELLO))
    })
    .await;

    // Key material reaches no sink: logs, /status, /metrics, `check`, `doctor`.
    let status = get_text(&format!("http://127.0.0.1:{}/status", rig.ops_port)).await;
    let metrics = get_text(&format!("http://127.0.0.1:{}/metrics", rig.ops_port)).await;
    let check = Gateway::cli(&["check"], Some(&config), &envs, T).await;
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(
        check.stdout.contains("gateway-mcp.key"),
        "check shows the key's path: {}",
        check.stdout
    );
    let doctor = Gateway::cli(&["doctor"], Some(&config), &envs, T).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
    let sinks = [
        gw.stderr(),
        gw.stdout(),
        status,
        metrics,
        check.stdout,
        check.stderr,
        doctor.stdout.clone(),
    ];
    for line in key_lines(&mcp_client.key).iter().chain(&key_lines(&cp_client.key)) {
        assert!(sinks.iter().all(|s| !s.contains(line.as_str())), "key material leaked");
    }
    assert!(
        doctor.stdout.contains("control_plane.tls.client_cert"),
        "{}",
        doctor.stdout
    );
    assert!(
        doctor.stdout.contains("mcp.channels.main.tls.client_cert"),
        "{}",
        doctor.stdout
    );
}

#[tokio::test]
async fn a_client_certificate_rewritten_in_place_is_presented_by_the_next_connection() {
    let pki = Pki::new();
    let ca = pki.ca("ca-a");
    let server = pki.leaf(&ca, "server", true, 30);
    let first = pki.leaf(&ca, "gateway-first", false, 30);
    let second = pki.leaf(&ca, "gateway-later", false, 30);
    // The configured files: a copy the test rewrites, as cert-manager does.
    let live = Pair {
        cert: pki.path("live.pem"),
        key: pki.path("live.key"),
    };
    std::fs::copy(&first.cert, &live.cert).unwrap();
    std::fs::copy(&first.key, &live.key).unwrap();
    let (py, url) = tls_py_server(&server, &ca).await;
    let rig = Rig::start("").await;
    let config = rig.config_to(&url, &RigOptions::default_mode()) + &tls_table("mcp.tls", Some(&ca), Some(&live));
    let mut gw = gateway(&rig, &config, &[]).await;

    let one = rig.sim.enqueue(initialize(1));
    let rec = rig.wait("first initialize", |r| r.is_completed(&one)).await;
    assert_eq!(final_json(&rec, &one)["resp_type"], "jsonrpc_response");
    wait_until("the first certificate presented", T, || async {
        py.stderr().contains("CN=gateway-first")
    })
    .await;
    assert!(!py.stderr().contains("CN=gateway-later"));

    // Rewritten in place (same inode): the certificate first, then its key.
    std::fs::write(&live.cert, std::fs::read(&second.cert).unwrap()).unwrap();
    std::fs::write(&live.key, std::fs::read(&second.key).unwrap()).unwrap();
    let two = rig.sim.enqueue(initialize(2));
    let rec = rig
        .wait("initialize after the rotation", |r| r.is_completed(&two))
        .await;
    assert_eq!(
        final_json(&rec, &two)["resp_type"],
        "jsonrpc_response",
        "{}",
        gw.stderr()
    );
    let seen = || -> Vec<String> {
        py.stderr()
            .lines()
            .filter(|l| l.starts_with("peer certificate:"))
            .map(str::to_owned)
            .collect()
    };
    wait_until("a second connection's certificate logged", T, || async {
        seen().len() >= 2
    })
    .await;
    assert_eq!(
        seen(),
        [
            "peer certificate: CN=gateway-first",
            "peer certificate: CN=gateway-later"
        ],
        "one connection per request: the first presented the old file, the next the new one"
    );
    assert!(gw.stderr().contains("client certificate changed"), "{}", gw.stderr());
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

/// A leg to the TLS server that fails before anything is delivered: `not_sent`, its
/// problem named on the gateway's log, and `doctor` failing the channel with it.
async fn assert_refused(rig: &Rig, config: &str, words: &str) {
    let mut gw = gateway(rig, config, &[]).await;
    let id = rig.sim.enqueue(initialize(7));
    let rec = rig.wait("the refused leg answered", |r| r.is_completed(&id)).await;
    let body = final_json(&rec, &id);
    let message = body["resp_json"]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("not delivered"), "{body}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
    let log = gw.stderr();
    let leg: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["reason"] == "tls")
        .collect();
    assert!(
        leg.iter().any(|v| v["fields"]["outcome"] == "not_sent"),
        "a not_sent tls leg: {log}"
    );
    assert!(log.contains(words), "the log names the problem ({words}): {log}");
    let doctor = Gateway::cli(&["doctor"], Some(config), &[], T).await;
    let line = doctor
        .stdout
        .lines()
        .find(|l| l.contains("channel.main"))
        .unwrap_or_default()
        .to_owned();
    assert!(verdict(&line) == "fail" && line.contains(words), "{}", doctor.stdout);
    assert_ne!(doctor.code, 0);
}

#[tokio::test]
async fn without_the_ca_or_with_a_certificate_of_another_ca_the_leg_is_not_sent_and_named() {
    let pki = Pki::new();
    let ca = pki.ca("ca-a");
    let other_ca = pki.ca("ca-b");
    let server = pki.leaf(&ca, "server", true, 30);
    let good = pki.leaf(&ca, "gateway-good", false, 30);
    let stranger = pki.leaf(&other_ca, "gateway-stranger", false, 30);
    let (py, url) = tls_py_server(&server, &ca).await;
    let rig = Rig::start("").await;
    let base = rig.config_to(&url, &RigOptions::default_mode());

    let no_ca = base.clone() + &tls_table("mcp.tls", None, Some(&good));
    assert_refused(&rig, &no_ca, "not issued by a trusted CA").await;
    let wrong = base + &tls_table("mcp.tls", Some(&ca), Some(&stranger));
    assert_refused(&rig, &wrong, "refused the client certificate").await;
    // Strict mode: nothing was delivered, so nothing latches (the clean exit 0 above).
    let strict = rig.config_to(&url, &RigOptions::default()) + &tls_table("mcp.tls", Some(&ca), Some(&stranger));
    assert_refused(&rig, &strict, "refused the client certificate").await;
    assert!(!rig.latch_path().exists(), "no latch file");
    assert!(
        !py.stderr().contains("peer certificate:"),
        "no connection was accepted: {}",
        py.stderr()
    );
}

#[tokio::test]
async fn an_expired_or_mismatched_client_certificate_is_a_configuration_error_and_doctor_fails_it() {
    let pki = Pki::new();
    let ca = pki.ca("ca-a");
    let expired = pki.leaf(&ca, "gateway-expired", false, -1);
    let good = pki.leaf(&ca, "gateway-good", false, 30);
    let rig = Rig::start("").await;
    let base = rig.config(&RigOptions::default_mode());
    let cases = [
        (
            tls_table("mcp.channels.main.tls", Some(&ca), Some(&expired)),
            "mcp.channels.main.tls.client_cert",
            "expired at",
        ),
        (
            tls_table(
                "control_plane.tls",
                Some(&ca),
                Some(&Pair {
                    cert: good.cert.clone(),
                    key: expired.key.clone(),
                }),
            ),
            "control_plane.tls.client_key",
            "does not match the certificate",
        ),
        (
            format!("\n[mcp.tls]\nca_file = \"{}\"\n", pki.path("absent.pem").display()),
            "mcp.tls.ca_file",
            "no such file",
        ),
        (
            format!("\n[mcp.tls]\nca_file = \"{}\"\n", good.key.display()),
            "mcp.tls.ca_file",
            "is not a PEM file holding certificates",
        ),
    ];
    for (table, key, words) in cases {
        let config = base.clone() + &table;
        let mut gw = Gateway::spawn(&["run"], Some(&config), &[]);
        assert_eq!(gw.wait_exit(T).await, Some(78), "{key}: {}", gw.stderr());
        let stderr = gw.stderr();
        assert!(stderr.contains(key) && stderr.contains(words), "{key}: {stderr}");
        let doctor = Gateway::cli(&["doctor"], Some(&config), &[], T).await;
        let line = doctor.stdout.lines().find(|l| l.contains(key)).unwrap_or_default();
        assert!(
            verdict(line) == "fail" && line.contains(words),
            "{key}: {}",
            doctor.stdout
        );
        assert_eq!(doctor.code, 1, "{}", doctor.stdout);
    }
    assert_eq!(rig.sim.record().issued(), 0, "nothing was polled");
}

#[tokio::test]
async fn doctor_warns_fourteen_days_before_a_certificate_ends() {
    let pki = Pki::new();
    let ca = pki.ca("ca-a");
    let soon = pki.leaf(&ca, "gateway-soon", false, 10);
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions::default_mode()) + &tls_table("control_plane.tls", Some(&ca), Some(&soon));
    let doctor = Gateway::cli(&["doctor"], Some(&config), &[], T).await;
    let line = |key: &str| {
        doctor
            .stdout
            .lines()
            .find(|l| l.contains(&format!(" {key} ")))
            .unwrap_or_default()
            .to_owned()
    };
    let cert = line("control_plane.tls.client_cert");
    assert!(
        verdict(&cert) == "warn" && cert.contains("in 9 days") && cert.contains("renew"),
        "{}",
        doctor.stdout
    );
    let ca_line = line("control_plane.tls.ca_file");
    assert!(
        verdict(&ca_line) == "ok" && ca_line.contains("valid until"),
        "{}",
        doctor.stdout
    );
    assert_eq!(
        verdict(&line("control_plane.tls.client_key")),
        "ok",
        "{}",
        doctor.stdout
    );
}

#[tokio::test]
async fn a_control_plane_that_refuses_the_client_certificate_is_named_on_the_log_and_by_doctor() {
    let pki = Pki::new();
    let ca = pki.ca("ca-a");
    let other_ca = pki.ca("ca-b");
    let server = pki.leaf(&ca, "server", true, 30);
    let stranger = pki.leaf(&other_ca, "gateway-stranger", false, 30);
    let rig = Rig::start("").await;
    let (_front, front_url, front_log) = stunnel(&pki, &server, &ca, rig.sim.addr().port()).await;
    let config = rig
        .config(&RigOptions::default_mode())
        .replace(&rig.sim.base_url(), &front_url)
        + &tls_table("control_plane.tls", Some(&ca), Some(&stranger));
    let mut gw = gateway(&rig, &config, &[]).await;
    wait_until("a poll refused by the terminator, named", T, || async {
        gw.stderr()
            .contains("poll not sent: the TLS handshake with the control plane failed")
    })
    .await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
    assert!(
        gw.stderr().contains("refused the client certificate"),
        "{}",
        gw.stderr()
    );
    assert_eq!(rig.sim.record().issued(), 0, "no poll reached the control plane");
    // The terminator's own view: it refused the presented certificate.
    let front_seen = std::fs::read_to_string(&front_log).unwrap_or_default();
    assert!(front_seen.contains("CERT: Pre-verification error"), "{front_seen}");
    let doctor = Gateway::cli(&["doctor"], Some(&config), &[], T).await;
    let line = doctor
        .stdout
        .lines()
        .find(|l| l.contains(" control_plane "))
        .unwrap_or_default()
        .to_owned();
    assert!(
        verdict(&line) == "fail" && line.contains("refused the client certificate"),
        "{}",
        doctor.stdout
    );
}

/// A plain HTTP server that answers every request with a `307` to `location` and counts
/// the requests it read.
async fn redirector(location: String) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (counter, location) = (counter.clone(), location.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut read = Vec::new();
                while !read.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read.extend_from_slice(&buf[..n]),
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, seen)
}

#[tokio::test]
async fn the_control_planes_client_certificate_is_never_offered_to_the_origin_of_a_redirect() {
    use std::sync::atomic::Ordering;
    let pki = Pki::new();
    let ca = pki.ca("ca-a");
    let server = pki.leaf(&ca, "server", true, 30);
    let cp_client = pki.leaf(&ca, "gateway-cp", false, 30);
    let rig = Rig::start("").await;
    // Another origin that requires client certificates and logs every connection.
    let (_elsewhere, elsewhere_url, elsewhere_log) =
        stunnel_named(&pki, "elsewhere", &server, &ca, rig.sim.addr().port()).await;
    let (redirect_port, redirected) = redirector(format!("{elsewhere_url}/v1/tunnels/tunnel_test/poll")).await;
    let (_front, front_url, _) = stunnel_named(&pki, "front", &server, &ca, redirect_port).await;
    let config = rig
        .config(&RigOptions::default_mode())
        .replace(&rig.sim.base_url(), &front_url)
        + &tls_table("control_plane.tls", Some(&ca), Some(&cp_client));
    let mut gw = gateway(&rig, &config, &[]).await;
    wait_until("two polls answered with a redirect", T, || async {
        redirected.load(Ordering::SeqCst) >= 2
    })
    .await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
    // The readiness probe connected without TLS; a handshake would log the client's hello
    // (as the control plane's terminator does in the first test).
    let seen = std::fs::read_to_string(&elsewhere_log).unwrap_or_default();
    assert!(
        !seen.contains(HELLO),
        "the redirect's origin was offered a handshake: {seen}"
    );
}

#[tokio::test]
async fn a_ca_file_rewritten_in_place_is_trusted_by_the_next_connection() {
    let pki = Pki::new();
    let (ca_a, ca_b) = (pki.ca("ca-a"), pki.ca("ca-b"));
    let client = pki.leaf(&ca_a, "gateway-mcp", false, 30);
    // The server's certificate moves to a new CA; its client CA stays.
    let (server_a, server_b) = (
        pki.leaf(&ca_a, "server-a", true, 30),
        pki.leaf(&ca_b, "server-b", true, 30),
    );
    let trusted = Pair {
        cert: pki.path("trusted.pem"),
        key: pki.path("unused.key"),
    };
    std::fs::copy(&ca_a.cert, &trusted.cert).unwrap();
    let port = free_port();
    let (mut first, url) = tls_py_server_on(port, &server_a, &ca_a).await;
    let rig = Rig::start("").await;
    let config = rig.config_to(&url, &RigOptions::default_mode())
        + &tls_table("mcp.tls", Some(&trusted), Some(&client))
        + "ca_only = true\n";
    let mut gw = gateway(&rig, &config, &[]).await;
    let one = rig.sim.enqueue(initialize(1));
    let rec = rig.wait("answered under the first CA", |r| r.is_completed(&one)).await;
    assert_eq!(final_json(&rec, &one)["resp_type"], "jsonrpc_response");

    first.kill();
    let (_second, _) = tls_py_server_on(port, &server_b, &ca_a).await;
    let two = rig.sim.enqueue(initialize(2));
    let rec = rig
        .wait("refused: the new CA is not trusted yet", |r| r.is_completed(&two))
        .await;
    let refused = final_json(&rec, &two);
    assert!(
        refused["resp_json"]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not delivered"),
        "{refused}"
    );
    std::fs::write(&trusted.cert, std::fs::read(&ca_b.cert).unwrap()).unwrap();
    let three = rig.sim.enqueue(initialize(3));
    let rec = rig
        .wait("answered under the rewritten CA file", |r| r.is_completed(&three))
        .await;
    assert_eq!(
        final_json(&rec, &three)["resp_type"],
        "jsonrpc_response",
        "{}",
        gw.stderr()
    );
    assert!(gw.stderr().contains("CA file changed"), "{}", gw.stderr());
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}
