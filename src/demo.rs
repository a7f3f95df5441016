//! `tunnelgate demo`: the whole path on embedded defaults, in one process, with no
//! network beyond loopback and no credentials.
//!
//! It starts the simulator and the embedded MCP stub, runs a strict gateway, sends a few
//! MCP calls through the simulator's ingress, shows `/status`, then runs a drill: the
//! simulator holds the acknowledgement of one call, the latch fires, and the demo shows
//! what an operator sees (category, exit code, latch file, status), proves a restart
//! refuses to run, clears the latch and cleans up.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::app::{Gateway, RunOutcome};
use crate::config::Config;
use crate::sim::{FaultScript, McpStub, SimConfig, Simulator};
use crate::strict::latch_file;

const TUNNEL: &str = "tunnel_demo";
const KEY: &str = "demo-key";

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

pub async fn run(keep_dir: bool) -> anyhow::Result<u8> {
    // Quiet by default; `RUST_LOG=info tunnelgate demo` shows the gateway's own log.
    let _guard = std::env::var("RUST_LOG")
        .ok()
        .map(|filter| crate::telemetry::logging::init(crate::telemetry::logging::Format::Text, &filter, None));
    let dir = tempfile_dir()?;
    let latch_path = dir.join("latch.json");
    let result = tour(&latch_path).await;
    if keep_dir {
        println!("\nkept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn tour(latch_path: &std::path::Path) -> anyhow::Result<u8> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let stub = McpStub::start(loopback)
        .await
        .context("starting the embedded MCP stub")?;
    let mut sim_config = SimConfig::new(TUNNEL, KEY);
    sim_config.faults = FaultScript::from_toml_str(DRILL_FAULTS).map_err(|e| anyhow::anyhow!("{e}"))?;
    sim_config.ingress_timeout = Duration::from_secs(20);
    sim_config.max_poll_wait = Duration::from_secs(2);
    let sim = Simulator::start(sim_config).await.context("starting the simulator")?;
    let config = demo_config(&sim.base_url(), &stub.url(), latch_path)?;

    step("1. Started: control-plane simulator, embedded MCP stub, strict gateway");
    println!("   simulator   {}", sim.base_url());
    println!("   MCP ingress {}", sim.ingress_url());
    println!("   MCP stub    {}", stub.url());

    let mut gateway = Gateway::new(config.clone());
    let ops = gateway.ops_addr();
    let running = tokio::spawn(gateway.run());
    let ops = tokio::time::timeout(Duration::from_secs(10), ops)
        .await
        .context("gateway did not start")??;
    println!("   gateway ops http://{ops}/status (strict mode, one command at a time)");

    step("2. MCP calls through the tunnel (client -> simulator -> gateway -> MCP server)");
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()?;
    let ingress = sim.ingress_url();
    let init = mcp(
        &client,
        &ingress,
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"tunnelgate-demo","version":"1"}}}),
    )
    .await?;
    println!(
        "   initialize          -> server {}",
        init["result"]["serverInfo"]["name"].as_str().unwrap_or("?")
    );
    let status = client
        .post(&ingress)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .send()
        .await?
        .status();
    println!("   notifications/initialized -> HTTP {status} (notify_ack)");
    let tools = mcp(&client, &ingress, json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await?;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    println!("   tools/list          -> {}", names.join(", "));
    let echo = mcp(&client, &ingress, json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello through the tunnel"}}})).await?;
    println!(
        "   tools/call echo     -> {}",
        echo["result"]["content"][0]["text"].as_str().unwrap_or("?")
    );
    let slow = mcp(&client, &ingress, json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"slow","arguments":{"ms":300},"_meta":{"progressToken":"p1"}}})).await?;
    println!(
        "   tools/call slow     -> {} (progress notifications forwarded first)",
        slow["result"]["content"][0]["text"].as_str().unwrap_or("?")
    );

    step("3. /status while healthy");
    let doc = get_status(&client, ops).await?;
    print_status(&doc);

    step("4. Drill: the simulator holds the acknowledgement of a tools/call add");
    println!(
        "   the gateway posts the result, gets no answer within post_timeout, retries the identical bytes, and latches"
    );
    let calls_before = stub.count("tools/call");
    let drill = tokio::spawn({
        let client = client.clone();
        let ingress = ingress.clone();
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
        let ingress = ingress.clone();
        async move { mcp(&client, &ingress, json!({"jsonrpc":"2.0","id":6,"method":"ping"})).await }
    });
    let mut latched = None;
    for _ in 0..200 {
        if let Ok(doc) = get_status(&client, ops).await {
            if !doc["fatal"].is_null() {
                latched = Some(doc);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    if let Some(doc) = &latched {
        println!("   /status during cleanup:");
        print_status(doc);
    }
    let outcome = tokio::time::timeout(Duration::from_secs(15), running)
        .await
        .context("gateway did not stop after the latch")??
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    drill.abort();
    match queued.await {
        Ok(Ok(answer)) => println!(
            "   a ping queued behind the drill never reached the MCP server; its caller was told: \"{}\"",
            answer["error"]["message"].as_str().unwrap_or("?")
        ),
        Ok(Err(e)) => println!("   the ping queued behind the drill got no answer: {e:#}"),
        Err(e) => println!("   the ping queued behind the drill got no answer: {e}"),
    }
    let RunOutcome::Fatal(fatal) = &outcome else {
        bail!("the drill should have latched, but the gateway stopped cleanly")
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
    println!("   latch file {}:", latch_path.display());
    for line in std::fs::read_to_string(latch_path)
        .context("reading the latch file")?
        .lines()
    {
        println!("     {line}");
    }

    step("5. Restart with the latch in place: the gateway refuses to run (exit 89)");
    let before = sim.record().polls.len();
    let again = Gateway::new(config.clone())
        .run()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "   exit code {}; polls made by the refused gateway: {}",
        again.exit_code(),
        sim.record().polls.len() - before
    );

    step("6. Operator clears the latch (`tunnelgate latch clear`)");
    latch_file::clear(latch_path)?;
    println!("   cleared; a strict gateway would now start normally");

    sim.shutdown().await;
    stub.shutdown().await;
    step("Demo finished: every outcome above was measured, not scripted.");
    Ok(0)
}

fn demo_config(sim: &str, stub: &str, latch: &std::path::Path) -> anyhow::Result<Config> {
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
        latch.display()
    );
    Config::from_toml_str(&toml).map_err(|e| anyhow::anyhow!("{e}"))
}

async fn mcp(client: &reqwest::Client, url: &str, body: Value) -> anyhow::Result<Value> {
    let response = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await?;
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = response.text().await?;
    if content_type.starts_with("text/event-stream") {
        // The last `data:` line carries the terminal response.
        let last = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .rfind(|d| !d.is_empty());
        return serde_json::from_str(last.unwrap_or("null")).context("SSE reply without a JSON message");
    }
    serde_json::from_str(&text).context("reply is not JSON")
}

async fn get_status(client: &reqwest::Client, ops: SocketAddr) -> anyhow::Result<Value> {
    Ok(client
        .get(format!("http://{ops}/status"))
        .timeout(Duration::from_secs(2))
        .send()
        .await?
        .json()
        .await?)
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

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("tunnelgate-demo-{}", crate::control::random_hex(6)));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
