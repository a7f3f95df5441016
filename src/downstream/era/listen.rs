//! `subscriptions/listen` of a 2026-07-28 caller carried onto a handshake-era server's
//! notifications (pure): what the caller asked for, the subset the server's capabilities
//! honour (the acknowledgement), and which of the server's notifications a listener gets,
//! stamped with its `subscriptionId`.

use serde_json::{json, Map, Value};

use crate::downstream::Notification;
use crate::protocol::json_resp_headers;

const KEY_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

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
