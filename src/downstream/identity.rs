//! What a channel's MCP server said about itself, as the gateway saw it go by: the server
//! identity (`serverInfo`) and protocol revision of the last `initialize` answer, and the
//! number of tools in the last `tools/list` answer. `/status` shows them per channel
//! (health receipts).
//!
//! Only observed traffic: the gateway never asks a server for its tools itself. An answer
//! is read, never re-serialized (the forwarded bytes stay as they came), and only when
//! the command's method, already parsed, is `initialize` or `tools/list`; every other
//! answer costs one string comparison and no lock.
//!
//! Privacy: a server's strings are untrusted. Each is cut to [`MAX_READ_CHARS`], passed
//! through the stdio stderr redactor (secrets become `[redacted]`, control characters
//! spaces), cleared of invisible formatting characters (bidi overrides, zero-width
//! marks) and bounded to [`MAX_IDENTITY_CHARS`] characters. No payload is ever kept:
//! a name, a version, a revision and a count.

use std::sync::Mutex;

use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::redact::redact_line;
use super::{LegOutcome, LegResult};

/// Longest server name, version or protocol revision kept, in characters.
pub(crate) const MAX_IDENTITY_CHARS: usize = 64;

/// Characters of a server string the redactor reads at most: it sees more than is kept
/// (a secret straddling the cut is redacted whole), never an unbounded string.
const MAX_READ_CHARS: usize = 1024;

/// Ends a string that was cut to [`MAX_IDENTITY_CHARS`].
const CUT: char = '…';

/// A server's `serverInfo`, bounded and redacted (`/status` `server`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ServerIdentity {
    pub name: String,
    /// `null` when the server gave none (it is required by MCP, and not always sent).
    pub version: Option<String>,
}

/// What was last seen of one channel's server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// From the last `initialize` answer with a result.
    pub server: Option<ServerIdentity>,
    pub protocol_version: Option<String>,
    /// Tools in the last `tools/list` answer (one page, when the server paginates).
    pub tools: Option<u64>,
}

/// One channel's [`Seen`], updated only by `initialize` and `tools/list` answers.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    seen: Mutex<Seen>,
}

/// What an answer told.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Initialized {
        server: Option<ServerIdentity>,
        protocol_version: Option<String>,
    },
    Tools(u64),
}

impl Observed {
    /// Records what the answer to a request of `method` tells, when the leg was answered
    /// with a JSON-RPC result (an error, a refusal or no answer changes nothing).
    pub(crate) fn answered(&self, method: &str, leg: &LegResult) {
        if !matches!(method, "initialize" | "tools/list")
            || leg.outcome != LegOutcome::Answered
            || leg.failure.is_some()
        {
            return;
        }
        if let Some(answer) = leg.reply.resp_json.as_deref().and_then(|raw| read_answer(method, raw)) {
            self.record(answer);
        }
    }

    /// Records the result of an `initialize` (a caller's, or the gateway's own).
    pub(crate) fn record(&self, answer: Answer) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match answer {
            Answer::Initialized {
                server,
                protocol_version,
            } => {
                seen.server = server;
                seen.protocol_version = protocol_version;
            }
            Answer::Tools(n) => seen.tools = Some(n),
        }
    }

    pub(crate) fn seen(&self) -> Seen {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What the answer `raw` to a request of `method` tells: `None` for another method, an
/// error answer, or a result of the wrong shape.
pub(crate) fn read_answer(method: &str, raw: &RawValue) -> Option<Answer> {
    match method {
        "initialize" => {
            #[derive(Deserialize)]
            struct Probe {
                result: Option<InitResult>,
            }
            #[derive(Deserialize)]
            struct InitResult {
                #[serde(rename = "protocolVersion")]
                protocol_version: Option<Value>,
                #[serde(rename = "serverInfo")]
                server_info: Option<Value>,
            }
            let result = serde_json::from_str::<Probe>(raw.get()).ok()?.result?;
            Some(initialized(
                result.server_info.as_ref(),
                result.protocol_version.as_ref(),
            ))
        }
        "tools/list" => {
            #[derive(Deserialize)]
            struct Probe {
                result: Option<ToolsResult>,
            }
            #[derive(Deserialize)]
            struct ToolsResult {
                tools: Count,
            }
            let result = serde_json::from_str::<Probe>(raw.get()).ok()?.result?;
            Some(Answer::Tools(result.tools.0))
        }
        _ => None,
    }
}

/// An `initialize` result's identity: `server_info` its `serverInfo`, `protocol_version`
/// its `protocolVersion` (each kept only when its parts are strings).
pub(crate) fn initialized(server_info: Option<&Value>, protocol_version: Option<&Value>) -> Answer {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).and_then(bounded);
    let server = server_info.and_then(|info| {
        Some(ServerIdentity {
            name: text(info.get("name"))?,
            version: text(info.get("version")),
        })
    });
    Answer::Initialized {
        server,
        protocol_version: text(protocol_version),
    }
}

/// A server string as `/status` may show it: redacted, without control or invisible
/// characters, at most [`MAX_IDENTITY_CHARS`] characters (cut ones end with `…`); `None`
/// when nothing printable is left.
pub(crate) fn bounded(s: &str) -> Option<String> {
    let head: String = s.chars().take(MAX_READ_CHARS).collect();
    let redacted = redact_line(&head);
    let visible: String = redacted.chars().filter(|c| !is_invisible(*c)).collect();
    let trimmed = visible.trim();
    if trimmed.is_empty() {
        return None;
    }
    if trimmed.chars().count() <= MAX_IDENTITY_CHARS {
        return Some(trimmed.to_owned());
    }
    let mut cut: String = trimmed.chars().take(MAX_IDENTITY_CHARS - 1).collect();
    cut.push(CUT);
    Some(cut)
}

/// Control characters, and the formatting ones that change how text around them reads
/// (bidi embeddings and overrides, zero-width marks, the byte order mark).
fn is_invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// The length of a JSON array, counted without keeping its elements.
struct Count(u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Counter;
        impl<'de> Visitor<'de> for Counter {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(Counter)
    }
}

#[cfg(test)]
mod tests;
