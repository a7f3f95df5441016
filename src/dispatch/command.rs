//! One command, from its route to its last delivery.
//!
//! [`run`] takes the command as it was [`Received`] (routed once, at receipt) and handles
//! the routes that never reach the fence; an admitted command becomes a [`CommandTask`],
//! which owns its deadline, its transport, its admission once granted and its observer,
//! and walks the states of `decide`: each transition says what to do, and this file only
//! does it (the I/O). Latches are taken here, while the permit is held, never from the
//! spans. What each step did is told to the books, the span, the receipt and the log
//! once, through the command's `Observer` (`observe.rs`). An admitted `oauth_discovery`
//! walks the same states with its own downstream step (`discover.rs`).

use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use super::admission::{is_expired, Admitted, Place};
use super::decide::{AfterDelivery, AfterLeg, BeforeDispatch, Running, Start};
use super::leg::{failed_leg, Leg};
use super::observe::{Answer, Dropped, LegOf, NotExecuted, Observer, Stage, Step, UNMATCHED_REPLY_MESSAGE};
use super::replies::{ReplyJob, ReplyKey};
use super::route::Routed;
use super::{Dispatcher, Gate};
use crate::control::DeliveryReport;
use crate::downstream::{LegFailure, LegOutcome, LegResult, Transport};
use crate::protocol::{Command, CommandKind, DiscoveryFailure, JsonRpcPayload, RespTiming};
use crate::strict::{Admission, FatalCategory, FenceLeg, Intent, Refusal};

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
    /// Tells the books, the command's span, its receipt and the log of each step.
    pub(super) obs: &'a Observer<'a>,
    work: Work,
}

/// What an admitted command does downstream.
#[derive(Clone, Copy)]
pub(super) enum Work {
    /// Its leg: the JSON-RPC message, or the session `DELETE`.
    Leg,
    /// OAuth discovery (`oauth_discovery`).
    Discovery,
}

/// A decoded command as the poller handed it on: routed once, at its receipt, a route
/// into the admission line holding its place there (taken in receipt order).
pub(super) struct Received {
    pub(super) cmd: Command,
    pub(super) received_at: Instant,
    pub(super) route: Routed<Place>,
}

/// Runs one decoded command, as it was received; `queue` is its queue span, closed when
/// the task starts on it.
pub(super) async fn run(d: &Arc<Dispatcher>, received: Received, queue: tracing::Span) {
    let Received {
        cmd,
        received_at,
        route,
    } = received;
    let gate = &d.gate;
    // Handed to the journal when this returns, however the command ended.
    let receipt = d.receipts.pending(&cmd, received_at, gate.rules.strict);
    let obs = Observer::new(&d.books, tracing::Span::current(), &receipt, &cmd);
    // The deadline may have passed while the command was queued.
    let (work, deadline, place) = match route.unless_expired(&cmd, received_at, Instant::now()) {
        Routed::Admit { deadline, place } => (Work::Leg, deadline, place),
        Routed::Discover { deadline, place } => (Work::Discovery, deadline, place),
        other => return answer_unadmitted(d, &cmd, other, &obs).await,
    };
    obs.observe(Step::Dequeued { received_at });
    drop(queue);
    let task = CommandTask {
        d,
        cmd: &cmd,
        transport: routed_channel(gate, &cmd),
        deadline,
        obs: &obs,
        work,
    };
    task.run(place, received_at).await;
}

/// The transport of the channel `cmd` was routed to at receipt.
fn routed_channel<'a>(gate: &'a Gate, cmd: &Command) -> &'a Transport {
    gate.channels
        .get(cmd.channel.as_str())
        .expect("a command routed to a channel at receipt finds it: the channels never change")
}

/// The routes that never reach the fence: each is answered or skipped, and counted.
async fn answer_unadmitted(d: &Arc<Dispatcher>, cmd: &Command, route: Routed<Place>, obs: &Observer<'_>) {
    let responder = &d.responder;
    match route {
        Routed::UnknownType(t) => obs.observe(Step::Dropped(Dropped::UnknownType(&t))),
        Routed::UnknownRequest(t) => {
            obs.observe(Step::Dropped(Dropped::UnknownRequest(&t)));
            responder.refused(cmd, UNKNOWN_TYPE_MESSAGE, 501, obs).await;
        }
        Routed::DiscoveryUnsupported => {
            obs.observe(Step::Dropped(Dropped::DiscoveryUnsupported));
            responder
                .discovery_failed(cmd, DiscoveryFailure::UnsupportedChannel, obs)
                .await;
        }
        Routed::Unroutable if matches!(cmd.kind, CommandKind::OAuthDiscovery) => {
            obs.observe(Step::Dropped(Dropped::DiscoveryUnroutable));
            responder
                .discovery_failed(cmd, DiscoveryFailure::UnsupportedChannel, obs)
                .await;
        }
        Routed::Expired => obs.observe(Step::Dropped(Dropped::ExpiredAtReceipt)),
        Routed::ChannelUnsupported => {
            obs.observe(Step::Dropped(Dropped::ChannelUnsupported));
            responder.channel_unsupported(cmd, obs).await;
        }
        Routed::Unroutable => {
            obs.observe(Step::Dropped(Dropped::Unroutable));
            responder.not_executed(cmd, NotExecuted::Unroutable, obs).await;
        }
        Routed::Reply { payload, deadline } => {
            let transport = routed_channel(&d.gate, cmd);
            run_reply(d, cmd, payload, transport, deadline, obs).await
        }
        Routed::LongLivedRefused => {
            obs.observe(Step::Dropped(Dropped::LongLivedRefused));
            responder.refused(cmd, LISTEN_REFUSED_MESSAGE, 501, obs).await;
        }
        // Run by the caller; never handed here.
        Routed::Admit { .. } | Routed::Discover { .. } => {}
    }
}

impl CommandTask<'_> {
    /// Waits for the fence, then runs the admitted lifecycle.
    async fn run(self, place: Place, received_at: Instant) {
        // Admission is granted in receipt order by the admitter.
        let Some(admission) = self.wait_at_fence(place).await else {
            return;
        };
        let fence = &self.d.gate.fence;
        self.obs.observe(Step::Admitted {
            fence_held: fence.is_strict(),
        });
        match self.work {
            Work::Leg => self.admitted(admission).await,
            Work::Discovery => self.discovered(admission).await,
        }
        self.obs.observe(Step::Released {
            fence_held: fence.snapshot().held,
            received_at,
        });
    }

    /// The admission, or `None` when the command was dropped or answered instead.
    async fn wait_at_fence(&self, place: Place) -> Option<Admission> {
        let since = Instant::now();
        let admitted = place.instrument(tracing::debug_span!("tunnelgate.fence_wait")).await;
        self.obs.observe(Step::FenceWaited { since });
        let (dropped, refusal) = match admitted {
            Ok(Admitted::Yes(a)) => return Some(a),
            Ok(Admitted::Expired) => {
                self.obs.observe(Step::Dropped(Dropped::ExpiredAtFence));
                return None;
            }
            Ok(Admitted::Refused(refusal)) => (Dropped::Refused(refusal), refusal),
            // The admitter is gone: the gateway is stopping.
            Err(_) => (Dropped::AdmitterGone, Refusal::Stopping),
        };
        self.obs.observe(Step::Dropped(dropped));
        self.d
            .responder
            .not_executed(self.cmd, NotExecuted::Refused(refusal), self.obs)
            .await;
        None
    }

    /// The lifecycle's first step once admitted: `None` when the deadline passed before
    /// `work` (dispatch, discovery) began, which drops the command without contacting the
    /// MCP server.
    pub(super) fn start_running(&self, work: Work) -> Option<Running> {
        match BeforeDispatch::new(self.d.gate.rules).start(is_expired(self.deadline)) {
            Start::Run(running) => Some(running),
            Start::Expired => {
                let dropped = match work {
                    Work::Leg => Dropped::ExpiredBeforeDispatch,
                    Work::Discovery => Dropped::ExpiredBeforeDiscovery,
                };
                self.obs.observe(Step::Dropped(dropped));
                None
            }
        }
    }

    /// The admitted lifecycle: the leg, then what `decide` says, twice at most (after
    /// the leg, after the delivery). The admission is released when this returns.
    async fn admitted(&self, admission: Admission) {
        let Some(running) = self.start_running(Work::Leg) else {
            return;
        };
        let (leg, cut) = self.run_leg(&admission).await;
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
            // Never synthesize a late error; a late answer is not posted either.
            AfterLeg::Silent => return self.obs.observe(Step::Silent(Stage::Leg { dispatched })),
            AfterLeg::Latch(category) => return self.latch(&admission, category),
            AfterLeg::LatchThenTell(category) => {
                self.latch(&admission, category);
                // The caller has not been told yet: post "effect unknown", bounded by cleanup.
                let deadline = self.d.responder.cleanup_deadline(self.deadline);
                let report = self
                    .d
                    .responder
                    .terminal(self.cmd, &leg.reply, deadline, self.obs)
                    .await;
                self.obs.observe(Step::Delivered {
                    report: &report,
                    answer: Answer::AfterLatch,
                });
                return;
            }
        };
        admission.set_leg(FenceLeg::Deliver);
        let since = Instant::now();
        let timing = leg
            .target_elapsed
            .and_then(|elapsed| RespTiming::new(self.transport.resp_timing_transport()?, elapsed));
        let report = self.post_timed_terminal(&leg.reply, timing, within_cleanup).await;
        self.obs.observe(Step::Delivered {
            report: &report,
            answer: Answer::Leg { leg: &leg, since },
        });
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
            AfterDelivery::Report => self.obs.observe(Step::NotAcknowledged {
                report,
                stage: Stage::Leg { dispatched },
            }),
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
        let report = responder.too_large(self.cmd, &leg.reply, deadline, self.obs).await;
        self.obs.observe(Step::ToldTooLarge {
            bytes,
            report: report.as_ref(),
        });
    }

    /// The leg, after its write-ahead intent (strict mode). An intent that cannot be
    /// written means the command is not dispatched: the leg ends `not_sent`.
    async fn run_leg(&self, admission: &Admission) -> (LegResult, bool) {
        if let Err(e) = self.record_intent().await {
            self.obs.observe(Step::IntentNotWritten(&e));
            let unsent = failed_leg(self.cmd, LegFailure::InternalBeforeSend);
            self.obs.observe(Step::LegEnded {
                leg: &unsent,
                transport: self.transport.kind(),
                since: None,
                of: LegOf::Command,
            });
            return (unsent, false);
        }
        let leg = Leg {
            d: self.d,
            cmd: self.cmd,
            transport: self.transport,
            deadline: self.deadline,
            obs: self.obs,
        };
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
        let since = Instant::now();
        w.store.record(&intent).await?;
        self.obs.observe(Step::IntentRecorded { since });
        Ok(())
    }

    /// Settles the write-ahead intent. A record left behind makes the next start (file
    /// backend) or the next active (etcd) latch `interrupted_before_ack` on a command that
    /// was in fact settled: the safe side.
    async fn settle_intent(&self) {
        let Some(w) = &self.d.gate.write_ahead else { return };
        if let Err(error) = w.store.settle().await {
            self.obs.observe(Step::IntentNotSettled {
                error: &error,
                then: w.store.after_failed_settle(),
            });
        }
    }

    /// Posts `reply` as the terminal response, bounded by the command's deadline (or by
    /// the cleanup time when the gateway is stopping). The caller observes the delivery.
    pub(super) async fn post_terminal(&self, reply: &crate::downstream::Reply, within_cleanup: bool) -> DeliveryReport {
        self.post_timed_terminal(reply, None, within_cleanup).await
    }

    /// [`Self::post_terminal`] for the MCP server's own answer, with its timing.
    async fn post_timed_terminal(
        &self,
        reply: &crate::downstream::Reply,
        timing: Option<RespTiming>,
        within_cleanup: bool,
    ) -> DeliveryReport {
        let responder = &self.d.responder;
        let deadline = if within_cleanup {
            responder.cleanup_deadline(self.deadline)
        } else {
            self.deadline
        };
        responder
            .timed_terminal(self.cmd, reply, timing, deadline, self.obs)
            .await
    }

    /// Latches fatal for this admission; the step is observed on the command's span and
    /// in its receipt (when the latch's cause is this command).
    pub(super) fn latch(&self, admission: &Admission, category: FatalCategory) {
        let latched = admission.latch(category);
        self.obs.observe(Step::Latched(&latched));
    }
}

/// A caller's reply to a server request: handed to the leg that carried the question
/// (no admission of its own), or refused when no server request waits for it.
async fn run_reply(
    d: &Arc<Dispatcher>,
    cmd: &Command,
    payload: JsonRpcPayload,
    transport: &Transport,
    deadline: Option<Instant>,
    obs: &Observer<'_>,
) {
    let jobs = payload
        .id()
        .and_then(|id| ReplyKey::new(cmd.channel.as_str(), &cmd.headers, id))
        .and_then(|key| d.legs.requests.take(&key));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let job = ReplyJob {
        payload,
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
        obs.observe(Step::Dropped(Dropped::UnmatchedReply));
        d.responder.refused(cmd, UNMATCHED_REPLY_MESSAGE, 409, obs).await;
        return;
    };
    obs.observe(Step::LegEnded {
        leg: &leg,
        transport: transport.kind(),
        since: None,
        of: LegOf::Reply,
    });
    if is_expired(deadline) {
        return;
    }
    let report = d.responder.terminal(cmd, &leg.reply, deadline, obs).await;
    obs.observe(Step::Delivered {
        report: &report,
        answer: Answer::Reply,
    });
}

#[cfg(test)]
mod tests;
