//! The benchmark behind `scripts/bench` and `docs/PERFORMANCE.md`.
//!
//! Runs, side by side on this machine and in one process run:
//! - **direct**: an MCP client calling the MCP server (the embedded stub) directly;
//! - **tunnel**: a load control plane ([`loadcp`]: callers that each queue a command and
//!   wait for its response POST) and a real `tunnelgate` process (the binary given with
//!   `--gateway`) between it and the stub, default and strict mode; with `--stdio-server`,
//!   also to a trivial stdio MCP server (the gateway's child);
//! - **floor**: the three loopback exchanges a tunnelled command needs (poll delivery, the
//!   MCP exchange, the response POST), each served by a no-op peer, so the gateway's own
//!   share shows as a ratio.
//!
//! At concurrency 1, 16 and 64 it reports commands per second, latency p50/p99 (against
//! the floor's, and the added latency against direct), and the gateway's CPU time per
//! command (utime + stime from `/proc/<pid>/stat`); and peak RSS idle, under load and with
//! 1,000 commands queued, startup time (spawn to `/readyz` 200) and latch-to-exit time (a
//! 404 on the terminal POST in strict mode). The gateway logs at `warn` except in the one
//! run that measures the default `info`.
//!
//! `--external` measures the gateway as users run it instead, the load control plane and
//! the MCP server each in a process of its own (see [`external`]); `--serve-loadcp ADDR`
//! and `--serve-stub ADDR` are those processes.
//!
//! `--smoke` runs a few seconds at concurrency 16 and exits non-zero only on a gross
//! regression, measured as the tunnel's throughput over the direct path's in the same run
//! (never an absolute time): `scripts/test` runs it.
//!
//! Usage: `cargo run --release --example bench -- --gateway target/release/tunnelgate
//! [--seconds 5] [--smoke]` (see `--help`). Prints a Markdown report on stdout.

use std::future::Future;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use serde_json::json;
use tokio::time::Instant;
use tunnelgate_sim::{FaultScript, McpStub, NewCommand, SimConfig, Simulator};

mod external;
mod loadcp;
use loadcp::LoadCp;

const TUNNEL: &str = "tunnel_bench";
const KEY: &str = "bench-key";
/// The smoke fails when the tunnel does less than this share of the direct path's
/// throughput (in the same run). Far below what is measured (see docs/PERFORMANCE.md):
/// it only catches a gross regression, such as a per-command stall.
const SMOKE_MIN_RATIO: f64 = 0.02;

struct Args {
    gateway: String,
    seconds: u64,
    smoke: bool,
    /// The concurrencies to run (`--concurrency 16` for one).
    concurrency: Vec<usize>,
    /// `--only tunnel`: the default-mode tunnel rows only, for profiling.
    tunnel_only: bool,
    /// Print each gateway's pid on stderr as it starts (to attach a profiler).
    announce: bool,
    /// `examples/bench_stdio`, whose `--serve-stdio` is the trivial stdio MCP server.
    stdio_server: Option<String>,
    /// `--etcd URL`: also run strict mode at concurrency 1 with
    /// `coordination.backend = "etcd"` on this etcd (the intent writes' cost).
    etcd: Option<String>,
    /// `--external`: the table of [`external`] instead of the in-process one.
    external: bool,
    /// `--runs N`: runs per row of the external table (the median is reported).
    runs: usize,
    /// `--serve-loadcp ADDR` or `--serve-stub ADDR`: be that peer process.
    serve: Option<(Serve, SocketAddr)>,
    /// `--tls-dir DIR` (with `--serve-loadcp`): serve HTTPS with DIR's `server.pem` and
    /// `server.key`.
    tls_dir: Option<std::path::PathBuf>,
    /// `--alpn h1|h2` (with `--tls-dir`): offer HTTP/2, or HTTP/1.1 only.
    alpn_http2: bool,
    /// `--cp-tls`: the external table's TLS rows (HTTP/1.1 and HTTP/2 to the control plane).
    cp_tls: bool,
}

/// The peer processes of `--external`.
#[derive(Clone, Copy)]
enum Serve {
    LoadCp,
    Stub,
}

/// One load run's figures.
#[derive(Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
struct Load {
    done: u64,
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
}

/// A tunnel run's figures.
#[derive(Clone, Copy, Default)]
struct TunnelLoad {
    load: Load,
    cpu_us_per_command: f64,
    peak_rss_kib: u64,
}

const USAGE: &str =
    "usage: bench [--gateway PATH] [--seconds N] [--smoke] [--concurrency N]... [--only tunnel] [--announce-pid] [--stdio-server PATH]

  --gateway PATH     the tunnelgate binary (default target/release/tunnelgate)
  --seconds N        measured seconds per run (default 5)
  --smoke            a few seconds at concurrency 16; fails only on a gross regression
  --concurrency N    run this concurrency (repeatable; default 1, 16 and 64)
  --only tunnel      only the default-mode tunnel runs (for profiling)
  --announce-pid     print each gateway's pid on stderr when it is ready
  --stdio-server P   also run the tunnel to a stdio MCP server: P is examples/bench_stdio,
                     whose --serve-stdio answers each line (default mode only)
  --etcd URL         also run strict mode at concurrency 1 coordinated on the etcd at URL
                     (each command writes and settles its intent there)
  --external         the control plane and the MCP server in processes of their own:
                     HTTP and stdio (with --stdio-server) at `warn` and `info`, strict at 1
  --runs N           runs per row of --external (default 3; the median is reported)
  --serve-loadcp A   be the load control plane of --external on address A
  --serve-stub A     be the MCP stub of --external on address A
  --cp-tls           with --external: only the TLS rows, the control plane over HTTPS
                     offering HTTP/2 and then HTTP/1.1 only (print only, never --write)
  --tls-dir D        with --serve-loadcp: serve HTTPS with D/server.pem and D/server.key
  --alpn h1|h2       with --tls-dir: offer HTTP/1.1 only, or h2 first (default h2)

example: bench --only tunnel --concurrency 16 --seconds 20 --announce-pid";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        gateway: "target/release/tunnelgate".to_owned(),
        seconds: 5,
        smoke: false,
        concurrency: Vec::new(),
        tunnel_only: false,
        announce: false,
        stdio_server: None,
        etcd: None,
        external: false,
        runs: 3,
        serve: None,
        tls_dir: None,
        alpn_http2: true,
        cp_tls: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--gateway" => args.gateway = it.next().ok_or("--gateway needs a path")?,
            "--seconds" => {
                args.seconds = it
                    .next()
                    .and_then(|s| s.parse().ok())
                    .filter(|&s| s > 0)
                    .ok_or("--seconds needs a whole number above 0")?
            }
            "--concurrency" => args.concurrency.push(
                it.next()
                    .and_then(|s| s.parse().ok())
                    .filter(|&c| (1..=1000).contains(&c))
                    .ok_or("--concurrency needs a whole number in 1..=1000")?,
            ),
            "--only" => match it.next().as_deref() {
                Some("tunnel") => args.tunnel_only = true,
                other => return Err(format!("--only takes `tunnel`, not {other:?}")),
            },
            "--announce-pid" => args.announce = true,
            "--stdio-server" => args.stdio_server = Some(it.next().ok_or("--stdio-server needs a path")?),
            "--etcd" => args.etcd = Some(it.next().ok_or("--etcd needs a URL")?),
            "--smoke" => args.smoke = true,
            "--external" => args.external = true,
            "--runs" => {
                args.runs = it
                    .next()
                    .and_then(|s| s.parse().ok())
                    .filter(|&r| r > 0)
                    .ok_or("--runs needs a whole number above 0")?
            }
            "--serve-loadcp" | "--serve-stub" => {
                let which = if a == "--serve-stub" {
                    Serve::Stub
                } else {
                    Serve::LoadCp
                };
                let addr = it
                    .next()
                    .and_then(|s| s.parse().ok())
                    .ok_or(format!("{a} needs an IP:PORT"))?;
                args.serve = Some((which, addr));
            }
            "--cp-tls" => args.cp_tls = true,
            "--tls-dir" => args.tls_dir = Some(it.next().ok_or("--tls-dir needs a directory")?.into()),
            "--alpn" => {
                args.alpn_http2 = match it.next().as_deref() {
                    Some("h2") => true,
                    Some("h1") => false,
                    other => return Err(format!("--alpn takes h1 or h2, not {other:?}")),
                }
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}; see --help")),
        }
    }
    if args.concurrency.is_empty() {
        args.concurrency = vec![1, 16, 64];
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> Result<u8, String> {
    match args.serve {
        Some((Serve::LoadCp, addr)) => {
            let tls = args.tls_dir.as_ref().map(|dir| loadcp::TlsServe {
                cert: dir.join("server.pem"),
                key: dir.join("server.key"),
                http2: args.alpn_http2,
            });
            loadcp::serve_standalone(addr, tls).await.map(|()| 0)
        }
        Some((Serve::Stub, addr)) => external::serve_stub(addr).await.map(|()| 0),
        None if args.external => external::run(&args).await,
        None => in_process(args).await,
    }
}

/// The in-process table (and `--smoke`, `--only tunnel`).
async fn in_process(args: Args) -> Result<u8, String> {
    let stub = McpStub::start(([127, 0, 0, 1], 0).into())
        .await
        .map_err(|e| format!("stub: {e}"))?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| e.to_string())?;
    if args.smoke {
        return smoke(&args, &stub, &client).await;
    }
    let secs = Duration::from_secs(args.seconds);
    if args.tunnel_only {
        for &concurrency in &args.concurrency {
            eprintln!("bench: concurrency {concurrency}: tunnel, default mode");
            let t = tunnel_load(&args, &http_channel(&stub), concurrency, false, secs).await?;
            println!(
                "concurrency {concurrency}: {:.0}/s, p50 {:.0} us, p99 {:.0} us, gateway CPU {:.1} us/command, peak RSS {:.1} MiB",
                t.load.per_second,
                t.load.p50_us,
                t.load.p99_us,
                t.cpu_us_per_command,
                t.peak_rss_kib as f64 / 1024.0
            );
        }
        return Ok(0);
    }
    let mut out = String::new();
    out.push_str("| concurrency | direct /s | floor /s | tunnel /s | tunnel / floor | p50 direct | p50 floor | p50 tunnel | p50 tunnel / floor | p99 tunnel | added p50 / p99 (vs direct) | gateway CPU / command | tunnel /s (strict) | strict p50 | peak RSS under load | stdio tunnel /s | stdio p50 | stdio gateway CPU / command |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let floor_peers = Floor::start().await?;
    let mut coordinated_row: Option<(TunnelLoad, Option<Load>)> = None;
    for &concurrency in &args.concurrency {
        eprintln!("bench: concurrency {concurrency}: direct");
        let direct = load(&client, &stub.url(), concurrency, secs).await;
        eprintln!("bench: concurrency {concurrency}: floor");
        let floor = floor_peers.load(&client, concurrency, secs).await;
        eprintln!("bench: concurrency {concurrency}: tunnel, default mode");
        let tunnel = tunnel_load(&args, &http_channel(&stub), concurrency, false, secs).await?;
        let stdio = match &args.stdio_server {
            Some(server) => {
                eprintln!("bench: concurrency {concurrency}: tunnel to a stdio server, default mode");
                Some(tunnel_load(&args, &stdio_channel(server), concurrency, false, secs).await?)
            }
            None => None,
        };
        let strict = if concurrency == 1 {
            eprintln!("bench: concurrency 1: tunnel, strict mode");
            Some(tunnel_load(&args, &http_channel(&stub), 1, true, secs).await?)
        } else {
            None
        };
        if let (1, Some(etcd)) = (concurrency, &args.etcd) {
            eprintln!("bench: concurrency 1: tunnel, strict mode coordinated on etcd");
            let coordinated = coordination(etcd);
            let c = tunnel_load_with(&args, &http_channel(&stub), 1, true, secs, "warn", &coordinated).await?;
            coordinated_row = Some((c, strict.map(|s| s.load)));
        }
        out.push_str(&format!(
            "| {concurrency} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} us | {:.0} us | {:.0} us | {:.2} | {:.0} us | {:.0} / {:.0} us | {:.0} us | {} | {} | {:.1} MiB | {} | {} | {} |\n",
            direct.per_second,
            floor.per_second,
            tunnel.load.per_second,
            tunnel.load.per_second / floor.per_second.max(1.0),
            direct.p50_us,
            floor.p50_us,
            tunnel.load.p50_us,
            tunnel.load.p50_us / floor.p50_us.max(1.0),
            tunnel.load.p99_us,
            tunnel.load.p50_us - direct.p50_us,
            tunnel.load.p99_us - direct.p99_us,
            tunnel.cpu_us_per_command,
            strict.map_or("—".to_owned(), |s| format!("{:.0}", s.load.per_second)),
            strict.map_or("—".to_owned(), |s| format!("{:.0} us", s.load.p50_us)),
            tunnel.peak_rss_kib as f64 / 1024.0,
            stdio.map_or("—".to_owned(), |s| format!("{:.0}", s.load.per_second)),
            stdio.map_or("—".to_owned(), |s| format!("{:.0} us", s.load.p50_us)),
            stdio.map_or("—".to_owned(), |s| format!("{:.0} us", s.cpu_us_per_command)),
        ));
    }
    eprintln!("bench: concurrency 16: tunnel, default mode, log_level = info");
    let info = tunnel_load_logging(&args, &http_channel(&stub), 16, false, secs, "info").await?;
    eprintln!("bench: memory, startup and latch-to-exit");
    let spot = spot_figures(&args, &stub).await?;
    out.push_str(&format!(
        "\n| figure | measured |\n|---|---|\n| concurrency 16 with `log_level = \"info\"` (the default; the rows above log at `warn`) | {:.0}/s, gateway CPU {:.0} us/command |\n| peak RSS idle | {:.1} MiB |\n| peak RSS with 1,000 commands queued | {:.1} MiB |\n| startup (spawn to /readyz 200) | {:.0} ms |\n| latch to exit (404 on the terminal POST, strict) | {:.0} ms |\n",
        info.load.per_second,
        info.cpu_us_per_command,
        spot.idle_rss_kib as f64 / 1024.0,
        spot.queued_rss_kib as f64 / 1024.0,
        spot.startup.as_secs_f64() * 1000.0,
        spot.latch_to_exit.as_secs_f64() * 1000.0,
    ));
    if let Some((c, plain)) = coordinated_row {
        out.push_str(&format!(
            "| strict, concurrency 1, coordinated on a local etcd (`--etcd`) | {:.0}/s, p50 {:.0} us, gateway CPU {:.0} us/command; strict alone: {} |\n",
            c.load.per_second,
            c.load.p50_us,
            c.cpu_us_per_command,
            plain.map_or("—".to_owned(), |p| format!("{:.0}/s, p50 {:.0} us", p.per_second, p.p50_us)),
        ));
    }
    println!("{out}");
    Ok(0)
}

async fn smoke(args: &Args, stub: &McpStub, client: &reqwest::Client) -> Result<u8, String> {
    let secs = Duration::from_secs(args.seconds.clamp(1, 5));
    let direct = load(client, &stub.url(), 16, secs).await;
    let tunnel = tunnel_load(args, &http_channel(stub), 16, false, secs).await?;
    let ratio = tunnel.load.per_second / direct.per_second.max(1.0);
    println!(
        "bench smoke: direct {:.0}/s, tunnel {:.0}/s, ratio {ratio:.3} (fails below {SMOKE_MIN_RATIO})",
        direct.per_second, tunnel.load.per_second
    );
    if tunnel.load.done == 0 || ratio < SMOKE_MIN_RATIO {
        eprintln!("bench smoke: gross regression: the tunnel did {ratio:.3} of the direct path's throughput");
        return Ok(1);
    }
    Ok(0)
}

/// `concurrency` callers, each running `call` back to back for `secs`; a call that
/// returns `true` counts, timed from its start.
async fn closed_loop<F, Fut>(concurrency: usize, secs: Duration, call: F) -> Load
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|c| {
            let (call, stop) = (call.clone(), stop.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    if call(c).await {
                        latencies.push(t.elapsed().as_micros() as u64);
                    }
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(secs).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let mut all = Vec::new();
    for t in tasks {
        // A caller whose last call never finishes must not hang the run.
        if let Ok(Ok(l)) = tokio::time::timeout(Duration::from_secs(10), t).await {
            all.extend(l);
        }
    }
    summarize(all, elapsed)
}

/// `concurrency` clients, each sending `tools/call echo` back to back to `url` for `secs`.
async fn load(client: &reqwest::Client, url: &str, concurrency: usize, secs: Duration) -> Load {
    let (client, url) = (client.clone(), Arc::<str>::from(url));
    closed_loop(concurrency, secs, move |c| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let body = json!({"jsonrpc":"2.0","id":c,"method":"tools/call",
                "params":{"name":"echo","arguments":{"message":format!("c{c}")}}});
            client
                .post(&*url)
                .header("Accept", "application/json, text/event-stream")
                .json(&body)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    })
    .await
}

fn summarize(mut latencies: Vec<u64>, elapsed: Duration) -> Load {
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0) as f64
    };
    Load {
        done: latencies.len() as u64,
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_us: at(0.5),
        p99_us: at(0.99),
    }
}

/// A gateway process under test, killed on drop.
struct GatewayProcess {
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
    /// Its ops listener (`/readyz`, `/metrics`).
    ops: SocketAddr,
}

impl GatewayProcess {
    async fn start(
        args: &Args,
        base_url: &str,
        channel: &str,
        (strict, extra): (bool, &str),
        max_inflight: usize,
        log_level: &str,
    ) -> Result<(Self, Duration), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ops = free_addr()?;
        let config = format!(
            r#"
[control_plane]
base_url = "{base}"
tunnel_id = "{TUNNEL}"
api_key = "{KEY}"
poll_timeout = "5s"
max_inflight = {max_inflight}
[mcp]
max_concurrent = {concurrent}
[mcp.channels.main]
{channel}
[strict]
enabled = {strict}
latch_file = "{latch}"
cleanup_timeout = "2s"
[ops]
listen = "{ops}"
[telemetry]
log_format = "json"
log_level = "{log_level}"
{extra}
"#,
            base = base_url,
            concurrent = if strict { 1 } else { 64 },
            latch = dir.path().join("latch.json").display(),
        );
        let path = dir.path().join("config.toml");
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let child = tokio::process::Command::new(&args.gateway)
            .args(["run", "--config"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {}: {e} (build it with cargo build --release)",
                    args.gateway
                )
            })?;
        let gw = Self { child, _dir: dir, ops };
        let client = reqwest::Client::new();
        loop {
            let ready = client
                .get(format!("http://{ops}/readyz"))
                .send()
                .await
                .map(|r| r.status().as_u16() == 200);
            if let Ok(true) = ready {
                break;
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err("the gateway did not become ready within 20 s".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok((gw, started.elapsed()))
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// `tunnelgate_command_duration_seconds{leg}`'s `_sum` (seconds) and `_count`, read
    /// from the gateway's own `/metrics`; zeros when it has no such series (a gateway
    /// built before that leg existed).
    async fn leg_time(&self, client: &reqwest::Client, leg: &str) -> Result<(f64, f64), String> {
        let text = client
            .get(format!("http://{}/metrics", self.ops))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        let value = |series: &str| {
            let prefix = format!("tunnelgate_command_duration_seconds_{series}{{leg=\"{leg}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok((value("sum"), value("count")))
    }

    /// utime + stime, in microseconds.
    fn cpu_us(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the parenthesised command name; utime and stime are the 12th and
        // 13th of those (14th and 15th overall).
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0)
            + fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
        // USER_HZ is 100 on Linux.
        ticks * 10_000
    }

    fn rss_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

async fn start_sim(faults: &str) -> Result<Simulator, String> {
    let mut config = SimConfig::new(TUNNEL, KEY);
    config.faults = FaultScript::from_toml_str(faults).map_err(|e| e.to_string())?;
    config.max_poll_wait = Duration::from_secs(5);
    config.ingress_timeout = Duration::from_secs(30);
    Simulator::start(config).await.map_err(|e| format!("simulator: {e}"))
}

/// A gateway between the load control plane and the MCP server of `channel` (a TOML line
/// of `[mcp.channels.main]`), `concurrency` callers.
async fn tunnel_load(
    args: &Args,
    channel: &str,
    concurrency: usize,
    strict: bool,
    secs: Duration,
) -> Result<TunnelLoad, String> {
    tunnel_load_logging(args, channel, concurrency, strict, secs, "warn").await
}

/// The `[coordination]` tables of a strict gateway coordinated on the etcd at `url`
/// (a prefix of its own per run).
fn coordination(url: &str) -> String {
    let prefix = format!("/tunnelgate-bench/{}", std::process::id());
    format!("[coordination]\nbackend = \"etcd\"\n[coordination.etcd]\nendpoints = [\"{url}\"]\nprefix = \"{prefix}\"\n")
}

/// [`tunnel_load`] with the gateway's `telemetry.log_level` set to `log_level`.
async fn tunnel_load_logging(
    args: &Args,
    channel: &str,
    concurrency: usize,
    strict: bool,
    secs: Duration,
    log_level: &str,
) -> Result<TunnelLoad, String> {
    tunnel_load_with(args, channel, concurrency, strict, secs, log_level, "").await
}

/// [`tunnel_load_logging`] with `extra` TOML appended to the gateway's configuration.
async fn tunnel_load_with(
    args: &Args,
    channel: &str,
    concurrency: usize,
    strict: bool,
    secs: Duration,
    log_level: &str,
    extra: &str,
) -> Result<TunnelLoad, String> {
    let cp = Arc::new(LoadCp::start().await?);
    let (gw, _) = GatewayProcess::start(args, &cp.base_url(), channel, (strict, extra), 128, log_level).await?;
    if args.announce {
        eprintln!("bench: gateway pid {}", gw.pid());
    }
    // Warm the pools, then measure.
    let _ = cp.load(concurrency, Duration::from_millis(300)).await;
    let cpu_before = gw.cpu_us();
    let result = cp.load(concurrency, secs).await;
    let cpu = gw.cpu_us().saturating_sub(cpu_before);
    Ok(TunnelLoad {
        load: result,
        cpu_us_per_command: cpu as f64 / result.done.max(1) as f64,
        peak_rss_kib: gw.rss_kib("VmHWM:"),
    })
}

struct Spot {
    idle_rss_kib: u64,
    queued_rss_kib: u64,
    startup: Duration,
    latch_to_exit: Duration,
}

async fn spot_figures(args: &Args, stub: &McpStub) -> Result<Spot, String> {
    // Idle, then 1,000 commands queued behind slow calls.
    let sim = start_sim("").await?;
    let (gw, startup) =
        GatewayProcess::start(args, &sim.base_url(), &http_channel(stub), (false, ""), 1000, "warn").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss_kib = gw.rss_kib("VmHWM:");
    for i in 0..1000u64 {
        sim.enqueue(NewCommand::jsonrpc(
            json!({"jsonrpc":"2.0","id":i,"method":"tools/call",
            "params":{"name":"slow","arguments":{"ms":3000}}}),
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while sim.record().issued() < 1000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let queued_rss_kib = gw.rss_kib("VmHWM:");
    drop(gw);

    // Latch to exit: a 404 on the terminal POST of a strict gateway.
    let sim = start_sim("[[rule]]\nmatch = { tool = \"echo\", resp_type = \"terminal\" }\nstatus = 404\n").await?;
    let (mut gw, _) = GatewayProcess::start(args, &sim.base_url(), &http_channel(stub), (true, ""), 20, "warn").await?;
    sim.enqueue(NewCommand::jsonrpc(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"echo","arguments":{"message":"latch"}}}),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    let latched = loop {
        if sim.record().responses.iter().any(|r| r.status == Some(404)) {
            break Instant::now();
        }
        if Instant::now() > deadline {
            return Err("no 404 reached the simulator".to_owned());
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(20), gw.child.wait()).await;
    Ok(Spot {
        idle_rss_kib,
        queued_rss_kib,
        startup,
        latch_to_exit: latched.elapsed(),
    })
}

/// No-op peers for the floor: a control plane whose poll answers at once with one
/// command, an MCP server that answers at once, and a response endpoint that acks.
struct Floor {
    cp: SocketAddr,
    mcp: SocketAddr,
}

impl Floor {
    async fn start() -> Result<Self, String> {
        let cp_app = axum::Router::new()
            .route(
                "/poll",
                get(|| async {
                    (
                        [("content-type", "application/json")],
                        r#"{"commands":[{"request_id":"r","shard_token":"s","command_type":"jsonrpc","created_at":"t","jsonrpc":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"m"}}}}]}"#,
                    )
                }),
            )
            .route(
                "/response",
                post(|| async { ([("content-type", "application/json")], r#"{"status":"ok"}"#) }),
            );
        let mcp_app = axum::Router::new().route(
            "/mcp",
            post(|| async {
                (
                    [("content-type", "application/json")],
                    r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"m"}]}}"#,
                )
            }),
        );
        let cp = serve(cp_app).await?;
        let mcp = serve(mcp_app).await?;
        Ok(Self { cp, mcp })
    }

    /// Each "command" is the three exchanges in sequence, against no-op peers.
    async fn load(&self, client: &reqwest::Client, concurrency: usize, secs: Duration) -> Load {
        let (client, cp, mcp) = (client.clone(), self.cp, self.mcp);
        closed_loop(concurrency, secs, move |_| {
            let client = client.clone();
            async move {
                let Ok(poll) = client.get(format!("http://{cp}/poll")).send().await else {
                    return false;
                };
                let _ = poll.bytes().await;
                let call = client
                    .post(format!("http://{mcp}/mcp"))
                    .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"m"}}}"#)
                    .send()
                    .await;
                let Ok(call) = call else { return false };
                let _ = call.bytes().await;
                client
                    .post(format!("http://{cp}/response"))
                    .body(r#"{"request_id":"r","channel":"main","resp_code":200,"resp_type":"jsonrpc_response"}"#)
                    .send()
                    .await
                    .is_ok()
            }
        })
        .await
    }
}

/// `[mcp.channels.main]` pointing at the embedded stub over HTTP.
fn http_channel(stub: &McpStub) -> String {
    http_channel_url(&stub.url())
}

/// `[mcp.channels.main]` pointing at the MCP server at `url` over HTTP.
fn http_channel_url(url: &str) -> String {
    format!("url = \"{url}\"")
}

/// Prints `line` on stdout for the parent, then waits until stdin closes (the parent's
/// end, or its exit): a peer process of `--external` lives exactly as long as its parent.
async fn announce_and_wait(line: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("{line}\n").as_bytes())
        .await
        .and(stdout.flush().await)
        .map_err(|e| e.to_string())?;
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    Ok(())
}

/// `[mcp.channels.main]` running `server --serve-stdio` as the gateway's stdio child.
fn stdio_channel(server: &str) -> String {
    let argv = [server, "--serve-stdio"];
    format!("command = {}", serde_json::to_string(&argv).expect("argv is JSON"))
}

async fn serve(app: axum::Router) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

fn free_addr() -> Result<SocketAddr, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map_err(|e| e.to_string())
}
