//! `[harpoon]` and the official client's `HARPOON_*` variables.

use super::*;

fn with(edits: &[(&str, &str)], pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load(&toml_with(edits), &Overrides::default(), pairs)
}

fn labels(config: &Config) -> Vec<&str> {
    config.harpoon.targets.iter().map(|t| t.label.as_str()).collect()
}

#[test]
fn the_defaults_are_upstreams_and_no_target_is_configured() {
    let h = accepted(MINIMAL).harpoon;
    assert!(h.targets.is_empty());
    assert!(!h.allow_plaintext_http && !h.register_private_auth_servers);
    assert_eq!((h.max_response_bytes, h.max_redirects), (102_400, 5));
    assert!(h.hosts_include_loopback && h.hosts_include_private);
}

#[test]
fn harpoon_targets_uses_the_official_grammar_and_a_file_list_replaces_it() {
    let env = [(
        "HARPOON_TARGETS",
        "label=cfg2,url='https://h.internal/token',desc=\"two\";\n label=cfg3 , url=https://h.internal/reg",
    )];
    let from_env = with(&[], &env).unwrap();
    assert_eq!(labels(&from_env), ["cfg2", "cfg3"]);
    assert_eq!(from_env.harpoon.targets[0].url, "https://h.internal/token");
    assert_eq!(from_env.harpoon.targets[0].description, "two");
    let file = with(
        &[(
            "harpoon.targets",
            r#"[{ label = "own", url = "https://idp.internal/t" }]"#,
        )],
        &env,
    )
    .unwrap();
    assert_eq!(
        labels(&file),
        ["own"],
        "the file's list replaces HARPOON_TARGETS, not merged"
    );
}

#[test]
fn bad_targets_name_the_entry_and_never_echo_the_url() {
    let cases = [
        (
            r#"[{ label = "Bad", url = "https://h/x" }]"#,
            "harpoon.targets[0].label",
            "must match",
        ),
        (
            r#"[{ label = "a", url = "https://h/x" }, { label = "a", url = "https://h/y" }]"#,
            "harpoon.targets[1].label",
            "given twice",
        ),
        (
            r#"[{ label = "a", url = "http://h/x?secret=s3cr3t" }]"#,
            "harpoon.targets[0].url",
            "is plaintext http",
        ),
        (
            r#"[{ label = "a", url = "ftp://h/x" }]"#,
            "harpoon.targets[0].url",
            "http(s)",
        ),
    ];
    // No path is the root, as the official client reads it.
    let rootless = with(&[("harpoon.targets", r#"[{ label = "a", url = "https://h" }]"#)], &[]).unwrap();
    assert_eq!(rootless.harpoon.targets[0].url, "https://h");
    for (targets, key, words) in cases {
        let error = with(&[("harpoon.targets", targets)], &[]).unwrap_err();
        assert_eq!(error.key(), key, "{error}");
        assert!(error.problem().contains(words), "{error}");
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
    }
    let unknown = with(&[], &[("HARPOON_TARGETS", "label=a,url=https://h/x,color=red")]).unwrap_err();
    assert_eq!(unknown.key(), "harpoon.targets[0]");
    assert!(unknown.problem().contains("unknown key \"color\""), "{unknown}");
    assert!(
        unknown.to_string().contains("HARPOON_TARGETS"),
        "names the variable: {unknown}"
    );
}

#[test]
fn the_limits_are_bounded_as_upstream_bounds_them() {
    let too_big = with(&[], &[("HARPOON_MAX_RESPONSE_BYTES", "200000")]).unwrap_err();
    assert_eq!(too_big.key(), "harpoon.max_response_bytes");
    assert!(too_big.problem().contains("1 to 102400"), "{too_big}");
    let redirects = with(&[("harpoon.max_redirects", "6")], &[]).unwrap_err();
    assert_eq!(redirects.key(), "harpoon.max_redirects");
    let ok = with(
        &[],
        &[
            ("HARPOON_MAX_RESPONSE_BYTES", "4096"),
            ("HARPOON_ALLOW_PLAINTEXT_HTTP", "true"),
            ("HARPOON_HOSTS_INCLUDE_SUFFIX", "internal;.Corp.Example"),
        ],
    )
    .unwrap();
    assert_eq!(ok.harpoon.max_response_bytes, 4096);
    assert!(ok.harpoon.allow_plaintext_http);
    assert_eq!(ok.harpoon.hosts_include_suffix, [".internal", ".corp.example"]);
    let not_bool = with(&[], &[("HARPOON_ALLOW_PLAINTEXT_HTTP", "maybe")]).unwrap_err();
    assert!(
        not_bool.to_string().contains("HARPOON_ALLOW_PLAINTEXT_HTTP"),
        "{not_bool}"
    );
}

#[test]
fn a_channel_may_not_be_named_harpoon_and_check_shows_targets_without_secrets() {
    let reserved = with(&[("mcp.channels.harpoon.url", "\"http://127.0.0.1:1/mcp\"")], &[]).unwrap_err();
    assert_eq!(reserved.key(), "mcp.channels.harpoon");
    assert!(reserved.problem().contains("reserved"), "{reserved}");
    let config = with(
        &[(
            "harpoon.targets",
            r#"[{ label = "t", url = "https://user:pw@h.internal/tok?k=v" }]"#,
        )],
        &[],
    )
    .unwrap();
    let masked = config.masked();
    assert!(masked.contains("https://h.internal/tok?<redacted>"), "{masked}");
    assert!(!masked.contains("pw@") && !masked.contains("k=v"), "{masked}");
}
