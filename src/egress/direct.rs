//! hyper-util's pooled client driven directly, set up as `reqwest` sets up its own: the
//! client the control client's poll and response POST and an HTTP channel's requests
//! use when their server is reached directly (no proxy, no unix socket).
//!
//! `reqwest` wraps hyper's client in a redirect layer (even with redirects off) and a
//! retry layer that parse the URL again on every request and every response: about a
//! quarter of the gateway's own instructions per command. [`Direct`] is built to send
//! what `reqwest` sends, byte for byte (the same headers in the same order, `reqwest`'s
//! default `Accept: */*` where a request names none, the same `Host`, the same bodies),
//! over connections set up the same way (TCP_NODELAY, keepalive, `TCP_USER_TIMEOUT`, one
//! connect timeout over TCP and TLS, the caller's rustls configuration with ALPN `h2`
//! and `http/1.1`, the caller's idle timeout, any number of idle connections), and it
//! resends only what the caller's `reqwest` client would resend (see [`Direct::send`]).
//!
//! Invariants: [`SendError`] and [`Answer`] carry either client's error and response,
//! so one classification reads both; a request's bytes are never written twice unless
//! hyper or the server proved the first copy was not processed. Must not classify
//! anything, and must not know commands, the fence or transports: a caller that watches
//! its connections (strict mode) passes a connector layer of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{Entry, ACCEPT};
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

/// A connector's error, as hyper-util and `reqwest` box them.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `reqwest`'s TCP keepalive defaults (idle time, interval, probes) and its
/// `TCP_USER_TIMEOUT` on Linux.
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_RETRIES: u32 = 3;
const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// What `reqwest` resends after an HTTP/2 refusal that proves a request was not
/// processed (`REFUSED_STREAM`, `GOAWAY` with `NO_ERROR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NackRetries {
    /// `reqwest`'s default retry policy: up to two more sends.
    ReqwestDefault,
    /// `reqwest::retry::never()`: every request is sent once.
    Never,
}

/// hyper's legacy pooled client over rustls, as `reqwest` configures it. `C` is the
/// connector: [`TimedConnect`], or a caller's layer over it.
pub(crate) struct Direct<C = TimedConnect> {
    client: hyper_util::client::legacy::Client<C, Full<Bytes>>,
    retries: u32,
}

/// A request that got no response headers, from either client.
#[derive(Debug)]
pub(crate) enum SendError {
    Direct(hyper_util::client::legacy::Error),
    Reqwest(reqwest::Error),
}

/// A response whose headers arrived; the body is still to be read.
#[derive(Debug)]
pub(crate) enum Answer {
    Direct(Response<Incoming>),
    Reqwest(reqwest::Response),
}

/// The body of an answer ended with an error (the connection failed mid-body).
#[derive(Debug)]
pub(crate) struct BodyFailed;

/// The connector with one timeout over TCP connect and TLS handshake, as `reqwest`'s
/// `connect_timeout` bounds both. A timeout is an `io::Error` of kind `TimedOut`.
#[derive(Clone)]
pub(crate) struct TimedConnect {
    inner: HttpsConnector<HttpConnector>,
    timeout: Duration,
}

/// A connection [`TimedConnect`] made: TCP, or TLS over TCP.
pub(crate) type Stream = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;

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

impl Direct<TimedConnect> {
    /// A client with `tls` (already carrying ALPN `h2`, `http/1.1`), connect timeout
    /// `connect_timeout` over TCP and TLS, idle connections closed after `idle`.
    pub(crate) fn new(
        tls: rustls::ClientConfig,
        connect_timeout: Duration,
        idle: Duration,
        retries: NackRetries,
    ) -> Self {
        Self::layered(tls, connect_timeout, idle, retries, tower_layer::Identity::new())
    }
}

impl<C> Direct<C>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    /// [`Direct::new`] with `layer` around the connector, as `reqwest`'s
    /// `connector_layer` puts it (inside its connect timeout, which bounds the layer's
    /// connect as it bounds the TCP connect and the handshake).
    pub(crate) fn layered<L>(
        tls: rustls::ClientConfig,
        connect_timeout: Duration,
        idle: Duration,
        retries: NackRetries,
        layer: L,
    ) -> Self
    where
        L: tower_layer::Layer<TimedConnect, Service = C>,
    {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_keepalive(Some(KEEPALIVE));
        http.set_keepalive_interval(Some(KEEPALIVE));
        http.set_keepalive_retries(Some(KEEPALIVE_RETRIES));
        #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
        http.set_tcp_user_timeout(Some(USER_TIMEOUT));
        let connector = layer.layer(TimedConnect {
            inner: HttpsConnector::from((http, Arc::new(tls))),
            timeout: connect_timeout,
        });
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
        let retries = match retries {
            NackRetries::ReqwestDefault => 2,
            NackRetries::Never => 0,
        };
        Self { client, retries }
    }

    /// Sends one request with `reqwest`'s default `Accept: */*` appended when `headers`
    /// name no `Accept`, up to its response headers. It is resent (as `reqwest`'s default
    /// retry policy resends it, and only when the client was built with
    /// [`NackRetries::ReqwestDefault`]) only when an HTTP/2 server refused its stream
    /// (`REFUSED_STREAM`) or closed the connection gracefully (`GOAWAY` with `NO_ERROR`)
    /// before processing it: what RFC 9113 section 8.7 says was not processed.
    ///
    /// # Cancel safety
    /// Not cancel-safe once polled: the request may be on the wire when it is dropped.
    pub(crate) async fn send(
        &self,
        method: Method,
        uri: &Uri,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, SendError> {
        if let Entry::Vacant(entry) = headers.entry(ACCEPT) {
            entry.insert(HeaderValue::from_static("*/*"));
        }
        let mut retries = 0;
        loop {
            let mut request = Request::new(Full::new(body.clone()));
            *request.method_mut() = method.clone();
            *request.uri_mut() = uri.clone();
            // The last send takes the headers; an earlier one, which may be resent, copies them.
            *request.headers_mut() = if retries < self.retries {
                headers.clone()
            } else {
                std::mem::take(&mut headers)
            };
            match self.client.request(request).await {
                Ok(response) => return Ok(Answer::Direct(response)),
                Err(e) if retries < self.retries && is_protocol_nack(&e) => retries += 1,
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

impl SendError {
    /// The connection was never made (refused, DNS, connect timeout, failed TLS
    /// handshake, no descriptor, a connector layer's refusal): nothing was written.
    pub(crate) fn is_connect(&self) -> bool {
        match self {
            Self::Direct(e) => e.is_connect(),
            Self::Reqwest(e) => e.is_connect(),
        }
    }

    /// Name resolution failed, as `reqwest`'s own resolver wrapper says. hyper-util's
    /// resolver has no type of its own: its errors are read from the chain's text
    /// (`downstream::error_chain`), as they are for `reqwest`'s.
    pub(crate) fn is_dns(&self) -> bool {
        match self {
            Self::Direct(_) => false,
            Self::Reqwest(e) => e.is_dns(),
        }
    }

    /// A timeout below the client (connect timeout, hyper's own), as `reqwest` reads one:
    /// an `io::Error` of kind `TimedOut` or a hyper timeout anywhere in the chain.
    pub(crate) fn is_timeout(&self) -> bool {
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
    pub(crate) fn chain(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Self::Direct(e) => e,
            Self::Reqwest(e) => e,
        }
    }
}

impl Answer {
    pub(crate) fn status(&self) -> http::StatusCode {
        match self {
            Self::Direct(r) => r.status(),
            Self::Reqwest(r) => r.status(),
        }
    }

    pub(crate) fn headers(&self) -> &HeaderMap {
        match self {
            Self::Direct(r) => r.headers(),
            Self::Reqwest(r) => r.headers(),
        }
    }

    /// The body's declared length (`Content-Length`), as hyper reports it.
    pub(crate) fn content_length(&self) -> Option<u64> {
        match self {
            Self::Direct(r) => hyper::body::Body::size_hint(r.body()).exact(),
            Self::Reqwest(r) => r.content_length(),
        }
    }

    /// The next chunk of the body; `None` at its end. Trailers are skipped.
    ///
    /// # Cancel safety
    /// Cancel-safe: a chunk is taken from the body only when this resolves.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, BodyFailed> {
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
pub(crate) fn platform_config() -> Result<rustls::ClientConfig, rustls::Error> {
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
