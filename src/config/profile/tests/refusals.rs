//! Each setting without a tunnelgate equivalent, at a value other than the official
//! default (or always, for `cloudflared` and a unix socket), is refused naming its key
//! and what to do; every refusal of a profile is reported, never only the first.

use super::*;

/// `(profile, the key refused, words of what to do)`.
const CASES: &[(&str, &str, &str)] = &[
    (
        "cloudflared:\n  token: env:CF_TOKEN\n",
        "cloudflared.token",
        "run cloudflared beside the gateway",
    ),
    (
        "cloudflared:\n  managed: false\n",
        "cloudflared.managed",
        "remove the section",
    ),
    (
        "cloudflared:\n  path: /usr/bin/cloudflared\n",
        "cloudflared.path",
        "remove the section",
    ),
    (
        "cloudflared:\n  ready_timeout: 30s\n",
        "cloudflared.ready_timeout",
        "remove the section",
    ),
    ("log:\n  file: /var/log/tc.log\n", "log.file", "redirect stderr"),
    (
        "log:\n  http_raw_unsafe: true\n",
        "log.http_raw_unsafe",
        "remove the key",
    ),
    ("log:\n  level: INFO+2\n", "log.level", "debug, info, warn or error"),
    ("log:\n  format: logfmt\n", "log.format", "struct-text"),
    (
        "health:\n  unix_socket: /run/h.sock\n",
        "health.unix_socket",
        "health.listen_addr",
    ),
    (
        "health:\n  listen_addr: myhost:8080\n",
        "health.listen_addr",
        "write the IP",
    ),
    (
        "admin_ui:\n  allow_remote: true\n",
        "admin_ui.allow_remote",
        "/ui on ops.listen",
    ),
    (
        "admin_ui:\n  open_browser: true\n",
        "admin_ui.open_browser",
        "remove the key",
    ),
    (
        "control_plane:\n  poll_deadline_guardrail: 7s\n",
        "control_plane.poll_deadline_guardrail",
        "remove the key",
    ),
    (
        "control_plane:\n  poll_timeout: 30 seconds\n",
        "control_plane.poll_timeout",
        "not a duration",
    ),
    (
        "control_plane:\n  http_proxy: proxy:3128\n",
        "control_plane.http_proxy",
        "http://host:port",
    ),
    (
        "control_plane:\n  base_url: env:UNSET_CP_URL\n",
        "control_plane.base_url",
        "UNSET_CP_URL, which is not set",
    ),
    (
        "control_plane:\n  api_key: \"env:\"\n",
        "control_plane.api_key",
        "not an environment variable name",
    ),
    ("ca_bundle: env:UNSET_CA\n", "ca_bundle", "UNSET_CA"),
    (
        "mcp:\n  discovery_extra_headers:\n    X-D: env:D\n",
        "mcp.discovery_extra_headers",
        "mcp.extra_headers",
    ),
    (
        "mcp:\n  startup_wait_timeout: 60s\n",
        "mcp.startup_wait_timeout",
        "remove the key",
    ),
    (
        "mcp:\n  connection_max_ttl: 1h\n",
        "mcp.connection_max_ttl",
        "mcp.request_timeout",
    ),
    (
        "mcp:\n  server_urls:\n    - channel: a\n",
        "mcp.server_urls[0].url",
        "needs a url",
    ),
    (
        "mcp:\n  commands:\n    - command: \"node 'x\"\n",
        "mcp.commands[0].command",
        "not closed",
    ),
    (
        "mcp:\n  server_urls:\n    - url: http://a\n  commands:\n    - command: node\n",
        "mcp.commands[0].channel",
        "configured twice",
    ),
    (
        "harpoon:\n  additional_transports: [http-streamable]\n",
        "harpoon.additional_transports",
        "remove the key",
    ),
    (
        "harpoon:\n  capture_payloads: true\n",
        "harpoon.capture_payloads",
        "remove the key",
    ),
    (
        "harpoon:\n  hosts_include_regex: ['.*\\.corp$']\n",
        "harpoon.hosts_include_regex",
        "hosts_include_suffix",
    ),
    (
        "harpoon:\n  targets:\n    - label: a\n      url: https://x\n      unix_socket: /s\n",
        "harpoon.targets[0].unix_socket",
        "https url",
    ),
    (
        "proxy:\n  check_interval: 5m\n",
        "proxy.check_interval",
        "tunnelgate doctor",
    ),
];

#[test]
fn each_setting_without_an_equivalent_is_refused_naming_its_key_and_what_to_do() {
    for (yaml, key, fix) in CASES {
        let refusals = refused(yaml, &[]);
        assert_eq!(refusals.len(), 1, "{yaml}: {refusals:?}");
        assert_eq!(refusals[0].key, *key, "{yaml}");
        assert!(refusals[0].problem.contains(fix), "{yaml}: {}", refusals[0].problem);
    }
}

#[test]
fn every_refusal_of_a_profile_is_reported_in_the_profiles_order() {
    let profile = "log:\n  file: /var/log/tc.log\n  http_raw_unsafe: true\nhealth:\n  unix_socket: /h.sock\n\
                   cloudflared:\n  token: env:CF_TOKEN\n  managed: true\nproxy:\n  check_interval: 5m\n";
    let keys: Vec<String> = refused(profile, &[]).into_iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        [
            "log.file",
            "log.http_raw_unsafe",
            "health.unix_socket",
            "cloudflared.token",
            "cloudflared.managed",
            "proxy.check_interval"
        ]
    );
}

#[test]
fn a_refusal_never_shows_a_secret() {
    let yaml = "cloudflared:\n  token: literal-token-canary\ncontrol_plane:\n  api_key: key-canary\n  extra_headers:\n    X-A: header-canary\nlog:\n  file: /x\n";
    let refusals = refused(yaml, &[]);
    let shown = format!("{refusals:?}");
    assert!(!shown.contains("canary"), "{shown}");
}

#[test]
fn a_refused_profile_is_not_converted_and_its_error_lists_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refused.yaml");
    std::fs::write(&path, "cloudflared:\n  token: env:T\nlog:\n  file: /var/log/x\n").unwrap();
    let error = super::super::convert_profile(&path, &[]).expect_err("refused");
    assert_eq!(error.kind(), "refused");
    let text = error.to_string();
    assert!(
        text.contains("2 setting(s)") && text.contains("cloudflared.token") && text.contains("log.file"),
        "{text}"
    );
}
