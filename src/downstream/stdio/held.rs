//! Input required, never replayed: a handshake-era child's request for input (an
//! elicitation, a sampling, its roots) during a 2026-07-28 caller's `tools/call`,
//! `prompts/get` or `resources/read` becomes an `input_required` answer to that caller,
//! while the call itself stays held on the pipe; the caller's retry (a new command with
//! `inputResponses` and the `requestState` the gateway signed) answers the child's
//! pending requests and receives the held call's final result.
//!
//! Invariants:
//! - the held call is written to the child once; a retry never writes it again: it writes
//!   only the answers to the child's pending requests, and only when its token verifies,
//!   binds this call (method, parameters, channel, child life) and is the one of the
//!   call's current park (single use: the record is taken out under the lock that checks
//!   it);
//! - a refused retry writes nothing;
//! - while a call that may ask is held, it is the only request of the child that may be
//!   asked (the channel's `asking` lock, written here, read by handshake callers that
//!   declared a capability): a child's request always has one caller it can belong to;
//! - a parked call is bounded twice: `park_timeout` for a retry to come, `call_timeout`
//!   for the call's whole life across its rounds; at most `max_rounds` rounds;
//! - the gateway's own answers to the child's requests (a cancel when a park expires, an
//!   error for what the caller did not declare or past the last round, `ping`) are
//!   responses, not requests: like the refusal of an undeclared request they are written
//!   without an admission, and never start a tool.
//!
//! Strict mode never parks (see `docs/strict-mode.md`, "The era bridge").

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, OwnedRwLockWriteGuard};
use tokio::time::{sleep_until, timeout_at, Instant};

use super::call::{reply_with_id, Outgoing, Sent};
use super::pipe::{wait_answer, Waited};
use super::session::{Declared, Need};
use super::{line, rewrite, Shared};
use crate::downstream::era::park::{self, Ask, Binding, Call, Parked, Pending, Taken, Ticket};
use crate::downstream::era::{self, Continuation, Gone, LogFilter, Mrtr};
use crate::downstream::{LegFailure, Notification, NotifySink, Reply};
use crate::strict::Admission;
use crate::supervisor::TaskEnd;
use crate::telemetry::{EraHeldEnd, TaskKind};

pub(crate) use crate::downstream::era::park::HeldEnded;

/// Where a channel reports its held calls that ended with no caller told.
pub(crate) type HeldObserver = Arc<dyn Fn(HeldEnded) + Send + Sync>;

/// How the era bridge holds calls on one stdio channel
/// (`mcp.channels.NAME.input_required`).
#[derive(Clone, Debug)]
pub struct InputRequiredSettings {
    /// Whether calls are held across input rounds at all (never in strict mode).
    pub parks: bool,
    /// How long a parked call waits for the caller's retry.
    pub park_timeout: Duration,
    /// The bound of a held call's whole life, across all its rounds.
    pub call_timeout: Duration,
    /// Input rounds per call; past the last, the child's requests are refused.
    pub max_rounds: u32,
}

impl Default for InputRequiredSettings {
    fn default() -> Self {
        Self {
            parks: true,
            park_timeout: Duration::from_secs(120),
            call_timeout: Duration::from_secs(600),
            max_rounds: 8,
        }
    }
}

/// Notifications of a held call waiting to be handed on.
const EVENTS_BOUND: usize = 64;
/// The held calls of one channel.
pub(super) type Parking = park::Parking<Held>;

/// A 2026-07-28 caller's call that may ask, as one command brings it: the stripped
/// request, what binds it, where its notifications go, and the command's bound.
pub(super) struct HeldRequest<'a> {
    pub(super) json: &'a str,
    pub(super) mrtr: &'a Mrtr,
    pub(super) notes: &'a NotifySink,
    pub(super) filter: LogFilter,
    pub(super) limit: Instant,
}

/// A call written to the child and not yet answered, with what its rounds need.
pub(super) struct Held {
    sent: Sent,
    events: mpsc::Receiver<Notification>,
    _asking: OwnedRwLockWriteGuard<()>,
    call: Call,
}

impl Ticket for Held {
    fn call(&self) -> &Call {
        &self.call
    }
    fn generation(&self) -> u64 {
        self.sent.child.generation
    }
    fn usable(&self) -> bool {
        self.sent.child.is_usable()
    }
}

/// How driving a held call for one command ended.
enum Driven {
    Final(Result<Reply, LegFailure>),
    /// The child asked for input the caller may give: park for a retry.
    Asked(Vec<Ask>),
}

impl Shared {
    /// Whether this channel holds calls across input rounds.
    pub(super) fn parks(&self) -> bool {
        self.settings.input_required.parks && !self.settings.session.configured_pass_through()
    }

    fn parking(&self) -> std::sync::MutexGuard<'_, Parking> {
        self.parking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A 2026-07-28 caller's call that may ask: written once and driven until its final
    /// answer, or until the child asks for input (answered `input_required`, the call
    /// parked). `id` is the caller's JSON id.
    pub(super) async fn start_held(
        self: &Arc<Self>,
        admission: &Admission,
        call: HeldRequest<'_>,
    ) -> Result<Reply, LegFailure> {
        let HeldRequest {
            json,
            mrtr,
            notes,
            filter,
            limit,
        } = call;
        let spans = rewrite::request_spans(json).ok_or(LegFailure::InternalBeforeSend)?;
        let caller_id: Box<str> = json[spans.id.clone()].into();
        let declared = Declared::of_capabilities(Some(&mrtr.capabilities));
        // cancel-safe: waiting for a lock takes nothing until it resolves.
        let asking = timeout_at(limit, self.asking.clone().write_owned())
            .await
            .map_err(|_| LegFailure::DeadlineBeforeSend)?;
        let (events_tx, events) = mpsc::channel(EVENTS_BOUND);
        let caller = declared.mint_session_id(&crate::protocol::random_hex(16));
        let outgoing = Outgoing {
            json,
            spans: &spans,
            caller: Some(caller.into()),
            is_initialize: false,
        };
        let sent = self.send(admission, outgoing, events_tx, limit).await?;
        let mut held = Held {
            sent,
            events,
            _asking: asking,
            call: Call::new(
                json,
                mrtr,
                admission.command(),
                self.settings.input_required.call_timeout,
            ),
        };
        self.run_rounds(&mut held, notes, filter, limit, &caller_id)
            .await
            .map(|ended| self.settle(held, ended, &caller_id))?
    }

    /// A caller's retry of a parked call: its token checked, the child's pending requests
    /// answered under `admission`, then the call driven on as at its start. A retry whose
    /// call is gone is refused with nothing written.
    pub(super) async fn continue_held(
        self: &Arc<Self>,
        admission: &Admission,
        call: HeldRequest<'_>,
        continuation: &Continuation,
    ) -> Result<Reply, LegFailure> {
        let HeldRequest {
            json,
            mrtr,
            notes,
            filter,
            limit,
        } = call;
        let spans = rewrite::request_spans(json).ok_or(LegFailure::InternalBeforeSend)?;
        let caller_id: Box<str> = json[spans.id.clone()].into();
        let id_raw = RawValue::from_string(caller_id.to_string()).map_err(|_| LegFailure::InternalBeforeSend)?;
        let parked = match self.take_parked(json, mrtr, continuation) {
            Ok(parked) => parked,
            Err(gone) => {
                self.metrics.era_continuation_refused(&self.channel, gone);
                tracing::info!(channel = %self.channel, reason = gone.as_str(), "a retry with a requestState whose held call is gone was refused; nothing was sent");
                return Ok(era::continuation_refused(&id_raw, gone));
            }
        };
        self.metrics.era_parked(&self.channel, -1);
        let Parked { mut held, asks } = parked;
        // The call may have ended while parked: its outcome goes to this retry.
        if let Ok((raw, span, _)) = held.sent.registration.rx.try_recv() {
            let ended = Ok(Driven::Final(reply_with_id(raw, span, &caller_id)));
            return ended.map(|ended| self.settle(held, ended, &caller_id))?;
        }
        let (answered, missing) = park::split_answers(asks, continuation);
        for (pending, answer) in answered {
            let line = line::frame(&park::answer_json(&pending.upstream, &Ok(answer)));
            self.write_with(admission, &held, line, limit).await?;
        }
        if !missing.is_empty() {
            // Answers that are missing or malformed are asked for again; the call stays held.
            return Ok(self.park(held, missing, &caller_id));
        }
        self.run_rounds(&mut held, notes, filter, limit, &caller_id)
            .await
            .map(|ended| self.settle(held, ended, &caller_id))?
    }

    /// The parked call `continuation` names, taken out (single use), or why it is gone.
    fn take_parked(&self, json: &str, mrtr: &Mrtr, continuation: &Continuation) -> Result<Parked<Held>, Gone> {
        let method = park::method_of(json);
        let binding = Binding {
            channel: &self.channel,
            method: &method,
            digest: &mrtr.digest,
        };
        let claims = park::verify(&self.signer, continuation, &binding)?;
        let taken = self.parking().take(&claims)?;
        match taken {
            Taken::Parked(parked) => Ok(parked),
            Taken::Lost(parked) => {
                self.metrics.era_parked(&self.channel, -1);
                self.metrics.era_held_ended(&self.channel, EraHeldEnd::Lost);
                self.held_ended(&parked.held, EraHeldEnd::Lost);
                Err(Gone::Lost)
            }
        }
    }

    /// Drives a held call for one command: its progress and log messages to `notes`,
    /// until its final answer or the child's next round of requests. Requests the caller
    /// cannot be asked (not declared, past the last round, `ping`) are answered here and
    /// the call driven on.
    async fn run_rounds(
        self: &Arc<Self>,
        held: &mut Held,
        notes: &NotifySink,
        filter: LogFilter,
        limit: Instant,
        caller_id: &str,
    ) -> Result<Driven, LegFailure> {
        let limit = limit.min(held.call.deadline);
        loop {
            match drive(held, notes, filter, limit, caller_id).await {
                Driven::Final(result) => return Ok(Driven::Final(result)),
                Driven::Asked(asks) => {
                    let mut askable = Vec::new();
                    for ask in asks {
                        if held.call.may_ask(&ask, self.settings.input_required.max_rounds) {
                            askable.push(ask);
                        } else {
                            self.answer_locally(held, &ask);
                        }
                    }
                    if !askable.is_empty() {
                        return Ok(Driven::Asked(askable));
                    }
                }
            }
        }
    }

    /// What a command gets of a driven held call: its final answer (the held call ends),
    /// or `input_required` (the call parked for a retry).
    fn settle(self: &Arc<Self>, held: Held, ended: Driven, caller_id: &str) -> Result<Reply, LegFailure> {
        match ended {
            Driven::Final(result) => {
                let end = if result.is_ok() {
                    EraHeldEnd::Answered
                } else {
                    EraHeldEnd::Lost
                };
                self.metrics.era_held_ended(&self.channel, end);
                drop(held);
                result
            }
            Driven::Asked(asks) => {
                let mut held = held;
                held.call.round += 1;
                Ok(self.park(held, Pending::of_round(asks), caller_id))
            }
        }
    }

    /// Parks `held` with its pending `asks` and answers the command `input_required`.
    fn park(self: &Arc<Self>, mut held: Held, asks: BTreeMap<String, Pending>, caller_id: &str) -> Reply {
        let requests: Map<String, Value> = asks.iter().map(|(k, p)| (k.clone(), p.shown.clone())).collect();
        held.call.seq += 1;
        let expires = Instant::now() + self.settings.input_required.park_timeout;
        let park_ms = u64::try_from(self.settings.input_required.park_timeout.as_millis()).unwrap_or(u64::MAX);
        let token = park::token(&self.signer, &held, &self.channel, park_ms);
        let (id, seq) = (held.call.id.clone(), held.call.seq);
        self.parking().park(Parked { held, asks });
        self.metrics.era_parked(&self.channel, 1);
        self.metrics.era_round(&self.channel);
        tracing::info!(channel = %self.channel, round = seq, "a held call's server asked for input: answered input_required, the call is parked for the caller's retry");
        let shared = self.clone();
        self.supervisor.spawn_untracked(TaskKind::StdioReader, async move {
            sleep_until(expires).await;
            shared.expire(&id, seq).await;
            TaskEnd::Finished
        });
        let id_raw = RawValue::from_string(caller_id.to_owned()).expect("a caller id is JSON");
        era::input_required_reply(&id_raw, requests, &token)
    }

    /// A park that got no retry in time: the child's pending requests are answered as a
    /// dismissal (an elicitation `cancel`, an error for the others) and the call is driven
    /// to its end with nobody to tell; the outcome is logged and counted.
    async fn expire(self: &Arc<Self>, id: &str, seq: u32) {
        let parked = self.parking().expire(id, seq);
        let Some(Parked { mut held, asks }) = parked else {
            return;
        };
        self.metrics.era_parked(&self.channel, -1);
        tracing::warn!(channel = %self.channel, "a parked call got no retry within park_timeout: its server's requests are dismissed and its result will reach no caller");
        for pending in asks.values() {
            self.dismiss(&held, &pending.upstream, pending.need);
        }
        let (nobody, _) = mpsc::channel(1);
        let deadline = held.call.deadline;
        loop {
            match drive(&mut held, &nobody, LogFilter(None), deadline, "null").await {
                Driven::Final(_) => break,
                Driven::Asked(asks) => {
                    for ask in asks {
                        match ask.need {
                            Some(need) => self.dismiss(&held, &ask.id, need),
                            None => self.answer_locally(&held, &ask),
                        }
                    }
                }
            }
        }
        self.metrics.era_held_ended(&self.channel, EraHeldEnd::Expired);
        self.held_ended(&held, EraHeldEnd::Expired);
    }

    /// Tells the observer (the delivery receipts) of a held call that ended untold.
    fn held_ended(&self, held: &Held, end: EraHeldEnd) {
        if let Some(observe) = self.held_observer.get() {
            observe(held.call.ended(&self.channel, end));
        }
    }

    /// The gateway's answer to a child's request no caller will answer: `ping` gets `{}`,
    /// anything else an error naming why.
    fn answer_locally(self: &Arc<Self>, held: &Held, ask: &Ask) {
        let line = line::frame(&park::answer_json(&ask.id, &ask.local_answer(held.call.declared)));
        self.write_unadmitted(&held.sent.child, line);
    }

    /// A pending request of an expired park, answered as a person dismisses it.
    fn dismiss(self: &Arc<Self>, held: &Held, upstream: &str, need: Need) {
        let line = line::frame(&park::answer_json(upstream, &park::dismissal(need)));
        self.write_unadmitted(&held.sent.child, line);
    }

    /// One answer to the child's request, written under the retry's admission.
    async fn write_with(
        &self,
        admission: &Admission,
        held: &Held,
        line: Vec<u8>,
        limit: Instant,
    ) -> Result<(), LegFailure> {
        let child = &held.sent.child;
        let mut writer = self.writer_for(child, limit).await?;
        admission.begin_send().map_err(|_| LegFailure::NotAdmitted)?;
        writer.start(child, line).ok_or(LegFailure::ChildNotRunning)?;
        self.finish_write(child, &mut writer, limit, false).await
    }
}

/// Drives `held` until its final answer, or a round of requests from the child (see
/// [`park::gather`]). Other messages go to `notes` through `filter`.
///
/// The final answer carries `caller_id`: the id of the command it answers.
async fn drive(held: &mut Held, notes: &NotifySink, filter: LogFilter, limit: Instant, caller_id: &str) -> Driven {
    loop {
        tokio::select! {
            biased;
            // cancel-safe: the registration's receiver is polled by reference.
            waited = wait_answer(&held.sent.child, &mut held.sent.registration, limit) => {
                return Driven::Final(match waited {
                    Waited::Response((raw, span, _)) => reply_with_id(raw, span, caller_id),
                    Waited::Gone => Err(LegFailure::ChildExited),
                    Waited::TimedOut => Err(LegFailure::TimeoutAfterWrite),
                });
            }
            // cancel-safe: a message taken is handled in the arm.
            Some(note) = held.events.recv() => {
                if let Some(first) = park::ask_or_pass(note, notes, filter).await {
                    return Driven::Asked(park::gather(first, &mut held.events, notes, filter).await);
                }
            }
        }
    }
}
