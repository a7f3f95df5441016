//! A test rig: the in-process simulator and MCP stub, and the real `tunnelgate` binary
//! configured against them.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate::sim::{FaultScript, McpStub, NewCommand, Record, SimConfig, Simulator};

use crate::contract::validate_response_body;
use crate::harness::{free_port, Gateway};

pub const KEY: &str = "test-key-canary-K3Y";
pub const TUNNEL: &str = "tunnel_test";

pub struct Rig {
    pub sim: Simulator,
    pub stub: McpStub,
    pub dir: tempfile::TempDir,
    pub ops_port: u16,
}

/// Options beyond the defaults every rig uses.
pub struct RigOptions<'a> {
    pub strict: bool,
    /// Extra TOML appended to the gateway's configuration.
    pub extra: &'a str,
    pub post_timeout: &'a str,
    pub post_attempts: u32,
}

impl Default for RigOptions<'_> {
    fn default() -> Self {
        Self {
            strict: true,
            extra: "",
            post_timeout: "700ms",
            post_attempts: 2,
        }
    }
}

impl Rig {
    pub async fn start(faults: &str) -> Rig {
        let stub = McpStub::start(([127, 0, 0, 1], 0).into()).await.expect("stub starts");
        let mut config = SimConfig::new(TUNNEL, KEY);
        config.faults = FaultScript::from_toml_str(faults).expect("fault script parses");
        config.max_poll_wait = Duration::from_millis(500);
        config.ingress_timeout = Duration::from_secs(15);
        let sim = Simulator::start(config).await.expect("simulator starts");
        Rig {
            sim,
            stub,
            dir: tempfile::tempdir().expect("tempdir"),
            ops_port: free_port(),
        }
    }

    pub fn latch_path(&self) -> PathBuf {
        self.dir.path().join("latch.json")
    }

    /// The gateway configuration for this rig.
    pub fn config(&self, o: &RigOptions<'_>) -> String {
        format!(
            r#"
[control_plane]
base_url = "{base}"
tunnel_id = "{TUNNEL}"
api_key = "{KEY}"
poll_timeout = "1s"
post_timeout = "{post_timeout}"
post_attempts = {post_attempts}

[mcp]
max_concurrent = {max}

[mcp.channels.main]
url = "{stub}"

[strict]
enabled = {strict}
latch_file = "{latch}"
cleanup_timeout = "2s"
shutdown_grace = "1s"

[ops]
listen = "127.0.0.1:{ops}"

[telemetry]
log_format = "json"
log_level = "info"
{extra}
"#,
            base = self.sim.base_url(),
            stub = self.stub.url(),
            post_timeout = o.post_timeout,
            post_attempts = o.post_attempts,
            max = if o.strict { 1 } else { 4 },
            strict = o.strict,
            latch = self.latch_path().display(),
            ops = self.ops_port,
            extra = o.extra,
        )
    }

    pub async fn gateway(&self, o: &RigOptions<'_>) -> Gateway {
        self.gateway_with(&self.config(o)).await
    }

    /// The gateway with `main` pointing at `url` instead of the stub.
    pub async fn gateway_to(&self, url: &str, o: &RigOptions<'_>) -> Gateway {
        self.gateway_with(&self.config(o).replace(&self.stub.url(), url)).await
    }

    pub async fn gateway_with(&self, config: &str) -> Gateway {
        let mut gw = Gateway::run(config);
        gw.wait_http_ready(
            &format!("http://127.0.0.1:{}/livez", self.ops_port),
            Duration::from_secs(20),
        )
        .await;
        gw
    }

    pub fn enqueue_call(&self, tool: &str, args: Value) -> String {
        self.sim.enqueue(NewCommand::jsonrpc(json!({
            "jsonrpc": "2.0", "id": format!("rpc-{tool}"), "method": "tools/call",
            "params": {"name": tool, "arguments": args}
        })))
    }

    pub async fn wait(&self, what: &str, pred: impl Fn(&Record) -> bool) -> Record {
        self.sim
            .wait_for(what, Duration::from_secs(20), pred)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until the MCP stub has received `n` `tools/call` requests.
    pub async fn wait_stub_calls(&self, n: usize) {
        crate::harness::wait_until("the MCP stub's tools/call count", Duration::from_secs(20), || async {
            self.stub.count("tools/call") >= n
        })
        .await;
    }

    /// The gateway's Prometheus text.
    pub async fn metrics(&self) -> String {
        crate::harness::http_client()
            .get(format!("http://127.0.0.1:{}/metrics", self.ops_port))
            .send()
            .await
            .expect("metrics answer")
            .text()
            .await
            .expect("metrics text")
    }

    pub async fn status(&self) -> Value {
        crate::harness::http_client()
            .get(format!("http://127.0.0.1:{}/status", self.ops_port))
            .send()
            .await
            .expect("status answers")
            .json()
            .await
            .expect("status is JSON")
    }

    /// Every body the gateway posted must satisfy the contract.
    pub fn assert_all_bodies_valid(&self) {
        for r in self.sim.record().responses {
            validate_response_body(&r.body)
                .unwrap_or_else(|e| panic!("posted body violates the contract: {e}\n{:?}", r.body));
        }
    }
}

/// The shard token the gateway sent with its first response POST for `request_id`.
pub fn shard_token(record: &Record, request_id: &str) -> String {
    record
        .responses_for(request_id)
        .find_map(|r| r.header("x-tunnel-shard-token"))
        .unwrap_or_else(|| panic!("no response POST with a shard token for {request_id}"))
        .to_owned()
}

/// The final response the simulator recorded for `request_id` (last POST with a final type).
pub fn final_json(record: &Record, request_id: &str) -> Value {
    record
        .responses_for(request_id)
        .filter(|r| r.resp_type.as_deref() != Some("jsonrpc_notify"))
        .last()
        .and_then(|r| r.json.clone())
        .unwrap_or_else(|| panic!("no final response for {request_id}"))
}
