//! One observation per step of a command's lifecycle: a [`Step`] says what happened,
//! with its typed facts, and [`Observer::observe`] hands it to every sink that keeps it:
//! the books (metrics and the health `/status` shows), the command's span, its delivery
//! receipt and the log. The lifecycle's drivers (`command`, `discover`, `leg`) and the
//! responder that posts its answers (`answer`) call `observe` once per step and touch
//! none of those sinks themselves.
//!
//! What holds, exactly, in the dispatcher: every update of the books, of a command's
//! receipt and of its `tunnelgate.command` span, and every log line the dispatcher writes
//! about a command, is made in this module, from a typed step. A command's steps are
//! [`Step`]s, told by its [`Observer`] in its task. Where that observer cannot be, the
//! step is an [`Aside`], told by [`observe_aside`] to the books and the log (and, for a
//! posted notification, to the current span, the command's), never to a receipt: at
//! receipt, before the command's task (and its receipt) exists; for a command that could
//! not be decoded, which never gets either; and on a command's notifier, a task of its
//! own that cannot borrow the observer. Outside the rule, by design: the command span is
//! made, and its parent set, where the task is spawned (`trace`); the spans of the steps'
//! own I/O (`tunnelgate.queue`, `tunnelgate.fence_wait`, the downstream span,
//! `tunnelgate.reply`, `tunnelgate.deliver`) are made and filled in where that I/O runs;
//! the polls' counts and the room in the queue are the poller's, told through the
//! `PollSink`; the stdio keepers (`keeper`) log their own steps, which are no command's;
//! the transports and the control client log their own I/O.
//!
//! Observes only: nothing here decides, waits or talks to a peer. The latch is taken by
//! the driver, while the permit is held; its step is told here afterwards. Each log line
//! keeps the target of the module whose step it tells ([`LOG_COMMAND`], [`LOG_LEG`],
//! [`LOG_DISCOVER`], [`LOG_ANSWER`], [`LOG_TRACE`]), which operators' log filters name.

mod aside;

use std::time::Duration;

use tokio::time::Instant;

use super::books::Books;
use crate::control::{Delivery, DeliveryReport, Refused};
use crate::downstream::{LegFailure, LegOutcome, LegResult, TransportKind};
use crate::protocol::{Command, DiscoveryFailure};
use crate::receipts::Pending;
use crate::strict::{IntentError, Latched, Refusal};
use crate::telemetry::{attrs, events, safe_method, safe_token, DeliveryKind, DropReason, DurationLeg};

pub(super) use aside::{observe_aside, Aside};

/// The log target of a command's own steps (its route, fence, delivery and latch).
pub(super) const LOG_COMMAND: &str = "tunnelgate::dispatch::command";
/// The log target of a downstream leg's end.
pub(super) const LOG_LEG: &str = "tunnelgate::dispatch::leg";
/// The log target of an admitted discovery's steps.
pub(super) const LOG_DISCOVER: &str = "tunnelgate::dispatch::discover";
/// The log target of the responder's steps (its answers, and malformed commands).
pub(super) const LOG_ANSWER: &str = "tunnelgate::dispatch::answer";
/// The log target of the caller's trace context, read at receipt.
pub(super) const LOG_TRACE: &str = "tunnelgate::dispatch::trace";

/// Said (in the log and by the status) when a reply matches no waiting server request.
pub(super) const UNMATCHED_REPLY_MESSAGE: &str =
    "this reply matches no request the MCP server is waiting for; it was not delivered";

/// A step of one command's lifecycle, as its driver saw it.
pub(super) enum Step<'a> {
    /// Its task took the command from the queue; it was received at `received_at`.
    Dequeued { received_at: Instant },
    /// The wait at the fence, begun at `since`, ended (admitted or not).
    FenceWaited { since: Instant },
    /// The write-ahead intent, begun at `since`, is durable (strict mode).
    IntentRecorded { since: Instant },
    /// The command passed the fence; `fence_held`: that holds the fence (strict mode).
    Admitted { fence_held: bool },
    /// The admission was let go; `fence_held` is the fence's state now.
    Released { fence_held: bool, received_at: Instant },
    /// A downstream leg ended; `since` is when it began, if it ran at all.
    LegEnded {
        leg: &'a LegResult,
        transport: TransportKind,
        since: Option<Instant>,
        of: LegOf,
    },
    /// An admitted discovery, begun at `since`, ended: the `resp_code` of the document's
    /// answer, or why it found no metadata.
    Discovered {
        result: Result<u16, DiscoveryFailure>,
        since: Instant,
    },
    /// A terminal response the lifecycle chose was posted, as `answer` says: its time,
    /// the span's delivery outcome, the channel's success (the responder told the post
    /// itself: [`Step::Posted`], [`Step::Answered`]).
    Delivered {
        report: &'a DeliveryReport,
        answer: Answer<'a>,
    },
    /// One of the command's posts (its terminal response, or the small error replacing
    /// one too large) ended as `report` says: an acknowledged one is in the books.
    Posted(&'a DeliveryReport),
    /// The delivery of the command's terminal response ended as `report` says: its
    /// outcome is the receipt's, and a refusal as too large is counted.
    Answered(&'a DeliveryReport),
    /// The caller is told these words in the gateway's own error; the receipt keeps them.
    Told(&'static str),
    /// The MCP server's answer carries an unpaired surrogate escape, which the control
    /// plane refuses: an error saying so is posted instead.
    UnpairedAnswer,
    /// A command that never reaches an MCP server was answered "not executed".
    NotExecutedAnswered {
        reason: NotExecuted,
        report: &'a DeliveryReport,
    },
    /// A server request of `method` on the command's leg has waited `waited` for the
    /// caller's reply (told once per request).
    ServerRequestWaiting { method: &'a str, waited: Duration },
    /// `decide` says the terminal response was not acknowledged, and is only reported.
    NotAcknowledged { report: &'a DeliveryReport, stage: Stage },
    /// The control plane refused an answer of `bytes` as too large; the small error
    /// replacing it was posted (`report`), or there was no JSON-RPC caller to tell.
    ToldTooLarge {
        bytes: usize,
        report: Option<&'a DeliveryReport>,
    },
    /// The deadline passed during the downstream step: nothing is posted.
    Silent(Stage),
    /// The driver latched the fence for this command's admission.
    Latched(&'a Latched),
    /// The command is dropped: it never reaches an MCP server.
    Dropped(Dropped<'a>),
    /// The write-ahead intent could not be written: the command is not dispatched.
    IntentNotWritten(&'a IntentError),
    /// The write-ahead intent could not be settled; `then` says what follows from it.
    IntentNotSettled { error: &'a IntentError, then: &'a str },
}

/// Why a command is answered "not executed": it never reached an MCP server, and never
/// will. Counted as the drop of [`NotExecuted::dropped`]; logged as [`NotExecuted::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotExecuted {
    /// No channel of that name is configured.
    Unroutable,
    /// The fence refused the admission, or the admitter is gone (the gateway is
    /// stopping: [`Refusal::Stopping`]).
    Refused(Refusal),
}

impl NotExecuted {
    /// The `reason` of the not-executed log line: a refusal's own word.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Unroutable => "unroutable",
            Self::Refused(refusal) => refusal.kind(),
        }
    }

    /// The `commands_dropped_total{reason}` it counts.
    pub(crate) fn dropped(self) -> DropReason {
        match self {
            Self::Unroutable => DropReason::Unroutable,
            Self::Refused(Refusal::Latched) => DropReason::Fatal,
            Self::Refused(Refusal::Stopping) => DropReason::Shutdown,
        }
    }
}

/// Whose leg ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LegOf {
    /// The command's own: the channel's `last_command_at` moves.
    Command,
    /// A caller's reply, carried on the leg that asked (which moves the channel's time).
    Reply,
}

/// What a terminal response answered.
#[derive(Clone, Copy)]
pub(super) enum Answer<'a> {
    /// The leg's reply (or the gateway's error for it), posted from `since`.
    Leg { leg: &'a LegResult, since: Instant },
    /// A discovery's document or error, posted from `since`.
    Discovery { since: Instant },
    /// The "effect unknown" answer posted after the latch.
    AfterLatch,
    /// The answer to a caller's reply, from the leg that asked.
    Reply,
}

/// The downstream step a report is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// The command's leg; `dispatched`: it did not end `not_sent`.
    Leg { dispatched: bool },
    /// An admitted `oauth_discovery`.
    Discovery,
}

/// Why a command is dropped (counted once, by [`Dropped::reason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dropped<'a> {
    /// A command of an unknown type carrying no JSON-RPC request (`command_type`).
    UnknownType(&'a str),
    /// A command of an unknown type carrying a JSON-RPC request, answered with an error.
    UnknownRequest(&'a str),
    /// An `oauth_discovery` for a channel that is not HTTP.
    DiscoveryUnsupported,
    /// An `oauth_discovery` for a channel that is not configured.
    DiscoveryUnroutable,
    /// A command for a channel that is not configured.
    Unroutable,
    /// A command for a channel that serves nothing now (`harpoon` without a target).
    ChannelUnsupported,
    /// Its `response_timeout` had passed at receipt.
    ExpiredAtReceipt,
    /// Its `response_timeout` passed while it waited for the fence.
    ExpiredAtFence,
    /// Its `response_timeout` passed after admission, before its dispatch.
    ExpiredBeforeDispatch,
    /// Its `response_timeout` passed after admission, before its discovery.
    ExpiredBeforeDiscovery,
    /// The fence refused it.
    Refused(Refusal),
    /// The admitter is gone: the gateway is stopping.
    AdmitterGone,
    /// A long-lived subscription stream, refused in strict mode.
    LongLivedRefused,
    /// A caller's reply that matches no waiting server request.
    UnmatchedReply,
}

/// Tells the sinks of one command's steps.
pub(super) struct Observer<'a> {
    books: &'a Books,
    /// The command's own span (`tunnelgate.command`).
    span: tracing::Span,
    receipt: &'a Pending<'a>,
    cmd: &'a Command,
}

impl Dropped<'_> {
    /// The `commands_dropped_total{reason}` it counts.
    fn reason(self) -> DropReason {
        match self {
            Self::UnknownType(_) | Self::UnknownRequest(_) => DropReason::UnknownType,
            Self::DiscoveryUnsupported | Self::LongLivedRefused => DropReason::Unsupported,
            Self::DiscoveryUnroutable | Self::ChannelUnsupported => DropReason::Unroutable,
            Self::Unroutable => NotExecuted::Unroutable.dropped(),
            Self::ExpiredAtReceipt
            | Self::ExpiredAtFence
            | Self::ExpiredBeforeDispatch
            | Self::ExpiredBeforeDiscovery => DropReason::Expired,
            Self::Refused(refusal) => NotExecuted::Refused(refusal).dropped(),
            Self::AdmitterGone => NotExecuted::Refused(Refusal::Stopping).dropped(),
            Self::UnmatchedReply => DropReason::UnmatchedReply,
        }
    }

    /// Its one log line (none when the gateway is stopping).
    fn log(self) {
        match self {
            Self::UnknownType(t) => {
                tracing::warn!(target: LOG_COMMAND, command_type = %safe_method(t), "unknown command type; skipped")
            }
            Self::UnknownRequest(t) => tracing::warn!(
                target: LOG_COMMAND,
                command_type = %safe_method(t),
                "unknown command type carrying a JSON-RPC request; answered with an error"
            ),
            Self::DiscoveryUnsupported => tracing::warn!(
                target: LOG_COMMAND,
                "oauth_discovery on a channel that is not HTTP; answered unsupported_channel"
            ),
            Self::DiscoveryUnroutable => tracing::warn!(
                target: LOG_COMMAND,
                "no channel of that name is configured; oauth_discovery answered unsupported_channel"
            ),
            Self::Unroutable => tracing::warn!(
                target: LOG_COMMAND,
                "no channel of that name is configured; answered with an error, never routed elsewhere"
            ),
            Self::ChannelUnsupported => tracing::warn!(
                target: LOG_COMMAND,
                "the channel serves nothing now (harpoon has no target); answered unsupported channel"
            ),
            Self::ExpiredAtReceipt => {
                tracing::info!(target: LOG_COMMAND, "response_timeout already passed at receipt; dropped without contacting the MCP server")
            }
            Self::ExpiredAtFence => tracing::info!(
                target: LOG_COMMAND,
                "response_timeout passed while waiting for the fence; dropped without contacting the MCP server"
            ),
            Self::ExpiredBeforeDispatch => {
                tracing::info!(target: LOG_COMMAND, "response_timeout passed before dispatch; dropped without contacting the MCP server")
            }
            Self::ExpiredBeforeDiscovery => {
                tracing::info!(target: LOG_COMMAND, "response_timeout passed before discovery; dropped without contacting the MCP server")
            }
            Self::Refused(refusal) => tracing::info!(
                target: LOG_COMMAND,
                reason = refusal.kind(),
                "not executed; answered with a retry-safe error"
            ),
            Self::AdmitterGone => {}
            Self::LongLivedRefused => tracing::warn!(
                target: LOG_COMMAND,
                "strict mode carries no long-lived subscription stream (subscriptions/listen); refused, not delivered"
            ),
            Self::UnmatchedReply => {
                tracing::warn!(target: LOG_COMMAND, reason = "unmatched_reply", "{UNMATCHED_REPLY_MESSAGE}")
            }
        }
    }
}

impl<'a> Observer<'a> {
    /// The observer of `cmd`'s steps, told on `span` and in `receipt`.
    pub(super) fn new(books: &'a Books, span: tracing::Span, receipt: &'a Pending<'a>, cmd: &'a Command) -> Self {
        Self {
            books,
            span,
            receipt,
            cmd,
        }
    }

    /// Tells every sink of `step`: the one place a command's lifecycle is counted,
    /// traced, receipted and logged.
    pub(super) fn observe(&self, step: Step<'_>) {
        let books = self.books;
        match step {
            Step::Dequeued { received_at } => books.leg_took(DurationLeg::Queue, received_at),
            Step::FenceWaited { since } => books.leg_took(DurationLeg::FenceWait, since),
            Step::IntentRecorded { since } => books.leg_took(DurationLeg::Intent, since),
            Step::Admitted { fence_held } => books.admitted(fence_held),
            Step::Released {
                fence_held,
                received_at,
            } => {
                books.released(fence_held);
                books.leg_took(DurationLeg::Total, received_at);
            }
            Step::LegEnded {
                leg,
                transport,
                since,
                of,
            } => self.leg_ended(leg, transport, since, of),
            Step::Discovered { result, since } => self.discovered(result, since),
            Step::Delivered { report, answer } => self.delivered(report, answer),
            Step::Posted(report) => acked(books, report),
            Step::Answered(report) => self.answered(report),
            Step::Told(words) => self.receipt.told(words),
            Step::UnpairedAnswer => unpaired_answer(books),
            Step::NotExecutedAnswered { reason, report } => not_executed_answered(reason, report),
            Step::ServerRequestWaiting { method, waited } => server_request_waiting(method, waited),
            Step::NotAcknowledged { report, stage } => not_acknowledged(report, stage),
            Step::ToldTooLarge { bytes, report } => told_too_large(bytes, report),
            Step::Silent(stage) => silent(stage),
            Step::Latched(latched) => self.latched(latched),
            Step::Dropped(dropped) => {
                dropped.log();
                books.dropped(dropped.reason());
            }
            Step::IntentNotWritten(e) => tracing::error!(
                target: LOG_COMMAND,
                error = %e,
                kind = e.kind(),
                "the write-ahead intent could not be written; the command is not dispatched"
            ),
            Step::IntentNotSettled { error, then } => tracing::error!(
                target: LOG_COMMAND,
                error = %error,
                kind = error.kind(),
                "the write-ahead intent could not be settled; {}",
                then
            ),
        }
    }

    /// The leg's time and outcome in the books, on the span and in the receipt.
    fn leg_ended(&self, leg: &LegResult, transport: TransportKind, since: Option<Instant>, of: LegOf) {
        let books = self.books;
        if let Some(since) = since {
            books.leg_took(DurationLeg::Downstream, since);
        }
        books.metrics().downstream_finished(transport, leg.outcome);
        if of == LegOf::Command {
            books.leg_ended(self.cmd.channel.as_str());
        }
        record_leg(&self.span, leg);
        self.receipt.leg_ended(leg.outcome, told(leg));
        if of == LegOf::Reply {
            tracing::info!(
                target: LOG_COMMAND,
                outcome = leg.outcome.as_str(),
                "reply delivered on the leg that asked"
            );
        }
    }

    /// A discovery's time, and what it found (or why not) on the span, in the receipt and
    /// in the log.
    fn discovered(&self, result: Result<u16, DiscoveryFailure>, since: Instant) {
        self.books.leg_took(DurationLeg::Downstream, since);
        match result {
            Ok(resp_code) => tracing::info!(
                target: LOG_DISCOVER,
                result = "found",
                resp_code,
                "oauth discovery finished"
            ),
            Err(failure) => {
                self.span.record(attrs::ERROR_TYPE, failure.code());
                self.receipt.told(failure.message());
                tracing::info!(
                    target: LOG_DISCOVER,
                    result = failure.code(),
                    "oauth discovery found no metadata; answered with an error"
                );
            }
        }
    }

    /// A terminal delivery: timed, on the span, and a leg answered and acknowledged is
    /// the channel's success.
    fn delivered(&self, report: &DeliveryReport, answer: Answer<'_>) {
        let acked = report.delivery == Delivery::Acked;
        let since = match answer {
            Answer::Leg { since, .. } | Answer::Discovery { since } => since,
            Answer::AfterLatch => {
                tracing::info!(
                    target: LOG_COMMAND,
                    delivery = report.delivery.as_str(),
                    "effect-unknown response after the latch"
                );
                return;
            }
            Answer::Reply => {
                self.span.record(attrs::DELIVERY_OUTCOME, report.delivery.as_str());
                return;
            }
        };
        self.books.leg_took(DurationLeg::Deliver, since);
        self.span.record(attrs::DELIVERY_OUTCOME, report.delivery.as_str());
        if !acked {
            self.span.record(attrs::OTEL_STATUS_CODE, "ERROR");
        }
        let Answer::Leg { leg, .. } = answer else { return };
        if leg.outcome == LegOutcome::Answered && acked {
            self.books.succeeded(self.cmd.channel.as_str());
        }
        if !acked && leg.failure.is_none() {
            self.span.record(attrs::ERROR_TYPE, report.last_attempt.as_str());
        }
    }

    /// The terminal response's delivery in the receipt, and a refusal as too large counted.
    fn answered(&self, report: &DeliveryReport) {
        self.receipt.delivered(report);
        if report.refused == Some(Refused::TooLarge) {
            self.books.response_too_large();
        }
    }

    /// The latch on the command's span, and in its receipt when the latch's cause is this
    /// command.
    fn latched(&self, latched: &Latched) {
        events::fatal_latched(latched.fatal.category.as_str(), latched.fatal.exit_code);
        let ours = latched.first || latched.fatal.request_id == Some(safe_token(self.cmd.request_id.as_str()));
        if ours {
            self.receipt.latched(latched.fatal.category);
        }
    }
}

/// The MCP server's answer, refused for an unpaired surrogate escape, counted and logged.
fn unpaired_answer(books: &Books) {
    books.invalid_json_payload(DeliveryKind::Terminal);
    tracing::warn!(target: LOG_ANSWER, "the MCP server's answer carries an unpaired surrogate escape, which the control plane refuses: the caller is told in words instead");
}

/// The "not executed" answer, as it went.
fn not_executed_answered(reason: NotExecuted, report: &DeliveryReport) {
    tracing::info!(
        target: LOG_ANSWER,
        reason = reason.as_str(),
        delivery = report.delivery.as_str(),
        "not-executed response"
    );
}

/// A server request still waiting for the caller's reply.
fn server_request_waiting(method: &str, waited: Duration) {
    tracing::warn!(
        target: LOG_LEG,
        method = %safe_method(method),
        waited_s = waited.as_secs(),
        "the MCP server is waiting for the caller's reply to its request; the call cannot finish until the caller answers"
    );
}

/// An acknowledged post is in the books (`last_acked_at`).
fn acked(books: &Books, report: &DeliveryReport) {
    if report.delivery == Delivery::Acked {
        books.delivery_acked();
    }
}

/// The words of the gateway's own error in `leg`'s reply, when it synthesized one.
fn told(leg: &LegResult) -> Option<&'static str> {
    leg.failure
        .as_ref()
        .filter(|_| leg.reply.resp_json.is_some())
        .map(LegFailure::caller_message)
}

/// The leg's outcome on the command span, and one log line for a failed leg.
fn record_leg(span: &tracing::Span, leg: &LegResult) {
    span.record(attrs::LEG_OUTCOME, leg.outcome.as_str());
    let Some(f) = &leg.failure else { return };
    if *f != LegFailure::SubscriptionEnded {
        span.record(attrs::ERROR_TYPE, f.kind());
        span.record(attrs::OTEL_STATUS_CODE, "ERROR");
    }
    let reason = f.kind();
    match leg.outcome {
        LegOutcome::NotSent => tracing::warn!(
            target: LOG_LEG,
            outcome = "not_sent",
            reason,
            "downstream leg failed before sending; safe to retry"
        ),
        LegOutcome::Abandoned => tracing::warn!(
            target: LOG_LEG,
            outcome = "abandoned",
            reason,
            "downstream leg abandoned: effect unknown"
        ),
        LegOutcome::Answered if *f == LegFailure::SubscriptionEnded => tracing::info!(
            target: LOG_LEG,
            outcome = "answered",
            reason,
            "subscription stream ended (by the server, a cancel or its bound): a normal end"
        ),
        LegOutcome::Answered => tracing::info!(
            target: LOG_LEG,
            outcome = "answered",
            reason,
            "the MCP server refused the request"
        ),
    }
}

/// A terminal response `decide` only reports: not acknowledged.
fn not_acknowledged(report: &DeliveryReport, stage: Stage) {
    match stage {
        Stage::Leg { dispatched } => tracing::warn!(
            target: LOG_COMMAND,
            delivery = report.delivery.as_str(),
            attempt_result = report.last_attempt.as_str(),
            attempts = report.attempts,
            dispatched,
            "terminal response not acknowledged; the caller may not have its result"
        ),
        Stage::Discovery => tracing::warn!(
            target: LOG_DISCOVER,
            delivery = report.delivery.as_str(),
            attempt_result = report.last_attempt.as_str(),
            "oauth_discovery_response not acknowledged; the caller may not have its answer"
        ),
    }
}

/// The small error replacing an answer too large, as it went (never followed by another:
/// the refusal is not retried in any form).
fn told_too_large(bytes: usize, report: Option<&DeliveryReport>) {
    match report {
        Some(report) if report.delivery == Delivery::Acked => tracing::warn!(
            target: LOG_COMMAND,
            result_bytes = bytes,
            delivery = report.delivery.as_str(),
            attempts = report.attempts,
            "the control plane refused the MCP server's answer as too large; its caller was told so in an error (the request ran)"
        ),
        Some(report) => tracing::warn!(
            target: LOG_COMMAND,
            result_bytes = bytes,
            delivery = report.delivery.as_str(),
            attempt_result = report.last_attempt.as_str(),
            attempts = report.attempts,
            "the control plane refused the MCP server's answer as too large, and the error replacing it was not acknowledged either; nothing more is posted"
        ),
        None => tracing::warn!(
            target: LOG_COMMAND,
            result_bytes = bytes,
            "the control plane refused the terminal response as too large; no JSON-RPC caller to tell"
        ),
    }
}

/// The deadline passed during the downstream step: a late error is never synthesized and
/// a late answer never posted (the command is counted once, by its leg's outcome).
fn silent(stage: Stage) {
    match stage {
        Stage::Leg { dispatched } => tracing::warn!(
            target: LOG_COMMAND,
            dispatched,
            "response_timeout passed during the downstream leg; nothing posted"
        ),
        Stage::Discovery => {
            tracing::warn!(target: LOG_DISCOVER, "response_timeout passed during discovery; nothing posted")
        }
    }
}

#[cfg(test)]
mod tests;
