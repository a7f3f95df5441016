//! Simulator tests: real sockets on loopback, `reqwest` as the client, every wait bounded.

mod bounds;
mod control;
mod faults;
mod ingress;
mod schema;
mod script;
mod stub;

use std::time::Duration;

use serde_json::{json, Value};

use super::{FaultScript, SimConfig, Simulator};

/// A well-formed tunnel id (`tunnel_` + 32 lowercase alphanumerics).
pub(super) const TUNNEL: &str = "tunnel_0123456789abcdefghijklmnopqrstuv";
pub(super) const KEY: &str = "sk-sim-test";
/// Upper bound on any single wait in these tests.
pub(super) const WAIT: Duration = Duration::from_secs(5);

pub(super) async fn start(faults: &str) -> (Simulator, Client) {
    let mut config = SimConfig::new(TUNNEL, KEY);
    config.faults = FaultScript::from_toml_str(faults).expect("test fault script parses");
    start_with(config).await
}

pub(super) async fn start_with(config: SimConfig) -> (Simulator, Client) {
    let sim = Simulator::start(config).await.expect("the simulator binds loopback");
    let client = Client::new(&sim.base_url());
    (sim, client)
}

/// A control-plane client playing the gateway.
pub(super) struct Client {
    pub(super) http: reqwest::Client,
    pub(super) base: String,
}

impl Client {
    pub(super) fn new(base: &str) -> Self {
        let http = reqwest::Client::builder()
            .timeout(WAIT)
            .build()
            .expect("a reqwest client builds");
        Self {
            http,
            base: base.to_owned(),
        }
    }

    pub(super) fn url(&self, tail: &str) -> String {
        format!("{}/v1/tunnels/{TUNNEL}/{tail}", self.base)
    }

    /// `GET .../poll?{query}` with the bearer key.
    pub(super) async fn poll(&self, query: &str) -> reqwest::Response {
        self.http
            .get(self.url(&format!("poll?{query}")))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("poll is answered")
    }

    /// Polls once (25 at most, waiting up to 2 s) and returns the commands (none on 204).
    pub(super) async fn commands(&self) -> Vec<Value> {
        let resp = self.poll("limit=25&timeout_ms=2000").await;
        if resp.status() == 204 {
            return Vec::new();
        }
        assert_eq!(resp.status(), 200);
        let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        body["commands"].as_array().unwrap().clone()
    }

    /// Polls until exactly one command arrives (bounded).
    pub(super) async fn one_command(&self) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let mut cmds = self.commands().await;
            if let Some(cmd) = cmds.pop() {
                assert!(cmds.is_empty(), "expected one command");
                return cmd;
            }
            assert!(tokio::time::Instant::now() < deadline, "no command arrived");
        }
    }

    /// `POST .../response` with the shard token and a JSON body.
    pub(super) async fn respond(&self, shard: &str, body: &Value) -> reqwest::Response {
        self.respond_bytes(Some(shard), "application/json", serde_json::to_vec(body).unwrap())
            .await
    }

    pub(super) async fn respond_bytes(
        &self,
        shard: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
    ) -> reqwest::Response {
        self.send_response(shard, content_type, body)
            .await
            .expect("response POST is answered")
    }

    pub(super) async fn send_response(
        &self,
        shard: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
    ) -> reqwest::Result<reqwest::Response> {
        let mut req = self
            .http
            .post(self.url("response"))
            .bearer_auth(KEY)
            .header("content-type", content_type)
            .body(body);
        if let Some(shard) = shard {
            req = req.header("x-tunnel-shard-token", shard);
        }
        req.send().await
    }
}

/// Request id and shard token of a polled command.
pub(super) fn ids(cmd: &Value) -> (String, String) {
    (
        cmd["request_id"].as_str().unwrap().to_owned(),
        cmd["shard_token"].as_str().unwrap().to_owned(),
    )
}

pub(super) fn final_body(request_id: &str, id: i64) -> Value {
    json!({
        "request_id": request_id, "channel": "main",
        "resp_json": { "jsonrpc": "2.0", "id": id, "result": {} },
        "resp_headers": { "Content-Type": ["application/json"] },
        "resp_code": 200, "resp_type": "jsonrpc_response"
    })
}

pub(super) fn notify_body(request_id: &str) -> Value {
    json!({
        "request_id": request_id, "channel": "main",
        "resp_json": { "jsonrpc": "2.0", "method": "notifications/progress", "params": { "progress": 1 } },
        "resp_headers": {}, "resp_code": 200, "resp_type": "jsonrpc_notify"
    })
}

pub(super) fn call(id: i64, tool: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": tool, "arguments": {} } })
}

/// Sends `head` (request line and headers) announcing a 1 MiB body, sends only its first
/// bytes, and returns the status line of the answer: it must come while the rest of the
/// body is still missing, that is, without the body being read.
pub(super) async fn status_before_the_body(sim: &Simulator, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let request = format!(
        "{head}\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{{\"request_id\":"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut answer))
        .await
        .expect("answered without waiting for the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    answer.lines().next().unwrap_or_default().to_owned()
}

/// The `error.code` of an `APIErrorResponse` body.
pub(super) async fn error_code(resp: reqwest::Response) -> String {
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).expect("error bodies are JSON");
    body["error"]["code"]
        .as_str()
        .expect("error.code is a string")
        .to_owned()
}
