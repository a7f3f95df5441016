//! A channel's HTTP clients: how they are set up, and the slot that holds them until
//! [`HttpTransport::close_connections`] empties it.
//!
//! Invariants:
//! - neither client follows a redirect or retries a request (not even the "safe"
//!   protocol-level retries): a request is sent at most once;
//! - both connectors are watched by the strict-mode connection slot ([`super::watch`]),
//!   and both bound the connect (TCP and TLS) by `connect_timeout`;
//! - the direct client (hyper's, driven directly) exists only when the URL's server is
//!   reached directly: a proxy or a unix socket keeps every request on reqwest;
//! - a client certificate is only ever offered to the channel's own origin (no
//!   redirects).
//!
//! Must not send anything: building a client connects nowhere.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;

use super::{lock, watch, HttpEgress, HttpSettings, HttpTransport};
use crate::downstream::LegFailure;
use crate::egress::direct::{Direct, NackRetries, TimedConnect};
use crate::egress::proxy::{EgressError, Route};

/// Pooled connections idle longer than this are closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A channel's HTTP clients: `reqwest`, and hyper's client driven directly when the
/// server is reached directly. Clones share the pools.
#[derive(Clone)]
pub(super) struct Clients {
    /// Every request when a proxy or a unix socket applies; discovery always.
    pub(super) reqwest: reqwest::Client,
    /// The POST, the resume `GET` and the session `DELETE` when no proxy and no socket
    /// applies (`egress::direct`), with the strict-mode connection watch as its layer.
    pub(super) direct: Option<Arc<DirectPath>>,
}

/// The direct client of a channel, its connector watched as reqwest's is, and the URL
/// as hyper's `Uri`, parsed once.
pub(super) struct DirectPath {
    pub(super) client: Direct<watch::WatchedConnector<TimedConnect>>,
    pub(super) uri: http::Uri,
}

/// Why a channel's client could not be built.
pub(super) enum ClientError {
    Http(reqwest::Error),
    Proxy(EgressError),
}

/// The channel's clients: reqwest always (discovery uses it, and every request when a
/// proxy or a socket applies), and the direct client when the URL's server is reached
/// directly (see [`direct_path`]).
pub(super) fn build_clients(
    url: &Url,
    settings: &HttpSettings,
    egress: &HttpEgress,
    connects: &watch::ConnectSlot,
) -> Result<Clients, ClientError> {
    let reqwest = build_client(url, settings, egress, connects)?;
    Ok(Clients {
        reqwest,
        direct: direct_path(url, settings, egress, connects).map(Arc::new),
    })
}

/// hyper's client driven directly, set up as [`build_client`] sets up reqwest: the
/// channel's TLS configuration (or reqwest's own platform one), its connect timeout over
/// TCP and TLS, the pool's idle timeout, the strict-mode watch as the connector layer,
/// no retries of any kind (reqwest's `retry::never()`), no redirects (hyper follows
/// none). `None` when a proxy or a unix socket applies, or the URL is not a `Uri` hyper
/// accepts: those requests stay on reqwest.
fn direct_path(
    url: &Url,
    settings: &HttpSettings,
    egress: &HttpEgress,
    connects: &watch::ConnectSlot,
) -> Option<DirectPath> {
    if egress.socket.is_some() || egress.route(url) != Route::Direct {
        return None;
    }
    // reqwest's own conversion (`try_uri`): a URL it could not send is left to it.
    let uri = url.as_str().parse::<http::Uri>().ok()?;
    let tls = match &egress.tls {
        Some(tls) => tls.clone(),
        None => crate::egress::direct::platform_config().ok()?,
    };
    let client = Direct::layered(
        tls,
        settings.connect_timeout,
        POOL_IDLE_TIMEOUT,
        NackRetries::Never,
        watch::WatchConnects(connects.clone()),
    );
    Some(DirectPath { client, uri })
}

fn build_client(
    url: &Url,
    settings: &HttpSettings,
    egress: &HttpEgress,
    connects: &watch::ConnectSlot,
) -> Result<reqwest::Client, ClientError> {
    let builder = reqwest::Client::builder();
    let builder = match &egress.tls {
        Some(tls) => builder.tls_backend_preconfigured(tls.clone()),
        None => builder,
    };
    let builder = builder
        .connector_layer(watch::WatchConnects(connects.clone()))
        .connect_timeout(settings.connect_timeout)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        // Even "safe" protocol-level retries could resend a request the server processed.
        .retry(reqwest::retry::never())
        .referer(false);
    let mut builder = crate::egress::proxy::apply(builder, &egress.proxy, url).map_err(ClientError::Proxy)?;
    if let Some(path) = &egress.socket {
        // The URL keeps naming the server (its host is the `Host` header); the bytes go
        // to the socket, never through a proxy.
        builder = builder.no_proxy().unix_socket(path.clone());
    }
    builder.build().map_err(ClientError::Http)
}

impl HttpTransport {
    /// The channel's reqwest client (discovery's).
    pub(super) fn client(&self) -> Result<reqwest::Client, LegFailure> {
        self.clients().map(|c| c.reqwest)
    }

    /// The channel's clients, built afresh when the slot is empty.
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
