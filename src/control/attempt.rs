//! Classification of response POST attempts and of whole deliveries. Pure.
//!
//! One exhaustive `match` per question, no wildcard arms over our own enums.

use crate::telemetry::{label_enum, AttemptResultLabel, DeliveryLabel};

label_enum! {
    /// How one POST attempt ended (`delivery_attempts_total{result}`).
    pub(crate) enum AttemptResult {
        /// `200 {"status":"ok"}`.
        Ok => "ok",
        NotFound => "not_found",
        /// 408, 429, 502, 503, 504.
        RetryableStatus => "retryable_status",
        /// Any other status (including a 2xx that is not the ack document).
        RejectedStatus => "rejected_status",
        /// Failed before the request could be written (connect error).
        TransportNotSent => "transport_not_sent",
        /// Not sent: the gateway had no descriptor or socket memory for the connection
        /// (`EMFILE`, `ENFILE`, `ENOMEM`, `ENOBUFS`). Nothing was written; the control
        /// plane is not to blame.
        LocalExhaustion => "local_exhaustion",
        /// Failed after the request may have been written.
        TransportAfterWrite => "transport_after_write",
        Timeout => "timeout",
        Cancelled => "cancelled",
    }
}

label_enum! {
    /// How a delivery ended (docs/outcomes.md, "Response POSTs"; `deliveries_total{outcome}`).
    pub(crate) enum Delivery {
        Acked => "acked",
        NotFound => "not_found",
        Rejected => "rejected",
        Ambiguous => "ambiguous",
    }
}

/// What a final refusal of a response POST was about, where the gateway acts on it. A
/// refusal is still `rejected_status` and its delivery `rejected`: this only says why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `413` (the contract's `request_body_too_large`): the body is larger than the
    /// tunnel accepts. The same body will never be accepted; a smaller one may be.
    TooLarge,
}

/// The contract's error code (`APIErrorBody.code`) for a body over the service's limit.
const TOO_LARGE_CODE: &str = "request_body_too_large";

/// `delivery_attempts_total{result}`.
impl AttemptResultLabel for AttemptResult {}

/// `deliveries_total{outcome}`.
impl DeliveryLabel for Delivery {}

/// Which retry rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostKind {
    /// The final response: retried on transport failures, 408, 429, 502, 503, 504.
    Terminal,
    /// A `jsonrpc_notify`: retried only on 429 and failures before the write.
    Notify,
}

impl AttemptResult {
    /// Classifies an HTTP answer. `is_ack` says whether the body was `{"status":"ok"}`.
    pub(crate) fn from_status(status: u16, is_ack: bool) -> Self {
        match status {
            200 if is_ack => Self::Ok,
            404 => Self::NotFound,
            408 | 429 | 502 | 503 | 504 => Self::RetryableStatus,
            _ => Self::RejectedStatus,
        }
    }

    /// Whether another attempt with the identical body may follow.
    pub(crate) fn is_retryable(self, kind: PostKind, status: Option<u16>) -> bool {
        match (kind, self) {
            (_, Self::Ok | Self::NotFound | Self::RejectedStatus | Self::Cancelled) => false,
            (
                PostKind::Terminal,
                Self::RetryableStatus
                | Self::TransportNotSent
                | Self::LocalExhaustion
                | Self::TransportAfterWrite
                | Self::Timeout,
            ) => true,
            (PostKind::Notify, Self::TransportNotSent | Self::LocalExhaustion) => true,
            (PostKind::Notify, Self::RetryableStatus) => status == Some(429),
            (PostKind::Notify, Self::TransportAfterWrite | Self::Timeout) => false,
        }
    }

    /// The delivery this attempt settles, when it is the last one.
    pub(crate) fn final_delivery(self) -> Delivery {
        match self {
            Self::Ok => Delivery::Acked,
            Self::NotFound => Delivery::NotFound,
            Self::RejectedStatus => Delivery::Rejected,
            Self::RetryableStatus
            | Self::TransportNotSent
            | Self::LocalExhaustion
            | Self::TransportAfterWrite
            | Self::Timeout
            | Self::Cancelled => Delivery::Ambiguous,
        }
    }
}

impl Refused {
    /// Why a final refusal with `status` and error `code` (`error.code` of the body, when
    /// it had one) was given. `413` means "content too large" whoever sent it (the
    /// service names it `request_body_too_large`; a proxy in front may send a bare 413),
    /// and that code means the same on any status.
    pub(crate) fn of(status: u16, code: Option<&str>) -> Option<Self> {
        match (status, code) {
            (413, _) | (_, Some(TOO_LARGE_CODE)) => Some(Self::TooLarge),
            (_, _) => None,
        }
    }

    /// The `error.code` of a refusal's body (`APIErrorResponse`), if it parses as one.
    pub(crate) fn code_of(body: &[u8]) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Answer {
            error: Body,
        }
        #[derive(serde::Deserialize)]
        struct Body {
            code: Option<String>,
        }
        serde_json::from_slice::<Answer>(body).ok()?.error.code
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptResult as A;

    #[test]
    fn a_refusal_is_too_large_on_413_or_on_the_contracts_code() {
        let table = [
            (413, Some("request_body_too_large"), Some(Refused::TooLarge)),
            (413, None, Some(Refused::TooLarge)),
            (413, Some("something_else"), Some(Refused::TooLarge)),
            (400, Some("request_body_too_large"), Some(Refused::TooLarge)),
            (400, Some("invalid_json_payload"), None),
            (400, None, None),
            (401, Some("tunnel_request_mismatch"), None),
            (500, None, None),
        ];
        for (status, code, want) in table {
            assert_eq!(Refused::of(status, code), want, "{status} {code:?}");
        }
    }

    #[test]
    fn the_error_code_is_read_from_the_contracts_error_body_only() {
        let body = br#"{"error":{"message":"too large","type":"invalid_request_error","param":null,"code":"request_body_too_large"}}"#;
        assert_eq!(Refused::code_of(body).as_deref(), Some("request_body_too_large"));
        assert_eq!(Refused::code_of(br#"{"error":{"message":"m","code":null}}"#), None);
        assert_eq!(Refused::code_of(b"<html>413 Request Entity Too Large</html>"), None);
        assert_eq!(Refused::code_of(b""), None);
    }

    #[test]
    fn statuses_classify_as_the_contract_says() {
        let table = [
            (200, true, A::Ok),
            (200, false, A::RejectedStatus),
            (201, true, A::RejectedStatus),
            (204, false, A::RejectedStatus),
            (400, false, A::RejectedStatus),
            (401, false, A::RejectedStatus),
            (403, false, A::RejectedStatus),
            (404, false, A::NotFound),
            (408, false, A::RetryableStatus),
            (413, false, A::RejectedStatus),
            (429, false, A::RetryableStatus),
            (500, false, A::RejectedStatus),
            (502, false, A::RetryableStatus),
            (503, false, A::RetryableStatus),
            (504, false, A::RetryableStatus),
        ];
        for (status, ack, want) in table {
            assert_eq!(A::from_status(status, ack), want, "{status}");
        }
    }

    #[test]
    fn terminal_and_notify_retry_rules_differ() {
        use PostKind::*;
        let table = [
            (A::RetryableStatus, Some(503), true, false),
            (A::RetryableStatus, Some(429), true, true),
            (A::TransportNotSent, None, true, true),
            (A::LocalExhaustion, None, true, true),
            (A::TransportAfterWrite, None, true, false),
            (A::Timeout, None, true, false),
            (A::NotFound, Some(404), false, false),
            (A::RejectedStatus, Some(400), false, false),
            (A::Ok, Some(200), false, false),
            (A::Cancelled, None, false, false),
        ];
        for (a, status, terminal, notify) in table {
            assert_eq!(a.is_retryable(Terminal, status), terminal, "{a:?} terminal");
            assert_eq!(a.is_retryable(Notify, status), notify, "{a:?} notify");
        }
    }
}
