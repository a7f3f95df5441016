//! `subscriptions/listen` of a 2026-07-28 caller on a handshake-era HTTP server (default
//! mode, where the owned session's standalone stream is read):
//! [`crate::downstream::era::listen`] decides, this room does it over HTTP.
//!
//! Invariants:
//! - the acknowledgement comes first and names only what the server can deliver (its
//!   `listChanged` flags; resource URIs only with `resources.subscribe`, and only those
//!   it accepted);
//! - a URI is subscribed once however many listeners want it, and unsubscribed when the
//!   last of them ends, each by a request of the gateway's in its session, under the
//!   listen command's admission;
//! - the server's list-changed and resource-updated notifications on the standalone
//!   stream ([`super::standalone`]) reach every listener that wants them;
//! - a listen ends at its command's bound, or when the server loses the session: a normal
//!   end (`subscription_ended`), never ambiguous.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::session::{session_headers, OwnedSession};
use super::HttpTransport;
use crate::downstream::era::listen::{self, Wants};
use crate::downstream::{DownstreamRequest, LegFailure, LegResult, NotifySink};
use crate::protocol::RespType;
use crate::strict::Admission;

/// Events one listener may have waiting before it misses some.
const LISTENER_BOUND: usize = 64;

impl HttpTransport {
    /// A 2026-07-28 caller's `subscriptions/listen`, carried onto the server's
    /// notifications until the command's bound or the session's end.
    pub(super) async fn listen(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        wants: Wants,
        session: &Arc<OwnedSession>,
    ) -> LegResult {
        let Some(id) = req.payload.id() else {
            return LegResult::failed(LegFailure::InternalBeforeSend, None, RespType::JsonrpcResponse);
        };
        let limit = self.leg_deadline(req.deadline);
        let headers = session_headers(&Vec::new(), session);
        let mut honoured = wants.honoured_by(session.result.get("capabilities"));
        let mut accepted = Vec::new();
        for uri in std::mem::take(&mut honoured.uris) {
            if self.subscribe(admission, &headers, &uri, limit).await {
                accepted.push(uri);
            }
        }
        honoured.uris = accepted;
        let _ = notes.send(listen::acknowledged(id.get(), &honoured)).await;
        let (events_tx, mut events) = mpsc::channel(LISTENER_BOUND);
        let key = self.listeners().add(id.get(), honoured.clone(), events_tx);
        loop {
            tokio::select! {
                biased;
                // cancel-safe: waiting on a token.
                () = session.lost.cancelled() => break,
                // cancel-safe: a timer.
                () = sleep_until(limit) => break,
                // cancel-safe: a message taken is handed on in the arm.
                Some(event) = events.recv() => { let _ = notes.send(event).await; }
            }
        }
        self.listeners().remove(key);
        let unsubscribe_by = Instant::now() + self.inner.settings.connect_timeout;
        for uri in &honoured.uris {
            if self.listeners().leave(uri) {
                let _ = self
                    .own_uri_request(admission, &headers, "resources/unsubscribe", uri, unsubscribe_by)
                    .await;
            }
        }
        tracing::info!(channel = %self.inner.channel, "subscription stream ended");
        LegResult::failed(LegFailure::SubscriptionEnded, Some(id), RespType::JsonrpcResponse)
    }

    /// Hands a notification of the standalone stream to the listeners that want it.
    pub(super) fn relay_to_listeners(&self, json: &str) {
        if self.listeners().relay(json) > 0 {
            tracing::debug!(channel = %self.inner.channel, "a listener's queue is full: an event was missed");
        }
    }

    fn listeners(&self) -> std::sync::MutexGuard<'_, listen::Listeners> {
        super::lock(&self.inner.holding.listeners)
    }

    /// Subscribes `uri` for one more listener: `resources/subscribe` when it is the first;
    /// whether the server accepted it.
    async fn subscribe(
        &self,
        admission: &Admission,
        headers: &crate::protocol::WireHeaders,
        uri: &str,
        limit: Instant,
    ) -> bool {
        if self.listeners().join(uri) {
            return true;
        }
        if !self
            .own_uri_request(admission, headers, "resources/subscribe", uri, limit)
            .await
        {
            return false;
        }
        self.listeners().subscribed(uri);
        true
    }

    /// The gateway's own `method` with `{"uri": uri}` in its session: whether it was
    /// answered with a result.
    async fn own_uri_request(
        &self,
        admission: &Admission,
        headers: &crate::protocol::WireHeaders,
        method: &str,
        uri: &str,
        limit: Instant,
    ) -> bool {
        let request =
            json!({"jsonrpc": "2.0", "id": "tunnelgate-subscription", "method": method, "params": {"uri": uri}});
        let leg = self.own_request(admission, &request, headers, Some(limit)).await;
        leg.failure.is_none() && leg.reply.resp_json.is_some_and(|raw| raw.get().contains("\"result\""))
    }
}
