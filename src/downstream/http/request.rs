//! The requests of a leg, ready for the client that carries them: the POST of the
//! message, the resume `GET`, the session's standalone `GET` and the session `DELETE`.
//!
//! Invariants:
//! - the POST's body is the message's bytes, unchanged, as `application/json`; its
//!   `Accept` is the command's, else both JSON and an event stream;
//! - each request carries the command's headers as [`super::headers`] selects them, and
//!   the channel's configured headers the caller did not send ([`super::configured`]);
//! - every request goes on the channel's one client; one that cannot be built is never
//!   sent (the caller reports it `not_sent`, or, for a resume, leaves the leg
//!   `abandoned`).
//!
//! Must not send anything: [`super::send`] does.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use http::Method;

use super::client::Clients;
use super::headers::{forward_headers, resume_headers};
use super::{configured, HttpTransport};
use crate::downstream::{DownstreamRequest, LegFailure};
use crate::protocol::{WireHeaders, LAST_EVENT_ID, MCP_SESSION_ID};

/// One request of a leg, ready for the channel's client.
pub(super) struct Outgoing {
    pub(super) clients: Clients,
    pub(super) method: Method,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

/// `Accept` sent with a POST when the command's headers carry none.
const DEFAULT_ACCEPT: &str = "application/json, text/event-stream";

impl HttpTransport {
    /// The POST carrying the message: the command's headers, the JSON content type, and
    /// the default `Accept` when the command gives none.
    pub(super) fn post_request(&self, clients: &Clients, req: &DownstreamRequest<'_>) -> Result<Outgoing, LegFailure> {
        let mut headers = forward_headers(req.headers);
        configured::add(&mut headers, &self.inner.configured, req.headers);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if !headers.contains_key(ACCEPT) {
            headers.insert(ACCEPT, HeaderValue::from_static(DEFAULT_ACCEPT));
        }
        let body = Bytes::copy_from_slice(req.payload.raw().get().as_bytes());
        Ok(outgoing(clients, Method::POST, headers, body))
    }

    /// The resume `GET` of a cut stream: the command's resume headers, the stream's
    /// session id when the command named none, the configured headers, and
    /// `Last-Event-ID`. `None` when the event id is not a header value: nothing is sent.
    pub(super) fn resume_request(
        &self,
        clients: &Clients,
        command_headers: &WireHeaders,
        last_event_id: &str,
        session_id: Option<&str>,
    ) -> Option<Outgoing> {
        let mut headers = resume_headers(command_headers);
        if !headers.contains_key(MCP_SESSION_ID) {
            if let Some(value) = session_id.and_then(|s| HeaderValue::from_str(s).ok()) {
                headers.insert(MCP_SESSION_ID, value);
            }
        }
        configured::add(&mut headers, &self.inner.configured, command_headers);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let last_id = HeaderValue::from_str(last_event_id).ok()?;
        headers.insert(LAST_EVENT_ID, last_id);
        Some(outgoing(clients, Method::GET, headers, Bytes::new()))
    }

    /// The standalone `GET` of an MCP session (the stream where a handshake-era server
    /// sends what belongs to no request): the session's headers and the configured ones.
    pub(super) fn standalone_request(&self, clients: &Clients, session_headers: &WireHeaders) -> Outgoing {
        let mut headers = resume_headers(session_headers);
        configured::add(&mut headers, &self.inner.configured, session_headers);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        outgoing(clients, Method::GET, headers, Bytes::new())
    }

    /// The session `DELETE`: the command's headers (its `Mcp-Session-Id` among them) and
    /// the configured ones.
    pub(super) fn delete_request(&self, clients: &Clients, headers: &WireHeaders) -> Result<Outgoing, LegFailure> {
        let mut request_headers = forward_headers(headers);
        configured::add(&mut request_headers, &self.inner.configured, headers);
        Ok(outgoing(clients, Method::DELETE, request_headers, Bytes::new()))
    }
}

fn outgoing(clients: &Clients, method: Method, headers: HeaderMap, body: Bytes) -> Outgoing {
    Outgoing {
        clients: clients.clone(),
        method,
        headers,
        body,
    }
}
