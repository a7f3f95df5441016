//! The gateway's one HTTP client: hyper-util's pooled client over the scope's connector
//! ([`super::connect`]), used by every request the gateway makes to the control plane
//! and to HTTP MCP servers, directly, through a proxy or over a unix socket.
//!
//! It is hyper-util's client driven directly, with no redirect or retry layer around it
//! (a layer that would parse the URL again on every request and every response).
//! [`Client`] sends the caller's headers in their map's order, with `Accept: */*`
//! appended where a request names none and `Proxy-Authorization` appended to a request
//! a proxy forwards, the `Host` of the request's URI and the caller's body, over
//! connections set up one way (TCP_NODELAY, keepalive, `TCP_USER_TIMEOUT`, one connect
//! timeout over TCP, `CONNECT` and TLS, the caller's rustls configuration with its ALPN,
//! the caller's idle timeout, any number of idle connections, none kept to a forwarding
//! proxy), and it resends only what the caller's [`NackRetries`] allows (see
//! [`Client::send`]). It follows no redirect.
//!
//! Invariants: [`SendError`] (`egress::error`) is the one error of a request that got no
//! response headers, with a stable [`SendErrorKind`] that says whether anything may have
//! been written; a request's bytes are never written twice unless hyper or the server proved
//! the first copy was not processed. Must not classify outcomes, and must not know
//! commands, the fence or transports: a caller that watches its connections (strict
//! mode) passes a connector layer of its own.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{Entry, ACCEPT, PROXY_AUTHORIZATION};
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::connect::{Connector, TimedConnect};
use super::proxy::{EgressError, Route};
use crate::proxy::ProxySetting;

pub use super::error::{SendError, SendErrorKind};

/// How often a request is resent after an HTTP/2 refusal that proves it was not
/// processed (`REFUSED_STREAM`, `GOAWAY` with `NO_ERROR`), chosen per caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NackRetries {
    /// Up to two more sends (the control client, etcd, the local ops client).
    UpToTwo,
    /// Every request is sent once (an HTTP channel, harpoon).
    Never,
}

/// How one scope's requests leave: what [`Client::new`] is built from.
pub struct Egress {
    /// The TLS of its targets, ALPN already set.
    pub tls: rustls::ClientConfig,
    pub proxy: ProxySetting,
    /// A unix socket every connection goes to instead (never proxied).
    pub socket: Option<PathBuf>,
    /// One bound over TCP connect, `CONNECT` and TLS handshake.
    pub connect_timeout: Duration,
    /// Pooled connections idle longer than this are closed.
    pub idle: Duration,
    pub retries: NackRetries,
}

/// hyper's legacy pooled client over the scope's connector. `C` is the connector:
/// [`TimedConnect`], or a caller's layer over it.
pub struct Client<C = TimedConnect> {
    client: hyper_util::client::legacy::Client<C, Full<Bytes>>,
    /// The connector's plan, for the `Proxy-Authorization` of a forwarded request.
    connector: Connector,
    retries: u32,
    route: Route,
}

/// A response whose headers arrived; the body is still to be read.
#[derive(Debug)]
pub struct Answer(Response<Incoming>);

/// The body of an answer ended with an error (the connection failed mid-body).
#[derive(Debug)]
pub struct BodyFailed;

impl Client<TimedConnect> {
    /// The scope's client; `target` is the one server it is for (a forwarding proxy
    /// keeps no connection to it: see [`Client::layered`]).
    pub fn new(egress: Egress, target: &url::Url) -> Result<Self, EgressError> {
        Self::layered(egress, target, tower_layer::Identity::new())
    }
}

impl<C> Client<C>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    /// [`Client::new`] with `layer` around the connector, outside the connect timeout
    /// (which bounds the TCP connect, the `CONNECT` and the handshake).
    ///
    /// A forwarding proxy may close its side after each response without saying so
    /// (tinyproxy does); a request written on a connection it is closing would end
    /// `abandoned` although it never reached the proxy's handler, so when `target` is
    /// forwarded each request gets a connection of its own.
    pub fn layered<L>(egress: Egress, target: &url::Url, layer: L) -> Result<Self, EgressError>
    where
        L: tower_layer::Layer<TimedConnect, Service = C>,
    {
        let route = match egress.socket {
            Some(_) => Route::Direct,
            None => super::proxy::route(&egress.proxy, target),
        };
        let connector = Connector::new(egress.tls, &egress.proxy, egress.socket, egress.connect_timeout)?;
        let timed = connector.clone().timed(egress.connect_timeout);
        let max_idle = if route == Route::Forward { 0 } else { usize::MAX };
        // `retry_canceled_requests` stays on (hyper-util's default): hyper hands a request
        // back for another connection only when the pooled connection it was queued on
        // closed before the request was taken for writing
        // (`TrySendError::take_message` is `Some` only then), so not a byte of it was
        // written; a request whose bytes may have left is never resent.
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(egress.idle)
            .pool_max_idle_per_host(max_idle)
            .build(layer.layer(timed));
        let retries = match egress.retries {
            NackRetries::UpToTwo => 2,
            NackRetries::Never => 0,
        };
        Ok(Self {
            client,
            connector,
            retries,
            route,
        })
    }

    /// How requests to the client's target leave.
    pub fn route(&self) -> Route {
        self.route
    }

    /// Sends one request with `Accept: */*` appended when `headers` name no `Accept` (and
    /// a forwarding proxy's `Proxy-Authorization` after it), up to its response headers.
    /// It is resent (only when the client was built with [`NackRetries::UpToTwo`])
    /// only when an HTTP/2 server refused its stream (`REFUSED_STREAM`) or closed the
    /// connection gracefully (`GOAWAY` with `NO_ERROR`) before processing it: what RFC
    /// 9113 section 8.7 says was not processed.
    ///
    /// # Cancel safety
    /// Not cancel-safe once polled: the request may be on the wire when it is dropped.
    pub async fn send(
        &self,
        method: Method,
        uri: &Uri,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, SendError> {
        if let Entry::Vacant(entry) = headers.entry(ACCEPT) {
            entry.insert(HeaderValue::from_static("*/*"));
        }
        if let Some(auth) = self.connector.forward_auth(uri) {
            if let Entry::Vacant(entry) = headers.entry(PROXY_AUTHORIZATION) {
                entry.insert(auth);
            }
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
                Ok(response) => return Ok(Answer(response)),
                Err(e) if retries < self.retries && is_protocol_nack(&e) => retries += 1,
                Err(e) => return Err(SendError::new(e, uri.scheme() == Some(&http::uri::Scheme::HTTPS))),
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

impl Answer {
    pub fn status(&self) -> http::StatusCode {
        self.0.status()
    }

    pub fn headers(&self) -> &HeaderMap {
        self.0.headers()
    }

    /// The body's declared length (`Content-Length`), as hyper reports it.
    pub fn content_length(&self) -> Option<u64> {
        hyper::body::Body::size_hint(self.0.body()).exact()
    }

    /// The next chunk of the body; `None` at its end. Trailers are skipped.
    ///
    /// # Cancel safety
    /// Cancel-safe: a chunk is taken from the body only when this resolves.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, BodyFailed> {
        loop {
            match self.0.body_mut().frame().await {
                None => return Ok(None),
                Some(Err(_)) => return Err(BodyFailed),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

/// A client to a gateway's own ops listener at `target` (the CLI's `status`, the support
/// bundle): never a proxy, the platform's TLS, the connect bounded by `timeout`.
pub fn local(target: &url::Url, timeout: Duration) -> Result<Client, String> {
    let egress = Egress {
        tls: platform_config().map_err(|e| e.to_string())?,
        proxy: ProxySetting::Off,
        socket: None,
        connect_timeout: timeout,
        idle: timeout,
        retries: NackRetries::UpToTwo,
    };
    Client::new(egress, target).map_err(|e| e.to_string())
}

/// Why [`local_get`] gave no whole answer.
#[derive(Debug)]
pub enum LocalGetError {
    /// The URL is not one hyper's `Uri` accepts.
    Url,
    /// No response headers: the one client's error, with its kind.
    Send(SendError),
    /// No response headers by the deadline.
    NoAnswer,
    /// The headers came, with `status`; the body did not end, by the deadline
    /// (`timed_out`) or because the connection broke.
    BodyCut { status: http::StatusCode, timed_out: bool },
}

/// `GET url` on a gateway's own ops listener (a [`local`] client): the status and the
/// whole body, headers and body by `deadline` together.
///
/// # Cancel safety
/// Reads only; dropping it abandons one GET.
pub async fn local_get(
    client: &Client,
    url: &str,
    deadline: tokio::time::Instant,
) -> Result<(http::StatusCode, Vec<u8>), LocalGetError> {
    use tokio::time::timeout_at;
    let uri: Uri = url.parse().map_err(|_| LocalGetError::Url)?;
    let sent = client.send(Method::GET, &uri, HeaderMap::new(), Bytes::new());
    let mut answer = match timeout_at(deadline, sent).await {
        Err(_) => return Err(LocalGetError::NoAnswer),
        Ok(sent) => sent.map_err(LocalGetError::Send)?,
    };
    let status = answer.status();
    let mut body = Vec::new();
    loop {
        let cut = |timed_out| Err(LocalGetError::BodyCut { status, timed_out });
        match timeout_at(deadline, answer.chunk()).await {
            Err(_) => return cut(true),
            Ok(Err(_)) => return cut(false),
            Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
            Ok(Ok(None)) => return Ok((status, body)),
        }
    }
}

/// The rustls configuration of a scope with no TLS setting: the process's default
/// crypto provider (or aws-lc-rs), TLS 1.3 and 1.2, the platform's verifier, no client
/// certificate, SNI, ALPN `h2` then `http/1.1`, rustls' default session resumption.
pub fn platform_config() -> Result<rustls::ClientConfig, rustls::Error> {
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
