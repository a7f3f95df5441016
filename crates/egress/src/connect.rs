//! The one connector of the gateway's HTTP client: per destination, the way a new
//! connection is made, as [`super::proxy::route`] decides it.
//!
//! - direct: TCP (TCP_NODELAY, keepalive, `TCP_USER_TIMEOUT`), then rustls with the
//!   scope's configuration for an `https` target;
//! - tunnel (an `https` target through a proxy): TCP to the proxy (TLS too for an
//!   `https` proxy), hyper-util's `CONNECT` with `Proxy-Authorization` from the proxy
//!   URL's userinfo, then rustls to the target inside the tunnel;
//! - forward (an `http` target through a proxy): a connection to the proxy itself,
//!   marked proxied so that the request goes out in absolute form (the client adds its
//!   `Proxy-Authorization`);
//! - a unix socket, when the scope names one: never proxied; the URL still names the
//!   `Host` (and the TLS server name of an `https` URL).
//!
//! Invariants: every way fails before a request byte is written, or yields a stream
//! the request has not touched; [`TimedConnect`] bounds the whole of it (TCP, `CONNECT`,
//! TLS) by one connect timeout; proxy credentials go only into the `CONNECT` request
//! and a forwarded request's header, never into an error, a log line or a `Debug` view;
//! the proxy is offered no client certificate.
//!
//! Must not send a request, and must not know commands, the fence or transports.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tower_service::Service;

use super::proxy::{self, EgressError};
use crate::proxy::{ProxySetting, ProxyUrl};

/// A connector's error, as hyper-util boxes them.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every TCP connection's keepalive (idle time, interval, probes) and, on Linux, its
/// `TCP_USER_TIMEOUT`.
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_RETRIES: u32 = 3;
const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection the connector made: TCP (or TLS over it) to the target or to a proxy,
/// or, boxed, a stream of another kind (a unix socket, TLS inside TLS to an `https`
/// proxy).
pub struct Conn {
    io: Io,
    /// To a forwarding proxy: hyper writes the request in absolute form.
    forwarded: bool,
}

// The TCP variant stays inline: it is every connection of the hot path, and a `Conn`
// lives as long as its connection, so the size is paid once per connection, not per
// request, while a box would add an indirection to every read and write.
#[allow(clippy::large_enum_variant)]
enum Io {
    Tcp(MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>),
    Other(Box<dyn Stream>),
}

/// What a boxed connection is.
trait Stream: hyper::rt::Read + hyper::rt::Write + Connection + Send + Unpin {}

impl<T: hyper::rt::Read + hyper::rt::Write + Connection + Send + Unpin> Stream for T {}

/// The connect of a unix socket failed (the TCP stage's counterpart: nothing was sent).
#[derive(Debug, thiserror::Error)]
#[error("unix socket connect error")]
pub(crate) struct SocketConnectError(#[source] std::io::Error);

/// One proxy, parsed once: where to connect, and the credentials of its userinfo.
struct Proxy {
    uri: Uri,
    auth: Option<HeaderValue>,
}

/// How one scope's connections are made, shared by every clone of the connector.
struct Plan {
    setting: ProxySetting,
    /// Each proxy URL of `setting`, by its exposed text.
    proxies: Vec<(String, Proxy)>,
    socket: Option<PathBuf>,
    tcp: HttpConnector,
    /// The scope's TLS to a target.
    tls: Arc<rustls::ClientConfig>,
    /// TLS to an `https` proxy: the scope's roots, ALPN `http/1.1`, no client certificate.
    proxy_tls: Arc<rustls::ClientConfig>,
}

/// The connector: a tower service from a destination to a [`Conn`].
#[derive(Clone)]
pub(crate) struct Connector {
    /// The direct way, built once (the hot path).
    direct: HttpsConnector<HttpConnector>,
    plan: Arc<Plan>,
}

/// The connector with one timeout over TCP connect, `CONNECT` and TLS handshake. A
/// timeout is an `io::Error` of kind `TimedOut`.
#[derive(Clone)]
pub struct TimedConnect {
    inner: Connector,
    timeout: Duration,
}

/// A resolver that presents no client certificate (the one to a proxy).
#[derive(Debug)]
struct NoClientCert;

impl rustls::client::ResolvesClientCert for NoClientCert {
    fn resolve(&self, _: &[&[u8]], _: &[rustls::SignatureScheme]) -> Option<Arc<rustls::sign::CertifiedKey>> {
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

impl Connector {
    /// The connector of a scope: `tls` for its targets (ALPN already set), `proxy` and
    /// `socket` as configured, TCP connects bounded by `connect_timeout`.
    pub(crate) fn new(
        tls: rustls::ClientConfig,
        proxy: &ProxySetting,
        socket: Option<PathBuf>,
        connect_timeout: Duration,
    ) -> Result<Self, EgressError> {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(connect_timeout));
        tcp.set_keepalive(Some(KEEPALIVE));
        tcp.set_keepalive_interval(Some(KEEPALIVE));
        tcp.set_keepalive_retries(Some(KEEPALIVE_RETRIES));
        #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
        tcp.set_tcp_user_timeout(Some(USER_TIMEOUT));
        let mut proxy_tls = tls.clone();
        proxy_tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        proxy_tls.client_auth_cert_resolver = Arc::new(NoClientCert);
        let tls = Arc::new(tls);
        let proxies = proxy::proxies(proxy)
            .into_iter()
            .map(|url| Ok((url.expose().to_owned(), parse_proxy(url)?)))
            .collect::<Result<_, EgressError>>()?;
        Ok(Self {
            direct: HttpsConnector::from((tcp.clone(), tls.clone())),
            plan: Arc::new(Plan {
                setting: proxy.clone(),
                proxies,
                socket,
                tcp,
                tls,
                proxy_tls: Arc::new(proxy_tls),
            }),
        })
    }

    /// Bounded by one connect timeout over every stage.
    pub(crate) fn timed(self, timeout: Duration) -> TimedConnect {
        TimedConnect { inner: self, timeout }
    }

    /// Whether any proxy may apply: without one, every target is direct and a request
    /// pays nothing for proxy selection.
    pub(crate) fn may_proxy(&self) -> bool {
        self.plan.socket.is_none() && !self.plan.proxies.is_empty()
    }

    /// The `Proxy-Authorization` a request for `uri` carries: set when a proxy forwards
    /// it (an `http` target) and the proxy URL has userinfo.
    pub(crate) fn forward_auth(&self, uri: &Uri) -> Option<HeaderValue> {
        if !self.may_proxy() || uri.scheme() != Some(&http::uri::Scheme::HTTP) {
            return None;
        }
        self.proxy_for(uri)?.auth.clone()
    }

    /// The proxy a connection to `dst` goes through, as [`proxy::select`] says.
    fn proxy_for(&self, dst: &Uri) -> Option<&Proxy> {
        let url = url::Url::parse(&format!("{}://{}/", dst.scheme_str()?, dst.authority()?)).ok()?;
        let chosen = proxy::select(&self.plan.setting, &url)?;
        let exposed = chosen.expose();
        self.plan
            .proxies
            .iter()
            .find(|(text, _)| text == exposed)
            .map(|(_, p)| p)
    }

    async fn connect(self, dst: Uri) -> Result<Conn, BoxError> {
        let plan = &self.plan;
        if let Some(path) = &plan.socket {
            let unix = UnixConnector(path.clone());
            let io = HttpsConnector::from((unix, plan.tls.clone())).call(dst).await?;
            return Ok(Conn::other(io, false));
        }
        let proxy = if self.may_proxy() { self.proxy_for(&dst) } else { None };
        let Some(proxy) = proxy else {
            return Ok(Conn::tcp(self.direct.clone().call(dst).await?, false));
        };
        let https_proxy = proxy.uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let forward = dst.scheme() != Some(&http::uri::Scheme::HTTPS);
        let to_proxy = HttpsConnector::from((plan.tcp.clone(), plan.proxy_tls.clone()));
        if forward {
            return Ok(Conn::tcp(to_proxy.clone().call(proxy.uri.clone()).await?, true));
        }
        if https_proxy {
            let tunnel = with_auth(Tunnel::new(proxy.uri.clone(), to_proxy), proxy);
            let io = HttpsConnector::from((tunnel, plan.tls.clone())).call(dst).await?;
            return Ok(Conn::other(io, false));
        }
        let tunnel = with_auth(Tunnel::new(proxy.uri.clone(), plan.tcp.clone()), proxy);
        let io = HttpsConnector::from((tunnel, plan.tls.clone())).call(dst).await?;
        Ok(Conn::tcp(io, false))
    }
}

fn with_auth<C>(tunnel: Tunnel<C>, proxy: &Proxy) -> Tunnel<C> {
    match &proxy.auth {
        Some(auth) => tunnel.with_auth(auth.clone()),
        None => tunnel,
    }
}

/// The proxy's address and its `Basic` credentials (userinfo percent-decoded).
fn parse_proxy(url: &ProxyUrl) -> Result<Proxy, EgressError> {
    let invalid = || EgressError::InvalidProxyUrl {
        shown: url.shown().to_owned(),
    };
    let parsed = url::Url::parse(url.expose()).map_err(|_| invalid())?;
    let uri = url.shown().parse::<Uri>().map_err(|_| invalid())?;
    let auth = (!parsed.username().is_empty() || parsed.password().is_some()).then(|| {
        let user = percent_decode(parsed.username());
        let password = percent_decode(parsed.password().unwrap_or_default());
        basic_auth(&user, &password)
    });
    Ok(Proxy {
        uri,
        auth: auth.flatten(),
    })
}

/// `Basic base64(user:password)`, marked sensitive.
fn basic_auth(user: &[u8], password: &[u8]) -> Option<HeaderValue> {
    use base64::Engine as _;
    let mut plain = Vec::with_capacity(user.len() + password.len() + 1);
    plain.extend_from_slice(user);
    plain.push(b':');
    plain.extend_from_slice(password);
    let encoded = base64::engine::general_purpose::STANDARD.encode(plain);
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// `%XX` sequences decoded; anything else kept as it is.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// Connects the scope's unix socket, whatever the destination names.
#[derive(Clone)]
struct UnixConnector(PathBuf);

impl Service<Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = SocketConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, SocketConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), SocketConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move {
            let stream = tokio::net::UnixStream::connect(path)
                .await
                .map_err(SocketConnectError)?;
            Ok(TokioIo::new(stream))
        })
    }
}

impl Service<Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.direct.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        if !self.may_proxy() && self.plan.socket.is_none() {
            // The hot path: no proxy selection, no second box.
            let connecting = self.direct.call(dst);
            return Box::pin(async move { Ok(Conn::tcp(connecting.await?, false)) });
        }
        Box::pin(self.clone().connect(dst))
    }
}

impl Service<Uri> for TimedConnect {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

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

impl Conn {
    fn tcp(io: MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>, forwarded: bool) -> Self {
        Self {
            io: Io::Tcp(io),
            forwarded,
        }
    }

    fn other<T: Stream + 'static>(io: T, forwarded: bool) -> Self {
        Self {
            io: Io::Other(Box::new(io)),
            forwarded,
        }
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        let connected = match &self.io {
            Io::Tcp(io) => io.connected(),
            Io::Other(io) => io.connected(),
        };
        connected.proxy(self.forwarded)
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(io) => Pin::new(io).poll_read(cx, buf),
            Io::Other(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Tcp(io) => Pin::new(io).poll_write(cx, buf),
            Io::Other(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(io) => Pin::new(io).poll_flush(cx),
            Io::Other(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(io) => Pin::new(io).poll_shutdown(cx),
            Io::Other(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Tcp(io) => io.is_write_vectored(),
            Io::Other(io) => io.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Tcp(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Io::Other(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}
