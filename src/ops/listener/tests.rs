//! The listener's bounds against real loopback sockets, in real time.

use std::time::Duration;

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use super::*;

const BOUND: Duration = Duration::from_secs(5);

async fn listening() -> (String, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = CancellationToken::new();
    let router = Router::new().route("/livez", get(|| async { "ok\n" }));
    tokio::spawn(serve(listener, router, stop.clone()));
    (addr, stop)
}

/// Writes `request` and reads until the server closes; the answer's text.
async fn exchange(addr: &str, request: &[u8]) -> String {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = timeout(BOUND, conn.read_to_end(&mut answer))
        .await
        .expect("the server closes");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Reads until end of stream (or a reset); how long that took.
async fn closed_after(conn: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 256];
    let read = timeout(BOUND, conn.read(&mut buf))
        .await
        .expect("closed within the bound");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    started.elapsed()
}

#[tokio::test]
async fn one_connection_beyond_the_limit_is_closed_at_once_and_the_others_are_kept() {
    let (addr, stop) = listening().await;
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(&addr).await.unwrap();
    let took = closed_after(&mut extra).await;
    assert!(took < HEADER_READ_TIMEOUT / 2, "closed after {took:?}");
    // A connection within the limit is served.
    let first = held.first_mut().unwrap();
    first
        .write_all(b"GET /livez HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = timeout(BOUND, first.read(&mut buf)).await.unwrap().unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    stop.cancel();
}

#[tokio::test]
async fn a_half_open_connection_is_closed_at_the_header_read_timeout() {
    let (addr, stop) = listening().await;
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let mut partial = TcpStream::connect(&addr).await.unwrap();
    partial.write_all(b"GET /livez HTTP/1.1\r\nHost: t\r\n").await.unwrap();
    for conn in [&mut silent, &mut partial] {
        let took = closed_after(conn).await;
        assert!(took <= HEADER_READ_TIMEOUT + Duration::from_secs(1), "{took:?}");
    }
    // Both were open for (about) the timeout: not closed at once.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    let took = closed_after(&mut idle).await;
    assert!(took >= HEADER_READ_TIMEOUT - Duration::from_millis(300), "{took:?}");
    stop.cancel();
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_after_the_idle_bound() {
    let (addr, stop) = listening().await;
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    conn.write_all(b"GET /livez HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 256];
    let n = timeout(BOUND, conn.read(&mut buf)).await.unwrap().unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let took = closed_after(&mut conn).await;
    assert!(took >= HEADER_READ_TIMEOUT - Duration::from_millis(300), "{took:?}");
    stop.cancel();
}

#[tokio::test]
async fn bodies_and_oversized_heads_are_refused() {
    let (addr, stop) = listening().await;
    let body = exchange(
        &addr,
        b"GET /livez HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await;
    assert!(body.starts_with("HTTP/1.1 413"), "{body}");
    let chunked = exchange(
        &addr,
        b"GET /livez HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
    let long = format!(
        "GET /livez HTTP/1.1\r\nHost: t\r\nX-Long: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES + 1)
    );
    let head = exchange(&addr, long.as_bytes()).await;
    assert!(head.starts_with("HTTP/1.1 431"), "{head}");
    let ok = exchange(&addr, b"GET /livez HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").await;
    assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok\n"), "{ok}");
    stop.cancel();
}

/// docs/deploying.md ("Descriptor budget") states the limit and the descriptors the
/// listener holds at most (`tests/it/ops_flood.rs` reads the limit from there).
#[test]
fn the_deployment_guide_states_the_connection_limit_and_the_descriptor_bound() {
    let guide = include_str!("../../../docs/deploying.md");
    let guide = guide.split_whitespace().collect::<Vec<_>>().join(" ");
    for stated in [
        format!("at most {MAX_CONNECTIONS} connections at a time (`MAX_CONNECTIONS` in `src/ops/listener.rs`;"),
        format!("So it holds at most {} descriptors", 1 + MAX_CONNECTIONS + 1),
    ] {
        assert!(guide.contains(&stated), "docs/deploying.md does not say {stated:?}");
    }
}
