//! HTTP conversation with the tunnel service (poll and response endpoints).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::attempt::{AttemptResult, Delivery, PostKind, Refused};
use super::backoff::parse_retry_after;
use super::retry::{next_try, AfterAttempt, RetryPolicy};
use super::transport::{self, Answer, SendError, Target, Transport};
use crate::config::ProxySetting;
use crate::descriptors::{chain_is_exhaustion, EXHAUSTION_WORDS};
use crate::protocol::{decode_poll, Command, InvalidCommand, ShardToken};
use crate::telemetry::{label_enum, DeliveryKind, Metrics, PollErrorLabel};

/// Fresh ids live in `protocol`; named here too for the wiring's call site.
pub use crate::protocol::random_hex;

const CLIENT_NAME: &str = "tunnelgate";
/// Poll bodies above this are refused as undecodable rather than buffered.
const MAX_POLL_BODY: usize = 32 * 1024 * 1024;
/// Slack on top of the server-side long-poll wait before the client gives up.
const POLL_SLACK: Duration = Duration::from_secs(10);
/// Idle control-plane connections close after this (either client).
const IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// What the client needs to talk to the tunnel service.
#[derive(Clone)]
pub struct ControlSettings {
    pub base_url: String,
    pub url_path: String,
    pub tunnel_id: String,
    pub api_key: String,
    pub poll_timeout: Duration,
    pub post_timeout: Duration,
    pub post_attempts: u32,
    /// `control_plane.http2`: offer HTTP/2 by ALPN to a TLS control plane. Off, both
    /// clients offer only HTTP/1.1 (docs/PERFORMANCE.md: against a TLS control plane,
    /// HTTP/2 cost 48% more gateway CPU per command at concurrency 1 and 15% at 16).
    pub http2: bool,
    /// `X-Tunnel-MCP-Server-Info` value, if declared.
    pub server_info: Option<String>,
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
    /// The tunnel lookup (`doctor`); also `transport` when a proxy applies.
    http: reqwest::Client,
    /// The poll and the response POST: hyper directly when the control plane is reached
    /// directly, `http` when `control_plane.proxy` sends it through a proxy.
    transport: Transport,
    /// `{base_url}{url_path}/v1/tunnels/{tunnel_id}`: the tunnel's metadata.
    tunnel_url: String,
    /// `{tunnel_url}/poll`, the base of every poll URL in `poll_urls`.
    poll_url: String,
    /// Every poll URL the client can send, parsed once ([`PollUrls`]): a URL parse with its
    /// host check was a measurable share of a poll's cost.
    poll_urls: Arc<PollUrls>,
    /// Parsed once: a response POST is sent per command.
    response_url: reqwest::Url,
    /// `response_url` as hyper's `Uri` (from its serialisation, as `reqwest` makes it).
    response_uri: http::Uri,
    headers: HeaderMap,
    settings: Arc<ControlSettings>,
    metrics: Arc<Metrics>,
}

/// How long a poll asks the control plane to hold it when nothing is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollWait {
    /// `control_plane.poll_timeout`: the ordinary long poll.
    Long,
    /// Answer at once: the first poll of a run, and the first after a failure, so that
    /// readiness reflects the control plane within a round trip, not a poll timeout.
    Quick,
}

/// The wait of a [`PollWait::Quick`] poll (the contract's minimum is 1 ms).
const QUICK_POLL: Duration = Duration::from_millis(1);

/// A poll whose response headers arrived: from here on its commands belong to the
/// gateway, and each must be answered or accounted for.
pub struct PollAnswer {
    /// Monotonic time the response headers arrived.
    pub received_at: Instant,
    deadline: Instant,
    /// `None` for `204`.
    body: Option<Answer>,
}

/// A successful poll.
#[derive(Debug)]
pub struct Polled {
    /// Monotonic time the response headers arrived: every deadline is anchored here.
    pub received_at: Instant,
    /// Empty for `204`.
    pub commands: Vec<Result<Command, InvalidCommand>>,
}

label_enum! {
    /// `poll_errors_total{kind}`.
    pub enum PollErrorKind {
        Timeout => "timeout",
        Transport => "transport",
        Unauthorized => "unauthorized",
        RateLimited => "rate_limited",
        ServerError => "server_error",
        ClientError => "client_error",
        Decode => "decode",
        /// Not sent: the gateway had no descriptor or socket memory for the connection.
        LocalExhaustion => "local_exhaustion",
    }
}

impl PollErrorLabel for PollErrorKind {}

impl PollErrorKind {
    fn from_status(status: u16) -> Self {
        match status {
            401 | 403 => Self::Unauthorized,
            429 => Self::RateLimited,
            500..=599 => Self::ServerError,
            _ => Self::ClientError,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "poll failed ({}){}{}",
    kind.as_str(),
    status.map(|s| format!(": HTTP {s}")).unwrap_or_default(),
    if *kind == PollErrorKind::LocalExhaustion { format!(": {EXHAUSTION_WORDS}") } else { String::new() }
)]
pub struct PollError {
    pub kind: PollErrorKind,
    pub status: Option<u16>,
    /// Server-imposed minimum wait, already capped.
    pub retry_after: Option<Duration>,
}

impl PollError {
    pub fn new(kind: PollErrorKind, status: Option<u16>, retry_after: Option<Duration>) -> Self {
        Self {
            kind,
            status,
            retry_after,
        }
    }

    pub fn kind(&self) -> &'static str {
        self.kind.as_str()
    }
}

/// How a delivery ended, with the attempt that settled it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryReport {
    pub delivery: Delivery,
    pub last_attempt: AttemptResult,
    pub attempts: u32,
    /// Why the settling attempt was refused, when the control plane said so in a way the
    /// gateway acts on (only ever with `rejected_status`).
    pub refused: Option<Refused>,
}

/// How one POST attempt ended: its result, the status when one arrived, the
/// server-imposed wait, and why a final refusal was given.
#[derive(Clone, Copy, Debug)]
struct Attempted {
    result: AttemptResult,
    status: Option<u16>,
    retry_after: Option<Duration>,
    refused: Option<Refused>,
}

impl Attempted {
    /// An attempt that got no (usable) answer.
    fn unanswered(result: AttemptResult, status: Option<u16>) -> Self {
        Self {
            result,
            status,
            retry_after: None,
            refused: None,
        }
    }
}

/// Why a [`ControlClient`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the response URL built from control_plane.base_url, url_path and tunnel_id does not parse")]
    Url,
    #[error("control_plane.proxy: {0}")]
    Proxy(#[from] crate::egress::proxy::EgressError),
    #[error("cannot build the TLS configuration with the platform's verifier: {0}")]
    Tls(#[from] rustls::Error),
}

impl ControlClient {
    /// A client that reaches the control plane directly (no proxy).
    pub fn new(settings: ControlSettings, instance_id: &str, metrics: Arc<Metrics>) -> Result<Self, BuildError> {
        Self::with_egress(settings, instance_id, metrics, &ProxySetting::Off, None)
    }

    /// A client that reaches the control plane as `proxy` says (`control_plane.proxy`),
    /// with the TLS configuration of `control_plane.tls` (from
    /// `egress::tls::client_config`; `None` keeps reqwest's own: platform roots, no
    /// client certificate). Redirects are never followed, so a client certificate is
    /// only ever offered to the control plane's own origin.
    ///
    /// The poll and the response POST drive hyper's client directly when `proxy` sends
    /// the control plane's requests straight to it, with the same TLS configuration
    /// (`tls`'s verifier and certificate resolver are shared, so rewritten files reach
    /// the next handshake of either client); through a proxy everything stays on reqwest.
    pub fn with_egress(
        settings: ControlSettings,
        instance_id: &str,
        metrics: Arc<Metrics>,
        proxy: &ProxySetting,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Self, BuildError> {
        let connect_timeout = settings.post_timeout.min(Duration::from_secs(10));
        let target = reqwest::Url::parse(&settings.base_url).map_err(|_| BuildError::Url)?;
        let direct = match crate::egress::proxy::route(proxy, &target) {
            crate::egress::proxy::Route::Direct => {
                let mut config = match &tls {
                    Some(config) => config.clone(),
                    None => transport::platform_config()?,
                };
                if !settings.http2 {
                    config.alpn_protocols = vec![b"http/1.1".to_vec()];
                }
                Some(Transport::direct(config, connect_timeout, IDLE_TIMEOUT))
            }
            crate::egress::proxy::Route::Tunnel | crate::egress::proxy::Route::Forward => None,
        };
        let builder = reqwest::Client::builder();
        let builder = match (tls, settings.http2) {
            (Some(tls), true) => builder.tls_backend_preconfigured(tls),
            (Some(mut tls), false) => {
                tls.alpn_protocols = vec![b"http/1.1".to_vec()];
                builder.tls_backend_preconfigured(tls).http1_only()
            }
            (None, true) => builder,
            (None, false) => builder.http1_only(),
        }
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(IDLE_TIMEOUT);
        let http = crate::egress::proxy::apply(builder, proxy, &target)?.build()?;
        let transport = match direct {
            Some(direct) => direct,
            None => Transport::Reqwest(http.clone()),
        };
        let prefix = format!(
            "{}{}/v1/tunnels/{}",
            settings.base_url.trim_end_matches('/'),
            settings.url_path,
            percent_encode_segment(&settings.tunnel_id)
        );
        let headers = base_headers(&settings, instance_id);
        let poll_url = format!("{prefix}/poll");
        let poll_urls = Arc::new(PollUrls::parse(&poll_url, "", settings.poll_timeout)?);
        let response_url = reqwest::Url::parse(&format!("{prefix}/response")).map_err(|_| BuildError::Url)?;
        let response_uri = uri_of(&response_url)?;
        Ok(Self {
            http,
            transport,
            poll_url,
            poll_urls,
            tunnel_url: prefix.clone(),
            response_url,
            response_uri,
            headers,
            settings: Arc::new(settings),
            metrics,
        })
    }

    /// The same client with the poll and the response POST on reqwest whatever the
    /// route: the reference the direct path's tests compare against.
    #[cfg(test)]
    pub(super) fn on_reqwest(mut self) -> Self {
        self.transport = Transport::Reqwest(self.http.clone());
        self
    }

    /// Adds the configured headers (`OpenAI-Organization`, `control_plane.headers`) to
    /// every request: polls, response POSTs and the tunnel lookup. A name the client sets
    /// itself keeps the client's value (the configuration rejects such names anyway).
    pub fn with_headers(mut self, configured: HeaderMap) -> Self {
        for (name, value) in &configured {
            if !self.headers.contains_key(name) {
                self.headers.insert(name.clone(), value.clone());
            }
        }
        self
    }

    /// Every poll names `channels` (`control_plane.poll_channels`, the official client's
    /// filter): one `channel=NAME` query parameter per name, after `limit` and
    /// `timeout_ms`, in the order given (the configuration sorts them and removes
    /// duplicates). An empty list adds nothing: the control plane then hands out the
    /// commands of every channel.
    pub fn with_poll_channels<S: AsRef<str>>(mut self, channels: &[S]) -> Result<Self, BuildError> {
        self.poll_urls = Arc::new(PollUrls::parse(
            &self.poll_url,
            &poll_filter(channels),
            self.settings.poll_timeout,
        )?);
        Ok(self)
    }

    /// One long poll asking for at most `limit` commands, up to its response headers.
    ///
    /// # Cancel safety
    /// Cancel-safe only in the sense the contract allows: dropped before the response
    /// headers arrive, no command has been handed to the gateway. Once it returns
    /// [`PollAnswer`], the control plane has handed out whatever the body holds: read it
    /// with [`read_commands`](Self::read_commands), never drop it unread.
    pub async fn poll(&self, limit: usize, wait: PollWait) -> Result<PollAnswer, PollError> {
        let (target, wait) = self.poll_urls.target(limit, wait);
        let deadline = Instant::now() + wait + POLL_SLACK;
        let request = self.transport.get(target, &self.headers);
        let response = match tokio::time::timeout_at(deadline, request).await {
            Err(_) => return Err(PollError::new(PollErrorKind::Timeout, None, None)),
            Ok(Err(e)) => return Err(PollError::new(poll_send_error_kind(&e), None, None)),
            Ok(Ok(r)) => r,
        };
        let received_at = Instant::now();
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        match status {
            204 => Ok(PollAnswer {
                received_at,
                deadline,
                body: None,
            }),
            200 => Ok(PollAnswer {
                received_at,
                deadline,
                body: Some(response),
            }),
            _ => Err(PollError::new(
                PollErrorKind::from_status(status),
                Some(status),
                retry_after,
            )),
        }
    }

    /// Which client the poll and the response POST use: `"direct"` (hyper's, driven
    /// directly) when the control plane is reached directly, `"reqwest"` when
    /// `control_plane.proxy` sends it through a proxy.
    pub fn transport(&self) -> &'static str {
        self.transport.label()
    }

    /// `GET .../v1/tunnels/{tunnel_id}` (the tunnel's metadata) with the poll's headers:
    /// it authenticates exactly as a poll does and takes no command, so `tunnelgate
    /// doctor` can check reachability and credentials without polling. Returns the
    /// status; the body is not read. `timeout` bounds the whole exchange.
    pub async fn get_tunnel(&self, timeout: Duration) -> Result<reqwest::StatusCode, reqwest::Error> {
        let request = self.http.get(&self.tunnel_url).headers(self.headers.clone());
        Ok(request.timeout(timeout).send().await?.status())
    }

    /// Reads and decodes an answered poll's body (bounded in size and by the poll's own
    /// deadline).
    ///
    /// # Cancel safety
    /// Not cancel-safe: dropping it loses commands the control plane handed out. Bound it
    /// instead (the stop order gives it `strict.cleanup_timeout`).
    pub async fn read_commands(&self, answer: PollAnswer) -> Result<Polled, PollError> {
        let PollAnswer {
            received_at,
            deadline,
            body,
        } = answer;
        let Some(response) = body else {
            return Ok(Polled {
                received_at,
                commands: Vec::new(),
            });
        };
        let status = Some(response.status().as_u16());
        let body = match tokio::time::timeout_at(deadline, read_bounded(response, MAX_POLL_BODY)).await {
            Err(_) => return Err(PollError::new(PollErrorKind::Timeout, status, None)),
            Ok(Err(BodyError::TooLarge)) => return Err(PollError::new(PollErrorKind::Decode, status, None)),
            Ok(Err(BodyError::Transport)) => return Err(PollError::new(PollErrorKind::Transport, status, None)),
            Ok(Ok(b)) => b,
        };
        let commands = decode_poll(&body).map_err(|_| PollError::new(PollErrorKind::Decode, status, None))?;
        Ok(Polled { received_at, commands })
    }

    /// Delivers one response body, retrying per `kind`'s rules with the identical bytes
    /// and headers, each attempt bounded by `post_timeout` and by `deadline`.
    ///
    /// # Cancel safety
    /// Not cancel-safe by drop: cancel through `cancel`, which settles the delivery as
    /// `Ambiguous` (`Cancelled`) when an attempt may have been written.
    pub async fn deliver(
        &self,
        kind: PostKind,
        body: Bytes,
        shard_token: &ShardToken,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
    ) -> DeliveryReport {
        let metric_kind = match kind {
            PostKind::Terminal => DeliveryKind::Terminal,
            PostKind::Notify => DeliveryKind::Notify,
        };
        let policy = RetryPolicy::new(self.settings.post_attempts);
        let headers = self.post_headers(shard_token);
        let mut backoff = super::Backoff::default();
        let mut attempt = 0;
        loop {
            if cancel.is_cancelled() {
                // Cancelled before this attempt began: nothing ran, nothing is counted as
                // an attempt. The delivery ends as the cancellation leaves it.
                let last = Attempted::unanswered(AttemptResult::Cancelled, None);
                return self.settled(metric_kind, last.result.final_delivery(), last, attempt);
            }
            attempt += 1;
            let tried = self.traced_attempt(&headers, &body, attempt, deadline, cancel).await;
            let result = tried.result;
            self.metrics.delivery_attempted(metric_kind, result);
            let after = AfterAttempt {
                attempt,
                result,
                status: tried.status,
                deadline_left: deadline.is_none_or(|d| Instant::now() < d),
                cancelled: cancel.is_cancelled(),
            };
            if policy.settles(kind, after) {
                return self.settled(metric_kind, result.final_delivery(), tried, attempt);
            }
            let delay = backoff.next_delay(rand::random::<f64>(), tried.retry_after);
            tokio::select! {
                biased;
                // cancel-safe: nothing in flight between attempts.
                _ = cancel.cancelled() => {
                    self.metrics.delivery_attempted(metric_kind, AttemptResult::Cancelled);
                    // The previous attempt's result decides the category: it may have been written.
                    return self.settled(metric_kind, Delivery::Ambiguous, tried, attempt);
                }
                // cancel-safe: a sleep.
                _ = tokio::time::sleep_until(next_try(delay, deadline, Instant::now())) => {}
            }
        }
    }

    /// The headers of every attempt of one delivery: identical bytes each time.
    fn post_headers(&self, shard_token: &ShardToken) -> HeaderMap {
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(mut v) = HeaderValue::from_str(shard_token.expose()) {
            v.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-tunnel-shard-token"), v);
        }
        if let Ok(v) = HeaderValue::from_str(&random_hex(16)) {
            headers.insert(HeaderName::from_static("x-client-request-id"), v);
        }
        headers
    }

    /// Counts the delivery's end and reports it.
    fn settled(&self, kind: DeliveryKind, delivery: Delivery, last: Attempted, attempts: u32) -> DeliveryReport {
        self.metrics.delivery_finished(kind, delivery);
        DeliveryReport {
            delivery,
            last_attempt: last.result,
            attempts,
            refused: last.refused.filter(|_| delivery == Delivery::Rejected),
        }
    }

    /// One attempt (1-based) in its `tunnelgate.deliver.attempt` span.
    async fn traced_attempt(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        attempt: u32,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
    ) -> Attempted {
        let span = tracing::debug_span!(
            "tunnelgate.deliver.attempt",
            otel.kind = "client",
            http.request.method = "POST",
            http.request.resend_count = i64::from(attempt - 1),
            http.response.status_code = tracing::field::Empty,
            tunnelgate.attempt_result = tracing::field::Empty,
        );
        let tried = self
            .attempt(headers, body.clone(), deadline, cancel)
            .instrument(span.clone())
            .await;
        if let Some(code) = tried.status {
            span.record("http.response.status_code", i64::from(code));
        }
        span.record("tunnelgate.attempt_result", tried.result.as_str());
        tried
    }

    async fn attempt(
        &self,
        headers: &HeaderMap,
        body: Bytes,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
    ) -> Attempted {
        let per_attempt = Instant::now() + self.settings.post_timeout;
        let until = deadline.map_or(per_attempt, |d| d.min(per_attempt));
        let target = Target {
            url: &self.response_url,
            uri: &self.response_uri,
        };
        let exchange = async {
            let response = match self.transport.post(target, headers, body).await {
                Ok(r) => r,
                Err(e) => return Attempted::unanswered(post_send_error_result(&e), None),
            };
            let status = response.status().as_u16();
            let retry_after = retry_after(response.headers());
            let body = match read_bounded(response, 64 * 1024).await {
                Ok(b) => b,
                // The status arrived but the body did not: only a 200 needed the body.
                Err(_) if status == 200 => {
                    return Attempted::unanswered(AttemptResult::TransportAfterWrite, Some(status));
                }
                Err(_) => Bytes::new(),
            };
            let result = AttemptResult::from_status(status, is_ack(&body));
            let refused = (result == AttemptResult::RejectedStatus)
                .then(|| Refused::of(status, Refused::code_of(&body).as_deref()))
                .flatten();
            Attempted {
                result,
                status: Some(status),
                retry_after,
                refused,
            }
        };
        tokio::select! {
            biased;
            // cancel-safe: dropping the exchange is reported as Cancelled, an ambiguity.
            _ = cancel.cancelled() => Attempted::unanswered(AttemptResult::Cancelled, None),
            // cancel-safe: as above, a timeout after the write is ambiguous by definition.
            r = tokio::time::timeout_at(until, exchange) => {
                r.unwrap_or(Attempted::unanswered(AttemptResult::Timeout, None))
            }
        }
    }
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
    if let Some(info) = settings
        .server_info
        .as_deref()
        .and_then(|i| HeaderValue::from_str(i).ok())
    {
        headers.insert(HeaderName::from_static("x-tunnel-mcp-server-info"), info);
    }
    headers
}

/// How a poll that got no response headers failed. Exhaustion of the gateway's own
/// descriptors is named before anything that would blame the control plane.
fn poll_send_error_kind(e: &SendError) -> PollErrorKind {
    warn_tls(e, "poll");
    if e.is_connect() && chain_is_exhaustion(e.chain()) {
        PollErrorKind::LocalExhaustion
    } else if e.is_timeout() {
        PollErrorKind::Timeout
    } else {
        PollErrorKind::Transport
    }
}

/// How a response POST that got no response headers failed. A connect error wrote
/// nothing: `transport_not_sent`, or `local_exhaustion` when the gateway had no
/// descriptor or socket memory for it (logged with words that say so).
fn post_send_error_result(e: &SendError) -> AttemptResult {
    warn_tls(e, "response POST");
    if e.is_connect() && chain_is_exhaustion(e.chain()) {
        tracing::warn!(
            attempt_result = AttemptResult::LocalExhaustion.as_str(),
            "response POST not sent: {EXHAUSTION_WORDS} (no descriptor or socket memory for the connection); the control plane is not at fault"
        );
        AttemptResult::LocalExhaustion
    } else if e.is_connect() || crate::egress::tls::refused_handshake(e.chain()) {
        // A refused TLS 1.3 client certificate may be alerted after the write: the
        // control plane processed nothing.
        AttemptResult::TransportNotSent
    } else if e.is_timeout() {
        AttemptResult::Timeout
    } else {
        AttemptResult::TransportAfterWrite
    }
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

/// `{"status":"ok"}` (schema `TunnelResponseAck`), nothing else.
fn is_ack(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Ack<'a> {
        #[serde(borrow)]
        status: &'a str,
    }
    serde_json::from_slice::<Ack<'_>>(body).is_ok_and(|a| a.status == "ok")
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

/// The most commands one poll may ask for (the contract's `limit` maximum).
const MAX_POLL_LIMIT: usize = 25;

/// Every poll URL: `limit` 1 to [`MAX_POLL_LIMIT`], each with the long and the quick wait,
/// parsed when the client is built.
struct PollUrls {
    long_wait: Duration,
    /// Index `2 * (limit - 1)` is the long poll, the next one the quick poll.
    urls: Vec<reqwest::Url>,
    /// `urls` as hyper's `Uri`s, index for index.
    uris: Vec<http::Uri>,
}

impl PollUrls {
    fn parse(poll_url: &str, filter: &str, long_wait: Duration) -> Result<Self, BuildError> {
        let mut urls = Vec::with_capacity(2 * MAX_POLL_LIMIT);
        for limit in 1..=MAX_POLL_LIMIT {
            for wait in [long_wait, QUICK_POLL] {
                let timeout_ms = wait.as_millis().max(1);
                let url = format!("{poll_url}?limit={limit}&timeout_ms={timeout_ms}{filter}");
                urls.push(reqwest::Url::parse(&url).map_err(|_| BuildError::Url)?);
            }
        }
        let uris = urls.iter().map(uri_of).collect::<Result<_, _>>()?;
        Ok(Self { long_wait, urls, uris })
    }

    /// The index of a poll asking for `limit` commands (clamped to 1..=25), and its wait.
    fn index(&self, limit: usize, wait: PollWait) -> (usize, Duration) {
        let base = 2 * (limit.clamp(1, MAX_POLL_LIMIT) - 1);
        match wait {
            PollWait::Long => (base, self.long_wait),
            PollWait::Quick => (base + 1, QUICK_POLL),
        }
    }

    /// The URL of a poll asking for `limit` commands (clamped to 1..=25), and its wait.
    #[cfg(test)]
    fn get(&self, limit: usize, wait: PollWait) -> (&reqwest::Url, Duration) {
        let (i, wait) = self.index(limit, wait);
        (&self.urls[i], wait)
    }

    /// The target of a poll asking for `limit` commands, for either client, and its wait.
    fn target(&self, limit: usize, wait: PollWait) -> (Target<'_>, Duration) {
        let (i, wait) = self.index(limit, wait);
        let target = Target {
            url: &self.urls[i],
            uri: &self.uris[i],
        };
        (target, wait)
    }
}

/// hyper's `Uri` of a parsed URL, from its serialisation: what `reqwest` sends.
fn uri_of(url: &reqwest::Url) -> Result<http::Uri, BuildError> {
    http::Uri::try_from(url.as_str()).map_err(|_| BuildError::Url)
}

/// `&channel=A&channel=B` for `channels`, each value percent-encoded; `""` for none.
fn poll_filter<S: AsRef<str>>(channels: &[S]) -> String {
    channels
        .iter()
        .map(|name| format!("&channel={}", percent_encode_segment(name.as_ref())))
        .collect()
}

/// Percent-encodes a path segment (tunnel ids are opaque).
fn percent_encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_ack_document_is_an_ack() {
        assert!(is_ack(br#"{"status":"ok"}"#));
        assert!(is_ack(br#"{ "status" : "ok", "extra": 1 }"#));
        assert!(!is_ack(br#"{"status":"OK"}"#));
        assert!(!is_ack(br#"{"status":"error"}"#));
        assert!(!is_ack(b""));
        assert!(!is_ack(b"ok"));
    }

    #[test]
    fn the_poll_filter_is_one_channel_parameter_per_name_and_nothing_without_names() {
        assert_eq!(poll_filter::<&str>(&[]), "");
        assert_eq!(poll_filter(&["harpoon", "main"]), "&channel=harpoon&channel=main");
        assert_eq!(poll_filter(&["a b"]), "&channel=a%20b");
    }

    #[test]
    fn every_poll_url_is_parsed_once_with_its_limit_wait_and_filter() {
        let urls = PollUrls::parse(
            "http://cp.example/v1/tunnels/t/poll",
            "&channel=a",
            Duration::from_secs(30),
        )
        .expect("parses");
        let (url, wait) = urls.get(7, PollWait::Long);
        assert_eq!(
            url.as_str(),
            "http://cp.example/v1/tunnels/t/poll?limit=7&timeout_ms=30000&channel=a"
        );
        assert_eq!(wait, Duration::from_secs(30));
        let (url, wait) = urls.get(0, PollWait::Quick);
        assert_eq!(
            url.as_str(),
            "http://cp.example/v1/tunnels/t/poll?limit=1&timeout_ms=1&channel=a"
        );
        assert_eq!(wait, QUICK_POLL);
        assert_eq!(
            urls.get(99, PollWait::Long).0.query(),
            Some("limit=25&timeout_ms=30000&channel=a")
        );
    }

    #[test]
    fn tunnel_ids_are_encoded_as_one_segment() {
        assert_eq!(percent_encode_segment("tunnel_abc-1"), "tunnel_abc-1");
        assert_eq!(percent_encode_segment("a/b?c"), "a%2Fb%3Fc");
    }
}
