//! A profile read directly as the file layer of a load: below the official variables,
//! outranked by `--config`, refused whole when a setting is refused.

use std::path::Path;

use crate::config::{Config, ConfigError, ConfigOrigin, Overrides, ProfileFlags};

use super::env;

const PROFILE: &str = "control_plane:\n  tunnel_id: tunnel_profile\n  api_key: env:KEY\n  poll_timeout: 20s\nmcp:\n  server_urls:\n    - url: http://127.0.0.1:3001/mcp\n";

fn load(pairs: &[(&str, &str)], config: Option<&Path>) -> Result<(Config, ConfigOrigin), ConfigError> {
    Config::traced(config, &Overrides::default(), &env(pairs))
}

fn profile_file(dir: &Path, text: &str) -> String {
    let path = dir.join("prod.yaml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_profile_file_named_by_its_variable_is_the_file_layer() {
    let dir = tempfile::tempdir().unwrap();
    let path = profile_file(dir.path(), PROFILE);
    let (config, origin) = load(&[("TUNNEL_CLIENT_PROFILE_FILE", &path), ("KEY", "k")], None).expect("loads");
    assert_eq!(config.control_plane.tunnel_id, "tunnel_profile");
    assert_eq!(config.control_plane.poll_timeout.as_secs(), 20);
    assert_eq!(
        origin.profile,
        Some((path.into(), "TUNNEL_CLIENT_PROFILE_FILE".to_owned()))
    );
}

#[test]
fn the_official_variables_and_tunnelgates_own_win_over_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let path = profile_file(dir.path(), PROFILE);
    let pairs = [
        ("TUNNEL_CLIENT_PROFILE_FILE", path.as_str()),
        ("KEY", "k"),
        ("CONTROL_PLANE_TUNNEL_ID", "tunnel_from_env"),
        ("TUNNELGATE_CONTROL_PLANE__POLL_TIMEOUT", "7s"),
    ];
    let (config, _) = load(&pairs, None).expect("loads");
    assert_eq!(config.control_plane.tunnel_id, "tunnel_from_env");
    assert_eq!(config.control_plane.poll_timeout.as_secs(), 7);
}

#[test]
fn a_named_profile_is_read_from_the_profile_directory() {
    let dir = tempfile::tempdir().unwrap();
    profile_file(dir.path(), PROFILE);
    let flags = Overrides {
        profile: ProfileFlags {
            profile: Some("prod".to_owned()),
            profile_dir: Some(dir.path().to_owned()),
            ..ProfileFlags::default()
        },
        ..Overrides::default()
    };
    let (config, origin) = Config::traced(None, &flags, &env(&[("KEY", "k")])).expect("loads");
    assert_eq!(config.control_plane.tunnel_id, "tunnel_profile");
    assert_eq!(origin.profile.unwrap().1, "--profile");
}

#[test]
fn a_named_profile_that_leads_out_of_its_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = profile_file(outside.path(), PROFILE);
    std::os::unix::fs::symlink(&target, dir.path().join("prod.yaml")).unwrap();
    let pairs = [
        ("TUNNEL_CLIENT_PROFILE", "prod"),
        ("TUNNEL_CLIENT_PROFILE_DIR", dir.path().to_str().unwrap()),
    ];
    let error = load(&pairs, None).expect_err("refused");
    assert!(error.to_string().contains("out of the profile directory"), "{error}");
}

#[test]
fn tunnelgates_own_file_wins_and_the_selector_it_outranks_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = profile_file(dir.path(), PROFILE);
    let toml = dir.path().join("config.toml");
    std::fs::write(&toml, "[control_plane]\ntunnel_id = \"tunnel_toml\"\napi_key = \"k\"\n[mcp.channels.main]\nurl = \"http://127.0.0.1:1/mcp\"\n").unwrap();
    let (config, origin) = load(&[("TUNNEL_CLIENT_PROFILE_FILE", &path)], Some(&toml)).expect("loads");
    assert_eq!(config.control_plane.tunnel_id, "tunnel_toml");
    assert_eq!(origin.profile, None);
    assert_eq!(origin.ignored_selectors, ["TUNNEL_CLIENT_PROFILE_FILE"]);
}

#[test]
fn a_refused_profile_is_a_configuration_error_listing_every_refused_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{PROFILE}log:\n  file: /var/log/tc.log\ncloudflared:\n  token: env:CF\n");
    let path = profile_file(dir.path(), &text);
    let error = load(&[("TUNNEL_CLIENT_PROFILE_FILE", &path), ("KEY", "k")], None).expect_err("refused");
    assert_eq!(error.kind(), "profile");
    assert_eq!(error.key(), path);
    assert!(
        error.problem().contains("log.file") && error.problem().contains("cloudflared.token"),
        "{error}"
    );
}

#[test]
fn an_error_in_a_converted_key_says_the_profile_set_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = profile_file(dir.path(), &PROFILE.replace("20s", "0s"));
    let error = load(&[("TUNNEL_CLIENT_PROFILE_FILE", &path), ("KEY", "k")], None).expect_err("zero");
    assert_eq!(error.key(), "control_plane.poll_timeout");
    assert!(error.problem().ends_with("(set by the official profile)"), "{error}");
}

#[test]
fn an_offline_load_reads_the_profile_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = profile_file(
        dir.path(),
        &format!("{PROFILE}health:\n  url_file: {}/url\n", dir.path().display()),
    );
    let offline = Config::load_offline_with_env(
        None,
        &Overrides::default(),
        &env(&[("TUNNEL_CLIENT_PROFILE_FILE", &path)]),
    )
    .expect("an unset key is kept unresolved");
    assert_eq!(offline.ops().url_file, Some(dir.path().join("url")));
}
