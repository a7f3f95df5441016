//! What holding a call across input rounds needs on any transport: the server's requests
//! read from a held call's messages, the input requests a 2026-07-28 caller is shown, the
//! gateway's own answers to what no caller will answer, the parking lot of calls waiting
//! for their retry, and the check of a retry's `requestState` against it.
//!
//! The stdio and HTTP transports hold calls their own way (a child's pipe; an HTTP
//! exchange read on by a task of its own); what a held call is and when it may be
//! continued is decided here, once.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::time::Instant;

use tokio::sync::mpsc;

use super::state::{Claims, Invalid, Signer};
use super::{Continuation, Gone, LogFilter, Mrtr};
use crate::downstream::caller::{Declared, Need};
use crate::downstream::{Notification, NotifySink};
use crate::strict::CommandRef;
use crate::telemetry::EraHeldEnd;

/// A held call that ended with no caller told: what a delivery receipt keeps of it.
#[derive(Clone, Debug)]
pub(crate) struct HeldEnded {
    /// The command that started the call (the first of its rounds).
    pub request_id: Option<String>,
    pub channel: String,
    pub method: String,
    /// `Expired` (never continued) or `Lost` (its server ended it while parked).
    pub end: EraHeldEnd,
    pub parked_at: SystemTime,
    pub ended_at: SystemTime,
}

impl HeldEnded {
    /// The gateway's words for it.
    pub(crate) fn words(&self) -> &'static str {
        match self.end {
            EraHeldEnd::Expired => "the MCP server asked for input during this call and the caller never continued it within park_timeout: the request was dismissed and the call's result reached no caller",
            EraHeldEnd::Lost | EraHeldEnd::Answered => "the MCP server asked for input during this call and ended while the call was parked: its effect is unknown",
        }
    }
}

/// What a held call is, whatever carries it: what binds its tokens, its rounds, its
/// bound, and the command that started it.
pub(crate) struct Call {
    /// The end of the call's whole life.
    pub(crate) deadline: Instant,
    /// Random 128 bits, hex: what its tokens name.
    pub(crate) id: String,
    /// The park it is in: a token is good for one continuation of one park.
    pub(crate) seq: u32,
    pub(crate) round: u32,
    pub(crate) method: String,
    pub(crate) digest: String,
    /// What its caller may be asked for.
    pub(crate) declared: Declared,
    /// The command that started the call, and when it started.
    pub(crate) request_id: Option<String>,
    pub(crate) parked_at: SystemTime,
}

impl Call {
    /// The call `json` (stripped) of the command `command`, bound by `call_timeout` from now.
    pub(crate) fn new(json: &str, mrtr: &Mrtr, command: &CommandRef, call_timeout: Duration) -> Self {
        Self {
            deadline: Instant::now() + call_timeout,
            id: crate::protocol::random_hex(16),
            seq: 0,
            round: 0,
            method: method_of(json),
            digest: mrtr.digest.clone(),
            declared: Declared::of_capabilities(Some(&mrtr.capabilities)),
            request_id: command.request_id.clone(),
            parked_at: SystemTime::now(),
        }
    }

    /// Whether the caller may be asked `ask` now (it declared what it needs, and the
    /// call has rounds left).
    pub(crate) fn may_ask(&self, ask: &Ask, max_rounds: u32) -> bool {
        ask.need.is_some_and(|need| self.declared.allows(need)) && self.round < max_rounds
    }

    /// The call ended on `channel` as `end`, with no caller told.
    pub(crate) fn ended(&self, channel: &str, end: EraHeldEnd) -> HeldEnded {
        HeldEnded {
            request_id: self.request_id.clone(),
            channel: channel.to_owned(),
            method: self.method.clone(),
            end,
            parked_at: self.parked_at,
            ended_at: SystemTime::now(),
        }
    }
}

/// Ended held calls remembered, to tell a replayed token from a lost call.
const ENDED_CAP: usize = 256;

/// A request the server sent during a held call.
pub(crate) struct Ask {
    /// Its JSON-RPC id, as the server wrote it.
    pub(crate) id: Box<str>,
    /// What it needs of the caller (`None`: nothing a caller declares, say `ping`).
    pub(crate) need: Option<Need>,
    pub(crate) method: String,
    pub(crate) params: Value,
}

impl Ask {
    /// A server's request (an id and a method), if `note` is one.
    pub(crate) fn of(note: &Notification) -> Option<Self> {
        let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(note.resp_json.get()) else {
            return None;
        };
        let id = message.get("id").filter(|id| !id.is_null())?.to_string();
        let Some(Value::String(method)) = message.remove("method") else {
            return None;
        };
        Some(Self {
            id: id.into(),
            need: Need::of_method(&method),
            params: message.remove("params").unwrap_or(Value::Null),
            method,
        })
    }

    /// The key the caller is shown for this request: `ir-` and the id's letters, digits,
    /// `-` and `_`.
    pub(crate) fn key(&self) -> String {
        let id: String = self
            .id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
            .collect();
        format!("ir-{id}")
    }

    /// The request as a 2026-07-28 input request: `{method, params}`; a url-mode
    /// elicitation's `elicitationId` (which 2026-07-28 has not) is left out.
    pub(crate) fn shown(&self) -> Value {
        let mut params = self.params.clone();
        if let Value::Object(p) = &mut params {
            p.remove("elicitationId");
            p.remove("_meta");
        }
        let mut request = json!({"method": self.method});
        if !params.is_null() {
            request["params"] = params;
        }
        request
    }

    /// The gateway's answer when no caller is asked: `ping` gets `{}`, anything else an
    /// error naming why (not declared by this call's caller, past the last round, or not
    /// a request a caller answers).
    pub(crate) fn local_answer(&self, declared: Declared) -> Result<Value, String> {
        match (self.method.as_str(), self.need) {
            ("ping", _) => Ok(json!({})),
            (_, Some(need)) if !declared.allows(need) => Err(format!(
                "the caller of this call did not declare the {} capability; the request cannot be answered",
                need.capability()
            )),
            (_, Some(_)) => {
                Err("the call reached the gateway's limit of input rounds; the request is refused".to_owned())
            }
            (method, None) => Err(format!("{method} is not answered through the era bridge")),
        }
    }
}

/// How long the requests a server sends together are gathered into one round.
const ROUND_GATHER: std::time::Duration = std::time::Duration::from_millis(20);

/// A message of a held call: a server's request is returned; anything else goes to
/// `notes` if `filter` admits it.
pub(crate) async fn ask_or_pass(note: Notification, notes: &NotifySink, filter: LogFilter) -> Option<Ask> {
    let ask = Ask::of(&note);
    if ask.is_none() && filter.admits(&note) {
        let _ = notes.send(note).await;
    }
    ask
}

/// A round of the server's requests: `first`, and those that come on `events` within
/// [`ROUND_GATHER`] after it (other messages handed on as [`ask_or_pass`] does).
pub(crate) async fn gather(
    first: Ask,
    events: &mut mpsc::Receiver<Notification>,
    notes: &NotifySink,
    filter: LogFilter,
) -> Vec<Ask> {
    let mut asks = vec![first];
    let until = Instant::now() + ROUND_GATHER;
    while let Ok(Some(note)) = tokio::time::timeout_at(until, events.recv()).await {
        asks.extend(ask_or_pass(note, notes, filter).await);
    }
    asks
}

/// A pending request of a parked call that got no retry in time, answered as a person
/// dismisses it: an elicitation is cancelled, anything else refused.
pub(crate) fn dismissal(need: Need) -> Result<Value, String> {
    match need {
        Need::Elicitation => Ok(json!({"action": "cancel"})),
        Need::Sampling | Need::Roots => {
            Err("the caller did not continue the call in time; the request is refused".to_owned())
        }
    }
}

/// A JSON-RPC answer to a server's request `id`: its result, or a `-32603` error.
pub(crate) fn answer_json(id: &str, answer: &Result<Value, String>) -> String {
    match answer {
        Ok(result) => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
        Err(message) => {
            let error = json!({"code": -32603, "message": message});
            format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#)
        }
    }
}

/// One pending request of the server: its JSON id as it sent it, what it needs of the
/// caller, and the input request the caller was shown.
pub(crate) struct Pending {
    pub(crate) upstream: Box<str>,
    pub(crate) need: Need,
    pub(crate) shown: Value,
}

impl Pending {
    /// The pending requests of a round, by the key the caller is shown; a request that
    /// needs nothing a caller declares is not one.
    pub(crate) fn of_round(asks: Vec<Ask>) -> BTreeMap<String, Self> {
        asks.into_iter()
            .filter_map(|ask| {
                let need = ask.need?;
                let pending = Self {
                    shown: ask.shown(),
                    upstream: ask.id.clone(),
                    need,
                };
                Some((ask.key(), pending))
            })
            .collect()
    }
}

/// A held call as a transport carries it: the [`Call`], and the server life it runs in.
pub(crate) trait Ticket {
    fn call(&self) -> &Call;
    /// The life of the server the call runs in (a stdio child's generation; `0` over HTTP).
    fn generation(&self) -> u64;
    /// Whether that server can still finish the call.
    fn usable(&self) -> bool;
}

/// A held call waiting for its caller's retry, and the server's pending requests.
pub(crate) struct Parked<H> {
    pub(crate) held: H,
    pub(crate) asks: BTreeMap<String, Pending>,
}

/// The held calls of one channel: parked ones by id, and the latest ended ones.
pub(crate) struct Parking<H> {
    parked: BTreeMap<String, Parked<H>>,
    ended: VecDeque<(String, Gone)>,
}

impl<H> Default for Parking<H> {
    fn default() -> Self {
        Self {
            parked: BTreeMap::new(),
            ended: VecDeque::new(),
        }
    }
}

/// What a retry's token names: the method and parameters it must repeat.
pub(crate) struct Binding<'a> {
    pub(crate) channel: &'a str,
    pub(crate) method: &'a str,
    pub(crate) digest: &'a str,
}

/// A retry whose parked call was taken out because its server is gone.
pub(crate) enum Taken<H> {
    Parked(Parked<H>),
    /// The call's server can no longer finish it: counted and told as `lost`.
    Lost(Parked<H>),
}

impl<H: Ticket> Parking<H> {
    /// Parks `parked` until its retry (or its expiry).
    pub(crate) fn park(&mut self, parked: Parked<H>) {
        self.parked.insert(parked.held.call().id.clone(), parked);
    }

    /// The park `seq` of call `id`, taken out because it expired (nothing if a retry
    /// took it first).
    pub(crate) fn expire(&mut self, id: &str, seq: u32) -> Option<Parked<H>> {
        if self.parked.get(id)?.held.call().seq != seq {
            return None;
        }
        self.remember(id.to_owned(), Gone::Expired);
        self.parked.remove(id)
    }

    /// The parked call `claims` names, taken out (single use), or why it is gone.
    pub(crate) fn take(&mut self, claims: &Claims) -> Result<Taken<H>, Gone> {
        let Some(parked) = self.parked.get(&claims.h) else {
            let ended = self.ended.iter().find(|(id, _)| *id == claims.h).map(|(_, gone)| *gone);
            return Err(ended.unwrap_or(Gone::Lost));
        };
        if parked.held.call().seq != claims.s {
            return Err(Gone::Consumed);
        }
        let usable = parked.held.generation() == claims.g && parked.held.usable();
        let parked = self.parked.remove(&claims.h).expect("looked up above");
        if !usable {
            self.remember(claims.h.clone(), Gone::Lost);
            return Ok(Taken::Lost(parked));
        }
        self.remember(claims.h.clone(), Gone::Consumed);
        Ok(Taken::Parked(parked))
    }

    /// Remembers how a held call ended, for the words of a later refusal.
    fn remember(&mut self, id: String, gone: Gone) {
        if self.ended.len() == ENDED_CAP {
            self.ended.pop_front();
        }
        self.ended.push_back((id, gone));
    }
}

/// The claims of a retry's token, if it verifies and binds this call's method and
/// parameters on this channel.
pub(crate) fn verify(signer: &Signer, continuation: &Continuation, binding: &Binding<'_>) -> Result<Claims, Gone> {
    let Value::String(token) = &continuation.request_state else {
        return Err(Gone::Tampered);
    };
    let claims = signer.verify(token, unix_ms()).map_err(|invalid| match invalid {
        Invalid::Tampered => Gone::Tampered,
        Invalid::Restarted => Gone::Restarted,
        Invalid::Expired => Gone::Expired,
    })?;
    if claims.c != binding.channel || claims.m != binding.method || claims.d != binding.digest {
        return Err(Gone::Mismatch);
    }
    Ok(claims)
}

/// The token of a call's park on `channel`: single use (its `seq`), bound to the call,
/// and expiring with the park (`park_ms` from now).
pub(crate) fn token<H: Ticket>(signer: &Signer, held: &H, channel: &str, park_ms: u64) -> String {
    let call = held.call();
    signer.issue(Claims {
        v: 0,
        e: String::new(),
        h: call.id.clone(),
        s: call.seq,
        c: channel.to_owned(),
        g: held.generation(),
        m: call.method.clone(),
        d: call.digest.clone(),
        r: call.round,
        x: unix_ms().saturating_add(park_ms),
    })
}

/// The answers a retry carries, split: pending requests it answered (with an object),
/// and those still missing.
pub(crate) fn split_answers(
    asks: BTreeMap<String, Pending>,
    continuation: &Continuation,
) -> (Vec<(Pending, Value)>, BTreeMap<String, Pending>) {
    let responses = match &continuation.input_responses {
        Some(Value::Object(map)) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let mut answered = Vec::new();
    let mut missing = BTreeMap::new();
    for (key, pending) in asks {
        match responses.get(&key) {
            Some(answer @ Value::Object(_)) => answered.push((pending, answer.clone())),
            _ => {
                missing.insert(key, pending);
            }
        }
    }
    (answered, missing)
}

/// The method of a request's JSON (`tools/call`, ...).
pub(crate) fn method_of(json: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Probe {
        method: Option<String>,
    }
    serde_json::from_str::<Probe>(json)
        .ok()
        .and_then(|p| p.method)
        .unwrap_or_default()
}

/// Now, in Unix milliseconds (token expiry is wall-clock: a token may outlive a clock's
/// monotonic origin only within one process, and the key dies with it).
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake {
        call: Call,
        alive: bool,
    }

    impl Ticket for Fake {
        fn call(&self) -> &Call {
            &self.call
        }
        fn generation(&self) -> u64 {
            3
        }
        fn usable(&self) -> bool {
            self.alive
        }
    }

    fn claims(h: &str, s: u32, g: u64) -> Claims {
        Claims {
            v: 1,
            e: String::new(),
            h: h.to_owned(),
            s,
            c: "main".to_owned(),
            g,
            m: "tools/call".to_owned(),
            d: String::new(),
            r: 1,
            x: 0,
        }
    }

    fn parked(id: &str, seq: u32, alive: bool) -> Parked<Fake> {
        let mrtr = Mrtr {
            capabilities: json!({}),
            digest: String::new(),
            continuation: None,
        };
        let mut call = Call::new("{}", &mrtr, &CommandRef::default(), Duration::from_secs(1));
        (call.id, call.seq) = (id.to_owned(), seq);
        Parked {
            held: Fake { call, alive },
            asks: BTreeMap::new(),
        }
    }

    #[test]
    fn a_park_is_taken_once_and_a_replay_is_told_consumed() {
        let mut parking = Parking::default();
        parking.park(parked("a", 1, true));
        assert!(matches!(parking.take(&claims("a", 1, 3)), Ok(Taken::Parked(_))));
        assert!(matches!(parking.take(&claims("a", 1, 3)), Err(Gone::Consumed)));
        assert!(matches!(parking.take(&claims("b", 1, 3)), Err(Gone::Lost)));
    }

    #[test]
    fn an_earlier_park_an_expired_one_and_a_dead_server_are_each_told_apart() {
        let mut parking = Parking::default();
        parking.park(parked("a", 2, true));
        assert!(matches!(parking.take(&claims("a", 1, 3)), Err(Gone::Consumed)));
        assert!(parking.expire("a", 1).is_none(), "a stale expiry takes nothing");
        assert!(parking.expire("a", 2).is_some());
        assert!(matches!(parking.take(&claims("a", 2, 3)), Err(Gone::Expired)));
        parking.park(parked("c", 1, false));
        assert!(matches!(parking.take(&claims("c", 1, 3)), Ok(Taken::Lost(_))));
        assert!(matches!(parking.take(&claims("c", 1, 3)), Err(Gone::Lost)));
        parking.park(parked("d", 1, true));
        assert!(
            matches!(parking.take(&claims("d", 1, 4)), Ok(Taken::Lost(_))),
            "another child life"
        );
    }

    #[test]
    fn a_round_keeps_what_a_caller_can_answer_and_shows_no_elicitation_id() {
        let note = |json: &str| Notification {
            resp_json: serde_json::value::RawValue::from_string(json.to_owned()).unwrap(),
            resp_headers: Default::default(),
        };
        let elicit = Ask::of(&note(
            r#"{"jsonrpc":"2.0","id":"e/1","method":"elicitation/create","params":{"mode":"url","elicitationId":"x","url":"u"}}"#,
        ))
        .unwrap();
        let ping = Ask::of(&note(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)).unwrap();
        assert!(Ask::of(&note(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#)).is_none());
        assert_eq!(ping.local_answer(Declared::default()), Ok(json!({})));
        let round = Pending::of_round(vec![elicit, ping]);
        assert_eq!(round.keys().collect::<Vec<_>>(), ["ir-e1"]);
        assert_eq!(
            round["ir-e1"].shown,
            json!({"method": "elicitation/create", "params": {"mode": "url", "url": "u"}})
        );
        assert_eq!(
            answer_json("7", &Err("no".into())),
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"no"}}"#
        );
    }
}
