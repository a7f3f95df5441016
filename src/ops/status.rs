//! What the operator listener reports: readiness with its one-line reason, and the
//! `/status` document. Pure reads of the fence, the health counters, the channels and the
//! metrics; nothing here changes any of them.
//!
//! API: the `/status` keys and values and the `/readyz` reason texts are what operators'
//! probes and scripts read; the types below keep each closed set closed.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::downstream::{ChannelStatus, Channels};
use crate::health::{Health, PollHealth, ReplicaRole};
use crate::strict::{Fatal, FatalCategory, Fence, FenceSnapshot};
use crate::telemetry::{LogRing, Metrics};

mod receipt;

pub(crate) use receipt::ChannelReport;

/// What the listener observes.
pub(crate) struct OpsState {
    pub fence: Fence,
    pub health: Arc<Health>,
    pub channels: Channels,
    pub metrics: Arc<Metrics>,
    /// The recent log events (`GET /events`).
    pub log_ring: Arc<LogRing>,
    /// A poll older than this makes the gateway not ready.
    pub poll_freshness: Duration,
    /// With coordination (`coordination.step_down_after`): an active whose polls have all
    /// failed this long is not ready, whatever its last success's age.
    pub polls_failing_bound: Option<Duration>,
    /// What the operator page needs beyond the status (`/ui`).
    pub page: super::ui::PageSettings,
    /// `/health`: the process's instance id (as the control plane sees it), its start,
    /// and whether the components show without `?details=true`.
    pub instance_id: String,
    pub started: std::time::SystemTime,
    pub health_details: bool,
}

/// Why the gateway is not ready: the first that holds, in this order. Its `Display` is
/// the one-line reason `/readyz` prints after `not ready: `.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum NotReady {
    #[error("fatal latch set ({})", .0.as_str())]
    Fatal(FatalCategory),
    /// Another replica set the cluster-wide latch (strict mode on etcd).
    #[error("fatal latch set on the cluster ({category}): this replica holds until `tunnelgate latch clear`")]
    ClusterLatched { category: &'static str },
    /// Another replica holds the coordination lease: this one never polls.
    #[error("standby (the active replica is {})", .holder.as_deref().unwrap_or("not known yet"))]
    Standby { holder: Option<String> },
    /// etcd has not answered, or no longer answers: never run uncoordinated.
    #[error("coordination {role}: etcd cannot be reached, so this replica neither polls nor dispatches")]
    Uncoordinated { role: ReplicaRole },
    #[error("draining: the gateway is stopping")]
    Draining,
    #[error("internal task {task} ended unexpectedly ({why})")]
    TaskFailed { task: &'static str, why: &'static str },
    #[error("no successful poll of the control plane yet")]
    NoPollYet,
    /// The last successful poll is older than the freshness bound.
    #[error("last successful poll {}s ago (last error: {})", .age.as_secs(), .last_error.unwrap_or("none"))]
    PollStale {
        age: Duration,
        last_error: Option<&'static str>,
    },
    /// Every poll has failed for at least `coordination.step_down_after` (with
    /// coordination): the active steps down to a standby that can reach the control plane.
    #[error("every poll has failed for {}s (last error: {})", .failing.as_secs(), .last_error.unwrap_or("none"))]
    PollsFailing {
        failing: Duration,
        last_error: Option<&'static str>,
    },
    /// With coordination: the active's own reach checks have had no answer for at least
    /// `coordination.step_down_after` (a link that drops packets silently leaves a long
    /// poll open and unanswered; the checks notice within their timeout).
    #[error("the control plane has not answered a reach check for {}s (last poll error: {})", .failing.as_secs(), .last_error.unwrap_or("none"))]
    Unreachable {
        failing: Duration,
        last_error: Option<&'static str>,
    },
    /// The first channel seen down.
    #[error("downstream channel {} ({}) is {}", .0.channel, .0.transport, .0.condition())]
    ChannelDown(Box<ChannelStatus>),
}

/// `/status` `mode` (API).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Default,
    Strict,
}

/// `/status` `state` (API).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GatewayState {
    /// No successful poll yet.
    Starting,
    Ready,
    /// Polled at least once, and not ready now.
    Degraded,
    Draining,
    Fatal,
    /// Strict mode across replicas: another replica holds the lease; this one never polls.
    Standby,
}

/// `/status` document (schema_version 1; keys are API).
#[derive(Serialize)]
pub struct StatusDocument {
    pub schema_version: u32,
    pub version: &'static str,
    pub mode: Mode,
    pub state: GatewayState,
    pub ready: bool,
    /// `/readyz`'s one-line reason when not ready (after `not ready: `); `null` when ready.
    pub not_ready_reason: Option<String>,
    pub fence: FenceSnapshot,
    pub fatal: Option<Fatal>,
    /// When this run honours a latch an earlier run left (`fatal.category =
    /// latched_previously`): the cause that latch file holds, so the original category,
    /// exit code and command are visible without a shell. `null` otherwise, and when the
    /// file cannot be read.
    pub persisted_cause: Option<Fatal>,
    pub control_plane: PollHealth,
    pub downstream: Vec<ChannelReport>,
    pub commands: Commands,
    /// Every outcome counted since start (the counters `/metrics` exports).
    pub outcomes: crate::telemetry::OutcomeCounts,
    /// The last delivery receipts handed to the journal, newest first, as its lines
    /// are (docs/operations.md, "Delivery receipts"); empty with `receipts.enabled = false`.
    pub recent_receipts: Vec<Box<serde_json::value::RawValue>>,
    /// Present when replicas coordinate (`coordination.backend = "etcd"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordination: Option<crate::health::CoordinationView>,
    /// Channel `harpoon`: whether it is routable and its targets (label, category and
    /// `scheme://host[:port]` only: never a path, query or credentials).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harpoon: Option<HarpoonReport>,
}

/// `/status` `harpoon`.
#[derive(Serialize)]
pub struct HarpoonReport {
    pub routable: bool,
    pub targets: Vec<crate::downstream::TargetView>,
}

#[derive(Serialize)]
pub struct Commands {
    pub in_flight: usize,
    pub queued: usize,
}

impl Mode {
    pub fn of(strict: bool) -> Self {
        if strict {
            Self::Strict
        } else {
            Self::Default
        }
    }

    /// The `/status` value (also the `mode` field of the startup log line).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Strict => "strict",
        }
    }
}

impl GatewayState {
    /// The first that holds: fatal, draining, starting (never polled), ready, degraded.
    pub fn of(fatal: bool, draining: bool, polled: bool, ready: bool) -> Self {
        if fatal {
            Self::Fatal
        } else if draining {
            Self::Draining
        } else if !polled {
            Self::Starting
        } else if ready {
            Self::Ready
        } else {
            Self::Degraded
        }
    }
}

impl OpsState {
    /// `Ok(())` when ready, else why not.
    pub(crate) fn readiness(&self) -> Result<(), NotReady> {
        if let Some(f) = self.fence.fatal() {
            return Err(NotReady::Fatal(f.category));
        }
        if let Some(view) = self.health.coordination() {
            coordination_readiness(view)?;
        }
        if self.health.is_draining() {
            return Err(NotReady::Draining);
        }
        if let Some((task, why)) = self.health.task_failure() {
            return Err(NotReady::TaskFailed { task, why });
        }
        match self.health.last_poll_age() {
            None => return Err(NotReady::NoPollYet),
            Some(age) if age > self.poll_freshness => {
                let last_error = self.health.poll_health().last_poll_error_kind;
                return Err(NotReady::PollStale { age, last_error });
            }
            Some(_) => {}
        }
        self.polls_failing()?;
        if let Some(down) = self.channels.status().into_iter().find(|c| !c.up) {
            return Err(NotReady::ChannelDown(Box::new(down)));
        }
        Ok(())
    }

    pub(crate) fn status(&self) -> StatusDocument {
        let fatal = self.fence.fatal();
        let readiness = self.readiness();
        let coordination = self.health.coordination();
        let cluster_latched = coordination.as_ref().is_some_and(|c| c.latch.is_some());
        let standby = coordination.as_ref().is_some_and(|c| c.role == ReplicaRole::Standby);
        let state = match GatewayState::of(
            fatal.is_some() || cluster_latched,
            self.health.is_draining(),
            self.health.last_poll_age().is_some(),
            readiness.is_ok(),
        ) {
            GatewayState::Starting | GatewayState::Degraded if standby => GatewayState::Standby,
            state => state,
        };
        StatusDocument {
            schema_version: 1,
            version: env!("CARGO_PKG_VERSION"),
            mode: Mode::of(self.fence.is_strict()),
            state,
            ready: readiness.is_ok(),
            not_ready_reason: readiness.err().map(|r| r.to_string()),
            fence: self.fence.snapshot(),
            persisted_cause: self.persisted_cause(fatal.as_ref()),
            fatal,
            control_plane: self.health.poll_health(),
            downstream: self.channel_reports(),
            harpoon: self.channels.harpoon().map(|h| HarpoonReport {
                routable: h.is_routable(),
                targets: h.targets(),
            }),
            commands: Commands {
                in_flight: self.health.in_flight(),
                queued: self.health.queued(),
            },
            outcomes: self.metrics.outcome_counts(),
            recent_receipts: self.health.recent_receipts(),
            coordination,
        }
    }
}

impl OpsState {
    /// `Err` once the control plane has not been reached for
    /// [`OpsState::polls_failing_bound`]: every poll failed, or the reach checks did.
    fn polls_failing(&self) -> Result<(), NotReady> {
        let (Some(bound), Some(since)) = (self.polls_failing_bound, self.health.unreachable_since()) else {
            return Ok(());
        };
        let failing = since.elapsed();
        if failing < bound {
            return Ok(());
        }
        let last_error = self.health.poll_health().last_poll_error_kind;
        if let Some(failing) = self
            .health
            .polls_failing_since()
            .map(|p| p.elapsed())
            .filter(|f| *f >= bound)
        {
            Err(NotReady::PollsFailing { failing, last_error })
        } else {
            Err(NotReady::Unreachable { failing, last_error })
        }
    }

    /// The latch file's cause, read only while the run honours an earlier run's latch.
    fn persisted_cause(&self, fatal: Option<&Fatal>) -> Option<Fatal> {
        if fatal?.category != FatalCategory::LatchedPreviously {
            return None;
        }
        crate::strict::latch_file::read(&self.page.latch_file).ok().flatten()
    }
}

/// Only the active replica, with no cluster-wide latch, may be ready.
fn coordination_readiness(view: crate::health::CoordinationView) -> Result<(), NotReady> {
    if let Some(latch) = view.latch {
        return Err(NotReady::ClusterLatched {
            category: latch.category,
        });
    }
    match view.role {
        ReplicaRole::Active => Ok(()),
        ReplicaRole::Standby => Err(NotReady::Standby { holder: view.holder }),
        role @ (ReplicaRole::Unavailable | ReplicaRole::Latched) => Err(NotReady::Uncoordinated { role }),
    }
}

#[cfg(test)]
mod tests;
