use std::io::Write;

use super::*;

const CANARY: &str = "sk-canary-0123456789abcdef";

fn config_with_api_key(reference: &str, pairs: &[(&str, &str)]) -> Config {
    let toml = toml_with(&[("control_plane.api_key", &format!("{reference:?}"))]);
    load(&toml, &Overrides::default(), pairs).expect("valid")
}

#[test]
fn masked_env_secret_shows_the_reference_and_length_but_never_the_value() {
    let config = config_with_api_key("env:CONTROL_PLANE_API_KEY", &[("CONTROL_PLANE_API_KEY", CANARY)]);
    let masked = config.masked();
    assert!(!masked.contains(CANARY), "{masked}");
    assert!(
        masked.contains("api_key = \"env:CONTROL_PLANE_API_KEY (set, 26 bytes)\""),
        "{masked}"
    );
}

#[test]
fn masked_file_secret_shows_the_path_but_never_the_value() {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    writeln!(file, "{CANARY}").expect("write");
    let config = config_with_api_key(&format!("file:{}", file.path().display()), &[]);
    let masked = config.masked();
    assert!(!masked.contains(CANARY), "{masked}");
    assert!(
        masked.contains(&format!(
            "api_key = \"file:{} (read, 26 bytes)\"",
            file.path().display()
        )),
        "{masked}"
    );
}

#[test]
fn masked_literal_secret_is_fully_redacted() {
    let masked = config_with_api_key(CANARY, &[]).masked();
    assert!(!masked.contains(CANARY), "{masked}");
    assert!(masked.contains("api_key = \"<literal, redacted>\""), "{masked}");
}

#[test]
fn debug_output_of_a_config_redacts_the_secret() {
    let config = config_with_api_key(CANARY, &[]);
    let debug = format!("{config:?}");
    assert!(!debug.contains(CANARY), "{debug}");
    assert!(debug.contains("api_key: <redacted>"), "{debug}");
}

#[test]
fn masked_output_is_toml_that_loads_back_to_the_same_config() {
    let toml = toml_with(&[
        ("strict.enabled", "true"),
        ("control_plane.poll_timeout", "\"1m 30s\""),
        ("telemetry.otlp_endpoint", "\"http://127.0.0.1:4318\""),
        ("telemetry.propagate", "\"both\""),
        ("mcp.channels.tools.command", "[\"node\", \"server.js\"]"),
        ("mcp.channels.tools.env", "{ LOG_LEVEL = \"info\" }"),
    ]);
    let config = accepted(&toml);
    let mut reparsed: toml::Table = toml::from_str(&config.masked()).expect("masked output is TOML");
    let control_plane = reparsed["control_plane"].as_table_mut().expect("table");
    control_plane.insert("api_key".to_owned(), "literal-test-key".into());
    let reloaded = accepted(&toml::to_string(&reparsed).expect("serializes"));
    assert_eq!(reloaded, config);
}

#[test]
fn changed_keys_names_each_differing_key_and_a_secret_by_its_key_only() {
    let base = accepted(MINIMAL);
    assert!(base.changed_keys(&base.clone()).is_empty());
    let other = accepted(&toml_with(&[
        ("telemetry.log_level", "\"debug\""),
        ("control_plane.api_key", "\"literal-test-kez\""),
        ("mcp.channels.main.url", "\"http://127.0.0.1:3002/mcp\""),
    ]));
    assert_eq!(
        base.changed_keys(&other),
        ["control_plane.api_key", "mcp.channels.main.url", "telemetry.log_level"]
    );
}
