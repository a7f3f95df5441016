use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::config::{AmbiguityPolicy, ChannelConfig, LogFormat, Propagate, SessionOwner, StdioSession};
use crate::egress::http_url::HttpUrl;
use crate::egress::proxy::ProxySetting;

#[test]
fn minimal_config_gets_every_default() {
    let config = accepted(MINIMAL);
    let cp = &config.control_plane;
    assert_eq!(cp.base_url, "https://api.openai.com");
    assert_eq!(cp.url_path, "");
    assert_eq!(cp.tunnel_id, "tunnel_test");
    assert_eq!(cp.poll_timeout, Duration::from_secs(30));
    assert_eq!(cp.max_inflight.get(), 20);
    assert_eq!(cp.post_timeout, Duration::from_secs(10));
    assert_eq!(cp.post_attempts.get(), 3);
    assert_eq!(config.mcp.max_concurrent.get(), 10);
    assert_eq!(config.mcp.request_timeout, Duration::from_secs(300));
    assert_eq!(config.mcp.connect_timeout, Duration::from_secs(5));
    assert!(!config.strict.enabled);
    assert_eq!(config.strict.on_downstream_ambiguity, AmbiguityPolicy::Fatal);
    assert_eq!(
        config.strict.latch_file,
        PathBuf::from("/var/lib/tunnelgate/latch.json")
    );
    assert_eq!(config.strict.shutdown_grace, Duration::from_secs(10));
    assert_eq!(config.strict.cleanup_timeout, Duration::from_secs(5));
    assert_eq!(config.ops.listen, SocketAddr::from(([127, 0, 0, 1], 9464)));
    assert!(!config.ops.allow_remote);
    assert_eq!(config.telemetry.log_format, LogFormat::Json);
    assert_eq!(config.telemetry.log_level, "info");
    assert_eq!(config.telemetry.otlp_endpoint, None);
    assert_eq!(config.telemetry.propagate, Propagate::Off);
    assert_eq!(config.runtime.worker_threads.get(), 1);
    let main = ChannelConfig::Http {
        url: HttpUrl::endpoint("url", "http://127.0.0.1:3001/mcp").expect("a valid URL"),
        proxy: ProxySetting::Env(Box::default()),
        socket: None,
        era: crate::config::EraSetting::Auto,
        input_required: crate::config::channel::default_input_required(),
    };
    assert_eq!(config.mcp.channels.get("main"), Some(&main));
}

#[test]
fn missing_tunnel_id_says_where_to_set_it() {
    for tunnel_id in ["", "\"\""] {
        let error = rejected(&toml_with(&[("control_plane.tunnel_id", tunnel_id)]));
        assert_error(
            &error,
            "control_plane.tunnel_id",
            "missing; set it in the config file or TUNNELGATE_CONTROL_PLANE__TUNNEL_ID / CONTROL_PLANE_TUNNEL_ID",
        );
        assert_eq!(error.kind(), "missing");
    }
}

#[test]
fn tunnel_id_that_would_break_a_request_path_is_rejected() {
    for bad in ["\"a/b\"", "\"a b\"", "\"a?b\""] {
        let error = rejected(&toml_with(&[("control_plane.tunnel_id", bad)]));
        assert_eq!(error.key(), "control_plane.tunnel_id");
        assert!(error.problem().contains("placed in request paths"), "{error}");
    }
}

#[test]
fn malformed_duration_names_the_key_and_shows_examples() {
    let error = rejected(&toml_with(&[("strict.shutdown_grace", "\"ten\"")]));
    assert_error(
        &error,
        "strict.shutdown_grace",
        "\"ten\" is not a duration (use e.g. \"10s\", \"250ms\")",
    );
    assert_eq!(error.kind(), "invalid_value");
}

#[test]
fn durations_accept_humantime_forms() {
    let config = accepted(&toml_with(&[
        ("control_plane.poll_timeout", "\"1m\""),
        ("control_plane.post_timeout", "\"250ms\""),
        ("mcp.request_timeout", "\"1h 30m\""),
        ("strict.shutdown_grace", "\"0s\""),
    ]));
    assert_eq!(config.control_plane.poll_timeout, Duration::from_secs(60));
    assert_eq!(config.control_plane.post_timeout, Duration::from_millis(250));
    assert_eq!(config.mcp.request_timeout, Duration::from_secs(5400));
    assert_eq!(config.strict.shutdown_grace, Duration::ZERO);
}

#[test]
fn zero_timeouts_that_would_always_fail_are_rejected() {
    for key in [
        "control_plane.poll_timeout",
        "control_plane.post_timeout",
        "mcp.request_timeout",
        "mcp.connect_timeout",
    ] {
        let error = rejected(&toml_with(&[(key, "\"0s\"")]));
        assert_error(&error, key, "must be greater than zero (use e.g. \"10s\", \"250ms\")");
    }
}

#[test]
fn zero_counts_are_rejected() {
    for key in [
        "mcp.max_concurrent",
        "control_plane.max_inflight",
        "control_plane.post_attempts",
        "runtime.worker_threads",
    ] {
        let error = rejected(&toml_with(&[(key, "0")]));
        assert_error(&error, key, "must be at least 1 (found 0)");
    }
}

#[test]
fn worker_threads_are_bounded_and_set_by_env() {
    let error = rejected(&toml_with(&[("runtime.worker_threads", "257")]));
    assert_error(&error, "runtime.worker_threads", "must be at most 256 (found 257)");
    let error = rejected(&toml_with(&[("runtime.worker_threads", "\"2\"")]));
    assert_error(
        &error,
        "runtime.worker_threads",
        "expected a whole number, found a string",
    );
    assert_eq!(
        accepted(&toml_with(&[("runtime.worker_threads", "256")]))
            .runtime
            .worker_threads
            .get(),
        256
    );
    let config = load(
        MINIMAL,
        &Overrides::default(),
        &[("TUNNELGATE_RUNTIME__WORKER_THREADS", "4")],
    )
    .expect("valid");
    assert_eq!(config.runtime.worker_threads.get(), 4);
    let error = rejected(&toml_with(&[("runtime.threads", "2")]));
    assert!(error.to_string().contains("runtime.threads"), "{error}");
}

#[test]
fn post_attempts_beyond_u32_are_rejected() {
    let error = rejected(&toml_with(&[("control_plane.post_attempts", "4294967296")]));
    assert_error(&error, "control_plane.post_attempts", "4294967296 is too large");
}

#[test]
fn wrong_types_are_reported_at_their_dotted_key_in_plain_words() {
    let cases = [
        (
            "mcp.max_concurrent",
            "\"ten\"",
            "expected a whole number, found a string",
        ),
        (
            "control_plane.max_inflight",
            "-1",
            "expected a whole number, found a negative number",
        ),
        ("strict.enabled", "\"yes\"", "expected a boolean, found a string"),
        (
            "control_plane.poll_timeout",
            "30",
            "expected a string, found a whole number",
        ),
        (
            "mcp.channels.main.command",
            "\"node server.js\"",
            "expected an array, found a string",
        ),
        ("mcp.channels.main", "\"http://x\"", "expected a table, found a string"),
        ("ops", "1.5", "expected a table, found a decimal number"),
    ];
    for (key, value, problem) in cases {
        let error = rejected(&toml_with(&[(key, value)]));
        assert_error(&error, key, problem);
        assert_eq!(error.kind(), "invalid_type");
    }
}

#[test]
fn wrong_type_errors_never_echo_the_value() {
    let error = rejected(&toml_with(&[("control_plane.api_key", "[\"canary-4711\"]")]));
    assert_error(&error, "control_plane.api_key", "expected a string, found an array");
}

#[test]
fn unknown_keys_are_rejected_everywhere_with_a_suggestion() {
    let cases = [
        (
            "control_plane.tunel_id",
            "unknown key `control_plane.tunel_id` (did you mean `tunnel_id`?)",
        ),
        (
            "mcp.channels.main.header",
            "unknown key `mcp.channels.main.header` (did you mean `headers`?)",
        ),
        ("opps.listen", "unknown key `opps` (did you mean `ops`?)"),
        ("strict.enable", "unknown key `strict.enable` (did you mean `enabled`?)"),
    ];
    for (key, problem) in cases {
        let error = rejected(&toml_with(&[(key, "\"x\"")]));
        let reported = key.strip_suffix(".listen").unwrap_or(key);
        assert_error(&error, reported, problem);
        assert_eq!(error.kind(), "unknown_key");
    }
}

#[test]
fn base_url_must_be_an_http_or_https_url() {
    let cases = [
        (
            "\"api.openai.com\"",
            "has no scheme; write it as \"http://host:port/path\" or \"https://...\"",
        ),
        (
            "\"ftp://api.openai.com\"",
            "scheme \"ftp\" is not supported; use http:// or https://",
        ),
        ("\"https://\"", "has no host"),
        (
            "\"https://api.openai.com:99999\"",
            "port \"99999\" is not a number from 1 to 65535",
        ),
        (
            "\"https://api.openai.com/v1?x=1\"",
            "must not have a query (?...) or fragment (#...); paths are appended to it",
        ),
    ];
    for (value, problem) in cases {
        let error = rejected(&toml_with(&[("control_plane.base_url", value)]));
        assert_error(&error, "control_plane.base_url", problem);
    }
}

#[test]
fn base_url_loses_its_trailing_slash() {
    let config = accepted(&toml_with(&[("control_plane.base_url", "\"http://127.0.0.1:8080/\"")]));
    assert_eq!(config.control_plane.base_url, "http://127.0.0.1:8080");
}

#[test]
fn url_path_is_normalized_or_rejected() {
    for (value, expected) in [
        ("\"\"", ""),
        ("\"/proxy\"", "/proxy"),
        ("\"/proxy/\"", "/proxy"),
        ("\"/\"", ""),
    ] {
        let config = accepted(&toml_with(&[("control_plane.url_path", value)]));
        assert_eq!(config.control_plane.url_path, expected, "{value}");
    }
    let error = rejected(&toml_with(&[("control_plane.url_path", "\"proxy\"")]));
    assert_error(
        &error,
        "control_plane.url_path",
        "\"proxy\" must start with '/' (e.g. \"/proxy\"), or be \"\"",
    );
}

#[test]
fn channel_url_must_be_an_http_or_https_url() {
    let error = rejected(&toml_with(&[("mcp.channels.main.url", "\"127.0.0.1:3001/mcp\"")]));
    assert_error(
        &error,
        "mcp.channels.main.url",
        "has no scheme; write it as \"http://host:port/path\" or \"https://...\"",
    );
    let error = rejected(&toml_with(&[("mcp.channels.main.url", "\"ws://127.0.0.1:3001/mcp\"")]));
    assert_error(
        &error,
        "mcp.channels.main.url",
        "scheme \"ws\" is not supported; use http:// or https://",
    );
}

#[test]
fn channel_needs_exactly_one_of_url_and_command() {
    let both = rejected(&toml_with(&[("mcp.channels.main.command", "[\"node\"]")]));
    assert_error(
        &both,
        "mcp.channels.main",
        "sets both url and command; keep url for Streamable HTTP or command for stdio",
    );
    let neither = rejected(&toml_with(&[("mcp.channels.main.url", "")]));
    assert_error(
        &neither,
        "mcp.channels.main",
        "sets neither url nor command; add url = \"http://...\" (Streamable HTTP) or command = [\"program\", \"arg\"] (stdio)",
    );
}

#[test]
fn stdio_command_must_name_a_program() {
    let empty = rejected(&toml_with(&[
        ("mcp.channels.main.url", ""),
        ("mcp.channels.main.command", "[]"),
    ]));
    assert_error(
        &empty,
        "mcp.channels.main.command",
        "is empty; give the program and its arguments, e.g. [\"node\", \"server.js\"]",
    );
    let blank = rejected(&toml_with(&[
        ("mcp.channels.main.url", ""),
        ("mcp.channels.main.command", "[\" \", \"x\"]"),
    ]));
    assert_error(
        &blank,
        "mcp.channels.main.command",
        "the program (first element) is empty",
    );
}

#[test]
fn empty_channel_map_explains_how_to_add_one() {
    for toml in [toml_with(&[("mcp.channels", "")]), toml_with(&[("mcp.channels", "{}")])] {
        let error = rejected(&toml);
        assert_error(
            &error,
            "mcp.channels",
            "no channel configured; add [mcp.channels.main] with url = \"http://...\" or command = [...]",
        );
    }
}

#[test]
fn channel_names_must_be_safe_for_headers_and_labels() {
    let long = "a".repeat(65);
    for name in ["my channel", "a.b", "ünï", long.as_str()] {
        let toml = format!("{MINIMAL}\n[mcp.channels.{name:?}]\nurl = \"http://127.0.0.1:1/mcp\"\n");
        let error = rejected(&toml);
        assert_eq!(error.key(), "mcp.channels");
        assert!(
            error
                .problem()
                .starts_with(&format!("channel name {name:?} is not allowed")),
            "{error}"
        );
    }
    let ok = format!("{MINIMAL}\n[mcp.channels.Tools_2-b]\ncommand = [\"srv\"]\n");
    assert_eq!(accepted(&ok).mcp.channels.len(), 2);
}

#[test]
fn at_most_32_channels_are_accepted() {
    let mut toml = MINIMAL.to_owned();
    for i in 0..31 {
        toml.push_str(&format!("[mcp.channels.c{i}]\nurl = \"http://127.0.0.1:1/mcp\"\n"));
    }
    assert_eq!(accepted(&toml).mcp.channels.len(), 32);
    toml.push_str("[mcp.channels.c31]\nurl = \"http://127.0.0.1:1/mcp\"\n");
    assert_error(
        &rejected(&toml),
        "mcp.channels",
        "33 channels configured; at most 32 are supported",
    );
}

#[test]
fn env_only_applies_to_stdio_channels() {
    let error = rejected(&toml_with(&[("mcp.channels.main.env", "{ A = \"1\" }")]));
    assert_error(
        &error,
        "mcp.channels.main.env",
        "only applies to stdio channels (command = [...]), not to url",
    );
}

/// The channel `main` as a stdio child, plus `edits`.
fn stdio_with(edits: &[(&'static str, &'static str)]) -> String {
    let mut all = vec![
        ("mcp.channels.main.url", ""),
        ("mcp.channels.main.command", "[\"srv\"]"),
    ];
    all.extend_from_slice(edits);
    toml_with(&all)
}

fn stdio_max_concurrent(config: &Config) -> usize {
    let ChannelConfig::Stdio { max_concurrent, .. } = &config.mcp.channels["main"] else {
        panic!("stdio expected")
    };
    max_concurrent.get()
}

#[test]
fn a_stdio_channel_takes_mcp_max_concurrent_unless_it_lowers_it() {
    assert_eq!(stdio_max_concurrent(&accepted(&stdio_with(&[]))), 10);
    assert_eq!(
        stdio_max_concurrent(&accepted(&stdio_with(&[("mcp.max_concurrent", "16")]))),
        16
    );
    let lowered = accepted(&stdio_with(&[
        ("mcp.max_concurrent", "16"),
        ("mcp.channels.main.max_concurrent", "4"),
    ]));
    assert_eq!(
        (lowered.mcp.max_concurrent.get(), stdio_max_concurrent(&lowered)),
        (16, 4)
    );
    let strict = accepted(&stdio_with(&[
        ("strict.enabled", "true"),
        ("mcp.channels.main.max_concurrent", "1"),
    ]));
    assert_eq!(stdio_max_concurrent(&strict), 1);
}

#[test]
fn a_channel_max_concurrent_above_the_global_one_zero_or_on_a_url_channel_is_refused() {
    assert_error(
        &rejected(&stdio_with(&[
            ("mcp.max_concurrent", "8"),
            ("mcp.channels.main.max_concurrent", "9"),
        ])),
        "mcp.channels.main.max_concurrent",
        "is 9, above mcp.max_concurrent = 8; a channel can only lower it",
    );
    assert_error(
        &rejected(&stdio_with(&[
            ("strict.enabled", "true"),
            ("mcp.channels.main.max_concurrent", "2"),
        ])),
        "mcp.channels.main.max_concurrent",
        "is 2, above mcp.max_concurrent = 1; a channel can only lower it",
    );
    assert_error(
        &rejected(&stdio_with(&[("mcp.channels.main.max_concurrent", "0")])),
        "mcp.channels.main.max_concurrent",
        "must be at least 1 (found 0)",
    );
    assert_error(
        &rejected(&toml_with(&[("mcp.channels.main.max_concurrent", "2")])),
        "mcp.channels.main.max_concurrent",
        "only applies to stdio channels (command = [...]); an HTTP channel is bounded by mcp.max_concurrent",
    );
}

#[test]
fn stdio_env_may_not_pass_credentials_to_children() {
    let problem = "must not be set: the API key variable, TUNNELGATE_* and CONTROL_PLANE_* never reach MCP servers";
    let stdio = [
        ("mcp.channels.main.url", ""),
        ("mcp.channels.main.command", "[\"srv\"]"),
    ];
    for (api_key, var) in [
        ("\"env:MY_KEY\"", "MY_KEY"),
        ("\"x\"", "CONTROL_PLANE_API_KEY"),
        ("\"x\"", "TUNNELGATE_STRICT__ENABLED"),
        ("\"x\"", "control_plane_token"),
    ] {
        let mut edits = stdio.to_vec();
        let env_table = format!("{{ {var} = \"v\" }}");
        edits.extend([
            ("control_plane.api_key", api_key),
            ("mcp.channels.main.env", env_table.as_str()),
        ]);
        let result = load(&toml_with(&edits), &Overrides::default(), &[("MY_KEY", "k")]);
        assert_error(
            &result.expect_err(var),
            &format!("mcp.channels.main.env.{var}"),
            problem,
        );
    }
    let mut edits = stdio.to_vec();
    edits.push(("mcp.channels.main.env", "{ TOKEN = \"literal-test-key\" }"));
    assert_error(
        &rejected(&toml_with(&edits)),
        "mcp.channels.main.env.TOKEN",
        "holds the API key's value; the API key never reaches MCP servers",
    );
    let mut edits = stdio.to_vec();
    edits.push(("mcp.channels.main.env", "{ LOG_LEVEL = \"debug\" }"));
    let config = accepted(&toml_with(&edits));
    let ChannelConfig::Stdio { env, .. } = &config.mcp.channels["main"] else {
        panic!("stdio expected")
    };
    assert_eq!(env.get("LOG_LEVEL").map(String::as_str), Some("debug"));
}

#[test]
fn strict_mode_rejects_an_explicit_max_concurrent_above_one() {
    let error = rejected(&toml_with(&[("strict.enabled", "true"), ("mcp.max_concurrent", "2")]));
    assert_error(
        &error,
        "mcp.max_concurrent",
        "is 2, but must be 1 when strict.enabled = true (strict mode admits one command at a time)",
    );
}

#[test]
fn strict_mode_defaults_max_concurrent_to_one() {
    let strict = accepted(&toml_with(&[("strict.enabled", "true")]));
    assert_eq!(strict.mcp.max_concurrent.get(), 1);
    let explicit_one = accepted(&toml_with(&[("strict.enabled", "true"), ("mcp.max_concurrent", "1")]));
    assert_eq!(explicit_one.mcp.max_concurrent.get(), 1);
    let relaxed = accepted(&toml_with(&[("mcp.max_concurrent", "5")]));
    assert_eq!(relaxed.mcp.max_concurrent.get(), 5);
}

#[test]
fn ops_listen_must_be_a_loopback_socket_address_unless_remote_is_allowed() {
    let error = rejected(&toml_with(&[("ops.listen", "\"localhost:9464\"")]));
    assert_error(
        &error,
        "ops.listen",
        "\"localhost:9464\" is not an IP address and port (use e.g. \"127.0.0.1:9464\")",
    );
    let error = rejected(&toml_with(&[("ops.listen", "\"0.0.0.0:9464\"")]));
    assert_error(
        &error,
        "ops.listen",
        "0.0.0.0:9464 is not a loopback address; set ops.allow_remote = true to listen on it",
    );
    let remote = accepted(&toml_with(&[
        ("ops.listen", "\"0.0.0.0:9464\""),
        ("ops.allow_remote", "true"),
    ]));
    assert_eq!(remote.ops.listen.to_string(), "0.0.0.0:9464");
    let v6 = accepted(&toml_with(&[("ops.listen", "\"[::1]:9464\"")]));
    assert!(v6.ops.listen.ip().is_loopback());
}

#[test]
fn log_buffer_events_defaults_to_two_thousand_takes_zero_and_refuses_more_than_the_maximum() {
    assert_eq!(accepted(&toml_with(&[])).ops.log_buffer_events, 2_000);
    assert_eq!(
        accepted(&toml_with(&[("ops.log_buffer_events", "0")]))
            .ops
            .log_buffer_events,
        0
    );
    let max = accepted(&toml_with(&[("ops.log_buffer_events", "100000")]));
    assert_eq!(max.ops.log_buffer_events, 100_000);
    let error = rejected(&toml_with(&[("ops.log_buffer_events", "100001")]));
    assert_error(
        &error,
        "ops.log_buffer_events",
        "100001 is too many; at most 100000 (0 keeps no log events)",
    );
    let error = rejected(&toml_with(&[("ops.log_buffer_events", "-1")]));
    assert!(error.to_string().contains("ops.log_buffer_events"), "{error}");
}

#[test]
fn otlp_endpoint_is_off_when_empty_and_an_http_url_otherwise() {
    assert_eq!(
        accepted(&toml_with(&[("telemetry.otlp_endpoint", "\"\"")]))
            .telemetry
            .otlp_endpoint,
        None
    );
    let on = accepted(&toml_with(&[("telemetry.otlp_endpoint", "\"http://127.0.0.1:4318/\"")]));
    assert_eq!(on.telemetry.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
    let error = rejected(&toml_with(&[("telemetry.otlp_endpoint", "\"127.0.0.1:4318\"")]));
    assert_eq!(error.key(), "telemetry.otlp_endpoint");
    assert!(error.problem().starts_with("has no scheme"), "{error}");
}

#[test]
fn propagate_takes_one_of_four_carriers_and_names_the_key_otherwise() {
    for (value, expected, headers, meta) in [
        ("off", Propagate::Off, false, false),
        ("headers", Propagate::Headers, true, false),
        ("meta", Propagate::Meta, false, true),
        ("both", Propagate::Both, true, true),
    ] {
        let config = accepted(&toml_with(&[("telemetry.propagate", &format!("\"{value}\""))]));
        assert_eq!(config.telemetry.propagate, expected);
        assert_eq!(expected.as_str(), value);
        assert_eq!((expected.headers(), expected.meta()), (headers, meta), "{value}");
    }
    let error = rejected(&toml_with(&[("telemetry.propagate", "\"w3c\"")]));
    assert_error(
        &error,
        "telemetry.propagate",
        "\"w3c\" is not a choice; use \"off\", \"headers\", \"meta\" or \"both\"",
    );
    let from_env = load(
        MINIMAL,
        &Overrides::default(),
        &[("TUNNELGATE_TELEMETRY__PROPAGATE", "meta")],
    )
    .expect("valid");
    assert_eq!(from_env.telemetry.propagate, Propagate::Meta);
}

#[test]
fn log_format_and_log_level_are_checked() {
    let error = rejected(&toml_with(&[("telemetry.log_format", "\"xml\"")]));
    assert_error(
        &error,
        "telemetry.log_format",
        "\"xml\" is not a log format; use \"json\" or \"text\"",
    );
    let error = rejected(&toml_with(&[("telemetry.log_level", "\" \"")]));
    assert_error(
        &error,
        "telemetry.log_level",
        "is empty; use e.g. \"info\" or \"tunnelgate=debug,info\"",
    );
    let error = rejected(&toml_with(&[("telemetry.log_level", "\"tunnelgate=loud\"")]));
    assert_eq!(error.key(), "telemetry.log_level");
    assert!(
        error.problem().starts_with("\"tunnelgate=loud\" is not a log filter"),
        "{error}"
    );
    let text = accepted(&toml_with(&[
        ("telemetry.log_format", "\"text\""),
        ("telemetry.log_level", "\"tunnelgate=debug,info\""),
    ]));
    assert_eq!(text.telemetry.log_format, LogFormat::Text);
    assert_eq!(text.telemetry.log_level, "tunnelgate=debug,info");
}

#[test]
fn a_bare_word_in_the_log_filter_must_be_a_level_name() {
    // Found in a trial: EnvFilter reads "nonsense" as a target, which silenced every log line.
    let error = rejected(&toml_with(&[("telemetry.log_level", "\"nonsense\"")]));
    assert_eq!(error.key(), "telemetry.log_level");
    assert!(
        error
            .problem()
            .starts_with("\"nonsense\": directive \"nonsense\" is not a level name"),
        "{error}"
    );
    assert!(
        error.problem().contains("trace, debug, info, warn, error, off"),
        "{error}"
    );
    let error = rejected(&toml_with(&[("telemetry.log_level", "\"tunnelgate=debug, verbose\"")]));
    assert!(error.problem().contains("directive \"verbose\""), "{error}");
    let flag = Overrides {
        log_level: Some("nonsense".to_owned()),
        ..Overrides::default()
    };
    let error = load(MINIMAL, &flag, &[]).expect_err("a bad flag");
    assert!(error.problem().ends_with("(set by a command-line flag)"), "{error}");
    let error = load(
        MINIMAL,
        &Overrides::default(),
        &[("TUNNELGATE_TELEMETRY__LOG_LEVEL", "loud")],
    )
    .expect_err("a bad variable");
    assert!(
        error.problem().ends_with("(set by TUNNELGATE_TELEMETRY__LOG_LEVEL)"),
        "{error}"
    );
    for good in [
        "trace",
        "DEBUG",
        "info",
        "Warn",
        "error",
        "off",
        "tunnelgate=debug,warn",
        "hyper=off",
    ] {
        let config = accepted(&toml_with(&[("telemetry.log_level", &format!("{good:?}"))]));
        assert_eq!(config.telemetry.log_level, good);
    }
    let span = accepted(&toml_with(&[(
        "telemetry.log_level",
        "\"info,[tunnelgate.command]=debug\"",
    )]));
    assert_eq!(span.telemetry.log_level, "info,[tunnelgate.command]=debug");
}

#[test]
fn ambiguity_policy_is_fatal_or_report() {
    let report = accepted(&toml_with(&[("strict.on_downstream_ambiguity", "\"report\"")]));
    assert_eq!(report.strict.on_downstream_ambiguity, AmbiguityPolicy::Report);
    let error = rejected(&toml_with(&[("strict.on_downstream_ambiguity", "\"ignore\"")]));
    assert_error(
        &error,
        "strict.on_downstream_ambiguity",
        "\"ignore\" is not a policy; use \"fatal\" or \"report\"",
    );
}

#[test]
fn stdio_channel_names_lists_only_stdio_channels() {
    let toml = format!("{MINIMAL}\n[mcp.channels.b]\ncommand = [\"srv\"]\n[mcp.channels.a]\ncommand = [\"srv\"]\n");
    assert_eq!(accepted(&toml).stdio_channel_names(), ["a", "b"]);
}

#[test]
fn toml_syntax_errors_give_a_position_but_not_the_line() {
    let toml = "[control_plane]\napi_key = \"canary-4711\nx = 1\n";
    let error = rejected(toml);
    assert_eq!(error.key(), "configuration");
    assert_eq!(error.kind(), "syntax");
    assert!(
        error.problem().starts_with("not valid TOML at line 2, column "),
        "{error}"
    );
    assert!(!error.to_string().contains("canary"), "{error}");
}

#[test]
fn from_toml_str_uses_defaults_and_the_given_toml() {
    let config = Config::from_toml_str(MINIMAL).expect("valid");
    assert_eq!(config, accepted(MINIMAL));
    assert_eq!(config.control_plane.api_key.expose(), "literal-test-key");
}

proptest! {
    #[test]
    fn durations_round_trip_through_their_printed_form(ms in 1u64..10_000_000_000) {
        let printed = humantime::format_duration(Duration::from_millis(ms)).to_string();
        let config = accepted(&toml_with(&[("control_plane.poll_timeout", &format!("{printed:?}"))]));
        prop_assert_eq!(config.control_plane.poll_timeout, Duration::from_millis(ms));
    }
}

#[test]
fn channel_names_and_the_tunnel_id_print_as_their_text() {
    let config = accepted(MINIMAL);
    let (name, _) = config.mcp.channels.iter().next().expect("one channel");
    assert_eq!(format!("{name} {name:?}"), "main \"main\"");
    let id = &config.control_plane.tunnel_id;
    assert_eq!(format!("{id} {id:?}"), "tunnel_test \"tunnel_test\"");
}

fn stdio_session(config: &Config) -> &StdioSession {
    let ChannelConfig::Stdio { session, .. } = &config.mcp.channels["main"] else {
        panic!("stdio expected")
    };
    session
}

#[test]
fn a_stdio_channel_owns_its_session_by_default_and_takes_its_initialize_parameters() {
    let default = accepted(&stdio_with(&[]));
    let session = stdio_session(&default);
    assert_eq!(session.owner, SessionOwner::Owned);
    assert_eq!(session.protocol_version, "2025-11-25");
    // `config` imports nothing, so its default is written out: the revision `protocol` names.
    assert_eq!(
        session.protocol_version,
        crate::protocol::McpRevision::LATEST_WITH_INITIALIZE.as_str()
    );
    assert_eq!(session.client_name, "tunnelgate");
    assert_eq!(session.client_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        serde_json::Value::Object(session.capabilities.clone()),
        serde_json::json!({"sampling": {}, "elicitation": {}, "roots": {}})
    );
    assert_eq!(session.timeout, std::time::Duration::from_secs(10));
    assert_eq!(*session, StdioSession::default());

    let custom = accepted(&stdio_with(&[
        ("mcp.channels.main.session", "\"pass_through\""),
        ("mcp.channels.main.initialize.protocol_version", "\"2025-06-18\""),
        ("mcp.channels.main.initialize.client_name", "\"acme\""),
        ("mcp.channels.main.initialize.client_version", "\"7.1\""),
        (
            "mcp.channels.main.initialize.capabilities",
            "{ sampling = {}, experimental = { x = 1 } }",
        ),
        ("mcp.channels.main.initialize.timeout", "\"2500ms\""),
    ]));
    let session = stdio_session(&custom);
    assert_eq!(session.owner, SessionOwner::PassThrough);
    assert_eq!(
        (
            &*session.protocol_version,
            &*session.client_name,
            &*session.client_version
        ),
        ("2025-06-18", "acme", "7.1")
    );
    assert_eq!(
        serde_json::Value::Object(session.capabilities.clone()),
        serde_json::json!({"sampling": {}, "experimental": {"x": 1}})
    );
    assert_eq!(session.timeout, std::time::Duration::from_millis(2500));
    let masked = custom.masked();
    assert!(masked.contains("session = \"pass_through\""), "{masked}");
    assert!(masked.contains("protocol_version = \"2025-06-18\""), "{masked}");
}

#[test]
fn bad_session_settings_are_refused_naming_the_key() {
    type Case<'a> = (&'a [(&'static str, &'static str)], &'a str, &'a str);
    let cases: [Case<'_>; 7] = [
        (
            &[("mcp.channels.main.session", "\"mine\"")],
            "mcp.channels.main.session",
            "\"mine\" is not a session owner; use \"owned\" (the gateway initializes the child) or \"pass_through\" (a 2026-07-28 server, discovered rather than initialized)",
        ),
        (
            &[("mcp.channels.main.initialize.protocol_version", "\"latest\"")],
            "mcp.channels.main.initialize.protocol_version",
            "\"latest\" is not an MCP revision; use a date like \"2025-11-25\"",
        ),
        (
            &[("mcp.channels.main.initialize.client_name", "\"  \"")],
            "mcp.channels.main.initialize.client_name",
            "must be non-empty text without control characters",
        ),
        (
            &[("mcp.channels.main.initialize.client_version", "\"1\\n2\"")],
            "mcp.channels.main.initialize.client_version",
            "must be non-empty text without control characters",
        ),
        (
            &[("mcp.channels.main.initialize.capabilities", "[\"sampling\"]")],
            "mcp.channels.main.initialize.capabilities",
            "must be a table, e.g. { sampling = {}, elicitation = {}, roots = {} }",
        ),
        (
            &[("mcp.channels.main.initialize.timeout", "\"0s\"")],
            "mcp.channels.main.initialize.timeout",
            "must be greater than zero (use e.g. \"10s\", \"250ms\")",
        ),
        (
            &[("mcp.channels.main.initialize.timeout", "\"soon\"")],
            "mcp.channels.main.initialize.timeout",
            "\"soon\" is not a duration (use e.g. \"10s\", \"250ms\")",
        ),
    ];
    for (edits, key, problem) in cases {
        assert_error(&rejected(&stdio_with(edits)), key, problem);
    }
    for (key, value) in [
        ("mcp.channels.main.session", "\"owned\""),
        ("mcp.channels.main.initialize.timeout", "\"1s\""),
    ] {
        let member = key.rsplit('.').nth(usize::from(key.ends_with("timeout"))).unwrap();
        assert_error(
            &rejected(&toml_with(&[(key, value)])),
            &format!("mcp.channels.main.{member}"),
            "only applies to stdio channels (command = [...]); an HTTP server's session belongs to its callers",
        );
    }
}

#[test]
fn an_unknown_initialize_key_is_refused() {
    let error = rejected(&stdio_with(&[("mcp.channels.main.initialize.client", "\"x\"")]));
    assert_eq!(error.key(), "mcp.channels.main.initialize.client", "{error}");
}
