//! Headless Chromium driven over its DevTools protocol: one browser per test, in its own
//! process group and temporary profile, killed when the [`Browser`] is dropped. The
//! WebSocket client is the few lines the protocol needs (text frames, masked from the
//! client, fragmented or not from the browser); every wait is bounded.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::harness::{wait_for, ChildGuard};

/// Each protocol call's bound.
const CALL: Duration = Duration::from_secs(15);

/// The browser's start: generous, because a first start under a loaded two-core run
/// (its profile written, its zygotes forked) has been seen to take more than 15 s; a
/// browser that exits meanwhile fails at once with its stderr.
const START: Duration = Duration::from_secs(90);

pub(super) const CHROMIUM: &str = "/usr/bin/chromium";

/// A headless Chromium with one page open, and the protocol connection to that page.
/// Dropping it kills the browser's whole process group (its renderers too).
pub(super) struct Browser {
    conn: Connection,
    next_id: u64,
    /// Every protocol event received so far (`Network.requestWillBeSent` and the rest).
    pub events: Vec<Value>,
    _process: ChildGuard,
    _profile: tempfile::TempDir,
}

struct Connection {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl Browser {
    /// Starts Chromium (`--headless --no-sandbox`, a fresh profile, DevTools on a free
    /// port read from `DevToolsActivePort`) and connects to its blank page.
    pub(super) async fn launch() -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut cmd = Command::new(CHROMIUM);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,1500",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank");
        let mut process = ChildGuard::spawn("chromium", cmd);
        let port = devtools_port(&mut process, &profile.path().join("DevToolsActivePort")).await;
        let page = page_target(port).await;
        let conn = Connection::open(port, &page).await;
        let mut browser = Browser {
            conn,
            next_id: 0,
            events: Vec::new(),
            _process: process,
            _profile: profile,
        };
        browser.call("Page.enable", json!({})).await;
        browser.call("Runtime.enable", json!({})).await;
        browser
    }

    /// Sends `method` and returns its `result`; events received meanwhile are kept.
    pub(super) async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"id": id, "method": method, "params": params}).to_string();
        tokio::time::timeout(CALL, async {
            self.conn.send(&message).await;
            loop {
                let reply: Value = serde_json::from_str(&self.conn.receive().await).expect("DevTools sends JSON");
                if reply["id"] == id {
                    if let Some(error) = reply.get("error") {
                        panic!("{method}: {error}");
                    }
                    return reply["result"].clone();
                }
                self.events.push(reply);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{method}: no answer within {CALL:?}"))
    }

    /// Navigates to `url` and waits until the document has loaded.
    pub(super) async fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
        let loaded = format!("location.href === {} && document.readyState === 'complete'", json!(url));
        self.wait_true(&format!("{url} to load"), &loaded, CALL).await;
    }

    /// The value of a JavaScript expression in the page.
    pub(super) async fn eval(&mut self, expression: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// An element's text (`textContent`), or null when there is no such element.
    pub(super) async fn text(&mut self, id: &str) -> Value {
        self.eval(&format!(
            "(() => {{ const e = document.getElementById({}); return e ? e.textContent : null; }})()",
            json!(id)
        ))
        .await
    }

    /// Polls `expression` until it is `true`; panics naming `what` after `timeout`.
    pub(super) async fn wait_true(&mut self, what: &str, expression: &str, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.eval(expression).await == true {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{what}: not within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a PNG of the page as `NAME.png`: under the target directory, or with
    /// `TUNNELGATE_UPDATE_SCREENSHOTS=1` into `docs/images/` (committed). Returns the path.
    pub(super) async fn screenshot(&mut self, name: &str) -> PathBuf {
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await;
        let data = shot["data"].as_str().expect("screenshot data");
        let png = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).expect("base64 PNG");
        let dir = if std::env::var_os("TUNNELGATE_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1") {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/images")
        } else {
            target_dir().join("screenshots")
        };
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}

/// Where cargo builds: `CARGO_TARGET_DIR`, else `target/` beside the manifest.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// The DevTools port Chromium writes into its profile once it listens, within [`START`];
/// panics with the browser's stderr if it exits first.
async fn devtools_port(process: &mut ChildGuard, port_file: &std::path::Path) -> u16 {
    let deadline = tokio::time::Instant::now() + START;
    loop {
        let found = std::fs::read_to_string(port_file)
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()));
        if let Some(port) = found {
            return port;
        }
        if let Some(status) = process.try_wait() {
            panic!("chromium exited with {status}: {}", process.stderr());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {START:?} waiting for chromium's DevToolsActivePort: {}",
            process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The WebSocket path of the browser's first page (`/json/list`).
async fn page_target(port: u16) -> String {
    let url = format!("http://127.0.0.1:{port}/json/list");
    wait_for("chromium's page target", CALL, || {
        let url = url.clone();
        async move {
            let list: Value = reqwest::get(&url).await.ok()?.json().await.ok()?;
            let page = list.as_array()?.iter().find(|t| t["type"] == "page")?;
            let ws = page["webSocketDebuggerUrl"].as_str()?;
            Some(ws.split_once(&format!("127.0.0.1:{port}"))?.1.to_owned())
        }
    })
    .await
}

impl Connection {
    async fn open(port: u16, path: &str) -> Connection {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to DevTools");
        let (read, mut writer) = stream.into_split();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        writer.write_all(request.as_bytes()).await.expect("send the upgrade");
        let mut reader = BufReader::new(read);
        let mut status = String::new();
        reader.read_line(&mut status).await.expect("read the upgrade answer");
        assert!(
            status.starts_with("HTTP/1.1 101"),
            "DevTools refused the WebSocket: {status}"
        );
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).await.expect("read the upgrade headers");
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        Connection { reader, writer }
    }

    /// One masked text frame.
    async fn send(&mut self, text: &str) {
        let payload = text.as_bytes();
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut frame = vec![0x81];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.writer.write_all(&frame).await.expect("send a frame");
    }

    /// One whole text message (continuation frames joined).
    async fn receive(&mut self) -> String {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.reader.read_exact(&mut head).await.expect("read a frame head");
            let len = match head[1] & 0x7f {
                126 => u64::from(self.reader.read_u16().await.expect("length")),
                127 => self.reader.read_u64().await.expect("length"),
                n => u64::from(n),
            };
            let mut payload = vec![0u8; usize::try_from(len).unwrap()];
            self.reader.read_exact(&mut payload).await.expect("read a frame");
            match head[0] & 0x0f {
                0x8 => panic!("DevTools closed the connection"),
                0x9 | 0xa => continue,
                _ => message.extend_from_slice(&payload),
            }
            if head[0] & 0x80 != 0 {
                return String::from_utf8(message).expect("DevTools sends UTF-8");
            }
        }
    }
}
