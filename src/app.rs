//! Wiring and lifecycle of one gateway run: build every part from the configuration,
//! start the tasks, and stop them in a documented order.
//!
//! Stop order (graceful): stop polling (an answered poll's body is still read) -> refuse
//! new admissions (queued commands get a "not executed" answer; in strict mode an
//! admitted command that has sent nothing may not start sending) -> give in-flight
//! commands `strict.shutdown_grace` -> at its end or on a second stop request (strict:
//! latch `stopped_before_ack` only if the fence holder's request may have reached an MCP
//! server) cut the legs still running: each is answered within `strict.cleanup_timeout`
//! ("not delivered; safe to retry" if nothing left, "effect unknown" otherwise) -> cancel
//! what remains -> stop stdio children -> stop the ops listener.
//!
//! Fatal order: stop polling -> kill stdio groups and drop HTTP connections -> persist
//! the latch file (off the runtime) -> let refused commands post "not executed" within
//! `strict.cleanup_timeout` -> cancel the rest -> return the cause. The latch itself has
//! already reported the cause (stderr, event, metrics) when it was set.

mod labels;

pub use labels::GatewayLabels;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{AmbiguityPolicy, ChannelConfig, Config, LatchedStart};
use crate::control::{random_hex, ControlClient, ControlSettings};
use crate::dispatch::{Dispatcher, Health, Policy, Propagation, Stops, Wiring};
use crate::downstream::{Channels, HttpSettings, HttpTransport, StdioSettings, StdioTransport, Transport};
use crate::ops::OpsState;
use crate::protocol::{server_info_header, ServerInfoChannel};
use crate::strict::{latch_file, CommandRef, Fatal, FatalCategory, Fence};
use crate::supervisor::{FailureHook, Supervisor, TaskEnd, TaskKind};
use crate::telemetry::{Accounting, Metrics};

/// How a run ended. The binary maps it to the exit code; embedders match on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Stopped cleanly: nothing dispatched was left unacknowledged.
    Clean,
    /// Strict mode latched (or found a persisted latch at startup).
    Fatal(Fatal),
}

impl RunOutcome {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Clean => 0,
            Self::Fatal(f) => f.category.exit_code(),
        }
    }
}

/// Failures that prevent a run from starting.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot build the control-plane client: {0}")]
    ControlClient(String),
    #[error("channel {channel}: {problem}")]
    Channel { channel: String, problem: String },
    #[error("cannot listen on ops.listen {addr}: {source}")]
    OpsListen { addr: SocketAddr, source: std::io::Error },
}

impl GatewayError {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ControlClient(_) => "control_client",
            Self::Channel { .. } => "channel",
            Self::OpsListen { .. } => "ops_listen",
        }
    }
}

/// A request to stop, from a signal or an embedder.
#[derive(Clone)]
pub struct StopHandle {
    tx: mpsc::UnboundedSender<()>,
}

impl StopHandle {
    /// First call: graceful stop. Second call: stop now (strict: the latch wins).
    pub fn stop(&self) {
        let _ = self.tx.send(());
    }
}

/// A started gateway.
pub struct Gateway {
    config: Config,
    stop_tx: mpsc::UnboundedSender<()>,
    stop_rx: mpsc::UnboundedReceiver<()>,
    ops_addr_tx: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
}

impl Gateway {
    pub fn new(config: Config) -> Self {
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        Self {
            config,
            stop_tx,
            stop_rx,
            ops_addr_tx: None,
        }
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            tx: self.stop_tx.clone(),
        }
    }

    /// Reports the bound ops address once the listener is up (useful with port 0).
    pub fn ops_addr(&mut self) -> tokio::sync::oneshot::Receiver<SocketAddr> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.ops_addr_tx = Some(tx);
        rx
    }

    /// Runs until stopped or latched.
    pub async fn run(self) -> Result<RunOutcome, GatewayError> {
        let Gateway {
            config,
            // Kept alive for the whole run: with every sender gone, `recv` would return
            // at once and read as a stop request.
            stop_tx: _keep_stop_channel_open,
            mut stop_rx,
            ops_addr_tx,
        } = self;
        let strict = config.strict.enabled;
        if strict {
            if let Some((previous, cause)) = previous_latch(&config) {
                return match config.strict.latched_start {
                    LatchedStart::Exit => Ok(RunOutcome::Fatal(previous)),
                    LatchedStart::Hold => hold_latched(&config, previous, cause, stop_rx, ops_addr_tx).await,
                };
            }
        }
        let metrics = Arc::new(Metrics::new::<GatewayLabels>(strict, &config.stdio_channel_names()));
        let permits = config.mcp.max_concurrent.get();
        let fence = Fence::new(strict, if strict { 1 } else { permits });
        {
            let metrics = metrics.clone();
            fence.observe_latches(Box::new(move |fatal| metrics.fatal_latched(fatal.category)));
        }
        let health = Arc::new(Health::default());

        let root = CancellationToken::new();
        let tracker = TaskTracker::new();
        let hard_stop = root.child_token();
        let cut = root.child_token();
        let poll_stop = root.child_token();
        let ops_stop = CancellationToken::new();
        let supervisor = Supervisor::new(tracker.clone(), task_failure_hook(&fence, &health, &metrics));

        let channels = build_channels(&config, &metrics, &supervisor)?;
        let control = build_control(&config, &metrics)?;

        let listener = crate::ops::bind(config.ops.listen)
            .await
            .map_err(|source| GatewayError::OpsListen {
                addr: config.ops.listen,
                source,
            })?;
        let ops_addr = listener.local_addr().unwrap_or(config.ops.listen);
        tracing::info!(addr = %ops_addr, "ops listener ready");
        if let Some(tx) = ops_addr_tx {
            let _ = tx.send(ops_addr);
        }
        let ops_state = Arc::new(OpsState {
            fence: fence.clone(),
            health: health.clone(),
            channels: channels.clone(),
            metrics: metrics.clone(),
            poll_freshness: config.control_plane.poll_timeout + Duration::from_secs(30),
        });
        let ops_task = supervisor.spawn_untracked(
            TaskKind::OpsListener,
            crate::ops::serve(listener, ops_state, ops_stop.clone()),
        );

        let dispatcher = Dispatcher::new(Wiring {
            control,
            fence: fence.clone(),
            channels: channels.clone(),
            metrics: metrics.clone(),
            health: health.clone(),
            policy: Policy {
                strict,
                ambiguity_is_fatal: config.strict.on_downstream_ambiguity == AmbiguityPolicy::Fatal,
                cleanup_timeout: config.strict.cleanup_timeout,
                max_inflight: config.control_plane.max_inflight.get(),
                propagation: Propagation {
                    headers: config.telemetry.propagate.headers(),
                    meta: config.telemetry.propagate.meta(),
                },
            },
            supervisor: supervisor.clone(),
            stops: Stops {
                cut: cut.clone(),
                hard_stop: hard_stop.clone(),
            },
        });
        tracing::info!(
            mode = if strict { "strict" } else { "default" },
            channels = channels.status().len(),
            "gateway starting"
        );
        {
            let channels = channels.clone();
            let fence = fence.clone();
            supervisor.spawn(TaskKind::Warmup, async move {
                channels.warm(&fence).await;
                TaskEnd::Finished
            });
        }
        supervisor.spawn(TaskKind::Poller, dispatcher.clone().poll_loop(poll_stop.clone()));

        let latched = fence.latched_token();
        let outcome = tokio::select! {
            biased;
            // cancel-safe: waiting only.
            _ = latched.cancelled() => None,
            // cancel-safe: a received stop request is acted on below.
            _ = stop_rx.recv() => Some(()),
        };
        let stops = StopSignals {
            poll_stop: &poll_stop,
            cut: &cut,
            hard_stop: &hard_stop,
        };
        let result = match outcome {
            None => fatal_stop(&config, &fence, &channels, &tracker, &stops).await,
            Some(()) => graceful_stop(&config, &fence, &channels, &health, &tracker, &stops, &mut stop_rx).await,
        };
        let tally = metrics.accounting();
        tracing::info!(
            received = tally.received,
            legs = tally.legs,
            dropped = %Accounting::pairs(&tally.dropped),
            terminal_deliveries = %Accounting::pairs(&tally.terminal),
            balanced = tally.balances(),
            "final command accounting"
        );
        root.cancel();
        ops_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(1), ops_task).await;
        Ok(result)
    }
}

/// `strict.latched_start = "hold"`: serves only the ops listener, in the fatal state with
/// the persisted cause (`/readyz` 503, `/status` `state = "fatal"` and category
/// `latched_previously`, `tunnelgate_fatal_info{category=<the persisted cause's
/// category>}` so an alert names what fired), never polls and never touches an MCP
/// server, until stopped; then the run ends with the latch (exit 89).
async fn hold_latched(
    config: &Config,
    previous: Fatal,
    cause: Option<FatalCategory>,
    mut stop_rx: mpsc::UnboundedReceiver<()>,
    ops_addr_tx: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
) -> Result<RunOutcome, GatewayError> {
    let metrics = Arc::new(Metrics::new::<GatewayLabels>(true, &config.stdio_channel_names()));
    let fence = Fence::new(true, 1);
    {
        let metrics = metrics.clone();
        fence.observe_latches(Box::new(move |fatal| metrics.fatal_latched(fatal.category)));
    }
    let command = CommandRef {
        request_id: previous.request_id.clone(),
        channel: previous.channel.clone(),
        method: previous.method.clone(),
    };
    fence.latch(FatalCategory::LatchedPreviously, &command);
    fence.mark_persisted();
    if let Some(cause) = cause {
        metrics.fatal_info(cause);
    }
    let listener = crate::ops::bind(config.ops.listen)
        .await
        .map_err(|source| GatewayError::OpsListen {
            addr: config.ops.listen,
            source,
        })?;
    let ops_addr = listener.local_addr().unwrap_or(config.ops.listen);
    if let Some(tx) = ops_addr_tx {
        let _ = tx.send(ops_addr);
    }
    tracing::warn!(addr = %ops_addr, "holding in the fatal state (strict.latched_start = \"hold\"): serving the ops listener only until stopped");
    let ops_state = Arc::new(OpsState {
        fence: fence.clone(),
        health: Arc::new(Health::default()),
        // No channel is built: nothing may touch an MCP server.
        channels: Channels::default(),
        metrics,
        poll_freshness: config.control_plane.poll_timeout,
    });
    let ops_stop = CancellationToken::new();
    let ops_task = tokio::spawn(crate::ops::serve(listener, ops_state, ops_stop.clone()));
    let _ = stop_rx.recv().await;
    ops_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(1), ops_task).await;
    Ok(RunOutcome::Fatal(fence.fatal().unwrap_or(previous)))
}

/// Honours a persisted latch: never polls or touches an MCP server. Returns the run's
/// cause (`latched_previously`) and the persisted cause's own category, when readable.
fn previous_latch(config: &Config) -> Option<(Fatal, Option<FatalCategory>)> {
    let path = &config.strict.latch_file;
    let (command, cause) = match latch_file::read(path) {
        Ok(None) => return None,
        Ok(Some(previous)) => {
            eprintln!("tunnelgate: refusing to start: {}", previous.one_line());
            let cause = previous.category;
            (
                CommandRef {
                    request_id: previous.request_id,
                    channel: previous.channel,
                    method: previous.method,
                },
                Some(cause),
            )
        }
        Err(e) => {
            eprintln!("tunnelgate: refusing to start: {e}");
            (CommandRef::default(), None)
        }
    };
    eprintln!(
        "tunnelgate: inspect with `tunnelgate latch show`, clear with `tunnelgate latch clear` once the cause is understood"
    );
    let mut fatal = Fatal::new(FatalCategory::LatchedPreviously, &command);
    fatal.persisted = true;
    Some((fatal, cause))
}

/// The run's own stop signals, in the order the stop fires them.
struct StopSignals<'a> {
    poll_stop: &'a CancellationToken,
    cut: &'a CancellationToken,
    hard_stop: &'a CancellationToken,
}

/// What a supervised task's unexpected end does: in strict mode the latch
/// (`internal_error`: a part of the gateway is gone, nothing more may be trusted to reach
/// an MCP server); in both modes the gateway turns not ready with the reason.
fn task_failure_hook(fence: &Fence, health: &Arc<Health>, metrics: &Arc<Metrics>) -> FailureHook {
    let fence = fence.clone();
    let health = health.clone();
    let metrics = metrics.clone();
    Arc::new(move |task: TaskKind, why| {
        metrics.task_failed(task);
        health.task_failed(task.as_str(), why);
        if fence.is_strict() {
            fence.latch(FatalCategory::InternalError, &CommandRef::default());
        }
    })
}

async fn fatal_stop(
    config: &Config,
    fence: &Fence,
    channels: &Channels,
    tracker: &TaskTracker,
    stops: &StopSignals<'_>,
) -> RunOutcome {
    let latched_at = Instant::now();
    stops.poll_stop.cancel();
    channels.kill_all();
    let fatal = fence
        .fatal()
        .expect("the latched token is cancelled only after the cause is recorded");
    // The write ends with an fsync: off the runtime, so the cleanup below is not held up.
    let path = config.strict.latch_file.clone();
    let persisted = tokio::task::spawn_blocking({
        let fatal = fatal.clone();
        move || latch_file::write(&path, &fatal)
    })
    .await;
    match persisted {
        Ok(Ok(())) => fence.mark_persisted(),
        Ok(Err(e)) => eprintln!("tunnelgate: {e}; the latch holds for this run only"),
        Err(_) => eprintln!("tunnelgate: writing the latch file failed; the latch holds for this run only"),
    }
    let fatal = fence.fatal().unwrap_or(fatal);
    tracker.close();
    let cleanup_end = latched_at + config.strict.cleanup_timeout;
    if tokio::time::timeout_at(cleanup_end, tracker.wait()).await.is_err() {
        stops.cut.cancel();
        stops.hard_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_millis(500), tracker.wait()).await;
    }
    RunOutcome::Fatal(fatal)
}

async fn graceful_stop(
    config: &Config,
    fence: &Fence,
    channels: &Channels,
    health: &Health,
    tracker: &TaskTracker,
    stops: &StopSignals<'_>,
    stop_rx: &mut mpsc::UnboundedReceiver<()>,
) -> RunOutcome {
    tracing::info!(
        in_flight = health.in_flight(),
        queued = health.queued(),
        "stop requested: polling stops, in-flight commands get the grace"
    );
    health.set_draining();
    stops.poll_stop.cancel();
    fence.stop_admitting();
    tracker.close();
    let grace_end = Instant::now() + config.strict.shutdown_grace;
    let latched = fence.latched_token();
    let drained = tokio::select! {
        biased;
        // cancel-safe: waiting only.
        _ = latched.cancelled() => false,
        // cancel-safe: a second stop request means "now".
        _ = stop_rx.recv() => false,
        // cancel-safe: waiting only.
        r = tokio::time::timeout_at(grace_end, tracker.wait()) => r.is_ok(),
    };
    if !drained && fence.fatal().is_none() {
        // Strict: only a request that may have reached a server makes the stop fatal; one
        // that sent nothing can no longer start (stopping is set) and is answered below.
        if fence.is_strict() {
            let _ = fence.latch_if_sent_on_stop();
        }
        if fence.fatal().is_none() {
            tracing::warn!(
                unfinished = health.alive(),
                in_flight = health.in_flight(),
                "stop: cutting commands that did not finish; each is answered within the cleanup time"
            );
        }
    }
    if fence.fatal().is_some() {
        return fatal_stop(config, fence, channels, tracker, stops).await;
    }
    stops.cut.cancel();
    if tokio::time::timeout(config.strict.cleanup_timeout, tracker.wait())
        .await
        .is_err()
    {
        stops.hard_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_millis(500), tracker.wait()).await;
    }
    stops.hard_stop.cancel();
    channels.shutdown().await;
    tracing::info!("stopped cleanly");
    RunOutcome::Clean
}

fn build_channels(config: &Config, metrics: &Arc<Metrics>, supervisor: &Supervisor) -> Result<Channels, GatewayError> {
    let mut by_name = BTreeMap::new();
    for (name, channel) in &config.mcp.channels {
        let transport = match channel {
            ChannelConfig::Http { url } => {
                let settings = HttpSettings {
                    connect_timeout: config.mcp.connect_timeout,
                    request_timeout: config.mcp.request_timeout,
                    max_body_bytes: 16 * 1024 * 1024,
                };
                Transport::Http(
                    HttpTransport::new(name, url, settings).map_err(|e| GatewayError::Channel {
                        channel: name.to_string(),
                        problem: e.to_string(),
                    })?,
                )
            }
            ChannelConfig::Stdio {
                command,
                env,
                max_concurrent,
            } => {
                let settings = StdioSettings {
                    request_timeout: config.mcp.request_timeout,
                    restart_backoff_min: Duration::from_millis(200),
                    restart_backoff_max: Duration::from_secs(10),
                    stop_grace: Duration::from_secs(2),
                    max_concurrent: *max_concurrent,
                };
                Transport::Stdio(
                    StdioTransport::new(name, command.clone(), env.clone(), settings, metrics.clone())
                        .supervised(supervisor.clone()),
                )
            }
        };
        by_name.insert(name.to_string(), transport);
    }
    Ok(Channels::new(by_name))
}

/// The control-plane client as the gateway uses it (headers, server-info declaration);
/// also used by `tunnelgate doctor`, so its checks send what the runtime sends.
pub(crate) fn build_control(config: &Config, metrics: &Arc<Metrics>) -> Result<ControlClient, GatewayError> {
    let declared: Vec<ServerInfoChannel> = config
        .mcp
        .channels
        .iter()
        .map(|(name, c)| ServerInfoChannel {
            name: name.to_string(),
            proc_affinity: matches!(c, ChannelConfig::Stdio { .. }),
        })
        .collect();
    let cp = &config.control_plane;
    let settings = ControlSettings {
        base_url: cp.base_url.to_string(),
        url_path: cp.url_path.clone(),
        tunnel_id: cp.tunnel_id.to_string(),
        api_key: cp.api_key.expose().to_owned(),
        poll_timeout: cp.poll_timeout,
        post_timeout: cp.post_timeout,
        post_attempts: cp.post_attempts.get(),
        server_info: server_info_header(&declared),
    };
    ControlClient::new(settings, &random_hex(16), metrics.clone())
        .map_err(|e| GatewayError::ControlClient(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::GatewayLabels;

    /// A configuration with the stop bounds under test (nothing is contacted).
    fn config(strict: bool, latch_dir: &std::path::Path) -> Config {
        Config::from_toml_str(&format!(
            r#"
[control_plane]
base_url = "http://127.0.0.1:9"
tunnel_id = "t"
api_key = "k"
[mcp]
max_concurrent = 1
[mcp.channels.main]
url = "http://127.0.0.1:9/mcp"
[strict]
enabled = {strict}
latch_file = "{}"
shutdown_grace = "10s"
cleanup_timeout = "3s"
"#,
            latch_dir.join("latch.json").display()
        ))
        .unwrap()
    }

    /// A stop of a run with one admitted command: `sent` says whether its request may
    /// have left; the command honours the cut (`obeys_cut`) or only the hard stop.
    async fn stop_with_one_command(strict: bool, sent: bool, obeys_cut: bool) -> (RunOutcome, Duration) {
        let dir = tempfile::tempdir().unwrap();
        let config = config(strict, dir.path());
        let fence = Fence::new(strict, 1);
        let admission = fence
            .admit(CommandRef::new("r", "main", Some("tools/call")))
            .await
            .unwrap();
        if sent {
            admission.begin_send().unwrap();
        }
        let health = Health::default();
        let tracker = TaskTracker::new();
        let (poll_stop, cut, hard_stop) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        tracker.spawn({
            let (cut, hard_stop) = (cut.clone(), hard_stop.clone());
            async move {
                if obeys_cut {
                    cut.cancelled().await;
                } else {
                    hard_stop.cancelled().await;
                }
                drop(admission);
            }
        });
        let (_tx, mut rx) = mpsc::unbounded_channel();
        let stops = StopSignals {
            poll_stop: &poll_stop,
            cut: &cut,
            hard_stop: &hard_stop,
        };
        let started = Instant::now();
        let outcome = graceful_stop(
            &config,
            &fence,
            &Channels::default(),
            &health,
            &tracker,
            &stops,
            &mut rx,
        )
        .await;
        (outcome, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_strict_stop_with_nothing_sent_is_clean_exactly_at_the_end_of_the_grace() {
        let (outcome, elapsed) = stop_with_one_command(true, false, true).await;
        assert_eq!(outcome, RunOutcome::Clean);
        assert_eq!(elapsed, Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_strict_stop_with_a_sent_unacknowledged_command_latches_86_at_the_end_of_the_grace() {
        let (outcome, elapsed) = stop_with_one_command(true, true, true).await;
        let RunOutcome::Fatal(fatal) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(fatal.category, FatalCategory::StoppedBeforeAck);
        assert!(fatal.persisted, "the latch file was written");
        // The grace, then the latched cleanup (bounded by cleanup_timeout): the command
        // holds on until it is cut at the end of the cleanup.
        assert_eq!(elapsed, Duration::from_secs(13));
    }

    #[tokio::test(start_paused = true)]
    async fn a_default_stop_cuts_at_the_grace_and_stops_waiting_at_the_cleanup_bound() {
        let (outcome, elapsed) = stop_with_one_command(false, true, true).await;
        assert_eq!(outcome, RunOutcome::Clean);
        assert_eq!(elapsed, Duration::from_secs(10), "the cut command ends at once");

        let (outcome, elapsed) = stop_with_one_command(false, true, false).await;
        assert_eq!(outcome, RunOutcome::Clean);
        assert_eq!(
            elapsed,
            Duration::from_secs(13),
            "a command that ignores the cut is hard-stopped after the cleanup time"
        );
    }

    #[test]
    fn a_task_that_dies_latches_internal_error_in_strict_mode_and_makes_default_mode_not_ready() {
        let metrics = Arc::new(Metrics::new::<GatewayLabels>(true, &[]));
        let strict = Fence::new(true, 1);
        let health = Arc::new(Health::default());
        task_failure_hook(&strict, &health, &metrics)(TaskKind::Admitter, "the admission line closed");
        assert_eq!(strict.fatal().unwrap().category, FatalCategory::InternalError);
        assert_eq!(health.task_failure(), Some(("admitter", "the admission line closed")));

        let default = Fence::new(false, 4);
        let health = Arc::new(Health::default());
        let hook = task_failure_hook(&default, &health, &metrics);
        hook(TaskKind::Notifier, "panicked");
        hook(TaskKind::Poller, "panicked");
        assert!(default.fatal().is_none(), "default mode never latches");
        assert_eq!(
            health.task_failure(),
            Some(("notifier", "panicked")),
            "the first failure is kept"
        );
    }
}
