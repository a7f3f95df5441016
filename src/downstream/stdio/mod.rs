//! Supervised stdio children: one MCP server process per channel, spoken to with
//! newline-delimited JSON-RPC over its stdin and stdout.
//!
//! Owns the child's whole life: spawning (argv without a shell, its own process group, a
//! minimal environment that never carries the gateway's credentials, through a guard
//! process that kills the group when the gateway dies: [`guard`]), multiplexing up to
//! the channel's `max_concurrent` requests over its pipes (each with a pipe-side id from
//! the child's id map, the caller's own id restored in what comes back), routing what it
//! prints, logging its stderr (redacted, bounded), restarting it with backoff, and
//! stopping it (gracefully, or at once on a fatal latch).
//!
//! Invariants:
//! - every spawn happens right after `Admission::recheck()` succeeded and every write
//!   right after `Admission::begin_send()` did, with no `.await` in between;
//! - one line is written at a time (the writer lock), whole or the child is killed: the
//!   write runs in its own task, so no timeout or cancellation can leave half a message
//!   in the pipe; a child slow to read holds up writers, never the reading of answers;
//! - only the request's `id` (and `params._meta.progressToken`) is rewritten on the way
//!   in, and restored on the way out: every other byte passes unchanged;
//! - at most `max_concurrent` requests of the channel are in flight at once (a slot is
//!   held from before the write until the call ends);
//! - a request whose deadline passed after the write is retired: a late response is
//!   discarded and counted, never matched to another request;
//! - a child that dies ends each request in flight once (abandoned) and each request
//!   not yet written (not sent); nothing is re-sent, and a new child has its own id map;
//! - no new child starts while the previous one is unreaped (still running, or a
//!   descendant still holds its stdout): such a child is held, reported once, and reaped
//!   in the background;
//! - after `shutdown` or `kill_now` nothing is ever spawned again.
//!
//! Must not touch the control plane, the fence's state or the latch: outcomes are
//! returned, the dispatcher decides. Must not log payloads: stdout lines are logged by
//! length only, stderr lines only through [`super::redact::redact_line`].

mod backoff;
mod child;
mod env;
pub mod guard;
mod line;
#[cfg(any(test, fuzzing))]
pub(crate) mod line_probe;
mod pending;
mod rewrite;
mod session;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};

pub use self::child::SessionState;
use self::child::{Child, Claim, Registration};
use self::line::WriteResult;
use self::pending::{CancelTarget, Origin};
use self::session::{Need, Session};
pub use self::session::{SessionMode, SessionSettings, DEFAULT_PROTOCOL_VERSION};
use super::identity::{self, Observed};
use super::{ChannelStatus, DownstreamRequest, LegFailure, LegResult, NotifySink, Reply, TransportKind};
use crate::protocol::{json_resp_headers, RespType, MCP_SESSION_ID};
use crate::strict::Admission;
use crate::supervisor::{Supervisor, TaskEnd, TaskKind};
use crate::telemetry::{Metrics, SessionResult};

/// How long a call keeps waiting for a response already on its way after the child's exit
/// was seen (the stdout reader may still be draining the pipe).
const EXIT_DRAIN: Duration = Duration::from_millis(250);

/// Timing of one stdio channel.
#[derive(Clone, Debug)]
pub struct StdioSettings {
    /// Bound of one call from its start (waiting for its turn, spawning, writing, the
    /// response); the command's deadline bounds it too, whichever comes first.
    pub request_timeout: Duration,
    /// First restart wait; it doubles per short-lived child up to `restart_backoff_max`.
    pub restart_backoff_min: Duration,
    pub restart_backoff_max: Duration,
    /// Per step of a graceful stop (after closing stdin, after SIGTERM), and how long a
    /// child may take to be reaped after SIGKILL before it is reported held.
    pub stop_grace: Duration,
    /// Requests in flight to the child at once (the channel's `max_concurrent`, else
    /// `mcp.max_concurrent`). Notifications and client responses take no slot.
    pub max_concurrent: NonZeroUsize,
    /// The tunnelgate executable each child is started through (`__stdio-guard`, see
    /// [`guard`]), so that the child's process group dies with this process however it
    /// dies; `None` starts the command directly. The default is this binary when its
    /// `main` dispatches the guard ([`guard::dispatch`]), else `None` (unit tests, a
    /// binary that embeds the gateway without dispatching the guard).
    pub guard: Option<std::path::PathBuf>,
    /// Who opens each child's MCP session, and the gateway's own `initialize`.
    pub session: SessionSettings,
}

impl Default for StdioSettings {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(60),
            restart_backoff_min: Duration::from_millis(200),
            restart_backoff_max: Duration::from_secs(10),
            stop_grace: Duration::from_secs(2),
            max_concurrent: NonZeroUsize::new(10).expect("10 is not zero"),
            guard: guard::executable(),
            session: SessionSettings::default(),
        }
    }
}

/// One channel's supervised stdio MCP server. Share it behind an `Arc`; up to
/// `max_concurrent` calls are in flight to the child at once.
pub struct StdioTransport {
    shared: Arc<Shared>,
}

/// What the transport's tasks share.
struct Shared {
    channel: String,
    command: Vec<String>,
    env: BTreeMap<String, String>,
    settings: StdioSettings,
    metrics: Arc<Metrics>,
    /// Spawns and watches the child's monitor, reader and stderr tasks.
    supervisor: Supervisor,
    /// One slot per request in flight, held from before its write until its call ends.
    /// Notifications and client responses take none, so that, e.g., a
    /// `notifications/cancelled` or the answer to a server request reaches the child while
    /// every slot is taken.
    slots: tokio::sync::Semaphore,
    /// Held while one line is written, by requests and notifications alike (FIFO: writers
    /// take turns in the order they came). The only lock held across `.await`.
    writer: tokio::sync::Mutex<Writer>,
    state: Mutex<State>,
    /// Responses that matched no request in flight (late after a timeout, or unknown ids).
    discarded_responses: AtomicU64,
    /// What the last `initialize` answer (the gateway's own, or a caller's passed through)
    /// and `tools/list` answer said (`/status`).
    observed: Observed,
}

#[derive(Default)]
struct Writer {
    /// A write that outlived its call's deadline; the next write waits for it.
    pending_write: Option<PendingWrite>,
}

struct PendingWrite {
    generation: u64,
    task: JoinHandle<WriteResult>,
}

/// How waiting for the writer's line ended.
enum WriteWait {
    Idle,
    Finished(WriteResult),
    StillWriting,
}

#[derive(Default)]
struct State {
    /// The latest child, until it is reaped (its exit seen and its stdout closed).
    child: Option<Arc<Child>>,
    /// Set by `shutdown` or `kill_now`: nothing spawns again.
    stopped: bool,
    /// Successful spawns so far.
    generation: u64,
    /// Consecutive failed spawns and short-lived children (drives the backoff).
    failures: u32,
    /// No spawn before this.
    next_spawn_at: Option<Instant>,
    /// The channel's server has no `initialize` handshake (configured `pass_through`, or
    /// a child refused the gateway's `initialize` as a 2026-07-28 server does): children
    /// are discovered, not initialized, and their messages pass through untouched.
    discovered: bool,
}

/// What `start_due` waits for.
enum Wait {
    Child(Arc<Child>),
    Until(Instant),
}

/// What `ensure_child` does next, decided under the state lock.
enum Step {
    Ready(Arc<Child>),
    Fail(LegFailure),
    Sleep(Instant),
    AwaitRelease(Arc<Child>),
}

/// How waiting for the response ended.
enum Waited {
    /// The child's answer line, where the pipe id sits in it, and the caller's own id.
    Response(child::Answered),
    Gone,
    TimedOut,
}

impl StdioTransport {
    /// A transport for `command` (argv, no shell). Does not spawn. The child's environment
    /// is `PATH`, `HOME`, `LANG`, `LC_ALL`, `TZ`, `TMPDIR`, `USER` from this process (when
    /// set) plus `env`; `TUNNELGATE_*` and `CONTROL_PLANE_*` never pass.
    pub fn new(
        channel: &str,
        command: Vec<String>,
        env: BTreeMap<String, String>,
        settings: StdioSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self::with_base_env(channel, command, &env, env::process_env(), settings, metrics)
    }

    /// As [`StdioTransport::new`], with the base environment taken from `base` instead of
    /// this process.
    pub(crate) fn with_base_env(
        channel: &str,
        command: Vec<String>,
        configured: &BTreeMap<String, String>,
        base: impl IntoIterator<Item = (String, String)>,
        settings: StdioSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (env, refused) = env::child_env(base, configured);
        for name in refused {
            tracing::warn!(channel, variable = %name, "configured variable not passed to the stdio child: gateway variables never reach MCP servers");
        }
        let slots = tokio::sync::Semaphore::new(settings.max_concurrent.get());
        let discovered = settings.session.mode == SessionMode::PassThrough;
        Self {
            shared: Arc::new(Shared {
                channel: channel.to_owned(),
                command,
                env,
                settings,
                metrics,
                supervisor: Supervisor::logging_only(),
                slots,
                writer: tokio::sync::Mutex::new(Writer::default()),
                state: Mutex::new(State {
                    discovered,
                    ..State::default()
                }),
                discarded_responses: AtomicU64::new(0),
                observed: Observed::default(),
            }),
        }
    }

    /// Has the child's tasks watched by `supervisor` (an unexpected end is reported to
    /// the gateway). Call before the first use.
    #[must_use]
    pub fn supervised(mut self, supervisor: Supervisor) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.supervisor = supervisor;
        }
        self
    }

    /// Starts the child if none is running and opens its session (the gateway's own
    /// `initialize`), under `admission`; returns once callers may use it. Used at startup
    /// and after each death (eagerly, once [`StdioTransport::start_due`] says so), so
    /// that `/readyz` and `/status` tell the truth without waiting for a command. A
    /// failure is what a command would have met: [`LegFailure::gateway_step_abandoned`]
    /// tells an `initialize` cut after it was written.
    pub async fn open(&self, admission: &Admission) -> Result<(), LegFailure> {
        admission.recheck().map_err(|_| LegFailure::NotAdmitted)?;
        let limit = Instant::now() + self.shared.settings.session.timeout;
        self.shared.ensure_open(admission, limit).await.map(|_| ())
    }

    /// Waits until the channel needs a start: no usable child, and the restart backoff
    /// over. `false` once the transport is stopped (nothing starts again).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only watches tokens and timers.
    pub async fn start_due(&self) -> bool {
        loop {
            let wait = {
                let st = self.shared.lock();
                if st.stopped {
                    return false;
                }
                match (&st.child, st.next_spawn_at) {
                    (Some(c), _) => Wait::Child(c.clone()),
                    (None, Some(at)) if at > Instant::now() => Wait::Until(at),
                    (None, _) => return true,
                }
            };
            match wait {
                // cancel-safe: waiting on a token.
                Wait::Child(c) => c.released.cancelled().await,
                Wait::Until(at) => sleep_until(at).await,
            }
        }
    }

    /// Forwards one JSON-RPC message (request or notification) and, for a request, waits
    /// for the terminal response with the matching id. Notifications and server requests
    /// the child prints meanwhile go to `notes`, in order, before the response.
    ///
    /// # Cancel safety
    /// Dropping the future before the write starts sends nothing. Once the write has
    /// started it completes whole in its own task and the request is retired: a dropped
    /// call after that point must be treated as abandoned.
    pub async fn call(&self, admission: &Admission, req: &DownstreamRequest<'_>, notes: &NotifySink) -> LegResult {
        let payload = req.payload;
        let final_type = if payload.expects_response() {
            RespType::JsonrpcResponse
        } else {
            RespType::NotifyAck
        };
        match self.shared.call(admission, req, notes).await {
            Ok(reply) => LegResult::answered(reply),
            Err(failure) => LegResult::failed(failure, payload.id(), final_type),
        }
    }

    /// stdio has no MCP session: answers `204 session_termination_response` without
    /// touching the child.
    pub async fn terminate_session(&self, admission: &Admission) -> LegResult {
        if admission.recheck().is_err() {
            return LegResult::failed(LegFailure::NotAdmitted, None, RespType::SessionTerminationResponse);
        }
        LegResult::answered(Reply {
            resp_json: None,
            resp_headers: BTreeMap::new(),
            resp_code: 204,
            resp_type: RespType::SessionTerminationResponse,
        })
    }

    /// Graceful stop: close stdin, wait `stop_grace`, SIGTERM the group, wait
    /// `stop_grace`, SIGKILL the group, then wait (bounded) for the child to be reaped.
    /// Never restarts afterwards. Returns within about four `stop_grace`; a child that
    /// outlives SIGKILL is reported held and reaped in the background.
    pub async fn shutdown(&self) {
        let Some(child) = self.shared.stop() else { return };
        let grace = self.shared.settings.stop_grace;
        child.close_stdin();
        if timeout(grace, child.exited.cancelled()).await.is_err() {
            tracing::info!(channel = %self.shared.channel, generation = child.generation, "stdio child still running after stdin closed: SIGTERM to its group");
            child.signal_group(nix::sys::signal::Signal::SIGTERM);
            if timeout(grace, child.exited.cancelled()).await.is_err() {
                tracing::warn!(channel = %self.shared.channel, generation = child.generation, "stdio child still running after SIGTERM: SIGKILL to its group");
                child.kill_group();
            }
        }
        // The monitor reaps the child and checks its pipes: at most two graces after exit.
        let _ = timeout(grace.saturating_mul(2) + EXIT_DRAIN, child.released.cancelled()).await;
    }

    /// Immediately SIGKILLs the process group; nothing is ever spawned again (fatal
    /// latch cleanup). Reaping continues in the background.
    pub fn kill_now(&self) {
        if let Some(child) = self.shared.stop() {
            if !child.released.is_cancelled() {
                tracing::info!(channel = %self.shared.channel, generation = child.generation, "killing the stdio child's process group");
                child.close_stdin();
                child.kill_group();
            }
        }
    }

    /// `/status` view: `up` while a child runs with its session open (or passed
    /// through), `generation` = spawns so far, `session` where the session stands.
    pub fn status(&self) -> ChannelStatus {
        let st = self.shared.lock();
        let session = st.child.as_ref().map_or(SessionState::Down, |c| c.session_state());
        let started_at = st
            .child
            .as_ref()
            .map(|c| humantime::format_rfc3339_millis(c.started_at).to_string());
        ChannelStatus {
            channel: self.shared.channel.clone(),
            transport: TransportKind::Stdio,
            up: matches!(session, SessionState::Initialized | SessionState::PassThrough),
            generation: st.generation,
            session: Some(session),
            server: None,
            protocol_version: None,
            tools: None,
            started_at,
        }
        .with_seen(self.shared.observed.seen())
    }

    /// What the channel's server said of itself (`initialize`, `tools/list`).
    pub(super) fn observed(&self) -> &Observed {
        &self.shared.observed
    }

    /// The running child's pid (tests).
    #[cfg(test)]
    fn child_pid(&self) -> Option<i32> {
        self.shared.running_child()?.pid()
    }

    /// The session the gateway holds with the running child, if it opened one (tests).
    #[cfg(test)]
    fn session(&self) -> Option<Arc<Session>> {
        self.shared.running_child()?.session()
    }
}

impl Drop for StdioTransport {
    /// A transport that goes away takes its child with it.
    fn drop(&mut self) {
        self.kill_now();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays meaningful after a panic elsewhere; keep using it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The end of every wait of a call started now.
    fn limit(&self, deadline: Option<Instant>) -> Instant {
        let own = Instant::now() + self.settings.request_timeout;
        deadline.map_or(own, |d| d.min(own))
    }

    /// Marks the transport stopped; returns the child to stop, if any.
    fn stop(&self) -> Option<Arc<Child>> {
        let mut st = self.lock();
        st.stopped = true;
        st.child.clone()
    }

    async fn call(
        self: &Arc<Self>,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
    ) -> Result<Reply, LegFailure> {
        let limit = self.limit(req.deadline);
        admission.recheck().map_err(|_| LegFailure::NotAdmitted)?;
        if req.payload.expects_response() {
            self.request(admission, req, notes, limit).await
        } else {
            self.message(admission, req, limit).await
        }
    }

    /// A request: a slot, a pipe id, the write, then its answer with the caller's id put
    /// back.
    async fn request(
        self: &Arc<Self>,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        limit: Instant,
    ) -> Result<Reply, LegFailure> {
        let json = req.payload.raw().get();
        // A request whose id or token cannot be located exactly (a repeated member) is
        // not rewritten, so not sent.
        let spans = rewrite::request_spans(json).ok_or(LegFailure::InternalBeforeSend)?;
        let is_initialize = req.payload.method() == Some("initialize");
        if is_initialize && !self.lock().discovered {
            if let Some(reply) = self
                .answer_initialize(admission, json, &json[spans.id.clone()], limit)
                .await?
            {
                return Ok(reply);
            }
            // Discovered just now: a 2026-07-28 server answers `initialize` itself.
        }
        let origin = Origin {
            id: json[spans.id.clone()].into(),
            token: spans.progress_token.as_ref().map(|t| json[t.clone()].into()),
            caller: caller_key(req.headers),
        };
        // cancel-safe: waiting for a permit takes nothing until it resolves.
        let _slot = match timeout_at(limit, self.slots.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(LegFailure::InternalBeforeSend),
            Err(_) => return Err(LegFailure::DeadlineBeforeSend),
        };
        let (child, _) = self.ensure_open(admission, limit).await?;
        let ticket = child.mint();
        let pipe_id = ticket.id().to_string();
        let mut edits = vec![(spans.id, pipe_id.as_str())];
        if let Some(token) = spans.progress_token {
            edits.push((token, pipe_id.as_str()));
        }
        let line = line::frame(&rewrite::splice(json, &mut edits));

        let mut writer = self.writer_for(&child, limit).await?;
        let mut registration = child
            .enter(ticket, origin, notes.clone())
            .map_err(|_| LegFailure::ChildNotRunning)?;
        // Recheck, mark the request sent and start the write with no `.await` between.
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        writer.start(&child, line).ok_or(LegFailure::ChildNotRunning)?;
        registration.mark_written();
        self.finish_write(&child, &mut writer, limit, is_initialize).await?;
        drop(writer);

        match wait_answer(&child, &mut registration, limit).await {
            Waited::Response((raw, span, original)) => Ok(Reply {
                resp_json: Some(restore_id(raw, span, &original)?),
                resp_headers: json_resp_headers(),
                resp_code: 200,
                resp_type: RespType::JsonrpcResponse,
            }),
            Waited::Gone => Err(LegFailure::ChildExited),
            Waited::TimedOut => {
                self.retire_timed_out(&child, is_initialize);
                Err(LegFailure::TimeoutAfterWrite)
            }
        }
    }

    /// A notification or a client response: written as is (a caller's cancel with the
    /// pipe id of the request it names), acknowledged `202` once written.
    async fn message(
        self: &Arc<Self>,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        limit: Instant,
    ) -> Result<Reply, LegFailure> {
        let json = req.payload.raw().get();
        if req.payload.method() == Some("notifications/initialized") && !self.lock().discovered {
            // The gateway ended the child's handshake itself; a caller's ends nothing.
            admission.recheck().map_err(|_| LegFailure::NotAdmitted)?;
            return Ok(acknowledged());
        }
        let cancel = match req.payload.method() {
            Some("notifications/cancelled") => {
                rewrite::cancelled_request_span(json).map_err(|_| LegFailure::InternalBeforeSend)?
            }
            _ => None,
        };
        let (child, line) = match cancel {
            None => (self.ensure_open(admission, limit).await?.0, line::frame(json)),
            // A cancel names a request of the running child, or nothing: it never starts one.
            Some(span) => {
                let Some(child) = self.running_child() else {
                    return Ok(not_forwarded(&self.channel, "no child is running"));
                };
                let pipe = match child.cancel_target(&json[span.clone()], caller_key(req.headers).as_deref()) {
                    CancelTarget::One(pipe) => pipe.to_string(),
                    CancelTarget::Nothing => {
                        return Ok(not_forwarded(&self.channel, "no request of this caller with that id"))
                    }
                    CancelTarget::Ambiguous => {
                        return Ok(not_forwarded(
                            &self.channel,
                            "several requests of this caller have that id",
                        ))
                    }
                };
                let line = line::frame(&rewrite::splice(json, &mut [(span, pipe.as_str())]));
                (child, line)
            }
        };
        let mut writer = self.writer_for(&child, limit).await?;
        // Recheck, mark the message sent and start the write with no `.await` between.
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        writer.start(&child, line).ok_or(LegFailure::ChildNotRunning)?;
        self.finish_write(&child, &mut writer, limit, false).await?;
        Ok(acknowledged())
    }

    /// The writer, once an earlier call's write (if any) has finished, and only while
    /// the child is still usable: a request that waited here while the child died was
    /// never written.
    async fn writer_for(
        &self,
        child: &Child,
        limit: Instant,
    ) -> Result<tokio::sync::MutexGuard<'_, Writer>, LegFailure> {
        // cancel-safe: waiting for a lock takes nothing until it resolves.
        let mut writer = timeout_at(limit, self.writer.lock())
            .await
            .map_err(|_| LegFailure::DeadlineBeforeSend)?;
        // A write that outlived an earlier call must finish before ours starts.
        if writer
            .pending_write
            .as_ref()
            .is_some_and(|p| p.generation != child.generation)
        {
            writer.pending_write = None;
        }
        if let WriteWait::StillWriting = writer.wait_write(limit).await {
            return Err(LegFailure::DeadlineBeforeSend);
        }
        if Instant::now() >= limit {
            return Err(LegFailure::DeadlineBeforeSend);
        }
        if !child.is_usable() {
            return Err(LegFailure::ChildNotRunning);
        }
        Ok(writer)
    }

    /// Waits for the line just started; a failed write kills the child.
    async fn finish_write(
        &self,
        child: &Child,
        writer: &mut Writer,
        limit: Instant,
        is_initialize: bool,
    ) -> Result<(), LegFailure> {
        match writer.wait_write(limit).await {
            WriteWait::Finished(WriteResult::Done) => Ok(()),
            WriteWait::Finished(WriteResult::Failed { written, kind }) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, written, error = ?kind, "writing to the stdio child failed: killing it");
                child.abort();
                Err(if written == 0 {
                    LegFailure::ChildNotRunning
                } else {
                    LegFailure::ChildPipeBroken
                })
            }
            WriteWait::Finished(WriteResult::Lost) | WriteWait::Idle => Err(LegFailure::InternalAfterWrite),
            WriteWait::StillWriting => {
                tracing::debug!(channel = %self.channel, generation = child.generation, "deadline passed while writing to the stdio child");
                self.retire_timed_out(child, is_initialize);
                Err(LegFailure::TimeoutAfterWrite)
            }
        }
    }

    /// The child now running, if it can take a message (never spawns one).
    fn running_child(&self) -> Option<Arc<Child>> {
        self.lock().child.clone().filter(|c| c.is_usable())
    }

    /// After a timeout past the write: the child is kept, except for `initialize`, whose
    /// failure leaves the session in an unknown state: that child is killed (fails
    /// closed) and the next call starts a new one.
    fn retire_timed_out(&self, child: &Child, is_initialize: bool) {
        if is_initialize {
            tracing::warn!(channel = %self.channel, generation = child.generation, "initialize timed out: killing the stdio child; the next call starts a new one");
            child.abort();
        }
    }

    /// A running child, spawning one if allowed: not stopped, the previous child reaped,
    /// the backoff over before `limit`, and the admission still valid.
    async fn ensure_child(self: &Arc<Self>, admission: &Admission, limit: Instant) -> Result<Arc<Child>, LegFailure> {
        loop {
            let step = {
                let mut st = self.lock();
                let now = Instant::now();
                if st.stopped {
                    Step::Fail(LegFailure::ChildNotRunning)
                } else if let Some(c) = st.child.clone() {
                    if c.is_usable() {
                        Step::Ready(c)
                    } else if c.held.is_cancelled() || limit <= now {
                        Step::Fail(LegFailure::ChildNotRunning)
                    } else {
                        Step::AwaitRelease(c)
                    }
                } else if let Some(at) = st.next_spawn_at.filter(|at| *at > now) {
                    if at > limit {
                        Step::Fail(LegFailure::ChildNotRunning)
                    } else {
                        Step::Sleep(at)
                    }
                } else if admission.recheck().is_err() {
                    Step::Fail(LegFailure::NotAdmitted)
                } else {
                    match self.spawn_locked(&mut st) {
                        Ok(c) => Step::Ready(c),
                        Err(f) => Step::Fail(f),
                    }
                }
            };
            match step {
                Step::Ready(c) => return Ok(c),
                Step::Fail(f) => return Err(f),
                Step::Sleep(at) => sleep_until(at).await,
                Step::AwaitRelease(c) => {
                    let released = tokio::select! {
                        biased;
                        // cancel-safe: waiting on tokens and a timer.
                        () = c.released.cancelled() => true,
                        () = c.held.cancelled() => false,
                        () = sleep_until(limit) => false,
                    };
                    if !released {
                        return Err(LegFailure::ChildNotRunning);
                    }
                }
            }
        }
    }

    /// A running child whose session is open (starting the child and opening its
    /// session if needed), and the session the gateway holds with it (`None` for a
    /// discovered child). A call that finds the handshake running waits for it within
    /// `limit`; if it fails, the call ends `not_sent`: nothing of its own was written.
    async fn ensure_open(
        self: &Arc<Self>,
        admission: &Admission,
        limit: Instant,
    ) -> Result<(Arc<Child>, Option<Arc<Session>>), LegFailure> {
        let child = self.ensure_child(admission, limit).await?;
        match child.claim_opening() {
            Claim::Open(session) => Ok((child, session)),
            Claim::Failed => Err(LegFailure::SessionNotOpen),
            Claim::Mine => {
                let session = self.open_session(&child, admission).await?;
                Ok((child, session))
            }
            Claim::Wait => {
                tokio::select! {
                    biased;
                    // cancel-safe: waiting on a token and a timer.
                    () = child.opened.cancelled() => {}
                    () = sleep_until(limit) => return Err(LegFailure::DeadlineBeforeSend),
                }
                // The handshake it waited for ended: open, or failed (never due again).
                match child.claim_opening() {
                    Claim::Open(session) => Ok((child, session)),
                    Claim::Mine | Claim::Wait | Claim::Failed => Err(LegFailure::SessionNotOpen),
                }
            }
        }
    }

    /// The gateway's handshake with a new child: `initialize` (bounded by the session's
    /// own timeout, not by the call that runs it), its answer kept as the session, then
    /// `notifications/initialized`. Each write under `admission`, as a command's own.
    /// Dropped or failed half way, the child is ended ([`child::OpeningRun`]).
    async fn open_session(
        self: &Arc<Self>,
        child: &Arc<Child>,
        admission: &Admission,
    ) -> Result<Option<Arc<Session>>, LegFailure> {
        let run = child.opening_run();
        let limit = Instant::now() + self.settings.session.timeout;
        let ticket = child.mint();
        let pipe = ticket.id();
        let line = session::initialize_line(&self.settings.session, pipe);
        // What the child prints during the handshake belongs to no caller.
        let (nobody, _) = tokio::sync::mpsc::channel(1);
        let origin = Origin {
            id: pipe.to_string().into(),
            token: None,
            caller: None,
        };
        let mut writer = self
            .writer_for(child, limit)
            .await
            .map_err(|_| LegFailure::SessionNotOpen)?;
        let mut registration = child
            .enter(ticket, origin, nobody)
            .map_err(|_| LegFailure::SessionNotOpen)?;
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        writer.start(child, line).ok_or(LegFailure::SessionNotOpen)?;
        registration.mark_written();
        let written = self.finish_write(child, &mut writer, limit, true).await;
        drop(writer);
        let cut = |why: &'static str| {
            self.metrics.stdio_session(&self.channel, SessionResult::Abandoned);
            tracing::warn!(channel = %self.channel, generation = child.generation, reason = why, "the gateway's initialize to the stdio child got no answer: ending the child");
            LegFailure::InitializeAbandoned
        };
        match written {
            Ok(()) => {}
            Err(LegFailure::ChildNotRunning) => return Err(LegFailure::SessionNotOpen),
            Err(_) => return Err(cut("the write failed or did not finish in time")),
        }
        let answer = match wait_answer(child, &mut registration, limit).await {
            Waited::Response((raw, _, _)) => raw,
            Waited::Gone => return Err(cut("the child ended")),
            Waited::TimedOut => return Err(cut("initialize timed out")),
        };
        drop(registration);
        self.settle_handshake(child, run, admission, &answer, limit).await
    }

    /// What the child's answer to the gateway's `initialize` makes of the channel: an
    /// open session (once `initialized` is written), a discovered child, or a failed
    /// handshake (`run` dropped: the child is ended).
    async fn settle_handshake(
        &self,
        child: &Arc<Child>,
        run: child::OpeningRun<'_>,
        admission: &Admission,
        answer: &RawValue,
        limit: Instant,
    ) -> Result<Option<Arc<Session>>, LegFailure> {
        match session::read_init_answer(answer.get()) {
            session::InitAnswer::Opened(opened) => {
                self.write_initialized(child, admission, limit).await?;
                // The server's own words, bounded and redacted as on `/status`.
                let server = opened.server_name().and_then(crate::downstream::identity::bounded);
                let version = crate::downstream::identity::bounded(&opened.protocol_version);
                tracing::info!(channel = %self.channel, generation = child.generation, protocol_version = version.as_deref().unwrap_or("(unreadable)"), server = server.as_deref().unwrap_or("(unnamed)"), "stdio session opened: the gateway initialized the child");
                let version = serde_json::Value::String(opened.protocol_version.clone());
                self.observed
                    .record(identity::initialized(opened.server_info(), Some(&version)));
                let opened = Arc::new(opened);
                run.open(Some(opened.clone()));
                self.metrics.stdio_session(&self.channel, SessionResult::Initialized);
                self.metrics.stdio_up(&self.channel, true);
                Ok(Some(opened))
            }
            session::InitAnswer::Discovered => {
                let first = !std::mem::replace(&mut self.lock().discovered, true);
                if first {
                    tracing::info!(channel = %self.channel, generation = child.generation, "the stdio child refused initialize as a 2026-07-28 server does: it is discovered, not initialized, and its messages pass through untouched");
                }
                run.open(None);
                self.metrics.stdio_session(&self.channel, SessionResult::Discovered);
                self.metrics.stdio_up(&self.channel, true);
                Ok(None)
            }
            session::InitAnswer::Refused { code } => {
                tracing::warn!(channel = %self.channel, generation = child.generation, code, "the stdio child refused the gateway's initialize: ending it; it is restarted after the backoff");
                self.metrics.stdio_session(&self.channel, SessionResult::Refused);
                Err(LegFailure::SessionNotOpen)
            }
            session::InitAnswer::Invalid(why) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, problem = why, "the stdio child's answer to initialize is not an InitializeResult: ending it; it is restarted after the backoff");
                self.metrics.stdio_session(&self.channel, SessionResult::Refused);
                Err(LegFailure::SessionNotOpen)
            }
        }
    }

    /// `notifications/initialized`, which ends the handshake. A child that cannot take
    /// it is ended (by the caller's [`child::OpeningRun`]).
    async fn write_initialized(
        &self,
        child: &Arc<Child>,
        admission: &Admission,
        limit: Instant,
    ) -> Result<(), LegFailure> {
        let refused = |_| {
            self.metrics.stdio_session(&self.channel, SessionResult::Refused);
            LegFailure::SessionNotOpen
        };
        let mut writer = self.writer_for(child, limit).await.map_err(refused)?;
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        writer
            .start(child, session::INITIALIZED_LINE.to_vec())
            .ok_or(LegFailure::SessionNotOpen)?;
        self.finish_write(child, &mut writer, limit, false)
            .await
            .map_err(refused)
    }

    /// A caller's `initialize`, answered from the session (opening it first if the
    /// child is down) with an `Mcp-Session-Id` of its own; nothing reaches the child.
    /// `None` when the child turned out to be discovered: the caller's `initialize` is
    /// then the server's to answer.
    async fn answer_initialize(
        self: &Arc<Self>,
        admission: &Admission,
        json: &str,
        id: &str,
        limit: Instant,
    ) -> Result<Option<Reply>, LegFailure> {
        let (_, Some(session)) = self.ensure_open(admission, limit).await? else {
            return Ok(None);
        };
        let answer = session::answer_caller(&session, json, id, &crate::protocol::random_hex(16));
        let mut resp_headers = json_resp_headers();
        if let Some(session_id) = answer.session_id {
            resp_headers.insert(MCP_SESSION_ID.to_owned(), vec![session_id]);
        }
        Ok(Some(Reply {
            resp_json: Some(answer.json),
            resp_headers,
            resp_code: 200,
            resp_type: RespType::JsonrpcResponse,
        }))
    }

    /// Answers a server request that no caller in flight can take (it needs `need`, and
    /// none declared it), so that the child never waits on it. The answer is the
    /// gateway's own: it carries nothing of any caller and causes no effect.
    fn refuse_ask(self: &Arc<Self>, child: &Arc<Child>, id: &str, need: Need) {
        tracing::info!(channel = %self.channel, generation = child.generation, capability = need.capability(), "the stdio child asked for a client capability that no caller with a request in flight declared: refused");
        let line = session::no_caller_line(id, need);
        let (shared, child) = (self.clone(), child.clone());
        self.supervisor.spawn_untracked(TaskKind::StdioReader, async move {
            let limit = Instant::now() + shared.settings.request_timeout;
            let Ok(mut writer) = shared.writer_for(&child, limit).await else {
                return TaskEnd::Finished;
            };
            if shared.lock().stopped {
                return TaskEnd::Finished;
            }
            if writer.start(&child, line).is_some() {
                let _ = shared.finish_write(&child, &mut writer, limit, false).await;
            }
            TaskEnd::Finished
        });
    }

    /// Spawns the next generation (state locked, admission just rechecked).
    fn spawn_locked(self: &Arc<Self>, st: &mut State) -> Result<Arc<Child>, LegFailure> {
        let generation = st.generation + 1;
        match child::spawn(self, generation, st.discovered) {
            Ok(c) => {
                if st.generation > 0 {
                    self.metrics.stdio_restarted(&self.channel);
                }
                st.generation = generation;
                st.child = Some(c.clone());
                if st.discovered {
                    self.metrics.stdio_up(&self.channel, true);
                }
                tracing::info!(channel = %self.channel, generation, pid = c.pid(), pgid = c.pgid(), "stdio child started");
                Ok(c)
            }
            Err(e) => {
                st.failures = backoff::failures_after_exit(st.failures, Duration::ZERO);
                let wait = backoff::restart_delay(
                    st.failures,
                    self.settings.restart_backoff_min,
                    self.settings.restart_backoff_max,
                );
                st.next_spawn_at = Some(Instant::now() + wait);
                if crate::descriptors::is_exhaustion(&e) {
                    tracing::warn!(channel = %self.channel, error = %e, retry_in_ms = wait.as_millis() as u64, "stdio child could not be started: {}", crate::descriptors::EXHAUSTION_WORDS);
                    return Err(LegFailure::LocalExhaustion);
                }
                tracing::warn!(channel = %self.channel, error = %e, retry_in_ms = wait.as_millis() as u64, "stdio child could not be started");
                Err(LegFailure::ChildNotRunning)
            }
        }
    }

    /// The monitor saw the child's exit (or `wait` failed).
    fn child_exited(&self, child: &Child, status: &std::io::Result<std::process::ExitStatus>) {
        let now = Instant::now();
        // A child whose handshake failed never served: its end counts as a short life,
        // so the restart backoff grows however long the handshake took.
        let lived = if child.opening_failed() {
            Duration::ZERO
        } else {
            now.saturating_duration_since(child.spawned_at)
        };
        let (expected, retry_in) = {
            let mut st = self.lock();
            let retry_in = if st.stopped {
                None
            } else {
                st.failures = backoff::failures_after_exit(st.failures, lived);
                let wait = backoff::restart_delay(
                    st.failures,
                    self.settings.restart_backoff_min,
                    self.settings.restart_backoff_max,
                );
                st.next_spawn_at = Some(now + wait);
                Some(wait)
            };
            (st.stopped || child.killed.is_cancelled(), retry_in)
        };
        self.metrics.stdio_up(&self.channel, false);
        let lived_ms = lived.as_millis() as u64;
        let retry_in_ms = retry_in.map(|d| d.as_millis() as u64);
        match status {
            Ok(s) if expected => {
                tracing::info!(channel = %self.channel, generation = child.generation, status = %s, lived_ms, "stdio child exited")
            }
            Ok(s) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, status = %s, lived_ms, ?retry_in_ms, "stdio child exited; the next call restarts it")
            }
            Err(e) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, error = %e, "waiting for the stdio child failed; treating it as exited")
            }
        }
        child.exited.cancel();
    }

    /// The child is reaped and its stdout closed: a new one may start.
    fn child_released(&self, child: &Arc<Child>) {
        {
            let mut st = self.lock();
            if st.child.as_ref().is_some_and(|c| Arc::ptr_eq(c, child)) {
                st.child = None;
            }
        }
        if child.held.is_cancelled() {
            tracing::info!(channel = %self.channel, generation = child.generation, "held stdio child reaped; a new child may start");
        }
        child.released.cancel();
    }

    /// Reported once per child: it outlived SIGKILL, so nothing new starts until it is reaped.
    fn report_held(&self, child: &Child, reason: &'static str) {
        if child.held.is_cancelled() {
            return;
        }
        child.held.cancel();
        tracing::error!(channel = %self.channel, generation = child.generation, pid = child.pid(), reason, "stdio child outlived SIGKILL: held until reaped; no new child starts meanwhile");
    }

    fn invalid_line(&self, child: &Child, len: usize) {
        self.metrics.stdio_invalid_line();
        tracing::warn!(channel = %self.channel, generation = child.generation, len, "stdio child printed a line on stdout that is not a JSON-RPC message; skipped");
    }

    /// A response matched no request in flight: `late` when its request was retired
    /// (past its deadline), otherwise its id is unknown.
    fn response_discarded(&self, child: &Child, late: bool) {
        self.discarded_responses.fetch_add(1, Ordering::Relaxed);
        if late {
            self.metrics.stdio_late_response(&self.channel);
            tracing::warn!(channel = %self.channel, generation = child.generation, "stdio child answered a request already retired after its deadline; discarded");
        } else {
            tracing::warn!(channel = %self.channel, generation = child.generation, "stdio child sent a response matching no request in flight or recently retired (an unknown id); discarded");
        }
    }
}

/// Waits for the request's answer until `limit`; a child that exits gets
/// [`EXIT_DRAIN`] for the reader to route what it printed before.
///
/// # Cancel safety
/// Cancel-safe: dropping it leaves the registration, whose drop retires the request.
async fn wait_answer(child: &Child, registration: &mut Registration, limit: Instant) -> Waited {
    let waited = tokio::select! {
        biased;
        // cancel-safe: a oneshot receiver polled by reference keeps its value.
        response = &mut registration.rx => match response {
            Ok(answered) => Waited::Response(answered),
            Err(_) => Waited::Gone,
        },
        // cancel-safe: waiting on a token.
        () = child.exited.cancelled() => {
            // The reader may still be draining what the child printed before exiting.
            let drain = limit.min(Instant::now() + EXIT_DRAIN);
            match timeout_at(drain, &mut registration.rx).await {
                Ok(Ok(answered)) => Waited::Response(answered),
                _ => Waited::Gone,
            }
        }
        // cancel-safe: a timer.
        () = sleep_until(limit) => Waited::TimedOut,
    };
    match waited {
        Waited::TimedOut => {
            // Retire first, then look: a response routed just before is still ours.
            registration.retire();
            match registration.rx.try_recv() {
                Ok(answered) => Waited::Response(answered),
                Err(_) => Waited::TimedOut,
            }
        }
        other => other,
    }
}

/// The child's answer with the caller's own id where the pipe id was; every other byte
/// as the child printed it.
fn restore_id(raw: Box<RawValue>, span: rewrite::Span, original: &str) -> Result<Box<RawValue>, LegFailure> {
    if raw.get().get(span.clone()) == Some(original) {
        return Ok(raw);
    }
    let restored = rewrite::splice(raw.get(), &mut [(span, original)]);
    // A JSON value spliced in for a JSON value: still valid; checked all the same.
    RawValue::from_string(restored).map_err(|_| LegFailure::InternalAfterWrite)
}

/// Who sent a command, as far as the gateway can tell: its `Mcp-Session-Id` (a cancel
/// reaches only requests with the same key; commands without one share the `None` key).
fn caller_key(headers: &crate::protocol::WireHeaders) -> Option<Box<str>> {
    let mut values = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(MCP_SESSION_ID))
        .flat_map(|(_, values)| values.iter().map(String::as_str))
        .peekable();
    values.peek()?;
    Some(values.collect::<Vec<_>>().join("\n").into())
}

/// A message acknowledged once written.
fn acknowledged() -> Reply {
    Reply {
        resp_json: None,
        resp_headers: BTreeMap::new(),
        resp_code: 202,
        resp_type: RespType::NotifyAck,
    }
}

/// A cancel that names no request of the child it would go to: acknowledged without
/// writing it (there is nothing for it to cancel, and no other request may be hit).
fn not_forwarded(channel: &str, why: &'static str) -> Reply {
    tracing::debug!(channel, reason = why, "cancel not forwarded to the stdio child");
    acknowledged()
}

impl Writer {
    /// Starts writing `line` to `child` in its own task and remembers the write, so that
    /// the next writer waits for it. `None` when the child's stdin is closed or busy:
    /// nothing was written.
    fn start(&mut self, child: &Arc<Child>, line: Vec<u8>) -> Option<()> {
        let task = child.start_write(line)?;
        self.pending_write = Some(PendingWrite {
            generation: child.generation,
            task,
        });
        Some(())
    }

    /// Waits until `limit` for the write in flight, if any, and forgets it once finished.
    async fn wait_write(&mut self, limit: Instant) -> WriteWait {
        let Some(pending) = self.pending_write.as_mut() else {
            return WriteWait::Idle;
        };
        // cancel-safe: a join handle polled by reference; the write goes on in its task.
        match timeout_at(limit, &mut pending.task).await {
            Ok(joined) => {
                self.pending_write = None;
                WriteWait::Finished(joined.unwrap_or(WriteResult::Lost))
            }
            Err(_) => WriteWait::StillWriting,
        }
    }
}

#[cfg(test)]
mod mux_tests;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod stop_tests;
#[cfg(test)]
mod tests;
