//! Egress proxies: which proxy (if any) a request to a target goes through.
//!
//! The rules, for a scope's [`ProxySetting`]:
//! - `"none"`: every target direct;
//! - an explicit URL: every target through it, loopback included; `NO_PROXY` is not read;
//! - `"env"`: `HTTPS_PROXY` for `https` targets, `HTTP_PROXY` for `http` ones, `ALL_PROXY`
//!   for either when the scheme's own is unset; never for a loopback target (`localhost`,
//!   `*.localhost`, `127.0.0.0/8`, `::1`) nor for one `NO_PROXY` names (`NoProxy`).
//!
//! `https` targets go through `CONNECT` (a tunnel: the proxy sees only host and port);
//! `http` ones are forwarded (the proxy sees and relays the request): [`Route`] says
//! which, so that a transport can tell what a proxy's answer proves.
//!
//! Invariants: the decision is one pure function (`route`, over `select`) that the
//! client's connector (`egress::connect`) also calls for each new connection, so a
//! transport's [`Route`] is the one its requests take; proxy credentials leave
//! [`ProxyUrl`] only into the connector's `CONNECT` request and a forwarded request's
//! `Proxy-Authorization`, never into a message, a log line or a `Debug` view.
//!
//! Must not send anything, and must not know commands, the fence or transports.

use std::net::{IpAddr, Ipv4Addr};

use url::Url;

pub mod setting;

pub use setting::{EnvProxies, ProxySetting, ProxyUrl};

/// How requests to one target leave the gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Straight to the target.
    Direct,
    /// Through a proxy's `CONNECT` tunnel (an `https` target): a failed `CONNECT`
    /// sent nothing of the request.
    Tunnel,
    /// Forwarded by a proxy (an `http` target): the proxy receives the request itself,
    /// and an answer from it does not prove the target never saw it, except a `407`.
    Forward,
}

impl Route {
    /// Stable label for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Tunnel => "tunnel",
            Self::Forward => "forward",
        }
    }
}

/// Why a client's proxy rules could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The proxy URL does not parse as a URL (never echoed: it may carry credentials).
    #[error("the proxy URL ({shown}) is not a valid URL")]
    InvalidProxyUrl { shown: String },
}

impl EgressError {
    /// Stable label for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::InvalidProxyUrl { .. } => "invalid_proxy_url",
        }
    }
}

/// One `NO_PROXY` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    /// `*`: every target.
    All,
    /// An address, or a CIDR block (`prefix` bits).
    Net {
        addr: IpAddr,
        prefix: u8,
        port: Option<u16>,
    },
    /// A name: `suffix` starts with `.`; `exact` also matches the name itself (an entry
    /// written without a leading `.` or `*.`).
    Domain {
        suffix: String,
        exact: bool,
        port: Option<u16>,
    },
}

/// A parsed `NO_PROXY` list, with Go's `net/http` rules (those of the official client):
/// comma-separated; `*` matches everything; an IP address or CIDR block matches
/// addresses; `example.com` matches it and its subdomains, `.example.com` and
/// `*.example.com` only subdomains; any entry may end with `:port`, and then only
/// matches that port. Case-insensitive; unparseable entries are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NoProxy(Vec<Entry>);

impl NoProxy {
    pub(crate) fn parse(list: &str) -> Self {
        Self(list.split(',').filter_map(|e| entry(e.trim())).collect())
    }

    /// Whether `host` (a name, or an address without brackets) on `port` is excluded.
    pub(crate) fn matches(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        self.0.iter().any(|e| match e {
            Entry::All => true,
            Entry::Net { addr, prefix, port: p } => {
                p.is_none_or(|p| p == port) && ip.is_some_and(|ip| in_net(ip, *addr, *prefix))
            }
            Entry::Domain { suffix, exact, port: p } => {
                p.is_none_or(|p| p == port)
                    && ip.is_none()
                    && (host.ends_with(suffix.as_str()) || (*exact && host == suffix[1..]))
            }
        })
    }
}

fn entry(text: &str) -> Option<Entry> {
    if text.is_empty() {
        return None;
    }
    if text == "*" {
        return Some(Entry::All);
    }
    let text = text.to_ascii_lowercase();
    if let Some(net) = net_entry(&text, None) {
        return Some(net);
    }
    let (host, port) = split_port(&text);
    if let Some(net) = port.and_then(|p| net_entry(host.trim_matches(['[', ']']), Some(p))) {
        return Some(net);
    }
    let host = host.trim_end_matches('.');
    let (name, exact) = match host.strip_prefix("*.").or_else(|| host.strip_prefix('.')) {
        Some(rest) => (rest, false),
        None => (host, true),
    };
    if name.is_empty() || name.contains(['/', '[', ']', '*', ' ']) {
        return None;
    }
    Some(Entry::Domain {
        suffix: format!(".{name}"),
        exact,
        port,
    })
}

/// `addr`, `addr/prefix`, `[v6]`: an address entry.
fn net_entry(text: &str, port: Option<u16>) -> Option<Entry> {
    let text = text.trim_start_matches('[').trim_end_matches(']');
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, bits)) => (addr.parse::<IpAddr>().ok()?, Some(bits.parse::<u8>().ok()?)),
        None => (text.parse::<IpAddr>().ok()?, None),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = prefix.unwrap_or(max);
    (prefix <= max).then_some(Entry::Net { addr, prefix, port })
}

/// `host:port` -> (`host`, port); a bare IPv6 address has no port.
fn split_port(text: &str) -> (&str, Option<u16>) {
    if text.matches(':').count() > 1 && !text.starts_with('[') {
        return (text, None);
    }
    match text.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && !host.ends_with(':') => match port.parse::<u16>() {
            Ok(p) => (host, Some(p)),
            Err(_) => (text, None),
        },
        _ => (text, None),
    }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        // An IPv4-mapped IPv6 target against a v4 entry, and the reverse.
        (IpAddr::V6(a), IpAddr::V4(_)) => a.to_ipv4_mapped().is_some_and(|a| in_net(IpAddr::V4(a), net, prefix)),
        (IpAddr::V4(a), IpAddr::V6(_)) => in_net(IpAddr::V6(a.to_ipv6_mapped()), net, prefix),
    }
}

/// A loopback target: never proxied from the environment (Go's rule, plus the
/// `.localhost` names of RFC 6761).
pub(crate) fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.');
    let lower = host.to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return true;
    }
    match lower.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.is_loopback(),
        Ok(IpAddr::V6(v6)) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4: Ipv4Addr| v4.is_loopback()),
        Err(_) => false,
    }
}

/// The proxy (if any) that `setting` sends a request for `target` through.
pub(crate) fn select<'a>(setting: &'a ProxySetting, target: &Url) -> Option<&'a ProxyUrl> {
    match setting {
        ProxySetting::Off => None,
        ProxySetting::Via(url) => Some(url),
        ProxySetting::Env(env) => {
            let host = host_of(target)?;
            let port = target.port_or_known_default().unwrap_or(0);
            if is_loopback(&host) || NoProxy::parse(&env.no_proxy).matches(&host, port) {
                return None;
            }
            let own = match target.scheme() {
                "https" => env.https.as_ref(),
                "http" => env.http.as_ref(),
                _ => return None,
            };
            own.or(env.all.as_ref())
        }
    }
}

/// How requests for `target` leave under `setting`.
pub fn route(setting: &ProxySetting, target: &Url) -> Route {
    match (select(setting, target), target.scheme()) {
        (None, _) => Route::Direct,
        (Some(_), "https") => Route::Tunnel,
        (Some(_), _) => Route::Forward,
    }
}

/// The target's host, without IPv6 brackets.
fn host_of(target: &Url) -> Option<String> {
    let host = target.host_str()?;
    Some(host.trim_start_matches('[').trim_end_matches(']').to_owned())
}

/// Every proxy URL `setting` may send a request through.
pub(crate) fn proxies(setting: &ProxySetting) -> Vec<&ProxyUrl> {
    match setting {
        ProxySetting::Off => Vec::new(),
        ProxySetting::Via(url) => vec![url],
        ProxySetting::Env(env) => [&env.https, &env.http, &env.all].into_iter().flatten().collect(),
    }
}

#[cfg(test)]
mod tests;
