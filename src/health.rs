//! Live counters, poll health and the health receipts' wall-clock times (`times`) shared
//! with `/status` and `/readyz`. Writers are the poller and command tasks (`dispatch`)
//! and the stop order (`app`); readers (`ops`) only observe.
//!
//! Below both `dispatch` and `ops`: imports no other module of the crate.

mod times;

pub(crate) use times::{unix_millis_now, ChannelReceipt, UnixMillis};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Poll health and command counts.
#[derive(Default)]
pub(crate) struct Health {
    last_successful_poll: Mutex<Option<Instant>>,
    /// When the polls began failing: the first failure since the last success (or since
    /// start); `None` while the last poll succeeded.
    polls_failing_since: Mutex<Option<Instant>>,
    /// With coordination, the active's own reach check (`coord::reach`): when a check
    /// first failed since the last answered check or poll; `None` while reachable.
    reach_failing_since: Mutex<Option<Instant>>,
    /// The last control-plane exchange that was answered: a poll, an acknowledged
    /// delivery or a reach check. A quiet long poll is no answer: the active checks its
    /// reach when this is old, whatever `poll_timeout` is.
    last_exchange: Mutex<Option<Instant>>,
    consecutive_poll_errors: AtomicU64,
    last_poll_error_kind: Mutex<Option<&'static str>>,
    draining: AtomicBool,
    /// Commands received and not yet finished (queued + in flight).
    alive: AtomicUsize,
    /// Commands admitted through the fence and not yet finished.
    in_flight: AtomicUsize,
    /// The first background task that ended unexpectedly, and why (never cleared).
    task_failure: Mutex<Option<(&'static str, &'static str)>>,
    /// Wall-clock times of the last command and success per channel, the last
    /// successful poll and the last acknowledged delivery (`times`).
    times: times::Times,
    /// The replica's place among its peers (`coord` writes it); `None` without coordination.
    coordination: Mutex<Option<CoordinationView>>,
    /// The last [`RECENT_RECEIPTS`] delivery receipts handed to the journal, newest last.
    recent_receipts: Mutex<VecDeque<Box<serde_json::value::RawValue>>>,
}

/// Delivery receipts kept in memory for `/status` `recent_receipts` (and the page).
pub(crate) const RECENT_RECEIPTS: usize = 10;

/// `/status` `coordination`: this replica's role, as the coordination layer last saw it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CoordinationView {
    pub backend: &'static str,
    pub role: ReplicaRole,
    /// The instance id of the replica that holds the lease, when one does.
    pub holder: Option<String>,
    pub lease_ttl_seconds: f64,
    /// Intents of acknowledged commands whose settle etcd has not confirmed yet (retried
    /// while this replica's term lasts).
    pub unsettled: usize,
    /// Times this replica gave up the lease because its polls all failed while a standby
    /// reported the control plane reachable.
    pub step_downs: u64,
    /// While a replica that stepped down holds off campaigning: seconds left.
    pub holding_off_seconds: Option<f64>,
    /// This replica's last look at the control plane: a standby's check, the active's
    /// polls and its own reach checks. `null` before the first.
    pub control_plane_reachable: Option<bool>,
    /// Seconds since the control plane last answered this replica (a poll, an
    /// acknowledged delivery, a reach check); `null` before it did.
    pub last_exchange_age_seconds: Option<f64>,
    /// The cluster-wide latch, when one is set.
    pub latch: Option<ClusterLatch>,
}

/// `/status` `coordination.role` (API): this replica's place among the replicas of a
/// strict tunnel on etcd.
///
/// The same four values as the `coordination_role{role}` metric label
/// (`telemetry::CoordinationRole`). `health` imports nothing of the crate, so the set is
/// declared here for `/status` and there for the metric; `coord`, which writes both, maps
/// one to the other in one exhaustive `match`, and its table test keeps the words equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaRole {
    /// Holds the lease: polls and admits.
    Active,
    /// Another replica holds the lease: never polls.
    Standby,
    /// etcd has not answered yet, or cannot be reached: neither polls nor admits.
    Unavailable,
    /// A cluster-wide latch is set: holds until it is cleared.
    Latched,
}

/// The cluster-wide latch record as `/status` shows it: no payload, only the command's
/// identity and who latched.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ClusterLatch {
    pub category: &'static str,
    pub request_id: Option<String>,
    pub channel: Option<String>,
    pub latched_by: Option<String>,
    pub latched_at: Option<String>,
}

/// `/status` `control_plane` object.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PollHealth {
    pub last_successful_poll_age_seconds: Option<f64>,
    pub consecutive_poll_errors: u64,
    pub last_poll_error_kind: Option<&'static str>,
    /// RFC 3339; `null` until a poll succeeded.
    pub last_successful_poll_at: Option<String>,
    /// RFC 3339: the last delivery the control plane acknowledged (`acked`, terminal or
    /// notification); `null` until one.
    pub last_acked_at: Option<String>,
}

impl ReplicaRole {
    /// Every role, in declaration order.
    pub const ALL: [Self; 4] = [Self::Active, Self::Standby, Self::Unavailable, Self::Latched];

    /// The word `/status` and the `/readyz` reason show (API: never rename one).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Standby => "standby",
            Self::Unavailable => "unavailable",
            Self::Latched => "latched",
        }
    }
}

/// The word of [`ReplicaRole::as_str`].
impl std::fmt::Display for ReplicaRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Serialized as the word of [`ReplicaRole::as_str`], so `/status` and the `/readyz`
/// reason cannot disagree.
impl serde::Serialize for ReplicaRole {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl Health {
    /// Replaces this replica's coordination view (`coord` only).
    pub(crate) fn set_coordination(&self, view: CoordinationView) {
        *self
            .coordination
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(view);
    }

    /// This replica's coordination view, with the age of the last answered exchange as
    /// of now; `None` without coordination.
    pub(crate) fn coordination(&self) -> Option<CoordinationView> {
        let mut view = self
            .coordination
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()?;
        view.last_exchange_age_seconds = self.last_exchange_age().map(|d| d.as_secs_f64());
        Some(view)
    }

    pub(crate) fn poll_succeeded(&self) {
        *self.last_successful_poll.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        *self.polls_failing_since.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.reach_succeeded();
        self.consecutive_poll_errors.store(0, Ordering::Relaxed);
        self.times
            .last_successful_poll
            .store(unix_millis_now(), Ordering::Relaxed);
    }

    pub(crate) fn poll_failed(&self, kind: &'static str) {
        self.consecutive_poll_errors.fetch_add(1, Ordering::Relaxed);
        *self.last_poll_error_kind.lock().unwrap_or_else(|p| p.into_inner()) = Some(kind);
        self.polls_failing_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(Instant::now);
    }

    /// When every poll since then has failed (the first failure after the last success);
    /// `None` while the last poll succeeded, and before any poll ended.
    pub(crate) fn polls_failing_since(&self) -> Option<Instant> {
        *self.polls_failing_since.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The control plane answered (a poll, an acknowledged delivery, a reach check): a
    /// failed reach check is forgotten.
    pub(crate) fn reach_succeeded(&self) {
        *self.last_exchange.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        *self.reach_failing_since.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// A reach check begun `at` got no answer (refused, an error, or none in time).
    pub(crate) fn reach_failed(&self, at: Instant) {
        self.reach_failing_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(at);
    }

    /// How long ago the control plane last answered this process; `None` before it did.
    pub(crate) fn last_exchange_age(&self) -> Option<Duration> {
        self.last_exchange
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|t| t.elapsed())
    }

    /// Since when the control plane has not been reached: the earlier of the first poll
    /// failure and the first reach-check failure since the last answer; `None` while
    /// neither fails.
    pub(crate) fn unreachable_since(&self) -> Option<Instant> {
        let reach = *self.reach_failing_since.lock().unwrap_or_else(|p| p.into_inner());
        match (self.polls_failing_since(), reach) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn poll_health(&self) -> PollHealth {
        PollHealth {
            last_successful_poll_age_seconds: self.last_poll_age().map(|d| d.as_secs_f64()),
            consecutive_poll_errors: self.consecutive_poll_errors.load(Ordering::Relaxed),
            last_poll_error_kind: *self.last_poll_error_kind.lock().unwrap_or_else(|p| p.into_inner()),
            last_successful_poll_at: self.last_successful_poll_at(),
            last_acked_at: self.last_acked_at(),
        }
    }

    pub(crate) fn last_poll_age(&self) -> Option<Duration> {
        self.last_successful_poll
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|t| t.elapsed())
    }

    /// A supervised task ended unexpectedly: the gateway is not ready from now on.
    pub(crate) fn task_failed(&self, task: &'static str, why: &'static str) {
        self.task_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert((task, why));
    }

    /// The first task failure, as `(task, reason)`.
    pub(crate) fn task_failure(&self) -> Option<(&'static str, &'static str)> {
        *self.task_failure.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub(crate) fn alive(&self) -> usize {
        self.alive.load(Ordering::SeqCst)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    pub(crate) fn queued(&self) -> usize {
        self.alive().saturating_sub(self.in_flight())
    }

    /// A delivery receipt (its journal line, JSON) was handed to the journal: kept among
    /// the last [`RECENT_RECEIPTS`], the oldest forgotten. A line that is not JSON is not kept.
    pub(crate) fn receipt_recorded(&self, line: String) {
        let Ok(line) = serde_json::value::RawValue::from_string(line) else {
            return;
        };
        let mut recent = self.recent_receipts.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() == RECENT_RECEIPTS {
            recent.pop_front();
        }
        recent.push_back(line);
    }

    /// The last delivery receipts, newest first.
    pub(crate) fn recent_receipts(&self) -> Vec<Box<serde_json::value::RawValue>> {
        let recent = self.recent_receipts.lock().unwrap_or_else(|p| p.into_inner());
        recent.iter().rev().cloned().collect()
    }

    pub(crate) fn command_started(&self) {
        self.alive.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn command_finished(&self) {
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }

    pub(crate) fn admitted(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn released(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_receipts_keep_the_last_ten_newest_first_and_skip_what_is_not_json() {
        let health = Health::default();
        for i in 0..(RECENT_RECEIPTS + 3) {
            health.receipt_recorded(format!("{{\"request_id\":\"r{i}\"}}"));
        }
        health.receipt_recorded("not json".to_owned());
        let kept: Vec<String> = health.recent_receipts().iter().map(|r| r.get().to_owned()).collect();
        assert_eq!(kept.len(), RECENT_RECEIPTS);
        assert_eq!(kept[0], "{\"request_id\":\"r12\"}");
        assert_eq!(kept[RECENT_RECEIPTS - 1], "{\"request_id\":\"r3\"}");
    }

    #[test]
    fn a_replica_role_serializes_as_the_word_its_display_shows() {
        let words: Vec<String> = ReplicaRole::ALL
            .iter()
            .map(|r| serde_json::to_value(r).unwrap().as_str().unwrap().to_owned())
            .collect();
        assert_eq!(words, ["active", "standby", "unavailable", "latched"]);
        for role in ReplicaRole::ALL {
            assert_eq!(role.to_string(), role.as_str());
        }
    }
}
