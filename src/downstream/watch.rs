//! Knowing when an HTTP request may leave: a connector layer that reports each new
//! connection to the admission being served, so that a stop, or a deadline, during a
//! slow connect (or DNS, or TLS) is known to have sent nothing. Used by the HTTP
//! channels and by `harpoon`'s outbound client.
//!
//! Only used where one admission at a time uses the pool (strict mode): the slot then
//! names the one request a connection can be for. The connection is dropped unused when
//! the fence no longer allows that request to leave ([`Wire::connected`] refuses).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::strict::{Admission, Refusal, Wire};

/// An admission's consent to let its one request out, taken right before the send: in
/// strict mode (one admission at a time uses the pool, so a new connection is for this
/// request) the hand-over, watched through `slot`; otherwise the admission is marked sent
/// at once.
pub(super) struct Release<'a> {
    slot: &'a ConnectSlot,
    admission: &'a Admission,
}

impl<'a> Release<'a> {
    /// The fence's last word ([`Wire::hand_over`] or [`Admission::begin_send`]); refused,
    /// nothing may be sent. No `.await` may come between it and [`Release::send`].
    pub(super) fn take(slot: &'a ConnectSlot, admission: &'a Admission) -> Result<Self, Refusal> {
        if admission.tracks_connects() {
            admission.wire().hand_over()?;
        } else {
            admission.begin_send()?;
        }
        Ok(Self { slot, admission })
    }

    /// Drives `send`, the admission's request, so that it is marked sent exactly when
    /// bytes may leave: in strict mode at once if the first poll hands the request to a
    /// pooled connection, else when the connector reports the new connection up.
    ///
    /// # Cancel safety
    /// Dropping it after its first poll may leave the request on the wire; the admission
    /// then says so ([`Admission::is_sent`]).
    pub(super) async fn send<F: Future>(&self, send: F) -> F::Output {
        if !self.admission.tracks_connects() {
            return send.await;
        }
        let wire = self.admission.wire();
        let _watching = self.slot.watch(wire.clone());
        let mut send = std::pin::pin!(send);
        // The first poll either hands the request to a pooled connection or starts a
        // connect (which the connector reports); no `.await` before it.
        let first = std::future::poll_fn(|cx| Poll::Ready(send.as_mut().poll(cx))).await;
        wire.handed_over();
        match first {
            Poll::Ready(r) => r,
            Poll::Pending => send.await,
        }
    }

    /// Whether bytes of the request may have left (all along in default mode).
    pub(super) fn may_have_left(&self) -> bool {
        self.admission.is_sent()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The admission (if any) whose request the next connection is for.
#[derive(Clone, Default)]
pub(super) struct ConnectSlot(Arc<Mutex<Option<Wire>>>);

/// Clears the slot when the send it was set for ends (however it ends).
pub(super) struct Watching<'a>(&'a ConnectSlot);

/// The connector layer (see `egress::client::Client::layered`).
#[derive(Clone)]
pub(super) struct WatchConnects(pub(super) ConnectSlot);

#[derive(Clone)]
pub(super) struct WatchedConnector<S> {
    inner: S,
    slot: ConnectSlot,
}

/// The connection was made after the fence stopped allowing this request.
#[derive(Debug, thiserror::Error)]
#[error("connection not used: {0}")]
pub(super) struct RefusedAfterConnect(Refusal);

impl ConnectSlot {
    pub(super) fn watch(&self, wire: Wire) -> Watching<'_> {
        *self.lock() = Some(wire);
        Watching(self)
    }

    fn current(&self) -> Option<Wire> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Wire>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        *self.0.lock() = None;
    }
}

impl<S> tower_layer::Layer<S> for WatchConnects {
    type Service = WatchedConnector<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WatchedConnector {
            inner,
            slot: self.0.clone(),
        }
    }
}

impl<S, R> tower_service::Service<R> for WatchedConnector<S>
where
    S: tower_service::Service<R, Error = BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, target: R) -> Self::Future {
        let wire = self.slot.current();
        if let Some(w) = &wire {
            w.connecting();
        }
        let connecting = self.inner.call(target);
        Box::pin(async move {
            let conn = connecting.await?;
            if let Some(w) = wire {
                w.connected()
                    .map_err(|r| Box::new(RefusedAfterConnect(r)) as BoxError)?;
            }
            Ok(conn)
        })
    }
}
