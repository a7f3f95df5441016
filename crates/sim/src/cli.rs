//! `tunnelgate sim` as a command: start the simulator (and optionally the MCP stub),
//! print where they listen, run until Ctrl-C or SIGTERM, print a one-line summary.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::fault::{FaultScript, FaultScriptError};
use super::stub::McpStub;
use super::{SimConfig, Simulator};

/// Arguments of `tunnelgate sim` (parsed by the binary).
#[derive(Clone, Debug)]
pub struct SimArgs {
    pub listen: SocketAddr,
    pub tunnel_id: String,
    pub api_key: String,
    /// A fault script (TOML, format in the crate header, `lib.rs`).
    pub faults: Option<PathBuf>,
    /// Also start the embedded MCP stub on this address.
    pub with_stub: Option<SocketAddr>,
    /// The largest response POST body accepted, in bytes ([`SimConfig::max_response_body`]).
    pub max_response_body: usize,
    /// Response POSTs may carry `resp_timing` ([`SimConfig::accept_resp_timing`]).
    pub accept_resp_timing: bool,
    /// The longest an empty poll is held ([`SimConfig::max_poll_wait`]).
    pub max_poll_wait: std::time::Duration,
}

/// Why `tunnelgate sim` could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Faults(#[from] FaultScriptError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("cannot wait for a stop signal: {0}")]
    Signal(std::io::Error),
}

/// Runs the simulator until Ctrl-C (SIGINT) or SIGTERM.
pub async fn run_cli(args: SimArgs) -> Result<(), SimError> {
    let faults = match &args.faults {
        Some(path) => FaultScript::from_file(path)?,
        None => FaultScript::default(),
    };
    let mut config = SimConfig::new(args.tunnel_id.clone(), args.api_key);
    config.listen = args.listen;
    config.faults = faults;
    config.max_response_body = args.max_response_body;
    config.accept_resp_timing = args.accept_resp_timing;
    config.max_poll_wait = args.max_poll_wait;
    let sim = Simulator::start(config).await.map_err(|source| SimError::Listen {
        addr: args.listen,
        source,
    })?;
    let stub = match args.with_stub {
        Some(addr) => Some(
            McpStub::start(addr)
                .await
                .map_err(|source| SimError::Listen { addr, source })?,
        ),
        None => None,
    };
    println!(
        "sim listening on {} (tunnel {}); MCP ingress: {}",
        sim.base_url(),
        args.tunnel_id,
        sim.ingress_url()
    );
    if let Some(stub) = &stub {
        println!("MCP stub listening on {}", stub.url());
    }
    let waited = stop_signal().await;
    let t = sim.totals();
    println!(
        "sim stopped: {} commands issued, {} responses received, {} completed, {} faults applied",
        t.issued, t.responses, t.completed, t.faults_applied
    );
    sim.shutdown().await;
    if let Some(stub) = stub {
        stub.shutdown().await;
    }
    waited.map_err(SimError::Signal)
}

/// Resolves on the first SIGINT or SIGTERM (a supervisor stops the simulator like a user).
async fn stop_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        // cancel-safe: waiting only.
        r = tokio::signal::ctrl_c() => r,
        // cancel-safe: waiting only.
        _ = term.recv() => Ok(()),
    }
}
