//! The admission line: commands reach the fence strictly in receipt order, whatever the
//! task scheduling. The poller takes each command's place synchronously as the poll's
//! commands are handed on; one admitter task grants the places one after another.

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::protocol::Command;
use crate::strict::{Admission, CommandRef, Fence, Refusal};
use crate::supervisor::{Supervisor, TaskEnd, TaskKind};

/// A command waiting for its turn at the fence.
pub(crate) struct AdmitRequest {
    pub(super) command: CommandRef,
    pub(super) deadline: Option<Instant>,
    pub(super) reply: oneshot::Sender<Admitted>,
}

/// What the admitter decided for one command.
pub(crate) enum Admitted {
    Yes(Admission),
    Expired,
    Refused(Refusal),
}

/// A command's place in the line: resolves to the admitter's decision.
pub(crate) type Place = oneshot::Receiver<Admitted>;

/// The sending side of the line.
pub(crate) struct AdmissionLine {
    tx: mpsc::UnboundedSender<AdmitRequest>,
}

impl AdmissionLine {
    /// Starts the admitter, which runs until `stop`.
    pub(crate) fn start(supervisor: &Supervisor, fence: Fence, stop: CancellationToken) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        // Not on the tracker: it idles until stop and must not hold up a drain.
        supervisor.spawn_untracked(TaskKind::Admitter, admit_loop(fence, rx, stop));
        Self { tx }
    }

    /// Takes `cmd`'s place at the end of the line.
    pub(crate) fn join(&self, cmd: &Command, method: Option<&str>, deadline: Option<Instant>) -> Place {
        let (reply, place) = oneshot::channel();
        let command = CommandRef::new(cmd.request_id.as_str(), cmd.channel.as_str(), method);
        // A closed line (the gateway is stopping) drops the request: the place then
        // reads as closed, which the command answers as "stopping".
        let _ = self.tx.send(AdmitRequest {
            command,
            deadline,
            reply,
        });
        place
    }
}

/// Grants admissions strictly in receipt order: commands returned by one poll reach the
/// fence in the order the control plane sent them, whatever the task scheduling.
/// Runs until `stop` is cancelled; a refused or expired head never blocks the rest. Any
/// other end is unexpected (its supervisor reports it).
pub(crate) async fn admit_loop(
    fence: Fence,
    mut rx: mpsc::UnboundedReceiver<AdmitRequest>,
    stop: CancellationToken,
) -> TaskEnd {
    loop {
        let request = tokio::select! {
            biased;
            // cancel-safe: waiting only.
            _ = stop.cancelled() => return TaskEnd::Finished,
            // cancel-safe: mpsc receive loses nothing.
            r = rx.recv() => match r {
                Some(r) => r,
                None => return TaskEnd::Unexpected("the admission line closed"),
            },
        };
        if request.reply.is_closed() {
            continue;
        }
        let decision = if is_expired(request.deadline) {
            Admitted::Expired
        } else {
            tokio::select! {
                biased;
                // cancel-safe: an admission not yet granted takes no permit.
                _ = stop.cancelled() => Admitted::Refused(Refusal::Stopping),
                // cancel-safe: as above.
                _ = sleep_until_opt(request.deadline) => Admitted::Expired,
                r = fence.admit(request.command) => match r {
                    Ok(a) => Admitted::Yes(a),
                    Err(refusal) => Admitted::Refused(refusal),
                },
            }
        };
        // A task that went away drops the admission here, releasing the permit.
        let _ = request.reply.send(decision);
    }
}

pub(super) fn is_expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod timing_tests;
