//! `bench --external` (`scripts/bench --external`): the gateway as users run it, with the
//! load control plane and the MCP server each in a process of its own.
//!
//! Per run it starts this binary twice more: `--serve-loadcp` (the [`loadcp`] control
//! plane, which answers a poll as soon as one command is queued, the moment a caller's
//! slot frees, as the tunnel service does, and counts polls and accepted connections) and,
//! for HTTP, `--serve-stub` (the embedded MCP stub, which counts accepted connections).
//! Both print one line with their addresses on stdout and are driven over a small control
//! API on a second port of their own (see [`loadcp::serve_standalone`] and
//! [`serve_stub`]). stdio runs `bench_stdio --serve-stdio` as the gateway's child. Then
//! the gateway process under test, a 300 ms warm-up, and the measured window: the
//! gateway's CPU (utime + stime) is read before and after it, the counters are the
//! window's own.
//!
//! Every row is the median of `--runs` runs (each run a fresh gateway and peers); the CPU
//! column also lists each run's value.
//!
//! [`loadcp`]: super::loadcp
//! [`loadcp::serve_standalone`]: super::loadcp::serve_standalone

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use tokio::io::AsyncBufReadExt;
use tunnelgate::sim::McpStub;

use super::loadcp::Window;
use super::{http_channel_url, stdio_channel, Args, GatewayProcess};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Http,
    Stdio,
}

/// One row's configuration.
#[derive(Clone, Copy)]
struct Row {
    path: Path,
    concurrency: usize,
    strict: bool,
    log_level: &'static str,
}

/// One run's figures.
#[derive(Clone, Copy, Default)]
struct Run {
    per_second: f64,
    p50_us: f64,
    cpu_us_per_command: f64,
    polls_per_command: f64,
    cp_connections_per_command: f64,
    mcp_connections_per_command: Option<f64>,
    peak_rss_kib: u64,
}

/// A peer process started as `bench FLAG 127.0.0.1:0`, killed on drop.
struct Peer {
    _child: tokio::process::Child,
    /// The address it serves (the control plane's base URL, the stub's MCP URL).
    target: String,
    /// Its control API's base URL.
    control: String,
}

impl Peer {
    async fn spawn(flag: &str) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = tokio::process::Command::new(exe)
            .args([flag, "127.0.0.1:0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start bench {flag}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        let mut stdout = tokio::io::BufReader::new(stdout);
        tokio::time::timeout(Duration::from_secs(10), stdout.read_line(&mut line))
            .await
            .map_err(|_| format!("bench {flag} did not announce itself within 10 s"))?
            .map_err(|e| e.to_string())?;
        // `NAME TARGET control CONTROL`
        let words: Vec<&str> = line.split_whitespace().collect();
        let [_, target, "control", control] = words[..] else {
            return Err(format!("bench {flag} announced {line:?}"));
        };
        Ok(Self {
            target: target.to_owned(),
            control: control.to_owned(),
            _child: child,
        })
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, client: &reqwest::Client, path: &str) -> Result<T, String> {
        let r = client
            .get(format!("{}{path}", self.control))
            .send()
            .await
            .map_err(|e| format!("{}{path}: {e}", self.control))?;
        r.json().await.map_err(|e| format!("{}{path}: {e}", self.control))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StubCounts {
    connections: u64,
}

/// `bench --serve-stub ADDR`: the embedded MCP stub on `ADDR`, with `GET /counts` (the
/// connections it accepted, as JSON) on a second, ephemeral port. Prints one line, `stub
/// http://ADDR/mcp control http://CONTROL`, then serves until its stdin closes.
pub(crate) async fn serve_stub(addr: SocketAddr) -> Result<(), String> {
    let stub = std::sync::Arc::new(McpStub::start(addr).await.map_err(|e| format!("stub on {addr}: {e}"))?);
    let control = axum::Router::new()
        .route(
            "/counts",
            get(|State(stub): State<std::sync::Arc<McpStub>>| async move {
                axum::Json(StubCounts {
                    connections: stub.connections_accepted(),
                })
            }),
        )
        .with_state(stub.clone());
    let control = super::serve(control).await?;
    super::announce_and_wait(&format!("stub {} control http://{control}", stub.url())).await
}

/// One run of `row`: fresh peers and gateway, warm-up, the measured window.
async fn run_once(args: &Args, client: &reqwest::Client, row: Row, secs: Duration) -> Result<Run, String> {
    let cp = Peer::spawn("--serve-loadcp").await?;
    let stub = match row.path {
        Path::Http => Some(Peer::spawn("--serve-stub").await?),
        Path::Stdio => None,
    };
    let channel = match (&stub, &args.stdio_server) {
        (Some(stub), _) => http_channel_url(&stub.target),
        (None, Some(server)) => stdio_channel(server),
        (None, None) => return Err("stdio rows need --stdio-server".to_owned()),
    };
    let (gw, _) = GatewayProcess::start(args, &cp.target, &channel, (row.strict, ""), 128, row.log_level).await?;
    let load = |millis: u128| format!("/load?concurrency={}&millis={millis}", row.concurrency);
    let _: Window = cp.get(client, &load(300)).await?;
    let stub_before = match &stub {
        Some(s) => Some(s.get::<StubCounts>(client, "/counts").await?.connections),
        None => None,
    };
    let cpu_before = gw.cpu_us();
    let w: Window = cp.get(client, &load(secs.as_millis())).await?;
    let cpu = gw.cpu_us().saturating_sub(cpu_before);
    let done = w.load.done.max(1) as f64;
    let mcp_connections = match (&stub, stub_before) {
        (Some(s), Some(before)) => Some(s.get::<StubCounts>(client, "/counts").await?.connections - before),
        _ => None,
    };
    Ok(Run {
        per_second: w.load.per_second,
        p50_us: w.load.p50_us,
        cpu_us_per_command: cpu as f64 / done,
        polls_per_command: w.polls as f64 / done,
        cp_connections_per_command: w.connections as f64 / done,
        mcp_connections_per_command: mcp_connections.map(|c| c as f64 / done),
        peak_rss_kib: gw.rss_kib("VmHWM:"),
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The rows `bench --external` measures, in table order.
fn rows(args: &Args) -> Vec<Row> {
    let mut paths = vec![Path::Http];
    if args.stdio_server.is_some() {
        paths.push(Path::Stdio);
    }
    let mut rows = Vec::new();
    for log_level in ["warn", "info"] {
        for &path in &paths {
            for &concurrency in &args.concurrency {
                rows.push(Row {
                    path,
                    concurrency,
                    strict: false,
                    log_level,
                });
            }
        }
    }
    for log_level in ["warn", "info"] {
        rows.push(Row {
            path: Path::Http,
            concurrency: 1,
            strict: true,
            log_level,
        });
    }
    rows
}

/// Runs every row `args.runs` times and prints the Markdown table on stdout.
pub(crate) async fn run(args: &Args) -> Result<u8, String> {
    let secs = Duration::from_secs(args.seconds);
    let client = reqwest::Client::builder()
        .timeout(secs + Duration::from_secs(60))
        .build()
        .map_err(|e| e.to_string())?;
    let mut out = String::from(
        "| path | concurrency | log level | commands/s | p50 | gateway CPU / command (median) | gateway CPU / command, each run | polls / command | control-plane connections / command | MCP connections / command | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows(args) {
        let mut runs = Vec::new();
        for n in 1..=args.runs {
            eprintln!("bench --external: {} run {n} of {}", label(row), args.runs);
            runs.push(run_once(args, &client, row, secs).await?);
        }
        out.push_str(&table_row(row, &runs));
    }
    println!("{out}");
    Ok(0)
}

fn label(row: Row) -> String {
    let path = match (row.path, row.strict) {
        (Path::Http, false) => "HTTP",
        (Path::Http, true) => "HTTP, strict",
        (Path::Stdio, _) => "stdio",
    };
    format!("{path} | {} | `{}`", row.concurrency, row.log_level)
}

fn table_row(row: Row, runs: &[Run]) -> String {
    let m = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let each: Vec<String> = runs.iter().map(|r| format!("{:.0}", r.cpu_us_per_command)).collect();
    let mcp = match runs.first().and_then(|r| r.mcp_connections_per_command) {
        Some(_) => format!("{:.4}", m(|r| r.mcp_connections_per_command.unwrap_or(0.0))),
        None => "—".to_owned(),
    };
    let rss = runs.iter().map(|r| r.peak_rss_kib).max().unwrap_or(0);
    format!(
        "| {} | {:.0} | {:.0} us | {:.0} us | {} us | {:.2} | {:.4} | {mcp} | {:.1} MiB |\n",
        label(row),
        m(|r| r.per_second),
        m(|r| r.p50_us),
        m(|r| r.cpu_us_per_command),
        each.join(", "),
        m(|r| r.polls_per_command),
        m(|r| r.cp_connections_per_command),
        rss as f64 / 1024.0,
    )
}
