//! `tunnelgate doctor` against the simulator and real peers: a healthy setup passes with
//! exit 0 and the JSON report, and each failure it claims to detect fails its own line
//! for the right reason (the line's name and words are asserted, and the others stay
//! `ok` where the setup lets them).

use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate::{Fatal, FatalCategory};

use crate::harness::{free_port, python, spawn_server_everything_http, CliRun, Gateway, Rig, RigOptions, KEY, TUNNEL};

const T: Duration = Duration::from_secs(30);
/// Every check's name, in the order the report prints them (for [`config`]'s channels).
const NAMES: [&str; 7] = [
    "config",
    "control_plane",
    "channel.main",
    "channel.tools",
    "latch_dir",
    "ops_listen",
    "latch_file",
];

/// The stdio echo peer, logging every line it reads to `echo.log` in the rig's directory.
fn echo_argv(rig: &Rig) -> Vec<String> {
    vec![
        python().display().to_string(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/stdio/echo.py").to_owned(),
        "--log".to_owned(),
        echo_log(rig).display().to_string(),
    ]
}

fn echo_log(rig: &Rig) -> std::path::PathBuf {
    rig.dir.path().join("echo.log")
}

/// The rig's simulator and MCP stub (`main`), the echo peer over stdio (`tools`), the
/// rig's latch path, and `ops.listen` on port 0: a free port found earlier could be taken
/// by a parallel test's process by the time doctor probes it.
fn config(rig: &Rig, strict: bool) -> String {
    format!(
        r#"
[control_plane]
base_url = "{base}"
tunnel_id = "{TUNNEL}"
api_key = "{KEY}"

[mcp]
max_concurrent = 1

[mcp.channels.main]
url = "{stub}"

[mcp.channels.tools]
command = {echo}

[strict]
enabled = {strict}
latch_file = "{latch}"

[ops]
listen = "127.0.0.1:0"
"#,
        base = rig.sim.base_url(),
        stub = rig.stub.url(),
        echo = serde_json::to_string(&echo_argv(rig)).unwrap(),
        latch = rig.latch_path().display(),
    )
}

/// `tunnelgate doctor --json ARGS...`: the run and its parsed report, whose `ok` must
/// agree with the exit code.
async fn doctor(config: &str, args: &[&str]) -> (CliRun, Value) {
    let mut argv = vec!["doctor", "--json"];
    argv.extend_from_slice(args);
    let run = Gateway::cli(&argv, Some(config), &[], T).await;
    let report: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not a JSON report ({e}):\n{}\nstderr:\n{}", run.stdout, run.stderr));
    assert_eq!(report["ok"], run.code == 0, "ok and the exit code agree: {report}");
    assert!(
        !run.stdout.contains(KEY) && !run.stderr.contains(KEY),
        "the API key is never printed"
    );
    (run, report)
}

/// The `(status, detail)` of check `name`.
fn line<'a>(report: &'a Value, name: &str) -> (&'a str, &'a str) {
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"));
    (check["status"].as_str().unwrap(), check["detail"].as_str().unwrap())
}

/// Asserts that exactly the checks in `failed` failed, each with every phrase given.
fn assert_fails(run: &CliRun, report: &Value, failed: &[(&str, &[&str])]) {
    assert_eq!(run.code, 1, "{report}\nstderr:\n{}", run.stderr);
    for check in report["checks"].as_array().unwrap() {
        let name = check["name"].as_str().unwrap();
        match failed.iter().find(|(n, _)| *n == name) {
            Some((_, phrases)) => {
                assert_eq!(check["status"], "fail", "{name}: {check}");
                let detail = check["detail"].as_str().unwrap();
                for phrase in *phrases {
                    assert!(detail.contains(phrase), "{name}: {phrase:?} not in {detail:?}");
                }
            }
            None => assert_ne!(check["status"], "fail", "only {failed:?} may fail: {check}"),
        }
    }
}

#[tokio::test]
async fn doctor_passes_a_healthy_setup_with_an_http_server_and_a_spawned_stdio_server() {
    let rig = Rig::start("").await;
    let (run, report) = doctor(&config(&rig, true), &["--spawn-stdio"]).await;
    assert_eq!(run.code, 0, "{report}\nstderr:\n{}", run.stderr);
    assert_eq!(report["ok"], true);
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES);
    for name in NAMES {
        assert_eq!(line(&report, name).0, "ok", "{name}: {report}");
    }
    assert!(line(&report, "config")
        .1
        .contains("strict mode, 2 channels (main: http, tools: stdio)"));
    assert!(line(&report, "control_plane")
        .1
        .contains("credentials accepted for tunnel tunnel_test"));
    let main = line(&report, "channel.main").1;
    assert!(
        main.contains("server tunnelgate-stub") && main.ends_with("session closed"),
        "{main}"
    );
    let tools = line(&report, "channel.tools").1;
    assert!(
        tools.contains("server tunnelgate-stdio-peer") && tools.contains("process group killed"),
        "{tools}"
    );

    // The control plane saw one metadata request with the poll's headers, and no poll.
    let record = rig.sim.record();
    assert!(record.polls.is_empty(), "doctor never polls");
    assert_eq!(record.issued(), 0);
    assert_eq!(record.lookups.len(), 1);
    let lookup = &record.lookups[0];
    assert_eq!(lookup.status, 200);
    assert_eq!(lookup.header("authorization"), Some(&*format!("Bearer {KEY}")));
    assert_eq!(lookup.header("x-tunnel-client-name"), Some("tunnelgate"));
    assert!(lookup.header("x-tunnel-client-instance-id").is_some());
    assert_eq!(
        lookup.header("x-tunnel-client-wire-protocol-version"),
        Some("2026-08-25")
    );
    assert_eq!(
        lookup.header("x-tunnel-mcp-server-info"),
        Some(r#"{"version":1,"channels":[{"name":"main"},{"name":"tools","proc_affinity":true}]}"#)
    );
    // The MCP servers saw initialize (and the HTTP session's end), nothing else.
    assert_eq!(rig.stub.count("initialize"), 1);
    assert_eq!(rig.stub.count("DELETE"), 1);
    assert_eq!(rig.stub.received(), 2);
    // The stdio server saw the runtime's own handshake (the doctor's initialize was
    // answered from that session), nothing else; the probe kills it right after, so it
    // may not have read the closing `notifications/initialized` yet.
    let echo = std::fs::read_to_string(echo_log(&rig)).unwrap();
    let lines: Vec<&str> = echo.lines().collect();
    assert!(matches!(lines.len(), 1 | 2), "{echo}");
    assert!(lines[0].contains(r#""method":"initialize""#), "{echo}");
    assert!(lines[0].contains(r#""clientInfo":{"name":"tunnelgate""#), "{echo}");
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.contains(r#""method":"notifications/initialized""#)),
        "{echo}"
    );
    // The latch-directory probe left nothing behind.
    let left: Vec<_> = std::fs::read_dir(rig.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["echo.log"]);
}

#[tokio::test]
async fn doctor_only_resolves_a_stdio_command_without_spawn_stdio_and_warns_that_default_mode_writes_no_latch() {
    let rig = Rig::start("").await;
    let run = Gateway::cli(&["doctor"], Some(&config(&rig, false)), &[], T).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), NAMES.len() + 1, "{}", run.stdout);
    let tools = lines.iter().find(|l| l.contains("channel.tools")).unwrap();
    assert!(
        tools.starts_with("ok ") && tools.contains("not started (--spawn-stdio"),
        "{tools}"
    );
    assert!(
        tools.contains(&python().display().to_string()),
        "the resolved path: {tools}"
    );
    let latch_dir = lines.iter().find(|l| l.contains("latch_dir")).unwrap();
    assert!(
        latch_dir.starts_with("warn") && latch_dir.contains("strict.enabled is false"),
        "{latch_dir}"
    );
    assert_eq!(lines.last().unwrap(), &"doctor: all 7 checks passed (1 warning)");
    assert!(!echo_log(&rig).exists(), "the stdio server was not started");
}

#[tokio::test]
async fn doctor_initializes_server_everything_over_streamable_http_and_closes_its_session() {
    let rig = Rig::start("").await;
    let (_server, url) = spawn_server_everything_http().await;
    let config = config(&rig, true).replace(&rig.stub.url(), &url);
    let (run, report) = doctor(&config, &[]).await;
    assert_eq!(run.code, 0, "{report}");
    let (status, detail) = line(&report, "channel.main");
    assert_eq!(status, "ok");
    assert!(
        detail.starts_with("initialize answered") && detail.ends_with("session closed"),
        "{detail}"
    );
    assert!(!detail.contains(&url), "no URL in details");
}

#[tokio::test]
async fn doctor_fails_the_control_plane_when_the_api_key_is_refused() {
    let rig = Rig::start("").await;
    let config = config(&rig, true).replace(KEY, "wrong-key-canary");
    let (run, report) = doctor(&config, &[]).await;
    assert_fails(
        &run,
        &report,
        &[(
            "control_plane",
            &["credentials refused (HTTP 401)", "control_plane.api_key"],
        )],
    );
    assert!(
        !run.stdout.contains("wrong-key-canary"),
        "a literal key is never printed"
    );
    assert_eq!(rig.sim.record().lookups[0].status, 401);
    assert!(rig.sim.record().polls.is_empty());
}

#[tokio::test]
async fn doctor_fails_the_control_plane_when_the_tunnel_is_unknown() {
    let rig = Rig::start("").await;
    let other = "tunnel_0123456789abcdefghijklmnopqrstuv";
    let config = config(&rig, true).replace(&format!("\"{TUNNEL}\""), &format!("\"{other}\""));
    let (run, report) = doctor(&config, &[]).await;
    assert_fails(
        &run,
        &report,
        &[(
            "control_plane",
            &["tunnel not found (HTTP 404)", "control_plane.tunnel_id", other],
        )],
    );
}

#[tokio::test]
async fn doctor_fails_the_control_plane_when_nothing_listens_at_its_address() {
    let rig = Rig::start("").await;
    let down = format!("http://127.0.0.1:{}", free_port());
    let config = config(&rig, true).replace(&rig.sim.base_url(), &down);
    let (run, report) = doctor(&config, &[]).await;
    assert_fails(
        &run,
        &report,
        &[("control_plane", &["connection refused", "control_plane.base_url"])],
    );
}

#[tokio::test]
async fn doctor_fails_an_http_channel_whose_server_is_down() {
    let rig = Rig::start("").await;
    let down = format!("http://127.0.0.1:{}/mcp", free_port());
    let config = config(&rig, true).replace(&rig.stub.url(), &down);
    let (run, report) = doctor(&config, &[]).await;
    assert_fails(
        &run,
        &report,
        &[("channel.main", &["connection refused", "mcp.channels.main.url"])],
    );
    assert!(!run.stdout.contains(&down), "no URL in details");
}

/// A loopback server answering every request with an HTML page, as a web server or a
/// proxy's landing page would at a mistyped MCP URL.
async fn web_page_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(|| async { axum::response::Html("<html><body>Welcome</body></html>") });
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

#[tokio::test]
async fn doctor_fails_http_channels_that_are_not_mcp_endpoints() {
    let rig = Rig::start("").await;
    let web = web_page_server().await;
    let missing = format!("{}/not-mcp", rig.sim.base_url());
    let config =
        config(&rig, true).replace(&rig.stub.url(), &missing) + &format!("\n[mcp.channels.web]\nurl = \"{web}\"\n");
    let (run, report) = doctor(&config, &[]).await;
    assert_fails(
        &run,
        &report,
        &[
            (
                "channel.main",
                &[
                    "HTTP 404 without a JSON-RPC answer to initialize",
                    "mcp.channels.main.url",
                ],
            ),
            ("channel.web", &["not JSON-RPC", "mcp.channels.web.url"]),
        ],
    );
}

#[tokio::test]
async fn doctor_fails_a_stdio_channel_whose_program_is_not_found() {
    let rig = Rig::start("").await;
    let config = config(&rig, true).replace(&python().display().to_string(), "tunnelgate-doctor-no-such-program");
    let (run, report) = doctor(&config, &["--spawn-stdio"]).await;
    assert_fails(
        &run,
        &report,
        &[(
            "channel.tools",
            &[
                "`tunnelgate-doctor-no-such-program` not found on the child's PATH",
                "mcp.channels.tools.command",
            ],
        )],
    );
}

#[tokio::test]
async fn doctor_fails_the_latch_directory_when_its_parent_is_a_regular_file() {
    let rig = Rig::start("").await;
    let plain = rig.dir.path().join("plain");
    std::fs::write(&plain, b"not a directory").unwrap();
    let latch = plain.join("latch.json");
    let config = config(&rig, true).replace(&rig.latch_path().display().to_string(), &latch.display().to_string());
    let (run, report) = doctor(&config, &[]).await;
    // A latch path that cannot be read also keeps a strict gateway from starting.
    assert_fails(
        &run,
        &report,
        &[
            (
                "latch_dir",
                &[
                    &format!("cannot write a file in {}", plain.display()),
                    "strict.latch_file",
                ],
            ),
            ("latch_file", &["cannot read latch file"]),
        ],
    );
    assert_eq!(std::fs::read(&plain).unwrap(), b"not a directory", "left alone");
}

#[tokio::test]
async fn doctor_fails_the_ops_address_while_a_running_gateway_holds_it() {
    let rig = Rig::start("").await;
    let mut gw = rig.spawn_gateway(&rig.config(&RigOptions::default_mode())).await;
    let held = config(&rig, false).replace("127.0.0.1:0", &format!("127.0.0.1:{}", rig.ops_port));
    let (run, report) = doctor(&held, &[]).await;
    assert_fails(
        &run,
        &report,
        &[(
            "ops_listen",
            &[&format!(
                "another process (a running gateway?) holds ops.listen (127.0.0.1:{})",
                rig.ops_port
            )],
        )],
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn doctor_fails_on_a_persisted_latch_with_its_cause_and_how_to_clear_it() {
    let rig = Rig::start("").await;
    let category = FatalCategory::AckTimeout;
    let fatal = Fatal {
        category,
        exit_code: category.exit_code(),
        request_id: Some("req_doctor".to_owned()),
        channel: Some("main".to_owned()),
        method: Some("tools/call".to_owned()),
        latched_at: "2026-01-02T03:04:05Z".to_owned(),
        persisted: true,
    };
    // The latch file as a strict gateway persists it: the document of schema_version 1
    // around the embedder's `Fatal`.
    let document = json!({"schema_version": 1, "tunnelgate_version": env!("CARGO_PKG_VERSION"), "fatal": fatal});
    std::fs::write(rig.latch_path(), serde_json::to_vec_pretty(&document).unwrap()).unwrap();
    let (run, report) = doctor(&config(&rig, true), &[]).await;
    let clear = format!("tunnelgate latch clear --latch-file {}", rig.latch_path().display());
    assert_fails(
        &run,
        &report,
        &[(
            "latch_file",
            &[
                "fatal latch: category=ack_timeout exit_code=80 request_id=req_doctor channel=main method=tools/call",
                "refuses to start (exit 89)",
                &clear,
            ],
        )],
    );
    assert!(rig.latch_path().exists(), "doctor never clears the latch");
}

#[tokio::test]
async fn doctor_exits_78_on_an_invalid_configuration_naming_the_key() {
    let rig = Rig::start("").await;
    let config = config(&rig, true).replace(&format!("tunnel_id = \"{TUNNEL}\"\n"), "");
    let (run, report) = doctor(&config, &[]).await;
    assert_eq!(run.code, 78, "{report}");
    assert_eq!(report["checks"].as_array().unwrap().len(), 1);
    let (status, detail) = line(&report, "config");
    assert_eq!(status, "fail");
    assert!(detail.contains("control_plane.tunnel_id: missing"), "{detail}");
    assert!(run.stderr.contains("control_plane.tunnel_id"), "{}", run.stderr);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(rig.sim.record().lookups.is_empty(), "nothing is contacted");
}
