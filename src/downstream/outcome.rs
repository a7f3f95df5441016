//! The one classification of downstream results: every leg ends `not_sent`, `answered`
//! or `abandoned`, and every failure maps to exactly one outcome and one `tunnel_failure`.
//!
//! Pure: both transports build a [`LegFailure`] at the point of failure and this module
//! decides what it means. The mapping is a single exhaustive `match` per question, with
//! no wildcard arm, pinned by a table test.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::protocol::{
    json_resp_headers, synthesize_error, FailureSource, RespType, TunnelFailure, ABANDONED_MESSAGE, NOT_SENT_MESSAGE,
};
use crate::telemetry::{label_enum, LegOutcomeLabel};

label_enum! {
    /// How a downstream leg ended (docs/outcomes.md, "Downstream legs"); its label is used
    /// in metrics, logs and spans.
    #[derive(Hash)]
    pub enum LegOutcome {
        /// The MCP server cannot have seen the request.
        NotSent => "not_sent",
        /// A terminal response for this request arrived whole.
        Answered => "answered",
        /// The request was (or may have been) handed off and no terminal response arrived.
        Abandoned => "abandoned",
    }
}

/// `downstream_requests_total{outcome}`.
impl LegOutcomeLabel for LegOutcome {}

/// Words a caller can act on, carried in synthesized error messages.
pub(crate) const SUBSCRIPTION_ENDED_MESSAGE: &str =
    "the subscription stream ended (the MCP server closed it, it was cancelled, or it reached its time bound); listen again to go on receiving";
pub(crate) const REFUSED_MESSAGE: &str =
    "the MCP server refused the request with an HTTP error and no JSON-RPC response";
/// The gateway itself had no descriptor (or no socket memory) for the request.
pub(crate) const LOCAL_EXHAUSTION_MESSAGE: &str =
    "not delivered to the MCP server: too many open files in the gateway; safe to retry";

/// A stdio child's session could not be opened before the request was written.
pub(crate) const SESSION_NOT_OPEN_MESSAGE: &str =
    "not delivered to the MCP server: the stdio server's session could not be opened (it exited, refused or did not answer initialize); safe to retry";

/// Every way a downstream leg can fail, named where it happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegFailure {
    // --- before any byte of the request could reach the server ---
    /// Name resolution failed.
    Dns,
    /// TCP connect refused.
    ConnectRefused,
    /// Connect failed otherwise (unreachable, connect timeout, ...).
    ConnectFailed,
    /// TLS handshake failed.
    Tls,
    /// The egress proxy did not open the `CONNECT` tunnel (a non-2xx answer, or it cut or
    /// garbled its answer): nothing of the request was written.
    ProxyRefused,
    /// The egress proxy answered `407 Proxy Authentication Required`: to the `CONNECT`,
    /// or to a forwarded request, which it then did not forward.
    ProxyAuthRequired,
    /// The stdio child was not running (or could not be spawned) before the write.
    ChildNotRunning,
    /// The gateway refused to send: the fence was latched or the gateway is stopping.
    NotAdmitted,
    /// The command's deadline passed before anything was written.
    DeadlineBeforeSend,
    /// An internal gateway failure before the write.
    InternalBeforeSend,
    /// The gateway ran out of descriptors or socket memory (`EMFILE`, `ENFILE`, `ENOMEM`,
    /// `ENOBUFS`) while connecting or spawning: its own failure, never the server's.
    LocalExhaustion,
    /// The stdio child's MCP session could not be opened (the child refused, did not
    /// answer or died during the gateway's own `initialize`) before this request was
    /// written.
    SessionNotOpen,
    /// As [`LegFailure::SessionNotOpen`], where the gateway's own `initialize`, run under
    /// this command's admission, was written and got no answer: this request was not
    /// sent, but a downstream step taken for it is of unknown effect (strict mode latches
    /// on it, see `LegFailure::gateway_step_abandoned`).
    InitializeAbandoned,

    // --- the server answered, without a usable JSON-RPC response ---
    /// A non-2xx HTTP status without a JSON-RPC error body.
    HttpStatus(u16),
    /// A subscription stream (`subscriptions/listen`) ended without a final response, or
    /// reached its bound: a normal end for a request that causes no effect.
    SubscriptionEnded,

    // --- after the request was (or may have been) written ---
    /// The deadline or a transport timeout passed after the write.
    TimeoutAfterWrite,
    /// Connection reset or closed before response headers.
    ConnectionLost,
    /// Response headers arrived, then the stream ended before the terminal response.
    StreamClosedBeforeResponse,
    /// An `application/json` body that did not parse whole.
    TruncatedJson,
    /// A 2xx without a usable content type or JSON-RPC response.
    NonProtocolResponse,
    /// The body exceeded the gateway's size bound.
    BodyTooLarge,
    /// The stdio child exited or was killed after the write.
    ChildExited,
    /// The stdio child's pipe broke during the write (some bytes may have been taken).
    ChildPipeBroken,
    /// The stop cut the leg short after its request may have left (grace over).
    CancelledAfterWrite,
    /// An internal gateway failure after the write.
    InternalAfterWrite,
}

impl LegFailure {
    /// The outcome this failure implies.
    pub(crate) fn outcome(&self) -> LegOutcome {
        match self {
            Self::Dns
            | Self::ConnectRefused
            | Self::ConnectFailed
            | Self::Tls
            | Self::ProxyRefused
            | Self::ProxyAuthRequired
            | Self::ChildNotRunning
            | Self::NotAdmitted
            | Self::DeadlineBeforeSend
            | Self::InternalBeforeSend
            | Self::LocalExhaustion
            | Self::SessionNotOpen
            | Self::InitializeAbandoned => LegOutcome::NotSent,
            // A 4xx (other than 408) is the server declining the request: a terminal
            // answer. 408 and 5xx may come after the server acted: effect unknown.
            Self::SubscriptionEnded => LegOutcome::Answered,
            Self::HttpStatus(status) => {
                if (400..500).contains(status) && *status != 408 {
                    LegOutcome::Answered
                } else {
                    LegOutcome::Abandoned
                }
            }
            Self::TimeoutAfterWrite
            | Self::ConnectionLost
            | Self::StreamClosedBeforeResponse
            | Self::TruncatedJson
            | Self::NonProtocolResponse
            | Self::BodyTooLarge
            | Self::ChildExited
            | Self::ChildPipeBroken
            | Self::CancelledAfterWrite
            | Self::InternalAfterWrite => LegOutcome::Abandoned,
        }
    }

    /// Stable label (`error.type` in spans, `reason` in logs).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Dns => "dns",
            Self::ConnectRefused => "connection_refused",
            Self::ConnectFailed => "dial",
            Self::Tls => "tls",
            Self::ProxyRefused => "proxy_refused",
            Self::ProxyAuthRequired => "proxy_auth_required",
            Self::ChildNotRunning => "child_not_running",
            Self::NotAdmitted => "not_admitted",
            Self::DeadlineBeforeSend => "deadline_before_send",
            Self::InternalBeforeSend => "internal_before_send",
            Self::LocalExhaustion => "local_exhaustion",
            Self::SessionNotOpen => "session_not_open",
            Self::InitializeAbandoned => "initialize_abandoned",
            Self::HttpStatus(_) => "http_status",
            Self::SubscriptionEnded => "subscription_ended",
            Self::TimeoutAfterWrite => "timeout",
            Self::ConnectionLost => "connection_reset",
            Self::StreamClosedBeforeResponse => "unexpected_eof",
            Self::TruncatedJson => "malformed_json",
            Self::NonProtocolResponse => "non_protocol_response",
            Self::BodyTooLarge => "response_body_too_large",
            Self::ChildExited => "child_exited",
            Self::ChildPipeBroken => "closed_pipe",
            Self::CancelledAfterWrite => "cancelled",
            Self::InternalAfterWrite => "internal_after_write",
        }
    }

    /// The contract's `tunnel_failure` provenance (closed-set values only).
    pub(crate) fn tunnel_failure(&self) -> TunnelFailure {
        use FailureSource as S;
        let (source, kind, received, status) = match self {
            Self::Dns => (S::Dns, Some("dns"), false, None),
            Self::ConnectRefused => (S::Connect, Some("connection_refused"), false, None),
            Self::ConnectFailed => (S::Connect, Some("dial"), false, None),
            Self::Tls => (S::Tls, Some("tls"), false, None),
            // The proxy is the gateway's way out, not the target: a failed dial.
            Self::ProxyRefused | Self::ProxyAuthRequired => (S::Connect, Some("dial"), false, None),
            Self::ChildNotRunning => (S::TransportClosed, Some("closed_pipe"), false, None),
            Self::NotAdmitted => (S::ClientInternal, None, false, None),
            Self::DeadlineBeforeSend => (S::Timeout, Some("timeout"), false, None),
            Self::InternalBeforeSend => (S::ClientInternal, Some("unknown"), false, None),
            Self::LocalExhaustion => (S::ClientInternal, Some("unknown"), false, None),
            Self::SessionNotOpen | Self::InitializeAbandoned => (S::TransportClosed, Some("closed_pipe"), false, None),
            Self::HttpStatus(code) => (S::TargetHttp, Some("http_status"), true, Some(*code)),
            Self::SubscriptionEnded => (S::Protocol, Some("unexpected_eof"), true, None),
            Self::TimeoutAfterWrite => (S::Timeout, Some("timeout"), false, None),
            Self::ConnectionLost => (S::TransportClosed, Some("connection_reset"), false, None),
            Self::StreamClosedBeforeResponse => (S::Protocol, Some("unexpected_eof"), true, None),
            Self::TruncatedJson => (S::Protocol, Some("malformed_json"), true, None),
            Self::NonProtocolResponse => (S::Protocol, Some("non_protocol_response"), true, None),
            Self::BodyTooLarge => (S::Protocol, Some("response_body_too_large"), true, None),
            Self::ChildExited => (S::TransportClosed, Some("eof"), false, None),
            Self::ChildPipeBroken => (S::TransportClosed, Some("closed_pipe"), false, None),
            Self::CancelledAfterWrite => (S::ClientInternal, Some("connection_aborted"), false, None),
            Self::InternalAfterWrite => (S::ClientInternal, Some("unknown"), false, None),
        };
        TunnelFailure::new(source, kind, received, status)
    }

    /// Whether a downstream step the gateway took on its own under this leg's admission
    /// (its `initialize` of a restarted stdio child) was written and never answered,
    /// while the caller's own request was not sent: strict mode latches on it.
    pub(crate) fn gateway_step_abandoned(&self) -> bool {
        *self == Self::InitializeAbandoned
    }

    /// The sentence the caller reads in the synthesized error.
    pub(crate) fn caller_message(&self) -> &'static str {
        if *self == Self::SubscriptionEnded {
            return SUBSCRIPTION_ENDED_MESSAGE;
        }
        if *self == Self::LocalExhaustion {
            return LOCAL_EXHAUSTION_MESSAGE;
        }
        if matches!(self, Self::SessionNotOpen | Self::InitializeAbandoned) {
            return SESSION_NOT_OPEN_MESSAGE;
        }
        match self.outcome() {
            LegOutcome::NotSent => NOT_SENT_MESSAGE,
            LegOutcome::Abandoned => ABANDONED_MESSAGE,
            LegOutcome::Answered => REFUSED_MESSAGE,
        }
    }

    /// The HTTP-style `resp_code` posted with a synthesized error: the server's own
    /// status when it sent one, 504 for timeouts, 502 otherwise.
    pub(crate) fn resp_code(&self) -> u16 {
        match self {
            Self::HttpStatus(code) => *code,
            Self::SubscriptionEnded => 200,
            Self::DeadlineBeforeSend | Self::TimeoutAfterWrite => 504,
            Self::Dns
            | Self::ConnectRefused
            | Self::ConnectFailed
            | Self::Tls
            | Self::ProxyRefused
            | Self::ProxyAuthRequired
            | Self::ChildNotRunning
            | Self::NotAdmitted
            | Self::InternalBeforeSend
            | Self::LocalExhaustion
            | Self::SessionNotOpen
            | Self::InitializeAbandoned
            | Self::ConnectionLost
            | Self::StreamClosedBeforeResponse
            | Self::TruncatedJson
            | Self::NonProtocolResponse
            | Self::BodyTooLarge
            | Self::ChildExited
            | Self::ChildPipeBroken
            | Self::CancelledAfterWrite
            | Self::InternalAfterWrite => 502,
        }
    }
}

/// The terminal response a leg produced, ready to post.
#[derive(Debug)]
pub struct Reply {
    pub resp_json: Option<Box<RawValue>>,
    pub resp_headers: BTreeMap<String, Vec<String>>,
    pub resp_code: u16,
    pub resp_type: RespType,
}

impl Reply {
    /// A message taken without an answer of its own (no HTTP exchange: a stdio write, a
    /// local answer): `notify_ack` with `200`, as the official client acknowledges it
    /// (its scenarios accept only 200 or 204 there). A notification that had an HTTP
    /// exchange keeps the server's own status instead.
    pub(crate) fn acknowledged() -> Self {
        Self {
            resp_json: None,
            resp_headers: BTreeMap::new(),
            resp_code: 200,
            resp_type: RespType::NotifyAck,
        }
    }
}

/// A non-terminal message seen on a response stream, posted as `jsonrpc_notify`.
#[derive(Debug)]
pub struct Notification {
    pub resp_json: Box<RawValue>,
    pub resp_headers: BTreeMap<String, Vec<String>>,
}

/// Where transports hand notifications, in order. Bounded: a slow control plane slows
/// the reading of the stream instead of buffering without limit.
pub type NotifySink = tokio::sync::mpsc::Sender<Notification>;

/// What a leg returns: its outcome, the failure if any, and the reply to post.
#[derive(Debug)]
pub struct LegResult {
    pub outcome: LegOutcome,
    pub failure: Option<LegFailure>,
    pub reply: Reply,
    /// From just before the request's downstream write (connection setup included) to
    /// the MCP server's own terminal response for it: set by a transport only when the
    /// server answered the command's own request (never for an answer the gateway made,
    /// a synthesized failure, or a bridged exchange).
    pub target_elapsed: Option<std::time::Duration>,
}

impl LegResult {
    /// This leg, timed from `written` when the MCP server's own JSON-RPC response to the
    /// command's request is what it carries (see [`LegResult::target_elapsed`]).
    pub(crate) fn timed_from(
        mut self,
        written: Option<tokio::time::Instant>,
        request: &crate::protocol::JsonRpcPayload,
    ) -> Self {
        let own_answer = self.failure.is_none()
            && request.expects_response()
            && self.reply.resp_type == RespType::JsonrpcResponse
            && self.reply.resp_json.is_some();
        self.target_elapsed = written.filter(|_| own_answer).map(|at| at.elapsed());
        self
    }

    /// A leg that produced the server's own terminal response (including a JSON-RPC error).
    pub(crate) fn answered(reply: Reply) -> Self {
        Self {
            outcome: LegOutcome::Answered,
            failure: None,
            reply,
            target_elapsed: None,
        }
    }

    /// A failed leg, answered with a synthesized error shaped for what the command expects.
    ///
    /// `resp_type` is the final type the command calls for: a JSON-RPC request gets a
    /// `-32603` error echoing `rpc_id`; a notification gets `notify_ack`; a session
    /// termination gets `session_termination_response`, each with the failure's code.
    pub(crate) fn failed(failure: LegFailure, rpc_id: Option<&RawValue>, resp_type: RespType) -> Self {
        let resp_json = match resp_type {
            RespType::JsonrpcResponse | RespType::JsonrpcNotify => Some(synthesize_error(
                rpc_id,
                failure.caller_message(),
                &failure.tunnel_failure(),
            )),
            RespType::NotifyAck | RespType::SessionTerminationResponse | RespType::OauthDiscoveryResponse => None,
        };
        let resp_headers = if resp_json.is_some() {
            json_resp_headers()
        } else {
            BTreeMap::new()
        };
        Self {
            outcome: failure.outcome(),
            reply: Reply {
                resp_json,
                resp_headers,
                resp_code: failure.resp_code(),
                resp_type,
            },
            failure: Some(failure),
            target_elapsed: None,
        }
    }
}

#[cfg(test)]
mod tests;
