use std::io::Write;

use super::*;
use crate::config::Secret;

fn with_api_key(reference: &str, pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let toml = toml_with(&[("control_plane.api_key", &format!("{reference:?}"))]);
    load(&toml, &Overrides::default(), pairs)
}

fn secret_file(contents: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(contents.as_bytes()).expect("write secret");
    file
}

#[test]
fn env_reference_resolves_from_the_given_environment() {
    let config = with_api_key("env:MY_KEY", &[("MY_KEY", "sk-from-env")]).expect("valid");
    assert_eq!(config.control_plane.api_key.expose(), "sk-from-env");
    assert_eq!(config.control_plane.api_key.describe(), "env:MY_KEY");
}

#[test]
fn default_api_key_reads_control_plane_api_key() {
    let toml = toml_with(&[("control_plane.api_key", "")]);
    let config = load(&toml, &Overrides::default(), &[("CONTROL_PLANE_API_KEY", "sk-anchor")]).expect("valid");
    assert_eq!(config.control_plane.api_key.expose(), "sk-anchor");
    assert_eq!(config.control_plane.api_key.describe(), "env:CONTROL_PLANE_API_KEY");
}

#[test]
fn unset_env_reference_names_the_variable() {
    let toml = toml_with(&[("control_plane.api_key", "")]);
    let error = load(&toml, &Overrides::default(), &[]).expect_err("unset");
    assert_error(
        &error,
        "control_plane.api_key",
        "environment variable CONTROL_PLANE_API_KEY is not set (referenced as \"env:CONTROL_PLANE_API_KEY\")",
    );
    assert_eq!(error.kind(), "secret");
}

#[test]
fn empty_env_reference_names_the_variable() {
    let error = with_api_key("env:MY_KEY", &[("MY_KEY", "")]).expect_err("empty");
    assert_error(&error, "control_plane.api_key", "environment variable MY_KEY is empty");
}

#[test]
fn env_reference_must_be_a_variable_name() {
    for reference in ["env:", "env:1BAD", "env:MY-KEY"] {
        let error = with_api_key(reference, &[]).expect_err(reference);
        assert_eq!(error.key(), "control_plane.api_key");
        assert!(
            error.problem().contains("is not an environment variable name"),
            "{error}"
        );
    }
}

#[test]
fn file_reference_reads_the_file_and_trims_one_trailing_newline() {
    for (contents, expected) in [
        ("sk-file", "sk-file"),
        ("sk-file\n", "sk-file"),
        ("sk-file\r\n", "sk-file"),
    ] {
        let file = secret_file(contents);
        let reference = format!("file:{}", file.path().display());
        let config = with_api_key(&reference, &[]).expect("valid");
        assert_eq!(config.control_plane.api_key.expose(), expected);
        assert_eq!(config.control_plane.api_key.describe(), reference);
    }
}

#[test]
fn file_secret_with_two_trailing_newlines_is_rejected() {
    let file = secret_file("sk-file\n\n");
    let reference = format!("file:{}", file.path().display());
    let error = with_api_key(&reference, &[]).expect_err("newline left");
    assert_error(
        &error,
        "control_plane.api_key",
        &format!("{reference} contains a newline or control character, which cannot be sent in a header"),
    );
}

#[test]
fn unreadable_secret_file_says_why() {
    let error = with_api_key("file:/nope", &[]).expect_err("missing file");
    assert_error(
        &error,
        "control_plane.api_key",
        "cannot read secret file /nope: No such file or directory",
    );
}

#[test]
fn empty_secret_file_is_rejected() {
    let file = secret_file("\n");
    let error = with_api_key(&format!("file:{}", file.path().display()), &[]).expect_err("empty");
    assert_error(
        &error,
        "control_plane.api_key",
        &format!("secret file {} is empty", file.path().display()),
    );
}

#[test]
fn literal_secret_is_accepted_but_an_empty_one_is_not() {
    let config = with_api_key("sk-literal", &[]).expect("valid");
    assert_eq!(config.control_plane.api_key.expose(), "sk-literal");
    assert_eq!(config.control_plane.api_key.describe(), "<literal>");
    let error = with_api_key("", &[]).expect_err("empty literal");
    assert_error(
        &error,
        "control_plane.api_key",
        "is empty; use \"env:NAME\", \"file:/path\" or a literal key",
    );
}

#[test]
fn capitalised_reference_prefixes_are_not_taken_as_literals() {
    let error = with_api_key("ENV:MY_KEY", &[("MY_KEY", "k")]).expect_err("uppercase prefix");
    assert_error(
        &error,
        "control_plane.api_key",
        "secret references are lowercase: write \"env:NAME\" or \"file:/path\"",
    );
}

#[test]
fn secret_debug_and_display_are_redacted() {
    let secret = Secret::literal("canary-4711");
    assert_eq!(format!("{secret:?}"), "<redacted>");
    assert_eq!(secret.to_string(), "<redacted>");
    assert_eq!(secret.expose(), "canary-4711");
}

#[test]
fn from_toml_str_never_reads_the_environment() {
    // The default `env:CONTROL_PLANE_API_KEY` cannot resolve without an environment,
    // whatever the process environment holds.
    let toml = toml_with(&[("control_plane.api_key", "")]);
    let error = Config::from_toml_str(&toml).expect_err("no env");
    assert_eq!(error.key(), "control_plane.api_key");
    assert!(
        error
            .problem()
            .starts_with("environment variable CONTROL_PLANE_API_KEY is not set"),
        "{error}"
    );
}

#[test]
fn a_secret_file_that_never_ends_is_read_only_to_its_bound() {
    // Found while writing the config fuzz target: read whole, `file:/dev/zero` grew until
    // the process ran out of memory. A device is now refused before it is read at all.
    let error = with_api_key("file:/dev/zero", &[]).expect_err("endless");
    assert_error(
        &error,
        "control_plane.api_key",
        "cannot read secret file /dev/zero: it is a character device, not a regular file",
    );
    let file = secret_file(&"k".repeat(64 * 1024 + 1));
    assert!(with_api_key(&format!("file:{}", file.path().display()), &[]).is_err());
    let file = secret_file(&"k".repeat(64 * 1024));
    let config = with_api_key(&format!("file:{}", file.path().display()), &[]).expect("at the bound");
    assert_eq!(config.control_plane.api_key.expose().len(), 64 * 1024);
}

#[test]
fn a_config_file_that_never_ends_is_refused_before_it_is_read() {
    let error = Config::load_with_env(Some(std::path::Path::new("/dev/zero")), &Overrides::default(), &[])
        .expect_err("endless");
    assert_error(
        &error,
        "/dev/zero",
        "cannot read config file: it is a character device, not a regular file",
    );
    let big = secret_file(&"#".repeat(1024 * 1024 + 1));
    let error = Config::load_with_env(Some(big.path()), &Overrides::default(), &[]).expect_err("too big");
    assert!(error.to_string().contains("larger than 1048576 bytes"), "{error}");
}

#[test]
fn a_directory_is_not_a_secret_file_nor_a_config_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let error = with_api_key(&format!("file:{}", dir.path().display()), &[]).expect_err("a directory");
    assert_eq!(error.key(), "control_plane.api_key");
    assert!(
        error.problem().ends_with("it is a directory, not a regular file"),
        "{error}"
    );
    let error = Config::load_with_env(Some(dir.path()), &Overrides::default(), &[]).expect_err("a directory");
    assert_eq!(error.kind(), "unreadable_file");
    assert!(
        error.problem().ends_with("it is a directory, not a regular file"),
        "{error}"
    );
}
