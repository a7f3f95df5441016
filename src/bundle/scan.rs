//! The canary scan: does a text carry a secret? Run over every part of a support bundle
//! before anything is written (the integration tests check what the gateway serves and
//! writes by their own reading of the same rule, `tests/it/harness.rs`).
//!
//! Two kinds of hit: a secret value the configuration resolves ([`Canaries::of_config`]:
//! the API key, configured header values, proxy credentials, client key material, the
//! etcd password; or a test's own canaries, [`Canaries::with`]), and generic shapes that
//! are secrets whatever the configuration says (a PEM private key, an `Authorization`
//! credential). A hit names the kind of secret, never the secret.
//!
//! Values shorter than [`MIN_SECRET_BYTES`] are not searched for: they would be found in
//! every text by chance, and a secret that short protects nothing.

use std::collections::BTreeSet;
use std::path::Path;

use crate::config::{ChannelConfig, Config};
use crate::egress::proxy::{ProxySetting, ProxyUrl};
use crate::egress::tls::TlsFiles;

/// The shortest value searched for.
pub(crate) const MIN_SECRET_BYTES: usize = 6;

/// The shortest PEM body line searched for (a full base64 line is 64 characters).
const MIN_PEM_LINE: usize = 32;

/// The shortest token after `Bearer ` or `Basic ` taken for a credential.
const MIN_CREDENTIAL_TOKEN: usize = 12;

/// The secrets to look for.
#[derive(Clone, Debug, Default)]
pub(crate) struct Canaries {
    secrets: Vec<(String, String)>,
}

/// One kind of secret found in a text (never the secret itself).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Leak {
    /// E.g. `the API key (control_plane.api_key)` or `a PEM private key`.
    pub kind: String,
}

impl Canaries {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds `value`, reported as `kind` when found (skipped when too short to mean
    /// anything; also searched for as JSON escapes it).
    #[cfg(test)]
    pub(crate) fn with(mut self, kind: impl Into<String>, value: &str) -> Self {
        self.add(kind, value);
        self
    }

    pub(crate) fn add(&mut self, kind: impl Into<String>, value: &str) {
        if value.len() < MIN_SECRET_BYTES {
            return;
        }
        let kind = kind.into();
        let escaped = serde_json::to_string(value).expect("a string serializes");
        let escaped = &escaped[1..escaped.len() - 1];
        if escaped != value {
            self.secrets.push((kind.clone(), escaped.to_owned()));
        }
        self.secrets.push((kind, value.to_owned()));
    }

    /// How many values are searched for.
    pub(crate) fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Every secret `config` resolves: the API key, each configured header value, the
    /// credentials of every proxy URL (explicit or from the environment), the contents of
    /// each client key file, and the etcd password. A key file that cannot be read adds
    /// nothing (the PEM shape is still found by [`Canaries::find`]).
    pub(crate) fn of_config(config: &Config) -> Self {
        let mut c = Self::new();
        c.add(
            "the API key (control_plane.api_key)",
            config.control_plane.api_key.expose(),
        );
        for (name, value) in config.control_plane.headers.iter() {
            c.add(format!("a header value (control_plane.headers.{name})"), value.expose());
        }
        for (channel, headers) in &config.mcp.headers {
            for (name, value) in headers.iter() {
                c.add(
                    format!("a header value (mcp.channels.{channel}.headers.{name})"),
                    value.expose(),
                );
            }
        }
        c.proxy("control_plane.proxy", &config.control_plane.proxy);
        c.proxy("mcp.proxy", &config.mcp.proxy);
        for (name, channel) in &config.mcp.channels {
            if let ChannelConfig::Http { proxy, .. } = channel {
                c.proxy(&format!("mcp.channels.{name}.proxy"), proxy);
            }
        }
        c.key_files(&config.control_plane.tls);
        c.key_files(&config.mcp.tls);
        for tls in config.mcp.channel_tls.values() {
            c.key_files(tls);
        }
        if let Some(etcd) = &config.coordination.etcd {
            c.key_files(&etcd.tls);
            if let Some((_, password)) = &etcd.credentials {
                c.add("the etcd password (coordination.etcd.password)", password.expose());
            }
        }
        c
    }

    fn proxy(&mut self, key: &str, setting: &ProxySetting) {
        match setting {
            ProxySetting::Off => {}
            ProxySetting::Via(url) => self.proxy_url(key, url),
            ProxySetting::Env(env) => {
                for (var, url) in [
                    ("HTTPS_PROXY", &env.https),
                    ("HTTP_PROXY", &env.http),
                    ("ALL_PROXY", &env.all),
                ] {
                    if let Some(url) = url {
                        self.proxy_url(&format!("{key} = \"env\", {var}"), url);
                    }
                }
            }
        }
    }

    fn proxy_url(&mut self, key: &str, url: &ProxyUrl) {
        let Some((user, password)) = userinfo(url.expose()) else {
            return;
        };
        let kind = format!("proxy credentials ({key})");
        self.add(kind.clone(), &format!("{user}:{password}"));
        self.add(kind, password);
    }

    fn key_files(&mut self, tls: &TlsFiles) {
        if let Some(client) = &tls.client {
            self.key_file(&client.key.key, &client.key.path);
        }
    }

    fn key_file(&mut self, key: &str, path: &Path) {
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        let kind = format!("key material ({key})");
        for line in pem_body(&text) {
            self.add(kind.clone(), line);
        }
    }

    /// Every kind of secret `text` carries, each once, in a stable order; empty when
    /// it is clean.
    pub(crate) fn find(&self, text: &str) -> Vec<Leak> {
        let mut found = BTreeSet::new();
        for (kind, value) in &self.secrets {
            if text.contains(value.as_str()) {
                found.insert(kind.clone());
            }
        }
        if has_pem_private_key(text) {
            found.insert("a PEM private key".to_owned());
        }
        if has_credential(text) {
            found.insert("an Authorization credential (Bearer or Basic)".to_owned());
        }
        found.into_iter().map(|kind| Leak { kind }).collect()
    }
}

/// The user and password of a URL's userinfo, when it has both.
fn userinfo(url: &str) -> Option<(&str, &str)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (info, _) = authority.rsplit_once('@')?;
    info.split_once(':')
}

/// The base64 lines of every PEM block in `text` (long enough to be searched for).
fn pem_body(text: &str) -> Vec<&str> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("-----BEGIN") {
            inside = true;
        } else if line.starts_with("-----END") {
            inside = false;
        } else if inside && line.len() >= MIN_PEM_LINE && !line.contains(':') {
            out.push(line);
        }
    }
    out
}

/// `-----BEGIN ... PRIVATE KEY-----` (RSA, EC, ENCRYPTED, OPENSSH or none).
fn has_pem_private_key(text: &str) -> bool {
    text.match_indices("-----BEGIN ").any(|(at, _)| {
        let rest = &text[at + "-----BEGIN ".len()..];
        let label = rest.split("-----").next().unwrap_or("");
        label.len() <= 40 && label.ends_with("PRIVATE KEY") && !label.contains('\n')
    })
}

/// `Bearer TOKEN` or `Basic TOKEN` (any case), the token at least
/// [`MIN_CREDENTIAL_TOKEN`] characters of a credential's alphabet with a digit in it (so
/// prose such as "basic authentication" is not taken for one).
fn has_credential(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["bearer ", "basic "].iter().any(|scheme| {
        lower.match_indices(scheme).any(|(at, _)| {
            let preceded = at == 0 || !lower.as_bytes()[at - 1].is_ascii_alphanumeric();
            let token: String = text[at + scheme.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "-._~+/=".contains(*c))
                .collect();
            preceded && token.len() >= MIN_CREDENTIAL_TOKEN && token.chars().any(|c| c.is_ascii_digit())
        })
    })
}

#[cfg(test)]
mod tests;
