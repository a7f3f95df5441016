//! A channel's HTTP client: how it is set up, and the slot that holds it until
//! [`HttpTransport::close_connections`] empties it.
//!
//! Invariants:
//! - the client follows no redirect and retries no request (not even the "safe"
//!   protocol-level retries): a request is sent at most once;
//! - its connector is watched by the strict-mode connection slot ([`super::watch`]) and
//!   bounds the connect (TCP, a proxy's `CONNECT`, TLS) by `connect_timeout`, whichever
//!   way the channel leaves (directly, through its proxy, over its unix socket);
//! - a client certificate is only ever offered to the channel's own origin (no
//!   redirects, none to a proxy).
//!
//! Must not send anything: building a client connects nowhere.

use std::sync::Arc;
use std::time::Duration;

use url::Url;

use super::{lock, HttpEgress, HttpSettings, HttpTransport};
use crate::downstream::watch;
use crate::downstream::LegFailure;
use crate::egress::client::{Client, Egress, NackRetries};
use crate::egress::connect::TimedConnect;
use crate::egress::proxy::EgressError;

/// Pooled connections idle longer than this are closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The channel's client, its connector watched, and the URL as hyper's `Uri`, parsed
/// once. Clones share the pool.
pub(super) type Clients = Arc<ChannelClient>;

pub(super) struct ChannelClient {
    pub(super) client: Client<watch::WatchedConnector<TimedConnect>>,
    pub(super) uri: http::Uri,
}

/// Why a channel's client could not be built.
pub(super) enum ClientError {
    /// The URL is not a `Uri` hyper accepts.
    Url,
    /// The platform's verifier could not be set up (no TLS configuration of its own).
    Tls(rustls::Error),
    Proxy(EgressError),
}

/// The channel's client: its TLS configuration (or the platform one), its proxy or
/// socket, its connect timeout over TCP, `CONNECT` and TLS, the pool's idle timeout,
/// the strict-mode watch as the connector layer, no retries of any kind
/// (`NackRetries::Never`), no redirects (hyper follows none).
pub(super) fn build_clients(
    url: &Url,
    settings: &HttpSettings,
    egress: &HttpEgress,
    connects: &watch::ConnectSlot,
) -> Result<Clients, ClientError> {
    // hyper's `Uri` of the URL's serialisation; a URL it refuses is `ClientError::Url`.
    let uri = url.as_str().parse::<http::Uri>().map_err(|_| ClientError::Url)?;
    let tls = match &egress.tls {
        Some(tls) => tls.clone(),
        None => crate::egress::client::platform_config().map_err(ClientError::Tls)?,
    };
    let setup = Egress {
        tls,
        proxy: egress.proxy.clone(),
        socket: egress.socket.clone(),
        connect_timeout: settings.connect_timeout,
        idle: POOL_IDLE_TIMEOUT,
        retries: NackRetries::Never,
    };
    let client = Client::layered(setup, url, watch::WatchConnects(connects.clone())).map_err(ClientError::Proxy)?;
    Ok(Arc::new(ChannelClient { client, uri }))
}

impl HttpTransport {
    /// The channel's client, built afresh when the slot is empty.
    pub(super) fn clients(&self) -> Result<Clients, LegFailure> {
        let mut slot = lock(&self.inner.client);
        if let Some(clients) = slot.as_ref() {
            return Ok(clients.clone());
        }
        let clients = build_clients(
            &self.inner.url,
            &self.inner.settings,
            &self.inner.egress,
            &self.inner.connects,
        )
        .map_err(|_| LegFailure::InternalBeforeSend)?;
        *slot = Some(clients.clone());
        Ok(clients)
    }
}
