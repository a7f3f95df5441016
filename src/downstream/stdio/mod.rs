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
//!
//! Rooms: [`call`] (a caller's message through the child), [`pipe`] (one line written
//! whole, and the wait for its answer), [`lifecycle`] (spawns, the restart backoff,
//! exits and held children), [`session`] (the MCP session the gateway holds, and its
//! handshake on the pipes), [`child`] (one spawned child, its id map and what it
//! prints); this module keeps the transport's surface and the state its tasks share.

mod backoff;
mod bridge;
mod call;
mod child;
mod env;
pub(crate) mod guard;
mod held;
mod lifecycle;
mod line;
#[cfg(any(test, fuzzing))]
pub(crate) mod line_probe;
mod listen;
mod pending;
mod pipe;
mod rewrite;
mod session;
mod up;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::{sleep_until, timeout, Instant};

use self::child::Child;
pub(crate) use self::child::SessionState;
pub(crate) use self::held::{HeldEnded, InputRequiredSettings};
use self::pipe::{Writer, EXIT_DRAIN};
#[cfg(test)]
use self::session::Session;
pub(crate) use self::session::SessionMode;
pub use self::session::SessionSettings;
use super::era;
use super::identity::Observed;
use super::{ChannelStatus, DownstreamRequest, LegFailure, LegResult, NotifySink, Reply, TransportKind};
use crate::protocol::RespType;
use crate::strict::Admission;
use crate::supervisor::Supervisor;
use crate::telemetry::Metrics;

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
    /// `guard`), so that the child's process group dies with this process however it
    /// dies; `None` starts the command directly. The default is this binary when its
    /// `main` dispatches the guard ([`guard::dispatch`]), else `None` (unit tests, a
    /// binary that embeds the gateway without dispatching the guard).
    pub guard: Option<std::path::PathBuf>,
    /// Who opens each child's MCP session, and the gateway's own `initialize`.
    pub session: SessionSettings,
    /// How the era bridge holds a 2026-07-28 caller's call while the server asks for input.
    pub input_required: InputRequiredSettings,
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
            input_required: InputRequiredSettings::default(),
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
    slots: Arc<tokio::sync::Semaphore>,
    /// Held for reading by a handshake caller's request that may be asked for input, and
    /// for writing by a bridged call that may ask (see [`held`]): a server request then
    /// has exactly one caller it can belong to.
    asking: Arc<tokio::sync::RwLock<()>>,
    /// Held while one line is written, by requests and notifications alike (FIFO: writers
    /// take turns in the order they came). The only lock held across `.await`.
    writer: tokio::sync::Mutex<Writer>,
    state: Mutex<State>,
    /// Responses that matched no request in flight (late after a timeout, or unknown ids).
    discarded_responses: AtomicU64,
    /// What the last `initialize` answer (the gateway's own, or a caller's passed through)
    /// and `tools/list` answer said (`/status`).
    observed: Observed,
    /// Calls the era bridge holds parked, and the latest ended ones.
    parking: Mutex<held::Parking>,
    /// Signs and checks the `requestState` of parked calls (a key of this process's own).
    signer: era::state::Signer,
    /// Replies awaited from handshake-era callers for a 2026-07-28 child's input requests.
    up_waiters: era::ask::Waiters,
    /// Told of each held call that ends with no caller told (the delivery receipts).
    held_observer: std::sync::OnceLock<held::HeldObserver>,
    /// 2026-07-28 callers' listen streams, and the URIs subscribed on the child for them.
    listeners: Mutex<crate::downstream::era::listen::Listeners>,
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
    /// The `DiscoverResult` of a 2026-07-28 child, and the generation it came from.
    discovery: Option<(u64, Arc<serde_json::Map<String, serde_json::Value>>)>,
}

/// What `start_due` waits for.
enum Wait {
    Child(Arc<Child>),
    Until(Instant),
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
        let slots = Arc::new(tokio::sync::Semaphore::new(settings.max_concurrent.get()));
        let discovered = settings.session.configured_pass_through();
        Self {
            shared: Arc::new(Shared {
                channel: channel.to_owned(),
                command,
                env,
                settings,
                metrics,
                supervisor: Supervisor::logging_only(),
                slots,
                asking: Arc::new(tokio::sync::RwLock::new(())),
                writer: tokio::sync::Mutex::new(Writer::default()),
                state: Mutex::new(State {
                    discovered,
                    ..State::default()
                }),
                discarded_responses: AtomicU64::new(0),
                observed: Observed::default(),
                parking: Mutex::new(held::Parking::default()),
                signer: era::state::Signer::random(),
                up_waiters: era::ask::Waiters::default(),
                held_observer: std::sync::OnceLock::new(),
                listeners: Mutex::default(),
            }),
        }
    }

    /// Tells `observer` of each call the era bridge held that ends with no caller told
    /// (the delivery receipts keep them). Set once; later calls change nothing.
    pub(crate) fn observe_held(&self, observer: held::HeldObserver) {
        let _ = self.shared.held_observer.set(observer);
    }

    /// Has the child's tasks watched by `supervisor` (an unexpected end is reported to
    /// the gateway). Call before the first use.
    #[must_use]
    pub(crate) fn supervised(mut self, supervisor: Supervisor) -> Self {
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
    pub(crate) async fn open(&self, admission: &Admission) -> Result<(), LegFailure> {
        admission.recheck().map_err(|_| LegFailure::NotAdmitted)?;
        let limit = Instant::now() + self.shared.settings.session.timeout;
        self.shared.ensure_open(admission, limit).await.map(|_| ())
    }

    /// Waits until the channel needs a start: no usable child, and the restart backoff
    /// over. `false` once the transport is stopped (nothing starts again).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only watches tokens and timers.
    pub(crate) async fn start_due(&self) -> bool {
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
        let session = &self.shared.settings.session;
        if session.mode == SessionMode::PassThrough {
            return self.plain_call(admission, req, notes).await;
        }
        if req.payload.is_reply() {
            if let Some(ack) = self.shared.up_waiters.take(req.payload) {
                return LegResult::answered(ack);
            }
        }
        if session.era != era::EraSetting::Modern {
            match era::plan(req.payload, req.headers) {
                era::Plan::PassThrough => {}
                // Boxed: the bridge's large, rare state stays off every plain call's future.
                plan => return Box::pin(self.bridged(admission, req, notes, plan)).await,
            }
        }
        // A handshake-era caller of a 2026-07-28 child.
        if self.shared.lock().discovered && session.era != era::EraSetting::Legacy {
            match era::up::plan(req.payload, req.headers) {
                era::up::UpPlan::PassThrough => {}
                plan => return Box::pin(self.up_bridged(admission, req, notes, plan)).await,
            }
        }
        self.plain_call(admission, req, notes).await
    }

    /// [`StdioTransport::call`] without the era bridge: the message as the caller sent it.
    async fn plain_call(&self, admission: &Admission, req: &DownstreamRequest<'_>, notes: &NotifySink) -> LegResult {
        let payload = req.payload;
        let final_type = if payload.expects_response() {
            RespType::JsonrpcResponse
        } else {
            RespType::NotifyAck
        };
        match self.shared.call(admission, req, notes).await {
            Ok((reply, written)) => LegResult::answered(reply).timed_from(written, payload),
            Err(failure) => LegResult::failed(failure, payload.id(), final_type),
        }
    }

    /// stdio has no MCP session: answers `204 session_termination_response` without
    /// touching the child.
    pub(crate) async fn terminate_session(&self, admission: &Admission) -> LegResult {
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
    pub(crate) async fn shutdown(&self) {
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
            era_setting: Some(self.shared.settings.session.era),
            era: Some(match session {
                SessionState::PassThrough => Some(era::ServerEra::Modern),
                SessionState::Initialized => Some(era::ServerEra::Legacy),
                SessionState::Starting | SessionState::Down if st.discovered => Some(era::ServerEra::Modern),
                SessionState::Starting | SessionState::Down => None,
            }),
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

    /// The child now running, if it can take a message (never spawns one).
    fn running_child(&self) -> Option<Arc<Child>> {
        self.lock().child.clone().filter(|c| c.is_usable())
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
