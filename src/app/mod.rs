//! Wiring and lifecycle of one gateway run, and the public embedding API: [`Gateway`],
//! [`StopHandle`], [`RunOutcome`], [`GatewayError`].
//!
//! A run builds its parts from the configuration (`build`), starts the poller and the
//! warm-up, and ends through one of the two stop orders (`stop`, where both are
//! documented). A strict start that finds a persisted latch never gets that far
//! (`latched`).

mod build;
mod coordinated;
mod labels;
mod latched;
mod run_file;
mod stop;

pub use build::{build_control, channel_headers, gateway_metrics, harpoon_settings, session_settings};
#[cfg(test)]
pub(crate) use labels::GatewayLabels;
pub use run_file::RunFile;
pub(crate) use run_file::RunFileError;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::sync::mpsc;

use crate::config::{Config, LatchedStart};
use crate::control::BuildError;
use crate::ops::{Mode, OpsState, StatusDocument};
use crate::strict::Fatal;
use crate::telemetry::{Accounting, LogRing, Metrics};
use build::Parts;
use stop::{StopBounds, StopOrder, StopSignals};

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
    ControlClient(#[source] BuildError),
    #[error("channel {channel}: {problem}")]
    Channel { channel: String, problem: String },
    #[error("cannot listen on ops.listen {addr}: {source}")]
    OpsListen { addr: SocketAddr, source: std::io::Error },
    /// A configured TLS file cannot be used: a configuration error (exit 78).
    #[error("invalid configuration: {0}")]
    Tls(#[source] crate::egress::tls::TlsError),
    /// The etcd client of `coordination.etcd` cannot be built (a TLS file): exit 78.
    #[error("invalid configuration: coordination.etcd: {0}")]
    Coordination(#[source] crate::coord::etcd::EtcdError),
    /// `ops.url_file` cannot be written: a configuration error (exit 78).
    #[error(transparent)]
    RunFile(RunFileError),
}

impl GatewayError {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ControlClient(_) => "control_client",
            Self::Channel { .. } => "channel",
            Self::OpsListen { .. } => "ops_listen",
            Self::Tls(_) => "tls",
            Self::Coordination(_) => "coordination",
            Self::RunFile(_) => "run_file",
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

/// Reads what `/status` shows, in process (a status dump on SIGUSR1). Cheap to clone.
#[derive(Clone, Default)]
pub struct StatusHandle {
    state: Arc<OnceLock<Arc<OpsState>>>,
}

impl StatusHandle {
    /// The `/status` document; `None` until the ops listener serves.
    pub fn status(&self) -> Option<StatusDocument> {
        self.state.get().map(|s| s.status())
    }

    /// The commands counted so far (the final accounting's figures); `None` as above.
    pub fn accounting(&self) -> Option<Accounting> {
        self.state.get().map(|s| s.metrics.accounting())
    }

    pub(super) fn publish(&self, state: Arc<OpsState>) {
        let _ = self.state.set(state);
    }
}

/// A started gateway.
pub struct Gateway {
    config: Config,
    stop_tx: mpsc::UnboundedSender<()>,
    stop_rx: mpsc::UnboundedReceiver<()>,
    ops_addr_tx: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
    status: StatusHandle,
    log_ring: Arc<LogRing>,
}

impl Gateway {
    pub fn new(config: Config) -> Self {
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        Self {
            config,
            stop_tx,
            stop_rx,
            ops_addr_tx: None,
            status: StatusHandle::default(),
            log_ring: Arc::new(LogRing::disabled()),
        }
    }

    /// Serves `ring` on `GET /events` (the ring `telemetry::logging::init`
    /// fills). Without it `/events` holds nothing.
    pub fn with_log_ring(mut self, ring: Arc<LogRing>) -> Self {
        self.log_ring = ring;
        self
    }

    /// Reads this gateway's `/status` document while it runs.
    pub fn status_handle(&self) -> StatusHandle {
        self.status.clone()
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
            stop_rx,
            ops_addr_tx,
            status,
            log_ring,
        } = self;
        if config.strict.enabled {
            if let Some((previous, cause)) = latched::previous_latch(&config) {
                return match config.strict.latched_start {
                    LatchedStart::Exit => Ok(RunOutcome::Fatal(previous)),
                    LatchedStart::Hold => {
                        latched::hold(&config, (previous, cause), stop_rx, ops_addr_tx, &status, &log_ring).await
                    }
                };
            }
            if let Some(interrupted) = latched::interrupted(&config) {
                let cause = Some(interrupted.category);
                return match config.strict.latched_start {
                    LatchedStart::Exit => Ok(RunOutcome::Fatal(interrupted)),
                    LatchedStart::Hold => {
                        latched::hold(&config, (interrupted, cause), stop_rx, ops_addr_tx, &status, &log_ring).await
                    }
                };
            }
        }
        let parts = Parts::observed(&config).with_channels(&config)?;
        let mut control = build_control(&config, &parts.metrics, &parts.instance_id)?;
        if let Some(source) = build::server_info_source(&config, &parts.channels) {
            control = control.with_declaration(source);
        }
        let mut parts = parts.coordinated(&config, &control)?;
        let ops = parts.bind_ops(&config).await?;
        tracing::info!(addr = %ops.addr, "ops listener ready");
        let url_file = ops.url_file(&config)?; // removed below, before a hold writes its own
        ops.report(ops_addr_tx);
        status.publish(parts.serve_ops(&config, ops, &log_ring));

        let signals = StopSignals::new();
        let dispatcher = parts.dispatcher(&config, control, &signals);
        tracing::info!(
            mode = Mode::of(config.strict.enabled).as_str(),
            channels = parts.channels.status().len(),
            "gateway starting"
        );
        log_poll_filter(&config);
        parts.start(&dispatcher, &signals);

        let order = StopOrder {
            bounds: StopBounds::of(&config),
            fence: parts.fence.clone(),
            channels: parts.channels.clone(),
            health: parts.health.clone(),
            supervisor: parts.supervisor.clone(),
            signals,
            requests: stop_rx,
            cluster: parts.coordinator.clone(),
        };
        let (outcome, signals, requests) = order.run().await;
        log_accounting(&parts.metrics);
        signals.end();
        parts.finish().await;
        drop(url_file);
        // A coordinated replica that latched during its run (on a predecessor's unsettled
        // intent, say) holds as `strict.latched_start = "hold"` asks, as its next start
        // would: on the latch file just persisted, serving only the ops listener.
        if matches!(outcome, RunOutcome::Fatal(_))
            && config.coordination.is_etcd()
            && config.strict.latched_start == LatchedStart::Hold
        {
            if let Some(previous) = latched::previous_latch(&config) {
                return latched::hold(&config, previous, requests, None, &status, &log_ring).await;
            }
        }
        Ok(outcome)
    }
}

/// With `control_plane.poll_channels`, one line naming the channels polled and those
/// configured but not polled (this replica gets none of their commands; their stdio
/// children still run).
fn log_poll_filter(config: &Config) {
    let polled = &config.control_plane.poll_channels;
    if polled.is_empty() {
        return;
    }
    let unpolled: Vec<&str> = config
        .mcp
        .channels
        .keys()
        .filter(|name| !polled.contains(name))
        .map(|name| name.as_str())
        .collect();
    let polled: Vec<&str> = polled.iter().map(|name| name.as_str()).collect();
    tracing::info!(
        poll_channels = %polled.join(","),
        not_polled = %unpolled.join(","),
        "polling only the channels of control_plane.poll_channels"
    );
}

/// The one line that says whether every command received was accounted for.
fn log_accounting(metrics: &Metrics) {
    let tally = metrics.accounting();
    tracing::info!(
        received = tally.received,
        legs = tally.legs,
        dropped = %Accounting::pairs(&tally.dropped),
        terminal_deliveries = %Accounting::pairs(&tally.terminal),
        balanced = tally.balances(),
        "final command accounting"
    );
}

#[cfg(test)]
mod tests;
