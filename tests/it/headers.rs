//! Configured headers and credentials, end to end: a real MCP server (the Python SDK's)
//! reports the headers it received, the simulator records what reached the control
//! plane; and the official client's variables that map onto configuration
//! (`MCP_EXTRA_HEADERS`, `CONTROL_PLANE_EXTRA_HEADERS`, `CONTROL_PLANE_ORGANIZATION_ID`,
//! `MCP_COMMAND`, `HEALTH_LISTEN_ADDR`) through the real binary.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::{NewCommand, Record};

use crate::harness::{final_json, free_port, peer_script, python, spawn_py_server, Gateway, PyMode, Rig, RigOptions};

const EXIT: Duration = Duration::from_secs(20);

/// `tunnelgate run` against `rig` with `envs`, once its ops listener answers.
async fn spawn_with_env(rig: &Rig, config: &str, envs: &[(&str, &str)]) -> Gateway {
    let mut gw = Gateway::spawn(&["run"], Some(config), envs);
    gw.wait_http_ready(
        &format!("http://127.0.0.1:{}/livez", rig.ops_port),
        Duration::from_secs(20),
    )
    .await;
    gw
}

/// The rig's configuration with its `[mcp.channels.main]` table replaced by `channels`.
fn with_channels(rig: &Rig, channels: &str) -> String {
    let main = format!("[mcp.channels.main]\nurl = \"{}\"\n", rig.stub.url());
    let config = rig.config(&RigOptions::default_mode());
    assert!(config.contains(&main), "the rig's main channel is where it is expected");
    config.replace(&main, channels)
}

/// `headers_seen` (tests/peers/py_server.py) on `channel`, with the caller's `headers`.
fn headers_seen(id: u64, channel: &str, headers: &[(&str, &str)]) -> NewCommand {
    let mut cmd = NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"headers_seen","arguments":{}}}),
    )
    .channel(channel);
    for (name, value) in headers {
        cmd = cmd.header(*name, *value);
    }
    cmd
}

/// The headers the server reported, from the command's final answer.
fn seen(record: &Record, id: &str) -> Value {
    let answer = final_json(record, id);
    let text = answer["resp_json"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("headers_seen answered: {answer}"));
    serde_json::from_str(text).unwrap()
}

/// Every header value the simulator received on any request, as one text.
fn control_plane_headers(record: &Record) -> String {
    let polls = record.polls.iter().flat_map(|p| p.headers.iter());
    let posts = record.responses.iter().flat_map(|r| r.headers.iter());
    let lookups = record.lookups.iter().flat_map(|l| l.headers.iter());
    polls
        .chain(posts)
        .chain(lookups)
        .map(|(n, v)| format!("{n}: {v}\n"))
        .collect()
}

#[tokio::test]
async fn a_configured_credential_reaches_its_own_channel_only_and_a_callers_header_wins() {
    let (_github, github_url) = spawn_py_server(PyMode::Stateless).await;
    let (_docs, docs_url) = spawn_py_server(PyMode::Stateless).await;
    let rig = Rig::start("").await;
    let key_file = rig.dir.path().join("docs-key");
    std::fs::write(&key_file, "docs-CRED-3\n").unwrap();
    let channels = format!(
        r#"
[mcp.channels.github]
url = "{github_url}"
headers = {{ Authorization = "env:GITHUB_MCP_AUTH", X-Team = "github-team" }}

[mcp.channels.docs]
url = "{docs_url}"
headers = {{ X-Docs-Key = "file:{}" }}
"#,
        key_file.display()
    );
    let config = with_channels(&rig, &channels);
    let envs = [
        ("GITHUB_MCP_AUTH", "Bearer gh-CRED-1"),
        ("MCP_EXTRA_HEADERS", "X-Every: every-CRED-2; X-Team: every-team"),
    ];
    let mut gw = spawn_with_env(&rig, &config, &envs).await;

    let github = rig.sim.enqueue(headers_seen(1, "github", &[]));
    let docs = rig.sim.enqueue(headers_seen(2, "docs", &[]));
    let caller = rig.sim.enqueue(headers_seen(
        3,
        "github",
        &[("Authorization", "Bearer caller-token"), ("x-team", "caller-team")],
    ));
    let rec = rig
        .wait("the three calls answered", |r| {
            r.is_completed(&github) && r.is_completed(&docs) && r.is_completed(&caller)
        })
        .await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());

    let at_github = seen(&rec, &github);
    assert_eq!(at_github["authorization"], "Bearer gh-CRED-1", "{at_github}");
    assert_eq!(
        at_github["x-team"], "github-team",
        "the channel's own wins over MCP_EXTRA_HEADERS"
    );
    assert_eq!(
        at_github["x-every"], "every-CRED-2",
        "MCP_EXTRA_HEADERS goes to every channel"
    );
    assert!(
        at_github.get("x-docs-key").is_none(),
        "another channel's header: {at_github}"
    );

    let at_docs = seen(&rec, &docs);
    assert_eq!(at_docs["x-docs-key"], "docs-CRED-3", "{at_docs}");
    assert_eq!(at_docs["x-every"], "every-CRED-2");
    assert_eq!(at_docs["x-team"], "every-team");
    assert!(at_docs.get("authorization").is_none(), "github's credential: {at_docs}");

    let with_caller = seen(&rec, &caller);
    assert_eq!(
        with_caller["authorization"], "Bearer caller-token",
        "the caller's wins: {with_caller}"
    );
    assert_eq!(with_caller["x-team"], "caller-team", "in any case: {with_caller}");
    assert_eq!(
        with_caller["x-every"], "every-CRED-2",
        "what the caller did not send is added"
    );

    let to_control_plane = control_plane_headers(&rec);
    for credential in ["gh-CRED-1", "every-CRED-2", "docs-CRED-3", "github-team"] {
        assert!(
            !to_control_plane.contains(credential),
            "{credential} reached the control plane:\n{to_control_plane}"
        );
    }
}

#[tokio::test]
async fn the_control_plane_receives_the_organization_and_its_headers_on_every_request() {
    let rig = Rig::start("").await;
    let config = rig
        .config(&RigOptions::default_mode())
        .replace("[mcp]\n", "headers = { X-Route = \"blue\" }\n\n[mcp]\n");
    let envs = [
        ("CONTROL_PLANE_ORGANIZATION_ID", "org-test-7"),
        (
            "CONTROL_PLANE_EXTRA_HEADERS",
            "X-Gateway-Key: env:GW_KEY, x-route: from-var",
        ),
        ("GW_KEY", "gw-CRED-4"),
    ];
    let mut gw = spawn_with_env(&rig, &config, &envs).await;
    let id = rig.enqueue_call("echo", json!({"message": "hi"}));
    rig.wait("the call answered", |r| r.is_completed(&id)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());

    let doctor = Gateway::cli(&["doctor"], Some(&config), &envs, EXIT).await;
    assert_eq!(doctor.code, 0, "{}\n{}", doctor.stdout, doctor.stderr);
    let rec = rig.sim.record();
    assert!(!rec.polls.is_empty() && !rec.responses.is_empty() && !rec.lookups.is_empty());
    let requests = rec
        .polls
        .iter()
        .map(|p| ("poll", &p.headers))
        .chain(rec.responses.iter().map(|r| ("response POST", &r.headers)))
        .chain(rec.lookups.iter().map(|l| ("doctor's tunnel lookup", &l.headers)));
    for (what, headers) in requests {
        let get = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("openai-organization"), Some("org-test-7"), "{what}: {headers:?}");
        assert_eq!(get("x-gateway-key"), Some("gw-CRED-4"), "{what}");
        assert_eq!(get("x-route"), Some("blue"), "{what}: the table wins over the variable");
        assert_eq!(
            get("authorization"),
            Some(format!("Bearer {}", crate::harness::KEY).as_str()),
            "{what}: the API key is untouched"
        );
    }
    for output in [&doctor.stdout, &doctor.stderr] {
        assert!(
            !output.contains("gw-CRED-4") && !output.contains("org-test-7"),
            "{output}"
        );
    }
}

#[tokio::test]
async fn a_reserved_header_exits_78_naming_the_key() {
    let rig = Rig::start("").await;
    let base = rig.config(&RigOptions::default_mode());
    let in_table = base.replace(
        "[mcp]\n",
        "headers = { Authorization = \"Bearer RESERVED-CRED\" }\n\n[mcp]\n",
    );
    let on_channel = format!("{base}\n[mcp.channels.main.headers]\nMcp-Session-Id = \"RESERVED-CRED\"\n");
    type Envs<'a> = Vec<(&'a str, &'a str)>;
    let cases: [(&str, String, Envs); 3] = [
        ("control_plane.headers.Authorization", in_table, vec![]),
        ("mcp.channels.main.headers.Mcp-Session-Id", on_channel, vec![]),
        (
            "MCP_EXTRA_HEADERS",
            base.clone(),
            vec![("MCP_EXTRA_HEADERS", "Host: RESERVED-CRED")],
        ),
    ];
    for (key, config, envs) in cases {
        for command in ["check", "run"] {
            let run = Gateway::cli(&[command], Some(&config), &envs, EXIT).await;
            assert_eq!(run.code, 78, "{command} {key}: {}", run.stderr);
            assert!(
                run.stderr.contains(&format!("invalid configuration: {key}: ")) && run.stderr.contains("is reserved"),
                "{command} names {key}: {}",
                run.stderr
            );
            assert!(!run.stderr.contains("RESERVED-CRED") && !run.stdout.contains("RESERVED-CRED"));
        }
    }
}

#[tokio::test]
async fn mcp_command_is_split_with_shell_quoting_and_runs_the_server() {
    let rig = Rig::start("").await;
    // A program whose path holds a space, that starts the Python server only when its
    // first two arguments arrive as `--flag` and `a b`.
    let bin = rig.dir.path().join("my server").join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let program = bin.join("peer");
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\n[ \"$1\" = --flag ] && [ \"$2\" = 'a b' ] || exit 3\nshift 2\nexec '{}' '{}' \"$@\"\n",
            python().display(),
            peer_script("py_server.py").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let line = format!("\"{}\" --flag 'a b' --mode \"stdio\"", program.display());
    let config = with_channels(&rig, "");
    let mut gw = spawn_with_env(&rig, &config, &[("MCP_COMMAND", &line)]).await;
    let id = rig.enqueue_call("echo", json!({"message": "quoted"}));
    let rec = rig.wait("the call answered", |r| r.is_completed(&id)).await;
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
    let answer = final_json(&rec, &id);
    assert_eq!(
        answer["resp_json"]["result"]["content"][0]["text"], "Echo: quoted",
        "{answer}"
    );
}

#[tokio::test]
async fn health_listen_addr_is_where_the_ops_listener_answers() {
    let rig = Rig::start("").await;
    let listen = format!("[ops]\nlisten = \"127.0.0.1:{}\"\n", rig.ops_port);
    let config = rig.config(&RigOptions::default_mode());
    assert!(config.contains(&listen));
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut gw = Gateway::spawn(
        &["run"],
        Some(&config.replace(&listen, "")),
        &[("HEALTH_LISTEN_ADDR", &addr)],
    );
    gw.wait_http_ready(&format!("http://{addr}/livez"), Duration::from_secs(20))
        .await;
    let status: Value = crate::harness::http_client()
        .get(format!("http://{addr}/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["schema_version"], 1, "{status}");
    assert!(
        !crate::harness::http_answers(&format!("http://127.0.0.1:{}/livez", rig.ops_port)).await,
        "nothing listens where the file would have said"
    );
    gw.sigterm();
    assert_eq!(gw.wait_exit(EXIT).await, Some(0), "{}", gw.stderr());
}
