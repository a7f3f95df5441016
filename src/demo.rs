//! `tunnelgate demo`: the whole path on embedded defaults, in one process, with no
//! network beyond loopback and no credentials.
//!
//! It starts the simulator and the embedded MCP stub, runs a strict gateway, sends a few
//! MCP calls through the simulator's ingress, makes one private token exchange through
//! channel `harpoon` (the stub's token endpoint standing for a private identity provider),
//! shows `/status`, then runs a drill: the simulator holds the acknowledgement of one
//! call, the latch fires, and the demo shows what an operator sees (category, exit code, latch file, status), proves a restart
//! refuses to run, clears the latch and cleans up.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tunnelgate_sim::{FaultScript, FaultScriptError, McpStub, SimConfig, Simulator};

use crate::app::{Gateway, GatewayError, RunOutcome};
use crate::config::{Config, ConfigError};
use crate::protocol::McpRevision;
use crate::strict::latch_file::{self, LatchFileError};
use crate::telemetry::logging;

const TUNNEL: &str = "tunnel_demo";
const KEY: &str = "demo-key";

/// How long the gateway may take to bind its ops listener.
const START_BOUND: Duration = Duration::from_secs(10);
/// How long the gateway may take to stop after the drill latched it.
const STOP_BOUND: Duration = Duration::from_secs(15);

/// Why the demo could not finish. Each message names the step that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error("cannot create the demo directory {path}: {source}")]
    WorkDir { path: PathBuf, source: std::io::Error },
    #[error("cannot start the embedded MCP stub: {0}")]
    Stub(#[source] std::io::Error),
    #[error("cannot start the simulator: {0}")]
    Simulator(#[source] std::io::Error),
    #[error("the drill's fault script is invalid (a bug in the demo): {0}")]
    Faults(#[source] FaultScriptError),
    #[error("the demo's gateway configuration is invalid (a bug in the demo): {0}")]
    Config(#[source] ConfigError),
    #[error("the gateway could not start: {0}")]
    Gateway(#[source] GatewayError),
    #[error("the gateway did not open its ops listener within {}s", START_BOUND.as_secs())]
    GatewayNotStarted,
    #[error("the gateway did not stop within {}s of the latch", STOP_BOUND.as_secs())]
    GatewayNotStopped,
    #[error("the gateway task ended abnormally: {0}")]
    GatewayTask(#[source] tokio::task::JoinError),
    #[error("the drill should have latched, but the gateway stopped cleanly")]
    NotLatched,
    #[error("cannot build the demo's HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    #[error("the MCP call through the simulator's ingress failed: {0}")]
    Ingress(#[source] reqwest::Error),
    #[error("the reply through the simulator's ingress is not a JSON-RPC message: {0}")]
    ReplyNotJson(#[source] serde_json::Error),
    #[error("cannot read the gateway's /status: {0}")]
    Status(#[source] reqwest::Error),
    #[error("cannot read the latch file {path}: {source}")]
    ReadLatch { path: PathBuf, source: std::io::Error },
    #[error("cannot clear the latch: {0}")]
    ClearLatch(#[source] LatchFileError),
}

const DRILL_FAULTS: &str = r#"
# The drill: hold every acknowledgement of the `add` call's terminal response.
[[rule]]
match = { tool = "add", resp_type = "terminal" }
action = "hold"

# A `ping` queued behind it is refused after the latch; its "not executed" answer is
# slowed down so that /status can be read while the gateway cleans up.
[[rule]]
match = { method = "ping" }
delay = "600ms"
"#;

pub(crate) async fn run(keep_dir: bool) -> Result<u8, DemoError> {
    // Quiet by default; `RUST_LOG=info tunnelgate demo` shows the gateway's own log.
    let telemetry = match std::env::var("RUST_LOG") {
        Ok(filter) => Some(logging::init(logging::Format::Text, &filter, None, &Default::default()).await),
        Err(_) => None,
    };
    let dir = tempfile_dir()?;
    let latch_path = dir.join("latch.json");
    let result = tour(&latch_path).await;
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    if keep_dir {
        println!("\nkept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn tour(latch_path: &Path) -> Result<u8, DemoError> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let stub = McpStub::start(loopback).await.map_err(DemoError::Stub)?;
    let mut sim_config = SimConfig::new(TUNNEL, KEY);
    sim_config.faults = FaultScript::from_toml_str(DRILL_FAULTS).map_err(DemoError::Faults)?;
    sim_config.ingress_timeout = Duration::from_secs(20);
    sim_config.max_poll_wait = Duration::from_secs(2);
    let sim = Simulator::start(sim_config).await.map_err(DemoError::Simulator)?;
    let config = demo_config(&sim.base_url(), &stub.url(), latch_path)?;

    step("1. Started: control-plane simulator, embedded MCP stub, strict gateway");
    println!("   simulator   {}", sim.base_url());
    println!("   MCP ingress {}", sim.ingress_url());
    println!("   MCP stub    {}", stub.url());
    let (ops, running) = start_gateway(&config).await?;
    println!("   gateway ops http://{ops}/status (strict mode, one command at a time)");

    step("2. MCP calls through the tunnel (client -> simulator -> gateway -> MCP server)");
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .map_err(DemoError::HttpClient)?;
    let ingress = sim.ingress_url();
    healthy_calls(&client, &ingress).await?;

    step("3. Private OAuth: a token exchange through channel harpoon (the OAuth shim's path)");
    private_token_exchange(&client, &ingress).await?;

    step("4. /status while healthy");
    let doc = get_status(&client, ops).await?;
    print_status(&doc);

    step("5. Drill: the simulator holds the acknowledgement of a tools/call add");
    println!(
        "   the gateway posts the result, gets no answer within post_timeout, retries the identical bytes, and latches"
    );
    drill(&client, &ingress, ops, &stub, running).await?;
    print_latch_file(latch_path)?;

    step("6. Restart with the latch in place: the gateway refuses to run (exit 89)");
    let before = sim.record().polls.len();
    let again = Gateway::new(config.clone()).run().await.map_err(DemoError::Gateway)?;
    println!(
        "   exit code {}; polls made by the refused gateway: {}",
        again.exit_code(),
        sim.record().polls.len() - before
    );

    step("7. Operator clears the latch (`tunnelgate latch clear`)");
    latch_file::clear(latch_path).map_err(DemoError::ClearLatch)?;
    println!("   cleared; a strict gateway would now start normally");

    sim.shutdown().await;
    stub.shutdown().await;
    step("Demo finished: every outcome above was measured, not scripted.");
    Ok(0)
}

/// The gateway's run, as a task.
type Running = tokio::task::JoinHandle<Result<RunOutcome, GatewayError>>;

/// Starts the gateway and waits, bounded, for its ops listener.
async fn start_gateway(config: &Config) -> Result<(SocketAddr, Running), DemoError> {
    let mut gateway = Gateway::new(config.clone());
    let ops = gateway.ops_addr();
    let running = tokio::spawn(gateway.run());
    match tokio::time::timeout(START_BOUND, ops).await {
        Ok(Ok(addr)) => Ok((addr, running)),
        Err(_) => Err(DemoError::GatewayNotStarted),
        // The gateway dropped the sender: its run ended before the listener was up.
        Ok(Err(_)) => Err(match running.await {
            Ok(Err(e)) => DemoError::Gateway(e),
            Ok(Ok(_)) => DemoError::GatewayNotStarted,
            Err(e) => DemoError::GatewayTask(e),
        }),
    }
}

/// Step 2: initialize, the initialized notification, tools/list and two tool calls.
async fn healthy_calls(client: &reqwest::Client, ingress: &str) -> Result<(), DemoError> {
    let init = mcp(
        client,
        ingress,
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":McpRevision::V2025_06_18.as_str(),"capabilities":{},"clientInfo":{"name":"tunnelgate-demo","version":"1"}}}),
    )
    .await?;
    println!(
        "   initialize          -> server {}",
        init["result"]["serverInfo"]["name"].as_str().unwrap_or("?")
    );
    let status = client
        .post(ingress)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .send()
        .await
        .map_err(DemoError::Ingress)?
        .status();
    println!("   notifications/initialized -> HTTP {status} (notify_ack)");
    let tools = mcp(client, ingress, json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await?;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    println!("   tools/list          -> {}", names.join(", "));
    let echo = mcp(client, ingress, json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello through the tunnel"}}})).await?;
    println!(
        "   tools/call echo     -> {}",
        echo["result"]["content"][0]["text"].as_str().unwrap_or("?")
    );
    let slow = mcp(client, ingress, json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"slow","arguments":{"ms":300},"_meta":{"progressToken":"p1"}}})).await?;
    println!(
        "   tools/call slow     -> {} (progress notifications forwarded first)",
        slow["result"]["content"][0]["text"].as_str().unwrap_or("?")
    );
    Ok(())
}

/// Step 3: one private token exchange through channel `harpoon`, as the hosted service's
/// OAuth shim makes it: `list_targets`, then `call_target` `POST` of a
/// `client_credentials` request to the private token endpoint. The token is not shown.
async fn private_token_exchange(client: &reqwest::Client, ingress: &str) -> Result<(), DemoError> {
    let harpoon = format!("{ingress}?channel=harpoon");
    let list = mcp(
        client,
        &harpoon,
        json!({"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"list_targets","arguments":{}}}),
    )
    .await?;
    let labels: Vec<&str> = list["result"]["structuredContent"]["targets"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x["label"].as_str()).collect())
        .unwrap_or_default();
    println!("   harpoon list_targets -> {}", labels.join(", "));
    let call = json!({"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"call_target","arguments":{
        "label":"demo-idp-token","method":"POST",
        "headers":{"Content-Type":"application/x-www-form-urlencoded","Authorization":"Basic ZGVtby1jbGllbnQ6ZGVtby1zZWNyZXQ="},
        "body":"grant_type=client_credentials"}}});
    let answer = mcp(client, &harpoon, call).await?;
    let result = &answer["result"]["structuredContent"];
    let body = result["body_base64"]
        .as_str()
        .and_then(|b| base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b).ok())
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .unwrap_or(Value::Null);
    let token_len = body["access_token"].as_str().map_or(0, str::len);
    println!(
        "   harpoon call_target POST demo-idp-token -> HTTP {}, a {} token of {token_len} characters (not shown)",
        result["status_code"],
        body["token_type"].as_str().unwrap_or("?"),
    );
    Ok(())
}

/// Step 5: a tools/call add whose acknowledgement the simulator holds, and a ping queued
/// behind it; shows `/status` once latched, then how the gateway ended.
async fn drill(
    client: &reqwest::Client,
    ingress: &str,
    ops: SocketAddr,
    stub: &McpStub,
    running: Running,
) -> Result<(), DemoError> {
    let calls_before = stub.count("tools/call");
    let drill = tokio::spawn({
        let client = client.clone();
        let ingress = ingress.to_owned();
        async move {
            let _ = client.post(&ingress).header("accept", "application/json, text/event-stream")
                .json(&json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}))
                .send().await;
        }
    });
    for _ in 0..200 {
        if stub.count("tools/call") > calls_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let queued = tokio::spawn({
        let client = client.clone();
        let ingress = ingress.to_owned();
        async move { mcp(&client, &ingress, json!({"jsonrpc":"2.0","id":6,"method":"ping"})).await }
    });
    if let Some(doc) = latched_status(client, ops).await {
        println!("   /status during cleanup:");
        print_status(&doc);
    }
    let outcome = tokio::time::timeout(STOP_BOUND, running)
        .await
        .map_err(|_| DemoError::GatewayNotStopped)?
        .map_err(DemoError::GatewayTask)?
        .map_err(DemoError::Gateway)?;
    drill.abort();
    match queued.await {
        Ok(Ok(answer)) => println!(
            "   a ping queued behind the drill never reached the MCP server; its caller was told: \"{}\"",
            answer["error"]["message"].as_str().unwrap_or("?")
        ),
        Ok(Err(e)) => println!("   the ping queued behind the drill got no answer: {e}"),
        Err(e) => println!("   the ping queued behind the drill got no answer: {e}"),
    }
    let RunOutcome::Fatal(fatal) = &outcome else {
        return Err(DemoError::NotLatched);
    };
    println!(
        "   gateway exited: category={} exit_code={} (the binary exits with this code)",
        fatal.category.as_str(),
        fatal.exit_code
    );
    println!(
        "   MCP server received the drill's tools/call {} time(s): the retries re-posted the result, never the request",
        stub.count("tools/call") - calls_before
    );
    Ok(())
}

/// `/status` once it shows a fatal cause, polled for a bounded time.
async fn latched_status(client: &reqwest::Client, ops: SocketAddr) -> Option<Value> {
    for _ in 0..200 {
        if let Ok(doc) = get_status(client, ops).await {
            if !doc["fatal"].is_null() {
                return Some(doc);
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

fn print_latch_file(latch_path: &Path) -> Result<(), DemoError> {
    println!("   latch file {}:", latch_path.display());
    let latch = std::fs::read_to_string(latch_path).map_err(|source| DemoError::ReadLatch {
        path: latch_path.to_owned(),
        source,
    })?;
    for line in latch.lines() {
        println!("     {line}");
    }
    Ok(())
}

fn demo_config(sim: &str, stub: &str, latch: &Path) -> Result<Config, DemoError> {
    let toml = format!(
        r#"
[control_plane]
base_url = "{sim}"
tunnel_id = "{TUNNEL}"
api_key = "{KEY}"
poll_timeout = "2s"
post_timeout = "1s"
post_attempts = 2

[mcp]
max_concurrent = 1

[mcp.channels.main]
url = "{stub}"

# Channel harpoon: the stub's token endpoint stands for a private identity provider.
[harpoon]
allow_plaintext_http = true
targets = [{{ label = "demo-idp-token", url = "{token}", description = "a private token endpoint" }}]

[strict]
enabled = true
latch_file = "{}"
cleanup_timeout = "2s"
shutdown_grace = "2s"

[ops]
listen = "127.0.0.1:0"

[telemetry]
log_format = "text"
log_level = "off"
"#,
        latch.display(),
        token = stub.replace("/mcp", "/oauth/token"),
    );
    Config::from_toml_str(&toml).map_err(DemoError::Config)
}

async fn mcp(client: &reqwest::Client, url: &str, body: Value) -> Result<Value, DemoError> {
    let response = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .map_err(DemoError::Ingress)?;
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = response.text().await.map_err(DemoError::Ingress)?;
    if content_type.starts_with("text/event-stream") {
        // The last `data:` line carries the terminal response.
        let last = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|d| !d.is_empty());
        return serde_json::from_str(last.unwrap_or("null")).map_err(DemoError::ReplyNotJson);
    }
    serde_json::from_str(&text).map_err(DemoError::ReplyNotJson)
}

async fn get_status(client: &reqwest::Client, ops: SocketAddr) -> Result<Value, DemoError> {
    client
        .get(format!("http://{ops}/status"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .map_err(DemoError::Status)?
        .json()
        .await
        .map_err(DemoError::Status)
}

fn print_status(doc: &Value) {
    println!(
        "   state={} ready={} mode={} fence.held={} commands.in_flight={} fatal={}",
        doc["state"],
        doc["ready"],
        doc["mode"],
        doc["fence"]["held"],
        doc["commands"]["in_flight"],
        if doc["fatal"].is_null() {
            "null".to_owned()
        } else {
            format!(
                "{{category: {}, exit_code: {}}}",
                doc["fatal"]["category"], doc["fatal"]["exit_code"]
            )
        }
    );
}

fn step(title: &str) {
    println!("\n== {title}");
}

fn tempfile_dir() -> Result<PathBuf, DemoError> {
    let dir = std::env::temp_dir().join(format!("tunnelgate-demo-{}", crate::protocol::random_hex(6)));
    std::fs::create_dir_all(&dir).map_err(|source| DemoError::WorkDir {
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}
