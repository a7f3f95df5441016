//! `subscriptions/listen` of a 2026-07-28 caller carried onto a handshake-era server's
//! notifications (pure): what the caller asked for, the subset the server's capabilities
//! honour (the acknowledgement), and which of the server's notifications a listener gets,
//! stamped with its `subscriptionId`.

use std::collections::HashMap;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::downstream::Notification;
use crate::protocol::json_resp_headers;

const KEY_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The listeners of one channel and the URIs subscribed on its server for them.
#[derive(Default)]
pub(crate) struct Listeners {
    next: u64,
    by_key: HashMap<u64, Listener>,
    subscribed: HashMap<String, usize>,
}

struct Listener {
    listen_id: String,
    wants: Wants,
    events: mpsc::Sender<Notification>,
}

impl Listeners {
    /// A listener of the listen request `listen_id` (raw JSON), getting what `wants` covers
    /// on `events`; its key, to remove it.
    pub(crate) fn add(&mut self, listen_id: &str, wants: Wants, events: mpsc::Sender<Notification>) -> u64 {
        self.next += 1;
        self.by_key.insert(
            self.next,
            Listener {
                listen_id: listen_id.to_owned(),
                wants,
                events,
            },
        );
        self.next
    }

    pub(crate) fn remove(&mut self, key: u64) {
        self.by_key.remove(&key);
    }

    /// Hands a server's notification to every listener that wants it, never waiting: a
    /// full listener misses it. How many missed it.
    pub(crate) fn relay(&self, json: &str) -> usize {
        if !may_concern_listeners(json) {
            return 0;
        }
        let mut missed = 0;
        for listener in self.by_key.values() {
            if let Some(event) = event(json, &listener.listen_id, &listener.wants) {
                missed += usize::from(listener.events.try_send(event).is_err());
            }
        }
        missed
    }

    /// One more listener for `uri` if it is subscribed already (true); else the caller
    /// subscribes it on the server and, if accepted, calls [`Listeners::subscribed`].
    pub(crate) fn join(&mut self, uri: &str) -> bool {
        self.subscribed.get_mut(uri).map(|count| *count += 1).is_some()
    }

    /// The server accepted the subscription of `uri` for one listener.
    pub(crate) fn subscribed(&mut self, uri: &str) {
        *self.subscribed.entry(uri.to_owned()).or_insert(0) += 1;
    }

    /// One listener less for `uri`: whether it was the last (the caller unsubscribes it).
    pub(crate) fn leave(&mut self, uri: &str) -> bool {
        match self.subscribed.get_mut(uri) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                self.subscribed.remove(uri);
                true
            }
            None => false,
        }
    }
}

/// What a listener asked for, or what is honoured of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wants {
    pub(crate) tools: bool,
    pub(crate) prompts: bool,
    pub(crate) resources: bool,
    /// URIs whose `notifications/resources/updated` it gets.
    pub(crate) uris: Vec<String>,
}

impl Wants {
    /// What a `subscriptions/listen` request's `params.notifications` asks for.
    pub(crate) fn of_request(params: Option<&Map<String, Value>>) -> Self {
        let asked = params.and_then(|p| p.get("notifications"));
        let flag = |name: &str| {
            asked
                .and_then(|n| n.get(name))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        Self {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris: asked
                .and_then(|n| n.get("resourceSubscriptions"))
                .and_then(Value::as_array)
                .map(|uris| uris.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default(),
        }
    }

    /// The subset the server's `capabilities` can deliver: a list's `listChanged`, and
    /// resource subscriptions only with `resources.subscribe`.
    pub(crate) fn honoured_by(&self, capabilities: Option<&Value>) -> Self {
        let has = |cap: &str, flag: &str| {
            capabilities
                .and_then(|c| c.get(cap))
                .and_then(|c| c.get(flag))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        Self {
            tools: self.tools && has("tools", "listChanged"),
            prompts: self.prompts && has("prompts", "listChanged"),
            resources: self.resources && has("resources", "listChanged"),
            uris: if has("resources", "subscribe") {
                self.uris.clone()
            } else {
                Vec::new()
            },
        }
    }

    /// Whether a server notification of `method` (and `uri`, for an update) is one this
    /// listener gets.
    pub(crate) fn gets(&self, method: &str, uri: Option<&str>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => uri.is_some_and(|u| self.uris.iter().any(|w| w == u)),
            _ => false,
        }
    }
}

/// The listener's first message: `notifications/subscriptions/acknowledged` with what
/// is honoured, under the listen request's id (`listen_id`, raw JSON).
pub(crate) fn acknowledged(listen_id: &str, honoured: &Wants) -> Notification {
    let notifications = json!({
        "toolsListChanged": honoured.tools,
        "promptsListChanged": honoured.prompts,
        "resourcesListChanged": honoured.resources,
        "resourceSubscriptions": honoured.uris,
    });
    let id: Value = serde_json::from_str(listen_id).unwrap_or(Value::Null);
    let message = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": notifications, "_meta": {KEY_SUBSCRIPTION_ID: id}}});
    note(&message)
}

/// A server notification as a listener's event (its `subscriptionId` in `_meta`), when
/// `wants` covers it.
pub(crate) fn event(json: &str, listen_id: &str, wants: &Wants) -> Option<Notification> {
    let mut message: Value = serde_json::from_str(json).ok()?;
    let method = message.get("method")?.as_str()?.to_owned();
    if message.get("id").is_some() {
        return None;
    }
    let uri = message
        .pointer("/params/uri")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if !wants.gets(&method, uri.as_deref()) {
        return None;
    }
    let id: Value = serde_json::from_str(listen_id).ok()?;
    let params = message.as_object_mut()?.entry("params").or_insert_with(|| json!({}));
    let meta = params.as_object_mut()?.entry("_meta").or_insert_with(|| json!({}));
    meta.as_object_mut()?.insert(KEY_SUBSCRIPTION_ID.to_owned(), id);
    Some(note(&message))
}

/// Whether a server message is a notification a listener may get (cheap pre-check).
pub(crate) fn may_concern_listeners(json: &str) -> bool {
    json.contains("/list_changed") || json.contains("notifications/resources/updated")
}

fn note(message: &Value) -> Notification {
    Notification {
        resp_json: serde_json::value::RawValue::from_string(message.to_string()).expect("JSON"),
        resp_headers: json_resp_headers(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_server_can_deliver_is_honoured_and_relayed() {
        let params = json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true,
            "resourceSubscriptions": ["a://1"]}});
        let wants = Wants::of_request(params.as_object());
        let caps = json!({"tools": {"listChanged": true}, "prompts": {}, "resources": {"subscribe": true}});
        let honoured = wants.honoured_by(Some(&caps));
        assert_eq!(
            honoured,
            Wants {
                tools: true,
                prompts: false,
                resources: false,
                uris: vec!["a://1".into()]
            }
        );
        let ack: Value = serde_json::from_str(acknowledged("\"L\"", &honoured).resp_json.get()).unwrap();
        assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L");
        assert_eq!(
            ack["params"]["notifications"]["resourceSubscriptions"],
            json!(["a://1"])
        );
        let updated = r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a://1"}}"#;
        let relayed: Value = serde_json::from_str(event(updated, "7", &honoured).unwrap().resp_json.get()).unwrap();
        assert_eq!(relayed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7);
        assert!(event(
            r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"b://2"}}"#,
            "7",
            &honoured
        )
        .is_none());
        assert!(event(
            r#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#,
            "7",
            &honoured
        )
        .is_none());
        assert!(event(
            r#"{"jsonrpc":"2.0","id":1,"method":"notifications/tools/list_changed"}"#,
            "7",
            &honoured
        )
        .is_none());
    }
}
