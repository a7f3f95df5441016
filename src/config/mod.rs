//! Configuration: the layered sources, their validation, and the typed result.
//!
//! Owns the mapping from configuration inputs to [`Config`]. Layers, lowest first:
//! built-in defaults < the anchor client's variables (`CONTROL_PLANE_TUNNEL_ID`,
//! `CONTROL_PLANE_BASE_URL`, `CONTROL_PLANE_ORGANIZATION_ID`, `HEALTH_LISTEN_ADDR`,
//! `MCP_SERVER_URL`, `MCP_COMMAND`, the proxy variables `TUNNEL_CLIENT_HTTP_PROXY`,
//! `CONTROL_PLANE_HTTP_PROXY`, `MCP_HTTP_PROXY`, the TLS variables `CA_BUNDLE`,
//! `CONTROL_PLANE_CLIENT_CERT`/`_KEY`, `MCP_CLIENT_CERT`/`_KEY`, and
//! `CONTROL_PLANE_EXTRA_HEADERS` / `MCP_EXTRA_HEADERS` under the `headers` tables: see
//! `headers`; `CONTROL_PLANE_POLL_CHANNELS`) < the TOML file <
//! `TUNNELGATE_` environment variables (`__` between levels) < command-line overrides.
//! The anchor's `MCP_SERVER_URL` / `MCP_COMMAND` supply the `main` channel only when no
//! other layer configures any channel.
//!
//! Invariants: a [`Config`] is fully validated (parse, don't validate): URLs, the tunnel
//! id and channel names are parsed once into [`HttpUrl`], [`TunnelId`] and
//! [`ChannelName`]; secrets are resolved once at load and never printed (`Debug`,
//! `Display` and [`Config::masked`] show only their reference); errors name the dotted key and never echo secret values
//! or URLs. This module performs no network I/O and never mutates the process
//! environment; the only I/O is reading the config file (or the official profile the
//! selectors name, and the `file:` values upstream resolves in it: `profile`), `file:`
//! secrets, and checking that the directories of `runtime.pid_file` and `ops.url_file`
//! exist.
//!
//! Without `--config`, an official client profile (YAML) named by `--profile`,
//! `--profile-file`, `TUNNEL_CLIENT_CONFIG`, `TUNNEL_CLIENT_PROFILE` or
//! `TUNNEL_CLIENT_PROFILE_FILE` is converted and read in its place, below the anchor
//! client's variables (`profile`).
//!
//! [`Config::load_offline`] is the one other mode, for the commands that read only local
//! files (`latch show|clear`, `receipts`, `support-bundle`): every key is validated as
//! always, but a secret reference with no value here is kept unresolved instead of failing
//! the load, and the result is an [`OfflineConfig`], never a bare [`Config`].

mod channel;
mod channel_name;
mod command_line;
mod coordination;
mod defaults;
mod duration;
mod error;
mod harpoon;
mod harpoon_template;
mod headers;
mod layers;
mod masked;
mod number;
mod oauth_origins;
mod offline;
mod poll_channels;
mod profile;
mod proxy;
mod raw;
mod secret;
mod text;
mod tls;
mod tunnel_id;
mod validation;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use channel_name::ChannelName;
pub(crate) use coordination::Coordination;
pub use coordination::EtcdConfig;
pub use error::ConfigError;
pub(crate) use harpoon::Harpoon;
pub(crate) use harpoon_template::{canonical_header, is_header_token, is_routing_or_identity, names_a_credential};
pub(crate) use harpoon_template::{
    reserved_pattern, HarpoonTemplate, Part as TemplatePart, TemplateParameter, ValueRule,
    MAX_HEADERS as TEMPLATE_MAX_HEADERS, MAX_HEADER_BYTES as TEMPLATE_MAX_HEADER_BYTES,
    MAX_URL_BYTES as TEMPLATE_MAX_URL_BYTES,
};
pub(crate) use headers::HeaderSet;
pub use offline::OfflineConfig;
pub use profile::{convert_profile, ConfigOrigin, ProfileError, ProfileFlags};
pub(crate) use secret::Secret;
pub(crate) use tunnel_id::TunnelId;

use crate::egress::http_url::HttpUrl;
use crate::egress::proxy::ProxySetting;
use crate::egress::tls::TlsFiles;
use layers::{EnvVars, FileLayer};

/// The validated, effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub control_plane: ControlPlane,
    pub mcp: Mcp,
    pub strict: Strict,
    pub ops: Ops,
    pub telemetry: Telemetry,
    pub runtime: Runtime,
    pub receipts: Receipts,
    pub coordination: Coordination,
    /// `[harpoon]`: the built-in channel `harpoon`.
    pub harpoon: Harpoon,
}

/// `[control_plane]`: where commands are polled from and responses posted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlane {
    /// An http(s) URL without a trailing slash, query or fragment.
    pub base_url: HttpUrl,
    /// `""` or a path starting with `/`, without a trailing `/`.
    pub url_path: String,
    /// Non-empty, free of whitespace and of `/ ? # %` (it is placed in request paths).
    pub tunnel_id: TunnelId,
    pub api_key: Secret,
    /// Non-zero.
    pub poll_timeout: Duration,
    pub max_inflight: NonZeroUsize,
    /// Non-zero; bounds one response POST attempt.
    pub post_timeout: Duration,
    pub post_attempts: NonZeroU32,
    /// Sent as `OpenAI-Organization` on every control-plane request; trimmed, non-empty.
    pub organization_id: Option<String>,
    /// Sent on every control-plane request (`CONTROL_PLANE_EXTRA_HEADERS` under
    /// `control_plane.headers`); no reserved name.
    pub headers: HeaderSet,
    /// `control_plane.proxy`: how the control plane is reached.
    pub proxy: ProxySetting,
    /// `control_plane.tls`: private CA and client certificate files.
    pub tls: TlsFiles,
    /// `control_plane.poll_channels`: the poll filter, sorted and without duplicates,
    /// each a configured channel; empty when not configured (polls then carry no
    /// `channel` parameter and the control plane hands out every channel's commands).
    pub poll_channels: Vec<ChannelName>,
    /// `control_plane.http2`: offer HTTP/2 by ALPN to a TLS control plane (default false:
    /// HTTP/1.1, which cost less CPU per command below 64 in flight; docs/PERFORMANCE.md).
    pub http2: bool,
    /// `control_plane.resp_timing`: terminal answers of MCP servers carry `resp_timing`
    /// (wire 2026-08-25; default false: the published contract's response schema still
    /// refuses unknown fields).
    pub resp_timing: bool,
    /// `control_plane.routing_correction`: advertise `wrong-cluster-v1` and follow a
    /// poll's `409 wrong_cluster` (wire 2026-08-25; default false: the service has not
    /// enabled it).
    pub routing_correction: bool,
    /// `control_plane.initial_poll_timeout`: when set, the very first poll attempt waits
    /// `min(poll_timeout, this)` instead of asking for no wait.
    pub initial_poll_timeout: Option<Duration>,
}

/// `[mcp]`: the downstream MCP servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mcp {
    /// Exactly 1 when `strict.enabled`.
    pub max_concurrent: NonZeroUsize,
    /// Non-zero; bounds one downstream leg when the command carries no `response_timeout`.
    pub request_timeout: Duration,
    /// Non-zero.
    pub connect_timeout: Duration,
    /// 1 to 32 channels; names match `[A-Za-z0-9_-]{1,64}`.
    pub channels: BTreeMap<ChannelName, ChannelConfig>,
    /// The configured headers of each HTTP channel that has any (`MCP_EXTRA_HEADERS`
    /// under `mcp.channels.NAME.headers`), sent to that channel's server only.
    pub headers: BTreeMap<ChannelName, HeaderSet>,
    /// `mcp.proxy`: the HTTP channels' proxy unless a channel sets its own.
    pub proxy: ProxySetting,
    /// `mcp.tls` as written (the shared table).
    pub tls: TlsFiles,
    /// Each HTTP channel's effective TLS files (its `tls` over `mcp.tls`, key by key);
    /// channels with none are absent.
    pub channel_tls: BTreeMap<ChannelName, TlsFiles>,
    /// Origins OAuth discovery may read besides the MCP server's own (canonical
    /// `scheme://host[:port]`, sorted, no duplicates).
    pub oauth_trusted_origins: Vec<String>,
}

impl Mcp {
    /// The effective TLS files of channel `name` (empty when none apply).
    pub fn tls_of(&self, name: &str) -> TlsFiles {
        self.channel_tls.get(name).cloned().unwrap_or_default()
    }
}

/// One `[mcp.channels.NAME]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelConfig {
    /// Streamable HTTP; `url` is an http(s) URL without a fragment. `proxy` is the
    /// channel's own `proxy`, else `mcp.proxy`; `socket` (a unix domain socket path) is
    /// never set together with an explicit channel proxy, and when set the channel goes
    /// direct (`proxy` is [`ProxySetting::Off`]).
    Http {
        url: HttpUrl,
        proxy: ProxySetting,
        socket: Option<PathBuf>,
        /// The server's era (`auto`: probed by the era bridge for 2026-07-28 callers).
        era: EraSetting,
        /// How the era bridge holds a 2026-07-28 caller's call across input rounds.
        input_required: InputRequired,
    },
    /// stdio; `command` is a non-empty argv (no shell). `env` is added on top of a
    /// minimal base and never names the API key variable, `TUNNELGATE_*` or
    /// `CONTROL_PLANE_*`. `max_concurrent` is the effective bound on requests in flight to
    /// the child: the channel's own value, else `mcp.max_concurrent`, never above it.
    Stdio {
        command: Vec<String>,
        env: BTreeMap<String, String>,
        max_concurrent: NonZeroUsize,
        session: StdioSession,
    },
}

/// Who opens a stdio child's MCP session (`mcp.channels.NAME.session`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOwner {
    /// `"owned"` (default): the gateway initializes each child itself and answers callers
    /// from the session; a child that refuses `initialize` as a 2026-07-28 server does
    /// is passed through.
    Owned,
    /// `"pass_through"`: nothing is initialized by the gateway; every message passes
    /// untouched (a 2026-07-28 server that is discovered rather than initialized).
    PassThrough,
}

/// A stdio channel's session: who opens it and the gateway's own `initialize`
/// (`mcp.channels.NAME.initialize`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioSession {
    pub owner: SessionOwner,
    /// The server's era (`mcp.channels.NAME.era`): `auto` (default) detects it by the
    /// gateway's `initialize`; `legacy` and `modern` say it.
    pub era: EraSetting,
    /// How the era bridge holds a 2026-07-28 caller's call across input rounds.
    pub input_required: InputRequired,
    pub protocol_version: String,
    pub client_name: String,
    pub client_version: String,
    /// The client capabilities the session declares (a JSON object).
    pub capabilities: serde_json::Map<String, serde_json::Value>,
    /// Bound of the gateway's handshake with one child.
    pub timeout: Duration,
}

impl Default for StdioSession {
    /// What a stdio channel that sets neither `session` nor `initialize` gets.
    fn default() -> Self {
        channel::default_session()
    }
}

/// Which era a channel's server is configured to be (`mcp.channels.NAME.era`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EraSetting {
    /// Detected by the gateway's own handshake (never by a method that could run a tool).
    Auto,
    /// A handshake-era server: the gateway always opens its session.
    Legacy,
    /// A 2026-07-28 server: never initialized by the gateway; every message passes.
    Modern,
}

impl EraSetting {
    pub const ALL: [Self; 3] = [Self::Auto, Self::Legacy, Self::Modern];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Legacy => "legacy",
            Self::Modern => "modern",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == text)
    }
}

/// `mcp.channels.NAME.input_required`: the bounds of a call the era bridge holds while
/// a handshake-era server waits for a 2026-07-28 caller's input (default mode only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRequired {
    /// How long a parked call waits for its caller's retry.
    pub park_timeout: Duration,
    /// The bound of a held call's whole life, across all its rounds.
    pub call_timeout: Duration,
    /// Input rounds per call.
    pub max_rounds: u32,
}

/// `[strict]`: the fail-closed mode (docs/strict-mode.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strict {
    pub enabled: bool,
    pub on_downstream_ambiguity: AmbiguityPolicy,
    pub latch_file: PathBuf,
    pub shutdown_grace: Duration,
    pub cleanup_timeout: Duration,
    /// What a strict gateway does when it starts and finds a latch file.
    pub latched_start: LatchedStart,
}

/// `strict.latched_start`: a persisted latch found at startup either ends the process at
/// once (`exit`, code 89), or holds it in the fatal state, serving only the ops listener,
/// until it is stopped (`hold`; then code 89), so that a supervisor that restarts it and a
/// pull-based monitor both see the latch and its category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatchedStart {
    Exit,
    Hold,
}

/// What strict mode does when a downstream leg ends `abandoned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmbiguityPolicy {
    Fatal,
    Report,
}

/// `[ops]`: the local operator listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ops {
    /// Loopback unless `allow_remote`.
    pub listen: SocketAddr,
    pub allow_remote: bool,
    /// The log ring's capacity in events (`GET /events`, the support bundle); 0 keeps
    /// none. At most [`MAX_LOG_BUFFER_EVENTS`].
    pub log_buffer_events: usize,
    /// `ops.health_show_details`: `/health` shows its components unless asked not to.
    pub health_show_details: bool,
    /// `ops.url_file`: where the listener's base URL (`http://host:port`) is written once
    /// it is bound, removed when the run ends; its directory existed at load.
    pub url_file: Option<PathBuf>,
}

/// `[telemetry]`: logs and traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Telemetry {
    pub log_format: LogFormat,
    /// A non-empty `tracing` filter directive (accepted by `EnvFilter`).
    pub log_level: String,
    /// An http(s) base URL without a trailing slash; `None` when export is off.
    pub otlp_endpoint: Option<HttpUrl>,
    /// Where the gateway hands W3C trace context on to MCP servers.
    pub propagate: Propagate,
}

/// `[runtime]`: the process `tunnelgate run` is (its async runtime, its PID file). An
/// embedder runs [`Gateway`](crate::Gateway) on its own runtime in its own process; these
/// values do not apply there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// 1 (the default): one thread runs every task, a scheduler without cross-thread
    /// wake-ups. More: a work-stealing scheduler with this many worker threads.
    /// At most 256.
    pub worker_threads: NonZeroUsize,
    /// `runtime.pid_file`: where `tunnelgate run` writes its process id at start, removed
    /// when the run ends; its directory existed at load.
    pub pid_file: Option<PathBuf>,
}

/// `[receipts]`: the local journal of commands that did not end cleanly (docs/operations.md,
/// "Delivery receipts").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipts {
    pub enabled: bool,
    /// The effective path: `receipts.path`, else `receipts.jsonl` in the directory of
    /// `strict.latch_file`. Never empty.
    pub path: PathBuf,
}

/// `telemetry.propagate`: which carriers get the gateway's trace context on the way to an
/// MCP server. `Off` forwards every command byte for byte, headers as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagate {
    Off,
    /// `traceparent`/`tracestate` HTTP request headers (HTTP channels).
    Headers,
    /// `params._meta.traceparent`/`tracestate` of requests and notifications (every channel).
    Meta,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// Values given on the command line; they override every other layer. `profile` names
/// an official profile to read when no `--config` file is given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub strict: Option<bool>,
    pub ops_listen: Option<String>,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
    pub latch_file: Option<PathBuf>,
    pub profile: ProfileFlags,
}

impl Config {
    /// Loads every layer, reading the process environment. Without `path`, the official
    /// profile the selectors name (flags in `overrides.profile`, else the variables) is
    /// the file layer, if any.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        Config::load_with_env(path, overrides, &process_env())
    }

    /// Like [`Config::load`], and where its file layer came from (for the run's log).
    pub fn load_with_origin(path: Option<&Path>, overrides: &Overrides) -> Result<(Config, ConfigOrigin), ConfigError> {
        Config::traced(path, overrides, &process_env())
    }

    /// Like [`Config::load`], with `env` standing in for the process environment
    /// (for layering, anchor variables, the profile selectors and `env:` secrets alike).
    pub fn load_with_env(
        path: Option<&Path>,
        overrides: &Overrides,
        env: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        Config::traced(path, overrides, env).map(|(config, _)| config)
    }

    fn traced(
        path: Option<&Path>,
        overrides: &Overrides,
        env: &[(String, String)],
    ) -> Result<(Config, ConfigOrigin), ConfigError> {
        let env = EnvVars::new(env);
        let (file, origin) = profile::file_layer(path, &overrides.profile, &env)?;
        let (config, _) = Config::build(file, overrides, &env)?;
        Ok((config, origin))
    }

    /// Like [`Config::load`] for a command that reads only local files: a secret whose
    /// variable or file gives no value here is kept unresolved (see `OfflineConfig`);
    /// every other problem is the same error as for [`Config::load`].
    pub fn load_offline(path: Option<&Path>, overrides: &Overrides) -> Result<OfflineConfig, ConfigError> {
        Config::load_offline_with_env(path, overrides, &process_env())
    }

    /// Like [`Config::load_offline`], with `env` standing in for the process environment.
    pub fn load_offline_with_env(
        path: Option<&Path>,
        overrides: &Overrides,
        env: &[(String, String)],
    ) -> Result<OfflineConfig, ConfigError> {
        let env = EnvVars::offline(env);
        let (file, _) = profile::file_layer(path, &overrides.profile, &env)?;
        let (config, unresolved) = Config::build(file, overrides, &env)?;
        Ok(OfflineConfig::new(config, unresolved))
    }

    /// Defaults plus this TOML only: no environment variables are read, not even for
    /// `env:` secrets (so the TOML must give `api_key` as a literal or `file:`).
    pub fn from_toml_str(toml: &str) -> Result<Config, ConfigError> {
        Config::from_layers(Some(FileLayer::inline(toml)?), &Overrides::default(), &[])
    }

    /// The effective configuration as TOML; secrets appear only as their reference.
    pub fn masked(&self) -> String {
        masked::render(self)
    }

    /// The dotted keys whose effective values differ in `other`, sorted; what a reload
    /// compares. Secrets are compared by value and named only by their key.
    pub fn changed_keys(&self, other: &Config) -> Vec<String> {
        masked::changed_keys(self, other)
    }

    /// Names of the stdio channels, sorted.
    pub fn stdio_channel_names(&self) -> Vec<String> {
        self.mcp
            .channels
            .iter()
            .filter(|(_, channel)| matches!(channel, ChannelConfig::Stdio { .. }))
            .map(|(name, _)| name.to_string())
            .collect()
    }

    /// Names of the Streamable HTTP channels, sorted.
    pub fn http_channel_names(&self) -> Vec<String> {
        self.mcp
            .channels
            .iter()
            .filter(|(_, channel)| matches!(channel, ChannelConfig::Http { .. }))
            .map(|(name, _)| name.to_string())
            .collect()
    }

    fn from_layers(
        file: Option<FileLayer>,
        overrides: &Overrides,
        env: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        // Not an offline snapshot: nothing is kept unresolved.
        Config::build(file, overrides, &EnvVars::new(env)).map(|(config, _)| config)
    }

    /// The configuration, and the secret references `env` kept unresolved (none unless
    /// it is an offline snapshot), each naming what set its key.
    fn build(
        file: Option<FileLayer>,
        overrides: &Overrides,
        env: &EnvVars,
    ) -> Result<(Config, Vec<ConfigError>), ConfigError> {
        let figment = layers::figment(file, overrides, env)?;
        let raw: raw::RawConfig = figment
            .extract()
            .map_err(|e| layers::with_source(ConfigError::from_figment(e), &figment))?;
        let config = validation::build(raw, env).map_err(|e| layers::with_source(e, &figment))?;
        let unresolved = env
            .take_unresolved()
            .into_iter()
            .map(|e| layers::with_source(e, &figment))
            .collect();
        Ok((config, unresolved))
    }
}

/// The process environment, as the pairs that are valid UTF-8.
fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

impl LatchedStart {
    /// The configuration spelling: `"exit"` or `"hold"`.
    pub fn as_str(self) -> &'static str {
        match self {
            LatchedStart::Exit => "exit",
            LatchedStart::Hold => "hold",
        }
    }
}

impl AmbiguityPolicy {
    /// The configuration spelling: `"fatal"` or `"report"`.
    pub fn as_str(self) -> &'static str {
        match self {
            AmbiguityPolicy::Fatal => "fatal",
            AmbiguityPolicy::Report => "report",
        }
    }
}

impl Propagate {
    /// The configuration spelling: `"off"`, `"headers"`, `"meta"` or `"both"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Propagate::Off => "off",
            Propagate::Headers => "headers",
            Propagate::Meta => "meta",
            Propagate::Both => "both",
        }
    }

    /// Whether HTTP requests to MCP servers get `traceparent`/`tracestate` headers.
    pub fn headers(self) -> bool {
        matches!(self, Propagate::Headers | Propagate::Both)
    }

    /// Whether messages get `traceparent`/`tracestate` in `params._meta`.
    pub fn meta(self) -> bool {
        matches!(self, Propagate::Meta | Propagate::Both)
    }
}

impl LogFormat {
    /// The configuration spelling: `"json"` or `"text"`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}
