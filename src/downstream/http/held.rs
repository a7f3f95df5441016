//! Input required, never replayed, on an HTTP channel: a handshake-era server's request
//! for input (an elicitation, a sampling, its roots) during a 2026-07-28 caller's
//! `tools/call`, `prompts/get` or `resources/read` becomes an `input_required` answer to
//! that caller, while the call's HTTP exchange stays open, read on by a task of its own;
//! the caller's retry (a new command with `inputResponses` and the `requestState` the
//! gateway signed) answers the server's pending requests and receives the held call's
//! final result. [`crate::downstream::era::park`] decides what a held call is and when a
//! retry may continue it; this room holds it over HTTP.
//!
//! Invariants:
//! - the held call is POSTed once; a retry never POSTs it again: it POSTs only the
//!   answers to the server's pending requests, and only when its token verifies and binds
//!   the call's current park (single use);
//! - a refused retry sends nothing, and every retry on this channel is checked, parking
//!   on or off (strict mode), so a `requestState` never lets a call through twice;
//! - the held exchange is sent under the command's admission's last word
//!   ([`Admission::begin_send`]) and read on under an admission of the channel's own
//!   (default mode only: strict mode never parks), bounded by `call_timeout`;
//! - while a call that may ask is held it is the only one of the channel that may be
//!   asked: the server's requests on the session's standalone stream (which names no
//!   request) go to it ([`super::standalone`]);
//! - a server's request that no caller will answer (not declared, past the last round,
//!   no call held, a park that expired) gets the gateway's answer: `ping` `{}`, an
//!   elicitation a `cancel` when its park expired, an error otherwise.
//!
//! Must not touch metrics: what happened is told to the channel's [`EraObserver`].

use std::sync::{Arc, Mutex, OnceLock};

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, OwnedRwLockWriteGuard, RwLock};
use tokio::time::{sleep_until, timeout_at, Instant};

use super::session::OwnedSession;
use super::HttpTransport;
use crate::downstream::caller::Declared;
use crate::downstream::era::listen::Listeners;
use crate::downstream::era::park::{self, Ask, Binding, Call, Parked, Parking, Pending, Taken, Ticket};
use crate::downstream::era::state::Signer;
use crate::downstream::era::{self, Continuation, Forward, Gone, LogFilter, Mrtr};
use crate::downstream::{
    DownstreamRequest, HeldEnded, InputRequiredSettings, LegFailure, LegOutcome, LegResult, Notification, NotifySink,
};
use crate::protocol::{JsonRpcPayload, RespType, WireHeaders};
use crate::strict::{Admission, CommandRef, Fence};
use crate::supervisor::{Supervisor, TaskEnd};
use crate::telemetry::{ContinuationRefusal, EraHandling, EraHeldEnd, TaskKind};

/// What the era bridge of an HTTP channel did, for the gateway's metrics and receipts.
#[derive(Debug)]
pub(crate) enum EraEvent {
    /// A 2026-07-28 caller's request, by what the bridge did with it.
    Request(EraHandling),
    /// A held call parked (`+1`) or left its park (`-1`).
    Parked(i64),
    /// A held call's server asked; its caller was answered `input_required`.
    Round,
    /// A held call ended.
    Ended(EraHeldEnd),
    /// A retry whose held call is gone was refused.
    Refused(ContinuationRefusal),
    /// A held call ended with no caller told (a delivery receipt keeps it).
    Untold(HeldEnded),
}

/// Where a channel tells its [`EraEvent`]s.
pub(crate) type EraObserver = Arc<dyn Fn(EraEvent) + Send + Sync>;

/// Held calls in flight at once on a channel's own admissions (one may be asked at a
/// time; the others are exchanges still ending, or the standalone stream).
const OWN_ADMISSIONS: usize = 16;
/// Messages of a held call waiting to be handed on.
const EVENTS_BOUND: usize = 64;

/// How one HTTP channel holds calls across input rounds.
pub(super) struct Holding {
    settings: InputRequiredSettings,
    supervisor: Option<Supervisor>,
    parking: Mutex<Parking<HttpHeld>>,
    signer: Signer,
    /// Written by the held call that may be asked now.
    asking: Arc<RwLock<()>>,
    /// Where the standalone stream hands the server's requests: the call held now.
    pub(super) untied: Arc<Mutex<Option<NotifySink>>>,
    /// Admits the held exchanges, their answers after a park expired, and the
    /// standalone stream (default mode: nothing to latch, nothing to stop for).
    pub(super) fence: Fence,
    observer: OnceLock<EraObserver>,
    /// The 2026-07-28 callers' `subscriptions/listen` streams ([`super::listen`]).
    pub(super) listeners: Mutex<Listeners>,
    /// Set while the bridge keeps what a caller's later command must find in this
    /// process: the owned session its calls are held in (parking on), or the waiters of
    /// handshake-era callers of a 2026-07-28-only server. Declared as the channel's
    /// `proc_affinity` in `X-Tunnel-MCP-Server-Info`.
    pub(super) affine: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for Holding {
    fn default() -> Self {
        Self::new(
            InputRequiredSettings {
                parks: false,
                ..InputRequiredSettings::default()
            },
            None,
        )
    }
}

impl Holding {
    pub(super) fn new(settings: InputRequiredSettings, supervisor: Option<Supervisor>) -> Self {
        Self {
            settings,
            supervisor,
            parking: Mutex::default(),
            signer: Signer::random(),
            asking: Arc::default(),
            untied: Arc::default(),
            fence: Fence::new(false, OWN_ADMISSIONS),
            observer: OnceLock::new(),
            listeners: Mutex::default(),
            affine: Arc::default(),
        }
    }

    /// Whether calls are held across rounds (default mode, with tasks to read them on).
    pub(super) fn parks(&self) -> bool {
        self.settings.parks && self.supervisor.is_some()
    }

    pub(super) fn supervisor(&self) -> Option<&Supervisor> {
        self.supervisor.as_ref()
    }

    fn parking(&self) -> std::sync::MutexGuard<'_, Parking<HttpHeld>> {
        self.parking.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A call POSTed to the server and not yet answered, with what its rounds need.
pub(super) struct HttpHeld {
    done: oneshot::Receiver<LegResult>,
    events: mpsc::Receiver<Notification>,
    _asking: OwnedRwLockWriteGuard<()>,
    _route: Route,
    session: Arc<OwnedSession>,
    /// The session's headers, for the answers to the server's requests.
    headers: WireHeaders,
    call: Call,
}

impl Ticket for HttpHeld {
    fn call(&self) -> &Call {
        &self.call
    }
    fn generation(&self) -> u64 {
        0
    }
    fn usable(&self) -> bool {
        !self.session.is_lost()
    }
}

/// The standalone stream's requests go to one held call while this lives.
struct Route(Arc<Mutex<Option<NotifySink>>>);

impl Drop for Route {
    fn drop(&mut self) {
        *super::lock(&self.0) = None;
    }
}

/// How driving a held call for one command ended.
enum Driven {
    Final(LegResult),
    /// The server asked for input the caller may give: park for a retry.
    Asked(Vec<Ask>),
}

/// A 2026-07-28 caller's call that may ask, as one command brings it.
pub(super) struct HeldRequest<'a> {
    pub(super) forward: &'a Forward,
    pub(super) mrtr: &'a Mrtr,
    pub(super) session: &'a Arc<OwnedSession>,
    /// The forwarded request's headers (the owned session's).
    pub(super) headers: &'a WireHeaders,
    pub(super) notes: &'a NotifySink,
    pub(super) limit: Instant,
    /// The command's JSON-RPC id.
    pub(super) caller_id: &'a RawValue,
}

impl HttpTransport {
    /// The flag that says the era bridge keeps a caller's state in this process (see
    /// [`Holding`]): the control client declares the channel process-affine while it is set.
    pub(crate) fn affinity_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.inner.holding.affine.clone()
    }

    /// Sets or clears the channel's affinity (a change is logged once).
    pub(super) fn set_affine(&self, affine: bool) {
        let was = self
            .inner
            .holding
            .affine
            .swap(affine, std::sync::atomic::Ordering::AcqRel);
        if was != affine {
            tracing::info!(channel = %self.inner.channel, affine, "the era bridge keeps state in this process: the channel's proc_affinity in X-Tunnel-MCP-Server-Info follows");
        }
    }

    /// Sets where the era bridge tells what it did (once; later calls are ignored).
    pub(crate) fn observe_era(&self, observer: EraObserver) {
        let _ = self.inner.holding.observer.set(observer);
    }

    pub(super) fn observe(&self, event: EraEvent) {
        if let Some(observe) = self.inner.holding.observer.get() {
            observe(event);
        }
    }

    /// Whether a call is held across input rounds: parking is on, and its caller declared
    /// something the server may ask it for.
    pub(super) fn holds(&self, mrtr: &Mrtr) -> bool {
        self.inner.holding.parks() && Declared::of_capabilities(Some(&mrtr.capabilities)).any()
    }

    /// A call that may ask (its start), or a caller's retry of one (its continuation).
    pub(super) async fn held(&self, admission: &Admission, call: HeldRequest<'_>) -> LegResult {
        match &call.mrtr.continuation {
            Some(continuation) => {
                era::Step::Continued.trace();
                self.continue_held(admission, &call, continuation).await
            }
            None => {
                era::Step::Held.trace();
                self.start_held(admission, &call).await
            }
        }
    }

    /// The call POSTed once, read on by a task of its own, and driven until its final
    /// answer or the server's first round of requests.
    async fn start_held(&self, admission: &Admission, call: &HeldRequest<'_>) -> LegResult {
        let holding = &self.inner.holding;
        let failed = |failure| LegResult::failed(failure, Some(call.caller_id), RespType::JsonrpcResponse);
        let Some(supervisor) = holding.supervisor() else {
            return failed(LegFailure::InternalBeforeSend);
        };
        // cancel-safe: waiting for a lock takes nothing until it resolves.
        let Ok(asking) = timeout_at(call.limit, holding.asking.clone().write_owned()).await else {
            return failed(LegFailure::DeadlineBeforeSend);
        };
        let Ok(own) = holding.fence.admit(admission.command().clone()).await else {
            return failed(LegFailure::NotAdmitted);
        };
        // The command's fence has the last word before the call may leave.
        if admission.begin_send().is_err() {
            return failed(LegFailure::NotAdmitted);
        }
        let (events_tx, events) = mpsc::channel(EVENTS_BOUND);
        let (done_tx, done) = oneshot::channel();
        *super::lock(&holding.untied) = Some(events_tx.clone());
        let route = Route(holding.untied.clone());
        let held_call = Call::new(
            call.forward.payload.raw().get(),
            call.mrtr,
            admission.command(),
            holding.settings.call_timeout,
        );
        let deadline = held_call.deadline;
        let (transport, payload, headers) = (self.clone(), call.forward.payload.clone(), call.headers.clone());
        supervisor.spawn_untracked(TaskKind::EraHttp, async move {
            let req = DownstreamRequest {
                payload: &payload,
                headers: &headers,
                deadline: Some(deadline),
            };
            let leg = transport.call_until(&own, &req, &events_tx, deadline).await;
            let _ = done_tx.send(leg);
            TaskEnd::Finished
        });
        let mut held = HttpHeld {
            done,
            events,
            _asking: asking,
            _route: route,
            session: call.session.clone(),
            headers: call.headers.clone(),
            call: held_call,
        };
        let filter = LogFilter(call.forward.shape.log_level);
        let driven = self
            .run_rounds(admission, &mut held, call.notes, filter, call.limit)
            .await;
        self.settle(held, driven, call.caller_id)
    }

    /// A caller's retry of a parked call: its token checked, the server's pending requests
    /// answered under `admission`, then the call driven on as at its start. A retry whose
    /// call is gone is refused with nothing sent.
    async fn continue_held(
        &self,
        admission: &Admission,
        call: &HeldRequest<'_>,
        continuation: &Continuation,
    ) -> LegResult {
        let method = park::method_of(call.forward.payload.raw().get());
        let binding = Binding {
            channel: &self.inner.channel,
            method: &method,
            digest: &call.mrtr.digest,
        };
        let holding = &self.inner.holding;
        let taken =
            park::verify(&holding.signer, continuation, &binding).and_then(|claims| holding.parking().take(&claims));
        let Parked { mut held, asks } = match taken {
            Ok(Taken::Parked(parked)) => parked,
            Ok(Taken::Lost(parked)) => {
                self.observe(EraEvent::Parked(-1));
                self.ended_untold(&parked.held, EraHeldEnd::Lost);
                return self.refuse(call.caller_id, Gone::Lost);
            }
            Err(gone) => return self.refuse(call.caller_id, gone),
        };
        self.observe(EraEvent::Parked(-1));
        // The call may have ended while parked: its outcome goes to this retry.
        if let Ok(leg) = held.done.try_recv() {
            return self.settle(held, Ok(Driven::Final(leg)), call.caller_id);
        }
        let (answered, missing) = park::split_answers(asks, continuation);
        for (pending, answer) in answered {
            let answered = self
                .answer(admission, &held.headers, &pending.upstream, &Ok(answer), call.limit)
                .await;
            if let Err(failure) = answered {
                return self.settle(held, Err(failure), call.caller_id);
            }
        }
        if !missing.is_empty() {
            // Answers that are missing or malformed are asked for again; the call stays held.
            return self.park(held, missing, call.caller_id);
        }
        let filter = LogFilter(call.forward.shape.log_level);
        let driven = self
            .run_rounds(admission, &mut held, call.notes, filter, call.limit)
            .await;
        self.settle(held, driven, call.caller_id)
    }

    /// A retry whose held call is gone, refused with nothing sent.
    fn refuse(&self, caller_id: &RawValue, gone: Gone) -> LegResult {
        self.observe(EraEvent::Refused(gone));
        tracing::info!(channel = %self.inner.channel, reason = gone.as_str(), "a retry with a requestState whose held call is gone was refused; nothing was sent");
        LegResult::answered(era::continuation_refused(caller_id, gone))
    }

    /// Drives a held call for one command until its final answer or the server's next
    /// round of requests the caller may answer; the others are answered here.
    async fn run_rounds(
        &self,
        admission: &Admission,
        held: &mut HttpHeld,
        notes: &NotifySink,
        filter: LogFilter,
        limit: Instant,
    ) -> Result<Driven, LegFailure> {
        let limit = limit.min(held.call.deadline);
        let max_rounds = self.inner.holding.settings.max_rounds;
        loop {
            let asks = match drive(held, notes, filter, limit).await {
                Driven::Final(leg) => return Ok(Driven::Final(leg)),
                Driven::Asked(asks) => asks,
            };
            let mut askable = Vec::new();
            for ask in asks {
                if held.call.may_ask(&ask, max_rounds) {
                    askable.push(ask);
                } else {
                    let answer = ask.local_answer(held.call.declared);
                    self.answer(admission, &held.headers, &ask.id, &answer, limit).await?;
                }
            }
            if !askable.is_empty() {
                return Ok(Driven::Asked(askable));
            }
        }
    }

    /// What a command gets of a driven held call: its final answer under the command's
    /// id (the held call ends), or `input_required` (the call parked for a retry).
    fn settle(&self, mut held: HttpHeld, driven: Result<Driven, LegFailure>, caller_id: &RawValue) -> LegResult {
        match driven {
            Ok(Driven::Asked(asks)) => {
                held.call.round += 1;
                self.park(held, Pending::of_round(asks), caller_id)
            }
            Ok(Driven::Final(leg)) => {
                let end = match (&leg.failure, leg.outcome) {
                    (None, _) => Some(EraHeldEnd::Answered),
                    // The call never reached the server: nothing was held.
                    (Some(_), LegOutcome::NotSent) => None,
                    (Some(_), _) => Some(EraHeldEnd::Lost),
                };
                if let Some(end) = end {
                    self.observe(EraEvent::Ended(end));
                }
                with_id(leg, caller_id)
            }
            Err(failure) => {
                self.observe(EraEvent::Ended(EraHeldEnd::Lost));
                LegResult::failed(failure, Some(caller_id), RespType::JsonrpcResponse)
            }
        }
    }

    /// Parks `held` with its pending `asks` and answers the command `input_required`.
    fn park(
        &self,
        mut held: HttpHeld,
        asks: std::collections::BTreeMap<String, Pending>,
        caller_id: &RawValue,
    ) -> LegResult {
        let holding = &self.inner.holding;
        let requests: Map<String, Value> = asks.iter().map(|(k, p)| (k.clone(), p.shown.clone())).collect();
        held.call.seq += 1;
        let park_timeout = holding.settings.park_timeout;
        let park_ms = u64::try_from(park_timeout.as_millis()).unwrap_or(u64::MAX);
        let token = park::token(&holding.signer, &held, &self.inner.channel, park_ms);
        let (id, seq) = (held.call.id.clone(), held.call.seq);
        holding.parking().park(Parked { held, asks });
        self.observe(EraEvent::Parked(1));
        self.observe(EraEvent::Round);
        tracing::info!(channel = %self.inner.channel, round = seq, "a held call's server asked for input: answered input_required, the call is parked for the caller's retry");
        if let Some(supervisor) = holding.supervisor() {
            let transport = self.clone();
            let expires = Instant::now() + park_timeout;
            supervisor.spawn_untracked(TaskKind::EraHttp, async move {
                sleep_until(expires).await;
                transport.expire(&id, seq).await;
                TaskEnd::Finished
            });
        }
        LegResult::answered(era::input_required_reply(caller_id, requests, &token))
    }

    /// A park that got no retry in time: the server's pending requests are answered as a
    /// dismissal and the call is read to its end with nobody to tell; the end is told.
    async fn expire(&self, id: &str, seq: u32) {
        let holding = &self.inner.holding;
        let Some(Parked { mut held, asks }) = holding.parking().expire(id, seq) else {
            return;
        };
        self.observe(EraEvent::Parked(-1));
        tracing::warn!(channel = %self.inner.channel, "a parked call got no retry within park_timeout: its server's requests are dismissed and its result will reach no caller");
        let command = CommandRef {
            request_id: held.call.request_id.clone(),
            channel: Some(self.inner.channel.clone()),
            method: Some(held.call.method.clone()),
        };
        if let Ok(own) = holding.fence.admit(command).await {
            let deadline = held.call.deadline;
            for pending in asks.values() {
                let answer = park::dismissal(pending.need);
                let _ = self
                    .answer(&own, &held.headers, &pending.upstream, &answer, deadline)
                    .await;
            }
            let (nobody, _) = mpsc::channel(1);
            while let Driven::Asked(asks) = drive(&mut held, &nobody, LogFilter(None), deadline).await {
                for ask in asks {
                    let answer = ask
                        .need
                        .map_or_else(|| ask.local_answer(held.call.declared), park::dismissal);
                    let _ = self.answer(&own, &held.headers, &ask.id, &answer, deadline).await;
                }
            }
        }
        self.ended_untold(&held, EraHeldEnd::Expired);
    }

    /// A held call that ended with no caller told: counted, and kept by a receipt.
    fn ended_untold(&self, held: &HttpHeld, end: EraHeldEnd) {
        self.observe(EraEvent::Ended(end));
        self.observe(EraEvent::Untold(held.call.ended(&self.inner.channel, end)));
    }

    /// The gateway's answer to the server's request `upstream`, POSTed in the session
    /// with `headers` under `admission` (a response: it starts nothing).
    pub(super) async fn answer(
        &self,
        admission: &Admission,
        headers: &WireHeaders,
        upstream: &str,
        answer: &Result<Value, String>,
        deadline: Instant,
    ) -> Result<(), LegFailure> {
        let raw =
            RawValue::from_string(park::answer_json(upstream, answer)).map_err(|_| LegFailure::InternalBeforeSend)?;
        let payload = JsonRpcPayload::from_raw(raw).ok_or(LegFailure::InternalBeforeSend)?;
        let req = DownstreamRequest {
            payload: &payload,
            headers,
            deadline: Some(deadline),
        };
        let (nobody, _) = mpsc::channel(1);
        match self.call_plain(admission, &req, &nobody).await.failure {
            None => Ok(()),
            Some(failure) => Err(failure),
        }
    }

    /// The gateway's answer to a server's request on a bridged request's stream whose
    /// caller is not asked (the call is not held): `ping` `{}`, an error otherwise.
    pub(super) async fn answer_unasked(
        &self,
        admission: &Admission,
        headers: &WireHeaders,
        ask: Ask,
        deadline: Instant,
    ) {
        let answer = ask.local_answer(Declared::default());
        if let Err(failure) = self.answer(admission, headers, &ask.id, &answer, deadline).await {
            tracing::warn!(channel = %self.inner.channel, reason = failure.kind(), "the gateway's answer to the MCP server's request did not reach it");
        }
    }
}

/// Drives `held` until its final answer, a round of requests from the server (see
/// [`park::gather`]), or `limit`. Other messages go to `notes` through `filter`.
async fn drive(held: &mut HttpHeld, notes: &NotifySink, filter: LogFilter, limit: Instant) -> Driven {
    loop {
        tokio::select! {
            biased;
            // cancel-safe: a message taken is handled in the arm.
            Some(note) = held.events.recv() => {
                if let Some(first) = park::ask_or_pass(note, notes, filter).await {
                    return Driven::Asked(park::gather(first, &mut held.events, notes, filter).await);
                }
            }
            // cancel-safe: the receiver is polled by reference.
            done = &mut held.done => {
                return Driven::Final(done.unwrap_or_else(|_| {
                    LegResult::failed(LegFailure::StreamClosedBeforeResponse, None, RespType::JsonrpcResponse)
                }));
            }
            () = sleep_until(limit) => {
                return Driven::Final(LegResult::failed(LegFailure::TimeoutAfterWrite, None, RespType::JsonrpcResponse));
            }
        }
    }
}

/// `leg` answering the command whose id is `id` (a retry's final answer is the held
/// call's, which the server gave under the first command's id).
fn with_id(mut leg: LegResult, id: &RawValue) -> LegResult {
    let Some(raw) = leg.reply.resp_json.as_deref() else {
        return leg;
    };
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(raw.get()) else {
        return leg;
    };
    let Ok(id) = serde_json::from_str::<Value>(id.get()) else {
        return leg;
    };
    message.insert("id".to_owned(), id);
    if let Ok(raw) = RawValue::from_string(Value::Object(message).to_string()) {
        leg.reply.resp_json = Some(raw);
    }
    leg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_answer_is_given_the_id_of_the_command_it_answers() {
        let raw = RawValue::from_string(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#.to_owned()).unwrap();
        let leg = LegResult::answered(crate::downstream::Reply {
            resp_json: Some(raw),
            resp_headers: Default::default(),
            resp_code: 200,
            resp_type: RespType::JsonrpcResponse,
        });
        let id = RawValue::from_string(r#""retry-2""#.to_owned()).unwrap();
        let leg = with_id(leg, &id);
        let answer: Value = serde_json::from_str(leg.reply.resp_json.unwrap().get()).unwrap();
        assert_eq!(answer["id"], "retry-2");
        assert_eq!(answer["result"]["content"], serde_json::json!([]));
    }
}
