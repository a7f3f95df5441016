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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};

use super::call::{caller_key, reply_with_id, Outgoing};
use super::pipe::{wait_answer, Waited};
use super::session::Declared;
use super::{rewrite, Shared, StdioTransport};
use crate::downstream::era::up::{self, UpPlan};
use crate::downstream::{DownstreamRequest, LegFailure, LegResult, NotifySink, Reply};
use crate::protocol::{json_resp_headers, RespType};
use crate::strict::Admission;

/// The pause before a round the server answered with a `requestState` alone.
const STATE_ONLY_PAUSE: Duration = Duration::from_millis(50);

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
            UpPlan::Ack => Ok(acknowledged()),
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
    /// asked of the caller and retried.
    async fn up_call(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        limit: Instant,
    ) -> Result<Reply, LegFailure> {
        let shared = &self.shared;
        let id = req.payload.id().ok_or(LegFailure::InternalBeforeSend)?;
        let method = req.payload.method().unwrap_or_default().to_owned();
        let declared = Declared::of_session_id(caller_key(req.headers).as_deref());
        let capabilities = declared.capabilities();
        let mut retry: Option<(Value, Value)> = None;
        let mut rounds = 0;
        loop {
            let stamped = up::stamp(req.payload, &capabilities, retry.as_ref().map(|(r, s)| (r, s)))
                .ok_or(LegFailure::InternalBeforeSend)?;
            let leg = self
                .plain_call(
                    admission,
                    &DownstreamRequest {
                        payload: &stamped,
                        headers: req.headers,
                        deadline: req.deadline,
                    },
                    notes,
                )
                .await;
            if let Some(failure) = leg.failure {
                return Err(failure);
            }
            let Some(round) = leg
                .reply
                .resp_json
                .as_deref()
                .and_then(|raw| up::input_required(raw.get()))
            else {
                return Ok(up::unshape(leg.reply));
            };
            rounds += 1;
            if rounds > shared.settings.input_required.max_rounds {
                return Ok(up::round_failed(id, &method, "the MCP server asked for input more times than the gateway allows for one call; the call ended without a result"));
            }
            let state = round.request_state.clone().unwrap_or(Value::Null);
            if round.requests.is_empty() {
                sleep(STATE_ONLY_PAUSE).await;
                retry = Some((json!({}), state));
                continue;
            }
            match shared.up_waiters.ask(&round.requests, declared, notes, limit).await {
                Ok(responses) => retry = Some((Value::Object(responses), state)),
                Err(why) => return Ok(up::round_failed(id, &method, &why)),
            }
        }
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
        let Some(mut reply) = up::initialize_answer(id, req.payload.raw().get(), &discover) else {
            return Ok(invalid_initialize(id));
        };
        let declared = Declared::of_capabilities(
            serde_json::from_str::<Value>(req.payload.raw().get())
                .ok()
                .and_then(|v| v.pointer("/params/capabilities").cloned())
                .as_ref(),
        );
        let session = declared.mint_session_id(&crate::protocol::random_hex(16));
        reply
            .resp_headers
            .insert(crate::protocol::MCP_SESSION_ID.to_owned(), vec![session]);
        Ok(reply)
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
        let json = up::discover_request();
        let spans = rewrite::request_spans(&json).ok_or(LegFailure::InternalBeforeSend)?;
        let (nobody, _) = mpsc::channel(1);
        let outgoing = Outgoing {
            json: &json,
            spans: &spans,
            caller: None,
            is_initialize: false,
        };
        let mut sent = self.send(admission, outgoing, nobody, limit).await?;
        let answer = match wait_answer(&sent.child, &mut sent.registration, limit).await {
            Waited::Response((raw, span, _)) => reply_with_id(raw, span, "0")?,
            Waited::Gone => return Err(LegFailure::SessionNotOpen),
            Waited::TimedOut => return Err(LegFailure::SessionNotOpen),
        };
        let found = answer
            .resp_json
            .as_deref()
            .and_then(|raw| up::discover_result(raw.get()))
            .ok_or(LegFailure::SessionNotOpen)?;
        let found = Arc::new(found);
        self.lock().discovery = Some((sent.child.generation, found.clone()));
        Ok(found)
    }
}

/// The answer to an `initialize` without `params.protocolVersion`: what a server answers
/// bad parameters with.
fn invalid_initialize(id: &RawValue) -> Reply {
    let text = format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32602,"message":"Invalid params: initialize needs params.protocolVersion (a string)"}}}}"#,
        id.get()
    );
    Reply {
        resp_json: Some(RawValue::from_string(text).expect("JSON")),
        resp_headers: json_resp_headers(),
        resp_code: 200,
        resp_type: RespType::JsonrpcResponse,
    }
}

/// A message acknowledged without being written.
fn acknowledged() -> Reply {
    Reply {
        resp_json: None,
        resp_headers: BTreeMap::new(),
        resp_code: 202,
        resp_type: RespType::NotifyAck,
    }
}
