//! The control client's wire against real sockets: how each failure is classified
//! (nothing listening, a peer that closes before reading, a server certificate nobody
//! trusts), what an HTTP/2 control plane's refused stream and ALPN do, the bytes of the
//! poll and the response POST, and which route the client takes for each proxy setting.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::{AttemptResult, ControlClient, ControlSettings, PollErrorKind, PollWait, PostKind};
use crate::app::GatewayLabels;
use crate::egress::proxy::{EnvProxies, ProxySetting, ProxyUrl};
use crate::protocol::ShardToken;
use crate::telemetry::Metrics;

fn settings(base_url: String) -> ControlSettings {
    ControlSettings {
        base_url,
        url_path: String::new(),
        tunnel_id: "t".to_owned(),
        api_key: "k".to_owned(),
        poll_timeout: Duration::from_secs(1),
        post_timeout: Duration::from_secs(5),
        post_attempts: 1,
        server_info: Some("srv".to_owned()),
        routing_correction: false,
        initial_poll_timeout: None,
        http2: true,
    }
}

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new::<GatewayLabels>(false, &[]))
}

/// The client for `base_url`, reached directly.
fn client_for(base_url: &str) -> ControlClient {
    let client = ControlClient::new(settings(base_url.to_owned()), "i", metrics()).unwrap();
    assert_eq!(client.route(), "direct");
    client
}

fn body() -> Bytes {
    Bytes::from_static(br#"{"request_id":"r","channel":"main","resp_code":200,"resp_type":"notify_ack"}"#)
}

/// The poll's error kind and the single POST attempt's result.
async fn outcomes(client: &ControlClient) -> (PollErrorKind, AttemptResult) {
    let poll = client
        .poll(1, PollWait::Quick)
        .await
        .err()
        .expect("the poll fails")
        .kind;
    let report = client
        .deliver(
            PostKind::Terminal,
            body(),
            &ShardToken::new("s"),
            None,
            &CancellationToken::new(),
        )
        .await;
    (poll, report.last_attempt)
}

#[tokio::test]
async fn nothing_listening_is_not_sent() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    assert_eq!(
        outcomes(&client_for(&url)).await,
        (PollErrorKind::Transport, AttemptResult::TransportNotSent)
    );
}

#[tokio::test]
async fn a_peer_that_closes_before_reading_is_after_write() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
        }
    });
    assert_eq!(
        outcomes(&client_for(&url)).await,
        (PollErrorKind::Transport, AttemptResult::TransportAfterWrite)
    );
}

/// A log sink for one test's `tracing` output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

/// The HTTP versions a [`tls_server`] served, request by request.
type Versions = Arc<Mutex<Vec<http::Version>>>;

/// A TLS acceptor offering ALPN `h2` and `http/1.1`, with a self-signed certificate
/// for localhost (`dir/cert.pem`, trusted by nobody unless named).
pub(crate) fn tls_acceptor(dir: &std::path::Path) -> tokio_rustls::TlsAcceptor {
    use rustls_pki_types::pem::PemObject;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args(["-days", "2", "-subj", "/CN=tunnelgate-untrusted-test"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A TLS server on loopback ([`tls_acceptor`]) answering each poll with `204`; its URL
/// and the versions of the requests it served.
async fn tls_server(dir: &std::path::Path) -> (String, Versions) {
    let acceptor = tls_acceptor(dir);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://localhost:{}", listener.local_addr().unwrap().port());
    let versions = Versions::default();
    let served = versions.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (acceptor, served) = (acceptor.clone(), served.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(conn).await else { return };
                let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    served.lock().unwrap().push(request.version());
                    let mut answer = http::Response::new(http_body_util::Empty::<Bytes>::new());
                    *answer.status_mut() = http::StatusCode::NO_CONTENT;
                    async move { Ok::<_, std::convert::Infallible>(answer) }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
                drop(
                    builder
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await,
                );
            });
        }
    });
    (url, versions)
}

/// An HTTP/2 server over TLS that refuses every other stream (`REFUSED_STREAM`) and
/// answers the others with `204`; its URL and the number of streams it saw.
async fn refusing_h2_server(dir: &std::path::Path) -> (String, Arc<AtomicUsize>) {
    let acceptor = tls_acceptor(dir);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://localhost:{}", listener.local_addr().unwrap().port());
    let streams = Arc::new(AtomicUsize::new(0));
    let seen = streams.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(conn).await else { return };
                let Ok(mut h2) = h2::server::handshake(tls).await else {
                    return;
                };
                while let Some(Ok((_request, mut respond))) = h2.accept().await {
                    if seen.fetch_add(1, Ordering::SeqCst) % 2 == 0 {
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                    } else {
                        let answer = http::Response::builder().status(204).body(()).unwrap();
                        drop(respond.send_response(answer, true));
                    }
                }
            });
        }
    });
    (url, streams)
}

#[tokio::test]
async fn a_stream_refused_by_an_http2_control_plane_is_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let (url, streams) = refusing_h2_server(dir.path()).await;
    let tls = trusting(dir.path());
    let client = ControlClient::with_egress(settings(url), "i", metrics(), &ProxySetting::Off, tls).unwrap();
    let answer = client.poll(1, PollWait::Quick).await;
    assert!(answer.is_ok(), "{:?}", answer.err());
    assert_eq!(streams.load(Ordering::SeqCst), 2, "refused once, then answered");
}

#[tokio::test]
async fn a_tls_control_plane_that_offers_h2_is_polled_over_http2() {
    let dir = tempfile::tempdir().unwrap();
    let (url, versions) = tls_server(dir.path()).await;
    let tls = trusting(dir.path());
    polled_over(settings(url), tls, &versions, http::Version::HTTP_2).await;
}

/// `control_plane.http2 = false` (the default): the same server, which offers `h2`
/// first, is polled over HTTP/1.1.
#[tokio::test]
async fn without_control_plane_http2_a_tls_control_plane_that_offers_h2_is_polled_over_http1() {
    let dir = tempfile::tempdir().unwrap();
    let (url, versions) = tls_server(dir.path()).await;
    let tls = trusting(dir.path());
    let mut http1 = settings(url);
    http1.http2 = false;
    polled_over(http1, tls, &versions, http::Version::HTTP_11).await;
}

/// A client configuration that trusts the certificate a TLS test server wrote into `dir`.
fn trusting(dir: &std::path::Path) -> Option<rustls::ClientConfig> {
    let files = crate::egress::tls::TlsFiles {
        ca_file: Some(crate::egress::tls::TlsFile {
            path: dir.join("cert.pem"),
            key: "control_plane.tls.ca_file".into(),
        }),
        ca_only: true,
        client: None,
    };
    crate::egress::tls::client_config(&files).unwrap()
}

/// Polls once and asserts the server saw the poll over `version`.
async fn polled_over(
    settings: ControlSettings,
    tls: Option<rustls::ClientConfig>,
    versions: &Versions,
    version: http::Version,
) {
    let client = ControlClient::with_egress(settings, "i", metrics(), &ProxySetting::Off, tls).unwrap();
    let answer = client.poll(1, PollWait::Quick).await.unwrap();
    assert!(client.read_commands(answer).await.unwrap().commands.is_empty());
    let served = std::mem::take(&mut *versions.lock().unwrap());
    assert_eq!(served, [version]);
}

#[tokio::test]
async fn a_server_certificate_nobody_trusts_is_not_sent_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = tls_server(dir.path()).await;
    let log = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    assert_eq!(
        outcomes(&client_for(&url)).await,
        (PollErrorKind::Transport, AttemptResult::TransportNotSent)
    );
    let lines = log.take();
    for step in ["poll", "response POST"] {
        let words = format!(
            "{step} not sent: the TLS handshake with the control plane failed: the server's certificate is \
             not issued by a trusted CA"
        );
        assert!(lines.contains(&words), "{lines}");
    }
}

/// Answers each request with `200 {"status":"ok"}` and keeps every request's head.
async fn recording_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = conn.read(&mut chunk).await {
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |n| n.parse::<usize>().unwrap());
                    if buf.len() < end + 4 + length {
                        continue;
                    }
                    buf.drain(..end + 4 + length);
                    let get = head.starts_with("GET ");
                    seen.lock().unwrap().push(head);
                    let answer = if get {
                        "HTTP/1.1 204 No Content\r\n\r\n"
                    } else {
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n{\"status\":\"ok\"}"
                    };
                    if conn.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, heads)
}

/// The heads of the poll and the response POST, header by header in the order the
/// client must send them (each delivery's own request id left out), with the wire
/// contract's version header (2026-08-25) after the instance id.
const HEADS: [&str; 2] = [POLL_HEAD, POST_HEAD];
const POLL_HEAD: &str = concat!(
    "GET /v1/tunnels/t/poll?limit=3&timeout_ms=1 HTTP/1.1\r\n",
    "authorization: Bearer k\r\n",
    "accept: application/json\r\n",
    "x-tunnel-client-name: tunnelgate\r\n",
    "x-tunnel-client-version: ",
    env!("CARGO_PKG_VERSION"),
    "\r\n",
    "x-tunnel-client-instance-id: i\r\n",
    "x-tunnel-client-wire-protocol-version: 2026-08-25\r\n",
    "x-tunnel-mcp-server-info: srv\r\n",
    "host: 127.0.0.1:PORT",
);
const POST_HEAD: &str = concat!(
    "POST /v1/tunnels/t/response HTTP/1.1\r\n",
    "authorization: Bearer k\r\n",
    "accept: application/json\r\n",
    "x-tunnel-client-name: tunnelgate\r\n",
    "x-tunnel-client-version: ",
    env!("CARGO_PKG_VERSION"),
    "\r\n",
    "x-tunnel-client-instance-id: i\r\n",
    "x-tunnel-client-wire-protocol-version: 2026-08-25\r\n",
    "x-tunnel-mcp-server-info: srv\r\n",
    "content-type: application/json\r\n",
    "x-tunnel-shard-token: s\r\n",
    "host: 127.0.0.1:PORT\r\n",
    "content-length: 76",
);

#[tokio::test]
async fn the_poll_and_the_response_post_send_the_bytes_pinned_here() {
    let (url, heads) = recording_server().await;
    let client = client_for(&url);
    let answer = client.poll(3, PollWait::Quick).await.unwrap();
    assert!(client.read_commands(answer).await.unwrap().commands.is_empty());
    let report = client
        .deliver(
            PostKind::Terminal,
            body(),
            &ShardToken::new("s"),
            None,
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(report.last_attempt, AttemptResult::Ok);
    let port = url.rsplit(':').next().unwrap().to_owned();
    let heads: Vec<String> = std::mem::take(&mut *heads.lock().unwrap())
        .into_iter()
        .map(|h| {
            h.lines()
                .filter(|l| !l.starts_with("x-client-request-id: "))
                .collect::<Vec<_>>()
                .join("\r\n")
                .replace(&port, "PORT")
        })
        .collect();
    assert_eq!(heads, HEADS);
}

#[test]
fn the_route_is_direct_exactly_when_no_proxy_applies_and_names_the_proxy_way() {
    let proxy = || ProxyUrl::new("control_plane.proxy", "http://127.0.0.1:9").unwrap();
    let env = |no_proxy: &str| {
        let pairs = [
            ("HTTP_PROXY".to_owned(), "http://127.0.0.1:9".to_owned()),
            ("HTTPS_PROXY".to_owned(), "http://127.0.0.1:9".to_owned()),
            ("NO_PROXY".to_owned(), no_proxy.to_owned()),
        ];
        ProxySetting::Env(Box::new(EnvProxies::from_pairs(&pairs).unwrap()))
    };
    let rows = [
        ("http://127.0.0.1:1", ProxySetting::Off, "direct"),
        ("http://127.0.0.1:1", ProxySetting::Via(proxy()), "forward"),
        ("https://127.0.0.1:1", ProxySetting::Via(proxy()), "tunnel"),
        ("http://127.0.0.1:1", env(""), "direct"),
        ("http://cp.example", env(""), "forward"),
        ("https://cp.example", env(""), "tunnel"),
        ("https://cp.example", env("cp.example"), "direct"),
        ("http://cp.example", ProxySetting::Off, "direct"),
    ];
    for (url, proxy, expected) in rows {
        let client = ControlClient::with_egress(settings(url.to_owned()), "i", metrics(), &proxy, None).unwrap();
        assert_eq!(client.route(), expected, "{url} {}", proxy.masked());
    }
}

#[tokio::test]
async fn through_a_forwarding_proxy_the_poll_goes_out_in_absolute_form_with_the_proxy_credentials() {
    let (proxy_url, heads) = recording_server().await;
    let with_user = proxy_url.replace("http://", "http://gw:p%40ss@");
    let proxy = ProxySetting::Via(ProxyUrl::new("control_plane.proxy", &with_user).unwrap());
    let client =
        ControlClient::with_egress(settings("http://cp.example".to_owned()), "i", metrics(), &proxy, None).unwrap();
    assert_eq!(client.route(), "forward");
    let answer = client.poll(1, PollWait::Quick).await;
    assert!(answer.is_ok(), "{:?}", answer.err());
    let heads = std::mem::take(&mut *heads.lock().unwrap());
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].starts_with("GET http://cp.example/v1/tunnels/t/poll?limit=1&timeout_ms=1 HTTP/1.1\r\n"),
        "{}",
        heads[0]
    );
    // `gw:p@ss`, percent-decoded from the URL's userinfo.
    assert!(
        heads[0].contains("\r\nproxy-authorization: Basic Z3c6cEBzcw==\r\n"),
        "{}",
        heads[0]
    );
    assert!(heads[0].ends_with("\r\nhost: cp.example"), "{}", heads[0]);
}
