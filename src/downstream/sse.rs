//! A pure, incremental `text/event-stream` parser (the WHATWG "event stream
//! interpretation"), fed with whatever chunks the network delivers.
//!
//! Invariants:
//! - chunk boundaries never change the result: the same bytes split anywhere yield the
//!   same events (pinned by a property test);
//! - lines end at CRLF, LF or CR (a CR at the end of one chunk and an LF at the start of
//!   the next are one line ending); a leading UTF-8 BOM is dropped;
//! - an event is dispatched only at a blank line: an event cut off by the end of the
//!   stream is never dispatched, so a half-received message can never pass for a whole one;
//! - the last event id and the `retry` hint survive into a resumed stream.
//!
//! Must not touch: sockets, clocks, JSON. The transport decides what an event means.

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` type, `message` when none was given.
    pub(crate) event: String,
    /// The `data:` lines joined with LF, without the final LF.
    pub(crate) data: String,
    /// The last event id in force when the event was dispatched (empty: none).
    pub(crate) id: String,
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Incremental parser state for one stream.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous byte was a CR: an LF right after it belongs to the same line ending.
    after_cr: bool,
    /// The BOM check is over (the first non-BOM byte, or a whole BOM, was seen).
    started: bool,
    /// How many bytes of a leading BOM have been matched so far.
    bom_matched: usize,
    data: Vec<u8>,
    event_type: Vec<u8>,
    /// The "last event ID buffer": set by `id:` lines, kept across events.
    id_buffer: String,
    /// The "last event ID string": what the buffer held at the last dispatch.
    last_event_id: String,
    retry_ms: Option<u64>,
}

impl SseParser {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The parser for a reconnected stream: partial state is discarded, the last event id
    /// and the retry hint are kept.
    pub(crate) fn resumed(&self) -> Self {
        Self {
            id_buffer: self.last_event_id.clone(),
            last_event_id: self.last_event_id.clone(),
            retry_ms: self.retry_ms,
            ..Self::default()
        }
    }

    /// The id of the last dispatched event (empty when the server stamped none).
    pub(crate) fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// The latest valid `retry:` hint, in milliseconds.
    pub(crate) fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Bytes held for an event not yet dispatched (the current line and data so far).
    pub(crate) fn buffered(&self) -> usize {
        self.line.len() + self.data.len() + self.event_type.len()
    }

    /// Consumes one chunk, appending every event it completes to `out`, in order.
    pub(crate) fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) {
        if !self.started {
            while let Some((&b, rest)) = chunk.split_first() {
                if b == BOM[self.bom_matched] {
                    self.bom_matched += 1;
                    chunk = rest;
                    if self.bom_matched == BOM.len() {
                        self.started = true;
                        break;
                    }
                } else {
                    // Not a BOM after all: the bytes matched so far are content.
                    self.started = true;
                    self.line.extend_from_slice(&BOM[..self.bom_matched]);
                    break;
                }
            }
            if !self.started {
                return;
            }
        }
        while !chunk.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if chunk[0] == b'\n' {
                    chunk = &chunk[1..];
                    continue;
                }
            }
            match chunk.iter().position(|b| *b == b'\r' || *b == b'\n') {
                Some(end) => {
                    self.line.extend_from_slice(&chunk[..end]);
                    self.after_cr = chunk[end] == b'\r';
                    chunk = &chunk[end + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, out);
                    // Keep the allocation for the next line.
                    self.line = line;
                    self.line.clear();
                }
                None => {
                    self.line.extend_from_slice(chunk);
                    break;
                }
            }
        }
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return; // comment (keep-alive)
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => {
                self.event_type.clear();
                self.event_type.extend_from_slice(value);
            }
            // An id containing NUL is ignored.
            b"id" if !value.contains(&0) => {
                self.id_buffer = String::from_utf8_lossy(value).into_owned();
            }
            // Only an all-digit value sets the retry hint.
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                let ms = value.iter().fold(0u64, |acc, d| {
                    acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                });
                self.retry_ms = Some(ms);
            }
            _ => {} // unknown fields (and rejected id/retry values) are ignored
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        self.last_event_id.clone_from(&self.id_buffer);
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        self.data.pop(); // the LF appended after the last data line
        let event = if self.event_type.is_empty() {
            "message".to_owned()
        } else {
            String::from_utf8_lossy(&self.event_type).into_owned()
        };
        let data = match String::from_utf8(std::mem::take(&mut self.data)) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        self.event_type.clear();
        out.push(SseEvent {
            event,
            data,
            id: self.last_event_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests;
