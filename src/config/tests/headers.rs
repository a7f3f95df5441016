//! Configured headers, the organization id, and the official client's variables that
//! map onto configuration (`*_EXTRA_HEADERS`, `MCP_COMMAND`, `HEALTH_LISTEN_ADDR`).

use std::io::Write;

use super::*;
use crate::config::ChannelConfig;

fn with(edits: &[(&str, &str)], pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load(&toml_with(edits), &Overrides::default(), pairs)
}

fn values(set: &crate::config::HeaderSet) -> Vec<(String, String)> {
    set.iter().map(|(n, v)| (n.to_owned(), v.expose().to_owned())).collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
}

const TWO_CHANNELS: &str = r#"
[control_plane]
tunnel_id = "tunnel_test"
api_key = "literal-test-key"

[mcp.channels.github]
url = "http://127.0.0.1:3001/mcp"
headers = { Authorization = "env:GITHUB_MCP_AUTH" }

[mcp.channels.docs]
url = "http://127.0.0.1:3002/mcp"

[mcp.channels.local]
command = ["node", "server.js"]
"#;

#[test]
fn header_values_are_secret_references_resolved_at_load() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"from-file\n").unwrap();
    let table = format!(
        r#"{{ "X-From-Env" = "env:HDR_VALUE", "X-From-File" = "file:{}", "X-Literal" = "plain value" }}"#,
        file.path().display()
    );
    let config = with(&[("control_plane.headers", &table)], &[("HDR_VALUE", "from-env")]).unwrap();
    assert_eq!(
        values(&config.control_plane.headers),
        pairs(&[
            ("X-From-Env", "from-env"),
            ("X-From-File", "from-file"),
            ("X-Literal", "plain value")
        ])
    );
    let masked = config.masked();
    for secret in ["from-env", "from-file", "plain value"] {
        assert!(!masked.contains(secret), "{secret} in\n{masked}");
    }
    assert!(
        masked.contains("\nX-From-Env = \"env:HDR_VALUE (set, 8 bytes)\""),
        "{masked}"
    );
    assert!(masked.contains("\nX-Literal = \"<literal, redacted>\""), "{masked}");
    assert_eq!(
        format!("{:?}", config.control_plane.headers),
        r#"{"X-From-Env", "X-From-File", "X-Literal"}"#
    );
}

#[test]
fn the_official_clients_list_format_is_read_as_it_reads_it() {
    let table: &[(&str, &[(&str, &str)])] = &[
        ("X-A: 1", &[("X-A", "1")]),
        ("  X-A :  one two ,X-B:2", &[("X-A", "one two"), ("X-B", "2")]),
        ("X-A: 1; X-B: 2, X-C: 3", &[("X-A", "1"), ("X-B", "2"), ("X-C", "3")]),
        ("X-A: 1,, ;", &[("X-A", "1")]),
        ("X-Url: http://host:8080/x", &[("X-Url", "http://host:8080/x")]),
        ("Authorization: env:TOKEN", &[("Authorization", "env:TOKEN")]),
        ("", &[]),
    ];
    for (text, want) in table {
        let got = crate::config::headers::parse_list("MCP_EXTRA_HEADERS", text).unwrap();
        assert_eq!(got, pairs(want), "{text:?}");
    }
    for (text, problem) in [
        (
            "X-A",
            "an entry is not of the form \"Name: value\" (entries are separated by ',' or ';')",
        ),
        (
            "X-A: 1, secret-without-colon",
            "an entry is not of the form \"Name: value\" (entries are separated by ',' or ';')",
        ),
        (": v", "an entry has an empty header name"),
        ("X-A:  ", "X-A has an empty value"),
    ] {
        let error = crate::config::headers::parse_list("MCP_EXTRA_HEADERS", text).unwrap_err();
        assert_error(&error, "MCP_EXTRA_HEADERS", problem);
        assert!(!error.to_string().contains("secret-without"), "{error}");
    }
}

#[test]
fn control_plane_extra_headers_lie_under_the_table() {
    let env = [
        ("CONTROL_PLANE_EXTRA_HEADERS", "X-Env-Only: env:ONE, x-both: from-var"),
        ("ONE", "1"),
    ];
    let config = with(&[("control_plane.headers", r#"{ "X-Both" = "from-table" }"#)], &env).unwrap();
    assert_eq!(
        values(&config.control_plane.headers),
        pairs(&[("X-Both", "from-table"), ("X-Env-Only", "1")])
    );
    let only_var = with(&[], &env).unwrap();
    assert_eq!(
        values(&only_var.control_plane.headers),
        pairs(&[("x-both", "from-var"), ("X-Env-Only", "1")])
    );
}

#[test]
fn mcp_extra_headers_go_to_every_http_channel_under_its_own() {
    let env = [
        ("MCP_EXTRA_HEADERS", "X-Team: blue; authorization: Bearer every"),
        ("GITHUB_MCP_AUTH", "Bearer github"),
    ];
    let config = load(TWO_CHANNELS, &Overrides::default(), &env).unwrap();
    assert_eq!(
        values(&config.mcp.headers["github"]),
        pairs(&[("Authorization", "Bearer github"), ("X-Team", "blue")])
    );
    assert_eq!(
        values(&config.mcp.headers["docs"]),
        pairs(&[("authorization", "Bearer every"), ("X-Team", "blue")])
    );
    assert!(!config.mcp.headers.contains_key("local"), "a stdio channel gets none");
    let without = load(
        TWO_CHANNELS,
        &Overrides::default(),
        &[("GITHUB_MCP_AUTH", "Bearer github")],
    )
    .unwrap();
    assert_eq!(without.mcp.headers.keys().collect::<Vec<_>>(), ["github"]);
    assert!(
        without.control_plane.headers.is_empty(),
        "MCP headers never reach the control plane"
    );
}

#[test]
fn reserved_headers_are_errors_naming_the_key() {
    let control_plane = [
        "Authorization",
        "accept",
        "User-Agent",
        "X-Tunnel-Client-Name",
        "X-Tunnel-Client-Version",
        "X-Tunnel-Client-Instance-Id",
        "X-Tunnel-MCP-Server-Info",
        "Content-Type",
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Proxy-Authorization",
        "X-Tunnel-Shard-Token",
        "X-Client-Request-Id",
    ];
    for name in control_plane {
        let error = with(&[("control_plane.headers", &format!(r#"{{ "{name}" = "v" }}"#))], &[]).unwrap_err();
        assert_eq!(error.key(), format!("control_plane.headers.{name}"), "{error}");
        assert!(
            error.problem().starts_with(&format!(
                "{name} is reserved on control-plane requests and cannot be overridden: "
            )),
            "{error}"
        );
        let from_var = with(
            &[],
            &[("CONTROL_PLANE_EXTRA_HEADERS", &format!("X-Fine: 1, {name}: v"))],
        )
        .unwrap_err();
        assert_eq!(from_var.key(), "CONTROL_PLANE_EXTRA_HEADERS", "{from_var}");
    }
    let mcp = [
        "Accept",
        "User-Agent",
        "X-Tunnel-Client-Name",
        "X-Tunnel-Client-Version",
        "X-Tunnel-Client-Instance-Id",
        "X-Tunnel-MCP-Server-Info",
        "Content-Type",
        "host",
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Last-Event-ID",
        "Transfer-Encoding",
        "Proxy-Authorization",
    ];
    for name in mcp {
        let edit = format!(r#"{{ "{name}" = "v" }}"#);
        let error = with(&[("mcp.channels.main.headers", &edit)], &[]).unwrap_err();
        assert_eq!(error.key(), format!("mcp.channels.main.headers.{name}"), "{error}");
        assert!(
            error.problem().starts_with(&format!(
                "{name} is reserved on MCP requests and cannot be overridden: "
            )),
            "{error}"
        );
        let from_var = with(&[], &[("MCP_EXTRA_HEADERS", &format!("{name}: v"))]).unwrap_err();
        assert_eq!(from_var.key(), "MCP_EXTRA_HEADERS", "{from_var}");
    }
    // What is reserved in one scope only is allowed in the other.
    with(
        &[("mcp.channels.main.headers", r#"{ Authorization = "Bearer x" }"#)],
        &[],
    )
    .unwrap();
    with(&[("control_plane.headers", r#"{ "Mcp-Session-Id" = "x" }"#)], &[]).unwrap();
}

#[test]
fn bad_names_values_and_places_are_errors_naming_the_key() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "control_plane.headers",
            r#"{ "X Bad" = "v" }"#,
            "control_plane.headers.X Bad",
            "\"X Bad\" is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)",
        ),
        (
            "control_plane.headers",
            r#"{ "X-A" = "v", "x-a" = "w" }"#,
            "control_plane.headers.x-a",
            "is set twice (header names are the same in any case); keep one",
        ),
        (
            "control_plane.headers",
            r#"{ "X-A" = "" }"#,
            "control_plane.headers.X-A",
            "is empty; use \"env:NAME\", \"file:/path\" or a literal key",
        ),
        (
            "control_plane.headers",
            r#"{ "X-A" = "env:UNSET_HDR" }"#,
            "control_plane.headers.X-A",
            "environment variable UNSET_HDR is not set (referenced as \"env:UNSET_HDR\")",
        ),
        (
            "control_plane.headers",
            "{ \"X-A\" = \"line\\nbreak\" }",
            "control_plane.headers.X-A",
            "<literal> contains a newline or control character, which cannot be sent in a header",
        ),
    ];
    for (key, value, error_key, problem) in cases {
        let error = with(&[(key, value)], &[]).unwrap_err();
        assert_error(&error, error_key, problem);
    }
    let stdio = load(
        &format!("{MINIMAL}\n[mcp.channels.kid]\ncommand = [\"srv\"]\nheaders = {{ X-A = \"v\" }}\n"),
        &Overrides::default(),
        &[],
    )
    .unwrap_err();
    assert_error(
        &stdio,
        "mcp.channels.kid.headers",
        "only applies to HTTP channels (url = \"...\"); a stdio child gets no HTTP request",
    );
    let both = load(
        &format!("{MINIMAL}\n[mcp.channels.kid]\nurl = \"http://127.0.0.1:1/mcp\"\ncommand = [\"srv\"]\nheaders = {{ X-A = \"v\" }}\n"),
        &Overrides::default(),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        both.key(),
        "mcp.channels.kid",
        "the channel rules name the problem: {both}"
    );
    let twice = with(&[], &[("MCP_EXTRA_HEADERS", "X-A: 1, x-a: 2")]).unwrap_err();
    assert_error(
        &twice,
        "MCP_EXTRA_HEADERS",
        "sets x-a twice with different values (header names are the same in any case)",
    );
    with(&[], &[("MCP_EXTRA_HEADERS", "X-A: 1, x-a: 1")]).expect("the same value twice is one header");
}

#[test]
fn the_organization_id_comes_from_the_key_or_the_official_clients_variable() {
    let from_var = with(&[], &[("CONTROL_PLANE_ORGANIZATION_ID", " org-anchor ")]).unwrap();
    assert_eq!(from_var.control_plane.organization_id.as_deref(), Some("org-anchor"));
    let file_wins = with(
        &[("control_plane.organization_id", "\"org-file\"")],
        &[("CONTROL_PLANE_ORGANIZATION_ID", "org-anchor")],
    )
    .unwrap();
    assert_eq!(file_wins.control_plane.organization_id.as_deref(), Some("org-file"));
    assert!(file_wins.masked().contains("organization_id = \"org-file\""));
    let request = file_wins.control_plane.request_headers();
    assert_eq!(request["openai-organization"], "org-file");
    assert_eq!(accepted(MINIMAL).control_plane.organization_id, None);
    assert!(accepted(MINIMAL).control_plane.request_headers().is_empty());
    assert_eq!(
        with(&[("control_plane.organization_id", "\"  \"")], &[])
            .unwrap()
            .control_plane
            .organization_id,
        None
    );
    let error = with(&[("control_plane.organization_id", "\"org\\r\\nX: y\"")], &[]).unwrap_err();
    assert_error(
        &error,
        "control_plane.organization_id",
        "contains a control character, which cannot be sent in a header",
    );
    let both = with(
        &[
            ("control_plane.organization_id", "\"org-a\""),
            ("control_plane.headers", r#"{ "openai-organization" = "org-b" }"#),
        ],
        &[],
    )
    .unwrap_err();
    assert_error(
        &both,
        "control_plane.headers.OpenAI-Organization",
        "OpenAI-Organization is set by control_plane.organization_id too; keep one",
    );
    let header_only = with(
        &[("control_plane.headers", r#"{ "OpenAI-Organization" = "org-b" }"#)],
        &[],
    )
    .unwrap();
    assert_eq!(
        header_only.control_plane.request_headers()["openai-organization"],
        "org-b"
    );
}

#[test]
fn request_headers_are_marked_sensitive() {
    let config = with(
        &[("control_plane.headers", r#"{ "X-Api-Key" = "k-123" }"#)],
        &[("CONTROL_PLANE_ORGANIZATION_ID", "org-1")],
    )
    .unwrap();
    let map = config.control_plane.request_headers();
    assert!(map["x-api-key"].is_sensitive());
    assert!(!format!("{map:?}").contains("k-123"));
}

#[test]
fn a_changed_header_value_is_a_changed_key() {
    let a = with(&[("control_plane.headers", r#"{ "X-A" = "env:V" }"#)], &[("V", "one")]).unwrap();
    let b = with(&[("control_plane.headers", r#"{ "X-A" = "env:V" }"#)], &[("V", "two")]).unwrap();
    assert_eq!(a.changed_keys(&b), ["control_plane.headers.X-A"]);
    assert!(a.changed_keys(&a.clone()).is_empty());
}

#[test]
fn mcp_command_is_split_with_shell_quoting() {
    let no_channels = toml_with(&[("mcp.channels", "")]);
    let line = r#""/opt/my server/bin" --flag 'a b' plain"#;
    let config = load(&no_channels, &Overrides::default(), &[("MCP_COMMAND", line)]).unwrap();
    let ChannelConfig::Stdio { command, .. } = &config.mcp.channels["main"] else {
        panic!("a stdio channel")
    };
    assert_eq!(command, &["/opt/my server/bin", "--flag", "a b", "plain"]);
    let error = load(
        &no_channels,
        &Overrides::default(),
        &[("MCP_COMMAND", "node 'server.js")],
    )
    .unwrap_err();
    assert_error(
        &error,
        "mcp.channels.main.command",
        "cannot be split: a single quote (') is not closed (set by MCP_COMMAND)",
    );
    // Unused when a channel is configured: not read, so not an error.
    accepted_with_env(MINIMAL, &[("MCP_COMMAND", "node 'server.js")]);
}

fn accepted_with_env(toml: &str, pairs: &[(&str, &str)]) -> Config {
    load(toml, &Overrides::default(), pairs).expect("configuration should be valid")
}

#[test]
fn health_listen_addr_is_ops_listen() {
    let no_listen = MINIMAL;
    let set = accepted_with_env(no_listen, &[("HEALTH_LISTEN_ADDR", "127.0.0.1:8080")]);
    assert_eq!(set.ops.listen.to_string(), "127.0.0.1:8080");
    let localhost = accepted_with_env(no_listen, &[("HEALTH_LISTEN_ADDR", "localhost:8081")]);
    assert_eq!(localhost.ops.listen.to_string(), "127.0.0.1:8081");
    let file_wins = accepted_with_env(
        &toml_with(&[("ops.listen", "\"127.0.0.1:9999\"")]),
        &[("HEALTH_LISTEN_ADDR", "127.0.0.1:8080")],
    );
    assert_eq!(file_wins.ops.listen.to_string(), "127.0.0.1:9999");
    let every = load(no_listen, &Overrides::default(), &[("HEALTH_LISTEN_ADDR", ":8080")]).unwrap_err();
    assert_error(
        &every,
        "ops.listen",
        "0.0.0.0:8080 is not a loopback address; set ops.allow_remote = true to listen on it (set by HEALTH_LISTEN_ADDR)",
    );
    let remote = load(
        &toml_with(&[("ops.allow_remote", "true")]),
        &Overrides::default(),
        &[("HEALTH_LISTEN_ADDR", ":8080")],
    )
    .unwrap();
    assert_eq!(remote.ops.listen.to_string(), "0.0.0.0:8080");
}

#[test]
fn header_tables_have_an_env_form() {
    let pairs_env = [
        ("TUNNELGATE_CONTROL_PLANE__HEADERS", r#"{X-Api-Key="env:K"}"#),
        (
            "TUNNELGATE_MCP__CHANNELS__MAIN__HEADERS",
            r#"{Authorization="Bearer t"}"#,
        ),
        ("K", "kv"),
    ];
    let config = with(&[], &pairs_env).unwrap();
    assert_eq!(values(&config.control_plane.headers), pairs(&[("X-Api-Key", "kv")]));
    assert_eq!(
        values(&config.mcp.headers["main"]),
        pairs(&[("Authorization", "Bearer t")])
    );
}
