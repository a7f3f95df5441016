//! The log ring: the last `ops.log_buffer_events` log events, in memory, for the ops
//! listener's `/events` and the support bundle.
//!
//! [`RingLayer`] sits beside the log output under the same filters (see
//! [`super::logging::init`]): it sees exactly the events and the one command span the
//! printed log sees, and keeps what the printed line carries (time, level, target,
//! message, the event's fields, then the command span's fields), never more. Nothing the
//! crate logs carries a payload, a header value or a key (see [`super::logging`]), so
//! neither does the ring.
//!
//! Bounded: at most `capacity` events, the oldest overwritten (and counted) when a new
//! one arrives; each event at most [`MAX_MESSAGE_BYTES`] of message and [`MAX_FIELDS`]
//! fields of at most [`MAX_VALUE_BYTES`] each, longer text cut at a character boundary
//! and ended with [`TRUNCATED`]. [`RingStats::bytes`] is the ring's own accounting of
//! what it holds (docs/PERFORMANCE.md has the measured figures).
//!
//! A push is one short critical section on a `std` mutex; nothing here blocks or awaits.
//! A snapshot copies the events it returns under that lock, so a log line waits for the
//! copy of a large one (`GET /events` of a full ring at the maximum, say).

use std::collections::VecDeque;
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use serde::{Serialize, Serializer};
use tracing::field::{Field as TracingField, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The most of an event's message kept, in bytes (before [`TRUNCATED`]).
pub(crate) const MAX_MESSAGE_BYTES: usize = 512;
/// The most of one field's value kept, in bytes (before [`TRUNCATED`]).
pub(crate) const MAX_VALUE_BYTES: usize = 128;
/// The most fields kept per event (the event's own first, then the command span's).
pub(crate) const MAX_FIELDS: usize = 16;
/// Ends a message or value that was cut.
pub(crate) const TRUNCATED: &str = "…[truncated]";

/// The ring. Shared: the layer writes it, the ops listener reads it.
pub struct LogRing {
    capacity: usize,
    inner: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    events: VecDeque<Stored>,
    bytes: usize,
    dropped: u64,
}

/// One log event as the printed line carries it (API: the keys of `/events`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogEvent {
    /// RFC 3339, UTC, microseconds.
    #[serde(serialize_with = "rfc3339")]
    pub time: SystemTime,
    /// `TRACE` to `ERROR`, as the log line prints it.
    pub level: &'static str,
    pub target: &'static str,
    pub message: String,
    /// The event's fields in the order logged, then the command span's.
    pub fields: Vec<LogField>,
}

/// One name and its value as the log line renders it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogField {
    pub name: &'static str,
    pub value: String,
}

/// What the ring holds (API: the counts of `/events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RingStats {
    pub capacity: usize,
    pub held: usize,
    /// Events overwritten by newer ones since start.
    pub dropped: u64,
    /// The ring's accounting of the memory its events take.
    pub bytes: usize,
}

/// The `tracing` layer that fills a [`LogRing`]; see [`LogRing::layer`].
pub struct RingLayer {
    ring: Arc<LogRing>,
}

/// An event as the ring keeps it: two allocations, its text (the message, then each
/// value, each already bounded) and the list of field names with where each value ends.
struct Stored {
    time: SystemTime,
    level: &'static str,
    target: &'static str,
    text: Box<str>,
    message_end: u32,
    fields: Box<[(&'static str, u32)]>,
}

/// A span's fields as recorded so far (a span extension).
struct SpanFields(Vec<LogField>);

/// Builds a [`Stored`] text: each part written through [`Bounded`] at the end of `text`.
#[derive(Default)]
struct Builder {
    text: String,
    message: Option<String>,
    fields: Vec<(&'static str, u32)>,
}

/// Collects a span's fields, each value bounded.
#[derive(Default)]
struct Fields(Vec<LogField>);

/// A `fmt::Write` that appends at most `limit` bytes to `text` and notes that it cut.
struct Bounded<'a> {
    text: &'a mut String,
    room: usize,
    cut: bool,
}

impl LogRing {
    /// A ring of at most `capacity` events; 0 keeps none.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Held::default()),
        }
    }

    /// Keeps nothing (`ops.log_buffer_events = 0`, and embedders that install no layer).
    pub fn disabled() -> Self {
        Self::new(0)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The layer to install beside the log output, or `None` when the ring keeps nothing.
    pub fn layer(self: &Arc<Self>) -> Option<RingLayer> {
        (self.capacity > 0).then(|| RingLayer { ring: self.clone() })
    }

    /// Adds `event` (each part bounded as the layer bounds it), overwriting the oldest
    /// when full.
    pub fn push(&self, event: LogEvent) {
        let mut b = Builder::default();
        b.message(|w| w.write_str(&event.message));
        for f in &event.fields {
            b.field(f.name, |w| w.write_str(&f.value));
        }
        self.keep(b.finish(event.time, event.level, event.target));
    }

    fn keep(&self, event: Stored) {
        if self.capacity == 0 {
            return;
        }
        let size = event.size();
        let mut held = self.lock();
        while held.events.len() >= self.capacity {
            if let Some(old) = held.events.pop_front() {
                held.bytes -= old.size();
                held.dropped += 1;
            }
        }
        held.bytes += size;
        held.events.push_back(event);
    }

    /// The newest `limit` events (at most all held), oldest first, newest last.
    pub fn snapshot(&self, limit: usize) -> Vec<LogEvent> {
        let held = self.lock();
        let skip = held.events.len().saturating_sub(limit);
        held.events.iter().skip(skip).map(Stored::event).collect()
    }

    pub fn stats(&self) -> RingStats {
        let held = self.lock();
        RingStats {
            capacity: self.capacity,
            held: held.events.len(),
            dropped: held.dropped,
            bytes: held.bytes,
        }
    }

    /// A panic elsewhere while holding the lock leaves consistent counts (each update is
    /// whole before the guard drops), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for LogRing {
    fn default() -> Self {
        Self::disabled()
    }
}

impl Stored {
    /// What this event takes in memory, by the ring's accounting: itself, its text and its
    /// field list.
    fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.text.len() + std::mem::size_of_val(&*self.fields)
    }

    fn event(&self) -> LogEvent {
        let mut start = self.message_end as usize;
        let fields = self
            .fields
            .iter()
            .map(|&(name, end)| {
                let value = self.text[start..end as usize].to_owned();
                start = end as usize;
                LogField { name, value }
            })
            .collect();
        LogEvent {
            time: self.time,
            level: self.level,
            target: self.target,
            message: self.text[..self.message_end as usize].to_owned(),
            fields,
        }
    }
}

impl Builder {
    /// The message goes first in the text, wherever the event recorded it.
    fn message(&mut self, write: impl FnOnce(&mut Bounded<'_>) -> fmt::Result) {
        let mut message = String::new();
        Bounded::write(&mut message, MAX_MESSAGE_BYTES, write);
        self.message = Some(message);
    }

    fn field(&mut self, name: &'static str, write: impl FnOnce(&mut Bounded<'_>) -> fmt::Result) {
        if self.fields.len() >= MAX_FIELDS {
            return;
        }
        Bounded::write(&mut self.text, MAX_VALUE_BYTES, write);
        let end = u32::try_from(self.text.len()).expect("at most MAX_FIELDS bounded values");
        self.fields.push((name, end));
    }

    fn finish(self, time: SystemTime, level: &'static str, target: &'static str) -> Stored {
        let message = self.message.unwrap_or_default();
        let shift = u32::try_from(message.len()).expect("a bounded message");
        let mut text = message;
        text.push_str(&self.text);
        Stored {
            time,
            level,
            target,
            text: text.into_boxed_str(),
            message_end: shift,
            fields: self.fields.into_iter().map(|(n, end)| (n, end + shift)).collect(),
        }
    }
}

impl Visit for Builder {
    fn record_str(&mut self, field: &TracingField, value: &str) {
        if field.name() == "message" {
            self.message(|w| w.write_str(value));
        } else {
            self.field(field.name(), |w| w.write_str(value));
        }
    }

    fn record_debug(&mut self, field: &TracingField, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message(|w| write!(w, "{value:?}"));
        } else {
            self.field(field.name(), |w| write!(w, "{value:?}"));
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &TracingField, value: &str) {
        self.keep(field.name(), |w| w.write_str(value));
    }

    fn record_debug(&mut self, field: &TracingField, value: &dyn fmt::Debug) {
        self.keep(field.name(), |w| write!(w, "{value:?}"));
    }
}

impl Fields {
    fn keep(&mut self, name: &'static str, write: impl FnOnce(&mut Bounded<'_>) -> fmt::Result) {
        if self.0.len() < MAX_FIELDS {
            let mut value = String::new();
            Bounded::write(&mut value, MAX_VALUE_BYTES, write);
            self.0.push(LogField { name, value });
        }
    }
}

impl<S> Layer<S> for RingLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        span.extensions_mut().insert(SpanFields(fields.0));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<SpanFields>() {
            Some(SpanFields(kept)) => {
                for field in fields.0 {
                    // A field recorded again replaces its value, as in the log line.
                    if let Some(k) = kept.iter_mut().find(|k| k.name == field.name) {
                        k.value = field.value;
                    } else if kept.len() < MAX_FIELDS {
                        kept.push(field);
                    }
                }
            }
            None => extensions.insert(SpanFields(fields.0)),
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut b = Builder::default();
        event.record(&mut b);
        if let Some(span) = ctx.event_span(event) {
            if let Some(SpanFields(span_fields)) = span.extensions().get::<SpanFields>() {
                for f in span_fields {
                    b.field(f.name, |w| w.write_str(&f.value));
                }
            }
        }
        let meta = event.metadata();
        self.ring
            .keep(b.finish(SystemTime::now(), meta.level().as_str(), meta.target()));
    }
}

impl<'a> Bounded<'a> {
    /// Runs `write` into `text`, keeping at most `limit` bytes of what it writes (cut at a
    /// character boundary and ended with [`TRUNCATED`]).
    fn write(text: &'a mut String, limit: usize, write: impl FnOnce(&mut Bounded<'_>) -> fmt::Result) {
        let mut bounded = Bounded {
            text,
            room: limit,
            cut: false,
        };
        let _ = write(&mut bounded);
        if bounded.cut {
            bounded.text.push_str(TRUNCATED);
        }
    }
}

impl fmt::Write for Bounded<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.cut {
            return Ok(());
        }
        if s.len() <= self.room {
            self.text.push_str(s);
            self.room -= s.len();
        } else {
            let mut end = self.room;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&s[..end]);
            self.room = 0;
            self.cut = true;
        }
        Ok(())
    }
}

fn rfc3339<S: Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_micros(*time))
}

#[cfg(test)]
mod tests;
