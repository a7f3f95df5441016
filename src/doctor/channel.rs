//! The MCP channel checks, through the runtime's own transports (admitted by a private,
//! non-strict fence), so a probe connects, frames and classifies exactly as a command
//! would.
//!
//! HTTP: one `initialize` request (protocol `2025-06-18`, client `tunnelgate-doctor`);
//! a JSON-RPC result, in JSON or SSE, passes; a session the server opened is closed with
//! `DELETE`. stdio: the program must resolve (on the child's `PATH`, or as a path) to an
//! executable file; it is started only with `--spawn-stdio` (starting it runs the
//! server), then sent `initialize`, and its process group is killed.
//!
//! Invariants: never a tool call, never a second request but the session `DELETE`;
//! details name the channel's key, never its URL (it may carry a token) or its
//! arguments (they may carry anything).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::time::Instant;

use super::control::{net_words, NetFailure};
use super::report::{Check, Verdict};
use super::Options;
use crate::config::{ChannelConfig, StdioSession};
use crate::downstream::{
    DownstreamRequest, HttpEgress, HttpSettings, HttpTransport, LegFailure, LegResult, NotifySink, SessionSettings,
    StdioSettings, StdioTransport,
};
use crate::egress::http_url::HttpUrl;
use crate::protocol::{JsonRpcPayload, McpRevision, WireHeaders, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::strict::{Admission, CommandRef, Fence};
use crate::telemetry::{safe_method, Metrics};

/// The protocol revision the probe asks for.
const PROTOCOL_VERSION: &str = McpRevision::V2025_06_18.as_str();
/// The probe's `clientInfo.name`.
const CLIENT_NAME: &str = "tunnelgate-doctor";
/// An `initialize` answer larger than this is refused (it is only inspected).
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Where a child without `PATH` in its environment is looked for (as `execvp` does).
const DEFAULT_PATH: &str = "/bin:/usr/bin";
/// How long a killed stdio child may take to be reaped before the check moves on.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// What a channel check needs from the run.
pub(super) struct Probe<'a> {
    pub(super) fence: &'a Fence,
    pub(super) metrics: &'a Arc<Metrics>,
    pub(super) options: &'a Options,
    /// `mcp.connect_timeout`: the probe connects no more patiently than the runtime.
    pub(super) connect_timeout: Duration,
    /// For the channels' configured headers, `mcp.tls` and the channels' own TLS: the
    /// probe sends, trusts and presents what a command would.
    pub(super) config: &'a crate::config::Config,
}

/// What an `initialize` answer said.
#[derive(Debug, PartialEq, Eq)]
struct Initialized {
    protocol: Option<String>,
    server: Option<String>,
}

/// Why a program cannot be started.
#[derive(Debug, PartialEq, Eq)]
enum Unresolved {
    Missing,
    Irregular(PathBuf),
    NoExecPermission(PathBuf),
}

/// Checks channel `name`.
pub(super) async fn check(name: &str, channel: &ChannelConfig, probe: &Probe<'_>) -> Check {
    let check_name = format!("channel.{name}");
    match channel {
        ChannelConfig::Http { url, proxy, socket, .. } => {
            let egress = HttpEgress {
                proxy: proxy.clone(),
                socket: socket.clone(),
                tls: None,
            };
            http(&check_name, name, url, egress, probe).await
        }
        ChannelConfig::Stdio {
            command, env, session, ..
        } => stdio(&check_name, name, command, env, session, probe).await,
    }
}

async fn http(check_name: &str, channel: &str, url: &HttpUrl, egress: HttpEgress, probe: &Probe<'_>) -> Check {
    let key = format!("mcp.channels.{channel}.url");
    let timeout = probe.options.timeout;
    let settings = HttpSettings {
        connect_timeout: probe.connect_timeout.min(timeout),
        request_timeout: timeout,
        max_body_bytes: MAX_BODY_BYTES,
    };
    let tls = match crate::egress::tls::client_config(&probe.config.mcp.tls_of(channel)) {
        Ok(tls) => tls,
        Err(e) => return Check::fail(check_name, format!("{e}")),
    };
    let egress = HttpEgress { tls, ..egress };
    let transport = match HttpTransport::with_egress(channel, url, settings, egress) {
        Ok(t) => t.with_headers(crate::app::channel_headers(probe.config, channel)),
        Err(e) => return Check::fail(check_name, format!("{key}: {e}")),
    };
    let Some(admission) = admit(probe.fence, channel).await else {
        return Check::fail(check_name, "internal: the probe was not admitted");
    };
    let started = Instant::now();
    let init = InitRequest::new();
    let leg = transport.call(&admission, &init.request(), &init.notes).await;
    let elapsed = started.elapsed();
    let answered = match judge(leg, &key, timeout) {
        Ok(answered) => answered,
        Err((verdict, detail)) => {
            // A refused handshake names its problem (an untrusted CA, a refused certificate).
            let detail = match transport.last_tls_problem() {
                Some(problem) => format!("{detail}: {problem}"),
                None => detail,
            };
            return Check::new(check_name, verdict, detail);
        }
    };
    let (info, session) = answered;
    let mut detail = format!(
        "initialize answered in {} ms ({})",
        elapsed.as_millis(),
        describe(&info)
    );
    let Some(session) = session else {
        detail.push_str("; no session opened");
        return Check::ok(check_name, detail);
    };
    let version = info.protocol.as_deref().unwrap_or(PROTOCOL_VERSION);
    let headers: WireHeaders = vec![
        (MCP_SESSION_ID.to_owned(), vec![session]),
        (MCP_PROTOCOL_VERSION.to_owned(), vec![version.to_owned()]),
    ];
    let end = transport
        .terminate_session(&admission, &headers, Some(Instant::now() + timeout))
        .await;
    match (end.failure, end.reply.resp_code) {
        (None, 200..=299 | 404) => {
            detail.push_str("; session closed");
            Check::ok(check_name, detail)
        }
        (None, 405) => {
            detail.push_str("; the server does not let clients end sessions (DELETE 405)");
            Check::ok(check_name, detail)
        }
        (None, status) => {
            detail.push_str(&format!("; closing the session got HTTP {status}"));
            Check::warn(check_name, detail)
        }
        (Some(failure), _) => {
            detail.push_str(&format!("; closing the session failed ({})", failure.kind()));
            Check::warn(check_name, detail)
        }
    }
}

async fn stdio(
    check_name: &str,
    channel: &str,
    command: &[String],
    env: &BTreeMap<String, String>,
    session: &StdioSession,
    probe: &Probe<'_>,
) -> Check {
    let key = format!("mcp.channels.{channel}.command");
    let Some(program) = command.first() else {
        return Check::fail(check_name, format!("{key} is empty"));
    };
    // The child's PATH: the configured one, else the gateway's (as the runtime passes it).
    let path_var = env.get("PATH").cloned().or_else(|| std::env::var("PATH").ok());
    let resolved = match resolve(program, path_var.as_deref()) {
        Ok(path) => path,
        Err(why) => return Check::fail(check_name, unresolved_words(&why, program, &key)),
    };
    if !probe.options.spawn_stdio {
        return Check::ok(
            check_name,
            format!(
                "`{program}` resolves to {}; not started (--spawn-stdio starts it and sends initialize)",
                resolved.display()
            ),
        );
    }
    let Some(admission) = admit(probe.fence, channel).await else {
        return Check::fail(check_name, "internal: the probe was not admitted");
    };
    let timeout = probe.options.timeout;
    // The runtime's own handshake (its `initialize` parameters), bounded by the probe's
    // timeout; the probe's `initialize` is then answered from that session.
    let settings = StdioSettings {
        request_timeout: timeout,
        stop_grace: Duration::from_millis(500),
        session: SessionSettings {
            timeout: timeout.min(session.timeout),
            ..crate::app::session_settings(session)
        },
        ..StdioSettings::default()
    };
    let transport = StdioTransport::new(channel, command.to_vec(), env.clone(), settings, probe.metrics.clone());
    let started = Instant::now();
    let init = InitRequest::new();
    let leg = transport.call(&admission, &init.request(), &init.notes).await;
    let elapsed = started.elapsed();
    transport.kill_now();
    let reaped = wait_reaped(&transport).await;
    let stopped = if reaped {
        "stopped (process group killed)"
    } else {
        "killed (process group), not yet reaped"
    };
    match judge(leg, &key, timeout) {
        Ok((info, _)) => Check::ok(
            check_name,
            format!(
                "`{program}` ({}) started, initialize answered in {} ms ({}); {stopped}",
                resolved.display(),
                elapsed.as_millis(),
                describe(&info)
            ),
        ),
        Err((verdict, detail)) => Check::new(check_name, verdict, format!("{detail}; {stopped}")),
    }
}

/// Admits one probe through the doctor's own fence.
async fn admit(fence: &Fence, channel: &str) -> Option<Admission> {
    let command = CommandRef {
        request_id: None,
        channel: Some(channel.to_owned()),
        method: Some("initialize".to_owned()),
    };
    fence.admit(command).await.ok()
}

/// The `initialize` request, with no connector headers and a notification sink nobody
/// reads (notifications before the answer are dropped by the transport).
struct InitRequest {
    payload: JsonRpcPayload,
    headers: WireHeaders,
    notes: NotifySink,
}

impl InitRequest {
    fn new() -> Self {
        let (notes, unread) = tokio::sync::mpsc::channel(1);
        drop(unread);
        Self {
            payload: initialize_payload(),
            headers: WireHeaders::new(),
            notes,
        }
    }

    /// No deadline of its own: the transport's `request_timeout` (`--timeout`) bounds it.
    fn request(&self) -> DownstreamRequest<'_> {
        DownstreamRequest {
            payload: &self.payload,
            headers: &self.headers,
            deadline: None,
        }
    }
}

fn initialize_payload() -> JsonRpcPayload {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION")},
        },
    });
    let raw = RawValue::from_string(body.to_string()).expect("a json! value is valid JSON");
    JsonRpcPayload::from_raw(raw).expect("the initialize request is a JSON-RPC object")
}

/// The leg's verdict: the server's answer and session id, or why the check fails.
fn judge(leg: LegResult, key: &str, timeout: Duration) -> Result<(Initialized, Option<String>), (Verdict, String)> {
    if let Some(failure) = leg.failure {
        return Err(leg_words(&failure, key, timeout));
    }
    let Some(raw) = leg.reply.resp_json else {
        return Err((
            Verdict::Fail,
            format!("no JSON-RPC answer to initialize: is {key} an MCP server?"),
        ));
    };
    let info = initialized(&raw, leg.reply.resp_code, key).map_err(|words| (Verdict::Fail, words))?;
    let session = leg
        .reply
        .resp_headers
        .get(MCP_SESSION_ID)
        .and_then(|values| values.first())
        .cloned();
    Ok((info, session))
}

/// Reads an `initialize` answer: a JSON-RPC result passes; its protocol version and
/// server name are kept only when they are short, safe identifiers.
fn initialized(raw: &RawValue, http_status: u16, key: &str) -> Result<Initialized, String> {
    let value: serde_json::Value =
        serde_json::from_str(raw.get()).map_err(|_| format!("the answer is not JSON: is {key} an MCP server?"))?;
    if let Some(result) = value.get("result") {
        let text = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_str).map(safe_method);
        return Ok(Initialized {
            protocol: text(result.get("protocolVersion")),
            server: text(result.get("serverInfo").and_then(|s| s.get("name"))),
        });
    }
    match value.get("error") {
        // Only the code: the message is the server's text and is not repeated.
        Some(error) => Err(format!(
            "the server refused initialize with JSON-RPC error {} (HTTP {http_status}); check the server's log and its supported protocol versions",
            error
                .get("code")
                .and_then(serde_json::Value::as_i64)
                .map_or_else(|| "without a code".to_owned(), |c| c.to_string())
        )),
        None => Err(format!(
            "the answer to initialize is not a JSON-RPC response: is {key} an MCP server?"
        )),
    }
}

fn describe(info: &Initialized) -> String {
    format!(
        "protocol {}, server {}",
        info.protocol.as_deref().unwrap_or("unstated"),
        info.server.as_deref().unwrap_or("unnamed")
    )
}

/// What a failed probe leg means, for the channel configured under `key`. One
/// exhaustive mapping; a server that wants credentials is only a warning, because
/// commands carry the caller's own headers (an `Authorization` the probe cannot have).
fn leg_words(failure: &LegFailure, key: &str, timeout: Duration) -> (Verdict, String) {
    let fail = |words: String| (Verdict::Fail, words);
    match failure {
        LegFailure::Dns => fail(net_words(NetFailure::Dns, key, timeout)),
        LegFailure::ConnectRefused => fail(net_words(NetFailure::Refused, key, timeout)),
        LegFailure::ConnectFailed => fail(net_words(NetFailure::Connect, key, timeout)),
        LegFailure::Tls => fail(net_words(NetFailure::Tls, key, timeout)),
        LegFailure::ProxyRefused => fail(format!(
            "the egress proxy refused to open a tunnel (CONNECT) to {key}: check the proxy's rules, or the channel's proxy setting (its proxy key, mcp.proxy, HTTPS_PROXY)"
        )),
        LegFailure::ProxyAuthRequired => fail(format!(
            "the egress proxy wants credentials (407) for {key}: give them in the proxy URL's userinfo (http://user:password@host:port), as a secret reference"
        )),
        LegFailure::TimeoutAfterWrite | LegFailure::DeadlineBeforeSend => {
            fail(net_words(NetFailure::Timeout, key, timeout).replacen("no answer", "no answer to initialize", 1))
        }
        LegFailure::ConnectionLost => fail(net_words(NetFailure::Transport, key, timeout)),
        LegFailure::HttpStatus(status @ (401 | 403)) => (
            Verdict::Warn,
            format!(
                "HTTP {status} to initialize: the server wants credentials; commands carry the caller's own headers, so this may be expected (check {key} if not)"
            ),
        ),
        LegFailure::HttpStatus(status) => fail(format!(
            "HTTP {status} without a JSON-RPC answer to initialize: is {key} the server's MCP endpoint (often ending in /mcp)?"
        )),
        LegFailure::NonProtocolResponse => fail(format!(
            "the answer to initialize is not JSON-RPC (content type or body): is {key} an MCP Streamable HTTP endpoint?"
        )),
        LegFailure::TruncatedJson => fail(format!(
            "the answer to initialize is not whole JSON: is {key} an MCP endpoint?"
        )),
        LegFailure::StreamClosedBeforeResponse | LegFailure::SubscriptionEnded => fail(format!(
            "the event stream from {key} ended before the initialize answer"
        )),
        LegFailure::BodyTooLarge => fail(format!(
            "the answer to initialize from {key} is larger than {} KiB",
            MAX_BODY_BYTES / 1024
        )),
        LegFailure::ChildNotRunning => fail(format!(
            "the program of {key} could not be started, or exited at once"
        )),
        LegFailure::SessionNotOpen | LegFailure::InitializeAbandoned => fail(format!(
            "the program of {key} started but did not complete the gateway's initialize (it exited, refused it or did not answer within {key}.initialize.timeout)"
        )),
        LegFailure::ChildExited => fail(format!(
            "the program of {key} exited before answering initialize (run it by hand to see why)"
        )),
        LegFailure::ChildPipeBroken => fail(format!(
            "the program of {key} closed its stdin while initialize was written"
        )),
        LegFailure::LocalExhaustion => fail(format!(
            "the probe of {key} could not run: {}",
            crate::descriptors::EXHAUSTION_WORDS
        )),
        LegFailure::NotAdmitted
        | LegFailure::InternalBeforeSend
        | LegFailure::CancelledAfterWrite
        | LegFailure::InternalAfterWrite => fail(format!("internal: the probe could not run ({})", failure.kind())),
    }
}

/// Where `program` would be started from: a name with a `/` as written (relative to the
/// working directory); a bare name as the first executable file on `path_var` (the
/// child's `PATH`; `/bin:/usr/bin` when it has none; an empty entry is the working
/// directory).
fn resolve(program: &str, path_var: Option<&str>) -> Result<PathBuf, Unresolved> {
    if program.contains('/') {
        return executable(Path::new(program));
    }
    let mut first_refusal = None;
    for dir in path_var.unwrap_or(DEFAULT_PATH).split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        match executable(&Path::new(dir).join(program)) {
            Ok(path) => return Ok(path),
            Err(Unresolved::Missing) => {}
            Err(refusal) => {
                first_refusal.get_or_insert(refusal);
            }
        }
    }
    Err(first_refusal.unwrap_or(Unresolved::Missing))
}

fn executable(path: &Path) -> Result<PathBuf, Unresolved> {
    let meta = std::fs::metadata(path).map_err(|_| Unresolved::Missing)?;
    if !meta.is_file() {
        return Err(Unresolved::Irregular(path.to_owned()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Unresolved::NoExecPermission(path.to_owned()));
    }
    Ok(path.to_owned())
}

fn unresolved_words(why: &Unresolved, program: &str, key: &str) -> String {
    match why {
        Unresolved::Missing if program.contains('/') => {
            format!("`{program}` does not exist: fix the program (first element) of {key}")
        }
        Unresolved::Missing => format!(
            "`{program}` not found on the child's PATH (mcp.channels.*.env PATH, else the gateway's): install it or give its absolute path in {key}"
        ),
        Unresolved::Irregular(path) => format!(
            "{} is not a regular file: fix the program (first element) of {key}",
            path.display()
        ),
        Unresolved::NoExecPermission(path) => format!(
            "{} is not executable: chmod +x it, or fix the program (first element) of {key}",
            path.display()
        ),
    }
}

/// Waits (bounded) until the killed child is no longer running.
async fn wait_reaped(transport: &StdioTransport) -> bool {
    let deadline = Instant::now() + REAP_WAIT;
    while transport.status().up {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

#[cfg(test)]
mod tests;
