//! Server-to-client requests in flight, and the replies that belong to them.
//!
//! While a command's downstream leg runs, the MCP server may ask its client something
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`): the request travels to
//! the caller as a notification, and the caller's answer comes back as a command of its
//! own, a JSON-RPC *response*. That reply belongs to the leg that carried the question:
//! it is handed to the task that owns the leg (and its admission), which writes it to the
//! same MCP server. So, in strict mode, a reply is not a second dispatch and never waits
//! for the fence the question's own command holds.
//!
//! Matching is by channel, MCP session (when the command carried one) and the server's
//! request id. A server request is registered before its notification is posted (so a
//! fast reply cannot miss it), taken by the first reply that matches, and dropped when its
//! leg ends. The map is bounded: a server that asks without end cannot grow it.
//!
//! Holds no I/O and no payloads beyond the ids used as keys.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::downstream::LegResult;
use crate::protocol::{JsonRpcPayload, WireHeaders};

/// Most server requests waiting for a reply at once, across all legs.
const MAX_WAITING: usize = 1024;

/// Identifies one server request: channel, session, and the id the server chose.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ReplyKey {
    channel: String,
    session: Option<String>,
    /// The id as canonical JSON, so `1` and `1.0`-free spellings compare by value.
    id: String,
}

/// A reply to run on the leg that owns the question.
pub(crate) struct ReplyJob {
    pub(crate) payload: JsonRpcPayload,
    pub(crate) headers: WireHeaders,
    pub(crate) deadline: Option<Instant>,
    /// How the reply's own leg ended.
    pub(crate) done: oneshot::Sender<LegResult>,
}

/// Where a question's reply goes, and what is known of it for logs.
struct Waiting {
    owner: u64,
    jobs: mpsc::Sender<ReplyJob>,
    method: String,
    since: Instant,
    warned: bool,
}

/// Every server request waiting for its reply.
#[derive(Default)]
pub(crate) struct ServerRequests {
    waiting: Mutex<HashMap<ReplyKey, Waiting>>,
}

/// A question that has waited long enough to be worth a warning.
pub(crate) struct LongWait {
    pub(crate) method: String,
    pub(crate) waited: std::time::Duration,
}

impl ReplyKey {
    /// The key of a server request or reply with `id`, on `channel`, in the session the
    /// command's headers name. `None` when the id is not usable JSON.
    pub(crate) fn new(channel: &str, headers: &WireHeaders, id: &RawValue) -> Option<Self> {
        let id: serde_json::Value = serde_json::from_str(id.get()).ok()?;
        Some(Self {
            channel: channel.to_owned(),
            session: session_of(headers),
            id: id.to_string(),
        })
    }
}

impl ServerRequests {
    /// Registers a question seen on `owner`'s leg. Refused (false) past the bound; the
    /// question still reaches the caller, whose reply will then match nothing.
    pub(crate) fn register(&self, key: ReplyKey, owner: u64, method: &str, jobs: mpsc::Sender<ReplyJob>) -> bool {
        let mut waiting = self.lock();
        if waiting.len() >= MAX_WAITING && !waiting.contains_key(&key) {
            return false;
        }
        waiting.insert(
            key,
            Waiting {
                owner,
                jobs,
                method: method.to_owned(),
                since: Instant::now(),
                warned: false,
            },
        );
        true
    }

    /// The leg a reply belongs to: taken, so a second reply to one question matches nothing.
    pub(crate) fn take(&self, key: &ReplyKey) -> Option<mpsc::Sender<ReplyJob>> {
        self.lock().remove(key).map(|w| w.jobs)
    }

    /// Forgets every question of `owner` (its leg ended: nobody can deliver a reply).
    pub(crate) fn release(&self, owner: u64) {
        self.lock().retain(|_, w| w.owner != owner);
    }

    /// Whether any question of `owner` is waiting for its reply.
    pub(crate) fn has_waiting(&self, owner: u64) -> bool {
        self.lock().values().any(|w| w.owner == owner)
    }

    /// `owner`'s questions waiting longer than `after`, each reported once.
    pub(crate) fn long_waits(&self, owner: u64, after: std::time::Duration) -> Vec<LongWait> {
        let mut out = Vec::new();
        for w in self.lock().values_mut().filter(|w| w.owner == owner && !w.warned) {
            let waited = w.since.elapsed();
            if waited >= after {
                w.warned = true;
                out.push(LongWait {
                    method: w.method.clone(),
                    waited,
                });
            }
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ReplyKey, Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The `Mcp-Session-Id` a command carried, if any (first value, any spelling).
fn session_of(headers: &WireHeaders) -> Option<String> {
    crate::protocol::header_value(headers, crate::protocol::MCP_SESSION_ID).map(str::to_owned)
}

/// A server request carried as a notification: its method and id, when it is one.
pub(crate) fn server_request(json: &RawValue) -> Option<(String, Box<RawValue>)> {
    #[derive(serde::Deserialize)]
    struct Probe {
        method: Option<String>,
        id: Option<Box<RawValue>>,
    }
    let p: Probe = serde_json::from_str(json.get()).ok()?;
    Some((p.method?, p.id?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn key(channel: &str, session: Option<&str>, id: &str) -> ReplyKey {
        let headers: WireHeaders = session
            .map(|s| vec![(crate::protocol::MCP_SESSION_ID.to_owned(), vec![s.to_owned()])])
            .unwrap_or_default();
        ReplyKey::new(channel, &headers, &raw(id)).unwrap()
    }

    #[tokio::test]
    async fn a_reply_matches_its_question_once_by_channel_session_and_id() {
        let reqs = ServerRequests::default();
        let (tx, _rx) = mpsc::channel(1);
        assert!(reqs.register(key("main", Some("s1"), "7"), 1, "sampling/createMessage", tx));
        assert!(reqs.take(&key("other", Some("s1"), "7")).is_none(), "another channel");
        assert!(reqs.take(&key("main", Some("s2"), "7")).is_none(), "another session");
        assert!(
            reqs.take(&key("main", Some("s1"), "\"7\"")).is_none(),
            "a string id is not a number id"
        );
        assert!(
            reqs.take(&key("main", Some("s1"), " 7 ")).is_some(),
            "the same id, however spaced"
        );
        assert!(
            reqs.take(&key("main", Some("s1"), "7")).is_none(),
            "a second reply matches nothing"
        );
    }

    #[tokio::test]
    async fn a_leg_that_ends_takes_its_questions_with_it() {
        let reqs = ServerRequests::default();
        let (tx, _rx) = mpsc::channel(1);
        reqs.register(key("main", None, "1"), 1, "elicitation/create", tx.clone());
        reqs.register(key("main", None, "2"), 2, "roots/list", tx);
        reqs.release(1);
        assert!(reqs.take(&key("main", None, "1")).is_none());
        assert!(reqs.take(&key("main", None, "2")).is_some());
    }

    #[tokio::test]
    async fn the_map_is_bounded() {
        let reqs = ServerRequests::default();
        let (tx, _rx) = mpsc::channel(1);
        for i in 0..MAX_WAITING {
            assert!(reqs.register(key("main", None, &i.to_string()), 1, "x", tx.clone()));
        }
        assert!(!reqs.register(key("main", None, "\"one more\""), 1, "x", tx));
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_wait_is_reported_once() {
        let reqs = ServerRequests::default();
        let (tx, _rx) = mpsc::channel(1);
        reqs.register(key("main", None, "1"), 1, "sampling/createMessage", tx);
        assert!(reqs.long_waits(1, std::time::Duration::from_secs(10)).is_empty());
        tokio::time::sleep(std::time::Duration::from_secs(11)).await;
        let waits = reqs.long_waits(1, std::time::Duration::from_secs(10));
        assert_eq!(waits.len(), 1);
        assert_eq!(waits[0].method, "sampling/createMessage");
        assert!(reqs.long_waits(1, std::time::Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn only_a_message_with_method_and_id_is_a_server_request() {
        assert!(server_request(&raw(r#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage"}"#)).is_some());
        assert!(server_request(&raw(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#)).is_none());
        assert!(server_request(&raw(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#)).is_none());
    }
}
