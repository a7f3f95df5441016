//! A strict start that finds a persisted latch: it never polls and never touches an MCP
//! server. With `strict.latched_start = "exit"` the run ends at once with the latch; with
//! `"hold"` it serves only the ops listener, in the fatal state, until stopped.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::build::Parts;
use super::{GatewayError, RunOutcome, StatusHandle};
use crate::config::Config;
use crate::strict::{latch_file, CommandRef, Fatal, FatalCategory, FileIntents, Unsettled};
use crate::telemetry::LogRing;

/// Honours a persisted latch. Returns the run's cause (`latched_previously`) and the
/// persisted cause's own category, when readable; `None` when there is no latch.
pub(super) fn previous_latch(config: &Config) -> Option<(Fatal, Option<FatalCategory>)> {
    let path = &config.strict.latch_file;
    let (command, cause, latched_at) = match latch_file::read(path) {
        Ok(None) => return None,
        Ok(Some(previous)) => {
            crate::stderr::line(format_args!("refusing to start: {}", previous.one_line()));
            let cause = previous.category;
            let latched_at = own_time(&previous.latched_at);
            (
                CommandRef {
                    request_id: previous.request_id,
                    channel: previous.channel,
                    method: previous.method,
                },
                Some(cause),
                latched_at,
            )
        }
        Err(e) => {
            crate::stderr::line(format_args!("refusing to start: {e}"));
            (CommandRef::default(), None, None)
        }
    };
    crate::stderr::line(format_args!(
        "inspect with `tunnelgate latch show`, clear with `tunnelgate latch clear` once the cause is understood"
    ));
    let mut fatal = Fatal::new(FatalCategory::LatchedPreviously, &command);
    fatal.persisted = true;
    // The runbook reconciles from the latch's own time, not from this restart's.
    if let Some(at) = latched_at {
        fatal.latched_at = at;
    }
    Some((fatal, cause))
}

/// A write-ahead intent an earlier run left unsettled: that run ended (however it died)
/// after this command may have reached an MCP server and before its acknowledgement. The
/// start latches `interrupted_before_ack` before anything else, persists that cause in the
/// latch file, and only then removes the intent (so a crash in between latches again on
/// the next start). Returns the cause, or `None` when nothing is outstanding.
pub(super) fn interrupted(config: &Config) -> Option<Fatal> {
    let intents = FileIntents::beside(&config.strict.latch_file);
    let command = match intents.read() {
        Unsettled::None => return None,
        Unsettled::Intent(intent) => CommandRef {
            request_id: Some(intent.request_id),
            channel: Some(intent.channel),
            method: intent.method,
        },
        Unsettled::Unreadable(e) => {
            crate::stderr::line(format_args!("{e}"));
            CommandRef::default()
        }
    };
    let mut fatal = Fatal::new(FatalCategory::InterruptedBeforeAck, &command);
    match latch_file::write(&config.strict.latch_file, &fatal) {
        Ok(()) => {
            fatal.persisted = true;
            if let Err(e) = intents.clear() {
                crate::stderr::line(format_args!("the latch is persisted, but {e}"));
            }
        }
        Err(e) => crate::stderr::line(format_args!(
            "{e}; the intent record is kept, so the next start latches again"
        )),
    }
    crate::stderr::line(format_args!("refusing to start: {}", fatal.one_line()));
    crate::stderr::line(format_args!(
        "inspect with `tunnelgate latch show`, clear with `tunnelgate latch clear` once the command is reconciled"
    ));
    Some(fatal)
}

/// The persisted `latched_at` when it is an RFC 3339 time (the file is read back, so it is
/// checked before it reaches a log line or `/status`); `None` keeps the time of this start.
fn own_time(latched_at: &str) -> Option<String> {
    humantime::parse_rfc3339(latched_at).ok()?;
    Some(latched_at.to_owned())
}

/// `strict.latched_start = "hold"`: serves only the ops listener, in the fatal state with
/// the persisted cause (`/readyz` 503, `/status` `state = "fatal"` and category
/// `latched_previously`, `tunnelgate_fatal_info{category=<the persisted cause's
/// category>}` so an alert names what fired), never polls and never touches an MCP
/// server, until stopped; then the run ends with the latch (exit 89).
pub(super) async fn hold(
    config: &Config,
    (previous, cause): (Fatal, Option<FatalCategory>),
    mut stop_rx: mpsc::UnboundedReceiver<()>,
    ops_addr_tx: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
    status: &StatusHandle,
    log_ring: &Arc<LogRing>,
) -> Result<RunOutcome, GatewayError> {
    // No channel is built: nothing may touch an MCP server.
    let parts = Parts::observed(config);
    let command = CommandRef {
        request_id: previous.request_id.clone(),
        channel: previous.channel.clone(),
        method: previous.method.clone(),
    };
    parts.fence.latch(FatalCategory::LatchedPreviously, &command);
    parts.fence.mark_restored(&previous.latched_at);
    if let Some(cause) = cause {
        parts.metrics.fatal_info(cause);
    }
    let ops = parts.bind_ops(config).await?;
    let url_file = ops.url_file(config)?;
    ops.report(ops_addr_tx);
    tracing::warn!(addr = %ops.addr, "holding in the fatal state (strict.latched_start = \"hold\"): serving the ops listener only until stopped");
    status.publish(parts.serve_ops(config, ops, log_ring));
    let _ = stop_rx.recv().await;
    let fatal = parts.fence.fatal().unwrap_or(previous);
    parts.finish().await;
    drop(url_file);
    Ok(RunOutcome::Fatal(fatal))
}
