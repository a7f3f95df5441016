//! The configured channels: name -> transport, and the one dispatch point over both
//! transports (so the dispatcher never matches on transport kinds itself).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::identity::Observed;
use super::{
    ChannelStatus, Discovered, DownstreamRequest, HarpoonTransport, HttpTransport, LegResult, NotifySink, Reply,
    StdioTransport,
};
use crate::protocol::{DiscoveryFailure, WireHeaders};
use crate::strict::Admission;
use crate::telemetry::{label_enum, TransportLabel};

/// One channel's transport.
pub(crate) enum Transport {
    Http(HttpTransport),
    Stdio(StdioTransport),
    /// Channel `harpoon`, served by the gateway itself.
    Harpoon(HarpoonTransport),
}

label_enum! {
    /// Which transport a channel uses (`downstream_requests_total{transport}`, and
    /// `transport` in `/status`).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum TransportKind {
        Http => "http",
        Stdio => "stdio",
        Builtin => "builtin",
    }
}

impl TransportLabel for TransportKind {}

impl Transport {
    /// The `transport` label for metrics.
    pub(crate) fn kind(&self) -> TransportKind {
        match self {
            Self::Http(_) => TransportKind::Http,
            Self::Stdio(_) => TransportKind::Stdio,
            Self::Harpoon(_) => TransportKind::Builtin,
        }
    }

    /// OpenTelemetry `network.transport`.
    pub(crate) fn network_transport(&self) -> &'static str {
        match self {
            Self::Http(_) | Self::Harpoon(_) => "tcp",
            Self::Stdio(_) => "pipe",
        }
    }

    /// `resp_timing.transport` of the channel's answers: `stdio` or `streamable_http`;
    /// `None` for `harpoon`, whose answers are the gateway's own.
    pub(crate) fn resp_timing_transport(&self) -> Option<&'static str> {
        match self {
            Self::Http(_) => Some("streamable_http"),
            Self::Stdio(_) => Some("stdio"),
            Self::Harpoon(_) => None,
        }
    }

    /// Forwards one JSON-RPC message; an answer to `initialize` or `tools/list` is also
    /// read for what it says of the server (`/status`).
    pub(crate) async fn call(
        &self,
        admission: &Admission,
        req: &DownstreamRequest<'_>,
        notes: &NotifySink,
    ) -> LegResult {
        let leg = match self {
            Self::Http(t) => t.call(admission, req, notes).await,
            Self::Stdio(t) => t.call(admission, req, notes).await,
            // Boxed: channel harpoon's state (an outbound call with its redirects) would
            // otherwise size every other channel's call future.
            Self::Harpoon(t) => Box::pin(t.call(admission, req)).await,
        };
        if let Some(method) = req.payload.method() {
            self.observed().answered(method, &leg);
        }
        leg
    }

    fn observed(&self) -> &Observed {
        match self {
            Self::Http(t) => t.observed(),
            Self::Stdio(t) => t.observed(),
            Self::Harpoon(t) => t.observed(),
        }
    }

    pub(crate) async fn terminate_session(
        &self,
        admission: &Admission,
        headers: &WireHeaders,
        deadline: Option<tokio::time::Instant>,
    ) -> LegResult {
        match self {
            Self::Http(t) => t.terminate_session(admission, headers, deadline).await,
            Self::Stdio(t) => t.terminate_session(admission).await,
            // Upstream answers a well-formed termination on a routable harpoon `405`.
            Self::Harpoon(_) => LegResult::answered(Reply {
                resp_json: None,
                resp_headers: std::collections::BTreeMap::new(),
                resp_code: 405,
                resp_type: crate::protocol::RespType::SessionTerminationResponse,
            }),
        }
    }

    /// OAuth discovery (`oauth_discovery`), ending by `deadline`. Only an HTTP channel has
    /// a URL to discover from; a stdio channel is an unsupported channel.
    pub(crate) async fn discover(
        &self,
        admission: &Admission,
        deadline: tokio::time::Instant,
    ) -> Result<Discovered, DiscoveryFailure> {
        match self {
            Self::Http(t) => t.discover(admission, deadline).await,
            Self::Stdio(_) | Self::Harpoon(_) => Err(DiscoveryFailure::UnsupportedChannel),
        }
    }

    /// An HTTP channel's MCP URL.
    pub(crate) fn url(&self) -> Option<&str> {
        match self {
            Self::Http(t) => Some(t.url()),
            Self::Stdio(_) | Self::Harpoon(_) => None,
        }
    }

    /// Whether `oauth_discovery` can run on this channel (HTTP only).
    pub(crate) fn serves_discovery(&self) -> bool {
        matches!(self, Self::Http(_))
    }

    /// Whether commands are served on this channel now: always, but for `harpoon`
    /// without a target (answered "unsupported channel", as upstream).
    pub(crate) fn is_routable(&self) -> bool {
        match self {
            Self::Harpoon(h) => h.is_routable(),
            Self::Http(_) | Self::Stdio(_) => true,
        }
    }

    pub(crate) fn status(&self) -> ChannelStatus {
        match self {
            Self::Http(t) => t.status(),
            Self::Stdio(t) => t.status(),
            Self::Harpoon(t) => t.status(),
        }
    }
}

/// All channels, by name. Unknown names are never routed to `main`.
#[derive(Clone, Default)]
pub(crate) struct Channels {
    by_name: Arc<BTreeMap<String, Transport>>,
}

impl Channels {
    pub(crate) fn new(by_name: BTreeMap<String, Transport>) -> Self {
        Self {
            by_name: Arc::new(by_name),
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Transport> {
        self.by_name.get(name)
    }

    /// The configured channels' status (`harpoon` is shown on its own: see
    /// [`HarpoonTransport::targets`]; it is never "down", only without targets).
    pub(crate) fn status(&self) -> Vec<ChannelStatus> {
        self.by_name
            .values()
            .filter(|t| !matches!(t, Transport::Harpoon(_)))
            .map(Transport::status)
            .collect()
    }

    /// Channel `harpoon`, when the gateway serves it.
    pub(crate) fn harpoon(&self) -> Option<&HarpoonTransport> {
        match self.by_name.get(super::HARPOON_CHANNEL) {
            Some(Transport::Harpoon(h)) => Some(h),
            _ => None,
        }
    }

    /// The stdio channels, by name (each has its session kept open by the dispatcher).
    pub(crate) fn stdio(&self) -> impl Iterator<Item = (&str, &StdioTransport)> {
        self.by_name.iter().filter_map(|(name, t)| match t {
            Transport::Stdio(s) => Some((name.as_str(), s)),
            Transport::Http(_) | Transport::Harpoon(_) => None,
        })
    }

    /// The Streamable HTTP channels, by name.
    pub(crate) fn http(&self) -> impl Iterator<Item = (&str, &HttpTransport)> {
        self.by_name.iter().filter_map(|(name, t)| match t {
            Transport::Http(h) => Some((name.as_str(), h)),
            Transport::Stdio(_) | Transport::Harpoon(_) => None,
        })
    }

    /// Fatal-latch cleanup: kill stdio groups now, drop HTTP connections. Nothing restarts.
    pub(crate) fn kill_all(&self) {
        for t in self.by_name.values() {
            match t {
                Transport::Http(h) => h.close_connections(),
                Transport::Stdio(s) => s.kill_now(),
                Transport::Harpoon(_) => {}
            }
        }
    }

    /// Graceful stop of every stdio child (bounded inside each transport).
    pub(crate) async fn shutdown(&self) {
        let stops = self.by_name.values().filter_map(|t| match t {
            Transport::Stdio(s) => Some(s.shutdown()),
            Transport::Http(h) => {
                h.close_connections();
                None
            }
            Transport::Harpoon(_) => None,
        });
        futures_util::future::join_all(stops).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transport_kind_serializes_as_its_label() {
        for kind in TransportKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
