//! `[harpoon]`: channel `harpoon`, the gateway's built-in MCP server for the hosted
//! service's OAuth shim (`docs/private-oauth.md`): its configured targets, its limits,
//! which discovered hosts count as private, its proxy and TLS scope.
//!
//! Targets come from `harpoon.targets`, either a list of tables or the official
//! client's text grammar (`HARPOON_TARGETS`: entries split on `;` and newlines, each
//! `label=...,url=...,desc=...`). Like every official variable, `HARPOON_TARGETS` is a
//! layer below the file: a `targets` key in the file replaces it, never merges with it.
//!
//! Invariants of the result: labels match `^[a-z0-9][a-z0-9_-]{0,63}$` and are unique;
//! URLs are http(s) with a host (no path is `/`), `https` unless
//! `allow_plaintext_http`; `max_response_bytes` is 1 to 102400 and `max_redirects` 0 to 5
//! (upstream's bounds); suffixes are lower-case with a leading `.`.

use super::error::ConfigError;
use super::harpoon_template::{self, HarpoonTemplate};
use super::layers::EnvVars;
use super::raw::{RawHarpoon, RawTarget, RawTargets};
use crate::egress::proxy::ProxySetting;
use crate::egress::tls::TlsFiles;

/// Upstream's bound (and default) of `max_response_bytes`.
pub(super) const MAX_RESPONSE_BYTES: u64 = 102_400;
/// Upstream's bound (and default) of `max_redirects`.
pub(super) const MAX_REDIRECTS: u64 = 5;

/// `[harpoon]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Harpoon {
    pub targets: Vec<HarpoonTarget>,
    /// Template targets (`harpoon.targets[i].template`), in the order written.
    pub templates: Vec<HarpoonTemplate>,
    pub allow_plaintext_http: bool,
    pub max_response_bytes: u64,
    pub max_redirects: u64,
    pub hosts_include_loopback: bool,
    pub hosts_include_private: bool,
    pub hosts_include_suffix: Vec<String>,
    /// Register an authorization server on another origin than the MCP server's when
    /// its host is private (off by default; upstream never does).
    pub register_private_auth_servers: bool,
    /// `harpoon.proxy` (`HARPOON_HTTP_PROXY`, else `TUNNEL_CLIENT_HTTP_PROXY`); unset: the
    /// environment's proxies.
    pub proxy: ProxySetting,
    pub tls: TlsFiles,
}

/// One configured target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarpoonTarget {
    pub label: String,
    pub url: String,
    pub description: String,
}

pub(super) fn harpoon(raw: RawHarpoon, env: &EnvVars) -> Result<Harpoon, ConfigError> {
    let allow_plaintext_http = raw.allow_plaintext_http.unwrap_or(false);
    let max_response_bytes = raw.max_response_bytes.unwrap_or(MAX_RESPONSE_BYTES);
    if !(1..=MAX_RESPONSE_BYTES).contains(&max_response_bytes) {
        return Err(ConfigError::invalid(
            "harpoon.max_response_bytes",
            format!("must be 1 to {MAX_RESPONSE_BYTES} (found {max_response_bytes})"),
        ));
    }
    let max_redirects = raw.max_redirects.unwrap_or(MAX_REDIRECTS);
    if max_redirects > MAX_REDIRECTS {
        return Err(ConfigError::invalid(
            "harpoon.max_redirects",
            format!("must be 0 to {MAX_REDIRECTS} (found {max_redirects})"),
        ));
    }
    let targets = match raw.targets {
        None => Vec::new(),
        Some(RawTargets::List(list)) => list,
        Some(RawTargets::Text(text)) => parse_text(&text)?,
    };
    let (targets, templates) = validate_targets(targets, allow_plaintext_http, env)?;
    let mut hosts_include_suffix = Vec::new();
    for (i, suffix) in raw.hosts_include_suffix.unwrap_or_default().iter().enumerate() {
        let s = suffix.trim().trim_start_matches('.').to_ascii_lowercase();
        if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '/' || c == ':') {
            return Err(ConfigError::invalid(
                format!("harpoon.hosts_include_suffix[{i}]"),
                format!("{suffix:?} is not a host name suffix (e.g. \"internal\" or \".corp.example\")"),
            ));
        }
        hosts_include_suffix.push(format!(".{s}"));
    }
    Ok(Harpoon {
        targets,
        templates,
        allow_plaintext_http,
        max_response_bytes,
        max_redirects,
        hosts_include_loopback: raw.hosts_include_loopback.unwrap_or(true),
        hosts_include_private: raw.hosts_include_private.unwrap_or(true),
        hosts_include_suffix,
        register_private_auth_servers: raw.register_private_auth_servers.unwrap_or(false),
        proxy: super::proxy::setting("harpoon.proxy", raw.proxy.as_deref(), None, env)?,
        tls: super::tls::harpoon_tls(raw.tls)?,
    })
}

/// Upstream's `HARPOON_TARGETS` grammar, with errors instead of silence: an unknown key
/// or a part without `=` names the entry.
fn parse_text(text: &str) -> Result<Vec<RawTarget>, ConfigError> {
    let mut out = Vec::new();
    for (i, entry) in text
        .split([';', '\n'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .enumerate()
    {
        let mut target = RawTarget::default();
        for part in entry.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(ConfigError::invalid(
                    format!("harpoon.targets[{i}]"),
                    format!("the part {part:?} has no `=`; write label=NAME,url=URL[,desc=TEXT]"),
                ));
            };
            let value = value.trim().trim_matches(['"', '\'']).to_owned();
            match key.trim().to_ascii_lowercase().as_str() {
                "label" => target.label = Some(value),
                "url" => target.url = Some(value),
                "desc" => target.description = Some(value),
                "unix-socket" => {
                    return Err(ConfigError::invalid(
                        format!("harpoon.targets[{i}]"),
                        "unix-socket targets are not supported by tunnelgate; reach the target over TCP",
                    ))
                }
                other => {
                    return Err(ConfigError::invalid(
                        format!("harpoon.targets[{i}]"),
                        format!("unknown key {other:?}; the keys are label, url and desc"),
                    ))
                }
            }
        }
        out.push(target);
    }
    Ok(out)
}

type Targets = (Vec<HarpoonTarget>, Vec<HarpoonTemplate>);

/// Exact targets and templates, each label valid and unique across both.
fn validate_targets(raw: Vec<RawTarget>, allow_plaintext: bool, env: &EnvVars) -> Result<Targets, ConfigError> {
    let mut out: Vec<HarpoonTarget> = Vec::new();
    let mut templates: Vec<HarpoonTemplate> = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("harpoon.targets[{i}].{field}");
        let label = t.label.unwrap_or_default();
        if !valid_label(&label) {
            return Err(ConfigError::invalid(
                key("label"),
                format!("{label:?} must match ^[a-z0-9][a-z0-9_-]{{0,63}}$"),
            ));
        }
        if out.iter().any(|o| o.label == label) || templates.iter().any(|o| o.label == label) {
            return Err(ConfigError::invalid(key("label"), format!("{label:?} is given twice")));
        }
        let description = t.description.unwrap_or_default();
        match (t.url, t.template) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    key("template"),
                    "a target has a url or a template, not both",
                ))
            }
            (None, Some(template)) => {
                templates.push(harpoon_template::template(
                    i,
                    label,
                    description,
                    template,
                    allow_plaintext,
                    env,
                )?);
            }
            (url, None) => {
                let url = url.unwrap_or_default();
                check_url(&url, allow_plaintext).map_err(|problem| ConfigError::invalid(key("url"), problem))?;
                out.push(HarpoonTarget {
                    label,
                    url,
                    description,
                });
            }
        }
    }
    Ok((out, templates))
}

fn valid_label(label: &str) -> bool {
    let b = label.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

/// Never echoes the URL (it may carry credentials or a query with a secret).
fn check_url(url: &str, allow_plaintext: bool) -> Result<(), String> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Err("is not a URL".into());
    };
    match parsed.scheme() {
        "https" => {}
        "http" if allow_plaintext => {}
        "http" => return Err("is plaintext http; set harpoon.allow_plaintext_http = true to allow it".into()),
        _ => return Err("must be an http(s) URL".into()),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("has no host".into());
    }
    // A URL without a path is its root (`https://h` is `https://h/`), as upstream reads it.
    Ok(())
}
