//! The proxy settings a scope's client takes: [`ProxySetting`], the environment's
//! proxies ([`EnvProxies`]) and a proxy's URL ([`ProxyUrl`]), each checked when it is
//! made. Which configuration key or variable gave them is the configuration's business;
//! a refusal names it through [`Invalid`].
//!
//! Invariants: a [`ProxyUrl`] is an `http` or `https` URL with a host and nothing after
//! its authority; its credentials (userinfo) leave this type only through
//! [`ProxyUrl::expose`]. `Debug` and [`ProxyUrl::shown`] print `scheme://host:port`
//! only. The one exception to the URL's shape: a proxy a load kept unresolved (a secret
//! reference with no value in this process), which has no URL and is only ever shown.

use std::fmt;

use crate::Invalid;

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
    /// `NO_PROXY`, as written (comma-separated; the proxy rules read it).
    pub no_proxy: String,
}

/// A proxy's URL. The value may carry credentials: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl {
    /// The whole URL, credentials included; empty when `unresolved`.
    url: String,
    /// `scheme://host[:port]`: what may be shown.
    shown: String,
    /// Where it came from: a secret reference, a variable's name, `the configuration`.
    origin: String,
    /// What to show for a proxy whose reference had no value in this process.
    unresolved: Option<String>,
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
    /// An explicit proxy URL given as text (an embedder's own, or a test's); a refusal
    /// names `key`.
    pub fn new(key: &str, value: &str) -> Result<ProxyUrl, Invalid> {
        ProxyUrl::parse(key, value, "the caller".to_owned(), false)
    }

    /// Checks `value` for `key`; `origin` says where it came from (and is named in a
    /// refusal). `assume_http`: a value without a scheme is `http://` (the environment's
    /// rule).
    pub fn parse(key: &str, value: &str, origin: String, assume_http: bool) -> Result<ProxyUrl, Invalid> {
        let value = value.trim();
        let text = if assume_http && !value.contains("://") {
            format!("http://{value}")
        } else {
            value.to_owned()
        };
        let shown = shown(&text).map_err(|problem| Invalid::new(key, format!("{problem} ({origin})")))?;
        Ok(ProxyUrl {
            url: text,
            shown,
            origin,
            unresolved: None,
        })
    }

    /// A proxy whose reference had no value in this process (an offline load): no URL
    /// to parse, so nothing to show but `shown_as`, the reference (`Debug` prints
    /// `unresolved`). Nothing connects through it.
    pub fn unresolved(shown_as: String) -> ProxyUrl {
        ProxyUrl {
            url: String::new(),
            shown: "unresolved".to_owned(),
            origin: String::new(),
            unresolved: Some(shown_as),
        }
    }

    /// The URL with its credentials, for the one place that connects through it.
    pub fn expose(&self) -> &str {
        &self.url
    }

    /// `scheme://host[:port]`, without credentials.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Whether the URL carries credentials (userinfo).
    pub fn has_credentials(&self) -> bool {
        self.url.split("://").nth(1).is_some_and(|rest| {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            authority.contains('@')
        })
    }

    fn masked(&self) -> String {
        if let Some(shown_as) = &self.unresolved {
            return shown_as.clone();
        }
        let credentials = if self.has_credentials() {
            " (credentials redacted)"
        } else {
            ""
        };
        format!("{} from {}{credentials}", self.shown, self.origin)
    }
}

/// `scheme://host[:port]` of a proxy URL, or what is wrong with it (never quoting it).
fn shown(text: &str) -> Result<String, String> {
    let (scheme, rest) = text
        .split_once("://")
        .ok_or("has no scheme; write the proxy as \"http://host:port\"")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "proxy scheme {scheme:?} is not supported; use http:// or https://"
        ));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if !matches!(tail, "" | "/") {
        return Err("must be only scheme://[user:password@]host:port, without a path".to_owned());
    }
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() || host_port.starts_with(':') {
        return Err("has no host".to_owned());
    }
    if host_port.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("contains whitespace or control characters".to_owned());
    }
    if url::Url::parse(text).is_err() {
        return Err("is not a valid URL".to_owned());
    }
    Ok(format!("{scheme}://{host_port}"))
}

impl EnvProxies {
    /// Reads the proxy variables from `pairs` (a snapshot of an environment).
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<EnvProxies, Invalid> {
        EnvProxies::read(|name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()))
    }

    /// Reads the proxy variables through `get` (a snapshot's lookup, never the process's
    /// environment); a refusal names the variable.
    pub fn read<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<EnvProxies, Invalid> {
        let url = |upper: &str, lower: &str| -> Result<Option<ProxyUrl>, Invalid> {
            let Some((name, value)) = env_any(&get, upper, lower) else {
                return Ok(None);
            };
            let origin = format!("environment variable {name}");
            ProxyUrl::parse(name, value, origin, true).map(Some)
        };
        Ok(EnvProxies {
            https: url("HTTPS_PROXY", "https_proxy")?,
            http: url("HTTP_PROXY", "http_proxy")?,
            all: url("ALL_PROXY", "all_proxy")?,
            no_proxy: env_any(&get, "NO_PROXY", "no_proxy")
                .map(|(_, v)| v.to_owned())
                .unwrap_or_default(),
        })
    }
}

/// The first of `upper`, `lower` that is set and not blank, with its name.
fn env_any<'a, 'n>(
    get: &impl Fn(&str) -> Option<&'a str>,
    upper: &'n str,
    lower: &'n str,
) -> Option<(&'n str, &'a str)> {
    [upper, lower]
        .into_iter()
        .find_map(|name| get(name).map(str::trim).filter(|v| !v.is_empty()).map(|v| (name, v)))
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
