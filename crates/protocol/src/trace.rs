//! W3C trace context as a command carries it, and as the gateway hands it on; and the few
//! facts about a message that spans may name.
//!
//! Carriers (`traceparent`, `tracestate`): the command's connector headers, and
//! `params._meta` of the JSON-RPC message (the MCP convention). This module reads them as
//! text and writes them back; it never judges a value (that is `telemetry`'s W3C parser).
//!
//! Invariant of the writers: the message bytes change only by one insertion, made of the
//! new `_meta` members; every byte the command carried stays, in order. A key already
//! present is never overwritten, and a message whose shape does not allow the insertion
//! (`params` or `_meta` not an object, a duplicate key, not an object at all) is left
//! alone.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{JsonRpcPayload, WireHeaders};

/// `traceparent` and `tracestate` as found in one carrier, unparsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceFields {
    /// `None`: absent. `Some(Err(NotText))`: present but not one text value (a number in
    /// `_meta`, two header values), so malformed whatever it says.
    pub traceparent: Option<Result<String, NotText>>,
    /// Several header values are joined with `,` (W3C list semantics).
    pub tracestate: Option<Result<String, NotText>>,
}

/// A carrier held something other than a single text value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotText;

/// Facts about a JSON-RPC response that its span may carry (never its content).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplyFacts {
    /// `error.code` of an error response.
    pub error_code: Option<i64>,
    /// `result.isError == true` (a `tools/call` whose tool failed).
    pub tool_error: bool,
    /// `result.protocolVersion` (an `initialize` answer), when it has the revision's shape.
    pub protocol_version: Option<String>,
}

/// The trace-context fields of the command's connector headers (names are matched
/// without regard to case).
pub fn header_trace_fields(headers: &WireHeaders) -> TraceFields {
    let values = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, values)| values.iter().map(String::as_str))
            .collect()
    };
    let traceparent = match values("traceparent").as_slice() {
        [] => None,
        [one] => Some(Ok((*one).to_owned())),
        _ => Some(Err(NotText)),
    };
    let tracestate = values("tracestate");
    TraceFields {
        traceparent,
        tracestate: (!tracestate.is_empty()).then(|| Ok(tracestate.join(","))),
    }
}

/// The first value of connector header `name` (any spelling), if any.
pub fn header_value<'a>(headers: &'a WireHeaders, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, values)| values.first())
        .map(String::as_str)
}

/// `headers` with `traceparent` (and `tracestate`, when given) set to these values: any
/// the command carried are replaced, every other header is kept in order.
pub fn with_trace_headers(headers: &WireHeaders, traceparent: &str, tracestate: Option<&str>) -> WireHeaders {
    let mut out: WireHeaders = headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("traceparent") && !n.eq_ignore_ascii_case("tracestate"))
        .cloned()
        .collect();
    out.push(("traceparent".to_owned(), vec![traceparent.to_owned()]));
    if let Some(state) = tracestate {
        out.push(("tracestate".to_owned(), vec![state.to_owned()]));
    }
    out
}

/// A `YYYY-MM-DD` MCP revision, the only shape of protocol version a span may carry.
pub fn is_protocol_revision(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

impl JsonRpcPayload {
    /// `params._meta.traceparent` / `tracestate` of the message.
    pub fn meta_trace_fields(&self) -> TraceFields {
        #[derive(Deserialize)]
        struct Meta {
            traceparent: Option<serde_json::Value>,
            tracestate: Option<serde_json::Value>,
        }
        #[derive(Deserialize)]
        struct Params {
            #[serde(rename = "_meta")]
            meta: Option<Meta>,
        }
        #[derive(Deserialize)]
        struct Message {
            params: Option<Params>,
        }
        let text = |v: serde_json::Value| match v {
            serde_json::Value::String(s) => Ok(s),
            _ => Err(NotText),
        };
        let meta = serde_json::from_str::<Message>(self.raw().get())
            .ok()
            .and_then(|m| m.params?.meta);
        match meta {
            Some(meta) => TraceFields {
                traceparent: meta.traceparent.map(text),
                tracestate: meta.tracestate.map(text),
            },
            None => TraceFields::default(),
        }
    }

    /// This message with `traceparent` (and `tracestate`) added to `params._meta`, or
    /// `None` when nothing may be added: `_meta` already has a `traceparent` (the
    /// command's own context is never overwritten), or the message's shape does not
    /// allow it (see the module header). A `tracestate` already present is kept.
    pub fn with_meta_trace(&self, traceparent: &str, tracestate: Option<&str>) -> Option<JsonRpcPayload> {
        let raw = self.raw().get();
        let (at, members) = meta_insertion(raw, traceparent, tracestate)?;
        let mut out = String::with_capacity(raw.len() + members.len());
        out.push_str(&raw[..at]);
        out.push_str(&members);
        out.push_str(&raw[at..]);
        JsonRpcPayload::from_raw(RawValue::from_string(out).ok()?)
    }

    /// `params.name` of a `prompts/get`, for span names; `None` for anything else.
    pub fn prompt_name(&self) -> Option<String> {
        if self.method() != Some("prompts/get") {
            return None;
        }
        self.params_name()
    }
}

/// What spans may know of a JSON-RPC response: its error code, whether a tool failed,
/// and an `initialize` answer's protocol revision. `None` when it is not a JSON object.
pub fn reply_facts(raw: &RawValue) -> Option<ReplyFacts> {
    #[derive(Deserialize)]
    struct Error {
        code: Option<i64>,
    }
    #[derive(Deserialize)]
    struct Result {
        #[serde(rename = "isError")]
        is_error: Option<serde_json::Value>,
        #[serde(rename = "protocolVersion")]
        protocol_version: Option<serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct Reply {
        error: Option<Error>,
        result: Option<Result>,
    }
    let reply: Reply = serde_json::from_str(raw.get()).ok()?;
    let result = reply.result;
    Some(ReplyFacts {
        error_code: reply.error.and_then(|e| e.code),
        tool_error: result
            .as_ref()
            .is_some_and(|r| r.is_error == Some(serde_json::Value::Bool(true))),
        protocol_version: result
            .and_then(|r| r.protocol_version)
            .and_then(|v| v.as_str().map(str::to_owned))
            .filter(|v| is_protocol_revision(v)),
    })
}

/// The `method` of a JSON-RPC message (a server's notification or request), if any.
pub fn message_method(raw: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Probe {
        method: Option<String>,
    }
    serde_json::from_str::<Probe>(raw.get()).ok()?.method
}

/// Where to insert which bytes so that `params._meta` of the object `raw` gains
/// `traceparent` (and `tracestate`): `(byte offset, text)`. `None` when nothing may be
/// inserted (see [`JsonRpcPayload::with_meta_trace`]).
fn meta_insertion(raw: &str, traceparent: &str, tracestate: Option<&str>) -> Option<(usize, String)> {
    let members = |state: Option<&str>| {
        let quoted = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let mut m = format!("\"traceparent\":{}", quoted(traceparent));
        if let Some(state) = state {
            m.push_str(&format!(",\"tracestate\":{}", quoted(state)));
        }
        m
    };
    let message = Entries::of(raw)?;
    let Some(params) = message.single("params")? else {
        let params = format!("\"params\":{{\"_meta\":{{{}}}}}", members(tracestate));
        return Some(message.append(raw, &params));
    };
    let params_at = offset(raw, params.get());
    let params_entries = Entries::of(params.get())?;
    let Some(meta) = params_entries.single("_meta")? else {
        let meta = format!("\"_meta\":{{{}}}", members(tracestate));
        let (at, text) = params_entries.append(params.get(), &meta);
        return Some((params_at + at, text));
    };
    let meta_at = params_at + offset(params.get(), meta.get());
    let meta_entries = Entries::of(meta.get())?;
    if meta_entries.has("traceparent") {
        return None;
    }
    let state = tracestate.filter(|_| !meta_entries.has("tracestate"));
    let (at, text) = meta_entries.append(meta.get(), &members(state));
    Some((meta_at + at, text))
}

/// Byte offset of `inner` (a slice borrowed from `outer`) within `outer`.
fn offset(outer: &str, inner: &str) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

/// The members of a JSON object, in order, each value borrowed from the object's text.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'a> Entries<'a> {
    /// `None` when `text` is not a JSON object.
    fn of(text: &'a str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    /// The one member named `key`: `Some(None)` when absent, `None` when repeated (which
    /// one a reader takes is not ours to guess).
    fn single(&self, key: &str) -> Option<Option<&'a RawValue>> {
        let mut found = self.0.iter().filter(|(k, _)| k == key).map(|(_, v)| *v);
        match (found.next(), found.next()) {
            (None, _) => Some(None),
            (Some(v), None) => Some(Some(v)),
            (Some(_), Some(_)) => None,
        }
    }

    /// Where `members` go to become the last members of this object (`text`): before its
    /// closing brace, after a comma unless the object is empty.
    fn append(&self, text: &str, members: &str) -> (usize, String) {
        let close = text.rfind('}').expect("a parsed JSON object ends with '}'");
        let comma = if self.0.is_empty() { "" } else { "," };
        (close, format!("{comma}{members}"))
    }
}

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, &'de RawValue>()? {
                    out.push((key, value));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Members)
    }
}

#[cfg(test)]
mod tests;
