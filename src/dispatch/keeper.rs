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

use crate::downstream::{Channels, StdioTransport};
use crate::strict::{CommandRef, Fence};
use crate::supervisor::{Supervisor, TaskEnd, TaskKind};

use super::decide::Rules;

/// Starts one keeper per stdio channel; each ends when its transport stops, the fence
/// stops admitting, or it latched.
pub(crate) fn start(supervisor: &Supervisor, channels: &Channels, fence: &Fence, rules: Rules) {
    for (name, _) in channels.stdio() {
        let (channels, fence, name) = (channels.clone(), fence.clone(), name.to_owned());
        // Not on the tracker: it idles between deaths and must not hold up a drain.
        supervisor.spawn_untracked(TaskKind::Warmup, async move {
            if let Some(transport) = channels.stdio().find(|(n, _)| *n == name).map(|(_, t)| t) {
                keep(&name, transport, &fence, rules).await;
            }
            TaskEnd::Finished
        });
    }
}

/// Keeps one channel's session open until the transport stops or the fence refuses.
async fn keep(name: &str, transport: &StdioTransport, fence: &Fence, rules: Rules) {
    while transport.start_due().await {
        // Not a command: no request id; the channel and the method name the step.
        let command = CommandRef {
            request_id: None,
            channel: Some(name.to_owned()),
            method: Some("initialize".to_owned()),
        };
        let Ok(admission) = fence.admit(command).await else {
            return;
        };
        let Err(failure) = transport.open(&admission).await else {
            continue;
        };
        if failure.gateway_step_abandoned() {
            if let Some(category) = rules.own_step_abandoned() {
                admission.latch(category);
                return;
            }
        }
        tracing::warn!(channel = name, reason = failure.kind(), "the stdio child did not start with an open session; retrying after the restart backoff");
    }
}
