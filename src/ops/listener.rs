//! The ops listener's connections, bounded so that a flood of local connections cannot
//! take descriptors from the command path: at most [`MAX_CONNECTIONS`] at a time (one
//! more is accepted and closed at once), each with a header-read timeout that is also
//! its keep-alive idle bound, a lifetime bound, a bound on the request head, and no
//! request body at all (every route is a `GET`).
//!
//! With these, the listener holds at most `1 + MAX_CONNECTIONS + 1` descriptors: the
//! listening socket, the served connections and the one being refused. Everything else
//! of the process's limit is the command path's (docs/deploying.md, "Descriptor budget").
//!
//! One task: connections are futures driven by the serving loop itself, not spawned,
//! so stopping the loop drops every one of them and nothing outlives it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::stream::{FuturesUnordered, StreamExt};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Connections served at once. Probes, a scraper and an operator's `curl` need a handful;
/// one beyond this is accepted and closed at once, so it holds a descriptor only for the
/// moment of the accept.
pub(crate) const MAX_CONNECTIONS: usize = 32;

/// How long a connection may take to send a whole request head. hyper starts this timer
/// whenever it waits for a head, on a new connection and between requests on a kept-alive
/// one, so it is also the keep-alive idle timeout: an idle or half-open connection is
/// closed after it.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest any one connection lives, however busy (a client reading a response
/// slowly, or one request after another): then it is closed.
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// The request head's size bound (hyper's read buffer; its minimum is 8 KiB). A longer
/// head is answered `431` and the connection closed.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The number of request headers allowed.
pub(crate) const MAX_HEADERS: usize = 64;

/// The request body bound: none. A request that declares one is answered `413` and the
/// connection closed, unread.
pub(crate) const MAX_BODY_BYTES: u64 = 0;

/// The pause after an accept failed for want of descriptors (`EMFILE`, `ENFILE`), so the
/// loop does not spin while the process is exhausted.
const EXHAUSTED_ACCEPT_PAUSE: Duration = Duration::from_millis(100);

type Connection = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Serves `router` on `listener` within the bounds above until `stop`. Returns an error
/// only when accepting fails in a way that is not transient.
pub(super) async fn serve(listener: TcpListener, router: Router, stop: CancellationToken) -> std::io::Result<()> {
    let router = router.layer(axum::middleware::from_fn(refuse_bodies));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let mut connections: FuturesUnordered<Connection> = FuturesUnordered::new();
    // Each condition is logged once when it begins, not once per connection or retry.
    let mut at_limit = false;
    let mut exhausted = false;
    loop {
        tokio::select! {
            biased;
            // cancel-safe: waiting on a token; dropping the connections closes them.
            () = stop.cancelled() => return Ok(()),
            // cancel-safe: a connection future ends by itself; `next` holds no state.
            Some(()) = connections.next(), if !connections.is_empty() => {}
            // cancel-safe: `TcpListener::accept` is cancel-safe.
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if connections.len() >= MAX_CONNECTIONS => {
                    drop(stream);
                    if !at_limit {
                        at_limit = true;
                        tracing::warn!(limit = MAX_CONNECTIONS, "ops listener at its connection limit: closing new connections at once");
                    }
                }
                Ok((stream, peer)) => {
                    at_limit = false;
                    exhausted = false;
                    // The peer's address, for the access rules (`ConnectInfo`, as axum's own server gives it).
                    let router = router.clone().layer(axum::Extension(ConnectInfo(peer)));
                    let service = TowerToHyperService::new(router);
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    connections.push(Box::pin(async move {
                        // Either end closes the connection: its own end, or the bound.
                        let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
                    }));
                }
                Err(e) if crate::descriptors::is_exhaustion(&e) => {
                    if !exhausted {
                        exhausted = true;
                        tracing::warn!(error = %e, "ops listener cannot accept: {}", crate::descriptors::EXHAUSTION_WORDS);
                    }
                    pause(&stop, &mut connections).await;
                }
                // A connection reset before it was accepted, and the like: transient.
                Err(e) if is_transient(&e) => tracing::debug!(error = %e, "ops listener: accept failed"),
                Err(e) => return Err(e),
            },
        }
    }
}

/// Waits [`EXHAUSTED_ACCEPT_PAUSE`] (or until `stop`) while the served connections go on.
async fn pause(stop: &CancellationToken, connections: &mut FuturesUnordered<Connection>) {
    let until = tokio::time::Instant::now() + EXHAUSTED_ACCEPT_PAUSE;
    loop {
        tokio::select! {
            biased;
            // cancel-safe: waiting on a token.
            () = stop.cancelled() => return,
            // cancel-safe: a timer.
            () = tokio::time::sleep_until(until) => return,
            // cancel-safe: as in `serve`.
            Some(()) = connections.next(), if !connections.is_empty() => {}
        }
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionAborted | K::ConnectionReset | K::Interrupted | K::WouldBlock | K::TimedOut
    ) || matches!(e.raw_os_error(), Some(libc::EPROTO | libc::EPERM))
}

/// Every route is a `GET`: a request with a body is refused unread, and the connection
/// closed rather than drained.
async fn refuse_bodies(request: Request<Body>, next: Next) -> Response {
    let headers = request.headers();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().parse::<u64>().unwrap_or(u64::MAX));
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    if chunked || declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(header::CONNECTION, "close")],
            "the ops listener takes no request bodies\n",
        )
            .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests;
