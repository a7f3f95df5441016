//! Response delivery: one response body POSTed with its retries, each attempt in its
//! span, and how the delivery ended ([`DeliveryReport`]).
//!
//! Invariants:
//! - every attempt of one delivery sends identical bytes and headers (one
//!   `X-Client-Request-Id` per delivery);
//! - each attempt is bounded by `post_timeout` and by the delivery's deadline; whether
//!   another follows, and when, is [`crate::control::retry`]'s to say;
//! - a cancellation settles the delivery at once: `Ambiguous` when an attempt may have
//!   been written, never a silent drop;
//! - a connect failure wrote nothing (`transport_not_sent`, or `local_exhaustion` for
//!   the gateway's own); anything after the write without an acknowledgement is
//!   ambiguous; only the exact ack document is an ack;
//! - every attempt and every delivery is counted once.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::Method;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{read_bounded, retry_after, warn_tls, ControlClient};
use crate::control::attempt::{AttemptResult, Delivery, PostKind, Refused};
use crate::control::backoff::Backoff;
use crate::control::retry::{next_try, AfterAttempt, RetryPolicy};
use crate::descriptors::{any_is_exhaustion, EXHAUSTION_WORDS};
use crate::egress::client::{SendError, SendErrorKind};
use crate::protocol::{random_hex, ShardToken};
use crate::telemetry::DeliveryKind;

/// How a delivery ended, with the attempt that settled it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeliveryReport {
    pub delivery: Delivery,
    pub last_attempt: AttemptResult,
    pub attempts: u32,
    /// Why the settling attempt was refused, when the control plane said so in a way the
    /// gateway acts on (only ever with `rejected_status`).
    pub refused: Option<Refused>,
}

/// How one POST attempt ended: its result, the status when one arrived, the
/// server-imposed wait, and why a final refusal was given.
#[derive(Clone, Copy, Debug)]
struct Attempted {
    result: AttemptResult,
    status: Option<u16>,
    retry_after: Option<Duration>,
    refused: Option<Refused>,
}

impl Attempted {
    /// An attempt that got no (usable) answer.
    fn unanswered(result: AttemptResult, status: Option<u16>) -> Self {
        Self {
            result,
            status,
            retry_after: None,
            refused: None,
        }
    }
}

impl ControlClient {
    /// Delivers one response body, retrying per `kind`'s rules with the identical bytes
    /// and headers, each attempt bounded by `post_timeout` and by `deadline`.
    ///
    /// # Cancel safety
    /// Not cancel-safe by drop: cancel through `cancel`, which settles the delivery as
    /// `Ambiguous` (`Cancelled`) when an attempt may have been written.
    pub(crate) async fn deliver(
        &self,
        kind: PostKind,
        body: Bytes,
        shard_token: &ShardToken,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
    ) -> DeliveryReport {
        let metric_kind = match kind {
            PostKind::Terminal => DeliveryKind::Terminal,
            PostKind::Notify => DeliveryKind::Notify,
        };
        let policy = RetryPolicy::new(self.settings.post_attempts);
        let headers = self.post_headers(shard_token);
        let mut backoff = Backoff::default();
        let mut attempt = 0;
        loop {
            if cancel.is_cancelled() {
                // Cancelled before this attempt began: nothing ran, nothing is counted as
                // an attempt. The delivery ends as the cancellation leaves it.
                let last = Attempted::unanswered(AttemptResult::Cancelled, None);
                return self.settled(metric_kind, last.result.final_delivery(), last, attempt);
            }
            attempt += 1;
            let tried = self.traced_attempt(&headers, &body, attempt, deadline, cancel).await;
            let result = tried.result;
            self.metrics.delivery_attempted(metric_kind, result);
            let after = AfterAttempt {
                attempt,
                result,
                status: tried.status,
                deadline_left: deadline.is_none_or(|d| Instant::now() < d),
                cancelled: cancel.is_cancelled(),
            };
            if policy.settles(kind, after) {
                return self.settled(metric_kind, result.final_delivery(), tried, attempt);
            }
            let delay = backoff.next_delay(rand::random::<f64>(), tried.retry_after);
            tokio::select! {
                biased;
                // cancel-safe: nothing in flight between attempts.
                _ = cancel.cancelled() => {
                    self.metrics.delivery_attempted(metric_kind, AttemptResult::Cancelled);
                    // The previous attempt's result decides the category: it may have been written.
                    return self.settled(metric_kind, Delivery::Ambiguous, tried, attempt);
                }
                // cancel-safe: a sleep.
                _ = tokio::time::sleep_until(next_try(delay, deadline, Instant::now())) => {}
            }
        }
    }

    /// The headers of every attempt of one delivery: identical bytes each time.
    fn post_headers(&self, shard_token: &ShardToken) -> HeaderMap {
        let mut headers = self.request_headers();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(mut v) = HeaderValue::from_str(shard_token.expose()) {
            v.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-tunnel-shard-token"), v);
        }
        if let Ok(v) = HeaderValue::from_str(&random_hex(16)) {
            headers.insert(HeaderName::from_static("x-client-request-id"), v);
        }
        headers
    }

    /// Counts the delivery's end and reports it.
    fn settled(&self, kind: DeliveryKind, delivery: Delivery, last: Attempted, attempts: u32) -> DeliveryReport {
        self.metrics.delivery_finished(kind, delivery);
        DeliveryReport {
            delivery,
            last_attempt: last.result,
            attempts,
            refused: last.refused.filter(|_| delivery == Delivery::Rejected),
        }
    }

    /// One attempt (1-based) in its `tunnelgate.deliver.attempt` span.
    async fn traced_attempt(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        attempt: u32,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
    ) -> Attempted {
        let span = tracing::debug_span!(
            "tunnelgate.deliver.attempt",
            { crate::telemetry::attrs::OTEL_KIND } = "client",
            { crate::telemetry::attrs::HTTP_REQUEST_METHOD } = "POST",
            { crate::telemetry::attrs::HTTP_REQUEST_RESEND_COUNT } = i64::from(attempt - 1),
            { crate::telemetry::attrs::HTTP_RESPONSE_STATUS_CODE } = tracing::field::Empty,
            { crate::telemetry::attrs::ATTEMPT_RESULT } = tracing::field::Empty,
        );
        let tried = self
            .attempt(headers, body.clone(), deadline, cancel)
            .instrument(span.clone())
            .await;
        if let Some(code) = tried.status {
            span.record(crate::telemetry::attrs::HTTP_RESPONSE_STATUS_CODE, i64::from(code));
        }
        span.record(crate::telemetry::attrs::ATTEMPT_RESULT, tried.result.as_str());
        tried
    }

    async fn attempt(
        &self,
        headers: &HeaderMap,
        body: Bytes,
        deadline: Option<Instant>,
        cancel: &CancellationToken,
    ) -> Attempted {
        let per_attempt = Instant::now() + self.settings.post_timeout;
        let until = deadline.map_or(per_attempt, |d| d.min(per_attempt));
        let exchange = async {
            let sent = self
                .client
                .send(Method::POST, &self.response_uri, headers.clone(), body);
            let response = match sent.await {
                Ok(r) => r,
                Err(e) => return Attempted::unanswered(post_send_error_result(&e), None),
            };
            let status = response.status().as_u16();
            let retry_after = retry_after(response.headers());
            let body = match read_bounded(response, 64 * 1024).await {
                Ok(b) => b,
                // The status arrived but the body did not: only a 200 needed the body.
                Err(_) if status == 200 => {
                    return Attempted::unanswered(AttemptResult::TransportAfterWrite, Some(status));
                }
                Err(_) => Bytes::new(),
            };
            let result = AttemptResult::from_status(status, is_ack(&body));
            let refused = (result == AttemptResult::RejectedStatus)
                .then(|| Refused::of(status, Refused::code_of(&body).as_deref()))
                .flatten();
            Attempted {
                result,
                status: Some(status),
                retry_after,
                refused,
            }
        };
        tokio::select! {
            biased;
            // cancel-safe: dropping the exchange is reported as Cancelled, an ambiguity.
            _ = cancel.cancelled() => Attempted::unanswered(AttemptResult::Cancelled, None),
            // cancel-safe: as above, a timeout after the write is ambiguous by definition.
            r = tokio::time::timeout_at(until, exchange) => {
                r.unwrap_or(Attempted::unanswered(AttemptResult::Timeout, None))
            }
        }
    }
}

/// How a response POST that got no response headers failed. A connect error wrote
/// nothing: `transport_not_sent`, or `local_exhaustion` when the gateway had no
/// descriptor or socket memory for it (logged with words that say so).
fn post_send_error_result(e: &SendError) -> AttemptResult {
    warn_tls(e, "response POST");
    let kind = e.kind();
    if kind.wrote_nothing() && any_is_exhaustion(e.io_errors()) {
        tracing::warn!(
            attempt_result = AttemptResult::LocalExhaustion.as_str(),
            "response POST not sent: {EXHAUSTION_WORDS} (no descriptor or socket memory for the connection); the control plane is not at fault"
        );
        return AttemptResult::LocalExhaustion;
    }
    match kind {
        // A refused TLS 1.3 client certificate may be alerted after the write (`tls`):
        // the control plane processed nothing.
        SendErrorKind::Dns
        | SendErrorKind::Refused
        | SendErrorKind::ConnectTimeout
        | SendErrorKind::Tls
        | SendErrorKind::ProxyRefused
        | SendErrorKind::ProxyAuth
        | SendErrorKind::Connect => AttemptResult::TransportNotSent,
        SendErrorKind::Timeout => AttemptResult::Timeout,
        SendErrorKind::Lost => AttemptResult::TransportAfterWrite,
    }
}

/// `{"status":"ok"}` (schema `TunnelResponseAck`), nothing else.
fn is_ack(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Ack<'a> {
        #[serde(borrow)]
        status: &'a str,
    }
    serde_json::from_slice::<Ack<'_>>(body).is_ok_and(|a| a.status == "ok")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_ack_document_is_an_ack() {
        assert!(is_ack(br#"{"status":"ok"}"#));
        assert!(is_ack(br#"{ "status" : "ok", "extra": 1 }"#));
        assert!(!is_ack(br#"{"status":"OK"}"#));
        assert!(!is_ack(br#"{"status":"error"}"#));
        assert!(!is_ack(b""));
        assert!(!is_ack(b"ok"));
    }
}
