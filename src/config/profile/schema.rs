//! The official client's profile as its loader reads it: one struct per YAML table, each
//! field named by upstream's yaml tag (`fileConfig` of `pkg/runtimeconfig/file_config.go`,
//! and `HarpoonTargetTemplate` with its body policy and parameters), every table closed
//! (`deny_unknown_fields`, as upstream's `KnownFields(true)`), every mapping refusing a key
//! written twice (as yaml.v3 does), and the document rules of `parseFileConfig`: an
//! empty stream is refused, `config_version` is absent, `1` or `2`, and under `2` the
//! file holds exactly one YAML document (earlier versions read the first and ignore the
//! rest, even if it is not valid).
//!
//! Nothing here resolves a reference or judges a value: that is `convert`'s.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// The whole profile. Sections are `Option` because upstream reads `section:` with no
/// value as an empty section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Profile {
    pub(super) config_version: Option<i64>,
    pub(super) ca_bundle: Option<String>,
    pub(super) http_proxy: Option<String>,
    pub(super) control_plane: Option<ControlPlane>,
    pub(super) log: Option<Log>,
    pub(super) health: Option<Health>,
    pub(super) admin_ui: Option<AdminUi>,
    pub(super) process: Option<Process>,
    pub(super) cloudflared: Option<Cloudflared>,
    pub(super) mcp: Option<Mcp>,
    pub(super) harpoon: Option<Harpoon>,
    pub(super) proxy: Option<ProxyCheck>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ControlPlane {
    pub(super) base_url: Option<String>,
    pub(super) url_path: Option<String>,
    pub(super) tunnel_id: Option<String>,
    pub(super) organization_id: Option<String>,
    pub(super) api_key: Option<String>,
    pub(super) client_cert: Option<String>,
    pub(super) client_key: Option<String>,
    pub(super) http_proxy: Option<String>,
    pub(super) max_inflight_requests: Option<i64>,
    pub(super) poll_timeout: Option<String>,
    pub(super) poll_deadline_guardrail: Option<String>,
    pub(super) poll_channels: Option<Vec<String>>,
    pub(super) extra_headers: Option<UniqueMap<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Log {
    pub(super) level: Option<String>,
    pub(super) format: Option<String>,
    pub(super) file: Option<String>,
    pub(super) http_raw_unsafe: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Health {
    pub(super) listen_addr: Option<String>,
    pub(super) unix_socket: Option<String>,
    pub(super) url_file: Option<String>,
    pub(super) show_details: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdminUi {
    pub(super) allow_remote: Option<bool>,
    pub(super) open_browser: Option<bool>,
    pub(super) log_buffer_events: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Process {
    pub(super) pid_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Cloudflared {
    pub(super) token: Option<String>,
    pub(super) managed: Option<bool>,
    pub(super) path: Option<String>,
    pub(super) ready_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Mcp {
    pub(super) server_urls: Option<Vec<ServerUrl>>,
    pub(super) commands: Option<Vec<McpCommand>>,
    pub(super) http_proxy: Option<String>,
    pub(super) client_cert: Option<String>,
    pub(super) client_key: Option<String>,
    pub(super) extra_headers: Option<UniqueMap<String>>,
    pub(super) discovery_extra_headers: Option<UniqueMap<String>>,
    pub(super) startup_wait_timeout: Option<String>,
    pub(super) stdio_send_initialized_notification: Option<bool>,
    pub(super) connection_max_ttl: Option<String>,
    pub(super) max_concurrent_requests: Option<i64>,
    pub(super) oauth_trusted_origins: Option<Vec<String>>,
}

/// One `mcp.server_urls` entry; `url` is a plain string upstream (absent reads as "").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerUrl {
    pub(super) channel: Option<String>,
    #[serde(default)]
    pub(super) url: String,
    pub(super) unix_socket: Option<String>,
    pub(super) http_proxy: Option<String>,
    pub(super) client_cert: Option<String>,
    pub(super) client_key: Option<String>,
}

/// One `mcp.commands` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct McpCommand {
    pub(super) channel: Option<String>,
    #[serde(default)]
    pub(super) command: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Harpoon {
    pub(super) targets: Option<Vec<Target>>,
    pub(super) allow_plaintext_http: Option<bool>,
    pub(super) max_response_bytes: Option<i64>,
    pub(super) max_redirects: Option<i64>,
    pub(super) http_proxy: Option<String>,
    pub(super) additional_transports: Option<Vec<String>>,
    pub(super) capture_payloads: Option<bool>,
    pub(super) hosts_include_suffix: Option<Vec<String>>,
    pub(super) hosts_include_regex: Option<Vec<String>>,
    pub(super) hosts_include_loopback: Option<bool>,
    pub(super) hosts_include_private: Option<bool>,
}

/// One `harpoon.targets` entry: an exact `url` or (config_version 2) a `template`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Target {
    #[serde(default)]
    pub(super) label: String,
    pub(super) url: Option<String>,
    pub(super) unix_socket: Option<String>,
    pub(super) description: Option<String>,
    pub(super) template: Option<Template>,
}

/// `harpoon.targets[i].template` (upstream's `HarpoonTargetTemplate`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Template {
    pub(super) version: Option<i64>,
    pub(super) origin: Option<String>,
    pub(super) method: Option<String>,
    pub(super) body_policy: Option<BodyPolicy>,
    pub(super) path_template: Option<String>,
    pub(super) query: Option<UniqueMap<String>>,
    pub(super) parameters: Option<UniqueMap<Parameter>>,
    pub(super) headers: Option<UniqueMap<String>>,
    pub(super) allowed_headers: Option<Vec<String>>,
    pub(super) follow_redirects: Option<bool>,
}

/// `template.body_policy`, read so that it is refused by name rather than as unknown
/// (its keys are checked as upstream's, their values never used).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "only its shape is read: the whole body policy is refused")]
pub(super) struct BodyPolicy {
    pub(super) content_types: Option<Vec<String>>,
    pub(super) max_bytes: Option<i64>,
    pub(super) required: Option<bool>,
    pub(super) validation: Option<BodyValidation>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "only its shape is read: the whole body policy is refused")]
pub(super) struct BodyValidation {
    pub(super) json: Option<bool>,
    pub(super) pattern: Option<String>,
    #[serde(rename = "enum")]
    pub(super) one_of: Option<Vec<String>>,
}

/// `template.parameters.NAME` (upstream's `HarpoonTemplateParameter`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Parameter {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) required: Option<bool>,
    pub(super) description: Option<String>,
    pub(super) examples: Option<Vec<String>>,
    pub(super) pattern: Option<String>,
    #[serde(rename = "enum")]
    pub(super) one_of: Option<Vec<String>>,
    pub(super) min_length: Option<i64>,
    pub(super) max_length: Option<i64>,
    pub(super) reserved_values: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProxyCheck {
    pub(super) check_interval: Option<String>,
}

/// A YAML mapping whose keys are unique, in key order: a key written twice is an error
/// naming it, as yaml.v3's `mapping key "x" already defined` (a plain map would keep the
/// last value silently).
#[derive(Debug, Default)]
pub(super) struct UniqueMap<V>(pub(super) BTreeMap<String, V>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = UniqueMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(UniqueMap(BTreeMap::new()))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    if out.contains_key(&key) {
                        return Err(serde::de::Error::custom(format!("mapping key {key:?} already defined")));
                    }
                    let value = map.next_value()?;
                    out.insert(key, value);
                }
                Ok(UniqueMap(out))
            }
        }
        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

/// Why a profile cannot be read at all (before any setting is judged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unreadable(pub(super) String);

/// The profile in `text`, by upstream's document rules.
pub(super) fn parse(text: &str) -> Result<Profile, Unreadable> {
    let mut documents = serde_yaml_ng::Deserializer::from_str(text);
    let first = documents.next().ok_or_else(empty)?;
    let profile = Option::<Profile>::deserialize(first)
        .map_err(|e| Unreadable(yaml_words(&e)))?
        .ok_or_else(empty)?;
    match profile.config_version {
        None | Some(1) => {}
        Some(2) => {
            if documents.next().is_some() {
                return Err(Unreadable(
                    "exactly one YAML document is required with config_version: 2 (remove the `---` and what follows)"
                        .to_owned(),
                ));
            }
        }
        Some(other) => {
            return Err(Unreadable(format!(
                "unsupported config_version {other}: the official client reads 1 (or none) and 2"
            )))
        }
    }
    Ok(profile)
}

fn empty() -> Unreadable {
    Unreadable("the profile is empty (the official client refuses it too: EOF)".to_owned())
}

/// A YAML error in words: serde's message, with the key path and the line where it
/// has them; never a value of the file (it may be a secret): serde's `string "..."` in
/// a type error becomes `a string`. An unknown or repeated field is named by its whole
/// path (`unknown key `control_plane.tunnel``), as tunnelgate names its own keys.
fn yaml_words(error: &serde_yaml_ng::Error) -> String {
    static PATTERNS: std::sync::OnceLock<(regex::Regex, regex::Regex)> = std::sync::OnceLock::new();
    let (quoted, field) = PATTERNS.get_or_init(|| {
        (
            regex::Regex::new(r#"string "(?:[^"\\]|\\.)*""#).expect("a valid pattern"),
            regex::Regex::new(r"^(?:(?P<path>.+?): )?(?P<what>unknown|duplicate) field `(?P<field>[^`]+)`")
                .expect("a valid pattern"),
        )
    });
    let text = quoted.replace_all(&error.to_string(), "a string").replace('\n', "; ");
    field
        .replace(&text, |c: &regex::Captures<'_>| {
            let key = match c.name("path") {
                Some(path) => format!("{}.{}", path.as_str(), &c["field"]),
                None => c["field"].to_owned(),
            };
            match &c["what"] {
                "unknown" => format!("unknown key `{key}`"),
                _ => format!("key `{key}` is written twice"),
            }
        })
        .into_owned()
}
