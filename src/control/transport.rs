//! How the control client's poll and response POST leave the gateway: hyper's pooled
//! client driven directly (`egress::direct`) when the control plane is reached
//! directly, `reqwest` when `control_plane.proxy` sends it through a proxy.
//!
//! Invariants: [`SendError`] is the one error type the client's classification reads,
//! whichever client produced it; the direct client resends only what `reqwest`'s
//! default retry policy resends (an HTTP/2 refusal that proves the request was not
//! processed). Must not classify anything itself: `client` does.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Uri};

pub(super) use crate::egress::direct::{platform_config, Answer, SendError};
use crate::egress::direct::{Direct, NackRetries};

/// The client the poll and the response POST use.
#[derive(Clone)]
pub(super) enum Transport {
    /// hyper's pooled client, driven directly: the control plane is reached directly.
    /// Shared: the client is a few hundred bytes of configuration.
    Direct(Arc<Direct>),
    /// `reqwest`: `control_plane.proxy` sends the control plane's requests through a proxy.
    Reqwest(reqwest::Client),
}

/// Where one request goes, parsed once for either client.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    pub(super) url: &'a reqwest::Url,
    pub(super) uri: &'a Uri,
}

impl Transport {
    /// The direct client: `tls` (already carrying ALPN `h2`, `http/1.1`), one connect
    /// timeout over TCP and TLS, idle connections closed after `idle`, `reqwest`'s
    /// default resend of a stream an HTTP/2 server refused.
    pub(super) fn direct(tls: rustls::ClientConfig, connect_timeout: Duration, idle: Duration) -> Self {
        Self::Direct(Arc::new(Direct::new(
            tls,
            connect_timeout,
            idle,
            NackRetries::ReqwestDefault,
        )))
    }

    /// `"direct"` or `"reqwest"`: which client the poll and the response POST use.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Self::Direct(_) => "direct",
            Self::Reqwest(_) => "reqwest",
        }
    }

    /// A `GET` with `headers`, up to its response headers.
    pub(super) async fn get(&self, target: Target<'_>, headers: &HeaderMap) -> Result<Answer, SendError> {
        match self {
            Self::Direct(direct) => {
                direct
                    .send(Method::GET, target.uri, headers.clone(), Bytes::new())
                    .await
            }
            Self::Reqwest(http) => http
                .get(target.url.clone())
                .headers(headers.clone())
                .send()
                .await
                .map(Answer::Reqwest)
                .map_err(SendError::Reqwest),
        }
    }

    /// A `POST` of `body` with `headers`, up to its response headers.
    pub(super) async fn post(&self, target: Target<'_>, headers: &HeaderMap, body: Bytes) -> Result<Answer, SendError> {
        match self {
            Self::Direct(direct) => direct.send(Method::POST, target.uri, headers.clone(), body).await,
            Self::Reqwest(http) => http
                .post(target.url.clone())
                .headers(headers.clone())
                .body(body)
                .send()
                .await
                .map(Answer::Reqwest)
                .map_err(SendError::Reqwest),
        }
    }
}
