//! Newline-delimited JSON-RPC framing for stdio: writing one message as one line,
//! reading bounded lines, and classifying what a child printed.
//!
//! Classification is pure. A line is a response (has `result` or `error`, no `method`),
//! another JSON-RPC message (notification or server request), blank, or invalid (not
//! UTF-8, not a JSON object, longer than the bound). Nothing here logs or counts.

use std::pin::Pin;

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use super::rewrite::{span_in, trim_json, Span};
use super::session::Need;

/// What one line of a child's stdout is.
#[derive(Debug)]
pub(super) enum Line {
    /// A terminal response; `id` is where its id sits in `raw` (`None` when absent or
    /// null).
    Response { id: Option<Span>, raw: Box<RawValue> },
    /// Any other JSON-RPC object: a notification or a server-to-client request.
    /// `progress`: it is a `notifications/progress` (tied to a request by its token);
    /// `ask`: it is a request (it has an id and a method), and what it needs of a caller.
    Message {
        raw: Box<RawValue>,
        progress: bool,
        ask: Option<Ask>,
    },
    /// Only whitespace: skipped silently.
    Blank,
    /// Not a JSON object: counted and skipped.
    Invalid,
}

/// A server-to-client request: where its id sits, and the client capability its method
/// needs (`None`: any caller can be asked, e.g. `ping`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Ask {
    pub(super) id: Span,
    pub(super) need: Option<Need>,
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw_present")]
    method: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// A member that is present counts, whatever its value (`"result": null` included).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(d).map(|_| true)
}

/// A present member's raw value, `null` included.
fn raw_present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Whether a raw `method` value is the string `notifications/progress`.
fn is_progress(method: &RawValue) -> bool {
    const PROGRESS: &str = "notifications/progress";
    let raw = method.get();
    if raw.len() == PROGRESS.len() + 2 && raw.starts_with('"') {
        return &raw[1..raw.len() - 1] == PROGRESS;
    }
    raw.contains('\\') && serde_json::from_str::<String>(raw).is_ok_and(|m| m == PROGRESS)
}

/// Classifies one line (without its `\n`). The raw value kept is the line's exact bytes,
/// trimmed of surrounding whitespace.
pub(super) fn classify(bytes: Vec<u8>) -> Line {
    let Ok(text) = String::from_utf8(bytes) else {
        return Line::Invalid;
    };
    let trimmed = trim_json(&text);
    if trimmed.is_empty() {
        return Line::Blank;
    }
    if !trimmed.starts_with('{') {
        return Line::Invalid;
    }
    let (is_response, id, progress, method) = match serde_json::from_str::<Probe<'_>>(trimmed) {
        Ok(p) => (
            (p.result || p.error) && p.method.is_none(),
            p.id.filter(|id| id.get() != "null").and_then(|id| span_in(trimmed, id)),
            p.method.is_some_and(is_progress),
            p.method.and_then(|m| serde_json::from_str::<String>(m.get()).ok()),
        ),
        Err(_) => return Line::Invalid,
    };
    let owned = if trimmed.len() == text.len() {
        text
    } else {
        trimmed.to_owned()
    };
    let Ok(raw) = RawValue::from_string(owned) else {
        return Line::Invalid;
    };
    if is_response {
        Line::Response { id, raw }
    } else {
        let ask = match (id, method) {
            (Some(id), Some(method)) => Some(Ask {
                id,
                need: Need::of_method(&method),
            }),
            _ => None,
        };
        Line::Message { raw, progress, ask }
    }
}

/// Where a response's id sits in its text (tests of the rewrite).
#[cfg(test)]
pub(super) fn response_id_span(json: &str) -> Option<Span> {
    match classify(json.as_bytes().to_vec()) {
        Line::Response { id, .. } => id,
        _ => None,
    }
}

/// One message as one line: the payload's bytes and a `\n`.
///
/// Valid JSON text cannot hold a raw line break inside a string, so any `\r` or `\n` in it
/// is insignificant whitespace; it becomes a space so that a pretty-printed payload still
/// travels as exactly one line.
pub(super) fn frame(json: &str) -> Vec<u8> {
    let mut line = Vec::with_capacity(json.len() + 1);
    line.extend(json.bytes().map(|b| if b == b'\n' || b == b'\r' { b' ' } else { b }));
    line.push(b'\n');
    line
}

/// How writing one line ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WriteResult {
    Done,
    /// The write failed after `written` bytes of the line were accepted by the pipe.
    Failed {
        written: usize,
        kind: std::io::ErrorKind,
    },
    /// The writing task ended without a result (runtime shutting down): unknown.
    Lost,
}

/// Writes the whole line, counting what the pipe accepted (zero accepted bytes means the
/// child cannot have seen any part of it).
pub(super) async fn write_line(w: &mut (impl AsyncWrite + Unpin), line: &[u8]) -> WriteResult {
    let mut written = 0;
    while written < line.len() {
        match w.write(&line[written..]).await {
            Ok(0) => {
                return WriteResult::Failed {
                    written,
                    kind: std::io::ErrorKind::WriteZero,
                }
            }
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return WriteResult::Failed {
                    written,
                    kind: e.kind(),
                }
            }
        }
    }
    match w.flush().await {
        Ok(()) => WriteResult::Done,
        Err(e) => WriteResult::Failed {
            written,
            kind: e.kind(),
        },
    }
}

/// One line read from a pipe.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct RawLine {
    /// The line without its `\n` (empty when it overflowed and no prefix is kept; only the
    /// first `max` bytes when a prefix is kept).
    pub(super) bytes: Vec<u8>,
    /// Its full length in bytes, without the `\n`.
    pub(super) len: usize,
    /// Longer than the bound.
    pub(super) overflow: bool,
}

/// Reads `\n`-terminated lines without ever holding more than `max` bytes of one.
pub(super) struct LineReader<R> {
    inner: BufReader<R>,
    max: usize,
    keep_prefix: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// `keep_prefix`: on overflow keep the first `max` bytes (logs) rather than nothing
    /// (messages, which are dropped whole).
    pub(super) fn new(inner: R, max: usize, keep_prefix: bool) -> Self {
        Self {
            inner: BufReader::with_capacity(64 * 1024, inner),
            max,
            keep_prefix,
        }
    }

    /// The next line; at end of input, a last unterminated line if there is one, then
    /// `None`.
    ///
    /// # Cancel safety
    /// Not cancel-safe (a partly read line is lost); the reader tasks never cancel it.
    pub(super) async fn next_line(&mut self) -> std::io::Result<Option<RawLine>> {
        let mut bytes = Vec::new();
        let mut len = 0usize;
        let mut overflow = false;
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                return Ok((len > 0).then_some(RawLine { bytes, len, overflow }));
            }
            let (chunk, used, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], i + 1, true),
                None => (available, available.len(), false),
            };
            len += chunk.len();
            if !overflow {
                let room = self.max - bytes.len();
                if chunk.len() <= room {
                    bytes.extend_from_slice(chunk);
                } else {
                    overflow = true;
                    if self.keep_prefix {
                        bytes.extend_from_slice(&chunk[..room]);
                    } else {
                        bytes = Vec::new();
                    }
                }
            }
            Pin::new(&mut self.inner).consume(used);
            if done {
                return Ok(Some(RawLine { bytes, len, overflow }));
            }
        }
    }
}

#[cfg(test)]
mod tests;
