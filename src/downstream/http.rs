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
//!   reached directly, its POST, resume `GET` and session `DELETE` drive hyper's client
//!   (`egress::direct`, set up as the channel's reqwest client), and a failure of
//!   either client is classified by the same [`SendFacts`] reading;
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

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode, Url};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use tokio::time::{timeout_at, Instant};

use super::error_chain::SendFacts;
use super::identity::Observed;
use super::sse::SseParser;
use super::{ChannelStatus, DownstreamRequest, LegFailure, LegResult, Notification, NotifySink, Reply};
use crate::config::{HttpUrl, ProxySetting};
use crate::egress::direct::{Answer, Direct, NackRetries, SendError, TimedConnect};
use crate::egress::proxy::{EgressError, Route};
use crate::protocol::{
    filter_resp_headers, header_value, RespType, WireHeaders, LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID,
};
use crate::strict::Admission;

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
    /// `egress::tls::client_config`); `None`: reqwest's own (platform roots, no client
    /// certificate; the direct client builds the same, `egress::direct::platform_config`).
    /// Neither client follows a redirect, so its client certificate is only ever offered
    /// to this channel's origin.
    pub tls: Option<rustls::ClientConfig>,
}

impl HttpEgress {
    /// Straight to the URL's host: no proxy, no socket.
    pub fn direct() -> Self {
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
    #[error("the MCP server URL must use http or https")]
    UnsupportedScheme { channel: String },
    #[error("the HTTP client could not be built")]
    Client {
        channel: String,
        #[source]
        source: reqwest::Error,
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
    pub fn kind(&self) -> &'static str {
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
    https: bool,
    settings: HttpSettings,
    egress: HttpEgress,
    /// How requests for `url` leave: what a proxy's answer proves depends on it.
    route: Route,
    /// `None` after [`HttpTransport::close_connections`]: the next leg builds fresh ones.
    client: Mutex<Option<Clients>>,
    up: AtomicBool,
    /// Which admission a new connection is for (strict mode; see [`watch`]).
    connects: watch::ConnectSlot,
    /// The channel's configured headers (values sensitive), added by [`configured`].
    configured: HeaderMap,
    /// The problem of the last failed handshake, in words (for `doctor`).
    tls_problem: Mutex<Option<String>>,
    /// What callers' `initialize` and `tools/list` answers said (`/status`).
    observed: Observed,
}

/// A channel's HTTP clients: `reqwest`, and hyper's client driven directly when the
/// server is reached directly. Clones share the pools.
#[derive(Clone)]
struct Clients {
    /// Every request when a proxy or a unix socket applies; discovery always.
    reqwest: reqwest::Client,
    /// The POST, the resume `GET` and the session `DELETE` when no proxy and no socket
    /// applies (`egress::direct`), with the strict-mode connection watch as its layer.
    direct: Option<Arc<DirectPath>>,
}

/// The direct client of a channel, its connector watched as reqwest's is, and the URL
/// as hyper's `Uri`, parsed once.
struct DirectPath {
    client: Direct<watch::WatchedConnector<TimedConnect>>,
    uri: http::Uri,
}

/// One request of a leg, ready for the client it goes to.
enum Outgoing {
    Direct {
        path: Arc<DirectPath>,
        method: Method,
        headers: HeaderMap,
        body: Bytes,
    },
    Reqwest {
        client: reqwest::Client,
        request: reqwest::Request,
    },
}

/// `Accept` sent with a POST when the command's headers carry none.
const DEFAULT_ACCEPT: &str = "application/json, text/event-stream";
/// The request whose response is a subscription stream (2026-07-28).
const LONG_LIVED_METHOD: &str = "subscriptions/listen";
/// The MCP revision from which servers cannot resume a stream (and must not be asked to).
const NO_RESUME_FROM_VERSION: &str = "2026-07-28";
/// Resume attempts per leg, at most.
const MAX_RESUMES: u32 = 5;
/// A resumed stream that stays silent this long is closed and resumed again: servers
/// that replay only what they stored when the `GET` arrived (server-everything does)
/// send later events to no stream, so a fresh `GET` is the only way to fetch them.
const RESUME_IDLE: Duration = Duration::from_secs(1);
/// Wait before a resume when the server gave no `retry:` hint (times the attempt number).
const RESUME_STEP: Duration = Duration::from_millis(250);
/// Cap on the server's `retry:` hint before a resume.
const MAX_RESUME_WAIT: Duration = Duration::from_secs(1);
/// Pooled connections idle longer than this are closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Request headers never forwarded: hop-by-hop headers and the ones this transport owns
/// (framing, body type, and content codings it does not decode).
const NOT_FORWARDED: [&str; 10] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "accept-encoding",
];

/// Command headers carried on a resume `GET`, lower-cased: they are compared with
/// `HeaderMap` names, which are always lower case.
const RESUME_HEADERS: [&str; 3] = ["mcp-session-id", "mcp-protocol-version", "authorization"];

/// How the response body announced itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyKind {
    EventStream,
    Json,
    Other,
}

/// Why reading a body stopped short.
enum BodyError {
    TooLarge,
    Timeout,
    Broken,
}

/// Why reading an SSE stream ended without the sentinel.
enum StreamEnd {
    /// EOF or a broken body: a resume may still recover the response.
    Closed,
    /// Final for this leg.
    Failed(LegFailure),
}

/// What a JSON-RPC message on a response means for this request.
enum Message {
    /// The response for the request's id: the leg's answer.
    Terminal(Box<RawValue>),
    /// Any other JSON-RPC message: forwarded as a notification.
    Other(Box<RawValue>),
    /// Not a JSON object: skipped.
    Noise,
}

/// Whether a field is present at all (even as `null`).
#[derive(Default)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(Self(true))
    }
}

#[derive(Deserialize)]
struct MessageProbe<'a> {
    #[serde(default)]
    method: Present,
    #[serde(default)]
    result: Present,
    #[serde(default)]
    error: Present,
    #[serde(default)]
    jsonrpc: Present,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
}

/// Response headers as posted back (`resp_headers`).
type RespHeaders = std::collections::BTreeMap<String, Vec<String>>;

/// What reading an event stream (and resuming it) needs from its leg.
struct StreamLeg<'a> {
    admission: &'a Admission,
    command_headers: &'a WireHeaders,
    expected: Expected,
    notes: &'a NotifySink,
    /// False once the notification receiver is gone: later messages are dropped.
    sink_open: bool,
    deadline: Instant,
    /// A request whose response stream the server keeps open by design
    /// (`subscriptions/listen`): its end is normal, never resumed, never ambiguous.
    long_lived: bool,
}

/// What the leg is waiting for: the request's id, parsed once for comparison.
struct Expected {
    id: Option<serde_json::Value>,
}

impl HttpTransport {
    /// Builds the channel's transport for a URL the configuration has checked.
    ///
    /// The scheme comes from the [`HttpUrl`]. reqwest needs its own `Url`, whose grammar
    /// (WHATWG) is not the configuration's, so the text is converted here, once; a URL
    /// the configuration accepts and WHATWG does not (say, host `1.2.3.999`) is
    /// [`HttpSetupError::InvalidUrl`].
    pub fn new(channel: &str, url: &HttpUrl, settings: HttpSettings) -> Result<Self, HttpSetupError> {
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
        Self::build(channel, parsed, url.is_https(), settings, egress)
    }

    /// Builds the channel's transport for a URL given as text that did not come through
    /// the configuration (an embedder's own). It must be `http` or `https`, with a host.
    pub fn from_text(channel: &str, url: &str, settings: HttpSettings) -> Result<Self, HttpSetupError> {
        let invalid = || HttpSetupError::InvalidUrl {
            channel: channel.to_owned(),
        };
        let url = Url::parse(url).map_err(|_| invalid())?;
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => {
                return Err(HttpSetupError::UnsupportedScheme {
                    channel: channel.to_owned(),
                })
            }
        };
        if !url.has_host() {
            return Err(invalid());
        }
        Self::build(channel, url, https, settings, HttpEgress::direct())
    }

    fn build(
        channel: &str,
        url: Url,
        https: bool,
        settings: HttpSettings,
        egress: HttpEgress,
    ) -> Result<Self, HttpSetupError> {
        let connects = watch::ConnectSlot::default();
        let client = build_clients(&url, &settings, &egress, &connects).map_err(|e| match e {
            ClientError::Http(source) => HttpSetupError::Client {
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
                https,
                settings,
                egress,
                client: Mutex::new(Some(client)),
                up: AtomicBool::new(true),
                connects,
                configured: HeaderMap::new(),
                tls_problem: Mutex::new(None),
                observed: Observed::default(),
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
    pub async fn call(&self, admission: &Admission, req: &DownstreamRequest<'_>, notes: &NotifySink) -> LegResult {
        let expects_response = req.payload.expects_response();
        let result = self.exchange(admission, req, notes, expects_response).await;
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
    pub fn close_connections(&self) {
        *lock(&self.inner.client) = None;
    }

    /// `/status` view: `up` turns false when a leg fails to connect (DNS, TCP, TLS) and
    /// true again when a leg reaches the server.
    pub fn status(&self) -> ChannelStatus {
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
        }
        .with_seen(self.inner.observed.seen())
    }

    /// What the channel's callers saw of its server (`initialize`, `tools/list`).
    pub(super) fn observed(&self) -> &Observed {
        &self.inner.observed
    }

    /// The POST of one message, then its answer by body kind.
    async fn exchange(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        expects_response: bool,
    ) -> Result<Reply, LegFailure> {
        let deadline = self.leg_deadline(req.deadline);
        let clients = self.clients()?;
        let request = self.post_request(&clients, req)?;
        let resp = self.send(admission, request, deadline).await?;
        self.forwarded_nothing(admission, &resp)?;

        let status = resp.status();
        let resp_headers = response_headers(resp.headers());
        let max = self.inner.settings.max_body_bytes;
        if !status.is_success() {
            let expected = expects_response.then(|| Expected::of(req));
            return refusal(resp, status, resp_headers, expected.as_ref(), max, deadline).await;
        }
        if !expects_response {
            return Ok(Reply {
                resp_json: None,
                resp_headers,
                resp_code: status.as_u16(),
                resp_type: RespType::NotifyAck,
            });
        }
        if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
            return Err(LegFailure::NonProtocolResponse);
        }
        let expected = Expected::of(req);
        match body_kind(resp.headers()) {
            BodyKind::Json => json_reply(resp, resp_headers, &expected, max, deadline).await,
            BodyKind::EventStream => {
                let mut leg = StreamLeg {
                    admission,
                    command_headers: req.headers,
                    expected,
                    notes,
                    sink_open: true,
                    deadline,
                    long_lived: req.payload.method() == Some(LONG_LIVED_METHOD),
                };
                self.read_event_stream(&mut leg, resp, resp_headers).await
            }
            BodyKind::Other => Err(LegFailure::NonProtocolResponse),
        }
    }

    /// The POST carrying the message: the command's headers, the JSON content type, and
    /// the default `Accept` when the command gives none.
    fn post_request(&self, clients: &Clients, req: &DownstreamRequest<'_>) -> Result<Outgoing, LegFailure> {
        let mut headers = forward_headers(req.headers);
        configured::add(&mut headers, &self.inner.configured, req.headers);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if !headers.contains_key(ACCEPT) {
            headers.insert(ACCEPT, HeaderValue::from_static(DEFAULT_ACCEPT));
        }
        let body = Bytes::copy_from_slice(req.payload.raw().get().as_bytes());
        self.outgoing(clients, Method::POST, headers, Some(body))
            .ok_or(LegFailure::InternalBeforeSend)
    }

    /// A request for the client that carries it: the direct one when the channel has
    /// it, reqwest otherwise (built as before; `None` when reqwest cannot build it).
    fn outgoing(&self, clients: &Clients, method: Method, headers: HeaderMap, body: Option<Bytes>) -> Option<Outgoing> {
        if let Some(path) = &clients.direct {
            return Some(Outgoing::Direct {
                path: path.clone(),
                method,
                headers,
                body: body.unwrap_or_default(),
            });
        }
        let builder = clients.reqwest.request(method, self.inner.url.clone()).headers(headers);
        let builder = match body {
            Some(body) => builder.body(body),
            None => builder,
        };
        let request = builder.build().ok()?;
        Some(Outgoing::Reqwest {
            client: clients.reqwest.clone(),
            request,
        })
    }

    /// Regime (A): reads events until the sentinel, resuming a cut stream when allowed.
    async fn read_event_stream(
        &self,
        leg: &mut StreamLeg<'_>,
        mut resp: Answer,
        mut resp_headers: RespHeaders,
    ) -> Result<Reply, LegFailure> {
        let session_id = header_value(leg.command_headers, MCP_SESSION_ID)
            .map(str::to_owned)
            .or_else(|| {
                resp.headers()
                    .get(MCP_SESSION_ID)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
        let request_version = header_value(leg.command_headers, MCP_PROTOCOL_VERSION);
        let response_version = resp.headers().get(MCP_PROTOCOL_VERSION).and_then(|v| v.to_str().ok());
        let resumable_version = [request_version, response_version]
            .into_iter()
            .flatten()
            .all(|v| v.trim() < NO_RESUME_FROM_VERSION);
        let mut parser = SseParser::new();
        let mut status = resp.status();
        let mut resumes = 0;
        loop {
            let idle = (resumes > 0).then_some(RESUME_IDLE);
            match self
                .drain_stream(leg, &mut resp, &mut parser, &resp_headers, idle)
                .await
            {
                Ok(raw) => {
                    // If the stream's end is already buffered, reading it lets the
                    // connection go back to the pool; never wait for it.
                    let _ = resp.chunk().now_or_never();
                    return Ok(Reply {
                        resp_json: Some(raw),
                        resp_headers,
                        resp_code: status.as_u16(),
                        resp_type: RespType::JsonrpcResponse,
                    });
                }
                // A subscription stream that ends, or reaches its bound, ended by design:
                // its notifications went out as they came; no effect is in doubt.
                Err(StreamEnd::Failed(LegFailure::TimeoutAfterWrite) | StreamEnd::Closed) if leg.long_lived => {
                    return Err(LegFailure::SubscriptionEnded)
                }
                Err(StreamEnd::Failed(failure)) => return Err(failure),
                Err(StreamEnd::Closed) => {}
            }
            drop(resp);
            let resumable = resumes < MAX_RESUMES
                && !parser.last_event_id().is_empty()
                && session_id.is_some()
                && resumable_version;
            if !resumable {
                return Err(LegFailure::StreamClosedBeforeResponse);
            }
            resumes += 1;
            let wait = parser
                .retry_ms()
                .map_or(RESUME_STEP * resumes, Duration::from_millis)
                .min(MAX_RESUME_WAIT);
            if Instant::now() + wait >= leg.deadline {
                return Err(LegFailure::StreamClosedBeforeResponse);
            }
            tokio::time::sleep(wait).await;
            tracing::debug!(channel = %self.inner.channel, attempt = resumes, "resuming a cut response stream");
            resp = self.resume(leg, parser.last_event_id(), session_id.as_deref()).await?;
            status = resp.status();
            resp_headers = response_headers(resp.headers());
            parser = parser.resumed();
        }
    }

    /// Reads one response stream until the sentinel (returned), its end, or a final failure.
    async fn drain_stream(
        &self,
        leg: &mut StreamLeg<'_>,
        resp: &mut Answer,
        parser: &mut SseParser,
        resp_headers: &RespHeaders,
        idle: Option<Duration>,
    ) -> Result<Box<RawValue>, StreamEnd> {
        let mut events = Vec::new();
        loop {
            let quiet_until = idle.map_or(leg.deadline, |i| leg.deadline.min(Instant::now() + i));
            let chunk = match timeout_at(quiet_until, resp.chunk()).await {
                Err(_) if quiet_until < leg.deadline => return Err(StreamEnd::Closed),
                Err(_) => return Err(StreamEnd::Failed(LegFailure::TimeoutAfterWrite)),
                Ok(Err(_)) | Ok(Ok(None)) => return Err(StreamEnd::Closed),
                Ok(Ok(Some(chunk))) => chunk,
            };
            parser.feed(&chunk, &mut events);
            // The bound holds for an event still being assembled and for one that arrived
            // whole in a single chunk alike.
            let max = self.inner.settings.max_body_bytes;
            if parser.buffered() > max || events.iter().any(|e| e.data.len() > max) {
                return Err(StreamEnd::Failed(LegFailure::BodyTooLarge));
            }
            for event in events.drain(..) {
                let Some(raw) = json_value(event.data) else {
                    continue; // not JSON: protocol noise
                };
                match leg.expected.classify_event(raw) {
                    Message::Terminal(raw) => return Ok(raw),
                    Message::Other(raw) if leg.sink_open => {
                        let note = Notification {
                            resp_json: raw,
                            resp_headers: resp_headers.clone(),
                        };
                        match timeout_at(leg.deadline, leg.notes.send(note)).await {
                            Err(_) => return Err(StreamEnd::Failed(LegFailure::TimeoutAfterWrite)),
                            // The receiver is gone: keep reading for the terminal response.
                            Ok(Err(_)) => leg.sink_open = false,
                            Ok(Ok(())) => {}
                        }
                    }
                    Message::Other(_) | Message::Noise => {}
                }
            }
        }
    }

    /// One resume attempt: `GET` with `Last-Event-ID`. Anything but a 2xx event stream
    /// leaves the leg abandoned.
    async fn resume(
        &self,
        leg: &StreamLeg<'_>,
        last_event_id: &str,
        session_id: Option<&str>,
    ) -> Result<Answer, LegFailure> {
        let clients = self.clients().map_err(|_| LegFailure::StreamClosedBeforeResponse)?;
        let mut headers = HeaderMap::new();
        for (name, values) in leg.command_headers {
            let lower = name.to_ascii_lowercase();
            if !RESUME_HEADERS.contains(&lower.as_str()) {
                continue;
            }
            let Ok(name) = HeaderName::from_bytes(lower.as_bytes()) else {
                continue;
            };
            for value in values {
                if let Ok(value) = HeaderValue::from_str(value) {
                    headers.append(name.clone(), value);
                }
            }
        }
        if !headers.contains_key(MCP_SESSION_ID) {
            if let Some(value) = session_id.and_then(|s| HeaderValue::from_str(s).ok()) {
                headers.insert(MCP_SESSION_ID, value);
            }
        }
        configured::add(&mut headers, &self.inner.configured, leg.command_headers);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let Ok(last_id) = HeaderValue::from_str(last_event_id) else {
            return Err(LegFailure::StreamClosedBeforeResponse);
        };
        headers.insert(LAST_EVENT_ID, last_id);
        let request = self
            .outgoing(&clients, Method::GET, headers, None)
            .ok_or(LegFailure::StreamClosedBeforeResponse)?;
        let resp = match self.send(leg.admission, request, leg.deadline).await {
            Ok(resp) => resp,
            Err(LegFailure::TimeoutAfterWrite) => return Err(LegFailure::TimeoutAfterWrite),
            // The POST was delivered: whatever stops the resume leaves its effect unknown.
            Err(_) => return Err(LegFailure::StreamClosedBeforeResponse),
        };
        if resp.status().is_success() && body_kind(resp.headers()) == BodyKind::EventStream {
            Ok(resp)
        } else {
            Err(LegFailure::StreamClosedBeforeResponse)
        }
    }

    async fn delete(
        &self,
        admission: &Admission,
        headers: &WireHeaders,
        deadline: Option<Instant>,
    ) -> Result<Reply, LegFailure> {
        let deadline = self.leg_deadline(deadline);
        let clients = self.clients()?;
        let mut request_headers = forward_headers(headers);
        configured::add(&mut request_headers, &self.inner.configured, headers);
        let request = self
            .outgoing(&clients, Method::DELETE, request_headers, None)
            .ok_or(LegFailure::InternalBeforeSend)?;
        let mut resp = self.send(admission, request, deadline).await?;
        self.forwarded_nothing(admission, &resp)?;
        let status = resp.status().as_u16();
        let resp_headers = response_headers(resp.headers());
        // What of the body is already here is read, so the connection can go back to
        // the pool; never waited for.
        while let Some(Ok(Some(_))) = resp.chunk().now_or_never() {}
        Ok(Reply {
            resp_json: None,
            resp_headers,
            resp_code: status,
            resp_type: RespType::SessionTerminationResponse,
        })
    }

    /// Sends one request after the last checks: deadline not passed, admission still good.
    /// Resolves when the response headers arrive.
    async fn send(&self, admission: &Admission, request: Outgoing, deadline: Instant) -> Result<Answer, LegFailure> {
        if Instant::now() >= deadline {
            return Err(LegFailure::DeadlineBeforeSend);
        }
        let execute = timeout_at(deadline, self.execute(request));
        let result = if admission.tracks_connects() {
            // One admission at a time: a connection made now is for this request. The
            // connector marks it sent once connected (or refuses: nothing is written). A
            // pooled connection may write it during the first poll with no word back: it
            // counts as sent from the hand-over on, decided with the fence's checks.
            let wire = admission.wire();
            wire.hand_over().map_err(|_| LegFailure::NotAdmitted)?;
            let _watching = self.inner.connects.watch(wire.clone());
            let mut execute = std::pin::pin!(execute);
            // The first poll either hands the request to a pooled connection or starts
            // a connect (which the connector reports); no `.await` before it.
            let first = std::future::poll_fn(|cx| Poll::Ready(execute.as_mut().poll(cx))).await;
            wire.handed_over();
            match first {
                Poll::Ready(r) => r,
                Poll::Pending => execute.await,
            }
        } else {
            // From here on bytes may reach the server.
            admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
            execute.await
        };
        match result {
            // We cannot tell whether the connection was up and the request written.
            Err(_) => Err(if admission.is_sent() {
                LegFailure::TimeoutAfterWrite
            } else {
                LegFailure::DeadlineBeforeSend
            }),
            // A connection the fence refused to use: nothing was written.
            Ok(Err(_)) if !admission.is_sent() && admission.recheck().is_err() => Err(LegFailure::NotAdmitted),
            Ok(Err(error)) => {
                let failure = classify_send_error(SendFacts::of_send(&error), self.inner.https);
                if failure == LegFailure::Tls {
                    self.warn_tls(&error);
                }
                Err(failure)
            }
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// A forwarding proxy's `407` to the leg's first request: the proxy wants
    /// credentials and forwarded nothing, so nothing reached the MCP server, and the
    /// admission says so ([`Admission::not_forwarded`]). Any other answer through a
    /// forwarding proxy (its `502` and `504` included) is classified as the server's.
    fn forwarded_nothing(&self, admission: &Admission, resp: &Answer) -> Result<(), LegFailure> {
        if self.inner.route == Route::Forward && resp.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
            admission.not_forwarded();
            return Err(LegFailure::ProxyAuthRequired);
        }
        Ok(())
    }

    /// The problem of the last failed TLS handshake of this channel, in words.
    pub fn last_tls_problem(&self) -> Option<String> {
        lock(&self.inner.tls_problem).clone()
    }

    /// Names the problem of a failed handshake (the leg's own line says `tls`, not sent).
    fn warn_tls(&self, error: &SendError) {
        let problem =
            crate::egress::tls::handshake_problem(error.chain()).unwrap_or_else(|| "TLS handshake failed".into());
        *lock(&self.inner.tls_problem) = Some(problem.clone());
        tracing::warn!(
            channel = %self.inner.channel,
            tls_problem = %problem,
            "TLS handshake with the MCP server failed: {problem} (mcp.tls / mcp.channels.{}.tls)",
            self.inner.channel
        );
    }

    fn leg_deadline(&self, command_deadline: Option<Instant>) -> Instant {
        let own = Instant::now() + self.inner.settings.request_timeout;
        command_deadline.map_or(own, |d| d.min(own))
    }

    /// The channel's reqwest client (discovery's).
    fn client(&self) -> Result<reqwest::Client, LegFailure> {
        self.clients().map(|c| c.reqwest)
    }

    fn clients(&self) -> Result<Clients, LegFailure> {
        let mut slot = lock(&self.inner.client);
        if let Some(clients) = slot.as_ref() {
            return Ok(clients.clone());
        }
        let clients = build_clients(
            &self.inner.url,
            &self.inner.settings,
            &self.inner.egress,
            &self.inner.connects,
        )
        .map_err(|_| LegFailure::InternalBeforeSend)?;
        *slot = Some(clients.clone());
        Ok(clients)
    }

    /// The request on its client, up to its response headers.
    ///
    /// # Cancel safety
    /// Not cancel-safe once polled: the request may be on the wire when it is dropped.
    async fn execute(&self, request: Outgoing) -> Result<Answer, SendError> {
        match request {
            Outgoing::Direct {
                path,
                method,
                headers,
                body,
            } => path.client.send(method, &path.uri, headers, body).await,
            Outgoing::Reqwest { client, request } => client
                .execute(request)
                .await
                .map(Answer::Reqwest)
                .map_err(SendError::Reqwest),
        }
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
    /// `"direct"` or `"reqwest"`: which client the channel's POST takes.
    pub(super) fn client_label(&self) -> &'static str {
        match self.clients().expect("the clients build").direct {
            Some(_) => "direct",
            None => "reqwest",
        }
    }

    /// The same channel with every request on reqwest: the reference the direct path's
    /// tests compare against (until [`close_connections`](Self::close_connections)).
    pub(super) fn on_reqwest(self) -> Self {
        let clients = self.clients().expect("the clients build");
        *lock(&self.inner.client) = Some(Clients {
            direct: None,
            ..clients
        });
        self
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

impl Expected {
    fn of(req: &DownstreamRequest<'_>) -> Self {
        Self {
            id: req.payload.id().and_then(|raw| serde_json::from_str(raw.get()).ok()),
        }
    }

    fn matches(&self, id: Option<&RawValue>) -> bool {
        match (
            &self.id,
            id.and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok()),
        ) {
            (Some(want), Some(got)) => *want == got,
            _ => false,
        }
    }

    /// An SSE event: the response for our id ends the leg; any other message is forwarded.
    fn classify_event(&self, raw: Box<RawValue>) -> Message {
        match probe(&raw) {
            None => Message::Noise,
            Some(p) if is_response(&p) && self.matches(p.id) => Message::Terminal(raw),
            Some(_) => Message::Other(raw),
        }
    }

    /// A whole JSON body: it answers this request, so an error without an id (the server
    /// could not read it) is also the answer.
    fn classify_body(&self, raw: Box<RawValue>) -> Message {
        match probe(&raw) {
            None => Message::Noise,
            Some(p) if is_response(&p) && (self.matches(p.id) || (p.error.0 && p.id.is_none())) => {
                Message::Terminal(raw)
            }
            Some(_) => Message::Other(raw),
        }
    }
}

/// Which failures say something about reachability: connect failures mark the channel
/// down, anything that reached the server marks it up, refusals before sending say nothing.
fn reached_server(failure: &LegFailure) -> Option<bool> {
    match failure {
        LegFailure::Dns
        | LegFailure::ConnectRefused
        | LegFailure::ConnectFailed
        | LegFailure::Tls
        | LegFailure::ProxyRefused
        | LegFailure::ProxyAuthRequired => Some(false),
        LegFailure::NotAdmitted
        | LegFailure::DeadlineBeforeSend
        | LegFailure::InternalBeforeSend
        | LegFailure::LocalExhaustion
        | LegFailure::ChildNotRunning
        | LegFailure::SessionNotOpen
        | LegFailure::InitializeAbandoned
        | LegFailure::TimeoutAfterWrite
        | LegFailure::CancelledAfterWrite
        | LegFailure::InternalAfterWrite => None,
        LegFailure::SubscriptionEnded => Some(true),
        LegFailure::HttpStatus(_)
        | LegFailure::ConnectionLost
        | LegFailure::StreamClosedBeforeResponse
        | LegFailure::TruncatedJson
        | LegFailure::NonProtocolResponse
        | LegFailure::BodyTooLarge
        | LegFailure::ChildExited
        | LegFailure::ChildPipeBroken => Some(true),
    }
}

/// Maps a send error (before response headers) to a failure. Errors while connecting
/// (DNS, TCP, TLS) happen before any request byte is written: `not_sent`; so does a
/// handshake the server refused with an alert after the client's side of it finished. Everything else
/// may follow the write: `abandoned`. Exhaustion of the gateway's own descriptors or
/// socket memory while resolving or connecting is named first, never as the server's
/// failure (a resolver out of descriptors reports a DNS error).
fn classify_send_error(facts: SendFacts, https: bool) -> LegFailure {
    if facts.exhausted && (facts.connect || facts.dns) {
        return LegFailure::LocalExhaustion;
    }
    if facts.dns {
        return LegFailure::Dns;
    }
    // A handshake the server refused, even when its alert arrived after the request was
    // written (TLS 1.3 client authentication): the server processed nothing.
    if facts.tls_refused {
        return LegFailure::Tls;
    }
    if !facts.connect {
        return if facts.timeout {
            LegFailure::TimeoutAfterWrite
        } else {
            LegFailure::ConnectionLost
        };
    }
    // A proxy that would not open the tunnel: nothing of the request was written.
    if facts.proxy_auth {
        return LegFailure::ProxyAuthRequired;
    }
    if facts.proxy_refused {
        return LegFailure::ProxyRefused;
    }
    if facts.refused {
        return LegFailure::ConnectRefused;
    }
    // The TCP stage names itself; a connect-phase failure past it on an https URL is the
    // TLS handshake (the connect timeout spans both, and stays a connect failure).
    if facts.timeout || facts.tcp_stage || !https {
        LegFailure::ConnectFailed
    } else {
        LegFailure::Tls
    }
}

/// Regime (B): a whole JSON body, bounded in size and time, that must be the response
/// for this request.
async fn json_reply(
    resp: Answer,
    resp_headers: RespHeaders,
    expected: &Expected,
    max: usize,
    deadline: Instant,
) -> Result<Reply, LegFailure> {
    let status = resp.status();
    let body = read_body(resp, max, deadline).await.map_err(|e| match e {
        BodyError::TooLarge => LegFailure::BodyTooLarge,
        BodyError::Timeout => LegFailure::TimeoutAfterWrite,
        BodyError::Broken => LegFailure::TruncatedJson,
    })?;
    let raw = String::from_utf8(body)
        .ok()
        .and_then(json_value)
        .ok_or(LegFailure::TruncatedJson)?;
    match expected.classify_body(raw) {
        Message::Terminal(raw) => Ok(Reply {
            resp_json: Some(raw),
            resp_headers,
            resp_code: status.as_u16(),
            resp_type: RespType::JsonrpcResponse,
        }),
        Message::Other(_) | Message::Noise => Err(LegFailure::NonProtocolResponse),
    }
}

/// A non-2xx answer. A JSON-RPC error body is the server's own answer and is forwarded
/// exactly, with the server's status; anything else becomes [`LegFailure::HttpStatus`]
/// (its body never reaches the caller).
async fn refusal(
    resp: Answer,
    status: StatusCode,
    resp_headers: RespHeaders,
    expected: Option<&Expected>,
    max: usize,
    deadline: Instant,
) -> Result<Reply, LegFailure> {
    let failure = LegFailure::HttpStatus(status.as_u16());
    let Some(expected) = expected else {
        return Err(failure);
    };
    let Ok(body) = read_body(resp, max, deadline).await else {
        return Err(failure);
    };
    match String::from_utf8(body).ok().and_then(json_value) {
        // The same rule as a 2xx body: an error for this request's id (or for no id).
        Some(raw)
            if probe(&raw).is_some_and(|p| {
                p.error.0 && p.jsonrpc.0 && !p.method.0 && (p.id.is_none() || expected.matches(p.id))
            }) =>
        {
            Ok(Reply {
                resp_json: Some(raw),
                resp_headers,
                resp_code: status.as_u16(),
                resp_type: RespType::JsonrpcResponse,
            })
        }
        _ => Err(failure),
    }
}

/// Why a channel's client could not be built.
enum ClientError {
    Http(reqwest::Error),
    Proxy(EgressError),
}

/// The channel's clients: reqwest always (discovery uses it, and every request when a
/// proxy or a socket applies), and the direct client when the URL's server is reached
/// directly (see [`direct_path`]).
fn build_clients(
    url: &Url,
    settings: &HttpSettings,
    egress: &HttpEgress,
    connects: &watch::ConnectSlot,
) -> Result<Clients, ClientError> {
    let reqwest = build_client(url, settings, egress, connects)?;
    Ok(Clients {
        reqwest,
        direct: direct_path(url, settings, egress, connects).map(Arc::new),
    })
}

/// hyper's client driven directly, set up as [`build_client`] sets up reqwest: the
/// channel's TLS configuration (or reqwest's own platform one), its connect timeout over
/// TCP and TLS, the pool's idle timeout, the strict-mode watch as the connector layer,
/// no retries of any kind (reqwest's `retry::never()`), no redirects (hyper follows
/// none). `None` when a proxy or a unix socket applies, or the URL is not a `Uri` hyper
/// accepts: those requests stay on reqwest.
fn direct_path(
    url: &Url,
    settings: &HttpSettings,
    egress: &HttpEgress,
    connects: &watch::ConnectSlot,
) -> Option<DirectPath> {
    if egress.socket.is_some() || egress.route(url) != Route::Direct {
        return None;
    }
    // reqwest's own conversion (`try_uri`): a URL it could not send is left to it.
    let uri = url.as_str().parse::<http::Uri>().ok()?;
    let tls = match &egress.tls {
        Some(tls) => tls.clone(),
        None => crate::egress::direct::platform_config().ok()?,
    };
    let client = Direct::layered(
        tls,
        settings.connect_timeout,
        POOL_IDLE_TIMEOUT,
        NackRetries::Never,
        watch::WatchConnects(connects.clone()),
    );
    Some(DirectPath { client, uri })
}

fn build_client(
    url: &Url,
    settings: &HttpSettings,
    egress: &HttpEgress,
    connects: &watch::ConnectSlot,
) -> Result<reqwest::Client, ClientError> {
    let builder = reqwest::Client::builder();
    let builder = match &egress.tls {
        Some(tls) => builder.tls_backend_preconfigured(tls.clone()),
        None => builder,
    };
    let builder = builder
        .connector_layer(watch::WatchConnects(connects.clone()))
        .connect_timeout(settings.connect_timeout)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        // Even "safe" protocol-level retries could resend a request the server processed.
        .retry(reqwest::retry::never())
        .referer(false);
    let mut builder = crate::egress::proxy::apply(builder, &egress.proxy, url).map_err(ClientError::Proxy)?;
    if let Some(path) = &egress.socket {
        // The URL keeps naming the server (its host is the `Host` header); the bytes go
        // to the socket, never through a proxy.
        builder = builder.no_proxy().unix_socket(path.clone());
    }
    builder.build().map_err(ClientError::Http)
}

/// The command's connector headers, multi-valued and in order, minus hop-by-hop headers
/// (including any named by `Connection`) and those this transport sets itself.
/// Unrepresentable names or values are skipped.
fn forward_headers(wire: &WireHeaders) -> HeaderMap {
    // Headers named by `Connection` are hop-by-hop too (RFC 9110, section 7.6.1).
    let connection_named: Vec<String> = wire
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, values)| values.iter().flat_map(|v| v.split(',')))
        .map(|token| token.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::new();
    for (name, values) in wire {
        let lower = name.to_ascii_lowercase();
        if NOT_FORWARDED.contains(&lower.as_str()) || lower.starts_with("proxy-") || connection_named.contains(&lower) {
            continue;
        }
        let Ok(header) = HeaderName::from_bytes(lower.as_bytes()) else {
            // The name itself is not echoed: it is not a valid header name, so it could be anything.
            tracing::debug!("skipping a connector header with an invalid name");
            continue;
        };
        for value in values {
            match HeaderValue::from_str(value) {
                Ok(value) => {
                    out.append(header.clone(), value);
                }
                Err(_) => {
                    tracing::debug!(header = %lower, "skipping a connector header value that is not valid in HTTP")
                }
            }
        }
    }
    out
}

/// The first value of a command header, by case-insensitive name.
fn response_headers(headers: &HeaderMap) -> RespHeaders {
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
        .collect();
    filter_resp_headers(pairs.iter().copied())
}

fn body_kind(headers: &HeaderMap) -> BodyKind {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return BodyKind::Other;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("text/event-stream") {
        BodyKind::EventStream
    } else if essence.eq_ignore_ascii_case("application/json") {
        BodyKind::Json
    } else {
        BodyKind::Other
    }
}

/// Reads a whole body, bounded in size and time.
async fn read_body(mut resp: Answer, max: usize, deadline: Instant) -> Result<Vec<u8>, BodyError> {
    if resp.content_length().is_some_and(|len| len > max as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    loop {
        match timeout_at(deadline, resp.chunk()).await {
            Err(_) => return Err(BodyError::Timeout),
            Ok(Err(_)) => return Err(BodyError::Broken),
            Ok(Ok(None)) => return Ok(body),
            Ok(Ok(Some(chunk))) => {
                if body.len() + chunk.len() > max {
                    return Err(BodyError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
        }
    }
}

/// The text as one JSON value, surrounding JSON whitespace trimmed, otherwise unchanged.
fn json_value(text: String) -> Option<Box<RawValue>> {
    let trimmed = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    if trimmed.len() == text.len() {
        RawValue::from_string(text).ok()
    } else {
        RawValue::from_string(trimmed.to_owned()).ok()
    }
}

fn probe(raw: &RawValue) -> Option<MessageProbe<'_>> {
    if !raw.get().starts_with('{') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

fn is_response(p: &MessageProbe<'_>) -> bool {
    (p.result.0 || p.error.0) && !p.method.0
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

mod configured;
mod discovery;
mod watch;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proxy_tests;

#[cfg(test)]
mod direct_tests;
