//! The era bridge on an HTTP channel: a 2026-07-28 caller's request reaches a
//! handshake-era Streamable HTTP server through one MCP session the gateway opens and
//! owns ([`crate::downstream::era`] decides what to do; this room does it over HTTP).
//!
//! Invariants:
//! - the server's era is learned safely and once per session: first a `server/discover`
//!   with the 2026-07-28 envelope (a handshake-era HTTP server refuses it with a `4xx`
//!   and runs nothing; a 2026-07-28 one answers it), then, for a handshake-era server,
//!   the gateway's own `initialize` and `notifications/initialized`; an inconclusive
//!   probe (no answer, `401`/`403`, `5xx`, a network failure) is never cached;
//! - every step is a request of the command that needed it, under its admission, through
//!   the channel's one request path (the fence, the egress client, the bounds);
//! - a bridged request carries the owned session's `Mcp-Session-Id` and revision instead
//!   of the caller's 2026-07-28 headers, is sent once, and is never re-sent: a server
//!   that has lost the session gets a new one for later requests only;
//! - handshake-era callers on the same channel keep their own sessions, untouched.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::held::{EraEvent, HeldRequest};
use super::session::{session_headers, OwnedSession};
use super::HttpTransport;
use crate::downstream::era::{self, EraSetting, LogFilter, Plan, ServerEra, SessionView};
use crate::downstream::identity;
use crate::downstream::{DownstreamRequest, LegFailure, LegOutcome, LegResult, Notification, NotifySink};
use crate::protocol::{JsonRpcPayload, McpRevision, RespType, WireHeaders, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::strict::Admission;
use crate::telemetry::EraHandling;

/// What the channel knows of its server's era.
#[derive(Debug, Default)]
pub(super) enum Verdict {
    /// Nothing yet (or the session was lost): the next request that needs it probes.
    #[default]
    Unknown,
    /// A handshake-era server, and the gateway's own session once one is open.
    Legacy(Option<Arc<OwnedSession>>),
    /// A 2026-07-28 server, and its `DiscoverResult` once one was read.
    Modern(Option<Arc<Map<String, Value>>>),
}

/// What the era probe found.
enum Probe {
    Legacy,
    Modern(Option<Map<String, Value>>),
}

impl HttpTransport {
    /// Whether a caller message is bridged on this channel, and how.
    pub(super) fn plan(&self, req: &DownstreamRequest<'_>) -> Plan {
        match self.inner.era {
            EraSetting::Modern => Plan::PassThrough,
            EraSetting::Auto | EraSetting::Legacy => era::plan(req.payload, req.headers),
        }
    }

    /// A 2026-07-28 caller's request as `plan` says (not [`Plan::PassThrough`]).
    pub(super) async fn bridged(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        plan: Plan,
    ) -> LegResult {
        let id = req.payload.id();
        if matches!(plan, Plan::PassThrough) {
            return self.call_plain(admission, req, notes).await;
        }
        if admission.recheck().is_err() {
            return LegResult::failed(LegFailure::NotAdmitted, id, RespType::JsonrpcResponse);
        }
        // The server's era first: a 2026-07-28 server is the judge of its callers' requests.
        let session = match self.owned_session(admission, req.deadline).await {
            Ok(Some(session)) => session,
            Ok(None) => return self.call_plain(admission, req, notes).await,
            Err(failure) => return LegResult::failed(failure, id, RespType::JsonrpcResponse),
        };
        let count = |handling| self.observe(EraEvent::Request(handling));
        let forward = match plan {
            Plan::PassThrough | Plan::Discover => None,
            Plan::Listen(wants) if self.inner.holding.parks() => {
                era::Step::Forwarded.trace();
                count(EraHandling::Forwarded);
                return self.listen(admission, req, notes, wants, &session).await;
            }
            // Carried only where the session's standalone stream is read (default mode).
            Plan::Listen(_) => {
                era::Step::AnsweredLocally.trace();
                count(EraHandling::AnsweredLocally);
                return LegResult::answered(era::listen_not_carried(id.expect("listen is a request")));
            }
            Plan::Local(local) => {
                era::Step::AnsweredLocally.trace();
                count(local.handling());
                return LegResult::answered(local.reply);
            }
            Plan::Forward(forward) => Some(forward),
        };
        match (forward, id) {
            (None, Some(id)) => {
                count(EraHandling::AnsweredLocally);
                LegResult::answered(era::discover_reply_traced(
                    id,
                    &SessionView {
                        result: &session.result,
                        carries_listen: self.inner.holding.parks(),
                    },
                ))
            }
            (Some(forward), Some(id)) => {
                era::Step::Forwarded.trace();
                count(EraHandling::Forwarded);
                self.forwarded(admission, req, notes, (&forward, id), &session).await
            }
            (_, None) => LegResult::failed(LegFailure::InternalBeforeSend, None, RespType::JsonrpcResponse),
        }
    }

    /// A 2026-07-28 caller's request `forward` (of JSON-RPC id `id`) in the owned
    /// `session`: held across input rounds when it may ask (or continues a held one),
    /// else relayed; its answer shaped for the caller, or a lost session told.
    async fn forwarded(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        (forward, id): (&era::Forward, &serde_json::value::RawValue),
        session: &Arc<OwnedSession>,
    ) -> LegResult {
        let headers = session_headers(req.headers, session);
        let mut leg = match &forward.mrtr {
            Some(mrtr) if mrtr.continuation.is_some() || self.holds(mrtr) => {
                let call = HeldRequest {
                    forward,
                    mrtr,
                    session,
                    headers: &headers,
                    notes,
                    limit: self.leg_deadline(req.deadline),
                    caller_id: id,
                };
                self.held(admission, call).await
            }
            _ => {
                let inner = DownstreamRequest {
                    payload: &forward.payload,
                    headers: &headers,
                    deadline: req.deadline,
                };
                let filter = LogFilter(forward.shape.log_level);
                self.relayed(admission, &inner, notes, filter).await
            }
        };
        if let Some(status) = session_lost(&leg) {
            self.lose_session(session);
            return LegResult::answered(era::session_lost_reply(id, status));
        }
        leg.reply = era::shape_reply(leg.reply, &forward.shape, session.result.get("serverInfo"));
        leg
    }

    /// `/status`: the configured era and what the channel knows of its server's.
    pub(super) fn era_status(&self) -> (EraSetting, Option<ServerEra>) {
        let era = match &*super::lock(&self.inner.verdict) {
            Verdict::Unknown => None,
            Verdict::Legacy(_) => Some(ServerEra::Legacy),
            Verdict::Modern(_) => Some(ServerEra::Modern),
        };
        (self.inner.era, era)
    }

    /// The owned session with a handshake-era server (`None`: the server is of 2026-07-28),
    /// probing and opening it first if none is known. One handshake at a time.
    async fn owned_session(
        &self,
        admission: &Admission,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<Arc<OwnedSession>>, LegFailure> {
        if let Verdict::Legacy(Some(session)) = &*super::lock(&self.inner.verdict) {
            return Ok(Some(session.clone()));
        }
        // cancel-safe: waiting for a lock takes nothing until it resolves.
        let _opening = self.inner.opening.lock().await;
        if self.known_era(admission, deadline).await? == ServerEra::Modern {
            return Ok(None);
        }
        if let Verdict::Legacy(Some(session)) = &*super::lock(&self.inner.verdict) {
            return Ok(Some(session.clone()));
        }
        let session = Arc::new(self.open_session(admission, deadline).await?);
        *super::lock(&self.inner.verdict) = Verdict::Legacy(Some(session.clone()));
        if self.inner.holding.parks() {
            self.set_affine(true);
        }
        self.open_standalone(&session);
        Ok(Some(session))
    }

    /// A 2026-07-28-only server's `DiscoverResult`, when the channel knows its server is
    /// one (configured `modern`, or found so), asking for it once if it was not read yet.
    /// `None` for a handshake-era server, a server that also speaks the handshake era (its
    /// `supportedVersions` name one), or an era not known yet.
    pub(super) async fn modern_only(
        &self,
        admission: &Admission,
        deadline: Option<tokio::time::Instant>,
    ) -> Option<Arc<Map<String, Value>>> {
        let known = match &*super::lock(&self.inner.verdict) {
            Verdict::Modern(Some(found)) => Some(found.clone()),
            Verdict::Modern(None) => None,
            Verdict::Unknown if self.inner.era == EraSetting::Modern => None,
            Verdict::Unknown | Verdict::Legacy(_) => return None,
        };
        let found = match known {
            Some(found) => found,
            None => {
                // cancel-safe: waiting for a lock takes nothing until it resolves.
                let _opening = self.inner.opening.lock().await;
                let Ok(Probe::Modern(Some(found))) = self.era_probe(admission, deadline).await else {
                    return None;
                };
                let found = Arc::new(found);
                *super::lock(&self.inner.verdict) = Verdict::Modern(Some(found.clone()));
                found
            }
        };
        let only = !era::up::speaks_handshake(&found);
        if only {
            // Handshake-era callers are bridged: their answers come back to this process.
            self.set_affine(true);
        }
        only.then_some(found)
    }

    /// A handshake-era caller's `initialize` was refused as a 2026-07-28-only server
    /// refuses it: the server is of 2026-07-28.
    pub(super) fn found_modern(&self) {
        let mut verdict = super::lock(&self.inner.verdict);
        if matches!(&*verdict, Verdict::Unknown | Verdict::Legacy(None)) {
            tracing::info!(channel = %self.inner.channel, "the MCP server refused a caller's initialize as a 2026-07-28 server does: handshake-era callers are bridged to it");
            *verdict = Verdict::Modern(None);
        }
    }

    /// The server's era: configured, known, or probed now (with `opening` held).
    async fn known_era(
        &self,
        admission: &Admission,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<ServerEra, LegFailure> {
        match &*super::lock(&self.inner.verdict) {
            Verdict::Legacy(_) => return Ok(ServerEra::Legacy),
            Verdict::Modern(_) => return Ok(ServerEra::Modern),
            Verdict::Unknown => {}
        }
        let verdict = match self.inner.era {
            EraSetting::Legacy => Verdict::Legacy(None),
            EraSetting::Modern => Verdict::Modern(None),
            EraSetting::Auto => match self.era_probe(admission, deadline).await? {
                Probe::Legacy => Verdict::Legacy(None),
                Probe::Modern(found) => {
                    tracing::info!(channel = %self.inner.channel, "the MCP server answered server/discover: it is of 2026-07-28 (its 2026-07-28 callers pass through, handshake-era callers are bridged)");
                    Verdict::Modern(found.map(Arc::new))
                }
            },
        };
        let era = match verdict {
            Verdict::Modern(_) => ServerEra::Modern,
            Verdict::Legacy(_) | Verdict::Unknown => ServerEra::Legacy,
        };
        *super::lock(&self.inner.verdict) = verdict;
        Ok(era)
    }

    /// `server/discover` with the envelope: a 2026-07-28 server answers it (or refuses it
    /// naming 2026-07-28), a handshake-era one refuses it with a `4xx` or answers without
    /// naming 2026-07-28; an inconclusive answer is an error (not sent, for the command:
    /// nothing of its own was).
    async fn era_probe(
        &self,
        admission: &Admission,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Probe, LegFailure> {
        let probe = json!({"jsonrpc": "2.0", "id": "tunnelgate-era-probe", "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": McpRevision::V2026_07_28.as_str(),
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "tunnelgate", "version": env!("CARGO_PKG_VERSION")},
        }}});
        let headers: WireHeaders = vec![
            (
                MCP_PROTOCOL_VERSION.to_owned(),
                vec![McpRevision::V2026_07_28.as_str().to_owned()],
            ),
            ("Mcp-Method".to_owned(), vec!["server/discover".to_owned()]),
        ];
        let leg = self.own_request(admission, &probe, &headers, deadline).await;
        match (&leg.failure, leg.reply.resp_json.as_deref()) {
            (None, Some(raw)) if era::names_modern_revision(raw.get()) => {
                Ok(Probe::Modern(era::up::discover_result(raw.get())))
            }
            (None, Some(_)) | (Some(LegFailure::HttpStatus(400 | 404 | 405 | 406 | 415)), _) => Ok(Probe::Legacy),
            (Some(failure), _) => {
                tracing::warn!(channel = %self.inner.channel, reason = failure.kind(), "the era probe (server/discover) of the MCP server got no usable answer; nothing is concluded and the next request that needs it probes again");
                // Not reached at all (connect, TLS, proxy): say so; anything else is a
                // step of the gateway's whose request did not leave for this command.
                Err(match failure.outcome() {
                    LegOutcome::NotSent => failure.clone(),
                    LegOutcome::Answered | LegOutcome::Abandoned => LegFailure::SessionNotOpen,
                })
            }
            (None, None) => Err(LegFailure::SessionNotOpen),
        }
    }

    /// The gateway's `initialize` and `notifications/initialized`: the session it keeps.
    async fn open_session(
        &self,
        admission: &Admission,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<OwnedSession, LegFailure> {
        let init = json!({"jsonrpc": "2.0", "id": "tunnelgate-initialize", "method": "initialize", "params": {
            "protocolVersion": McpRevision::LATEST_WITH_INITIALIZE.as_str(),
            "capabilities": self.owned_capabilities(),
            "clientInfo": {"name": "tunnelgate", "version": env!("CARGO_PKG_VERSION")},
        }});
        let leg = self.own_request(admission, &init, &Vec::new(), deadline).await;
        let result = match (&leg.failure, leg.reply.resp_json.as_deref()) {
            (None, Some(raw)) => era::initialize_result(raw.get()),
            (Some(failure), _) if failure.outcome() == LegOutcome::Abandoned => {
                tracing::warn!(channel = %self.inner.channel, reason = failure.kind(), "the gateway's initialize to the MCP server got no answer");
                return Err(LegFailure::InitializeAbandoned);
            }
            _ => None,
        };
        let Some(result) = result else {
            tracing::warn!(channel = %self.inner.channel, "the MCP server refused the gateway's initialize or answered it with no InitializeResult; 2026-07-28 callers cannot be bridged to it");
            return Err(LegFailure::SessionNotOpen);
        };
        let protocol_version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(McpRevision::LATEST_WITH_INITIALIZE.as_str())
            .to_owned();
        let id = header(&leg.reply.resp_headers, MCP_SESSION_ID);
        let session = OwnedSession {
            id,
            protocol_version,
            result,
            lost: tokio_util::sync::CancellationToken::new(),
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let headers = session_headers(&Vec::new(), &session);
        let ack = self.own_request(admission, &initialized, &headers, deadline).await;
        if let Some(failure) = ack.failure {
            tracing::warn!(channel = %self.inner.channel, reason = failure.kind(), "the MCP server did not take the gateway's notifications/initialized");
            return Err(LegFailure::SessionNotOpen);
        }
        let version = Value::String(session.protocol_version.clone());
        self.inner
            .observed
            .record(identity::initialized(session.result.get("serverInfo"), Some(&version)));
        tracing::info!(channel = %self.inner.channel, protocol_version = %session.protocol_version, "the gateway opened its own MCP session with the handshake-era server: 2026-07-28 callers are bridged");
        Ok(session)
    }

    /// One request of the gateway's own, through the channel's request path.
    pub(super) async fn own_request(
        &self,
        admission: &Admission,
        message: &Value,
        headers: &WireHeaders,
        deadline: Option<tokio::time::Instant>,
    ) -> LegResult {
        let raw = serde_json::value::RawValue::from_string(message.to_string()).expect("JSON");
        let payload = JsonRpcPayload::from_raw(raw).expect("a JSON-RPC object");
        let (nobody, _) = mpsc::channel(1);
        let req = DownstreamRequest {
            payload: &payload,
            headers,
            deadline,
        };
        self.call_plain(admission, &req, &nobody).await
    }

    /// `req` through the request path, its notifications filtered on their way to `notes`;
    /// a request of the server's among them is answered by the gateway (the call is not
    /// held: its caller is not asked).
    async fn relayed(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        filter: LogFilter,
    ) -> LegResult {
        let (relay, relayed) = mpsc::channel::<Notification>(era::RELAY_BOUND);
        let deadline = self.leg_deadline(req.deadline);
        let answer = |ask| -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
            Box::pin(self.answer_unasked(admission, req.headers, ask, deadline))
        };
        era::relay(
            self.call_plain(admission, req, &relay),
            relayed,
            notes,
            filter,
            Some(&answer),
        )
        .await
    }

    /// The client capabilities of the gateway's session: what a 2026-07-28 caller may be
    /// asked for when calls are held (each call's own caller decides what it answers),
    /// none otherwise (strict mode: the server learns no caller can be asked).
    fn owned_capabilities(&self) -> Value {
        if self.inner.holding.parks() {
            json!({"elicitation": {}, "sampling": {}, "roots": {}})
        } else {
            json!({})
        }
    }

    /// The server no longer knows `session`: the next 2026-07-28 request opens a new one.
    fn lose_session(&self, session: &Arc<OwnedSession>) {
        let mut verdict = super::lock(&self.inner.verdict);
        session.lost.cancel();
        if matches!(&*verdict, Verdict::Legacy(Some(current)) if Arc::ptr_eq(current, session)) {
            *verdict = Verdict::Unknown;
            self.set_affine(false);
            tracing::warn!(channel = %self.inner.channel, "the MCP server no longer knows the gateway's session: the next 2026-07-28 request opens a new one");
        }
    }
}

/// The HTTP status of a bridged request's answer that says the server no longer knows
/// the session: `404` (the spec's word), or a `400` whose error names the session (the
/// TypeScript SDK's).
fn session_lost(leg: &LegResult) -> Option<u16> {
    let status = match (&leg.failure, leg.reply.resp_code) {
        (Some(LegFailure::HttpStatus(status)), _) => *status,
        (None, code) => code,
        _ => return None,
    };
    let names_session = leg
        .reply
        .resp_json
        .as_deref()
        .is_some_and(|raw| raw.get().to_ascii_lowercase().contains("session"));
    (status == 404 || (status == 400 && names_session)).then_some(status)
}

/// The first value of a response header.
fn header(headers: &std::collections::BTreeMap<String, Vec<String>>, name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.first().cloned())
}
