//! The exchanges of a leg: the POST of one message and its answer by body kind (a whole
//! JSON body, regime (B), or an event stream, regime (A) in [`super::stream`]), and the
//! session `DELETE`.
//!
//! Invariants:
//! - every wait ends by `min(command deadline, now + request_timeout)`;
//! - `answered` only for a 2xx whole JSON body holding the request's response, or the
//!   stream's sentinel; a `202`/`204` to a request, or a body of another kind, is a
//!   non-protocol response, never an answer;
//! - a non-2xx answer is forwarded only when its body is the server's JSON-RPC error
//!   for the request; any other body never reaches the caller;
//! - a body is bounded by `max_body_bytes` and read by the deadline; what of a finished
//!   response is already buffered is drained so its connection goes back to the pool,
//!   never waited for.

use futures_util::FutureExt;
use http::StatusCode;
use tokio::time::{timeout_at, Instant};

use super::classify::{body_kind, json_value, BodyKind, Expected, Message};
use super::headers::{response_headers, RespHeaders};
use super::stream::StreamLeg;
use super::HttpTransport;
use crate::downstream::{DownstreamRequest, LegFailure, NotifySink, Reply};
use crate::egress::client::Answer;
use crate::protocol::{RespType, WireHeaders};
use crate::strict::Admission;

/// Why reading a body stopped short.
pub(super) enum BodyError {
    TooLarge,
    Timeout,
    Broken,
}

impl HttpTransport {
    /// The POST of one message, then its answer by body kind.
    pub(super) async fn exchange(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        expects_response: bool,
        deadline: Instant,
    ) -> Result<Reply, LegFailure> {
        let clients = self.clients()?;
        let request = self.post_request(&clients, req)?;
        let resp = self.send(admission, request, deadline).await?;
        self.forwarded_nothing(admission, &resp)?;

        let status = resp.status();
        let resp_headers = response_headers(resp.headers());
        let max = self.inner.settings.max_body_bytes;
        if !status.is_success() {
            let expected = expects_response.then(|| Expected::of(req));
            return refusal(resp, status, resp_headers, expected.as_ref(), max, deadline).await;
        }
        if !expects_response {
            return Ok(Reply {
                resp_json: None,
                resp_headers,
                resp_code: status.as_u16(),
                resp_type: RespType::NotifyAck,
            });
        }
        if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
            return Err(LegFailure::NonProtocolResponse);
        }
        let expected = Expected::of(req);
        match body_kind(resp.headers()) {
            BodyKind::Json => json_reply(resp, resp_headers, &expected, max, deadline).await,
            BodyKind::EventStream => {
                let mut leg = StreamLeg::new(admission, req, expected, notes, deadline);
                self.read_event_stream(&mut leg, resp, resp_headers).await
            }
            BodyKind::Other => Err(LegFailure::NonProtocolResponse),
        }
    }

    /// The session `DELETE`: whatever status the server gives is the answer.
    pub(super) async fn delete(
        &self,
        admission: &Admission,
        headers: &WireHeaders,
        deadline: Option<Instant>,
    ) -> Result<Reply, LegFailure> {
        let deadline = self.leg_deadline(deadline);
        let clients = self.clients()?;
        let request = self.delete_request(&clients, headers)?;
        let mut resp = self.send(admission, request, deadline).await?;
        self.forwarded_nothing(admission, &resp)?;
        let status = resp.status().as_u16();
        let resp_headers = response_headers(resp.headers());
        // What of the body is already here is read, so the connection can go back to
        // the pool; never waited for.
        while let Some(Ok(Some(_))) = resp.chunk().now_or_never() {}
        Ok(Reply {
            resp_json: None,
            resp_headers,
            resp_code: status,
            resp_type: RespType::SessionTerminationResponse,
        })
    }

    /// The end of every wait of a leg started now.
    pub(super) fn leg_deadline(&self, command_deadline: Option<Instant>) -> Instant {
        let own = Instant::now() + self.inner.settings.request_timeout;
        command_deadline.map_or(own, |d| d.min(own))
    }
}

/// Regime (B): a whole JSON body, bounded in size and time, that must be the response
/// for this request.
async fn json_reply(
    resp: Answer,
    resp_headers: RespHeaders,
    expected: &Expected,
    max: usize,
    deadline: Instant,
) -> Result<Reply, LegFailure> {
    let status = resp.status();
    let body = read_body(resp, max, deadline).await.map_err(|e| match e {
        BodyError::TooLarge => LegFailure::BodyTooLarge,
        BodyError::Timeout => LegFailure::TimeoutAfterWrite,
        BodyError::Broken => LegFailure::TruncatedJson,
    })?;
    let raw = String::from_utf8(body)
        .ok()
        .and_then(json_value)
        .ok_or(LegFailure::TruncatedJson)?;
    match expected.classify_body(raw) {
        Message::Terminal(raw) => Ok(Reply {
            resp_json: Some(raw),
            resp_headers,
            resp_code: status.as_u16(),
            resp_type: RespType::JsonrpcResponse,
        }),
        Message::Other(_) | Message::Noise => Err(LegFailure::NonProtocolResponse),
    }
}

/// A non-2xx answer. A JSON-RPC error body is the server's own answer and is forwarded
/// exactly, with the server's status; anything else becomes [`LegFailure::HttpStatus`]
/// (its body never reaches the caller).
async fn refusal(
    resp: Answer,
    status: StatusCode,
    resp_headers: RespHeaders,
    expected: Option<&Expected>,
    max: usize,
    deadline: Instant,
) -> Result<Reply, LegFailure> {
    let failure = LegFailure::HttpStatus(status.as_u16());
    let Some(expected) = expected else {
        return Err(failure);
    };
    let Ok(body) = read_body(resp, max, deadline).await else {
        return Err(failure);
    };
    match String::from_utf8(body).ok().and_then(json_value) {
        // The same rule as a 2xx body: an error for this request's id (or for no id).
        Some(raw) if expected.is_refusal_answer(&raw) => Ok(Reply {
            resp_json: Some(raw),
            resp_headers,
            resp_code: status.as_u16(),
            resp_type: RespType::JsonrpcResponse,
        }),
        _ => Err(failure),
    }
}

/// Reads a whole body, bounded in size and time.
pub(super) async fn read_body(mut resp: Answer, max: usize, deadline: Instant) -> Result<Vec<u8>, BodyError> {
    if resp.content_length().is_some_and(|len| len > max as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    loop {
        match timeout_at(deadline, resp.chunk()).await {
            Err(_) => return Err(BodyError::Timeout),
            Ok(Err(_)) => return Err(BodyError::Broken),
            Ok(Ok(None)) => return Ok(body),
            Ok(Ok(Some(chunk))) => {
                if body.len() + chunk.len() > max {
                    return Err(BodyError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
        }
    }
}
