//! An HTTP channel's client against real sockets: how each failure ends the leg (nothing
//! listening, a name that does not resolve, a handshake that outlasts the connect
//! timeout, a peer that closes before reading, one that reads and closes before
//! answering, a server certificate nobody trusts; in strict mode too), an event stream
//! that arrives in parts and is resumed, the bytes of the requests, and the route a
//! channel takes for each proxy and socket setting.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::timeout;

use bytes::Bytes;
use http::header::HeaderValue;
use serde_json::value::RawValue;

use super::*;
use crate::downstream::{LegOutcome, Notification};
use crate::egress::proxy::{EnvProxies, ProxyUrl};
use crate::egress::tls::{TlsFile, TlsFiles};
use crate::protocol::JsonRpcPayload;
use crate::scripted_peer::{reply, sse_head, Act, Seen, Server};
use crate::strict::{CommandRef, Fence};

/// Every leg's outer bound: a hang fails the test instead of the suite.
const TEST_BOUND: Duration = Duration::from_secs(10);

const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#;
const ANSWER: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;

fn settings() -> HttpSettings {
    HttpSettings {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        max_body_bytes: 1 << 20,
    }
}

fn transport_with(url: &str, egress: HttpEgress) -> HttpTransport {
    transport_set(url, egress, settings())
}

fn transport_set(url: &str, egress: HttpEgress, settings: HttpSettings) -> HttpTransport {
    let url = HttpUrl::endpoint("mcp.channels.main.url", url).unwrap();
    HttpTransport::with_egress("main", &url, settings, egress).unwrap()
}

/// The command's headers: mixed case, repeated, one hop-by-hop.
fn caller_headers() -> WireHeaders {
    vec![
        ("Mcp-Session-Id".to_owned(), vec!["s-1".to_owned()]),
        ("MCP-Protocol-Version".to_owned(), vec!["2025-06-18".to_owned()]),
        ("X-Trace".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
        ("Connection".to_owned(), vec!["keep-alive".to_owned()]),
    ]
}

/// One leg of [`CALL`] with [`caller_headers`], under a fence in `strict` mode or not,
/// and the notifications it produced.
async fn leg(t: &HttpTransport, strict: bool) -> (LegResult, Vec<Notification>) {
    let fence = Fence::new(strict, 1);
    let admission = fence.admit(CommandRef::default()).await.unwrap();
    let payload = JsonRpcPayload::from_raw(RawValue::from_string(CALL.to_owned()).unwrap()).unwrap();
    let headers = caller_headers();
    let (tx, mut rx) = mpsc::channel(64);
    let req = DownstreamRequest {
        payload: &payload,
        headers: &headers,
        deadline: None,
    };
    let result = timeout(TEST_BOUND, t.call(&admission, &req, &tx))
        .await
        .expect("the leg is bounded");
    drop(tx);
    let mut notes = Vec::new();
    while let Ok(n) = rx.try_recv() {
        notes.push(n);
    }
    (result, notes)
}

/// The failure and outcome of one leg, not in strict mode, then in strict mode.
async fn endings(url: &str) -> Vec<(Option<LegFailure>, LegOutcome)> {
    endings_set(url, &settings()).await
}

async fn endings_set(url: &str, settings: &HttpSettings) -> Vec<(Option<LegFailure>, LegOutcome)> {
    let mut out = Vec::new();
    for strict in [false, true] {
        let t = transport_set(url, HttpEgress::direct(), settings.clone());
        let (result, _) = leg(&t, strict).await;
        out.push((result.failure, result.outcome));
    }
    out
}

#[tokio::test]
async fn nothing_listening_is_not_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let want = (Some(LegFailure::ConnectRefused), LegOutcome::NotSent);
    assert_eq!(endings(&url).await, vec![want.clone(), want]);
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_not_sent() {
    let want = (Some(LegFailure::Dns), LegOutcome::NotSent);
    assert_eq!(
        endings("http://nonexistent.invalid/mcp").await,
        vec![want.clone(), want]
    );
}

#[tokio::test]
async fn a_handshake_the_server_never_answers_ends_in_the_connect_timeout_not_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://127.0.0.1:{}/mcp", listener.local_addr().unwrap().port());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    let settings = HttpSettings {
        connect_timeout: Duration::from_millis(200),
        ..settings()
    };
    let started = tokio::time::Instant::now();
    let want = (Some(LegFailure::ConnectFailed), LegOutcome::NotSent);
    assert_eq!(endings_set(&url, &settings).await, vec![want.clone(), want]);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the connect timeout spans the handshake"
    );
}

#[tokio::test]
async fn a_peer_that_closes_before_reading_is_abandoned() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
        }
    });
    let want = (Some(LegFailure::ConnectionLost), LegOutcome::Abandoned);
    assert_eq!(endings(&url).await, vec![want.clone(), want]);
}

#[tokio::test]
async fn a_peer_that_reads_the_request_and_closes_is_abandoned() {
    let server = Server::start((0..2).map(|_| Act::Close).collect()).await;
    let want = (Some(LegFailure::ConnectionLost), LegOutcome::Abandoned);
    assert_eq!(endings(&server.url()).await, vec![want.clone(), want]);
    assert_eq!(server.seen().len(), 2, "each request was read whole");
}

/// A TLS MCP server on loopback whose certificate is `dir/cert.pem` (trusted by nobody
/// unless named), answering every request with [`ANSWER`]; its URL and the HTTP
/// versions it served.
async fn tls_server(dir: &std::path::Path) -> (String, Arc<Mutex<Vec<http::Version>>>) {
    let acceptor = crate::control::transport_tests::tls_acceptor(dir);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://localhost:{}/mcp", listener.local_addr().unwrap().port());
    let versions = Arc::new(Mutex::new(Vec::new()));
    let served = versions.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (acceptor, served) = (acceptor.clone(), served.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(conn).await else { return };
                let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    served.lock().unwrap().push(request.version());
                    let answer = http::Response::builder()
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(Bytes::from_static(ANSWER)))
                        .unwrap();
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

#[tokio::test]
async fn a_server_certificate_nobody_trusts_is_not_sent_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (url, versions) = tls_server(dir.path()).await;
    let t = transport_with(&url, HttpEgress::direct());
    let (result, _) = leg(&t, false).await;
    assert_eq!(
        (result.failure, result.outcome),
        (Some(LegFailure::Tls), LegOutcome::NotSent)
    );
    let problem = t.last_tls_problem().unwrap_or_default();
    assert!(problem.contains("not issued by a trusted CA"), "{problem}");
    assert!(versions.lock().unwrap().is_empty(), "nothing was served");
}

#[tokio::test]
async fn a_trusted_tls_server_that_offers_h2_answers_over_http2() {
    let dir = tempfile::tempdir().unwrap();
    let (url, versions) = tls_server(dir.path()).await;
    let files = TlsFiles {
        ca_file: Some(TlsFile {
            path: dir.path().join("cert.pem"),
            key: "mcp.tls.ca_file".into(),
        }),
        ca_only: true,
        client: None,
    };
    let egress = HttpEgress {
        tls: crate::egress::tls::client_config(&files).unwrap(),
        ..HttpEgress::direct()
    };
    let t = transport_with(&url, egress);
    let (result, _) = leg(&t, false).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    assert_eq!(result.reply.resp_json.as_deref().unwrap().get().as_bytes(), ANSWER);
    let served = std::mem::take(&mut *versions.lock().unwrap());
    assert_eq!(served, [http::Version::HTTP_2]);
}

/// What a leg over a cut event stream saw: the leg's result, its notifications, and
/// the requests the server read.
async fn streamed_in_parts(t: &HttpTransport, server: &Server) -> (String, Vec<String>, Vec<Seen>) {
    let (result, notes) = leg(t, false).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    let answer = result.reply.resp_json.as_deref().unwrap().get().to_owned();
    let notes = notes.iter().map(|n| n.resp_json.get().to_owned()).collect();
    (answer, notes, server.seen())
}

#[tokio::test]
async fn an_event_stream_in_parts_then_resumed_is_read_to_its_answer() {
    let session = [("Mcp-Session-Id", "s-1")];
    let note = b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"p\":1}}\n\n";
    // The first event split mid-line across segments; the stream cut before the answer.
    let parts = vec![
        sse_head(&session),
        b"id: ev-1\nretry: 20\nda".to_vec(),
        note[2..].to_vec(),
        b": a comment\n\n".to_vec(),
    ];
    let mut resumed = sse_head(&session);
    resumed.extend_from_slice(b"id: ev-2\ndata: ");
    resumed.extend_from_slice(ANSWER);
    resumed.extend_from_slice(b"\n\n");
    let server = Server::start(vec![Act::Parts(parts), Act::Reply(resumed)]).await;
    let t = transport_with(&server.url(), HttpEgress::direct());
    let (answer, notes, requests) = &streamed_in_parts(&t, &server).await;
    assert_eq!(answer.as_bytes(), ANSWER);
    assert_eq!(notes.len(), 1, "{notes:?}");
    let methods: Vec<&str> = requests.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["POST", "GET"]);
    assert_eq!(requests[1].header("last-event-id"), ["ev-1"]);
    assert_eq!(requests[1].header("mcp-session-id"), ["s-1"]);
}

/// Keeps every request's raw bytes (head and body) and answers a POST with [`ANSWER`]
/// and anything else with `204`, keeping the connection open.
async fn recording_server() -> (String, Arc<Mutex<Vec<Vec<u8>>>>) {
    let raw = Arc::new(Mutex::new(Vec::new()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp?x=1", listener.local_addr().unwrap());
    let seen = raw.clone();
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
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |n| n.parse::<usize>().unwrap());
                    if buf.len() < end + 4 + length {
                        continue;
                    }
                    let request: Vec<u8> = buf.drain(..end + 4 + length).collect();
                    let post = request.starts_with(b"POST ");
                    seen.lock().unwrap().push(request);
                    let answer = if post {
                        reply("200 OK", &[("Content-Type", "application/json")], ANSWER)
                    } else {
                        b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()
                    };
                    if conn.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, raw)
}

/// The POST and the DELETE of a leg, byte for byte as the client must send them
/// (`PORT` for the server's port).
const WIRE: [&str; 2] = [
    concat!(
        "POST /mcp?x=1 HTTP/1.1\r\n",
        "mcp-session-id: s-1\r\n",
        "mcp-protocol-version: 2025-06-18\r\n",
        "x-trace: a\r\n",
        "x-trace: b\r\n",
        "x-team: blue\r\n",
        "authorization: Bearer configured\r\n",
        "content-type: application/json\r\n",
        "accept: application/json, text/event-stream\r\n",
        "host: 127.0.0.1:PORT\r\n",
        "content-length: 86\r\n",
        "\r\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
    ),
    concat!(
        "DELETE /mcp?x=1 HTTP/1.1\r\n",
        "mcp-session-id: s-1\r\n",
        "mcp-protocol-version: 2025-06-18\r\n",
        "x-trace: a\r\n",
        "x-trace: b\r\n",
        "x-team: blue\r\n",
        "authorization: Bearer configured\r\n",
        "accept: */*\r\n",
        "host: 127.0.0.1:PORT\r\n",
        "\r\n",
    ),
];

#[tokio::test]
async fn the_post_and_the_delete_send_the_bytes_pinned_here() {
    let (url, raw) = recording_server().await;
    let configured: HeaderMap = [
        ("x-team", "blue"),
        ("authorization", "Bearer configured"),
        ("x-trace", "configured"),
    ]
    .into_iter()
    .map(|(n, v)| (n.parse().unwrap(), HeaderValue::from_static(v)))
    .collect();
    let t = transport_with(&url, HttpEgress::direct()).with_headers(configured);
    let (result, _) = leg(&t, false).await;
    assert_eq!(result.outcome, LegOutcome::Answered, "{:?}", result.failure);
    let fence = Fence::new(false, 1);
    let admission = fence.admit(CommandRef::default()).await.unwrap();
    let end = t.terminate_session(&admission, &caller_headers(), None).await;
    assert_eq!(end.reply.resp_code, 204);
    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap().to_owned();
    let sent: Vec<String> = std::mem::take(&mut *raw.lock().unwrap())
        .iter()
        .map(|bytes| String::from_utf8_lossy(bytes).replace(&port, "PORT"))
        .collect();
    assert_eq!(sent, WIRE);
}

#[test]
fn a_channel_takes_the_route_its_proxy_and_socket_say() {
    let proxy = || ProxyUrl::new("mcp.proxy", "http://127.0.0.1:9").unwrap();
    let env = |no_proxy: &str| {
        let pairs = [
            ("HTTP_PROXY".to_owned(), "http://127.0.0.1:9".to_owned()),
            ("HTTPS_PROXY".to_owned(), "http://127.0.0.1:9".to_owned()),
            ("NO_PROXY".to_owned(), no_proxy.to_owned()),
        ];
        ProxySetting::Env(Box::new(EnvProxies::from_pairs(&pairs).unwrap()))
    };
    let socket = Some(PathBuf::from("/tmp/tunnelgate-no-such.sock"));
    let rows = [
        ("http://127.0.0.1:1/mcp", ProxySetting::Off, None, "direct"),
        ("http://127.0.0.1:1/mcp", ProxySetting::Via(proxy()), None, "forward"),
        ("https://mcp.example/mcp", ProxySetting::Via(proxy()), None, "tunnel"),
        ("http://127.0.0.1:1/mcp", env(""), None, "direct"),
        ("http://mcp.example/mcp", env(""), None, "forward"),
        ("https://mcp.example/mcp", env(""), None, "tunnel"),
        ("https://mcp.example/mcp", env("mcp.example"), None, "direct"),
        // A socket is never proxied.
        ("http://mcp.example/mcp", ProxySetting::Off, socket.clone(), "direct"),
        ("http://mcp.example/mcp", ProxySetting::Via(proxy()), socket, "direct"),
        ("https://mcp.example/mcp", ProxySetting::Off, None, "direct"),
    ];
    for (url, proxy, socket, expected) in rows {
        let masked = proxy.masked();
        let has_socket = socket.is_some();
        let egress = HttpEgress {
            proxy,
            socket,
            tls: None,
        };
        let t = transport_with(url, egress);
        assert_eq!(t.route_label(), expected, "{url} {masked} socket={has_socket}");
    }
}
