//! The etcd client's error: what failed, in words an operator acts on, with a stable kind.
//! Never a value, a password or a token.

/// gRPC `UNAVAILABLE`.
pub(super) const UNAVAILABLE: i64 = 14;

/// A failed etcd call. `Unreachable` and `Timeout` mean no endpoint answered; `Refused`
/// is etcd's own answer (a gRPC status code and its message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    #[error(
        "etcd at {endpoint} cannot be reached: {reason}; check coordination.etcd.endpoints and that etcd runs there"
    )]
    Unreachable { endpoint: String, reason: String },
    #[error("etcd at {endpoint} did not answer within the request timeout: it is stopped, overloaded or cut off")]
    Timeout { endpoint: String },
    #[error(
        "etcd refused the credentials: {reason}; check coordination.etcd.username and password, and the user's roles"
    )]
    Auth { reason: String },
    #[error("etcd refused the request (gRPC code {code}): {message}")]
    Refused { code: i64, message: String },
    #[error("etcd's answer cannot be read: {reason}")]
    Decode { reason: String },
    #[error("the etcd client cannot be set up: {reason}")]
    Setup { reason: String },
}

impl EtcdError {
    /// Stable label for metrics, logs and doctor's JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            EtcdError::Unreachable { .. } => "unreachable",
            EtcdError::Timeout { .. } => "timeout",
            EtcdError::Auth { .. } => "auth",
            EtcdError::Refused { .. } => "refused",
            EtcdError::Decode { .. } => "decode",
            EtcdError::Setup { .. } => "setup",
        }
    }

    /// Whether the next endpoint is worth a try: this one did not answer, or answered
    /// that it cannot serve now (gRPC `UNAVAILABLE`: no leader, a gateway cut off from
    /// its member).
    pub(super) fn tries_next(&self) -> bool {
        matches!(
            self,
            EtcdError::Unreachable { .. } | EtcdError::Timeout { .. } | EtcdError::Refused { code: UNAVAILABLE, .. }
        )
    }
}

/// The error of a non-2xx answer from `endpoint`: etcd's refusal, or `Decode` for a body
/// that is not one.
pub(super) fn refused(endpoint: &str, status: http::StatusCode, bytes: &[u8]) -> EtcdError {
    match super::wire::refusal(bytes) {
        // etcd's own refusals start with `etcdserver:`; this one is its gateway's.
        Some((code @ UNAVAILABLE, message)) if !message.starts_with("etcdserver:") => EtcdError::Refused {
            code,
            message: format!(
                "{message}: the JSON gateway of {endpoint} cannot reach its member (with --client-cert-auth, \
                 etcd's server certificate must allow client authentication too)"
            ),
        },
        Some((code, message)) => EtcdError::Refused { code, message },
        None => EtcdError::Decode {
            reason: format!("HTTP {status} from {endpoint} without an etcd error body"),
        },
    }
}

/// A request to `endpoint` that got no answer: `Timeout`, or `Unreachable` with the cause.
pub(super) fn transport(endpoint: &str, error: &tunnelgate_egress::client::SendError) -> EtcdError {
    if matches!(
        error.kind(),
        tunnelgate_egress::client::SendErrorKind::ConnectTimeout | tunnelgate_egress::client::SendErrorKind::Timeout
    ) {
        return EtcdError::Timeout {
            endpoint: endpoint.to_owned(),
        };
    }
    EtcdError::Unreachable {
        endpoint: endpoint.to_owned(),
        // The error and its causes in words (no layer names the URL).
        reason: error.to_string(),
    }
}
