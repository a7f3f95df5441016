//! `subscriptions/listen` of a 2026-07-28 caller on a handshake-era stdio child (default
//! mode; strict mode refuses listen streams before they reach a transport):
//! [`crate::downstream::era::listen`] decides, this room does it on the pipes.
//!
//! Invariants:
//! - the acknowledgement comes first and names only what the child can deliver (its
//!   `listChanged` flags; resource URIs only with `resources.subscribe`, and only those
//!   the child accepted);
//! - a URI is subscribed on the child once however many listeners want it (counted), and
//!   unsubscribed when the last of them ends;
//! - the child's list-changed and resource-updated notifications reach every listener
//!   that wants them, each stamped with its listen request's id; a listener whose queue
//!   is full misses an event rather than holding up the child's output;
//! - a listen ends at its command's bound, or when its child ends: a normal end,
//!   counted `answered` (`subscription_ended`), never ambiguous.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::child::Child;
use super::session::Session;
use super::{Shared, StdioTransport};
use crate::downstream::era::listen::{self, Listeners, Wants};
use crate::downstream::{DownstreamRequest, LegFailure, LegResult, Notification, NotifySink};
use crate::protocol::RespType;
use crate::strict::Admission;

/// Events one listener may have waiting before it misses some.
const LISTENER_BOUND: usize = 64;

impl StdioTransport {
    /// A 2026-07-28 caller's `subscriptions/listen`, carried onto the child's
    /// notifications until the command's bound or the child's end.
    pub(super) async fn listen(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
        wants: Wants,
        (child, session): (Arc<Child>, &Session),
    ) -> LegResult {
        let shared = &self.shared;
        let Some(id) = req.payload.id() else {
            return LegResult::failed(LegFailure::InternalBeforeSend, None, RespType::JsonrpcResponse);
        };
        let limit = shared.limit(req.deadline);
        let mut honoured = wants.honoured_by(session.result().get("capabilities"));
        let mut accepted = Vec::new();
        for uri in std::mem::take(&mut honoured.uris) {
            if shared.subscribe(admission, &uri, limit).await {
                accepted.push(uri);
            }
        }
        honoured.uris = accepted;
        let _ = notes.send(listen::acknowledged(id.get(), &honoured)).await;
        let (events_tx, mut events) = mpsc::channel(LISTENER_BOUND);
        let key = shared.add_listener(id.get(), honoured.clone(), events_tx);
        loop {
            tokio::select! {
                biased;
                // cancel-safe: waiting on a token.
                () = child.exited.cancelled() => break,
                // cancel-safe: a timer.
                () = sleep_until(limit) => break,
                // cancel-safe: a message taken is handed on in the arm.
                Some(event) = events.recv() => { let _ = notes.send(event).await; }
            }
        }
        shared.remove_listener(key);
        let unsubscribe_by = Instant::now() + shared.settings.session.timeout;
        for uri in &honoured.uris {
            shared.unsubscribe(admission, uri, unsubscribe_by).await;
        }
        tracing::info!(channel = %shared.channel, "subscription stream ended");
        LegResult::failed(LegFailure::SubscriptionEnded, Some(id), RespType::JsonrpcResponse)
    }
}

impl Shared {
    fn listeners(&self) -> std::sync::MutexGuard<'_, Listeners> {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add_listener(&self, listen_id: &str, wants: Wants, events: mpsc::Sender<Notification>) -> u64 {
        self.listeners().add(listen_id, wants, events)
    }

    fn remove_listener(&self, key: u64) {
        self.listeners().remove(key);
    }

    /// Hands a child's notification to every listener that wants it (never waits: a
    /// full listener misses it). Called by the child's output reader.
    pub(super) fn relay_to_listeners(&self, json: &str) {
        if self.listeners().relay(json) > 0 {
            tracing::debug!(channel = %self.channel, "a listener's queue is full: an event was missed");
        }
    }

    /// Subscribes `uri` on the child for one more listener: `resources/subscribe` when it
    /// is the first; whether the child accepted it.
    async fn subscribe(self: &Arc<Self>, admission: &Admission, uri: &str, limit: Instant) -> bool {
        if self.listeners().join(uri) {
            return true;
        }
        if !self.own_request_for(admission, "resources/subscribe", uri, limit).await {
            return false;
        }
        self.listeners().subscribed(uri);
        true
    }

    /// One listener less for `uri`: `resources/unsubscribe` when it was the last.
    async fn unsubscribe(self: &Arc<Self>, admission: &Admission, uri: &str, limit: Instant) {
        let last = self.listeners().leave(uri);
        if last {
            let _ = self
                .own_request_for(admission, "resources/unsubscribe", uri, limit)
                .await;
        }
    }

    /// The gateway's own `method` with `{"uri": uri}` on the pipe: whether it was answered
    /// with a result.
    async fn own_request_for(self: &Arc<Self>, admission: &Admission, method: &str, uri: &str, limit: Instant) -> bool {
        let json = json!({"jsonrpc": "2.0", "id": 0, "method": method, "params": {"uri": uri}}).to_string();
        self.own_request(admission, &json, limit)
            .await
            .is_ok_and(|(_, answer)| answer.get().contains("\"result\""))
    }
}
