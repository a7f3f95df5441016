//! The control plane's side of a command: its terminal response, its notifications'
//! posts, the answers of commands that never reach an MCP server (refused, not executed,
//! malformed), and the small error that replaces an answer the control plane refused as
//! too large. The answers of commands that never reach an MCP server never latch: nothing
//! was sent.
//!
//! Posts only: what each post did is told as a step, to the command's `Observer` (or, for
//! a command that could not be decoded, which has none, as an `Aside`); see `observe`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::books::Books;
use super::observe::{observe_aside, Aside, NotExecuted, Observer, Step};
use crate::control::{ControlClient, DeliveryReport, PostKind};
use crate::downstream::Reply;
use crate::protocol::{
    discovery_error, has_lone_surrogate, json_resp_headers, synthesize_error, ChannelName, Command, CommandKind,
    DiscoveryFailure, FailureSource, InvalidCommand, RequestId, RespTiming, RespType, ResponseBody, ShardToken,
    TooLarge, TunnelFailure, NOT_SENT_MESSAGE,
};
use crate::telemetry::attrs;

/// Said to the caller of a command that could not be decoded.
const MALFORMED_MESSAGE: &str = "not delivered to the MCP server: the tunnel command was malformed";

/// The `resp_code` of the error that replaces an answer too large for the tunnel: the
/// gateway could not carry what the MCP server sent, as for any body it cannot carry.
const TOO_LARGE_RESP_CODE: u16 = 502;

/// What the caller of a request reads when the MCP server's answer carried an unpaired
/// surrogate escape.
const UNPAIRED_WORDS: &str = "the MCP server answered, but its answer contains text that is not valid Unicode (an unpaired surrogate escape), which the control plane refuses, so it could not be delivered; the request ran on the MCP server, so a retry would run it again";
/// The `resp_code` of that answer (the server's answer was unusable: a bad gateway).
const UNPAIRED_RESP_CODE: u16 = 502;

/// Posts responses to the control plane.
pub(crate) struct Responder {
    control: ControlClient,
    /// Cancelled when in-flight work must stop now, posts included (cleanup over).
    hard_stop: CancellationToken,
    /// Bound on best-effort error responses after a latch or at shutdown.
    cleanup_timeout: Duration,
    /// Where the steps of a command that could not be decoded are told (it has no
    /// observer).
    books: Arc<Books>,
    /// `control_plane.resp_timing`: the MCP server's answers carry `resp_timing`.
    resp_timing: bool,
}

impl Responder {
    pub(crate) fn new(
        control: ControlClient,
        hard_stop: CancellationToken,
        cleanup_timeout: Duration,
        books: Arc<Books>,
    ) -> Self {
        Self {
            control,
            hard_stop,
            cleanup_timeout,
            books,
            resp_timing: false,
        }
    }

    /// Answers of MCP servers carry `resp_timing` (`control_plane.resp_timing`).
    pub(crate) fn with_resp_timing(mut self, on: bool) -> Self {
        self.resp_timing = on;
        self
    }

    /// The cleanup bound from now, never past `deadline`.
    pub(crate) fn cleanup_deadline(&self, deadline: Option<Instant>) -> Option<Instant> {
        let end = Instant::now() + self.cleanup_timeout;
        Some(deadline.map_or(end, |d| d.min(end)))
    }

    /// Posts `reply` as `cmd`'s terminal response, in a `tunnelgate.deliver` span; the
    /// delivery's outcome is told to `obs` ([`Step::Answered`]).
    pub(crate) async fn terminal(
        &self,
        cmd: &Command,
        reply: &Reply,
        deadline: Option<Instant>,
        obs: &Observer<'_>,
    ) -> DeliveryReport {
        self.timed_terminal(cmd, reply, None, deadline, obs).await
    }

    /// [`Responder::terminal`] for the MCP server's own answer, with its `resp_timing`
    /// when `control_plane.resp_timing` is on (the same on every retry of the POST).
    pub(crate) async fn timed_terminal(
        &self,
        cmd: &Command,
        reply: &Reply,
        timing: Option<RespTiming>,
        deadline: Option<Instant>,
        obs: &Observer<'_>,
    ) -> DeliveryReport {
        let timing = timing.filter(|_| self.resp_timing);
        let report = match self.told_unpaired(cmd, reply, obs) {
            Some(told) => self.post_terminal(cmd, &told, None, deadline, obs).await,
            None => self.post_terminal(cmd, reply, timing, deadline, obs).await,
        };
        obs.observe(Step::Answered(&report));
        report
    }

    /// When the MCP server's answer `reply` carries an unpaired surrogate escape (which
    /// the control plane refuses, finally, as `400 invalid_json_payload`): the answer
    /// that is posted instead, a `-32603` for the same request id saying what happened
    /// in words (the request ran). `None` when the answer can go as it is, or when no
    /// caller waits for a JSON-RPC answer (then the answer goes, and is refused).
    fn told_unpaired(&self, cmd: &Command, reply: &Reply, obs: &Observer<'_>) -> Option<Reply> {
        let answer = reply.resp_json.as_deref()?;
        if !has_lone_surrogate(answer.get().as_bytes()) {
            return None;
        }
        let CommandKind::JsonRpc(request) = &cmd.kind else {
            return None;
        };
        let id = request.id().filter(|_| request.expects_response())?;
        obs.observe(Step::UnpairedAnswer);
        obs.observe(Step::Told(UNPAIRED_WORDS));
        let failure = TunnelFailure::new(FailureSource::Protocol, Some("invalid_json_payload"), true, None);
        let resp_json = synthesize_error(Some(id), UNPAIRED_WORDS, &failure);
        Some(error_reply(
            Some(resp_json),
            UNPAIRED_RESP_CODE,
            RespType::JsonrpcResponse,
        ))
    }

    /// Tells the caller of `cmd` that `reply`, the MCP server's answer, was refused by
    /// the control plane as too large: a small `-32603` error for the same request id,
    /// naming the answer's size, posted as a delivery of its own (retried as any terminal
    /// response, bounded by `deadline`, and never followed by another, whatever becomes
    /// of it). The receipt keeps the refused delivery's outcome and gains these words.
    /// `None` when nobody waits for a JSON-RPC answer (not a request, or not a JSON-RPC
    /// response that was refused), so nothing is posted.
    pub(crate) async fn too_large(
        &self,
        cmd: &Command,
        reply: &Reply,
        deadline: Option<Instant>,
        obs: &Observer<'_>,
    ) -> Option<DeliveryReport> {
        let CommandKind::JsonRpc(request) = &cmd.kind else {
            return None;
        };
        let id = request.id().filter(|_| request.expects_response())?;
        let answer = reply
            .resp_json
            .as_deref()
            .filter(|_| reply.resp_type == RespType::JsonrpcResponse)?;
        let kind = TooLarge::of_method(request.method());
        let resp_json = synthesize_error(Some(id), &kind.message(answer.get().len()), &TooLarge::failure());
        obs.observe(Step::Told(kind.words()));
        let small = error_reply(Some(resp_json), TOO_LARGE_RESP_CODE, RespType::JsonrpcResponse);
        Some(self.post_terminal(cmd, &small, None, deadline, obs).await)
    }

    /// Posts `reply` as `cmd`'s terminal response inside a `tunnelgate.deliver` span that
    /// records its outcome and attempts; the post is told to `obs` ([`Step::Posted`]).
    async fn post_terminal(
        &self,
        cmd: &Command,
        reply: &Reply,
        timing: Option<RespTiming>,
        deadline: Option<Instant>,
        obs: &Observer<'_>,
    ) -> DeliveryReport {
        let span = tracing::debug_span!(
            "tunnelgate.deliver",
            { attrs::RESP_TYPE } = reply.resp_type.as_str(),
            { attrs::DELIVERY_OUTCOME } = tracing::field::Empty,
            { attrs::ATTEMPTS } = tracing::field::Empty,
        );
        let body = timed_body(&cmd.request_id, &cmd.channel, reply, timing);
        let report = self
            .post(PostKind::Terminal, body, &cmd.shard_token, deadline)
            .instrument(span.clone())
            .await;
        obs.observe(Step::Posted(&report));
        span.record(attrs::DELIVERY_OUTCOME, report.delivery.as_str());
        span.record(attrs::ATTEMPTS, i64::from(report.attempts));
        report
    }

    /// Posts one response body of `kind`, retried per the control client's rules. Every
    /// post goes through here; its caller tells the post as a step (an `acked` one is in
    /// the books).
    pub(crate) async fn post(
        &self,
        kind: PostKind,
        body: Bytes,
        shard_token: &ShardToken,
        deadline: Option<Instant>,
    ) -> DeliveryReport {
        self.control
            .deliver(kind, body, shard_token, deadline, &self.hard_stop)
            .await
    }

    /// Answers a command that will never reach an MCP server, best effort, bounded by the
    /// cleanup timeout (its drop is counted where it is observed, as `reason` says).
    pub(crate) async fn not_executed(&self, cmd: &Command, reason: NotExecuted, obs: &Observer<'_>) {
        let report = self.refused(cmd, NOT_SENT_MESSAGE, 503, obs).await;
        if let Some(report) = report {
            obs.observe(Step::NotExecutedAnswered {
                reason,
                report: &report,
            });
        }
    }

    /// Answers a command the gateway will not carry, with `message` for a request (a
    /// notification or reply gets `notify_ack` with `code` and no payload), bounded by
    /// the cleanup timeout.
    pub(crate) async fn refused(
        &self,
        cmd: &Command,
        message: &'static str,
        code: u16,
        obs: &Observer<'_>,
    ) -> Option<DeliveryReport> {
        let (id, resp_type) = match &cmd.kind {
            CommandKind::JsonRpc(p) if p.expects_response() => (p.id(), RespType::JsonrpcResponse),
            CommandKind::JsonRpc(_) => (None, RespType::NotifyAck),
            CommandKind::SessionTermination => (None, RespType::SessionTerminationResponse),
            CommandKind::OAuthDiscovery => {
                return Some(self.discovery_failed(cmd, DiscoveryFailure::NotExecuted, obs).await);
            }
            // Only a request's caller waits for an answer.
            CommandKind::Unknown(u) => match u.request() {
                Some(p) => (p.id(), RespType::JsonrpcResponse),
                None => return None,
            },
        };
        let failure = TunnelFailure::new(FailureSource::ClientInternal, None, false, None);
        let resp_json = (resp_type == RespType::JsonrpcResponse).then(|| {
            obs.observe(Step::Told(message));
            synthesize_error(id, message, &failure)
        });
        let reply = error_reply(resp_json, code, resp_type);
        let deadline = Instant::now() + self.cleanup_timeout;
        Some(self.terminal(cmd, &reply, Some(deadline), obs).await)
    }

    /// Answers a command on a channel that serves nothing now (`harpoon` without a
    /// target) as upstream does: `400` and `-32603` "Bad Request: unsupported channel
    /// \"NAME\"" for a request and for a notification (then without an id, and as a
    /// `jsonrpc_response`), a bare `400` `session_termination_response`; never a
    /// `resp_headers`.
    pub(crate) async fn channel_unsupported(&self, cmd: &Command, obs: &Observer<'_>) {
        let channel = cmd.channel.as_str();
        let (resp_json, resp_type) = match &cmd.kind {
            CommandKind::JsonRpc(p) => {
                let message = format!("Bad Request: unsupported channel {channel:?}");
                obs.observe(Step::Told("unsupported channel"));
                let id: serde_json::Value = p
                    .id()
                    .and_then(|raw| serde_json::from_str(raw.get()).ok())
                    .unwrap_or(serde_json::Value::Null);
                let mut error = serde_json::json!({"jsonrpc": "2.0", "error": {"code": -32603, "message": message}});
                if p.id().is_some() {
                    error["id"] = id;
                }
                let raw = serde_json::value::to_raw_value(&error).expect("a JSON value serializes");
                (Some(raw), RespType::JsonrpcResponse)
            }
            CommandKind::SessionTermination => (None, RespType::SessionTerminationResponse),
            CommandKind::OAuthDiscovery | CommandKind::Unknown(_) => {
                self.discovery_failed(cmd, DiscoveryFailure::UnsupportedChannel, obs)
                    .await;
                return;
            }
        };
        let reply = Reply {
            resp_json,
            resp_headers: BTreeMap::new(),
            resp_code: 400,
            resp_type,
        };
        let deadline = Instant::now() + self.cleanup_timeout;
        self.terminal(cmd, &reply, Some(deadline), obs).await;
    }

    /// Answers an `oauth_discovery` that produced no document with its error, bounded by
    /// the cleanup timeout (nothing of it can have acted on an MCP server).
    pub(crate) async fn discovery_failed(
        &self,
        cmd: &Command,
        failure: DiscoveryFailure,
        obs: &Observer<'_>,
    ) -> DeliveryReport {
        let reply = discovery_failed_reply(cmd, failure);
        obs.observe(Step::Told(failure.message()));
        let deadline = Instant::now() + self.cleanup_timeout;
        self.terminal(cmd, &reply, Some(deadline), obs).await
    }

    /// A command that could not be decoded: dropped, and answered when it carries what a
    /// response needs, otherwise skipped. It has no observer: its steps are told as
    /// [`Aside`]s.
    pub(crate) async fn invalid(&self, invalid: InvalidCommand) {
        let answer_to = invalid.request_id.zip(invalid.shard_token);
        let malformed = Aside::Malformed {
            reason: invalid.reason.as_str(),
            answered: answer_to.is_some(),
        };
        observe_aside(&self.books, malformed);
        let Some((request_id, shard_token)) = answer_to else {
            return;
        };
        let failure = TunnelFailure::new(FailureSource::Protocol, Some("invalid_protocol_response"), false, None);
        let resp_json = synthesize_error(None, MALFORMED_MESSAGE, &failure);
        let reply = error_reply(Some(resp_json), 400, RespType::JsonrpcResponse);
        let deadline = Instant::now() + self.cleanup_timeout;
        let body = body(&request_id, &invalid.channel, &reply);
        let report = self.post(PostKind::Terminal, body, &shard_token, Some(deadline)).await;
        observe_aside(&self.books, Aside::MalformedAnswered(&report));
    }
}

/// The response body of `reply` for the command `request_id` on `channel`.
pub(crate) fn body(request_id: &RequestId, channel: &ChannelName, reply: &Reply) -> Bytes {
    timed_body(request_id, channel, reply, None)
}

/// [`body`], with the MCP server's answer timing (`resp_timing`) when given.
fn timed_body(request_id: &RequestId, channel: &ChannelName, reply: &Reply, timing: Option<RespTiming>) -> Bytes {
    ResponseBody {
        request_id,
        channel,
        resp_json: reply.resp_json.as_deref(),
        resp_headers: &reply.resp_headers,
        resp_code: reply.resp_code,
        resp_type: reply.resp_type,
        resp_timing: timing,
    }
    .to_bytes()
}

/// The `oauth_discovery_response` of a discovery that produced no document.
pub(crate) fn discovery_failed_reply(cmd: &Command, failure: DiscoveryFailure) -> Reply {
    error_reply(
        Some(discovery_error(failure, cmd.channel.as_str())),
        failure.resp_code(),
        RespType::OauthDiscoveryResponse,
    )
}

/// A synthesized answer: JSON when there is a payload, nothing otherwise.
fn error_reply(resp_json: Option<Box<serde_json::value::RawValue>>, code: u16, resp_type: RespType) -> Reply {
    let resp_headers = if resp_json.is_some() {
        json_resp_headers()
    } else {
        BTreeMap::new()
    };
    Reply {
        resp_json,
        resp_headers,
        resp_code: code,
        resp_type,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_answers_are_logged_under_this_modules_own_target() {
        assert_eq!(
            Some(super::super::observe::LOG_ANSWER),
            module_path!().strip_suffix("::tests")
        );
    }
}
