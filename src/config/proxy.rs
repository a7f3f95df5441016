//! Egress proxy settings: `control_plane.proxy`, `mcp.proxy`, `mcp.channels.NAME.proxy`
//! (and the official client's `TUNNEL_CLIENT_HTTP_PROXY`, `CONTROL_PLANE_HTTP_PROXY`,
//! `MCP_HTTP_PROXY`, layered in `layers`), and the environment's proxies
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, and their lowercase forms).
//!
//! Invariants: a [`ProxyUrl`] is an `http` or `https` URL with a host and nothing after
//! its authority; its credentials (userinfo) leave this type only through
//! [`ProxyUrl::expose`]. `Debug` and [`ProxyUrl::shown`] print `scheme://host:port`
//! only. The environment is read from the load's snapshot, never from the process. The
//! one exception to the URL's shape: a reference an offline load kept unresolved (see
//! `secret`), which has no URL and is only ever shown.

use std::fmt;

use super::error::ConfigError;
use super::layers::EnvVars;
use super::Secret;

/// Which proxy a scope's requests go through.
#[derive(Clone, PartialEq, Eq)]
pub enum ProxySetting {
    /// `"env"` (the default): the environment's proxies, as read at load; loopback
    /// targets and those `NO_PROXY` names go direct.
    Env(Box<EnvProxies>),
    /// `"none"`: every target direct, whatever the environment says.
    Off,
    /// An explicit proxy: every target of the scope, loopback included; `NO_PROXY` is
    /// not consulted.
    Via(ProxyUrl),
}

/// The environment's proxies, read once at load. Upper case wins over lower case when
/// both are set (as Go's `net/http`, which the official client uses); empty means unset.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvProxies {
    /// `HTTPS_PROXY`: for `https` targets.
    pub https: Option<ProxyUrl>,
    /// `HTTP_PROXY`: for `http` targets.
    pub http: Option<ProxyUrl>,
    /// `ALL_PROXY`: for either, when the scheme's own variable is unset.
    pub all: Option<ProxyUrl>,
    /// `NO_PROXY`, as written (comma-separated; `egress::proxy` reads it).
    pub no_proxy: String,
}

/// A proxy's URL. The value may carry credentials: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl {
    /// The whole URL, credentials included, as resolved.
    secret: Secret,
    /// `scheme://host[:port]`: what may be shown.
    shown: String,
    /// Where it came from: a secret reference or a variable's name.
    origin: String,
}

impl ProxySetting {
    /// The value for `check`: `"env"`, `"none"`, or the proxy without credentials and
    /// where it came from.
    pub fn masked(&self) -> String {
        match self {
            ProxySetting::Env(_) => "env".to_owned(),
            ProxySetting::Off => "none".to_owned(),
            ProxySetting::Via(url) => url.masked(),
        }
    }
}

impl ProxyUrl {
    /// An explicit proxy URL given as text (an embedder's own, or a test's); errors name
    /// `key`.
    pub fn new(key: &str, value: &str) -> Result<ProxyUrl, ConfigError> {
        ProxyUrl::parse(key, Secret::literal(value), "the caller".to_owned(), false)
    }

    /// The URL with its credentials, for the one place that connects through it.
    pub fn expose(&self) -> &str {
        self.secret.expose()
    }

    /// `scheme://host[:port]`, without credentials.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Whether the URL carries credentials (userinfo).
    pub fn has_credentials(&self) -> bool {
        self.secret.expose().split("://").nth(1).is_some_and(|rest| {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            authority.contains('@')
        })
    }

    fn masked(&self) -> String {
        if self.secret.unresolved().is_some() {
            return self.secret.masked();
        }
        let credentials = if self.has_credentials() {
            " (credentials redacted)"
        } else {
            ""
        };
        format!("{} from {}{credentials}", self.shown, self.origin)
    }

    /// A proxy whose reference an offline load could not resolve: no URL to parse, so
    /// nothing to show but the reference (`Debug` prints `unresolved`).
    fn unresolved(secret: Secret, origin: String) -> ProxyUrl {
        ProxyUrl {
            secret,
            shown: "unresolved".to_owned(),
            origin,
        }
    }

    /// Parses `value` (already resolved) for `key`; `origin` says where it came from.
    /// `assume_http`: a value without a scheme is `http://` (the environment's rule).
    fn parse(key: &str, secret: Secret, origin: String, assume_http: bool) -> Result<ProxyUrl, ConfigError> {
        let value = secret.expose().trim();
        let with_scheme;
        let text = if assume_http && !value.contains("://") {
            with_scheme = format!("http://{value}");
            &with_scheme
        } else {
            value
        };
        let invalid = |problem: &str| ConfigError::invalid(key, format!("{problem} ({origin})"));
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| invalid("has no scheme; write the proxy as \"http://host:port\""))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(invalid(&format!(
                "proxy scheme {scheme:?} is not supported; use http:// or https://"
            )));
        }
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        if !matches!(tail, "" | "/") {
            return Err(invalid(
                "must be only scheme://[user:password@]host:port, without a path",
            ));
        }
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if host_port.is_empty() || host_port.starts_with(':') {
            return Err(invalid("has no host"));
        }
        if host_port.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid("contains whitespace or control characters"));
        }
        if url::Url::parse(text).is_err() {
            return Err(invalid("is not a valid URL"));
        }
        let shown = format!("{scheme}://{host_port}");
        let secret = if text == secret.expose() {
            secret
        } else {
            secret.replaced(text.to_owned())
        };
        Ok(ProxyUrl { secret, shown, origin })
    }
}

impl EnvProxies {
    /// Reads the proxy variables from `pairs` (a snapshot of an environment).
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<EnvProxies, ConfigError> {
        EnvProxies::read(&EnvVars::new(pairs))
    }

    /// Reads the environment's proxy variables from the load's snapshot.
    pub(super) fn read(env: &EnvVars) -> Result<EnvProxies, ConfigError> {
        let url = |upper: &str, lower: &str| -> Result<Option<ProxyUrl>, ConfigError> {
            let Some((name, value)) = env_any(env, upper, lower) else {
                return Ok(None);
            };
            let secret = Secret::literal(value);
            let origin = format!("environment variable {name}");
            ProxyUrl::parse(name, secret, origin, true).map(Some)
        };
        Ok(EnvProxies {
            https: url("HTTPS_PROXY", "https_proxy")?,
            http: url("HTTP_PROXY", "http_proxy")?,
            all: url("ALL_PROXY", "all_proxy")?,
            no_proxy: env_any(env, "NO_PROXY", "no_proxy")
                .map(|(_, v)| v.to_owned())
                .unwrap_or_default(),
        })
    }
}

/// The first of `upper`, `lower` that is set and not blank, with its name.
fn env_any<'a>(env: &'a EnvVars, upper: &'a str, lower: &'a str) -> Option<(&'a str, &'a str)> {
    [upper, lower].into_iter().find_map(|name| {
        env.get(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| (name, v))
    })
}

/// A scope's `proxy` key: `"env"` (also when unset, unless `inherited` is given),
/// `"none"`, or a URL or secret reference to one.
pub(super) fn setting(
    key: &str,
    value: Option<&str>,
    inherited: Option<&ProxySetting>,
    env: &EnvVars,
) -> Result<ProxySetting, ConfigError> {
    match value.map(str::trim) {
        None => match inherited {
            Some(setting) => Ok(setting.clone()),
            None => Ok(ProxySetting::Env(Box::new(EnvProxies::read(env)?))),
        },
        Some("env") => Ok(ProxySetting::Env(Box::new(EnvProxies::read(env)?))),
        Some("none") => Ok(ProxySetting::Off),
        Some("") => Err(ConfigError::invalid(
            key,
            "is empty; use \"env\", \"none\", \"http://host:port\" or a secret reference (\"env:NAME\", \"file:/path\")",
        )),
        Some(reference) => {
            let secret = Secret::resolve(key, reference, env)?;
            let origin = match secret.describe().as_str() {
                "<literal>" => "the configuration".to_owned(),
                described => described.to_owned(),
            };
            if secret.unresolved().is_some() {
                return Ok(ProxySetting::Via(ProxyUrl::unresolved(secret, origin)));
            }
            ProxyUrl::parse(key, secret, origin, false).map(ProxySetting::Via)
        }
    }
}

impl fmt::Debug for ProxySetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

impl fmt::Debug for EnvProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnvProxies")
            .field("https", &self.https)
            .field("http", &self.http)
            .field("all", &self.all)
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}
