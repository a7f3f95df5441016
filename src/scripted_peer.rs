//! A scripted raw HTTP/1.1 server on loopback, for tests that need byte-level control of
//! a peer: an MCP server behind the real HTTP transport, or a control plane behind the
//! real control client. Strict: dropping it fails the test when a step of its script went
//! unused or a request came that the script had no step for.
//!
//! Test-only (declared under `#[cfg(test)]`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// Bound on a probe of [`Server::settled`].
const TEST_BOUND: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Header lines in wire order, names lowercased.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Seen {
    /// The body as text (lossy), for assertions on what was posted.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub(crate) fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// What the server does after reading one request.
pub(crate) enum Act {
    /// Write these bytes, then close.
    Reply(Vec<u8>),
    /// Write each part with a short pause between (separate TCP segments), then close.
    Parts(Vec<Vec<u8>>),
    /// Never answer; keep the connection open.
    Hang,
    /// Write these bytes, then keep the connection open without another.
    Stall(Vec<u8>),
    /// Close the connection without a byte.
    Close,
    /// Reset the connection (RST).
    Reset,
}

/// The shared state of one scripted server: its script, what it saw, and how far it got.
pub(crate) struct Script {
    seen: Mutex<Vec<Seen>>,
    acts: Mutex<VecDeque<Act>>,
    /// Requests that arrived after the script ran out (each answered `599 Unscripted`).
    unscripted: AtomicUsize,
    /// Connections whose request was read, or that ended before one came.
    read: tokio::sync::watch::Sender<usize>,
    /// Local addresses of [`Server::settled`] probes, which the accept loop sets aside.
    probes: Mutex<Vec<SocketAddr>>,
}

/// A scripted raw HTTP server. Strict: dropping it fails the test when a step of its
/// script went unused or a request came that the script had no step for.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    script: Arc<Script>,
    /// Connections accepted (probes of [`Server::settled`] aside).
    pub(crate) accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
        if std::thread::panicking() {
            return;
        }
        let unused = self.script.acts.lock().unwrap().len();
        let unscripted = self.script.unscripted.load(Ordering::SeqCst);
        assert!(
            unused == 0 && unscripted == 0,
            "the server script was not followed: {unused} step(s) unused, {unscripted} unscripted request(s)"
        );
    }
}

impl Server {
    pub(crate) async fn start(acts: Vec<Act>) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), acts).await
    }

    pub(crate) async fn start_on(addr: SocketAddr, acts: Vec<Act>) -> Self {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Script {
            seen: Mutex::new(Vec::new()),
            acts: Mutex::new(VecDeque::from(acts)),
            unscripted: AtomicUsize::new(0),
            read: tokio::sync::watch::Sender::new(0),
            probes: Mutex::new(Vec::new()),
        });
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(accept_loop(listener, script.clone(), accepted.clone()));
        Self {
            addr,
            script,
            accepted,
            task,
        }
    }

    /// A server whose whole script is one reply, built by [`reply`].
    pub(crate) async fn answering(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Self {
        Self::start(vec![Act::Reply(reply(status, headers, body))]).await
    }

    /// A server whose whole script is one event stream: the SSE head, then each part
    /// as its own segment, then the close.
    pub(crate) async fn sse(parts: Vec<Vec<u8>>) -> Self {
        let mut all = vec![sse_head(&[])];
        all.extend(parts);
        Self::start(vec![Act::Parts(all)]).await
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.script.seen.lock().unwrap().clone()
    }

    /// Returns once every connection opened before this call has been accepted and its
    /// request read (or its end seen): a probe connection queues behind them (the accept
    /// queue is first in, first out) and is answered only then. After it, what the server
    /// saw is final for everything that came before: an explicit signal, not a pause.
    pub(crate) async fn settled(&self) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        self.script.probes.lock().unwrap().push(socket.local_addr().unwrap());
        let mut probe = timeout(TEST_BOUND, socket.connect(self.addr))
            .await
            .expect("the probe connects")
            .unwrap();
        let mut byte = [0u8; 1];
        timeout(TEST_BOUND, probe.read_exact(&mut byte))
            .await
            .expect("the server settles")
            .unwrap();
    }
}

async fn accept_loop(listener: TcpListener, script: Arc<Script>, accepted: Arc<AtomicUsize>) {
    loop {
        let Ok((mut stream, peer)) = listener.accept().await else {
            return;
        };
        let is_probe = {
            let mut probes = script.probes.lock().unwrap();
            let at = probes.iter().position(|a| *a == peer);
            at.map(|i| probes.swap_remove(i)).is_some()
        };
        if is_probe {
            let before = accepted.load(Ordering::SeqCst);
            let mut read = script.read.subscribe();
            tokio::spawn(async move {
                let _ = read.wait_for(|n| *n >= before).await;
                let _ = stream.write_all(b"!").await;
            });
            continue;
        }
        accepted.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(handle(stream, script.clone()));
    }
}

async fn handle(mut stream: TcpStream, script: Arc<Script>) {
    let request = read_request(&mut stream).await;
    let act = request.map(|request| {
        script.seen.lock().unwrap().push(request);
        script.acts.lock().unwrap().pop_front()
    });
    script.read.send_modify(|n| *n += 1);
    let Some(act) = act else {
        return;
    };
    match act {
        Some(Act::Reply(bytes)) => {
            let _ = stream.write_all(&bytes).await;
            let _ = stream.shutdown().await;
        }
        Some(Act::Parts(parts)) => {
            for part in parts {
                if stream.write_all(&part).await.is_err() {
                    return;
                }
                let _ = stream.flush().await;
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            let _ = stream.shutdown().await;
        }
        Some(Act::Stall(bytes)) => {
            let _ = stream.write_all(&bytes).await;
            std::future::pending::<()>().await;
        }
        Some(Act::Hang) => {
            // Hold the socket until the test drops the runtime.
            std::future::pending::<()>().await;
        }
        Some(Act::Close) => drop(stream),
        Some(Act::Reset) => {
            let _ = stream.set_zero_linger();
            drop(stream);
        }
        None => {
            script.unscripted.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(&reply("599 Unscripted", &[], b"")).await;
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        let n = stream.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut start = lines.next()?.split(' ');
    let (method, path) = (start.next()?.to_owned(), start.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap_or(0));
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    Some(Seen {
        method,
        path,
        headers,
        body,
    })
}

/// A whole response with `Content-Length`.
pub(crate) fn reply(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A response head whose body runs until the connection closes.
pub(crate) fn head(status: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.into_bytes()
}

pub(crate) fn sse_head(extra: &[(&str, &str)]) -> Vec<u8> {
    let mut headers = vec![("Content-Type", "text/event-stream")];
    headers.extend_from_slice(extra);
    head("200 OK", &headers)
}
