//! stdio vs Streamable HTTP through the gateway: throughput and gateway CPU per command.
//!
//! ```sh
//! cargo build --release --bin tunnelgate --example bench_stdio
//! target/release/examples/bench_stdio --gateway target/release/tunnelgate
//! ```
//!
//! For each transport and concurrency it starts the control-plane simulator (in this
//! process), a trivial MCP server (HTTP: the simulator's embedded stub; stdio: this binary
//! run as `bench_stdio --serve-stdio`, a child of the gateway) and the real gateway binary,
//! then keeps `C` MCP clients busy against the simulator's ingress (`tools/call echo`,
//! JSON replies), exactly as an MCP client of the tunnel would. After a warm-up it counts
//! the calls answered over the measured window and reads the gateway process's CPU time
//! (`utime + stime` from `/proc/PID/stat`, children excluded) before and after.
//!
//! `--scenario overlap` instead replays issue 10's scenario: a stdio server whose
//! `tools/call` takes 0.5 s and answers concurrently, eight commands queued at once
//! (taken by one poll), `mcp.max_concurrent = 8`; it prints the time from queueing to the
//! eighth response reaching the control plane.
//!
//! Options: `--gateway PATH` (default `target/release/tunnelgate`), `--concurrency 16,64`,
//! `--transports http,stdio`, `--runs N` (default 2), `--warmup SECS` (2), `--seconds
//! SECS` (10). Every answer is checked; a wrong one aborts the run. No timing is asserted
//! anywhere: the figures are printed as measured.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tunnelgate_sim::{McpStub, NewCommand, SimConfig, Simulator};

const TUNNEL: &str = "tunnel_bench";
const KEY: &str = "bench-key";
/// Linux reports `/proc/PID/stat` times in USER_HZ ticks, which is always 100.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Http,
    Stdio,
}

struct Options {
    gateway: PathBuf,
    concurrency: Vec<usize>,
    transports: Vec<Transport>,
    runs: usize,
    warmup: Duration,
    seconds: Duration,
    scenario: Option<String>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve-stdio") {
        let sleep_ms = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0);
        serve_stdio(sleep_ms);
        return;
    }
    let options = parse(&args);
    assert!(
        options.gateway.is_file(),
        "{} is missing: cargo build --release --bin tunnelgate",
        options.gateway.display()
    );
    if options.scenario.as_deref() == Some("overlap") {
        overlap(&options);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "| transport | concurrency | run | calls | seconds | calls/s | gateway CPU us/call | stdio server CPU us/call | bench process CPU us/call |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &c in &options.concurrency {
        for &transport in &options.transports {
            for run in 1..=options.runs {
                let m = runtime.block_on(measure(&options, transport, c));
                let per_call = |cpu: f64| cpu * 1e6 / m.calls as f64;
                println!(
                    "| {} | {c} | {run} | {} | {:.1} | {:.0} | {:.1} | {} | {:.1} |",
                    match transport {
                        Transport::Http => "http",
                        Transport::Stdio => "stdio",
                    },
                    m.calls,
                    m.seconds,
                    m.calls as f64 / m.seconds,
                    per_call(m.cpu_seconds),
                    match transport {
                        Transport::Http => "-".to_owned(),
                        Transport::Stdio => format!("{:.1}", per_call(m.server_cpu_seconds)),
                    },
                    per_call(m.bench_cpu_seconds),
                );
            }
        }
    }
}

fn parse(args: &[String]) -> Options {
    let mut o = Options {
        gateway: PathBuf::from("target/release/tunnelgate"),
        concurrency: vec![16, 64],
        transports: vec![Transport::Http, Transport::Stdio],
        runs: 2,
        warmup: Duration::from_secs(2),
        seconds: Duration::from_secs(10),
        scenario: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--gateway" => o.gateway = PathBuf::from(value),
            "--concurrency" => o.concurrency = value.split(',').map(|v| v.parse().expect("a number")).collect(),
            "--transports" => {
                o.transports = value
                    .split(',')
                    .map(|t| match t {
                        "http" => Transport::Http,
                        "stdio" => Transport::Stdio,
                        other => panic!("unknown transport {other}"),
                    })
                    .collect()
            }
            "--runs" => o.runs = value.parse().expect("a number"),
            "--warmup" => o.warmup = Duration::from_secs_f64(value.parse().expect("seconds")),
            "--seconds" => o.seconds = Duration::from_secs_f64(value.parse().expect("seconds")),
            "--scenario" => o.scenario = Some(value.clone()),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

struct Measured {
    calls: u64,
    seconds: f64,
    /// The gateway process.
    cpu_seconds: f64,
    /// The gateway's children (the stdio server).
    server_cpu_seconds: f64,
    /// This process: the MCP clients, the simulator and (for HTTP) the MCP server.
    bench_cpu_seconds: f64,
}

/// One configuration: fresh simulator, server and gateway; warm-up, then the window.
async fn measure(o: &Options, transport: Transport, concurrency: usize) -> Measured {
    let sim = start_sim().await;
    let stub = McpStub::start(([127, 0, 0, 1], 0).into()).await.expect("stub starts");
    let channel = match transport {
        Transport::Http => format!("url = \"{}\"", stub.url()),
        Transport::Stdio => format!(
            "command = {}",
            serde_json::to_string(&self_command(&[])).expect("argv is JSON")
        ),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut gateway = Gateway::start(&o.gateway, dir.path(), &sim, &channel, concurrency);

    let client = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(concurrency)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client");
    let answered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let url = sim.ingress_url();
    // Every client waits for the gateway's first answer before the clock starts.
    call(&client, &url, 0).await;
    let clients: Vec<_> = (0..concurrency)
        .map(|i| {
            let (client, url, answered, stop) = (client.clone(), url.clone(), answered.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = (i as u64) << 32;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    call(&client, &url, n).await;
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(o.warmup).await;
    let sample = |gateway: &Gateway| {
        (
            answered.load(Ordering::Relaxed),
            gateway.cpu_seconds(),
            gateway.children_cpu_seconds(),
            cpu_seconds_of("self"),
            Instant::now(),
        )
    };
    let (calls0, cpu0, server0, bench0, t0) = sample(&gateway);
    tokio::time::sleep(o.seconds).await;
    let (calls1, cpu1, server1, bench1, t1) = sample(&gateway);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("a client ran to its end");
    }
    gateway.stop();
    sim.shutdown().await;
    stub.shutdown().await;
    Measured {
        calls: calls1 - calls0,
        seconds: (t1 - t0).as_secs_f64(),
        cpu_seconds: cpu1 - cpu0,
        server_cpu_seconds: server1 - server0,
        bench_cpu_seconds: bench1 - bench0,
    }
}

/// User plus system CPU time of process `pid` (`self` for this one), all its threads.
fn cpu_seconds_of(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let Some((_, after)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / TICKS_PER_SECOND
}

/// One `tools/call echo` through the ingress; anything but the echo aborts the benchmark.
async fn call(client: &reqwest::Client, url: &str, n: u64) {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"hi"}}}}}}"#
    );
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(body)
        .send()
        .await
        .expect("the ingress answers");
    let status = response.status();
    let text = response.text().await.expect("a body");
    assert!(
        status.is_success() && text.contains("Echo: hi") && text.contains(&format!("\"id\":{n}")),
        "unexpected answer {status}: {text}"
    );
}

async fn start_sim() -> Simulator {
    let mut config = SimConfig::new(TUNNEL, KEY);
    config.ingress_timeout = Duration::from_secs(30);
    config.max_poll_wait = Duration::from_secs(1);
    Simulator::start(config).await.expect("simulator starts")
}

/// This binary as the trivial stdio MCP server.
fn self_command(extra: &[&str]) -> Vec<String> {
    let exe = std::env::current_exe().expect("own path");
    let mut argv = vec![exe.display().to_string(), "--serve-stdio".to_owned()];
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    argv
}

/// The gateway binary, configured for one run, its CPU time readable from `/proc`.
struct Gateway {
    child: Child,
}

impl Gateway {
    fn start(binary: &Path, dir: &Path, sim: &Simulator, channel: &str, concurrency: usize) -> Gateway {
        let config = format!(
            r#"
[control_plane]
base_url = "{base}"
tunnel_id = "{TUNNEL}"
api_key = "{KEY}"
poll_timeout = "5s"
max_inflight = {max_inflight}

[mcp]
max_concurrent = {concurrency}

[mcp.channels.main]
{channel}

[ops]
listen = "127.0.0.1:0"

[telemetry]
log_format = "json"
log_level = "warn"
"#,
            base = sim.base_url(),
            // The default prefetch capacity (20), or enough for every client.
            max_inflight = concurrency.max(20),
        );
        let path = dir.join("gateway.toml");
        std::fs::write(&path, config).expect("config written");
        let child = Command::new(binary)
            .args(["run", "--config"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the gateway starts");
        Gateway { child }
    }

    /// User plus system CPU time of the gateway process (its threads, not its children).
    fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(&self.child.id().to_string())
    }

    /// The same for the gateway's live children (the stdio server), whichever of its
    /// threads started them.
    fn children_cpu_seconds(&self) -> f64 {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.child.id())) else {
            return 0.0;
        };
        tasks
            .filter_map(Result::ok)
            .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
            .flat_map(|children| children.split_whitespace().map(cpu_seconds_of).collect::<Vec<_>>())
            .sum()
    }

    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 10's scenario: eight 0.5 s calls queued at once to a concurrent stdio server.
fn overlap(o: &Options) {
    // One thread: the eight are queued before the simulator can answer any poll.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let sim = start_sim().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let channel = format!(
            "command = {}",
            serde_json::to_string(&self_command(&["500"])).expect("argv is JSON")
        );
        let mut gateway = Gateway::start(&o.gateway, dir.path(), &sim, &channel, 8);
        let warm = sim.enqueue(NewCommand::jsonrpc(echo(0)));
        sim.wait_for("the warm-up call", Duration::from_secs(30), |r| r.is_completed(&warm))
            .await
            .expect("the gateway answers");
        for run in 1..=o.runs {
            let polls_before = sim.record().polls.len();
            let started = Instant::now();
            let ids: Vec<String> = (1..=8).map(|i| sim.enqueue(NewCommand::jsonrpc(echo(i)))).collect();
            let record = sim
                .wait_for("the eight calls", Duration::from_secs(60), |r| {
                    ids.iter().all(|id| r.is_completed(id))
                })
                .await
                .expect("the eight are answered");
            let took = started.elapsed();
            // From the poll that was pending when the eight were queued.
            let polls = &record.polls[polls_before.saturating_sub(1)..];
            let carrying: Vec<(Option<u64>, usize)> = polls.iter().map(|p| (p.limit, p.commands)).collect();
            println!(
                "overlap run {run}: 8 calls of 0.5 s answered in {:.2} s; (limit, commands) per poll {carrying:?}",
                took.as_secs_f64()
            );
            for id in &ids {
                let body = record
                    .responses_for(id)
                    .filter_map(|r| r.json.as_ref())
                    .last()
                    .expect("a response");
                assert!(body.to_string().contains("Echo: hi"), "{body}");
            }
        }
        gateway.stop();
        sim.shutdown().await;
    });
}

fn echo(id: u64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}})
}

/// The trivial stdio MCP server: answers each request in order (or, with `sleep_ms`,
/// each `tools/call` on its own thread after that long), as the embedded HTTP stub does.
/// Plain threads, no runtime: a blocking sleep stalls nothing here.
#[allow(clippy::disallowed_methods)]
fn serve_stdio(sleep_ms: u64) {
    let out = Arc::new(Mutex::new(BufWriter::new(std::io::stdout())));
    let mut input = BufReader::new(std::io::stdin());
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let (Some(id), Some(method)) = (msg.get("id"), msg.get("method").and_then(Value::as_str)) else {
            continue;
        };
        let result = match method {
            "initialize" => json!({"protocolVersion":"2025-06-18","capabilities":{"tools":{}},
                "serverInfo":{"name":"bench-stdio","version":"0"}}),
            "tools/call" => {
                let message = msg["params"]["arguments"]["message"].as_str().unwrap_or("");
                json!({"content":[{"type":"text","text":format!("Echo: {message}")}]})
            }
            _ => json!({}),
        };
        let answer = json!({"jsonrpc":"2.0","id":id,"result":result}).to_string();
        if sleep_ms > 0 && method == "tools/call" {
            let out = out.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(sleep_ms));
                let mut out = out.lock().expect("stdout lock");
                let _ = writeln!(out, "{answer}").and_then(|()| out.flush());
            });
            continue;
        }
        let mut out = out.lock().expect("stdout lock");
        let _ = writeln!(out, "{answer}");
        // Flush once nothing more is waiting to be read: answers to a burst go out together.
        if input.buffer().is_empty() {
            let _ = out.flush();
        }
    }
}
