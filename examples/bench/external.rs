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
use tunnelgate_sim::McpStub;

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
    /// `--cp-tls`: the control plane over HTTPS, offering HTTP/2 (`Some(true)`) or
    /// HTTP/1.1 only (`Some(false)`).
    cp_tls: Option<bool>,
}

/// One run's figures.
#[derive(Clone, Default)]
struct Run {
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_command: f64,
    polls_per_command: f64,
    cp_connections_per_command: f64,
    mcp_connections_per_command: Option<f64>,
    peak_rss_kib: u64,
    /// The share of polls and POSTs that arrived over HTTP/2.
    http2_share: f64,
    /// The mean time of each of [`LEGS`] per command in the measured window, by the
    /// gateway's own `command_duration_seconds{leg}` (0 for a leg that did not occur).
    legs_us: Vec<f64>,
}

/// The legs of `command_duration_seconds` the bench reads, in table order.
const LEGS: [&str; 6] = ["queue", "fence_wait", "intent", "downstream", "deliver", "total"];

/// Each of [`LEGS`]' `_sum` and `_count`, now.
async fn leg_times(gw: &GatewayProcess, client: &reqwest::Client) -> Result<Vec<(f64, f64)>, String> {
    let mut times = Vec::with_capacity(LEGS.len());
    for leg in LEGS {
        times.push(gw.leg_time(client, leg).await?);
    }
    Ok(times)
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
    async fn spawn(flag: &str, extra: &[String]) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = tokio::process::Command::new(exe)
            .args([flag, "127.0.0.1:0"])
            .args(extra)
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
async fn run_once(
    args: &Args,
    client: &reqwest::Client,
    row: Row,
    secs: Duration,
    pki: Option<&Pki>,
) -> Result<Run, String> {
    let (cp_args, gateway_tls) = match (row.cp_tls, pki) {
        (Some(http2), Some(pki)) => (
            vec![
                "--tls-dir".to_owned(),
                pki.dir.path().display().to_string(),
                "--alpn".to_owned(),
                if http2 { "h2" } else { "h1" }.to_owned(),
            ],
            format!(
                "[control_plane.tls]\nca_file = \"{}\"\n",
                pki.dir.path().join("ca.pem").display()
            ),
        ),
        _ => (Vec::new(), String::new()),
    };
    let cp = Peer::spawn("--serve-loadcp", &cp_args).await?;
    let stub = match row.path {
        Path::Http => Some(Peer::spawn("--serve-stub", &[]).await?),
        Path::Stdio => None,
    };
    let channel = match (&stub, &args.stdio_server) {
        (Some(stub), _) => http_channel_url(&stub.target),
        (None, Some(server)) => stdio_channel(server),
        (None, None) => return Err("stdio rows need --stdio-server".to_owned()),
    };
    let (gw, _) = GatewayProcess::start(
        args,
        &cp.target,
        &channel,
        (row.strict, &gateway_tls),
        128,
        row.log_level,
    )
    .await?;
    let load = |millis: u128| format!("/load?concurrency={}&millis={millis}", row.concurrency);
    let _: Window = cp.get(client, &load(300)).await?;
    let stub_before = match &stub {
        Some(s) => Some(s.get::<StubCounts>(client, "/counts").await?.connections),
        None => None,
    };
    let cpu_before = gw.cpu_us();
    let before = leg_times(&gw, client).await?;
    let w: Window = cp.get(client, &load(secs.as_millis())).await?;
    let cpu = gw.cpu_us().saturating_sub(cpu_before);
    let after = leg_times(&gw, client).await?;
    let legs_us: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| {
            if a.1 > b.1 {
                (a.0 - b.0) / (a.1 - b.1) * 1e6
            } else {
                0.0
            }
        })
        .collect();
    let done = w.load.done.max(1) as f64;
    let mcp_connections = match (&stub, stub_before) {
        (Some(s), Some(before)) => Some(s.get::<StubCounts>(client, "/counts").await?.connections - before),
        _ => None,
    };
    Ok(Run {
        per_second: w.load.per_second,
        p50_us: w.load.p50_us,
        p99_us: w.load.p99_us,
        cpu_us_per_command: cpu as f64 / done,
        polls_per_command: w.polls as f64 / done,
        cp_connections_per_command: w.connections as f64 / done,
        mcp_connections_per_command: mcp_connections.map(|c| c as f64 / done),
        peak_rss_kib: gw.rss_kib("VmHWM:"),
        http2_share: w.http2_requests as f64 / w.requests.max(1) as f64,
        legs_us,
    })
}

/// A CA and a server certificate for 127.0.0.1, made with the `openssl` CLI, for the
/// `--cp-tls` rows: `ca.pem`, `server.pem` and `server.key` in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .map_err(|e| e.to_string())?;
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
        let steps: [Vec<&str>; 3] = [
            [
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=bench-ca",
                ],
            ]
            .concat(),
            [
                &["req"][..],
                &ec,
                &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"],
            ]
            .concat(),
            vec![
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        ];
        for step in steps {
            let out = std::process::Command::new("openssl")
                .args(&step)
                .current_dir(dir.path())
                .output()
                .map_err(|e| format!("--cp-tls needs the openssl CLI (scripts/install-peers): {e}"))?;
            if !out.status.success() {
                return Err(format!("openssl {step:?}: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
        Ok(Self { dir })
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The rows `bench --external --cp-tls` measures: HTTP at each concurrency, `warn`, the
/// control plane offering HTTP/2, then HTTP/1.1 only.
fn tls_rows(args: &Args) -> Vec<Row> {
    let mut rows = Vec::new();
    for http2 in [true, false] {
        for &concurrency in &args.concurrency {
            rows.push(Row {
                path: Path::Http,
                concurrency,
                strict: false,
                log_level: "warn",
                cp_tls: Some(http2),
            });
        }
    }
    rows
}

/// The rows `bench --external` measures, in table order.
fn rows(args: &Args) -> Vec<Row> {
    if args.cp_tls {
        return tls_rows(args);
    }
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
                    cp_tls: None,
                });
            }
        }
    }
    for log_level in ["warn", "info"] {
        for &path in &paths {
            rows.push(Row {
                path,
                concurrency: 1,
                strict: true,
                log_level,
                cp_tls: None,
            });
        }
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
        "| path | concurrency | log level | commands/s | p50 | p99 | gateway CPU / command (median) | gateway CPU / command, each run | polls / command | control-plane connections / command | MCP connections / command | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let pki = if args.cp_tls { Some(Pki::new()?) } else { None };
    let mut rates: Vec<Measured> = Vec::new();
    for row in rows(args) {
        let mut runs = Vec::new();
        for n in 1..=args.runs {
            eprintln!("bench --external: {} run {n} of {}", label(row, None), args.runs);
            runs.push(run_once(args, &client, row, secs, pki.as_ref()).await?);
        }
        out.push_str(&table_row(row, &runs));
        rates.push(Measured {
            row,
            per_second: median(runs.iter().map(|r| r.per_second).collect()),
            legs_us: (0..LEGS.len())
                .map(|i| median(runs.iter().map(|r| r.legs_us.get(i).copied().unwrap_or(0.0)).collect()))
                .collect(),
        });
    }
    if !args.cp_tls {
        out.push_str(&floors(&rates)?);
        if let Some(server) = args.stdio_server.clone() {
            let direct = tokio::task::spawn_blocking(move || direct_stdio_rate(&server, secs))
                .await
                .map_err(|e| e.to_string())??;
            out.push_str(&format!(
                "\nThe same stdio server driven directly by a client that owns its pipes (one `tools/call echo` at a time, no gateway): {direct:.0} commands/s.\n"
            ));
        }
    }
    println!("{out}");
    Ok(0)
}

/// The stdio baseline: `server --serve-stdio` as a child whose pipes this process owns,
/// initialized once, then one `tools/call echo` at a time for `secs`; each answer is read
/// whole and checked. Commands per second.
fn direct_stdio_rate(server: &str, secs: Duration) -> Result<f64, String> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = std::process::Command::new(server)
        .arg("--serve-stdio")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{server}: {e}"))?;
    let (Some(mut input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the stdio server's pipes".to_owned());
    };
    let mut output = BufReader::new(output);
    let mut line = String::new();
    let mut exchange = |id: u64, body: &str, line: &mut String| -> Result<(), String> {
        writeln!(input, "{body}")
            .and_then(|()| input.flush())
            .map_err(|e| e.to_string())?;
        line.clear();
        output.read_line(line).map_err(|e| e.to_string())?;
        let answer: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        if answer["id"] != id {
            return Err(format!("the stdio server answered {line:?} to request {id}"));
        }
        Ok(())
    };
    exchange(
        0,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#,
        &mut line,
    )?;
    let started = tokio::time::Instant::now();
    let mut done = 0u64;
    while started.elapsed() < secs {
        done += 1;
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{done},"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"hi"}}}}}}"#
        );
        exchange(done, &call, &mut line)?;
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    Ok(rate)
}

/// A row's medians, for the floors table.
struct Measured {
    row: Row,
    per_second: f64,
    /// Per leg of [`LEGS`], the median over runs of its mean time per command.
    legs_us: Vec<f64>,
}

impl Measured {
    /// The write-ahead intent's mean record time, when the row recorded any.
    fn intent_us(&self) -> Option<f64> {
        let intent = LEGS.iter().position(|leg| *leg == "intent")?;
        self.legs_us.get(intent).copied().filter(|us| *us > 0.0)
    }
}

/// The floors strict mode is measured against, per strict row: the same run's
/// default-mode time per command plus one flush, and strict's rate against it. The
/// headline flush is strict's own, measured where it is paid: the mean time of the
/// write-ahead intent's record in the gateway (`leg="intent"`: the document, its write and
/// its `fdatasync`), over the same window strict's rate is. Beside it, a probe: an
/// in-place 4 KiB `pwrite` + `fdatasync` in the directory the gateway's latch file lives
/// in, 1,000 back to back, median and mean. A floor is a rate, so its flush is a mean:
/// when flushes have a tail the median understates what they cost a run.
fn floors(rates: &[Measured]) -> Result<String, String> {
    let probe = flush_latency_us(1000)?;
    let mut out = String::from(
        "\n| path | log level | default commands/s | strict commands/s | strict's record, in the gateway (mean) | strict floor: default + that record | strict / floor | strict's time beyond default + its record | probe flush, median / mean | floor with the probe's mean | strict / that floor |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for strict in rates.iter().filter(|m| m.row.strict) {
        let row = strict.row;
        let default = rates
            .iter()
            .find(|m| {
                !m.row.strict && m.row.path == row.path && m.row.concurrency == 1 && m.row.log_level == row.log_level
            })
            .map(|m| m.per_second);
        let (Some(default), Some(record_us)) = (default.filter(|d| *d > 0.0), strict.intent_us()) else {
            continue;
        };
        let floor = |flush_us: f64| 1.0 / (1.0 / default + flush_us / 1e6);
        let rate = strict.per_second;
        let beyond_us = (1.0 / rate - 1.0 / default) * 1e6 - record_us;
        let path = if row.path == Path::Http { "HTTP" } else { "stdio" };
        out.push_str(&format!(
            "| {path} | `{}` | {default:.0} | {rate:.0} | {record_us:.0} us | {:.0} | {:.2} | {beyond_us:.0} us | {:.0} / {:.0} us | {:.0} | {:.2} |\n",
            row.log_level,
            floor(record_us),
            rate / floor(record_us),
            probe.median,
            probe.mean,
            floor(probe.mean),
            rate / floor(probe.mean),
        ));
    }
    out.push_str(&legs_table(rates));
    Ok(out)
}

/// Where the time of a command at one in flight goes, default against strict: each
/// leg's mean per command, by the gateway's own `command_duration_seconds{leg}` (the
/// legs are not disjoint: `total` spans the others, and the poll's own time is in none).
fn legs_table(rates: &[Measured]) -> String {
    let mut out = format!(
        "\n| path | mode | log level | {} |\n|---|---|---|{}\n",
        LEGS.join(" | "),
        "---|".repeat(LEGS.len())
    );
    for m in rates.iter().filter(|m| m.row.concurrency == 1) {
        let path = if m.row.path == Path::Http { "HTTP" } else { "stdio" };
        let mode = if m.row.strict { "strict" } else { "default" };
        let cells: Vec<String> = m.legs_us.iter().map(|us| format!("{us:.0} us")).collect();
        out.push_str(&format!(
            "| {path} | {mode} | `{}` | {} |\n",
            m.row.log_level,
            cells.join(" | ")
        ));
    }
    out
}

/// A flush probe's figures, in microseconds.
struct Flushes {
    median: f64,
    mean: f64,
}

/// `samples` in-place 4 KiB `pwrite` + `fdatasync`s of one file in the temporary
/// directory (where the gateway's latch file is), back to back.
fn flush_latency_us(samples: usize) -> Result<Flushes, String> {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = std::fs::File::create(dir.path().join("flush.probe")).map_err(|e| e.to_string())?;
    let block = vec![b' '; 4096];
    file.write_all_at(&block, 0).map_err(|e| e.to_string())?;
    file.sync_all().map_err(|e| e.to_string())?;
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = tokio::time::Instant::now();
        file.write_all_at(&block, 0).map_err(|e| e.to_string())?;
        file.sync_data().map_err(|e| e.to_string())?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    Ok(Flushes {
        median: median(times),
        mean,
    })
}

/// The row's first three cells. A TLS row names the protocol the polls and POSTs
/// actually arrived over (`http2_share`, measured), not the one offered.
fn label(row: Row, http2_share: Option<f64>) -> String {
    let path = match (row.path, row.strict, row.cp_tls) {
        (Path::Http, _, Some(offered)) => {
            let offer = if offered { "h2 offered" } else { "HTTP/1.1 only" };
            let used = match http2_share {
                Some(s) if s > 0.99 => ", used HTTP/2".to_owned(),
                Some(s) if s < 0.01 => ", used HTTP/1.1".to_owned(),
                Some(s) => format!(", {:.0}% over HTTP/2", s * 100.0),
                None => String::new(),
            };
            format!("HTTP, control plane over TLS ({offer}{used})")
        }
        (Path::Http, false, None) => "HTTP".to_owned(),
        (Path::Http, true, None) => "HTTP, strict".to_owned(),
        (Path::Stdio, false, _) => "stdio".to_owned(),
        (Path::Stdio, true, _) => "stdio, strict".to_owned(),
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
        "| {} | {:.0} | {:.0} us | {:.0} us | {:.0} us | {} us | {:.2} | {:.4} | {mcp} | {:.1} MiB |\n",
        label(row, Some(m(|r| r.http2_share))),
        m(|r| r.per_second),
        m(|r| r.p50_us),
        m(|r| r.p99_us),
        m(|r| r.cpu_us_per_command),
        each.join(", "),
        m(|r| r.polls_per_command),
        m(|r| r.cp_connections_per_command),
        rss as f64 / 1024.0,
    )
}
