//! `config_version: 2`: every key of version 1 as before, and target templates in the
//! TOML form of docs/private-oauth.md, with upstream's version 2 rules.

use super::*;

const TEMPLATE: &str = r#"config_version: 2
harpoon:
  targets:
    - label: legacy_exact
      url: https://cases.example/legacy
    - label: get_case_status
      description: Get the status of one case
      template:
        version: 1
        origin: https://cases.example
        method: get
        path_template: /casestatus/{case_id}
        query:
          complaints: "true"
          view: "{view}"
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
          view:
            type: string
            required: true
            enum: [short, full]
            max_length: 8
        headers:
          Authorization: env:CASE_API_AUTHORIZATION
        allowed_headers: [Accept]
        follow_redirects: false
"#;

#[test]
fn every_key_of_version_1_converts_the_same_under_version_2() {
    let yaml = super::v1::EVERY_KEY
        .replace("config_version: 1", "config_version: 2")
        .replace("{dir}", "/tmp");
    assert_eq!(converted(&yaml, &super::v1::ENV), super::v1::expected("/tmp"));
}

#[test]
fn a_template_becomes_the_toml_template_with_every_key() {
    let table = converted(TEMPLATE, &[]);
    let want = toml(
        r#"
[[harpoon.targets]]
label = "legacy_exact"
url = "https://cases.example/legacy"

[[harpoon.targets]]
label = "get_case_status"
description = "Get the status of one case"
[harpoon.targets.template]
version = 1
origin = "https://cases.example"
method = "GET"
path_template = "/casestatus/{case_id}"
query = { complaints = "true", view = "{view}" }
headers = { Authorization = "env:CASE_API_AUTHORIZATION" }
allowed_headers = ["Accept"]
follow_redirects = false
[harpoon.targets.template.parameters.case_id]
type = "string"
required = true
description = "the case number"
examples = ["CASE-1"]
pattern = '^[A-Za-z0-9_-]+$'
min_length = 1
max_length = 64
reserved_values = ["all", "search", "admin"]
[harpoon.targets.template.parameters.view]
type = "string"
required = true
enum = ["short", "full"]
max_length = 8
"#,
    );
    assert_eq!(table, want, "{}", toml::to_string(&table).unwrap());
}

#[test]
fn the_converted_template_passes_tunnelgates_own_template_checks() {
    let text = toml::to_string(&converted(TEMPLATE, &[])).unwrap();
    let toml = format!(
        "{text}\n[control_plane]\ntunnel_id = \"tunnel_t\"\napi_key = \"k\"\n[mcp.channels.main]\nurl = \"http://127.0.0.1:1/mcp\"\n"
    );
    let config = crate::config::Config::from_toml_str(&toml.replace("env:CASE_API_AUTHORIZATION", "Bearer literal"))
        .expect("the template loads");
    assert_eq!(config.harpoon.templates.len(), 1);
}

#[test]
fn a_template_needs_version_2_and_stands_alone_as_upstream_requires() {
    let template = "      template:\n        version: 1\n        origin: https://x\n";
    let cases = [
        (
            format!("harpoon:\n  targets:\n    - label: a\n{template}"),
            "harpoon.targets[0].template",
            "requires config_version: 2",
        ),
        (
            format!("config_version: 1\nharpoon:\n  targets:\n    - label: a\n{template}"),
            "harpoon.targets[0].template",
            "requires config_version: 2",
        ),
        (
            format!("config_version: 2\nharpoon:\n  targets:\n    - label: a\n      url: https://x\n{template}"),
            "harpoon.targets[0].template",
            "cannot be combined",
        ),
        (
            format!("config_version: 2\nharpoon:\n  targets:\n    - label: a\n      unix_socket: /s\n{template}"),
            "harpoon.targets[0].template",
            "cannot be combined",
        ),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n      template:\n        origin: https://x\n"
                .to_owned(),
            "harpoon.targets[0].template.version",
            "must be 1",
        ),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n      template:\n        version: 2\n".to_owned(),
            "harpoon.targets[0].template.version",
            "must be 1",
        ),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - label: a\n".to_owned(),
            "harpoon.targets[0]",
            "requires url or template",
        ),
        (
            "config_version: 2\nharpoon:\n  targets:\n    - url: https://x\n".to_owned(),
            "harpoon.targets[0].label",
            "needs a label",
        ),
    ];
    for (yaml, key, problem) in cases {
        let refusals = refused(&yaml, &[]);
        assert!(
            refusals.iter().any(|r| r.key == key && r.problem.contains(problem)),
            "{yaml}: {refusals:?}"
        );
    }
}

#[test]
fn a_write_template_is_refused_naming_its_method_and_body_policy() {
    let yaml = TEMPLATE.replace(
        "        method: get\n",
        "        method: POST\n        body_policy:\n          content_types: [application/json]\n          max_bytes: 1024\n          required: true\n          validation:\n            json: true\n            pattern: x\n            enum: [a]\n",
    );
    let keys: Vec<String> = refused(&yaml, &[]).into_iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        [
            "harpoon.targets[1].template.method",
            "harpoon.targets[1].template.body_policy"
        ]
    );
}
