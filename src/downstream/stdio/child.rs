//! One spawned child: its process group, its stdin, its id map (the requests in flight
//! and the ones retired), where its MCP session stands, and the monitor that reaps it.
//! What it prints on stdout and stderr is read in [`output`].
//!
//! Three tasks per child, each ending on its own: the monitor (ends when the child is
//! reaped and its stdout closed), the stdout reader (ends at EOF) and the stderr logger
//! (ends at EOF). Signals go to the whole process group: its leader is the child's guard
//! ([`super::guard`]) when the settings name one, else the child itself; either way the
//! child and what it starts in its group are in it.

mod output;

use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::value::RawValue;
use tokio::process::ChildStdin;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;

use super::guard;
use super::line::{self, WriteResult};
use super::pending::{Closed, Origin, PendingMap, Ticket};
use super::rewrite::Span;
use super::session::Session;
use super::Shared;
use crate::downstream::NotifySink;
use crate::supervisor::{Supervisor, TaskEnd, TaskKind};

/// Requests retired unanswered that each child remembers (per request it may have in
/// flight), to tell a late answer from one with an unknown id and to let a cancel reach
/// them; the oldest is forgotten first.
const RETIRED_PER_SLOT: usize = 4;
/// ... and at least this many.
const RETIRED_MIN: usize = 16;

/// A spawned child and what is known about it.
pub(super) struct Child {
    pub(super) generation: u64,
    /// The child's own pid (the guard's child, or the spawned process without a guard).
    pid: Option<i32>,
    /// Its process group: the guard's pid, or the child's own without a guard.
    pgid: Option<Pid>,
    pub(super) spawned_at: Instant,
    /// When it was started, by the wall clock (`/status` `started_at`).
    pub(super) started_at: std::time::SystemTime,
    stdin: Mutex<StdinSlot>,
    route: Mutex<PendingMap<Waiter>>,
    /// `wait()` returned.
    pub(super) exited: CancellationToken,
    /// The stdout reader saw EOF: nothing more can arrive.
    pub(super) stdout_closed: CancellationToken,
    /// SIGKILL was sent to the group.
    pub(super) killed: CancellationToken,
    /// The child outlived SIGKILL (reported once).
    pub(super) held: CancellationToken,
    /// Reaped and stdout closed: a new child may start.
    pub(super) released: CancellationToken,
    /// Where its MCP session stands.
    opening: Mutex<Opening>,
    /// The session is open, or its opening failed (`opening` tells which).
    pub(super) opened: CancellationToken,
    /// Spawns its writes (joined by their callers, and at the end of the run).
    supervisor: Supervisor,
}

/// Where a child's MCP session stands.
enum Opening {
    /// Nobody has started the gateway's `initialize` yet.
    Due,
    /// A call is running the handshake; others wait for `opened`.
    Running,
    /// Callers may use the child: `Some` the session the gateway opened, `None` a
    /// discovered child (2026-07-28) whose messages pass through untouched.
    Open(Option<Arc<Session>>),
    /// The handshake failed: the child is being ended.
    Failed,
}

impl Opening {
    /// A new child's: open at once when its messages pass through, else due.
    fn at_spawn(pass_through: bool) -> Self {
        if pass_through {
            Self::Open(None)
        } else {
            Self::Due
        }
    }

    /// A new child's `opened` token: already cancelled when there is no handshake.
    fn opened_at_spawn(pass_through: bool) -> CancellationToken {
        let opened = CancellationToken::new();
        if pass_through {
            opened.cancel();
        }
        opened
    }
}

/// What a call finds when it looks at a child's session.
pub(super) enum Claim {
    /// Open (see [`Opening::Open`]).
    Open(Option<Arc<Session>>),
    /// The caller now runs the handshake (and must finish it: see [`OpeningRun`]).
    Mine,
    /// Another call runs it: wait for `opened`.
    Wait,
    Failed,
}

/// `/status` view of a child's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// No child, or one that cannot take requests.
    Down,
    /// The child runs; the gateway's `initialize` has not been answered yet.
    Starting,
    /// The gateway initialized the child: callers are answered from its session.
    Initialized,
    /// A discovered (2026-07-28) or configured pass-through child: messages pass untouched.
    PassThrough,
}

/// The handshake of one child, claimed by one call. Dropped unfinished (the call was
/// cut, or the handshake failed), it ends the child: a session in an unknown state is
/// never used.
pub(super) struct OpeningRun<'a> {
    child: &'a Child,
    finished: bool,
}

impl OpeningRun<'_> {
    /// The session is open: callers may use the child.
    pub(super) fn open(mut self, session: Option<Arc<Session>>) {
        self.child.finish_opening(Opening::Open(session));
        self.finished = true;
    }
}

impl Drop for OpeningRun<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.child.abort();
            self.child.finish_opening(Opening::Failed);
        }
    }
}

enum StdinSlot {
    Ready(ChildStdin),
    /// A write task owns the pipe.
    Busy,
    /// Closed (graceful stop, kill, or a failed write): nothing more is written.
    Closed,
}

/// An answer for a call: the child's line, where the pipe id sits in it, and the caller's
/// own id to put there (the call does the splice, off the reader's path).
pub(super) type Answered = (Box<RawValue>, Span, Box<str>);

/// Where a request's answer and notifications go.
pub(super) struct Waiter {
    tx: oneshot::Sender<Answered>,
    notes: NotifySink,
    /// Cancelled when the call ends: a notification still being handed over is dropped.
    done: CancellationToken,
}

/// A call's claim on the child's answers to its pipe id; dropping it retires the request.
pub(super) struct Registration {
    pub(super) rx: oneshot::Receiver<Answered>,
    guard: RouteGuard,
}

struct RouteGuard {
    child: Arc<Child>,
    pipe: u64,
    done: CancellationToken,
    /// Written (or possibly written): its end is a retirement, not a silent removal.
    written: bool,
}

impl Child {
    pub(super) fn pid(&self) -> Option<i32> {
        self.pid
    }

    pub(super) fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw)
    }

    /// Running: `wait()` has not returned.
    pub(super) fn is_running(&self) -> bool {
        !self.exited.is_cancelled()
    }

    /// Can take a request: running, not being killed, stdout open.
    pub(super) fn is_usable(&self) -> bool {
        !self.exited.is_cancelled() && !self.killed.is_cancelled() && !self.stdout_closed.is_cancelled()
    }

    fn opening(&self) -> MutexGuard<'_, Opening> {
        self.opening.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks at the session; a call that finds it due claims the handshake.
    pub(super) fn claim_opening(&self) -> Claim {
        let mut opening = self.opening();
        match &*opening {
            Opening::Due => {
                *opening = Opening::Running;
                Claim::Mine
            }
            Opening::Running => Claim::Wait,
            Opening::Open(session) => Claim::Open(session.clone()),
            Opening::Failed => Claim::Failed,
        }
    }

    /// The session the gateway opened with it, if open (never claims anything).
    #[cfg(test)]
    pub(super) fn session(&self) -> Option<Arc<Session>> {
        match &*self.opening() {
            Opening::Open(session) => session.clone(),
            _ => None,
        }
    }

    /// The handshake this call claimed ([`Claim::Mine`]), to finish or drop.
    pub(super) fn opening_run(&self) -> OpeningRun<'_> {
        OpeningRun {
            child: self,
            finished: false,
        }
    }

    fn finish_opening(&self, end: Opening) {
        *self.opening() = end;
        self.opened.cancel();
    }

    /// The gateway's handshake with it failed (its exit counts as a short life).
    pub(super) fn opening_failed(&self) -> bool {
        matches!(*self.opening(), Opening::Failed)
    }

    /// The gateway holds (or is opening) its session: server requests are routed by the
    /// capabilities callers declared.
    pub(super) fn owned(&self) -> bool {
        !matches!(*self.opening(), Opening::Open(None))
    }

    /// Its session as `/status` shows it.
    pub(super) fn session_state(&self) -> SessionState {
        if !self.is_usable() {
            return SessionState::Down;
        }
        match &*self.opening() {
            Opening::Due | Opening::Running => SessionState::Starting,
            Opening::Open(Some(_)) => SessionState::Initialized,
            Opening::Open(None) => SessionState::PassThrough,
            Opening::Failed => SessionState::Down,
        }
    }

    fn stdin(&self) -> MutexGuard<'_, StdinSlot> {
        self.stdin.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn route(&self) -> MutexGuard<'_, PendingMap<Waiter>> {
        self.route.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next pipe id of this child.
    pub(super) fn mint(&self) -> Ticket {
        self.route().mint()
    }

    /// Enters a request in the id map right before its write, so that the answer to
    /// `ticket` goes to the returned registration. Refused once stdout has closed.
    pub(super) fn enter(
        self: &Arc<Self>,
        ticket: Ticket,
        origin: Origin,
        notes: NotifySink,
    ) -> Result<Registration, Closed> {
        let (tx, rx) = oneshot::channel();
        let done = CancellationToken::new();
        let waiter = Waiter {
            tx,
            notes,
            done: done.clone(),
        };
        let pipe = self.route().enter(ticket, origin, waiter)?;
        Ok(Registration {
            rx,
            guard: RouteGuard {
                child: self.clone(),
                pipe,
                done,
                written: false,
            },
        })
    }

    /// The pipe id of this caller's request with id `requested` (raw JSON), for its cancel.
    pub(super) fn cancel_target(&self, requested: &str, caller: Option<&str>) -> super::pending::CancelTarget {
        self.route().cancel_target(requested, caller)
    }

    /// Requests live in the id map, and retired ones remembered (tests, bounds).
    #[cfg(test)]
    pub(super) fn map_sizes(&self) -> (usize, usize) {
        let route = self.route();
        (route.live_len(), route.retired_len())
    }

    /// Starts writing one whole line in its own task (so that nothing can cut it short).
    /// `None` when stdin is closed or busy: nothing was written.
    pub(super) fn start_write(self: &Arc<Self>, line: Vec<u8>) -> Option<JoinHandle<WriteResult>> {
        let mut stdin = {
            let mut slot = self.stdin();
            match std::mem::replace(&mut *slot, StdinSlot::Busy) {
                StdinSlot::Ready(stdin) => stdin,
                other => {
                    *slot = other;
                    return None;
                }
            }
        };
        let child = self.clone();
        Some(self.supervisor.spawn_joined(async move {
            let result = line::write_line(&mut stdin, &line).await;
            let mut slot = child.stdin();
            if result == WriteResult::Done && matches!(*slot, StdinSlot::Busy) {
                *slot = StdinSlot::Ready(stdin);
            } else {
                // Closed meanwhile, or broken: dropping the pipe closes it.
                *slot = StdinSlot::Closed;
            }
            result
        }))
    }

    /// Closes stdin (the child sees EOF); a write in flight finishes first.
    pub(super) fn close_stdin(&self) {
        *self.stdin() = StdinSlot::Closed;
    }

    /// Sends `signal` to the child's process group. A group already gone is fine.
    pub(super) fn signal_group(&self, signal: Signal) {
        let Some(pgid) = self.pgid else { return };
        match killpg(pgid, signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => {
                tracing::warn!(pgid = pgid.as_raw(), ?signal, error = %e, "signalling the stdio child's process group failed")
            }
        }
    }

    /// SIGKILL to the group; the monitor starts counting towards "held".
    pub(super) fn kill_group(&self) {
        self.signal_group(Signal::SIGKILL);
        self.killed.cancel();
    }

    /// Stops using this child: closes stdin and SIGKILLs the group while the child runs
    /// (once it has exited, the monitor deals with what is left of its group).
    pub(super) fn abort(&self) {
        self.close_stdin();
        if self.is_running() {
            self.kill_group();
        } else {
            self.killed.cancel();
        }
    }

    /// stdout reached EOF: no request in flight can be answered any more. Each one's
    /// waiter is dropped (its call sees the child gone), once; nothing enters afterwards.
    fn stdout_eof(&self) {
        let gone = self.route().close();
        drop(gone);
        self.stdout_closed.cancel();
    }
}

impl Registration {
    /// The request may now be on its way to the child: from here its end retires it.
    pub(super) fn mark_written(&mut self) {
        self.guard.written = true;
    }

    /// Retires the request: an answer arriving from now on is discarded (and counted).
    pub(super) fn retire(&self) {
        self.guard.child.route().retire(self.guard.pipe);
        self.guard.done.cancel();
    }
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let mut route = self.child.route();
        if self.written {
            route.retire(self.pipe);
        } else {
            route.forget(self.pipe);
        }
        drop(route);
        self.done.cancel();
    }
}

/// Spawns generation `generation` of the channel's child (through its guard when the
/// settings name one) and its three tasks.
/// `pass_through`: the child's messages pass untouched (no handshake of the gateway's).
pub(super) fn spawn(shared: &Arc<Shared>, generation: u64, pass_through: bool) -> std::io::Result<Arc<Child>> {
    let Some((program, args)) = shared.command.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the command is empty",
        ));
    };
    // What the child gets, guarded or not: the same pipes, environment and working
    // directory, and a process group of its own.
    let configure = |command: &mut tokio::process::Command| {
        command
            .env_clear()
            .envs(&shared.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
    };
    let (process, pid) = match &shared.settings.guard {
        Some(exe) => {
            let (process, pid) = guard::spawn(exe, &shared.command, configure)?;
            (process, Some(pid))
        }
        None => {
            let mut command = tokio::process::Command::new(program);
            command.args(args);
            configure(&mut command);
            let process = command.spawn()?;
            let pid = process.id().and_then(|id| i32::try_from(id).ok());
            (process, pid)
        }
    };
    let pgid = process.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw);
    let mut process = Leader {
        process,
        pgid,
        reaped: false,
    };
    let (Some(stdin), Some(stdout), Some(stderr)) = (
        process.process.stdin.take(),
        process.process.stdout.take(),
        process.process.stderr.take(),
    ) else {
        // Dropping `process` kills its group.
        return Err(std::io::Error::other("the child's pipes were not set up"));
    };
    let retired_kept = (shared.settings.max_concurrent.get().saturating_mul(RETIRED_PER_SLOT)).max(RETIRED_MIN);
    let child = Arc::new(Child {
        generation,
        pid,
        pgid,
        spawned_at: Instant::now(),
        started_at: std::time::SystemTime::now(),
        stdin: Mutex::new(StdinSlot::Ready(stdin)),
        route: Mutex::new(PendingMap::new(retired_kept)),
        exited: CancellationToken::new(),
        stdout_closed: CancellationToken::new(),
        killed: CancellationToken::new(),
        held: CancellationToken::new(),
        released: CancellationToken::new(),
        opening: Mutex::new(Opening::at_spawn(pass_through)),
        opened: Opening::opened_at_spawn(pass_through),
        supervisor: shared.supervisor.clone(),
    });
    // Untracked: they live as long as the child, which outlives any drain.
    let sup = &shared.supervisor;
    sup.spawn_untracked(TaskKind::StdioMonitor, monitor(shared.clone(), child.clone(), process));
    sup.spawn_untracked(
        TaskKind::StdioReader,
        output::read_stdout(shared.clone(), child.clone(), stdout),
    );
    sup.spawn_untracked(
        TaskKind::StdioStderr,
        output::log_stderr(shared.clone(), generation, stderr),
    );
    Ok(child)
}

/// The spawned process (the guard, or the child itself), leader of the child's group.
/// Dropped before it was reaped (a spawn that failed half way, a monitor dropped with the
/// runtime), it SIGKILLs the whole group: `kill_on_drop` alone would reach the guard and
/// not the child. Once reaped, the group id may be reused: nothing is sent then.
struct Leader {
    process: tokio::process::Child,
    pgid: Option<Pid>,
    reaped: bool,
}

impl Leader {
    /// # Cancel safety
    /// Cancel-safe: `Child::wait` may be dropped and called again.
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let status = self.process.wait().await;
        self.reaped = status.is_ok();
        status
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if let (false, Some(pgid)) = (self.reaped, self.pgid) {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// Reaps the child, then makes sure nothing still holds its stdout before releasing it.
async fn monitor(shared: Arc<Shared>, child: Arc<Child>, mut process: Leader) -> TaskEnd {
    let grace = shared.settings.stop_grace;
    let status = tokio::select! {
        biased;
        // cancel-safe: `Leader::wait` may be dropped and called again.
        status = process.wait() => status,
        // cancel-safe: waiting on a token.
        () = child.killed.cancelled() => match timeout(grace, process.wait()).await {
            Ok(status) => status,
            Err(_) => {
                shared.report_held(&child, "the process was not reaped within stop_grace of SIGKILL");
                process.wait().await
            }
        },
    };
    shared.child_exited(&child, &status);
    // Descendants may still hold the pipe: they go with the group.
    if timeout(grace, child.stdout_closed.cancelled()).await.is_err() {
        child.kill_group();
        if timeout(grace, child.stdout_closed.cancelled()).await.is_err() {
            shared.report_held(
                &child,
                "a process outside the group kept the child's stdout open after SIGKILL",
            );
            child.stdout_closed.cancelled().await;
        }
    }
    shared.child_released(&child);
    TaskEnd::Finished
}
