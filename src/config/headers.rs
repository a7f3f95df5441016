//! Configured request headers: `control_plane.organization_id`, `control_plane.headers`,
//! `mcp.channels.NAME.headers`, and the official client's `CONTROL_PLANE_EXTRA_HEADERS`
//! and `MCP_EXTRA_HEADERS`.
//!
//! Owns the parsing of those inputs into [`HeaderSet`]s, and the rules they obey:
//! - a name is an HTTP token; a value is a secret reference (`env:NAME`, `file:/path` or a
//!   literal) resolved at load, sent as is, and never printed (it is a [`Secret`]);
//! - names are unique without regard to case; a reserved name (the gateway's own
//!   protocol, framing and identity headers, per scope: [`reserved`]) is an error naming
//!   the key;
//! - the official client's variables are the lowest layer: a table entry with the same
//!   name (any case) replaces theirs; `MCP_EXTRA_HEADERS` goes to every HTTP channel;
//! - headers on a stdio channel are an error (there is no HTTP request to carry them).
//!
//! The official client's list format, exactly as its `pkg/runtimeconfig` reads it:
//! entries separated by `,` or `;`, each `Name: value` (split at the first `:`, both
//! sides trimmed, neither empty); blank entries are skipped. The value is a secret
//! reference like every other here, so a value that holds `,` or `;` is given by
//! `env:` or `file:`.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::error::ConfigError;
use super::layers::EnvVars;
use super::raw::RawChannel;
use super::{ChannelName, Config, Secret};

/// The official client's variable for control-plane headers.
pub(super) const CONTROL_PLANE_VAR: &str = "CONTROL_PLANE_EXTRA_HEADERS";
/// The official client's variable for headers to every HTTP MCP server.
pub(super) const MCP_VAR: &str = "MCP_EXTRA_HEADERS";
/// The header that carries `control_plane.organization_id`.
pub(crate) const ORGANIZATION_HEADER: &str = "OpenAI-Organization";

/// Headers configured for one scope (the control plane, or one HTTP channel): names as
/// written, values resolved. `Debug` shows names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HeaderSet {
    /// Sorted by lowercase name; no two names equal without regard to case.
    entries: Vec<(String, Secret)>,
}

/// Where a set of configured headers is sent: what the gateway reserves differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scope {
    ControlPlane,
    Mcp,
}

impl HeaderSet {
    /// Every header, sorted by lowercase name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Secret)> {
        self.entries.iter().map(|(name, value)| (name.as_str(), value))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value configured for `name`, in any case.
    pub fn get(&self, name: &str) -> Option<&Secret> {
        self.entries
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// As request headers, each value marked sensitive (so `Debug` of the map, or of a
    /// request, never shows it).
    pub fn to_header_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.entries.len());
        for (name, secret) in &self.entries {
            let name = HeaderName::from_bytes(name.as_bytes()).expect("names are checked at load");
            let mut value = HeaderValue::from_bytes(secret.expose().as_bytes()).expect("values are checked at load");
            value.set_sensitive(true);
            map.insert(name, value);
        }
        map
    }

    /// `self` with every entry of `over` added, replacing one of the same name.
    fn overlaid(mut self, over: &HeaderSet) -> HeaderSet {
        for (name, value) in &over.entries {
            self.entries.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            self.entries.push((name.clone(), value.clone()));
        }
        self.entries.sort_by_key(|(n, _)| n.to_ascii_lowercase());
        self
    }
}

impl super::ControlPlane {
    /// What the control-plane client adds to its every request: `OpenAI-Organization`
    /// when `organization_id` is set, and `headers` (values sensitive).
    pub fn request_headers(&self) -> HeaderMap {
        let mut map = self.headers.to_header_map();
        if let Some(organization) = &self.organization_id {
            let value = HeaderValue::from_bytes(organization.as_bytes()).expect("checked at load");
            map.insert(HeaderName::from_static("openai-organization"), value);
        }
        map
    }
}

impl std::fmt::Debug for HeaderSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.entries.iter().map(|(n, _)| n)).finish()
    }
}

/// Why `name` may not be configured for `scope`, if it is reserved. Upstream's list:
/// `Authorization` (control plane), `Accept`, `User-Agent` and the `X-Tunnel-Client-*`
/// and `X-Tunnel-MCP-Server-Info` identity headers. Ours: framing and hop-by-hop headers
/// everywhere (they would break the request or the proxy's credentials); on MCP
/// requests `Content-Type`, `Host`, `Mcp-Session-Id`, `Mcp-Protocol-Version` and
/// `Last-Event-ID` (the transport's and the caller's session); on control-plane requests
/// `Content-Type`, `Host` and the per-response `X-Tunnel-Shard-Token` and
/// `X-Client-Request-Id`.
pub(super) fn reserved(name: &str, scope: Scope) -> Option<&'static str> {
    const IDENTITY: &str = "the gateway identifies itself with it (reserved by the official client too)";
    const FRAMING: &str = "it frames or routes the request (framing and hop-by-hop headers are the transport's)";
    let lower = name.to_ascii_lowercase();
    let why = match (lower.as_str(), scope) {
        ("accept" | "user-agent", _)
        | (
            "x-tunnel-client-name"
            | "x-tunnel-client-version"
            | "x-tunnel-client-instance-id"
            | "x-tunnel-client-wire-protocol-version"
            | "x-tunnel-client-capabilities"
            | "x-tunnel-mcp-server-info",
            _,
        ) => IDENTITY,
        ("authorization", Scope::ControlPlane) => {
            "it carries control_plane.api_key (reserved by the official client too)"
        }
        (
            "host" | "content-length" | "transfer-encoding" | "connection" | "keep-alive" | "te" | "trailer"
            | "upgrade",
            _,
        ) => FRAMING,
        (proxy, _) if proxy.starts_with("proxy-") => {
            "proxy credentials belong to the proxy settings, not to the origin"
        }
        ("content-type", _) => "the gateway sets the body's type",
        ("mcp-session-id" | "mcp-protocol-version" | "last-event-id", Scope::Mcp) => {
            "it belongs to the caller's MCP session, which the gateway passes through"
        }
        ("x-tunnel-shard-token" | "x-client-request-id", Scope::ControlPlane) => {
            "the gateway sets it on each response POST"
        }
        _ => return None,
    };
    Some(why)
}

/// `control_plane.organization_id`: trimmed; empty means unset. It is an identifier, not
/// a credential, so it is plain text (shown by `check`), but it is a header value: no
/// control characters.
pub(super) fn organization_id(value: Option<String>) -> Result<Option<String>, ConfigError> {
    const KEY: &str = "control_plane.organization_id";
    let Some(value) = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if value.chars().any(char::is_control) || HeaderValue::from_bytes(value.as_bytes()).is_err() {
        return Err(ConfigError::invalid(
            KEY,
            "contains a control character, which cannot be sent in a header",
        ));
    }
    Ok(Some(value))
}

/// The control plane's headers: `CONTROL_PLANE_EXTRA_HEADERS` under `control_plane.headers`.
pub(super) fn control_plane(
    table: Option<BTreeMap<String, String>>,
    organization_id: Option<&str>,
    env: &EnvVars,
) -> Result<HeaderSet, ConfigError> {
    let anchor = from_var(CONTROL_PLANE_VAR, Scope::ControlPlane, env)?;
    let own = from_table(
        "control_plane.headers",
        table.unwrap_or_default(),
        Scope::ControlPlane,
        env,
    )?;
    let set = anchor.overlaid(&own);
    if organization_id.is_some() && set.get(ORGANIZATION_HEADER).is_some() {
        let key = match own.get(ORGANIZATION_HEADER) {
            Some(_) => format!("control_plane.headers.{ORGANIZATION_HEADER}"),
            None => CONTROL_PLANE_VAR.to_owned(),
        };
        return Err(ConfigError::invalid(
            key,
            format!("{ORGANIZATION_HEADER} is set by control_plane.organization_id too; keep one"),
        ));
    }
    Ok(set)
}

/// Each HTTP channel's headers (`MCP_EXTRA_HEADERS` under its own `headers`), taken out
/// of the raw channels before they are validated; channels with none are left out.
pub(super) fn channels(
    raw: &mut BTreeMap<String, RawChannel>,
    env: &EnvVars,
) -> Result<BTreeMap<ChannelName, HeaderSet>, ConfigError> {
    let every = from_var(MCP_VAR, Scope::Mcp, env)?;
    let mut out = BTreeMap::new();
    for (name, channel) in raw.iter_mut() {
        let table = channel.headers.take();
        let key = format!("mcp.channels.{name}.headers");
        match (&channel.url, &channel.command) {
            (Some(_), None) => {}
            (None, Some(_)) if table.is_some() => {
                return Err(ConfigError::invalid(
                    key,
                    "only applies to HTTP channels (url = \"...\"); a stdio child gets no HTTP request",
                ))
            }
            // A stdio channel, or one the channel rules refuse (both, or neither).
            _ => continue,
        }
        let Ok(channel_name) = ChannelName::parse(name) else {
            continue; // the channel rules report the name
        };
        let own = from_table(&key, table.unwrap_or_default(), Scope::Mcp, env)?;
        let set = every.clone().overlaid(&own);
        if !set.is_empty() {
            out.insert(channel_name, set);
        }
    }
    Ok(out)
}

/// A `headers` table: name -> secret reference.
fn from_table(
    key: &str,
    table: BTreeMap<String, String>,
    scope: Scope,
    env: &EnvVars,
) -> Result<HeaderSet, ConfigError> {
    let mut set = HeaderSet::default();
    for (name, reference) in table {
        let entry_key = format!("{key}.{name}");
        let secret = entry(&entry_key, &name, &reference, scope, env)?;
        if set.get(&name).is_some() {
            return Err(ConfigError::invalid(
                entry_key,
                "is set twice (header names are the same in any case); keep one",
            ));
        }
        set.entries.push((name, secret));
    }
    set.entries.sort_by_key(|(n, _)| n.to_ascii_lowercase());
    Ok(set)
}

/// One of the official client's variables, in its list format (module docs).
fn from_var(var: &str, scope: Scope, env: &EnvVars) -> Result<HeaderSet, ConfigError> {
    let Some(text) = env.get(var) else {
        return Ok(HeaderSet::default());
    };
    let mut set = HeaderSet::default();
    for (name, reference) in parse_list(var, text)? {
        let secret = entry(var, &name, &reference, scope, env)?;
        if let Some(existing) = set.get(&name) {
            // Values an offline load kept unresolved cannot be compared: the first stays.
            let resolved = existing.unresolved().is_none() && secret.unresolved().is_none();
            if resolved && existing.expose() != secret.expose() {
                return Err(ConfigError::invalid(
                    var,
                    format!("sets {name} twice with different values (header names are the same in any case)"),
                ));
            }
            continue;
        }
        set.entries.push((name, secret));
    }
    set.entries.sort_by_key(|(n, _)| n.to_ascii_lowercase());
    Ok(set)
}

/// Splits the official client's list into `(name, value reference)` pairs. Errors never
/// show a value (it may be a literal credential).
pub(super) fn parse_list(var: &str, text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut pairs = Vec::new();
    for piece in text.split([',', ';']).map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = piece.split_once(':') else {
            return Err(ConfigError::invalid(
                var,
                "an entry is not of the form \"Name: value\" (entries are separated by ',' or ';')",
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() {
            return Err(ConfigError::invalid(var, "an entry has an empty header name"));
        }
        if value.is_empty() {
            return Err(ConfigError::invalid(var, format!("{name} has an empty value")));
        }
        pairs.push((name.to_owned(), value.to_owned()));
    }
    Ok(pairs)
}

/// Checks one header's name for `scope` and resolves its value; errors are for `key`.
fn entry(key: &str, name: &str, reference: &str, scope: Scope, env: &EnvVars) -> Result<Secret, ConfigError> {
    if HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(ConfigError::invalid(
            key,
            format!("{name:?} is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)"),
        ));
    }
    if let Some(why) = reserved(name, scope) {
        let target = match scope {
            Scope::ControlPlane => "control-plane",
            Scope::Mcp => "MCP",
        };
        return Err(ConfigError::invalid(
            key,
            format!("{name} is reserved on {target} requests and cannot be overridden: {why}"),
        ));
    }
    let secret = Secret::resolve(key, reference, env)?;
    if HeaderValue::from_bytes(secret.expose().as_bytes()).is_err() {
        return Err(ConfigError::invalid(
            key,
            format!("{} cannot be sent as a header value", secret.describe()),
        ));
    }
    Ok(secret)
}

/// The dotted keys of configured headers whose values differ between `a` and `b` (a
/// reload compares values; the masked view shows only references and lengths).
pub(super) fn changed_values(a: &Config, b: &Config) -> Vec<String> {
    let mut scopes = vec![(
        "control_plane.headers".to_owned(),
        &a.control_plane.headers,
        &b.control_plane.headers,
    )];
    for (name, set) in &a.mcp.headers {
        if let Some(other) = b.mcp.headers.get(name) {
            scopes.push((format!("mcp.channels.{name}.headers"), set, other));
        }
    }
    let mut keys = Vec::new();
    for (key, left, right) in scopes {
        for (name, value) in left.iter() {
            if right.get(name).is_some_and(|other| other.expose() != value.expose()) {
                keys.push(format!("{key}.{name}"));
            }
        }
    }
    keys
}
