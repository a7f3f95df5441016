//! How the control client's poll and response POST leave the gateway: hyper's pooled
//! client driven directly when the control plane is reached directly, `reqwest` when
//! `control_plane.proxy` sends it through a proxy.
//!
//! `reqwest` wraps hyper's client in a redirect layer (even with redirects off) and a
//! retry layer that parse the URL again on every request and every response: about a
//! quarter of the gateway's own instructions per command. The direct client is built to
//! send what `reqwest` sends, byte for byte (the same headers in the same order, the same
//! `Host`, the same bodies), over connections set up the same way (TCP_NODELAY, keepalive,
//! `TCP_USER_TIMEOUT`, one connect timeout over TCP and TLS, the same rustls configuration
//! with ALPN `h2` and `http/1.1`, the same idle timeout), and it retries only what
//! `reqwest` retries (see [`Direct::send`]).
//!
//! Invariants: [`SendError`] is the one error type the client's classification reads,
//! whichever client produced it; a request's bytes are never written twice unless hyper
//! or the server proved the first copy was not processed. Must not classify anything
//! itself: `client` does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Extra sends of one request after an HTTP/2 refusal that proves it was not processed:
/// `reqwest`'s default (`max_retries_per_request`).
const MAX_NACK_RETRIES: u32 = 2;
/// `reqwest`'s TCP keepalive defaults (idle time, interval, probes) and its
/// `TCP_USER_TIMEOUT` on Linux.
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_RETRIES: u32 = 3;
const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The client the poll and the response POST use.
#[derive(Clone)]
pub(super) enum Transport {
    /// hyper's pooled client, driven directly: the control plane is reached directly.
    /// Shared: the client is a few hundred bytes of configuration.
    Direct(Arc<Direct>),
    /// `reqwest`: `control_plane.proxy` sends the control plane's requests through a proxy.
    Reqwest(reqwest::Client),
}

/// hyper's legacy pooled client over rustls, as `reqwest` configures it.
pub(super) struct Direct {
    client: hyper_util::client::legacy::Client<TimedConnect, Full<Bytes>>,
}

/// Where one request goes, parsed once for either client.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    pub(super) url: &'a reqwest::Url,
    pub(super) uri: &'a Uri,
}

/// A request that got no response headers, from either client.
#[derive(Debug)]
pub(super) enum SendError {
    Direct(hyper_util::client::legacy::Error),
    Reqwest(reqwest::Error),
}

/// A response whose headers arrived; the body is still to be read.
pub(super) enum Answer {
    Direct(Response<Incoming>),
    Reqwest(reqwest::Response),
}

/// The body of an answer ended with an error (the connection failed mid-body).
pub(super) struct BodyFailed;

/// The connector with one timeout over TCP connect and TLS handshake, as `reqwest`'s
/// `connect_timeout` bounds both. A timeout is an `io::Error` of kind `TimedOut`.
#[derive(Clone)]
struct TimedConnect {
    inner: HttpsConnector<HttpConnector>,
    timeout: Duration,
}

type Stream = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;

impl tower_service::Service<Uri> for TimedConnect {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = self.inner.call(dst);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out").into()),
            }
        })
    }
}

impl Direct {
    /// A client with `tls` (already carrying ALPN `h2`, `http/1.1`), connect timeout
    /// `connect_timeout` over TCP and TLS, idle connections closed after `idle`.
    pub(super) fn new(tls: rustls::ClientConfig, connect_timeout: Duration, idle: Duration) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_keepalive(Some(KEEPALIVE));
        http.set_keepalive_interval(Some(KEEPALIVE));
        http.set_keepalive_retries(Some(KEEPALIVE_RETRIES));
        #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
        http.set_tcp_user_timeout(Some(USER_TIMEOUT));
        let connector = TimedConnect {
            inner: HttpsConnector::from((http, Arc::new(tls))),
            timeout: connect_timeout,
        };
        // `retry_canceled_requests` stays on (hyper-util's default, and reqwest's): hyper
        // hands a request back for another connection only when the pooled connection it
        // was queued on closed before the request was taken for writing
        // (`TrySendError::take_message` is `Some` only then), so not a byte of it was
        // written; a request whose bytes may have left is never resent.
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(idle)
            .pool_max_idle_per_host(usize::MAX)
            .build(connector);
        Self { client }
    }

    /// Sends one request, resending it (at most [`MAX_NACK_RETRIES`] times) only when an
    /// HTTP/2 server refused its stream (`REFUSED_STREAM`) or closed the connection
    /// gracefully (`GOAWAY` with `NO_ERROR`) before processing it: what `reqwest`'s default
    /// retry policy resends, and what RFC 9113 section 8.7 says was not processed.
    async fn send(&self, method: Method, uri: &Uri, headers: &HeaderMap, body: Bytes) -> Result<Answer, SendError> {
        let mut retries = 0;
        loop {
            let mut request = Request::new(Full::new(body.clone()));
            *request.method_mut() = method.clone();
            *request.uri_mut() = uri.clone();
            *request.headers_mut() = headers.clone();
            match self.client.request(request).await {
                Ok(response) => return Ok(Answer::Direct(response)),
                Err(e) if retries < MAX_NACK_RETRIES && is_protocol_nack(&e) => retries += 1,
                Err(e) => return Err(SendError::Direct(e)),
            }
        }
    }
}

/// Whether the chain holds an HTTP/2 refusal by the server that proves the stream was
/// not processed.
fn is_protocol_nack(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.is_remote()
                && ((h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR))
                    || (h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM)));
        }
        next = e.source();
    }
    false
}

impl Transport {
    /// `"direct"` or `"reqwest"`: which client the poll and the response POST use.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Self::Direct(_) => "direct",
            Self::Reqwest(_) => "reqwest",
        }
    }

    /// A `GET` with `headers`, up to its response headers.
    pub(super) async fn get(&self, target: Target<'_>, headers: &HeaderMap) -> Result<Answer, SendError> {
        match self {
            Self::Direct(direct) => direct.send(Method::GET, target.uri, headers, Bytes::new()).await,
            Self::Reqwest(http) => http
                .get(target.url.clone())
                .headers(headers.clone())
                .send()
                .await
                .map(Answer::Reqwest)
                .map_err(SendError::Reqwest),
        }
    }

    /// A `POST` of `body` with `headers`, up to its response headers.
    pub(super) async fn post(&self, target: Target<'_>, headers: &HeaderMap, body: Bytes) -> Result<Answer, SendError> {
        match self {
            Self::Direct(direct) => direct.send(Method::POST, target.uri, headers, body).await,
            Self::Reqwest(http) => http
                .post(target.url.clone())
                .headers(headers.clone())
                .body(body)
                .send()
                .await
                .map(Answer::Reqwest)
                .map_err(SendError::Reqwest),
        }
    }
}

impl SendError {
    /// The connection was never made (refused, DNS, connect timeout, failed TLS
    /// handshake, no descriptor): nothing was written.
    pub(super) fn is_connect(&self) -> bool {
        match self {
            Self::Direct(e) => e.is_connect(),
            Self::Reqwest(e) => e.is_connect(),
        }
    }

    /// A timeout below the client (connect timeout, hyper's own), as `reqwest` reads one:
    /// an `io::Error` of kind `TimedOut` or a hyper timeout anywhere in the chain.
    pub(super) fn is_timeout(&self) -> bool {
        match self {
            Self::Direct(e) => {
                let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
                while let Some(err) = next {
                    if err.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_timeout)
                        || err
                            .downcast_ref::<std::io::Error>()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
                    {
                        return true;
                    }
                    next = err.source();
                }
                false
            }
            Self::Reqwest(e) => e.is_timeout(),
        }
    }

    /// The error with its cause chain, for the exhaustion and TLS readers.
    pub(super) fn chain(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Self::Direct(e) => e,
            Self::Reqwest(e) => e,
        }
    }
}

impl Answer {
    pub(super) fn status(&self) -> u16 {
        match self {
            Self::Direct(r) => r.status().as_u16(),
            Self::Reqwest(r) => r.status().as_u16(),
        }
    }

    pub(super) fn headers(&self) -> &HeaderMap {
        match self {
            Self::Direct(r) => r.headers(),
            Self::Reqwest(r) => r.headers(),
        }
    }

    /// The body's declared length (`Content-Length`), as hyper reports it.
    pub(super) fn content_length(&self) -> Option<u64> {
        match self {
            Self::Direct(r) => hyper::body::Body::size_hint(r.body()).exact(),
            Self::Reqwest(r) => r.content_length(),
        }
    }

    /// The next chunk of the body; `None` at its end. Trailers are skipped.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, BodyFailed> {
        match self {
            Self::Direct(r) => loop {
                match r.body_mut().frame().await {
                    None => return Ok(None),
                    Some(Err(_)) => return Err(BodyFailed),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Ok(Some(data));
                        }
                    }
                }
            },
            Self::Reqwest(r) => r.chunk().await.map_err(|_| BodyFailed),
        }
    }
}

/// The rustls configuration `reqwest` builds for a client given no TLS configuration:
/// the process's default crypto provider (or aws-lc-rs), TLS 1.3 and 1.2, the platform's
/// verifier, no client certificate, SNI, ALPN `h2` then `http/1.1`, rustls' default
/// session resumption.
pub(super) fn platform_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
