//! One command, from its route to its last delivery.
//!
//! [`run`] routes the command and handles the routes that never reach the fence; an
//! admitted command becomes a [`CommandTask`], which owns its deadline, its transport,
//! its admission once granted and its span, and walks the states of `decide`: each
//! transition says what to do, and this file only does it (the I/O). Latches are taken
//! here, while the permit is held, never from the spans. An admitted `oauth_discovery`
//! walks the same states with its own downstream step (`discover.rs`).

use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use super::admission::{is_expired, Admitted, Place};
use super::answer::NotExecuted;
use super::decide::{AfterDelivery, AfterLeg, BeforeDispatch, Running, Start};
use super::leg::{failed_leg, record_leg, Leg};
use super::replies::{ReplyJob, ReplyKey};
use super::route::{route, Route};
use super::Dispatcher;
use crate::control::{Delivery, DeliveryReport};
use crate::downstream::{LegFailure, LegOutcome, LegResult, Transport};
use crate::protocol::{Command, CommandKind, DiscoveryFailure, JsonRpcPayload};
use crate::receipts::Pending;
use crate::strict::{Admission, FatalCategory, FenceLeg, Intent, Refusal};
use crate::telemetry::{events, safe_token, DropReason, DurationLeg};

/// Said (in the log and by the status) when a reply matches no waiting server request.
const UNMATCHED_REPLY_MESSAGE: &str =
    "this reply matches no request the MCP server is waiting for; it was not delivered";

/// Said when strict mode refuses a long-lived subscription stream.
const LISTEN_REFUSED_MESSAGE: &str = "not delivered to the MCP server: strict mode carries no long-lived subscription streams (subscriptions/listen); use a gateway in default mode for subscriptions";

/// Said when a command of an unknown type carries a JSON-RPC request.
const UNKNOWN_TYPE_MESSAGE: &str =
    "not delivered to the MCP server: this gateway does not know the tunnel command's command_type";

/// An admitted command's task.
pub(super) struct CommandTask<'a> {
    pub(super) d: &'a Arc<Dispatcher>,
    pub(super) cmd: &'a Command,
    pub(super) transport: &'a Transport,
    pub(super) deadline: Option<Instant>,
    /// The command's own span (`tunnelgate.command`).
    pub(super) span: tracing::Span,
    /// What the command's delivery receipt will say, if it does not end cleanly.
    pub(super) receipt: &'a Pending<'a>,
    work: Work,
}

/// What an admitted command does downstream.
#[derive(Clone, Copy)]
enum Work {
    /// Its leg: the JSON-RPC message, or the session `DELETE`.
    Leg,
    /// OAuth discovery (`oauth_discovery`).
    Discovery,
}

/// Runs one decoded command. `place` is its place in the admission line, if the poller
/// took one; `queue` is its queue span, closed when the task starts on it.
pub(super) async fn run(
    d: &Arc<Dispatcher>,
    cmd: Command,
    received_at: Instant,
    place: Option<Place>,
    queue: tracing::Span,
) {
    let gate = &d.gate;
    // Handed to the journal when this returns, however the command ended.
    let receipt = d.receipts.pending(&cmd, received_at, gate.rules.strict);
    let (transport, method, deadline, work) = match route(
        &cmd,
        received_at,
        |c| gate.channels.get(c),
        gate.rules.strict,
        Instant::now(),
    ) {
        Route::Admit {
            channel,
            method,
            deadline,
        } => (channel, method, deadline, Work::Leg),
        Route::Discover { channel, deadline } => (channel, None, deadline, Work::Discovery),
        other => return answer_unadmitted(d, &cmd, other, &receipt).await,
    };
    d.books.leg_took(DurationLeg::Queue, received_at);
    drop(queue);
    let place = place.unwrap_or_else(|| gate.line.join(&cmd, method, deadline));
    let task = CommandTask {
        d,
        cmd: &cmd,
        transport,
        deadline,
        span: tracing::Span::current(),
        receipt: &receipt,
        work,
    };
    task.run(place, received_at).await;
}

/// The routes that never reach the fence: each is answered or skipped, and counted.
async fn answer_unadmitted(d: &Arc<Dispatcher>, cmd: &Command, route: Route<'_, &Transport>, receipt: &Pending<'_>) {
    match route {
        Route::UnknownType(t) => {
            tracing::warn!(command_type = %crate::telemetry::safe_method(t), "unknown command type; skipped");
            d.books.dropped(DropReason::UnknownType);
        }
        Route::UnknownRequest(t) => {
            tracing::warn!(
                command_type = %crate::telemetry::safe_method(t),
                "unknown command type carrying a JSON-RPC request; answered with an error"
            );
            d.books.dropped(DropReason::UnknownType);
            d.responder.refused(cmd, UNKNOWN_TYPE_MESSAGE, 501, receipt).await;
        }
        Route::DiscoveryUnsupported => {
            tracing::warn!("oauth_discovery on a channel that is not HTTP; answered unsupported_channel");
            d.books.dropped(DropReason::Unsupported);
            d.responder
                .discovery_failed(cmd, DiscoveryFailure::UnsupportedChannel, receipt)
                .await;
        }
        Route::Unroutable if matches!(cmd.kind, CommandKind::OAuthDiscovery) => {
            tracing::warn!("no channel of that name is configured; oauth_discovery answered unsupported_channel");
            d.books.dropped(DropReason::Unroutable);
            d.responder
                .discovery_failed(cmd, DiscoveryFailure::UnsupportedChannel, receipt)
                .await;
        }
        Route::Expired => {
            tracing::info!("response_timeout already passed at receipt; dropped without contacting the MCP server");
            d.books.dropped(DropReason::Expired);
        }
        Route::ChannelUnsupported => {
            tracing::warn!("the channel serves nothing now (harpoon has no target); answered unsupported channel");
            d.books.dropped(DropReason::Unroutable);
            d.responder.channel_unsupported(cmd, receipt).await;
        }
        Route::Unroutable => {
            tracing::warn!("no channel of that name is configured; answered with an error, never routed elsewhere");
            d.responder.not_executed(cmd, NotExecuted::Unroutable, receipt).await;
        }
        Route::Reply {
            payload,
            channel,
            deadline,
        } => run_reply(d, cmd, payload, channel, deadline, receipt).await,
        Route::LongLivedRefused => {
            tracing::warn!(
                "strict mode carries no long-lived subscription stream (subscriptions/listen); refused, not delivered"
            );
            d.books.dropped(DropReason::Unsupported);
            d.responder.refused(cmd, LISTEN_REFUSED_MESSAGE, 501, receipt).await;
        }
        // Run by the caller; never handed here.
        Route::Admit { .. } | Route::Discover { .. } => {}
    }
}

impl CommandTask<'_> {
    /// Waits for the fence, then runs the admitted lifecycle.
    async fn run(self, place: Place, received_at: Instant) {
        // Admission is granted in receipt order by the admitter.
        let Some(admission) = self.wait_at_fence(place).await else {
            return;
        };
        let books = &self.d.books;
        books.admitted(self.d.gate.fence.is_strict());
        match self.work {
            Work::Leg => self.admitted(admission).await,
            Work::Discovery => self.discovered(admission).await,
        }
        books.released(self.d.gate.fence.snapshot().held);
        books.leg_took(DurationLeg::Total, received_at);
    }

    /// The admission, or `None` when the command was dropped or answered instead.
    async fn wait_at_fence(&self, place: Place) -> Option<Admission> {
        let wait_started = Instant::now();
        let admitted = place.instrument(tracing::debug_span!("tunnelgate.fence_wait")).await;
        let books = &self.d.books;
        books.leg_took(DurationLeg::FenceWait, wait_started);
        let refusal = match admitted {
            Ok(Admitted::Yes(a)) => return Some(a),
            Ok(Admitted::Expired) => {
                tracing::info!(
                    "response_timeout passed while waiting for the fence; dropped without contacting the MCP server"
                );
                books.dropped(DropReason::Expired);
                return None;
            }
            Ok(Admitted::Refused(refusal)) => refusal,
            // The admitter is gone: the gateway is stopping.
            Err(_) => {
                self.d
                    .responder
                    .not_executed(self.cmd, NotExecuted::Refused(Refusal::Stopping), self.receipt)
                    .await;
                return None;
            }
        };
        tracing::info!(
            reason = refusal.kind(),
            "not executed; answered with a retry-safe error"
        );
        self.d
            .responder
            .not_executed(self.cmd, NotExecuted::Refused(refusal), self.receipt)
            .await;
        None
    }

    /// The lifecycle's first step once admitted: `None` when the deadline passed before
    /// `what` (dispatch, discovery) began, which drops the command without contacting the
    /// MCP server.
    pub(super) fn start_running(&self, what: &str) -> Option<Running> {
        match BeforeDispatch::new(self.d.gate.rules).start(is_expired(self.deadline)) {
            Start::Run(running) => Some(running),
            Start::Expired => {
                tracing::info!("response_timeout passed before {what}; dropped without contacting the MCP server");
                self.d.books.dropped(DropReason::Expired);
                None
            }
        }
    }

    /// The admitted lifecycle: the leg, then what `decide` says, twice at most (after
    /// the leg, after the delivery). The admission is released when this returns.
    async fn admitted(&self, admission: Admission) {
        let Some(running) = self.start_running("dispatch") else {
            return;
        };
        let (leg, cut) = self.run_leg(&admission).await;
        self.receipt.leg_ended(leg.outcome, told(&leg));
        let dispatched = leg.outcome != LegOutcome::NotSent;
        if !dispatched {
            // Nothing reached an MCP server: nothing is outstanding, whatever the answer does.
            self.settle_intent().await;
        }
        let after = if leg.failure.as_ref().is_some_and(LegFailure::gateway_step_abandoned) {
            running.own_step_abandoned(cut, is_expired(self.deadline))
        } else {
            running.leg_ended(leg.outcome, cut, is_expired(self.deadline))
        };
        let (within_cleanup, delivering) = match after {
            AfterLeg::Deliver { within_cleanup, next } => (within_cleanup, next),
            AfterLeg::Silent => {
                // Never synthesize a late error; a late answer is not posted either. The
                // command is counted once, by its leg's outcome.
                tracing::warn!(
                    dispatched,
                    "response_timeout passed during the downstream leg; nothing posted"
                );
                return;
            }
            AfterLeg::Latch(category) => return self.latch(&admission, category),
            AfterLeg::LatchThenTell(category) => {
                self.latch(&admission, category);
                // The caller has not been told yet: post "effect unknown", bounded by cleanup.
                let deadline = self.d.responder.cleanup_deadline(self.deadline);
                let report = self
                    .d
                    .responder
                    .terminal(self.cmd, &leg.reply, deadline, self.receipt)
                    .await;
                tracing::info!(
                    delivery = report.delivery.as_str(),
                    "effect-unknown response after the latch"
                );
                return;
            }
        };
        admission.set_leg(FenceLeg::Deliver);
        let report = self.deliver(&leg, within_cleanup).await;
        let after = delivering.delivered(
            report.delivery,
            report.last_attempt,
            report.refused,
            is_expired(self.deadline),
        );
        self.after_delivery(&admission, &leg, &report, after).await;
    }

    /// Does what `decide` said once the terminal delivery ended.
    async fn after_delivery(
        &self,
        admission: &Admission,
        leg: &LegResult,
        report: &DeliveryReport,
        after: AfterDelivery,
    ) {
        let dispatched = leg.outcome != LegOutcome::NotSent;
        match after {
            AfterDelivery::Done => self.settle_intent().await,
            AfterDelivery::Latch(category) => self.latch(admission, category),
            AfterDelivery::Report => tracing::warn!(
                delivery = report.delivery.as_str(),
                attempt_result = report.last_attempt.as_str(),
                attempts = report.attempts,
                dispatched,
                "terminal response not acknowledged; the caller may not have its result"
            ),
            AfterDelivery::TellTooLarge => self.tell_too_large(leg, self.deadline).await,
            AfterDelivery::LatchThenTellTooLarge(category) => {
                self.latch(admission, category);
                // The caller has not been told: post the small error, bounded by cleanup.
                let deadline = self.d.responder.cleanup_deadline(self.deadline);
                self.tell_too_large(leg, deadline).await;
            }
        }
    }

    /// The MCP server answered, and the control plane refused the answer as larger than
    /// it accepts: its caller gets a small error saying so instead, once.
    async fn tell_too_large(&self, leg: &LegResult, deadline: Option<Instant>) {
        let bytes = leg.reply.resp_json.as_deref().map_or(0, |j| j.get().len());
        let responder = &self.d.responder;
        match responder.too_large(self.cmd, &leg.reply, deadline, self.receipt).await {
            Some(report) if report.delivery == Delivery::Acked => tracing::warn!(
                result_bytes = bytes,
                delivery = report.delivery.as_str(),
                attempts = report.attempts,
                "the control plane refused the MCP server's answer as too large; its caller was told so in an error (the request ran)"
            ),
            // Never followed by another: the refusal is not retried in any form.
            Some(report) => tracing::warn!(
                result_bytes = bytes,
                delivery = report.delivery.as_str(),
                attempt_result = report.last_attempt.as_str(),
                attempts = report.attempts,
                "the control plane refused the MCP server's answer as too large, and the error replacing it was not acknowledged either; nothing more is posted"
            ),
            None => tracing::warn!(
                result_bytes = bytes,
                "the control plane refused the terminal response as too large; no JSON-RPC caller to tell"
            ),
        }
    }

    /// The leg, after its write-ahead intent (strict mode). An intent that cannot be
    /// written means the command is not dispatched: the leg ends `not_sent`.
    async fn run_leg(&self, admission: &Admission) -> (LegResult, bool) {
        let leg = Leg {
            d: self.d,
            cmd: self.cmd,
            transport: self.transport,
            deadline: self.deadline,
            span: &self.span,
        };
        if let Err(e) = self.record_intent().await {
            tracing::error!(
                error = %e,
                kind = e.kind(),
                "the write-ahead intent could not be written; the command is not dispatched"
            );
            let unsent = failed_leg(self.cmd, LegFailure::InternalBeforeSend);
            leg.account(&unsent);
            return (unsent, false);
        }
        leg.run_leg(admission).await
    }

    /// Records, durably, that this command may be about to reach an MCP server.
    async fn record_intent(&self) -> Result<(), crate::strict::IntentError> {
        let Some(w) = &self.d.gate.write_ahead else {
            return Ok(());
        };
        let method = match &self.cmd.kind {
            crate::protocol::CommandKind::JsonRpc(p) => p.method(),
            _ => None,
        };
        let intent = Intent::now(
            self.cmd.request_id.as_str(),
            self.cmd.channel.as_str(),
            method,
            &w.instance_id,
        );
        w.store.record(&intent).await
    }

    /// Settles the write-ahead intent. A record left behind makes the next start (file
    /// backend) or the next active (etcd) latch `interrupted_before_ack` on a command that
    /// was in fact settled: the safe side.
    async fn settle_intent(&self) {
        let Some(w) = &self.d.gate.write_ahead else { return };
        if let Err(e) = w.store.settle().await {
            tracing::error!(
                error = %e,
                kind = e.kind(),
                "the write-ahead intent could not be settled; {}",
                w.store.after_failed_settle()
            );
        }
    }

    /// Posts the leg's reply as the terminal response (see [`Self::post_terminal`]).
    async fn deliver(&self, leg: &LegResult, within_cleanup: bool) -> DeliveryReport {
        let report = self.post_terminal(&leg.reply, within_cleanup).await;
        if leg.outcome == LegOutcome::Answered && report.delivery == Delivery::Acked {
            self.d.books.succeeded(self.cmd.channel.as_str());
        }
        if report.delivery != Delivery::Acked && leg.failure.is_none() {
            self.span.record("error.type", report.last_attempt.as_str());
        }
        report
    }

    /// Posts `reply` as the terminal response, bounded by the command's deadline (or by
    /// the cleanup time when the gateway is stopping); times it and records the delivery
    /// on the command's span.
    pub(super) async fn post_terminal(&self, reply: &crate::downstream::Reply, within_cleanup: bool) -> DeliveryReport {
        let responder = &self.d.responder;
        let deadline = if within_cleanup {
            responder.cleanup_deadline(self.deadline)
        } else {
            self.deadline
        };
        let started = Instant::now();
        let report = responder.terminal(self.cmd, reply, deadline, self.receipt).await;
        self.d.books.leg_took(DurationLeg::Deliver, started);
        self.span
            .record("tunnelgate.delivery_outcome", report.delivery.as_str());
        if report.delivery != Delivery::Acked {
            self.span.record("otel.status_code", "ERROR");
        }
        report
    }
}

impl CommandTask<'_> {
    /// Latches fatal for this admission, and records the latch on the command's span and
    /// in its receipt (when the latch's cause is this command).
    pub(super) fn latch(&self, admission: &Admission, category: FatalCategory) {
        let latched = admission.latch(category);
        events::fatal_latched(latched.fatal.category.as_str(), latched.fatal.exit_code);
        let ours = latched.first || latched.fatal.request_id == Some(safe_token(self.cmd.request_id.as_str()));
        if ours {
            self.receipt.latched(latched.fatal.category);
        }
    }
}

/// The words of the gateway's own error in `leg`'s reply, when it synthesized one.
pub(super) fn told(leg: &LegResult) -> Option<&'static str> {
    leg.failure
        .as_ref()
        .filter(|_| leg.reply.resp_json.is_some())
        .map(LegFailure::caller_message)
}

/// A caller's reply to a server request: handed to the leg that carried the question
/// (no admission of its own), or refused when no server request waits for it.
async fn run_reply(
    d: &Arc<Dispatcher>,
    cmd: &Command,
    payload: &JsonRpcPayload,
    transport: &Transport,
    deadline: Option<Instant>,
    receipt: &Pending<'_>,
) {
    let jobs = payload
        .id()
        .and_then(|id| ReplyKey::new(cmd.channel.as_str(), &cmd.headers, id))
        .and_then(|key| d.legs.requests.take(&key));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let job = ReplyJob {
        payload: payload.clone(),
        headers: cmd.headers.clone(),
        deadline,
        done: done_tx,
    };
    let queued = match jobs {
        Some(jobs) => jobs.send(job).await.is_ok(),
        None => false,
    };
    // The owning leg runs it; it ends with that leg at the latest.
    let leg = if queued {
        match deadline {
            Some(d) => tokio::time::timeout_at(d, done_rx).await.ok().and_then(Result::ok),
            None => done_rx.await.ok(),
        }
    } else {
        None
    };
    let Some(leg) = leg else {
        tracing::warn!(reason = "unmatched_reply", "{UNMATCHED_REPLY_MESSAGE}");
        d.books.dropped(DropReason::UnmatchedReply);
        d.responder.refused(cmd, UNMATCHED_REPLY_MESSAGE, 409, receipt).await;
        return;
    };
    d.books.metrics().downstream_finished(transport.kind(), leg.outcome);
    let span = tracing::Span::current();
    record_leg(&span, &leg);
    receipt.leg_ended(leg.outcome, told(&leg));
    tracing::info!(outcome = leg.outcome.as_str(), "reply delivered on the leg that asked");
    if is_expired(deadline) {
        return;
    }
    let report = d.responder.terminal(cmd, &leg.reply, deadline, receipt).await;
    span.record("tunnelgate.delivery_outcome", report.delivery.as_str());
}

#[cfg(test)]
mod tests;
