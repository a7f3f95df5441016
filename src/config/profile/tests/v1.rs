//! Every key of a `config_version: 1` profile, converted: the tunnelgate keys it becomes,
//! or the note it leaves; and the result loads.

use super::*;

/// Every key upstream's `fileConfig` has, each with a value tunnelgate can take (the
/// settings without an equivalent at their official defaults). `{dir}` is a folder that
/// exists.
pub(super) const EVERY_KEY: &str = r#"
config_version: 1
ca_bundle: file:/etc/ssl/ca.pem
http_proxy: http://proxy.internal:3128
control_plane:
  base_url: env:CP_URL
  url_path: /tunnel
  tunnel_id: tunnel_0123456789abcdef0123456789abcdef
  organization_id: org-123
  api_key: ENV:CONTROL_PLANE_API_KEY
  client_cert: env:CP_CERT
  client_key: /etc/cp.key
  http_proxy: env:CP_PROXY
  max_inflight_requests: 30
  poll_timeout: 1m30s
  poll_deadline_guardrail: 5000ms
  poll_channels: [Main, tools, sock]
  extra_headers:
    X-Internal-Auth: env:CP_HEADER
log:
  level: WARN
  format: struct-text
  file: ""
  http_raw_unsafe: false
health:
  listen_addr: localhost:8080
  url_file: {dir}/health-url
  show_details: true
admin_ui:
  allow_remote: false
  open_browser: false
  log_buffer_events: 500
process:
  pid_file: {dir}/tc.pid
mcp:
  server_urls:
    - url: https://mcp.example.com/mcp
      http_proxy: env:MCP_PROXY_URL
      client_cert: /etc/mcp-main.pem
      client_key: file:/etc/mcp-main.key
    - channel: Sock
      url: http://localhost/mcp
      unix_socket: /run/mcp.sock
  commands:
    - channel: tools
      command: python -m 'tools mcp'
  http_proxy: http://mcp-proxy:3128
  client_cert: /etc/mcp.pem
  client_key: /etc/mcp.key
  extra_headers:
    X-Mcp-Auth: file:/run/secrets/mcp
  discovery_extra_headers: {}
  startup_wait_timeout: 0s
  stdio_send_initialized_notification: true
  connection_max_ttl: 10m
  max_concurrent_requests: 4
  oauth_trusted_origins: [https://login.example.com]
harpoon:
  targets:
    - label: auth
      url: env:AUTH_URL
      description: Auth server
  allow_plaintext_http: true
  max_response_bytes: 5000
  max_redirects: 2
  http_proxy: env:HARPOON_PROXY_URL
  additional_transports: []
  capture_payloads: false
  hosts_include_suffix: [internal]
  hosts_include_regex: []
  hosts_include_loopback: false
  hosts_include_private: false
proxy:
  check_interval: 60s
"#;

pub(super) const ENV: [(&str, &str); 3] = [
    ("CP_URL", "https://cp.example.com/"),
    ("CP_CERT", "/etc/cp.pem"),
    ("AUTH_URL", "https://auth.example.com/token"),
];

pub(super) fn expected(dir: &str) -> toml::Table {
    toml(&format!(
        r#"
[control_plane]
base_url = "https://cp.example.com/"
url_path = "/tunnel"
tunnel_id = "tunnel_0123456789abcdef0123456789abcdef"
organization_id = "org-123"
api_key = "env:CONTROL_PLANE_API_KEY"
proxy = "env:CP_PROXY"
max_inflight = 30
poll_timeout = "90s"
poll_channels = ["main", "tools", "sock"]
headers = {{ X-Internal-Auth = "env:CP_HEADER" }}
tls = {{ ca_file = "/etc/ssl/ca.pem", client_cert = "/etc/cp.pem", client_key = "/etc/cp.key" }}

[telemetry]
log_level = "warn"
log_format = "text"

[ops]
listen = "127.0.0.1:8080"
url_file = "{dir}/health-url"
health_show_details = true
log_buffer_events = 500

[runtime]
pid_file = "{dir}/tc.pid"

[mcp]
proxy = "http://mcp-proxy:3128"
max_concurrent = 4
oauth_trusted_origins = ["https://login.example.com"]
tls = {{ ca_file = "/etc/ssl/ca.pem", client_cert = "/etc/mcp.pem", client_key = "/etc/mcp.key" }}

[mcp.channels.main]
url = "https://mcp.example.com/mcp"
proxy = "env:MCP_PROXY_URL"
tls = {{ client_cert = "/etc/mcp-main.pem", client_key = "/etc/mcp-main.key" }}
headers = {{ X-Mcp-Auth = "file:/run/secrets/mcp" }}

[mcp.channels.sock]
url = "http://localhost/mcp"
socket = "/run/mcp.sock"
headers = {{ X-Mcp-Auth = "file:/run/secrets/mcp" }}

[mcp.channels.tools]
command = ["python", "-m", "tools mcp"]

[harpoon]
targets = [{{ label = "auth", url = "https://auth.example.com/token", description = "Auth server" }}]
allow_plaintext_http = true
max_response_bytes = 5000
max_redirects = 2
proxy = "env:HARPOON_PROXY_URL"
hosts_include_suffix = ["internal"]
hosts_include_loopback = false
hosts_include_private = false
tls = {{ ca_file = "/etc/ssl/ca.pem" }}
"#
    ))
}

#[test]
fn every_key_of_version_1_becomes_its_tunnelgate_key() {
    let yaml = EVERY_KEY.replace("{dir}", "/tmp");
    let table = converted(&yaml, &ENV);
    assert_eq!(table, expected("/tmp"), "{}", toml::to_string(&table).unwrap());
}

#[test]
fn every_key_without_an_equivalent_leaves_a_note_naming_it() {
    let yaml = EVERY_KEY.replace("{dir}", "/tmp");
    let notes = output(&yaml, &ENV, Mode::Print).notes;
    for key in [
        "control_plane.base_url: read from env:CP_URL",
        "control_plane.client_cert: the path in env:CP_CERT",
        "control_plane.poll_deadline_guardrail = 5s",
        "log.file is empty",
        "log.http_raw_unsafe = false",
        "admin_ui.allow_remote = false",
        "admin_ui.open_browser = false",
        "mcp.discovery_extra_headers is empty",
        "mcp.startup_wait_timeout = 0s",
        "mcp.stdio_send_initialized_notification = true",
        "mcp.connection_max_ttl = 10m",
        "harpoon.targets[0].url: read from env:AUTH_URL",
        "harpoon.additional_transports is empty",
        "harpoon.capture_payloads = false",
        "harpoon.hosts_include_regex is empty",
        "proxy.check_interval = 1m",
    ] {
        assert!(
            notes.iter().any(|n| n.starts_with(key)),
            "no note {key:?} in {notes:#?}"
        );
    }
}

#[test]
fn the_printed_toml_loads_with_the_referenced_variables_set() {
    let dir = tempfile::tempdir().unwrap();
    let shown = dir.path().display().to_string();
    let profile = dir.path().join("every.yaml");
    std::fs::write(&profile, EVERY_KEY.replace("{dir}", &shown)).unwrap();
    let text = super::super::convert_profile(&profile, &env(&ENV)).expect("converts");
    assert!(text.starts_with("# tunnelgate configuration converted"), "{text}");
    assert!(text.contains("# - proxy.check_interval = 1m"), "{text}");
    let toml_path = dir.path().join("config.toml");
    std::fs::write(&toml_path, &text).unwrap();
    let mut vars = env(&ENV);
    vars.extend(env(&[
        ("CONTROL_PLANE_API_KEY", "key-canary"),
        ("CP_PROXY", "http://cp-proxy:3128"),
        ("CP_HEADER", "header-canary"),
        ("MCP_PROXY_URL", "http://main-proxy:3128"),
        ("HARPOON_PROXY_URL", "http://harpoon-proxy:3128"),
    ]));
    let secret = dir.path().join("mcp-secret");
    std::fs::write(&secret, "mcp-canary\n").unwrap();
    std::fs::write(
        &toml_path,
        text.replace("/run/secrets/mcp", &secret.display().to_string()),
    )
    .unwrap();
    let config = crate::config::Config::load_with_env(Some(&toml_path), &Default::default(), &vars).expect("loads");
    assert_eq!(config.ops.url_file, Some(dir.path().join("health-url")));
    assert_eq!(config.runtime.pid_file, Some(dir.path().join("tc.pid")));
    assert_eq!(config.mcp.channels.len(), 3);
    let masked = config.masked();
    assert!(!masked.contains("canary"), "{masked}");
}

#[test]
fn a_client_certificate_moves_the_official_control_plane_to_its_mtls_host_as_upstream() {
    for base in ["", "  base_url: https://api.openai.com/\n"] {
        let yaml = format!("control_plane:\n{base}  client_cert: /c.pem\n  client_key: /c.key\n");
        let table = converted(&yaml, &[]);
        assert_eq!(
            table["control_plane"]["base_url"].as_str(),
            Some("https://mtls.api.openai.com"),
            "{yaml}"
        );
    }
    let table = converted(
        "control_plane:\n  base_url: https://cp.internal\n  client_cert: /c.pem\n",
        &[],
    );
    assert_eq!(table["control_plane"]["base_url"].as_str(), Some("https://cp.internal"));
    let table = converted("control_plane:\n  base_url: https://api.openai.com\n", &[]);
    assert_eq!(
        table["control_plane"]["base_url"].as_str(),
        Some("https://api.openai.com")
    );
}

#[test]
fn a_listen_address_in_go_forms_and_off_loopback_sets_allow_remote() {
    let cases = [
        ("127.0.0.1:0", "127.0.0.1:0", false),
        ("localhost:9000", "127.0.0.1:9000", false),
        (":8080", "0.0.0.0:8080", true),
        ("0.0.0.0:8080", "0.0.0.0:8080", true),
        ("\"[::1]:8080\"", "[::1]:8080", false),
    ];
    for (written, listen, remote) in cases {
        let table = converted(&format!("health:\n  listen_addr: {written}\n"), &[]);
        assert_eq!(table["ops"]["listen"].as_str(), Some(listen), "{written}");
        assert_eq!(
            table["ops"].get("allow_remote").and_then(toml::Value::as_bool),
            remote.then_some(true)
        );
    }
}

#[test]
fn channels_are_named_as_upstream_compares_them_and_a_plain_command_line_is_split() {
    let yaml = "mcp:\n  server_urls:\n    - channel: \" \"\n      url: http://a/mcp\n  commands:\n    - channel: Tools\n      command: \"/opt/my server/bin --flag 'a b'\"\n";
    let table = converted(yaml, &[]);
    let channels = table["mcp"]["channels"].as_table().unwrap();
    assert_eq!(channels["main"]["url"].as_str(), Some("http://a/mcp"));
    let argv: Vec<&str> = channels["tools"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(argv, ["/opt/my", "server/bin", "--flag", "a b"]);
}

#[test]
fn the_global_proxy_fills_each_scope_without_its_own() {
    let yaml = "http_proxy: env:GLOBAL\nmcp:\n  http_proxy: http://m:1\n";
    let table = converted(yaml, &[]);
    assert_eq!(table["control_plane"]["proxy"].as_str(), Some("env:GLOBAL"));
    assert_eq!(table["mcp"]["proxy"].as_str(), Some("http://m:1"));
    assert_eq!(table["harpoon"]["proxy"].as_str(), Some("env:GLOBAL"));
}

#[test]
fn secrets_stay_references_or_literals_and_are_never_resolved() {
    let yaml = "control_plane:\n  api_key: \" File:/run/key \"\n  extra_headers:\n    X-A: Env:HEADER_VAR\n    X-B: plain-literal\n";
    let table = converted(yaml, &[("HEADER_VAR", "resolved-canary")]);
    assert_eq!(table["control_plane"]["api_key"].as_str(), Some("file:/run/key"));
    let headers = &table["control_plane"]["headers"];
    assert_eq!(headers["X-A"].as_str(), Some("env:HEADER_VAR"));
    assert_eq!(headers["X-B"].as_str(), Some("plain-literal"));
    assert!(!toml::to_string(&table).unwrap().contains("resolved-canary"));
}

#[test]
fn read_directly_an_official_variable_replaces_the_profiles_header_map_as_upstream() {
    let yaml = "control_plane:\n  extra_headers:\n    X-A: env:A\nmcp:\n  server_urls:\n    - url: http://a/mcp\n  extra_headers:\n    X-B: env:B\n  discovery_extra_headers:\n    X-C: env:C\n";
    let vars = [
        ("CONTROL_PLANE_EXTRA_HEADERS", "X-Z: env:Z"),
        ("MCP_EXTRA_HEADERS", ""),
        ("MCP_DISCOVERY_EXTRA_HEADERS", "X-Y: env:Y"),
    ];
    let out = output(yaml, &vars, Mode::Layer);
    assert!(out.refusals.is_empty(), "{:?}", out.refusals);
    assert!(out.table.get("control_plane").is_none(), "{:?}", out.table);
    assert!(out.table["mcp"]["channels"]["main"].get("headers").is_none());
    assert_eq!(
        out.notes
            .iter()
            .filter(|n| n.contains("replaces the profile's"))
            .count(),
        3
    );
    let printed = output(yaml, &vars, Mode::Print);
    assert_eq!(
        printed.refusals.len(),
        1,
        "printed, the discovery headers are still refused"
    );
}
