//! A load control plane: the lightest peer that speaks the poll and response endpoints.
//!
//! `C` virtual callers each queue one `tools/call echo` command, wait until the gateway's
//! response POST for it arrives, and queue the next. A command is timed from queueing to
//! its response POST. Nothing is validated beyond what finding the request needs: the
//! simulator checks the protocol in the test suite, here only the gateway's cost counts.
//! This takes the simulator's MCP ingress hop (and its records) out of the tunnel path,
//! so the tunnel pays the same three exchanges as the floor.
//!
//! It counts the polls it answers and the TCP connections it accepts, so a run can report
//! both per command. `bench --serve-loadcp ADDR` runs it as a process of its own (see
//! [`serve_standalone`]), for `scripts/bench --external`; with `--tls-dir DIR --alpn
//! h1|h2` it serves HTTPS (DIR's `server.pem` and `server.key`), offering HTTP/2 by ALPN
//! or only HTTP/1.1, and counts the requests that arrived over HTTP/2.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::{closed_loop, Load, TUNNEL};

/// What the control plane counted over one load window.
#[derive(Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Window {
    pub(crate) load: Load,
    /// Polls answered (with commands or empty).
    pub(crate) polls: u64,
    /// TCP connections accepted from the gateway.
    pub(crate) connections: u64,
    /// Polls and response POSTs that arrived over HTTP/2 (TLS with `h2` offered only).
    #[serde(default)]
    pub(crate) http2_requests: u64,
    /// Polls and response POSTs.
    #[serde(default)]
    pub(crate) requests: u64,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Vec<u8>>>,
    queued: Notify,
    waiting: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    next: AtomicU64,
    polls: AtomicU64,
    connections: AtomicU64,
    /// Polls and response POSTs that arrived over HTTP/2.
    http2_requests: AtomicU64,
    /// Polls and response POSTs, over any version.
    requests: AtomicU64,
}

/// How [`LoadCp::start_tls_on`] serves: the certificate files and what ALPN offers.
#[derive(Clone, Debug)]
pub(crate) struct TlsServe {
    pub(crate) cert: std::path::PathBuf,
    pub(crate) key: std::path::PathBuf,
    /// Offer `h2` (then `http/1.1`), or `http/1.1` only.
    pub(crate) http2: bool,
}

/// A running load control plane on loopback.
pub(crate) struct LoadCp {
    addr: SocketAddr,
    shared: Arc<Shared>,
    scheme: &'static str,
}

impl LoadCp {
    pub(crate) async fn start() -> Result<Self, String> {
        Self::start_on(([127, 0, 0, 1], 0).into()).await
    }

    /// Binds `addr` (port 0 for an ephemeral one) and serves there.
    pub(crate) async fn start_on(addr: SocketAddr) -> Result<Self, String> {
        let shared = Arc::new(Shared::default());
        let app = app(&shared);
        let (listener, addr) = bind(addr).await?;
        let counted = shared.clone();
        let listener = listener.tap_io(move |_| {
            counted.connections.fetch_add(1, Ordering::Relaxed);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self {
            addr,
            shared,
            scheme: "http",
        })
    }

    /// [`start_on`](Self::start_on) over TLS, as `tls` says.
    pub(crate) async fn start_tls_on(addr: SocketAddr, tls: &TlsServe) -> Result<Self, String> {
        let acceptor = tls_acceptor(tls)?;
        let shared = Arc::new(Shared::default());
        let app = app(&shared);
        let (listener, addr) = bind(addr).await?;
        let counted = shared.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                counted.connections.fetch_add(1, Ordering::Relaxed);
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    let _ = tcp.set_nodelay(true);
                    let Ok(stream) = acceptor.accept(tcp).await else { return };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
                    let _ = builder
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            shared,
            scheme: "https",
        })
    }

    pub(crate) fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Queues one command and returns when its response POST arrived.
    async fn call(&self) -> bool {
        let n = self.shared.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.waiting).insert(n, tx);
        let command = format!(
            r#"{{"request_id":"r{n}","shard_token":"s","command_type":"jsonrpc","channel":"main","created_at":"2026-11-30T00:00:00Z","jsonrpc":{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"m"}}}}}}}}"#
        );
        lock(&self.shared.queue).push_back(command.into_bytes());
        self.shared.queued.notify_one();
        rx.await.is_ok()
    }

    /// `concurrency` callers, back to back, for `secs`.
    pub(crate) async fn load(self: &Arc<Self>, concurrency: usize, secs: Duration) -> Load {
        let cp = self.clone();
        closed_loop(concurrency, secs, move |_| {
            let cp = cp.clone();
            async move { cp.call().await }
        })
        .await
    }

    /// [`LoadCp::load`] with the polls and connections counted over it.
    pub(crate) async fn window(self: &Arc<Self>, concurrency: usize, secs: Duration) -> Window {
        let counts = || {
            [
                &self.shared.polls,
                &self.shared.connections,
                &self.shared.http2_requests,
                &self.shared.requests,
            ]
            .map(|c| c.load(Ordering::Relaxed))
        };
        let before = counts();
        let load = self.load(concurrency, secs).await;
        let after = counts();
        let delta = |i: usize| after[i] - before[i];
        Window {
            load,
            polls: delta(0),
            connections: delta(1),
            http2_requests: delta(2),
            requests: delta(3),
        }
    }
}

#[derive(serde::Deserialize)]
struct LoadQuery {
    concurrency: usize,
    millis: u64,
}

/// `bench --serve-loadcp ADDR`: the load control plane on `ADDR`, driven over a control
/// API on a second, ephemeral loopback port, so that its connections are not counted as
/// the gateway's. Prints one line, `loadcp http://ADDR control http://CONTROL`, then
/// serves until its stdin closes (the parent's end).
///
/// The control API: `GET /load?concurrency=C&millis=M` runs `C` callers for `M` ms and
/// answers a [`Window`] as JSON, once the window is over.
pub(crate) async fn serve_standalone(addr: SocketAddr, tls: Option<TlsServe>) -> Result<(), String> {
    let cp = Arc::new(match tls {
        Some(tls) => LoadCp::start_tls_on(addr, &tls).await?,
        None => LoadCp::start_on(addr).await?,
    });
    let control = axum::Router::new()
        .route(
            "/load",
            get(|State(cp): State<Arc<LoadCp>>, Query(q): Query<LoadQuery>| async move {
                axum::Json(
                    cp.window(q.concurrency.clamp(1, 1000), Duration::from_millis(q.millis))
                        .await,
                )
            }),
        )
        .with_state(cp.clone());
    let control = super::serve(control).await?;
    super::announce_and_wait(&format!("loadcp {} control http://{control}", cp.base_url())).await
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn query_u64(query: &str, name: &str) -> Option<u64> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

/// Binds `addr`; returns the listener and the address it got (port 0: an ephemeral one).
async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("load control plane on {addr}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    Ok((listener, addr))
}

fn app(shared: &Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route(&format!("/v1/tunnels/{TUNNEL}/poll"), get(poll))
        .route(&format!("/v1/tunnels/{TUNNEL}/response"), post(response))
        .with_state(shared.clone())
}

/// The acceptor of [`LoadCp::start_tls_on`]: `tls`'s certificate chain and key, ALPN
/// offering `h2` first when asked to.
fn tls_acceptor(tls: &TlsServe) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", tls.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| format!("{}: {e}", tls.key.display()))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the load control plane's certificate: {e}"))?;
    config.alpn_protocols = if tls.http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Counts a poll or response POST, and whether it came over HTTP/2.
fn count_request(shared: &Shared, version: axum::http::Version) {
    shared.requests.fetch_add(1, Ordering::Relaxed);
    if version == axum::http::Version::HTTP_2 {
        shared.http2_requests.fetch_add(1, Ordering::Relaxed);
    }
}

async fn poll(State(shared): State<Arc<Shared>>, version: axum::http::Version, RawQuery(query): RawQuery) -> Response {
    shared.polls.fetch_add(1, Ordering::Relaxed);
    count_request(&shared, version);
    let query = query.unwrap_or_default();
    let limit = query_u64(&query, "limit").unwrap_or(1).clamp(1, 25) as usize;
    let wait = Duration::from_millis(query_u64(&query, "timeout_ms").unwrap_or(1000).min(5000));
    let deadline = Instant::now() + wait;
    loop {
        let notified = shared.queued.notified();
        {
            let mut queue = lock(&shared.queue);
            if !queue.is_empty() {
                let take = limit.min(queue.len());
                let mut body = b"{\"commands\":[".to_vec();
                for (i, c) in queue.drain(..take).enumerate() {
                    if i > 0 {
                        body.push(b',');
                    }
                    body.extend_from_slice(&c);
                }
                body.extend_from_slice(b"]}");
                let left = !queue.is_empty();
                drop(queue);
                if left {
                    // Let another waiting poll take the rest.
                    shared.queued.notify_one();
                }
                return ([("content-type", "application/json")], body).into_response();
            }
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return StatusCode::NO_CONTENT.into_response();
        }
    }
}

#[derive(serde::Deserialize)]
struct Posted<'a> {
    #[serde(borrow)]
    request_id: std::borrow::Cow<'a, str>,
}

async fn response(State(shared): State<Arc<Shared>>, version: axum::http::Version, body: Bytes) -> Response {
    count_request(&shared, version);
    let n = serde_json::from_slice::<Posted<'_>>(&body)
        .ok()
        .and_then(|p| p.request_id.strip_prefix('r').and_then(|n| n.parse::<u64>().ok()));
    match n.and_then(|n| lock(&shared.waiting).remove(&n)) {
        Some(tx) => {
            let _ = tx.send(());
            ([("content-type", "application/json")], r#"{"status":"ok"}"#).into_response()
        }
        None => (
            StatusCode::NOT_FOUND,
            [("content-type", "application/json")],
            r#"{"error":{"code":"pending_request_not_found","message":"unknown request"}}"#,
        )
            .into_response(),
    }
}
