//! Asking a handshake-era caller what a 2026-07-28 server's `input_required` round needs:
//! each input request goes to the caller as a request of its call (a notification the
//! dispatcher registers, so that the caller's reply, a command of its own, comes back to
//! the same leg), and the reply is taken here instead of being written to the server.
//!
//! [`Waiters::rounds`] is the whole exchange with a 2026-07-28 server, whichever
//! transport carries it: the request stamped, each `input_required` round asked of the
//! caller, and the request sent again with the answers and the server's `requestState`.
//!
//! Invariants:
//! - a request is registered here before it is handed to the caller, and its reply is
//!   taken once; an unanswered one is forgotten at the round's bound;
//! - a caller is asked only for what it declared in its `initialize`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::oneshot;
use tokio::time::{timeout_at, Instant};

use super::up;
use crate::downstream::caller::{Declared, Need};
use crate::downstream::{LegFailure, LegResult, Notification, NotifySink, Reply};
use crate::protocol::{json_resp_headers, JsonRpcPayload};

/// The pause before a round the server answered with a `requestState` alone.
const STATE_ONLY_PAUSE: Duration = Duration::from_millis(50);

/// Replies awaited from handshake-era callers, by the id the gateway gave the request:
/// the reply's `result`, or its `error` as `Err`.
#[derive(Default)]
pub(crate) struct Waiters {
    by_id: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
}

impl Waiters {
    /// A handshake-era caller's request (`payload`) to a 2026-07-28 server through
    /// `send`: stamped with the envelope (what the caller `declared`), each
    /// `input_required` round asked of the caller and sent again, at most `max_rounds`
    /// rounds, each within `limit`. The server's final answer without the 2026-07-28
    /// fields, or the call's end in words when a round cannot be completed.
    pub(crate) async fn rounds<F, Fut>(
        &self,
        payload: &JsonRpcPayload,
        declared: Declared,
        (notes, limit): (&NotifySink, Instant),
        max_rounds: u32,
        mut send: F,
    ) -> Result<Reply, LegFailure>
    where
        F: FnMut(JsonRpcPayload) -> Fut,
        Fut: Future<Output = LegResult>,
    {
        let id = payload.id().ok_or(LegFailure::InternalBeforeSend)?;
        let method = payload.method().unwrap_or_default();
        let capabilities = declared.capabilities();
        let mut retry: Option<(Value, Value)> = None;
        let mut rounds = 0;
        loop {
            let stamped = up::stamp(payload, &capabilities, retry.as_ref().map(|(r, s)| (r, s)))
                .ok_or(LegFailure::InternalBeforeSend)?;
            let leg = send(stamped).await;
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
            if rounds > max_rounds {
                return Ok(up::round_failed(id, method, "the MCP server asked for input more times than the gateway allows for one call; the call ended without a result"));
            }
            let state = round.request_state.clone().unwrap_or(Value::Null);
            if round.requests.is_empty() {
                tokio::time::sleep(STATE_ONLY_PAUSE).await;
                retry = Some((Value::Object(Map::new()), state));
                continue;
            }
            match self.ask(&round.requests, declared, notes, limit).await {
                Ok(answers) => retry = Some((Value::Object(answers), state)),
                Err(why) => return Ok(up::round_failed(id, method, &why)),
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Result<Value, Value>>>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the caller each of the server's input `requests` through `notes` and waits
    /// for every reply until `limit`: the answers keyed as asked, or why the round cannot
    /// be completed (in words for the caller).
    pub(crate) async fn ask(
        &self,
        requests: &Map<String, Value>,
        declared: Declared,
        notes: &NotifySink,
        limit: Instant,
    ) -> Result<Map<String, Value>, String> {
        let mut waiting = BTreeMap::new();
        for (key, request) in requests {
            let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
            match Need::of_method(method) {
                Some(need) if declared.allows(need) => {}
                Some(need) => {
                    return Err(format!(
                        "the MCP server asked for {} input, which this caller did not declare in initialize; the call ended without a result",
                        need.capability()
                    ))
                }
                None => return Err(format!("the MCP server asked for {method:?}, which the gateway cannot ask a caller")),
            }
            let gateway_id = format!("tg-ir-{}", crate::protocol::random_hex(8));
            let message =
                up::caller_request(&gateway_id, request).ok_or("the MCP server's input request is malformed")?;
            let (tx, rx) = oneshot::channel();
            self.lock().insert(gateway_id.clone(), tx);
            let note = Notification {
                resp_json: RawValue::from_string(message.to_string()).expect("a JSON value is JSON"),
                resp_headers: json_resp_headers(),
            };
            if notes.send(note).await.is_err() {
                self.lock().remove(&gateway_id);
                return Err("the caller's request ended before it could be asked for input".to_owned());
            }
            waiting.insert(key.clone(), (gateway_id, rx));
        }
        let mut answers = Map::new();
        for (key, (gateway_id, rx)) in waiting {
            match timeout_at(limit, rx).await {
                Ok(Ok(Ok(result))) => {
                    answers.insert(key, result);
                }
                Ok(Ok(Err(_))) => {
                    return Err("the caller answered the MCP server's request for input with an error; the call ended without a result".to_owned())
                }
                _ => {
                    self.lock().remove(&gateway_id);
                    return Err("the caller did not answer the MCP server's request for input in time; the call ended without a result".to_owned());
                }
            }
        }
        Ok(answers)
    }

    /// A caller's reply to a request asked here: taken (acknowledged `200`), never
    /// forwarded. `None` for any other reply.
    pub(crate) fn take(&self, payload: &JsonRpcPayload) -> Option<Reply> {
        let id: Value = serde_json::from_str(payload.id()?.get()).ok()?;
        let waiter = self.lock().remove(id.as_str()?)?;
        let message: Value = serde_json::from_str(payload.raw().get()).ok()?;
        let answer = match (message.get("result"), message.get("error")) {
            (Some(result), _) => Ok(result.clone()),
            (None, error) => Err(error.cloned().unwrap_or(Value::Null)),
        };
        let _ = waiter.send(answer);
        Some(Reply::acknowledged())
    }
}
