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
//! [`serve_standalone`]), for `scripts/bench --external`.

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
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Vec<u8>>>,
    queued: Notify,
    waiting: Mutex<HashMap<u64, oneshot::Sender<()>>>,
    next: AtomicU64,
    polls: AtomicU64,
    connections: AtomicU64,
}

/// A running load control plane on loopback.
pub(crate) struct LoadCp {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl LoadCp {
    pub(crate) async fn start() -> Result<Self, String> {
        Self::start_on(([127, 0, 0, 1], 0).into()).await
    }

    /// Binds `addr` (port 0 for an ephemeral one) and serves there.
    pub(crate) async fn start_on(addr: SocketAddr) -> Result<Self, String> {
        let shared = Arc::new(Shared::default());
        let app = axum::Router::new()
            .route(&format!("/v1/tunnels/{TUNNEL}/poll"), get(poll))
            .route(&format!("/v1/tunnels/{TUNNEL}/response"), post(response))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("load control plane on {addr}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let counted = shared.clone();
        let listener = listener.tap_io(move |_| {
            counted.connections.fetch_add(1, Ordering::Relaxed);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { addr, shared })
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://{}", self.addr)
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
            (
                self.shared.polls.load(Ordering::Relaxed),
                self.shared.connections.load(Ordering::Relaxed),
            )
        };
        let (polls, connections) = counts();
        let load = self.load(concurrency, secs).await;
        let (polls_after, connections_after) = counts();
        Window {
            load,
            polls: polls_after - polls,
            connections: connections_after - connections,
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
pub(crate) async fn serve_standalone(addr: SocketAddr) -> Result<(), String> {
    let cp = Arc::new(LoadCp::start_on(addr).await?);
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

async fn poll(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    shared.polls.fetch_add(1, Ordering::Relaxed);
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

async fn response(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
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
