//! HTTP conversation with the tunnel service (poll and response endpoints).
//!
//! The client holds what every request shares: the gateway's one HTTP client
//! (`egress::client`, with `control_plane.proxy` and `control_plane.tls`), the headers
//! of every request, and the URLs parsed once. Its rooms, one per conversation:
//! - [`poll`]: the long poll and the reading of its commands;
//! - [`delivery`]: a response POST with its retries, and how it ended;
//! - [`tunnel`]: the tunnel lookup (`doctor`);
//! - [`urls`]: the tunnel's path and every poll URL.
//!
//! Invariants: redirects are never followed (a client certificate is only ever offered
//! to the control plane's own origin); the API key is sent as a sensitive header value
//! and never logged; a failed TLS handshake is named in words, never with the URL.

mod declared;
mod delivery;
mod learned;
mod poll;
mod routing;
mod tunnel;
mod urls;

pub(crate) use self::declared::ServerInfoSource;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, RETRY_AFTER};

pub(crate) use self::delivery::DeliveryReport;
pub(crate) use self::poll::{PollError, PollErrorKind, PollWait, Polled};
pub use self::tunnel::LookupError;
use self::urls::{percent_encode_segment, poll_filter, uri_of, PollUrls};
use super::backoff::parse_retry_after;
use crate::egress::client::{platform_config, Answer, Client, Egress, NackRetries, SendError};
use crate::egress::proxy::ProxySetting;
use crate::telemetry::Metrics;

/// Fresh ids live in `protocol`; named here too for the wiring's call site.
pub(crate) use crate::protocol::random_hex;

const CLIENT_NAME: &str = "tunnelgate";
/// Idle control-plane connections close after this.
const IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// What the client needs to talk to the tunnel service.
#[derive(Clone)]
pub(crate) struct ControlSettings {
    pub base_url: String,
    pub url_path: String,
    pub tunnel_id: String,
    pub api_key: String,
    pub poll_timeout: Duration,
    pub post_timeout: Duration,
    pub post_attempts: u32,
    /// `control_plane.http2`: offer HTTP/2 by ALPN to a TLS control plane. Off, both
    /// client offers only HTTP/1.1 (docs/PERFORMANCE.md: against a TLS control plane,
    /// HTTP/2 cost 48% more gateway CPU per command at concurrency 1 and 15% at 16).
    pub http2: bool,
    /// `X-Tunnel-MCP-Server-Info` value, if declared.
    pub server_info: Option<String>,
    /// `control_plane.routing_correction`: advertise `wrong-cluster-v1` and learn the
    /// placement token a `409 wrong_cluster` gives.
    pub routing_correction: bool,
    /// `control_plane.initial_poll_timeout`: the very first poll attempt of the process
    /// asks for `min(poll_timeout, this)` instead of no wait.
    pub initial_poll_timeout: Option<Duration>,
}

impl std::fmt::Debug for ControlSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlSettings")
            .field("tunnel_id", &self.tunnel_id)
            .finish_non_exhaustive()
    }
}

/// The poll and response client. Cheap to clone; connections are pooled.
#[derive(Clone)]
pub struct ControlClient {
    /// The poll, the response POST and the tunnel lookup, directly or through
    /// `control_plane.proxy`. Shared: the client is a few hundred bytes of configuration.
    client: Arc<Client>,
    /// `{base_url}{url_path}/v1/tunnels/{tunnel_id}`: the tunnel's metadata.
    tunnel_uri: http::Uri,
    /// `{tunnel_url}/poll`, the base of every poll URL in `poll_urls`.
    poll_url: String,
    /// Every poll URL the client can send, parsed once ([`PollUrls`]): a URL parse with its
    /// host check was a measurable share of a poll's cost.
    poll_urls: Arc<PollUrls>,
    /// The poll filter's query (`&channel=...`), for URLs parsed later.
    poll_filter: String,
    /// The wait a proxy lets through, once learned ([`learned`]); shared by clones.
    learned: Arc<learned::Learned>,
    /// The placement token of `control_plane.routing_correction` ([`routing`]), when on.
    routing: Option<Arc<routing::Routing>>,
    /// The poll URLs of the first attempt's wait (`control_plane.initial_poll_timeout`),
    /// until that attempt is made; shared by clones.
    initial: Arc<std::sync::Mutex<Option<Arc<PollUrls>>>>,
    /// Parsed once: a response POST is sent per command.
    response_uri: http::Uri,
    headers: HeaderMap,
    /// `X-Tunnel-MCP-Server-Info` as it stands at each request, over the one in
    /// `headers` (which is what the configuration alone declares).
    declared: Option<Arc<ServerInfoSource>>,
    settings: Arc<ControlSettings>,
    metrics: Arc<Metrics>,
}

/// Why a [`ControlClient`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the response URL built from control_plane.base_url, url_path and tunnel_id does not parse")]
    Url,
    #[error("control_plane.proxy: {0}")]
    Proxy(#[from] crate::egress::proxy::EgressError),
    #[error("cannot build the TLS configuration with the platform's verifier: {0}")]
    Tls(#[from] rustls::Error),
}

impl ControlClient {
    /// A client that reaches the control plane directly (no proxy); the tests' shortcut.
    #[cfg(test)]
    pub(crate) fn new(settings: ControlSettings, instance_id: &str, metrics: Arc<Metrics>) -> Result<Self, BuildError> {
        Self::with_egress(settings, instance_id, metrics, &ProxySetting::Off, None)
    }

    /// A client that reaches the control plane as `proxy` says (`control_plane.proxy`),
    /// with the TLS configuration of `control_plane.tls` (from
    /// `egress::tls::client_config`; `None`: platform roots, no client certificate, as
    /// `egress::client::platform_config` builds it), offering HTTP/2 by ALPN only with
    /// `control_plane.http2`. Redirects are never followed, so a client certificate is
    /// only ever offered to the control plane's own origin; the verifier and certificate
    /// resolver of `tls` are shared, so rewritten files reach the next handshake.
    pub(crate) fn with_egress(
        settings: ControlSettings,
        instance_id: &str,
        metrics: Arc<Metrics>,
        proxy: &ProxySetting,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Self, BuildError> {
        let target = url::Url::parse(&settings.base_url).map_err(|_| BuildError::Url)?;
        let mut tls = match tls {
            Some(config) => config,
            None => platform_config()?,
        };
        if !settings.http2 {
            tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        }
        let egress = Egress {
            tls,
            proxy: proxy.clone(),
            socket: None,
            connect_timeout: settings.post_timeout.min(Duration::from_secs(10)),
            idle: IDLE_TIMEOUT,
            // Up to two resends of a request an HTTP/2 server refused unprocessed.
            retries: NackRetries::UpToTwo,
        };
        let client = Arc::new(Client::new(egress, &target)?);
        let prefix = format!(
            "{}{}/v1/tunnels/{}",
            settings.base_url.trim_end_matches('/'),
            settings.url_path,
            percent_encode_segment(&settings.tunnel_id)
        );
        let headers = base_headers(&settings, instance_id);
        let poll_url = format!("{prefix}/poll");
        let initial = initial_urls(&poll_url, "", &settings)?;
        let poll_urls = Arc::new(PollUrls::parse(&poll_url, "", settings.poll_timeout)?);
        let response_uri = uri_of(&url::Url::parse(&format!("{prefix}/response")).map_err(|_| BuildError::Url)?)?;
        let tunnel_uri = uri_of(&url::Url::parse(&prefix).map_err(|_| BuildError::Url)?)?;
        Ok(Self {
            client,
            poll_url,
            poll_urls,
            poll_filter: String::new(),
            learned: Arc::default(),
            routing: settings.routing_correction.then(Arc::default),
            initial: Arc::new(std::sync::Mutex::new(initial)),
            tunnel_uri,
            response_uri,
            headers,
            declared: None,
            settings: Arc::new(settings),
            metrics,
        })
    }

    /// Adds the configured headers (`OpenAI-Organization`, `control_plane.headers`) to
    /// every request: polls, response POSTs and the tunnel lookup. A name the client sets
    /// itself keeps the client's value (the configuration rejects such names anyway).
    pub(crate) fn with_headers(mut self, configured: HeaderMap) -> Self {
        for (name, value) in &configured {
            if !self.headers.contains_key(name) {
                self.headers.insert(name.clone(), value.clone());
            }
        }
        self
    }

    /// Every request declares what `source` renders when it is sent (see
    /// [`ServerInfoSource`]). Call it after [`Self::with_headers`].
    pub(crate) fn with_declaration(mut self, source: ServerInfoSource) -> Self {
        self.declared = Some(Arc::new(source));
        self
    }

    /// The headers of a request sent now.
    fn request_headers(&self) -> HeaderMap {
        let mut headers = self.headers.clone();
        if let Some(declared) = &self.declared {
            let name = HeaderName::from_static("x-tunnel-mcp-server-info");
            match declared.header() {
                Some(value) => headers.insert(name, value),
                None => headers.remove(name),
            };
        }
        headers
    }

    /// Every poll names `channels` (`control_plane.poll_channels`, the official client's
    /// filter): one `channel=NAME` query parameter per name, after `limit` and
    /// `timeout_ms`, in the order given (the configuration sorts them and removes
    /// duplicates). An empty list adds nothing: the control plane then hands out the
    /// commands of every channel.
    pub(crate) fn with_poll_channels<S: AsRef<str>>(mut self, channels: &[S]) -> Result<Self, BuildError> {
        self.poll_filter = poll_filter(channels);
        self.poll_urls = Arc::new(PollUrls::parse(
            &self.poll_url,
            &self.poll_filter,
            self.settings.poll_timeout,
        )?);
        self.initial = Arc::new(std::sync::Mutex::new(initial_urls(
            &self.poll_url,
            &self.poll_filter,
            &self.settings,
        )?));
        Ok(self)
    }

    /// How the control plane's requests leave: `"direct"`, `"tunnel"` (an `https`
    /// control plane through a proxy's `CONNECT`) or `"forward"` (an `http` one through
    /// a forwarding proxy).
    pub(crate) fn route(&self) -> &'static str {
        self.client.route().as_str()
    }
}

/// The poll URLs of the first attempt, when `initial_poll_timeout` is set: their long
/// wait is `min(poll_timeout, initial_poll_timeout)`.
fn initial_urls(poll_url: &str, filter: &str, settings: &ControlSettings) -> Result<Option<Arc<PollUrls>>, BuildError> {
    let Some(initial) = settings.initial_poll_timeout else {
        return Ok(None);
    };
    Ok(Some(Arc::new(PollUrls::parse(
        poll_url,
        filter,
        initial.min(settings.poll_timeout),
    )?)))
}

/// The headers of every request, in the order they are sent: `Authorization` (marked
/// sensitive), `Accept`, the client's name, version and instance, the server-info
/// declaration.
fn base_headers(settings: &ControlSettings, instance_id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let bearer = HeaderValue::from_str(&format!("Bearer {}", settings.api_key));
    if let Ok(mut v) = bearer {
        v.set_sensitive(true);
        headers.insert(AUTHORIZATION, v);
    }
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    headers.insert(
        HeaderName::from_static("x-tunnel-client-name"),
        HeaderValue::from_static(CLIENT_NAME),
    );
    headers.insert(
        HeaderName::from_static("x-tunnel-client-version"),
        HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
    );
    if let Ok(v) = HeaderValue::from_str(instance_id) {
        headers.insert(HeaderName::from_static("x-tunnel-client-instance-id"), v);
    }
    headers.insert(
        HeaderName::from_static("x-tunnel-client-wire-protocol-version"),
        HeaderValue::from_static(crate::protocol::WIRE_PROTOCOL_VERSION),
    );
    if settings.routing_correction {
        headers.insert(
            HeaderName::from_static("x-tunnel-client-capabilities"),
            HeaderValue::from_static("wrong-cluster-v1"),
        );
    }
    if let Some(info) = settings
        .server_info
        .as_deref()
        .and_then(|i| HeaderValue::from_str(i).ok())
    {
        headers.insert(HeaderName::from_static("x-tunnel-mcp-server-info"), info);
    }
    headers
}

/// One line naming the problem of a failed TLS handshake with the control plane (a
/// refused client certificate, an untrusted server certificate): nothing was sent.
fn warn_tls(e: &SendError, what: &str) {
    if !e.is_connect() && !crate::egress::tls::refused_handshake(e.chain()) {
        return;
    }
    if let Some(problem) = crate::egress::tls::handshake_problem(e.chain()) {
        tracing::warn!(
            tls_problem = %problem,
            "{what} not sent: the TLS handshake with the control plane failed: {problem} (control_plane.tls)"
        );
    }
}

/// A server-imposed minimum wait, capped.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, SystemTime::now())
}

enum BodyError {
    TooLarge,
    Transport,
}

async fn read_bounded(mut response: Answer, limit: usize) -> Result<Bytes, BodyError> {
    // A declared length over the limit is refused unread; one within it is allocated once
    // (growing a large buffer by doubling would hold two copies at the moment of a move).
    let declared = response
        .content_length()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut buf = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = response.chunk().await.map_err(|_| BodyError::Transport)? {
        if buf.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}
