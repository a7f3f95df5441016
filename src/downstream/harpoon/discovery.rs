//! Targets registered from an `oauth_discovery`: the protected-resource metadata the
//! discovery found, and the metadata of its first authorization server (fetched here,
//! through Harpoon's own client), become up to ten targets `oauth-<role>-0` under
//! upstream's eligibility rules, before the discovery's answer is posted (upstream
//! registers them afterwards, so a fast service can ask for a label that does not exist
//! yet).
//!
//! Invariants:
//! - only `authorization_servers[0]` is used; `authorization_endpoint` is never a target
//!   (the user's browser goes there directly);
//! - the protected-resource rows register only on the MCP server's own origin (or as its
//!   host's seed allows); the authorization-server rows only when the authorization
//!   server's row registered and they share its origin. With
//!   `harpoon.register_private_auth_servers` (off by default), an authorization server on
//!   another origin registers when the host classifier calls its host private: the case
//!   of a private identity provider, which upstream never registers;
//! - an authorization server is read and registered only on the MCP server's origin or on
//!   one `mcp.oauth_trusted_origins` lists (the official client's gate);
//! - registering is idempotent (keyed on role and group): a second discovery of the same
//!   server changes nothing.

use std::net::IpAddr;

use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use url::Url;

use super::registry::Registered;
use super::{HarpoonTransport, HostClassifier};
use crate::strict::Admission;
use crate::telemetry::metrics::HarpoonRegistrationResult;

/// Largest authorization-server metadata document read.
const MAX_METADATA: usize = 1 << 20;

/// What a record of the bundle is: the first half of its registration key, written in
/// its label (`oauth-<role>-0`), its logs and, for a row of the authorization server's
/// metadata, among its tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The protected-resource metadata's `resource`.
    PrmdResource,
    /// The protected-resource metadata's first `authorization_servers` entry.
    PrmdAuthServer,
    /// The URL the protected-resource metadata was fetched from.
    PrmdSource,
    /// The URL that served the authorization server's metadata.
    AuthServerMetadata,
    Issuer,
    TokenEndpoint,
    JwksUri,
    IntrospectionEndpoint,
    RegistrationEndpoint,
    RevocationEndpoint,
}

impl Role {
    /// The role as registry keys, labels, tags and logs write it.
    fn as_str(self) -> &'static str {
        match self {
            Self::PrmdResource => "prmd-resource",
            Self::PrmdAuthServer => "prmd-auth-server",
            Self::PrmdSource => "prmd-source",
            Self::AuthServerMetadata => "auth-server-metadata",
            Self::Issuer => "issuer",
            Self::TokenEndpoint => "token-endpoint",
            Self::JwksUri => "jwks-uri",
            Self::IntrospectionEndpoint => "introspection-endpoint",
            Self::RegistrationEndpoint => "registration-endpoint",
            Self::RevocationEndpoint => "revocation-endpoint",
        }
    }

    /// A row of the protected-resource metadata (`prmd-*`); the others are rows of the
    /// authorization server's metadata.
    fn is_protected_resource(self) -> bool {
        matches!(self, Self::PrmdResource | Self::PrmdAuthServer | Self::PrmdSource)
    }
}

/// One record of the bundle.
#[derive(Debug, Clone)]
struct Record {
    role: Role,
    url: Url,
    description: &'static str,
    tags: Vec<String>,
}

/// The rows that come from the authorization server's metadata: field, role, words.
const METADATA_ROWS: [(&str, Role, &str); 6] = [
    ("issuer", Role::Issuer, "Auth server issuer"),
    ("token_endpoint", Role::TokenEndpoint, "Auth server token endpoint"),
    ("jwks_uri", Role::JwksUri, "Auth server JWKS URI"),
    (
        "introspection_endpoint",
        Role::IntrospectionEndpoint,
        "Auth server introspection endpoint",
    ),
    (
        "registration_endpoint",
        Role::RegistrationEndpoint,
        "Auth server registration endpoint",
    ),
    (
        "revocation_endpoint",
        Role::RevocationEndpoint,
        "Auth server revocation endpoint",
    ),
];

/// What one discovery registered, for its log line and the tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) added: usize,
    pub(crate) replaced: usize,
    pub(crate) unchanged: usize,
    pub(crate) skipped: usize,
}

impl HarpoonTransport {
    /// Registers the targets a discovery of `mcp_url` found: `prm` (the protected-resource
    /// metadata, fetched from `source`) and its first authorization server's metadata,
    /// fetched by `deadline`. Errors are logged, never returned: the discovery's answer
    /// is posted whatever happens here.
    pub(crate) async fn register_discovery(
        &self,
        admission: &Admission,
        mcp_url: &str,
        source: Option<&str>,
        prm: &RawValue,
        deadline: Instant,
    ) {
        let Ok(prm) = serde_json::from_str::<Value>(prm.get()) else {
            return;
        };
        let Ok(mcp) = Url::parse(mcp_url) else {
            return;
        };
        let source = source.and_then(|s| Url::parse(s).ok());
        let resource = prm.get("resource").and_then(Value::as_str).and_then(http_url);
        let auth_server = prm
            .get("authorization_servers")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .and_then(http_url)
            .filter(|issuer| self.trusts(&mcp, issuer));
        let group = group_tag(source.as_ref(), resource.as_ref(), auth_server.as_ref());
        let metadata = match &auth_server {
            Some(issuer) if admission.recheck().is_ok() => self.fetch_metadata(issuer, deadline).await,
            _ => None,
        };
        let records = bundle(&group, resource, auth_server.clone(), source, metadata);
        let tally = self.register_records(&records, &mcp, auth_server.as_ref(), &group);
        tracing::info!(
            component = "harpoon",
            added = tally.added,
            replaced = tally.replaced,
            unchanged = tally.unchanged,
            skipped = tally.skipped,
            targets = self.registry().len(),
            "harpoon targets registered from oauth discovery"
        );
    }

    /// Whether the authorization server `issuer` may be read: it is on the MCP server's
    /// origin, or on one `mcp.oauth_trusted_origins` lists. One that is not is neither
    /// fetched nor registered; that is logged (its origin only) and counted.
    fn trusts(&self, mcp: &Url, issuer: &Url) -> bool {
        let origin = issuer.origin().ascii_serialization();
        if issuer.origin() == mcp.origin() || self.inner.settings.trusted_origins.contains(&origin) {
            return true;
        }
        tracing::warn!(component = "harpoon", %origin, "the protected-resource metadata names an authorization server on an origin that mcp.oauth_trusted_origins does not list: it is neither read nor registered; list the origin to trust it");
        self.inner
            .metrics
            .oauth_untrusted_origin(crate::telemetry::OAuthOriginSource::AuthorizationServer);
        false
    }

    fn register_records(&self, records: &[Record], mcp: &Url, auth_server: Option<&Url>, group: &str) -> Tally {
        let settings = &self.inner.settings;
        let metrics = &self.inner.metrics;
        let rules = Rules {
            mcp_origin: origin(mcp),
            seeds: seeds(records, mcp),
            auth_server: auth_server.cloned(),
            classifier: &settings.classifier,
            register_private_auth_servers: settings.register_private_auth_servers,
        };
        let auth_row_allowed = records
            .iter()
            .find(|r| r.role == Role::PrmdAuthServer)
            .is_some_and(|r| rules.allowed(r, false).is_some());
        let mut tally = Tally::default();
        let mut registry = self.registry();
        for record in records {
            let Some(reason) = rules.allowed(record, auth_row_allowed) else {
                tally.skipped += 1;
                metrics.harpoon_registration(HarpoonRegistrationResult::Skipped);
                tracing::debug!(component = "harpoon", role = record.role.as_str(), url = %origin_text(&record.url), "harpoon host auto-registration skipped: not allowed");
                continue;
            };
            let key = (record.role.as_str().to_owned(), group.to_owned());
            match registry.register(
                key,
                record.url.as_str(),
                record.description,
                record.tags.clone(),
                settings.allow_plaintext_http,
            ) {
                Ok((label, done)) => {
                    let result = match done {
                        Registered::Added => {
                            tally.added += 1;
                            HarpoonRegistrationResult::Added
                        }
                        Registered::Replaced => {
                            tally.replaced += 1;
                            HarpoonRegistrationResult::Replaced
                        }
                        Registered::Unchanged => {
                            tally.unchanged += 1;
                            HarpoonRegistrationResult::Unchanged
                        }
                    };
                    metrics.harpoon_registration(result);
                    if done != Registered::Unchanged {
                        tracing::info!(component = "harpoon", label = %label, url = %origin_text(&record.url), role = record.role.as_str(), inclusion_reason = %reason, result = result.as_str(), "harpoon host auto-registered");
                    }
                }
                Err(refusal) => {
                    tally.skipped += 1;
                    metrics.harpoon_registration(HarpoonRegistrationResult::Refused);
                    tracing::warn!(component = "harpoon", role = record.role.as_str(), url = %origin_text(&record.url), "harpoon host auto-registration failed: the URL {}", refusal.words());
                }
            }
        }
        let len = registry.len();
        drop(registry);
        self.registry_changed(len);
        tally
    }

    /// RFC 8414 metadata of `issuer`, else its OpenID configuration: the document and
    /// the URL that served it.
    async fn fetch_metadata(&self, issuer: &Url, deadline: Instant) -> Option<(Url, Value)> {
        for url in metadata_urls(issuer) {
            let Ok(uri) = url.as_str().parse::<http::Uri>() else {
                continue;
            };
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::ACCEPT, http::HeaderValue::from_static("application/json"));
            let request = self
                .inner
                .client
                .send(http::Method::GET, &uri, headers, bytes::Bytes::new());
            let Ok(Ok(mut resp)) = tokio::time::timeout_at(deadline, request).await else {
                continue;
            };
            if !resp.status().is_success() {
                continue;
            }
            let mut body = Vec::new();
            while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, resp.chunk()).await {
                body.extend_from_slice(&chunk);
                if body.len() > MAX_METADATA {
                    return None;
                }
            }
            if let Ok(doc @ Value::Object(_)) = serde_json::from_slice::<Value>(&body) {
                return Some((url, doc));
            }
        }
        None
    }
}

fn http_url(s: &str) -> Option<Url> {
    Url::parse(s)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
}

/// `group=auth-server:<12 hex>:0`: the first 6 bytes of SHA-256 over the PRM's source
/// URL, else the resource, else the authorization server, else `default`.
fn group_tag(source: Option<&Url>, resource: Option<&Url>, auth_server: Option<&Url>) -> String {
    let basis = source
        .or(resource)
        .or(auth_server)
        .map_or_else(|| "default".to_owned(), Url::to_string);
    let digest = Sha256::digest(basis.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("group=auth-server:{hex}:0")
}

fn metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let base = format!("{}://{}", issuer.scheme(), issuer.host_str().unwrap_or_default())
        + &issuer.port().map(|p| format!(":{p}")).unwrap_or_default();
    let mut urls = vec![
        format!("{base}/.well-known/oauth-authorization-server{path}"),
        format!("{base}{path}/.well-known/openid-configuration"),
    ];
    if !path.is_empty() {
        urls.push(format!("{base}/.well-known/openid-configuration{path}"));
    }
    urls.iter().filter_map(|u| Url::parse(u).ok()).collect()
}

fn tags(role_tags: &[&str], group: Option<&str>) -> Vec<String> {
    let mut tags: Vec<String> = role_tags.iter().map(|t| (*t).to_owned()).collect();
    if let Some(g) = group {
        tags.push(g.to_owned());
    }
    tags.sort();
    tags.dedup();
    tags
}

/// The bundle's records, in upstream's order.
fn bundle(
    group: &str,
    resource: Option<Url>,
    auth_server: Option<Url>,
    source: Option<Url>,
    metadata: Option<(Url, Value)>,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut push = |role, url: Option<Url>, description, tags: Vec<String>| {
        if let Some(url) = url {
            records.push(Record {
                role,
                url,
                description,
                tags,
            });
        }
    };
    push(
        Role::PrmdResource,
        resource,
        "PRMD resource",
        tags(&["protected-resource-metadata", "resource"], None),
    );
    push(
        Role::PrmdAuthServer,
        auth_server,
        "PRMD authorization server",
        tags(&["authorization-server", "protected-resource-metadata"], Some(group)),
    );
    push(
        Role::PrmdSource,
        source,
        "PRMD source URL",
        tags(&["protected-resource-metadata", "source-url"], None),
    );
    let Some((metadata_url, doc)) = metadata else {
        return records;
    };
    push(
        Role::AuthServerMetadata,
        Some(metadata_url),
        "Auth server metadata URL",
        tags(&["auth-server-metadata"], Some(group)),
    );
    for (field, role, description) in METADATA_ROWS {
        let url = doc.get(field).and_then(Value::as_str).and_then(http_url);
        push(
            role,
            url,
            description,
            tags(&["auth-server-metadata", role.as_str()], Some(group)),
        );
    }
    records
}

/// `scheme://host:port` with the effective port.
fn origin(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str()
            .unwrap_or_default()
            .trim_end_matches('.')
            .to_ascii_lowercase(),
        url.port_or_known_default().unwrap_or(0)
    )
}

fn origin_text(url: &Url) -> String {
    super::registry::redacted_origin(url.as_str())
}

/// Seed origins and hosts: the protected resource's and the source's, when they share
/// the MCP server's origin. A host seeds when it is an IP address, or a name of two
/// labels or more (no public-suffix list is consulted: a single-label name such as
/// `localhost` or `mcp` seeds no host, as upstream's).
struct Seeds {
    origins: Vec<String>,
    hosts: Vec<String>,
}

fn seeds(records: &[Record], mcp: &Url) -> Seeds {
    let mcp_origin = origin(mcp);
    let mut seeds = Seeds {
        origins: Vec::new(),
        hosts: Vec::new(),
    };
    for r in records
        .iter()
        .filter(|r| matches!(r.role, Role::PrmdResource | Role::PrmdSource))
    {
        if origin(&r.url) != mcp_origin {
            continue;
        }
        seeds.origins.push(origin(&r.url));
        let host = r
            .url
            .host_str()
            .unwrap_or_default()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if host.parse::<IpAddr>().is_ok()
            || host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok()
            || host.split('.').count() >= 2
        {
            seeds.hosts.push(host);
        }
    }
    seeds
}

struct Rules<'a> {
    mcp_origin: String,
    seeds: Seeds,
    auth_server: Option<Url>,
    classifier: &'a HostClassifier,
    register_private_auth_servers: bool,
}

impl Rules<'_> {
    /// Why `record` is registered (its inclusion reason), or `None` when it is not.
    fn allowed(&self, record: &Record, auth_row_allowed: bool) -> Option<String> {
        let record_origin = origin(&record.url);
        let private = classify(self.classifier, &record.url);
        let disallowed = if record.role.is_protected_resource() {
            let off_origin = record_origin != self.mcp_origin;
            // Ours, opt-in: a private authorization server on another origin.
            let private_as =
                record.role == Role::PrmdAuthServer && self.register_private_auth_servers && private.is_some();
            off_origin && !private_as
        } else {
            !auth_row_allowed || self.auth_server.as_ref().is_none_or(|a| origin(a) != record_origin)
        };
        if disallowed {
            return self
                .seeds
                .origins
                .contains(&record_origin)
                .then(|| "oauth-protected-resource-host".to_owned());
        }
        if let Some(reason) = private {
            return Some(reason);
        }
        let host = record
            .url
            .host_str()
            .unwrap_or_default()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        self.seeds
            .hosts
            .iter()
            .any(|seed| host == *seed || host.ends_with(&format!(".{seed}")))
            .then(|| "oauth-protected-resource-host".to_owned())
    }
}

/// `loopback`, `private-ip` or `suffix:<.s>` when the classifier calls the host private.
fn classify(classifier: &HostClassifier, url: &Url) -> Option<String> {
    let host = url
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let ip = host.parse::<IpAddr>().ok();
    let loopback = host == "localhost" || ip.is_some_and(|ip| ip.is_loopback());
    if classifier.loopback && loopback {
        return Some("loopback".into());
    }
    let private = match ip {
        Some(IpAddr::V4(v4)) => v4.is_private(),
        Some(IpAddr::V6(v6)) => (v6.segments()[0] & 0xfe00) == 0xfc00,
        None => false,
    };
    if classifier.private && private {
        return Some("private-ip".into());
    }
    classifier
        .suffixes
        .iter()
        .find(|s| host.ends_with(s.as_str()) || host == s[1..])
        .map(|s| format!("suffix:{s}"))
}

#[cfg(test)]
mod tests;
