//! The one place a request of a leg leaves: the last checks before the send, the send on
//! its client up to the response headers, and what a failure before them proves.
//!
//! Invariants:
//! - nothing is sent once the leg's deadline has passed, nor without the admission's
//!   consent taken right before the send ([`Admission::begin_send`], or, where one
//!   admission at a time uses the pool, the hand-over watched by [`crate::downstream::watch`]), with
//!   no `.await` in between;
//! - a failure is `not_sent` only when the admission was never marked sent, or the
//!   cause chain places it before any byte was written ([`super::classify`]); a
//!   forwarding proxy's `407` forwarded nothing ([`Admission::not_forwarded`]);
//! - a failed TLS handshake is named once per failure, in words, never with the URL.
//!
//! # Cancel safety
//! Dropping a send after its first poll may leave the request on the wire: the caller
//! treats it as `abandoned`, never as `not_sent`.

use http::StatusCode;
use tokio::time::{timeout_at, Instant};

use super::classify::classify_send_error;
use super::request::Outgoing;
use super::{lock, HttpTransport};
use crate::downstream::error_chain::SendFacts;
use crate::downstream::watch::Release;
use crate::downstream::LegFailure;
use crate::egress::client::{Answer, SendError};
use crate::egress::proxy::Route;
use crate::strict::Admission;

impl HttpTransport {
    /// Sends one request after the last checks: deadline not passed, admission still good.
    /// Resolves when the response headers arrive.
    pub(super) async fn send(
        &self,
        admission: &Admission,
        request: Outgoing,
        deadline: Instant,
    ) -> Result<Answer, LegFailure> {
        if Instant::now() >= deadline {
            return Err(LegFailure::DeadlineBeforeSend);
        }
        let execute = timeout_at(deadline, self.execute(request));
        // In strict mode the connector marks the request sent once connected (or refuses:
        // nothing is written); a pooled connection may write it during the first poll
        // with no word back, so it counts as sent from the hand-over on. Otherwise bytes
        // may reach the server from here on.
        let release = Release::take(&self.inner.connects, admission).map_err(|_| LegFailure::NotAdmitted)?;
        let result = release.send(execute).await;
        match result {
            // We cannot tell whether the connection was up and the request written.
            Err(_) => Err(if admission.is_sent() {
                LegFailure::TimeoutAfterWrite
            } else {
                LegFailure::DeadlineBeforeSend
            }),
            // A connection the fence refused to use: nothing was written.
            Ok(Err(_)) if !admission.is_sent() && admission.recheck().is_err() => Err(LegFailure::NotAdmitted),
            Ok(Err(error)) => {
                let facts = SendFacts::of(&error);
                tracing::debug!(channel = %self.inner.channel, send_error = facts.kind.as_str(), "no response headers");
                let failure = classify_send_error(facts);
                if failure == LegFailure::Tls {
                    self.warn_tls(&error);
                }
                Err(failure)
            }
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// A forwarding proxy's `407` to the leg's first request: the proxy wants
    /// credentials and forwarded nothing, so nothing reached the MCP server, and the
    /// admission says so ([`Admission::not_forwarded`]). Any other answer through a
    /// forwarding proxy (its `502` and `504` included) is classified as the server's.
    pub(super) fn forwarded_nothing(&self, admission: &Admission, resp: &Answer) -> Result<(), LegFailure> {
        if self.inner.route == Route::Forward && resp.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
            admission.not_forwarded();
            return Err(LegFailure::ProxyAuthRequired);
        }
        Ok(())
    }

    /// Names the problem of a failed handshake (the leg's own line says `tls`, not sent).
    fn warn_tls(&self, error: &SendError) {
        let problem =
            crate::egress::tls::handshake_problem(error.chain()).unwrap_or_else(|| "TLS handshake failed".into());
        *lock(&self.inner.tls_problem) = Some(problem.clone());
        tracing::warn!(
            channel = %self.inner.channel,
            tls_problem = %problem,
            "TLS handshake with the MCP server failed: {problem} (mcp.tls / mcp.channels.{}.tls)",
            self.inner.channel
        );
    }

    /// The request on its client, up to its response headers.
    ///
    /// # Cancel safety
    /// Not cancel-safe once polled: the request may be on the wire when it is dropped.
    async fn execute(&self, request: Outgoing) -> Result<Answer, SendError> {
        let Outgoing {
            clients,
            method,
            headers,
            body,
        } = request;
        clients.client.send(method, &clients.uri, headers, body).await
    }
}
