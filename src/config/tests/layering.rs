use std::io::Write;
use std::path::PathBuf;

use super::*;
use crate::config::{ChannelConfig, StdioSession};
use crate::egress::http_url::HttpUrl;
use crate::egress::proxy::ProxySetting;

fn with_env(toml: &str, pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load(toml, &Overrides::default(), pairs)
}

fn http(url: &str) -> ChannelConfig {
    ChannelConfig::Http {
        url: HttpUrl::endpoint("url", url).expect("a valid URL"),
        proxy: ProxySetting::Env(Box::default()),
        socket: None,
        era: crate::config::EraSetting::Auto,
        input_required: crate::config::channel::default_input_required(),
    }
}

#[test]
fn file_is_overridden_by_env_which_is_overridden_by_flags() {
    let toml = toml_with(&[("telemetry.log_level", "\"warn\"")]);
    assert_eq!(accepted(&toml).telemetry.log_level, "warn");
    let env = [("TUNNELGATE_TELEMETRY__LOG_LEVEL", "debug")];
    assert_eq!(with_env(&toml, &env).expect("valid").telemetry.log_level, "debug");
    let flags = Overrides {
        log_level: Some("trace".to_owned()),
        ..Overrides::default()
    };
    assert_eq!(load(&toml, &flags, &env).expect("valid").telemetry.log_level, "trace");
}

#[test]
fn every_override_reaches_its_key() {
    let flags = Overrides {
        strict: Some(true),
        ops_listen: Some("127.0.0.2:1234".to_owned()),
        log_level: Some("debug".to_owned()),
        log_format: Some("text".to_owned()),
        latch_file: Some(PathBuf::from("/tmp/latch.json")),
        profile: crate::config::ProfileFlags::default(),
    };
    let config = load(MINIMAL, &flags, &[]).expect("valid");
    assert!(config.strict.enabled);
    assert_eq!(config.mcp.max_concurrent.get(), 1);
    assert_eq!(config.ops.listen.to_string(), "127.0.0.2:1234");
    assert_eq!(config.telemetry.log_level, "debug");
    assert_eq!(config.telemetry.log_format.as_str(), "text");
    assert_eq!(config.strict.latch_file, PathBuf::from("/tmp/latch.json"));
}

#[test]
fn env_values_are_parsed_as_toml_types() {
    let config = with_env(
        MINIMAL,
        &[
            ("TUNNELGATE_MCP__MAX_CONCURRENT", "3"),
            ("TUNNELGATE_OPS__ALLOW_REMOTE", "true"),
            ("TUNNELGATE_OPS__LISTEN", "0.0.0.0:9464"),
            ("TUNNELGATE_STRICT__SHUTDOWN_GRACE", "2s"),
            ("TUNNELGATE_OPS__LOG_BUFFER_EVENTS", "50"),
        ],
    )
    .expect("valid");
    assert_eq!(config.ops.log_buffer_events, 50);
    assert_eq!(config.mcp.max_concurrent.get(), 3);
    assert!(config.ops.allow_remote);
    assert_eq!(config.ops.listen.to_string(), "0.0.0.0:9464");
    assert_eq!(config.strict.shutdown_grace.as_secs(), 2);
}

#[test]
fn strict_enabled_from_env_defaults_max_concurrent_to_one() {
    let config = with_env(MINIMAL, &[("TUNNELGATE_STRICT__ENABLED", "true")]).expect("valid");
    assert!(config.strict.enabled);
    assert_eq!(config.mcp.max_concurrent.get(), 1);
}

#[test]
fn env_can_define_a_whole_channel_and_child_variable_names_keep_their_case() {
    let config = with_env(
        MINIMAL,
        &[
            ("TUNNELGATE_MCP__CHANNELS__TOOLS__COMMAND", "[\"node\", \"server.js\"]"),
            ("TUNNELGATE_MCP__CHANNELS__TOOLS__ENV__LOG_LEVEL", "debug"),
        ],
    )
    .expect("valid");
    let tools = ChannelConfig::Stdio {
        command: vec!["node".to_owned(), "server.js".to_owned()],
        env: [("LOG_LEVEL".to_owned(), "debug".to_owned())].into(),
        max_concurrent: config.mcp.max_concurrent,
        session: StdioSession::default(),
    };
    assert_eq!(config.mcp.channels.get("tools"), Some(&tools));
}

#[test]
fn env_can_replace_a_channel_url_from_the_file() {
    let config = with_env(
        MINIMAL,
        &[("TUNNELGATE_MCP__CHANNELS__MAIN__URL", "http://10.0.0.1:3001/mcp")],
    );
    assert_eq!(
        config.expect("valid").mcp.channels["main"],
        http("http://10.0.0.1:3001/mcp")
    );
}

#[test]
fn errors_from_env_name_the_variable() {
    let error = with_env(MINIMAL, &[("TUNNELGATE_STRICT__SHUTDOWN_GRACE", "ten")]).expect_err("bad");
    assert_error(
        &error,
        "strict.shutdown_grace",
        "\"ten\" is not a duration (use e.g. \"10s\", \"250ms\") (set by TUNNELGATE_STRICT__SHUTDOWN_GRACE)",
    );
    let error = with_env(MINIMAL, &[("TUNNELGATE_CONTROL_PLANE__TUNEL_ID", "t")]).expect_err("unknown");
    assert_error(
        &error,
        "control_plane.tunel_id",
        "unknown key `control_plane.tunel_id` (did you mean `tunnel_id`?) (set by TUNNELGATE_CONTROL_PLANE__TUNEL_ID)",
    );
}

#[test]
fn errors_from_flags_say_so() {
    let flags = Overrides {
        ops_listen: Some("nowhere".to_owned()),
        ..Overrides::default()
    };
    let error = load(MINIMAL, &flags, &[]).expect_err("bad listen");
    assert_error(
        &error,
        "ops.listen",
        "\"nowhere\" is not an IP address and port (use e.g. \"127.0.0.1:9464\") (set by a command-line flag)",
    );
}

#[test]
fn unrelated_variables_are_ignored() {
    let pairs = [
        ("PATH", "/bin"),
        ("TUNNELGATEX", "1"),
        ("TUNNELGATE_", "1"),
        ("TUNNELGATE_A____B", "1"),
    ];
    assert_eq!(with_env(MINIMAL, &pairs).expect("valid"), accepted(MINIMAL));
}

#[test]
fn anchor_tunnel_id_and_base_url_fill_in_below_the_file() {
    let pairs = [
        ("CONTROL_PLANE_TUNNEL_ID", "tunnel_anchor"),
        ("CONTROL_PLANE_BASE_URL", "http://127.0.0.1:8080/"),
    ];
    let without = toml_with(&[("control_plane.tunnel_id", "")]);
    let config = with_env(&without, &pairs).expect("valid");
    assert_eq!(config.control_plane.tunnel_id, "tunnel_anchor");
    assert_eq!(config.control_plane.base_url, "http://127.0.0.1:8080");

    let file_wins = with_env(MINIMAL, &pairs).expect("valid");
    assert_eq!(file_wins.control_plane.tunnel_id, "tunnel_test");

    let mut prefixed = pairs.to_vec();
    prefixed.push(("TUNNELGATE_CONTROL_PLANE__TUNNEL_ID", "tunnel_prefixed"));
    let env_wins = with_env(&without, &prefixed).expect("valid");
    assert_eq!(env_wins.control_plane.tunnel_id, "tunnel_prefixed");
}

#[test]
fn anchor_server_url_is_the_main_channel_only_when_none_is_configured() {
    let anchor = [("MCP_SERVER_URL", "http://127.0.0.1:4000/mcp")];
    let no_channels = toml_with(&[("mcp.channels", "")]);
    let config = with_env(&no_channels, &anchor).expect("valid");
    assert_eq!(config.mcp.channels.len(), 1);
    assert_eq!(config.mcp.channels["main"], http("http://127.0.0.1:4000/mcp"));

    let configured = with_env(
        &toml_with(&[
            ("mcp.channels.main.url", ""),
            ("mcp.channels.main.command", "[\"srv\"]"),
        ]),
        &anchor,
    )
    .expect("the file's channel is used whole, not mixed with the anchor's url");
    assert_eq!(configured.stdio_channel_names(), ["main"]);
}

#[test]
fn anchor_command_is_split_on_whitespace() {
    let no_channels = toml_with(&[("mcp.channels", "")]);
    let config = with_env(&no_channels, &[("MCP_COMMAND", "  npx -y  @acme/server ")]).expect("valid");
    let main = ChannelConfig::Stdio {
        command: vec!["npx".to_owned(), "-y".to_owned(), "@acme/server".to_owned()],
        env: Default::default(),
        max_concurrent: config.mcp.max_concurrent,
        session: StdioSession::default(),
    };
    assert_eq!(config.mcp.channels["main"], main);
}

#[test]
fn anchor_url_and_command_together_are_ambiguous() {
    let no_channels = toml_with(&[("mcp.channels", "")]);
    let pairs = [("MCP_SERVER_URL", "http://127.0.0.1:4000/mcp"), ("MCP_COMMAND", "srv")];
    let error = with_env(&no_channels, &pairs).expect_err("both");
    assert_error(
        &error,
        "mcp.channels.main",
        "sets both url and command; keep url for Streamable HTTP or command for stdio (set by MCP_SERVER_URL and MCP_COMMAND)",
    );
}

#[test]
fn config_file_is_read_from_its_path() {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(MINIMAL.as_bytes()).expect("write");
    let config = Config::load_with_env(Some(file.path()), &Overrides::default(), &[]).expect("valid");
    assert_eq!(config, accepted(MINIMAL));
}

#[test]
fn missing_config_file_is_reported_with_its_path() {
    let path = std::path::Path::new("/nonexistent/tunnelgate.toml");
    let error = Config::load_with_env(Some(path), &Overrides::default(), &[]).expect_err("missing");
    assert_error(
        &error,
        "/nonexistent/tunnelgate.toml",
        "cannot read config file: No such file or directory",
    );
    assert_eq!(error.kind(), "unreadable_file");
}

#[test]
fn without_a_file_env_alone_can_configure_everything_required() {
    let pairs = [
        ("CONTROL_PLANE_TUNNEL_ID", "tunnel_env"),
        ("CONTROL_PLANE_API_KEY", "sk-env"),
        ("MCP_SERVER_URL", "http://127.0.0.1:3001/mcp"),
    ];
    let config = Config::load_with_env(None, &Overrides::default(), &env(&pairs)).expect("valid");
    assert_eq!(config.control_plane.tunnel_id, "tunnel_env");
    assert_eq!(config.control_plane.api_key.expose(), "sk-env");
    assert_eq!(config.mcp.channels["main"], http("http://127.0.0.1:3001/mcp"));
}

#[test]
fn the_prefix_is_matched_in_any_case_and_blanks_around_a_name_are_ignored() {
    let pairs = [
        ("tunnelgate_ops__log_buffer_events", "40"),
        (" TunnelGate_MCP__MAX_CONCURRENT ", "2"),
    ];
    let config = with_env(MINIMAL, &pairs).expect("valid");
    assert_eq!(config.ops.log_buffer_events, 40);
    assert_eq!(config.mcp.max_concurrent.get(), 2);
}

#[test]
fn anchor_values_stay_strings_where_prefixed_ones_are_typed() {
    let anchor = with_env(MINIMAL, &[("CONTROL_PLANE_ORGANIZATION_ID", "12345")]).expect("valid");
    assert_eq!(anchor.control_plane.organization_id.as_deref(), Some("12345"));
    let prefixed = [("TUNNELGATE_CONTROL_PLANE__ORGANIZATION_ID", "12345")];
    let error = with_env(MINIMAL, &prefixed).expect_err("a number where a string belongs");
    assert_error(
        &error,
        "control_plane.organization_id",
        "expected a string, found a whole number (set by TUNNELGATE_CONTROL_PLANE__ORGANIZATION_ID)",
    );
    let quoted = [("TUNNELGATE_CONTROL_PLANE__ORGANIZATION_ID", "\"12345\"")];
    let config = with_env(MINIMAL, &quoted).expect("a quoted number is a string");
    assert_eq!(config.control_plane.organization_id.as_deref(), Some("12345"));
}
