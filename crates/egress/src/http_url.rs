//! [`HttpUrl`]: the http(s) URLs the gateway sends to (the control plane, HTTP MCP
//! servers, etcd, the OTLP receiver), checked once, when the configuration is loaded,
//! by a small, strict grammar.
//!
//! Grammar: `http` or `https`, `://`, a host (name, IPv4 or `[IPv6]`) with an optional
//! port 1-65535, then an optional path; no whitespace, no credentials. Error messages
//! quote only the offending part, never the whole URL (it may carry a token).

use std::fmt;

use crate::Invalid;

#[cfg(test)]
mod tests;

/// An http(s) URL that passed the grammar, normalized for its role; its scheme is known.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpUrl {
    text: String,
    https: bool,
}

/// What may follow the host and path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UrlRole {
    /// A base that paths are appended to: no query or fragment; a trailing `/` is removed.
    Base,
    /// A complete endpoint: a query is allowed, a fragment is not; kept as written.
    Endpoint,
}

impl HttpUrl {
    /// A complete endpoint (an MCP server's URL): a query is allowed, a fragment is not;
    /// kept as written. Errors name `key`.
    pub fn endpoint(key: &str, value: &str) -> Result<HttpUrl, Invalid> {
        HttpUrl::parse(key, value, UrlRole::Endpoint)
    }

    /// A base that paths are appended to: no query or fragment; a trailing `/` is removed.
    /// Errors name `key`.
    pub fn base(key: &str, value: &str) -> Result<HttpUrl, Invalid> {
        HttpUrl::parse(key, value, UrlRole::Base)
    }

    /// Whether the scheme is `https` (else it is `http`).
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The text, as validated.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn parse(key: &str, value: &str, role: UrlRole) -> Result<HttpUrl, Invalid> {
        let text = parse(key, value, role)?;
        let https = text.starts_with("https://");
        Ok(HttpUrl { text, https })
    }
}

/// Checks `value` for `key` and returns it normalized for `role`.
pub(crate) fn parse(key: &str, value: &str, role: UrlRole) -> Result<String, Invalid> {
    let invalid = |problem: String| Invalid::new(key, problem);
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("contains whitespace or control characters".to_owned()));
    }
    let (scheme, rest) = value
        .split_once("://")
        .ok_or_else(|| invalid("has no scheme; write it as \"http://host:port/path\" or \"https://...\"".to_owned()))?;
    if scheme != "http" && scheme != "https" {
        return Err(invalid(format!(
            "scheme {scheme:?} is not supported; use http:// or https://"
        )));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    check_authority(authority).map_err(invalid)?;
    check_tail(tail, role).map_err(invalid)?;
    Ok(match role {
        UrlRole::Base => value.trim_end_matches('/').to_owned(),
        UrlRole::Endpoint => value.to_owned(),
    })
}

/// `host[:port]` or `[v6][:port]`.
fn check_authority(authority: &str) -> Result<(), String> {
    if authority.is_empty() {
        return Err("has no host".to_owned());
    }
    if authority.contains('@') {
        return Err("must not contain credentials (user@host); they would be printed with the URL".to_owned());
    }
    let (host, port) = split_host_port(authority)?;
    check_host(host)?;
    match port {
        None => Ok(()),
        Some(port) => check_port(port),
    }
}

fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(bracketed) = authority.strip_prefix('[') {
        let (v6, after) = bracketed.split_once(']').ok_or("has an unclosed '[' in its host")?;
        if v6.is_empty() || !v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
            return Err(format!("host [{v6}] is not an IPv6 address"));
        }
        return match after {
            "" => Ok((authority, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((authority, Some(port))),
                None => Err("has text after the IPv6 host".to_owned()),
            },
        };
    }
    Ok(match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

fn check_host(host: &str) -> Result<(), String> {
    if host.starts_with('[') {
        return Ok(()); // checked while splitting
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if host.is_empty() {
        return Err("has no host".to_owned());
    }
    if !host.chars().all(allowed) {
        return Err(format!("host {host:?} has characters a host name cannot have"));
    }
    Ok(())
}

fn check_port(port: &str) -> Result<(), String> {
    let valid = !port.is_empty()
        && port.len() <= 5
        && port.chars().all(|c| c.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    match valid {
        true => Ok(()),
        false => Err(format!("port {port:?} is not a number from 1 to 65535")),
    }
}

/// The path and what follows it.
fn check_tail(tail: &str, role: UrlRole) -> Result<(), String> {
    match role {
        UrlRole::Base if tail.contains(['?', '#']) => {
            Err("must not have a query (?...) or fragment (#...); paths are appended to it".to_owned())
        }
        UrlRole::Endpoint if tail.contains('#') => Err("must not have a fragment (#...)".to_owned()),
        UrlRole::Base | UrlRole::Endpoint => Ok(()),
    }
}

impl std::ops::Deref for HttpUrl {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for HttpUrl {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Printed as a `String` would be (the URL carries no credentials: the grammar refuses
/// them).
impl fmt::Debug for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for HttpUrl {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for HttpUrl {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
