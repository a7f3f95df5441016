//! The standalone stream of the session the era bridge owns with a handshake-era HTTP
//! server: the `GET` where the server sends what belongs to no request, read for as long
//! as the session lives (default mode only, with parking on).
//!
//! Invariants:
//! - it is opened once per owned session and never outlives it: a stream that ends is
//!   opened again after a pause while the session is current, and not at all once the
//!   server said it offers none (`405`) or the session is lost;
//! - a server's request on it goes to the held call that may be asked now
//!   ([`super::held`]); with none held, the gateway answers it with an error;
//! - notifications on it go to the 2026-07-28 callers' listen streams that want them
//!   ([`super::listen`]), and nowhere else;
//! - each event is bounded by the channel's body bound; nothing of it is logged.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::classify::{body_kind, json_value, BodyKind};
use super::headers::response_headers;
use super::session::{session_headers, OwnedSession};
use super::HttpTransport;
use crate::downstream::era::park::Ask;
use crate::downstream::sse::SseParser;
use crate::downstream::Notification;
use crate::strict::{Admission, CommandRef};
use crate::supervisor::TaskEnd;
use crate::telemetry::TaskKind;

/// Pause before the stream is opened again, times the failures in a row (at most
/// [`MAX_PAUSE`]).
const PAUSE_STEP: Duration = Duration::from_millis(500);
const MAX_PAUSE: Duration = Duration::from_secs(30);
/// Bound of the answer to the `GET` (its headers), and of one answer to a request.
const ANSWER_BOUND: Duration = Duration::from_secs(10);

/// How one standalone stream ended.
enum Ended {
    /// Open it again (after a pause when it failed).
    Again { failed: bool },
    /// The server offers none, or the session is gone: stop.
    Stop,
}

impl HttpTransport {
    /// Opens the standalone stream of `session` in a task of its own, when calls are held.
    pub(super) fn open_standalone(&self, session: &Arc<OwnedSession>) {
        let holding = &self.inner.holding;
        let Some(supervisor) = holding.supervisor().filter(|_| holding.parks()) else {
            return;
        };
        let (transport, session) = (self.clone(), session.clone());
        supervisor.spawn_untracked(TaskKind::EraHttp, async move {
            let mut failures = 0u32;
            while !session.is_lost() {
                match transport.standalone(&session).await {
                    Ended::Stop => break,
                    Ended::Again { failed: false } => failures = 0,
                    Ended::Again { failed: true } => failures = failures.saturating_add(1),
                }
                tokio::time::sleep((PAUSE_STEP * failures.max(1)).min(MAX_PAUSE)).await;
            }
            TaskEnd::Finished
        });
    }

    /// One standalone `GET`, read to its end.
    async fn standalone(&self, session: &Arc<OwnedSession>) -> Ended {
        let command = CommandRef {
            request_id: None,
            channel: Some(self.inner.channel.clone()),
            method: None,
        };
        let Ok(own) = self.inner.holding.fence.admit(command).await else {
            return Ended::Stop;
        };
        let headers = session_headers(&Vec::new(), session);
        let Ok(clients) = self.clients() else {
            return Ended::Again { failed: true };
        };
        let request = self.standalone_request(&clients, &headers);
        let mut resp = match self.send(&own, request, Instant::now() + ANSWER_BOUND).await {
            Ok(resp) => resp,
            Err(_) => return Ended::Again { failed: true },
        };
        let status = resp.status().as_u16();
        if status == 405 {
            tracing::info!(channel = %self.inner.channel, "the MCP server offers no standalone stream (405): requests it sends outside a call cannot reach a caller");
            return Ended::Stop;
        }
        if status == 404 || !resp.status().is_success() || body_kind(resp.headers()) != BodyKind::EventStream {
            return Ended::Again { failed: true };
        }
        let resp_headers = response_headers(resp.headers());
        let max = self.inner.settings.max_body_bytes;
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        while let Ok(Some(chunk)) = resp.chunk().await {
            parser.feed(&chunk, &mut events);
            if parser.buffered() > max || events.iter().any(|e| e.data.len() > max) {
                tracing::warn!(channel = %self.inner.channel, "an event on the MCP server's standalone stream was larger than the body bound; the stream is opened again");
                return Ended::Again { failed: true };
            }
            for event in events.drain(..) {
                let Some(raw) = json_value(event.data) else { continue };
                let note = Notification {
                    resp_json: raw,
                    resp_headers: resp_headers.clone(),
                };
                self.untied(&own, &headers, note).await;
            }
        }
        Ended::Again { failed: false }
    }

    /// A message on the standalone stream: a request goes to the call held now, or is
    /// answered here; anything else is not carried.
    async fn untied(&self, own: &Admission, headers: &crate::protocol::WireHeaders, note: Notification) {
        let Some(ask) = Ask::of(&note) else {
            self.relay_to_listeners(note.resp_json.get());
            return;
        };
        let held = super::lock(&self.inner.holding.untied).clone();
        let note = match held {
            Some(held) => match held.send(note).await {
                Ok(()) => return,
                Err(returned) => returned.0,
            },
            None => note,
        };
        drop(note);
        let deadline = Instant::now() + ANSWER_BOUND;
        self.answer_unasked(own, headers, ask, deadline).await;
    }
}
