//! `tunnelgate support-bundle` against a real gateway given canary secrets: every part
//! present with its source, no canary anywhere in the archive; a canary the gateway logged
//! is redacted or refuses the bundle; a secret in a file on disk refuses it; a gateway
//! that is down gives a bundle from disk that says so.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;
use tunnelgate_test_peers::Pki;

use crate::harness::{http_client, secrets_in, wait_until, CliRun, Gateway, Rig, RigOptions, KEY};

const T: Duration = Duration::from_secs(30);

const PAYLOAD_CANARY: &str = "PAYLOAD-CANARY-6613";
const CMD_HEADER_CANARY: &str = "CMD-HEADER-CANARY-6614";
const CP_HEADER_CANARY: &str = "CP-HEADER-CANARY-6615";
const MCP_HEADER_CANARY: &str = "MCP-HEADER-CANARY-6616";
const PROXY_PASSWORD_CANARY: &str = "PROXY-PASS-CANARY-6617";

/// The first terminal POST is answered 404: one `not_found` receipt in the journal.
const FAULTS: &str = "[[rule]]\nmatch = { order = 1, resp_type = \"terminal\" }\nstatus = 404\n";

/// The archive's files by name.
fn unpack(path: &Path) -> BTreeMap<String, String> {
    let gzip = flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap());
    let mut archive = tar::Archive::new(gzip);
    let mut files = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mut body = String::new();
        entry.read_to_string(&mut body).unwrap();
        files.insert(name, body);
    }
    files
}

/// The manifest's entries by part name.
fn manifest(files: &BTreeMap<String, String>) -> (Value, BTreeMap<String, Value>) {
    let doc: Value = serde_json::from_str(&files["MANIFEST.json"]).unwrap();
    let parts = doc["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_owned(), p.clone()))
        .collect();
    (doc, parts)
}

/// The base64 lines of a PEM key.
fn key_lines(key: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(key).unwrap();
    text.lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 16)
        .map(str::to_owned)
        .collect()
}

struct Setup {
    rig: Rig,
    config: String,
    envs: Vec<(&'static str, String)>,
    /// Every canary the archive must not carry (the key's lines among them).
    canaries: Vec<String>,
    _pki: Pki,
}

impl Setup {
    async fn new() -> Setup {
        let rig = Rig::start(FAULTS).await;
        let pki = Pki::new();
        let ca = pki.ca("ca");
        let client = pki.leaf(&ca, "client", false, 30);
        let extra = format!(
            "[control_plane.headers]\nX-Gateway-Key = \"{CP_HEADER_CANARY}\"\n\
             [control_plane.tls]\nclient_cert = \"{}\"\nclient_key = \"{}\"\n\
             [mcp.channels.main.headers]\nAuthorization = \"Bearer {MCP_HEADER_CANARY}\"\n",
            client.cert.display(),
            client.key.display()
        );
        let config = rig
            .config(&RigOptions {
                extra: &extra,
                ..RigOptions::default_mode()
            })
            .replace("log_level = \"info\"", "log_level = \"debug\"");
        // An environment proxy with credentials: loopback peers go direct, as they must.
        let envs = vec![(
            "HTTP_PROXY",
            format!("http://proxyuser:{PROXY_PASSWORD_CANARY}@127.0.0.1:9"),
        )];
        let mut canaries: Vec<String> = [
            PAYLOAD_CANARY,
            CMD_HEADER_CANARY,
            CP_HEADER_CANARY,
            MCP_HEADER_CANARY,
            PROXY_PASSWORD_CANARY,
            KEY,
            "Echo: ",
        ]
        .map(str::to_owned)
        .to_vec();
        canaries.extend(key_lines(&client.key));
        Setup {
            rig,
            config,
            envs,
            canaries,
            _pki: pki,
        }
    }

    fn envs(&self) -> Vec<(&str, &str)> {
        self.envs.iter().map(|(n, v)| (*n, v.as_str())).collect()
    }

    async fn bundle(&self, out: &Path) -> CliRun {
        let out = out.display().to_string();
        Gateway::cli(&["support-bundle", "--out", &out], Some(&self.config), &self.envs(), T).await
    }

    /// No canary in `text`, by the literal list and as the bundle's scan looks (JSON
    /// escapes, key and credential shapes: [`secrets_in`]).
    fn assert_clean(&self, name: &str, text: &str) {
        for canary in &self.canaries {
            assert!(
                !text.contains(canary.as_str()),
                "{canary:?} leaked into {name}:\n{text}"
            );
        }
        let found = secrets_in(text, &self.canaries);
        assert!(found.is_empty(), "{name}: {found:?}");
    }

    fn ops(&self) -> String {
        format!("http://127.0.0.1:{}", self.rig.ops_port)
    }

    async fn events(&self) -> Value {
        let url = format!("{}/events", self.ops());
        http_client().get(url).send().await.unwrap().json().await.unwrap()
    }
}

/// A command of an unknown type with `request_id`: the gateway logs a warning in the
/// command's span, which carries the id as the log shows it.
fn unknown_type(setup: &Setup, request_id: &str, command_type: &str) {
    setup.rig.sim.enqueue_raw(json!({
        "request_id": request_id, "shard_token": "shard_planted",
        "command_type": command_type, "created_at": "t"
    }));
}

async fn wait_unknown_warnings(setup: &Setup, n: usize) {
    wait_until("the unknown command types in /events", T, || async {
        let doc = setup.events().await;
        let warned = doc["events"].as_array().unwrap().iter();
        warned
            .filter(|e| e["message"].as_str().unwrap().starts_with("unknown command type"))
            .count()
            >= n
    })
    .await;
}

#[tokio::test]
async fn a_bundle_holds_every_part_with_its_source_and_no_canary_and_a_logged_secret_refuses_it() {
    let setup = Setup::new().await;
    let rig = &setup.rig;
    let mut gw = Gateway::spawn(&["run"], Some(&setup.config), &setup.envs());
    gw.wait_http_ready(&format!("{}/livez", setup.ops()), T).await;
    let call = |channel: &str| {
        rig.sim.enqueue(
            NewCommand::jsonrpc(json!({"jsonrpc":"2.0","id":"rpc-b","method":"tools/call",
                "params":{"name":"echo","arguments":{"message": PAYLOAD_CANARY}}}))
            .channel(channel)
            .header("Authorization", format!("Bearer {CMD_HEADER_CANARY}")),
        )
    };
    let not_found = call("main");
    let served = call("main");
    rig.wait("both answered", |r| {
        r.is_completed(&served) && r.responses_for(&not_found).next().is_some()
    })
    .await;
    let receipts = rig.dir.path().join("receipts.jsonl");
    wait_until("the not_found receipt", T, || async { receipts.exists() }).await;
    // Planted through the paths the redaction covers: an id and a type that carry a
    // secret among characters no id may have are logged as `<unprintable>` / `<other>`.
    unknown_type(
        &setup,
        &format!("req\n{CP_HEADER_CANARY}"),
        &format!("x {MCP_HEADER_CANARY}"),
    );
    wait_unknown_warnings(&setup, 1).await;

    let out = rig.dir.path().join("bundle.tar.gz");
    let run = setup.bundle(&out).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let files = unpack(&out);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "MANIFEST.json",
            "config.toml",
            "doctor.json",
            "events.json",
            "metrics.txt",
            "receipts.jsonl",
            "status.json",
            "version.json"
        ]
    );
    let (doc, parts) = manifest(&files);
    let ops = setup.ops();
    let source = |name: &str| parts[name]["source"].as_str().unwrap().to_owned();
    assert_eq!(source("status.json"), format!("ops listener {ops}/status"));
    assert_eq!(source("metrics.txt"), format!("ops listener {ops}/metrics"));
    assert_eq!(source("events.json"), format!("ops listener {ops}/events"));
    assert_eq!(source("receipts.jsonl"), format!("disk {}", receipts.display()));
    assert_eq!(source("doctor.json"), "in process (tunnelgate doctor --json)");
    assert!(source("config.toml").starts_with("in process (tunnelgate check --config "));
    for absent in ["latch.json", "intent.json", "receipts.jsonl.1"] {
        assert_eq!(source(absent), "absent");
        assert!(
            parts[absent]["reason"].as_str().unwrap().contains(" at "),
            "{}",
            parts[absent]
        );
    }
    for (name, body) in &files {
        if name != "MANIFEST.json" {
            assert_eq!(parts[name.as_str()]["bytes"], body.len(), "{name}");
        }
    }
    assert!(doc["gateway"].as_str().unwrap().starts_with("running"), "{doc}");
    let check = Gateway::cli(&["check"], Some(&setup.config), &setup.envs(), T).await;
    assert_eq!(
        files["config.toml"], check.stdout,
        "the configuration as `check` prints it"
    );
    let status: Value = serde_json::from_str(&files["status.json"]).unwrap();
    assert_eq!(status["mode"], "default");
    assert!(files["metrics.txt"].contains("tunnelgate_commands_received_total"));
    let events: Value = serde_json::from_str(&files["events.json"]).unwrap();
    let planted = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["message"].as_str().unwrap().starts_with("unknown command type"))
        .unwrap_or_else(|| panic!("the planted warning: {events}"));
    assert!(
        planted.to_string().contains("<unprintable>") && planted.to_string().contains("<other>"),
        "{planted}"
    );
    let doctor: Value = serde_json::from_str(&files["doctor.json"]).unwrap();
    assert!(doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "control_plane"));
    let version: Value = serde_json::from_str(&files["version.json"]).unwrap();
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        (version["build_profile"].as_str(), version["os"].as_str()),
        (Some("debug"), Some("linux"))
    );
    assert!(files["receipts.jsonl"].contains("not_found"));
    for (name, body) in &files {
        setup.assert_clean(name, body);
    }
    setup.assert_clean("stderr", &run.stderr);
    assert!(
        run.stderr.contains("support-bundle: status.json"),
        "a progress line per part: {}",
        run.stderr
    );
    assert!(run.stderr.contains("every part scanned clean"), "{}", run.stderr);

    // A secret the gateway logged as it is (an id made only of an id's characters, here
    // the API key itself): /events carries it, so the bundle is refused and names it.
    unknown_type(&setup, KEY, "teleport");
    wait_unknown_warnings(&setup, 2).await;
    let refused_out = rig.dir.path().join("refused.tar.gz");
    let run = setup.bundle(&refused_out).await;
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("refused: events.json carries the API key (control_plane.api_key); nothing was written"),
        "{}",
        run.stderr
    );
    setup.assert_clean("the refusal's stderr", &run.stderr);
    assert!(!refused_out.exists());
    let partial = std::fs::read_dir(rig.dir.path()).unwrap().flatten();
    assert!(!partial
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .any(|n| n.contains("partial")));
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0));
}

#[tokio::test]
async fn with_the_gateway_down_the_bundle_is_read_from_disk_and_a_secret_in_a_file_refuses_it() {
    let setup = Setup::new().await;
    let dir = setup.rig.dir.path();
    let receipts = dir.join("receipts.jsonl");
    let latch = setup.rig.latch_path();
    std::fs::write(&latch, "{\"category\":\"ack_timeout\"}\n").unwrap();
    // An operator's edit, say: the journal now holds a configured header's value.
    std::fs::write(&receipts, format!("{{\"note\":\"Bearer {MCP_HEADER_CANARY}\"}}\n")).unwrap();
    let out = dir.join("down.tar.gz");
    let run = setup.bundle(&out).await;
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "refused: receipts.jsonl carries a header value (mcp.channels.main.headers.Authorization) and an Authorization credential (Bearer or Basic); nothing was written"
        ),
        "{}",
        run.stderr
    );
    setup.assert_clean("the refusal's stderr", &run.stderr);
    assert!(!out.exists());

    std::fs::write(&receipts, "{\"leg_outcome\":\"abandoned\"}\n").unwrap();
    let run = setup.bundle(&out).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("the gateway is not reachable"), "{}", run.stderr);
    let files = unpack(&out);
    let (doc, parts) = manifest(&files);
    let gateway = doc["gateway"].as_str().unwrap();
    assert!(gateway.starts_with("not reachable (nothing answered at "), "{gateway}");
    assert!(
        gateway.contains("/status, /metrics and /events are absent"),
        "{gateway}"
    );
    for name in ["status.json", "metrics.txt", "events.json"] {
        assert_eq!(parts[name]["source"], "absent");
        assert!(parts[name]["reason"]
            .as_str()
            .unwrap()
            .starts_with("the gateway is not reachable"));
        assert!(!files.contains_key(name));
    }
    assert_eq!(parts["latch.json"]["source"], format!("disk {}", latch.display()));
    assert_eq!(
        parts["receipts.jsonl"]["source"],
        format!("disk {}", receipts.display())
    );
    assert_eq!(files["latch.json"], "{\"category\":\"ack_timeout\"}\n");
    for (name, body) in &files {
        setup.assert_clean(name, body);
    }

    let again = setup.bundle(&out).await;
    assert_eq!(again.code, 1);
    assert!(
        again.stderr.contains(&format!(
            "--out {}: the file exists; pass --force to replace it",
            out.display()
        )),
        "{}",
        again.stderr
    );
    let missing = dir.join("no/such/folder/b.tar.gz");
    let run = setup.bundle(&missing).await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("its folder") && run.stderr.contains("cannot be used"),
        "{}",
        run.stderr
    );
    let forced = Gateway::cli(
        &["support-bundle", "--out", &out.display().to_string(), "--force"],
        Some(&setup.config),
        &setup.envs(),
        T,
    )
    .await;
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    let unreadable = Gateway::cli(&["support-bundle", "--config", "/nonexistent/tg.toml"], None, &[], T).await;
    assert_eq!(unreadable.code, 78, "{}", unreadable.stderr);
    assert!(
        unreadable.stderr.contains("/nonexistent/tg.toml"),
        "{}",
        unreadable.stderr
    );
}

#[tokio::test]
async fn a_strict_gateway_holding_a_latch_gives_its_fatal_status_and_its_latch_file() {
    let mut setup = Setup::new().await;
    setup.config = setup
        .config
        .replace("max_concurrent = 4", "max_concurrent = 1")
        .replace("enabled = false", "enabled = true\nlatched_start = \"hold\"");
    let latch = setup.rig.latch_path();
    let persisted = r#"{"schema_version":1,"tunnelgate_version":"0.1.0","fatal":{"category":"ack_not_found","exit_code":82,"request_id":"req_1","channel":"main","method":"tools/call","latched_at":"2026-01-02T03:04:05Z","persisted":true}}"#;
    std::fs::write(&latch, persisted).unwrap();
    let mut gw = Gateway::spawn(&["run"], Some(&setup.config), &setup.envs());
    gw.wait_http_ready(&format!("{}/livez", setup.ops()), T).await;
    let out = setup.rig.dir.path().join("latched.tar.gz");
    let run = setup.bundle(&out).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let files = unpack(&out);
    let (_, parts) = manifest(&files);
    let status: Value = serde_json::from_str(&files["status.json"]).unwrap();
    assert_eq!(
        (status["mode"].as_str(), status["state"].as_str()),
        (Some("strict"), Some("fatal"))
    );
    assert_eq!(status["fatal"]["category"], "latched_previously");
    assert_eq!(files["latch.json"], persisted);
    assert_eq!(parts["latch.json"]["source"], format!("disk {}", latch.display()));
    assert_eq!(
        parts["status.json"]["source"],
        format!("ops listener {}/status", setup.ops())
    );
    for (name, body) in &files {
        setup.assert_clean(name, body);
    }
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(89));
}
