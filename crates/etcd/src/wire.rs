//! The client's value types and their form on etcd's JSON gateway (grpc-gateway over
//! the v3 API). Pure: no I/O.
//!
//! Wire facts this module relies on (etcd 3.4, checked against a real one):
//! - keys and values are base64 strings; int64 and uint64 fields are JSON strings
//!   (numbers are accepted too);
//! - proto3 defaults are omitted: `succeeded: false`, a zero `TTL`, an empty `kvs`, and
//!   enum value 0 (a watch event of type `PUT`) are absent fields, read as their default;
//! - response fields keep the proto names (`create_revision`, `kvs`), except the lease
//!   messages' `ID` and `TTL`.
//!
//! Debug output of every type here shows the length of a value, never its bytes.

use std::fmt;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

use super::EtcdError;

/// A lease granted by etcd: its id and the TTL etcd chose (at least etcd's minimum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub id: i64,
    pub ttl: Duration,
}

/// What `maintenance/status` says, and which configured endpoint said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdStatus {
    /// The etcd server's version, e.g. `3.4.23`.
    pub version: String,
    /// The member id of the cluster's current raft leader (0: none known).
    pub leader: u64,
    /// The member id of the member that answered.
    pub member: u64,
    /// The configured endpoint that answered.
    pub endpoint: String,
}

/// One key and its value, with etcd's bookkeeping. A key that is not valid UTF-8 is
/// read lossily (this client only writes UTF-8 keys).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    /// The lease the key is bound to; 0 when none.
    pub lease: i64,
}

/// A transaction: if every `compare` holds, `success` runs, else `failure`; atomically.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Txn {
    pub compare: Vec<Compare>,
    pub success: Vec<Op>,
    pub failure: Vec<Op>,
}

/// One condition of a [`Txn`] on a key: `target(key) op operand`. A missing key has
/// create revision, mod revision, version and lease 0. The coordination compares create
/// revisions for equality only; the rest of etcd's compares, which the client's tests
/// (against a real etcd too) exercise, exist in test builds alone.
#[derive(Clone, PartialEq, Eq)]
pub enum Compare {
    CreateRevision(String, CmpOp, i64),
    #[cfg(test)]
    ModRevision(String, CmpOp, i64),
    #[cfg(test)]
    Version(String, CmpOp, i64),
    #[cfg(test)]
    Value(String, CmpOp, Vec<u8>),
    #[cfg(test)]
    Lease(String, CmpOp, i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Equal,
    #[cfg(test)]
    NotEqual,
    #[cfg(test)]
    Greater,
    #[cfg(test)]
    Less,
}

/// One operation of a [`Txn`] branch. `prefix` ranges over every key starting with `key`.
#[derive(Clone, PartialEq, Eq)]
pub enum Op {
    Put {
        key: String,
        value: Vec<u8>,
        lease: Option<i64>,
    },
    Delete {
        key: String,
        prefix: bool,
    },
    Range {
        key: String,
        prefix: bool,
    },
}

/// The answer to a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether every compare held (so `success` ran).
    pub succeeded: bool,
    /// The store's revision after the transaction.
    pub revision: i64,
    /// The results of the branch's `Op::Range`s, in their order.
    pub ranges: Vec<Vec<KeyValue>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    Put,
    Delete,
}

/// One change seen by a watch. A delete carries the key and its `mod_revision` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: WatchKind,
    pub kv: KeyValue,
}

/// One message of a watch stream, as the client needs it.
#[derive(Debug)]
pub(super) enum WatchMessage {
    /// The watch is registered; changes from now on (or from its start revision) follow.
    Created,
    /// Changes, in revision order.
    Events(Vec<WatchEvent>),
    /// A message without events (a progress notification).
    Progress,
}

/// The `range_end` that makes a range cover every key starting with `key`: `key` with
/// trailing `0xff` bytes removed and its last byte incremented. A key of only `0xff`
/// bytes (or an empty one) gives `[0]`, which etcd reads as "every key from `key` on".
pub(crate) fn prefix_end(key: &str) -> Vec<u8> {
    let mut end = key.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl CmpOp {
    fn wire(self) -> &'static str {
        match self {
            CmpOp::Equal => "EQUAL",
            #[cfg(test)]
            CmpOp::NotEqual => "NOT_EQUAL",
            #[cfg(test)]
            CmpOp::Greater => "GREATER",
            #[cfg(test)]
            CmpOp::Less => "LESS",
        }
    }
}

impl fmt::Debug for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyValue")
            .field("key", &self.key)
            .field("value", &Hidden(self.value.len()))
            .field("create_revision", &self.create_revision)
            .field("mod_revision", &self.mod_revision)
            .field("version", &self.version)
            .field("lease", &self.lease)
            .finish()
    }
}

impl fmt::Debug for Compare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compare::CreateRevision(k, op, n) => f.debug_tuple("CreateRevision").field(k).field(op).field(n).finish(),
            #[cfg(test)]
            Compare::ModRevision(k, op, n) => f.debug_tuple("ModRevision").field(k).field(op).field(n).finish(),
            #[cfg(test)]
            Compare::Version(k, op, n) => f.debug_tuple("Version").field(k).field(op).field(n).finish(),
            #[cfg(test)]
            Compare::Value(k, op, v) => f
                .debug_tuple("Value")
                .field(k)
                .field(op)
                .field(&Hidden(v.len()))
                .finish(),
            #[cfg(test)]
            Compare::Lease(k, op, n) => f.debug_tuple("Lease").field(k).field(op).field(n).finish(),
        }
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Put { key, value, lease } => f
                .debug_struct("Put")
                .field("key", key)
                .field("value", &Hidden(value.len()))
                .field("lease", lease)
                .finish(),
            Op::Delete { key, prefix } => f
                .debug_struct("Delete")
                .field("key", key)
                .field("prefix", prefix)
                .finish(),
            Op::Range { key, prefix } => f
                .debug_struct("Range")
                .field("key", key)
                .field("prefix", prefix)
                .finish(),
        }
    }
}

/// Shows a value as its length.
struct Hidden(usize);

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0)
    }
}

// ---- requests ----

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// `key` alone, or with the `range_end` of its prefix.
fn key_range(key: &str, prefix: bool) -> Value {
    let mut body = json!({ "key": b64(key.as_bytes()) });
    if prefix {
        body["range_end"] = Value::String(b64(&prefix_end(key)));
    }
    body
}

/// The body of `kv/range` (and of a txn's `request_range`).
pub(super) fn range_request(key: &str, prefix: bool) -> Value {
    key_range(key, prefix)
}

/// The body of `kv/deleterange` (and of a txn's `request_delete_range`).
pub(super) fn delete_request(key: &str, prefix: bool) -> Value {
    key_range(key, prefix)
}

/// The body of `kv/put` (and of a txn's `request_put`).
pub(super) fn put_request(key: &str, value: &[u8], lease: Option<i64>) -> Value {
    let mut body = json!({ "key": b64(key.as_bytes()), "value": b64(value) });
    if let Some(lease) = lease {
        body["lease"] = Value::String(lease.to_string());
    }
    body
}

/// The body of `lease/grant`: the TTL in whole seconds, rounded up, at least 1.
pub(super) fn grant_request(ttl: Duration) -> Value {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    json!({ "TTL": secs.max(1).to_string() })
}

/// The body of `lease/keepalive` and `lease/revoke`.
pub(super) fn lease_request(id: i64) -> Value {
    json!({ "ID": id.to_string() })
}

/// The body of `watch`: one create request.
pub(super) fn watch_request(key: &str, prefix: bool, start_revision: Option<i64>) -> Value {
    let mut create = key_range(key, prefix);
    if let Some(rev) = start_revision {
        create["start_revision"] = Value::String(rev.to_string());
    }
    json!({ "create_request": create })
}

fn compare_json(compare: &Compare) -> Value {
    let (key, op, target, field, operand) = match compare {
        Compare::CreateRevision(k, op, n) => (k, op, "CREATE", "create_revision", n.to_string()),
        #[cfg(test)]
        Compare::ModRevision(k, op, n) => (k, op, "MOD", "mod_revision", n.to_string()),
        #[cfg(test)]
        Compare::Version(k, op, n) => (k, op, "VERSION", "version", n.to_string()),
        #[cfg(test)]
        Compare::Value(k, op, v) => (k, op, "VALUE", "value", b64(v)),
        #[cfg(test)]
        Compare::Lease(k, op, n) => (k, op, "LEASE", "lease", n.to_string()),
    };
    let mut body = json!({ "key": b64(key.as_bytes()), "target": target, "result": op.wire() });
    body[field] = Value::String(operand);
    body
}

fn op_json(op: &Op) -> Value {
    match op {
        Op::Put { key, value, lease } => json!({ "request_put": put_request(key, value, *lease) }),
        Op::Delete { key, prefix } => json!({ "request_delete_range": delete_request(key, *prefix) }),
        Op::Range { key, prefix } => json!({ "request_range": range_request(key, *prefix) }),
    }
}

/// The body of `kv/txn`.
pub(super) fn txn_request(txn: &Txn) -> Value {
    json!({
        "compare": txn.compare.iter().map(compare_json).collect::<Vec<_>>(),
        "success": txn.success.iter().map(op_json).collect::<Vec<_>>(),
        "failure": txn.failure.iter().map(op_json).collect::<Vec<_>>(),
    })
}

// ---- responses ----

/// An int64/uint64 field: a JSON string (grpc-gateway's form) or a number.
fn de_num<'de, D: Deserializer<'de>, T: std::str::FromStr>(d: D) -> Result<T, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Number(serde_json::Number),
    }
    let text = match Repr::deserialize(d)? {
        Repr::Text(s) => s,
        Repr::Number(n) => n.to_string(),
    };
    text.parse()
        .map_err(|_| serde::de::Error::custom("an integer field holds something else"))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct Header {
    #[serde(deserialize_with = "de_num")]
    pub(super) revision: i64,
    #[serde(deserialize_with = "de_num")]
    member_id: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WireKv {
    key: String,
    value: String,
    #[serde(deserialize_with = "de_num")]
    create_revision: i64,
    #[serde(deserialize_with = "de_num")]
    mod_revision: i64,
    #[serde(deserialize_with = "de_num")]
    version: i64,
    #[serde(deserialize_with = "de_num")]
    lease: i64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RangeResponse {
    kvs: Vec<WireKv>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct PutResponse {
    pub(super) header: Header,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct DeleteResponse {
    #[serde(deserialize_with = "de_num")]
    pub(super) deleted: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WireTxnResponse {
    header: Header,
    succeeded: bool,
    responses: Vec<WireResponseOp>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WireResponseOp {
    response_range: Option<RangeResponse>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct GrantResponse {
    #[serde(rename = "ID", deserialize_with = "de_num")]
    pub(super) id: i64,
    #[serde(rename = "TTL", deserialize_with = "de_num")]
    pub(super) ttl: i64,
}

/// `lease/keepalive` is a stream on the gateway: one `{"result": ...}` per renewal.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct KeepAliveResponse {
    pub(super) result: GrantResponse,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct StatusResponse {
    header: Header,
    version: String,
    #[serde(deserialize_with = "de_num")]
    leader: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct AuthResponse {
    pub(super) token: String,
}

/// The body of a refused request: `{"error": .., "code": .., "message": ..}`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ErrorBody {
    code: i64,
    message: String,
    error: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WatchLine {
    result: Option<WatchResult>,
    /// grpc-gateway's form of a stream that ended in an error.
    error: Option<StreamError>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WatchResult {
    created: bool,
    canceled: bool,
    cancel_reason: String,
    #[serde(deserialize_with = "de_num")]
    compact_revision: i64,
    events: Vec<WireEvent>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamError {
    grpc_code: i64,
    message: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: String,
    kv: WireKv,
}

/// Parses one JSON answer. The error names the problem and its place, never the text
/// (which may hold a value or a token).
pub(super) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, EtcdError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Io => "unreadable",
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Data => "JSON of an unexpected shape",
            serde_json::error::Category::Eof => "truncated JSON",
        };
        EtcdError::Decode {
            reason: format!("{what} (line {}, column {})", e.line(), e.column()),
        }
    })
}

fn unb64(text: &str, what: &str) -> Result<Vec<u8>, EtcdError> {
    B64.decode(text).map_err(|_| EtcdError::Decode {
        reason: format!("a {what} is not valid base64"),
    })
}

fn key_value(kv: WireKv) -> Result<KeyValue, EtcdError> {
    Ok(KeyValue {
        key: String::from_utf8_lossy(&unb64(&kv.key, "key")?).into_owned(),
        value: unb64(&kv.value, "value")?,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    })
}

impl RangeResponse {
    pub(super) fn into_kvs(self) -> Result<Vec<KeyValue>, EtcdError> {
        self.kvs.into_iter().map(key_value).collect()
    }
}

/// The answer of `kv/txn`.
pub(super) fn txn_response(bytes: &[u8]) -> Result<TxnResponse, EtcdError> {
    let wire: WireTxnResponse = decode(bytes)?;
    let ranges = wire
        .responses
        .into_iter()
        .filter_map(|r| r.response_range)
        .map(RangeResponse::into_kvs)
        .collect::<Result<_, _>>()?;
    Ok(TxnResponse {
        succeeded: wire.succeeded,
        revision: wire.header.revision,
        ranges,
    })
}

impl StatusResponse {
    pub(super) fn into_status(self, endpoint: String) -> EtcdStatus {
        EtcdStatus {
            version: self.version,
            leader: self.leader,
            member: self.header.member_id,
            endpoint,
        }
    }
}

/// The refusal in a non-2xx answer: `Some((code, message))`, or `None` when the body is
/// not an etcd error.
pub(super) fn refusal(bytes: &[u8]) -> Option<(i64, String)> {
    let body: ErrorBody = serde_json::from_slice(bytes).ok()?;
    let message = if body.message.is_empty() {
        body.error
    } else {
        body.message
    };
    (!message.is_empty()).then_some((body.code, message))
}

/// Whether a refusal means the token is missing, expired or stale, so that one new
/// authentication may fix it.
pub(super) fn needs_reauth(message: &str) -> bool {
    [
        "invalid auth token",
        "user name is empty",
        "revision of auth store is old",
        "auth: ",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// One line of a watch stream.
pub(super) fn watch_message(line: &[u8]) -> Result<WatchMessage, EtcdError> {
    let wire: WatchLine = decode(line)?;
    if let Some(error) = wire.error {
        return Err(EtcdError::Refused {
            code: error.grpc_code,
            message: error.message,
        });
    }
    let Some(result) = wire.result else {
        return Err(EtcdError::Decode {
            reason: "a watch message holds neither a result nor an error".to_owned(),
        });
    };
    if result.canceled {
        return Err(watch_canceled(result.compact_revision, result.cancel_reason));
    }
    if result.created {
        return Ok(WatchMessage::Created);
    }
    if result.events.is_empty() {
        return Ok(WatchMessage::Progress);
    }
    let events = result
        .events
        .into_iter()
        .map(|e| {
            let kind = match e.kind.as_str() {
                "" | "PUT" => WatchKind::Put,
                "DELETE" => WatchKind::Delete,
                _ => {
                    return Err(EtcdError::Decode {
                        reason: "a watch event of an unknown type".to_owned(),
                    })
                }
            };
            Ok(WatchEvent {
                kind,
                kv: key_value(e.kv)?,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(WatchMessage::Events(events))
}

/// A watch that etcd canceled: compacted history (gRPC `OUT_OF_RANGE`, 11) or another
/// reason (`CANCELLED`, 1), such as a refused token.
fn watch_canceled(compact_revision: i64, reason: String) -> EtcdError {
    if compact_revision > 0 {
        return EtcdError::Refused {
            code: 11,
            message: format!(
                "the watch's start revision was compacted (history kept from revision {compact_revision})"
            ),
        };
    }
    let message = if reason.is_empty() {
        "etcd canceled the watch".to_owned()
    } else {
        reason
    };
    EtcdError::Refused { code: 1, message }
}
