//! The command line as an operator uses it: `check` on good and bad configurations,
//! `status`, and the demo.

use std::time::Duration;

use crate::harness::Gateway;

const T: Duration = Duration::from_secs(30);

const GOOD: &str = r#"
[control_plane]
tunnel_id = "tunnel_cli"
api_key = "env:CLI_TEST_KEY"
[mcp.channels.main]
url = "http://127.0.0.1:3001/mcp"
"#;

async fn check(toml: &str) -> crate::harness::CliRun {
    Gateway::cli(&["check"], Some(toml), &[("CLI_TEST_KEY", "cli-secret-canary")], T).await
}

#[tokio::test]
async fn check_prints_the_effective_configuration_with_secrets_masked() {
    let run = check(GOOD).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("env:CLI_TEST_KEY"), "{}", run.stdout);
    assert!(!run.stdout.contains("cli-secret-canary") && !run.stderr.contains("cli-secret-canary"));
    assert!(run.stdout.contains("tunnel_cli"));
}

#[tokio::test]
async fn every_bad_configuration_exits_78_naming_the_key_and_the_problem() {
    let secret_file = "/nonexistent/tunnelgate/secret";
    let cases: Vec<(String, &str, &str)> = vec![
        (
            GOOD.replace("tunnel_id = \"tunnel_cli\"\n", ""),
            "control_plane.tunnel_id",
            "missing",
        ),
        (
            format!("{GOOD}\n[strict]\nshutdown_grace = \"ten\"\n"),
            "strict.shutdown_grace",
            "duration",
        ),
        (
            format!("{GOOD}\n[mcp]\nmax_concurrent = 0\n").replace("[mcp.channels.main]", "[mcp.channels.main]"),
            "mcp.max_concurrent",
            "",
        ),
        (
            GOOD.replace("env:CLI_TEST_KEY", &format!("file:{secret_file}")),
            "control_plane.api_key",
            secret_file,
        ),
        (
            GOOD.replace("tunnel_id", "tunel_id"),
            "control_plane.tunel_id",
            "unknown",
        ),
        (
            GOOD.replace("http://127.0.0.1:3001/mcp", "127.0.0.1:3001/mcp"),
            "mcp.channels.main.url",
            "",
        ),
        (
            GOOD.replace("url = \"http://127.0.0.1:3001/mcp\"", "env = { A = \"b\" }"),
            "mcp.channels.main",
            "",
        ),
        (
            GOOD.replace(
                "url = \"http://127.0.0.1:3001/mcp\"",
                "url = \"http://127.0.0.1:3001/mcp\"\ncommand = [\"node\"]",
            ),
            "mcp.channels.main",
            "",
        ),
    ];
    for (toml, key, problem) in cases {
        let run = check(&toml).await;
        assert_eq!(run.code, 78, "config:\n{toml}\nstderr: {}", run.stderr);
        assert!(run.stderr.contains(key), "{key} not named: {}", run.stderr);
        assert!(run.stderr.contains(problem), "{problem:?} not said: {}", run.stderr);
        assert_eq!(run.stderr.trim().lines().count(), 1, "one message: {}", run.stderr);
    }
}

#[tokio::test]
async fn the_shipped_example_configuration_is_valid() {
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml")).unwrap();
    let run = Gateway::cli(&["check"], Some(&example), &[("CONTROL_PLANE_API_KEY", "k")], T).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[tokio::test]
async fn a_bad_flag_is_a_usage_error_with_exit_2() {
    let run = Gateway::cli(&["run", "--no-such-flag"], None, &[], T).await;
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--no-such-flag"));
}

#[tokio::test]
async fn status_prints_the_document_and_exits_zero_while_healthy() {
    let rig = crate::harness::Rig::start("").await;
    let mut gw = rig
        .spawn_gateway(&rig.config(&crate::harness::RigOptions::default_mode()))
        .await;
    rig.wait("a poll", |r| r.polls.len() >= 2).await;
    let url = format!("http://127.0.0.1:{}", rig.ops_port);
    let run = Gateway::cli(&["status", "--url", &url], None, &[], T).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    for key in [
        "schema_version",
        "version",
        "mode",
        "state",
        "ready",
        "fence",
        "fatal",
        "control_plane",
        "downstream",
        "commands",
    ] {
        assert!(doc.get(key).is_some(), "/status lacks {key}: {doc}");
    }
    assert_eq!(doc["mode"], "default");
    assert_eq!(doc["state"], "ready");
    assert_eq!(doc["downstream"][0]["transport"], "http");
    let ready = crate::harness::http_client()
        .get(format!("{url}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let unreachable = Gateway::cli(&["status", "--url", "http://127.0.0.1:9"], None, &[], T).await;
    assert_eq!(unreachable.code, 1);
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0));
}

#[tokio::test]
async fn readyz_says_why_when_the_control_plane_refuses_the_key() {
    let rig = crate::harness::Rig::start("").await;
    let config = rig
        .config(&crate::harness::RigOptions::default_mode())
        .replace(crate::harness::KEY, "wrong-key");
    let mut gw = rig.spawn_gateway(&config).await;
    rig.wait("a refused poll", |r| r.polls.iter().any(|p| p.status == Some(401)))
        .await;
    let url = format!("http://127.0.0.1:{}", rig.ops_port);
    let ready = crate::harness::http_client()
        .get(format!("{url}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let reason = ready.text().await.unwrap();
    assert!(reason.starts_with("not ready:"), "{reason}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let polls = rig.sim.record().polls.len();
    assert!(
        polls <= 2,
        "401 needs an operator: no tight loop ({polls} polls in 1.5 s)"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0));
}

#[tokio::test]
async fn the_demo_runs_the_whole_path_and_exits_zero() {
    let run = Gateway::cli(&["demo"], None, &[], Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    for needle in [
        "Echo: hello through the tunnel",
        "harpoon list_targets -> demo-idp-token",
        "harpoon call_target POST demo-idp-token -> HTTP 200, a Bearer token of",
        "state=\"fatal\"",
        "its caller was told: \"not delivered to the MCP server; safe to retry\"",
        "category=ack_timeout exit_code=80",
        "exit code 89",
        "cleared",
    ] {
        assert!(run.stdout.contains(needle), "{needle:?} missing:\n{}", run.stdout);
    }
}

#[tokio::test]
async fn the_simulator_refuses_a_bad_fault_script_with_exit_78() {
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults.toml");
    std::fs::write(&faults, "[[rule]]\nmatch = { tool = \"echo\" }\nstatus = 999\n").unwrap();
    let port = crate::harness::free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let run = Gateway::cli(
        &["sim", "--listen", &listen, "--faults", faults.to_str().unwrap()],
        None,
        &[],
        T,
    )
    .await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains("rule 1") && run.stderr.contains("999"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn the_simulator_says_what_it_cannot_carry_and_prints_its_summary_on_sigterm() {
    let help = Gateway::cli(&["sim", "--help"], None, &[], T).await;
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("answered 405"), "{}", help.stdout);
    assert!(help.stdout.contains("SIGTERM"), "{}", help.stdout);

    let listen = format!("127.0.0.1:{}", crate::harness::free_port());
    let mut sim = Gateway::spawn(&["sim", "--listen", &listen], None, &[]);
    crate::harness::wait_until("the simulator to listen", T, || async {
        sim.stdout().contains("sim listening on")
    })
    .await;
    let ingress = format!("http://{listen}/v1/mcp/tunnel_local");
    let get = crate::harness::http_client().get(&ingress).send().await.unwrap();
    assert_eq!(get.status(), 405);
    assert_eq!(get.headers()["allow"], "POST, DELETE");
    sim.sigterm();
    assert_eq!(sim.wait_exit(T).await, Some(0), "{}", sim.stderr());
    assert!(
        sim.stdout().contains("sim stopped: 0 commands issued"),
        "{}",
        sim.stdout()
    );
}

/// `--max-response-body` drills a result too large for the tunnel: a larger response POST
/// is answered `413` with the contract's code; zero is refused as usage.
#[tokio::test]
async fn the_simulators_response_body_bound_is_a_flag_and_a_larger_post_gets_413() {
    let run = Gateway::cli(&["sim", "--max-response-body", "0"], None, &[], T).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("--max-response-body") && run.stderr.contains("0 is not in 1.."),
        "{}",
        run.stderr
    );
    let listen = format!("127.0.0.1:{}", crate::harness::free_port());
    let mut sim = Gateway::spawn(&["sim", "--listen", &listen, "--max-response-body", "64"], None, &[]);
    crate::harness::wait_until("the simulator to listen", T, || async {
        sim.stdout().contains("sim listening on")
    })
    .await;
    let post = |body: String| {
        crate::harness::http_client()
            .post(format!("http://{listen}/v1/tunnels/tunnel_local/response"))
            .bearer_auth("dev-key")
            .header("x-tunnel-shard-token", "shard")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let large = post(format!("{{\"request_id\":\"req_1\",\"pad\":\"{}\"}}", "x".repeat(100)))
        .await
        .unwrap();
    assert_eq!(large.status(), 413);
    let doc: serde_json::Value = large.json().await.unwrap();
    assert_eq!(doc["error"]["code"], "request_body_too_large", "{doc}");
    let small = post("{}".to_owned()).await.unwrap();
    assert_ne!(small.status(), 413, "a body within the bound is read");
    sim.sigterm();
    assert_eq!(sim.wait_exit(T).await, Some(0), "{}", sim.stderr());
}

#[tokio::test]
async fn a_log_filter_whose_bare_word_is_not_a_level_exits_78_naming_the_key_and_the_directive() {
    // Found in a trial: "nonsense" parsed as a target name and silenced every log line.
    let env = [("CLI_TEST_KEY", "cli-secret-canary")];
    for command in ["check", "run"] {
        let run = Gateway::cli(&[command, "--log-level", "nonsense"], Some(GOOD), &env, T).await;
        assert_eq!(run.code, 78, "{command}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("telemetry.log_level: \"nonsense\": directive \"nonsense\" is not a level name"),
            "{command}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("(set by a command-line flag)"), "{}", run.stderr);
    }
    let in_file = GOOD.to_owned() + "[telemetry]\nlog_level = \"info,verbose\"\n";
    let run = check(&in_file).await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains("directive \"verbose\""), "{}", run.stderr);
    let run = Gateway::cli(&["check", "--log-level", "tunnelgate=debug,WARN"], Some(GOOD), &env, T).await;
    assert_eq!(run.code, 0, "target=level stays valid: {}", run.stderr);
}

/// A FIFO with no writer: opening it for reading would wait forever.
fn fifo(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    path
}

#[tokio::test]
async fn a_fifo_as_config_or_secret_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = fifo(dir.path());
    let shown = fifo.display().to_string();
    // `Gateway::cli` panics if the command is still running after its bound.
    let bound = Duration::from_secs(10);
    for command in ["check", "run"] {
        let run = Gateway::cli(&[command, "--config", &shown], None, &[], bound).await;
        assert_eq!(run.code, 78, "{command}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "{shown}: cannot read config file: it is a FIFO (named pipe), not a regular file"
            )),
            "{command}: {}",
            run.stderr
        );
    }
    let secret = GOOD.replace("env:CLI_TEST_KEY", &format!("file:{shown}"));
    for command in ["check", "run"] {
        let run = Gateway::cli(&[command], Some(&secret), &[], bound).await;
        assert_eq!(run.code, 78, "{command}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "control_plane.api_key: cannot read secret file {shown}: it is a FIFO (named pipe), not a regular file"
            )),
            "{command}: {}",
            run.stderr
        );
    }
    let run = Gateway::cli(&["check", "--config", dir.path().to_str().unwrap()], None, &[], bound).await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains("it is a directory, not a regular file"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn status_says_nothing_listens_and_names_a_bad_urls_problem() {
    let port = crate::harness::free_port();
    let run = Gateway::cli(&["status", "--url", &format!("http://127.0.0.1:{port}")], None, &[], T).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        run.stderr.trim(),
        format!("tunnelgate: no gateway is listening at http://127.0.0.1:{port}/status")
    );
    // A port that takes the connection (the kernel's backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let run = Gateway::cli(&["status", "--url", &silent_url], None, &[], T).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        run.stderr.trim(),
        format!("tunnelgate: no gateway answered at {silent_url}/status: no answer within 5s")
    );
    for (url, problem) in [
        (
            "127.0.0.1:9464",
            "is not a URL: it has no scheme; write e.g. \"http://127.0.0.1:9464\"",
        ),
        (
            "localhost:9464",
            "is not a URL: it has no scheme; write e.g. \"http://localhost:9464\"",
        ),
        ("http://", "is not a URL: empty host"),
        ("http://127.0.0.1:99999", "is not a URL: invalid port number"),
        (
            "ftp://127.0.0.1:9464",
            "must start with http:// or https:// (found ftp:)",
        ),
    ] {
        let run = Gateway::cli(&["status", "--url", url], None, &[], T).await;
        assert_eq!(run.code, 1, "{url}: {}", run.stderr);
        assert!(
            run.stderr.starts_with(&format!("tunnelgate: --url {url:?} {problem}")),
            "{url}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("builder error"), "{}", run.stderr);
    }
}

#[tokio::test]
async fn with_latched_start_hold_status_shows_the_latchs_own_time() {
    use crate::harness::{Rig, RigOptions};
    let rig = Rig::start("[[rule]]\nmatch = { tool = \"echo\", resp_type = \"terminal\" }\nstatus = 404\n").await;
    let mut first = rig.spawn_gateway(&rig.config(&RigOptions::default())).await;
    rig.enqueue_call("echo", serde_json::json!({"message": "latch"}));
    assert_eq!(first.wait_exit(T).await, Some(82), "{}", first.stderr());
    // An hour-old latch: its time cannot be mistaken for the restart's.
    let mut latch: serde_json::Value = serde_json::from_slice(&std::fs::read(rig.latch_path()).unwrap()).unwrap();
    let then = "2026-01-02T03:04:05Z";
    latch["fatal"]["latched_at"] = then.into();
    std::fs::write(rig.latch_path(), latch.to_string()).unwrap();

    let config = rig
        .config(&RigOptions::default())
        .replace("[strict]\n", "[strict]\nlatched_start = \"hold\"\n");
    let mut held = rig.spawn_gateway(&config).await;
    let status = rig.status().await;
    assert_eq!(status["fatal"]["category"], "latched_previously", "{status}");
    assert_eq!(status["fatal"]["latched_at"], then, "{status}");
    assert_eq!(status["fatal"]["persisted"], true, "{status}");
    let url = format!("http://127.0.0.1:{}", rig.ops_port);
    let run = Gateway::cli(&["status", "--url", &url], None, &[], T).await;
    assert_eq!(run.code, 89, "{}", run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["fatal"]["latched_at"], then, "{doc}");
    held.sigterm();
    assert_eq!(held.wait_exit(T).await, Some(89), "{}", held.stderr());
}

/// Runs the binary with `args` and a stderr whose reader is already gone (every write to
/// it fails with EPIPE); returns its exit code.
async fn exit_code_with_stderr_gone(args: &[&str]) -> Option<i32> {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tunnelgate"))
        .args(args)
        .env_remove("TUNNELGATE_STRICT__ENABLED")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(writer)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn with_its_stderr_reader_gone_the_exit_code_still_says_why() {
    // Found while testing SIGPIPE: `eprintln!` panics on EPIPE, so a configuration error
    // ended 101, and a strict start into a latch too, instead of 78 and 89.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, GOOD.replace("env:CLI_TEST_KEY", "literal-key")).unwrap();
    let config = config.to_str().unwrap();
    assert_eq!(
        exit_code_with_stderr_gone(&["check", "--config", config, "--log-level", "nonsense"]).await,
        Some(78)
    );
    let latch = dir.path().join("latch.json");
    let latched = r#"{"schema_version":1,"tunnelgate_version":"0.1.0","fatal":{"category":"ack_not_found","exit_code":82,"request_id":"req_1","channel":"main","method":"tools/call","latched_at":"2026-01-02T03:04:05Z","persisted":true}}"#;
    std::fs::write(&latch, latched).unwrap();
    let args = [
        "run",
        "--strict",
        "--config",
        config,
        "--latch-file",
        latch.to_str().unwrap(),
    ];
    assert_eq!(exit_code_with_stderr_gone(&args).await, Some(89));
}
