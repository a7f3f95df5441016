//! `control_plane.proxy`, `mcp.proxy`, `mcp.channels.NAME.proxy` and `.socket`, the
//! official client's proxy variables, and the environment's proxies.

use super::*;
use crate::config::ChannelConfig;
use crate::egress::proxy::ProxySetting;

const SECRET: &str = "pr0xy-S3CRET";

fn main_channel(config: &Config) -> (&ProxySetting, Option<&std::path::Path>) {
    match &config.mcp.channels["main"] {
        ChannelConfig::Http { proxy, socket, .. } => (proxy, socket.as_deref()),
        ChannelConfig::Stdio { .. } => panic!("main is an HTTP channel"),
    }
}

fn with(edits: &[(&str, &str)], pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load(&toml_with(edits), &Overrides::default(), pairs)
}

#[test]
fn proxies_default_to_the_environment_and_a_channel_inherits_mcp_proxy() {
    let config = with(&[], &[("HTTPS_PROXY", "http://corp:3128"), ("NO_PROXY", "internal")]).unwrap();
    let ProxySetting::Env(env) = &config.control_plane.proxy else {
        panic!("the default is the environment")
    };
    assert_eq!(env.https.as_ref().map(|u| u.shown()), Some("http://corp:3128"));
    assert_eq!(env.no_proxy, "internal");
    assert_eq!(config.mcp.proxy, config.control_plane.proxy);

    let config = with(&[("mcp.proxy", "\"http://mcp-proxy:8080\"")], &[]).unwrap();
    assert_eq!(
        config.mcp.proxy.masked(),
        "http://mcp-proxy:8080 from the configuration"
    );
    assert_eq!(
        main_channel(&config).0,
        &config.mcp.proxy,
        "a channel inherits mcp.proxy"
    );
    assert!(matches!(config.control_plane.proxy, ProxySetting::Env(_)));

    let config = with(
        &[
            ("mcp.proxy", "\"http://mcp-proxy:8080\""),
            ("mcp.channels.main.proxy", "\"none\""),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(
        main_channel(&config).0,
        &ProxySetting::Off,
        "a channel's own proxy wins"
    );
}

#[test]
fn proxy_credentials_come_from_a_secret_reference_and_are_never_shown() {
    let url = format!("http://user:{SECRET}@proxy.corp:3128");
    let config = with(
        &[("control_plane.proxy", "\"env:CORP_PROXY\"")],
        &[("CORP_PROXY", &url)],
    )
    .unwrap();
    let ProxySetting::Via(proxy) = &config.control_plane.proxy else {
        panic!("an explicit proxy")
    };
    assert_eq!(proxy.expose(), url);
    assert!(proxy.has_credentials());
    let masked = config.masked();
    assert!(
        masked.contains("proxy = \"http://proxy.corp:3128 from env:CORP_PROXY (credentials redacted)\""),
        "{masked}"
    );
    assert!(!masked.contains(SECRET) && !format!("{config:?}").contains(SECRET));

    let literal = with(&[("mcp.proxy", &format!("\"{url}\""))], &[]).unwrap();
    assert!(!literal.masked().contains(SECRET) && !format!("{literal:?}").contains(SECRET));
}

#[test]
fn bad_proxy_values_name_the_key_and_never_echo_the_value() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "control_plane.proxy",
            "\"socks5://host:1080\"",
            "proxy scheme \"socks5\" is not supported; use http:// or https://",
        ),
        (
            "mcp.proxy",
            "\"http://host:3128/path\"",
            "must be only scheme://[user:password@]host:port, without a path",
        ),
        (
            "mcp.proxy",
            "\"proxy.corp:3128\"",
            "has no scheme; write the proxy as \"http://host:port\"",
        ),
        ("mcp.channels.main.proxy", "\"http://:3128\"", "has no host"),
    ];
    for (key, value, problem) in cases {
        let error = with(&[(key, value)], &[]).unwrap_err();
        assert_error(&error, key, &format!("{problem} (the configuration)"));
    }
    let error = with(&[("mcp.proxy", "\"\"")], &[]).unwrap_err();
    assert_eq!(error.key(), "mcp.proxy");
    let error = with(&[], &[("HTTPS_PROXY", &format!("socks5://u:{SECRET}@h:1"))]).unwrap_err();
    assert_eq!(error.key(), "HTTPS_PROXY");
    assert!(!error.to_string().contains(SECRET), "{error}");
    assert!(
        with(
            &[
                ("control_plane.proxy", "\"none\""),
                ("mcp.proxy", "\"none\""),
                ("harpoon.proxy", "\"none\"")
            ],
            &[("HTTPS_PROXY", "socks5://h:1")]
        )
        .is_ok(),
        "the environment is only read where a scope uses it"
    );
}

#[test]
fn a_socket_goes_direct_and_never_with_a_proxy() {
    let config = with(
        &[("mcp.channels.main.socket", "\"/run/mcp.sock\"")],
        &[("HTTP_PROXY", "http://corp:1")],
    )
    .unwrap();
    let (proxy, socket) = main_channel(&config);
    assert_eq!(socket, Some(std::path::Path::new("/run/mcp.sock")));
    assert_eq!(proxy, &ProxySetting::Off);
    assert!(config.masked().contains("socket = \"/run/mcp.sock\""));

    let both = with(
        &[
            ("mcp.channels.main.socket", "\"/run/mcp.sock\""),
            ("mcp.channels.main.proxy", "\"none\""),
        ],
        &[],
    )
    .unwrap_err();
    assert_error(
        &both,
        "mcp.channels.main.proxy",
        "cannot be set together with socket: a unix domain socket is reached directly, never through a proxy; remove one of them",
    );
    let relative = with(&[("mcp.channels.main.socket", "\"run/mcp.sock\"")], &[]).unwrap_err();
    assert_eq!(relative.key(), "mcp.channels.main.socket");
    let stdio = with(
        &[
            ("mcp.channels.main.url", ""),
            ("mcp.channels.main.command", "[\"node\"]"),
            ("mcp.channels.main.proxy", "\"none\""),
        ],
        &[],
    )
    .unwrap_err();
    assert_error(
        &stdio,
        "mcp.channels.main.proxy",
        "only applies to HTTP channels (url = \"http://...\"), not to command",
    );
}

#[test]
fn the_official_clients_proxy_variables_are_explicit_settings() {
    let global = [("TUNNEL_CLIENT_HTTP_PROXY", "http://global:1")];
    let config = with(&[], &global).unwrap();
    assert_eq!(
        config.control_plane.proxy.masked(),
        "http://global:1 from the configuration"
    );
    assert_eq!(config.mcp.proxy.masked(), "http://global:1 from the configuration");

    let config = with(
        &[],
        &[
            ("TUNNEL_CLIENT_HTTP_PROXY", "http://global:1"),
            ("CONTROL_PLANE_HTTP_PROXY", "http://cp:2"),
            ("MCP_HTTP_PROXY", "env:MCP_PROXY_URL"),
            ("MCP_PROXY_URL", "http://mcp:3"),
        ],
    )
    .unwrap();
    assert!(config.control_plane.proxy.masked().starts_with("http://cp:2"));
    assert_eq!(config.mcp.proxy.masked(), "http://mcp:3 from env:MCP_PROXY_URL");

    // The file overrides them, as every anchor variable.
    let config = with(&[("mcp.proxy", "\"none\"")], &global).unwrap();
    assert_eq!(config.mcp.proxy, ProxySetting::Off);
    let error = with(&[], &[("MCP_HTTP_PROXY", "ftp://x:1")]).unwrap_err();
    assert_eq!(error.key(), "mcp.proxy");
    assert!(
        error
            .to_string()
            .contains("set by MCP_HTTP_PROXY or TUNNEL_CLIENT_HTTP_PROXY"),
        "{error}"
    );
}
