//! Command-line surface (names are API): `run`, `check`, `doctor`, `status`,
//! `latch show|clear`, `receipts`, `support-bundle`, `profile convert`, `sim`, `demo`. Parsing lives here so `main.rs` stays a thin exit-code mapper.
//! What `run` does on each signal (stop, reload, status dump, ignore) is in `signals`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tunnelgate_sim::SimError;

use crate::app::{Gateway, GatewayError, RunFile};
use crate::config::{Config, ConfigError, ConfigOrigin, LogFormat, Overrides, ProfileFlags};
use crate::egress::client::{local_get, Client, LocalGetError, SendErrorKind};
use crate::strict::latch_file::LatchFileError;
use crate::supervisor::Supervisor;
use crate::telemetry::{logging, LogRing};

mod bundle;
mod latch;
mod profile;
mod readiness;
mod receipts;
mod signals;

pub(crate) use bundle::{support_bundle, SupportBundleArgs};
pub(crate) use latch::{latch_clear, latch_show, Cluster};
pub(crate) use profile::{profile, ProfileArgs};
pub(crate) use receipts::{receipts, ReceiptsArgs};

const EXAMPLES: &str = "\
Examples:
  tunnelgate demo                                  # the whole path on embedded defaults
  tunnelgate check --config config.example.toml    # validate, print with secrets masked
  tunnelgate doctor --config config.toml           # preflight the control plane, MCP servers, latch, ops
  tunnelgate run --config /etc/tunnelgate/config.toml
  TUNNELGATE_STRICT__ENABLED=true tunnelgate run --config config.toml
  tunnelgate status                                # exits 80-91 when latched
  tunnelgate status --require-ready                # 0 ready, 3 not ready, 80-91 latched, 1 no answer
  tunnelgate latch show --config config.toml
  tunnelgate receipts --config config.toml --since 1h --outcome ambiguous
  tunnelgate support-bundle --config config.toml   # an archive that is safe to share
  tunnelgate profile convert ~/.config/tunnel-client/prod.yaml > config.toml
  TUNNEL_CLIENT_PROFILE=prod tunnelgate run        # the official client's profile, read directly
  tunnelgate sim --listen 127.0.0.1:8080 --tunnel-id tunnel_local --api-key dev-key

Exit codes: 0 clean, 1 unexpected error, 2 usage, 3 not ready (status --require-ready),
4 refused by the secret scan (support-bundle), 78 invalid configuration, 80-91
strict-mode fatal categories (see docs/strict-mode.md).";

/// Why a subcommand could not do its work (exit 1, or 78 for a bad fault script).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    #[error("the gateway could not start: {0}")]
    Gateway(#[source] GatewayError),
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
    #[error("--url {url:?} {problem}")]
    StatusBadUrl { url: String, problem: String },
    #[error("no gateway is listening at {url}")]
    StatusNotListening { url: String },
    #[error("no gateway answered at {url}: {problem}")]
    StatusUnreachable { url: String, problem: String },
    #[error("{url} did not return status JSON: {source}")]
    StatusNotJson { url: String, source: serde_json::Error },
    #[error(transparent)]
    LatchFile(#[from] LatchFileError),
    #[error(transparent)]
    Intent(crate::strict::IntentError),
    #[error("refusing to clear {} without confirmation: pass --yes", path.display())]
    ClearNotConfirmed { path: PathBuf },
    #[error("cannot ask for confirmation on the terminal: {0}")]
    Terminal(#[source] std::io::Error),
    #[error(transparent)]
    Sim(SimError),
    #[error(transparent)]
    Receipts(#[from] crate::receipts::ReadError),
    /// `coordination.etcd` could not be read or cleared (`latch show`, `latch clear`).
    #[error("the cluster-wide latch on etcd (prefix {prefix}): {source}")]
    Cluster {
        prefix: String,
        #[source]
        source: crate::coord::etcd::EtcdError,
    },
}

#[derive(Parser, Debug)]
#[command(name = "tunnelgate", version, about = "Secure MCP Tunnel client that tells the truth about delivery", after_help = EXAMPLES)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `run`, which builds its runtime from its configuration, or any other command.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Poll the control plane and forward commands to the configured MCP servers.
    Run(ConfigArgs),
    #[command(flatten)]
    Tool(Tool),
}

/// Every command but `run` (listed with it, in this order, in `--help`).
#[derive(Subcommand, Debug)]
pub(crate) enum Tool {
    /// Validate the configuration and print the effective values with secrets masked.
    Check(ConfigArgs),
    /// Preflight every endpoint the runtime will use: config, control plane, MCP channels,
    /// latch directory and file, ops address. Exits 0 when all pass, 1 otherwise.
    #[command(after_help = DOCTOR_HELP)]
    Doctor(DoctorArgs),
    /// Query a running gateway's /status; exits with the fatal category's code if latched
    /// (with --require-ready: 0 only when ready, 3 when not).
    Status(StatusArgs),
    /// Inspect or clear the persisted strict-mode latch.
    Latch(LatchArgs),
    /// List the delivery receipts: commands that ended abandoned, not_found, rejected,
    /// ambiguous or unanswered (a held call no caller was told of).
    #[command(after_help = receipts::RECEIPTS_HELP)]
    Receipts(ReceiptsArgs),
    /// Write one archive to hand over with a support request: configuration (masked),
    /// /status, /metrics, /events, doctor, latch, receipts, version; scanned for secrets
    /// before anything is written.
    #[command(after_help = bundle::SUPPORT_BUNDLE_HELP)]
    SupportBundle(SupportBundleArgs),
    /// Read the official client's YAML profiles: `convert` prints one as tunnelgate's TOML.
    #[command(after_help = profile::PROFILE_HELP)]
    Profile(ProfileArgs),
    /// Run the control-plane simulator (poll/response endpoints, MCP ingress, faults).
    #[command(after_help = SIM_HELP)]
    Sim(SimArgs),
    /// Run the whole path on embedded defaults: simulator, MCP stub, strict gateway, drill.
    Demo(DemoArgs),
}

#[derive(Args, Debug)]
pub(crate) struct ConfigArgs {
    /// TOML configuration file (layered over defaults, under TUNNELGATE_* variables).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// The official client's profile file (YAML, ending in .yaml), read in place of a
    /// --config file; as TUNNEL_CLIENT_PROFILE_FILE.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["config", "profile"])]
    pub profile_file: Option<PathBuf>,
    /// A named official profile, NAME.yaml in the profile directory, read in place of a
    /// --config file; as TUNNEL_CLIENT_PROFILE.
    #[arg(long, value_name = "NAME", conflicts_with = "config")]
    pub profile: Option<String>,
    /// The directory of named profiles; as TUNNEL_CLIENT_PROFILE_DIR (default
    /// $XDG_CONFIG_HOME/tunnel-client, else ~/.config/tunnel-client).
    #[arg(long, value_name = "DIR")]
    pub profile_dir: Option<PathBuf>,
    /// Enable strict mode (overrides strict.enabled).
    #[arg(long)]
    pub strict: bool,
    /// Operator listener address (overrides ops.listen).
    #[arg(long, value_name = "ADDR")]
    pub ops_listen: Option<String>,
    /// Log filter, e.g. "info" or "tunnelgate=debug" (overrides telemetry.log_level).
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// "json" or "text" (overrides telemetry.log_format).
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Latch file path (overrides strict.latch_file).
    #[arg(long, value_name = "PATH")]
    pub latch_file: Option<PathBuf>,
}

/// Where `run` loads its configuration from, kept to load it again the same way (SIGHUP).
#[derive(Clone, Debug)]
pub(crate) struct ConfigSource {
    pub path: Option<PathBuf>,
    pub overrides: Overrides,
}

impl ConfigSource {
    /// Loads every layer: the file (or the official profile), the process environment,
    /// the flags.
    pub(crate) fn load(&self) -> Result<Config, ConfigError> {
        Config::load(self.path.as_deref(), &self.overrides)
    }

    /// Like [`ConfigSource::load`], and where the file layer came from.
    pub(crate) fn load_with_origin(&self) -> Result<(Config, ConfigOrigin), ConfigError> {
        Config::load_with_origin(self.path.as_deref(), &self.overrides)
    }
}

impl ConfigArgs {
    /// The file and flags of this command line.
    pub(crate) fn source(&self) -> ConfigSource {
        ConfigSource {
            path: self.config.clone(),
            overrides: self.overrides(),
        }
    }

    pub(crate) fn overrides(&self) -> Overrides {
        Overrides {
            strict: self.strict.then_some(true),
            ops_listen: self.ops_listen.clone(),
            log_level: self.log_level.clone(),
            log_format: self.log_format.clone(),
            latch_file: self.latch_file.clone(),
            profile: ProfileFlags {
                profile: self.profile.clone(),
                profile_file: self.profile_file.clone(),
                profile_dir: self.profile_dir.clone(),
            },
        }
    }
}

const DOCTOR_HELP: &str = "\
Checks, one line each (ok, warn or FAIL):
  config         the configuration loads and validates (exit 78 if not, as for `check`)
  control_plane  GET {base_url}{url_path}/v1/tunnels/{tunnel_id} with the poll's headers:
                 reachable, credentials accepted; it never polls, so no command is taken
  channel.NAME   HTTP: `initialize` answered with a JSON-RPC result, the session closed;
                 stdio: the program resolves on PATH and is executable (not started)
  latch_dir      strict mode: a file can be created beside strict.latch_file
  ops_listen     ops.listen can be bound (a running gateway holds it)
  latch_file     no persisted latch (a strict gateway would refuse to start)

stdio servers are NOT started unless --spawn-stdio is given: starting one runs the
server (whatever it does at startup), then it is sent `initialize` and its process
group is killed. No tool is ever called.

Examples:
  tunnelgate doctor --config /etc/tunnelgate/config.toml
  tunnelgate doctor --config config.toml --spawn-stdio --timeout 10s
  tunnelgate doctor --config config.toml --json | jq '.checks[] | select(.status != \"ok\")'

Exit codes: 0 every check passed (warnings allowed), 1 a check failed,
78 invalid configuration, 2 usage error.";

#[derive(Args, Debug)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Bound of each network check, e.g. "5s" or "500ms".
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
    /// Start each stdio server, send it `initialize`, then kill it (runs the server!).
    #[arg(long)]
    pub spawn_stdio: bool,
    /// Print the report as JSON: {"checks": [{name, status, detail}], "ok": bool}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub(crate) struct StatusArgs {
    /// Base URL of the gateway's operator listener.
    #[arg(long, default_value = "http://127.0.0.1:9464")]
    pub url: String,
    /// Exit 0 only when the gateway is ready: 3 when it is not (the /readyz reason on
    /// stderr, one line), 80-91 when latched, 1 when no gateway answers.
    #[arg(long)]
    pub require_ready: bool,
}

#[derive(Args, Debug)]
pub(crate) struct LatchArgs {
    #[command(subcommand)]
    pub action: LatchAction,
    /// Configuration file naming strict.latch_file (its secrets need not resolve here).
    #[arg(long, short, global = true)]
    pub config: Option<PathBuf>,
    /// Latch file path (instead of reading it from the configuration).
    #[arg(long, global = true, value_name = "PATH")]
    pub latch_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum LatchAction {
    /// Print the persisted cause (and, with coordination.backend = "etcd", the
    /// cluster-wide latch and unsettled intents on etcd).
    Show,
    /// Remove the latch so a strict gateway may run again (with coordination on etcd,
    /// the cluster-wide latch and its intents too: every replica goes on).
    Clear {
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

/// What `tunnelgate sim --help` adds after the options.
const SIM_HELP: &str = "\
MCP ingress: POST and DELETE /v1/mcp/{tunnel_id} carry a client's requests, notifications,
replies and session ends through the tunnel. GET (a standalone server-to-client stream)
is answered 405: the tunnel carries request-scoped streams only, so a server must send its
requests and notifications on the response stream of the request they belong to.

Stops on Ctrl-C or SIGTERM and prints a one-line summary.

Examples:
  tunnelgate sim --with-stub 127.0.0.1:3000
  tunnelgate sim --listen 127.0.0.1:8080 --faults drills/ack-404.toml";

#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Tunnel id the simulator serves.
    #[arg(long, default_value = "tunnel_local")]
    pub tunnel_id: String,
    /// Bearer key the simulator requires (use the same value as control_plane.api_key).
    #[arg(
        long,
        env = "TUNNELGATE_SIM_API_KEY",
        default_value = "dev-key",
        hide_env_values = true
    )]
    pub api_key: String,
    /// TOML fault script (the format: docs/simulator.md).
    #[arg(long, value_name = "FILE")]
    pub faults: Option<PathBuf>,
    /// Also start the embedded MCP stub on this address.
    #[arg(long, value_name = "ADDR")]
    pub with_stub: Option<SocketAddr>,
    /// The largest response POST body accepted, in bytes; a larger one is answered
    /// `413 request_body_too_large` (a drill of a result too large for the tunnel).
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = tunnelgate_sim::DEFAULT_MAX_RESPONSE_BODY,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub max_response_body: usize,
    /// Accept `resp_timing` on response POSTs, as a service with the tolerant reader of
    /// the 2026-08-25 wire does (by default the contract's schema refuses it: 400). Pair
    /// with the gateway's `control_plane.resp_timing = true`.
    #[arg(long)]
    pub accept_resp_timing: bool,
    /// The longest an empty poll is held before it is answered `204` (a poll asking for
    /// less is held for that). A shorter hold leaves no poll open at a partition's start
    /// for a command to be handed to (scripts/drill-step-down).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub max_poll_wait: std::time::Duration,
}

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Keep the demo's working directory (latch file) instead of removing it.
    #[arg(long)]
    pub keep_dir: bool,
}

/// Call first thing for `tunnelgate run`, before loading its configuration: a signal that
/// arrives before [`run`] installs its handlers then waits instead of taking its default
/// action (see `signals`).
pub(crate) fn defer_signals() {
    signals::defer();
}

/// `tunnelgate run`: signals, logs, the PID file, the gateway; returns the exit code.
/// `source` is how `config` was loaded, for SIGHUP to load it again; `origin` says
/// where its file layer came from, for the log.
pub(crate) async fn run(config: Config, source: ConfigSource, origin: ConfigOrigin) -> Result<u8, CliError> {
    // First of all: the handlers, which also ends what `defer_signals` began.
    let handlers = signals::Signals::install();
    let format = match config.telemetry.log_format {
        LogFormat::Json => logging::Format::Json,
        LogFormat::Text => logging::Format::Text,
    };
    let log_ring = Arc::new(LogRing::new(config.ops.log_buffer_events));
    let telemetry = logging::init(
        format,
        &config.telemetry.log_level,
        config.telemetry.otlp_endpoint.as_deref(),
        &log_ring,
    )
    .await;
    log_origin(&origin);
    // Written before the first poll; removed when this function returns, whatever the end.
    let _pid_file = match config.runtime.pid_file.as_deref().map(RunFile::pid).transpose() {
        Ok(file) => file,
        Err(e) => {
            crate::stderr::line(format_args!("{e}"));
            telemetry.shutdown().await;
            return Ok(78);
        }
    };
    crate::descriptors::prepare_for_run();
    let signals = Supervisor::logging_only();
    let reload = signals::Reload {
        source,
        running: config.clone(),
        log_filter: telemetry.log_filter(),
        supervisor: signals.clone(),
    };
    let gateway = Gateway::new(config).with_log_ring(log_ring);
    let watch = signals::Watch {
        stop: gateway.stop_handle(),
        status: gateway.status_handle(),
        reload,
    };
    let watching = CancellationToken::new();
    let watcher = signals.spawn_joined(handlers.watch(watch, watching.clone()));
    let outcome = gateway.run().await;
    watching.cancel();
    // It ends at once between two signals; a reload still reading files is left to the
    // runtime's end. Neither changes anything the run did.
    let _ = tokio::time::timeout(SIGNAL_WATCH_JOIN, watcher).await;
    // Exported spans are flushed before the exit code is returned, within FLUSH_BOUND.
    telemetry.shutdown().await;
    if let Err(e @ (GatewayError::Tls(_) | GatewayError::Coordination(_) | GatewayError::RunFile(_))) = &outcome {
        // An unusable TLS file (or run file) is a configuration error, exit 78 as the
        // key's other checks.
        crate::stderr::line(format_args!("{e}"));
        return Ok(78);
    }
    Ok(outcome.map_err(CliError::Gateway)?.exit_code())
}

/// One log line for the official profile read, one warning for the selectors a
/// `--config` file outranked.
fn log_origin(origin: &ConfigOrigin) {
    if let Some((path, by)) = &origin.profile {
        tracing::info!(
            path = %path.display(),
            selector = %by,
            "configuration read from the official client's profile, converted to tunnelgate's keys"
        );
    }
    if let Some(warning) = ignored_selectors(origin) {
        tracing::warn!("{warning}");
    }
}

/// The warning for official selectors that a `--config` file outranked, if any were set.
pub(crate) fn ignored_selectors(origin: &ConfigOrigin) -> Option<String> {
    (!origin.ignored_selectors.is_empty()).then(|| {
        format!(
            "--config is given, so the official profile named by {} is not read",
            origin.ignored_selectors.join(" and ")
        )
    })
}

/// How long the end of `tunnelgate run` waits for the signal watcher to end.
const SIGNAL_WATCH_JOIN: Duration = Duration::from_secs(1);

/// `tunnelgate doctor`: prints the report and returns its exit code (78 when the
/// configuration is invalid: the report says why, and stderr too, as `check` does).
pub(crate) async fn doctor(args: &DoctorArgs, config: Result<Config, ConfigError>) -> Result<u8, CliError> {
    let options = crate::doctor::Options {
        timeout: args.timeout,
        spawn_stdio: args.spawn_stdio,
    };
    let (report, code) = match config {
        Ok(config) => {
            let report = crate::doctor::run(&config, &options).await;
            let code = report.exit_code();
            (report, code)
        }
        Err(e) => {
            crate::stderr::line(format_args!("{e}"));
            (crate::doctor::invalid_config(&e), 78)
        }
    };
    let text = if args.json {
        report.render_json()
    } else {
        report.render_human()
    };
    print!("{text}");
    Ok(code)
}

/// `tunnelgate status [--require-ready]`.
pub(crate) async fn status(args: &StatusArgs) -> Result<u8, CliError> {
    let url = status_url(&args.url)?;
    let client = crate::egress::client::local(&url, STATUS_TIMEOUT).map_err(CliError::HttpClient)?;
    let shown = url.to_string();
    let readyz = url.join("readyz").expect("a sibling path of an http(s) URL parses");
    let (_, body) = get(&client, &url).await.map_err(|e| unreachable(&shown, &e))?;
    let doc: serde_json::Value = serde_json::from_str(&body).map_err(|source| CliError::StatusNotJson {
        url: shown.clone(),
        source,
    })?;
    println!(
        "{}",
        serde_json::to_string_pretty(&doc).expect("a parsed JSON value serializes")
    );
    let latch_code = doc["fatal"]["exit_code"].as_u64().and_then(|c| u8::try_from(c).ok());
    if !args.require_ready {
        return Ok(latch_code.unwrap_or(0));
    }
    let ready = doc["ready"].as_bool().unwrap_or(false);
    readiness::decide(&client, readyz, latch_code, ready).await
}

/// Bound of the whole `/status` request of `tunnelgate status`.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// One `GET url` on the ops listener, its answer read whole (as UTF-8, lossily), within
/// [`STATUS_TIMEOUT`].
///
/// # Cancel safety
/// Reads only; dropping it abandons one GET.
async fn get(client: &Client, url: &url::Url) -> Result<(http::StatusCode, String), LocalGetError> {
    let deadline = tokio::time::Instant::now() + STATUS_TIMEOUT;
    let (status, body) = local_get(client, url.as_str(), deadline).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// `{base}/status`, with what is wrong with `base` in words when it is not an http(s) URL
/// of a host.
fn status_url(base: &str) -> Result<url::Url, CliError> {
    let bad = |problem: String| CliError::StatusBadUrl {
        url: base.to_owned(),
        problem,
    };
    if !base.contains("://") {
        return Err(bad(format!(
            "is not a URL: it has no scheme; write e.g. \"http://{base}\""
        )));
    }
    let parsed = url::Url::parse(base).map_err(|e| bad(format!("is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(format!(
            "must start with http:// or https:// (found {}:), e.g. http://127.0.0.1:9464",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("names no host, e.g. http://127.0.0.1:9464".to_owned()));
    }
    let joined = format!("{}/status", parsed.as_str().trim_end_matches('/'));
    url::Url::parse(&joined).map_err(|e| bad(format!("is not a URL: {e}")))
}

/// What a failed `/status` request means, in words: nothing listening, no answer in time,
/// or the transport's own reason.
fn unreachable(url: &str, failed: &LocalGetError) -> CliError {
    let in_time = || format!("no answer within {}", humantime::format_duration(STATUS_TIMEOUT));
    let problem = match failed {
        LocalGetError::Send(e) if e.kind() == SendErrorKind::Refused => {
            return CliError::StatusNotListening { url: url.to_owned() };
        }
        LocalGetError::Send(e) if matches!(e.kind(), SendErrorKind::ConnectTimeout | SendErrorKind::Timeout) => {
            in_time()
        }
        LocalGetError::NoAnswer | LocalGetError::BodyCut { timed_out: true, .. } => in_time(),
        LocalGetError::Send(e) => {
            // The innermost cause names it ("failed to lookup address", "connection
            // reset", ...).
            let mut cause = e.chain();
            while let Some(next) = cause.source() {
                cause = next;
            }
            cause.to_string()
        }
        LocalGetError::Url => "is not a URL an HTTP request can be sent to".to_owned(),
        LocalGetError::BodyCut { timed_out: false, .. } => "the answer broke off".to_owned(),
    };
    CliError::StatusUnreachable {
        url: url.to_owned(),
        problem,
    }
}

/// `tunnelgate sim`.
pub(crate) async fn sim(args: SimArgs) -> Result<u8, CliError> {
    let sim_args = tunnelgate_sim::SimArgs {
        listen: args.listen,
        tunnel_id: args.tunnel_id,
        api_key: args.api_key,
        faults: args.faults,
        with_stub: args.with_stub,
        max_response_body: args.max_response_body,
        accept_resp_timing: args.accept_resp_timing,
        max_poll_wait: args.max_poll_wait,
    };
    match tunnelgate_sim::run_cli(sim_args).await {
        Ok(()) => Ok(0),
        // A bad fault script is bad configuration: the same 78 as the gateway's.
        Err(e @ SimError::Faults(_)) => {
            crate::stderr::line(format_args!("{e}"));
            Ok(78)
        }
        Err(e) => Err(CliError::Sim(e)),
    }
}
