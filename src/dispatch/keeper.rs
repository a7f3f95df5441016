//! The stdio keeper: each stdio channel's child is started, and its MCP session opened,
//! at startup and again after every death (once the restart backoff is over), without
//! waiting for a command. So `/readyz` and `/status` tell the truth, and a command finds
//! an initialized child.
//!
//! Each start takes the fence like a command ([`Fence::admit`]: in strict mode it waits
//! until the fence is free, and a command that arrives meanwhile waits behind it), and
//! the gateway's `initialize` is a downstream interaction under that admission: one
//! written and never answered latches `downstream_ambiguous` in strict mode (with
//! `strict.on_downstream_ambiguity = "fatal"`), as any abandoned leg does. A command that
//! finds the child down starts it itself, under its own admission; the keeper then finds
//! it up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use crate::downstream::{Channels, StdioTransport};
use crate::strict::{CommandRef, Fence};
use crate::supervisor::{Supervisor, TaskEnd, TaskKind};

use super::decide::Rules;

/// Starts one keeper per stdio channel; each ends when its transport stops, the fence
/// stops admitting, or it latched. With a `gate` (strict mode across replicas: whether
/// this replica is the active), a start waits until the gate is open: a standby starts
/// no child.
pub(crate) fn start(
    supervisor: &Supervisor,
    channels: &Channels,
    fence: &Fence,
    rules: Rules,
    gate: Option<watch::Receiver<bool>>,
) {
    for (name, _) in channels.stdio() {
        let keeper = Keeper {
            name: name.into(),
            channels: channels.clone(),
            fence: fence.clone(),
            rules,
            supervisor: supervisor.clone(),
            ended: Arc::new(AtomicBool::new(false)),
            gate: gate.clone(),
        };
        // Not on the tracker: it idles between deaths and must not hold up a drain.
        supervisor.spawn_untracked(TaskKind::Warmup, keeper.run());
    }
}

/// One channel's keeper.
#[derive(Clone)]
struct Keeper {
    name: Arc<str>,
    channels: Channels,
    fence: Fence,
    rules: Rules,
    supervisor: Supervisor,
    /// The fence refused a start, or a start latched: nothing more is started.
    ended: Arc<AtomicBool>,
    /// Starts wait while it is closed (`None`: always open).
    gate: Option<watch::Receiver<bool>>,
}

impl Keeper {
    fn transport(&self) -> Option<&StdioTransport> {
        self.channels.stdio().find(|(n, _)| *n == &*self.name).map(|(_, t)| t)
    }

    /// Starts the child whenever a start is due, until the transport or the fence says no.
    async fn run(self) -> TaskEnd {
        while !self.ended.load(Ordering::Relaxed) {
            match self.transport() {
                Some(t) if t.start_due().await => {}
                _ => break,
            }
            if let Some(gate) = &self.gate {
                // The gate's owner gone means the run is ending.
                if gate.clone().wait_for(|open| *open).await.is_err() {
                    break;
                }
            }
            // Each start runs among the drained tasks, so that a stop's grace waits for a
            // handshake in flight (and one still in flight when the grace is over counts
            // as sent, like a command's request).
            let start = self.supervisor.spawn(TaskKind::Warmup, self.clone().start_once());
            if start.await.is_err() {
                break;
            }
        }
        TaskEnd::Finished
    }

    /// One start under its own admission; latches on an abandoned handshake in strict mode.
    async fn start_once(self) -> TaskEnd {
        // Not a command: no request id; the channel and the method name the step.
        let command = CommandRef {
            request_id: None,
            channel: Some(self.name.to_string()),
            method: Some("initialize".to_owned()),
        };
        let Ok(admission) = self.fence.admit(command).await else {
            self.ended.store(true, Ordering::Relaxed);
            return TaskEnd::Finished;
        };
        let Some(transport) = self.transport() else {
            return TaskEnd::Finished;
        };
        let Err(failure) = transport.open(&admission).await else {
            return TaskEnd::Finished;
        };
        if failure.gateway_step_abandoned() {
            if let Some(category) = self.rules.own_step_abandoned() {
                admission.latch(category);
                self.ended.store(true, Ordering::Relaxed);
                return TaskEnd::Finished;
            }
        }
        tracing::warn!(channel = %self.name, reason = failure.kind(), "the stdio child did not start with an open session; it is started again after the restart backoff");
        TaskEnd::Finished
    }
}
