//! The offline commands in an operator's shell that holds none of the configuration's
//! secrets: `latch show`, `latch clear`, `receipts` and `support-bundle` run with an
//! empty environment against a configuration whose API key, a header value and the etcd
//! password are unset `env:` references and another header a `file:` that does not
//! exist. They read only local files and never fail on those references; `check` and
//! `doctor`, which need every secret, still exit 78 naming the variable.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{free_port, CliRun, Gateway};

const T: Duration = Duration::from_secs(30);

const LATCHED: &str = r#"{"schema_version":1,"tunnelgate_version":"0.1.0","fatal":{"category":"ack_not_found","exit_code":82,"request_id":"req_offline_1","channel":"main","method":"tools/call","latched_at":"2026-01-02T03:04:05Z","persisted":true}}"#;

const INTENT: &str = r#"{"schema_version":1,"tunnelgate_version":"0.1.0","intent":{"request_id":"req_offline_2","channel":"main","method":"tools/call","instance_id":"inst_1","written_at":"2026-01-02T03:04:05Z"}}"#;

const RECEIPT: &str = r#"{"schema_version":1,"request_id":"req_offline_3","channel":"main","command_type":"jsonrpc","method":"tools/call","leg_outcome":"answered","delivery_outcome":"not_found","message":null,"attempts":1,"received_at":"2026-01-02T03:04:05.000Z","finished_at":"2026-01-02T03:04:06.000Z","strict":true,"fatal_category":null}"#;

/// The `file:` secret that does not exist.
const MISSING_SECRET_FILE: &str = "/nonexistent/tunnelgate/channel-key";

/// A temporary folder holding the latch file, its intent record and the journal, and a
/// strict configuration that names them.
struct Offline {
    dir: tempfile::TempDir,
    ops_port: u16,
}

impl Offline {
    fn new() -> Offline {
        Offline {
            dir: tempfile::tempdir().unwrap(),
            ops_port: free_port(),
        }
    }

    fn latch(&self) -> PathBuf {
        self.dir.path().join("latch.json")
    }

    fn intent(&self) -> PathBuf {
        self.dir.path().join("latch.intent.json")
    }

    fn journal(&self) -> PathBuf {
        self.dir.path().join("receipts.jsonl")
    }

    /// Every secret a reference nothing here resolves; `coordination` appends an etcd
    /// backend whose password is one more.
    fn config(&self, coordination: bool) -> String {
        let etcd = if coordination {
            "[coordination]\nbackend = \"etcd\"\n[coordination.etcd]\nendpoints = [\"http://127.0.0.1:9\"]\n\
             username = \"tunnelgate\"\npassword = \"env:ETCD_PASSWORD\"\n"
        } else {
            ""
        };
        format!(
            r#"
[control_plane]
base_url = "http://127.0.0.1:9"
tunnel_id = "tunnel_offline"
api_key = "env:CONTROL_PLANE_API_KEY"

[control_plane.headers]
X-Gateway-Key = "env:GATEWAY_HEADER_KEY"

[mcp.channels.main]
url = "http://127.0.0.1:9/mcp"

[mcp.channels.main.headers]
X-Channel-Key = "file:{MISSING_SECRET_FILE}"

[strict]
enabled = true
latch_file = "{latch}"

[ops]
listen = "127.0.0.1:{ops}"
{etcd}"#,
            latch = self.latch().display(),
            ops = self.ops_port,
        )
    }

    async fn run(&self, args: &[&str], coordination: bool) -> CliRun {
        Gateway::cli_in_empty_env(args, &self.config(coordination), T).await
    }
}

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

#[tokio::test]
async fn latch_show_offline_needs_no_secret_with_no_latch_and_with_one() {
    let o = Offline::new();
    let run = o.run(&["latch", "show"], false).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!("no latch at {}", o.latch().display())),
        "{}",
        run.stdout
    );

    std::fs::write(o.latch(), LATCHED).unwrap();
    std::fs::write(o.intent(), INTENT).unwrap();
    let run = o.run(&["latch", "show"], false).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("ack_not_found"), "{}", run.stdout);
    assert!(run.stdout.contains("req_offline_1"), "{}", run.stdout);
    assert!(
        run.stdout.contains("unsettled write-ahead intent") && run.stdout.contains("req_offline_2"),
        "{}",
        run.stdout
    );
    assert_eq!(run.stderr, "", "nothing to warn about");
}

#[tokio::test]
async fn latch_clear_offline_needs_no_secret_and_removes_the_latch_and_its_intent() {
    let o = Offline::new();
    std::fs::write(o.latch(), LATCHED).unwrap();
    std::fs::write(o.intent(), INTENT).unwrap();
    let run = o.run(&["latch", "clear", "--yes"], false).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!("cleared {}", o.latch().display())),
        "{}",
        run.stdout
    );
    assert!(!o.latch().exists() && !o.intent().exists());
}

#[tokio::test]
async fn receipts_offline_needs_no_secret_and_lists_the_journal() {
    let o = Offline::new();
    std::fs::write(o.journal(), format!("{RECEIPT}\n")).unwrap();
    let run = o.run(&["receipts"], false).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("req_offline_3"), "{}", run.stdout);
    assert!(run.stdout.contains("not_found"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains(&format!("1 of 1 receipts in {}", o.journal().display())),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn support_bundle_offline_with_the_gateway_down_marks_each_unresolved_secret() {
    let o = Offline::new();
    std::fs::write(o.latch(), LATCHED).unwrap();
    std::fs::write(o.journal(), format!("{RECEIPT}\n")).unwrap();
    let out = o.dir.path().join("offline.tar.gz");
    let run = o
        .run(&["support-bundle", "--out", &out.display().to_string()], true)
        .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("the gateway is not reachable"), "{}", run.stderr);
    let files = unpack(&out);
    let config = &files["config.toml"];
    for (key, reference) in [
        ("api_key", "env:CONTROL_PLANE_API_KEY"),
        ("X-Gateway-Key", "env:GATEWAY_HEADER_KEY"),
        ("X-Channel-Key", &format!("file:{MISSING_SECRET_FILE}")),
        ("password", "env:ETCD_PASSWORD"),
    ] {
        let line = config
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in:\n{config}"));
        assert!(line.contains(reference) && line.contains("unresolved"), "{key}: {line}");
    }
    let manifest: Value = serde_json::from_str(&files["MANIFEST.json"]).unwrap();
    let parts = manifest["parts"].as_array().unwrap();
    let part = |name: &str| parts.iter().find(|p| p["name"] == name).unwrap().clone();
    let source = part("config.toml")["source"].as_str().unwrap().to_owned();
    assert!(
        source.contains("unresolved") && source.contains("control_plane.api_key"),
        "{source}"
    );
    assert_eq!(part("latch.json")["source"], format!("disk {}", o.latch().display()));
    assert_eq!(files["latch.json"], LATCHED);
    assert_eq!(files["receipts.jsonl"], format!("{RECEIPT}\n"));
    // What `doctor --json` says here: the configuration does not resolve.
    let doctor: Value = serde_json::from_str(&files["doctor.json"]).unwrap();
    assert_eq!(doctor["ok"], false, "{doctor}");
    assert!(doctor.to_string().contains("CONTROL_PLANE_API_KEY"), "{doctor}");
}

#[tokio::test]
async fn latch_commands_offline_with_etcd_say_the_cluster_needs_its_password_and_clear_nothing() {
    let o = Offline::new();
    std::fs::write(o.latch(), LATCHED).unwrap();
    let show = o.run(&["latch", "show"], true).await;
    assert!(show.stdout.contains("ack_not_found"), "{}", show.stdout);
    assert_eq!(show.code, 78, "{}", show.stderr);
    assert!(
        show.stderr.contains("coordination.etcd.password") && show.stderr.contains("ETCD_PASSWORD"),
        "{}",
        show.stderr
    );
    let clear = o.run(&["latch", "clear", "--yes"], true).await;
    assert_eq!(clear.code, 78, "{}", clear.stderr);
    assert!(clear.stderr.contains("coordination.etcd.password"), "{}", clear.stderr);
    assert!(
        o.latch().exists(),
        "nothing is cleared while the cluster cannot be read"
    );
}

#[tokio::test]
async fn check_and_doctor_still_exit_78_naming_the_unset_variable() {
    let o = Offline::new();
    for command in [&["check"][..], &["doctor"][..]] {
        let run = o.run(command, false).await;
        assert_eq!(run.code, 78, "{command:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("control_plane.api_key")
                && run
                    .stderr
                    .contains("environment variable CONTROL_PLANE_API_KEY is not set"),
            "{command:?}: {}",
            run.stderr
        );
    }
}
