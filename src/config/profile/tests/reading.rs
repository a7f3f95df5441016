//! Reading a profile as upstream's loader does: unknown keys at every level, a key
//! written twice, wrong types, the versions and the document rules.

use super::*;

const MINIMAL: &str = "control_plane:\n  tunnel_id: tunnel_a\n";

#[test]
fn an_unknown_key_is_refused_at_every_level_naming_its_path() {
    let cases = [
        ("colour: blue\n", "colour"),
        ("control_plane:\n  tunnel: x\n", "control_plane.tunnel"),
        ("log:\n  levle: info\n", "log.levle"),
        ("health:\n  port: 1\n", "health.port"),
        ("admin_ui:\n  theme: dark\n", "admin_ui.theme"),
        ("process:\n  pid: /x\n", "process.pid"),
        ("cloudflared:\n  tokn: env:X\n", "cloudflared.tokn"),
        ("mcp:\n  server_url: http://x\n", "mcp.server_url"),
        ("mcp:\n  server_urls:\n    - url: http://x\n      headers: {}\n", "mcp.server_urls[0].headers"),
        ("mcp:\n  commands:\n    - command: x\n      env: {}\n", "mcp.commands[0].env"),
        ("harpoon:\n  target: []\n", "harpoon.target"),
        ("harpoon:\n  targets:\n    - label: a\n      uri: https://x\n", "harpoon.targets[0].uri"),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n      template:\n        verb: GET\n",
            "harpoon.targets[0].template.verb",
        ),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n      template:\n        parameters:\n          p:\n            format: x\n",
            "harpoon.targets[0].template.parameters.p.format",
        ),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n      template:\n        header_rules: []\n",
            "harpoon.targets[0].template.header_rules",
        ),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n      template:\n        body_policy:\n          size: 1\n",
            "harpoon.targets[0].template.body_policy.size",
        ),
        ("proxy:\n  interval: 60s\n", "proxy.interval"),
    ];
    for (yaml, key) in cases {
        let problem = unreadable(yaml);
        assert!(
            problem.starts_with(&format!("unknown key `{key}`")),
            "{yaml}: {problem}"
        );
        assert!(problem.contains(", expected "), "{yaml}: {problem}");
    }
}

#[test]
fn a_key_written_twice_is_refused_in_a_table_and_in_a_mapping_of_values() {
    for (yaml, key) in [
        ("control_plane:\n  tunnel_id: a\n  tunnel_id: b\n", "tunnel_id"),
        ("log:\n  level: info\nlog:\n  level: warn\n", "log"),
        ("control_plane:\n  extra_headers:\n    X-A: env:A\n    X-A: env:B\n", "X-A"),
        ("mcp:\n  extra_headers:\n    X-A: env:A\n    X-A: env:B\n", "X-A"),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n      template:\n        query:\n          q: x\n          q: y\n",
            "q",
        ),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n      template:\n        parameters:\n          p: {}\n          p: {}\n",
            "p",
        ),
    ] {
        let problem = unreadable(yaml);
        assert!(
            problem.contains("is written twice") || problem.contains("already defined"),
            "{yaml}: {problem}"
        );
        assert!(problem.contains(key), "{yaml}: {problem}");
    }
}

#[test]
fn a_value_of_the_wrong_type_is_refused_without_showing_the_value() {
    let problem = unreadable("control_plane:\n  max_inflight_requests: sk-secret-canary\n");
    assert!(problem.contains("control_plane.max_inflight_requests"), "{problem}");
    assert!(!problem.contains("sk-secret-canary"), "{problem}");
    let problem = unreadable("health:\n  show_details: \"yes-secret-canary\"\n");
    assert!(!problem.contains("secret-canary"), "{problem}");
    assert!(unreadable("control_plane: [1]\n").contains("control_plane"));
    assert!(unreadable("config_version: \"2\"\n").contains("config_version"));
}

#[test]
fn versions_absent_one_and_two_are_read_and_any_other_is_refused() {
    for version in ["", "config_version: 1\n", "config_version: 2\n"] {
        assert!(parse(&format!("{version}{MINIMAL}")).is_ok(), "{version}");
    }
    for version in ["0", "3", "-1"] {
        let problem = unreadable(&format!("config_version: {version}\n{MINIMAL}"));
        assert!(
            problem.contains(&format!("unsupported config_version {version}")),
            "{problem}"
        );
    }
}

#[test]
fn a_later_document_is_ignored_before_version_2_even_when_invalid_and_refused_under_it() {
    let trailing = "---\nnot: [valid, profile\n";
    let profile = parse(&format!("{MINIMAL}{trailing}")).expect("version absent: the first document only");
    assert_eq!(profile.control_plane.unwrap().tunnel_id.as_deref(), Some("tunnel_a"));
    assert!(parse(&format!("config_version: 1\n{MINIMAL}---\nlog:\n  level: nope\n")).is_ok());
    let problem = unreadable(&format!("config_version: 2\n{MINIMAL}---\nlog:\n  level: info\n"));
    assert!(problem.contains("exactly one YAML document"), "{problem}");
    assert!(
        parse(&format!("---\nconfig_version: 2\n{MINIMAL}")).is_ok(),
        "one document with its marker"
    );
}

#[test]
fn an_empty_profile_is_refused_and_an_empty_section_is_an_empty_section() {
    for empty in ["", "\n", "# only a comment\n", "~\n"] {
        assert!(unreadable(empty).contains("empty"), "{empty:?}");
    }
    let profile = parse("control_plane:\nlog:\nmcp:\n  extra_headers:\n").expect("empty sections read");
    assert!(profile.control_plane.is_none() && profile.log.is_none());
}

#[test]
fn invalid_yaml_is_refused_with_its_line() {
    let problem = unreadable("control_plane:\n  tunnel_id: [unclosed\n");
    assert!(problem.contains("line"), "{problem}");
}
