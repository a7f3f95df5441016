//! The tunnel lookup (`tunnelgate doctor`): the tunnel's metadata fetched with the
//! poll's headers, to check reachability and credentials without polling.
//!
//! Invariant: it takes no command and reads no body; it goes through reqwest whatever
//! the route (the proxy, TLS and headers of the poll apply).

use std::time::Duration;

use super::ControlClient;

impl ControlClient {
    /// `GET .../v1/tunnels/{tunnel_id}` (the tunnel's metadata) with the poll's headers:
    /// it authenticates exactly as a poll does and takes no command, so `tunnelgate
    /// doctor` can check reachability and credentials without polling. Returns the
    /// status; the body is not read. `timeout` bounds the whole exchange.
    pub(crate) async fn get_tunnel(&self, timeout: Duration) -> Result<reqwest::StatusCode, reqwest::Error> {
        let request = self.http.get(&self.tunnel_url).headers(self.request_headers().clone());
        Ok(request.timeout(timeout).send().await?.status())
    }
}
