//! The steps told where a command's `Observer` cannot be: at receipt, before its task
//! exists; for a command that could not be decoded, which never gets one; and on a
//! command's notifier, a task of its own. Each goes to the books and the log (a posted
//! notification also to the current span, the command's), never to a receipt.

use super::{acked, Books, LOG_ANSWER, LOG_LEG, LOG_TRACE};
use crate::control::{Delivery, DeliveryReport};
use crate::telemetry::{events, CommandType, DeliveryKind, DropReason, TraceContextSource};

/// A step told without a command's observer (see the rule in `observe`).
pub(in crate::dispatch) enum Aside<'a> {
    /// A command was received (of `command_type`, `unknown` when it could not be decoded)
    /// and queued.
    Received(CommandType),
    /// A carrier of the caller's trace context held a malformed value, which is ignored.
    TraceContextInvalid(TraceContextSource),
    /// A command's task ended, however it ended (a panic included).
    Finished,
    /// A command that could not be decoded, for `reason`, is dropped; `answered`: it
    /// carries what a response needs, and is answered with an error.
    Malformed { reason: &'static str, answered: bool },
    /// The error answering a command that could not be decoded was posted.
    MalformedAnswered(&'a DeliveryReport),
    /// A server request seen on a leg could not be registered for its caller's reply.
    QuestionUnregistered,
    /// A notification from the MCP server carries an unpaired surrogate escape, which the
    /// control plane refuses: it is dropped, not posted.
    UnpairedNotification,
    /// A notification (of `method`) was posted, as `report` says.
    NotificationPosted {
        method: Option<String>,
        report: &'a DeliveryReport,
    },
    /// This many notifications were skipped after an earlier one failed.
    NotificationsSkipped(u64),
}

/// Tells the books and the log of `step`: the one place a step without an observer is
/// counted and logged.
pub(in crate::dispatch) fn observe_aside(books: &Books, step: Aside<'_>) {
    match step {
        Aside::Received(command_type) => {
            books.metrics().command_received(command_type);
            books.command_started();
        }
        Aside::TraceContextInvalid(source) => {
            tracing::debug!(target: LOG_TRACE, source = source.as_str(), "malformed trace context ignored");
            books.metrics().trace_context_invalid(source);
        }
        Aside::Finished => books.command_finished(),
        Aside::Malformed { reason, answered } => malformed(books, reason, answered),
        Aside::MalformedAnswered(report) => {
            acked(books, report);
            tracing::info!(target: LOG_ANSWER, delivery = report.delivery.as_str(), "malformed-command response");
        }
        Aside::QuestionUnregistered => tracing::warn!(
            target: LOG_LEG,
            "a server request could not be registered; the caller's reply will not reach it"
        ),
        Aside::UnpairedNotification => {
            books.invalid_json_payload(DeliveryKind::Notify);
            tracing::warn!(target: LOG_LEG, "a notification from the MCP server carries an unpaired surrogate escape, which the control plane refuses: it was dropped");
        }
        Aside::NotificationPosted { method, report } => notification_posted(books, method, report),
        Aside::NotificationsSkipped(skipped) => {
            tracing::warn!(target: LOG_LEG, skipped, "notifications skipped after an earlier one failed")
        }
    }
}

/// A command that could not be decoded: counted as dropped, and logged.
fn malformed(books: &Books, reason: &'static str, answered: bool) {
    books.dropped(DropReason::Invalid);
    if answered {
        tracing::warn!(target: LOG_ANSWER, reason, "malformed command; answered with an error");
    } else {
        tracing::warn!(
            target: LOG_ANSWER,
            reason,
            "malformed command without request id or shard token; skipped"
        );
    }
}

/// A posted notification: in the books when acknowledged, an event on the current span
/// (the command's), and a warning when it failed (the later ones are skipped).
fn notification_posted(books: &Books, method: Option<String>, report: &DeliveryReport) {
    acked(books, report);
    events::notification_forwarded(method, report.delivery.as_str());
    if report.delivery != Delivery::Acked {
        tracing::warn!(
            target: LOG_LEG,
            delivery = report.delivery.as_str(),
            "notification not acknowledged; later notifications of this command are skipped"
        );
    }
}
