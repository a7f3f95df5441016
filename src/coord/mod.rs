//! Coordination across replicas: strict mode's one fence on etcd (`coordination.backend =
//! "etcd"`).
//!
//! Owns the election (one key bound to a lease: only its holder polls and admits), the
//! write-ahead intents in etcd ([`EtcdIntents`], the fence's proof across processes) and
//! the cluster-wide latch every replica watches. The etcd client is [`etcd`] (etcd's own
//! JSON gateway over HTTP: no `protoc` at build time).
//!
//! Invariants:
//! - A replica admits only while it is active, no cluster-wide latch is known, and less
//!   than [`RENEW_DEADLINE_SHARE`] of `lease_ttl` has passed since it *sent* its last
//!   acknowledged renewal. etcd expires the lease no earlier than `lease_ttl` after it
//!   processed that renewal, so the active stops admitting at least `lease_ttl / 3`
//!   (3.3 s by default) before any successor can win.
//! - Every intent is written in one transaction conditioned on this replica's election
//!   key (its create revision) and on the absence of the cluster-wide latch; settled the
//!   same way. A refused or failed write means the command is not dispatched.
//! - A new active reads the intents in the same transaction that made it the holder; one
//!   left unsettled latches `interrupted_before_ack` before anything is admitted.
//!
//! Imports config, egress, health, strict and telemetry only; read by `app`, `cli` and
//! `doctor` alone (`docs/ARCHITECTURE.md`, "Dependency rules").
//! Never touches an MCP server or the control plane.

mod election;
/// The etcd client, a crate of its own (`crates/etcd`), under the name the modules use.
pub(crate) use tunnelgate_etcd as etcd;
mod intents;
mod latch;
mod reach;

pub(crate) use intents::EtcdIntents;
pub use latch::{clear_cluster, read_cluster, ClusterRecord};
pub(crate) use reach::ReachProbe;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::EtcdConfig;
use crate::health::{ClusterLatch, CoordinationView, Health, ReplicaRole};
use crate::strict::Fence;
use crate::telemetry::{CoordinationRole, Metrics};
use etcd::{Etcd, EtcdError, EtcdSettings};

/// The share of `lease_ttl`, counted from the send of the last acknowledged renewal, after
/// which the active admits nothing more: two thirds, so one renewal (every third) may
/// fail and the margin to the lease's end stays a third.
pub(crate) const RENEW_DEADLINE_SHARE: f64 = 2.0 / 3.0;

/// The keys of one tunnel under `coordination.etcd.prefix`.
#[derive(Clone, Debug)]
pub struct Keys {
    pub leader: String,
    pub intents: String,
    pub latch: String,
    /// `<prefix>/reach/<instance id>`: each standby's last check of the control plane,
    /// under its own lease.
    pub reach: String,
}

impl Keys {
    pub fn under(prefix: &str) -> Self {
        Self {
            leader: format!("{prefix}/leader"),
            intents: format!("{prefix}/intents/"),
            latch: format!("{prefix}/latch"),
            reach: format!("{prefix}/reach/"),
        }
    }

    fn intent(&self, request_id: &str) -> String {
        format!("{}{request_id}", self.intents)
    }
}

/// The etcd client of `coordination.etcd`, each request bounded by `timeout`.
pub fn client(config: &EtcdConfig, timeout: Duration) -> Result<Etcd, EtcdError> {
    let (username, password) = match &config.credentials {
        Some((u, p)) => (Some(u.expose().to_owned()), Some(p.expose().to_owned())),
        None => (None, None),
    };
    Etcd::new(EtcdSettings {
        endpoints: config.endpoints.clone(),
        username,
        password,
        tls: config.tls.clone(),
        request_timeout: timeout,
    })
}

/// This replica's term as the active: the create revision of its election key, when it
/// began (as this replica's clock saw it), and when it sent its last acknowledged renewal.
#[derive(Clone, Copy, Debug)]
struct Term {
    revision: i64,
    started_at: Instant,
    renewed_at: Instant,
}

/// The timing of one replica's coordination (`[coordination]`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    /// `coordination.lease_ttl`.
    pub lease_ttl: Duration,
    /// `coordination.step_down_after`.
    pub step_down_after: Duration,
}

/// What the coordinator knows now.
#[derive(Default)]
struct State {
    /// The lease this replica campaigns with (kept alive while standby too).
    lease: Option<i64>,
    active: Option<Term>,
    holder: Option<String>,
    /// Whether etcd answered the last request of the election loop.
    reachable: bool,
    /// Whether "etcd cannot be reached" was logged since etcd last answered.
    told_unreachable: bool,
    /// The cluster-wide latch, when one is set.
    latch: Option<ClusterRecord>,
    /// The intent recorded and not yet settled: its request id and the term (election
    /// key revision) it was recorded under.
    outstanding: Option<(String, i64)>,
    /// The intent of the last acknowledged command, whose delete waits to ride the next
    /// record's transaction (one transaction per command), or [`intents::IDLE_SETTLE`]
    /// without one, when the settle loop writes it alone.
    pending_settle: Option<(String, i64)>,
    /// Intent records in flight (between the admission check and etcd's answer): a
    /// step-down waits for none.
    recording: usize,
    /// Settles etcd did not confirm, by request id, with the term each was recorded
    /// under: all tried again after each renewal and with backoff while the term lasts,
    /// and before a graceful stop gives the lease back, so that an acknowledged command
    /// never makes a later successor latch.
    unsettled: BTreeMap<String, i64>,
    /// After a step-down: no campaign before this.
    hold_off_until: Option<Instant>,
    step_downs: u64,
    /// This replica's last look at the control plane (a standby's check, the active's
    /// polls); `None` before the first.
    control_plane_reachable: Option<bool>,
    /// The active's view of a poll failure: when the polls began failing (never before
    /// the term), and etcd's revision read after that, so that a standby's report written
    /// at a later revision was written since then.
    failing: Option<(Instant, i64)>,
    /// Why the step-down waits, as last logged in this failure: each reason is logged
    /// once, not at every election step.
    told: Option<reach::Waiting>,
}

/// One replica's coordination: the election, its intents and the cluster latch. Cheap to
/// clone.
#[derive(Clone)]
pub(crate) struct Coordinator {
    shared: Arc<Shared>,
}

struct Shared {
    etcd: Etcd,
    keys: Keys,
    instance_id: String,
    lease_ttl: Duration,
    step_down_after: Duration,
    /// A standby's check of the control plane (the run's control client).
    probe: ReachProbe,
    /// Wakes the settle loop: a settle failed, or a renewal succeeded.
    settle_wake: tokio::sync::Notify,
    state: Mutex<State>,
    /// Whether this replica may poll now (active, reachable, no cluster latch).
    may_poll: watch::Sender<bool>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    fence: Fence,
}

impl Coordinator {
    pub(crate) fn new(
        config: &EtcdConfig,
        timing: Timing,
        instance_id: &str,
        observers: (Arc<Metrics>, Arc<Health>),
        fence: Fence,
        probe: ReachProbe,
    ) -> Result<Self, EtcdError> {
        let Timing {
            lease_ttl,
            step_down_after,
        } = timing;
        let (metrics, health) = observers;
        let etcd = client(config, request_timeout(lease_ttl))?;
        metrics.coordination_enabled();
        let coordinator = Self {
            shared: Arc::new(Shared {
                etcd,
                keys: Keys::under(&config.prefix),
                instance_id: instance_id.to_owned(),
                lease_ttl,
                step_down_after,
                probe,
                settle_wake: tokio::sync::Notify::new(),
                state: Mutex::new(State::default()),
                may_poll: watch::channel(false).0,
                metrics,
                health,
                fence,
            }),
        };
        coordinator.publish();
        Ok(coordinator)
    }

    /// The renewal interval: a third of `lease_ttl`.
    pub(crate) fn renew_interval(&self) -> Duration {
        self.shared.lease_ttl / 3
    }

    /// The write-ahead intent store of this replica.
    pub(crate) fn intents(&self) -> EtcdIntents {
        EtcdIntents::new(self.clone())
    }

    /// Runs the election, the latch watch, the settle retries and (while standby) the
    /// control-plane checks until `stop`; on stop, unsettled intents are tried once more
    /// and a held lease is revoked so that a standby takes over at once.
    pub(crate) async fn run(self, stop: CancellationToken) {
        // One task for all, so that a panic in any reaches the supervisor.
        tokio::join!(
            election::run(&self, &stop),
            latch::watch_loop(self.clone(), stop.clone()),
            intents::settle_loop(&self, &stop),
            reach::check_loop(&self, &stop),
        );
        election::resign(&self).await;
    }

    /// Whether this replica may admit (and so poll) now: the gate every intent record
    /// asks first, by this replica's own clock.
    pub(crate) fn may_admit(&self) -> bool {
        self.admitting_term().is_ok()
    }

    /// Whether this replica may poll, as a watch: `true` only while it is the active and
    /// no cluster latch is set.
    pub(crate) fn may_poll(&self) -> watch::Receiver<bool> {
        self.shared.may_poll.subscribe()
    }

    /// Writes `fatal` as the cluster-wide latch, unless one is set already (the first
    /// latch wins). Bounded by the request timeout.
    pub(crate) async fn publish_latch(&self, fatal: &crate::strict::Fatal) -> Result<bool, EtcdError> {
        latch::publish(self, fatal).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The term to record an intent under, when this replica may admit now.
    fn admitting_term(&self) -> Result<Term, &'static str> {
        self.admitting_term_of(&self.lock())
    }

    /// [`Coordinator::admitting_term`] under a lock the caller holds.
    fn admitting_term_of(&self, state: &State) -> Result<Term, &'static str> {
        if state.latch.is_some() {
            return Err("a cluster-wide latch is set");
        }
        let Some(term) = state.active else {
            return Err("this replica does not hold the coordination lease (standby)");
        };
        if term.renewed_at.elapsed() >= self.renew_deadline() {
            return Err("this replica's lease renewal is overdue (the renew deadline passed)");
        }
        Ok(term)
    }

    fn renew_deadline(&self) -> Duration {
        self.shared.lease_ttl.mul_f64(RENEW_DEADLINE_SHARE)
    }

    /// The role as `/status` names it ([`role_label`] names it for the metric).
    fn role(state: &State) -> ReplicaRole {
        if state.latch.is_some() {
            ReplicaRole::Latched
        } else if state.active.is_some() {
            ReplicaRole::Active
        } else if state.reachable {
            ReplicaRole::Standby
        } else {
            ReplicaRole::Unavailable
        }
    }

    /// Publishes the state to health, the metrics and the poll gate.
    fn publish(&self) {
        let (view, may_poll) = {
            let state = self.lock();
            let role = Self::role(&state);
            self.shared.metrics.coordination_role(role_label(role));
            self.shared.metrics.coordination_holder(state.holder.as_deref());
            self.shared.metrics.coordination_unsettled(state.unsettled.len());
            let view = CoordinationView {
                backend: "etcd",
                role,
                holder: state.holder.clone(),
                lease_ttl_seconds: self.shared.lease_ttl.as_secs_f64(),
                unsettled: state.unsettled.len(),
                step_downs: state.step_downs,
                holding_off_seconds: state
                    .hold_off_until
                    .map(|t| t.saturating_duration_since(Instant::now()).as_secs_f64())
                    .filter(|left| *left > 0.0),
                control_plane_reachable: state.control_plane_reachable,
                // Read live by `Health::coordination`.
                last_exchange_age_seconds: None,
                latch: state.latch.as_ref().map(ClusterRecord::view),
            };
            (view, role == ReplicaRole::Active)
        };
        self.shared.health.set_coordination(view);
        self.shared.may_poll.send_if_modified(|now| {
            let changed = *now != may_poll;
            *now = may_poll;
            changed
        });
    }
}

/// The `coordination_role{role}` label of a `/status` role: the same word (the table
/// test says so).
fn role_label(role: ReplicaRole) -> CoordinationRole {
    match role {
        ReplicaRole::Active => CoordinationRole::Active,
        ReplicaRole::Standby => CoordinationRole::Standby,
        ReplicaRole::Unavailable => CoordinationRole::Unavailable,
        ReplicaRole::Latched => CoordinationRole::Latched,
    }
}

/// Each etcd request's bound: the renewal interval, so that a hung request never holds a
/// renewal past the next one.
fn request_timeout(lease_ttl: Duration) -> Duration {
    lease_ttl / 3
}

impl ClusterRecord {
    fn view(&self) -> ClusterLatch {
        ClusterLatch {
            category: self.fatal.category.as_str(),
            request_id: self.fatal.request_id.clone(),
            channel: self.fatal.channel.clone(),
            latched_by: Some(self.latched_by.clone()),
            latched_at: Some(self.fatal.latched_at.clone()),
        }
    }
}

#[cfg(test)]
mod tests;
