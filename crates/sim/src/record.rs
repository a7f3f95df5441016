//! What the simulator received and answered, kept whole so tests can assert exactly
//! what reached the control plane (bodies as raw bytes, headers as sent).
//!
//! Bounded, so a long `tunnelgate sim` run does not grow without limit: each list keeps
//! its newest entries (the capacity is [`SimConfig::record_capacity`]); older ones are
//! dropped first and counted in [`Record::dropped`].
//!
//! [`SimConfig::record_capacity`]: super::SimConfig::record_capacity

use std::collections::VecDeque;

use bytes::Bytes;

use super::fault::FaultAction;

/// What was received, in arrival order (the newest entries of each kind). A poll is
/// recorded on arrival and a response POST once its body is read (or refused unread);
/// each gets its status when it is answered, so a `None` status means held, closed,
/// still waiting, or abandoned by the client.
#[derive(Clone, Debug, Default)]
pub struct Record {
    pub polls: Vec<PollRecord>,
    pub responses: Vec<ResponseRecord>,
    /// Commands queued, in queue order.
    pub commands: Vec<CommandRecord>,
    /// Tunnel metadata requests (`GET /v1/tunnels/{tunnel_id}`), answered at once.
    pub lookups: Vec<LookupRecord>,
    /// How many of the oldest entries of each list were dropped to keep it bounded.
    pub dropped: Dropped,
}

/// Entries dropped from the record, oldest first, per list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub(crate) polls: u64,
    pub(crate) responses: u64,
    pub(crate) commands: u64,
    pub(crate) lookups: u64,
}

/// The record as the simulator keeps it: three bounded lists, each entry addressed by
/// its arrival index (stable while older entries are dropped).
#[derive(Debug)]
pub(crate) struct Journal {
    pub(crate) polls: Bounded<PollRecord>,
    pub(crate) responses: Bounded<ResponseRecord>,
    pub(crate) commands: Bounded<CommandRecord>,
    pub(crate) lookups: Bounded<LookupRecord>,
}

/// A list that keeps its newest `capacity` entries.
#[derive(Debug)]
pub(crate) struct Bounded<T> {
    items: VecDeque<T>,
    capacity: usize,
    dropped: u64,
}

/// Request headers: names lowercased, values as received (lossy UTF-8), in order.
pub(crate) type RecordedHeaders = Vec<(String, String)>;

/// One poll request.
#[derive(Clone, Debug, Default)]
pub struct PollRecord {
    /// The raw query string.
    pub query: String,
    /// `limit` and `timeout_ms` when present and numeric.
    pub limit: Option<u64>,
    pub timeout_ms: Option<u64>,
    /// The `channel` parameters (the poll filter), in the order sent; empty: no filter.
    pub channels: Vec<String>,
    /// The request ids of the commands the answer carried, in order (raw commands
    /// without a string `request_id` are not listed).
    pub request_ids: Vec<String>,
    pub headers: RecordedHeaders,
    /// `None` until answered (and for good when held, closed or abandoned).
    pub status: Option<u16>,
    /// The client went away before it was answered (nothing was handed out to it).
    pub abandoned: bool,
    /// How many commands the answer carried.
    pub commands: usize,
    pub fault: Option<FaultAction>,
}

/// One response POST.
#[derive(Clone, Debug, Default)]
pub struct ResponseRecord {
    /// The body exactly as received.
    pub body: Bytes,
    /// The body parsed, when it is JSON.
    pub json: Option<serde_json::Value>,
    pub headers: RecordedHeaders,
    /// `request_id` and `resp_type` as the body spells them, when they are strings.
    pub request_id: Option<String>,
    pub resp_type: Option<String>,
    /// Order of the command this POST refers to, when known.
    pub(crate) order: Option<u64>,
    /// 1-based attempt among POSTs with the same request id and `resp_type`.
    pub(crate) attempt: u32,
    /// `None` until answered (and for good when held, closed or abandoned).
    pub status: Option<u16>,
    pub fault: Option<FaultAction>,
    /// Whether this POST completed its request (a final type, accepted).
    pub completed: bool,
}

/// One tunnel metadata request (`GET /v1/tunnels/{tunnel_id}`): it authenticates like a
/// poll and hands out nothing.
#[derive(Clone, Debug, Default)]
pub struct LookupRecord {
    pub headers: RecordedHeaders,
    pub status: u16,
}

/// One queued command.
#[derive(Clone, Debug, Default)]
pub struct CommandRecord {
    pub request_id: Option<String>,
    pub method: Option<String>,
    /// Whether a poll has handed it out.
    pub issued: bool,
}

fn find<'a>(headers: &'a RecordedHeaders, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl Journal {
    /// Each list holds at most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            polls: Bounded::new(capacity),
            responses: Bounded::new(capacity),
            commands: Bounded::new(capacity),
            lookups: Bounded::new(capacity),
        }
    }

    /// A copy of what is kept, with the drop counts.
    pub(crate) fn snapshot(&self) -> Record {
        Record {
            polls: self.polls.items.iter().cloned().collect(),
            responses: self.responses.items.iter().cloned().collect(),
            commands: self.commands.items.iter().cloned().collect(),
            lookups: self.lookups.items.iter().cloned().collect(),
            dropped: Dropped {
                polls: self.polls.dropped,
                responses: self.responses.dropped,
                commands: self.commands.dropped,
                lookups: self.lookups.dropped,
            },
        }
    }
}

impl<T> Bounded<T> {
    fn new(capacity: usize) -> Self {
        Self {
            items: VecDeque::new(),
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    /// Appends `item`, dropping the oldest entry when full; returns its arrival index.
    pub(crate) fn push(&mut self, item: T) -> u64 {
        if self.items.len() == self.capacity {
            self.items.pop_front();
            self.dropped += 1;
        }
        self.items.push_back(item);
        self.total() - 1
    }

    /// The entry with this arrival index, unless it was dropped.
    pub(crate) fn get_mut(&mut self, index: u64) -> Option<&mut T> {
        let i = usize::try_from(index.checked_sub(self.dropped)?).ok()?;
        self.items.get_mut(i)
    }

    /// Entries ever pushed, dropped ones included.
    pub(crate) fn total(&self) -> u64 {
        self.dropped + self.items.len() as u64
    }
}

impl Record {
    /// All POSTs for `request_id`, in arrival order.
    pub fn responses_for<'a>(&'a self, request_id: &'a str) -> impl Iterator<Item = &'a ResponseRecord> + 'a {
        self.responses
            .iter()
            .filter(move |r| r.request_id.as_deref() == Some(request_id))
    }

    /// Whether a final response for `request_id` was accepted.
    pub fn is_completed(&self, request_id: &str) -> bool {
        self.responses_for(request_id).any(|r| r.completed)
    }

    /// Commands handed out by polls so far.
    pub fn issued(&self) -> usize {
        self.commands.iter().filter(|c| c.issued).count()
    }
}

impl PollRecord {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find(&self.headers, name)
    }
}

impl ResponseRecord {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find(&self.headers, name)
    }
}

impl LookupRecord {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find(&self.headers, name)
    }
}

/// Copies request headers for the record.
pub(crate) fn record_headers(headers: &http::HeaderMap) -> RecordedHeaders {
    headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}
