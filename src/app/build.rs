//! Builds the parts of a run from the configuration: the observed core (metrics, the fence
//! with its latch observer, the health counters, the supervisor with its failure hook),
//! the channels, the control-plane client, the ops listener and the dispatcher.
//!
//! Shared by a normal run and by a held latched start, so that both are observed the same
//! way. Nothing here contacts the control plane or an MCP server; the only task it starts
//! is the ops listener ([`Parts::serve_ops`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::labels::GatewayLabels;
use super::run_file::RunFile;
use super::stop::StopSignals;
use super::GatewayError;
use crate::config::{AmbiguityPolicy, ChannelConfig, Config, SessionOwner, StdioSession};
use crate::control::{random_hex, ControlClient, ControlSettings, ServerInfoSource};
use crate::coord::Coordinator;
use crate::dispatch::{Dispatcher, Policy, Propagation, Stops, Wiring, WriteAhead};
use crate::downstream::{
    Channels, EraEvent, EraObserver, HarpoonSettings, HarpoonTransport, HostClassifier, HttpEgress, HttpSettings,
    HttpTransport, InputRequiredSettings, SessionMode, SessionSettings, StdioSettings, StdioTransport, Transport,
    HARPOON_CHANNEL,
};
use crate::health::Health;
use crate::ops::OpsState;
use crate::protocol::{server_info_header, ServerInfoChannel};
use crate::receipts::{Journal, Receipt};
use crate::strict::{CommandRef, FatalCategory, Fence, FileIntents};
use crate::supervisor::{FailureHook, Supervisor, TaskKind};
use crate::telemetry::{LogRing, Metrics, OAuthOriginSource};

/// Largest JSON body, or largest undispatched SSE event, an HTTP channel's leg holds in
/// memory (`HttpSettings::max_body_bytes`).
const MAX_HTTP_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How much older than `control_plane.poll_timeout` the last successful poll may be before
/// the gateway turns not ready: a long poll may take its whole timeout, and the next one
/// starts only after its commands were handed on.
const POLL_FRESHNESS_SLACK: Duration = Duration::from_secs(30);

/// Random bytes in the instance id the control client sends (`x-tunnel-client-instance-id`,
/// in hex): new for every run.
const INSTANCE_ID_BYTES: usize = 16;

/// How long the end of a run waits for the background tasks (the ops listener, the
/// admitter, stdio children's tasks) after the stop; what is left is dropped with the
/// runtime.
const BACKGROUND_JOIN_BOUND: Duration = Duration::from_secs(1);

/// What a run is made of. Cheap handles: each is shared with the tasks that use it.
pub(super) struct Parts {
    pub(super) metrics: Arc<Metrics>,
    pub(super) fence: Fence,
    pub(super) health: Arc<Health>,
    pub(super) supervisor: Supervisor,
    /// None until [`Parts::with_channels`]: a held latched start builds none, so that
    /// nothing can touch an MCP server.
    pub(super) channels: Channels,
    /// Stops the ops listener, last of all ([`Parts::finish`]).
    ops_stop: CancellationToken,
    /// Ends the receipt writer once what is queued is written ([`Parts::finish`]).
    receipts_stop: CancellationToken,
    /// The receipt writer, once [`Parts::dispatcher`] started it.
    receipts_writer: Option<tokio::task::JoinHandle<()>>,
    /// This run's `X-Tunnel-Client-Instance-Id`, also written into each intent record.
    pub(super) instance_id: String,
    /// Strict mode across replicas (`coordination.backend = "etcd"`), once
    /// [`Parts::coordinated`] built it; its task runs until [`Parts::finish`].
    pub(super) coordinator: Option<Coordinator>,
    pub(super) coordination_stop: CancellationToken,
    pub(super) coordination_task: Option<tokio::task::JoinHandle<()>>,
}

/// The bound ops listener, not yet serving.
pub(super) struct OpsListener {
    listener: TcpListener,
    pub(super) addr: SocketAddr,
}

impl OpsListener {
    /// Tells an embedder the bound address (useful with port 0).
    pub(super) fn report(&self, to: Option<tokio::sync::oneshot::Sender<SocketAddr>>) {
        if let Some(tx) = to {
            let _ = tx.send(self.addr);
        }
    }

    /// Writes `ops.url_file`, when set, with this listener's base URL; the guard removes
    /// it when dropped (every end of the run).
    pub(super) fn url_file(&self, config: &Config) -> Result<Option<RunFile>, GatewayError> {
        let Some(path) = &config.ops.url_file else {
            return Ok(None);
        };
        let file = RunFile::url(path, config.ops.listen, self.addr).map_err(GatewayError::RunFile)?;
        tracing::info!(path = %file.path().display(), "ops listener URL written to ops.url_file");
        Ok(Some(file))
    }
}

/// The gateway's metrics for `config`: every series of its label sets at zero, each stdio
/// channel's included (what `doctor` counts its checks in, too).
pub fn gateway_metrics(config: &Config) -> Metrics {
    Metrics::new::<GatewayLabels>(config.strict.enabled, &config.stdio_channel_names())
}

impl Parts {
    /// The observed core, with no channel: metrics, the fence (one permit in strict mode)
    /// reporting each latch to the metrics, health, and the supervisor whose failure hook
    /// is [`task_failure_hook`].
    pub(super) fn observed(config: &Config) -> Self {
        let strict = config.strict.enabled;
        let metrics = Arc::new(gateway_metrics(config));
        let channel_names: Vec<String> = config.mcp.channels.keys().map(ToString::to_string).collect();
        metrics.channel_receipts_at_zero(&channel_names);
        metrics.era_channels_at_zero(&config.http_channel_names());
        let permits = config.mcp.max_concurrent.get();
        let fence = Fence::new(strict, if strict { 1 } else { permits });
        {
            let metrics = metrics.clone();
            fence.observe_latches(Box::new(move |fatal| metrics.fatal_latched(fatal.category)));
        }
        let health = Arc::new(Health::with_channels(channel_names));
        let supervisor = Supervisor::new(task_failure_hook(&fence, &health, &metrics));
        Self {
            metrics,
            fence,
            health,
            supervisor,
            channels: Channels::default(),
            ops_stop: CancellationToken::new(),
            receipts_stop: CancellationToken::new(),
            receipts_writer: None,
            instance_id: random_hex(INSTANCE_ID_BYTES),
            coordinator: None,
            coordination_stop: CancellationToken::new(),
            coordination_task: None,
        }
    }

    /// Builds every configured channel (nothing is contacted yet).
    pub(super) fn with_channels(mut self, config: &Config) -> Result<Self, GatewayError> {
        self.channels = build_channels(config, &self.metrics, &self.supervisor)?;
        Ok(self)
    }

    /// Binds `ops.listen` (errors name the address).
    pub(super) async fn bind_ops(&self, config: &Config) -> Result<OpsListener, GatewayError> {
        let listener = crate::ops::bind(config.ops.listen)
            .await
            .map_err(|source| GatewayError::OpsListen {
                addr: config.ops.listen,
                source,
            })?;
        let addr = listener.local_addr().unwrap_or(config.ops.listen);
        Ok(OpsListener { listener, addr })
    }

    /// Serves the ops listener (a background task) until [`Parts::finish`]; returns what
    /// it reads.
    pub(super) fn serve_ops(&self, config: &Config, ops: OpsListener, log_ring: &Arc<LogRing>) -> Arc<OpsState> {
        let state = Arc::new(OpsState {
            fence: self.fence.clone(),
            health: self.health.clone(),
            channels: self.channels.clone(),
            metrics: self.metrics.clone(),
            log_ring: log_ring.clone(),
            poll_freshness: config.control_plane.poll_timeout + POLL_FRESHNESS_SLACK,
            polls_failing_bound: config
                .coordination
                .etcd
                .is_some()
                .then_some(config.coordination.step_down_after),
            page: crate::ops::ui::PageSettings {
                allow_remote: config.ops.allow_remote,
                latch_file: config.strict.latch_file.clone(),
                coordinated: config.coordination.etcd.is_some(),
            },
            instance_id: self.instance_id.clone(),
            started: std::time::SystemTime::now(),
            health_details: config.ops.health_show_details,
        });
        self.supervisor.spawn_untracked(
            TaskKind::OpsListener,
            crate::ops::serve(ops.listener, state.clone(), self.ops_stop.clone()),
        );
        state
    }

    /// The dispatcher over these parts (it starts the admission line, and the receipt
    /// writer unless `receipts.enabled = false`).
    pub(super) fn dispatcher(
        &mut self,
        config: &Config,
        control: ControlClient,
        signals: &StopSignals,
    ) -> Arc<Dispatcher> {
        let receipts = self.journal(config);
        for (_, stdio) in self.channels.stdio() {
            let journal = receipts.clone();
            stdio.observe_held(Arc::new(move |ended| journal.submit(Receipt::of_held(&ended))));
        }
        for (name, http) in self.channels.http() {
            http.observe_era(era_observer(name, &self.metrics, receipts.clone()));
            let metrics = self.metrics.clone();
            http.observe_untrusted_origins(Arc::new(move || {
                metrics.oauth_untrusted_origin(OAuthOriginSource::ResourceMetadata)
            }));
        }
        Dispatcher::new(Wiring {
            control,
            fence: self.fence.clone(),
            channels: self.channels.clone(),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            policy: policy(config),
            supervisor: self.supervisor.clone(),
            stops: Stops {
                cut: signals.cut.clone(),
                hard_stop: signals.hard_stop.clone(),
            },
            write_ahead: config.strict.enabled.then(|| WriteAhead {
                store: match &self.coordinator {
                    Some(c) => Arc::new(c.intents()),
                    None => Arc::new(FileIntents::beside(&config.strict.latch_file)),
                },
                instance_id: self.instance_id.clone(),
            }),
            receipts,
        })
    }

    /// The delivery-receipt journal of `receipts.path`, its writer started; off when
    /// `receipts.enabled = false`.
    fn journal(&mut self, config: &Config) -> Journal {
        if !config.receipts.enabled {
            return Journal::off(self.metrics.clone());
        }
        let (journal, writer) = Journal::start(
            &config.receipts.path,
            &self.supervisor,
            self.metrics.clone(),
            self.receipts_stop.clone(),
        );
        self.receipts_writer = Some(writer);
        journal.showing_recent(self.health.clone())
    }

    /// The end of a run, after its stop: stops the ops listener and joins the background
    /// tasks within [`BACKGROUND_JOIN_BOUND`].
    pub(super) async fn finish(mut self) {
        // Every command has ended: the coordination lease is given back, so that a
        // standby takes over at once.
        self.stop_coordination().await;
        // The receipt writer writes what is queued, then ends.
        self.receipts_stop.cancel();
        self.ops_stop.cancel();
        if !self.supervisor.join_background(BACKGROUND_JOIN_BOUND).await {
            tracing::debug!("background tasks still running at exit are dropped with the runtime");
        }
        if let Some(writer) = self.receipts_writer.filter(tokio::task::JoinHandle::is_finished) {
            if writer.await.is_err() {
                tracing::error!("the receipt writer panicked; receipts after that were dropped (counted as stopped)");
            }
        }
    }
}

/// What the lifecycle needs to decide, from the configuration.
fn policy(config: &Config) -> Policy {
    let strict = config.strict.enabled;
    Policy {
        strict,
        ambiguity_is_fatal: config.strict.on_downstream_ambiguity == AmbiguityPolicy::Fatal,
        cleanup_timeout: config.strict.cleanup_timeout,
        open_poll_grace: config.strict.shutdown_grace,
        max_inflight: config.control_plane.max_inflight.get(),
        propagation: Propagation {
            headers: config.telemetry.propagate.headers(),
            meta: config.telemetry.propagate.meta(),
        },
        resp_timing: config.control_plane.resp_timing,
    }
}

/// What a supervised task's unexpected end does: in strict mode the latch
/// (`internal_error`: a part of the gateway is gone, nothing more may be trusted to reach
/// an MCP server); in both modes the gateway turns not ready with the reason.
pub(super) fn task_failure_hook(fence: &Fence, health: &Arc<Health>, metrics: &Arc<Metrics>) -> FailureHook {
    let fence = fence.clone();
    let health = health.clone();
    let metrics = metrics.clone();
    Arc::new(move |task: TaskKind, why| {
        metrics.task_failed(task);
        health.task_failed(task.as_str(), why);
        if fence.is_strict() {
            fence.latch(FatalCategory::InternalError, &CommandRef::default());
        }
    })
}

/// What an HTTP channel's era bridge tells, counted as a stdio channel's is counted, and
/// its held calls that ended untold kept by a receipt.
fn era_observer(channel: &str, metrics: &Arc<Metrics>, journal: Journal) -> EraObserver {
    let (channel, metrics) = (channel.to_owned(), metrics.clone());
    Arc::new(move |event| match event {
        EraEvent::Request(handling) => metrics.era_request(&channel, handling),
        EraEvent::Parked(delta) => metrics.era_parked(&channel, delta),
        EraEvent::Round => metrics.era_round(&channel),
        EraEvent::Ended(end) => metrics.era_held_ended(&channel, end),
        EraEvent::Refused(reason) => metrics.era_continuation_refused(&channel, reason),
        EraEvent::Untold(ended) => journal.submit(Receipt::of_held(&ended)),
    })
}

fn build_channels(config: &Config, metrics: &Arc<Metrics>, supervisor: &Supervisor) -> Result<Channels, GatewayError> {
    let mut by_name = BTreeMap::new();
    for (name, channel) in &config.mcp.channels {
        let transport = match channel {
            ChannelConfig::Http {
                url,
                proxy,
                socket,
                era,
                input_required,
            } => {
                let settings = HttpSettings {
                    connect_timeout: config.mcp.connect_timeout,
                    request_timeout: config.mcp.request_timeout,
                    max_body_bytes: MAX_HTTP_BODY_BYTES,
                };
                let egress = HttpEgress {
                    proxy: proxy.clone(),
                    socket: socket.clone(),
                    tls: crate::egress::tls::client_config(&config.mcp.tls_of(name)).map_err(GatewayError::Tls)?,
                };
                let transport =
                    HttpTransport::with_egress(name, url, settings, egress).map_err(|e| GatewayError::Channel {
                        channel: name.to_string(),
                        problem: e.to_string(),
                    })?;
                let input_required = InputRequiredSettings {
                    // Strict mode never parks (docs/strict-mode.md, "The era bridge").
                    parks: !config.strict.enabled,
                    park_timeout: input_required.park_timeout,
                    call_timeout: input_required.call_timeout,
                    max_rounds: input_required.max_rounds,
                };
                Transport::Http(
                    transport
                        .with_headers(channel_headers(config, name))
                        .with_era(*era)
                        .with_input_required(input_required, supervisor.clone())
                        .with_trusted_origins(config.mcp.oauth_trusted_origins.clone()),
                )
            }
            ChannelConfig::Stdio {
                command,
                env,
                max_concurrent,
                session,
            } => {
                let settings = StdioSettings {
                    request_timeout: config.mcp.request_timeout,
                    max_concurrent: *max_concurrent,
                    session: session_settings(session),
                    input_required: InputRequiredSettings {
                        // Strict mode never parks (docs/strict-mode.md, "The era bridge").
                        parks: !config.strict.enabled,
                        park_timeout: session.input_required.park_timeout,
                        call_timeout: session.input_required.call_timeout,
                        max_rounds: session.input_required.max_rounds,
                    },
                    ..StdioSettings::default()
                };
                Transport::Stdio(
                    StdioTransport::new(name, command.clone(), env.clone(), settings, metrics.clone())
                        .supervised(supervisor.clone()),
                )
            }
        };
        by_name.insert(name.to_string(), transport);
    }
    let harpoon = HarpoonTransport::new(harpoon_settings(config), Arc::default(), metrics.clone()).map_err(|e| {
        GatewayError::Channel {
            channel: HARPOON_CHANNEL.to_owned(),
            problem: e.to_string(),
        }
    })?;
    by_name.insert(HARPOON_CHANNEL.to_owned(), Transport::Harpoon(harpoon));
    Ok(Channels::new(by_name))
}

/// `[harpoon]`, as channel `harpoon` takes it.
pub fn harpoon_settings(config: &Config) -> HarpoonSettings {
    let h = &config.harpoon;
    HarpoonSettings {
        targets: h
            .targets
            .iter()
            .map(|t| (t.label.clone(), t.url.clone(), t.description.clone()))
            .collect(),
        templates: h.templates.clone(),
        allow_plaintext_http: h.allow_plaintext_http,
        max_response_bytes: h.max_response_bytes,
        max_redirects: h.max_redirects,
        classifier: HostClassifier {
            loopback: h.hosts_include_loopback,
            private: h.hosts_include_private,
            suffixes: h.hosts_include_suffix.clone(),
        },
        register_private_auth_servers: h.register_private_auth_servers,
        proxy: h.proxy.clone(),
        tls: h.tls.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        trusted_origins: config.mcp.oauth_trusted_origins.clone(),
    }
}

/// `X-Tunnel-MCP-Server-Info` as it changes while the gateway runs: each configured
/// channel (stdio channels process-affine; an HTTP channel while its era bridge keeps a
/// caller's state in this process), and channel `harpoon`, process-affine, while it has a
/// target, as upstream declares it (never when the poll filter leaves `harpoon` out: the
/// control plane never hands this replica its commands). `None` when nothing can change.
pub(crate) fn server_info_source(config: &Config, channels: &Channels) -> Option<ServerInfoSource> {
    let declared = declared_channels(config);
    let filter = &config.control_plane.poll_channels;
    let harpoon = channels
        .harpoon()
        .filter(|_| filter.is_empty() || filter.iter().any(|c| c.as_str() == HARPOON_CHANNEL))
        .map(HarpoonTransport::routable_flag);
    // Flag `i` of the source: the HTTP channels' affinity, in `declared` order, then harpoon's.
    let mut flags = Vec::new();
    let mut affinity_bit = Vec::new();
    for channel in &declared {
        match channels.get(&channel.name) {
            Some(Transport::Http(http)) if flags.len() < 63 => {
                affinity_bit.push(Some(flags.len()));
                flags.push(http.affinity_flag());
            }
            _ => affinity_bit.push(None),
        }
    }
    let harpoon_bit = harpoon.map(|flag| {
        flags.push(flag);
        flags.len() - 1
    });
    if flags.is_empty() {
        return None;
    }
    Some(ServerInfoSource::new(flags, move |state| {
        let set = |bit: usize| state & (1 << bit) != 0;
        let mut now: Vec<ServerInfoChannel> = declared
            .iter()
            .zip(&affinity_bit)
            .map(|(channel, bit)| ServerInfoChannel {
                name: channel.name.clone(),
                stateless: false,
                proc_affinity: channel.proc_affinity || bit.is_some_and(set),
            })
            .collect();
        if harpoon_bit.is_some_and(set) {
            // Every harpoon request is self-contained (a `tools/call` needs no `initialize`),
            // and the targets registered by discovery live in this replica: both flags, as
            // upstream declares it.
            now.push(ServerInfoChannel {
                name: HARPOON_CHANNEL.to_owned(),
                stateless: true,
                proc_affinity: true,
            });
        }
        server_info_header(&now)
    }))
}

fn declared_channels(config: &Config) -> Vec<ServerInfoChannel> {
    config
        .mcp
        .channels
        .iter()
        .map(|(name, c)| ServerInfoChannel {
            name: name.to_string(),
            // A channel of an MCP server is never declared stateless: an HTTP server of
            // the handshake era keeps its callers' sessions, and one of 2026-07-28 may
            // ask a handshake-era caller for input through this process.
            stateless: false,
            proc_affinity: matches!(c, ChannelConfig::Stdio { .. }),
        })
        .collect()
}

/// An HTTP channel's configured headers, as its transport takes them (also used by
/// `tunnelgate doctor`, so its probe authenticates as commands do).
pub fn channel_headers(config: &Config, channel: &str) -> http::HeaderMap {
    config
        .mcp
        .headers
        .get(channel)
        .map(|set| set.to_header_map())
        .unwrap_or_default()
}

/// A stdio channel's configured session, as its transport takes it.
pub fn session_settings(session: &StdioSession) -> SessionSettings {
    SessionSettings {
        mode: match session.owner {
            SessionOwner::Owned => SessionMode::Owned,
            SessionOwner::PassThrough => SessionMode::PassThrough,
        },
        era: session.era,
        protocol_version: session.protocol_version.clone(),
        client_name: session.client_name.clone(),
        client_version: session.client_version.clone(),
        capabilities: session.capabilities.clone(),
        timeout: session.timeout,
    }
}

/// The control-plane client as the gateway uses it (headers, server-info declaration);
/// also used by `tunnelgate doctor`, so its checks send what the runtime sends.
pub fn build_control(
    config: &Config,
    metrics: &Arc<Metrics>,
    instance_id: &str,
) -> Result<ControlClient, GatewayError> {
    let declared = declared_channels(config);
    let cp = &config.control_plane;
    let settings = ControlSettings {
        base_url: cp.base_url.to_string(),
        url_path: cp.url_path.clone(),
        tunnel_id: cp.tunnel_id.to_string(),
        api_key: cp.api_key.expose().to_owned(),
        poll_timeout: cp.poll_timeout,
        post_timeout: cp.post_timeout,
        post_attempts: cp.post_attempts.get(),
        server_info: server_info_header(&declared),
        http2: cp.http2,
        routing_correction: cp.routing_correction,
        initial_poll_timeout: cp.initial_poll_timeout,
    };
    let tls = crate::egress::tls::client_config(&cp.tls).map_err(GatewayError::Tls)?;
    ControlClient::with_egress(settings, instance_id, metrics.clone(), &cp.proxy, tls)
        .and_then(|client| {
            client
                .with_headers(cp.request_headers())
                .with_poll_channels(&cp.poll_channels)
        })
        .inspect(|client| tracing::debug!(route = client.route(), "control-plane client"))
        .map_err(GatewayError::ControlClient)
}
