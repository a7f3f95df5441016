use std::path::Path;

use super::*;

fn example_path() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml"))
}

fn example_text() -> String {
    std::fs::read_to_string(example_path()).expect("config.example.toml is readable")
}

#[test]
fn example_config_loads_when_the_api_key_is_set() {
    let pairs = env(&[("CONTROL_PLANE_API_KEY", "sk-example")]);
    let config = Config::load_with_env(Some(example_path()), &Overrides::default(), &pairs).expect("example is valid");
    assert_eq!(config.control_plane.tunnel_id, "tunnel_example");
    assert_eq!(config.control_plane.api_key.describe(), "env:CONTROL_PLANE_API_KEY");
    assert!(config.mcp.channels.contains_key("main"));
}

#[test]
fn example_config_documents_every_key_with_its_env_form() {
    let text = example_text();
    let config = Config::load_with_env(
        Some(example_path()),
        &Overrides::default(),
        &env(&[("CONTROL_PLANE_API_KEY", "k")]),
    )
    .expect("example is valid");
    let masked: toml::Table = toml::from_str(&config.masked()).expect("masked is TOML");
    for (section, keys) in &masked {
        let keys = keys.as_table().expect("sections are tables");
        for key in keys.keys().filter(|k| *k != "channels") {
            let shown = text.contains(&format!("\n{key} = ")) || text.contains(&format!("\n# {key} = "));
            assert!(shown, "example shows {section}.{key}");
            let env_form = format!("TUNNELGATE_{}__{}", section.to_uppercase(), key.to_uppercase());
            assert!(text.contains(&env_form), "example mentions {env_form}");
        }
    }
    for channel_key in [
        "\nurl = ",
        "__HEADERS='{Authorization=\"env:GITHUB_MCP_AUTH\"}'\n# headers = ",
        "__ORGANIZATION_ID",
        "# organization_id = ",
        "TUNNELGATE_CONTROL_PLANE__POLL_CHANNELS=",
        "CONTROL_PLANE_POLL_CHANNELS=\"main,tools\"",
        "\n# poll_channels = [",
        "TUNNELGATE_CONTROL_PLANE__HEADERS=",
        "\n# headers = { X-Api-Gateway-Key",
        "# command = ",
        "# env = ",
        "__MAX_CONCURRENT\n# max_concurrent = ",
        "__SESSION\n# session = ",
        "# [mcp.channels.main.initialize]",
        "# protocol_version = ",
        "# client_name = ",
        "# client_version = ",
        "# capabilities = ",
        "# timeout = ",
        "__PROXY\n# proxy = ",
        "__SOCKET\n# socket = ",
    ] {
        assert!(text.contains(channel_key), "example shows {channel_key:?}");
    }
}

#[test]
fn example_config_uses_only_defaults_apart_from_tunnel_and_channel() {
    let example = Config::load_with_env(
        Some(example_path()),
        &Overrides::default(),
        &env(&[("CONTROL_PLANE_API_KEY", "k")]),
    )
    .expect("example is valid");
    let minimal =
        "[control_plane]\ntunnel_id = \"tunnel_example\"\n[mcp.channels.main]\nurl = \"http://127.0.0.1:3001/mcp\"\n";
    let defaults = load(minimal, &Overrides::default(), &[("CONTROL_PLANE_API_KEY", "k")]).expect("valid");
    assert_eq!(example, defaults);
}

#[test]
fn example_config_can_be_switched_to_strict_mode_without_edits() {
    let pairs = env(&[("CONTROL_PLANE_API_KEY", "k"), ("TUNNELGATE_STRICT__ENABLED", "true")]);
    let config = Config::load_with_env(Some(example_path()), &Overrides::default(), &pairs).expect("example is valid");
    assert!(config.strict.enabled);
    assert_eq!(config.mcp.max_concurrent.get(), 1);
}
