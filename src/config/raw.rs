//! The input shape: what the merged layers deserialize into before validation.
//!
//! Every key is optional (defaults are applied in `validation`, so an explicit value
//! can be told from a default) and every table rejects unknown keys. Durations, enums,
//! URLs and addresses stay strings here; `validation` parses them with key-naming
//! errors.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) control_plane: RawControlPlane,
    pub(super) mcp: RawMcp,
    pub(super) strict: RawStrict,
    pub(super) ops: RawOps,
    pub(super) telemetry: RawTelemetry,
    pub(super) runtime: RawRuntime,
    pub(super) receipts: RawReceipts,
    pub(super) coordination: RawCoordination,
    pub(super) harpoon: RawHarpoon,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawControlPlane {
    pub(super) base_url: Option<String>,
    pub(super) url_path: Option<String>,
    pub(super) tunnel_id: Option<String>,
    pub(super) api_key: Option<String>,
    pub(super) poll_timeout: Option<String>,
    pub(super) max_inflight: Option<u64>,
    pub(super) post_timeout: Option<String>,
    pub(super) post_attempts: Option<u64>,
    pub(super) organization_id: Option<String>,
    pub(super) headers: Option<BTreeMap<String, String>>,
    pub(super) proxy: Option<String>,
    pub(super) tls: Option<RawTls>,
    pub(super) poll_channels: Option<Vec<String>>,
    pub(super) http2: Option<bool>,
    pub(super) resp_timing: Option<bool>,
    pub(super) routing_correction: Option<bool>,
    pub(super) initial_poll_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawMcp {
    pub(super) max_concurrent: Option<u64>,
    pub(super) request_timeout: Option<String>,
    pub(super) connect_timeout: Option<String>,
    pub(super) channels: BTreeMap<String, RawChannel>,
    pub(super) proxy: Option<String>,
    pub(super) tls: Option<RawTls>,
    pub(super) oauth_trusted_origins: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawChannel {
    pub(super) url: Option<String>,
    pub(super) command: Option<Vec<String>>,
    pub(super) env: Option<BTreeMap<String, String>>,
    pub(super) max_concurrent: Option<u64>,
    pub(super) session: Option<String>,
    pub(super) era: Option<String>,
    pub(super) input_required: Option<RawInputRequired>,
    pub(super) initialize: Option<RawInitialize>,
    pub(super) headers: Option<BTreeMap<String, String>>,
    pub(super) proxy: Option<String>,
    pub(super) socket: Option<String>,
    pub(super) tls: Option<RawTls>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawInputRequired {
    pub(super) park_timeout: Option<String>,
    pub(super) call_timeout: Option<String>,
    pub(super) max_rounds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawInitialize {
    pub(super) protocol_version: Option<String>,
    pub(super) client_name: Option<String>,
    pub(super) client_version: Option<String>,
    pub(super) capabilities: Option<serde_json::Value>,
    pub(super) timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawStrict {
    pub(super) enabled: Option<bool>,
    pub(super) on_downstream_ambiguity: Option<String>,
    pub(super) latch_file: Option<String>,
    pub(super) shutdown_grace: Option<String>,
    pub(super) cleanup_timeout: Option<String>,
    pub(super) latched_start: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawOps {
    pub(super) listen: Option<String>,
    pub(super) allow_remote: Option<bool>,
    pub(super) log_buffer_events: Option<u64>,
    pub(super) health_show_details: Option<bool>,
    pub(super) url_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub(super) log_format: Option<String>,
    pub(super) log_level: Option<String>,
    pub(super) otlp_endpoint: Option<String>,
    pub(super) propagate: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawRuntime {
    pub(super) worker_threads: Option<u64>,
    pub(super) pid_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawReceipts {
    pub(super) enabled: Option<bool>,
    pub(super) path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawCoordination {
    pub(super) backend: Option<String>,
    pub(super) lease_ttl: Option<String>,
    pub(super) step_down_after: Option<String>,
    pub(super) etcd: Option<RawEtcd>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawEtcd {
    pub(super) endpoints: Option<Vec<String>>,
    pub(super) prefix: Option<String>,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) tls: Option<RawTls>,
}

/// `harpoon.targets` as written: a list of tables, or upstream's text.
#[derive(Debug, Clone)]
pub(super) enum RawTargets {
    Text(String),
    List(Vec<RawTarget>),
}

/// By hand rather than `untagged`, so that a wrong field inside a target's table is
/// reported as itself (`unknown field ...`), not as "no variant matched".
impl<'de> Deserialize<'de> for RawTargets {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Targets;
        impl<'de> serde::de::Visitor<'de> for Targets {
            type Value = RawTargets;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of target tables, or the official text (label=NAME,url=URL;...)")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawTargets, E> {
                Ok(RawTargets::Text(v.to_owned()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawTargets, A::Error> {
                let mut list = Vec::new();
                while let Some(target) = seq.next_element::<RawTarget>()? {
                    list.push(target);
                }
                Ok(RawTargets::List(list))
            }
        }
        deserializer.deserialize_any(Targets)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawTarget {
    pub(super) label: Option<String>,
    pub(super) url: Option<String>,
    pub(super) description: Option<String>,
    /// A parameterized GET target instead of `url` (`docs/private-oauth.md`).
    pub(super) template: Option<RawTemplate>,
}

/// `harpoon.targets[i].template` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawTemplate {
    pub(super) version: Option<i64>,
    pub(super) origin: Option<String>,
    pub(super) method: Option<String>,
    pub(super) path_template: Option<String>,
    pub(super) query: Option<std::collections::BTreeMap<String, String>>,
    pub(super) parameters: Option<std::collections::BTreeMap<String, RawParameter>>,
    pub(super) headers: Option<std::collections::BTreeMap<String, String>>,
    pub(super) allowed_headers: Option<Vec<String>>,
    pub(super) follow_redirects: Option<bool>,
}

/// `harpoon.targets[i].template.parameters.NAME` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawParameter {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) required: Option<bool>,
    pub(super) pattern: Option<String>,
    #[serde(rename = "enum")]
    pub(super) one_of: Option<Vec<String>>,
    pub(super) min_length: Option<i64>,
    pub(super) max_length: Option<i64>,
    pub(super) reserved_values: Option<Vec<String>>,
    pub(super) description: Option<String>,
    pub(super) examples: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawHarpoon {
    pub(super) targets: Option<RawTargets>,
    pub(super) allow_plaintext_http: Option<bool>,
    pub(super) max_response_bytes: Option<u64>,
    pub(super) max_redirects: Option<u64>,
    pub(super) hosts_include_loopback: Option<bool>,
    pub(super) hosts_include_private: Option<bool>,
    pub(super) hosts_include_suffix: Option<Vec<String>>,
    pub(super) register_private_auth_servers: Option<bool>,
    pub(super) proxy: Option<String>,
    pub(super) tls: Option<RawTls>,
}

/// A `tls` table as written; every key optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) ca_file: Option<String>,
    pub(super) client_cert: Option<String>,
    pub(super) client_key: Option<String>,
    pub(super) ca_only: Option<bool>,
}
