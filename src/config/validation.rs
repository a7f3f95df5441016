//! Turns the merged raw input into a [`Config`]: applies defaults, parses every value
//! into its type, resolves secrets, and checks the rules that span keys.
//!
//! Each error names the full dotted key. Checks run in key order, section by section,
//! so the first problem reported is the first one in the file's natural order. The one
//! look at the file system here: the directory of `runtime.pid_file` and `ops.url_file`
//! must exist.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use super::channel;
use super::defaults as default;
use super::duration::{duration, positive_duration};
use super::error::ConfigError;
use super::headers;
use super::layers::EnvVars;
use super::number::{attempts, count};
use super::proxy;
use super::raw::{RawConfig, RawControlPlane, RawMcp, RawOps, RawReceipts, RawRuntime, RawStrict, RawTelemetry};
use super::{
    AmbiguityPolicy, Config, ControlPlane, HeaderSet, LatchedStart, LogFormat, Mcp, Ops, Propagate, Receipts, Runtime,
    Secret, Strict, Telemetry, TunnelId,
};
use crate::egress::http_url::HttpUrl;

pub(super) fn build(mut raw: RawConfig, env: &EnvVars) -> Result<Config, ConfigError> {
    let poll_channels = raw.control_plane.poll_channels.take();
    let mut control_plane = control_plane(raw.control_plane, env)?;
    let strict_enabled = raw.strict.enabled.unwrap_or(default::STRICT_ENABLED);
    let mcp = mcp(raw.mcp, strict_enabled, &control_plane.api_key, env)?;
    control_plane.poll_channels = super::poll_channels::poll_channels(poll_channels, &mcp.channels)?;
    let strict = strict(raw.strict)?;
    let coordination =
        super::coordination::coordination(raw.coordination, strict.enabled, &control_plane.tunnel_id, env)?;
    Ok(Config {
        control_plane,
        mcp,
        ops: ops(raw.ops)?,
        telemetry: telemetry(raw.telemetry)?,
        runtime: runtime(raw.runtime)?,
        receipts: receipts(raw.receipts, &strict.latch_file)?,
        strict,
        coordination,
        harpoon: super::harpoon::harpoon(raw.harpoon, env)?,
    })
}

/// `[receipts]`: an explicit path must name a file; unset, the journal lives beside the
/// latch file.
fn receipts(raw: RawReceipts, latch_file: &std::path::Path) -> Result<Receipts, ConfigError> {
    let path = match raw.path.as_deref() {
        Some("") => return Err(ConfigError::invalid(
            "receipts.path",
            "is empty; give a file path, e.g. \"/var/lib/tunnelgate/receipts.jsonl\", or set receipts.enabled = false",
        )),
        Some(p) if p.ends_with('/') => {
            return Err(ConfigError::invalid(
                "receipts.path",
                format!("{p:?} names a directory; give a file path, e.g. \"{p}receipts.jsonl\""),
            ))
        }
        Some(p) => PathBuf::from(p),
        None => latch_file.with_file_name(default::RECEIPTS_FILE_NAME),
    };
    Ok(Receipts {
        enabled: raw.enabled.unwrap_or(default::RECEIPTS_ENABLED),
        path,
    })
}

fn runtime(raw: RawRuntime) -> Result<Runtime, ConfigError> {
    const KEY: &str = "runtime.worker_threads";
    let value = raw.worker_threads.unwrap_or(default::WORKER_THREADS);
    if value > default::MAX_WORKER_THREADS {
        return Err(ConfigError::invalid(
            KEY,
            format!("must be at most {} (found {value})", default::MAX_WORKER_THREADS),
        ));
    }
    Ok(Runtime {
        worker_threads: count(KEY, value)?,
        pid_file: run_file("runtime.pid_file", raw.pid_file)?,
    })
}

/// A file the run writes and removes (`runtime.pid_file`, `ops.url_file`): a path whose
/// directory exists (the file itself is created, its directory never is).
fn run_file(key: &str, value: Option<String>) -> Result<Option<PathBuf>, ConfigError> {
    let Some(text) = value else { return Ok(None) };
    if text.trim().is_empty() {
        return Err(ConfigError::invalid(
            key,
            "is empty; give a file path, or remove the key",
        ));
    }
    let path = PathBuf::from(&text);
    if text.ends_with('/') || path.is_dir() {
        return Err(ConfigError::invalid(
            key,
            format!("{text:?} names a directory; give a file path in it"),
        ));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(ConfigError::invalid(
            key,
            format!(
                "the directory {} does not exist (the file is created in it; the directory never is)",
                dir.display()
            ),
        ));
    }
    Ok(Some(path))
}

fn control_plane(raw: RawControlPlane, env: &EnvVars) -> Result<ControlPlane, ConfigError> {
    let base_url = raw.base_url.as_deref().unwrap_or(default::BASE_URL);
    let api_key = raw.api_key.as_deref().unwrap_or(default::API_KEY);
    let mut control_plane = ControlPlane {
        base_url: HttpUrl::base("control_plane.base_url", base_url)?,
        url_path: url_path(raw.url_path.as_deref().unwrap_or(default::URL_PATH))?,
        tunnel_id: TunnelId::parse(raw.tunnel_id)?,
        api_key: Secret::resolve("control_plane.api_key", api_key, env)?.header_token("control_plane.api_key")?,
        poll_timeout: positive_duration("control_plane.poll_timeout", raw.poll_timeout, default::POLL_TIMEOUT)?,
        max_inflight: count(
            "control_plane.max_inflight",
            raw.max_inflight.unwrap_or(default::MAX_INFLIGHT),
        )?,
        post_timeout: positive_duration("control_plane.post_timeout", raw.post_timeout, default::POST_TIMEOUT)?,
        post_attempts: attempts(
            "control_plane.post_attempts",
            raw.post_attempts.unwrap_or(default::POST_ATTEMPTS),
        )?,
        organization_id: headers::organization_id(raw.organization_id)?,
        headers: HeaderSet::default(),
        proxy: proxy::setting("control_plane.proxy", raw.proxy.as_deref(), None, env)?,
        tls: super::tls::control_plane_tls(raw.tls)?,
        poll_channels: Vec::new(),
        http2: raw.http2.unwrap_or(default::CONTROL_PLANE_HTTP2),
        resp_timing: raw.resp_timing.unwrap_or(default::RESP_TIMING),
        routing_correction: raw.routing_correction.unwrap_or(false),
        initial_poll_timeout: raw
            .initial_poll_timeout
            .map(|text| positive_duration("control_plane.initial_poll_timeout", Some(text), "30s"))
            .transpose()?,
    };
    control_plane.headers = headers::control_plane(raw.headers, control_plane.organization_id.as_deref(), env)?;
    Ok(control_plane)
}

/// `""` stays `""`; otherwise it must start with `/`; trailing slashes are removed.
fn url_path(value: &str) -> Result<String, ConfigError> {
    const KEY: &str = "control_plane.url_path";
    if value.is_empty() {
        return Ok(String::new());
    }
    if !value.starts_with('/') {
        return Err(ConfigError::invalid(
            KEY,
            format!("{value:?} must start with '/' (e.g. \"/proxy\"), or be \"\""),
        ));
    }
    if value
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
    {
        return Err(ConfigError::invalid(
            KEY,
            "must be a plain path, without whitespace, '?' or '#'",
        ));
    }
    Ok(value.trim_end_matches('/').to_owned())
}

fn mcp(mut raw: RawMcp, strict: bool, api_key: &Secret, env: &EnvVars) -> Result<Mcp, ConfigError> {
    let max_concurrent = max_concurrent(raw.max_concurrent, strict)?;
    let headers = headers::channels(&mut raw.channels, env)?;
    let proxy = proxy::setting("mcp.proxy", raw.proxy.as_deref(), None, env)?;
    let (tls, channel_tls) = super::tls::mcp_tls(raw.tls.take(), &mut raw.channels)?;
    Ok(Mcp {
        max_concurrent,
        request_timeout: positive_duration("mcp.request_timeout", raw.request_timeout, default::REQUEST_TIMEOUT)?,
        connect_timeout: positive_duration("mcp.connect_timeout", raw.connect_timeout, default::CONNECT_TIMEOUT)?,
        channels: channel::channels(raw.channels, api_key, max_concurrent, &proxy, env)?,
        headers,
        proxy,
        tls,
        channel_tls,
        oauth_trusted_origins: super::oauth_origins::trusted_origins(raw.oauth_trusted_origins)?,
    })
}

/// Strict mode admits one command at a time: an unset value becomes 1 there, and an
/// explicit value above 1 is an error rather than silently lowered.
fn max_concurrent(value: Option<u64>, strict: bool) -> Result<NonZeroUsize, ConfigError> {
    const KEY: &str = "mcp.max_concurrent";
    match (value, strict) {
        (None, true) => count(KEY, default::STRICT_MAX_CONCURRENT),
        (None, false) => count(KEY, default::MAX_CONCURRENT),
        (Some(n), true) if n > 1 => Err(ConfigError::invalid(
            KEY,
            format!("is {n}, but must be 1 when strict.enabled = true (strict mode admits one command at a time)"),
        )),
        (Some(n), _) => count(KEY, n),
    }
}

fn strict(raw: RawStrict) -> Result<Strict, ConfigError> {
    let latch_file = raw.latch_file.as_deref().unwrap_or(default::LATCH_FILE);
    if latch_file.is_empty() {
        return Err(ConfigError::invalid(
            "strict.latch_file",
            "is empty; give a path, e.g. \"/var/lib/tunnelgate/latch.json\"",
        ));
    }
    Ok(Strict {
        enabled: raw.enabled.unwrap_or(default::STRICT_ENABLED),
        on_downstream_ambiguity: ambiguity_policy(raw.on_downstream_ambiguity.as_deref())?,
        latch_file: PathBuf::from(latch_file),
        shutdown_grace: duration("strict.shutdown_grace", raw.shutdown_grace, default::SHUTDOWN_GRACE)?,
        cleanup_timeout: duration("strict.cleanup_timeout", raw.cleanup_timeout, default::CLEANUP_TIMEOUT)?,
        latched_start: latched_start(raw.latched_start.as_deref())?,
    })
}

fn latched_start(value: Option<&str>) -> Result<LatchedStart, ConfigError> {
    match value.unwrap_or("exit") {
        "exit" => Ok(LatchedStart::Exit),
        "hold" => Ok(LatchedStart::Hold),
        other => Err(ConfigError::invalid(
            "strict.latched_start",
            format!("{other:?} is not a choice; use \"exit\" (exit 89 at once) or \"hold\" (serve the fatal state until stopped)"),
        )),
    }
}

fn ambiguity_policy(value: Option<&str>) -> Result<AmbiguityPolicy, ConfigError> {
    match value.unwrap_or(default::ON_DOWNSTREAM_AMBIGUITY) {
        "fatal" => Ok(AmbiguityPolicy::Fatal),
        "report" => Ok(AmbiguityPolicy::Report),
        other => Err(ConfigError::invalid(
            "strict.on_downstream_ambiguity",
            format!("{other:?} is not a policy; use \"fatal\" or \"report\""),
        )),
    }
}

fn ops(raw: RawOps) -> Result<Ops, ConfigError> {
    const KEY: &str = "ops.listen";
    let allow_remote = raw.allow_remote.unwrap_or(default::ALLOW_REMOTE);
    let text = raw.listen.as_deref().unwrap_or(default::LISTEN);
    let listen: SocketAddr = text.parse().map_err(|_| {
        ConfigError::invalid(
            KEY,
            format!("{text:?} is not an IP address and port (use e.g. \"127.0.0.1:9464\")"),
        )
    })?;
    if !listen.ip().is_loopback() && !allow_remote {
        return Err(ConfigError::invalid(
            KEY,
            format!("{listen} is not a loopback address; set ops.allow_remote = true to listen on it"),
        ));
    }
    Ok(Ops {
        listen,
        allow_remote,
        log_buffer_events: log_buffer_events(raw.log_buffer_events)?,
        health_show_details: raw.health_show_details.unwrap_or(false),
        url_file: run_file("ops.url_file", raw.url_file)?,
    })
}

fn log_buffer_events(value: Option<u64>) -> Result<usize, ConfigError> {
    let value = value.unwrap_or(default::LOG_BUFFER_EVENTS);
    if value > default::MAX_LOG_BUFFER_EVENTS {
        return Err(ConfigError::invalid(
            "ops.log_buffer_events",
            format!(
                "{value} is too many; at most {} (0 keeps no log events)",
                default::MAX_LOG_BUFFER_EVENTS
            ),
        ));
    }
    Ok(usize::try_from(value).expect("at most MAX_LOG_BUFFER_EVENTS fits a usize"))
}

fn telemetry(raw: RawTelemetry) -> Result<Telemetry, ConfigError> {
    Ok(Telemetry {
        log_format: log_format(raw.log_format.as_deref().unwrap_or(default::LOG_FORMAT))?,
        log_level: log_level(raw.log_level.unwrap_or_else(|| default::LOG_LEVEL.to_owned()))?,
        otlp_endpoint: otlp_endpoint(raw.otlp_endpoint.as_deref().unwrap_or(default::OTLP_ENDPOINT))?,
        propagate: propagate(raw.propagate.as_deref().unwrap_or(default::PROPAGATE))?,
    })
}

fn propagate(value: &str) -> Result<Propagate, ConfigError> {
    match value {
        "off" => Ok(Propagate::Off),
        "headers" => Ok(Propagate::Headers),
        "meta" => Ok(Propagate::Meta),
        "both" => Ok(Propagate::Both),
        other => Err(ConfigError::invalid(
            "telemetry.propagate",
            format!("{other:?} is not a choice; use \"off\", \"headers\", \"meta\" or \"both\""),
        )),
    }
}

fn log_format(value: &str) -> Result<LogFormat, ConfigError> {
    match value {
        "json" => Ok(LogFormat::Json),
        "text" => Ok(LogFormat::Text),
        other => Err(ConfigError::invalid(
            "telemetry.log_format",
            format!("{other:?} is not a log format; use \"json\" or \"text\""),
        )),
    }
}

/// Level names a bare directive may be (`EnvFilter` reads any other bare word as a target,
/// which enables that target alone and silences everything else).
const LEVEL_NAMES: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// A non-empty filter that `tracing_subscriber::EnvFilter` accepts, whose bare words are
/// level names (`target=level` and span directives are unchanged).
fn log_level(value: String) -> Result<String, ConfigError> {
    const KEY: &str = "telemetry.log_level";
    const EXAMPLE: &str = "use e.g. \"info\" or \"tunnelgate=debug,info\"";
    if value.trim().is_empty() {
        return Err(ConfigError::invalid(KEY, format!("is empty; {EXAMPLE}")));
    }
    if let Some(word) = bare_non_level(&value) {
        return Err(ConfigError::invalid(
            KEY,
            format!(
                "{value:?}: directive {word:?} is not a level name (a bare word must be one of {}; \
                 to filter by target write target=level, e.g. \"{word}=debug\")",
                LEVEL_NAMES.join(", ")
            ),
        ));
    }
    match tracing_subscriber::EnvFilter::try_new(&value) {
        Ok(_) => Ok(value),
        Err(e) => Err(ConfigError::invalid(
            KEY,
            format!("{value:?} is not a log filter ({e}); {EXAMPLE}"),
        )),
    }
}

/// The first directive of `filter` that is a bare word (no `=`, no span part) and not a
/// level name, in any case.
fn bare_non_level(filter: &str) -> Option<&str> {
    filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty() && !d.contains(['=', '[']))
        .find(|d| !LEVEL_NAMES.iter().any(|level| d.eq_ignore_ascii_case(level)))
}

fn otlp_endpoint(value: &str) -> Result<Option<HttpUrl>, ConfigError> {
    match value {
        "" => Ok(None),
        url => Ok(Some(HttpUrl::base("telemetry.otlp_endpoint", url)?)),
    }
}
