//! The era bridge the other way on a stdio channel: a handshake-era caller served by a
//! 2026-07-28 child (one that refused the gateway's `initialize`, or is configured
//! `era = "modern"`); [`crate::downstream::era::up`] decides, this room does it.
//!
//! Invariants:
//! - the caller's `initialize` never reaches the child: it is answered from the child's
//!   `server/discover`, asked once per child life under the command's admission;
//! - every forwarded request is written through the channel's one request path, stamped
//!   with the envelope (the capabilities the caller's session id records);
//! - an `input_required` answer becomes real requests to the caller, over the path the
//!   caller's replies already take (a notification of the call, the reply a command of
//!   its own); the call is then retried with the answers and the server's `requestState`
//!   byte for byte, a new request of the same call, as 2026-07-28 servers are written to
//!   be re-entered; at most `input_required.max_rounds` rounds, each within the command's
//!   own bound;
//! - a caller's reply to such a request is taken by [`crate::downstream::era::ask`] and
//!   never written to the child.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::call::caller_key;
use super::session::Declared;
use super::{Shared, StdioTransport};
use crate::downstream::era::up::{self, UpPlan};
use crate::downstream::{DownstreamRequest, LegFailure, LegResult, NotifySink, Reply};
use crate::protocol::RespType;
use crate::strict::Admission;

impl StdioTransport {
    /// A handshake-era caller's message on a channel whose child is of 2026-07-28, as
    /// `plan` says (not [`UpPlan::PassThrough`]).
    pub(super) async fn up_bridged(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        plan: UpPlan,
    ) -> LegResult {
        let shared = &self.shared;
        let id = req.payload.id();
        if admission.recheck().is_err() {
            let resp_type = if id.is_some() {
                RespType::JsonrpcResponse
            } else {
                RespType::NotifyAck
            };
            return LegResult::failed(LegFailure::NotAdmitted, id, resp_type);
        }
        let limit = shared.limit(req.deadline);
        let result = match plan {
            UpPlan::PassThrough => return self.plain_call(admission, req, notes).await,
            UpPlan::Ack => Ok(Reply::acknowledged()),
            UpPlan::Local(reply) => Ok(reply),
            UpPlan::Initialize => {
                crate::downstream::era::Step::InitializeAnswered.trace();
                shared.up_initialize(admission, req, limit).await
            }
            UpPlan::Stamp => {
                crate::downstream::era::Step::Stamped.trace();
                self.up_call(admission, req, notes, limit).await
            }
        };
        match result {
            Ok(reply) => LegResult::answered(reply),
            Err(failure) => LegResult::failed(failure, id, RespType::JsonrpcResponse),
        }
    }

    /// A request stamped with the envelope, and each `input_required` round it gets
    /// asked of the caller and retried ([`crate::downstream::era::ask::Waiters::rounds`]).
    async fn up_call(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        limit: Instant,
    ) -> Result<Reply, LegFailure> {
        let shared = &self.shared;
        let declared = Declared::of_session_id(caller_key(req.headers).as_deref());
        let send = |stamped: crate::protocol::JsonRpcPayload| async move {
            let stamped_req = DownstreamRequest {
                payload: &stamped,
                headers: req.headers,
                deadline: req.deadline,
            };
            self.plain_call(admission, &stamped_req, notes).await
        };
        let max_rounds = shared.settings.input_required.max_rounds;
        shared
            .up_waiters
            .rounds(req.payload, declared, (notes, limit), max_rounds, send)
            .await
    }
}

impl Shared {
    /// A handshake-era caller's `initialize`, answered from the child's `server/discover`
    /// (asked once per child life), with a session id of the gateway's that records what
    /// the caller declared.
    async fn up_initialize(
        self: &Arc<Self>,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        limit: Instant,
    ) -> Result<Reply, LegFailure> {
        let id = req.payload.id().ok_or(LegFailure::InternalBeforeSend)?;
        let discover = self.discover(admission, limit).await?;
        Ok(up::initialize_answer(id, req.payload.raw().get(), &discover))
    }

    /// The running child's `DiscoverResult`, asked of it once per child life.
    async fn discover(
        self: &Arc<Self>,
        admission: &Admission,
        limit: Instant,
    ) -> Result<Arc<Map<String, Value>>, LegFailure> {
        let (child, _) = self.ensure_open(admission, limit).await?;
        if let Some((generation, found)) = &self.lock().discovery {
            if *generation == child.generation {
                return Ok(found.clone());
            }
        }
        let (generation, answer) = self
            .own_request(admission, &up::discover_request(), limit)
            .await
            .map_err(|failure| match failure {
                LegFailure::ChildExited | LegFailure::TimeoutAfterWrite => LegFailure::SessionNotOpen,
                other => other,
            })?;
        let found = up::discover_result(answer.get()).ok_or(LegFailure::SessionNotOpen)?;
        let found = Arc::new(found);
        self.lock().discovery = Some((generation, found.clone()));
        Ok(found)
    }
}
