//! Asking a handshake-era caller what a 2026-07-28 server's `input_required` round needs:
//! each input request goes to the caller as a request of its call (a notification the
//! dispatcher registers, so that the caller's reply, a command of its own, comes back to
//! the same leg), and the reply is taken here instead of being written to the server.
//!
//! Invariants:
//! - a request is registered here before it is handed to the caller, and its reply is
//!   taken once; an unanswered one is forgotten at the round's bound;
//! - a caller is asked only for what it declared in its `initialize`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::oneshot;
use tokio::time::{timeout_at, Instant};

use super::up;
use crate::downstream::caller::{Declared, Need};
use crate::downstream::{Notification, NotifySink, Reply};
use crate::protocol::{json_resp_headers, JsonRpcPayload, RespType};

/// Replies awaited from handshake-era callers, by the id the gateway gave the request:
/// the reply's `result`, or its `error` as `Err`.
#[derive(Default)]
pub(crate) struct Waiters {
    by_id: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
}

impl Waiters {
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

    /// A caller's reply to a request asked here: taken (acknowledged `202`), never
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
        Some(Reply {
            resp_json: None,
            resp_headers: std::collections::BTreeMap::new(),
            resp_code: 202,
            resp_type: RespType::NotifyAck,
        })
    }
}
