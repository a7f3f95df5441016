//! What the simulator received and answered, kept whole so tests can assert exactly
//! what reached the control plane (bodies as raw bytes, headers as sent).

use bytes::Bytes;

use super::fault::FaultAction;

/// Everything received so far, in arrival order. A poll is recorded on arrival and a
/// response POST once its body is read; each gets its status when it is answered, so a
/// `None` status means held, closed, still waiting, or abandoned by the client.
#[derive(Clone, Debug, Default)]
pub struct Record {
    pub polls: Vec<PollRecord>,
    pub responses: Vec<ResponseRecord>,
    /// Every command queued, in queue order.
    pub commands: Vec<CommandRecord>,
}

/// Request headers: names lowercased, values as received (lossy UTF-8), in order.
pub type RecordedHeaders = Vec<(String, String)>;

/// One poll request.
#[derive(Clone, Debug, Default)]
pub struct PollRecord {
    /// 1-based index among all poll requests received (the `nth` of poll faults).
    pub nth: u64,
    /// The raw query string.
    pub query: String,
    /// `limit` and `timeout_ms` when present and numeric.
    pub limit: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub headers: RecordedHeaders,
    /// `None` until answered (and for good when held, closed or abandoned).
    pub status: Option<u16>,
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
    pub order: Option<u64>,
    /// 1-based attempt among POSTs with the same request id and `resp_type`.
    pub attempt: u32,
    /// `None` until answered (and for good when held, closed or abandoned).
    pub status: Option<u16>,
    pub fault: Option<FaultAction>,
    /// Whether this POST completed its request (a final type, accepted).
    pub completed: bool,
}

/// One queued command.
#[derive(Clone, Debug, Default)]
pub struct CommandRecord {
    /// 1-based queue order (the `order` of fault selectors).
    pub order: u64,
    pub request_id: Option<String>,
    pub command_type: Option<String>,
    pub method: Option<String>,
    pub tool: Option<String>,
    /// Whether a poll has handed it out.
    pub issued: bool,
}

fn find<'a>(headers: &'a RecordedHeaders, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
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
