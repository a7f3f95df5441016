//! The built-in defaults: the lowest configuration layer.
//!
//! Applied after the other layers are merged, to keys no layer set, so that
//! validation can tell an explicit value from a default (see `mcp.max_concurrent`).

pub(super) const BASE_URL: &str = "https://api.openai.com";
pub(super) const URL_PATH: &str = "";
pub(super) const API_KEY: &str = "env:CONTROL_PLANE_API_KEY";
pub(super) const POLL_TIMEOUT: &str = "30s";
pub(super) const MAX_INFLIGHT: u64 = 20;
/// `control_plane.http2`: HTTP/1.1 to the control plane unless asked.
pub(super) const CONTROL_PLANE_HTTP2: bool = false;
pub(super) const RESP_TIMING: bool = false;
pub(super) const POST_TIMEOUT: &str = "10s";
pub(super) const POST_ATTEMPTS: u64 = 3;

pub(super) const MAX_CONCURRENT: u64 = 10;
/// `mcp.max_concurrent` when strict mode is on and no layer set it.
pub(super) const STRICT_MAX_CONCURRENT: u64 = 1;
pub(super) const REQUEST_TIMEOUT: &str = "300s";
pub(super) const CONNECT_TIMEOUT: &str = "5s";

/// `mcp.channels.NAME.session`: the gateway opens each stdio child's session itself.
pub(super) const STDIO_SESSION: &str = "owned";
/// `mcp.channels.NAME.initialize.protocol_version`: the latest revision with the
/// `initialize` handshake (a 2026-07-28 server is discovered, not initialized). Written
/// out because `config` imports nothing of the crate; a test keeps it equal to
/// `protocol::McpRevision::LATEST_WITH_INITIALIZE`.
pub(crate) const STDIO_PROTOCOL_VERSION: &str = "2025-11-25";
/// `mcp.channels.NAME.initialize.client_name`.
pub(super) const STDIO_CLIENT_NAME: &str = "tunnelgate";
/// `mcp.channels.NAME.initialize.timeout`.
pub(super) const STDIO_INITIALIZE_TIMEOUT: &str = "10s";
/// How long a call the era bridge parked waits for its caller's retry.
pub(super) const PARK_TIMEOUT: &str = "120s";
/// The bound of a held call's whole life, across its input rounds.
pub(super) const HELD_CALL_TIMEOUT: &str = "10m";
/// Input rounds per held call (the Python and TypeScript SDK clients stop at 10).
pub(super) const MAX_INPUT_ROUNDS: u64 = 8;

pub(super) const STRICT_ENABLED: bool = false;
pub(super) const ON_DOWNSTREAM_AMBIGUITY: &str = "fatal";
pub(super) const LATCH_FILE: &str = "/var/lib/tunnelgate/latch.json";
pub(super) const SHUTDOWN_GRACE: &str = "10s";
pub(super) const CLEANUP_TIMEOUT: &str = "5s";

pub(super) const RECEIPTS_ENABLED: bool = true;
/// `receipts.path` when unset: this name in the directory of `strict.latch_file`.
pub(super) const RECEIPTS_FILE_NAME: &str = "receipts.jsonl";

pub(super) const LISTEN: &str = "127.0.0.1:9464";
pub(super) const ALLOW_REMOTE: bool = false;
/// `ops.log_buffer_events`: a few minutes of a busy gateway's log at `info`.
pub(super) const LOG_BUFFER_EVENTS: u64 = 2_000;
/// The most `ops.log_buffer_events` accepts: the ring's worst case stays a few hundred
/// MiB (docs/PERFORMANCE.md).
pub(crate) const MAX_LOG_BUFFER_EVENTS: u64 = 100_000;

pub(super) const LOG_FORMAT: &str = "json";
pub(super) const LOG_LEVEL: &str = "info";
pub(super) const OTLP_ENDPOINT: &str = "";
pub(super) const PROPAGATE: &str = "off";

/// One thread: the gateway's work is short steps between loopback I/O, and on the
/// measured machine a single-threaded scheduler did the same work with less CPU per
/// command and more commands per second than a thread per core (docs/PERFORMANCE.md).
pub(super) const WORKER_THREADS: u64 = 1;
/// The most `runtime.worker_threads` accepts.
pub(super) const MAX_WORKER_THREADS: u64 = 256;
