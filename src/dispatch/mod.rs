//! The prefetch queue and the per-command lifecycle.
//!
//! Owns: how many commands the gateway holds (`control_plane.max_inflight`), the order
//! `receipt -> fence -> downstream -> deliver`, deadlines (anchored at poll receipt),
//! and the strict-mode reactions (latching while the permit is held). Must not touch
//! sockets itself: the control client and the transports do the I/O, and the poll loop
//! is `control`'s [`Poller`], which hands each batch here.
//!
//! Every command runs in its own task on the gateway's task tracker, inside a
//! `tunnelgate.command` span created where the task is spawned (a child of the caller's
//! span when the command carries W3C trace context; see `trace`). Its path:
//! [`route`](route::route) says where a command goes, once, at receipt; the admission
//! line (`admission`) grants the fence in receipt order; a `CommandTask` (`command`)
//! drives an admitted command through the states of `decide`; `leg` runs the downstream
//! leg with its notifications and replies; `answer` posts every response; `observe`
//! tells each step of a command to the books, its span, its receipt and the log, once.
//!
//! The parts the tasks share, each a concern of its own: the [`Gate`] (fence, admission
//! line, channels, rules), the `Responder` (the control plane's side), the `Books`
//! (counts, health and room in the queue), the `Legs` (what running legs share) and the
//! receipts `Journal`: each command fills in a pending receipt as it goes, handed over
//! (without waiting) when its task ends, and kept only when it did not end cleanly.

mod admission;
mod answer;
mod books;
mod command;
mod decide;
mod discover;
mod keeper;
mod leg;
mod observe;
mod replies;
mod route;
mod trace;

pub(crate) use trace::Propagation;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::control::{ControlClient, PollError, PollSink, Polled, Poller};
use crate::downstream::Channels;
use crate::health::Health;
use crate::protocol::{Command, CommandKind, InvalidCommand};
use crate::receipts::Journal;
use crate::strict::{Fence, IntentStore};
use crate::supervisor::{Supervisor, TaskEnd, TaskKind};
use crate::telemetry::{CommandType, Metrics};

use admission::AdmissionLine;
use answer::Responder;
use books::Books;
use command::Received;
use decide::Rules;
use leg::Legs;
use observe::{observe_aside, Aside};

/// What the lifecycle needs to decide, fixed at startup.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    pub strict: bool,
    /// `strict.on_downstream_ambiguity = "fatal"`.
    pub ambiguity_is_fatal: bool,
    /// Bound on best-effort error responses after a latch or at shutdown.
    pub cleanup_timeout: Duration,
    /// How long a stop waits for an open poll's answer (`strict.shutdown_grace`).
    pub open_poll_grace: Duration,
    /// Prefetch capacity: commands held at once (queued + in flight).
    pub max_inflight: usize,
    /// Where the gateway's trace context is handed on to MCP servers.
    pub propagation: Propagation,
    /// `control_plane.resp_timing`.
    pub resp_timing: bool,
}

/// The dispatcher's two stop signals (see the stop order in `app::stop`).
pub(crate) struct Stops {
    /// Downstream legs in flight are cut short.
    pub cut: CancellationToken,
    /// Everything stops now, posts included.
    pub hard_stop: CancellationToken,
}

/// Everything the dispatcher is built from: each collaborator is passed in, none is
/// owned.
pub(crate) struct Wiring {
    pub control: ControlClient,
    pub fence: Fence,
    pub channels: Channels,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub policy: Policy,
    pub supervisor: Supervisor,
    pub stops: Stops,
    /// Strict mode's write-ahead intent; `None` in default mode.
    pub write_ahead: Option<WriteAhead>,
    /// Where each command that did not end cleanly leaves its delivery receipt.
    pub receipts: Journal,
}

/// Where strict mode records each admitted command before its first downstream step,
/// and who writes it.
pub(crate) struct WriteAhead {
    pub store: Arc<dyn IntentStore>,
    /// This run's `X-Tunnel-Client-Instance-Id`.
    pub instance_id: String,
}

/// Where commands may go: the fence, the line in front of it, the channels, the rules,
/// and the write-ahead record of what passed the fence.
pub(crate) struct Gate {
    fence: Fence,
    line: AdmissionLine,
    channels: Channels,
    rules: Rules,
    write_ahead: Option<WriteAhead>,
}

impl Gate {
    /// `cmd`, received at `received_at`, routed: once, now, by the receipt's clock (the
    /// route's `now` is `received_at`: whether the deadline passed while the command was
    /// queued is its task's to ask). A route into the admission line takes its place
    /// there now, in receipt order.
    fn receive(&self, cmd: Command, received_at: Instant) -> Received {
        let route = route::route(
            &cmd,
            received_at,
            |c| self.channels.get(c),
            self.rules.strict,
            received_at,
        )
        .owned(|method, deadline| self.line.join(&cmd, method, deadline));
        Received {
            cmd,
            received_at,
            route,
        }
    }
}

/// What every command task shares with the rest of the gateway.
pub(crate) struct Dispatcher {
    gate: Gate,
    responder: Responder,
    books: Arc<Books>,
    legs: Legs,
    supervisor: Supervisor,
    receipts: Journal,
    /// The poll loop, as built; each run of [`Dispatcher::poll_loop`] starts it afresh.
    poller: Poller,
}

impl Dispatcher {
    pub(crate) fn new(wiring: Wiring) -> Arc<Self> {
        let Wiring {
            control,
            fence,
            channels,
            metrics,
            health,
            policy,
            supervisor,
            stops,
            write_ahead,
            receipts,
        } = wiring;
        let line = AdmissionLine::start(&supervisor, fence.clone(), stops.hard_stop.clone());
        let poller = Poller::new(
            control.clone(),
            metrics.clone(),
            (policy.cleanup_timeout, policy.open_poll_grace),
        );
        let books = Arc::new(Books::new(metrics, health, policy.max_inflight));
        Arc::new(Self {
            gate: Gate {
                fence,
                line,
                channels,
                rules: Rules {
                    strict: policy.strict,
                    ambiguity_is_fatal: policy.ambiguity_is_fatal,
                },
                write_ahead,
            },
            responder: Responder::new(control, stops.hard_stop, policy.cleanup_timeout, books.clone())
                .with_resp_timing(policy.resp_timing),
            books,
            legs: Legs::new(stops.cut, policy.propagation),
            supervisor,
            receipts,
            poller,
        })
    }

    /// Starts the stdio keepers: every stdio child started and its session opened now
    /// and after each death (see `keeper`).
    pub(crate) fn keep_stdio_sessions(&self) {
        keeper::start(
            &self.supervisor,
            &self.gate.channels,
            &self.gate.fence,
            self.gate.rules,
            None,
        );
    }

    /// [`Dispatcher::keep_stdio_sessions`], each start waiting while `gate` is false
    /// (strict mode across replicas: only the active starts children).
    pub(crate) fn keep_stdio_sessions_while(&self, gate: tokio::sync::watch::Receiver<bool>) {
        keeper::start(
            &self.supervisor,
            &self.gate.channels,
            &self.gate.fence,
            self.gate.rules,
            Some(gate),
        );
    }

    /// The poll loop: `control`'s [`Poller`], built with this dispatcher, feeding it
    /// until `stop` is cancelled or the fence latches. Each run starts the poller afresh
    /// (quick polls until one succeeds, no backoff): a replica runs it once per term as
    /// the active.
    pub(crate) async fn poll_loop(self: Arc<Self>, stop: CancellationToken) -> TaskEnd {
        let latched = self.gate.fence.latched_token();
        self.poller.fresh().run(&self, &stop, &latched).await;
        TaskEnd::Finished
    }

    fn spawn_command(self: &Arc<Self>, command: Result<Command, InvalidCommand>, received_at: Instant) {
        let command_type = command_type(&command);
        observe_aside(&self.books, Aside::Received(command_type));
        let span = trace::command_span(&command, command_type, self.gate.rules.strict);
        let malformed = |source| observe_aside(&self.books, Aside::TraceContextInvalid(source));
        if let Some(parent) = command.as_ref().ok().and_then(|c| trace::caller_context(c, malformed)) {
            crate::telemetry::continue_trace(&span, &parent);
        }
        // Until the command's task starts on it (closed in `command::run`).
        let queue = tracing::debug_span!(parent: &span, "tunnelgate.queue");
        // Routed now, and its place in the admission line taken now, in receipt order.
        let command = command.map(|c| self.gate.receive(c, received_at));
        let this = self.clone();
        self.supervisor.spawn(
            TaskKind::Command,
            async move {
                let _done = FinishGuard(&this.books);
                match command {
                    Ok(received) => command::run(&this, received, queue).await,
                    Err(invalid) => {
                        drop(queue);
                        this.responder.invalid(invalid).await
                    }
                }
                TaskEnd::Finished
            }
            .instrument(span),
        );
    }
}

/// The `command_type` a command is counted and traced under.
fn command_type(command: &Result<Command, InvalidCommand>) -> CommandType {
    match command {
        Ok(c) => match &c.kind {
            CommandKind::JsonRpc(_) => CommandType::JsonRpc,
            CommandKind::SessionTermination => CommandType::SessionTermination,
            CommandKind::OAuthDiscovery => CommandType::OauthDiscovery,
            CommandKind::Unknown(_) => CommandType::Unknown,
        },
        Err(_) => CommandType::Unknown,
    }
}

impl PollSink for Arc<Dispatcher> {
    fn free_slots(&self) -> usize {
        self.books.free_slots()
    }

    async fn room(&self) {
        self.books.room().await
    }

    fn polled(&self, polled: Polled) {
        self.books.poll_succeeded();
        for command in polled.commands {
            self.spawn_command(command, polled.received_at);
        }
    }

    fn poll_failed(&self, error: &PollError) {
        self.books.poll_failed(error.kind());
    }

    /// The admission gate of a shared intent store (strict mode on etcd): the same
    /// question every intent record asks first.
    fn may_poll(&self) -> bool {
        self.gate.write_ahead.as_ref().is_none_or(|w| w.store.may_admit())
    }
}

/// Marks a command finished however its task ends (including a panic), and wakes the
/// poller when the prefetch queue has room again.
struct FinishGuard<'a>(&'a Books);

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        observe_aside(self.0, Aside::Finished);
    }
}
