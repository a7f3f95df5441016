//! The `[mcp.channels.NAME]` rules: names, transports, and what a stdio child may get.
//!
//! Invariants of the result: 1 to 32 channels; names match `[A-Za-z0-9_-]{1,64}` (they
//! are sent in a header and used as metric labels); each channel is exactly one of
//! Streamable HTTP (`url`) or stdio (`command`, optional `env` and `max_concurrent`); a
//! child's `env` never names the API key variable, `TUNNELGATE_*` or `CONTROL_PLANE_*`,
//! nor holds the API key's value; a stdio channel's `max_concurrent` is at least 1 and
//! never above `mcp.max_concurrent` (it can only lower it).

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use super::defaults as default;
use super::duration::positive_duration;
use super::error::{ConfigError, ErrorKind};
use super::layers::EnvVars;
use super::number::count;
use super::proxy;
use super::raw::{RawChannel, RawInitialize, RawInputRequired};
use super::{ChannelConfig, ChannelName, EraSetting, InputRequired, Secret, SessionOwner, StdioSession};
use crate::egress::http_url::HttpUrl;
use crate::egress::proxy::ProxySetting;

const MAX_CHANNELS: usize = 32;

pub(super) fn channels(
    raw: BTreeMap<String, RawChannel>,
    api_key: &Secret,
    max_concurrent: NonZeroUsize,
    mcp_proxy: &ProxySetting,
    env: &EnvVars,
) -> Result<BTreeMap<ChannelName, ChannelConfig>, ConfigError> {
    const KEY: &str = "mcp.channels";
    if raw.is_empty() {
        let fix = "add [mcp.channels.main] with url = \"http://...\" or command = [...]";
        return Err(ConfigError::new(
            ErrorKind::Missing,
            KEY,
            format!("no channel configured; {fix}"),
        ));
    }
    if raw.len() > MAX_CHANNELS {
        return Err(ConfigError::invalid(
            KEY,
            format!(
                "{} channels configured; at most {MAX_CHANNELS} are supported",
                raw.len()
            ),
        ));
    }
    raw.into_iter()
        .map(|(name, channel)| {
            let name = ChannelName::parse(&name)?;
            let key = format!("{KEY}.{name}");
            if name.as_str() == "harpoon" {
                return Err(ConfigError::invalid(
                    key,
                    "the name harpoon is reserved: the gateway serves channel harpoon itself (configure it under [harpoon])",
                ));
            }
            let egress = http_egress(&key, &channel, mcp_proxy, env)?;
            let config = channel_config(&key, channel, api_key, max_concurrent, egress)?;
            Ok((name, config))
        })
        .collect()
}

fn channel_config(
    key: &str,
    raw: RawChannel,
    api_key: &Secret,
    max_concurrent: NonZeroUsize,
    (proxy, socket): (ProxySetting, Option<PathBuf>),
) -> Result<ChannelConfig, ConfigError> {
    match (raw.url, raw.command) {
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            key,
            "sets both url and command; keep url for Streamable HTTP or command for stdio",
        )),
        (None, None) => Err(ConfigError::new(
            ErrorKind::Missing,
            key,
            "sets neither url nor command; add url = \"http://...\" (Streamable HTTP) or command = [\"program\", \"arg\"] (stdio)",
        )),
        (Some(_), None) if raw.session.is_some() || raw.initialize.is_some() => {
            let member = if raw.session.is_some() { "session" } else { "initialize" };
            Err(ConfigError::invalid(
                format!("{key}.{member}"),
                "only applies to stdio channels (command = [...]); an HTTP server's session belongs to its callers",
            ))
        }
        (Some(url), None) => match (raw.env, raw.max_concurrent) {
            (Some(_), _) => Err(ConfigError::invalid(
                format!("{key}.env"),
                "only applies to stdio channels (command = [...]), not to url",
            )),
            (None, Some(_)) => Err(ConfigError::invalid(
                format!("{key}.max_concurrent"),
                "only applies to stdio channels (command = [...]); an HTTP channel is bounded by mcp.max_concurrent",
            )),
            (None, None) => Ok(ChannelConfig::Http {
                url: HttpUrl::endpoint(&format!("{key}.url"), &url)?,
                proxy,
                socket,
                era: era_setting(key, raw.era)?,
                input_required: input_required(key, raw.input_required.unwrap_or_default())?,
            }),
        },
        (None, Some(command)) => Ok(ChannelConfig::Stdio {
            command: command_argv(&format!("{key}.command"), command)?,
            env: child_env(&format!("{key}.env"), raw.env.unwrap_or_default(), api_key)?,
            max_concurrent: channel_max_concurrent(&format!("{key}.max_concurrent"), raw.max_concurrent, max_concurrent)?,
            session: StdioSession {
                input_required: input_required(key, raw.input_required.unwrap_or_default())?,
                ..stdio_session(key, raw.session, raw.era, raw.initialize.unwrap_or_default())?
            },
        }),
    }
}

/// An HTTP channel's way out: its `proxy` (else `mcp.proxy`) and `socket`. Both only
/// apply to HTTP channels, and a channel may not set both: a unix socket is reached
/// directly, never through a proxy.
fn http_egress(
    key: &str,
    raw: &RawChannel,
    mcp_proxy: &ProxySetting,
    env: &EnvVars,
) -> Result<(ProxySetting, Option<PathBuf>), ConfigError> {
    let stdio_only = |member: &str| {
        ConfigError::invalid(
            format!("{key}.{member}"),
            "only applies to HTTP channels (url = \"http://...\"), not to command",
        )
    };
    if raw.url.is_none() && raw.command.is_some() {
        if raw.proxy.is_some() {
            return Err(stdio_only("proxy"));
        }
        if raw.socket.is_some() {
            return Err(stdio_only("socket"));
        }
    }
    let socket = raw
        .socket
        .as_deref()
        .map(|path| socket_path(&format!("{key}.socket"), path))
        .transpose()?;
    if socket.is_some() && raw.proxy.is_some() {
        return Err(ConfigError::invalid(
            format!("{key}.proxy"),
            "cannot be set together with socket: a unix domain socket is reached directly, never through a proxy; remove one of them",
        ));
    }
    if socket.is_some() {
        return Ok((ProxySetting::Off, socket));
    }
    let proxy = proxy::setting(&format!("{key}.proxy"), raw.proxy.as_deref(), Some(mcp_proxy), env)?;
    Ok((proxy, None))
}

/// A unix domain socket's path: absolute, without NUL.
fn socket_path(key: &str, path: &str) -> Result<PathBuf, ConfigError> {
    if path.is_empty() || !path.starts_with('/') || path.contains('\0') {
        return Err(ConfigError::invalid(
            key,
            "must be the absolute path of a unix domain socket, e.g. \"/run/mcp.sock\"",
        ));
    }
    Ok(PathBuf::from(path))
}

/// A stdio channel's `session` and `initialize`: who opens the child's session, and
/// with what.
fn stdio_session(
    key: &str,
    owner: Option<String>,
    era: Option<String>,
    init: RawInitialize,
) -> Result<StdioSession, ConfigError> {
    let owner = match owner.as_deref().unwrap_or(default::STDIO_SESSION) {
        "owned" => SessionOwner::Owned,
        "pass_through" => SessionOwner::PassThrough,
        other => {
            return Err(ConfigError::invalid(
                format!("{key}.session"),
                format!("{other:?} is not a session owner; use \"owned\" (the gateway initializes the child) or \"pass_through\" (a 2026-07-28 server, discovered rather than initialized)"),
            ))
        }
    };
    let era = era_setting(key, era)?;
    if owner == SessionOwner::PassThrough && era == EraSetting::Legacy {
        return Err(ConfigError::invalid(
            format!("{key}.era"),
            "\"legacy\" needs the gateway to open the child's session, but session = \"pass_through\" never does; remove one of them",
        ));
    }
    let init_key = format!("{key}.initialize");
    let text = |name: &str, value: Option<String>, default: &str| -> Result<String, ConfigError> {
        let value = value.unwrap_or_else(|| default.to_owned());
        if value.trim().is_empty() || value.chars().any(char::is_control) {
            return Err(ConfigError::invalid(
                format!("{init_key}.{name}"),
                "must be non-empty text without control characters",
            ));
        }
        Ok(value)
    };
    let protocol_version = text(
        "protocol_version",
        init.protocol_version,
        default::STDIO_PROTOCOL_VERSION,
    )?;
    if !is_revision(&protocol_version) {
        return Err(ConfigError::invalid(
            format!("{init_key}.protocol_version"),
            format!(
                "{protocol_version:?} is not an MCP revision; use a date like \"{}\"",
                default::STDIO_PROTOCOL_VERSION
            ),
        ));
    }
    let capabilities = match init.capabilities {
        None => default_capabilities(),
        Some(serde_json::Value::Object(caps)) => caps,
        Some(_) => {
            return Err(ConfigError::invalid(
                format!("{init_key}.capabilities"),
                "must be a table, e.g. { sampling = {}, elicitation = {}, roots = {} }",
            ))
        }
    };
    Ok(StdioSession {
        owner,
        era,
        input_required: input_required(key, RawInputRequired::default())?,
        protocol_version,
        client_name: text("client_name", init.client_name, default::STDIO_CLIENT_NAME)?,
        client_version: text("client_version", init.client_version, env!("CARGO_PKG_VERSION"))?,
        capabilities,
        timeout: positive_duration(
            &format!("{init_key}.timeout"),
            init.timeout,
            default::STDIO_INITIALIZE_TIMEOUT,
        )?,
    })
}

/// How the era bridge holds a 2026-07-28 caller's call while a handshake-era server asks
/// for input (`mcp.channels.NAME.input_required`).
fn input_required(key: &str, raw: RawInputRequired) -> Result<InputRequired, ConfigError> {
    let table = format!("{key}.input_required");
    let park_timeout = positive_duration(
        &format!("{table}.park_timeout"),
        raw.park_timeout,
        default::PARK_TIMEOUT,
    )?;
    let call_timeout = positive_duration(
        &format!("{table}.call_timeout"),
        raw.call_timeout,
        default::HELD_CALL_TIMEOUT,
    )?;
    if park_timeout > call_timeout {
        return Err(ConfigError::invalid(
            format!("{table}.park_timeout"),
            format!(
                "must not be longer than {table}.call_timeout ({}), the bound of a held call's whole life",
                humantime::format_duration(call_timeout)
            ),
        ));
    }
    let max_rounds = raw.max_rounds.unwrap_or(default::MAX_INPUT_ROUNDS);
    let max_rounds = u32::try_from(max_rounds)
        .ok()
        .filter(|n| (1..=100).contains(n))
        .ok_or_else(|| {
            ConfigError::invalid(
                format!("{table}.max_rounds"),
                format!("must be 1 to 100 (found {max_rounds})"),
            )
        })?;
    Ok(InputRequired {
        park_timeout,
        call_timeout,
        max_rounds,
    })
}

/// A channel's `era`: `auto` unless set.
fn era_setting(key: &str, era: Option<String>) -> Result<EraSetting, ConfigError> {
    match era.as_deref() {
        None => Ok(EraSetting::Auto),
        Some(text) => EraSetting::parse(text).ok_or_else(|| {
            ConfigError::invalid(
                format!("{key}.era"),
                format!("{text:?} is not an era; use \"auto\" (the gateway finds out), \"legacy\" (a handshake-era server) or \"modern\" (a 2026-07-28 server)"),
            )
        }),
    }
}

/// The session of a stdio channel that configures none.
pub(super) fn default_session() -> StdioSession {
    stdio_session("mcp.channels", None, None, RawInitialize::default()).expect("the defaults are valid")
}

/// An MCP revision: a date `YYYY-MM-DD`.
fn is_revision(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 10
        && bytes.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
}

/// The client capabilities a session declares by default: every one a caller can be
/// asked for.
fn default_capabilities() -> serde_json::Map<String, serde_json::Value> {
    ["sampling", "elicitation", "roots"]
        .into_iter()
        .map(|name| (name.to_owned(), serde_json::Value::Object(serde_json::Map::new())))
        .collect()
}

/// A stdio channel's bound on requests in flight: `mcp.max_concurrent` unless the
/// channel lowers it. A value above it is an error rather than silently lowered.
fn channel_max_concurrent(key: &str, value: Option<u64>, global: NonZeroUsize) -> Result<NonZeroUsize, ConfigError> {
    let Some(value) = value else {
        return Ok(global);
    };
    let own = count(key, value)?;
    if own > global {
        return Err(ConfigError::invalid(
            key,
            format!("is {own}, above mcp.max_concurrent = {global}; a channel can only lower it"),
        ));
    }
    Ok(own)
}

fn command_argv(key: &str, command: Vec<String>) -> Result<Vec<String>, ConfigError> {
    match command.first() {
        None => Err(ConfigError::invalid(
            key,
            "is empty; give the program and its arguments, e.g. [\"node\", \"server.js\"]",
        )),
        Some(program) if program.trim().is_empty() => {
            Err(ConfigError::invalid(key, "the program (first element) is empty"))
        }
        Some(_) if command.iter().any(|arg| arg.contains('\0')) => {
            Err(ConfigError::invalid(key, "an argument contains a NUL character"))
        }
        Some(_) => Ok(command),
    }
}

/// Variables for a stdio child; credentials of this process never reach it.
fn child_env(
    key: &str,
    env: BTreeMap<String, String>,
    api_key: &Secret,
) -> Result<BTreeMap<String, String>, ConfigError> {
    for (name, value) in &env {
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            return Err(ConfigError::invalid(
                key,
                format!("{name:?} is not a usable variable (no '=' or NUL, non-empty name)"),
            ));
        }
        if is_forbidden_child_var(name, api_key.env_var()) {
            return Err(ConfigError::invalid(
                format!("{key}.{name}"),
                "must not be set: the API key variable, TUNNELGATE_* and CONTROL_PLANE_* never reach MCP servers",
            ));
        }
        // An offline load may hold the key unresolved (empty): nothing to compare then.
        if api_key.unresolved().is_none() && value == api_key.expose() {
            return Err(ConfigError::invalid(
                format!("{key}.{name}"),
                "holds the API key's value; the API key never reaches MCP servers",
            ));
        }
    }
    Ok(env)
}

fn is_forbidden_child_var(name: &str, api_key_var: Option<&str>) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("TUNNELGATE_")
        || upper.starts_with("CONTROL_PLANE_")
        || api_key_var.is_some_and(|var| upper == var.to_ascii_uppercase())
}

/// The bounds a channel that sets no `input_required` table gets.
#[cfg(test)]
pub(crate) fn default_input_required() -> InputRequired {
    input_required("mcp.channels.main", RawInputRequired::default()).expect("the defaults hold")
}
