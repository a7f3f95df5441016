//! Supervised stdio children: one MCP server process per channel, spoken to with
//! newline-delimited JSON-RPC over its stdin and stdout.
//!
//! Owns the child's whole life: spawning (argv without a shell, its own process group, a
//! minimal environment that never carries the gateway's credentials), one request
//! lifecycle at a time, routing what it prints, logging its stderr (redacted, bounded),
//! restarting it with backoff, and stopping it (gracefully, or at once on a fatal latch).
//!
//! Invariants:
//! - every spawn happens right after `Admission::recheck()` succeeded and every write
//!   right after `Admission::begin_send()` did, with no `.await` in between;
//! - a line is written whole or the child is killed: the write runs in its own task, so
//!   no timeout or cancellation can leave half a message in the pipe;
//! - a request whose deadline passed after the write is retired: a late response is
//!   discarded and counted, never matched to a later request;
//! - no new child starts while the previous one is unreaped (still running, or a
//!   descendant still holds its stdout): such a child is held, reported once, and reaped
//!   in the background;
//! - after `shutdown` or `kill_now` nothing is ever spawned again.
//!
//! Must not touch the control plane, the fence's state or the latch: outcomes are
//! returned, the dispatcher decides. Must not log payloads: stdout lines are logged by
//! length only, stderr lines only through [`redact::redact_line`].

mod backoff;
mod child;
mod env;
mod line;
#[cfg(any(test, fuzzing))]
pub(crate) mod line_probe;
mod redact;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};

use self::child::Child;
use self::line::WriteResult;
use super::{ChannelStatus, DownstreamRequest, LegFailure, LegResult, NotifySink, Reply};
use crate::protocol::RespType;
use crate::strict::Admission;
use crate::supervisor::Supervisor;
use crate::telemetry::Metrics;

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
}

impl Default for StdioSettings {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(60),
            restart_backoff_min: Duration::from_millis(200),
            restart_backoff_max: Duration::from_secs(10),
            stop_grace: Duration::from_secs(2),
        }
    }
}

/// One channel's supervised stdio MCP server. Share it behind an `Arc`; calls are
/// serialized per child.
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
    /// The request lifecycle: held by a request from before its write until its response
    /// (or failure). Notifications and client responses do not take it, so that, e.g., a
    /// `notifications/cancelled` or the answer to a server request reaches the child while
    /// a request is in flight.
    lifecycle: tokio::sync::Mutex<()>,
    /// Held while one line is written, by requests and notifications alike. Lock order:
    /// `lifecycle`, then `writer`. These two are the only locks held across `.await`.
    writer: tokio::sync::Mutex<Writer>,
    state: Mutex<State>,
    /// Responses that matched no request in flight (late after a timeout, or unknown ids).
    discarded_responses: AtomicU64,
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
    Response(Box<RawValue>),
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
        Self {
            shared: Arc::new(Shared {
                channel: channel.to_owned(),
                command,
                env,
                settings,
                metrics,
                supervisor: Supervisor::logging_only(),
                lifecycle: tokio::sync::Mutex::new(()),
                writer: tokio::sync::Mutex::new(Writer::default()),
                state: Mutex::new(State::default()),
                discarded_responses: AtomicU64::new(0),
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

    /// Spawns the child if none is running (under admission; respects restart backoff
    /// without waiting for it). Used at startup.
    pub async fn warm(&self, admission: &Admission) -> Result<(), LegFailure> {
        if admission.recheck().is_err() {
            return Err(LegFailure::NotAdmitted);
        }
        self.shared.ensure_child(admission, Instant::now()).await.map(|_| ())
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

    /// `/status` view: `up` while a child runs, `generation` = spawns so far.
    pub fn status(&self) -> ChannelStatus {
        let st = self.shared.lock();
        ChannelStatus {
            channel: self.shared.channel.clone(),
            transport: "stdio",
            up: st.child.as_ref().is_some_and(|c| c.is_running()),
            generation: st.generation,
        }
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
        let payload = req.payload;
        let limit = self.limit(req.deadline);
        let request_id = payload.id().filter(|_| payload.expects_response());
        admission.recheck().map_err(|_| LegFailure::NotAdmitted)?;
        // cancel-safe: waiting for a lock takes nothing until it resolves.
        let lifecycle = match request_id {
            Some(_) => Some(
                timeout_at(limit, self.lifecycle.lock())
                    .await
                    .map_err(|_| LegFailure::DeadlineBeforeSend)?,
            ),
            None => None,
        };
        let child = self.ensure_child(admission, limit).await?;
        // cancel-safe: as above.
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

        let line = line::frame(payload.raw().get());
        let registration = request_id.map(|id| child.register(line::trim_json(id.get()).to_owned(), notes.clone()));
        // Recheck, mark the request sent and start the write with no `.await` between.
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        let task = child.start_write(line).ok_or(LegFailure::ChildNotRunning)?;
        writer.pending_write = Some(PendingWrite {
            generation: child.generation,
            task,
        });

        let is_initialize = payload.method() == Some("initialize");
        match writer.wait_write(limit).await {
            WriteWait::Finished(WriteResult::Done) => {}
            WriteWait::Finished(WriteResult::Failed { written, kind }) => {
                tracing::warn!(channel = %self.channel, generation = child.generation, written, error = ?kind, "writing to the stdio child failed: killing it");
                child.abort();
                return Err(if written == 0 {
                    LegFailure::ChildNotRunning
                } else {
                    LegFailure::ChildPipeBroken
                });
            }
            WriteWait::Finished(WriteResult::Lost) | WriteWait::Idle => return Err(LegFailure::InternalAfterWrite),
            WriteWait::StillWriting => {
                tracing::debug!(channel = %self.channel, generation = child.generation, "deadline passed while writing to the stdio child");
                self.retire_timed_out(&child, is_initialize);
                return Err(LegFailure::TimeoutAfterWrite);
            }
        }
        drop(writer);

        let Some(mut registration) = registration else {
            return Ok(Reply {
                resp_json: None,
                resp_headers: BTreeMap::new(),
                resp_code: 202,
                resp_type: RespType::NotifyAck,
            });
        };
        let waited = tokio::select! {
            biased;
            // cancel-safe: a oneshot receiver polled by reference keeps its value.
            response = &mut registration.rx => match response {
                Ok(raw) => Waited::Response(raw),
                Err(_) => Waited::Gone,
            },
            // cancel-safe: waiting on a token.
            () = child.exited.cancelled() => {
                // The reader may still be draining what the child printed before exiting.
                let drain = limit.min(Instant::now() + EXIT_DRAIN);
                match timeout_at(drain, &mut registration.rx).await {
                    Ok(Ok(raw)) => Waited::Response(raw),
                    _ => Waited::Gone,
                }
            }
            // cancel-safe: a timer.
            () = sleep_until(limit) => Waited::TimedOut,
        };
        let waited = match waited {
            Waited::TimedOut => {
                // Retire first, then look: a response routed just before is still ours.
                registration.retire();
                match registration.rx.try_recv() {
                    Ok(raw) => Waited::Response(raw),
                    Err(_) => Waited::TimedOut,
                }
            }
            other => other,
        };
        drop(lifecycle);
        match waited {
            Waited::Response(raw) => Ok(Reply {
                resp_json: Some(raw),
                resp_headers: BTreeMap::from([("Content-Type".to_owned(), vec!["application/json".to_owned()])]),
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

    /// Spawns the next generation (state locked, admission just rechecked).
    fn spawn_locked(self: &Arc<Self>, st: &mut State) -> Result<Arc<Child>, LegFailure> {
        let generation = st.generation + 1;
        match child::spawn(self, generation) {
            Ok(c) => {
                if st.generation > 0 {
                    self.metrics.stdio_restarted(&self.channel);
                }
                st.generation = generation;
                st.child = Some(c.clone());
                self.metrics.stdio_up(&self.channel, true);
                tracing::info!(channel = %self.channel, generation, pid = c.pid(), "stdio child started");
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
                tracing::warn!(channel = %self.channel, error = %e, retry_in_ms = wait.as_millis() as u64, "stdio child could not be started");
                Err(LegFailure::ChildNotRunning)
            }
        }
    }

    /// The monitor saw the child's exit (or `wait` failed).
    fn child_exited(&self, child: &Child, status: &std::io::Result<std::process::ExitStatus>) {
        let now = Instant::now();
        let lived = now.saturating_duration_since(child.spawned_at);
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

impl Writer {
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
mod stop_tests;
#[cfg(test)]
mod tests;
