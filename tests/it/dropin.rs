//! The drop-in behaviours an operator moving from the official client relies on, each
//! through the real binary against real peers: a pinned self-signed `CA:TRUE` server
//! certificate (the Python SDK server over TLS, certificates made with the `openssl`
//! CLI), a malformed API key refused at load without being shown, the `200` with which
//! a notification to a stdio channel is acknowledged (an HTTP channel keeps its server's
//! own status), a Harpoon target URL without a path, and `/healthz` with the liveness and
//! readiness series as the official client's monitors read them.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;
use tunnelgate_test_peers::{Pair, Pki};

use crate::harness::seen;
use crate::harness::{
    final_json, free_port, http_client, peer_script, python, spawn_py_oauth_server, spawn_py_server, wait_for,
    wait_until, ChildGuard, Gateway, PyMode, Rig, RigOptions,
};

const T: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// A pinned self-signed CA:TRUE server certificate
// ---------------------------------------------------------------------------------------

/// The Python SDK server (stateless, tool `echo`) on HTTPS with `server`'s certificate,
/// asking for no client certificate; returned once it said it bound its port.
async fn pinned_tls_server(server: &Pair) -> (ChildGuard, String) {
    for _ in 0..3 {
        let port = free_port();
        let mut cmd = Command::new(python());
        cmd.arg(peer_script("py_server.py"))
            .args(["--port", &port.to_string(), "--mode", "stateless", "--certfile"])
            .arg(&server.cert)
            .arg("--keyfile")
            .arg(&server.key)
            .env("PYTHONUNBUFFERED", "1");
        let mut child = ChildGuard::spawn("py_server(pinned tls)", cmd);
        let announced = format!("listening on 127.0.0.1:{port}");
        let bound = wait_for("the TLS server bound its port or exited", T, || {
            let seen = if child.stderr().contains(&announced) {
                Some(true)
            } else {
                child.try_wait().map(|_| false)
            };
            async move { seen }
        })
        .await;
        if bound {
            return (child, format!("https://127.0.0.1:{port}/mcp"));
        }
    }
    panic!("the TLS server could not bind a port in three tries")
}

/// The rig's configuration with `main` at `url`, trusting the bundle `ca` only there.
fn pinned_config(rig: &Rig, url: &str, ca: &Pair) -> String {
    rig.config_to(url, &RigOptions::default_mode())
        + &format!("\n[mcp.channels.main.tls]\nca_file = \"{}\"\n", ca.cert.display())
}

/// `tools/call echo` on `main`; the answer the simulator recorded.
async fn echo(rig: &Rig, message: &str) -> Value {
    let id = rig.enqueue_call("echo", json!({ "message": message }));
    let rec = rig.wait("the echo call answered", |r| r.is_completed(&id)).await;
    final_json(&rec, &id)
}

#[tokio::test]
async fn a_self_signed_ca_true_server_certificate_pinned_in_the_ca_file_is_accepted() {
    let pki = Pki::new();
    let pinned = pki.self_signed_server("pinned", "IP:127.0.0.1,DNS:localhost");
    let (server, url) = pinned_tls_server(&pinned).await;
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&pinned_config(&rig, &url, &pinned)).await;
    let body = echo(&rig, "over a pinned certificate").await;
    assert_eq!(body["resp_type"], "jsonrpc_response", "{body}\n{}", gw.stderr());
    assert_eq!(
        body["resp_json"]["result"]["content"][0]["text"], "Echo: over a pinned certificate",
        "{body}"
    );
    assert!(
        server.stderr().contains("peer certificate: CN="),
        "the server completed a handshake: {}",
        server.stderr()
    );
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
    // A pinned certificate is judged before the chain check, which would log its refusal.
    assert!(!gw.stderr().contains("\"level\":\"ERROR\""), "{}", gw.stderr());
}

/// A gateway on `config` whose echo call is refused before anything is sent: the caller
/// is told `not delivered`, and the log has a `not_sent` leg whose reason is `tls`.
async fn assert_tls_refused(rig: &Rig, config: &str, case: &str) {
    let mut gw = rig.spawn_gateway(config).await;
    let body = echo(rig, case).await;
    let message = body["resp_json"]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not delivered"), "{case}: {body}");
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{case}: {}", gw.stderr());
    let log = gw.stderr();
    let tls_not_sent = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|v| v["fields"]["reason"] == "tls" && v["fields"]["outcome"] == "not_sent");
    assert!(tls_not_sent, "{case}: a not_sent leg for tls in\n{log}");
    let named = log.contains("presents a CA certificate as its own") || log.contains("not valid for its host name");
    assert!(named, "{case}: the refusal is named in words:\n{log}");
}

#[tokio::test]
async fn a_self_signed_ca_true_certificate_not_in_the_bundle_or_not_naming_the_server_is_refused() {
    let pki = Pki::new();
    let pinned = pki.self_signed_server("pinned", "IP:127.0.0.1,DNS:localhost");
    let stranger = pki.self_signed_server("stranger", "IP:127.0.0.1,DNS:localhost");
    let misnamed = pki.self_signed_server("misnamed", "DNS:other.example");
    let rig = Rig::start("").await;

    // Same shape, same names, but the bundle holds only the first certificate.
    let (server, url) = pinned_tls_server(&stranger).await;
    assert_tls_refused(&rig, &pinned_config(&rig, &url, &pinned), "not in the bundle").await;
    assert!(
        !server.stderr().contains("peer certificate:"),
        "no handshake completed: {}",
        server.stderr()
    );
    drop(server);

    // Byte-identical to the bundle, but it does not name 127.0.0.1.
    let (server, url) = pinned_tls_server(&misnamed).await;
    assert_tls_refused(&rig, &pinned_config(&rig, &url, &misnamed), "naming another host").await;
    assert!(
        !server.stderr().contains("peer certificate:"),
        "no handshake completed: {}",
        server.stderr()
    );
}

// ---------------------------------------------------------------------------------------
// A malformed API key
// ---------------------------------------------------------------------------------------

/// What must never be printed: the distinctive part of every key below.
const CANARY: &str = "canary-Q7";

/// The rig's configuration without its `api_key` line (the key comes from elsewhere).
fn without_api_key(config: &str) -> String {
    config
        .lines()
        .filter(|l| !l.starts_with("api_key = "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The key's three sources: the TOML file, `CONTROL_PLANE_API_KEY` (the default
/// reference) and `TUNNELGATE_CONTROL_PLANE__API_KEY`; each a config and its variables.
fn key_sources(rig: &Rig, key: &str) -> Vec<(String, Vec<(&'static str, String)>)> {
    let base = rig.config(&RigOptions::default_mode());
    let bare = without_api_key(&base);
    assert_ne!(bare, base, "the rig's configuration names its key on one line");
    // A TOML literal string: every delimiter below is written as is.
    let in_file = bare.replace("[control_plane]\n", &format!("[control_plane]\napi_key = '{key}'\n"));
    vec![
        (in_file, vec![]),
        (bare.clone(), vec![("CONTROL_PLANE_API_KEY", key.to_owned())]),
        (bare, vec![("TUNNELGATE_CONTROL_PLANE__API_KEY", key.to_owned())]),
    ]
}

#[tokio::test]
async fn an_api_key_that_is_not_a_header_token_exits_78_naming_the_key_and_never_showing_it() {
    let rig = Rig::start("").await;
    for key in [
        "sk-canary-Q7 Z",
        "sk-canary-Q7\"Z",
        "sk-canary-Q7,Z",
        "sk-canary-Q7;Z",
        "sk-canary-Q7:Z",
    ] {
        for (n, (config, envs)) in key_sources(&rig, key).into_iter().enumerate() {
            let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            for command in ["check", "run"] {
                let run = Gateway::cli(&[command], Some(&config), &envs, T).await;
                let case = format!("{command} with {key:?} from source {n}");
                assert_eq!(run.code, 78, "{case}: {}", run.stderr);
                assert!(
                    run.stderr.contains("control_plane.api_key")
                        && run.stderr.contains("not a valid HTTP header token"),
                    "{case}: {}",
                    run.stderr
                );
                assert!(
                    !run.stdout.contains(CANARY) && !run.stderr.contains(CANARY),
                    "{case}: the key was shown:\n{}\n{}",
                    run.stdout,
                    run.stderr
                );
            }
        }
    }
    assert!(rig.sim.record().polls.is_empty(), "nothing was polled");
}

#[tokio::test]
async fn a_base64_like_api_key_is_accepted_from_every_source_and_polls() {
    const B64: &str = "sk-b64/Kq+Zw==";
    let rig = Rig::start_tuned("", |c| c.api_key = B64.to_owned()).await;
    let sources = key_sources(&rig, B64);
    for (n, (config, envs)) in sources.iter().enumerate() {
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let run = Gateway::cli(&["check"], Some(config), &envs, T).await;
        assert_eq!(run.code, 0, "source {n}: {}", run.stderr);
        assert!(
            !run.stdout.contains(B64) && !run.stderr.contains(B64),
            "source {n}: the key was shown: {}",
            run.stdout
        );
    }
    // Through the default reference, the control plane takes it.
    let (config, envs) = &sources[1];
    let mut gw = Gateway::spawn(&["run"], Some(config), &[(envs[0].0, envs[0].1.as_str())]);
    wait_until("a poll the control plane accepted", T, || async {
        rig.sim
            .record()
            .polls
            .iter()
            .any(|p| matches!(p.status, Some(200 | 204)))
    })
    .await;
    assert!(
        rig.sim.record().polls.iter().all(|p| p.status != Some(401)),
        "a poll was refused"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

// ---------------------------------------------------------------------------------------
// Notification acknowledgements
// ---------------------------------------------------------------------------------------

fn initialize(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "1"}}})
}

/// `message` on `channel`; the final response the simulator recorded.
async fn send(rig: &Rig, channel: &str, message: Value) -> Value {
    let id = rig.sim.enqueue(NewCommand::jsonrpc(message).channel(channel));
    let rec = rig.wait("the command answered", |r| r.is_completed(&id)).await;
    final_json(&rec, &id)
}

#[tokio::test]
async fn a_notification_to_a_stdio_channel_is_acknowledged_200_and_over_http_keeps_the_servers_202() {
    let (_web, web_url) = spawn_py_server(PyMode::Stateless).await;
    let rig = Rig::start("").await;
    let stdio = serde_json::to_string(&[
        python().display().to_string(),
        peer_script("py_server.py").display().to_string(),
        "--mode".to_owned(),
        "stdio".to_owned(),
    ])
    .unwrap();
    let config = rig
        .config(&RigOptions::default_mode())
        .replace(&format!("url = \"{}\"", rig.stub.url()), &format!("command = {stdio}"))
        + &format!("\n[mcp.channels.web]\nurl = \"{web_url}\"\n");
    let mut gw = rig.spawn_gateway(&config).await;
    for (channel, code) in [("main", 200), ("web", 202)] {
        let init = send(&rig, channel, initialize(1)).await;
        assert_eq!(
            init["resp_json"]["result"]["serverInfo"]["name"], "tunnelgate-py-peer",
            "{channel}: {init}"
        );
        for method in ["notifications/initialized", "notifications/roots/list_changed"] {
            let ack = send(&rig, channel, json!({"jsonrpc": "2.0", "method": method})).await;
            assert_eq!(ack["resp_type"], "notify_ack", "{channel} {method}: {ack}");
            assert_eq!(ack["resp_code"], code, "{channel} {method}: {ack}");
            assert_eq!(ack["channel"], channel, "{channel} {method}: {ack}");
        }
    }
    // The stdio server is still there and answers after the notifications.
    let list = send(&rig, "main", json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    assert!(list["resp_json"]["result"]["tools"].is_array(), "{list}");
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

// ---------------------------------------------------------------------------------------
// A Harpoon target URL without a path
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_harpoon_target_url_without_a_path_is_its_root() {
    let (peer, ready) = spawn_py_oauth_server("redirect").await;
    let origin = ready.trim_end_matches("/mcp").to_owned();
    assert!(origin.starts_with("http://127.0.0.1:") && origin.matches('/').count() == 2);
    let rig = Rig::start("").await;
    let extra =
        format!("\n[harpoon]\nallow_plaintext_http = true\ntargets = [{{ label = \"root\", url = \"{origin}\" }}]\n");
    let config = rig.config(&RigOptions {
        extra: &extra,
        ..RigOptions::default_mode()
    });
    let check = Gateway::cli(&["check"], Some(&config), &[], T).await;
    assert_eq!(check.code, 0, "{}", check.stderr);
    let mut gw = rig.spawn_gateway(&config).await;
    assert!(seen(&peer).is_empty(), "{:?}", seen(&peer));
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "call_target", "arguments": {"label": "root", "method": "GET"}}});
    let body = send(&rig, "harpoon", call).await;
    let result = &body["resp_json"]["result"];
    assert_ne!(result["isError"], true, "{result}");
    // The peer routes nothing at `/`: its own 404 is the answer, and its log the proof.
    assert_eq!(result["structuredContent"]["status_code"], 404, "{result}");
    wait_until("the peer logged the request", T, || async { !seen(&peer).is_empty() }).await;
    assert_eq!(seen(&peer), ["GET /"]);
    rig.assert_all_bodies_valid();
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

// ---------------------------------------------------------------------------------------
// Health as the official client's monitors read it
// ---------------------------------------------------------------------------------------

/// `GET path` on the ops listener: status and body.
async fn ops_get(rig: &Rig, path: &str) -> (u16, String) {
    let resp = http_client()
        .get(format!("http://127.0.0.1:{}{path}", rig.ops_port))
        .send()
        .await
        .expect("the ops listener answers");
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// The value of the unlabelled series `name` in `metrics`.
fn series(metrics: &str, name: &str) -> Option<String> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map(str::to_owned)
}

/// `/healthz`, `/livez` and the liveness series of a running gateway.
async fn assert_live(rig: &Rig) {
    assert_eq!(ops_get(rig, "/healthz").await, (200, "live".to_owned()));
    assert_eq!(ops_get(rig, "/livez").await, (200, "ok\n".to_owned()));
    let metrics = rig.metrics().await;
    assert_eq!(
        series(&metrics, "tunnelgate_liveness").as_deref(),
        Some("1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn healthz_answers_live_and_the_readiness_series_is_what_readyz_answers() {
    // Refused credentials: live, never ready.
    let refused = Rig::start_tuned("", |c| c.api_key = "another-key".to_owned()).await;
    let mut gw = refused
        .spawn_gateway(&refused.config(&RigOptions::default_mode()))
        .await;
    wait_until("a refused poll", T, || async {
        refused.sim.record().polls.iter().any(|p| p.status == Some(401))
    })
    .await;
    assert_live(&refused).await;
    assert_eq!(refused.readyz().await.0, 503);
    let metrics = refused.metrics().await;
    assert_eq!(
        series(&metrics, "tunnelgate_readiness").as_deref(),
        Some("0"),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());

    // Accepted credentials: live and ready.
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    wait_until("ready", T, || async { rig.readyz().await.0 == 200 }).await;
    assert_live(&rig).await;
    let metrics = rig.metrics().await;
    assert_eq!(
        series(&metrics, "tunnelgate_readiness").as_deref(),
        Some("1"),
        "{metrics}"
    );
    let head = |name: &str| format!("# TYPE {name} gauge");
    assert!(
        metrics.contains(&head("tunnelgate_liveness")) && metrics.contains(&head("tunnelgate_readiness")),
        "{metrics}"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}
