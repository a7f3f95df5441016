//! Streamable HTTP transport: one pooled keep-alive client per channel that forwards a
//! JSON-RPC message byte for byte and says truthfully how the leg ended.
//!
//! Invariants:
//! - nothing is sent without a fresh [`Admission::recheck`] right before the send (POST,
//!   resume GET, session DELETE), and nothing is sent once the leg's deadline has passed;
//! - a request is sent at most once: no redirects, no client-side retries; the only
//!   follow-up request is a bounded resume (`GET` with `Last-Event-ID`), never a replay
//!   of the POST;
//! - the channel reaches its server directly, through the proxy its configuration names
//!   (`egress::proxy`: `CONNECT` for https, forwarded for http), or over a unix socket;
//!   every request (the POST, the resume `GET`, the session `DELETE`, discovery's) goes
//!   through the gateway's one client (`egress::client`), and a failure is classified
//!   from its one stable kind (`egress::error::SendErrorKind`, in [`classify`]);
//! - `not_sent` only when the failure happened while connecting (DNS, TCP, TLS, a proxy's
//!   refused `CONNECT`) or before the send began, or when a forwarding proxy answered
//!   `407` (it forwarded nothing); anything after that without a terminal response is
//!   `abandoned` (a forwarding proxy's `502`/`504` included);
//! - `answered` only for a whole JSON body holding a JSON-RPC response for the request's
//!   id, or the SSE event carrying it (the sentinel); a closed stream is never "done";
//! - every wait ends by `min(command deadline, now + request_timeout)`;
//! - response bytes are forwarded exactly; server bodies that are not JSON-RPC never
//!   reach the caller (a synthesized `-32603` does);
//! - header values, payloads, bodies and the URL are never logged.
//!
//! Must not touch: the control plane, the latch, metrics. Outcomes are returned; the
//! dispatcher acts on them.
//!
//! Rooms, each owning one concern of the leg (types and the public surface stay here):
//! - [`client`]: the channel's client, set up once and held until
//!   [`HttpTransport::close_connections`];
//! - [`request`]: the POST, the resume `GET` and the session `DELETE`, ready for the
//!   client, with their headers from [`headers`] and [`configured`];
//! - [`send`]: the one place a request leaves, after the fence's last word, and what a
//!   failure before the response headers proves;
//! - [`exchange`]: the POST's answer by body kind (a whole JSON body) and the `DELETE`;
//! - [`stream`]: an event-stream answer read to its sentinel, and its bounded resume;
//! - [`classify`]: what a response or a failure means (pure);
//! - [`discovery`]: the `oauth_discovery` command.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::header::HeaderMap;
use tokio::time::Instant;
use url::Url;

use self::classify::reached_server;
use self::client::{build_clients, ClientError, Clients};
use super::era::EraSetting;
use super::identity::Observed;
use super::{ChannelStatus, DownstreamRequest, InputRequiredSettings, LegFailure, LegResult, NotifySink, Reply};
use crate::egress::http_url::HttpUrl;
use crate::egress::proxy::ProxySetting;
use crate::egress::proxy::{EgressError, Route};
use crate::protocol::{RespType, WireHeaders};
use crate::strict::Admission;
use crate::supervisor::Supervisor;

/// Bounds for one channel's HTTP legs.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// TCP connect (and TLS handshake) bound.
    pub connect_timeout: Duration,
    /// Whole-leg bound when the command's own deadline is later or absent.
    pub request_timeout: Duration,
    /// Largest JSON body, or largest undispatched SSE event, the leg will hold.
    pub max_body_bytes: usize,
}

/// How a channel's requests leave: its proxy rules and, instead, a unix domain socket
/// (which is always reached directly, keeping the URL's host as `Host`).
#[derive(Clone, Debug)]
pub struct HttpEgress {
    pub proxy: ProxySetting,
    pub socket: Option<PathBuf>,
    /// The channel's TLS configuration (`mcp.tls`, the channel's `tls`, from
    /// `egress::tls::client_config`); `None`: platform roots, no client certificate
    /// (`egress::client::platform_config`). The client follows no redirect, so its
    /// client certificate is only ever offered to this channel's origin.
    pub tls: Option<rustls::ClientConfig>,
}

impl HttpEgress {
    /// Straight to the URL's host: no proxy, no socket.
    #[cfg(test)]
    pub(crate) fn direct() -> Self {
        Self {
            proxy: ProxySetting::Off,
            socket: None,
            tls: None,
        }
    }

    /// How requests for `url` leave.
    fn route(&self, url: &Url) -> Route {
        if self.socket.is_some() {
            return Route::Direct;
        }
        crate::egress::proxy::route(&self.proxy, url)
    }
}

/// Why a channel's transport could not be built. Messages never include the URL (it may
/// carry credentials); the channel is a field, for callers that report it.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    #[error("the MCP server URL is not a valid URL")]
    InvalidUrl { channel: String },
    /// [`HttpTransport::from_text`]'s (test builds only).
    #[cfg(test)]
    #[error("the MCP server URL must use http or https")]
    UnsupportedScheme { channel: String },
    #[error("the HTTP client could not be built")]
    Client {
        channel: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the channel's proxy cannot be used: {source}")]
    Proxy {
        channel: String,
        #[source]
        source: EgressError,
    },
}

impl HttpSetupError {
    /// Stable label for logs.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::InvalidUrl { .. } => "invalid_url",
            Self::UnsupportedScheme { .. } => "unsupported_scheme",
            Self::Client { .. } => "client_build",
            Self::Proxy { .. } => "proxy",
        }
    }
}

/// The Streamable HTTP transport of one channel. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct HttpTransport {
    inner: Arc<Inner>,
}

struct Inner {
    channel: String,
    url: Url,
    settings: HttpSettings,
    egress: HttpEgress,
    /// How requests for `url` leave: what a proxy's answer proves depends on it.
    route: Route,
    /// `None` after [`HttpTransport::close_connections`]: the next leg builds fresh ones.
    client: Mutex<Option<Clients>>,
    up: AtomicBool,
    /// Which admission a new connection is for (strict mode; see [`crate::downstream::watch`]).
    connects: crate::downstream::watch::ConnectSlot,
    /// The channel's configured headers (values sensitive), added by [`configured`].
    configured: HeaderMap,
    /// The problem of the last failed handshake, in words (for `doctor`).
    tls_problem: Mutex<Option<String>>,
    /// What callers' `initialize` and `tools/list` answers said (`/status`).
    observed: Observed,
    /// The server's era as configured (`mcp.channels.NAME.era`).
    era: EraSetting,
    /// What the era bridge knows of the server: its era, and the session it owns.
    verdict: Mutex<bridge::Verdict>,
    /// Held while the bridge probes the server or opens its session: one at a time.
    opening: tokio::sync::Mutex<()>,
    /// Replies awaited from handshake-era callers for a 2026-07-28 server's input requests.
    up_waiters: super::era::ask::Waiters,
    /// The `x-mcp-header` arguments of the server's tools, from handshake-era callers'
    /// `tools/list` answers (bounded: [`super::era::params::MAX_TOOLS`]).
    param_headers: super::era::params::ParamHeaders,
    /// Calls held across input rounds (2026-07-28 callers of a handshake-era server).
    holding: held::Holding,
    /// The origins OAuth discovery may read besides the server's own.
    trust: discovery::TrustGate,
}

impl HttpTransport {
    /// Builds the channel's transport for a URL the configuration has checked.
    ///
    /// The scheme comes from the [`HttpUrl`]. The proxy rules read a WHATWG `Url`, whose grammar
    /// (WHATWG) is not the configuration's, so the text is converted here, once; a URL
    /// the configuration accepts and WHATWG does not (say, host `1.2.3.999`) is
    /// [`HttpSetupError::InvalidUrl`].
    #[cfg(test)]
    pub(crate) fn new(channel: &str, url: &HttpUrl, settings: HttpSettings) -> Result<Self, HttpSetupError> {
        Self::with_egress(channel, url, settings, HttpEgress::direct())
    }

    /// [`HttpTransport::new`], leaving as `egress` says (the channel's proxy or socket).
    pub fn with_egress(
        channel: &str,
        url: &HttpUrl,
        settings: HttpSettings,
        egress: HttpEgress,
    ) -> Result<Self, HttpSetupError> {
        let parsed = Url::parse(url.as_str()).map_err(|_| HttpSetupError::InvalidUrl {
            channel: channel.to_owned(),
        })?;
        Self::build(channel, parsed, settings, egress)
    }

    /// Builds the channel's transport for a URL given as text that did not come through
    /// the configuration (the tests' own). It must be `http` or `https`, with a host.
    #[cfg(test)]
    pub(crate) fn from_text(channel: &str, url: &str, settings: HttpSettings) -> Result<Self, HttpSetupError> {
        let invalid = || HttpSetupError::InvalidUrl {
            channel: channel.to_owned(),
        };
        let url = Url::parse(url).map_err(|_| invalid())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HttpSetupError::UnsupportedScheme {
                channel: channel.to_owned(),
            });
        }
        if !url.has_host() {
            return Err(invalid());
        }
        Self::build(channel, url, settings, HttpEgress::direct())
    }

    fn build(channel: &str, url: Url, settings: HttpSettings, egress: HttpEgress) -> Result<Self, HttpSetupError> {
        let connects = crate::downstream::watch::ConnectSlot::default();
        let client = build_clients(&url, &settings, &egress, &connects).map_err(|e| match e {
            ClientError::Url => HttpSetupError::InvalidUrl {
                channel: channel.to_owned(),
            },
            ClientError::Tls(source) => HttpSetupError::Client {
                channel: channel.to_owned(),
                source,
            },
            ClientError::Proxy(source) => HttpSetupError::Proxy {
                channel: channel.to_owned(),
                source,
            },
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                channel: channel.to_owned(),
                route: egress.route(&url),
                url,
                settings,
                egress,
                client: Mutex::new(Some(client)),
                up: AtomicBool::new(true),
                connects,
                configured: HeaderMap::new(),
                tls_problem: Mutex::new(None),
                observed: Observed::default(),
                era: EraSetting::Auto,
                verdict: Mutex::new(bridge::Verdict::default()),
                opening: tokio::sync::Mutex::new(()),
                up_waiters: super::era::ask::Waiters::default(),
                param_headers: super::era::params::ParamHeaders::default(),
                holding: held::Holding::default(),
                trust: discovery::TrustGate::default(),
            }),
        })
    }

    /// The channel's configured headers, sent on its every request unless the caller
    /// sent the same name (see [`configured`]). Call it on a new transport, before it is
    /// cloned.
    pub fn with_headers(mut self, headers: HeaderMap) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("a transport gets its headers before it is cloned")
            .configured = headers;
        self
    }

    /// The server's era as configured (`auto` by default): a 2026-07-28 caller's request to
    /// a handshake-era server is bridged ([`bridge`]). Call it on a new transport, before
    /// it is cloned.
    pub(crate) fn with_era(mut self, era: EraSetting) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("a transport gets its era before it is cloned")
            .era = era;
        self
    }

    /// How the era bridge holds a 2026-07-28 caller's call while a handshake-era server
    /// asks for input (`parks` off: never, as in strict mode), and the supervisor of the
    /// tasks that read a held call on. Call it on a new transport, before it is cloned.
    pub(crate) fn with_input_required(mut self, settings: InputRequiredSettings, supervisor: Supervisor) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("a transport gets its input_required settings before it is cloned")
            .holding = held::Holding::new(settings, Some(supervisor));
        self
    }

    /// The origins OAuth discovery may read besides the server's own
    /// (`mcp.oauth_trusted_origins`, canonical). Call it on a new transport, before it is
    /// cloned.
    pub(crate) fn with_trusted_origins(mut self, origins: Vec<String>) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("a transport gets its trusted origins before it is cloned")
            .trust
            .trusted = origins;
        self
    }

    /// Sets who is told when discovery leaves a metadata URL unread for its origin (once).
    pub(crate) fn observe_untrusted_origins(&self, refused: Arc<dyn Fn() + Send + Sync>) {
        let _ = self.inner.trust.refused.set(refused);
    }

    /// Forwards one JSON-RPC message through the era bridge (a 2026-07-28 caller's request
    /// to a handshake-era server), or as it is.
    ///
    /// # Cancel safety
    /// As [`HttpTransport::call_plain`].
    pub async fn call(&self, admission: &Admission, req: &DownstreamRequest<'_>, notes: &NotifySink) -> LegResult {
        if req.payload.is_reply() {
            if let Some(ack) = self.inner.up_waiters.take(req.payload) {
                return LegResult::answered(ack);
            }
        }
        match self.plan(req) {
            super::era::Plan::PassThrough => {}
            // Boxed, as the other bridge below: the bridge's state is large and rare, and
            // inline it would make every plain call's future that large, copied whole at
            // each level that moves it (measured: about 20k instructions per command).
            plan => return Box::pin(self.bridged(admission, req, notes, plan)).await,
        }
        // A handshake-era caller: bridged when the server is of 2026-07-28 only.
        if self.inner.era != EraSetting::Legacy {
            let up = super::era::up::plan(req.payload, req.headers);
            if !matches!(up, super::era::up::UpPlan::PassThrough) {
                return Box::pin(self.legacy_caller(admission, req, notes, up)).await;
            }
        }
        let started = Instant::now();
        self.call_plain(admission, req, notes)
            .await
            .timed_from(Some(started), req.payload)
    }

    /// Forwards one JSON-RPC message and reports how the leg ended.
    ///
    /// A request (`method` and `id`) is answered by the server's JSON-RPC response for its
    /// id, from a JSON body or an SSE stream; every other message on that stream goes to
    /// `notes`, in order, before this returns. A notification or client response is
    /// answered with `notify_ack` and the server's status. Failures come back as a
    /// synthesized error shaped for the message (see [`LegResult::failed`]).
    ///
    /// # Cancel safety
    /// Not cancel-safe once sending has begun: dropping the future after the admission
    /// recheck may leave the request on the wire with no response read. A caller that
    /// drops it must treat the leg as `abandoned` (effect unknown), never as `not_sent`.
    async fn call_plain(&self, admission: &Admission, req: &DownstreamRequest<'_>, notes: &NotifySink) -> LegResult {
        self.call_until(admission, req, notes, self.leg_deadline(req.deadline))
            .await
    }

    /// [`HttpTransport::call_plain`] with every wait ending by `deadline` (a held call's
    /// whole life, which outlives any one command's bound).
    async fn call_until(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        deadline: Instant,
    ) -> LegResult {
        let expects_response = req.payload.expects_response();
        let result = self.exchange(admission, req, notes, expects_response, deadline).await;
        self.record(&result);
        match result {
            Ok(reply) => LegResult::answered(reply),
            Err(failure) => {
                let resp_type = if expects_response {
                    RespType::JsonrpcResponse
                } else {
                    RespType::NotifyAck
                };
                LegResult::failed(failure, req.payload.id(), resp_type)
            }
        }
    }

    /// Ends an MCP session: `DELETE` to the URL with the command's headers (including
    /// `Mcp-Session-Id`). Whatever status the server gives is the answer
    /// (`session_termination_response`, no payload).
    ///
    /// # Cancel safety
    /// As for [`call`](Self::call): dropping it after the send began is `abandoned`.
    pub async fn terminate_session(
        &self,
        admission: &Admission,
        headers: &WireHeaders,
        deadline: Option<Instant>,
    ) -> LegResult {
        let result = self.delete(admission, headers, deadline).await;
        self.record(&result);
        match result {
            Ok(reply) => LegResult::answered(reply),
            Err(failure) => LegResult::failed(failure, None, RespType::SessionTerminationResponse),
        }
    }

    /// Drops the pool: idle connections close now, in-flight ones when their leg ends, and
    /// the next leg connects afresh.
    /// The channel's MCP URL.
    pub(crate) fn url(&self) -> &str {
        self.inner.url.as_str()
    }

    pub(crate) fn close_connections(&self) {
        *lock(&self.inner.client) = None;
    }

    /// `/status` view: `up` turns false when a leg fails to connect (DNS, TCP, TLS) and
    /// true again when a leg reaches the server.
    pub(crate) fn status(&self) -> ChannelStatus {
        let (era_setting, era) = self.era_status();
        ChannelStatus {
            channel: self.inner.channel.clone(),
            transport: super::TransportKind::Http,
            up: self.inner.up.load(Ordering::Relaxed),
            generation: 0,
            session: None,
            server: None,
            protocol_version: None,
            tools: None,
            started_at: None,
            era_setting: Some(era_setting),
            era: Some(era),
        }
        .with_seen(self.inner.observed.seen())
    }

    /// What the channel's callers saw of its server (`initialize`, `tools/list`).
    pub(super) fn observed(&self) -> &Observed {
        &self.inner.observed
    }

    /// The problem of the last failed TLS handshake of this channel, in words.
    pub fn last_tls_problem(&self) -> Option<String> {
        lock(&self.inner.tls_problem).clone()
    }

    fn record(&self, result: &Result<Reply, LegFailure>) {
        let up = match result {
            Ok(_) => Some(true),
            Err(failure) => reached_server(failure),
        };
        if let Some(up) = up {
            self.inner.up.store(up, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
impl HttpTransport {
    /// How the channel's requests leave: `"direct"`, `"tunnel"` or `"forward"`.
    pub(super) fn route_label(&self) -> &'static str {
        self.inner.route.as_str()
    }
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry credentials or private hostnames: never printed.
        f.debug_struct("HttpTransport")
            .field("channel", &self.inner.channel)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

mod bridge;
mod classify;
mod client;
mod configured;
mod discovery;
mod exchange;
mod headers;
mod held;
mod listen;
pub(crate) use self::held::{EraEvent, EraObserver};
mod request;
mod send;
mod session;
mod standalone;
mod stream;
mod up;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proxy_tests;

#[cfg(test)]
mod wire_tests;
