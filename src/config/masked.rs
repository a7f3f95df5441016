//! Renders the effective configuration as TOML for `tunnelgate check`.
//!
//! Invariant: a secret's value never reaches the output; `api_key` and every configured
//! header show their reference and length (`"env:NAME (set, 24 bytes)"`), or
//! `"<literal, redacted>"`, or in an offline load `"env:NAME (unresolved)"`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{ChannelConfig, Config};
use crate::egress::tls::{TlsFile, TlsFiles};

#[derive(Serialize)]
struct View<'a> {
    control_plane: ControlPlaneView<'a>,
    mcp: McpView<'a>,
    strict: StrictView<'a>,
    ops: OpsView<'a>,
    telemetry: TelemetryView<'a>,
    runtime: RuntimeView<'a>,
    receipts: ReceiptsView<'a>,
    coordination: CoordinationView<'a>,
    harpoon: HarpoonView<'a>,
}

#[derive(Serialize)]
struct HarpoonView<'a> {
    targets: Vec<HarpoonTargetView<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    templates: Vec<TemplateView<'a>>,
    allow_plaintext_http: bool,
    max_response_bytes: u64,
    max_redirects: u64,
    hosts_include_loopback: bool,
    hosts_include_private: bool,
    hosts_include_suffix: &'a [String],
    register_private_auth_servers: bool,
    proxy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsView>,
}

#[derive(Serialize)]
struct HarpoonTargetView<'a> {
    label: &'a str,
    /// Without credentials; a query shown as `?<redacted>` (it may carry a secret).
    url: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
}

/// A template target: its policy, fixed query values shown as `<fixed>` and fixed
/// headers by their references only.
#[derive(Serialize)]
struct TemplateView<'a> {
    label: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    version: u32,
    origin: &'a str,
    path_template: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    query: BTreeMap<String, String>,
    parameters: Vec<ParameterView<'a>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    allowed_headers: &'a [String],
}

#[derive(Serialize)]
struct ParameterView<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pattern: Option<&'a str>,
    #[serde(rename = "enum", skip_serializing_if = "Option::is_none")]
    one_of: Option<&'a [String]>,
    min_length: usize,
    max_length: usize,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    reserved_values: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    examples: &'a [String],
}

#[derive(Serialize)]
struct CoordinationView<'a> {
    backend: &'static str,
    lease_ttl: String,
    step_down_after: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    etcd: Option<EtcdView<'a>>,
}

#[derive(Serialize)]
struct EtcdView<'a> {
    endpoints: Vec<&'a str>,
    prefix: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    username: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    password: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsView>,
}

#[derive(Serialize)]
struct ReceiptsView<'a> {
    enabled: bool,
    path: std::borrow::Cow<'a, str>,
}

#[derive(Serialize)]
struct ControlPlaneView<'a> {
    base_url: &'a str,
    url_path: &'a str,
    tunnel_id: &'a str,
    api_key: String,
    poll_timeout: String,
    max_inflight: usize,
    post_timeout: String,
    post_attempts: u32,
    proxy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    organization_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    poll_channels: Vec<&'a str>,
    http2: bool,
    resp_timing: bool,
    routing_correction: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    initial_poll_timeout: Option<String>,
    /// Last: a table follows the plain values.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<&'a str, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsView>,
}

#[derive(Serialize)]
struct McpView<'a> {
    max_concurrent: usize,
    request_timeout: String,
    connect_timeout: String,
    proxy: String,
    channels: BTreeMap<&'a str, ChannelView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsView>,
    oauth_trusted_origins: &'a [String],
}

#[derive(Serialize)]
struct ChannelView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<&'a BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrent: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    era: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_required: Option<InputRequiredView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    initialize: Option<InitializeView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    socket: Option<std::borrow::Cow<'a, str>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<&'a str, String>,
    /// The channel's effective TLS files (its own table over `mcp.tls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsView>,
}

/// A `tls` table: paths are shown (they are not secrets); file contents never are.
#[derive(Serialize)]
struct TlsView {
    #[serde(skip_serializing_if = "Option::is_none")]
    ca_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_cert: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_key: Option<String>,
    ca_only: bool,
}

#[derive(Serialize)]
struct InitializeView<'a> {
    protocol_version: &'a str,
    client_name: &'a str,
    client_version: &'a str,
    capabilities: &'a serde_json::Map<String, serde_json::Value>,
    timeout: String,
}

#[derive(Serialize)]
struct InputRequiredView {
    park_timeout: String,
    call_timeout: String,
    max_rounds: u32,
}

#[derive(Serialize)]
struct StrictView<'a> {
    enabled: bool,
    on_downstream_ambiguity: &'static str,
    latch_file: std::borrow::Cow<'a, str>,
    shutdown_grace: String,
    cleanup_timeout: String,
    latched_start: &'static str,
}

#[derive(Serialize)]
struct OpsView<'a> {
    listen: String,
    allow_remote: bool,
    log_buffer_events: usize,
    health_show_details: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    url_file: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Serialize)]
struct RuntimeView<'a> {
    worker_threads: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid_file: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Serialize)]
struct TelemetryView<'a> {
    log_format: &'static str,
    log_level: &'a str,
    otlp_endpoint: &'a str,
    propagate: &'static str,
}

pub(super) fn render(config: &Config) -> String {
    toml::to_string(&view(config)).expect("the configuration view is plain tables, strings and numbers")
}

/// The dotted keys whose effective values differ between `a` and `b`, sorted (a
/// secret's value is compared too, and never shown).
pub(super) fn changed_keys(a: &Config, b: &Config) -> Vec<String> {
    let (mut left, mut right) = (BTreeMap::new(), BTreeMap::new());
    flatten(
        "",
        &serde_json::to_value(view(a)).expect("the view serializes"),
        &mut left,
    );
    flatten(
        "",
        &serde_json::to_value(view(b)).expect("the view serializes"),
        &mut right,
    );
    let mut keys: Vec<String> = left
        .keys()
        .chain(right.keys())
        .filter(|k| left.get(*k) != right.get(*k))
        .cloned()
        .collect();
    if a.control_plane.api_key != b.control_plane.api_key {
        keys.push("control_plane.api_key".to_owned());
    }
    keys.extend(super::headers::changed_values(a, b));
    keys.sort();
    keys.dedup();
    keys
}

/// Every leaf of `value` (arrays are leaves) under its dotted key.
fn flatten(prefix: &str, value: &serde_json::Value, into: &mut BTreeMap<String, serde_json::Value>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, into);
            }
        }
        leaf => {
            into.insert(prefix.to_owned(), leaf.clone());
        }
    }
}

fn view(config: &Config) -> View<'_> {
    View {
        control_plane: control_plane(config),
        mcp: mcp(config),
        strict: StrictView {
            enabled: config.strict.enabled,
            on_downstream_ambiguity: config.strict.on_downstream_ambiguity.as_str(),
            latch_file: config.strict.latch_file.to_string_lossy(),
            shutdown_grace: duration(config.strict.shutdown_grace),
            cleanup_timeout: duration(config.strict.cleanup_timeout),
            latched_start: config.strict.latched_start.as_str(),
        },
        ops: OpsView {
            listen: config.ops.listen.to_string(),
            allow_remote: config.ops.allow_remote,
            log_buffer_events: config.ops.log_buffer_events,
            health_show_details: config.ops.health_show_details,
            url_file: config.ops.url_file.as_deref().map(std::path::Path::to_string_lossy),
        },
        telemetry: TelemetryView {
            log_format: config.telemetry.log_format.as_str(),
            log_level: &config.telemetry.log_level,
            otlp_endpoint: config.telemetry.otlp_endpoint.as_deref().unwrap_or(""),
            propagate: config.telemetry.propagate.as_str(),
        },
        runtime: RuntimeView {
            worker_threads: config.runtime.worker_threads.get(),
            pid_file: config.runtime.pid_file.as_deref().map(std::path::Path::to_string_lossy),
        },
        receipts: ReceiptsView {
            enabled: config.receipts.enabled,
            path: config.receipts.path.to_string_lossy(),
        },
        coordination: coordination(&config.coordination),
        harpoon: harpoon(&config.harpoon),
    }
}

fn harpoon(h: &super::Harpoon) -> HarpoonView<'_> {
    HarpoonView {
        targets: h
            .targets
            .iter()
            .map(|t| HarpoonTargetView {
                label: &t.label,
                url: shown_url(&t.url),
                description: &t.description,
            })
            .collect(),
        templates: h.templates.iter().map(template).collect(),
        allow_plaintext_http: h.allow_plaintext_http,
        max_response_bytes: h.max_response_bytes,
        max_redirects: h.max_redirects,
        hosts_include_loopback: h.hosts_include_loopback,
        hosts_include_private: h.hosts_include_private,
        hosts_include_suffix: &h.hosts_include_suffix,
        register_private_auth_servers: h.register_private_auth_servers,
        proxy: h.proxy.masked(),
        tls: tls_view(&h.tls),
    }
}

/// A target URL as `check` prints it: no userinfo, no fragment, a query as `?<redacted>`.
fn template(t: &super::HarpoonTemplate) -> TemplateView<'_> {
    use super::TemplatePart;
    let part = |p: &TemplatePart, fixed: &str| match p {
        TemplatePart::Literal(text) => {
            if fixed.is_empty() {
                text.clone()
            } else {
                fixed.to_owned()
            }
        }
        TemplatePart::Parameter(name) => format!("{{{name}}}"),
    };
    let path: Vec<String> = t.path.iter().map(|p| part(p, "")).collect();
    TemplateView {
        label: &t.label,
        description: &t.description,
        version: t.version,
        origin: &t.origin,
        path_template: format!("/{}", path.join("/")),
        query: t.query.iter().map(|(k, v)| (k.clone(), part(v, "<fixed>"))).collect(),
        parameters: t
            .parameters
            .iter()
            .map(|p| ParameterView {
                name: &p.name,
                pattern: match &p.rule {
                    super::ValueRule::Pattern(pattern) => Some(pattern.source.as_str()),
                    super::ValueRule::Enum(_) => None,
                },
                one_of: match &p.rule {
                    super::ValueRule::Enum(values) => Some(values.as_slice()),
                    super::ValueRule::Pattern(_) => None,
                },
                min_length: p.min_length,
                max_length: p.max_length,
                reserved_values: &p.reserved_values,
                examples: &p.examples,
            })
            .collect(),
        headers: t
            .headers
            .iter()
            .map(|(name, secret)| (name.clone(), secret.describe()))
            .collect(),
        allowed_headers: &t.allowed_headers,
    }
}

fn shown_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "<invalid url>".to_owned();
    };
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    parsed.set_fragment(None);
    let had_query = parsed.query().is_some();
    parsed.set_query(None);
    let mut shown = parsed.to_string();
    if had_query {
        shown.push_str("?<redacted>");
    }
    shown
}

fn coordination(c: &super::Coordination) -> CoordinationView<'_> {
    CoordinationView {
        backend: c.backend(),
        lease_ttl: duration(c.lease_ttl),
        step_down_after: duration(c.step_down_after),
        etcd: c.etcd.as_ref().map(|e| EtcdView {
            endpoints: e.endpoints.iter().map(|u| u.as_str()).collect(),
            prefix: &e.prefix,
            username: e.credentials.as_ref().map(|(u, _)| u.masked()),
            password: e.credentials.as_ref().map(|(_, p)| p.masked()),
            tls: tls_view(&e.tls),
        }),
    }
}

fn control_plane(config: &Config) -> ControlPlaneView<'_> {
    let cp = &config.control_plane;
    ControlPlaneView {
        base_url: &cp.base_url,
        url_path: &cp.url_path,
        tunnel_id: &cp.tunnel_id,
        api_key: cp.api_key.masked(),
        poll_timeout: duration(cp.poll_timeout),
        max_inflight: cp.max_inflight.get(),
        post_timeout: duration(cp.post_timeout),
        post_attempts: cp.post_attempts.get(),
        proxy: cp.proxy.masked(),
        organization_id: cp.organization_id.as_deref(),
        poll_channels: cp.poll_channels.iter().map(|name| name.as_str()).collect(),
        http2: cp.http2,
        resp_timing: cp.resp_timing,
        routing_correction: cp.routing_correction,
        initial_poll_timeout: cp.initial_poll_timeout.map(duration),
        headers: headers_view(&cp.headers),
        tls: tls_view(&cp.tls),
    }
}

/// Each configured header by name, its value masked as an API key is.
fn headers_view(headers: &super::HeaderSet) -> BTreeMap<&str, String> {
    headers.iter().map(|(name, value)| (name, value.masked())).collect()
}

fn mcp(config: &Config) -> McpView<'_> {
    let channels = config
        .mcp
        .channels
        .iter()
        .map(|(name, channel)| {
            let mut view = channel_view(channel);
            if let Some(headers) = config.mcp.headers.get(name) {
                view.headers = headers_view(headers);
            }
            view.tls = config.mcp.channel_tls.get(name).and_then(tls_view);
            (name.as_str(), view)
        })
        .collect();
    McpView {
        max_concurrent: config.mcp.max_concurrent.get(),
        request_timeout: duration(config.mcp.request_timeout),
        connect_timeout: duration(config.mcp.connect_timeout),
        proxy: config.mcp.proxy.masked(),
        channels,
        tls: tls_view(&config.mcp.tls),
        oauth_trusted_origins: &config.mcp.oauth_trusted_origins,
    }
}

fn tls_view(files: &TlsFiles) -> Option<TlsView> {
    let shown = |f: &TlsFile| f.path.to_string_lossy().into_owned();
    (!files.is_empty()).then(|| TlsView {
        ca_file: files.ca_file.as_ref().map(shown),
        client_cert: files.client.as_ref().map(|c| shown(&c.cert)),
        client_key: files.client.as_ref().map(|c| shown(&c.key)),
        ca_only: files.ca_only,
    })
}

fn channel_view(channel: &ChannelConfig) -> ChannelView<'_> {
    match channel {
        ChannelConfig::Http {
            url,
            proxy,
            socket,
            era,
            input_required,
        } => ChannelView {
            url: Some(url.as_str()),
            command: None,
            env: None,
            max_concurrent: None,
            session: None,
            era: Some(era.as_str()),
            input_required: Some(input_required_view(input_required)),
            initialize: None,
            proxy: socket.is_none().then(|| proxy.masked()),
            socket: socket.as_ref().map(|p| p.to_string_lossy()),
            headers: BTreeMap::new(),
            tls: None,
        },
        ChannelConfig::Stdio {
            command,
            env,
            max_concurrent,
            session,
        } => ChannelView {
            url: None,
            command: Some(command),
            env: (!env.is_empty()).then_some(env),
            max_concurrent: Some(max_concurrent.get()),
            session: Some(match session.owner {
                super::SessionOwner::Owned => "owned",
                super::SessionOwner::PassThrough => "pass_through",
            }),
            era: Some(session.era.as_str()),
            input_required: Some(input_required_view(&session.input_required)),
            initialize: Some(InitializeView {
                protocol_version: &session.protocol_version,
                client_name: &session.client_name,
                client_version: &session.client_version,
                capabilities: &session.capabilities,
                timeout: duration(session.timeout),
            }),
            proxy: None,
            socket: None,
            headers: BTreeMap::new(),
            tls: None,
        },
    }
}

fn duration(value: std::time::Duration) -> String {
    humantime::format_duration(value).to_string()
}

/// `mcp.channels.NAME.input_required` as shown.
fn input_required_view(bounds: &super::InputRequired) -> InputRequiredView {
    InputRequiredView {
        park_timeout: duration(bounds.park_timeout),
        call_timeout: duration(bounds.call_timeout),
        max_rounds: bounds.max_rounds,
    }
}
