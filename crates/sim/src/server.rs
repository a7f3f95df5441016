//! The HTTP/1 server under the simulator: an accept loop that serves each connection
//! with hyper, so that a handler can drop its own connection (the `close` fault) and a
//! held request never blocks shutdown.
//!
//! Every connection task is on the simulator's `TaskTracker` and ends on its
//! `CancellationToken`: shutdown drops held and streaming connections at once. It serves
//! whatever router it is given (`routes`, the stub's) and imports no handler.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::Router;
use hyper::body::Incoming;
use hyper::service::{service_fn, Service};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Lets a handler end the connection its request arrived on, without a response.
#[derive(Clone, Debug)]
pub(crate) struct ConnHandle(CancellationToken);

impl ConnHandle {
    /// Drops the connection as soon as the connection task sees it.
    pub(crate) fn close(&self) {
        self.0.cancel();
    }
}

/// Accepts connections until `shutdown`, serving each with `router`; counts each
/// accepted connection in `connections`.
///
/// # Cancel safety
/// Runs as its own task; stops accepting at once on `shutdown` (cancel-safe `accept`).
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    (shutdown, tracker): (CancellationToken, TaskTracker),
    connections: Arc<AtomicU64>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            // cancel-safe: `accept` loses no connection when dropped.
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "sim accept failed");
                continue;
            }
        };
        connections.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        tracker.spawn(connection(stream, router.clone(), shutdown.clone()));
    }
}

async fn connection(stream: tokio::net::TcpStream, router: Router, shutdown: CancellationToken) {
    let kill = CancellationToken::new();
    let handle = ConnHandle(kill.clone());
    let tower = TowerToHyperService::new(router);
    let svc = service_fn(move |mut req: http::Request<Incoming>| {
        req.extensions_mut().insert(handle.clone());
        tower.call(req)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // No timer: idle keep-alive connections stay open, as the gateway's pool expects.
    builder.header_read_timeout(None);
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        biased;
        // cancel-safe (all arms): dropping the connection is the point; the socket closes.
        () = shutdown.cancelled() => {}
        () = kill.cancelled() => {}
        r = conn => {
            if let Err(e) = r {
                tracing::trace!(error = %e, "sim connection ended with an error");
            }
        }
    }
}

/// Keeps `Infallible` in the signature of handlers that never answer.
pub(crate) async fn never() -> Infallible {
    std::future::pending().await
}
