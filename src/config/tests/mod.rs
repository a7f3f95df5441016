//! Tests for the configuration: validation, secrets, layering, masking and the
//! shipped example. Helpers here build TOML from a minimal valid base.

mod example;
mod harpoon;
mod harpoon_template;
mod headers;
mod layering;
mod masking;
mod offline;
mod poll_channels;
mod proxy;
mod receipts;
mod run_files;
mod secrets;
mod validation;

use super::layers::FileLayer;
use super::{Config, ConfigError, Overrides};

/// The smallest valid configuration; tests edit it with [`toml_with`].
const MINIMAL: &str = r#"
[control_plane]
tunnel_id = "tunnel_test"
api_key = "literal-test-key"

[mcp.channels.main]
url = "http://127.0.0.1:3001/mcp"
"#;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// Loads `toml` as the file layer, with `pairs` as the environment.
fn load(toml: &str, overrides: &Overrides, pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_layers(Some(FileLayer::inline(toml)?), overrides, &env(pairs))
}

fn accepted(toml: &str) -> Config {
    load(toml, &Overrides::default(), &[]).expect("configuration should be valid")
}

fn rejected(toml: &str) -> ConfigError {
    load(toml, &Overrides::default(), &[]).expect_err("configuration should be rejected")
}

/// [`MINIMAL`] with each `(dotted key, TOML value)` set, or removed when the value is `""`.
fn toml_with(edits: &[(&str, &str)]) -> String {
    let mut table: toml::Table = toml::from_str(MINIMAL).expect("MINIMAL is valid TOML");
    for (key, value) in edits {
        let (parents, leaf) = key.rsplit_once('.').map_or(("", *key), |(p, l)| (p, l));
        let mut node = &mut table;
        for part in parents.split('.').filter(|p| !p.is_empty()) {
            let entry = node
                .entry(part)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            node = entry.as_table_mut().expect("edits descend through tables");
        }
        if value.is_empty() {
            node.remove(leaf);
        } else {
            let parsed: toml::Table = toml::from_str(&format!("v = {value}")).expect("edit value is TOML");
            node.insert(leaf.to_owned(), parsed["v"].clone());
        }
    }
    toml::to_string(&table).expect("table serializes")
}

/// Asserts the error's key and full message.
fn assert_error(error: &ConfigError, key: &str, problem: &str) {
    assert_eq!(error.key(), key, "{error}");
    assert_eq!(error.to_string(), format!("invalid configuration: {key}: {problem}"));
}
