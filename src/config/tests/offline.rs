//! The offline load: a secret reference with no value here is kept unresolved, named and
//! masked as such; everything else fails as a full load does.

use super::*;
use crate::config::OfflineConfig;

/// Every secret an `env:` or `file:` reference that nothing here resolves, and the etcd
/// backend whose password is one more.
const UNRESOLVED: &str = r#"
[control_plane]
tunnel_id = "tunnel_test"
api_key = "env:CONTROL_PLANE_API_KEY"
proxy = "env:CP_PROXY_URL"

[control_plane.headers]
X-Gateway-Key = "env:GATEWAY_KEY"

[mcp.channels.main]
url = "http://127.0.0.1:3001/mcp"

[mcp.channels.main.headers]
X-Channel-Key = "file:/nonexistent/tunnelgate/key"

[mcp.channels.tools]
command = ["server"]
env = { EMPTY = "" }

[strict]
enabled = true

[coordination]
backend = "etcd"

[coordination.etcd]
username = "gateway"
password = "env:ETCD_PASSWORD"
"#;

fn offline(toml: &str, pairs: &[(&str, &str)]) -> Result<OfflineConfig, ConfigError> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), toml).unwrap();
    Config::load_offline_with_env(Some(file.path()), &Overrides::default(), &env(pairs))
}

#[test]
fn an_offline_load_keeps_each_unavailable_reference_unresolved_and_names_it() {
    let config = offline(UNRESOLVED, &[]).expect("offline loads");
    let keys: Vec<&str> = config.unresolved().iter().map(ConfigError::key).collect();
    assert_eq!(
        keys,
        [
            "control_plane.api_key",
            "control_plane.proxy",
            "control_plane.headers.X-Gateway-Key",
            "mcp.channels.main.headers.X-Channel-Key",
            "coordination.etcd.password",
        ]
    );
    assert_error(
        &config.unresolved()[0],
        "control_plane.api_key",
        "environment variable CONTROL_PLANE_API_KEY is not set (referenced as \"env:CONTROL_PLANE_API_KEY\")",
    );
    assert_eq!(config.complete().unwrap_err(), &config.unresolved()[0]);
    assert_eq!(config.etcd().unwrap_err().key(), "coordination.etcd.password");
    let masked = config.masked();
    for line in [
        "api_key = \"env:CONTROL_PLANE_API_KEY (unresolved)\"",
        "proxy = \"env:CP_PROXY_URL (unresolved)\"",
        "X-Gateway-Key = \"env:GATEWAY_KEY (unresolved)\"",
        "X-Channel-Key = \"file:/nonexistent/tunnelgate/key (unresolved)\"",
        "password = \"env:ETCD_PASSWORD (unresolved)\"",
        "username = \"<literal, redacted>\"",
    ] {
        assert!(masked.contains(line), "{line} not in:\n{masked}");
    }
    assert!(config.strict().enabled);
    assert_eq!(config.partial().control_plane.api_key.expose(), "");
}

#[test]
fn a_full_load_of_the_same_file_fails_on_the_first_unresolved_reference() {
    let error = load(UNRESOLVED, &Overrides::default(), &[]).expect_err("needs the key");
    assert_eq!(error.key(), "control_plane.api_key");
    assert_eq!(error.kind(), "secret");
}

#[test]
fn what_resolves_offline_is_resolved_and_complete_when_everything_does() {
    let pairs = [
        ("CONTROL_PLANE_API_KEY", "sk-offline"),
        ("CP_PROXY_URL", "http://proxy:3128"),
        ("GATEWAY_KEY", "gk-offline"),
        ("ETCD_PASSWORD", "pw-offline"),
    ];
    let partly = offline(UNRESOLVED, &pairs).expect("offline loads");
    let keys: Vec<&str> = partly.unresolved().iter().map(ConfigError::key).collect();
    assert_eq!(keys, ["mcp.channels.main.headers.X-Channel-Key"]);
    assert_eq!(partly.partial().control_plane.api_key.expose(), "sk-offline");
    assert_eq!(partly.etcd().unwrap().unwrap().prefix, "/tunnelgate/tunnel_test");
    let key = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key.path(), "ck-offline\n").unwrap();
    let toml = UNRESOLVED.replace("/nonexistent/tunnelgate/key", &key.path().display().to_string());
    let whole = offline(&toml, &pairs).expect("offline loads");
    let full = load(&toml, &Overrides::default(), &pairs).expect("full loads");
    assert_eq!(whole.complete(), Ok(&full));
}

#[test]
fn an_offline_load_still_rejects_every_other_problem_naming_the_key() {
    for (edit, key) in [
        (
            (
                "api_key = \"env:CONTROL_PLANE_API_KEY\"",
                "api_key = \"ENV:CONTROL_PLANE_API_KEY\"",
            ),
            "control_plane.api_key",
        ),
        (
            ("api_key = \"env:CONTROL_PLANE_API_KEY\"", "api_key = \"env:1BAD\""),
            "control_plane.api_key",
        ),
        (
            ("api_key = \"env:CONTROL_PLANE_API_KEY\"", "api_key = \"\""),
            "control_plane.api_key",
        ),
        (
            ("X-Channel-Key = \"file:", "X-Channel-Key = \"file:\" #"),
            "mcp.channels.main.headers.X-Channel-Key",
        ),
        (
            ("tunnel_id = \"tunnel_test\"", "tunnel_id = \"\""),
            "control_plane.tunnel_id",
        ),
        (("enabled = true", "enabled = \"yes\""), "strict.enabled"),
    ] {
        let toml = UNRESOLVED.replace(edit.0, edit.1);
        assert_ne!(toml, UNRESOLVED, "{edit:?} applies");
        let error = offline(&toml, &[]).expect_err(edit.1);
        assert_eq!(error.key(), key, "{edit:?}: {error}");
    }
    // A value that resolves is checked as always.
    let error = offline(UNRESOLVED, &[("GATEWAY_KEY", "two\nlines")]).expect_err("control character");
    assert_eq!(error.key(), "control_plane.headers.X-Gateway-Key");
}
