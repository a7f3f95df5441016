//! Egress proxy settings: `control_plane.proxy`, `mcp.proxy`, `mcp.channels.NAME.proxy`
//! (and the official client's `TUNNEL_CLIENT_HTTP_PROXY`, `CONTROL_PLANE_HTTP_PROXY`,
//! `MCP_HTTP_PROXY`, layered in `layers`), and the environment's proxies
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, and their lowercase forms).
//!
//! The types and their checks are egress's ([`ProxySetting`], [`ProxyUrl`],
//! `EnvProxies`); this module reads a scope's key, resolves a secret reference to a
//! proxy, and reads the environment from the load's snapshot, never from the process.

use super::error::ConfigError;
use super::layers::EnvVars;
use super::Secret;
use crate::egress::proxy::{EnvProxies, ProxySetting, ProxyUrl};

/// The environment's proxy variables, from the load's snapshot.
pub(super) fn env_proxies(env: &EnvVars) -> Result<EnvProxies, ConfigError> {
    Ok(EnvProxies::read(|name| env.get(name))?)
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
            None => Ok(ProxySetting::Env(Box::new(env_proxies(env)?))),
        },
        Some("env") => Ok(ProxySetting::Env(Box::new(env_proxies(env)?))),
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
                return Ok(ProxySetting::Via(ProxyUrl::unresolved(secret.masked())));
            }
            Ok(ProxySetting::Via(ProxyUrl::parse(key, secret.expose(), origin, false)?))
        }
    }
}
