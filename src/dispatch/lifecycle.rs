//! One command, start to finish: deadline, route, fence, downstream, notifications,
//! terminal delivery, and the strict-mode latch decisions (taken while the permit is held).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use super::decide::{decide, Decision, Situation, Stage};
use super::replies::{server_request, ReplyJob, ReplyKey};
use super::{trace, Dispatcher};
use crate::control::{Delivery, DeliveryReport, PostKind};
use crate::downstream::{DownstreamRequest, LegFailure, LegOutcome, LegResult, Notification, Reply, Transport};
use crate::protocol::{
    message_method, synthesize_error, Command, CommandKind, FailureSource, InvalidCommand, RespType, ResponseBody,
    TunnelFailure,
};
use crate::protocol::{ChannelName, RequestId, ShardToken};
use crate::strict::{Admission, CommandRef, FenceLeg, Refusal};
use crate::supervisor::{TaskEnd, TaskKind};
use crate::telemetry::{DropReason, DurationLeg};

/// A command waiting for its turn at the fence.
pub(crate) struct AdmitRequest {
    command: CommandRef,
    deadline: Option<Instant>,
    reply: tokio::sync::oneshot::Sender<Admitted>,
}

/// What the admitter decided for one command.
pub(crate) enum Admitted {
    Yes(Admission),
    Expired,
    Refused(Refusal),
}

/// Grants admissions strictly in receipt order: commands returned by one poll reach the
/// fence in the order the control plane sent them, whatever the task scheduling.
/// Runs until `stop` is cancelled; a refused or expired head never blocks the rest. Any
/// other end is unexpected (its supervisor reports it).
pub(crate) async fn admit_loop(
    fence: crate::strict::Fence,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<AdmitRequest>,
    stop: tokio_util::sync::CancellationToken,
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

/// Notifications buffered between a transport and the control plane.
const NOTIFY_BUFFER: usize = 64;

/// Replies queued for one leg at once.
const REPLY_BUFFER: usize = 16;

/// A server request unanswered this long is logged at `warn` (once).
const SERVER_REQUEST_WARN_AFTER: std::time::Duration = std::time::Duration::from_secs(10);
/// How often a running leg looks for server requests waiting too long on the caller.
const SERVER_REQUEST_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Said (in the log and by the status) when a reply matches no waiting server request.
const UNMATCHED_REPLY_MESSAGE: &str =
    "this reply matches no request the MCP server is waiting for; it was not delivered";

/// Said when strict mode refuses a long-lived subscription stream.
const LISTEN_REFUSED_MESSAGE: &str = "not delivered to the MCP server: strict mode carries no long-lived subscription streams (subscriptions/listen); use a gateway in default mode for subscriptions";

/// What the notifier needs to register the server's questions for the leg's replies.
pub(crate) struct Questions {
    owner: u64,
    headers: crate::protocol::WireHeaders,
    jobs: tokio::sync::mpsc::Sender<ReplyJob>,
}

/// Runs one reply on the leg that owns the question, with that leg's admission: in strict
/// mode the reply is part of the question's dispatch, not a second one.
async fn run_reply_job(transport: &Transport, admission: &Admission, job: ReplyJob, propagation: trace::Propagation) {
    // A reply is answered `202`: anything the server streams back to it has no caller.
    let (sink, _discard) = tokio::sync::mpsc::channel(1);
    let span = tracing::info_span!(
        "tunnelgate.reply",
        otel.kind = "client",
        network.transport = transport.network_transport(),
    );
    let forwarded = trace::forwarded(Some(&job.payload), &job.headers, transport, propagation, &span);
    let req = DownstreamRequest {
        payload: &job.payload,
        headers: forwarded.headers.as_ref().unwrap_or(&job.headers),
        deadline: job.deadline,
    };
    let result = transport.call(admission, &req, &sink).instrument(span).await;
    let _ = job.done.send(result);
}

/// Said when a command was refused before reaching any MCP server.
const NOT_EXECUTED_MESSAGE: &str = "not delivered to the MCP server; safe to retry";

impl Dispatcher {
    /// Takes the command's place in the admission line, in receipt order. Called
    /// synchronously by the poller; `None` for commands that will never be admitted
    /// (unknown type, expired, unroutable), which `run` handles on its own.
    pub(super) fn request_admission(
        &self,
        cmd: &Command,
        received_at: Instant,
    ) -> Option<tokio::sync::oneshot::Receiver<Admitted>> {
        let method = match &cmd.kind {
            // A reply runs on the leg that asked; it never joins the admission line.
            CommandKind::JsonRpc(p) if p.is_reply() => return None,
            CommandKind::JsonRpc(p) if self.refuses_long_lived(p) => return None,
            CommandKind::JsonRpc(p) => p.method(),
            CommandKind::SessionTermination => None,
            CommandKind::Unknown(_) => return None,
        };
        let deadline = cmd.response_timeout.budget().map(|b| received_at + b);
        if is_expired(deadline) || self.channels.get(cmd.channel.as_str()).is_none() {
            return None;
        }
        Some(self.join_admission_line(cmd, method, deadline))
    }

    fn join_admission_line(
        &self,
        cmd: &Command,
        method: Option<&str>,
        deadline: Option<Instant>,
    ) -> tokio::sync::oneshot::Receiver<Admitted> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let command = CommandRef::new(cmd.request_id.as_str(), cmd.channel.as_str(), method);
        let _ = self.admit_tx.send(AdmitRequest {
            command,
            deadline,
            reply: tx,
        });
        rx
    }

    pub(super) async fn run(
        self: &Arc<Self>,
        cmd: Command,
        received_at: Instant,
        place: Option<tokio::sync::oneshot::Receiver<Admitted>>,
        queue: tracing::Span,
    ) {
        let deadline = cmd.response_timeout.budget().map(|b| received_at + b);
        let method = match &cmd.kind {
            CommandKind::JsonRpc(p) => p.method(),
            CommandKind::SessionTermination => None,
            CommandKind::Unknown(t) => {
                tracing::warn!(command_type = %crate::telemetry::safe_method(t), "unknown command type; skipped");
                self.metrics.command_dropped(DropReason::UnknownType);
                return;
            }
        };
        if is_expired(deadline) {
            tracing::info!("response_timeout already passed at receipt; dropped without contacting the MCP server");
            self.metrics.command_dropped(DropReason::Expired);
            return;
        }
        let Some(transport) = self.channels.get(cmd.channel.as_str()) else {
            tracing::warn!("no channel of that name is configured; answered with an error, never routed elsewhere");
            self.metrics.command_dropped(DropReason::Unroutable);
            self.answer_not_executed(&cmd, "unroutable").await;
            return;
        };
        if let CommandKind::JsonRpc(p) = &cmd.kind {
            if p.is_reply() {
                return self.run_reply(&cmd, p, transport, deadline).await;
            }
            if self.refuses_long_lived(p) {
                tracing::warn!(
                    "strict mode carries no long-lived subscription stream (subscriptions/listen); refused, not delivered"
                );
                self.metrics.command_dropped(DropReason::Unsupported);
                self.answer_refused(&cmd, LISTEN_REFUSED_MESSAGE, 501).await;
                return;
            }
        }
        self.metrics
            .leg_duration(DurationLeg::Queue, received_at.elapsed().as_secs_f64());
        drop(queue);

        // Admission is granted in receipt order by the admitter (see `admit_loop`).
        let wait_started = Instant::now();
        let rx = match place {
            Some(rx) => rx,
            None => self.join_admission_line(&cmd, method, deadline),
        };
        let admitted = rx.instrument(tracing::info_span!("tunnelgate.fence_wait")).await;
        self.metrics
            .leg_duration(DurationLeg::FenceWait, wait_started.elapsed().as_secs_f64());
        let admission = match admitted {
            Ok(Admitted::Expired) => {
                tracing::info!(
                    "response_timeout passed while waiting for the fence; dropped without contacting the MCP server"
                );
                self.metrics.command_dropped(DropReason::Expired);
                return;
            }
            Ok(Admitted::Refused(refusal)) => {
                let reason = match refusal {
                    Refusal::Latched => DropReason::Fatal,
                    Refusal::Stopping => DropReason::Shutdown,
                };
                tracing::info!(
                    reason = refusal.kind(),
                    "not executed; answered with a retry-safe error"
                );
                self.metrics.command_dropped(reason);
                self.answer_not_executed(&cmd, refusal.kind()).await;
                return;
            }
            Err(_) => {
                // The admitter is gone: the gateway is stopping.
                self.metrics.command_dropped(DropReason::Shutdown);
                self.answer_not_executed(&cmd, "stopping").await;
                return;
            }
            Ok(Admitted::Yes(a)) => a,
        };
        self.health.admitted();
        self.metrics.set_in_flight(self.health.in_flight());
        self.metrics.set_fence_held(self.fence.is_strict());
        self.metrics.set_queue_depth(self.health.queued());
        self.admitted_lifecycle(&cmd, transport, admission, deadline).await;
        self.health.released();
        self.metrics.set_in_flight(self.health.in_flight());
        self.metrics.set_fence_held(self.fence.snapshot().held);
        self.metrics
            .leg_duration(DurationLeg::Total, received_at.elapsed().as_secs_f64());
    }

    /// The I/O around [`decide`]: run the leg (cut short by the stop), then do what the
    /// decision says, twice at most (after the leg, after the delivery).
    async fn admitted_lifecycle(
        self: &Arc<Self>,
        cmd: &Command,
        transport: &Transport,
        admission: Admission,
        deadline: Option<Instant>,
    ) {
        if is_expired(deadline) {
            tracing::info!("response_timeout passed before dispatch; dropped without contacting the MCP server");
            self.metrics.command_dropped(DropReason::Expired);
            return;
        }
        // Notifications are posted in order by their own task while the leg runs; the
        // server's questions among them are registered first, so their replies find
        // this leg.
        let owner = self.next_leg.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (jobs_tx, mut jobs_rx) = tokio::sync::mpsc::channel::<ReplyJob>(REPLY_BUFFER);
        let (notes_tx, notes_rx) = tokio::sync::mpsc::channel(NOTIFY_BUFFER);
        // Driven inside this command's task (no spawn per command), still supervised as
        // the notifier: a panic there is reported as such and the command goes on.
        let mut notifier = std::pin::pin!(self.supervisor.watched(
            TaskKind::Notifier,
            self.clone()
                .post_notifications(
                    notes_rx,
                    cmd.request_id.clone(),
                    cmd.channel.clone(),
                    cmd.shard_token.clone(),
                    deadline,
                    Questions {
                        owner,
                        headers: cmd.headers.clone(),
                        jobs: jobs_tx,
                    },
                )
                .in_current_span(),
        ));
        let mut notifier_done = false;
        let started = Instant::now();
        let mut leg_future = Box::pin(self.downstream_leg(cmd, transport, &admission, deadline, notes_tx));
        let mut replies = futures_util::stream::FuturesUnordered::new();
        // The first check one period in (an interval's first tick is immediate).
        let mut check_waits = tokio::time::interval_at(
            tokio::time::Instant::now() + SERVER_REQUEST_CHECK_EVERY,
            SERVER_REQUEST_CHECK_EVERY,
        );
        let (leg, cut) = loop {
            tokio::select! {
                biased;
                // cancel-safe: dropping the leg is safe before its request may have left;
                // after that the drop itself is the ambiguity, reported as
                // `CancelledAfterWrite`. Replies in flight are dropped with it.
                () = self.cut.cancelled() => break (cut_leg(cmd, &admission), true),
                leg = &mut leg_future => break (leg, false),
                // cancel-safe: mpsc receive loses nothing.
                Some(job) = jobs_rx.recv() => replies.push(run_reply_job(transport, &admission, job, self.policy.propagation)),
                // cancel-safe: a reply in flight stays in the set.
                Some(()) = futures_util::StreamExt::next(&mut replies), if !replies.is_empty() => {}
                // cancel-safe: the notifier future is kept and polled again; this branch
                // only marks it finished.
                () = &mut notifier, if !notifier_done => notifier_done = true,
                // cancel-safe: a timer.
                _ = check_waits.tick() => {
                    for w in self.server_requests.long_waits(owner, SERVER_REQUEST_WARN_AFTER) {
                        tracing::warn!(
                            method = %crate::telemetry::safe_method(&w.method),
                            waited_s = w.waited.as_secs(),
                            "the MCP server is waiting for the caller's reply to its request; the call cannot finish until the caller answers"
                        );
                    }
                }
            }
        };
        // The leg is over: nobody can carry a reply to this server any more. Replies
        // already being written finish (each bounded by its own deadline).
        self.server_requests.release(owner);
        if !cut {
            while futures_util::StreamExt::next(&mut replies).await.is_some() {}
        }
        drop(replies);
        drop(jobs_rx);
        // Dropping the leg (cut, or already finished) closes its notification sink, so the
        // notifier below ends.
        drop(leg_future);
        self.metrics
            .leg_duration(DurationLeg::Downstream, started.elapsed().as_secs_f64());
        self.metrics.downstream_finished(transport.kind(), leg.outcome);
        let span = tracing::Span::current();
        record_leg(&span, &leg);
        // Notifications go out before the terminal response, whatever happens to them. A
        // notifier that panicked was reported by the supervisor.
        if !notifier_done {
            notifier.await;
        }
        // Questions the notifier registered after the leg ended can never be answered.
        self.server_requests.release(owner);
        let dispatched = leg.outcome != LegOutcome::NotSent;

        let situation = |stage| Situation {
            stage,
            deadline_passed: is_expired(deadline),
            strict: self.policy.strict,
            ambiguity_is_fatal: self.policy.ambiguity_is_fatal,
        };
        let cleanup = || {
            let end = Instant::now() + self.policy.cleanup_timeout;
            Some(deadline.map_or(end, |d| d.min(end)))
        };
        let delivery_deadline = match decide(situation(Stage::LegEnded {
            outcome: leg.outcome,
            cut,
        })) {
            Decision::Deliver => deadline,
            Decision::DeliverWithinCleanup => cleanup(),
            Decision::Silent => {
                // Never synthesize a late error; a late answer is not posted either. The
                // command is counted once, by its leg's outcome.
                tracing::warn!(
                    dispatched,
                    "response_timeout passed during the downstream leg; nothing posted"
                );
                return;
            }
            Decision::Latch(category) => {
                trace::latch(&admission, category);
                return;
            }
            Decision::LatchThenTell(category) => {
                trace::latch(&admission, category);
                // The caller has not been told yet: post "effect unknown", bounded by cleanup.
                let report = self.deliver_terminal(cmd, &leg.reply, cleanup()).await;
                tracing::info!(
                    delivery = report.delivery.as_str(),
                    "effect-unknown response after the latch"
                );
                return;
            }
            decision @ (Decision::Done | Decision::Report) => {
                unreachable!("{decision:?} is decided only after a delivery")
            }
        };
        admission.set_leg(FenceLeg::Deliver);
        let started = Instant::now();
        let report = self.deliver_terminal(cmd, &leg.reply, delivery_deadline).await;
        self.metrics
            .leg_duration(DurationLeg::Deliver, started.elapsed().as_secs_f64());
        span.record("tunnelgate.delivery_outcome", report.delivery.as_str());
        if report.delivery != Delivery::Acked {
            span.record("otel.status_code", "ERROR");
            if leg.failure.is_none() {
                span.record("error.type", report.last_attempt.as_str());
            }
        }
        match decide(situation(Stage::Delivered {
            delivery: report.delivery,
            last_attempt: report.last_attempt,
            dispatched,
        })) {
            Decision::Done => {}
            Decision::Latch(category) => {
                trace::latch(&admission, category);
            }
            Decision::Report => tracing::warn!(
                delivery = report.delivery.as_str(),
                attempt_result = report.last_attempt.as_str(),
                attempts = report.attempts,
                dispatched,
                "terminal response not acknowledged; the caller may not have its result"
            ),
            decision @ (Decision::Deliver
            | Decision::DeliverWithinCleanup
            | Decision::Silent
            | Decision::LatchThenTell(_)) => unreachable!("{decision:?} is decided only after a leg"),
        }
    }

    async fn downstream_leg(
        &self,
        cmd: &Command,
        transport: &Transport,
        admission: &Admission,
        deadline: Option<Instant>,
        notes: tokio::sync::mpsc::Sender<Notification>,
    ) -> LegResult {
        let span = trace::downstream_span(cmd, transport);
        let payload = match &cmd.kind {
            CommandKind::JsonRpc(p) => Some(p),
            CommandKind::SessionTermination | CommandKind::Unknown(_) => None,
        };
        let forwarded = trace::forwarded(payload, &cmd.headers, transport, self.policy.propagation, &span);
        let headers = forwarded.headers.as_ref().unwrap_or(&cmd.headers);
        let leg = async {
            match &cmd.kind {
                CommandKind::JsonRpc(payload) => {
                    let req = DownstreamRequest {
                        payload: forwarded.payload.as_ref().unwrap_or(payload),
                        headers,
                        deadline,
                    };
                    transport.call(admission, &req, &notes).await
                }
                CommandKind::SessionTermination => transport.terminate_session(admission, headers, deadline).await,
                CommandKind::Unknown(_) => {
                    LegResult::failed(LegFailure::InternalBeforeSend, None, RespType::JsonrpcResponse)
                }
            }
        }
        .instrument(span.clone())
        .await;
        trace::record_downstream(&span, cmd, &leg);
        leg
    }

    async fn deliver_terminal(&self, cmd: &Command, reply: &Reply, deadline: Option<Instant>) -> DeliveryReport {
        let body = ResponseBody {
            request_id: &cmd.request_id,
            channel: &cmd.channel,
            resp_json: reply.resp_json.as_deref(),
            resp_headers: &reply.resp_headers,
            resp_code: reply.resp_code,
            resp_type: reply.resp_type,
        }
        .to_bytes();
        let span = tracing::info_span!(
            "tunnelgate.deliver",
            tunnelgate.resp_type = reply.resp_type.as_str(),
            tunnelgate.delivery_outcome = tracing::field::Empty,
            tunnelgate.attempts = tracing::field::Empty,
        );
        let report = self
            .control
            .deliver(PostKind::Terminal, body, &cmd.shard_token, deadline, &self.hard_stop)
            .instrument(span.clone())
            .await;
        span.record("tunnelgate.delivery_outcome", report.delivery.as_str());
        span.record("tunnelgate.attempts", i64::from(report.attempts));
        report
    }

    /// Posts `jsonrpc_notify` messages in order; after one fails, skips the rest for this
    /// command (the terminal response is still delivered).
    async fn post_notifications(
        self: Arc<Self>,
        mut rx: tokio::sync::mpsc::Receiver<Notification>,
        request_id: RequestId,
        channel: ChannelName,
        shard_token: ShardToken,
        deadline: Option<Instant>,
        questions: Questions,
    ) -> TaskEnd {
        let mut failed = false;
        let mut skipped = 0u64;
        while let Some(n) = rx.recv().await {
            // A question from the server: registered before the caller can see it.
            if let Some((method, id)) = server_request(&n.resp_json) {
                let registered = ReplyKey::new(channel.as_str(), &questions.headers, &id).is_some_and(|key| {
                    self.server_requests
                        .register(key, questions.owner, &method, questions.jobs.clone())
                });
                if !registered {
                    tracing::warn!("a server request could not be registered; the caller's reply will not reach it");
                }
            }
            if failed {
                skipped += 1;
                continue;
            }
            let method = message_method(&n.resp_json).map(|m| crate::telemetry::safe_method(&m));
            let body = ResponseBody {
                request_id: &request_id,
                channel: &channel,
                resp_json: Some(&n.resp_json),
                resp_headers: &n.resp_headers,
                resp_code: 200,
                resp_type: RespType::JsonrpcNotify,
            }
            .to_bytes();
            let report = self
                .control
                .deliver(PostKind::Notify, body, &shard_token, deadline, &self.hard_stop)
                .await;
            crate::telemetry::events::notification_forwarded(method, report.delivery.as_str());
            if report.delivery != Delivery::Acked {
                failed = true;
                tracing::warn!(
                    delivery = report.delivery.as_str(),
                    "notification not acknowledged; later notifications of this command are skipped"
                );
            }
        }
        if skipped > 0 {
            tracing::warn!(skipped, "notifications skipped after an earlier one failed");
        }
        TaskEnd::Finished
    }

    /// Answers a command that will never reach an MCP server, best effort, bounded by
    /// the cleanup timeout. Its failure never latches: nothing was sent.
    async fn answer_not_executed(&self, cmd: &Command, reason: &'static str) {
        let report = self.answer_refused(cmd, NOT_EXECUTED_MESSAGE, 503).await;
        if let Some(report) = report {
            tracing::info!(reason, delivery = report.delivery.as_str(), "not-executed response");
        }
    }

    /// Answers a command the gateway will not carry, with `message` for a request (a
    /// notification or reply gets `notify_ack` with `code` and no payload), bounded by
    /// the cleanup timeout. Never latches: nothing was sent.
    async fn answer_refused(&self, cmd: &Command, message: &str, code: u16) -> Option<DeliveryReport> {
        let (id, resp_type) = match &cmd.kind {
            CommandKind::JsonRpc(p) if p.expects_response() => (p.id(), RespType::JsonrpcResponse),
            CommandKind::JsonRpc(_) => (None, RespType::NotifyAck),
            CommandKind::SessionTermination => (None, RespType::SessionTerminationResponse),
            CommandKind::Unknown(_) => return None,
        };
        let failure = TunnelFailure::new(FailureSource::ClientInternal, None, false, None);
        let resp_json = (resp_type == RespType::JsonrpcResponse).then(|| synthesize_error(id, message, &failure));
        let mut headers = BTreeMap::new();
        if resp_json.is_some() {
            headers.insert("Content-Type".to_owned(), vec!["application/json".to_owned()]);
        }
        let reply = Reply {
            resp_json,
            resp_headers: headers,
            resp_code: code,
            resp_type,
        };
        let deadline = Instant::now() + self.policy.cleanup_timeout;
        Some(self.deliver_terminal(cmd, &reply, Some(deadline)).await)
    }

    /// Strict mode refuses long-lived subscription streams: they cause no effect, but a
    /// stream that lasts until its deadline would hold the one fence all that time.
    fn refuses_long_lived(&self, payload: &crate::protocol::JsonRpcPayload) -> bool {
        self.policy.strict && payload.method().is_some_and(is_long_lived)
    }

    /// A caller's reply to a server request: handed to the leg that carried the question
    /// (no admission of its own), or refused when no server request waits for it.
    async fn run_reply(
        &self,
        cmd: &Command,
        payload: &crate::protocol::JsonRpcPayload,
        transport: &Transport,
        deadline: Option<Instant>,
    ) {
        let jobs = payload
            .id()
            .and_then(|id| ReplyKey::new(cmd.channel.as_str(), &cmd.headers, id))
            .and_then(|key| self.server_requests.take(&key));
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
            self.metrics.command_dropped(DropReason::UnmatchedReply);
            self.answer_refused(cmd, UNMATCHED_REPLY_MESSAGE, 409).await;
            return;
        };
        self.metrics.downstream_finished(transport.kind(), leg.outcome);
        let span = tracing::Span::current();
        record_leg(&span, &leg);
        tracing::info!(outcome = leg.outcome.as_str(), "reply delivered on the leg that asked");
        if is_expired(deadline) {
            return;
        }
        let report = self.deliver_terminal(cmd, &leg.reply, deadline).await;
        span.record("tunnelgate.delivery_outcome", report.delivery.as_str());
    }

    /// A command that could not be decoded: answered when it carries what a response
    /// needs, otherwise counted and skipped.
    pub(super) async fn answer_invalid(&self, invalid: InvalidCommand) {
        self.metrics.command_dropped(DropReason::Invalid);
        let (Some(request_id), Some(shard_token)) = (invalid.request_id, invalid.shard_token) else {
            tracing::warn!(
                reason = invalid.reason.as_str(),
                "malformed command without request id or shard token; skipped"
            );
            return;
        };
        tracing::warn!(
            reason = invalid.reason.as_str(),
            "malformed command; answered with an error"
        );
        let failure = TunnelFailure::new(FailureSource::Protocol, Some("invalid_protocol_response"), false, None);
        let resp_json = synthesize_error(
            None,
            "not delivered to the MCP server: the tunnel command was malformed",
            &failure,
        );
        let headers = BTreeMap::from([("Content-Type".to_owned(), vec!["application/json".to_owned()])]);
        let body = ResponseBody {
            request_id: &request_id,
            channel: &invalid.channel,
            resp_json: Some(&resp_json),
            resp_headers: &headers,
            resp_code: 400,
            resp_type: RespType::JsonrpcResponse,
        }
        .to_bytes();
        let deadline = Instant::now() + self.policy.cleanup_timeout;
        let report = self
            .control
            .deliver(PostKind::Terminal, body, &shard_token, Some(deadline), &self.hard_stop)
            .await;
        tracing::info!(delivery = report.delivery.as_str(), "malformed-command response");
    }
}

/// The leg's result when the stop cut it short: nothing of the request left (safe to
/// retry), or it may have (effect unknown). Decided by the admission, which knows.
fn cut_leg(cmd: &Command, admission: &Admission) -> LegResult {
    let failure = if admission.is_sent() {
        LegFailure::CancelledAfterWrite
    } else {
        LegFailure::NotAdmitted
    };
    let (rpc_id, resp_type) = match &cmd.kind {
        CommandKind::JsonRpc(p) if p.expects_response() => (p.id(), RespType::JsonrpcResponse),
        CommandKind::JsonRpc(_) => (None, RespType::NotifyAck),
        CommandKind::SessionTermination | CommandKind::Unknown(_) => (None, RespType::SessionTerminationResponse),
    };
    LegResult::failed(failure, rpc_id, resp_type)
}

/// The leg's outcome on the command span, and one log line for a failed leg.
fn record_leg(span: &tracing::Span, leg: &LegResult) {
    span.record("tunnelgate.leg_outcome", leg.outcome.as_str());
    let Some(f) = &leg.failure else { return };
    if *f != LegFailure::SubscriptionEnded {
        span.record("error.type", f.kind());
        span.record("otel.status_code", "ERROR");
    }
    match leg.outcome {
        LegOutcome::NotSent => tracing::warn!(
            outcome = "not_sent",
            reason = f.kind(),
            "downstream leg failed before sending; safe to retry"
        ),
        LegOutcome::Abandoned => tracing::warn!(
            outcome = "abandoned",
            reason = f.kind(),
            "downstream leg abandoned: effect unknown"
        ),
        LegOutcome::Answered if *f == LegFailure::SubscriptionEnded => tracing::info!(
            outcome = "answered",
            reason = f.kind(),
            "subscription stream ended (by the server, a cancel or its bound): a normal end"
        ),
        LegOutcome::Answered => tracing::info!(
            outcome = "answered",
            reason = f.kind(),
            "the MCP server refused the request"
        ),
    }
}

/// Requests whose response stream the server keeps open by design (2026-07-28).
fn is_long_lived(method: &str) -> bool {
    method == "subscriptions/listen"
}

fn is_expired(deadline: Option<Instant>) -> bool {
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
