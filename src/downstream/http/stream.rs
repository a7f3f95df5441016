//! Regime (A): a response that is an event stream, read until the sentinel (the event
//! carrying the request's answer), every other message forwarded on the way, and a cut
//! stream resumed (`GET` with `Last-Event-ID`) while the protocol allows it.
//!
//! Invariants:
//! - a closed stream is never "done": without the sentinel the leg is `abandoned`
//!   (`stream_closed_before_response`), unless the request is a subscription
//!   (`subscriptions/listen`), whose end is by design;
//! - a resume is only ever a `GET` with `Last-Event-ID`, never a replay of the POST: at
//!   most [`MAX_RESUMES`] per leg, only with a session id and an event id, never for a
//!   revision from [`NO_RESUME_FROM_VERSION`] on, each after a bounded wait that ends
//!   before the leg's deadline;
//! - the body bound holds for the event being assembled and for each whole event;
//! - messages reach the notification sink in order, before the answer returns; a gone
//!   receiver stops the forwarding, never the reading.

use std::time::Duration;

use futures_util::FutureExt;
use serde_json::value::RawValue;
use tokio::time::{timeout_at, Instant};

use super::classify::{body_kind, json_value, BodyKind, Expected, Message};
use super::headers::{response_headers, RespHeaders};
use super::HttpTransport;
use crate::downstream::sse::SseParser;
use crate::downstream::{DownstreamRequest, LegFailure, Notification, NotifySink, Reply};
use crate::egress::client::Answer;
use crate::protocol::{header_value, RespType, WireHeaders, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::strict::Admission;

/// The request whose response is a subscription stream (2026-07-28).
const LONG_LIVED_METHOD: &str = "subscriptions/listen";
/// The MCP revision from which servers cannot resume a stream (and must not be asked to).
const NO_RESUME_FROM_VERSION: &str = crate::protocol::McpRevision::NO_RESUME_FROM.as_str();
/// Resume attempts per leg, at most.
const MAX_RESUMES: u32 = 5;
/// A resumed stream that stays silent this long is closed and resumed again: servers
/// that replay only what they stored when the `GET` arrived (server-everything does)
/// send later events to no stream, so a fresh `GET` is the only way to fetch them.
const RESUME_IDLE: Duration = Duration::from_secs(1);
/// Wait before a resume when the server gave no `retry:` hint (times the attempt number).
const RESUME_STEP: Duration = Duration::from_millis(250);
/// Cap on the server's `retry:` hint before a resume.
const MAX_RESUME_WAIT: Duration = Duration::from_secs(1);

/// Why reading an SSE stream ended without the sentinel.
enum StreamEnd {
    /// EOF or a broken body: a resume may still recover the response.
    Closed,
    /// Final for this leg.
    Failed(LegFailure),
}

/// What reading an event stream (and resuming it) needs from its leg.
pub(super) struct StreamLeg<'a> {
    admission: &'a Admission,
    command_headers: &'a WireHeaders,
    expected: Expected,
    notes: &'a NotifySink,
    /// False once the notification receiver is gone: later messages are dropped.
    sink_open: bool,
    deadline: Instant,
    /// A request whose response stream the server keeps open by design
    /// (`subscriptions/listen`): its end is normal, never resumed, never ambiguous.
    long_lived: bool,
}

impl<'a> StreamLeg<'a> {
    /// The stream answering `req`, read under `admission` until `deadline`.
    pub(super) fn new(
        admission: &'a Admission,
        req: &DownstreamRequest<'a>,
        expected: Expected,
        notes: &'a NotifySink,
        deadline: Instant,
    ) -> Self {
        Self {
            admission,
            command_headers: req.headers,
            expected,
            notes,
            sink_open: true,
            deadline,
            long_lived: req.payload.method() == Some(LONG_LIVED_METHOD),
        }
    }
}

impl HttpTransport {
    /// Regime (A): reads events until the sentinel, resuming a cut stream when allowed.
    pub(super) async fn read_event_stream(
        &self,
        leg: &mut StreamLeg<'_>,
        mut resp: Answer,
        mut resp_headers: RespHeaders,
    ) -> Result<Reply, LegFailure> {
        let session_id = header_value(leg.command_headers, MCP_SESSION_ID)
            .map(str::to_owned)
            .or_else(|| {
                resp.headers()
                    .get(MCP_SESSION_ID)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
        let request_version = header_value(leg.command_headers, MCP_PROTOCOL_VERSION);
        let response_version = resp.headers().get(MCP_PROTOCOL_VERSION).and_then(|v| v.to_str().ok());
        let resumable_version = [request_version, response_version]
            .into_iter()
            .flatten()
            .all(|v| v.trim() < NO_RESUME_FROM_VERSION);
        let mut parser = SseParser::new();
        let mut status = resp.status();
        let mut resumes = 0;
        loop {
            let idle = (resumes > 0).then_some(RESUME_IDLE);
            match self
                .drain_stream(leg, &mut resp, &mut parser, &resp_headers, idle)
                .await
            {
                Ok(raw) => {
                    // If the stream's end is already buffered, reading it lets the
                    // connection go back to the pool; never wait for it.
                    let _ = resp.chunk().now_or_never();
                    return Ok(Reply {
                        resp_json: Some(raw),
                        resp_headers,
                        resp_code: status.as_u16(),
                        resp_type: RespType::JsonrpcResponse,
                    });
                }
                // A subscription stream that ends, or reaches its bound, ended by design:
                // its notifications went out as they came; no effect is in doubt.
                Err(StreamEnd::Failed(LegFailure::TimeoutAfterWrite) | StreamEnd::Closed) if leg.long_lived => {
                    return Err(LegFailure::SubscriptionEnded)
                }
                Err(StreamEnd::Failed(failure)) => return Err(failure),
                Err(StreamEnd::Closed) => {}
            }
            drop(resp);
            let resumable = resumes < MAX_RESUMES
                && !parser.last_event_id().is_empty()
                && session_id.is_some()
                && resumable_version;
            if !resumable {
                return Err(LegFailure::StreamClosedBeforeResponse);
            }
            resumes += 1;
            let wait = parser
                .retry_ms()
                .map_or(RESUME_STEP * resumes, Duration::from_millis)
                .min(MAX_RESUME_WAIT);
            if Instant::now() + wait >= leg.deadline {
                return Err(LegFailure::StreamClosedBeforeResponse);
            }
            tokio::time::sleep(wait).await;
            tracing::debug!(channel = %self.inner.channel, attempt = resumes, "resuming a cut response stream");
            resp = self.resume(leg, parser.last_event_id(), session_id.as_deref()).await?;
            status = resp.status();
            resp_headers = response_headers(resp.headers());
            parser = parser.resumed();
        }
    }

    /// Reads one response stream until the sentinel (returned), its end, or a final failure.
    async fn drain_stream(
        &self,
        leg: &mut StreamLeg<'_>,
        resp: &mut Answer,
        parser: &mut SseParser,
        resp_headers: &RespHeaders,
        idle: Option<Duration>,
    ) -> Result<Box<RawValue>, StreamEnd> {
        let mut events = Vec::new();
        loop {
            let quiet_until = idle.map_or(leg.deadline, |i| leg.deadline.min(Instant::now() + i));
            let chunk = match timeout_at(quiet_until, resp.chunk()).await {
                Err(_) if quiet_until < leg.deadline => return Err(StreamEnd::Closed),
                Err(_) => return Err(StreamEnd::Failed(LegFailure::TimeoutAfterWrite)),
                Ok(Err(_)) | Ok(Ok(None)) => return Err(StreamEnd::Closed),
                Ok(Ok(Some(chunk))) => chunk,
            };
            parser.feed(&chunk, &mut events);
            // The bound holds for an event still being assembled and for one that arrived
            // whole in a single chunk alike.
            let max = self.inner.settings.max_body_bytes;
            if parser.buffered() > max || events.iter().any(|e| e.data.len() > max) {
                return Err(StreamEnd::Failed(LegFailure::BodyTooLarge));
            }
            for event in events.drain(..) {
                let Some(raw) = json_value(event.data) else {
                    continue; // not JSON: protocol noise
                };
                match leg.expected.classify_event(raw) {
                    Message::Terminal(raw) => return Ok(raw),
                    Message::Other(raw) if leg.sink_open => {
                        let note = Notification {
                            resp_json: raw,
                            resp_headers: resp_headers.clone(),
                        };
                        match timeout_at(leg.deadline, leg.notes.send(note)).await {
                            Err(_) => return Err(StreamEnd::Failed(LegFailure::TimeoutAfterWrite)),
                            // The receiver is gone: keep reading for the terminal response.
                            Ok(Err(_)) => leg.sink_open = false,
                            Ok(Ok(())) => {}
                        }
                    }
                    Message::Other(_) | Message::Noise => {}
                }
            }
        }
    }

    /// One resume attempt: `GET` with `Last-Event-ID`. Anything but a 2xx event stream
    /// leaves the leg abandoned.
    async fn resume(
        &self,
        leg: &StreamLeg<'_>,
        last_event_id: &str,
        session_id: Option<&str>,
    ) -> Result<Answer, LegFailure> {
        let clients = self.clients().map_err(|_| LegFailure::StreamClosedBeforeResponse)?;
        let request = self
            .resume_request(&clients, leg.command_headers, last_event_id, session_id)
            .ok_or(LegFailure::StreamClosedBeforeResponse)?;
        let resp = match self.send(leg.admission, request, leg.deadline).await {
            Ok(resp) => resp,
            Err(LegFailure::TimeoutAfterWrite) => return Err(LegFailure::TimeoutAfterWrite),
            // The POST was delivered: whatever stops the resume leaves its effect unknown.
            Err(_) => return Err(LegFailure::StreamClosedBeforeResponse),
        };
        if resp.status().is_success() && body_kind(resp.headers()) == BodyKind::EventStream {
            Ok(resp)
        } else {
            Err(LegFailure::StreamClosedBeforeResponse)
        }
    }
}
