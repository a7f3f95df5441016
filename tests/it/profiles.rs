//! The official client's YAML profiles through the real binary: a profile of each
//! configuration version with every setting the official documentation lists (hosts
//! replaced by the rig's simulator and MCP stub, a real forward proxy, a private PKI made
//! here), converted with `tunnelgate profile convert`, checked, and served both from the
//! printed TOML and read directly (`TUNNEL_CLIENT_PROFILE_FILE`, `--profile`); a profile
//! with settings tunnelgate cannot take refused with exit 78 naming every one; and the
//! PID file and ops URL file, present while the gateway runs and gone once it stops (by
//! SIGTERM, or a strict-mode latch). No secret value reaches any output.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::NewCommand;
use tunnelgate_test_peers::{Pair, Pki};

use crate::harness::{
    final_json, http_client, server_everything_stdio_argv, wait_for, Gateway, Rig, RigOptions, KEY, TUNNEL,
};
use crate::proxy::{Tinyproxy, TinyproxyOptions};

const T: Duration = Duration::from_secs(30);
const CP_HEADER: &str = "cp-header-canary-9d1";
const MCP_HEADER: &str = "mcp-header-canary-4b2";
const CASE_AUTH: &str = "case-auth-canary-7e5";
const CF_TOKEN: &str = "cf-token-canary-3a8";
const CANARIES: [&str; 5] = [KEY, CP_HEADER, MCP_HEADER, CASE_AUTH, CF_TOKEN];

/// Every setting the official documentation lists for a profile, as `Setup::profile`
/// fills it in; `{template}` is where version 2 adds a target template.
const PROFILE: &str = r#"config_version: {version}
ca_bundle: env:PROFILE_CA_BUNDLE
http_proxy: env:PROFILE_PROXY
control_plane:
  base_url: env:PROFILE_CP_URL
  url_path: /
  tunnel_id: {tunnel}
  organization_id: org-profiles
  api_key: env:CONTROL_PLANE_API_KEY
  client_cert: {cert}
  client_key: file:{key}
  http_proxy: env:PROFILE_PROXY
  max_inflight_requests: 20
  poll_timeout: 1000ms
  poll_deadline_guardrail: 5000ms
  poll_channels: [harpoon, main, tools]
  extra_headers:
    X-Internal-Auth: env:CP_HEADER_VALUE
log:
  level: info
  format: json
  file: ""
  http_raw_unsafe: false
health:
  listen_addr: 127.0.0.1:0
  url_file: {dir}/health-url
  show_details: true
admin_ui:
  allow_remote: false
  open_browser: false
  log_buffer_events: 2000
process:
  pid_file: {dir}/tunnel-client.pid
mcp:
  server_urls:
    - channel: main
      url: env:PROFILE_MCP_URL
      http_proxy: env:PROFILE_PROXY
      client_cert: {cert}
      client_key: {key}
  commands:
    - channel: tools
      command: "{stdio}"
  http_proxy: env:PROFILE_PROXY
  client_cert: {cert}
  client_key: {key}
  extra_headers:
    X-Mcp-Auth: env:MCP_HEADER_VALUE
  discovery_extra_headers: {}
  startup_wait_timeout: 0s
  stdio_send_initialized_notification: false
  connection_max_ttl: 10m
  max_concurrent_requests: 10
  oauth_trusted_origins: [https://login.example.com]
harpoon:
  targets:
    - label: auth
      url: https://auth.example.com/token
      description: Auth server
{template}  allow_plaintext_http: false
  max_response_bytes: 102400
  max_redirects: 5
  http_proxy: env:PROFILE_PROXY
  additional_transports: []
  capture_payloads: false
  hosts_include_suffix: [internal]
  hosts_include_regex: []
  hosts_include_loopback: true
  hosts_include_private: true
proxy:
  check_interval: 60s
"#;

/// The target template of the version 2 profile (upstream's documented example).
const TEMPLATE: &str = r#"    - label: get_case_status
      description: Get the status of one case
      template:
        version: 1
        origin: https://cases.example
        method: GET
        path_template: /casestatus/{case_id}
        query:
          complaints: "true"
        parameters:
          case_id:
            type: string
            required: true
            description: the case number
            examples: [CASE-1]
            pattern: '^[A-Za-z0-9_-]+$'
            min_length: 1
            max_length: 64
            reserved_values: [all, search, admin]
        headers:
          Authorization: env:CASE_API_AUTHORIZATION
        allowed_headers: [Accept]
        follow_redirects: false
"#;

/// The rig, a folder for the profile and the files the gateway writes, a private PKI
/// (the CA bundle and the client certificates the profile names) and a forward proxy.
struct Setup {
    rig: Rig,
    dir: tempfile::TempDir,
    ca: Pair,
    client: Pair,
    proxy: Tinyproxy,
    _pki: Pki,
}

impl Setup {
    async fn start() -> Setup {
        let pki = Pki::new();
        let ca = pki.ca("profile-ca");
        let client = pki.leaf(&ca, "profile-client", false, 30);
        Setup {
            rig: Rig::start("").await,
            dir: tempfile::tempdir().unwrap(),
            ca,
            client,
            proxy: Tinyproxy::start(TinyproxyOptions::default()).await,
            _pki: pki,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The variables the profile references, with their (canary) values.
    fn env(&self) -> Vec<(String, String)> {
        [
            ("CONTROL_PLANE_API_KEY", KEY.to_owned()),
            ("PROFILE_CA_BUNDLE", self.ca.cert.display().to_string()),
            ("PROFILE_PROXY", self.proxy.url()),
            ("PROFILE_CP_URL", self.rig.sim.base_url()),
            ("PROFILE_MCP_URL", self.rig.stub.url()),
            ("CP_HEADER_VALUE", CP_HEADER.to_owned()),
            ("MCP_HEADER_VALUE", MCP_HEADER.to_owned()),
            ("CASE_API_AUTHORIZATION", format!("Bearer {CASE_AUTH}")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The profile: every key of `fileConfig` that tunnelgate can take (the ones without
    /// an equivalent at their official defaults), and under version 2 a target template.
    fn profile(&self, version: u8) -> String {
        let stdio = server_everything_stdio_argv()
            .iter()
            .map(|word| format!("'{word}'"))
            .collect::<Vec<_>>()
            .join(" ");
        PROFILE
            .replace("{version}", &version.to_string())
            .replace("{template}", if version == 2 { TEMPLATE } else { "" })
            .replace("{tunnel}", TUNNEL)
            .replace("{cert}", &self.client.cert.display().to_string())
            .replace("{key}", &self.client.key.display().to_string())
            .replace("{dir}", &self.dir.path().display().to_string())
            .replace("{stdio}", &stdio)
    }

    /// Writes `text` as `NAME.yaml` in the folder; its path.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(&format!("{name}.yaml"));
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn assert_no_secret(what: &str, text: &str) {
    for canary in CANARIES {
        assert!(!text.contains(canary), "{what} shows a secret ({canary}):\n{text}");
    }
}

/// `tunnelgate profile convert` of `profile`: the TOML it printed (exit 0).
async fn convert(profile: &Path, env: &[(String, String)]) -> String {
    let file = profile.display().to_string();
    let run = Gateway::cli(&["profile", "convert", &file], None, &pairs(env), T).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_no_secret("profile convert", &format!("{}{}", run.stdout, run.stderr));
    run.stdout
}

/// A running gateway from a profile: its URL file's URL answers `/healthz`, its PID file
/// holds its pid, a `tools/call` is answered on the HTTP channel (through the proxy) and
/// on the stdio one, harpoon lists the targets; then SIGTERM ends it with exit 0 and
/// both files are gone.
async fn serves_and_stops(setup: &Setup, mut gw: Gateway, labels: &[&str]) -> String {
    let url_file = setup.path("health-url");
    let pid_file = setup.path("tunnel-client.pid");
    let url = wait_for("the ops URL file", T, || async {
        std::fs::read_to_string(&url_file).ok()
    })
    .await;
    assert!(url.starts_with("http://127.0.0.1:") && !url.ends_with('\n'), "{url:?}");
    assert_ne!(url, "http://127.0.0.1:0", "the bound port");
    gw.wait_http_ready(&format!("{url}/livez"), T).await;
    let healthz = http_client().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(healthz.text().await.unwrap(), "live");
    assert_eq!(std::fs::read_to_string(&pid_file).unwrap(), format!("{}\n", gw.pid()));

    let echo = setup.rig.enqueue_call("echo", json!({"message": "from a profile"}));
    let piped = setup
        .rig
        .sim
        .enqueue(call("echo", json!({"message": "over a pipe"})).channel("tools"));
    let listed = setup
        .rig
        .sim
        .enqueue(call("list_targets", json!({})).channel("harpoon"));
    let rec = setup
        .rig
        .wait("the calls answered", |r| {
            [&echo, &piped, &listed].iter().all(|id| r.is_completed(id))
        })
        .await;
    let text = |id: &str| final_json(&rec, id)["resp_json"]["result"]["content"][0]["text"].clone();
    assert_eq!(text(&echo), "Echo: from a profile");
    assert_eq!(text(&piped), "Echo: over a pipe");
    let targets = final_json(&rec, &listed)["resp_json"]["result"]["structuredContent"]["targets"].clone();
    let listed: Vec<&str> = targets
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["label"].as_str())
        .collect();
    assert_eq!(listed, labels, "{targets}");
    let poll = rec.polls.last().unwrap();
    assert_eq!(
        poll.header("x-internal-auth"),
        Some(CP_HEADER),
        "control_plane.extra_headers"
    );
    assert_eq!(poll.header("openai-organization"), Some("org-profiles"));
    let stub = setup.rig.stub.url();
    assert!(
        setup.proxy.requests().iter().any(|r| r.contains(&stub)),
        "the MCP call went through http_proxy: {:?}",
        setup.proxy.requests()
    );

    gw.sigterm();
    assert_eq!(gw.wait_exit(T).await, Some(0), "{}", gw.stderr());
    assert!(!url_file.exists(), "the URL file is removed on SIGTERM");
    assert!(!pid_file.exists(), "the PID file is removed on SIGTERM");
    let output = format!("{}{}", gw.stdout(), gw.stderr());
    assert_no_secret("the gateway's log", &output);
    output
}

fn call(tool: &str, args: Value) -> NewCommand {
    NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":format!("rpc-{tool}"),"method":"tools/call","params":{"name":tool,"arguments":args}}),
    )
}

/// Converts the profile of `version`, checks the TOML, then serves from the TOML and
/// from the profile read directly (`direct`: the selector's variables or flags).
async fn profile_end_to_end(version: u8, direct: impl Fn(&Path) -> (Vec<String>, Vec<(String, String)>)) {
    let setup = Setup::start().await;
    let env = setup.env();
    let profile = setup.write("prod", &setup.profile(version));
    let toml = convert(&profile, &env).await;
    assert!(toml.contains(&format!("(config_version {version})")), "{toml}");
    for note in [
        "control_plane.poll_deadline_guardrail",
        "mcp.connection_max_ttl",
        "proxy.check_interval",
        "admin_ui.open_browser",
    ] {
        assert!(toml.contains(&format!("# - {note}")), "a comment names {note}:\n{toml}");
    }
    let check = Gateway::cli(&["check"], Some(&toml), &pairs(&env), T).await;
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert_no_secret("check", &format!("{}{}", check.stdout, check.stderr));
    let labels: &[&str] = if version == 2 {
        &["auth", "get_case_status"]
    } else {
        &["auth"]
    };

    let from_toml = Gateway::spawn(&["run"], Some(&toml), &pairs(&env));
    serves_and_stops(&setup, from_toml, labels).await;

    let (args, mut direct_env) = direct(&profile);
    direct_env.extend(env.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut check_args = vec!["check"];
    check_args.extend(&args[1..]);
    let check = Gateway::cli(&check_args, None, &pairs(&direct_env), T).await;
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(
        check.stdout.contains("# read from the official client's profile"),
        "{}",
        check.stdout
    );
    let log = serves_and_stops(&setup, Gateway::spawn(&args, None, &pairs(&direct_env)), labels).await;
    assert!(
        log.contains("configuration read from the official client's profile"),
        "{log}"
    );
}

#[tokio::test]
async fn a_version_1_profile_with_every_setting_converts_checks_and_serves_from_toml_and_directly() {
    profile_end_to_end(1, |profile| {
        let var = ("TUNNEL_CLIENT_PROFILE_FILE".to_owned(), profile.display().to_string());
        (vec!["run".to_owned()], vec![var])
    })
    .await;
}

#[tokio::test]
async fn a_version_2_profile_with_a_template_converts_checks_and_serves_from_toml_and_by_name() {
    profile_end_to_end(2, |profile| {
        let dir = profile.parent().unwrap().display().to_string();
        let args = ["run", "--profile", "prod", "--profile-dir", &dir].map(str::to_owned);
        (args.to_vec(), Vec::new())
    })
    .await;
}

#[tokio::test]
async fn a_version_2_profile_is_read_directly_from_its_variable_too() {
    let setup = Setup::start().await;
    let mut env = setup.env();
    let profile = setup.write("prod", &setup.profile(2));
    env.push(("TUNNEL_CLIENT_PROFILE_FILE".to_owned(), profile.display().to_string()));
    let gw = Gateway::spawn(&["run"], None, &pairs(&env));
    serves_and_stops(&setup, gw, &["auth", "get_case_status"]).await;
}

#[tokio::test]
async fn a_profile_with_cloudflared_a_log_file_or_a_health_socket_is_refused_with_exit_78_naming_every_key() {
    let setup = Setup::start().await;
    let mut env = setup.env();
    env.push(("CF_TOKEN".to_owned(), CF_TOKEN.to_owned()));
    let text = setup
        .profile(1)
        .replace("  file: \"\"\n", "  file: /var/log/tunnel-client.ndjson\n")
        + "cloudflared:\n  token: env:CF_TOKEN\n  managed: true\n"
        + &format!("# {CF_TOKEN}\n");
    let text = text.replace(
        "  show_details: true\n",
        "  show_details: true\n  unix_socket: /run/tc-health.sock\n",
    );
    let profile = setup.write("refused", &text);
    let keys = [
        "log.file",
        "health.unix_socket",
        "cloudflared.token",
        "cloudflared.managed",
    ];

    let file = profile.display().to_string();
    let run = Gateway::cli(&["profile", "convert", &file], None, &pairs(&env), T).await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert_eq!(run.stdout, "", "no TOML is printed");
    for key in keys {
        assert!(
            run.stderr.contains(&format!("refused {key}: ")),
            "{key}:\n{}",
            run.stderr
        );
    }
    assert!(
        run.stderr.contains("redirect stderr"),
        "what to do for log.file:\n{}",
        run.stderr
    );
    assert_no_secret("profile convert", &run.stderr);

    env.push(("TUNNEL_CLIENT_PROFILE_FILE".to_owned(), file));
    for command in ["check", "run"] {
        let run = Gateway::cli(&[command], None, &pairs(&env), T).await;
        assert_eq!(run.code, 78, "{command}: {}", run.stderr);
        for key in keys {
            assert!(run.stderr.contains(key), "{command} names {key}:\n{}", run.stderr);
        }
        assert_no_secret(command, &format!("{}{}", run.stdout, run.stderr));
    }
    assert!(
        !setup.path("tunnel-client.pid").exists(),
        "a refused profile never starts"
    );
}

#[tokio::test]
async fn two_selectors_are_an_error_and_tunnelgates_own_file_outranks_one_with_a_warning() {
    let setup = Setup::start().await;
    let profile = setup.write("prod", &setup.profile(1)).display().to_string();
    let env = [
        ("TUNNEL_CLIENT_PROFILE_FILE", profile.as_str()),
        ("TUNNEL_CLIENT_PROFILE", "prod"),
    ];
    let run = Gateway::cli(&["check"], None, &env, T).await;
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("TUNNEL_CLIENT_PROFILE and TUNNEL_CLIENT_PROFILE_FILE"),
        "{}",
        run.stderr
    );
    let own = setup.rig.config(&RigOptions::default_mode());
    let run = Gateway::cli(&["check"], Some(&own), &env[..1], T).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr.matches("warning:").count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("TUNNEL_CLIENT_PROFILE_FILE is not read"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.contains(&format!("tunnel_id = \"{TUNNEL}\"")),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn the_pid_and_url_files_are_gone_after_a_strict_latch_ends_the_run() {
    let rig = Rig::start("[[rule]]\nmatch = { tool = \"echo\", resp_type = \"terminal\" }\nstatus = 404\n").await;
    let dir = tempfile::tempdir().unwrap();
    let (pid_file, url_file) = (dir.path().join("gw.pid"), dir.path().join("gw.url"));
    let env = [
        ("PID_FILE", pid_file.to_str().unwrap()),
        ("HEALTH_URL_FILE", url_file.to_str().unwrap()),
    ];
    let mut gw = Gateway::spawn(&["run"], Some(&rig.config(&RigOptions::default())), &env);
    gw.wait_http_ready(&format!("http://127.0.0.1:{}/livez", rig.ops_port), T)
        .await;
    assert_eq!(std::fs::read_to_string(&pid_file).unwrap(), format!("{}\n", gw.pid()));
    assert_eq!(
        std::fs::read_to_string(&url_file).unwrap(),
        format!("http://127.0.0.1:{}", rig.ops_port)
    );
    rig.enqueue_call("echo", json!({"message": "latch"}));
    assert_eq!(gw.wait_exit(T).await, Some(82), "{}", gw.stderr());
    assert!(
        !pid_file.exists() && !url_file.exists(),
        "removed after the latch's cleanup"
    );
}

#[tokio::test]
async fn a_run_file_in_a_missing_directory_is_exit_78_at_check_naming_the_key() {
    let rig = Rig::start("").await;
    let config = rig.config(&RigOptions::default_mode());
    for (var, key) in [("PID_FILE", "runtime.pid_file"), ("HEALTH_URL_FILE", "ops.url_file")] {
        let run = Gateway::cli(&["check"], Some(&config), &[(var, "/nonexistent/tunnelgate/x")], T).await;
        assert_eq!(run.code, 78, "{}", run.stderr);
        assert!(
            run.stderr.contains(key) && run.stderr.contains("does not exist"),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains(&format!("(set by {var})")), "{}", run.stderr);
    }
}
