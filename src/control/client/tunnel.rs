//! The tunnel lookup (`tunnelgate doctor`, a standby's reach probe): the tunnel's
//! metadata fetched with the poll's headers, to check reachability and credentials
//! without polling.
//!
//! Invariant: it takes no command and reads no body; it goes through the poll's own
//! client (its proxy, TLS and headers apply).

use std::time::Duration;

use http::{Method, StatusCode};

use super::ControlClient;
use crate::egress::client::SendError;

/// Why the tunnel lookup got no status.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The whole exchange outlasted its bound.
    #[error("the tunnel lookup timed out")]
    Timeout,
    /// The request got no response headers (the error's chain never holds the URL).
    #[error("the tunnel lookup failed: {0}")]
    Send(SendError),
}

impl ControlClient {
    /// `GET .../v1/tunnels/{tunnel_id}` (the tunnel's metadata) with the poll's headers:
    /// it authenticates exactly as a poll does and takes no command, so `tunnelgate
    /// doctor` can check reachability and credentials without polling. Returns the
    /// status; the body is not read. `timeout` bounds the whole exchange.
    pub async fn get_tunnel(&self, timeout: Duration) -> Result<StatusCode, LookupError> {
        let request = self.client.send(
            Method::GET,
            &self.tunnel_uri,
            self.request_headers(),
            bytes::Bytes::new(),
        );
        match tokio::time::timeout(timeout, request).await {
            Err(_) => Err(LookupError::Timeout),
            Ok(Err(e)) => Err(LookupError::Send(e)),
            Ok(Ok(answer)) => Ok(answer.status()),
        }
    }
}
