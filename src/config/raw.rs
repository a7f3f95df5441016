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
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawTargets {
    Text(String),
    List(Vec<RawTarget>),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawTarget {
    pub(super) label: Option<String>,
    pub(super) url: Option<String>,
    pub(super) description: Option<String>,
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
