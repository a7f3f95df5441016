//! Channel `harpoon`: the MCP server built into the gateway that the hosted service's
//! OAuth shim calls to reach allowlisted URLs inside the network (dynamic client
//! registration, token exchange, revocation, metadata), as the official client's
//! embedded server does (`docs/private-oauth.md`).
//!
//! Rooms: [`registry`] (the targets), [`tools`] (definitions and argument checks),
//! [`server`] (the JSON-RPC methods and the tools' answers), [`call`] (the outbound
//! request of `call_target`), [`rewrite`] (`harpoon://` in results), [`discovery`]
//! (targets registered from an `oauth_discovery`).
//!
//! Invariants:
//! - every call takes an [`Admission`]; a call that sends nothing re-checks it, and the
//!   outbound request of `call_target` is marked sent right before it leaves, so the
//!   fence holds Harpoon as it holds every other channel;
//! - the leg's outcome is the outbound request's: `not_sent` when nothing left the
//!   gateway, `answered` when the target answered (or nothing had to leave: an
//!   in-gateway answer), `abandoned` when a request may have been written and no whole
//!   answer came back;
//! - the channel is routable only while a target exists; calls run side by side (no
//!   call waits for another);
//! - no body, header value, token or URL beyond `scheme://host[:port]` is logged.
//!
//! Must not touch the control plane or the latch.

mod answer;
mod call;
pub(crate) mod discovery;
pub(crate) mod registry;
mod rewrite;
mod server;
mod template;
mod tools;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::identity::Observed;
use super::watch::{ConnectSlot, WatchConnects, WatchedConnector};
use super::{ChannelStatus, DownstreamRequest, LegResult, TransportKind};
use crate::egress::client::{Client, Egress, NackRetries};
use crate::egress::connect::TimedConnect;
use crate::egress::proxy::ProxySetting;
use crate::egress::tls::TlsFiles;
use crate::strict::Admission;
use crate::telemetry::Metrics;
use registry::Registry;

/// One bound over TCP connect, a proxy's `CONNECT` and the TLS handshake of a call.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Pooled connections to targets idle longer than this are closed.
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The reserved channel name.
pub(crate) const HARPOON_CHANNEL: &str = "harpoon";

/// Which discovered hosts count as private (upstream's classifier).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostClassifier {
    pub loopback: bool,
    pub private: bool,
    /// Lower-case, each with a leading `.`.
    pub suffixes: Vec<String>,
}

/// What the channel is built from (`[harpoon]`).
#[derive(Clone, Debug)]
pub struct HarpoonSettings {
    /// Configured targets: label, URL, description.
    pub targets: Vec<(String, String, String)>,
    /// Configured template targets (`call_target_template`), validated by the loader.
    pub templates: Vec<crate::config::HarpoonTemplate>,
    pub allow_plaintext_http: bool,
    pub max_response_bytes: u64,
    pub max_redirects: u64,
    pub classifier: HostClassifier,
    /// Register an authorization server on another origin than the MCP server's when
    /// the classifier calls its host private (upstream never does).
    pub register_private_auth_servers: bool,
    pub proxy: ProxySetting,
    pub tls: TlsFiles,
    /// `serverInfo.version` and the outbound `User-Agent`'s version.
    pub version: String,
    /// Origins whose authorization-server metadata a discovery may read besides the MCP
    /// server's own (`mcp.oauth_trusted_origins`, canonical).
    pub trusted_origins: Vec<String>,
}

/// Why the channel could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HarpoonSetupError {
    #[error("harpoon.targets[{index}].{field} ({label}) {problem}")]
    Target {
        index: usize,
        field: &'static str,
        label: String,
        problem: &'static str,
    },
    #[error("harpoon: the outbound client could not be built: {0}")]
    Client(String),
}

/// Harpoon's outbound client: the one egress client, its connector watched so that a
/// strict-mode call knows whether its connection was ever up ([`super::watch`]).
type OutboundClient = Client<WatchedConnector<TimedConnect>>;

struct Inner {
    registry: Mutex<Registry>,
    client: OutboundClient,
    /// Which admission a new connection is for (strict mode).
    connects: ConnectSlot,
    settings: HarpoonSettings,
    /// Shared with the control client: whether the channel is advertised.
    routable: Arc<AtomicBool>,
    observed: Observed,
    metrics: Arc<Metrics>,
}

/// The `harpoon` channel. Clones share everything.
#[derive(Clone)]
pub struct HarpoonTransport {
    inner: Arc<Inner>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl HarpoonTransport {
    /// The channel with its configured targets (validated again here: a target the
    /// registry refuses is an error naming it). `routable` is set while a target exists.
    pub fn new(
        settings: HarpoonSettings,
        routable: Arc<AtomicBool>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, HarpoonSetupError> {
        let mut registry = Registry::default();
        for (index, (label, url, description)) in settings.targets.iter().enumerate() {
            registry
                .configure(label, url, description, settings.allow_plaintext_http)
                .map_err(|refusal| HarpoonSetupError::Target {
                    index,
                    field: if matches!(refusal, registry::Refusal::Label | registry::Refusal::DuplicateLabel) {
                        "label"
                    } else {
                        "url"
                    },
                    label: label.clone(),
                    problem: refusal.words(),
                })?;
        }
        let connects = ConnectSlot::default();
        let client = build_client(&settings, &connects)?;
        let templates = settings.templates.len();
        routable.store(registry.len() + templates > 0, Ordering::Release);
        metrics.harpoon_targets(registry.len() + templates);
        Ok(Self {
            inner: Arc::new(Inner {
                registry: Mutex::new(registry),
                client,
                connects,
                settings,
                routable,
                observed: Observed::default(),
                metrics,
            }),
        })
    }

    /// The flag [`Self::is_routable`] reads, for the control client's server-info.
    pub(crate) fn routable_flag(&self) -> Arc<AtomicBool> {
        self.inner.routable.clone()
    }

    /// Whether a target exists (the channel is routable and advertised).
    pub(crate) fn is_routable(&self) -> bool {
        self.inner.routable.load(Ordering::Acquire)
    }

    /// Answers one JSON-RPC message.
    pub(crate) async fn call(&self, admission: &Admission, req: &DownstreamRequest<'_>) -> LegResult {
        server::answer(self, admission, req).await
    }

    pub(super) fn observed(&self) -> &Observed {
        &self.inner.observed
    }

    /// The targets as `/status` and the page show them: label, category and origin.
    pub(crate) fn targets(&self) -> Vec<TargetView> {
        let exact: Vec<TargetView> = lock(&self.inner.registry)
            .targets()
            .iter()
            .map(|t| TargetView {
                label: t.label.clone(),
                category: t.category.clone(),
                origin: t.origin(),
                template: None,
            })
            .collect();
        let templates = self.inner.settings.templates.iter().map(|t| TargetView {
            label: t.label.clone(),
            category: "config".into(),
            origin: t.origin.clone(),
            template: Some(TemplateView {
                version: t.version,
                parameters: t.parameters.iter().map(|p| p.name.clone()).collect(),
            }),
        });
        exact.into_iter().chain(templates).collect()
    }

    /// `doctor`'s check of every target: each answers a `HEAD` (or `GET`) within
    /// `timeout`. Returns the label, the origin and the status or the problem in words.
    pub async fn probe_targets(&self, timeout: std::time::Duration) -> Vec<(String, String, Result<u16, String>)> {
        let mut targets: Vec<(String, String, String)> = self
            .registry()
            .targets()
            .iter()
            .map(|t| (t.label.clone(), t.origin(), t.url.clone()))
            .collect();
        for t in &self.inner.settings.templates {
            targets.push((t.label.clone(), t.origin.clone(), format!("{}/", t.origin)));
        }
        let client = &self.inner.client;
        let probes = targets.into_iter().map(|(label, origin, url)| async move {
            let result = call::probe(client, &url, timeout)
                .await
                .map(|s| s.as_u16())
                .map_err(|f| f.message());
            (label, origin, result)
        });
        futures_util::future::join_all(probes).await
    }

    pub(crate) fn status(&self) -> ChannelStatus {
        ChannelStatus {
            channel: HARPOON_CHANNEL.to_owned(),
            transport: TransportKind::Builtin,
            up: self.is_routable(),
            generation: 0,
            session: None,
            server: None,
            protocol_version: None,
            tools: None,
            started_at: None,
            era_setting: None,
            era: None,
        }
        .with_seen(self.inner.observed.seen())
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        lock(&self.inner.registry)
    }

    /// After the registry changed: the routable flag and the gauge.
    fn registry_changed(&self, len: usize) {
        let len = len + self.inner.settings.templates.len();
        self.inner.routable.store(len > 0, Ordering::Release);
        self.inner.metrics.harpoon_targets(len);
    }
}

/// One target as `/status` shows it (never its path, query or credentials).
#[derive(Clone, Debug, serde::Serialize)]
pub struct TargetView {
    pub label: String,
    pub category: String,
    pub origin: String,
    /// Present for a template target (`call_target_template`); never its path or query.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<TemplateView>,
}

/// What `/status` shows of a template: its version and its parameters' names.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TemplateView {
    pub version: u32,
    pub parameters: Vec<String>,
}

/// The outbound client: the gateway's one egress client with `harpoon.proxy` and
/// `harpoon.tls`; it follows no redirect (each hop is checked against the targets here)
/// and resends nothing; its connector reports new connections to `connects`.
fn build_client(settings: &HarpoonSettings, connects: &ConnectSlot) -> Result<OutboundClient, HarpoonSetupError> {
    let setup = |e: &dyn std::fmt::Display| HarpoonSetupError::Client(e.to_string());
    let tls = match crate::egress::tls::client_config(&settings.tls).map_err(|e| setup(&e))? {
        Some(tls) => tls,
        None => crate::egress::client::platform_config().map_err(|e| setup(&e))?,
    };
    let egress = Egress {
        tls,
        proxy: settings.proxy.clone(),
        socket: None,
        connect_timeout: CONNECT_TIMEOUT,
        idle: IDLE_TIMEOUT,
        retries: NackRetries::Never,
    };
    // The target only decides the pool of a forwarded route; targets are mostly https.
    let any = url::Url::parse("https://harpoon.invalid/").expect("a valid URL");
    Client::layered(egress, &any, WatchConnects(connects.clone())).map_err(|e| setup(&e))
}
