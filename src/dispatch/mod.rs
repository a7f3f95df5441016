//! The prefetch queue, the poll loop and the per-command lifecycle.
//!
//! Owns: how many commands the gateway holds (`control_plane.max_inflight`), the order
//! `receipt -> fence -> downstream -> deliver`, deadlines (anchored at poll receipt),
//! and the strict-mode reactions (latching while the permit is held). Must not touch
//! sockets itself: the control client and the transports do the I/O.
//!
//! Every command runs in its own task on the gateway's [`TaskTracker`], inside a
//! `tunnelgate.command` span created where the task is spawned (a child of the caller's
//! span when the command carries W3C trace context; see `trace`).

mod decide;
mod lifecycle;
mod replies;
mod trace;

pub use trace::Propagation;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::control::backoff::UNAUTHORIZED_FLOOR;
use crate::control::{Backoff, ControlClient};
use crate::control::{PollError, PollErrorKind, PollWait};
use crate::downstream::Channels;
use crate::health::Health;
use crate::protocol::{Command, CommandKind, InvalidCommand};
use crate::strict::Fence;
use crate::supervisor::{Supervisor, TaskEnd, TaskKind};
use crate::telemetry::{CommandType, Metrics, PollResult};

/// What the lifecycle needs to decide, fixed at startup.
#[derive(Clone, Debug)]
pub struct Policy {
    pub strict: bool,
    /// `strict.on_downstream_ambiguity = "fatal"`.
    pub ambiguity_is_fatal: bool,
    /// Bound on best-effort error responses after a latch or at shutdown.
    pub cleanup_timeout: Duration,
    /// Prefetch capacity: commands held at once (queued + in flight).
    pub max_inflight: usize,
    /// Where the gateway's trace context is handed on to MCP servers.
    pub propagation: Propagation,
}

/// The dispatcher's two stop signals (see the stop order in `app.rs`).
pub struct Stops {
    /// Downstream legs in flight are cut short.
    pub cut: CancellationToken,
    /// Everything stops now, posts included.
    pub hard_stop: CancellationToken,
}

/// Everything a command task shares with the rest of the gateway.
pub struct Dispatcher {
    pub(crate) control: ControlClient,
    pub(crate) fence: Fence,
    pub(crate) channels: Channels,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) health: Arc<Health>,
    pub(crate) policy: Policy,
    pub(crate) supervisor: Supervisor,
    /// Cancelled when the stop cuts downstream legs short (grace over, second stop
    /// request, or latched cleanup over): each is answered within the cleanup time.
    pub(crate) cut: CancellationToken,
    /// Cancelled when in-flight work must stop now, posts included (cleanup over).
    pub(crate) hard_stop: CancellationToken,
    space: Notify,
    /// Server requests in flight, for the replies that belong to them.
    server_requests: replies::ServerRequests,
    /// Names each admitted leg, as the owner of its server requests.
    next_leg: std::sync::atomic::AtomicU64,
    admit_tx: tokio::sync::mpsc::UnboundedSender<lifecycle::AdmitRequest>,
}

impl Dispatcher {
    /// Every collaborator is passed in explicitly: the dispatcher owns none of them.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        control: ControlClient,
        fence: Fence,
        channels: Channels,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        policy: Policy,
        supervisor: Supervisor,
        stops: Stops,
    ) -> Arc<Self> {
        let (admit_tx, admit_rx) = tokio::sync::mpsc::unbounded_channel();
        // Not on the tracker: it idles until stop and must not hold up a drain.
        supervisor.spawn_untracked(
            TaskKind::Admitter,
            lifecycle::admit_loop(fence.clone(), admit_rx, stops.hard_stop.clone()),
        );
        Arc::new(Self {
            control,
            fence,
            channels,
            metrics,
            health,
            policy,
            supervisor,
            cut: stops.cut,
            hard_stop: stops.hard_stop,
            space: Notify::new(),
            server_requests: replies::ServerRequests::default(),
            next_leg: std::sync::atomic::AtomicU64::new(1),
            admit_tx,
        })
    }

    /// The poll loop: runs until `stop` is cancelled or the fence latches.
    ///
    /// Asks for `min(free slots, 25)` commands, pauses while the prefetch queue is full,
    /// and processes every command returned, even beyond the limit.
    pub async fn poll_loop(self: Arc<Self>, stop: CancellationToken) -> TaskEnd {
        let latched = self.fence.latched_token();
        let mut backoff = Backoff::default();
        loop {
            let free = loop {
                let held = self.health.alive();
                if held < self.policy.max_inflight {
                    tracing::debug!(held, "polling for more commands");
                    break self.policy.max_inflight - held;
                }
                tokio::select! {
                    biased;
                    // cancel-safe: waiting only.
                    _ = stop.cancelled() => return self.polling_ended(),
                    // cancel-safe: waiting only.
                    _ = latched.cancelled() => return self.polling_ended(),
                    // cancel-safe: a lost wakeup is re-checked by the loop.
                    _ = self.space.notified() => {}
                }
            };
            let answered = tokio::select! {
                biased;
                // cancel-safe: a poll without response headers has handed out nothing.
                _ = stop.cancelled() => return self.polling_ended(),
                // cancel-safe: as above.
                _ = latched.cancelled() => return self.polling_ended(),
                r = self.control.poll(free.min(25), self.poll_wait()) => r,
            };
            // Headers arrived: the body's commands are ours. It is read whole even when a
            // stop or a latch comes meanwhile (bounded by the cleanup time from then), so
            // that each command gets its answer ("not executed" once stopping).
            let result = match answered {
                Ok(answer) => {
                    let read = self.control.read_commands(answer);
                    tokio::select! {
                        biased;
                        r = read => r,
                        // cancel-safe: waiting only; the read above is what must not be dropped early.
                        () = stop_then(&stop, &latched, self.policy.cleanup_timeout) => {
                            tracing::warn!("an answered poll's body was not read within the cleanup time after the stop; its commands are lost");
                            Err(PollError::new(PollErrorKind::Timeout, Some(200), None))
                        }
                    }
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(polled) => {
                    backoff.reset();
                    self.health.poll_succeeded();
                    self.metrics.poll_succeeded_at(unix_now());
                    self.metrics.poll_finished(if polled.commands.is_empty() {
                        PollResult::Empty
                    } else {
                        PollResult::Commands
                    });
                    for command in polled.commands {
                        self.spawn_command(command, polled.received_at);
                    }
                }
                Err(e) => {
                    self.metrics.poll_failed(e.kind);
                    self.health.poll_failed(e.kind());
                    let mut delay = backoff.next_delay(rand::random::<f64>(), e.retry_after);
                    if e.kind == PollErrorKind::Unauthorized {
                        delay = delay.max(UNAUTHORIZED_FLOOR);
                        tracing::error!(
                            status = e.status,
                            retry_in_ms = delay.as_millis() as u64,
                            "the control plane refused the API key or tunnel; an operator must fix the credentials"
                        );
                    } else {
                        tracing::warn!(
                            kind = e.kind(),
                            status = e.status,
                            failures = backoff.failures(),
                            retry_in_ms = delay.as_millis() as u64,
                            "poll failed; backing off"
                        );
                    }
                    tokio::select! {
                        biased;
                        // cancel-safe: waiting only.
                        _ = stop.cancelled() => return self.polling_ended(),
                        // cancel-safe: waiting only.
                        _ = latched.cancelled() => return self.polling_ended(),
                        // cancel-safe: a sleep.
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    /// Quick until a poll succeeds (at start, and after each failure), long after that.
    fn poll_wait(&self) -> PollWait {
        let health = self.health.poll_health();
        if health.last_successful_poll_age_seconds.is_none() || health.consecutive_poll_errors > 0 {
            PollWait::Quick
        } else {
            PollWait::Long
        }
    }

    fn polling_ended(&self) -> TaskEnd {
        tracing::info!("polling stopped");
        TaskEnd::Finished
    }

    fn spawn_command(self: &Arc<Self>, command: Result<Command, InvalidCommand>, received_at: Instant) {
        let command_type = match &command {
            Ok(c) => match &c.kind {
                CommandKind::JsonRpc(_) => CommandType::JsonRpc,
                CommandKind::SessionTermination => CommandType::SessionTermination,
                CommandKind::Unknown(_) => CommandType::Unknown,
            },
            Err(_) => CommandType::Unknown,
        };
        self.metrics.command_received(command_type);
        let span = trace::command_span(&command, command_type.as_str(), self.policy.strict);
        if let Some(parent) = command
            .as_ref()
            .ok()
            .and_then(|c| trace::caller_context(c, &self.metrics))
        {
            crate::telemetry::continue_trace(&span, &parent);
        }
        // Until the command's task starts on it (closed in `run`).
        let queue = tracing::info_span!(parent: &span, "tunnelgate.queue");
        self.health.command_started();
        self.metrics.set_queue_depth(self.health.queued());
        let place = command
            .as_ref()
            .ok()
            .and_then(|c| self.request_admission(c, received_at));
        let this = self.clone();
        self.supervisor.spawn(
            TaskKind::Command,
            async move {
                let _done = FinishGuard(&this);
                match command {
                    Ok(c) => this.run(c, received_at, place, queue).await,
                    Err(invalid) => {
                        drop(queue);
                        this.answer_invalid(invalid).await
                    }
                }
                TaskEnd::Finished
            }
            .instrument(span),
        );
    }
}

/// Marks a command finished however its task ends (including a panic), and wakes the
/// poller when the prefetch queue has room again.
struct FinishGuard<'a>(&'a Arc<Dispatcher>);

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        self.0.health.command_finished();
        self.0.metrics.set_queue_depth(self.0.health.queued());
        self.0.space.notify_one();
    }
}

/// Resolves `bound` after `stop` or `latched` is cancelled.
async fn stop_then(stop: &CancellationToken, latched: &CancellationToken, bound: Duration) {
    tokio::select! {
        // cancel-safe: waiting only.
        () = stop.cancelled() => {}
        // cancel-safe: waiting only.
        () = latched.cancelled() => {}
    }
    tokio::time::sleep(bound).await;
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
