//! The era bridge on a stdio channel: a 2026-07-28 caller's request served by the
//! handshake-era child whose session the gateway owns ([`crate::downstream::era`] decides
//! what to do; this room does it on the pipes).
//!
//! Invariants:
//! - a request answered or refused by the bridge writes nothing to the child (but the
//!   gateway's own handshake, when `server/discover` finds the child down: the session
//!   it answers from is opened first, under the command's admission, as for a caller's
//!   `initialize`);
//! - a forwarded request is written once, through the channel's one request path, so
//!   every rule of that path (slots, pipe ids, the fence, retirement) holds for it;
//! - when the child turns out to have no handshake (a 2026-07-28 server), the caller's
//!   request passes untouched, as on any pass-through channel;
//! - the notifications a forwarded request receives reach the caller in the order the
//!   child printed them, all before its final answer; `notifications/message` only at
//!   or above the level the request asked for.

use tokio::sync::mpsc;

use super::held::HeldRequest;
use super::session::Declared;
use super::StdioTransport;
use crate::downstream::era::{self, Forward, LogFilter, Mrtr, Plan, SessionView};
use crate::downstream::{DownstreamRequest, LegFailure, LegResult, Notification, NotifySink};
use crate::protocol::RespType;
use crate::strict::Admission;
use crate::telemetry::EraHandling;

impl StdioTransport {
    /// A caller's request as `plan` says, on a channel whose child may hold a legacy
    /// session.
    pub(super) async fn bridged(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        plan: Plan,
    ) -> LegResult {
        let shared = &self.shared;
        let id = req.payload.id();
        let count = |handling| shared.metrics.era_request(&shared.channel, handling);
        if matches!(plan, Plan::PassThrough) {
            return self.plain_call(admission, req, notes).await;
        }
        let limit = shared.limit(req.deadline);
        if admission.recheck().is_err() {
            return LegResult::failed(LegFailure::NotAdmitted, id, RespType::JsonrpcResponse);
        }
        // The server's era first: a 2026-07-28 server is the judge of its callers' requests.
        let (child, session) = match shared.ensure_open(admission, limit).await {
            Ok(open) => open,
            Err(failure) => return LegResult::failed(failure, id, RespType::JsonrpcResponse),
        };
        let Some(session) = session else {
            count(EraHandling::PassedThrough);
            return self.plain_call(admission, req, notes).await;
        };
        let forward = match plan {
            Plan::PassThrough => None,
            Plan::Local(local) => {
                era::Step::AnsweredLocally.trace();
                count(local.handling());
                return LegResult::answered(local.reply);
            }
            Plan::Discover => None,
            Plan::Forward(forward) => Some(forward),
            Plan::Listen(wants) => {
                era::Step::Forwarded.trace();
                count(EraHandling::Forwarded);
                return self.listen(admission, req, notes, wants, (child, &session)).await;
            }
        };
        match (forward, id) {
            (Some(forward), _) => {
                era::Step::Forwarded.trace();
                count(EraHandling::Forwarded);
                let mut leg = match &forward.mrtr {
                    Some(mrtr) if mrtr.continuation.is_some() || self.holds(mrtr) => {
                        self.held(admission, req, notes, &forward, mrtr, limit).await
                    }
                    _ => self.forward(admission, req, notes, &forward).await,
                };
                leg.reply = era::shape_reply(leg.reply, &forward.shape, session.server_info());
                leg
            }
            (None, Some(id)) => {
                era::Step::DiscoverAnswered.trace();
                count(EraHandling::AnsweredLocally);
                LegResult::answered(era::discover_reply(
                    id,
                    &SessionView {
                        result: session.result(),
                        carries_listen: shared.settings.input_required.parks,
                    },
                ))
            }
            // A plan is made for requests only: they have ids.
            (None, None) => LegResult::failed(LegFailure::InternalBeforeSend, None, RespType::JsonrpcResponse),
        }
    }

    /// Whether a call is held across input rounds: parking is on, and its caller declared
    /// something the server may ask it for.
    fn holds(&self, mrtr: &Mrtr) -> bool {
        self.shared.parks() && Declared::of_capabilities(Some(&mrtr.capabilities)).any()
    }

    /// A call that may ask (its start), or a caller's retry of one (its continuation).
    async fn held(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        forward: &Forward,
        mrtr: &Mrtr,
        limit: tokio::time::Instant,
    ) -> LegResult {
        let call = HeldRequest {
            json: forward.payload.raw().get(),
            mrtr,
            notes,
            filter: LogFilter(forward.shape.log_level),
            limit,
        };
        let result = match &mrtr.continuation {
            Some(continuation) => {
                era::Step::Continued.trace();
                self.shared.continue_held(admission, call, continuation).await
            }
            None => {
                era::Step::Held.trace();
                self.shared.start_held(admission, call).await
            }
        };
        match result {
            Ok(reply) => LegResult::answered(reply),
            Err(failure) => LegResult::failed(failure, req.payload.id(), RespType::JsonrpcResponse),
        }
    }

    /// The stripped request through the channel's request path, its notifications
    /// filtered on their way to `notes`.
    async fn forward(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        forward: &Forward,
    ) -> LegResult {
        let inner = DownstreamRequest {
            payload: &forward.payload,
            headers: req.headers,
            deadline: req.deadline,
        };
        let (relay, relayed) = mpsc::channel::<Notification>(era::RELAY_BOUND);
        let call = self.plain_call(admission, &inner, &relay);
        era::relay(call, relayed, notes, LogFilter(forward.shape.log_level), None).await
    }
}
