//! OAuth discovery for one HTTP channel (the `oauth_discovery` command): which URLs are
//! fetched in which order, what counts as protected-resource metadata, and the answer.
//!
//! The order is the official client's (`docs/oauth-discovery.md` in the shared docs, and
//! docs/reach.md): a `WWW-Authenticate` probe (an empty-body `POST`, then a `GET`, to the
//! MCP URL, sharing one second), then the RFC 9728 well-known URLs (path-specific first,
//! then the root), each fetched with `GET` until one answers with something other than
//! a `404` or `5xx`. Invariants:
//! - every request goes through the channel's own client (so its proxy, TLS and socket
//!   settings apply) after a fresh [`Admission::recheck`]; none carries a JSON-RPC
//!   message or the command's headers, so none can act on the MCP server;
//! - the whole discovery ends by the `deadline` it is given (the dispatcher passes the
//!   earlier of the command's `response_timeout`, less the time to post, and its own
//!   bound);
//! - a document is at most [`MAX_DOCUMENT`] bytes; redirects are followed only to the
//!   same origin, at most [`MAX_REDIRECTS`] times;
//! - the posted `resp_headers` pass the same allowlist as every MCP response header;
//! - a `resource_metadata` URL is read only on the MCP server's own origin or on one
//!   `mcp.oauth_trusted_origins` lists; another is skipped, logged by its origin and told;
//! - URLs, bodies and header values are never logged.
//!
//! Must not touch: the control plane, the latch, metrics.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, ACCEPT, LOCATION, USER_AGENT, WWW_AUTHENTICATE};
use http::{Method, StatusCode};
use serde_json::value::RawValue;
use tokio::time::{timeout_at, Instant};
use url::Url;

use super::classify::json_value;
use super::client::Clients;
use super::exchange::{read_body, BodyError};
use super::headers::response_headers;
use super::HttpTransport;
use crate::downstream::{Discovered, Reply};
use crate::egress::client::Answer;
use crate::protocol::{DiscoveryFailure, RespType};
use crate::strict::Admission;

/// Both probe requests share this bound, as in the official client.
const PROBE_BOUND: Duration = Duration::from_secs(1);
/// Largest metadata document.
const MAX_DOCUMENT: usize = 1 << 20;
/// Same-origin redirects followed per candidate, at most.
const MAX_REDIRECTS: usize = 10;
/// The well-known path of RFC 9728.
const WELL_KNOWN: &str = ".well-known/oauth-protected-resource";

/// The origins a discovery may read besides the MCP server's own
/// (`mcp.oauth_trusted_origins`, canonical), and who is told of each refusal.
#[derive(Default)]
pub(super) struct TrustGate {
    pub(super) trusted: Vec<String>,
    pub(super) refused: std::sync::OnceLock<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

/// Why one fetch produced no response.
enum FetchError {
    /// The fence refused the request: nothing was sent.
    Refused,
    /// The discovery's deadline passed.
    Timeout,
    /// DNS, connect, TLS, a lost connection or a broken body.
    Transport,
}

/// What the candidates that produced no document had in common.
#[derive(Default)]
struct Tally {
    /// At least one candidate was answered by the server (a `404` or `5xx`).
    answered: bool,
}

impl HttpTransport {
    /// Runs OAuth discovery against this channel's MCP server, ending by `deadline`:
    /// the first usable protected-resource metadata document with the status and the
    /// (filtered) headers of the response that served it, or why there is none.
    ///
    /// # Cancel safety
    /// Cancel-safe: every request is a read (or the empty-body probe) that cannot act on
    /// the MCP server, so dropping the future loses nothing but the answer.
    pub(crate) async fn discover(
        &self,
        admission: &Admission,
        deadline: Instant,
    ) -> Result<Discovered, DiscoveryFailure> {
        let client = self.clients().map_err(|_| DiscoveryFailure::Unreachable)?;
        let mut candidates = Vec::new();
        let probe_deadline = deadline.min(Instant::now() + PROBE_BOUND);
        if let Some(url) = self.probe(&client, admission, probe_deadline).await? {
            if self.trusts(&url) {
                candidates.push(url);
            } else {
                self.refuse_origin(&url);
            }
        }
        for url in well_known_urls(&self.inner.url) {
            if !candidates.contains(&url) {
                candidates.push(url);
            }
        }
        let mut tally = Tally::default();
        for (i, url) in candidates.iter().enumerate() {
            let last = i + 1 == candidates.len();
            let resp = match fetch(&client, admission, url.clone(), deadline, &self.origin_headers()).await {
                Ok(resp) => resp,
                Err(FetchError::Refused) => return Err(DiscoveryFailure::NotExecuted),
                Err(FetchError::Timeout) => return Err(DiscoveryFailure::TimedOut),
                Err(FetchError::Transport) => continue,
            };
            let status = resp.status();
            let passed_over = status == StatusCode::NOT_FOUND || status.is_server_error();
            if passed_over && !last {
                tally.answered = true;
                continue;
            }
            let resp_headers = response_headers(resp.headers());
            let document = match read_body(resp, MAX_DOCUMENT, deadline).await {
                Ok(body) => metadata_document(body),
                Err(BodyError::Timeout) => return Err(DiscoveryFailure::TimedOut),
                Err(BodyError::TooLarge) => return Err(DiscoveryFailure::InvalidMetadata),
                Err(BodyError::Broken) => continue,
            };
            return match document {
                Some(doc) => Ok(Discovered {
                    reply: Reply {
                        resp_json: Some(doc),
                        resp_headers,
                        resp_code: status.as_u16(),
                        resp_type: RespType::OauthDiscoveryResponse,
                    },
                    source: url.to_string(),
                }),
                // A last 404 or 5xx without metadata: the server has none to give.
                None if passed_over => Err(DiscoveryFailure::NoMetadata),
                None => Err(DiscoveryFailure::InvalidMetadata),
            };
        }
        Err(if tally.answered {
            DiscoveryFailure::NoMetadata
        } else {
            DiscoveryFailure::Unreachable
        })
    }

    /// Whether a metadata URL the server named may be read: it is on the MCP server's own
    /// origin, or on one `mcp.oauth_trusted_origins` lists.
    fn trusts(&self, url: &Url) -> bool {
        url.origin() == self.inner.url.origin()
            || self
                .inner
                .trust
                .trusted
                .iter()
                .any(|origin| *origin == url.origin().ascii_serialization())
    }

    /// A metadata URL on an untrusted origin: not read, logged (its origin only, never
    /// the URL) and told.
    fn refuse_origin(&self, url: &Url) {
        let origin = url.origin().ascii_serialization();
        tracing::warn!(channel = %self.inner.channel, %origin, "the MCP server named OAuth metadata on another origin that mcp.oauth_trusted_origins does not list: it was not read (the server's own well-known URLs are tried); list the origin to trust it");
        if let Some(refused) = self.inner.trust.refused.get() {
            refused();
        }
    }

    /// The channel's configured headers, for the requests of a discovery that go to the
    /// MCP server's own origin (as the official client sends its extra headers there);
    /// another origin never gets them.
    fn origin_headers(&self) -> OriginHeaders<'_> {
        OriginHeaders {
            origin: &self.inner.url,
            headers: &self.inner.configured,
        }
    }

    /// The `WWW-Authenticate` probe: an empty-body `POST` to the MCP URL, then a `GET`,
    /// until a `401` names a `resource_metadata` URL. Transport failures and timeouts
    /// only end the probe; a refusal by the fence ends the discovery.
    async fn probe(
        &self,
        client: &Clients,
        admission: &Admission,
        deadline: Instant,
    ) -> Result<Option<Url>, DiscoveryFailure> {
        for method in [Method::POST, Method::GET] {
            let headers = discovery_headers(&self.inner.url, &self.origin_headers());
            let resp = match send(client, admission, (method, &self.inner.url, headers), deadline).await {
                Ok(resp) => resp,
                Err(FetchError::Refused) => return Err(DiscoveryFailure::NotExecuted),
                Err(FetchError::Timeout) => return Ok(None),
                Err(FetchError::Transport) => continue,
            };
            if resp.status() != StatusCode::UNAUTHORIZED {
                continue;
            }
            let found = resp
                .headers()
                .get_all(WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find_map(resource_metadata_url);
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }
}

/// `GET url`, following same-origin redirects (at most [`MAX_REDIRECTS`]).
async fn fetch(
    client: &Clients,
    admission: &Admission,
    mut url: Url,
    deadline: Instant,
    configured: &OriginHeaders<'_>,
) -> Result<Answer, FetchError> {
    for _ in 0..=MAX_REDIRECTS {
        let headers = discovery_headers(&url, configured);
        let resp = send(client, admission, (Method::GET, &url, headers), deadline).await?;
        let next = resp
            .status()
            .is_redirection()
            .then(|| resp.headers().get(LOCATION))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|location| url.join(location).ok())
            .filter(|next| same_origin(&url, next));
        match next {
            Some(next) => url = next,
            None => return Ok(resp),
        }
    }
    // One redirect too many: the last answer stands (a 3xx is not metadata).
    Err(FetchError::Transport)
}

/// Sends one discovery request (its method, URL and headers; no body) on the channel's
/// client after a fresh fence check, bounded by `deadline`. A URL hyper's `Uri` does not
/// accept is a transport failure: nothing is sent.
async fn send(
    client: &Clients,
    admission: &Admission,
    (method, url, headers): (Method, &Url, HeaderMap),
    deadline: Instant,
) -> Result<Answer, FetchError> {
    if Instant::now() >= deadline {
        return Err(FetchError::Timeout);
    }
    let uri = url.as_str().parse::<http::Uri>().map_err(|_| FetchError::Transport)?;
    admission.recheck().map_err(|_| FetchError::Refused)?;
    match timeout_at(deadline, client.client.send(method, &uri, headers, Bytes::new())).await {
        Err(_) => Err(FetchError::Timeout),
        Ok(Err(_)) => Err(FetchError::Transport),
        Ok(Ok(resp)) => Ok(resp),
    }
}

/// `Accept: application/json` and the gateway's `User-Agent`, on every discovery request.
fn discovery_headers(url: &Url, configured: &OriginHeaders<'_>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("tunnelgate/", env!("CARGO_PKG_VERSION"))),
    );
    if same_origin(url, configured.origin) {
        super::configured::add(&mut headers, configured.headers, &crate::protocol::WireHeaders::new());
    }
    headers
}

/// A channel's configured headers and the one origin they may go to.
struct OriginHeaders<'a> {
    origin: &'a Url,
    headers: &'a HeaderMap,
}

/// Same scheme, host and effective port.
fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme() && a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
}

/// The RFC 9728 well-known URLs of an MCP server URL, in the order they are tried: the
/// path-specific one (when the path is not empty), then the root one. The query and
/// fragment are dropped; a path already under the well-known prefix is used unchanged.
pub(super) fn well_known_urls(mcp: &Url) -> Vec<Url> {
    let mut base = mcp.clone();
    base.set_query(None);
    base.set_fragment(None);
    let path = base.path().trim_start_matches('/').to_owned();
    let mut out = Vec::with_capacity(2);
    if path.starts_with(WELL_KNOWN) {
        out.push(base.clone());
    } else if !path.is_empty() {
        let mut specific = base.clone();
        specific.set_path(&format!("/{WELL_KNOWN}/{path}"));
        out.push(specific);
    }
    let mut root = base;
    root.set_path(&format!("/{WELL_KNOWN}"));
    if !out.contains(&root) {
        out.push(root);
    }
    out
}

/// The absolute `http(s)` URL in the `resource_metadata` parameter of a `Bearer`
/// challenge of one `WWW-Authenticate` value, if any.
pub(super) fn resource_metadata_url(header: &str) -> Option<Url> {
    let mut bearer = false;
    for part in split_unquoted_commas(header) {
        let part = part.trim();
        // A part whose first token is not followed by `=` starts a new challenge.
        let (first, rest) = part.split_once(' ').unwrap_or((part, ""));
        let param = if first.contains('=') {
            part
        } else {
            bearer = first.eq_ignore_ascii_case("bearer");
            rest.trim()
        };
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        if bearer && name.trim().eq_ignore_ascii_case("resource_metadata") {
            let url = Url::parse(&unquote(value.trim())).ok()?;
            return matches!(url.scheme(), "http" | "https").then_some(url);
        }
    }
    None
}

/// Splits on commas outside quoted strings.
fn split_unquoted_commas(s: &str) -> Vec<&str> {
    let (mut parts, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// A token or a quoted string's content (with `\x` unescaped).
fn unquote(v: &str) -> String {
    let Some(inner) = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return v.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' { chars.next().unwrap_or('\\') } else { c });
    }
    out
}

/// The body as protected-resource metadata, exactly as served (surrounding whitespace
/// trimmed): a JSON object with a non-empty string `resource`, and, when
/// `authorization_servers` is present, a list whose first entry (if any) is a URL.
pub(super) fn metadata_document(body: Vec<u8>) -> Option<Box<RawValue>> {
    #[derive(serde::Deserialize)]
    struct Prm {
        resource: Option<serde_json::Value>,
        authorization_servers: Option<serde_json::Value>,
    }
    let text = String::from_utf8(body).ok()?;
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let prm: Prm = serde_json::from_str(&text).ok()?;
    if prm.resource.as_ref().and_then(|r| r.as_str()).is_none_or(str::is_empty) {
        return None;
    }
    match prm.authorization_servers {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Array(list)) => {
            if let Some(first) = list.first() {
                Url::parse(first.as_str()?).ok()?;
            }
        }
        Some(_) => return None,
    }
    json_value(text)
}

#[cfg(test)]
mod tests;
