//! tunnelgate-sim: a faithful local control plane (`tunnelgate sim`), an MCP ingress,
//! fault scripts and an embedded MCP stub; the library behind the gateway's `sim` and
//! `demo` commands and its integration tests. Test support, not part of the gateway's API.
//!
//! Owns: the poll and response endpoints of the contract (bearer and shard-token checks,
//! `204` on empty polls, `404` for unknown or completed requests, `TunnelResponsePayload`
//! validation), the MCP ingress (`ingress`), fault scripts (`fault`), the record of
//! what it received (`record`, bounded) and an embedded MCP server for the demo (`stub`).
//! Depends on the wire protocol crate (`tunnelgate-protocol`) only, never on the gateway
//! (the crate graph holds it: this crate does not depend on `tunnelgate`); the simulator
//! only speaks the wire contract, so it can catch a gateway that does not.
//!
//! A poll that names channels (`channel=NAME`, repeated: the official client's poll
//! filter) is handed only those channels' commands (a command without a channel is
//! `main`'s); the others stay queued, in order, for the pollers that name them or name
//! none. Each poll's record lists the request ids it handed out.
//!
//! Serves plain HTTP/1 at the root: `{base}/v1/tunnels/{tunnel_id}` (tunnel metadata,
//! `TunnelClientMetadata`), `{base}/v1/tunnels/{tunnel_id}/poll`,
//! `{base}/v1/tunnels/{tunnel_id}/response`, `{base}/v1/mcp/{tunnel_id}`.
//!
//! # Fault scripts (TOML)
//!
//! ```toml
//! # Response-POST faults; the first matching rule applies. `match` fields all must
//! # match: `order` (1-based order in which commands were queued, raw ones included),
//! # `method`, `tool` (`params.name` of a `tools/call`), `resp_type` (a resp_type, or
//! # "terminal" for any final type). `attempts`: which POSTs of the same request id and
//! # resp_type (1-based), or "all" (the default). Exactly one action:
//! #   action = "hold"    read the whole body, never answer (the request stays pending)
//! #   action = "close"   read the whole body, drop the connection (stays pending)
//! #   status = 503       answer with this 4xx/5xx status (stays pending);
//! #                      optional retry_after = "2" or an HTTP date
//! #   delay = "500ms"    wait, then handle normally
//! [[rule]]
//! match = { order = 1, resp_type = "terminal" }
//! attempts = [1]
//! status = 503
//! retry_after = "1"
//!
//! [[rule]]
//! match = { method = "tools/call", tool = "slow" }
//! action = "hold"
//!
//! # Poll faults: `nth` is the 1-based index of poll requests received (absent: every
//! # poll); an action as above, and/or `extra_commands` (hand out limit + K commands).
//! [[poll]]
//! nth = 2
//! status = 429
//! retry_after = "1"
//!
//! [[poll]]
//! extra_commands = 3
//!
//! # Commands fed in: `raw` is one verbatim element of `commands` (malformed envelopes,
//! # unknown types); `jsonrpc` builds a well-formed command with fresh ids (optional
//! # `command_type`, `channel`, `response_timeout`; `command_type` alone builds a
//! # command without a payload, e.g. `command_type = "oauth_discovery"`). Queued at start, or with `after_order = N` when the
//! # first response POST for command N arrives (commands after an ambiguity).
//! [[feed]]
//! raw = '{"request_id":"req_bad","shard_token":"s","command_type":"teleport"}'
//!
//! [[feed]]
//! jsonrpc = '{"jsonrpc":"2.0","id":9,"method":"ping"}'
//! response_timeout = "0s"
//! after_order = 1
//! ```

// Nothing `pub` but what the gateway, its tests and examples use.
// Every function outside tests is under 80 lines of code (clippy counts a body's lines,
// blanks and comments aside; the threshold is in clippy.toml). Table-driven tests may be
// longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![deny(unreachable_pub)]

mod cli;
mod command;
mod control;
mod fault;
mod ingress;
mod record;
mod routes;
mod server;
mod state;
mod stub;
mod validate;

#[cfg(test)]
mod tests;

/// The wire protocol crate, under the name the modules use for it (`crate::protocol`).
use tunnelgate_protocol as protocol;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use cli::{run_cli, SimArgs, SimError};
pub use command::NewCommand;
pub use fault::{FaultAction, FaultScript, FaultScriptError};
pub use record::{CommandRecord, Dropped, LookupRecord, PollRecord, Record, ResponseRecord};
pub use stub::McpStub;

use state::Shared;

/// Default bound of the record's lists and of the completed requests remembered.
const DEFAULT_CAPACITY: usize = 4096;

/// Default bound of a response POST body: larger ones get `413 request_body_too_large`.
/// (`tunnelgate sim --max-response-body`'s default.)
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 8 * 1024 * 1024;

/// How a simulator runs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub(crate) listen: SocketAddr,
    pub(crate) tunnel_id: String,
    pub api_key: String,
    pub faults: FaultScript,
    /// How long the MCP ingress waits for the gateway's final response (default 60 s);
    /// also the `response_timeout` of the commands it queues.
    pub ingress_timeout: Duration,
    /// Cap on a poll's `timeout_ms` (default 30 s).
    pub max_poll_wait: Duration,
    /// Entries the record keeps per list (polls, response POSTs, commands); the oldest
    /// are dropped first and counted (default 4096).
    pub record_capacity: usize,
    /// Completed requests remembered so that a repeated POST gets `404` (default 4096);
    /// a POST for one forgotten since also gets `404`, as an unknown request.
    pub completed_capacity: usize,
    /// The largest response POST body accepted, in bytes (default 8 MiB); a larger one
    /// is answered `413` with the contract's `request_body_too_large`, and the request
    /// stays pending.
    pub max_response_body: usize,
    /// Whether a response POST may carry `resp_timing` (wire 2026-08-25's tolerant
    /// reader); by default it is an unknown field and refused (`400`), as the published
    /// contract's schema says. Accepted or not, a timing that is not valid is refused.
    pub accept_resp_timing: bool,
}

/// A running simulator. Dropping it stops serving; [`Simulator::shutdown`] also waits.
pub struct Simulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// TCP connections accepted (the gateway's, and MCP callers' on the ingress).
    connections: Arc<std::sync::atomic::AtomicU64>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl SimConfig {
    /// Loopback on an ephemeral port, no faults, default timeouts.
    pub fn new(tunnel_id: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tunnel_id: tunnel_id.into(),
            api_key: api_key.into(),
            faults: FaultScript::default(),
            ingress_timeout: Duration::from_secs(60),
            max_poll_wait: Duration::from_secs(30),
            record_capacity: DEFAULT_CAPACITY,
            completed_capacity: DEFAULT_CAPACITY,
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            accept_resp_timing: false,
        }
    }
}

impl Simulator {
    /// Binds `config.listen` and starts serving. Feeds without `after_order` are queued.
    pub async fn start(config: SimConfig) -> std::io::Result<Simulator> {
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(
            config.tunnel_id,
            config.api_key,
            config.max_poll_wait,
            config.ingress_timeout,
            config.faults,
            state::Capacity {
                record: config.record_capacity,
                completed: config.completed_capacity,
                response_body: config.max_response_body,
                resp_timing: config.accept_resp_timing,
            },
        ));
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let connections = Arc::new(std::sync::atomic::AtomicU64::new(0));
        tracker.spawn(server::serve(
            listener,
            routes::router(shared.clone()),
            (shutdown.clone(), tracker.clone()),
            connections.clone(),
        ));
        Ok(Simulator {
            addr,
            shared,
            connections,
            shutdown,
            tracker,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT`, the gateway's control-plane base URL (with an empty `url_path`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many TCP connections the simulator has accepted: the gateway's polls and
    /// response POSTs, and MCP callers' on the ingress. A gateway that reuses its
    /// connections shows few for many commands.
    pub fn connections_accepted(&self) -> u64 {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `{base_url}/v1/mcp/{tunnel_id}`, for MCP clients.
    pub fn ingress_url(&self) -> String {
        format!("{}/v1/mcp/{}", self.base_url(), self.shared.tunnel_id)
    }

    /// Queues a command; returns its fresh request id.
    pub fn enqueue(&self, cmd: NewCommand) -> String {
        self.shared.enqueue(cmd, None)
    }

    /// Queues `raw` verbatim as one element of a future poll's `commands`. When it
    /// carries string `request_id` and `shard_token`, responses to it are accepted.
    pub fn enqueue_raw(&self, raw: serde_json::Value) {
        self.shared.enqueue_raw(raw);
    }

    /// Everything received so far.
    pub fn record(&self) -> Record {
        self.shared.record()
    }

    /// Waits until `pred` holds on the record, at most `timeout`; the error names `what`.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Record) -> bool,
    ) -> Result<Record, String> {
        self.shared.wait_record(what, timeout, pred).await
    }

    /// Stops accepting, drops every connection (held ones included), waits for the tasks.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.tracker.close();
        // Bounded: every task ends on the token; this only guards against a stuck one.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tracker.wait()).await;
    }

    fn totals(&self) -> state::Totals {
        self.shared.totals()
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
