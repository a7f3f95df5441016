//! A caller's message through the child: a request multiplexed over the pipes under a
//! pipe id of the child's own, or a notification or client response written as is.
//!
//! Invariants:
//! - a request holds one of the channel's `max_concurrent` slots from before its write
//!   until its call ends; notifications and client responses take none;
//! - only the request's `id` (and `params._meta.progressToken`) is rewritten on the way
//!   in, and the caller's own id restored on the way out: every other byte passes
//!   unchanged; a request whose id or token cannot be located exactly is not sent;
//! - every write starts right after `Admission::begin_send()` succeeded, with no
//!   `.await` in between;
//! - a caller's `initialize` and `notifications/initialized` never reach a child whose
//!   session the gateway holds ([`super::session`] answers and ends them);
//! - a caller's cancel reaches only a request of the running child with the same caller
//!   key and that id, or nothing (acknowledged unwritten): it never starts a child.

use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::time::{timeout_at, Instant};

use tokio::sync::OwnedSemaphorePermit;

use super::child::{self, Child, Registration};
use super::pending::{CancelTarget, Origin};
use super::pipe::{wait_answer, Waited};
use super::session::Declared;
use super::{line, rewrite, Shared};
use crate::downstream::{DownstreamRequest, LegFailure, NotifySink, Reply};
use crate::protocol::{json_resp_headers, RespType, MCP_SESSION_ID};
use crate::strict::Admission;

impl Shared {
    /// A caller's message, within its own deadline and the channel's `request_timeout`.
    pub(super) async fn call(
        self: &Arc<Self>,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
    ) -> Result<(Reply, Option<Instant>), LegFailure> {
        let limit = self.limit(req.deadline);
        admission.recheck().map_err(|_| LegFailure::NotAdmitted)?;
        if req.payload.expects_response() {
            self.request(admission, req, notes, limit).await
        } else {
            Ok((self.message(admission, req, limit).await?, None))
        }
    }

    /// A request: a slot, a pipe id, the write, then its answer with the caller's id put
    /// back, and when its write began if the child answered it (`None`: the gateway did).
    async fn request(
        self: &Arc<Self>,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        limit: Instant,
    ) -> Result<(Reply, Option<Instant>), LegFailure> {
        let json = req.payload.raw().get();
        // A request whose id or token cannot be located exactly (a repeated member) is
        // not rewritten, so not sent.
        let spans = rewrite::request_spans(json).ok_or(LegFailure::InternalBeforeSend)?;
        let is_initialize = req.payload.method() == Some("initialize");
        if is_initialize && !self.lock().discovered {
            if let Some(reply) = self
                .answer_initialize(admission, json, &json[spans.id.clone()], limit)
                .await?
            {
                return Ok((reply, None));
            }
            // Discovered just now: a 2026-07-28 server answers `initialize` itself.
        }
        let caller = caller_key(req.headers);
        // A handshake caller that may be asked for input waits while a bridged call that
        // may ask is held, so that every server request has one caller it can belong to.
        let _asking = match Declared::of_session_id(caller.as_deref()).any() && self.parks() {
            true => Some(
                timeout_at(limit, self.asking.clone().read_owned())
                    .await
                    .map_err(|_| LegFailure::DeadlineBeforeSend)?,
            ),
            false => None,
        };
        let outgoing = Outgoing {
            json,
            spans: &spans,
            caller,
            is_initialize,
        };
        let mut sent = self.send(admission, outgoing, notes.clone(), limit).await?;
        match wait_answer(&sent.child, &mut sent.registration, limit).await {
            Waited::Response(answered) => Ok((answered_reply(answered)?, Some(sent.written_at))),
            Waited::Gone => Err(LegFailure::ChildExited),
            Waited::TimedOut => {
                self.retire_timed_out(&sent.child, is_initialize);
                Err(LegFailure::TimeoutAfterWrite)
            }
        }
    }

    /// Writes a request under a pipe id of the child's own (and its progress token the
    /// same number), once a slot and an open session are had; returns what waits for its
    /// answer.
    pub(super) async fn send(
        self: &Arc<Self>,
        admission: &Admission,
        outgoing: Outgoing<'_>,
        notes: NotifySink,
        limit: Instant,
    ) -> Result<Sent, LegFailure> {
        let Outgoing {
            json,
            spans,
            caller,
            is_initialize,
        } = outgoing;
        let origin = Origin {
            id: json[spans.id.clone()].into(),
            token: spans.progress_token.as_ref().map(|t| json[t.clone()].into()),
            caller,
        };
        // cancel-safe: waiting for a permit takes nothing until it resolves.
        let slot = match timeout_at(limit, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(LegFailure::InternalBeforeSend),
            Err(_) => return Err(LegFailure::DeadlineBeforeSend),
        };
        let (child, _) = self.ensure_open(admission, limit).await?;
        let ticket = child.mint();
        let pipe_id = ticket.id().to_string();
        let mut edits = vec![(spans.id.clone(), pipe_id.as_str())];
        if let Some(token) = spans.progress_token.clone() {
            edits.push((token, pipe_id.as_str()));
        }
        let line = line::frame(&rewrite::splice(json, &mut edits));

        let mut writer = self.writer_for(&child, limit).await?;
        let mut registration = child
            .enter(ticket, origin, notes)
            .map_err(|_| LegFailure::ChildNotRunning)?;
        // Recheck, mark the request sent and start the write with no `.await` between.
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        let written_at = Instant::now();
        writer.start(&child, line).ok_or(LegFailure::ChildNotRunning)?;
        registration.mark_written();
        self.finish_write(&child, &mut writer, limit, is_initialize).await?;
        drop(writer);
        Ok(Sent {
            child,
            registration,
            written_at,
            _slot: slot,
        })
    }

    /// One request of the gateway's own (`json`, its id a pipe id like any other's): the
    /// child's answer, and the generation of the child that gave it.
    pub(super) async fn own_request(
        self: &Arc<Self>,
        admission: &Admission,
        json: &str,
        limit: Instant,
    ) -> Result<(u64, Box<RawValue>), LegFailure> {
        let spans = rewrite::request_spans(json).ok_or(LegFailure::InternalBeforeSend)?;
        let (nobody, _) = tokio::sync::mpsc::channel(1);
        let outgoing = Outgoing {
            json,
            spans: &spans,
            caller: None,
            is_initialize: false,
        };
        let mut sent = self.send(admission, outgoing, nobody, limit).await?;
        match wait_answer(&sent.child, &mut sent.registration, limit).await {
            Waited::Response((raw, _, _)) => Ok((sent.child.generation, raw)),
            Waited::Gone => Err(LegFailure::ChildExited),
            Waited::TimedOut => Err(LegFailure::TimeoutAfterWrite),
        }
    }

    /// A notification or a client response: written as is (a caller's cancel with the
    /// pipe id of the request it names), acknowledged `200` once written.
    async fn message(
        self: &Arc<Self>,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        limit: Instant,
    ) -> Result<Reply, LegFailure> {
        let json = req.payload.raw().get();
        if req.payload.method() == Some("notifications/initialized") && !self.lock().discovered {
            // The gateway ended the child's handshake itself; a caller's ends nothing.
            admission.recheck().map_err(|_| LegFailure::NotAdmitted)?;
            return Ok(Reply::acknowledged());
        }
        let cancel = match req.payload.method() {
            Some("notifications/cancelled") => {
                rewrite::cancelled_request_span(json).map_err(|_| LegFailure::InternalBeforeSend)?
            }
            _ => None,
        };
        let (child, line) = match cancel {
            None => (self.ensure_open(admission, limit).await?.0, line::frame(json)),
            // A cancel names a request of the running child, or nothing: it never starts one.
            Some(span) => {
                let Some(child) = self.running_child() else {
                    return Ok(not_forwarded(&self.channel, "no child is running"));
                };
                let pipe = match child.cancel_target(&json[span.clone()], caller_key(req.headers).as_deref()) {
                    CancelTarget::One(pipe) => pipe.to_string(),
                    CancelTarget::Nothing => {
                        return Ok(not_forwarded(&self.channel, "no request of this caller with that id"))
                    }
                    CancelTarget::Ambiguous => {
                        return Ok(not_forwarded(
                            &self.channel,
                            "several requests of this caller have that id",
                        ))
                    }
                };
                let line = line::frame(&rewrite::splice(json, &mut [(span, pipe.as_str())]));
                (child, line)
            }
        };
        let mut writer = self.writer_for(&child, limit).await?;
        // Recheck, mark the message sent and start the write with no `.await` between.
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        writer.start(&child, line).ok_or(LegFailure::ChildNotRunning)?;
        self.finish_write(&child, &mut writer, limit, false).await?;
        Ok(Reply::acknowledged())
    }
}

/// A request to write: its text, where its id and token are, and who sent it.
pub(super) struct Outgoing<'a> {
    pub(super) json: &'a str,
    pub(super) spans: &'a rewrite::RequestSpans,
    /// The caller key (whose declared capabilities decide which server requests it
    /// receives, and whose cancels reach it).
    pub(super) caller: Option<Box<str>>,
    /// A caller's `initialize` passed through to a discovered child: a write cut by its
    /// deadline ends the child (its session would be in an unknown state).
    pub(super) is_initialize: bool,
}

/// A request written to the child, awaiting its answer: it keeps its slot until dropped,
/// and dropping it before the answer retires the request.
pub(super) struct Sent {
    pub(super) child: Arc<Child>,
    pub(super) registration: Registration,
    /// Just before the request's write began.
    pub(super) written_at: Instant,
    _slot: OwnedSemaphorePermit,
}

/// The child's answer as the caller's reply (its own id put back).
pub(super) fn answered_reply((raw, span, original): child::Answered) -> Result<Reply, LegFailure> {
    reply_with_id(raw, span, &original)
}

/// The child's answer as the reply to the caller request with JSON id `id` (a held
/// call's final answer goes to the retry that continued it, under the retry's id).
pub(super) fn reply_with_id(raw: Box<RawValue>, span: rewrite::Span, id: &str) -> Result<Reply, LegFailure> {
    Ok(Reply {
        resp_json: Some(restore_id(raw, span, id)?),
        resp_headers: json_resp_headers(),
        resp_code: 200,
        resp_type: RespType::JsonrpcResponse,
    })
}

/// The child's answer with the caller's own id where the pipe id was; every other byte
/// as the child printed it.
fn restore_id(raw: Box<RawValue>, span: rewrite::Span, original: &str) -> Result<Box<RawValue>, LegFailure> {
    if raw.get().get(span.clone()) == Some(original) {
        return Ok(raw);
    }
    let restored = rewrite::splice(raw.get(), &mut [(span, original)]);
    // A JSON value spliced in for a JSON value: still valid; checked all the same.
    RawValue::from_string(restored).map_err(|_| LegFailure::InternalAfterWrite)
}

/// Who sent a command, as far as the gateway can tell: its `Mcp-Session-Id` (a cancel
/// reaches only requests with the same key; commands without one share the `None` key).
pub(super) fn caller_key(headers: &crate::protocol::WireHeaders) -> Option<Box<str>> {
    let mut values = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(MCP_SESSION_ID))
        .flat_map(|(_, values)| values.iter().map(String::as_str))
        .peekable();
    values.peek()?;
    Some(values.collect::<Vec<_>>().join("\n").into())
}

/// A cancel that names no request of the child it would go to: acknowledged without
/// writing it (there is nothing for it to cancel, and no other request may be hit).
fn not_forwarded(channel: &str, why: &'static str) -> Reply {
    tracing::debug!(channel, reason = why, "cancel not forwarded to the stdio child");
    Reply::acknowledged()
}
